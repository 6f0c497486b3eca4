"""Expansion: the walk from a query's seed nodes, and what it reads kept while the graph holds.

``expand`` walks edges in both directions from the seeds, never through the self node, for at
most ``graph_hops`` steps (``tx.graph.walk``). ``_Neighbourhoods`` keeps each node's
confidence, edges and mentions read under one graph stamp (``tx.graph.names_version()``;
schema v6 triggers give it a new value on any change the walk reads), so a query that reaches
nodes an earlier one did walks and scores them in Python, with the same answer.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import StoreError
from ..storage.tx import Tx
from .names import _INDEX_CACHE_SIZE, _index_lock, _warn_once

MAX_REACHED = 64
HOP_FACTOR = 0.6
# Only recursion depth matters for cost; no tier asks for more than 2 hops.
MAX_HOPS = 8


def _self_id(conn: Tx) -> int:
    found = conn.graph.self_node_id()
    return -1 if found is None else found


def expand(
    conn: Tx, seeds: Sequence[int], hops: int, *, self_id: int | None = None
) -> dict[int, tuple[float, int]]:
    """node id → (strength, depth) for the nodes reached from ``seeds`` in ≤ ``hops`` steps.

    One ``tx.graph.walk`` read (a ``WITH RECURSIVE`` query on SQLite) walking edges in both
    directions but never through the self node. A seed's strength is its confidence; each
    step multiplies by ``0.6·weight``. Each node keeps its maximum strength and minimum
    depth; the top 64 by (−strength, depth, id) are kept. When the walk cannot be read the
    seeds alone are returned.
    """
    return {r[0]: (r[1], r[2]) for r in _walk(conn, seeds, hops, self_id)}


def _walk(
    conn: Tx, seeds: Sequence[int], hops: int, self_id: int | None
) -> list[tuple[int, float, int]]:
    """``expand`` as rows (id, strength, depth), strongest first."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        return []
    hops = max(0, min(int(hops), MAX_HOPS))
    if self_id is None:
        self_id = _self_id(conn)
    try:
        return _strongest(conn.graph.walk(seeds, hops, self_id, HOP_FACTOR))
    except StoreError as exc:
        _warn_once("expand", "graph expansion failed; using the seeds alone: %s", exc)
        return _strongest(_seed_rows(conn, [s for s in seeds if s != self_id]))


def _strongest(rows: Iterable[Sequence[Any]]) -> list[tuple[int, float, int]]:
    """Walk rows (id, strength, depth) → one row per node with its maximum strength and
    minimum depth, the top ``MAX_REACHED`` by (−strength, depth, id)."""
    best: dict[int, list[Any]] = {}
    for node_id, strength, depth in rows:
        seen = best.get(node_id)
        if seen is None:
            # Ordered as the sort key, so the lists sort natively (ids are unique).
            best[node_id] = [-strength, depth, node_id]
            continue
        if -strength < seen[0]:
            seen[0] = -strength
        if depth < seen[1]:
            seen[1] = depth
    ranked = sorted(best.values())[:MAX_REACHED]
    return [(node_id, -neg, depth) for neg, depth, node_id in ranked]


def _seed_rows(conn: Tx, seeds: list[int]) -> list[tuple[int, float, int]]:
    """The fallback walk: the seeds alone, at their confidence (0.5 if even that fails)."""
    try:
        found = conn.graph.node_confidences(seeds)
    except StoreError:
        found = {}
    return [(s, float(found.get(s, 0.5)), 0) for s in seeds]


# -- what the walk and the mention reads return, kept while the graph holds ------------------

# Tuned on benchmarks/graph_latency.py (2,000 nodes / 5,000 edges / 20,000 mentions): every
# node's edges and mentions fit many times over; a store past the bound starts over.
MAX_CACHED_MENTIONS = 200_000
# Reading a node's edges and mentions to keep them costs more than the walk and the scores
# read (all its mentions, not those of the ~60 candidate chunks; a statement per level):
# 0.44 against 0.26 ms per query with nothing kept (benchmarks/graph_latency.py). So a new
# stamp's first queries read as before and keep nothing; only the third query under one
# stamp (the graph held still since two queries) starts keeping. When the worker writes to
# the graph every turn, a turn's one or two queries cost what they did without the cache.
FILL_FROM_QUERY = 3
# Node by node, a walk keeps meeting nodes no query reached before (random entities' far
# ends): ~90% of walks still read edges after 600 queries. Reading every edge at once costs
# ~14 ms at 5,000 edges (20-40 ms inside the benchmark, its garbage collector included),
# what ~130 walks save against those reads (~0.1-0.15 ms each), so it is done once a stamp
# has served that many queries (the graph is holding still), and only while the graph is
# small enough. (Reading every mention too took 35-60 ms at 20,000 mentions to save ~0.05
# ms a query: not done.)
FULL_READ_FROM_QUERY = 128
FULL_READ_MAX_EDGES = 20_000


