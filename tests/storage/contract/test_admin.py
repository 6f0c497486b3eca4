"""Contract: ``tx.admin`` (storage.admin.AdminRows) and ``storage.admin.upkeep`` on every
backend, and the reads the front ends appended to the jobs, transcript and vectors families.

Rows are seeded through ``tx.admin.insert_row`` (the import path, logical table names) and
read back through ``tx.admin.export_rows``, so nothing here is specific to one database.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from elastimem.storage.admin import upkeep

NOW = "2025-01-01T00:00:00.000000Z"


class Rollback(Exception):
    """Raised to leave an ``atomic()`` block without committing."""


def put(tx: Any, table: str, **row: Any) -> None:
    assert tx.admin.insert_row(table, list(row), list(row.values())) is None


def rows_of(tx: Any, table: str, *columns: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in tx.admin.export_rows(table, list(columns))]


def unit(dim: int, hot: int = 0) -> bytes:
    vector = np.zeros(dim, dtype="<f4")
    vector[hot] = 1.0
    return vector.tobytes()


def session(tx: Any, sid: int, *, messages: int = 1, vectors: int = 0) -> list[int]:
    """A session with ``messages`` messages, one chunk per message (the first ``vectors``
    of them embedded); returns the chunk ids."""
    put(tx, "sessions", id=sid, started_at=NOW)
    chunks = []
    for i in range(messages):
        mid = sid * 100 + i
        put(tx, "messages", id=mid, session_id=sid, turn=i, role="user", content=f"m{mid}",
            created_at=NOW)  # fmt: skip
        embedded = {"embedding": unit(4), "embedding_model": "m:a", "embedding_dim": 4}
        put(tx, "chunks", id=mid, session_id=sid, first_msg_id=mid, last_msg_id=mid,
            text=f"chunk {mid}", created_at=NOW, **(embedded if i < vectors else {}))  # fmt: skip
        chunks.append(mid)
    return chunks


def fact(tx: Any, fid: int, key: str, value: str, origin: int | None = None, *,
         ended: bool = False) -> None:  # fmt: skip
    """A fact version (``ended``: an older, invalidated one: one live version per key)."""
    put(tx, "facts", id=fid, key=key, value=value, category="note", source="explicit",
        importance=0.5, created_at=NOW, valid_from=NOW, origin_session_id=origin,
        invalidated_at=NOW if ended else None)  # fmt: skip


def node(tx: Any, nid: int, name: str, node_type: str = "person") -> None:
    put(tx, "graph_nodes", id=nid, type=node_type, canonical_name=name, created_at=NOW,
        updated_at=NOW)  # fmt: skip


# -- rows in and out ---------------------------------------------------------------------------


def test_columns_name_every_column_in_order_and_which_hold_bytes(backend_database: Any) -> None:
    with backend_database.read() as tx:
        chunks = tx.admin.columns("chunks")
        meta = tx.admin.columns("meta")
    names = [name for name, _ in chunks]
    assert names[0] == "id" and {"session_id", "text", "embedding"} <= set(names)
    assert dict(chunks)["embedding"] is True and dict(chunks)["text"] is False
    assert meta == [("key", False), ("value", False)]


def test_insert_row_and_export_rows_round_trip_in_key_order(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "lessons", id=3, text="third", created_at=NOW, last_used_at=NOW)
        put(tx, "lessons", id=1, text="first", tag="t", created_at=NOW, last_used_at=NOW)
        tx.meta.set("created_by", "contract")
    with backend_database.read() as tx:
        assert rows_of(tx, "lessons", "id", "text", "tag") == [
            (1, "first", "t"),
            (3, "third", None),
        ]
        meta = list(tx.admin.export_rows("meta", ["key", "value"], ["created_by", "absent"]))
    assert [tuple(r) for r in meta] == [("created_by", "contract")]


def test_insert_row_says_why_a_row_is_refused(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "lessons", id=1, text="one", created_at=NOW, last_used_at=NOW)
        duplicate = tx.admin.insert_row("lessons", ["id", "text", "created_at", "last_used_at"],
                                        [1, "again", NOW, NOW])  # fmt: skip
        missing = tx.admin.insert_row("lessons", ["id"], [2])
    assert isinstance(duplicate, str) and duplicate
    assert isinstance(missing, str) and missing
    with backend_database.read() as tx:
        assert rows_of(tx, "lessons", "id", "text") == [(1, "one")]


def test_main_vector_label_and_vector_dims(backend_database: Any) -> None:
    with backend_database.read() as tx:
        assert tx.admin.main_vector_label() is None
        assert tx.admin.vector_dims() == []
    with backend_database.atomic() as tx:
        session(tx, 1, messages=3, vectors=2)  # two chunk vectors of m:a, dim 4
        put(tx, "sessions", id=2, started_at=NOW)
        put(tx, "messages", id=900, session_id=2, turn=0, role="user", content="x",
            created_at=NOW)  # fmt: skip
        for cid in (900, 901):
            if cid == 901:
                put(tx, "messages", id=cid, session_id=2, turn=1, role="user", content="y",
                    created_at=NOW)  # fmt: skip
            put(tx, "chunks", id=cid, session_id=2, first_msg_id=cid, last_msg_id=cid,
                text="z", created_at=NOW, embedding=unit(2), embedding_model="m:0",
                embedding_dim=2)  # fmt: skip
        fact(tx, 1, "k", "v")
        put(tx, "fact_vectors", fact_id=1, embedding_model="m:0", embedding_dim=2,
            embedding=unit(2))  # fmt: skip
    with backend_database.read() as tx:
        # Two chunk vectors each: the tie goes to the smaller label.
        assert tx.admin.main_vector_label() == "m:0"
        # Chunks and facts together: m:0 has three vectors, m:a two.
        assert tx.admin.vector_dims() == [("m:0", 2), ("m:a", 4)]


# -- import --------------------------------------------------------------------------------------


def test_occupied_table_names_the_first_table_holding_memories(backend_database: Any) -> None:
    with backend_database.read() as tx:
        assert tx.admin.occupied_table() is None  # the self node alone is no memory
    with backend_database.atomic() as tx:
        put(tx, "quarantine", ts=NOW, reason="r")
    with backend_database.read() as tx:
        assert tx.admin.occupied_table() == "quarantine"
    with backend_database.atomic() as tx:
        node(tx, 50, "ana")
        put(tx, "lessons", text="l", created_at=NOW, last_used_at=NOW)
    with backend_database.read() as tx:
        assert tx.admin.occupied_table() == "lessons"
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW)
    with backend_database.read() as tx:
        assert tx.admin.occupied_table() == "sessions"


def test_has_running_job(backend_database: Any) -> None:
    job = {"kind": "consolidate", "priority": 4, "created_at": NOW, "updated_at": NOW}
    with backend_database.atomic() as tx:
        put(tx, "jobs", id=1, state="queued", **job)
    with backend_database.read() as tx:
        assert tx.admin.has_running_job() is False
    with backend_database.atomic() as tx:
        put(tx, "jobs", id=2, state="running", **job)
    with backend_database.read() as tx:
        assert tx.admin.has_running_job() is True


def test_prepare_import_clears_what_an_export_brings_and_ensure_self_node_restores_it(
    backend_database: Any,
) -> None:
    with backend_database.atomic() as tx:
        put(tx, "jobs", kind="consolidate", state="queued", priority=4, created_at=NOW,
            updated_at=NOW)  # fmt: skip
        put(tx, "graph_merge_reviews", type_a="person", name_a="a", type_b="person", name_b="b",
            verdict="same", reviewed_at=NOW)  # fmt: skip
        put(tx, "ann_index", label="m:a", dim=4, seq=1, gen=1, data=b"x", built_at=NOW)
    with backend_database.atomic() as tx:
        tx.admin.prepare_import()
        assert rows_of(tx, "graph_nodes", "id") == []
        assert rows_of(tx, "jobs", "id") == []
        assert rows_of(tx, "graph_merge_reviews", "id") == []
        assert rows_of(tx, "ann_index", "label") == []
        tx.admin.ensure_self_node()
        tx.admin.ensure_self_node()  # once only
    with backend_database.read() as tx:
        assert [r[0] for r in rows_of(tx, "graph_nodes", "type")] == ["self"]


def test_broken_reference_finds_a_row_pointing_at_nothing(backend_database: Any) -> None:
    with pytest.raises(Rollback), backend_database.atomic() as tx:
        tx.admin.prepare_import()  # references are checked at the end from here on
        assert tx.admin.broken_reference() is None
        put(tx, "messages", id=7, session_id=99, turn=0, role="user", content="x",
            created_at=NOW)  # fmt: skip
        assert tx.admin.broken_reference() == ("messages", 7, "sessions")
        put(tx, "sessions", id=99, started_at=NOW)
        assert tx.admin.broken_reference() is None
        raise Rollback


def test_rebuild_keyword_tables_keeps_the_rows(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session(tx, 1, messages=2)
        fact(tx, 1, "pet", "cat")
        tx.admin.rebuild_keyword_tables()
    with backend_database.read() as tx:
        assert rows_of(tx, "chunks", "id") == [(100,), (101,)]
        assert rows_of(tx, "facts", "key") == [("pet",)]


# -- erase ---------------------------------------------------------------------------------------


def test_quarantined_keys_and_delete_quarantine(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "quarantine", id=1, ts=NOW, key="Pet Name", value="x", reason="r")
        put(tx, "quarantine", id=2, ts=NOW, reason="no key")
        put(tx, "quarantine", id=3, ts=NOW, key="pet_name", reason="r")
    with backend_database.atomic() as tx:
        assert tx.admin.quarantined_keys() == [(1, "Pet Name"), (3, "pet_name")]
        assert tx.admin.delete_quarantine([1, 3, 42]) == 2
        assert tx.admin.delete_quarantine([]) == 0
    with backend_database.read() as tx:
        assert rows_of(tx, "quarantine", "id") == [(2,)]


def test_erase_fact_key_takes_every_version_its_reviews_and_vectors(
    backend_database: Any,
) -> None:
    with backend_database.atomic() as tx:
        fact(tx, 1, "color", "red", ended=True)
        fact(tx, 2, "color", "blue")
        fact(tx, 3, "pet", "cat")
        put(tx, "fact_vectors", fact_id=2, embedding_model="m", embedding_dim=2,
            embedding=unit(2))  # fmt: skip
        put(tx, "fact_vectors", fact_id=3, embedding_model="m", embedding_dim=2,
            embedding=unit(2))  # fmt: skip
        put(tx, "fact_reviews", old_fact_id=1, new_fact_id=2, verdict="kept",
            reviewed_at=NOW)  # fmt: skip
        put(tx, "fact_reviews", old_fact_id=3, new_fact_id=3, verdict="kept",
            result_fact_id=3, reviewed_at=NOW)  # fmt: skip
    with backend_database.atomic() as tx:
        assert tx.admin.erase_fact_key("color") == (2, 1)
        assert tx.admin.erase_fact_key("color") == (0, 0)
    with backend_database.read() as tx:
        assert rows_of(tx, "facts", "key") == [("pet",)]
        assert rows_of(tx, "fact_vectors", "fact_id") == [(3,)]
        assert rows_of(tx, "fact_reviews", "old_fact_id") == [(3,)]


def test_keys_learned_in_a_session(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW)
        put(tx, "sessions", id=2, started_at=NOW)
        fact(tx, 1, "pet", "cat", origin=1, ended=True)
        fact(tx, 2, "color", "red", origin=1)
        fact(tx, 3, "pet", "dog", origin=1)
        fact(tx, 4, "city", "Oslo", origin=2)
        fact(tx, 5, "name", "Ana")
    with backend_database.read() as tx:
        assert tx.admin.keys_learned_in(1) == ["color", "pet"]
        assert tx.admin.keys_learned_in(3) == []


def test_session_sizes(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session(tx, 1, messages=3, vectors=1)
        session(tx, 2, messages=1)
    with backend_database.read() as tx:
        assert tx.admin.session_sizes(1) == (3, 3, 1)
        assert tx.admin.session_sizes(2) == (1, 1, 0)
        assert tx.admin.session_sizes(3) == (0, 0, 0)


def test_graph_provenance_of_a_session(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        mine, other = session(tx, 1, messages=2), session(tx, 2)
        node(tx, 10, "ana")  # mentioned only here
        node(tx, 11, "bo")  # mentioned here and elsewhere
        node(tx, 12, "cy")  # mentioned only here, but linked from elsewhere
        for nid, cid in ((10, mine[0]), (10, mine[1]), (11, mine[0]), (11, other[0]),
                         (12, mine[1])):  # fmt: skip
            put(tx, "graph_mentions", node_id=nid, chunk_id=cid, created_at=NOW)
        edge = {"relationship": "knows", "created_at": NOW, "last_seen": NOW}
        put(tx, "graph_edges", id=1, source_node=10, target_node=11, source_chunk_id=mine[0],
            **edge)  # fmt: skip
        put(tx, "graph_edges", id=2, source_node=11, target_node=12, source_chunk_id=other[0],
            **edge)  # fmt: skip
        put(tx, "graph_merge_reviews", type_a="person", name_a="ana", type_b="person",
            name_b="x", verdict="different", reviewed_at=NOW)  # fmt: skip
        put(tx, "graph_merge_reviews", type_a="person", name_a="y", type_b="person",
            name_b="ana", verdict="same", reviewed_at=NOW)  # fmt: skip
        put(tx, "graph_merge_reviews", type_a="place", name_a="ana", type_b="person",
            name_b="z", verdict="same", reviewed_at=NOW)  # fmt: skip
    with backend_database.atomic() as tx:
        assert tx.admin.nodes_only_in_session(1) == [10, 12]
        assert tx.admin.unlink_session_from_graph(1) == (1, 4)
        assert tx.admin.unlink_session_from_graph(1) == (0, 0)
        assert tx.admin.unlinked_node(10) == ("person", "ana")
        assert tx.admin.unlinked_node(12) is None  # still linked from session 2
        assert tx.admin.unlinked_node(10**12) is None
        assert tx.admin.delete_merge_reviews_naming("person", "ana") == 2
    with backend_database.read() as tx:
        assert rows_of(tx, "graph_mentions", "node_id", "chunk_id") == [(11, other[0])]
        assert rows_of(tx, "graph_edges", "id") == [(2,)]
        assert rows_of(tx, "graph_merge_reviews", "type_a") == [("place",)]


def test_delete_session_takes_its_rows_and_jobs(backend_database: Any) -> None:
    job = {"kind": "session_summary", "state": "queued", "priority": 3, "created_at": NOW,
           "updated_at": NOW}  # fmt: skip
    with backend_database.atomic() as tx:
        session(tx, 1, messages=2)
        session(tx, 2)
        put(tx, "jobs", id=1, session_id=1, **job)
        put(tx, "jobs", id=2, session_id=2, **job)
    with backend_database.atomic() as tx:
        assert tx.admin.delete_session(1) == (1, 1)
        assert tx.admin.delete_session(1) == (0, 0)
    with backend_database.read() as tx:
        assert rows_of(tx, "sessions", "id") == [(2,)]
        assert rows_of(tx, "messages", "session_id") == [(2,)]
        assert rows_of(tx, "chunks", "session_id") == [(2,)]
        assert rows_of(tx, "jobs", "id") == [(2,)]


def test_drop_ann_snapshot(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "ann_index", label="m:a", dim=4, seq=1, gen=1, data=b"x", built_at=NOW)
        put(tx, "ann_index", label="m:b", dim=8, seq=1, gen=1, data=b"y", built_at=NOW)
    with backend_database.atomic() as tx:
        tx.admin.drop_ann_snapshot()
        tx.admin.drop_ann_snapshot()
    with backend_database.read() as tx:
        assert rows_of(tx, "ann_index", "label") == []


# -- whole-store checks --------------------------------------------------------------------------


def test_has_memories_outside(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW)
        put(tx, "sessions", id=2, started_at=NOW)
    with backend_database.read() as tx:
        assert tx.admin.has_memories_outside([]) is False
    with backend_database.atomic() as tx:
        fact(tx, 1, "pet", "cat", origin=1)
    with backend_database.read() as tx:
        assert tx.admin.has_memories_outside([1]) is False
        assert tx.admin.has_memories_outside([2]) is True
        assert tx.admin.has_memories_outside([]) is True
    with backend_database.atomic() as tx:
        fact(tx, 2, "city", "Oslo")  # learned in no session
    with backend_database.read() as tx:
        assert tx.admin.has_memories_outside([1, 2]) is True
    with backend_database.atomic() as tx:
        tx.admin.erase_fact_key("city")
        put(tx, "lessons", text="l", created_at=NOW, last_used_at=NOW)
    with backend_database.read() as tx:
        assert tx.admin.has_memories_outside([1, 2]) is True


# -- upkeep --------------------------------------------------------------------------------------


def test_upkeep_around_an_erase_keeps_what_was_not_erased(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session(tx, 1, messages=2)
        session(tx, 2)
        fact(tx, 1, "pet", "cat")
        fact(tx, 2, "color", "red")
    cleaner = upkeep(backend_database)
    with backend_database.lock, cleaner.secure_delete():
        with backend_database.atomic() as tx:
            tx.admin.delete_session(1)
            tx.admin.erase_fact_key("color")
        cleaner.purge_erased({"chunks", "facts"})
        cleaner.purge_erased(set())
    with backend_database.read() as tx:
        assert rows_of(tx, "chunks", "id") == [(200,)]
        assert rows_of(tx, "facts", "key") == [("pet",)]


# -- reads the front ends appended to other families (seeded through admin.insert_row) ------
# tx.jobs.count_unfinished (the facade's end_session), tx.transcript.ended_session_summaries
# (the context plan), tx.vectors.has_vectors_labelled (the command line's search store).


def test_count_unfinished_counts_queued_and_running_jobs_of_the_list(
    backend_database: Any,
) -> None:
    base = {"kind": "consolidate", "priority": 4, "created_at": NOW, "updated_at": NOW}
    with backend_database.atomic() as tx:
        for job_id, state in ((1, "queued"), (2, "running"), (3, "held"), (4, "failed")):
            put(tx, "jobs", id=job_id, state=state, **base)
        put(tx, "jobs", id=5, state="queued", **base)
    with backend_database.read() as tx:
        assert tx.jobs.count_unfinished([1, 2, 3, 4]) == 2
        assert tx.jobs.count_unfinished([3, 4, 99]) == 0
        assert tx.jobs.count_unfinished([]) == 0


def test_ended_session_summaries_newest_first(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at="2025-01-01", ended_at="2025-01-01", summary="one")
        put(tx, "sessions", id=2, started_at="2025-01-02", ended_at="2025-01-02", title="two")
        put(tx, "sessions", id=3, started_at="2025-01-03", ended_at="2025-01-03")  # nothing
        put(tx, "sessions", id=4, started_at="2025-01-04", summary="open")  # not ended
        put(tx, "sessions", id=5, started_at="2025-01-05", ended_at="2025-01-05",
            summary="five", title="Five")  # fmt: skip
    with backend_database.read() as tx:
        assert tx.transcript.ended_session_summaries(None, 10) == [
            ("2025-01-05", "five", "Five"),
            ("2025-01-02", None, "two"),
            ("2025-01-01", "one", None),
        ]
        assert tx.transcript.ended_session_summaries(5, 1) == [("2025-01-02", None, "two")]
        assert tx.transcript.ended_session_summaries(None, 0) == []


def test_has_vectors_labelled_matches_a_label_prefix(backend_database: Any) -> None:
    vector = np.ones(2, dtype="<f4") / np.sqrt(np.float32(2))
    with backend_database.atomic() as tx:
        put(tx, "sessions", id=1, started_at=NOW)
        for cid, label in ((1, "host:model"), (2, None), (3, "x_y%")):
            put(tx, "messages", id=cid, session_id=1, turn=cid, role="user", content="m",
                created_at=NOW)  # fmt: skip
            vec: dict[str, Any] = {}
            if label is not None:
                vec = {"embedding": vector.tobytes(), "embedding_model": label, "embedding_dim": 2}
            put(tx, "chunks", id=cid, session_id=1, first_msg_id=cid, last_msg_id=cid, text="t",
                created_at=NOW, **vec)  # fmt: skip
    with backend_database.read() as tx:
        assert tx.vectors.has_vectors_labelled("host:") is True
        assert tx.vectors.has_vectors_labelled("elastimem:") is False
        assert tx.vectors.has_vectors_labelled("x_y%") is True
        assert tx.vectors.has_vectors_labelled("x%") is False  # no wildcard in a prefix
        assert tx.vectors.has_vectors_labelled("xzy") is False


def test_deleted_rows_take_their_keyword_postings_with_them(backend_database: Any) -> None:
    """A session's chunks (deleted by the cascade from their session) and an erased key's
    facts leave no posting behind; the other rows keep theirs."""
    with backend_database.atomic() as tx:
        sessions = []
        for text in ("kayak gone", "kayak kept"):
            sid = tx.transcript.insert_session(above=0, started_at=NOW, host_tag=None,
                owner_pid=1, owner_host="h", heartbeat_at=NOW, backdated=False)  # fmt: skip
            tx.transcript.insert_turn(sid, [("user", text, 1)], [text, "kayak " + text],
                created_at=NOW, title=None, heartbeat_at=NOW)  # fmt: skip
            sessions.append(sid)
        for key in ("gone", "kept"):
            tx.facts.insert_version(key, "kayak paddle", category="note", source="explicit",
                importance=0.5, created_at=NOW, valid_from=NOW,
                origin_session_id=None)  # fmt: skip
    with backend_database.read() as tx:
        kept_chunks = [c.id for c in tx.transcript.session_chunks(sessions[1])]
        before = list(tx.postings.term_postings("chunks", "kayak")[0])
    assert len(before) == 4
    with backend_database.atomic() as tx:
        assert tx.admin.delete_session(sessions[0]) == (1, 0)
        assert tx.admin.erase_fact_key("gone") == (1, 0)
    with backend_database.read() as tx:
        assert list(tx.postings.term_postings("chunks", "kayak")[0]) == kept_chunks
        assert list(tx.postings.term_postings("chunks", "gone")[0]) == []
        facts = list(tx.postings.term_postings("facts", "paddl")[0])
        assert len(facts) == 1 and rows_of(tx, "facts", "id") == [(facts[0],)]
        assert tx.postings.state("chunks").rows == 2
