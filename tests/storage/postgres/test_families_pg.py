"""The transcript, facts and lessons families on PostgreSQL: what the contract suite cannot see
from above the seam (keyword postings written with the rows, per-user scoping, row locks,
a refused insert inside a transaction) (issue #18)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from elastimem import storage
from elastimem.errors import StoreError
from elastimem.storage.postgres import database as postgres_database
from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-01-02T00:00:00.000000Z"
TEXTS = ["The runners were running, RUNNING!", "Café au lait, café; naïve résumé", ""]


def _session(tx: Any, above: int = 0) -> int:
    return int(
        tx.transcript.insert_session(
            above=above,
            started_at=T0,
            host_tag=None,
            owner_pid=1,
            owner_host="h",
            heartbeat_at=T0,
            backdated=False,
        )
    )


def _chunks(tx: Any, texts: list[str]) -> list[int]:
    session_id = _session(tx)
    message = tx.transcript.insert_message(
        session_id, 1, "user", "m", created_at=T0, token_estimate=1
    )
    return list(tx.transcript.insert_chunks(session_id, message, message, texts, created_at=T0))


def _fact(tx: Any, key: str, value: str) -> int:
    return int(
        tx.facts.insert_version(
            key,
            value,
            category="note",
            source="explicit",
            importance=0.5,
            created_at=T0,
            valid_from=T0,
            origin_session_id=None,
        )
    )


def _sqlite_postings(path: Path, table: str) -> dict[int, dict[str, int]]:
    """row id -> term -> frequency, as SQLite's FTS5 index of ``table`` holds them."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, {table}, instance)")
        found: dict[int, dict[str, int]] = {}
        for term, doc, n in conn.execute("SELECT term, doc, count(*) FROM v GROUP BY term, doc"):
            found.setdefault(int(doc), {})[str(term)] = int(n)
        return found
    finally:
        conn.close()


def _pg_postings(tx: Any, table: str, column: str) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    for term, row_id, tf in tx.conn.execute(f"SELECT term, {column}, tf FROM {table}"):
        found.setdefault(int(row_id), {})[str(term)] = int(tf)
    return found


def test_postings_are_written_with_chunks_and_facts_as_sqlite_fts5_has_them(
    open_pg: Any, tmp_path: Path
) -> None:
    sqlite_db = storage.open_database(tmp_path / "same.db")
    try:
        with sqlite_db.atomic() as tx:
            sqlite_chunks = _chunks(tx, TEXTS)
            sqlite_fact = _fact(tx, "favourite_drink", "Cafés au lait, running")
    finally:
        sqlite_db.close()
    want_chunks = _sqlite_postings(tmp_path / "same.db", "chunks_fts")
    want_fact = _sqlite_postings(tmp_path / "same.db", "facts_fts")[sqlite_fact]

    database = open_pg()
    with database.atomic() as tx:
        chunk_ids = _chunks(tx, TEXTS)
        fact_id = _fact(tx, "favourite_drink", "Cafés au lait, running")
    with database.read() as tx:
        chunks = _pg_postings(tx, "chunk_terms", "chunk_id")
        facts = _pg_postings(tx, "fact_terms", "fact_id")
        lengths = dict(tx.conn.execute("SELECT id, term_count FROM chunks").fetchall())
        (fact_length,) = tx.conn.execute("SELECT term_count FROM facts").fetchone()
    for mine, theirs in zip(chunk_ids, sqlite_chunks, strict=True):
        assert chunks.get(mine, {}) == want_chunks.get(theirs, {})
        assert lengths[mine] == sum(want_chunks.get(theirs, {}).values())
    assert lengths[chunk_ids[2]] == 0  # an empty chunk is a row of no tokens
    assert facts == {fact_id: want_fact}
    assert fact_length == sum(want_fact.values())


