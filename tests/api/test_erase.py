"""Erase (SPEC §5.16): accurate counts, and the erased text gone from every table, the FTS
index, the vector index, job payloads and the raw bytes of the file and its WAL."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import ConfigError
from elastimem.clock import now_ts
from elastimem.index.vectors import VectorIndex
from elastimem.portability import ERASE_COUNT_KEYS
from tests.conftest import HashEmbedder, wait_until
from tests.rows import connect, file_connection, is_postgres
from tests.spies import instances_of

# Lowercase ASCII with no suffix the porter stemmer would strip, so the FTS term, the stored
# text and the raw bytes all carry exactly this string.
MARKER = "zqxjvorblax"
KEEP = "tomatoes"

Factory = Callable[..., elastimem.Elastimem]


def checkpoint(path: str) -> None:
    """Move the WAL's pages into the main file, from a connection of the test's own."""
    conn = file_connection(path, timeout=10)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def raw_hits(store: Any, needle: str = MARKER) -> dict[str, int]:
    """Occurrences of the needle (any case) in the file and its -wal, read as bytes.

    On PostgreSQL the server's files (dead row versions until VACUUM, the WAL, backups) are
    the operator's (README, "Erase"); what the library answers for is every row it can still
    read: ``{"db": n}`` counts the user's ``table.column`` cells holding the needle, in every
    table of the database."""
    if is_postgres(store):
        return {"db": len(table_hits(store, needle))}
    path = store if isinstance(store, (str, Path)) else store.path
    found: dict[str, int] = {}
    for suffix in ("", "-wal"):
        try:
            data = Path(str(path) + suffix).read_bytes()
        except FileNotFoundError:
            continue
        found[suffix or "db"] = data.lower().count(needle.lower().encode("utf-8"))
    return found


def _cell_holds(value: object, needle: str) -> bool:
    text = bytes(value).decode("latin-1") if isinstance(value, (bytes, memoryview)) else str(value)
    return needle.lower() in text.lower()


def table_hits(store: Any, needle: str = MARKER) -> list[str]:
    """Every ``table.column`` of every table (FTS shadow tables included; on PostgreSQL every
    table of the database, as the store's user sees it) holding the needle."""
    if is_postgres(store):
        with connect(store) as pg:
            names = [
                r[0]
                for r in pg.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                )
            ]
            hits: set[str] = set()
            for name in names:
                cursor = pg.execute(f'SELECT * FROM "{name}"')
                columns = [d[0] for d in cursor.description]
                for row in cursor:
                    for column, value in zip(columns, row, strict=True):
                        if _cell_holds(value, needle):
                            hits.add(f"{name}.{column}")
            return sorted(hits)
    conn = file_connection(store if isinstance(store, (str, Path)) else store.path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        hits = set()
        for name in names:
            try:
                cursor = conn.execute(f'SELECT * FROM "{name}"')
            except sqlite3.Error:
                continue  # a virtual table whose module is missing
            columns = [d[0] for d in cursor.description]
            for row in cursor:
                for column, value in zip(columns, row, strict=True):
                    if _cell_holds(value, needle):
                        hits.add(f"{name}.{column}")
        return sorted(hits)
    finally:
        conn.close()


# The keyword index of each table: FTS5 on a file, the postings tables on PostgreSQL.
POSTINGS = {"chunks_fts": "chunk_terms", "facts_fts": "fact_terms"}


def fts_terms(store: Any, table: str) -> set[str]:
    """The terms FTS5 holds in its index segments (not only the visible documents); on
    PostgreSQL the terms of the table's keyword postings."""
    if is_postgres(store):
        with connect(store) as pg:
            return {str(r[0]) for r in pg.execute(f"SELECT term FROM {POSTINGS[table]}")}
    conn = file_connection(store if isinstance(store, (str, Path)) else store.path)
    try:
        conn.execute(f"CREATE VIRTUAL TABLE temp.v_{table} USING fts5vocab(main, {table}, 'row')")
        return {str(r[0]) for r in conn.execute(f"SELECT term FROM temp.v_{table}")}
    finally:
        conn.close()


def add_graph(mem: elastimem.Elastimem, keep_chunk: int, erase_chunk: int) -> None:
    """Three nodes: one known only from the erased session, one shared, one kept by an edge."""
    now = now_ts()  # fresh, so no consolidation decays them
    with connect(mem) as conn:
        self_id = conn.execute("SELECT id FROM graph_nodes WHERE type = 'self'").fetchone()[0]

        def node(name: str, kind: str) -> int:
            cur = conn.execute(
                "INSERT INTO graph_nodes (type, canonical_name, created_at, updated_at) "
                "VALUES (?, ?, ?, ?)",
                (kind, name, now, now),
            )
            return int(cur.lastrowid or 0)

        secret = node(MARKER, "person")
        garden = node("garden", "thing")
        shed = node("shed", "thing")
        edges = [
            (self_id, secret, "knows", erase_chunk),
            (garden, shed, "contains", keep_chunk),
        ]
        for source, target, relation, chunk in edges:
            conn.execute(
                "INSERT INTO graph_edges (source_node, target_node, relationship, created_at, "
                "last_seen, source_chunk_id) VALUES (?, ?, ?, ?, ?, ?)",
                (source, target, relation, now, now, chunk),
            )
        conn.execute(
            "INSERT INTO graph_merge_reviews (type_a, name_a, type_b, name_b, verdict, "
            "reviewed_at) VALUES ('person', ?, 'person', 'zed', 'different', ?)",
            (MARKER, now),
        )
        for node_id, chunk in [
            (secret, erase_chunk),
            (garden, erase_chunk),
            (garden, keep_chunk),
            (shed, erase_chunk),
        ]:
            conn.execute(
                "INSERT INTO graph_mentions (node_id, chunk_id, created_at) VALUES (?, ?, ?)",
                (node_id, chunk, now),
            )


def add_job(mem: elastimem.Elastimem, session_id: int | None, payload: dict[str, Any]) -> None:
    """A job no worker will claim (owned by another host), carrying text in its payload."""
    now = now_ts()
    with connect(mem) as conn:
        conn.execute(
            "INSERT INTO jobs (kind, state, session_id, payload, priority, owner_pid, "
            "owner_host, created_at, updated_at) VALUES ('rolling_summary', 'queued', ?, ?, 2, "
            "1, 'elsewhere.example', ?, ?)",
            (session_id, json.dumps(payload), now, now),
        )


def build(make_store: Factory, embedder: HashEmbedder) -> tuple[elastimem.Elastimem, int, int]:
    """A store with a kept session and a session full of MARKER. Returns (mem, keep, erase)."""
    mem = make_store(embedder=embedder)
    keep = mem.begin_session(at="2025-01-01T10:00:00Z")
    mem.record_turn(f"I grow {KEEP} in my garden and I live in Austin.", "Lovely garden.")
    mem.record_turn("The shed is full of tools for the garden.", "Handy.")
    mem.remember("favorite_color", "teal")
    erase = mem.begin_session(at="2025-02-01T10:00:00Z")
    mem.record_turn(f"My neighbour {MARKER} lends me tools for the garden.", f"Say hi to {MARKER}.")
    mem.record_turn("I moved to Zqxjvorblaxton last week.", "Congratulations on the move!")
    mem.record_turn(f"{MARKER} " * 300, "That is a long message.")  # spans several chunks
    mem.remember("secret_word", MARKER)
    mem.remember("secret_word", MARKER + "two")
    mem.remember("secret_word", "unknown", source="auto")  # quarantined: placeholder
    mem.remember("location", f"{MARKER} ai assistant", source="auto")  # quarantined
    mem.report_evictions([(f"we talked about {MARKER} and the garden", "yes")])
    assert mem.drain(10)
    with connect(mem) as conn:
        versions = [
            r[0] for r in conn.execute("SELECT id FROM facts WHERE key = 'location' ORDER BY id")
        ]
        assert len(versions) == 2  # Austin (kept session), Zqxjvorblaxton (erased session)
        conn.execute(
            "INSERT INTO fact_reviews (old_fact_id, new_fact_id, verdict, reviewed_at) "
            "VALUES (?, ?, 'kept', '2025-02-02T00:00:00.000000Z')",
            versions,
        )
        keep_chunk = conn.execute(
            "SELECT min(id) FROM chunks WHERE session_id = ?", (keep,)
        ).fetchone()[0]
        erase_chunk = conn.execute(
            "SELECT min(id) FROM chunks WHERE session_id = ?", (erase,)
        ).fetchone()[0]
    mem.end_session()
    add_graph(mem, keep_chunk, erase_chunk)
    add_job(mem, erase, {"turns": [[f"evicted {MARKER}", "ok"]]})
    add_job(mem, None, {"backfill": True})
    return mem, keep, erase


def expected_session_counts(mem: elastimem.Elastimem, session_id: int) -> dict[str, int]:
    with connect(mem) as conn:

        def one(sql: str, *params: object) -> int:
            return int(conn.execute(sql, params).fetchone()[0])

        keys = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT key FROM facts WHERE origin_session_id = ?", (session_id,)
            )
        ]
        marks = ",".join("?" * len(keys))
        return {
            "facts": one(f"SELECT count(*) FROM facts WHERE key IN ({marks})", *keys),
            "fact_keys": len(keys),
            "sessions": 1,
            "messages": one("SELECT count(*) FROM messages WHERE session_id = ?", session_id),
            "chunks": one("SELECT count(*) FROM chunks WHERE session_id = ?", session_id),
            # The chunks' vectors and those of the erased keys' facts.
            "vectors": one(
                "SELECT count(*) FROM chunks WHERE session_id = ? AND embedding IS NOT NULL",
                session_id,
            )
            + one(
                "SELECT count(*) FROM fact_vectors WHERE fact_id IN "
                f"(SELECT id FROM facts WHERE key IN ({marks}))",
                *keys,
            ),
            "graph_edges": 1,
            "graph_nodes": 1,
            "graph_mentions": 3,
            "quarantine": one(f"SELECT count(*) FROM quarantine WHERE key IN ({marks})", *keys),
            "jobs": one("SELECT count(*) FROM jobs WHERE session_id = ?", session_id),
        }


