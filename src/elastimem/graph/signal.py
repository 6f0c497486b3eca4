"""The query-time graph signal: seeds, the walk, and the scores ranking asks of them.

``build_signal`` detects seed nodes by a plain token scan of the query (no model), expands
them (``neighbourhoods``) and returns a ``Signal`` (``retrieval.GraphSignal``) computed once
per call. Facts that name a reached node are found through the fact token index
(``facts_index``). ``build_signal(..., conn=)`` reads inside the caller's snapshot: the
ranking builds the signal in its own read, one transaction per query.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import cached_property
from typing import NamedTuple, Protocol

from ..errors import StoreError
from ..storage.tx import Tx
from ..text import sanitize
from ..values import GraphTraversalStep
from . import facts_index, neighbourhoods
from .facts_index import _current_only, _fact_index, _fact_indexes, _FactIndex
from .names import (
    Database,
    _contains,
    _database_identity,
    _fold_tokens,
    _index_lock,
    _NameIndex,
    _names_and_stamp,
    _token_set,
    _tokens,
)
from .neighbourhoods import _Neighbourhoods, _self_id

# extra_chunks asks the strongest strength levels one by one (usually one is enough), then
# the rest in one grouped query.
EXTRA_LEVEL_QUERIES = 3


class Filters(Protocol):
    """What the signal reads of ``retrieval.Filters``: the session left out, the time span."""

    @property
    def exclude_session(self) -> int | None: ...

    @property
    def since(self) -> str | None: ...

    @property
    def until(self) -> str | None: ...


def _chunk_filters(filters: Filters) -> dict[str, object]:
    return {"exclude_session": filters.exclude_session, "since": filters.since,
            "until": filters.until}  # fmt: skip


class _Reached(NamedTuple):
    node_id: int
    name: str
    label: str | None
    strength: float
    depth: int
    is_seed: bool


class Signal:
    """The graph expansion of one query, computed once; implements ``retrieval.GraphSignal``.

    Built on every recall that names a node, so the scoring paths read plain dicts
    (strength, name by node id) and the ``reached`` view is only made when asked for.
    """

    def __init__(
        self,
        walked: list[tuple[int, float, int]],
        seeds: Iterable[int],
        index: _NameIndex,
        names: Mapping[int, tuple[str, str | None]] | None = None,
        kept: _Neighbourhoods | None = None,
    ):
        """``walked``: (id, strength, depth) of the reached nodes, strongest first, as
        ``_walk`` gives them; ``names``: (name, label) by id when not all are in ``index``;
        ``kept``: the store's kept mentions, under the stamp the walk was read at."""
        self._walked = walked
        self._kept = kept
        self._seeds = frozenset(seeds)
        self._names = index.names if names is None else names
        self._strength = {node_id: strength for node_id, strength, _depth in walked}
        # Fact matching reads the shared index (every form by its first token, every node's
        # forms): no per-query copy of the forms.
        self._index = index
        self._by_first = index.by_first
        self._identity = index.identity

    @cached_property
    def _firsts(self) -> frozenset[str]:
        """The first tokens of the reached nodes' forms (what ``fact_score`` looks for)."""
        forms = self._index.forms
        return frozenset({form[0] for node_id in self._strength for form in forms.get(node_id, ())})

    @cached_property
    def reached(self) -> dict[int, _Reached]:
        """node id → its ``_Reached`` row, strongest first."""
        return {
            node_id: _Reached(
                node_id, *self._names[node_id], strength, depth, node_id in self._seeds
            )
            for node_id, strength, depth in self._walked
        }

    def __bool__(self) -> bool:
        return bool(self._walked)

    @cached_property
    def _levels(self) -> list[tuple[float, list[int]]]:
        """The reached nodes by strength level, strongest first."""
        ordered: list[tuple[float, list[int]]] = []
        for node_id, strength, _depth in self._walked:
            if ordered and ordered[-1][0] == strength:
                ordered[-1][1].append(node_id)
            else:
                ordered.append((strength, [node_id]))
        return ordered

    def chunk_scores(
        self, conn: Tx, chunk_ids: list[int]
    ) -> dict[int, tuple[float, tuple[str, ...]]]:
        """chunk id → (g, sorted names of the reached nodes it mentions)."""
        reached = list(self._strength)
        if not reached:
            return {}
        kept = self._kept._mentions(conn, reached) if self._kept is not None else None
        if kept is not None:
            # Every reached node's mentions are kept: a chunk's kept nodes, filtered to the
            # reached ones, are the reached nodes it mentions (~60 lookups, not 64 sets).
            by_chunk, strength = kept[1], self._strength
            out: dict[int, tuple[float, tuple[str, ...]]] = {}
            for chunk_id in chunk_ids:
                nodes = by_chunk.get(chunk_id)
                if nodes:
                    hit = [node_id for node_id in nodes if node_id in strength]
                    if hit:
                        out[chunk_id] = self._score(hit)
            return out
        linked: dict[int, list[int]] = {}
        # Only the reached nodes' mentions come back: a chunk can mention a dozen entities.
        for chunk_id, node_id in conn.graph.mentions_among(chunk_ids, reached):
            linked.setdefault(chunk_id, []).append(node_id)
        return {chunk_id: self._score(nodes) for chunk_id, nodes in linked.items()}

    def _score(self, nodes: Collection[int]) -> tuple[float, tuple[str, ...]]:
        """(g, sorted names) of a non-empty set of reached nodes."""
        if len(nodes) == 1:  # most chunks and facts name one reached node
            (node_id,) = nodes
            return self._strength[node_id], (self._names[node_id][0],)
        strength, names = self._strength, self._names
        g = max(strength[node_id] for node_id in nodes)
        return g, tuple(sorted({names[node_id][0] for node_id in nodes}))

    def extra_chunks(self, conn: Tx, filters: Filters, limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` chunks linked to reached nodes, by (−g, −id), filters in SQL.

        A chunk's g is its strongest reached node, so the strongest nodes are asked first,
        newest chunk first, and weaker ones only while slots remain: the usual case reads
        about ``limit`` mention rows instead of every mention of 64 nodes.
        """
        if limit <= 0 or not self._walked:
            return []
        where = _chunk_filters(filters)
        filtered = any(value is not None for value in where.values())
        ordered = self._levels
        if not filtered and self._kept is not None:
            found = _kept_extra(conn, self._kept, ordered, limit)
            if found is not None:
                return found
        taken: dict[int, float] = {}
        for index, (strength, nodes) in enumerate(ordered):
            need = limit - len(taken)
            if need <= 0:
                break
            if index >= EXTRA_LEVEL_QUERIES:
                # Many weak levels left: one grouped query over all of them.
                taken.update(self._grouped(conn, ordered[index:], where, taken, need))
                break
            rows = conn.graph.newest_mentioned_chunks(
                nodes,
                need + len(taken),
                **where,  # type: ignore[arg-type]
            )
            for chunk_id in rows:
                if chunk_id not in taken and len(taken) < limit:
                    taken[chunk_id] = strength
        return sorted(taken.items(), key=lambda item: (-item[1], -item[0]))

    @staticmethod
    def _grouped(
        conn: Tx,
        levels: list[tuple[float, list[int]]],
        where: Mapping[str, object],
        taken: Mapping[int, float],
        need: int,
    ) -> dict[int, float]:
        rows = conn.graph.strongest_mentioned_chunks(
            levels,
            need + len(taken),
            **where,  # type: ignore[arg-type]
        )
        out: dict[int, float] = {}
        for chunk_id, g in rows:
            if chunk_id not in taken and len(out) < need:
                out[chunk_id] = g
        return out

    def matched_nodes(self, key: str, value: str) -> set[int]:
        """Reached nodes whose name or alias occurs at a word boundary in the key or value."""
        found: set[int] = set()
        for text in (key, value):
            if not isinstance(text, str):
                text = sanitize(text)
            tokens = _tokens(text)
            # Only the tokens that start a reached name are looked at, in C; a one-token
            # name (most are) matches by being there, longer ones are checked in place.
            for token in self._firsts.intersection(tokens):
                for form, node_id, _length in self._by_first[token]:
                    if (
                        node_id in self._strength
                        and node_id not in found
                        and (len(form) == 1 or _contains(tokens, form))
                    ):
                        found.add(node_id)
        return found

    def fact_score(self, key: str, value: str) -> tuple[float, tuple[str, ...]]:
        """(g, sorted names) of the reached nodes named in a fact's folded key or value."""
        # Ranking scores every live fact: the common miss costs two cached set lookups.
        firsts = self._firsts
        if (
            isinstance(key, str)
            and isinstance(value, str)
            and firsts.isdisjoint(_token_set(key))
            and firsts.isdisjoint(_token_set(value))
        ):
            return 0.0, ()
        found = self.matched_nodes(key, value)
        if not found:
            return 0.0, ()
        return self._score(found)

    def fact_candidates(
        self, conn: Tx, filters: Filters
    ) -> dict[int, tuple[float, tuple[str, ...]]]:
        """fact id → (g, names) for the facts passing ``filters`` that name a reached node.

        The same scores as ``fact_score`` over every live fact, without reading them all:
        the cached fact index (fact texts never change in place) tells which facts name which
        reached node, and one statement keeps those passing the filters. The index is tried
        as it stands first, the store's newest fact read by the same statement as the
        candidates; only when a fact was added since is it brought up to date and asked again.
        """
        if self._identity and filters.since is None and filters.until is None:
            kept = self._kept_facts(conn)
            if kept is not None:
                return kept
        with _index_lock:
            known = _fact_indexes.get(self._identity) if self._identity else None
        if known is not None and known.top is not None:
            found = self._lifted(conn, filters, known, checked=True)
            if found is not None:
                return found
        return self._lifted(conn, filters, _fact_index(conn, self._identity)) or {}

    def _kept_facts(self, conn: Tx) -> dict[int, tuple[float, tuple[str, ...]]] | None:
        """``fact_candidates`` without date filters, from the ids of the live facts kept
        under the store's ``facts.stamp`` (None: ask SQL). While the stamp holds, no fact
        was added, removed, superseded or archived, so the fact index as it was brought up
        to date under it and those ids answer without a statement (0.07 of ~0.08 ms)."""
        stamp = conn.graph.facts_stamp()
        if stamp is None:
            return None
        live = facts_index._live_facts_for(self._identity, stamp)
        with _index_lock:
            index = _fact_indexes.get(self._identity)
        if live.ids is None or index is None or index.top != live.top:
            if live.queries < neighbourhoods.FILL_FROM_QUERY:
                return None
            top = conn.graph.newest_fact()
            index = _fact_index(conn, self._identity)
            if index.top != top:
                return None  # brought past this snapshot by another thread meanwhile
            ids = frozenset(conn.graph.live_fact_ids())
            with _index_lock:
                live.ids, live.top = ids, top
        ids, top = live.ids, live.top
        indexed, named = index.naming(conn, self._index, self._strength)
        if ids is None or indexed != top:
            return None
        out: dict[int, tuple[float, tuple[str, ...]]] = {}
        for fact_id, nodes in named.items():
            if fact_id in ids:
                g, names = self._score(nodes)
                if g > 0:
                    out[fact_id] = (g, names)
        return out

    def _lifted(
        self,
        conn: Tx,
        filters: Filters,
        index: _FactIndex,
        *,
        checked: bool = False,
    ) -> dict[int, tuple[float, tuple[str, ...]]] | None:
        """``fact_candidates`` through ``index``; when ``checked``, None if the store's newest
        fact is not the newest the index has seen."""
        top, named = index.naming(conn, self._index, self._strength)
        newest, live = conn.graph.live_facts_among(
            sorted(_current_only(conn, set(named))),
            since=filters.since,
            until=filters.until,
            with_newest=checked,
        )
        out: dict[int, tuple[float, tuple[str, ...]]] = {}
        for fact_id in live:
            g, names = self._score(named[fact_id])
            if g > 0:
                out[fact_id] = (g, names)
        if checked and newest != top:
            return None
        return out

    def traversal(self) -> list[GraphTraversalStep]:
        steps = [
            GraphTraversalStep(self._names[node_id][0], depth, node_id in self._seeds, strength)
            for node_id, strength, depth in self._walked
        ]
        steps.sort(key=lambda s: (s.hop_distance, s.canonical_name))
        return steps

    def context_nodes(self) -> list[tuple[str, str | None]]:
        """(canonical name, cluster label or None) of every reached node, strongest first
        (by −strength, depth, id); never the self node."""
        return [self._names[node_id] for node_id, _strength, _depth in self._walked]


def _newest(lists: Iterable[tuple[int, ...]], count: int, skip: Collection[int]) -> list[int]:
    """The ``count`` highest chunk ids in any of ``lists`` (each newest first) and not in
    ``skip``, highest first."""
    head = count + len(skip)
    found = set().union(*(chunk_ids[:head] for chunk_ids in lists)).difference(skip)
    return sorted(found, reverse=True)[:count]


def _kept_extra(
    conn: Tx,
    kept: _Neighbourhoods,
    ordered: list[tuple[float, list[int]]],
    limit: int,
) -> list[tuple[int, float]] | None:
    """``Signal.extra_chunks`` without filters, from kept mentions (None when some are not
    kept and cannot be): the same levels, cuts and order as its SQL, a level's newest
    chunks, then one grouped pass over the weak levels that takes the newest of each level
    in turn up to its LIMIT. Mentions are asked for level by level: the first levels
    usually fill every slot."""
    taken: dict[int, float] = {}
    for index, (strength, nodes) in enumerate(ordered):
        need = limit - len(taken)
        if need <= 0:
            break
        if index >= EXTRA_LEVEL_QUERIES:
            rows: list[tuple[int, float]] = []
            seen: set[int] = set()
            for weaker, level in ordered[index:]:
                room = need + len(taken) - len(rows)
                if room <= 0:
                    break
                mentions = kept.mentions_of(conn, level)
                if mentions is None:
                    return None
                newest = _newest(mentions.values(), room, seen)
                seen.update(newest)
                rows += [(chunk_id, float(weaker)) for chunk_id in newest]
            out = [(chunk_id, g) for chunk_id, g in rows if chunk_id not in taken][:need]
            taken.update(out)
            break
        mentions = kept.mentions_of(conn, nodes)
        if mentions is None:
            return None
        for chunk_id in _newest(mentions.values(), need + len(taken), ()):
            if chunk_id not in taken and len(taken) < limit:
                taken[chunk_id] = strength
    return sorted(taken.items(), key=lambda item: (-item[1], -item[0]))


def build_signal(
    database: Database, text: object, hops: int, *, conn: Tx | None = None
) -> Signal | None:
    """The graph signal of one query, or None when no node is named in it.

    ``hops <= 0`` means the graph leg is off for this profile, so it also gives None.
    ``conn``: a connection already inside the caller's read snapshot (the ranking's own),
    read in instead of a transaction of its own (one BEGIN … COMMIT fewer per query).
    """
    if hops <= 0:
        return None
    tokens = _fold_tokens(sanitize(text))
    if not tokens:
        return None
    if conn is not None:
        return _signal(conn, tokens, hops, identity=_database_identity(database, conn))
    with database.read() as conn:
        return _signal(conn, tokens, hops, identity=_database_identity(database, conn))


def _signal(
    conn: Tx,
    tokens: Sequence[str],
    hops: int,
    *,
    identity: tuple[object, ...] | None = None,
) -> Signal | None:
    index, stamp = _names_and_stamp(conn, identity)
    seeds = index.seeds(tokens)
    if not seeds:
        return None
    self_id = index.self_id if index.self_id is not None else _self_id(conn)
    kept = neighbourhoods._neighbourhoods_for(index.identity, stamp, self_id)
    walked = None
    if kept is not None:
        try:
            walked = kept.walk(conn, seeds, hops)
        except StoreError:
            walked = None  # the plain walk below answers, or warns and falls back itself
        if walked is None:
            kept = None
    if walked is None:
        walked = neighbourhoods._walk(conn, seeds, hops, self_id)
    if not walked:
        return None
    names = _node_names(conn, index, [row[0] for row in walked])
    return Signal(walked, seeds, index, names, kept)


def _node_names(
    conn: Tx, index: _NameIndex, ids: list[int]
) -> Mapping[int, tuple[str, str | None]]:
    """(canonical name, label) of each id: from the index, read for any it lacks (a node
    inserted by a writer that did not bump ``graph.gen``)."""
    missing = [node_id for node_id in ids if node_id not in index.names]
    if not missing:
        return index.names
    read = conn.graph.node_names(missing)
    return ChainMap(read, index.names, {node_id: ("", None) for node_id in missing})
