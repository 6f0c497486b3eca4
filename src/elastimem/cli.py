"""The ``elastimem`` command line: a thin layer over the Python API (SPEC §8.1).

Data commands print JSON by default and, with ``--format table``, lines and columns fitted
to the terminal. The store comes from ``--db``, else ``ELASTIMEM_DB``, else ``memory.db`` in
the data folder (``cli_paths``); ``elastimem path`` prints which. Only commands that store something
(``remember``, ``import``, ``demo``, ``serve-mcp``) create a missing store; the others exit 1
and create nothing. Exit codes: 0 success, 1 a runtime error (its message on stderr), a fact
the guards refused, or ``forget``/``erase`` with nothing to act on, 2 a usage error. Long
work (``import``, ``reindex``) shows a progress bar on stderr; Ctrl-C during it rolls back
or keeps only whole batches, so the store stays consistent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import click

from . import cli_paths, cli_values
from . import cli_tables as tables
from .arguments import check_user_id
from .cli_paths import DB_ENV_VAR as DB_ENV_VAR
from .cli_paths import USER_ENV_VAR
from .errors import ConfigError, ElastimemError, StoreError
from .storage.addresses import is_postgres_url
from .storage.sqlite import files

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEMO_WAIT_SECONDS = 120.0
# The label of every vector the built-in embedder made starts with this.
BUILTIN_LABEL_PREFIX = "elastimem:"
ALL = 2**63 - 1  # sessions(n=ALL): every session


@dataclasses.dataclass
class CliState:
    db: str | None
    output: str | None  # None: not given (JSON, except for `context`)
    tier: str | None
    verbose: bool
    user: str | None = None  # --user / ELASTIMEM_USER: whose memory (required on PostgreSQL)

    def db_path(self) -> str:
        """The store's address: a file, ``~`` expanded and absolute (what ``path`` shows is
        what opens), or a ``postgresql://`` address as given (shown only by ``shown``)."""
        return cli_paths.store_address(self.db, self.user_id)

    def user_id(self) -> str | None:
        """The checked ``--user`` (else ``ELASTIMEM_USER``), or None when neither is given."""
        raw = self.user if self.user is not None else os.environ.get(USER_ENV_VAR) or None
        if raw is None:
            return None
        try:
            return check_user_id(raw)
        except ConfigError as exc:
            raise click.UsageError(f"--user: {exc}") from None

    def shown(self) -> str:
        """The store as messages name it: the file, or the server address without its
        password and the user."""
        where = self.db_path()
        if not is_postgres_url(where):
            return where
        from .storage.postgres.database import redact  # psycopg itself only when called

        try:
            shown = redact(where)
        except ImportError:  # no driver: show no part of the address rather than the password
            shown = "postgresql://…"
        return f"{shown} (user {self.user_id()})"

    def require_store(self) -> str:
        """The store file, which must exist: commands that only read (or have nothing to act
        on in a new store) never create one, so a mistyped ``--db`` is an error, not ``{}``.
        On a server the open itself checks (``create=False``)."""
        path = self.db_path()
        if path != ":memory:" and not is_postgres_url(path) and not os.path.exists(path):
            raise click.ClickException(
                f"there is no elastimem store at {path} (nothing was created); check the path, "
                "or create the store with a command that stores something, e.g. "
                f"elastimem --db {shlex.quote(path)} remember KEY VALUE"
            )
        return path

    @contextmanager
    def store(
        self, *, create: bool = False, builtin_embedder: bool = False, **kw: Any
    ) -> Iterator[Any]:
        """An open store for one command; ``ElastimemError`` becomes exit 1 with its message.

        Only commands that store something pass ``create``; for the others a missing store
        is an error and nothing is created (no folder, no file, no user on a server).

        The built-in embedder is wired in only for commands that search or embed: a one-shot
        command would otherwise start loading the model for the worker's embedding backfill
        and then wait for it when closing (about ten seconds on a laptop).
        """
        from .store import Elastimem

        path = self.db_path() if create else self.require_store()
        overrides: dict[str, Any] = {"disable_builtin_embedder": not builtin_embedder, **kw}
        if self.tier:
            overrides["tier_override"] = self.tier
        try:
            mem = Elastimem(path, create=create, user_id=self.user_id(), **overrides)
        except StoreError as exc:
            if is_postgres_url(path) and "(create=False)" in str(exc):  # the API's words
                message = cli_paths.no_store(self.shown(), self.user_id())
                raise click.ClickException(message) from None
            raise click.ClickException(str(exc)) from exc
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        try:
            yield mem
        except ConfigError as exc:  # a bad option value: a usage error (exit 2, §8.1)
            raise click.UsageError(str(exc)) from exc
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            mem.close()

    @contextmanager
    def search_store(self) -> Iterator[Any]:
        """A store for ``recall``/``explain``: with the built-in embedder, warmed up, when
        the store holds chunk or fact vectors it made or none at all yet (§8.1; what waits
        for a vector is embedded for the query); keyword search beside another model's."""
        with self.store() as mem:
            builtin = mem.has_vectors(BUILTIN_LABEL_PREFIX) or not mem.has_vectors()
        if not builtin:
            with self.store() as mem:
                yield mem
            return
        with self.store(builtin_embedder=True) as mem:
            mem.warm_up()
            yield mem