@pytest.mark.plain_file  # reads the file's plain bytes: an encrypted file never shows them
def test_erase_session_leaves_no_trace_anywhere(
    make_store: Factory, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexes = instances_of(monkeypatch, VectorIndex)
    mem, keep, erase = build(make_store, embedder)
    assert mem.drain(10)
    expected = expected_session_counts(mem, erase)
    assert expected["vectors"] > expected["chunks"] >= 3  # fact vectors too
    assert expected["facts"] == 4 and expected["fact_keys"] == 2  # secret_word ×2, location ×2
    assert expected["quarantine"] == 2 and expected["jobs"] == 1
    # The test means something only if the marker was there to begin with.
    assert sum(raw_hits(mem).values()) > 0
    assert mem.recall(MARKER, kinds=["chunk"])

    counts = mem.erase(session_id=erase, include_facts=True)

    assert counts == expected
    assert list(counts) == list(ERASE_COUNT_KEYS)
    # The raw file and its WAL: checked while the store is still open, and after closing.
    assert raw_hits(mem) in ({"db": 0}, {"db": 0, "-wal": 0})
    # Recall through every leg (FTS, vectors, graph) finds nothing of it.
    assert mem.recall(MARKER) == []
    assert all(h.session_id != erase for h in mem.recall("garden tools neighbour", k=20))
    assert indexes[-1].resident_rows == expected_remaining_vectors(mem)
    # What must survive did.
    assert mem.facts() == {"favorite_color": "teal"}
    kept_hits = mem.recall(KEEP, kinds=["chunk"])
    assert kept_hits and {h.session_id for h in kept_hits} == {keep}
    with connect(mem) as conn:
        names = {r[0] for r in conn.execute("SELECT canonical_name FROM graph_nodes")}
        assert names == {"@self", "garden", "shed"}
        assert conn.execute("SELECT count(*) FROM graph_mentions").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM fact_reviews").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1  # the backfill
        assert conn.execute("SELECT count(*) FROM ann_index").fetchone()[0] == 0
        event = conn.execute(
            "SELECT detail FROM events WHERE kind = 'erase' ORDER BY id DESC LIMIT 1"
        ).fetchone()[0]
    # The audit event carries counts only.
    assert json.loads(event) == counts
    mem.close()
    assert raw_hits(mem) == {"db": 0}
    assert table_hits(mem) == []
    for table in ("chunks_fts", "facts_fts"):
        assert not any(MARKER in term for term in fts_terms(mem, table))
    if is_postgres(mem):
        return  # no FTS5 to MATCH; the server keeps its own integrity and foreign keys
    conn = file_connection(mem.path)
    try:
        for table in ("chunks_fts", "facts_fts"):
            matches = conn.execute(
                f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (MARKER,)
            ).fetchone()[0]
            assert matches == 0
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def expected_remaining_vectors(mem: elastimem.Elastimem) -> int:
    with connect(mem) as conn:
        return int(
            conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0]
        )


