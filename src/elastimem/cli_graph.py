"""``elastimem graph``: the entity graph as Graphviz DOT or one self-contained HTML page.

Built like ``serve``'s command: ``cli`` hands in what it is made from (the state decorator
and the check that the output is not the store itself), so this module imports nothing of
``cli`` and ``cli`` stays a list of thin commands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .storage.sqlite import files

EMPTY_GRAPH_NOTE = (
    "the entity graph is empty: it is built by an LLM (--llm-url, or llm= in Python) as "
    "turns are recorded, and then shows the people, places and organisations you mention "
    "and how they relate"
)
HTML_SUFFIXES = (".html", ".htm")


def format_for(as_: str | None, out: str | None) -> str:
    """``--as`` when given, else what the output file's extension says (DOT by default)."""
    if as_ is not None:
        return as_
    return "html" if out and Path(out).suffix.lower() in HTML_SUFFIXES else "dot"


def graph_command(
    pass_state: Callable[..., Any], refuse_the_store_as_output: Callable[[Any, str], None]
) -> click.Command:
    @click.command()
    @click.option("--as", "as_", type=click.Choice(["dot", "html"]), default=None,
                  help="DOT for Graphviz, or one self-contained HTML page [default: from "
                  "the -o file's extension (.html/.htm: html), else dot].")  # fmt: skip
    @click.option("-o", "--output", "out", metavar="FILE", help="Write here instead of stdout.")
    @pass_state
    def graph(state: Any, as_: str | None, out: str | None) -> None:
        """Draw the entity graph (you, the people, places and things you mentioned).

        The graph is built by an LLM (--llm-url, or llm= in Python) as turns are recorded;
        with none it stays empty, and this says so on stderr.

        \b
        Example:
          elastimem graph | dot -Tsvg > graph.svg
          elastimem graph -o graph.html
        """
        to_file = bool(out) and out != "-"
        if to_file:
            refuse_the_store_as_output(state, str(out))
        shape = format_for(as_, out)
        with state.store() as mem:
            text = mem.render_graph(shape)
            empty = not mem.stats().get("graph_nodes")
        if empty:
            click.echo(EMPTY_GRAPH_NOTE, err=True)
        if not to_file:
            click.echo(text, nl=not text.endswith("\n"))
            return
        try:
            target = Path(str(out)).expanduser()
            # The graph names the people and places of a private memory: a new file is made
            # 0600 like an export; an existing one keeps the mode its owner gave it.
            files.create_private_file(str(target))
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {out} ({exc.strerror})") from exc
        click.echo(f"wrote {out} ({shape})", err=True)

    return graph