pass_state = click.make_pass_decorator(CliState)


# -- output ------------------------------------------------------------------------------------


def emit(
    state: CliState,
    data: Any,
    *,
    table: Callable[[Any, int], list[str]] | None = None,
) -> None:
    """Print ``data`` as JSON, or with ``--format table`` by ``table`` (or the generic one)."""
    data = tables.jsonable(data)
    if state.output == "table":
        lines = (table or tables.table)(data, tables.terminal_width())
        click.echo("\n".join(lines) if lines else "(none)")
    else:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))


# -- the group ---------------------------------------------------------------------------------


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("--db", "db_path", metavar="PATH", help="Store file, or a postgresql:// "
              "address with --user (default: $ELASTIMEM_DB, else memory.db in the user's "
              "data folder). Only commands that store something create it.")  # fmt: skip
@click.option("--user", metavar="ID", help="Whose memory: required with a postgresql:// "
              "address; on a file, recorded as its owner and checked (default: "
              "$ELASTIMEM_USER).")  # fmt: skip
@click.option("--format", "output", type=click.Choice(["json", "table"]),
              help="Output format for data commands: json (the default) or table, for "
              "people; `context` prints its text unless json is asked for.")  # fmt: skip
@click.option("--tier", type=click.Choice(["lite", "standard", "full"]),
              help="Pin the resource tier.")  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Send logs to stderr.")
@click.version_option(package_name="elastimem", message="elastimem %(version)s")
@click.pass_context
def main(ctx: click.Context, db_path: str | None, user: str | None, output: str | None,
         tier: str | None, verbose: bool) -> None:  # fmt: skip
    """Long-term memory for local-first LLM agents, kept in one SQLite file (or a user's
    rows on a PostgreSQL server).

    \b
    Example:
      elastimem demo
      elastimem --db notes.db remember favorite_color teal
      elastimem --db notes.db recall "what color do I like?"
      elastimem --db postgresql://app@db:5432/memory --user alice facts
    """
    ctx.call_on_close(tables.log_to_stderr(verbose))
    ctx.obj = CliState(db_path, output, tier, verbose, user)


@main.command()
@pass_state
def path(state: CliState) -> None:
    """Print the store file in use (on a server: its address, without the password, and the
    user).

    \b
    Example:
      ELASTIMEM_DB=~/agent.db elastimem path
    """
    shown = state.shown()
    click.echo(shown)
    if cli_paths.is_legacy(shown):  # found at the old default: kept, never replaced
        click.echo(f"note: the default of earlier versions (new: {cli_paths.data_dir()})", err=True)