def test_erase_session_without_facts_keeps_them(
    make_store: Factory, embedder: HashEmbedder
) -> None:
    mem, _keep, erase = build(make_store, embedder)
    counts = mem.erase(session_id=erase)
    assert counts["facts"] == counts["fact_keys"] == counts["quarantine"] == 0
    assert counts["sessions"] == 1 and counts["chunks"] > 0
    # The facts stay (their origin is cleared); the transcript text is gone from the file.
    assert mem.facts()["secret_word"] == MARKER + "two"
    with connect(mem) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM facts WHERE origin_session_id IS NOT NULL AND key = "
                "'secret_word'"
            ).fetchone()[0]
            == 0
        )
        chunk_text = [r[0] for r in conn.execute("SELECT text FROM chunks")]
    assert not any(MARKER in text for text in chunk_text)
    assert [h.text for h in mem.recall(MARKER + "two", kinds=["fact"])] == [
        f"secret_word: {MARKER}two"
    ]
    assert not any(MARKER in h.text for h in mem.recall(MARKER, kinds=["chunk"], k=50))


def test_erase_key_removes_every_version_review_and_quarantine_row(
    make_store: Factory, embedder: HashEmbedder
) -> None:
    mem, _keep, erase = build(make_store, embedder)
    mem.remember("location", "Dallas")  # a third version
    assert len(mem.fact_history("location")) == 3
    assert mem.drain(10)
    with connect(mem) as conn:
        vectors = conn.execute(
            "SELECT count(*) FROM fact_vectors WHERE fact_id IN "
            "(SELECT id FROM facts WHERE key = 'location')"
        ).fetchone()[0]
    assert vectors >= 1  # Dallas, the live version, at least
    counts = mem.erase(key="Location")  # normalised like every key
    assert counts == {
        **dict.fromkeys(ERASE_COUNT_KEYS, 0),
        "facts": 3,
        "fact_keys": 1,
        "quarantine": 1,
        "vectors": vectors,
    }
    assert mem.fact_history("location") == []
    assert mem.timeline("location").versions == ()
    assert "location" not in mem.facts()
    assert mem.facts()["secret_word"] == MARKER + "two"  # other keys untouched
    assert all(q["key"] != "location" for q in mem.quarantine_entries(100))
    assert mem.sessions(5)[0]["id"] == erase  # sessions untouched
    mem.close()
    hits = table_hits(mem, "zqxjvorblaxton")
    # The moved-to town survives only in the transcript of the session that mentioned it
    # (and in that transcript's search index: FTS5's, or the postings on PostgreSQL).
    assert {h.split(".")[0] for h in hits} <= {
        "chunks",
        "messages",
        "chunks_fts",
        "chunks_fts_data",
        "chunk_terms",
    }
    assert {"chunks.text", "messages.content"} <= set(hits)
    assert "dallas" not in fts_terms(mem, "facts_fts")
    assert raw_hits(mem, "Dallas") == {"db": 0}


