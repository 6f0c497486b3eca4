"""The fact token index: which facts name which node, without reading fact texts per query.

A fact's key and value never change after insert (§5.3), so a token → fact-id index over
every fact row only grows; it is checked against the store's newest fact row on use. The ids
of the live facts are kept while ``tx.graph.facts_stamp()`` holds (it changes with any fact
insert, delete, or change of what is live).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from ..storage.tx import Tx
from .names import _INDEX_CACHE_SIZE, _contains, _index_lock, _NameIndex, _store_identity, _tokens

# Fewer candidates than this are read as they are; more are first cut to current versions.
CURRENT_CHECK_MIN_CANDIDATES = 64


class _FactIndex:
    """token → ids of the facts (any version) whose key or value holds it.

    A fact's key and value never change after insert (§5.3), so the index only grows with
    new ids. It is checked against the newest row on every use: a newest id lower than the
    indexed one, or a different text under the indexed newest id (an id reused after a
    delete), rebuilds it. Ids that were deleted meanwhile are filtered out by the caller's
    query, so a stale entry can cost a lookup, never a wrong answer.

    Which facts name a node is worked out once and kept in ``by_node`` until facts are
    added or the name index changes: a query then looks up its reached nodes and reads no
    fact text (reading and matching the candidates' texts on every recall cost ~0.1 ms at
    300 facts, benchmarks/graph_latency.py). A one-word name is in a fact exactly when its
    token is; a longer one must appear in order, which only the texts tell, so ``phrases``
    keeps each such name's facts once read. Both start empty again whenever ``refresh``
    adds facts.
    """

    def __init__(self) -> None:
        self.top: tuple[int, str, str] | None = None
        self.by_token: dict[str, set[int]] = {}
        self.phrases: dict[tuple[str, ...], frozenset[int]] = {}
        self.by_node: dict[int, tuple[int, ...]] = {}
        self.by_node_names: _NameIndex | None = None  # the name index ``by_node`` follows
        self.lock = threading.Lock()

    def refresh(self, conn: Tx, newest: tuple[int, str, str] | None) -> None:
        """Bring the index up to ``newest``, the (id, key, value) of the newest fact row."""
        with self.lock:
            if newest == self.top:
                return
            start = 0
            if self.top is not None and newest is not None and newest[0] > self.top[0]:
                probe = conn.graph.fact_text(self.top[0])
                if probe is not None and probe == self.top:
                    start = self.top[0]
            if start == 0:
                self.by_token = {}
            self.phrases, self.by_node = {}, {}
            for fact_id, key, value in conn.graph.fact_texts_after(start):
                for token in _tokens(key) + _tokens(value):
                    self.by_token.setdefault(token, set()).add(fact_id)
            self.top = newest

    def naming(
        self, conn: Tx, names: _NameIndex, nodes: Iterable[int]
    ) -> tuple[tuple[int, str, str] | None, dict[int, list[int]]]:
        """(the newest fact indexed, fact id → which of ``nodes`` it names), the nodes'
        names and aliases taken from ``names``."""
        named: dict[int, list[int]] = {}
        new: dict[int, set[int]] = {}  # nodes not in ``by_node`` yet → their facts
        with self.lock:
            if self.by_node_names is not names:
                self.by_node, self.by_node_names = {}, names
            top, by_node, phrases = self.top, self.by_node, self.phrases
            wanted: dict[tuple[str, ...], set[int]] = {}  # phrases to read → candidates
            for node_id in nodes:
                known = by_node.get(node_id)
                if known is None:
                    new[node_id] = self._naming_one(names.forms.get(node_id, ()), wanted)
                    continue
                for fact_id in known:
                    named.setdefault(fact_id, []).append(node_id)
        if not new:
            return top, named
        learned = _facts_with_phrases(conn, wanted) if wanted else {}
        for node_id, facts in new.items():
            for form in names.forms.get(node_id, ()):
                facts.update(learned.get(form, ()))
            for fact_id in facts:
                named.setdefault(fact_id, []).append(node_id)
        with self.lock:
            if self.phrases is phrases:  # no refresh meanwhile
                phrases.update(learned)
            if self.by_node is by_node:
                by_node.update((node_id, tuple(facts)) for node_id, facts in new.items())
        return top, named

    def _naming_one(
        self, forms: Sequence[tuple[str, ...]], wanted: dict[tuple[str, ...], set[int]]
    ) -> set[int]:
        """The facts naming one of ``forms`` as far as the index tells; the phrases it cannot
        tell yet go to ``wanted`` with their candidates. Called with ``lock`` held."""
        facts: set[int] = set()
        for form in forms:
            if len(form) == 1:
                facts.update(self.by_token.get(form[0], ()))
            elif form in self.phrases:
                facts.update(self.phrases[form])
            elif form not in wanted:
                found = set(self.by_token.get(form[0], ()))
                for token in form[1:]:
                    found &= self.by_token.get(token, set())
                wanted[form] = found
        return facts


def _facts_with_phrases(
    conn: Tx, candidates: Mapping[tuple[str, ...], set[int]]
) -> dict[tuple[str, ...], frozenset[int]]:
    """phrase → the facts among its candidates whose key or value holds it in order."""
    ids = sorted(set().union(*candidates.values()))
    texts: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for fact_id, key, value in conn.graph.fact_texts(ids):
        texts[fact_id] = (_tokens(key), _tokens(value))
    return {
        form: frozenset(
            fact_id
            for fact_id in found
            if fact_id in texts and any(_contains(text, form) for text in texts[fact_id])
        )
        for form, found in candidates.items()
    }


_fact_indexes: OrderedDict[tuple[object, ...], _FactIndex] = OrderedDict()


class _LiveFacts:
    """The ids of the live facts (current, not archived) under one ``meta.facts.stamp``
    (schema v5: any fact insert, delete, or change of what is live gives it a new value),
    and the newest fact row the fact index held when they were read."""

    def __init__(self, stamp: str) -> None:
        self.stamp = stamp
        self.queries = 0  # as ``_Neighbourhoods.queries``: read from FILL_FROM_QUERY on
        self.ids: frozenset[int] | None = None
        self.top: tuple[int, str, str] | None = None


_live_facts: OrderedDict[tuple[object, ...], _LiveFacts] = OrderedDict()


def _live_facts_for(identity: tuple[object, ...], stamp: str) -> _LiveFacts:
    with _index_lock:
        found = _live_facts.get(identity)
        if found is None or found.stamp != stamp:
            found = _live_facts[identity] = _LiveFacts(stamp)
        found.queries += 1
        _live_facts.move_to_end(identity)
        while len(_live_facts) > _INDEX_CACHE_SIZE:
            _live_facts.popitem(last=False)
    return found


def _current_only(conn: Tx, ids: set[int]) -> set[int]:
    """``ids`` without superseded versions, when there are many of them.

    The fact index holds every version, and a long history makes a name's candidates
    thousands of old rows; the current ids come from the partial index on live keys (a few
    hundred, without reading the table). A handful of candidates is cheaper to read as is:
    the caller's filters drop old versions anyway.
    """
    if len(ids) <= CURRENT_CHECK_MIN_CANDIDATES:
        return ids
    return ids & set(conn.graph.current_fact_ids())


def _fact_index(conn: Tx, identity: tuple[object, ...] | None = None) -> _FactIndex:
    """The fact index of this store (``identity`` when the caller knows it), brought up to
    date with the newest fact row."""
    identity = identity or _store_identity(conn)
    newest = conn.graph.newest_fact()
    with _index_lock:
        index = _fact_indexes.get(identity)
        if index is None:
            index = _fact_indexes[identity] = _FactIndex()
            while len(_fact_indexes) > _INDEX_CACHE_SIZE:
                _fact_indexes.popitem(last=False)
        else:
            _fact_indexes.move_to_end(identity)
    index.refresh(conn, newest)
    return index
