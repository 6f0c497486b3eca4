"""The graph leg's kept reads (``neighbourhoods._Neighbourhoods``,
``facts_index._LiveFacts``) and the signal read inside the ranking's snapshot: the same
answers as plain SQL, and never stale."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastimem
from elastimem import clock, graph
from elastimem.clock import now_ts
from elastimem.graph import facts_index as graph_facts
from elastimem.graph import maintenance as graph_maint
from elastimem.graph import names as graph_names
from elastimem.graph import neighbourhoods as graph_walk
from elastimem.graph import signal as graph_signal
from elastimem.retrieval import rank as retrieval
from elastimem.retrieval.rank import Filters
from elastimem.storage.sqlite import database as sqlite_database
from tests.graph.conftest import database, reading, writing
from tests.rows import connect, is_postgres, open_args

Store = elastimem.Elastimem
CHUNKS = 24
NAMES = ["Tuffy", "Jetson", "Cuda", "Lisbon", "Porto", "Ada", "Rex", "Mira", "Bolt", "Zed"]


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    """A file store with CHUNKS exchanges and a few facts naming the entities."""
    mem = make_store(tier_override="full")
    for i in range(CHUNKS):
        mem.record_turn(f"note {i} about {NAMES[i % len(NAMES)]} and the weather", "ok")
    assert mem.drain(10)
    for i, name in enumerate(NAMES[:6]):
        mem.remember(f"note_{i}", f"{name} likes tea" if i % 2 else f"met {name} in town")
    mem.remember("note_old", "Tuffy was blue")
    mem.remember("note_old", "Tuffy is green")  # supersedes: only the live one may count
    return mem


def chunk_ids(mem: Store) -> list[int]:
    with reading(mem) as conn:
        return [int(r[0]) for r in conn.execute("SELECT id FROM chunks ORDER BY id")]


def write_graph(mem: Store, data: dict[str, Any]) -> list[int]:
    """Replace every node but the self node with ``data``'s graph; return the node ids."""
    now = now_ts()
    chunks = chunk_ids(mem)
    with writing(mem) as conn:
        me = int(conn.execute("SELECT id FROM graph_nodes WHERE type = 'self'").fetchone()[0])
        conn.execute("DELETE FROM graph_nodes WHERE type <> 'self'")
        ids = [
            int(
                conn.execute(
                    "INSERT INTO graph_nodes (type, canonical_name, created_at, updated_at, "
                    "confidence) VALUES ('thing', ?, ?, ?, ?)",
                    (graph_names._canonicalize(NAMES[i]), now, now, confidence),
                ).lastrowid
                or 0
            )
            for i, confidence in enumerate(data["confidence"])
        ]
        ends = [me, *ids]
        for a, b, relation, weight in data["edges"]:
            source, target = ends[a % len(ends)], ends[b % len(ends)]
            if source != target:
                conn.execute(
                    "INSERT INTO graph_edges (source_node, target_node, relationship, weight, "
                    "created_at, last_seen) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (source, target, f"r{relation}", weight, now, now),
                )
        conn.executemany(
            "INSERT INTO graph_mentions (node_id, chunk_id, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [(ids[n % len(ids)], chunks[c % len(chunks)], now) for n, c in data["mentions"]],
        )
        graph_names._bump_gen(conn)
    return ids


graphs = st.fixed_dictionaries(
    {
        # 1 and 0 as integers too: SQLite hands them back as int, and the kept walk must keep
        # the very values (and types) the SQL walk gives.
        "confidence": st.lists(
            st.sampled_from([0.3, 0.5, 0.7, 0.9, 1, 0]), min_size=2, max_size=len(NAMES)
        ),
        "edges": st.lists(
            st.tuples(
                st.integers(0, 10),
                st.integers(0, 10),
                st.integers(0, 2),
                st.sampled_from([0.2, 0.5, 0.8, 1.0, 1, 0.0]),
            ),
            max_size=40,
        ),
        "mentions": st.lists(st.tuples(st.integers(0, 9), st.integers(0, CHUNKS)), max_size=60),
    }
)


def typed(rows: Any) -> Any:
    """Rows with each number's type beside it: 1 and 1.0 compare equal, yet differ."""
    if isinstance(rows, dict):
        return {k: typed(v) for k, v in rows.items()}
    if isinstance(rows, (list, tuple)):
        return [typed(v) for v in rows]
    return (rows, type(rows).__name__)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=graphs, pick=st.randoms(use_true_random=False))
