"""``elastimem backup``, ``restore`` and ``verify``: the operator's commands (``ops.backup``).

Registered on the main group by one line of ``cli``; the group's state (``--db``,
``--user``) is handed in, so this module never imports the CLI back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import click

from .errors import ElastimemError


def _key_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--key-env",
        metavar="NAME",
        help="Environment variable holding the store's encryption key (encrypted stores).",
    )(fn)


def _key(name: str | None) -> str | None:
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise click.UsageError(f"--key-env {name}: that environment variable is not set")
    return value


def ops_commands(pass_state: Callable[..., Any]) -> dict[str, click.Command]:
    """The commands, built from the CLI's state decorator."""

    @click.command()
    @click.argument("dest", type=click.Path(dir_okay=False))
    @_key_option
    @pass_state
    def backup(state: Any, dest: str, key_env: str | None) -> None:
        """Write a consistent copy of the store to DEST while its writers keep writing.

        An SQLite store is copied with SQLite's online backup (DEST is a store file, mode
        0600); a user on a PostgreSQL server is written as a lossless export file. DEST must
        not exist. Prints the file, its format, size and the seconds it took.

        \b
        Example:
          elastimem --db memory.db backup backups/memory-$(date +%F).db
          elastimem --db postgresql://app@db/memory --user alice backup alice.jsonl
        """
        from .ops.backup import backup as run

        source = state.require_store()
        try:
            result = run(source, dest, user_id=state.user_id(), key=_key(key_env))
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(json.dumps(result.as_dict(), indent=2))

    @click.command()
    @click.argument("src", type=click.Path(dir_okay=False))
    @click.option("--force", is_flag=True, help="Overwrite a store file that holds memories.")
    @_key_option
    @pass_state
    def restore(state: Any, src: str, force: bool, key_env: str | None) -> None:
        """Put the backup SRC (a store file or an export) into the store named by --db.

        The target must hold no memories (a new file, or a user with none on a server);
        --force replaces what a store file holds. Prints what the store holds after.

        \b
        Example:
          elastimem --db restored.db restore backups/memory-2026-12-01.db
          elastimem --db postgresql://app@db/memory --user alice restore alice.jsonl
        """
        from .ops.backup import restore as run

        try:
            summary = run(src, state.db_path(), user_id=state.user_id(), force=force,
                          key=_key(key_env))  # fmt: skip
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(json.dumps(summary, indent=2))

    @click.command()
    @click.argument("target", required=False, type=click.Path(dir_okay=False))
    @_key_option
    @pass_state
    def verify(state: Any, target: str | None, key_env: str | None) -> None:
        """Check a store or a backup: integrity, schema version, counts, and that every
        vector and keyword posting matches its chunk. Exit 1 naming what is wrong.

        TARGET is a store file or a backup (store file or export); without it, the store
        named by --db (a file, or a user on a PostgreSQL server).

        \b
        Example:
          elastimem verify backups/memory-2026-12-01.db
          elastimem --db memory.db verify
        """
        from .ops.backup import verify as run

        where = target if target is not None else state.require_store()
        try:
            report = run(where, user_id=state.user_id(), key=_key(key_env))
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(json.dumps({"path": report.path, "ok": report.ok,
                               "schema_version": report.schema_version,
                               "counts": report.counts, "problems": report.problems},
                              indent=2))  # fmt: skip
        if not report.ok:
            raise click.ClickException(
                f"{report.path} failed verification: " + "; ".join(report.problems)
            )

    return {command.name or "": command for command in (backup, restore, verify)}
