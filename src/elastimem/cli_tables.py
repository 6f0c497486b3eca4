"""Terminal output of the command line for people (``--format table``).

A dict is shown as aligned "key  value" lines; a list of records as a table fitted to the
terminal width, or as blocks when a table cannot fit. Widths count terminal columns (CJK and
emoji take two). Also the progress bar, the broken-pipe handling of the commands and their
log records on stderr.
May import: click and the base modules only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import re
import shutil
import sys
import textwrap
import unicodedata
from collections.abc import Callable
from typing import Any

import click


def jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: dataclasses and dicts as objects, collections as
    lists, enums by name (int enums) or value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "value") and hasattr(value, "name"):  # enums
        return value.name.lower() if isinstance(value.value, int) else value.value
    return value


# -- tables ------------------------------------------------------------------------------------
#
# A dict is shown as aligned "key  value" lines: long values wrap (never cut), a nested dict
# is indented under its key, a nested list of records is a table under its key. A list of
# records is a table whose free-text columns shrink, cut at a word with "…", until the rows
# fit the terminal; when even that leaves no room, each record is shown as its own block of
# lines instead, so nothing runs past the edge or is lost.

TABLE_GAP = "  "
MIN_TEXT_COLUMN = 12  # a free-text column is never squeezed below this many characters
MIN_TABLE_WIDTH = 40
# Canonical stored timestamps (§4.1) shown to the minute in tables: the full form is in JSON.
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d):\d\d(?:\.\d+)?Z$")


def terminal_width() -> int:
    """Columns of the terminal (``COLUMNS`` wins; 100 when stdout is not a terminal)."""
    return max(MIN_TABLE_WIDTH, shutil.get_terminal_size((100, 24)).columns)


def table(data: Any, width: int) -> list[str]:
    if isinstance(data, dict):
        return _record(data, width)
    if _is_records(data):
        return _rows(data, width)
    if isinstance(data, list):
        lines: list[str] = []
        for index, item in enumerate(data, start=1):
            lines.extend(_wrap(_scalar(item), width, f"{index}. ", " " * len(f"{index}. ")))
        return lines
    return _wrap(_scalar(data), width)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def _scalar(value: Any) -> str:
    """One value as a line of text: numbers to four places, lists joined, dicts as k=v."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_scalar(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    text = " ".join(str(value).split())
    stamp = _TIMESTAMP.match(text)
    return f"{stamp[1]} {stamp[2]}Z" if stamp else text


def _record(data: dict[str, Any], width: int, indent: str = "") -> list[str]:
    """``key  value`` lines; nested dicts indented, nested records as tables."""
    if not data:
        return [f"{indent}(none)"]
    flat = [k for k, v in data.items() if v == {} or not (isinstance(v, dict) or _is_records(v))]
    key_width = max((text_width(str(k)) for k in flat), default=0)
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            lines.append(f"{indent}{key}")
            lines.extend(_record(value, width, indent + "  "))
        elif _is_records(value):
            lines.append(f"{indent}{key}")
            lines.extend(indent + "  " + line for line in _rows(value, width - len(indent) - 2))
        else:
            text = "(none)" if value in ([], {}) else _scalar(value)
            head = f"{indent}{_pad(str(key), key_width)}{TABLE_GAP}"
            lines.extend(line.rstrip() for line in _wrap(text, width, head, " " * text_width(head)))
    return lines


def _rows(rows: list[dict[str, Any]], width: int, columns: list[str] | None = None) -> list[str]:
    """A table of records fitted to ``width``, else one block of lines per record."""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_scalar(row.get(c)) for c in columns] for row in rows]
    natural = [
        max([text_width(c)] + [text_width(r[i]) for r in cells]) for i, c in enumerate(columns)
    ]
    gaps = len(TABLE_GAP) * (len(columns) - 1)
    widths = _fit(natural, _text_columns(cells, natural), width - gaps)
    if widths is None:
        return _blocks(columns, cells, width)
    lines = [_line(columns, widths)]
    lines.append(TABLE_GAP.join("-" * w for w in widths))
    for row in cells:
        shown = [clip(c, w) for c, w in zip(row, widths, strict=True)]
        lines.append(_line(shown, widths))
    return lines