def test_kept_reads_give_exactly_what_sql_gives(store: Store, data: Any, pick: Any) -> None:
    ids = write_graph(store, data)
    everything = chunk_ids(store)
    with reading(store) as conn:
        index, stamp = graph_names._names_and_stamp(conn)
        me = index.self_id
        assert stamp is not None and me is not None
        lazy = graph_walk._Neighbourhoods(stamp, me, filling=True)
        complete = graph_walk._Neighbourhoods(stamp, me, filling=True)
        complete._load_all(conn)
        assert complete.complete
        for hops in (0, 1, 2, 3, 4):
            seeds = pick.sample(ids, pick.randint(1, min(3, len(ids))))
            walked = graph_walk._walk(conn, seeds, hops, me)
            assert typed(lazy.walk(conn, seeds, hops)) == typed(walked)
            assert typed(complete.walk(conn, seeds, hops)) == typed(walked)
            if not walked:
                continue
            names = graph_signal._node_names(conn, index, [row[0] for row in walked])
            plain = graph_signal.Signal(walked, seeds, index, names)
            for kept in (lazy, complete):
                signal = graph_signal.Signal(walked, seeds, index, names, kept)
                assert typed(signal.chunk_scores(conn, everything)) == typed(
                    plain.chunk_scores(conn, everything)
                )
                for limit in (1, 3, 10, 30):
                    assert typed(signal.extra_chunks(conn, Filters(), limit)) == typed(
                        plain.extra_chunks(conn, Filters(), limit)
                    )
                session = Filters(exclude_session=1)
                assert signal.extra_chunks(conn, session, 10) == plain.extra_chunks(
                    conn, session, 10
                )
            facts = graph_facts._fact_index(conn, index.identity)
            expected = plain._lifted(conn, Filters(), facts)
            for _ in range(graph_walk.FILL_FROM_QUERY + 1):  # SQL first, then the kept ids
                assert plain.fact_candidates(conn, Filters()) == expected


@pytest.fixture
def no_keeping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The graph leg as before the cache: every walk and mention read in SQL."""
    monkeypatch.setattr(graph_walk, "_neighbourhoods_for", lambda *args: None)
    monkeypatch.setattr(graph_facts, "_live_facts_for", lambda *args: graph_facts._LiveFacts("off"))
    monkeypatch.setattr(graph_walk, "FILL_FROM_QUERY", 10**9)
    yield


QUESTIONS = [
    "what about Tuffy?",
    "did Jetson and Cuda meet?",
    "tell me about Lisbon weather",
    "Porto and Ada",
    "what did Rex say",
    "the weather",
]


def answers(mem: Store) -> list[Any]:
    out: list[Any] = []
    for question in QUESTIONS:
        out.append(mem.recall(question, k=8))
        out.append(mem.explain(question, k=8))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_recall_and_explain_are_the_same_with_and_without_the_cache(
    store: Store, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    rng = random.Random(seed)
    write_graph(
        store,
        {
            "confidence": [rng.choice([0.4, 0.7, 0.9]) for _ in NAMES],
            "edges": [
                (rng.randrange(11), rng.randrange(11), rng.randrange(3), rng.random())
                for _ in range(25)
            ],
            "mentions": [(rng.randrange(10), rng.randrange(CHUNKS)) for _ in range(40)],
        },
    )
    # FULL_READ_FROM_QUERY queries under one stamp, so the last rounds use the full read.
    monkeypatch.setattr(graph_walk, "FULL_READ_FROM_QUERY", 2 * len(QUESTIONS) * 2)
    # Scores age with the clock's minute: hold it, so a minute turning mid-test changes none.
    moment = clock.utcnow()
    for module in (clock, retrieval, graph_maint):
        monkeypatch.setattr(module, "utcnow", lambda: moment)
    kept = [answers(store) for _ in range(4)]
    assert all(k == kept[0] for k in kept)
    with monkeypatch.context() as patched:
        patched.setattr(graph_walk, "_neighbourhoods_for", lambda *args: None)
        patched.setattr(graph_facts, "_live_facts_for", lambda *args: graph_facts._LiveFacts("off"))
        assert answers(store) == kept[0]
    assert any(r.graph_traversal for r in kept[0][1::2])  # the graph took part


def tuffy_signal(mem: Store) -> graph_signal.Signal:
    found = graph.build_signal(database(mem), "what about Tuffy?", 2)
    assert found is not None
    return found


def test_a_write_by_another_process_is_seen_at_once(store: Store) -> None:
    ids = write_graph(store, {"confidence": [0.9, 0.8], "edges": [], "mentions": [(0, 0)]})
    tuffy, jetson = ids
    for _ in range(graph_walk.FULL_READ_FROM_QUERY + 2):  # keeping, then read in full
        found = tuffy_signal(store)
    assert found._kept is not None and found._kept.complete
    assert set(found.reached) == {tuffy}
    last = chunk_ids(store)[-1]
    code = f"""
