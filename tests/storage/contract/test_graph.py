"""Contract: ``tx.graph`` (storage.graph.GraphRows) on every backend.

Chunks and facts are written through the memory layer (``episodic``, ``semantic``), which
reaches them through the families too, so the suite stays backend-neutral.
"""

from __future__ import annotations

from typing import Any

import pytest

from elastimem.memory import episodic, semantic

NOW = "2025-01-01T00:00:00.000000Z"
LATER = "2025-01-02T00:00:00.000000Z"


def node(tx: Any, name: str, node_type: str = "thing", confidence: float = 0.5) -> int:
    return int(
        tx.graph.insert_node(
            node_type, name, [name.title()], now=NOW, importance=0.5, confidence=confidence
        )
    )


def edge(tx: Any, source: int, target: int, relation: str = "knows", weight: float = 0.5) -> int:
    return int(
        tx.graph.insert_edge(
            source, target, relation, confidence=0.5, importance=0.5, weight=weight, now=NOW,
            chunk_id=None,
        )
    )  # fmt: skip


def chunks(tx: Any, *texts: str, session: int | None = None) -> list[int]:
    if session is None:
        session = episodic.open_session(tx, episodic.Owner(1, "host"), at=None, host_tag=None)
    record = episodic.insert_turn(
        tx, session, "hello", "ok", at=NOW, chunk_texts=list(texts), user_tokens=1,
        assistant_tokens=1,
    )  # fmt: skip
    return list(record.chunk_ids)


def fact(tx: Any, key: str, value: str) -> int:
    written = semantic.write_fact(
        tx, key, value, "explicit", profile_keys=frozenset(), reserved_keys=frozenset(),
        quarantine_cap=10,
    )  # fmt: skip
    assert written.fact_id is not None
    return int(written.fact_id)


# -- stamps and identity -------------------------------------------------------------------------


def test_identity_and_stamps(backend_database: Any) -> None:
    with backend_database.read() as tx:
        identity = tx.graph.store_identity()
        names, stamp = tx.graph.names_version()
        facts_stamp = tx.graph.facts_stamp()
    assert isinstance(identity, tuple) and identity
    with backend_database.read() as tx:
        assert tx.graph.store_identity() == identity
        assert tx.graph.names_version() == (names, stamp)
    with backend_database.atomic() as tx:
        node(tx, "ada")
        tx.meta.bump("graph.gen")
    with backend_database.read() as tx:
        names_after, stamp_after = tx.graph.names_version()
    assert names_after != names
    assert stamp is None or stamp_after != stamp
    with backend_database.atomic() as tx:
        fact(tx, "pet", "a cat")
    with backend_database.read() as tx:
        assert facts_stamp is None or tx.graph.facts_stamp() != facts_stamp


# -- nodes ---------------------------------------------------------------------------------------


