"""``elastimem keys``: the hashed keys file of ``serve`` (add, list, revoke).

A new token is printed once, on stdout, and never stored: the file keeps its scrypt hash
(``server.keys``). ``list`` shows labels, users, scopes and creation times, never a token or
a hash. Every change rewrites the file atomically with mode 0600; a running ``serve`` picks
it up on SIGHUP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from . import cli_tables as tables
from .errors import ConfigError

KEYS_OPTION = click.option(
    "--keys", "keys_path", required=True, metavar="KEYS.json", type=click.Path(dir_okay=False),
    help="The keys file of serve (created when missing).",
)  # fmt: skip


@click.group(name="keys")
def keys_group() -> None:
    """Manage the bearer keys of `elastimem serve`: only hashes are stored.

    Scopes: read (recall, context, facts, sessions, timeline, export, stats), write (also
    record turns, change facts, lessons and sessions), admin (also erase). After a change,
    send SIGHUP to a running serve (kill -HUP PID) to apply it.

    \b
    Example:
      elastimem keys add alice --keys keys.json --scope write --label laptop
      elastimem keys list --keys keys.json
      elastimem keys revoke laptop --keys keys.json
    """


@keys_group.command(name="add")
@click.argument("user")
@KEYS_OPTION
@click.option("--scope", type=click.Choice(["read", "write", "admin"]), default="write",
              show_default=True, help="What the key may do.")  # fmt: skip
@click.option("--label", metavar="TEXT", help="A name to list and revoke it by "
              "(default: USER-<key id>).")  # fmt: skip
def add(user: str, keys_path: str, scope: str, label: str | None) -> None:
    """Make a random key for USER and print it once (it cannot be shown again).

    \b
    Example:
      elastimem keys add alice --keys keys.json --scope read --label dashboard
    """
    from .server.keys import editing, new_key

    try:
        with editing(Path(keys_path)) as entries:
            token, entry = new_key(user, scope, label, entries)
            entries.append(entry)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(token)
    click.echo(
        f"elastimem: added key {entry.label!r} for {entry.user} ({entry.scope}); the token "
        "above is shown only this once. Send SIGHUP to a running serve to apply it.",
        err=True,
    )


@keys_group.command(name="list")
@KEYS_OPTION
@click.pass_obj
def list_keys(state: Any, keys_path: str) -> None:
    """List the keys: label, user, scope, created (never a token or a hash).

    \b
    Example:
      elastimem --format table keys list --keys keys.json
    """
    from .server.keys import read_entries

    try:
        shown = [{"label": e.label, "user": e.user, "scope": e.scope, "created_at": e.created_at}
                 for e in read_entries(Path(keys_path))]  # fmt: skip
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if state.output == "table":  # as the CLI's emit (not imported: cli imports this module)
        click.echo("\n".join(tables.table(shown, tables.terminal_width())) or "(none)")
    else:
        click.echo(json.dumps(shown, ensure_ascii=False, indent=2))


@keys_group.command(name="revoke")
@click.argument("label")
@KEYS_OPTION
def revoke(label: str, keys_path: str) -> None:
    """Remove the key labelled LABEL (applied by a running serve on SIGHUP).

    \b
    Example:
      elastimem keys revoke laptop --keys keys.json && kill -HUP "$(pgrep -f 'elastimem serve')"
    """
    from .server.keys import editing

    path = Path(keys_path)
    if not path.exists():
        raise click.ClickException(f"there is no keys file {keys_path}")
    try:
        with editing(path) as entries:
            kept = [e for e in entries if e.label != label]
            if len(kept) == len(entries):
                raise ConfigError(f"no key is labelled {label!r}; see elastimem keys list")
            entries[:] = kept
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"elastimem: revoked {label!r}; send SIGHUP to a running serve to apply it.",
               err=True)  # fmt: skip