@main.command()
@pass_state
def stats(state: CliState) -> None:
    """Counts, sizes, tier and background work of the store.

    \b
    Example:
      elastimem --format table stats
    """
    with state.store() as mem:
        emit(state, mem.stats())


@main.command()
@click.argument("query")
@click.option("-k", "k", default=5, show_default=True, type=click.IntRange(min=1),
              help="How many hits.")  # fmt: skip
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["chunk", "fact"]),
              help="Only this kind of hit (repeatable).")  # fmt: skip
@click.option("--since", help="Only hits at or after this ISO date/time.")
@click.option("--until", help="Only hits before this ISO date/time.")
@click.option("--min-score", type=float, help="Leave out hits scoring below this (no cut).")
@pass_state
def recall(state: CliState, query: str, k: int, kinds: tuple[str, ...], since: str | None,
           until: str | None, min_score: float | None) -> None:  # fmt: skip
    """Search memory by keyword and meaning.

    \b
    Example:
      elastimem recall "what is my dog called?" -k 3 --kind chunk
    """
    cli_values.require_text(query, "QUERY")
    with state.search_store() as mem:
        hits = mem.recall(query, k, kinds=list(kinds) or None, since=since, until=until,
                          min_score=min_score)  # fmt: skip
        emit(state, hits, table=tables.hits_table)


@main.command()
@click.argument("query")
@click.option("-k", "k", default=5, show_default=True, type=click.IntRange(min=1),
              help="How many hits.")  # fmt: skip
@pass_state
def explain(state: CliState, query: str, k: int) -> None:
    """Show how recall ranked its hits, leg by leg.

    \b
    Example:
      elastimem explain "hiking with the dog"
    """
    cli_values.require_text(query, "QUERY")
    with state.search_store() as mem:
        emit(state, mem.explain(query, k), table=tables.explain_table)


@main.command()
@pass_state
def facts(state: CliState) -> None:
    """The facts currently known about the user.

    \b
    Example:
      elastimem --format table facts
    """
    with state.store() as mem:
        emit(state, mem.facts())


@main.command()
@click.argument("key")
@pass_state
def history(state: CliState, key: str) -> None:
    """Every version a fact key ever had, oldest first.

    \b
    Example:
      elastimem history location
    """
    with state.store() as mem:
        emit(state, mem.fact_history(key), table=tables.versions_table)


@main.command()
@click.argument("question")
@pass_state
def timeline(state: CliState, question: str) -> None:
    """How the fact a question is about changed over time, oldest version first.

    Prints the fact key the question resolved to (or null), how it was found, and every
    version of that fact.

    \b
    Example:
      elastimem timeline "where did I live before?"
    """
    with state.store() as mem:
        emit(state, mem.timeline(question), table=tables.timeline_table)


@main.command()
@click.option("-n", "n", type=click.IntRange(min=1), metavar="N",
              help="How many lessons (default: as many as a prompt gets).")  # fmt: skip
@pass_state
def lessons(state: CliState, n: int | None) -> None:
    """The lessons from past mistakes that the next prompt would get, most useful first.

    \b
    Example:
      elastimem lessons -n 5
    """
    with state.store() as mem:
        emit(state, mem.lessons(n))


@main.command()
@click.argument("text")
@pass_state
def context(state: CliState, text: str) -> None:
    """Print the memory context the model would get before answering TEXT.

    The text of build_context(TEXT).render(); with --format json, an object with the
    rendered text, its sections, their token counts and keep_last_n_turns.

    \b
    Example:
      elastimem context "any ideas for a weekend trip?"
    """
    with state.search_store() as mem:
        plan = mem.build_context(text)
    rendered = plan.render()
    if state.output == "json":
        emit(state, {"rendered": rendered, "sections": plan.sections, "tokens": plan.tokens,
                     "keep_last_n_turns": plan.keep_last_n_turns})  # fmt: skip
    else:
        click.echo(rendered or "(no memory to add for this text)")