def test_the_self_node(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        assert tx.graph.ensure_self_node() == me
        assert tx.graph.self_node_id() == me
        assert not tx.graph.has_nodes()
        assert tx.graph.node_count() == 0
        ada = node(tx, "ada")
        assert tx.graph.has_nodes() and tx.graph.node_count() == 1
        assert [n.id for n in tx.graph.nodes()] == [ada]
        assert [n.id for n in tx.graph.nodes(with_self=True)] == sorted([me, ada])


def test_insert_read_and_update_a_node(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        ada = tx.graph.insert_node(
            "person", "ada", ["Ada", "ADA!"], now=NOW, importance=0.5, confidence=0.7
        )
        found = tx.graph.node(ada)
        assert found is not None
        assert (found.type, found.name, found.aliases) == ("person", "ada", ("Ada", "ADA!"))
        assert (found.confidence, found.mentions, found.created_at) == (0.7, 1, NOW)
        assert found.updated_at == NOW and found.cluster_id is None and found.cluster_label is None
        assert tx.graph.node(ada + 1000) is None
        tx.graph.update_node(
            ada, aliases=["Ada L."], mentions=3, confidence=0.6, importance=0.6, updated_at=LATER
        )
        found = tx.graph.node(ada)
        assert found is not None and found.aliases == ("Ada L.",) and found.mentions == 3
        assert (found.confidence, found.updated_at, found.created_at) == (0.6, LATER, NOW)
        tx.graph.update_node(
            ada, aliases=[], mentions=4, confidence=0.5, importance=0.6, updated_at=LATER,
            created_at="2024-01-01T00:00:00.000000Z",
        )  # fmt: skip
        found = tx.graph.node(ada)
        assert found is not None and found.created_at.startswith("2024") and found.aliases == ()
        tx.graph.set_node_type(ada, "place")
        assert tx.graph.node_exists("place", "ada") and not tx.graph.node_exists("person", "ada")


def test_node_lookups(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        thing = node(tx, "kite", "thing", 0.4)
        entity = tx.graph.insert_node("entity", "kite", [], now=NOW, importance=0.5,
                                      confidence=0.9)  # fmt: skip
        tx.graph.update_node(thing, aliases=["Kite"], mentions=5, confidence=0.4,
                             importance=0.7, updated_at=NOW)  # fmt: skip
        assert tx.graph.nodes_named("kite") == [(thing, "thing", 5), (entity, "entity", 1)]
        assert tx.graph.nodes_named("@self") == []
        rows = {r[0]: r for r in tx.graph.name_rows()}
        assert rows[thing] == (thing, "thing", "kite", ("Kite",), None)
        assert rows[me][1] == "self"
        assert tx.graph.node_names([thing, entity, 10**12]) == {
            thing: ("kite", None), entity: ("kite", None)
        }  # fmt: skip
        assert tx.graph.node_confidences([thing, entity]) == {thing: 0.4, entity: 0.9}
        assert [(r[0], r[2]) for r in tx.graph.aliased_nodes()] == [(thing, ("Kite",))]
        assert tx.graph.entities_with_typed_twin() == [(entity, thing)]
        assert {r[0] for r in tx.graph.node_ages()} == {thing, entity}
        assert all(r[2] == NOW for r in tx.graph.node_ages())


def test_many_ids_at_once(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        ids = [node(tx, f"n{i}") for i in range(1200)]
        assert len(tx.graph.node_names(ids)) == 1200
        assert len(tx.graph.node_confidences(ids)) == 1200
        tx.graph.touch_nodes(ids, LATER)
        assert {n.updated_at for n in tx.graph.nodes()} == {LATER}
        assert tx.graph.delete_nodes(ids[:1100]) == 1100
        assert tx.graph.node_count() == 100


def test_touch_never_moves_back_and_weakest_nodes(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a, b = node(tx, "a"), node(tx, "b")
        tx.graph.update_node(b, aliases=[], mentions=9, confidence=0.5, importance=0.9,
                             updated_at=NOW)  # fmt: skip
        tx.graph.touch_nodes([a], LATER)
        tx.graph.touch_nodes([a], NOW)
        found = tx.graph.node(a)
        assert found is not None and found.updated_at == LATER
        assert tx.graph.weakest_nodes(1) == [a]
        assert tx.graph.weakest_nodes(5) == [a, b]


def test_deleting_a_node_takes_its_edges_mentions_and_cluster_label(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a, b, c = node(tx, "a"), node(tx, "b"), node(tx, "c")
        edge(tx, a, b)
        (chunk,) = chunks(tx, "a and b")
        tx.graph.add_mentions([(a, chunk), (b, chunk)], NOW)
        tx.graph.set_clusters([(a, a, "pair"), (b, a, "pair"), (c, None, None)])
        assert tx.graph.delete_nodes([b]) == 1
        assert tx.graph.edge_count() == 0
        assert tx.graph.mentions_among([chunk], [a, b]) == [(chunk, a)]
        assert tx.graph.cluster_assignments() == {a: (a, None)}
        assert tx.graph.delete_nodes([]) == 0


# -- edges ---------------------------------------------------------------------------------------


def test_insert_read_and_update_an_edge(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a, b = node(tx, "a"), node(tx, "b")
        (chunk,) = chunks(tx, "a b")
        first = edge(tx, a, b, "knows", 0.5)
        assert tx.graph.edge(a, b, "knows") == (first, 0.5, 1)
        assert tx.graph.edge(b, a, "knows") is None
        tx.graph.update_edge(first, seen=2, confidence=0.6, importance=0.6, weight=0.7,
                             last_seen=LATER, chunk_id=chunk)  # fmt: skip
        tx.graph.update_edge(first, seen=3, confidence=0.6, importance=0.6, weight=0.7,
                             last_seen=LATER, chunk_id=None)  # fmt: skip
        assert tx.graph.edge(a, b, "knows") == (first, 0.6, 3)
        assert tx.graph.edge_tallies([first]) == {first: (0.6, 3, LATER, NOW, chunk)}
        tx.graph.update_edge(first, seen=4, confidence=0.5, importance=0.6, weight=0.7,
                             last_seen=LATER, chunk_id=None,
                             created_at="2024-01-01T00:00:00.000000Z")  # fmt: skip
        assert tx.graph.edge_tallies([first])[first][3].startswith("2024")
        assert tx.graph.edges() == [(first, a, b, "knows", 0.7)]
        assert tx.graph.edge_ages() == [(first, 0.5, LATER)]


def test_repointing_and_deleting_edges(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        a, b, c = node(tx, "a"), node(tx, "b"), node(tx, "c")
        ab, ac, ca, am = edge(tx, a, b), edge(tx, a, c), edge(tx, c, a, "likes"), edge(tx, a, me)
        touching = [
            (ab, a, b, "knows"),
            (ac, a, c, "knows"),
            (ca, c, a, "likes"),
            (am, a, me, "knows"),
        ]
        assert tx.graph.edges_touching(a) == touching
        assert tx.graph.other_edge(a, b, "knows", ac) == ab
        assert tx.graph.other_edge(a, b, "knows", ab) is None
        tx.graph.repoint_edge(ac, b, c)
        assert tx.graph.edge(b, c, "knows") is not None and tx.graph.edge(a, c, "knows") is None
        assert sorted(tx.graph.edges_between_others()) == sorted([(a, b), (b, c), (c, a)])
        assert tx.graph.delete_edges([ab, ca]) == 2
        assert tx.graph.edge_count() == 2
        assert tx.graph.delete_weakest_edges(1) == 1
        assert tx.graph.edge_count() == 1


def test_walk(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        a, b, c = node(tx, "a", confidence=0.8), node(tx, "b"), node(tx, "c")
        edge(tx, a, b, weight=1.0)
        edge(tx, c, b, weight=0.5)
        edge(tx, a, me, weight=1.0)
        edge(tx, me, c, weight=1.0)
        steps = tx.graph.walk([a], 2, me, 0.5)
    best: dict[int, tuple[float, int]] = {}
    for node_id, strength, depth in steps:
        old = best.get(node_id)
        best[node_id] = (max(strength, old[0]), min(depth, old[1])) if old else (strength, depth)
    assert me not in best
    assert best[a] == (pytest.approx(0.8), 0)
    assert best[b] == (pytest.approx(0.4), 1)
    assert best[c] == (pytest.approx(0.1), 2)
    with backend_database.read() as tx:
        assert tx.graph.walk([a], 0, me, 0.5) == [(a, pytest.approx(0.8), 0)]
        assert tx.graph.walk([me], 2, me, 0.5) == []


def test_stamped_reads(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        a, b = node(tx, "a", confidence=0.8), node(tx, "b", confidence=0.6)
        edge(tx, a, b, weight=0.9)
        edge(tx, a, me)
        (chunk,) = chunks(tx, "a b")
        tx.graph.add_mentions([(a, chunk)], NOW)
    with backend_database.read() as tx:
        _names, stamp = tx.graph.names_version()
        rows = list(tx.graph.stamped_neighbourhoods([a], me))
        full = list(tx.graph.stamped_graph(me))
        mentions = tx.graph.stamped_mentions([a, b])
    if stamp is None:  # a backend keeping no stamp gives none
        assert rows == [] or rows[0][0] != 0
        assert mentions == (None, [])
        return
    assert rows[0][:2] == (0, stamp)
    assert sorted(r for r in rows[1:]) == [(1, a, 0.8, None), (2, a, b, 0.9)]
    assert full[0][:2] == (0, stamp)
    assert sorted(r for r in full[1:] if r[0] == 2) == [(2, a, b, 0.9)]
    assert {(r[1], r[2]) for r in full[1:] if r[0] == 1} >= {(a, 0.8), (b, 0.6)}
    assert mentions == (stamp, [(a, chunk)])


# -- mentions ------------------------------------------------------------------------------------


def test_mentions(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a, b = node(tx, "a"), node(tx, "b")
        one, two, three = chunks(tx, "first a", "second a b", "third b")
        assert tx.graph.add_mentions([(a, one), (a, two), (a, one), (b, three)], NOW) == [
            (a, one), (a, two), (b, three)
        ]  # fmt: skip
        assert tx.graph.add_mentions([(a, one)], NOW) == []
        assert sorted(tx.graph.mentions_among([one, two, three], [a])) == [(one, a), (two, a)]
        assert tx.graph.mentions_among([one], []) == []
        assert tx.graph.newest_mentioned_chunks([a, b], 2) == [three, two]
        assert tx.graph.newest_mentioned_chunks([a], 5, since="2030-01-01T00:00:00Z") == []
        assert tx.graph.strongest_mentioned_chunks([(0.9, [a]), (0.5, [b])], 5) == [
            (two, 0.9), (one, 0.9), (three, 0.5)
        ]  # fmt: skip
        assert tx.graph.strongest_mentioned_chunks([(0.9, [a])], 1, until=NOW) == []
        tx.graph.move_mentions(a, b)
        assert sorted(tx.graph.mentions_among([one, two, three], [b])) == [
            (one, b), (two, b), (three, b)
        ]  # fmt: skip
        assert sorted(tx.graph.chunk_texts([one, three, 10**12])) == [
            (one, "first a"), (three, "third b")
        ]  # fmt: skip


def test_mentions_filtered_by_session(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a = node(tx, "a")
        (first,) = chunks(tx, "old a")
        session = episodic.open_session(tx, episodic.Owner(1, "host"), at=None, host_tag=None)
        (second,) = chunks(tx, "new a", session=session)
        tx.graph.add_mentions([(a, first), (a, second)], NOW)
        assert tx.graph.newest_mentioned_chunks([a], 5, exclude_session=session) == [first]
        assert tx.graph.strongest_mentioned_chunks([(1.0, [a])], 5, exclude_session=session) == [
            (first, 1.0)
        ]


def test_mention_chunks_naming(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        a = node(tx, "tuffy")
        named = chunks(tx, "my robot Tuffy rolls", "nothing here", 'a "quoted" Tuffy too')
        try:
            added = tx.graph.mention_chunks_naming(a, "tuffy", NOW, 50)
        except Exception as exc:  # a store without full-text search says so
            from elastimem.errors import StoreError

            assert isinstance(exc, StoreError)
            return
        assert added == 2
        assert sorted(c for c, _n in tx.graph.mentions_among(named, [a])) == [named[0], named[2]]
        assert tx.graph.mention_chunks_naming(a, 'tuffy" OR "nothing', NOW, 50) == 0


# -- merges and clusters -------------------------------------------------------------------------


def test_merge_reviews(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.graph.merge_reviews() == []
        tx.graph.record_merge_review("thing", "kite", "thing", "kite mk2", "same", NOW)
        tx.graph.record_merge_review("thing", "kite", "thing", "kite mk2", "different", NOW)
        assert tx.graph.merge_reviews() == [("kite", "kite mk2")]


def test_clusters(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        me = tx.graph.ensure_self_node()
        a, b, c = node(tx, "a"), node(tx, "b"), node(tx, "c")
        tx.graph.set_clusters([(a, a, None), (b, a, None), (me, a, None)])
        assert tx.graph.cluster_assignments() == {a: (a, None), b: (a, None), me: (a, None)}
        assert sorted(tx.graph.unlabelled_cluster_members()) == [(a, a, "a", 1), (a, b, "b", 1)]
        assert tx.graph.cluster_members(a) == sorted([a, b, me])
        tx.graph.set_cluster_label(a, "letters")
        assert tx.graph.unlabelled_cluster_members() == []
        assert sorted(tx.graph.clustered_names()) == [(a, "letters", "a"), (a, "letters", "b")]
        tx.graph.set_clusters([(b, None, None), (c, c, "solo")])
        assert tx.graph.cluster_assignments() == {
            a: (a, "letters"), me: (a, "letters"), c: (c, "solo")
        }  # fmt: skip


# -- facts, as the graph reads them --------------------------------------------------------------


def test_fact_reads(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.graph.newest_fact() is None
        assert tx.graph.live_facts_among([], with_newest=True) == (None, [])
        old = fact(tx, "pet", "a cat")
        new = fact(tx, "pet", "a dog")
        other = fact(tx, "city", "lisbon")
        assert tx.graph.newest_fact() == (other, "city", "lisbon")
        assert tx.graph.fact_text(old) == (old, "pet", "a cat")
        assert tx.graph.fact_text(10**12) is None
        assert tx.graph.fact_texts_after(old) == [(new, "pet", "a dog"), (other, "city", "lisbon")]
        assert sorted(tx.graph.fact_texts([other, old])) == [
            (old, "pet", "a cat"), (other, "city", "lisbon")
        ]  # fmt: skip
        assert tx.graph.all_fact_texts() == [
            (old, "pet", "a cat", False), (new, "pet", "a dog", True),
            (other, "city", "lisbon", True),
        ]  # fmt: skip
        assert sorted(tx.graph.current_fact_ids()) == [new, other]
        assert sorted(tx.graph.live_fact_ids()) == [new, other]
        newest, live = tx.graph.live_facts_among([old, new, other], with_newest=True)
        assert newest == (other, "city", "lisbon") and sorted(live) == [new, other]
        assert tx.graph.live_facts_among([old, new]) == (None, [new])
        assert tx.graph.live_facts_among([new], since="2999-01-01T00:00:00Z") == (None, [])
        assert tx.graph.live_facts_among([new], until="2999-01-01T00:00:00Z") == (None, [new])
        # Over a thousand ids in one call (more than SQLite binds in one statement), around
        # the ones written: PostgreSQL draws ids from a sequence every user shares.
        many = list(range(max(1, old - 600), other + 1300))
        assert len(many) > 1000 and len(tx.graph.live_facts_among(many)[1]) == 2
