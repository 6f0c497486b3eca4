"""The ``elastimem`` command line: a thin layer over the Python API (SPEC §8.1).

Data commands print JSON by default (one object, or one object per line for streams) and
aligned columns with ``--format table``. The store comes from ``--db``, else ``ELASTIMEM_DB``,
else ``memory.db`` in the per-user app folder; ``elastimem path`` prints which. Exit codes:
0 success, 1 a runtime error (its message on stderr), 2 a usage error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import click

from .errors import ElastimemError

DB_ENV_VAR = "ELASTIMEM_DB"
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def default_db_path() -> str:
    return os.path.join(click.get_app_dir("elastimem"), "memory.db")


@dataclasses.dataclass
class CliState:
    db: str | None
    output: str
    tier: str | None
    verbose: bool

    def db_path(self) -> str:
        return self.db or os.environ.get(DB_ENV_VAR) or default_db_path()

    @contextmanager
    def store(self, **kw: Any) -> Iterator[Any]:
        from .store import Elastimem

        overrides: dict[str, Any] = dict(kw)
        if self.tier:
            overrides["tier_override"] = self.tier
        try:
            mem = Elastimem(self.db_path(), **overrides)
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        try:
            yield mem
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            mem.close()


pass_state = click.make_pass_decorator(CliState)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value") and hasattr(value, "name"):  # enums
        return value.name.lower() if isinstance(value.value, int) else value.value
    return value


def emit(state: CliState, data: Any) -> None:
    """Print ``data`` as JSON (default) or as an aligned table."""
    data = _jsonable(data)
    if state.output == "table":
        click.echo(_table(data))
    else:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _table(data: Any) -> str:
    if isinstance(data, dict):
        rows = [[str(k), _cell(v)] for k, v in data.items()]
        return _align(["key", "value"], rows)
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        headers = list(data[0].keys())
        return _align(headers, [[_cell(r.get(h)) for h in headers] for r in data])
    if isinstance(data, list):
        return "\n".join(_cell(v) for v in data) if data else "(none)"
    return _cell(data)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return " ".join(str(value).split())


def _align(headers: list[str], rows: list[list[str]]) -> str:
    limit = 80
    rows = [[c if len(c) <= limit else c[: limit - 1] + "…" for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join(lines)


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("--db", "db_path", metavar="PATH", help="Store file (default: $ELASTIMEM_DB, "
              "else memory.db in the per-user app folder).")  # fmt: skip
@click.option("--format", "output", type=click.Choice(["json", "table"]), default="json",
              show_default=True, help="Output format for data commands.")  # fmt: skip
@click.option("--tier", type=click.Choice(["lite", "standard", "full"]),
              help="Pin the resource tier.")  # fmt: skip
@click.option("-v", "--verbose", is_flag=True, help="Send logs to stderr.")
@click.version_option(package_name="elastimem", message="elastimem %(version)s")
@click.pass_context
def main(ctx: click.Context, db_path: str | None, output: str, tier: str | None,
         verbose: bool) -> None:  # fmt: skip
    """Long-term memory for local-first LLM agents, kept in one SQLite file.

    \b
    Example:
      elastimem demo
      elastimem --db notes.db remember favorite_color teal
      elastimem --db notes.db recall "what colour do I like?"
    """
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s elastimem: %(message)s"))
        log = logging.getLogger("elastimem")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    ctx.obj = CliState(db_path, output, tier, verbose)


@main.command()
@pass_state
def path(state: CliState) -> None:
    """Print the store file in use.

    \b
    Example:
      ELASTIMEM_DB=~/agent.db elastimem path
    """
    click.echo(state.db_path())


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
@click.option("-k", "k", default=5, show_default=True, type=int, help="How many hits.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["chunk", "fact"]),
              help="Only this kind of hit (repeatable).")  # fmt: skip
@click.option("--since", help="Only hits at or after this ISO date/time.")
@click.option("--until", help="Only hits before this ISO date/time.")
@pass_state
def recall(state: CliState, query: str, k: int, kinds: tuple[str, ...], since: str | None,
           until: str | None) -> None:  # fmt: skip
    """Search memory by keyword and meaning.

    \b
    Example:
      elastimem recall "what is my dog called?" -k 3 --kind chunk
    """
    with state.store() as mem:
        if mem.stats()["embedded_chunks"] > 0:
            mem.warm_up()
        hits = mem.recall(query, k, kinds=list(kinds) or None, since=since, until=until)
        emit(state, hits)


@main.command()
@click.argument("query")
@click.option("-k", "k", default=5, show_default=True, type=int, help="How many hits.")
@pass_state
def explain(state: CliState, query: str, k: int) -> None:
    """Show how recall ranked its hits, leg by leg.

    \b
    Example:
      elastimem explain "hiking with the dog"
    """
    with state.store() as mem:
        if mem.stats()["embedded_chunks"] > 0:
            mem.warm_up()
        emit(state, mem.explain(query, k))


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
        emit(state, mem.fact_history(key))


@main.command()
@click.argument("key")
@click.argument("value")
@click.option("--source", type=click.Choice(["explicit", "import"]), default="explicit",
              show_default=True, help="Where the fact comes from.")  # fmt: skip
@pass_state
def remember(state: CliState, key: str, value: str, source: str) -> None:
    """Store a fact (a new version if the key already has another value).

    \b
    Example:
      elastimem remember favorite_color teal
    """
    with state.store() as mem:
        changed, reason = mem.remember(key, value, source)
        emit(state, {"changed": changed, "reason": reason})


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
        sys.exit(1)


@main.command()
@click.option("-n", "n", default=20, show_default=True, type=int, help="How many sessions.")
@pass_state
def sessions(state: CliState, n: int) -> None:
    """The most recent conversations, newest first.

    \b
    Example:
      elastimem --format table sessions -n 5
    """
    with state.store() as mem:
        emit(state, mem.sessions(n))


def load_demo_conversation() -> dict[str, Any]:
    text = resources.files("elastimem").joinpath("data/demo_conversation.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@main.command()
@click.option("--db", "demo_db", metavar="PATH", help="Keep the demo store here "
              "(default: a temporary store, deleted afterwards).")  # fmt: skip
@click.option("--llm-url", envvar="ELASTIMEM_LLM_URL", help="OpenAI-compatible endpoint.")
@click.option("--llm-model", envvar="ELASTIMEM_LLM_MODEL", help="Model name at that endpoint.")
@click.option("--llm-key", envvar="ELASTIMEM_LLM_API_KEY", help="API key, if it needs one.")
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
    kw: dict[str, Any] = {"disable_builtin_embedder": no_embedder}
    if llm_url:
        from .llms import openai_compatible

        kw["llm"] = openai_compatible(llm_url, llm_model or "default", llm_key)
    with tempfile.TemporaryDirectory(prefix="elastimem-demo-") as tmp:
        target = demo_db or str(Path(tmp) / "demo.db")
        state_for_demo = dataclasses.replace(state, db=target)
        with state_for_demo.store(**kw) as mem:
            _run_demo(state, mem, data)


def _run_demo(state: CliState, mem: Any, data: dict[str, Any]) -> None:
    say: Callable[[str], None] = click.echo
    total = sum(len(s["turns"]) for s in data["sessions"])
    say(f"Store: {mem.path}")
    with click.progressbar(length=total, label="Ingesting sample conversation",
                           file=sys.stderr) as bar:  # fmt: skip
        for session in data["sessions"]:
            mem.begin_session(session.get("host_tag"), at=session["started_at"])
            for index, (user, assistant) in enumerate(session["turns"]):
                at = _plus_minutes(session["started_at"], 2 * index)
                mem.record_turn(user, assistant, at=at)
                bar.update(1)
            mem.end_session(wait=False)
    ready = mem.warm_up(timeout=120.0)
    mem.drain(timeout=120.0)
    stats = mem.stats()
    say(f"\nEmbedder: {stats['embedding_model'] or 'none'} ({stats['embedder']}); "
        f"{stats['embedded_chunks']}/{stats['chunks']} chunks embedded"
        + ("" if ready else "; recall is keyword-only"))  # fmt: skip
    say("\n== Facts learned ==")
    emit(state, mem.facts())
    for question in data["questions"]:
        say(f"\n== recall({question!r}) ==")
        for hit in mem.recall(question, k=2):
            say(f"[{hit.date}] {hit.kind} {hit.score:.3f}  " + " ".join(hit.text.split()))
    query = data["context_query"]
    say(f"\n== build_context({query!r}).render() ==")
    say(mem.build_context(query).render())


def _plus_minutes(at: str, minutes: int) -> str:
    from datetime import timedelta

    from .clock import format_ts, parse_moment

    return format_ts(parse_moment(at) + timedelta(minutes=minutes))


if __name__ == "__main__":  # pragma: no cover
    main()