@main.command()
@click.argument("key")
@click.argument("value")
@click.option("--source", type=click.Choice(["explicit", "import"]), default="explicit",
              show_default=True, help="Where the fact comes from.")  # fmt: skip
@pass_state
def remember(state: CliState, key: str, value: str, source: str) -> None:
    """Store a fact (a new version if the key already has another value).

    Prints the key as stored (keys are normalised: "Favorite Color" is favorite_color; a
    notice on stderr says what else was dropped). VALUE "-" reads stdin. Creates the store
    if it does not exist. A fact the guards refuse exits 1 with the reason on stderr.

    \b
    Example:
      elastimem remember favorite_color teal
      cat notes.txt | elastimem remember project_notes -
    """
    from .text import normalize_key, sanitize

    value = cli_values.read_value(value)
    with state.store(create=True) as mem:
        changed, reason = mem.remember(key, value, source)
    # The same normalisation remember() applied: the key facts() and history will show.
    emit(state, {"changed": changed, "reason": reason, "key": normalize_key(sanitize(key))})
    if reason.startswith("rejected: "):
        why = cli_values.refusal(reason.removeprefix("rejected: "), value)
        click.echo(f"Error: the fact was not stored: {why}", err=True)
        sys.exit(1)
    notice = cli_values.key_notice(key)
    if notice is not None:
        click.echo(notice, err=True)


@main.command()
@click.argument("key")
@pass_state
def forget(state: CliState, key: str) -> None:
    """Stop using a fact (its history is kept); exit 1 if there was nothing to forget.

    \b
    Example:
      elastimem forget favorite_color
    """
    with state.store() as mem:
        forgotten = mem.forget(key)
    emit(state, {"forgotten": forgotten})
    if not forgotten:
        click.echo(f"Error: nothing to forget: no current fact has the key {key!r}", err=True)
        sys.exit(1)


@main.command()
@click.option("--key", help="Erase every version of this fact key.")
@click.option("--session", "session_id", type=int, metavar="ID",
              help="Erase this session (see `elastimem sessions`).")  # fmt: skip
@click.option(
    "--include-facts",
    is_flag=True,
    help="Also erase the full history of facts learned in the session (with --session).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def erase(state: CliState, key: str | None, session_id: int | None, include_facts: bool,
          yes: bool) -> None:  # fmt: skip
    """Permanently erase a fact key or a session, down to the bytes of the file.

    Unlike `forget`, nothing is kept: every version, the derived search and vector entries
    and the graph provenance go, and the file is rewritten so the text cannot be recovered
    from it. Asks for confirmation unless --yes is given (required without a terminal).
    Exits 1 when there was nothing to erase.

    \b
    Example:
      elastimem erase --key favorite_color --yes
      elastimem erase --session 12 --include-facts
    """
    if (key is None) == (session_id is None):
        raise click.UsageError("pass exactly one of --key KEY or --session ID")
    if include_facts and session_id is None:
        raise click.UsageError("--include-facts only applies to --session")
    target = f"fact key {key!r}" if key is not None else f"session {session_id}"
    if include_facts:
        target += " and the facts learned in it"
    if not yes:
        if not _stdin_is_tty():
            raise click.UsageError(
                f"erase asks before deleting {target}; pass --yes to confirm without a terminal"
            )
        state.require_store()
        click.confirm(f"Permanently erase {target} from {state.shown()}?", abort=True)
    with state.store() as mem:
        counts = mem.erase(key=key, session_id=session_id, include_facts=include_facts)
    emit(state, counts)
    if not any(counts.values()):
        what = f"no fact has the key {key!r}" if key is not None else f"no session {session_id}"
        click.echo(f"Error: nothing to erase: {what}", err=True)
        sys.exit(1)


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@main.command()
@click.option("-n", "n", default=20, show_default=True, type=click.IntRange(min=1),
              help="How many sessions.")  # fmt: skip
