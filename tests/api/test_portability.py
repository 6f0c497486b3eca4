"""Export and import (SPEC §5.16): a lossless round trip, and all-or-nothing imports that
reject a damaged file with its line number and leave the target untouched."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import elastimem
from elastimem import ImportFormatError
from elastimem.clock import now_ts
from elastimem.portability import EXPORT_TABLES
from tests.conftest import HashEmbedder
from tests.exports import for_target
from tests.rows import connect, file_connection, is_postgres

Factory = Callable[..., elastimem.Elastimem]
# These tests read and edit export files as JSON Lines; an encrypted store's export is an
# SQLCipher file (issue 31), whose round trips tests/storage/test_encryption.py checks.
pytestmark = pytest.mark.plain_file
PK = {"meta": "key", "graph_mentions": "node_id, chunk_id", "fact_vectors": "fact_id"}
TRICKY = 'Café ☕ — “quoted” "double" back\\slash\tTab line\u2028separator 😀 \x7f'


def dump(path: str | Path, tables: tuple[str, ...] = EXPORT_TABLES) -> dict[str, list[tuple]]:
    conn = file_connection(path)
    try:
        out: dict[str, list[tuple]] = {}
        for table in tables:
            where = (
                " WHERE key IN ('created_at', 'created_by', 'user_id')" if table == "meta" else ""
            )
            out[table] = conn.execute(
                f"SELECT * FROM {table}{where} ORDER BY {PK.get(table, 'id')}"
            ).fetchall()
        return out
    finally:
        conn.close()


def full_dump(mem: elastimem.Elastimem) -> dict[str, list[tuple]]:
    """Every table of an open store, events and the whole meta table included (on
    PostgreSQL every table of the database, as the store's user sees it).

    Only ``sessions.heartbeat_at`` is left out: the worker refreshes it on its own schedule.
    """
    postgres = is_postgres(mem)
    with connect(mem) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                if postgres
                else "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%'"
            )
        ]
        out = {}
        for name in names:
            found = (
                conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "AND table_schema = current_schema() ORDER BY ordinal_position",
                    (name,),
                )
                if postgres
                else [r[1:] for r in conn.execute(f'PRAGMA table_info("{name}")')]
            )
            columns = [f'"{r[0]}"' for r in found if r[0] != "heartbeat_at"]
            out[name] = conn.execute(
                f'SELECT {", ".join(columns)} FROM "{name}" ORDER BY {", ".join(columns)}'
            ).fetchall()
        return out


def owner(mem: elastimem.Elastimem) -> str:
    """The user ``build_rich`` leaves its store recording: 'alice' on a file; on PostgreSQL
    the store's own user, which every store there records from its open."""
    return str(mem.user_id) if is_postgres(mem) else "alice"


def as_data(lines: list[str], target: elastimem.Elastimem) -> bytes:
    return "".join(for_target(lines, target)).encode("utf-8")


def build_rich(mem: elastimem.Elastimem) -> None:
    """Something in every exported table, with awkward text and a moved self node."""
    with connect(mem) as conn:
        conn.execute("UPDATE graph_nodes SET id = 77 WHERE type = 'self'")
        if not is_postgres(mem):  # a PostgreSQL store records its own user from its open
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('user_id', 'alice')")
    mem.begin_session("tag-1", at="2025-01-05T10:00:00Z")
    mem.record_turn("Hi, my name is Maya and I live in Portland.", "Nice to meet you, Maya!")
    mem.record_turn(f"Some tricky text: {TRICKY}", "Noted " + TRICKY)
    mem.report_evictions([("we talked about the garden", "yes")])
    mem.end_session()
    mem.begin_session(at="2025-02-05T10:00:00Z")
    mem.record_turn("I moved to Seattle last month.", "How is Seattle?")
    mem.record_turn("I work as a nurse at the clinic.", "That is demanding work.")
    mem.remember("favorite_color", "teal")
    mem.remember("favorite_color", "green")
    mem.remember("allergies", "none")
    mem.remember("bad", "unknown", source="auto")  # quarantined
    mem.add_lesson("Ask before booking anything", tag="travel")
    mem.add_lesson("Keep answers short")
    mem.end_session()
    assert mem.drain(10)
    now = now_ts()
    with connect(mem) as conn:
        colors = [
            r[0]
            for r in conn.execute("SELECT id FROM facts WHERE key = 'favorite_color' ORDER BY id")
        ]
        conn.execute(
            "INSERT INTO fact_reviews (old_fact_id, new_fact_id, verdict, result_fact_id, "
            "reviewed_at) VALUES (?, ?, 'kept', ?, ?)",
            (colors[0], colors[1], colors[1], now),
        )
        chunk = conn.execute("SELECT min(id) FROM chunks").fetchone()[0]
        first_session = conn.execute("SELECT min(id) FROM sessions").fetchone()[0]
        ids = []
        for name, kind in (("maya's dog", "thing"), ("portland", "place"), ("clinic", "org")):
            cur = conn.execute(
                "INSERT INTO graph_nodes (type, canonical_name, aliases, created_at, "
                "updated_at, importance, confidence, mention_count, cluster_id, cluster_label) "
                "VALUES (?, ?, ?, ?, ?, 0.55, 0.7, 2, NULL, NULL)",
                (kind, name, json.dumps([name.title(), TRICKY]), now, now),
            )
            ids.append(cur.lastrowid)
        conn.execute(
            "UPDATE graph_nodes SET cluster_id = ?, cluster_label = 'home life' WHERE id IN (?, ?)",
            (ids[0], ids[0], ids[1]),
        )
        conn.execute(
            "INSERT INTO graph_edges (source_node, target_node, relationship, confidence, "
            "importance, weight, created_at, last_seen, seen_count, source_chunk_id) "
            "VALUES (77, ?, 'lives_in', 0.7, 0.5, 0.7, ?, ?, 1, ?)",
            (ids[1], now, now, chunk),
        )
        conn.execute(
            "INSERT INTO graph_edges (source_node, target_node, relationship, created_at, "
            "last_seen) VALUES (?, ?, 'near', ?, ?)",
            (ids[0], ids[1], now, now),
        )
        for node in ids:
            conn.execute(
                "INSERT INTO graph_mentions (node_id, chunk_id, created_at) VALUES (?, ?, ?)",
                (node, chunk, now),
            )
        conn.execute(
            "INSERT INTO graph_merge_reviews (type_a, name_a, type_b, name_b, verdict, "
            "reviewed_at) VALUES ('place', 'portland', 'place', 'portland or', 'same', ?)",
            (now,),
        )
        # Jobs no worker will claim: another host's queued job and a failed one.
        for state, error in (("queued", None), ("failed", "boom: " + TRICKY)):
            conn.execute(
                "INSERT INTO jobs (kind, state, phase, session_id, payload, priority, attempts, "
                "last_error, owner_pid, owner_host, created_at, updated_at) VALUES "
                "('extract', ?, 'session_end', ?, ?, 2, 3, ?, 1, 'elsewhere.example', ?, ?)",
                (state, first_session, json.dumps({"turns": [1, 2]}), error, now, now),
            )


def export_lines(mem: elastimem.Elastimem) -> list[str]:
    buffer = io.BytesIO()
    mem.export(buffer)
    return split_lines(buffer.getvalue().decode("utf-8"))


def split_lines(text: str) -> list[str]:
    # Only "\n" ends a JSON line: str.splitlines would also split at U+2028 inside a string.
    return [line + "\n" for line in text.split("\n")[:-1]]


def without_exported_at(lines: list[str]) -> list[str]:
    header = json.loads(lines[0])
    header.pop("exported_at")
    return [json.dumps(header), *lines[1:]]


@pytest.fixture
def rich(make_store: Factory, tmp_path: Path) -> elastimem.Elastimem:
    mem = make_store(tmp_path / "source.db", embedder=HashEmbedder())
    build_rich(mem)
    return mem


def test_round_trip_is_lossless(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    export_file = tmp_path / "backup.jsonl"
    counts = rich.export(export_file)
    assert all(counts[t] > 0 for t in EXPORT_TABLES), counts
    first = split_lines(export_file.read_text("utf-8"))
    header = json.loads(first[0])
    assert header["format"] == "elastimem-export" and header["format_version"] == 1
    assert header["schema_version"] == 7 and header["embedding_model"] == "host"
    assert header["library_version"] == elastimem.__version__
    assert json.loads(first[-1]) == {"table": "_end", "rows": sum(counts.values())}
    tables = [json.loads(line)["table"] for line in first[1:-1]]
    assert tables == sorted(tables, key=EXPORT_TABLES.index)  # foreign-key order
    embedded = [json.loads(x)["row"] for x in first if '"table":"chunks"' in x]
    assert base64.b64decode(embedded[0]["embedding"])  # BLOBs as base64

    target = make_store(tmp_path / "target.db")
    if is_postgres(target):
        export_file.write_text("".join(for_target(first, target)), "utf-8")
    assert target.import_(export_file) == counts
    second = export_lines(target)
    assert without_exported_at(second) == without_exported_at(for_target(first, target))

    if is_postgres(target):
        with connect(target) as pg:
            meta = dict(pg.execute("SELECT key, value FROM meta").fetchall())
            max_seq = pg.execute("SELECT max(embed_seq) FROM chunks").fetchone()[0]
            self_ids = pg.execute("SELECT id FROM graph_nodes WHERE type = 'self'").fetchall()
            detail = pg.execute("SELECT detail FROM events WHERE kind = 'import'").fetchone()[0]
        assert int(meta["vectors.seq"]) >= max_seq > 0
        assert int(meta["vectors.gen"]) >= 1 and int(meta["graph.gen"]) >= 1
        assert meta["user_id"] == target.user_id
        assert [tuple(r) for r in self_ids] == [(77,)]
        assert json.loads(detail)["rows"] == sum(counts.values())
    source_path, target_path = rich.path, target.path
    rich.close()
    target.close()
    if not is_postgres(target):
        assert dump(target_path) == dump(source_path)
        conn = file_connection(target_path)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            max_seq = conn.execute("SELECT max(embed_seq) FROM chunks").fetchone()[0]
            assert int(meta["vectors.seq"]) >= max_seq > 0
            assert int(meta["vectors.gen"]) >= 1 and int(meta["graph.gen"]) >= 1
            assert meta["user_id"] == "alice"
            self_ids = conn.execute("SELECT id FROM graph_nodes WHERE type = 'self'").fetchall()
            assert self_ids == [(77,)]
            detail = conn.execute("SELECT detail FROM events WHERE kind = 'import'").fetchone()[0]
            assert json.loads(detail)["rows"] == sum(counts.values())
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        finally:
            conn.close()

    # The restored store works: keyword search (FTS rebuilt), vectors, history, the graph.
    again = make_store(tmp_path / "target.db", embedder=HashEmbedder())
    seattle = again.recall("Seattle", kinds=["chunk"])
    assert seattle and "Seattle" in seattle[0].text
    assert any("Café" in h.text for h in again.recall("café"))
    breakdown = again.explain("nurse clinic").chunk_breakdowns
    assert breakdown and max(b.vector for b in breakdown) > 0
    assert [f.value for f in again.fact_history("favorite_color")] == ["teal", "green"]
    assert again.facts()["favorite_color"] == "green"
    assert again.lessons() == ["Ask before booking anything", "Keep answers short"]


def test_an_imported_store_counts_its_vectors_before_embedding_anything(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    """The export leaves out local meta, the model's dimension included; the import
    records it from the vectors, so stats() counts them as embedded (they were counted as
    neither embedded nor stale until this instance embedded something; found by a soak)."""
    rich.drain(30)
    before = rich.stats()
    assert before["embedded_chunks"] > 0
    export_file = tmp_path / "backup.jsonl"
    rich.export(export_file)
    target = make_store(tmp_path / "target.db", embedder=HashEmbedder())
    target.import_(io.BytesIO(as_data(split_lines(export_file.read_text("utf-8")), target)))
    after = target.stats()
    assert after["embedded_chunks"] == before["embedded_chunks"]
    assert after["stale_embeddings"] == before["stale_embeddings"]


def test_export_and_import_through_file_objects(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    reference = export_lines(rich)
    text = io.StringIO()
    rich.export(text)
    assert without_exported_at(split_lines(text.getvalue())) == (without_exported_at(reference))
    # A binary stream read from its current position, not from 0.
    one = make_store(tmp_path / "one.db")
    binary = io.BytesIO(b"ignored prefix\n" + as_data(reference, one))
    binary.seek(len(b"ignored prefix\n"))
    one.import_(binary)
    # A text stream.
    two = make_store(tmp_path / "two.db")
    two.import_(io.StringIO("".join(for_target(reference, two))))
    # A pipe, which cannot seek (like stdin).
    three = make_store(tmp_path / "three.db")
    read_fd, write_fd = os.pipe()
    payload = as_data(reference, three)

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as w:
            w.write(payload)

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_fd, "rb") as pipe:
        three.import_(pipe)
    writer.join()
    for store in (one, two, three):
        expected = without_exported_at(for_target(reference, store))
        assert without_exported_at(export_lines(store)) == expected


def test_memory_stores_round_trip(make_store: Factory) -> None:
    source = make_store(":memory:")
    source.record_turn("I live in Lisbon and love " + TRICKY, "Great city")
    source.remember("pet", "cat")
    lines = export_lines(source)
    target = make_store(":memory:")
    target.import_(io.BytesIO(as_data(lines, target)))
    assert without_exported_at(export_lines(target)) == without_exported_at(
        for_target(lines, target)
    )
    assert target.facts() == source.facts()


def test_progress_is_reported(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem import portability

    monkeypatch.setattr(portability, "PROGRESS_EVERY", 7)
    lines = export_lines(rich)
    calls: list[tuple[int, int]] = []
    target = make_store(tmp_path / "target.db")
    target.import_(
        io.BytesIO(as_data(lines, target)),
        progress=lambda done, total: calls.append((done, total)),
    )
    rows = len(lines) - 2
    assert calls[-1] == (rows, rows)
    assert len(calls) == rows // 7 + 1
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert all(total == rows for _, total in calls)


def test_a_progress_callback_that_raises_aborts_cleanly(
    rich: elastimem.Elastimem,
    make_store: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from elastimem import portability

    monkeypatch.setattr(portability, "PROGRESS_EVERY", 7)
    lines = export_lines(rich)
    target = make_store(tmp_path / "target.db")
    before = full_dump(target)

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        target.import_(io.BytesIO(as_data(lines, target)), progress=stop)
    assert full_dump(target) == before
    target.import_(io.BytesIO(as_data(lines, target)))  # still usable, still empty
    assert target.stats()["sessions"] == 2


# -- damaged files -----------------------------------------------------------------------------


def _dup(table: str, lines: list[str]) -> list[str]:
    index = next(i for i, line in enumerate(lines) if f'"table":"{table}"' in line)
    return [*lines[: index + 1], lines[index], *lines[index + 1 :]]


def _mutations() -> list[tuple[str, Callable[[list[str]], list[str]], str]]:
    def replace(index: int, text: str) -> Callable[[list[str]], list[str]]:
        return lambda ls: [*ls[:index], text, *ls[index + 1 :]]

    def edit_row(table: str, fn: Callable[[dict], None]) -> Callable[[list[str]], list[str]]:
        def apply(ls: list[str]) -> list[str]:
            out = list(ls)
            for i, line in enumerate(out):
                obj = json.loads(line)
                if obj.get("table") == table:
                    fn(obj["row"])
                    out[i] = json.dumps(obj) + "\n"
                    return out
            raise AssertionError(table)

        return apply

    def header(**changes: Any) -> Callable[[list[str]], list[str]]:
        def apply(ls: list[str]) -> list[str]:
            obj = json.loads(ls[0])
            obj.update(changes)
            return [json.dumps(obj) + "\n", *ls[1:]]

        return apply

    return [
        ("not json header", replace(0, "garbage\n"), r"line 1 .*not valid JSON"),
        ("other format", header(format="something-else"), r"line 1 .*not an elastimem export"),
        ("newer format", header(format_version=2), r"line 1 .*newer elastimem"),
        ("bad version", header(format_version="1"), r"line 1 .*format_version"),
        ("newer schema", header(schema_version=9), r"line 1 .*schema version 9"),
        (
            "unknown table",
            replace(3, '{"table":"bogus","row":{"x":1}}\n'),
            r"line 4 .*unknown table 'bogus'",
        ),
        (
            "unknown column",
            edit_row("sessions", lambda r: r.update(colour=1)),
            r"unknown column 'colour' of table 'sessions'",
        ),
        ("missing end", lambda ls: ls[:-1], r"_end trailer is missing"),
        (
            "truncated",
            lambda ls: [*ls[:-2], ls[-2][: len(ls[-2]) // 2]],
            r"not valid JSON \(the file looks truncated\)",
        ),
        (
            "malformed middle",
            replace(5, '{"table": "sessions", "row": {\n'),
            r"line 6 .*not valid JSON",
        ),
        ("blank line", replace(4, "\n"), r"line 5 .*empty"),
        ("bad utf-8", lambda ls: [*ls[:2], "\udcff\n", *ls[3:]], r"line 3 .*UTF-8"),
        (
            "wrong count",
            lambda ls: [*ls[:-1], '{"table":"_end","rows":3}\n'],
            r"says the file has 3 rows",
        ),
        ("after end", lambda ls: [*ls, ls[2]], r"after the _end"),
        ("not a row", replace(2, '["sessions"]\n'), r"line 3 .*not a"),
        (
            "nested value",
            edit_row("lessons", lambda r: r.update(tag=["a"])),
            r"has a list in lessons.tag",
        ),
        (
            "bad base64",
            edit_row("chunks", lambda r: r.update(embedding="%%%")),
            r"invalid base64 in chunks.embedding",
        ),
        (
            "vector length",
            edit_row("chunks", lambda r: r.update(embedding_dim=3)),
            r"does not match embedding_dim 3",
        ),
        (
            "dangling reference",
            edit_row("messages", lambda r: r.update(session_id=999)),
            r"messages row \d+ refers to a missing sessions row",
        ),
        (
            "duplicate id",
            lambda ls: [*ls, ls[-2]][:-1] and _dup("sessions", ls),
            r"cannot be stored in sessions",
        ),
        (
            "null not null",
            edit_row("facts", lambda r: r.update(value=None)),
            r"cannot be stored in facts",
        ),
        (
            "stray meta",
            edit_row("meta", lambda r: r.update(key="schema_version")),
            r"meta key 'schema_version'",
        ),
        ("empty file", lambda ls: [], r"empty"),
    ]


@pytest.mark.parametrize(
    ("name", "mutate", "message"), [pytest.param(*m, id=m[0]) for m in _mutations()]
)
def test_damaged_files_are_rejected_and_the_target_is_untouched(
    rich: elastimem.Elastimem,
    make_store: Factory,
    tmp_path: Path,
    name: str,
    mutate: Callable[[list[str]], list[str]],
    message: str,
) -> None:
    target = make_store(tmp_path / "target.db")
    lines = mutate(for_target(export_lines(rich), target))
    data = "".join(lines).encode("utf-8", "surrogateescape")
    before = full_dump(target)
    with pytest.raises(ImportFormatError, match=message):
        target.import_(io.BytesIO(data))
    assert full_dump(target) == before
    # The good file still imports into the same (untouched) store.
    target.import_(io.BytesIO(as_data(export_lines(rich), target)))


def test_line_numbers_name_the_damaged_line(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    lines = export_lines(rich)
    bad = len(lines) - 3
    lines[bad] = lines[bad][:-10] + "\n"
    path = tmp_path / "bad.jsonl"
    target = make_store(tmp_path / "t.db")
    path.write_text("".join(for_target(lines, target)), "utf-8")
    with pytest.raises(ImportFormatError) as info:
        target.import_(path)
    assert re.search(rf"\bline {bad + 1}\b", str(info.value))


def test_non_empty_targets_are_refused(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    lines = export_lines(rich)
    for setup, what in (
        (lambda m: m.remember("a", "b"), "facts"),
        (lambda m: m.record_turn("hello", "hi"), "sessions"),
        (lambda m: m.add_lesson("be brief"), "lessons"),
        (lambda m: m.remember("a", "unknown", source="auto"), "quarantine"),
    ):
        target = make_store(tmp_path / f"{what}.db")
        setup(target)
        before = full_dump(target)
        with pytest.raises(ImportFormatError, match=f"already holds {what}"):
            target.import_(io.BytesIO(as_data(lines, target)))
        assert full_dump(target) == before


def test_leftover_jobs_are_replaced_but_running_ones_block(
    rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path
) -> None:
    target = make_store(tmp_path / "target.db")
    data = as_data(export_lines(rich), target)
    now = now_ts()
    with connect(target) as conn:
        conn.execute(
            "INSERT INTO jobs (kind, state, priority, owner_pid, owner_host, created_at, "
            "updated_at) VALUES ('consolidate', 'running', 4, 1, 'elsewhere', ?, ?)",
            (now, now),
        )
    with pytest.raises(ImportFormatError, match="background job"):
        target.import_(io.BytesIO(data))
    with connect(target) as conn:
        conn.execute("UPDATE jobs SET state = 'queued'")
    target.import_(io.BytesIO(data))
    with connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM jobs WHERE kind = 'consolidate'").fetchone() == (
            0,
        )


def test_user_id_rule(rich: elastimem.Elastimem, make_store: Factory, tmp_path: Path) -> None:
    data = "".join(export_lines(rich)).encode("utf-8")  # records its owner ('alice' on a file)
    bob = make_store(tmp_path / "bob.db")
    if not is_postgres(bob):  # a store on PostgreSQL records its user from its open
        with connect(bob) as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES ('user_id', 'bob')")
    before = full_dump(bob)
    with pytest.raises(ImportFormatError, match=f"belongs to user '{owner(rich)}'"):
        bob.import_(io.BytesIO(data))
    assert full_dump(bob) == before
    # The owner's own store takes it (on PostgreSQL: the user's export moved into a file).
    same = elastimem.open_user(tmp_path / "users", owner(rich), disable_builtin_embedder=True)
    try:
        same.import_(io.BytesIO(data))
        assert same.facts()["favorite_color"] == "green"
    finally:
        same.close()


@pytest.mark.parametrize("scale", [float("nan"), 0.0, 1000.0])
def test_an_import_with_a_vector_that_is_not_unit_is_refused(
    rich: elastimem.Elastimem, make_store: Any, tmp_path: Path, scale: float
) -> None:
    """One NaN or scaled vector skewed every search of its label (HNSW scored all 0)."""
    lines = export_lines(rich)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("table") == "chunks" and obj["row"].get("embedding"):
            vector = np.frombuffer(base64.b64decode(obj["row"]["embedding"]), "<f4") * scale
            obj["row"]["embedding"] = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            lines[i] = json.dumps(obj) + "\n"
            bad_line = i + 1
            break
    target = make_store(tmp_path / "target.db")
    with pytest.raises(ImportFormatError, match=rf"line {bad_line} .*not a finite unit vector"):
        target.import_(io.BytesIO(as_data(lines, target)))
    assert target.stats()["chunks"] == 0


@pytest.mark.parametrize("scale", [float("nan"), 1000.0])
def test_an_import_with_a_fact_vector_that_is_not_unit_is_refused_and_named(
    rich: elastimem.Elastimem, make_store: Any, tmp_path: Path, scale: float
) -> None:
    """Fact vectors are checked like chunk vectors, and the refusal names what it checked."""
    assert rich.drain(10) and rich.stats()["embedded_facts"] > 0
    lines = export_lines(rich)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj.get("table") == "fact_vectors":
            vector = np.frombuffer(base64.b64decode(obj["row"]["embedding"]), "<f4") * scale
            obj["row"]["embedding"] = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            lines[i] = json.dumps(obj) + "\n"
            bad_line = i + 1
            break
    target = make_store(tmp_path / "target.db")
    with pytest.raises(
        ImportFormatError, match=rf"line {bad_line} .*a fact vector .*not a finite unit vector"
    ):
        target.import_(io.BytesIO(as_data(lines, target)))
    assert target.stats()["facts"] == 0


def test_bad_arguments(mem: elastimem.Elastimem, tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="cannot read"):
        mem.import_(tmp_path / "missing.jsonl")
    with pytest.raises(ImportFormatError):
        mem.import_(42)
    with pytest.raises(elastimem.ConfigError):
        mem.import_(io.BytesIO(b""), progress="nope")  # type: ignore[arg-type]
    with pytest.raises(elastimem.ConfigError):  # a bad argument, not a bad export file
        mem.export(42)
    with pytest.raises(elastimem.StoreError):
        mem.export(tmp_path / "no" / "such" / "folder" / "x.jsonl")
    # A folder or an empty path: a clear error, not a raw OSError, and no temp file left.
    (tmp_path / "a_folder").mkdir()
    with pytest.raises(elastimem.StoreError, match="is a folder"):
        mem.export(tmp_path / "a_folder")
    with pytest.raises(elastimem.ConfigError, match="cannot export"):
        mem.export("")
    assert not [p for p in tmp_path.rglob(".elastimem-export-*")]


def test_a_failed_export_leaves_no_partial_file(
    rich: elastimem.Elastimem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem import portability

    target = tmp_path / "out.jsonl"
    target.write_text("previous export\n")
    real = portability._dumps
    calls = 0

    def flaky(obj: Any) -> str:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise OSError(28, "No space left on device")
        return real(obj)

    monkeypatch.setattr(portability, "_dumps", flaky)
    with pytest.raises(elastimem.StoreError, match="could not be written"):
        rich.export(target)
    assert target.read_text() == "previous export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".elastimem")] == []


@pytest.mark.parametrize("onto", ["store", "wal", "symlink", "hardlink"])
def test_export_onto_the_store_itself_is_refused_and_the_store_survives(
    tmp_path: Path, onto: str
) -> None:
    path = tmp_path / "m.db"
    with elastimem.open(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("pet", "a cat named Pixel")
        target = {"store": path, "wal": Path(str(path) + "-wal")}.get(onto)
        if onto == "symlink":
            target = tmp_path / "link.jsonl"
            target.symlink_to(path)
        elif onto == "hardlink":
            target = tmp_path / "hard.jsonl"
            os.link(path, target)
        assert target is not None
        with pytest.raises(elastimem.ConfigError, match="store itself"):
            mem.export(str(target))
        assert mem.facts() == {"pet": "a cat named Pixel"}
    with elastimem.open(str(path), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"pet": "a cat named Pixel"}