def test_a_refused_fact_leaves_the_write_usable(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        _fact(tx, "city", "Paris")
        with pytest.raises(StoreError, match="already has a live version"):
            _fact(tx, "city", "Lyon")
        _fact(tx, "pet", "cat")  # the transaction goes on, as it does on SQLite
    with database.read() as tx:
        assert tx.facts.shown_values() == {"city": "Paris", "pet": "cat"}


def test_each_user_has_its_own_rows_and_ids(open_pg: Any) -> None:
    alice, bob = open_pg(), open_pg()
    with alice.atomic() as tx:
        for _ in range(3):
            _session(tx)
        _fact(tx, "city", "Paris")
        tx.lessons.add_or_revive("check the units", "a", T0)
        for n in range(3):
            tx.facts.add_quarantine(at=T0, key=f"a{n}", value=None, reason="r", source=None)
    with bob.atomic() as tx:
        assert _session(tx) == 1  # session ids count per user
        assert tx.facts.live_version("city") is None
        _fact(tx, "city", "Rome")  # one live version per key and user
        tx.lessons.add_or_revive("check the units", None, T1)
        tx.facts.add_quarantine(at=T0, key="b", value=None, reason="r", source=None)
        tx.facts.trim_quarantine(0)
    with alice.read() as tx:
        assert tx.facts.shown_values() == {"city": "Paris"}
        (lesson,) = tx.lessons.most_used(5)
        assert lesson.last_used_at == T0  # bob's use counted for bob only
        assert [e["key"] for e in tx.facts.newest_quarantine(10)] == ["a0", "a1", "a2"]
        assert [row["id"] for row in tx.transcript.recent_sessions(10)] == [3, 2, 1]


def test_newest_messages_reads_a_long_session_page_by_page(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        session_id = _session(tx)
        for turn in range(1, 151):
            for role in ("user", "assistant"):
                tx.transcript.insert_message(
                    session_id, turn, role, f"{role} {turn}", created_at=T0, token_estimate=2
                )
    with database.read() as tx:
        read = [content for _role, content, _tokens in tx.transcript.newest_messages(session_id)]
    assert len(read) == 300
    assert read[:3] == ["assistant 150", "user 150", "assistant 149"]
    assert read[-1] == "user 1"


def test_a_lesson_longer_than_an_index_entry_is_still_one_lesson(open_pg: Any) -> None:
    text = "always " + "x" * 20_000
    database = open_pg()
    with database.atomic() as tx:
        tx.lessons.add_or_revive(text, None, T0)
        tx.lessons.add_or_revive(text, "tag", T1)
        assert tx.lessons.archived_state(text) is False
        assert tx.lessons.archived_state(text + "y") is None
    with database.read() as tx:
        (lesson,) = tx.lessons.most_used(5)
    assert (lesson.text, lesson.last_used_at) == (text, T1)


def test_live_version_in_a_write_locks_the_row_until_it_ends(
    open_pg: Any, postgres_url: str
) -> None:
    database = open_pg()
    with database.atomic() as tx:
        _fact(tx, "city", "Paris")
    outcome: list[str] = []
    locked = threading.Event()

    def other_writer() -> None:
        # A connection of the same user that does not take the user's advisory lock: only
        # the row lock stands between it and the live version.
        locked.wait(10)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT set_config('elastimem.user_id', %s, true)", (database.user_id,))
            conn.execute("SET LOCAL lock_timeout = '200ms'")
            try:
                conn.execute("UPDATE facts SET invalidated_at = %s WHERE key = 'city'", (T1,))
                outcome.append("updated")
            except psycopg.errors.LockNotAvailable:
                outcome.append("blocked")
            conn.execute("ROLLBACK")

    thread = threading.Thread(target=other_writer)
    thread.start()
    with database.atomic() as tx:
        assert tx.facts.live_version("city") is not None
        locked.set()
        thread.join(10)
    assert outcome == ["blocked"]


PHRASE_TEXTS = [
    "Ada Lovelace wrote the notes",
    "lovelace, Ada!",
    "Ada met Lovelace",
    "ADA LOVELACE's engines",
    "running dogs",
    "the dog runs",
    'a "quoted" Ada Lovelace',
]
NAMES = ["Ada Lovelace", "lovelace", "run", "dogs running", "Ada", 'ada" OR "dog', "!!", "dög"]


def _mentioned(database: Any, limit: int) -> dict[str, list[int]]:
    """name -> positions in PHRASE_TEXTS of the chunks ``mention_chunks_naming`` links."""
    found: dict[str, list[int]] = {}
    with database.atomic() as tx:
        chunk_ids = _chunks(tx, PHRASE_TEXTS)
        for name in NAMES:
            node = tx.graph.insert_node("thing", name, [], now=T0, importance=0.5, confidence=0.5)
            added = tx.graph.mention_chunks_naming(node, name, T0, limit)
            linked = {c for c, _n in tx.graph.mentions_among(chunk_ids, [node])}
            assert added == len(linked)
            found[name] = sorted(chunk_ids.index(c) for c in linked)
    return found


@pytest.mark.parametrize("limit", [50, 2, 0, -1])
def test_mention_chunks_naming_matches_what_fts5_phrases_match(
    open_pg: Any, tmp_path: Path, limit: int
) -> None:
    sqlite_db = storage.open_database(tmp_path / "phrases.db")
    try:
        want = _mentioned(sqlite_db, limit)
    finally:
        sqlite_db.close()
    database = open_pg()
    assert _mentioned(database, limit) == want
    if limit == 50:
        assert want["Ada Lovelace"] == [0, 3, 6] and want["run"] == [4, 5]


def test_mention_chunks_naming_pages_through_many_candidates(open_pg: Any) -> None:
    database = open_pg()
    texts = ["tuffy rolls on" if n % 2 else "rolls, then tuffy" for n in range(500)]
    with database.atomic() as tx:
        chunk_ids = _chunks(tx, texts)
        node = tx.graph.insert_node("thing", "tuffy", [], now=T0, importance=0.5, confidence=0.5)
        assert tx.graph.mention_chunks_naming(node, "Tuffy rolls", T0, 240) == 240
        linked = sorted(c for c, _n in tx.graph.mentions_among(chunk_ids, [node]))
        assert tx.graph.mention_chunks_naming(node, "Tuffy rolls", T0, -1) == 10
    # the newest 240 of the 250 chunks holding the phrase
    assert linked == [c for n, c in enumerate(chunk_ids) if n % 2][-240:]


def test_a_failed_phrase_search_leaves_the_write_usable(
    open_pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem.storage.postgres import graph as pg_graph

    database = open_pg()
    monkeypatch.setattr(pg_graph, "_PHRASE_PAGE", -1)  # the server refuses a negative LIMIT
    with database.atomic() as tx:
        (chunk,) = _chunks(tx, ["tuffy rolls"])
        node = tx.graph.insert_node("thing", "tuffy", [], now=T0, importance=0.5, confidence=0.5)
        with pytest.raises(StoreError, match="graph read failed"):
            tx.graph.mention_chunks_naming(node, "tuffy", T0, 10)
        # As on SQLite, where the graph writer logs the failure and goes on.
        assert tx.graph.add_mentions([(node, chunk)], T0) == [(node, chunk)]
    with database.read() as tx:
        assert tx.graph.mentions_among([chunk], [node]) == [(chunk, node)]


def test_ended_session_summaries_newest_first_for_this_user_only(open_pg: Any) -> None:
    database, other = open_pg(), open_pg()
    with other.atomic() as tx:
        tx.transcript.end_session(_session(tx), T1, "another user's")
    with database.atomic() as tx:
        summarised, titled, bare, still_open = (_session(tx) for _ in range(4))
        tx.conn.execute(
            "UPDATE sessions SET summary = 'a summary' WHERE id = ANY(%s)",
            ([summarised, still_open],),
        )
        tx.transcript.end_session(summarised, T1, None)
        tx.transcript.end_session(titled, T1, "a title")
        tx.transcript.end_session(bare, T1, None)
    with database.read() as tx:
        assert tx.transcript.ended_session_summaries(None, 10) == [
            (T0, None, "a title"),
            (T0, "a summary", None),
        ]
        assert tx.transcript.ended_session_summaries(titled, 10) == [(T0, "a summary", None)]
        assert tx.transcript.ended_session_summaries(None, 0) == []


def test_the_query_path_reads_appended_on_the_runtime_branch(open_pg: Any) -> None:
    # h15's contract (tests/storage/contract/test_query_reads.py there) covers these on both
    # backends once merged; this pins the PostgreSQL side before then.
    database = open_pg()
    with database.atomic() as tx:
        first, second = _session(tx), _session(tx)
        ids = []
        for turn, text in enumerate(["the cello", "learning Rust", "a cello concert"], start=1):
            user = tx.transcript.insert_message(
                first, turn, "user", text, created_at=T0, token_estimate=1
            )
            tx.transcript.insert_message(first, turn, "assistant", "ok", created_at=T0,
                                         token_estimate=1)  # fmt: skip
            ids += tx.transcript.insert_chunks(first, user, user, [text], created_at=T0)
        message = tx.transcript.insert_message(second, 1, "user", "x", created_at=T1,
                                               token_estimate=1)  # fmt: skip
        (later,) = tx.transcript.insert_chunks(second, message, message, ["later"], created_at=T1)
        cello, rust, concert = ids
        tx.conn.execute(
            "UPDATE chunks SET embedding = '\\x00', embedding_model = 'm', embedding_dim = 4 "
            "WHERE id = ANY(%s)",
            ([cello, rust],),
        )
        old = _fact(tx, "city", "Lisbon")
        tx.facts.end_live("city", T1)
        new = _fact(tx, "city", "Porto")
        tx.facts.archive([new])
    with database.atomic() as tx:
        transcript = tx.transcript
        assert sorted(transcript.session_chunk_ids(first)) == ids
        assert transcript.chunk_spans([cello, 10_000]) == {cello: ("the cello", ANY, ANY)}
        assert sorted(r[:2] for r in transcript.chunk_rows([later, cello])) == [
            (cello, first), (later, second)
        ]  # fmt: skip
        assert transcript.chunk_texts([concert, cello]) == [
            (cello, "the cello"), (concert, "a cello concert")
        ]  # fmt: skip
        assert transcript.all_chunk_ids() == [*ids, later]
        assert transcript.consecutive_pairs([(cello, concert, first), (cello, rust, first)]) == [
            (cello, rust)
        ]
        assert [c for c, _ in transcript.chunks_without_vector(1)] == [concert]
        assert transcript.any_chunk_without_vector()
        assert transcript.chunk_ids_needing_vector("m", 4) == [concert, later]
        assert [c for c, _ in transcript.chunks_needing_vector([later, rust], "m", None)] == [
            rust, later
        ]  # fmt: skip
        assert [t for t, _r, _c, _a in transcript.turn_messages(first, [3, 1])] == [1, 1, 3, 3]
        assert [c for c, _ in transcript.turn_chunks(first, [3, 1])] == [cello, concert]
        assert transcript.recent_user_messages(first, 2) == ["a cello concert", "learning Rust"]
        transcript.set_rolling_summary(first, "- one")
        assert transcript.rolling_summary(first) == "- one"
        transcript.set_session_summary(first, "cello and Rust")
        transcript.end_session(first, T1, None)
        assert transcript.ended_session_summaries(None, 5)[0][1] == "cello and Rust"
        assert tx.facts.key_exists("city") and not tx.facts.key_exists("nope")
        assert sorted(tx.facts.keys_of([old, new, 10_000])) == [
            (old, "city", False), (new, "city", True)
        ]  # fmt: skip
        assert tx.facts.archived_among([old, new]) == {new}
        assert [r[:3] for r in tx.facts.candidate_rows([new])] == [(new, "city", "Porto")]
        assert tx.facts.live_attributes("city") == (new, 0.5, "note", None)
        assert tx.facts.live_attributes("nope") is None


def test_writers_of_one_key_in_three_processes_leave_one_chain_of_versions(
    postgres_url: str,
) -> None:
    """Each process replaces the key's live version 30 times through the memory layer: the
    versions form one chain (each ended version names the next) with one live version, no
    write lost, no session id given twice."""
    user = f"user-{uuid.uuid4().hex}"
    script = textwrap.dedent(
        """
        import sys
        from elastimem.memory import episodic, semantic
        from elastimem.storage.postgres import database
        db = database.open_database(sys.argv[1], sys.argv[2])
        for n in range(30):
            with db.atomic() as tx:
                episodic.open_session(tx, episodic.Owner(n, sys.argv[3]), at=None, host_tag=None)
                semantic.write_fact(
                    tx, "city", f"{sys.argv[3]}-{n}", "explicit", profile_keys=frozenset(),
                    reserved_keys=frozenset(), quarantine_cap=10,
                )
        db.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [
        subprocess.Popen([sys.executable, "-c", script, postgres_url, user, f"p{n}"], env=env)
        for n in range(3)
    ]
    assert [w.wait(timeout=180) for w in workers] == [0, 0, 0]
    database = postgres_database.open_database(postgres_url, user)
    try:
        with database.read() as tx:
            versions = tx.facts.history("city")
            sessions = tx.transcript.recent_sessions(1000)
    finally:
        database.close()
    assert len(versions) == 90
    assert [v.id for v in versions if v.invalidated_at is None] == [versions[-1].id]
    successor = {v.id: v.invalidated_by for v in versions}
    chain = [versions[0].id]
    while successor[chain[-1]] is not None:
        chain.append(successor[chain[-1]])
    assert chain == [v.id for v in versions]
    assert len({row["id"] for row in sessions}) == 90


def test_stamped_mentions_of_no_nodes_is_no_stamp_on_both_backends(
    open_pg: Any, tmp_path: Path
) -> None:
    sqlite_db = storage.open_database(tmp_path / "stamped.db")
    try:
        for database in (sqlite_db, open_pg()):
            with database.atomic() as tx:
                tx.graph.insert_node("thing", "a", [], now=T0, importance=0.5, confidence=0.5)
            with database.read() as tx:
                assert tx.graph.stamped_mentions([]) == (None, [])
    finally:
        sqlite_db.close()