@pass_state
def sessions(state: CliState, n: int) -> None:
    """The most recent conversations, newest first.

    \b
    Example:
      elastimem --format table sessions -n 5
    """
    with state.store() as mem:
        emit(state, mem.sessions(n), table=tables.sessions_table)


@main.command()
@click.argument("file", metavar="FILE")
@click.option("--plain", is_flag=True, help="Write an encrypted store's export unencrypted.")
@pass_state
def export(state: CliState, file: str, plain: bool) -> None:
    """Write the whole store as JSON Lines to FILE (`-` for stdout).

    The file holds every session, message, chunk (with its vector), fact version, lesson,
    quarantine entry, graph row and job; `elastimem import` restores it into an empty store.

    \b
    Example:
      elastimem export backup.jsonl
      elastimem --db old.db export - | elastimem --db new.db import -
    """
    if file != "-":
        _refuse_the_store_as_output(state, file)
    with state.store() as mem:
        if file == "-":
            stream = getattr(sys.stdout, "buffer", sys.stdout)
            try:
                counts = mem.export(stream, encrypt=False if plain else None)
                stream.flush()
            except (StoreError, BrokenPipeError) as exc:
                if not tables.broken_pipe(exc):
                    raise
                tables.quiet_stdout()  # a reader that stopped early (| head): not a failure
                return
        else:
            counts = mem.export(file, encrypt=False if plain else None)
    if file == "-":
        click.echo(f"exported {sum(counts.values())} rows", err=True)
    else:
        emit(state, counts)


def _refuse_the_store_as_output(state: CliState, out: str) -> None:
    """Exit 1 when ``out`` is the store file or one of its companions (by path, symlink or
    hard link): `export memory.db` replaced the store with its own export."""
    store = state.db_path()
    if store == ":memory:" or is_postgres_url(store):
        return
    suffix = files.store_file_at(out, store)
    if suffix is not None:
        which = f" (its {suffix[1:]} file)" if suffix else ""
        raise click.ClickException(
            f"{out} is the store itself{which}; writing onto it would destroy the store: "
            "name another file"
        )


@main.command(name="import")
@click.argument("file", metavar="FILE")
@pass_state
def import_cmd(state: CliState, file: str) -> None:
    """Load an export (FILE, or `-` for stdin) into an empty store.

    All or nothing: a damaged file is rejected with its line number, and Ctrl-C leaves the
    store as it was. Creates the store if it does not exist (and removes it again when the
    import fails).

    \b
    Example:
      elastimem --db restored.db import backup.jsonl
    """
    if file != "-" and not os.path.isfile(file):
        # Before the store is created: a mistyped FILE left an empty store behind.
        reason = "it is a folder" if os.path.isdir(file) else "no such file"
        raise click.ClickException(
            f"cannot read the export {file} ({reason}); nothing was imported"
        )
    source: Any = getattr(sys.stdin, "buffer", sys.stdin) if file == "-" else file
    path = state.db_path()
    made = _missing_parts(path)
    update, finish = tables.progress("Importing")
    try:
        with state.store(create=True) as mem:
            counts = mem.import_(source, progress=update)
    except BaseException:
        # All or nothing: a store this import created is removed with its folders.
        _remove_new_store(path, made)
        raise
    finally:
        finish()
    emit(state, counts)


def _missing_parts(path: str) -> list[str]:
    """``path`` and the folders above it that do not exist yet, deepest first."""
    if path == ":memory:" or is_postgres_url(path):
        return []  # no file: a failed import leaves the user's store empty, as it was
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return missing


def _remove_new_store(path: str, made: list[str]) -> None:
    if not made or made[0] != path:
        return  # the store existed before: import_ left it as it was
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(OSError):
            os.remove(path + suffix)
    for folder in made[1:]:
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only when empty