def test_unknown_targets_erase_nothing(make_store: Factory, embedder: HashEmbedder) -> None:
    mem, _keep, _erase = build(make_store, embedder)
    before = mem.stats()
    zeros = dict.fromkeys(ERASE_COUNT_KEYS, 0)
    assert mem.erase(key="no_such_key") == zeros
    assert mem.erase(session_id=987654) == zeros
    assert mem.erase(key="!!!") == zeros  # normalises to an empty key
    after = mem.stats()
    for name in (
        "facts",
        "fact_versions",
        "sessions",
        "messages",
        "chunks",
        "quarantine",
        "graph_nodes",
        "graph_edges",
        "embedded_chunks",
    ):
        assert after[name] == before[name], name


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"key": "a", "session_id": 1}, {"key": 5}, {"session_id": "1"}, {"session_id": True}],
)
def test_erase_needs_exactly_one_valid_target(mem: elastimem.Elastimem, kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        mem.erase(**kwargs)


def test_erasing_the_open_session_closes_it(make_store: Factory, embedder: HashEmbedder) -> None:
    mem = make_store(embedder=embedder)
    mem.record_turn(f"hello {MARKER}", "hi")
    current = mem.session_id
    assert current is not None
    counts = mem.erase(session_id=current)
    assert counts["sessions"] == 1 and counts["messages"] == 2
    assert mem.session_id is None
    mem.record_turn("a new start", "welcome")
    assert mem.session_id is not None  # a fresh session (its id may reuse the erased one)
    assert [(s["title"], s["message_count"]) for s in mem.sessions()] == [("a new start", 2)]
    assert raw_hits(mem) in ({"db": 0}, {"db": 0, "-wal": 0})


def test_a_fact_is_stored_after_another_instance_erased_the_open_session(
    make_store: Factory, store_path: Any
) -> None:
    """The instance still holds the erased session's id: its facts are stored without an
    origin (the foreign key refused the write, and remember raised StoreError)."""
    mine = make_store(store_path)
    other = make_store(store_path)
    mine.record_turn("hello there", "hi")
    assert other.erase(session_id=mine.session_id)["sessions"] == 1
    assert mine.remember("favorite_color", "teal") == (True, "stored")
    assert other.facts() == {"favorite_color": "teal"}
    assert other.fact_history("favorite_color")[0].value == "teal"


def test_another_instances_erase_of_my_session_drops_my_digest(
    make_store: Factory, store_path: Any
) -> None:
    """Its rolling summary quoted the erased turns in the next prompt."""
    mine = make_store(store_path, tier_override="lite")
    other = make_store(store_path)
    mine.begin_session()
    mine.report_evictions([("my bank pin is ZQXMARKER 4921", "noted")])
    assert "ZQXMARKER" in mine.build_context("").rolling_summary
    other.erase(session_id=mine.session_id)
    assert mine.build_context("").rolling_summary == "" and mine.session_id is None


def test_erase_in_memory_store(memory_store: elastimem.Elastimem) -> None:
    memory_store.record_turn(f"remember {MARKER}", "ok")
    memory_store.remember("code", MARKER)
    sid = memory_store.session_id
    assert sid is not None
    counts = memory_store.erase(session_id=sid, include_facts=True)
    assert (counts["sessions"], counts["facts"], counts["messages"]) == (1, 1, 2)
    assert memory_store.recall(MARKER) == []


@pytest.mark.sqlite_only  # ELASTIMEM_DISABLE_FTS turns off SQLite's FTS5; PostgreSQL has none
def test_erase_with_fts_off_empties_the_stale_index(
    make_store: Factory, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_store()
    mem.record_turn(f"my neighbour {MARKER} grows {KEEP}", "nice")
    sid = mem.session_id
    mem.begin_session()
    mem.record_turn(f"I also like {KEEP} soup", "yum")
    mem.close()
    monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    off = make_store()
    assert not off.fts_enabled
    assert off.erase(session_id=sid)["chunks"] == 1
    off.close()
    assert raw_hits(store_path) == {"db": 0}
    assert table_hits(store_path) == []
    monkeypatch.delenv("ELASTIMEM_DISABLE_FTS")
    on = make_store()
    assert on.fts_enabled
    hits = on.recall(KEEP, kinds=["chunk"])
    assert [h.text for h in hits] == ["User: I also like tomatoes soup\nAssistant: yum"]
    assert on.recall(MARKER) == []


@pytest.mark.plain_file  # reads the file's plain bytes: an encrypted file never shows them
@pytest.mark.parametrize("round_", range(8))
def test_erase_leaves_no_copy_after_a_busy_workload(
    make_store: Factory, tmp_path: Path, round_: int
) -> None:
    # A realistic mix: long turns before and after, the worker embedding concurrently, facts
    # rewritten. Measured before VACUUM was added to erase: about one run in eight left an
    # old copy of an erased chunk in the free space of a live page (written before the erase,
    # so secure_delete never saw it). Each round is a fresh store.
    mem = make_store(tmp_path / f"busy{round_}.db", embedder=HashEmbedder())
    mem.begin_session()
    for i in range(30):
        mem.record_turn(f"filler turn {i} about gardens and {KEEP} " * 5, "ok " * 20)
    sid = mem.begin_session()
    for i in range(5):
        mem.record_turn(f"my secret is {MARKER} number {i}", f"noted {MARKER}")
    mem.remember("secret_code", f"{MARKER}code")
    mem.remember("secret_code", f"{MARKER}code2")
    mem.begin_session()
    for i in range(30):
        mem.record_turn(f"more filler {i} about bikes " * 5, "sure " * 20)
    assert mem.drain(20)
    assert mem.erase(session_id=sid, include_facts=True)["facts"] == 2
    assert raw_hits(mem) in ({"db": 0}, {"db": 0, "-wal": 0})


class DenseEmbedder:
    """Dense, distinct vectors (every component set), so a vector's bytes are findable in
    the raw file: the bag-of-words double's vectors are mostly zero bytes."""

    def __call__(self, texts: list[str]) -> list[list[float]]:
        import hashlib

        import numpy as np

        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vector = np.random.default_rng(seed).standard_normal(32)
            rows.append((vector / np.linalg.norm(vector)).tolist())
        return rows


def vector_hits(store: Any, blobs: dict[str, bytes]) -> dict[str, list[str]]:
    """Which of the vectors (by name) the file and its -wal hold, as raw bytes; on PostgreSQL
    (whose files are the operator's, see ``raw_hits``) which any row of the user's, in any
    table of the database, still holds."""
    if is_postgres(store):
        held: set[str] = set()
        with connect(store) as pg:
            tables = pg.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
            for (name,) in tables:
                for row in pg.execute(f'SELECT * FROM "{name}"'):
                    cells = [bytes(v) for v in row if isinstance(v, (bytes, memoryview))]
                    held |= {key for key, blob in blobs.items() if any(blob in c for c in cells)}
        return {"db": sorted(held)}
    path = store if isinstance(store, (str, Path)) else store.path
    found: dict[str, list[str]] = {}
    for suffix in ("", "-wal"):
        try:
            data = Path(str(path) + suffix).read_bytes()
        except FileNotFoundError:
            continue
        found[suffix or "db"] = sorted(name for name, blob in blobs.items() if blob in data)
    return found


@pytest.mark.plain_file  # reads the file's plain bytes: an encrypted file never shows them
def test_erase_leaves_no_fact_vector_in_the_file_or_its_wal(make_store: Factory) -> None:
    mem = make_store(embedder=DenseEmbedder())
    mem.remember("secret_word", MARKER)
    mem.remember("favorite_color", "teal")
    mem.begin_session()
    mem.record_turn("I'm allergic to peanuts.", "Noted.")
    session_id = mem.sessions(1)[0]["id"]
    mem.end_session()

    def embedded() -> bool:
        mem.drain(0.2)
        return bool(mem.stats()["embedded_facts"] == 3)

    assert wait_until(embedded, 20)
    with connect(mem) as conn:
        blobs = {
            str(r[0]): bytes(r[1])
            for r in conn.execute(
                "SELECT f.key, v.embedding FROM fact_vectors v JOIN facts f ON f.id = v.fact_id"
            )
        }
    assert sorted(blobs) == ["allergies", "favorite_color", "secret_word"]
    if not is_postgres(mem):
        checkpoint(mem.path)
    assert vector_hits(mem, blobs)["db"] == sorted(blobs)  # findable before the erase
    assert mem.erase(key="secret_word")["vectors"] == 1
    assert mem.erase(session_id=session_id, include_facts=True)["vectors"] >= 1
    assert vector_hits(mem, blobs) in (
        {"db": ["favorite_color"]},
        {"db": ["favorite_color"], "-wal": []},
    )
    mem.close()
    assert vector_hits(mem, blobs) == {"db": ["favorite_color"]}