import sys
writes = [
    "INSERT INTO graph_edges (source_node, target_node, relationship, weight, created_at, "
    "last_seen) VALUES ({tuffy}, {jetson}, 'runs', 1.0, 'x', 'x')",
    "INSERT INTO graph_mentions (node_id, chunk_id, created_at) VALUES ({jetson}, {last}, 'x')",
]
if len(sys.argv) > 2:  # a user's store on PostgreSQL: address, user
    import psycopg
    with psycopg.connect(sys.argv[1]) as conn:
        conn.execute("SELECT set_config('elastimem.user_id', %s, true)", (sys.argv[2],))
        for sql in writes:
            conn.execute(sql)
else:
    import sqlite3
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    for sql in writes:
        conn.execute(sql)
    conn.close()
"""
    subprocess.run([sys.executable, "-c", code, *open_args(store)], check=True)
    found = tuffy_signal(store)
    assert set(found.reached) == {tuffy, jetson}
    with reading(store) as conn:
        assert found.chunk_scores(conn, [last])[last][1] == ("jetson",)
        assert last in dict(found.extra_chunks(conn, Filters(), 30))
    # A confidence change by another connection, and a deleted mention.
    with connect(store) as other:
        other.execute("UPDATE graph_nodes SET confidence = 0.5 WHERE id = ?", (tuffy,))
        other.execute("DELETE FROM graph_mentions WHERE node_id = ?", (jetson,))
    found = tuffy_signal(store)
    assert found.reached[tuffy].strength == 0.5
    with reading(store) as conn:
        assert found.chunk_scores(conn, [last]) == {}


def test_nothing_is_kept_before_a_stamp_serves_a_few_queries(store: Store) -> None:
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})
    for query in range(1, graph_walk.FILL_FROM_QUERY + 1):
        found = tuffy_signal(store)
        assert len(found.reached) == 2
        kept = graph_walk._neighbourhoods[found._identity]
        assert kept.queries == query
        assert kept.filling == (query >= graph_walk.FILL_FROM_QUERY)
        assert bool(kept.edges) == kept.filling
        assert (found._kept is kept) == kept.filling  # before: the SQL walk answered


def test_a_store_without_the_stamp_reads_everything_in_sql(store: Store) -> None:
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})
    with writing(store) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'graph.stamp'")  # as a v5 file read-only
    for _ in range(graph_walk.FILL_FROM_QUERY + 1):
        found = tuffy_signal(store)
        assert found._kept is None and len(found.reached) == 2


def test_recall_reads_the_graph_in_its_own_snapshot(store: Store) -> None:
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})
    store.recall("what about Tuffy?")
    hits: list[Any] = []
    blocks = transactions(store, lambda: hits.extend(store.recall("what about Tuffy?")))
    assert hits
    assert len(blocks) == 1  # one read transaction on this thread
    assert any("graph.stamp" in s for s in blocks[0])  # the graph was read in that transaction


def test_a_failing_graph_read_ranks_without_the_graph(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})

    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(graph, "build_signal", broken)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        hits = store.recall("note about Tuffy")
        explained = store.explain("note about Tuffy")
    assert hits and explained.hits == hits and explained.graph_traversal == []
    assert "graph expansion failed; ranking without it" in caplog.text


def test_a_graph_read_failing_in_the_database_ranks_without_the_graph(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement the database rejects aborts a PostgreSQL transaction: the graph read,
    done inside recall's snapshot, must not take the keyword legs after it down too."""
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})

    def broken(*args: object, conn: Any = None, **kwargs: object) -> None:
        assert conn is not None  # read inside the ranking's snapshot
        conn.conn.execute("SELECT no_such_column FROM graph_nodes")

    monkeypatch.setattr(graph, "build_signal", broken)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        hits = store.recall("note about Tuffy")
        plan = store.build_context("what do you remember about Tuffy and the weather?")
    assert hits and "Tuffy" in hits[0].text
    assert "graph expansion failed; ranking without it" in caplog.text
    assert "recall failed" not in caplog.text
    assert plan.sections["user_facts"]  # read in the snapshot the graph read failed in