def _line(cells: list[str], widths: list[int]) -> str:
    return TABLE_GAP.join(_pad(c, w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _text_columns(cells: list[list[str]], natural: list[int]) -> list[int]:
    """Columns that may be cut: free text (some cell has a space) wider than the minimum."""
    return [
        i
        for i, w in enumerate(natural)
        if w > MIN_TEXT_COLUMN and any(" " in row[i] for row in cells)
    ]


def _fit(natural: list[int], shrinkable: list[int], room: int) -> list[int] | None:
    """Column widths summing to at most ``room``, shrinking only ``shrinkable`` columns (the
    widest first, none below ``MIN_TEXT_COLUMN``); None when they cannot fit."""
    widths = list(natural)
    excess = sum(widths) - room
    if excess <= 0:
        return widths
    fixed = sum(w for i, w in enumerate(widths) if i not in shrinkable)
    budget = room - fixed
    if not shrinkable or budget < MIN_TEXT_COLUMN * len(shrinkable):
        return None
    # Water-filling: every shrinkable column gets at most an equal share of what is left,
    # and a narrower one hands what it does not need to the wider ones.
    left = sorted(shrinkable, key=lambda i: natural[i])
    while left:
        share = budget // len(left)
        column = left.pop(0)
        widths[column] = min(natural[column], share)
        budget -= widths[column]
    return widths


def _blocks(columns: list[str], cells: list[list[str]], width: int) -> list[str]:
    """Each record as ``column  value`` lines (values wrapped, never cut), numbered."""
    key_width = max(text_width(c) for c in columns)
    lines: list[str] = []
    for index, row in enumerate(cells, start=1):
        if lines:
            lines.append("")
        lines.append(f"[{index}]")
        for column, value in zip(columns, row, strict=True):
            head = f"  {_pad(column, key_width)}{TABLE_GAP}"
            lines.extend(
                line.rstrip() for line in _wrap(value, width, head, " " * text_width(head))
            )
    return lines


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` columns after their prefixes (``first`` on the
    first line, ``rest`` on the others), broken between words; a word longer than a whole
    line is split."""
    room = max(10, width - max(text_width(first), text_width(rest)))
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while text_width(word) > room:  # a path or URL longer than a line
            if line:
                lines.append(line)
                line = ""
            head = _take(word, room)
            lines.append(head)
            word = word[len(head) :]
        if not word:
            continue
        candidate = f"{line} {word}" if line else word
        if text_width(candidate) <= room:
            line = candidate
        else:
            lines.append(line)
            line = word
    if line or not lines:
        lines.append(line)
    return [(first if i == 0 else rest) + part for i, part in enumerate(lines)]


def _take(text: str, columns: int) -> str:
    """The longest prefix of ``text`` that fits in ``columns`` terminal columns."""
    out, used = [], 0
    for ch in text:
        if used + _char_width(ch) > columns:
            break
        out.append(ch)
        used += _char_width(ch)
    return "".join(out)


# Each data command's table: the columns people read first (JSON has every field).
HIT_COLUMNS = ["kind", "id", "date", "score", "session_id", "text"]
VERSION_COLUMNS = ["id", "value", "valid_from", "invalidated_at", "source"]
SESSION_COLUMNS = ["id", "started_at", "message_count", "host_tag", "title", "summary"]
# Explain's leg scores as columns; shorter names where the field name is long.
LEG_LABELS = {
    "fused_relevance": "fused",
    "importance_nudge": "importance+",
    "recency_nudge": "recency+",
    "graph_nudge": "graph+",
    "graph_matched_names": "graph names",
}


def hits_table(hits: list[dict[str, Any]], width: int) -> list[str]:
    return _rows(hits, width, HIT_COLUMNS) if hits else ["(no hits)"]


def versions_table(versions: list[dict[str, Any]], width: int) -> list[str]:
    return _rows(versions, width, VERSION_COLUMNS) if versions else ["(none)"]


def sessions_table(sessions: list[dict[str, Any]], width: int) -> list[str]:
    return _rows(sessions, width, SESSION_COLUMNS) if sessions else ["(none)"]


def timeline_table(result: dict[str, Any], width: int) -> list[str]:
    head = {k: v for k, v in result.items() if k != "versions"}
    return [*_record(head, width), "", "versions", *versions_table(result["versions"], width)]


def explain_table(result: dict[str, Any], width: int) -> list[str]:
    """The hits in rank order, each with its leg scores as columns (or lines, when narrow)."""
    legs = {("chunk", b["chunk_id"]): b for b in result["chunk_breakdowns"]}
    legs.update({("fact", b["fact_id"]): b for b in result["fact_breakdowns"]})
    rows = []
    for rank, hit in enumerate(result["hits"], start=1):
        row: dict[str, Any] = {"#": rank, "kind": hit["kind"], "id": hit["id"],
                               "date": hit["date"], "score": hit["score"]}  # fmt: skip
        for name, value in legs.get((hit["kind"], hit["id"]), {}).items():
            if name not in ("chunk_id", "fact_id", "total") and value not in ([], None):
                row[LEG_LABELS.get(name, name)] = value
        rows.append(row)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    for row, hit in zip(rows, result["hits"], strict=True):
        row["text"] = hit["text"]
    lines = _record({"query": result["query"], "graph_hops": result["graph_hops"]}, width)
    lines += ["", "hits", *(_rows(rows, width, [*columns, "text"]) if rows else ["(no hits)"])]
    if result["graph_traversal"]:
        lines += ["", "graph_traversal", *_rows(result["graph_traversal"], width)]
    return lines


def broken_pipe(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a write to a pipe whose reader went away."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            return True
        exc = exc.__cause__
    return False


def quiet_stdout() -> None:
    """Point stdout at the null device, so the interpreter's last flush at exit does not
    complain about the closed pipe (the recipe of Python's signal docs)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _char_width(ch: str) -> int:
    """Terminal columns of one character: CJK and emoji take two, combining marks none."""
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_width(text: str) -> int:
    return sum(_char_width(ch) for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - text_width(text))


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` columns with "…" when longer, at a word boundary unless
    that would drop more than half of what fits."""
    if text_width(text) <= limit:
        return text
    cut = _take(text, limit - 1)
    space = cut.rfind(" ")
    if not text[len(cut)].isspace() and space >= len(cut) // 2:
        cut = cut[:space]  # not in the middle of a word
    return cut.rstrip(" ,;:") + "…"


def wrap(prefix: str, text: str, columns: int) -> str:
    """``prefix`` then ``text`` folded at word boundaries to ``columns`` (at least 60), later
    lines indented under the text: the demo shows its answers whole, not cut (issue 26)."""
    width = max(60, columns - 1)
    return textwrap.fill(
        text,
        width,
        initial_indent=prefix,
        subsequent_indent=" " * len(prefix),
        break_on_hyphens=False,
    )


def progress(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A ``progress(done, total)`` callback driving a click progress bar on stderr."""
    bar: Any = None
    shown = 0

    def update(done: int, total: int) -> None:
        nonlocal bar, shown
        if bar is None:
            bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr)
            bar.__enter__()
        if done > shown:
            bar.update(done - shown)
            shown = done

    def finish() -> None:
        if bar is not None:
            bar.__exit__(None, None, None)

    return update, finish


# -- logs --------------------------------------------------------------------------------------


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (click's test runner
    and pytest swap it), not to the stream of the first command that ran."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def log_to_stderr(verbose: bool) -> Callable[[], None]:
    """Warnings (a damaged store set aside, a read-only folder…) always reach stderr; ``-v``
    adds the INFO records. Returns what undoes it when the command ends (a host that runs
    the CLI in its own process keeps its logging as it was)."""
    log = logging.getLogger("elastimem")
    if any(getattr(h, "_elastimem_stderr", False) for h in log.handlers):
        return lambda: None
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s elastimem: %(message)s"))
    handler._elastimem_stderr = True  # type: ignore[attr-defined]
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    level = log.level
    log.addHandler(handler)
    if verbose:
        log.setLevel(logging.INFO)

    def undo() -> None:
        log.removeHandler(handler)
        log.setLevel(level)

    return undo
