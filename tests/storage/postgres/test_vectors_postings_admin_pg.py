"""The vectors, postings and admin families on PostgreSQL: what the contract suite cannot see
from above the seam (the BM25 inputs equal SQLite FTS5's, the trigger-kept keyword totals,
per-user scoping, imported ids and deferred references) (issue #18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from elastimem import storage
from elastimem.errors import StoreError
from elastimem.storage.admin import upkeep
from elastimem.storage.postgres.admin import PostgresUpkeep
from tests import pg_server

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

T0 = "2026-01-01T00:00:00.000000Z"
TEXTS = [
    "The runners were running, RUNNING!",
    "Café au lait, café; naïve résumé",
    "",
    "garden tomato garden walrus",
    "Zebra apple Ünïcode ångström zebra",
]
FACTS = [("favourite_drink", "Cafés au lait, running"), ("pet", "a walrus named Zebra")]


def _session(tx: Any) -> int:
    return int(
        tx.transcript.insert_session(
            above=0,
            started_at=T0,
            host_tag=None,
            owner_pid=1,
            owner_host="h",
            heartbeat_at=T0,
            backdated=False,
        )
    )


def _fill(tx: Any, suffix: str = "") -> tuple[int, list[int], list[int]]:
    """A session of chunks of TEXTS and the facts FACTS (keys + ``suffix``): (session, chunk
    ids, fact ids)."""
    session_id = _session(tx)
    message = tx.transcript.insert_message(
        session_id, 1, "user", "m", created_at=T0, token_estimate=1
    )
    chunks = list(tx.transcript.insert_chunks(session_id, message, message, TEXTS, created_at=T0))
    facts = [
        int(
            tx.facts.insert_version(
                key + suffix,
                value,
                category="note",
                source="explicit",
                importance=0.5,
                created_at=T0,
                valid_from=T0,
                origin_session_id=session_id,
            )
        )
        for key, value in FACTS
    ]
    return session_id, chunks, facts


def _keyword_inputs(tx: Any, corpus: str, ids: list[int]) -> dict[str, Any]:
    """Everything BM25 reads from ``tx.postings``, with row ids replaced by their position in
    ``ids`` (ids differ between backends)."""
    at = {row_id: n for n, row_id in enumerate(ids)}
    state = tx.postings.state(corpus)
    doc_ids, lengths = tx.postings.doc_lengths(corpus)
    postings: list[tuple[str, int, int]] = []
    for terms, rows, freqs in tx.postings.all_postings(corpus, 4):
        postings.extend(zip(terms, (at[int(r)] for r in rows), freqs.tolist()))
    sizes = {term: tx.postings.term_size(corpus, term) for term, _, _ in postings}
    each = {}
    for term in sizes:
        rows, freqs = tx.postings.term_postings(corpus, term)
        each[term] = [(at[int(r)], float(f)) for r, f in zip(rows, freqs)]
    return {
        "totals": (state.rows, state.tokens),
        "lengths": [(at[int(i)], int(n)) for i, n in zip(doc_ids, lengths)],
        "postings": sorted(postings),
        "order": [t for t, _, _ in postings],
        "sizes": sizes,
        "each": each,
        "docs": [(at[i], text) for i, text in tx.postings.docs_after(corpus, 0, 100)],
    }


def test_the_bm25_inputs_equal_sqlite_fts5s(open_pg: Any, tmp_path: Path) -> None:
    sqlite_db = storage.open_database(tmp_path / "same.db")
    try:
        with sqlite_db.atomic() as tx:
            _, sqlite_chunks, sqlite_facts = _fill(tx)
        with sqlite_db.read() as tx:
            want = {
                "chunks": _keyword_inputs(tx, "chunks", sqlite_chunks),
                "facts": _keyword_inputs(tx, "facts", sqlite_facts),
            }
    finally:
        sqlite_db.close()
    database = open_pg()
    with database.atomic() as tx:
        _, chunks, facts = _fill(tx)
    with database.read() as tx:
        got = {
            "chunks": _keyword_inputs(tx, "chunks", chunks),
            "facts": _keyword_inputs(tx, "facts", facts),
        }
    assert got == want
    assert got["chunks"]["order"] == sorted(got["chunks"]["order"])  # Python's (byte) order


def _recounted(tx: Any, corpus: str) -> tuple[int, int]:
    _ids, lengths = tx.postings.doc_lengths(corpus)
    return int(lengths.size), int(lengths.sum())


def test_keyword_totals_follow_cascades_erases_and_rebuilds(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        session_id, _, _ = _fill(tx)
        _fill(tx, "_2")
    states = []
    with database.read() as tx:
        for corpus in ("chunks", "facts"):
            state = tx.postings.state(corpus)
            assert (state.rows, state.tokens) == _recounted(tx, corpus)
            states.append(state)
    with database.atomic() as tx:
        tx.admin.erase_fact_key("pet")  # its row and postings go
        tx.admin.delete_session(session_id)  # its chunks go by the cascade
    with database.read() as tx:
        for corpus, before in zip(("chunks", "facts"), states):
            state = tx.postings.state(corpus)
            assert (state.rows, state.tokens) == _recounted(tx, corpus)
            assert state.rows < before.rows and state.version != before.version
        before_rebuild = [tx.postings.state(c) for c in ("chunks", "facts")]
        postings_before = [list(tx.postings.all_postings(c, 1000)) for c in ("chunks", "facts")]
    with database.atomic() as tx:
        tx.admin.rebuild_keyword_tables()
    with database.read() as tx:
        for corpus, before in zip(("chunks", "facts"), before_rebuild):
            state = tx.postings.state(corpus)
            assert (state.rows, state.tokens) == (before.rows, before.tokens)
            assert state.version != before.version
        after = [list(tx.postings.all_postings(c, 1000)) for c in ("chunks", "facts")]
    flat = [
        [[(t, int(i), int(f)) for ts, ids, fs in blocks for t, i, f in zip(ts, ids, fs)]
         for blocks in corpora]
        for corpora in (postings_before, after)
    ]  # fmt: skip
    assert flat[0] == flat[1] and all(flat[0])


def test_a_rebuild_indexes_imported_rows_as_writing_them_does(open_pg: Any) -> None:
    written, imported = open_pg(), open_pg()
    with written.atomic() as tx:
        _, chunk_ids, fact_ids = _fill(tx)
    with written.read() as tx:
        want = {
            "chunks": _keyword_inputs(tx, "chunks", chunk_ids),
            "facts": _keyword_inputs(tx, "facts", fact_ids),
        }
        rows = {
            table: (
                [name for name, _ in tx.admin.columns(table)],
                list(tx.admin.export_rows(table, [name for name, _ in tx.admin.columns(table)])),
            )
            for table in ("sessions", "messages", "chunks", "facts")
        }
    with imported.atomic() as tx:
        tx.admin.prepare_import()
        for table, (names, values) in rows.items():
            for row in values:
                assert tx.admin.insert_row(table, names, list(row)) is None
        assert tx.admin.broken_reference() is None
        tx.admin.rebuild_keyword_tables()
    with imported.read() as tx:
        got = {
            "chunks": _keyword_inputs(tx, "chunks", chunk_ids),
            "facts": _keyword_inputs(tx, "facts", fact_ids),
        }
    assert got == want


def test_a_user_sees_only_its_own_vectors_postings_and_rows(open_pg: Any) -> None:
    alice, bob = open_pg(), open_pg()
    with alice.atomic() as tx:
        session_id, chunks, _ = _fill(tx)
        for seq, chunk_id in enumerate(chunks, start=1):
            tx.vectors.store(chunk_id, np.ones(4, dtype=np.float32) / 2, "m", seq)
        tx.vectors.save_snapshot("m", 4, 1, 1, b"graph")
    with bob.atomic() as tx:
        # Bob's erase of Alice's ids removes nothing of hers.
        assert tx.admin.delete_session(session_id) == (0, 0)
        assert tx.admin.erase_fact_key("pet") == (0, 0)
        tx.admin.drop_ann_snapshot()
        tx.admin.rebuild_keyword_tables()
    with bob.read() as tx:
        assert tx.vectors.count("m", 4) == 0 and tx.vectors.other_model("x", 4) is None
        assert list(tx.vectors.blocks("m", 4, size=10)) == []
        assert tx.vectors.read("m", 4, chunks)[0].size == 0
        assert tx.vectors.target(chunks[0]) is None and tx.vectors.snapshot("m", 4) is None
        assert tx.vectors.previous_texts(chunks) == {}
        for corpus in ("chunks", "facts"):
            assert (tx.postings.state(corpus).rows, tx.postings.state(corpus).tokens) == (0, 0)
            assert list(tx.postings.all_postings(corpus, 10)) == []
        assert list(tx.admin.export_rows("chunks", ["id"])) == []
        assert tx.admin.occupied_table() is None and tx.admin.vector_dims() == []
    with alice.read() as tx:
        assert tx.vectors.count("m", 4) == len(chunks)
        assert tx.vectors.snapshot("m", 4) == (1, 1, b"graph")
        assert tx.postings.state("facts").rows == len(FACTS)
        assert tx.admin.session_sizes(session_id) == (1, len(chunks), len(chunks))


def test_export_columns_leave_out_the_backends_own(open_pg: Any) -> None:
    with open_pg().read() as tx:
        for table in ("chunks", "facts", "meta", "graph_mentions"):
            names = [name for name, _ in tx.admin.columns(table)]
            assert "user_id" not in names and "term_count" not in names
        with pytest.raises(ValueError):
            tx.admin.columns("chunk_terms")
        assert tx.admin.insert_row("lessons", ["user_id"], ["someone"]) is not None


def test_an_imported_id_is_never_drawn_again_for_the_user(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        session_id = _session(tx)
        (drawn,) = tx.conn.execute("SELECT nextval(pg_get_serial_sequence('messages', 'id'))")
        ahead = int(drawn[0]) + 1  # the id the sequence would give next
    with database.atomic() as tx:
        names = ["id", "session_id", "turn", "role", "content", "created_at"]
        assert (
            tx.admin.insert_row("messages", names, [ahead, session_id, 1, "user", "x", T0]) is None
        )
        later = tx.transcript.insert_message(
            session_id, 2, "user", "y", created_at=T0, token_estimate=1
        )
    assert later > ahead


def test_an_import_with_a_broken_reference_is_refused_at_commit(open_pg: Any) -> None:
    database = open_pg()
    names = ["id", "session_id", "turn", "role", "content", "created_at"]
    with pytest.raises(StoreError), database.atomic() as tx:
        tx.admin.prepare_import()
        assert tx.admin.insert_row("messages", names, [7, 99, 0, "user", "x", T0]) is None
    with database.read() as tx:
        assert list(tx.admin.export_rows("messages", ["id"])) == []
    # Outside an import a reference is checked as the row is written.
    with database.atomic() as tx:
        refused = tx.admin.insert_row("messages", names, [8, 99, 0, "user", "x", T0])
        assert refused is not None
        tx.meta.set("still", "usable")
    with database.read() as tx:
        assert tx.meta.get("still") == "usable"


def test_upkeep_of_a_postgres_store_does_nothing(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        _fill(tx)
    cleaner = upkeep(database)
    assert isinstance(cleaner, PostgresUpkeep)
    with cleaner.secure_delete():
        cleaner.purge_erased({"chunks", "facts"})
    with database.read() as tx:
        assert tx.postings.state("chunks").rows == len(TEXTS)


def test_the_keyword_index_ranks_alike_on_both_backends(open_pg: Any, tmp_path: Path) -> None:
    from elastimem.index.keyword import CHUNKS, KeywordIndex

    queries = [["running"], ["garden", "walrus"], ["café", "zebra"], ["résumé", "the"]]
    more = ["a walrus in the garden", "running running running", "zebra café"]

    def ranked(database: Any) -> list[list[tuple[int, float]]]:
        index = KeywordIndex(CHUNKS)
        try:
            with database.atomic() as tx:
                _, ids, _ = _fill(tx)
            with database.read() as tx:  # the first query loads the postings
                out = [index.top(tx, q, 5, any_size=True) for q in queries]
            with database.atomic() as tx:  # then new rows are appended to the cache
                session_id = _session(tx)
                message = tx.transcript.insert_message(
                    session_id, 1, "user", "m", created_at=T0, token_estimate=1
                )
                ids += tx.transcript.insert_chunks(
                    session_id, message, message, more, created_at=T0
                )
            with database.read() as tx:
                out += [index.top(tx, q, 5, any_size=True) for q in queries]
        finally:
            index.close()
        at = {row_id: n for n, row_id in enumerate(ids)}
        assert all(found is not None for found in out)
        return [[(at[i], round(s, 9)) for i, s in found or []] for found in out]

    sqlite_db = storage.open_database(tmp_path / "same.db")
    try:
        want = ranked(sqlite_db)
    finally:
        sqlite_db.close()
    assert ranked(open_pg()) == want
    assert all(want)


def test_writes_that_leave_the_keyword_text_alone_leave_the_postings_state(open_pg: Any) -> None:
    database = open_pg()
    with database.atomic() as tx:
        _, chunks, facts = _fill(tx)
    with database.read() as tx:
        before = [tx.postings.state(c) for c in ("chunks", "facts")]
    with database.atomic() as tx:
        tx.vectors.store(chunks[0], np.ones(4, dtype=np.float32) / 2, "m", 1)
        tx.transcript.raise_chunk_importance(chunks, 0.9)
        tx.facts.touch(facts, T0)
        tx.facts.archive(facts[:1])
    with database.read() as tx:
        assert [tx.postings.state(c) for c in ("chunks", "facts")] == before


def test_export_pages_through_every_key_kind_in_sqlites_order(
    open_pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem.storage.postgres import admin

    monkeypatch.setattr(admin, "EXPORT_PAGE", 2)
    database = open_pg()
    keys = ["b", "B", "a", "Z", "é", "_x", "a b"]
    with database.atomic() as tx:
        for key in keys:
            tx.meta.set(key, key)
        _, chunks, _ = _fill(tx)
        for node_id in (3, 1, 2):
            assert (
                tx.admin.insert_row(
                    "graph_nodes",
                    ["id", "type", "canonical_name", "created_at", "updated_at"],
                    [node_id, "person", f"n{node_id}", T0, T0],
                )
                is None
            )
            for chunk_id in reversed(chunks[:3]):
                names = ["node_id", "chunk_id", "created_at"]
                assert tx.admin.insert_row("graph_mentions", names, [node_id, chunk_id, T0]) is None
        for dim, label in ((8, "b"), (4, "b"), (4, "B"), (2, "a")):
            tx.vectors.save_snapshot(label, dim, 1, 1, b"x")
    with database.read() as tx:
        meta = [tuple(r) for r in tx.admin.export_rows("meta", ["key"], keys)]
        mentions = [
            tuple(r) for r in tx.admin.export_rows("graph_mentions", ["node_id", "chunk_id"])
        ]
        snapshots = [tuple(r) for r in tx.admin.export_rows("ann_index", ["label", "dim"])]
        chunk_ids = [r[0] for r in tx.admin.export_rows("chunks", ["id"])]
    assert meta == [(k,) for k in sorted(keys)]  # code point order, as SQLite sorts text
    assert mentions == sorted((n, c) for n in (1, 2, 3) for c in chunks[:3])
    assert snapshots == [("B", 4), ("a", 2), ("b", 4), ("b", 8)]
    assert chunk_ids == chunks