class _Recorded:
    """A psycopg connection that notes each statement it is given, with its parameters
    (psycopg has no trace callback, and the meta keys are parameters there)."""

    def __init__(self, conn: Any, seen: list[str]) -> None:
        self._conn, self._seen = conn, seen

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        self._seen.append(f"{query} {args!r}")
        return self._conn.execute(query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def transactions(mem: Store, run: Callable[[], object]) -> list[list[str]]:
    """The statements ``run`` sends on this thread, by read transaction (each
    ``Database.read`` of the store's backend, traced on its connection)."""
    me = threading.get_ident()
    out: list[list[str]] = []
    if is_postgres(mem):
        from elastimem.storage.postgres import database as postgres_database
        from elastimem.storage.postgres.tx import PostgresTx

        kind: Any = postgres_database.PostgresDatabase
    else:
        kind = sqlite_database.Database
    read = kind.read

    @contextmanager
    def traced_read(self: Any) -> Iterator[Any]:
        with read(self) as tx:
            if threading.get_ident() != me:
                yield tx
                return
            out.append([])
            if is_postgres(mem):
                yield PostgresTx(_Recorded(tx.conn, out[-1]), tx.user_id, writable=tx.writable)
                return
            tx.conn.set_trace_callback(out[-1].append)
            try:
                yield tx
            finally:
                tx.conn.set_trace_callback(None)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kind, "read", traced_read)
        run()
    return out


def test_build_context_reads_the_graph_in_the_facts_read(store: Store) -> None:
    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})
    question = "what do you remember about Tuffy and the weather?"
    store.build_context(question)
    blocks = transactions(store, lambda: store.build_context(question))
    graph_reads = [b for b in blocks if any("graph.stamp" in s for s in b)]
    assert len(graph_reads) == 1
    assert any("facts.stamp" in s for s in graph_reads[0])  # the live facts, same snapshot
    plan = store.build_context(question)
    assert "tuffy" in plan.sections["graph_context"]


def test_build_context_is_the_same_with_and_without_the_cache(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_graph(
        store,
        {
            "confidence": [0.9, 0.8, 0.7, 0.6],
            "edges": [(1, 2, 0, 1.0), (2, 3, 1, 0.5), (3, 4, 0, 0.8)],
            "mentions": [(0, 1), (1, 2), (2, 3), (3, 4)],
        },
    )
    questions = ["what about Tuffy and Jetson?", "tell me about Lisbon and the weather now"]

    def plans() -> list[dict[str, str]]:
        return [store.build_context(q).sections for q in questions]

    kept = [plans() for _ in range(graph_walk.FILL_FROM_QUERY + 1)]
    assert all(k == kept[0] for k in kept)
    assert kept[0][0]["graph_context"]
    monkeypatch.setattr(graph_walk, "_neighbourhoods_for", lambda *args: None)
    monkeypatch.setattr(graph_facts, "_live_facts_for", lambda *args: graph_facts._LiveFacts("off"))
    assert plans() == kept[0]


def test_build_context_gets_the_graph_when_the_facts_step_fails(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem import assembly

    write_graph(store, {"confidence": [0.9, 0.8], "edges": [(1, 2, 0, 1.0)], "mentions": []})

    def boom(*args: object, **kwargs: object) -> Any:
        raise RuntimeError("facts exploded")

    monkeypatch.setattr(assembly, "_read_facts", boom)
    plan = store.build_context("what do you remember about Tuffy and the weather?")
    assert plan.sections["user_facts"] == ""
    assert "tuffy" in plan.sections["graph_context"]