class _Neighbourhoods:
    """Each node's confidence, edges and mentions, read as the store held them under one
    ``meta.graph.stamp`` (schema v6: triggers give it a new random value on any insert or
    delete of a node, edge or mention, and any change of a column read here).

    Filled node by node as queries reach them, so a query that reaches nodes an earlier one
    did (consecutive questions name the same entities, hubs are reached from everywhere)
    walks and scores them without SQL; a first-seen node costs about what the plain reads
    cost. Every read that fills it carries the stamp in the same statement, and rows read
    under another stamp are not kept (the caller falls back to plain SQL), so the walk and
    scores are exactly those of the SQL path, whatever snapshot the caller is in.
    """

    def __init__(self, stamp: str, self_id: int, *, filling: bool = False) -> None:
        self.stamp = stamp
        self.self_id = self_id
        self.lock = threading.Lock()
        self.queries = 0  # the queries that asked for it (``_neighbourhoods_for``)
        self.filling = filling  # whether reads may add to it (see FILL_FROM_QUERY)
        self.complete = False  # every node and edge read (see FULL_READ_FROM_QUERY)
        self.full_read_tried = False
        self.confidence: dict[int, Any] = {}  # node → confidence; None: no such node
        # node → (other ends, weights) of its edges not touching the self node: two tuples
        # per node rather than one per edge, fewer objects for the garbage collector.
        self.edges: dict[int, tuple[tuple[int, ...], tuple[Any, ...]]] = {}
        self.mentions: dict[int, tuple[int, ...]] = {}  # node → chunk ids, newest first
        self.by_chunk: dict[int, list[int]] = {}  # chunk → the kept nodes mentioning it
        self.mention_count = 0
        # Every weight and confidence read is a finite number ≥ 0, which makes the walk's
        # per-depth maximum exact (multiplying by x ≥ 0 keeps the order of floats); the SQL
        # walk answers otherwise (rows written by hand).
        self.exact = True

    def _load_nodes(self, conn: Tx, nodes: Sequence[int]) -> bool:
        """Read the confidence and edges of ``nodes``; False (nothing kept) when not
        ``filling`` or the store's stamp is not this one."""
        if not self.filling:
            return False
        rows = conn.graph.stamped_neighbourhoods(nodes, self.self_id)
        return self._keep(rows, nodes, both_ends=False)

    def _keep(
        self, rows: Iterable[Sequence[Any]], nodes: Iterable[int], *, both_ends: bool
    ) -> bool:
        """Keep the loader ``rows`` — (0, stamp) first, then (1, id, confidence) and
        (2, node, other end, weight) — for ``nodes`` (which may have none); False, keeping
        nothing, when the stamp is not this one. ``both_ends``: an edge row is kept for
        both of its ends (the full read)."""
        rows = iter(rows)
        first = next(rows, None)
        if first is None or first[0] != 0 or first[1] != self.stamp:
            return False
        confidence: dict[int, Any] = dict.fromkeys(nodes)
        others: dict[int, list[int]] = {node_id: [] for node_id in confidence}
        weights: dict[int, list[Any]] = {node_id: [] for node_id in confidence}
        exact = True
        for kind, a, b, weight in rows:
            if kind == 1:
                confidence[a] = b
                exact = exact and _nonnegative(b)
            elif kind == 2:
                for end, other in ((a, b), (b, a)) if both_ends else ((a, b),):
                    if end not in others:
                        others[end], weights[end] = [], []
                    others[end].append(other)
                    weights[end].append(weight)
                exact = exact and _nonnegative(weight)
        with self.lock:  # in place: a walk going on meanwhile holds these dicts
            self.confidence.update(confidence)
            self.edges.update(
                (node_id, (tuple(found), tuple(weights[node_id])))
                for node_id, found in others.items()
            )
            self.exact = self.exact and exact
        return True

    def _load_all(self, conn: Tx) -> None:
        """Read every node's confidence and every edge, once per stamp, when the graph is
        small enough; nothing kept if the store's stamp is not this one."""
        self.full_read_tried = True
        if conn.graph.edge_count() > FULL_READ_MAX_EDGES:
            return
        # Rows are taken one by one, not fetched all at once: ~7,000 row tuples alive
        # together set off the garbage collector's full pass (~80 ms in the benchmark).
        rows = conn.graph.stamped_graph(self.self_id)
        self.complete = self._keep(rows, (), both_ends=True)

    def walk(
        self, conn: Tx, seeds: Sequence[int], hops: int
    ) -> list[tuple[int, float, int]] | None:
        """``_walk`` from the kept edges (reading those of nodes not kept yet); None when
        the SQL walk must answer instead."""
        seeds = [int(s) for s in seeds]
        hops = max(0, min(int(hops), MAX_HOPS))
        if (
            not self.complete
            and not self.full_read_tried
            and self.filling
            and self.queries >= FULL_READ_FROM_QUERY
        ):
            self._load_all(conn)
        complete, edges, confidences = self.complete, self.edges, self.confidence
        missing = [] if complete else [s for s in seeds if s not in edges]
        if missing and not self._load_nodes(conn, missing):
            return None
        frontier: dict[int, Any] = {}
        for seed in seeds:
            confidence = confidences.get(seed)
            if seed != self.self_id and confidence is not None:
                frontier[seed] = confidence
        if not self.exact:
            return None
        # As ``_strongest`` over the SQL walk's rows: [−strength, depth, id] per node, the
        # first row kept on a tie (rows come depth by depth, as the SQL's queue gives them).
        best = {node_id: [-strength, 0, node_id] for node_id, strength in frontier.items()}
        for depth in range(1, hops + 1):
            if not complete:
                missing = [node_id for node_id in frontier if node_id not in edges]
                if missing and not self._load_nodes(conn, missing):
                    return None
                if not self.exact:
                    return None
            # The strongest way to each node at exactly this depth: the SQL walk goes on
            # from every row, but a weaker row to a node at the same depth only leads to
            # weaker rows further on (strengths and weights are ≥ 0), so one per node.
            reached: dict[int, Any] = {}
            for node_id, strength in frontier.items():
                base = strength * HOP_FACTOR  # as the SQL: (strength · 0.6) · weight
                others, weights = edges.get(node_id, _NO_EDGES)
                for other, weight in zip(others, weights):
                    value = base * weight
                    if value > reached.get(other, -1.0):
                        reached[other] = value
            if not reached:
                break
            for node_id, value in reached.items():
                seen = best.get(node_id)
                if seen is None:
                    best[node_id] = [-value, depth, node_id]
                elif -value < seen[0]:
                    seen[0] = -value
            frontier = reached
        ranked = sorted(best.values())[:MAX_REACHED]
        return [(node_id, -neg, depth) for neg, depth, node_id in ranked]

    def mentions_of(self, conn: Tx, nodes: Iterable[int]) -> dict[int, tuple[int, ...]] | None:
        """node → the chunks that mention it, newest first; None when a read was needed
        and not ``filling``, or the store's stamp is not this one."""
        found = self._mentions(conn, nodes)
        return None if found is None else found[0]

    def _mentions(
        self, conn: Tx, nodes: Iterable[int]
    ) -> tuple[dict[int, tuple[int, ...]], Mapping[int, list[int]]] | None:
        """``mentions_of``, and chunk → the kept nodes that mention it (every one of
        ``nodes`` among them), taken together: the bound can start both over meanwhile."""
        with self.lock:
            kept = self.mentions
            out = {node_id: kept[node_id] for node_id in nodes if node_id in kept}
            missing = [node_id for node_id in nodes if node_id not in out]
            if not missing:
                return out, self.by_chunk
        if not self.filling:
            return None
        found: dict[int, list[int]] = {node_id: [] for node_id in missing}
        stamp, pairs = conn.graph.stamped_mentions(missing)
        if stamp is None or stamp != self.stamp:
            return None
        for node_id, chunk_id in pairs:
            found[node_id].append(chunk_id)
        for node_id, chunk_ids in found.items():
            chunk_ids.sort(reverse=True)
            out[node_id] = tuple(chunk_ids)
        added = sum(len(chunk_ids) for chunk_ids in found.values())
        with self.lock:
            if self.mention_count + added > MAX_CACHED_MENTIONS:
                self.mentions, self.by_chunk, self.mention_count = {}, {}, 0
            kept, by_chunk = self.mentions, self.by_chunk
            for node_id, newest in out.items():  # all of them: the bound may have struck
                if node_id not in kept:
                    kept[node_id] = newest
                    self.mention_count += len(newest)
                    for chunk_id in newest:
                        by_chunk.setdefault(chunk_id, []).append(node_id)
            return out, by_chunk


_NO_EDGES: tuple[tuple[int, ...], tuple[Any, ...]] = ((), ())


def _nonnegative(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (math.isfinite(value) and value >= 0)
    )


_neighbourhoods: OrderedDict[tuple[object, ...], _Neighbourhoods] = OrderedDict()


def _neighbourhoods_for(
    identity: tuple[object, ...], stamp: str | None, self_id: int
) -> _Neighbourhoods | None:
    """This store's ``_Neighbourhoods`` for ``stamp`` (a new one when the stamp moved);
    None in a store without the stamp (older than v6, opened read-only)."""
    if stamp is None or not identity:
        return None
    with _index_lock:
        found = _neighbourhoods.get(identity)
        if found is None or found.stamp != stamp or found.self_id != self_id:
            found = _neighbourhoods[identity] = _Neighbourhoods(stamp, self_id)
        found.queries += 1
        found.filling = found.filling or found.queries >= FILL_FROM_QUERY
        _neighbourhoods.move_to_end(identity)
        while len(_neighbourhoods) > _INDEX_CACHE_SIZE:
            _neighbourhoods.popitem(last=False)
    return found