@main.command()
@click.option("--force", is_flag=True, help="Re-embed every chunk, not only stale ones.")
@pass_state
def reindex(state: CliState, force: bool) -> None:
    """Embed the chunks that have no current vector (all of them with --force).

    Uses the built-in embedder (extra `embed` or `fastembed`). Each batch is saved as it
    completes, so Ctrl-C keeps the work done so far.

    \b
    Example:
      elastimem reindex
    """
    update, finish = tables.progress("Embedding")
    try:
        with state.store(builtin_embedder=True) as mem:
            count = mem.reindex(update, force=force)
            embedder = mem.stats()["embedder"]
    finally:
        finish()
    if count == 0 and embedder in ("none", "failed"):
        click.echo("no usable embedder: install elastimem[embed] and the model (README)", err=True)
    emit(state, {"reindexed": count})


def _llm_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--llm-key", envvar="ELASTIMEM_LLM_API_KEY", metavar="KEY",
                      help="API key for the endpoint, if it needs one "
                      "[env: ELASTIMEM_LLM_API_KEY].")(fn)  # fmt: skip
    fn = click.option("--llm-model", envvar="ELASTIMEM_LLM_MODEL", metavar="NAME",
                      help="Model name at that endpoint "
                      "[env: ELASTIMEM_LLM_MODEL].")(fn)  # fmt: skip
    fn = click.option("--llm-url", envvar="ELASTIMEM_LLM_URL", metavar="URL",
                      help="OpenAI-compatible endpoint for extraction and summaries, e.g. "
                      "http://127.0.0.1:8080/v1 [env: ELASTIMEM_LLM_URL].")(fn)  # fmt: skip
    return fn


def _make_llm(url: str | None, model: str | None, key: str | None) -> Any:
    if not url:
        return None
    from .llms import openai_compatible

    # Local servers (llama.cpp, Ollama's OpenAI endpoint) often ignore the model name.
    return openai_compatible(url, model or "default", key or None)


@main.command(name="serve-mcp")
@_llm_options
@click.option("--no-embedder", is_flag=True, help="Keyword search only (no model is loaded).")
@pass_state
def serve_mcp(state: CliState, llm_url: str | None, llm_model: str | None, llm_key: str | None,
              no_embedder: bool) -> None:  # fmt: skip
    """Serve this store to an MCP client (Claude Desktop, IDEs, agents) over stdio.

    Needs the extra: pip install 'elastimem[mcp]'. Tools: remember, recall, forget, facts,
    timeline, add_lesson, record_turn, build_context. Logs go to stderr.

    \b
    Example:
      elastimem --db ~/agent-memory.db serve-mcp --llm-url http://127.0.0.1:8080/v1
    """
    from .mcp_server import MissingExtraError, configure_stderr_logging, load_sdk, serve

    try:
        load_sdk()
    except MissingExtraError as exc:
        raise click.ClickException(str(exc)) from exc
    configure_stderr_logging(state.verbose)
    try:
        terminated = serve(
            state.db_path(),
            llm=_make_llm(llm_url, llm_model, llm_key),
            tier=state.tier,
            builtin_embedder=not no_embedder,
            user_id=state.user_id(),
        )
    except ElastimemError as exc:
        raise click.ClickException(str(exc)) from exc
    if terminated:
        # The store is closed. The SDK's stdin reader would keep the process alive until
        # the client closes its end of the pipe: end it now, as SIGTERM asked.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# -- demo --------------------------------------------------------------------------------------


def load_demo_conversation() -> dict[str, Any]:
    text = resources.files("elastimem").joinpath("data/demo_conversation.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@main.command()
@click.option("--db", "demo_db", metavar="PATH", help="Keep the demo store here: a new "
              "file, or one holding only the demo (default: a temporary store, deleted "
              "afterwards).")  # fmt: skip
@_llm_options
@click.option("--no-embedder", is_flag=True, help="Skip the built-in embedder (keyword only).")
@pass_state
def demo(state: CliState, demo_db: str | None, llm_url: str | None, llm_model: str | None,
         llm_key: str | None, no_embedder: bool) -> None:  # fmt: skip
    """Ingest a small sample conversation and show what elastimem makes of it.

    \b
    Example:
      elastimem demo
      elastimem demo --db /tmp/demo.db --llm-url http://127.0.0.1:8080/v1 --llm-model qwen
    """
    data = load_demo_conversation()
    kw: dict[str, Any] = {"builtin_embedder": not no_embedder}
    llm = _make_llm(llm_url, llm_model, llm_key)
    if llm is not None:
        _check_llm_reachable(llm)
        kw["llm"] = llm
    # Only an explicit --db (the demo's own or the global flag) keeps the store; the
    # ELASTIMEM_DB variable is ignored so the demo never writes into a real store by accident.
    chosen = demo_db or state.db
    with tempfile.TemporaryDirectory(prefix="elastimem-demo-") as tmp:
        target = chosen or str(Path(tmp) / "demo.db")
        with dataclasses.replace(state, db=target).store(create=True, **kw) as mem:
            if chosen is not None:
                _refuse_other_memories(mem, data["sessions"])
            _run_demo(mem, data, kept=chosen is not None, llm=llm)


def _check_llm_reachable(llm: Any) -> None:
    """One tiny call first: with the server down, every background job failed and was
    retried, and the demo waited silently for minutes before showing anything."""
    from .errors import LLMError

    try:
        llm("Reply with the single word OK.", max_tokens=2, temperature=0.0)
    except LLMError as exc:
        reason = str(exc).rstrip(".")
        raise click.ClickException(
            f"cannot use the LLM at {llm.base_url} ({reason}); start the server, or run "
            "the demo without --llm-url"
        ) from exc


def _run_demo(mem: Any, data: dict[str, Any], *, kept: bool, llm: Any) -> None:
    say = click.echo
    sessions = data["sessions"]
    say(click.style("elastimem demo", bold=True) + " - three short conversations, remembered\n")
    _field("Store", mem.path + ("" if kept else "  (temporary, deleted afterwards)"))
    _field("LLM", f"{llm.model} at {llm.base_url}" if llm is not None
           else "none: facts come from rules, no summaries")  # fmt: skip
    if mem.stats()["embedder"] == "not_loaded":
        click.echo("  Loading the built-in embedder...", err=True)
    ready = mem.warm_up(timeout=DEMO_WAIT_SECONDS)
    label = mem.stats()["embedding_model"]
    _field("Embedder", label if ready and label else
           "none: keyword search only (see the README's first command for meaning)")  # fmt: skip
    todo = _demo_sessions_to_record(mem, sessions)
    if todo:
        _record_demo(mem, todo)
    else:
        _field("Recorded", "earlier: this store already holds the demo, shown again below")
    mem.drain(timeout=DEMO_WAIT_SECONDS)
    stats = mem.stats()
    _field("Stored", f"{stats['messages']} messages, {stats['chunks']} chunks "
           f"({stats['embedded_chunks']} with vectors), {stats['facts']} facts")  # fmt: skip

    _heading("Facts learned")
    known = mem.facts()
    width = max((len(k) for k in known), default=0)
    for key, value in known.items():
        say(f"  {key.ljust(width)}  {value}")
    if not known:
        say("  (none)")

    columns = shutil.get_terminal_size((100, 24)).columns
    for question in data["questions"]:
        _heading(f"recall({question!r})")
        hits = mem.recall(question, k=2)
        for rank, hit in enumerate(hits, start=1):
            prefix = f"  {rank}. [{hit.date}] {hit.kind:<5} {hit.score:.2f}  "
            say(tables.wrap(prefix, " ".join(hit.text.split()), columns))
        if not hits:
            say("  (no hits)")

    query = data["context_query"]
    _heading(f"build_context({query!r}).render()")
    rendered = mem.build_context(query).render()
    for line in (rendered or "(empty)").splitlines():
        say(f"  | {line}" if line else "  |")

    question = data["questions"][0]
    if kept:
        # On a server mem.path has no password: the reader adds theirs.
        where = shlex.quote(mem.path) + (f" --user {mem.user_id}" if mem.user_id else "")
        say("\nExplore this store:")
        say(f'  elastimem --db {where} recall "{question}"')
        say(f"  elastimem --db {where} --format table facts")
    else:
        say("\nKeep a demo store to explore it:")
        say("  elastimem demo --db demo.db")
        say(f'  elastimem --db demo.db recall "{question}"')


def _record_demo(mem: Any, sessions: list[dict[str, Any]]) -> None:
    turns = sum(len(s["turns"]) for s in sessions)
    with click.progressbar(length=turns, label=f"  Recording {turns} turns in {len(sessions)} "
                           "sessions", file=sys.stderr) as bar:  # fmt: skip
        for session in sessions:
            mem.begin_session(session.get("host_tag"), at=session["started_at"])
            for index, (user, assistant) in enumerate(session["turns"]):
                mem.record_turn(user, assistant, at=_plus_minutes(session["started_at"], 2 * index))
                bar.update(1)
            mem.end_session(wait=False)


def _demo_sessions_to_record(mem: Any, sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The demo sessions this store does not hold yet, known by their host tag and start
    time: `demo --db X` run twice stored every turn and fact twice."""
    from .clock import to_ts

    held = {
        (s["host_tag"], s["started_at"]) for s in mem.sessions(ALL) if s["host_tag"] is not None
    }
    return [s for s in sessions if (s.get("host_tag"), to_ts(s["started_at"])) not in held]


def _refuse_other_memories(mem: Any, sessions: list[dict[str, Any]]) -> None:
    """Exit 1 when the store holds anything but the demo: `elastimem --db real.db demo`
    stored a sample user's turns and facts ("allergies: peanuts") among the real ones."""
    from .clock import to_ts

    demo = {(s.get("host_tag"), to_ts(s["started_at"])) for s in sessions}
    held = mem.sessions(ALL)
    demo_ids = [s["id"] for s in held if (s["host_tag"], s["started_at"]) in demo]
    if len(demo_ids) < len(held) or mem.holds_memories_outside(demo_ids):
        raise click.ClickException(
            f"{mem.path} already holds memories that are not the demo; it was left as it "
            "was (the demo would add a sample user's conversations and facts to them): pass "
            "--db with a new file, or run the demo without --db"
        )


def _field(name: str, value: str) -> None:
    click.echo(f"  {click.style(name.ljust(10), bold=True)}{value}")


def _heading(text: str) -> None:
    click.echo("\n" + click.style(text, bold=True, fg="cyan"))


def _plus_minutes(at: str, minutes: int) -> str:
    from datetime import timedelta

    from .clock import format_ts, parse_moment

    return format_ts(parse_moment(at) + timedelta(minutes=minutes))


from .cli_crypt import register as register_crypt  # noqa: E402
from .cli_graph import graph_command  # noqa: E402 - below what it is built from
from .cli_keys import keys_group  # noqa: E402
from .cli_ops import ops_commands  # noqa: E402 - below what it is built from
from .cli_ui import ui_command  # noqa: E402
from .server.command import serve_command  # noqa: E402 - below what it is built from

main.add_command(serve_command(pass_state, _llm_options, _make_llm))
main.add_command(graph_command(pass_state, _refuse_the_store_as_output))
main.commands.update(ops_commands(pass_state))  # backup, restore, verify
main.add_command(ui_command(pass_state, _llm_options, _make_llm))
main.add_command(keys_group)
register_crypt(main, pass_state, emit)  # --key-file, encrypt, decrypt, rekey (issue 31)

if __name__ == "__main__":  # pragma: no cover
    main()
