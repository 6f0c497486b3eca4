"""The entity graph: one more retrieval signal inside the store file (SPEC §5.7).

Data model. ``graph_nodes`` holds entities, unique by ``(type, canonical_name)``, with up to
8 raw ``aliases`` (JSON), a running-average ``confidence``, a ``mention_count`` that drives
``importance``, and a cluster (``cluster_id`` = the smallest member id, plus an LLM label).
Exactly one node is the user (``type='self'``, ``'@self'``): its edges are stored, but it is
never a seed, never traversed, clustered, trimmed, decayed or merged, and never shown except
by the CLI export. ``graph_edges`` holds directed, snake_case relationships, unique by
``(source, target, relationship)``, with ``seen_count``-driven importance and weight and the
chunk they were first seen in. ``graph_mentions`` is entity → chunk provenance: it is what
lets a question about one entity surface a memory that only names its neighbour.

Reads. ``build_signal`` detects seed nodes by a plain token scan of the query (no model),
expands them with one ``WITH RECURSIVE`` query bounded by ``graph_hops``, and returns a
``GraphSignal`` (see ``retrieval``) computed once per call. The name list behind the scan is
cached until ``meta.graph.gen`` changes; every node insert, delete or alias change bumps it,
and so does a cluster change, because the cache also holds each node's name and cluster label.
Facts that name a reached node are found through a cached token → fact-id index, which only
grows, because a fact's key and value never change after insert; it also keeps which facts
name which node, so a query reads only the ids of its candidate facts. Each cache is checked
on use: the name index by a one-row read of ``graph.gen`` and the newest node before the walk
(~0.01 ms; as columns of every walk row they cost ~0.08 ms, benchmarks/graph_latency.py at
2,000 nodes / 5,000 edges), the fact index by the newest fact, read in the same statement as
the candidate facts.

Kept reads (schema v6). Each node's confidence, edges and mentions are kept while
``meta.graph.stamp`` holds (triggers give it a new random value on any change to them), and
the live fact ids while ``meta.facts.stamp`` does. The graph stamp is read by the same
statement as the name index's version and every read that fills the cache carries it, so a
kept answer is exactly the SQL one (the walk then runs in Python: 0.04 against 0.15 ms). A
new stamp's first queries keep nothing (``FILL_FROM_QUERY``), and the whole graph is read at
once only after ``FULL_READ_FROM_QUERY`` queries, so a store the worker writes to every turn
pays what it paid without the cache. ``build_signal(..., conn=)`` reads inside the caller's
snapshot: ``Elastimem._rank`` builds the signal in its own read, one transaction per query.

Writes run inside the caller's ``atomic()``; the maintenance steps used by consolidation
take the ``Database`` and never hold the write lock across an LLM call.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import threading
import unicodedata
import weakref
from collections import ChainMap, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from ..clock import age_days, now_ts, recency, ts_minus, utcnow
from ..guards import is_unsafe_llm_text
from ..memory import semantic
from ..prompts import (
    build_cluster_label_prompt,
    build_same_entity_prompt,
    clean_label,
    parse_yes_no,
)
from ..runtime.gate import GateDenied
from ..storage.sqlite.migrations import FACTS_STAMP_KEY, GRAPH_STAMP_KEY, ensure_self_node
from ..storage.tx import Tx
from ..text import STOPWORDS, collapse_whitespace, em_fold, sanitize, word_tokens
from ..values import GraphTraversalStep

if TYPE_CHECKING:
    from ..retrieval.rank import Filters
    from ..storage.sqlite.database import Database

logger = logging.getLogger("elastimem")

# -- constants (§5.7) ---------------------------------------------------------------------------

NODE_TYPES = frozenset({"person", "place", "org", "thing"})
DEFAULT_TYPE = "entity"
SELF_TYPE = "self"
# Raw forms that name the user; they map to the one self node instead of a graph hub.
SELF_NAMES = frozenset({"user", "the user", "me", "myself", "i", "@self"})
NAME_MAX_CHARS = 80
MAX_ALIASES = 8
RELATION_MAX_CHARS = 40
LEADING_ARTICLES = ("the ", "a ", "an ")
# Per-extraction confidence when the item carries none: the name is (not) in the source text.
CONFIDENCE_IN_TEXT = 0.7
CONFIDENCE_NOT_IN_TEXT = 0.4
# A new node is linked to at most this many recent chunks found by an FTS phrase query.
FTS_BACKFILL_CHUNKS = 50
# Retrieval.
MAX_SEEDS = 5
MAX_REACHED = 64
HOP_FACTOR = 0.6
# Only recursion depth matters for cost; no tier asks for more than 2 hops.
MAX_HOPS = 8
# extra_chunks asks the strongest strength levels one by one (usually one is enough), then
# the rest in one grouped query.
EXTRA_LEVEL_QUERIES = 3
# Maintenance.
MERGE_CALLS_PER_SWEEP = 5
LABEL_CALLS_PER_SWEEP = 5
LABEL_NAMES = 12
LLM_REPLY_TOKENS = 16
MERGE_TOKEN_MIN_CHARS = 3
# timeline(): follow at most one hop from the query's seeds, to stay conservative.
TIMELINE_HOPS = 1
# Name-index cache: one entry per (store, generation); a process rarely has more stores open.
_INDEX_CACHE_SIZE = 8
_PARAM_BATCH = 500
CURRENT_CHECK_MIN_CANDIDATES = 64


# -- names ----------------------------------------------------------------------------------


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _strip_punct(text: str) -> str:
    start, end = 0, len(text)
    while start < end and (_is_punct(text[start]) or text[start].isspace()):
        start += 1
    while end > start and (_is_punct(text[end - 1]) or text[end - 1].isspace()):
        end -= 1
    return text[start:end]


def _canonicalize(name: object) -> str:
    """NFKC, casefold, collapse whitespace, strip surrounding punctuation and one leading
    article, cut to 80 characters. ``""`` means "no usable name"."""
    text = collapse_whitespace(unicodedata.normalize("NFKC", sanitize(name)).casefold())
    text = _strip_punct(text)
    for article in LEADING_ARTICLES:
        if text.startswith(article):
            text = _strip_punct(text[len(article) :])
            break
    return text[:NAME_MAX_CHARS].rstrip()


def _alias_key(raw: str) -> str:
    """What makes two raw forms "the same" alias: case, width and outer punctuation ignored."""
    return _strip_punct(collapse_whitespace(unicodedata.normalize("NFKC", raw).casefold()))


def _raw_form(name: object) -> str:
    return collapse_whitespace(sanitize(name))[:NAME_MAX_CHARS].strip()


def is_self_name(name: object) -> bool:
    """True when a raw extraction name stands for the user (``USER``, ``me``, ``@self``…)."""
    folded = collapse_whitespace(unicodedata.normalize("NFKC", sanitize(name)).casefold())
    return folded in SELF_NAMES or _canonicalize(name) in SELF_NAMES


def _node_type(value: object) -> str:
    if isinstance(value, str):
        folded = value.strip().casefold()
        if folded in NODE_TYPES:
            return folded
    return DEFAULT_TYPE


def _relation(value: object) -> str:
    """Lowercase, whitespace runs become ``_``, cut to 40 characters."""
    return "_".join(sanitize(value).lower().split())[:RELATION_MAX_CHARS]


def _load_aliases(raw: object) -> list[str]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [a for a in value if isinstance(a, str) and a]


def _dump_aliases(aliases: Sequence[str]) -> str:
    return json.dumps(list(aliases), ensure_ascii=False)


def _merge_aliases(first: Sequence[str], rest: Sequence[str], canonical: str) -> list[str]:
    """``first`` then ``rest``, deduped by alias key, without the node's own name, ≤ 8."""
    out: list[str] = []
    seen = {canonical}
    for alias in (*first, *rest):
        key = _alias_key(alias)
        if not key or key in seen:
            continue
        seen.add(key)
        out.append(alias)
        if len(out) >= MAX_ALIASES:
            break
    return out


# The runs ``text.word_tokens`` finds.
_WORD_RUN = re.compile(r"[^\W_]+")


def _fold_tokens(text: str) -> list[str]:
    """``word_tokens(text)``, ASCII text folded in C: ``em_fold`` looks at every character in
    Python (~20 µs of a one-line query), and ASCII text folds to its lower case."""
    if text.isascii():
        return _WORD_RUN.findall(text.lower())
    return word_tokens(text)


@lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[str, ...]:
    """Folded ``[^\\W_]+`` runs of a short text (a name, a fact key or value); cached because
    facts and names are scanned on every query. Chunk texts go through ``_text_tokens``."""
    return tuple(_fold_tokens(text))


@lru_cache(maxsize=8192)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(_tokens(text))


def _text_tokens(text: object) -> tuple[str, ...]:
    return tuple(_fold_tokens(sanitize(text)))


def _matchable(tokens: tuple[str, ...]) -> bool:
    """Single-character and stopword-only names never match (§5.7 seeds)."""
    if not tokens or len("".join(tokens)) <= 1:
        return False
    return not all(t in STOPWORDS for t in tokens)


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0 or n > len(haystack):
        return False
    first = needle[0]
    for i in range(len(haystack) - n + 1):
        if haystack[i] == first and tuple(haystack[i : i + n]) == tuple(needle):
            return True
    return False


def _occurs(name: str, tokens: Sequence[str]) -> bool:
    """``name`` appears in the token sequence at word boundaries."""
    return _contains(tokens, _tokens(name))


def _node_importance(mentions: int) -> float:
    return min(1.0, 0.5 + 0.05 * (mentions - 1))


def _edge_scores(confidence: float, seen: int) -> tuple[float, float]:
    """(importance, weight) of an edge from its confidence and ``seen_count``."""
    importance = min(1.0, 0.5 + 0.05 * (seen - 1))
    weight = min(1.0, confidence * (1.0 + 0.1 * (seen - 1)))
    return importance, weight


def _item_confidence(item: Mapping[str, Any], in_text: bool) -> float:
    value = item.get("confidence")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.nan
        if 0.0 <= number <= 1.0:
            return number
    return CONFIDENCE_IN_TEXT if in_text else CONFIDENCE_NOT_IN_TEXT


def _bump_gen(conn: Tx) -> None:
    conn.meta.bump("graph.gen")


_warned: set[str] = set()


def _warn_once(topic: str, message: str, *args: object) -> None:
    """A warning that could repeat on every query is logged once, then at debug level."""
    if topic in _warned:
        logger.debug(message, *args)
    else:
        _warned.add(topic)
        logger.warning(message, *args)


def _padded(ids: Sequence[int]) -> list[int]:
    """``ids`` with the last one repeated up to the next power of two (at least 8).

    An ``IN (?, ?, …)`` list is a new statement for every length, and preparing one costs
    about half of running it (46 vs 101 µs for 64 chunk ids); padded lengths keep a handful
    of prepared statements reusable in sqlite3's statement cache. A repeated id changes
    nothing in an ``IN`` list.
    """
    size = max(8, 1 << (len(ids) - 1).bit_length())
    return [*ids, *[ids[-1]] * (size - len(ids))] if ids else []


def _marks(ids: Sequence[int]) -> str:
    """The placeholders for ``_padded(ids)``."""
    return ",".join("?" * max(8, 1 << (len(ids) - 1).bit_length()))


def _chunks(seq: Sequence[int], size: int = _PARAM_BATCH) -> Iterator[Sequence[int]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


# -- the name index (seeds, link job, timeline) ----------------------------------------------


@dataclass
class _NameIndex:
    """Every matchable folded name and alias, keyed by its first token."""

    self_id: int | None = None
    # The store it was built from, (main file, meta.created_at): lets a signal find the same
    # store's fact index without asking again.
    identity: tuple[object, ...] = ()
    version: tuple[object, ...] = ()  # the ``_index_version`` it was built for
    by_first: dict[str, list[tuple[tuple[str, ...], int, int]]] = field(default_factory=dict)
    forms: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)
    # node id → (canonical name, cluster label or None), every node but the self node: the
    # walk reads names from here instead of joining graph_nodes (~0.08 ms of its ~0.26 ms).
    names: dict[int, tuple[str, str | None]] = field(default_factory=dict)

    def add(self, node_id: int, form: str) -> None:
        tokens = _tokens(form)
        if not _matchable(tokens):
            return
        known = self.forms.setdefault(node_id, [])
        if tokens in known:
            return
        known.append(tokens)
        length = len(em_fold(form).strip())
        self.by_first.setdefault(tokens[0], []).append((tokens, node_id, length))

    def matches(self, tokens: Sequence[str]) -> dict[int, int]:
        """node id → the longest matched form (in characters) over all positions."""
        found: dict[int, int] = {}
        n = len(tokens)
        for i, token in enumerate(tokens):
            for form, node_id, length in self.by_first.get(token, ()):
                size = len(form)
                if (
                    i + size <= n
                    and tuple(tokens[i : i + size]) == form
                    and length > found.get(node_id, -1)
                ):
                    found[node_id] = length
        return found

    def seeds(self, tokens: Sequence[str]) -> list[int]:
        found = self.matches(tokens)
        ranked = sorted(found.items(), key=lambda item: (-item[1], item[0]))
        return [node_id for node_id, _ in ranked[:MAX_SEEDS]]


_index_cache: OrderedDict[tuple[object, ...], _NameIndex] = OrderedDict()
_index_lock = threading.Lock()


# Each is one b-tree probe: a count(*) would read the whole table on every query (measured:
# ~0.5 ms at 2,000 nodes once chunk reads have evicted its pages).
_NAMES_VERSION_COLUMNS = (
    "(SELECT value FROM meta WHERE key = 'graph.gen'), (SELECT max(id) FROM graph_nodes), "
    "(SELECT canonical_name FROM graph_nodes ORDER BY id DESC LIMIT 1)"
)
_STAMP_COLUMN = f"(SELECT value FROM meta WHERE key = '{GRAPH_STAMP_KEY}')"
# The newest fact row, marked 0 to tell it from the candidates (marked 1) it is read with.
_NEWEST_FACT_ROW = "SELECT 0, id, key, value FROM facts WHERE id = (SELECT max(id) FROM facts)"
_NEWEST_FACT_COLUMNS = (
    "(SELECT max(id) FROM facts), (SELECT key FROM facts ORDER BY id DESC LIMIT 1), "
    "(SELECT value FROM facts ORDER BY id DESC LIMIT 1)"
)


def _store_identity(conn: Tx) -> tuple[object, ...]:
    """(file, meta.created_at): in-memory stores all report "" as their file and are told
    apart by their creation time, which has microseconds."""
    try:
        files = [str(r[2]) for r in conn.execute("PRAGMA database_list") if r[1] == "main"]
    except sqlite3.Error:
        files = []
    row = conn.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
    return (files[0] if files else None, row[0] if row else None)


# Database → its identity, read once: neither part changes while a store is open, and the
# two queries behind it were ~0.05 ms of every recall (benchmarks/graph_latency.py).
_identities: weakref.WeakKeyDictionary[Database, tuple[object, ...]] = weakref.WeakKeyDictionary()


def _database_identity(database: Database, conn: Tx) -> tuple[object, ...]:
    with _index_lock:
        identity = _identities.get(database)
    if identity is None:
        identity = _store_identity(conn)
        with _index_lock:
            _identities[database] = identity
    return identity


def _index_version(
    conn: Tx, identity: tuple[object, ...] | None = None
) -> tuple[tuple[object, ...], str | None]:
    """(what identifies one store's name list, its ``graph.stamp``), read by one statement.

    The first is the store, ``graph.gen`` and the newest node: every node insert, delete or
    alias change bumps ``graph.gen``; the newest node's id and name also catch a writer that
    forgot to, or ids reused after a rolled-back insert. The stamp changes with any edge,
    mention or confidence too (see ``_Neighbourhoods``); None in a store older than v6.
    """
    identity = identity or _store_identity(conn)
    *names, stamp = conn.execute(f"SELECT {_NAMES_VERSION_COLUMNS}, {_STAMP_COLUMN}").fetchone()
    return (*identity, *names), None if stamp is None else str(stamp)


def _build_index(conn: Tx) -> _NameIndex:
    index = _NameIndex()
    for node_id, node_type, name, aliases, label in conn.execute(
        "SELECT id, type, canonical_name, aliases, cluster_label FROM graph_nodes"
    ):
        if node_type == SELF_TYPE:
            index.self_id = int(node_id)
            continue
        index.names[int(node_id)] = (str(name), label or None)
        index.add(int(node_id), str(name))
        for alias in _load_aliases(aliases):
            index.add(int(node_id), alias)
    return index


def _name_index(conn: Tx, identity: tuple[object, ...] | None = None) -> _NameIndex:
    """The cached name index of this store (``identity`` when the caller knows it), rebuilt
    when ``graph.gen`` (or the nodes) change."""
    return _names_and_stamp(conn, identity)[0]


def _names_and_stamp(
    conn: Tx, identity: tuple[object, ...] | None = None
) -> tuple[_NameIndex, str | None]:
    """``_name_index`` and the store's ``graph.stamp``, read in one statement."""
    version, stamp = _index_version(conn, identity)
    return _cached_names(conn, version), stamp


def _cached_names(conn: Tx, version: tuple[object, ...]) -> _NameIndex:
    with _index_lock:
        index = _index_cache.get(version)
        if index is not None:
            _index_cache.move_to_end(version)
            return index
    index = _build_index(conn)
    index.identity, index.version = version[:2], version
    with _index_lock:
        _index_cache[version] = index
        while len(_index_cache) > _INDEX_CACHE_SIZE:
            _index_cache.popitem(last=False)
    return index


def detect_seed_nodes(conn: Tx, text: object) -> list[int]:
    """Ids of at most 5 nodes named in ``text`` at word boundaries, longest name first.

    A plain scan over folded canonical names and aliases, never the self node. A name matches
    when its whole token sequence appears contiguously in the text's folded tokens, so "ai"
    inside "said" is not a seed; single-character and stopword-only names never match.
    """
    tokens = _fold_tokens(sanitize(text))
    if not tokens:
        return []
    return _name_index(conn).seeds(tokens)


# -- the fact token index ---------------------------------------------------------------------


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
                probe = conn.execute(
                    "SELECT id, key, value FROM facts WHERE id = ?", (self.top[0],)
                ).fetchone()
                if probe is not None and (int(probe[0]), str(probe[1]), str(probe[2])) == self.top:
                    start = self.top[0]
            if start == 0:
                self.by_token = {}
            self.phrases, self.by_node = {}, {}
            for fact_id, key, value in conn.execute(
                "SELECT id, key, value FROM facts WHERE id > ? ORDER BY id", (start,)
            ):
                for token in _tokens(str(key)) + _tokens(str(value)):
                    self.by_token.setdefault(token, set()).add(int(fact_id))
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
    for part in _chunks(ids):
        for fact_id, key, value in conn.execute(
            f"SELECT id, key, value FROM facts WHERE id IN ({_marks(part)})", _padded(part)
        ):
            texts[int(fact_id)] = (_tokens(str(key)), _tokens(str(value)))
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
    return ids & set(semantic.current_fact_ids(conn))


def _fact_index(conn: Tx, identity: tuple[object, ...] | None = None) -> _FactIndex:
    """The fact index of this store (``identity`` when the caller knows it), brought up to
    date with the newest fact row."""
    identity = identity or _store_identity(conn)
    top_id, key, value = conn.execute(f"SELECT {_NEWEST_FACT_COLUMNS}").fetchone()
    with _index_lock:
        index = _fact_indexes.get(identity)
        if index is None:
            index = _fact_indexes[identity] = _FactIndex()
            while len(_fact_indexes) > _INDEX_CACHE_SIZE:
                _fact_indexes.popitem(last=False)
        else:
            _fact_indexes.move_to_end(identity)
    index.refresh(conn, None if top_id is None else (int(top_id), str(key), str(value)))
    return index


# -- expansion ------------------------------------------------------------------------------


def _self_id(conn: Tx) -> int:
    row = conn.execute("SELECT id FROM graph_nodes WHERE type = 'self' LIMIT 1").fetchone()
    return int(row[0]) if row else -1


def expand(
    conn: Tx, seeds: Sequence[int], hops: int, *, self_id: int | None = None
) -> dict[int, tuple[float, int]]:
    """node id → (strength, depth) for the nodes reached from ``seeds`` in ≤ ``hops`` steps.

    One ``WITH RECURSIVE`` query walking edges in both directions but never through the self
    node. A seed's strength is its confidence; each step multiplies by ``0.6·weight``. Each
    node keeps its maximum strength and minimum depth; the top 64 by (−strength, depth, id)
    are kept. On an SQL error the seeds alone are returned.
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
        rows = conn.execute(_walk_sql(len(seeds), hops), _walk_params(seeds, hops, self_id))
        return _strongest(rows)
    except sqlite3.Error as exc:
        _warn_once("expand", "graph expansion failed; using the seeds alone: %s", exc)
        return _strongest(_seed_rows(conn, [s for s in seeds if s != self_id]))


def _walk_sql(seed_count: int, hops: int) -> str:
    """The walk: one row (id, strength, depth) per step, in no order."""
    marks = ",".join("?" * seed_count)
    # Deep walks use UNION, which drops repeated (node, depth, strength) rows, so a node
    # reached twice the same way is expanded once and cycles cannot multiply the rows. For
    # the ≤ 2 hops every tier asks for, a repeat only repeats a few leaves, and UNION ALL
    # skips the b-tree of seen rows (~15% of the walk). The OR join uses both edge indexes.
    compound = "UNION ALL" if hops <= 2 else "UNION"
    # The per-node max/min and the top-64 cut happen in ``_strongest``: GROUP BY, ORDER BY and
    # LIMIT here cost ~0.17 ms of temporary b-trees per query, several times the Python loop
    # over the ~40 rows a 2-hop walk yields (benchmarks/graph_latency.py, 2,000/5,000 graph).
    return (
        "WITH RECURSIVE walk(id, depth, strength) AS ("
        f" SELECT id, 0, confidence FROM graph_nodes WHERE id IN ({marks}) AND id <> ?"
        f" {compound}"
        " SELECT CASE WHEN e.source_node = w.id THEN e.target_node ELSE e.source_node END,"
        "  w.depth + 1, w.strength * ? * e.weight"
        " FROM walk w JOIN graph_edges e ON (e.source_node = w.id OR e.target_node = w.id)"
        " WHERE w.depth < ? AND e.source_node <> ? AND e.target_node <> ?"
        ") SELECT id, strength, depth FROM walk"
    )


def _walk_params(seeds: list[int], hops: int, self_id: int) -> tuple[object, ...]:
    return (*seeds, self_id, HOP_FACTOR, hops, self_id, self_id)


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
    marks = ",".join("?" * len(seeds))
    try:
        found = dict(
            conn.execute(f"SELECT id, confidence FROM graph_nodes WHERE id IN ({marks})", seeds)
        )
    except sqlite3.Error:
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
        marks, padded, me = _marks(nodes), _padded(nodes), self.self_id
        rows = conn.execute(
            "SELECT 0, value, NULL, NULL FROM meta WHERE key = ?"
            f" UNION ALL SELECT 1, id, confidence, NULL FROM graph_nodes WHERE id IN ({marks})"
            " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
            f" WHERE source_node IN ({marks}) AND source_node <> ? AND target_node <> ?"
            " UNION ALL SELECT 2, target_node, source_node, weight FROM graph_edges"
            f" WHERE target_node IN ({marks}) AND source_node <> ? AND target_node <> ?",
            (GRAPH_STAMP_KEY, *padded, *padded, me, me, *padded, me, me),
        )
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
        if (
            int(conn.execute("SELECT count(*) FROM graph_edges").fetchone()[0])
            > FULL_READ_MAX_EDGES
        ):
            return
        rows = conn.execute(
            "SELECT 0, value, NULL, NULL FROM meta WHERE key = ?"
            " UNION ALL SELECT 1, id, confidence, NULL FROM graph_nodes"
            " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
            " WHERE source_node <> ? AND target_node <> ?",
            (GRAPH_STAMP_KEY, self.self_id, self.self_id),
        )
        # Rows are taken one by one, not fetched all at once: ~7,000 row tuples alive
        # together set off the garbage collector's full pass (~80 ms in the benchmark).
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
        for part in _chunks(missing):
            stamp_seen = False
            for kind, node_id, chunk_id in conn.execute(
                "SELECT 0, value, NULL FROM meta WHERE key = ? UNION ALL"
                " SELECT 1, node_id, chunk_id FROM graph_mentions"
                f" WHERE node_id IN ({_marks(part)})",
                (GRAPH_STAMP_KEY, *_padded(part)),
            ):
                if kind:
                    found[node_id].append(chunk_id)
                elif node_id == self.stamp:
                    stamp_seen = True
            if not stamp_seen:
                return None
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


# -- the signal -----------------------------------------------------------------------------


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
        for part in _chunks(list(chunk_ids)):
            # Only the reached nodes' mentions come back: a chunk can mention a dozen
            # entities. The "+" keeps node_id off the index, so SQLite reads each chunk's
            # mentions once and filters them, instead of probing every (chunk, node) pair
            # (soak store, 115 chunks x 64 nodes: 0.6 ms against 1.2 ms unfiltered, 3.1 ms
            # probing).
            for chunk_id, node_id in conn.execute(
                f"SELECT chunk_id, node_id FROM graph_mentions WHERE chunk_id IN ({_marks(part)})"
                f" AND +node_id IN ({_marks(reached)})",
                (*_padded(part), *_padded(reached)),
            ):
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
        where, params = filters.chunk_sql("c")
        join = " JOIN chunks c ON c.id = m.chunk_id" if where else ""
        ordered = self._levels
        if not where and self._kept is not None:
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
                taken.update(self._grouped(conn, ordered[index:], join, where, params, taken,
                                           need))  # fmt: skip
                break
            marks = ",".join("?" * len(nodes))
            rows = conn.execute(
                f"SELECT DISTINCT m.chunk_id FROM graph_mentions m{join} "
                f"WHERE m.node_id IN ({marks}){where} ORDER BY m.chunk_id DESC LIMIT ?",
                (*nodes, *params, need + len(taken)),
            ).fetchall()
            for (chunk_id,) in rows:
                if int(chunk_id) not in taken and len(taken) < limit:
                    taken[int(chunk_id)] = strength
        return sorted(taken.items(), key=lambda item: (-item[1], -item[0]))

    @staticmethod
    def _grouped(
        conn: Tx,
        levels: list[tuple[float, list[int]]],
        join: str,
        where: str,
        params: list[object],
        taken: Mapping[int, float],
        need: int,
    ) -> dict[int, float]:
        pairs: list[object] = []
        for strength, nodes in levels:
            for node_id in nodes:
                pairs += [node_id, strength]
        values = ",".join("(?, ?)" for _ in range(len(pairs) // 2))
        rows = conn.execute(
            f"WITH r(node_id, s) AS (VALUES {values}) "
            f"SELECT m.chunk_id, max(r.s) AS g FROM r JOIN graph_mentions m "
            f"ON m.node_id = r.node_id{join} WHERE 1 = 1{where} "
            "GROUP BY m.chunk_id ORDER BY g DESC, m.chunk_id DESC LIMIT ?",
            (*pairs, *params, need + len(taken)),
        ).fetchall()
        out: dict[int, float] = {}
        for chunk_id, g in rows:
            if int(chunk_id) not in taken and len(out) < need:
                out[int(chunk_id)] = float(g)
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
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (FACTS_STAMP_KEY,)).fetchone()
        if row is None:
            return None
        live = _live_facts_for(self._identity, str(row[0]))
        with _index_lock:
            index = _fact_indexes.get(self._identity)
        if live.ids is None or index is None or index.top != live.top:
            if live.queries < FILL_FROM_QUERY:
                return None
            newest = conn.execute(f"SELECT {_NEWEST_FACT_COLUMNS}").fetchone()
            index = _fact_index(conn, self._identity)
            top = None if newest[0] is None else (int(newest[0]), str(newest[1]), str(newest[2]))
            if index.top != top:
                return None  # brought past this snapshot by another thread meanwhile
            ids = frozenset(
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM facts WHERE invalidated_at IS NULL AND archived = 0"
                )
            )
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
        where, params = filters.fact_sql("f")
        parts = list(_chunks(sorted(_current_only(conn, set(named))))) or [()]
        if checked and len(parts) > 1:
            return None  # rare: too many candidates to ask in one statement
        out: dict[int, tuple[float, tuple[str, ...]]] = {}
        newest = None
        for part in parts:
            selects, binds = [], []
            if checked:
                selects.append(_NEWEST_FACT_ROW)
            if part:
                selects.append(
                    f"SELECT 1, f.id, NULL, NULL FROM facts f WHERE f.id IN ({_marks(part)}){where}"
                )
                binds += [*_padded(part), *params]
            if not selects:
                continue
            for candidate, fact_id, key, value in conn.execute(" UNION ALL ".join(selects), binds):
                if not candidate:
                    newest = (fact_id, str(key), str(value))
                    continue
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
    kept = _neighbourhoods_for(index.identity, stamp, self_id)
    walked = None
    if kept is not None:
        try:
            walked = kept.walk(conn, seeds, hops)
        except sqlite3.Error:
            walked = None  # the SQL walk below answers, or warns and falls back itself
        if walked is None:
            kept = None
    if walked is None:
        walked = _walk(conn, seeds, hops, self_id)
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
    marks = ",".join("?" * len(missing))
    read = {
        int(r[0]): (str(r[1]), r[2] or None)
        for r in conn.execute(
            f"SELECT id, canonical_name, cluster_label FROM graph_nodes WHERE id IN ({marks})",
            missing,
        )
    }
    return ChainMap(read, index.names, {node_id: ("", None) for node_id in missing})


# -- writes ---------------------------------------------------------------------------------


@dataclass
class _WriteState:
    """What one extraction learned so far: resolved names, new nodes, whether to bump."""

    now: str
    self_id: int
    gen_changed: bool = False
    new_nodes: list[int] = field(default_factory=list)
    alias_map: dict[str, list[tuple[int, str, int]]] | None = None


def _alias_lookup(conn: Tx, state: _WriteState, canonical: str) -> list[tuple[int, str, int]]:
    """Nodes that carry ``canonical`` as an alias (e.g. a merged-away name): (id, type, count)."""
    if state.alias_map is None:
        mapping: dict[str, list[tuple[int, str, int]]] = {}
        for node_id, node_type, aliases, count in conn.execute(
            "SELECT id, type, aliases, mention_count FROM graph_nodes "
            "WHERE type <> 'self' AND aliases <> '[]'"
        ):
            for alias in _load_aliases(aliases):
                # A folded-in name is stored in its canonical form, which canonicalises
                # again to itself except for doubled articles ("the the band"): keep both.
                for key in {_canonicalize(alias), _alias_key(alias)}:
                    mapping.setdefault(key, []).append((int(node_id), str(node_type), int(count)))
        state.alias_map = mapping
    found = state.alias_map.get(canonical, [])
    return sorted(found, key=lambda item: (-item[2], item[0]))


def upsert_node(
    conn: Tx,
    name: object,
    node_type: object = DEFAULT_TYPE,
    confidence: float = CONFIDENCE_NOT_IN_TEXT,
    *,
    now: str | None = None,
    _state: _WriteState | None = None,
) -> int | None:
    """Insert or update one entity; the node id, the self id for the user, None for no name."""
    if is_self_name(name):
        return ensure_self_node(conn)
    canonical = _canonicalize(name)
    if not canonical:
        return None
    state = _state or _WriteState(now or now_ts(), ensure_self_node(conn))
    wanted = _node_type(node_type)
    raw = _raw_form(name)
    rows = conn.execute(
        "SELECT id, type, mention_count FROM graph_nodes WHERE canonical_name = ? "
        "AND type <> 'self' ORDER BY mention_count DESC, id",
        (canonical,),
    ).fetchall()
    target: int | None = None
    upgrade = False
    if wanted == DEFAULT_TYPE:
        target = int(rows[0][0]) if rows else None
    else:
        exact = [r for r in rows if r[1] == wanted]
        if exact:
            target = int(exact[0][0])
        elif len(rows) == 1 and rows[0][1] == DEFAULT_TYPE:
            target, upgrade = int(rows[0][0]), True
    if target is None and not rows:
        # A name folded into another node by a merge resolves to the survivor.
        for node_id, alias_type, _count in _alias_lookup(conn, state, canonical):
            if wanted in (DEFAULT_TYPE, alias_type) or alias_type == DEFAULT_TYPE:
                target = node_id
                upgrade = wanted != DEFAULT_TYPE and alias_type == DEFAULT_TYPE
                break
    if target is None:
        aliases = _merge_aliases([raw], [], canonical)
        cur = conn.execute(
            "INSERT INTO graph_nodes (type, canonical_name, aliases, created_at, updated_at, "
            "importance, confidence, mention_count) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
            (wanted, canonical, _dump_aliases(aliases), state.now, state.now,
             _node_importance(1), confidence),
        )  # fmt: skip
        node_id = int(cur.lastrowid or 0)
        state.new_nodes.append(node_id)
        state.gen_changed = True
        if _state is None:
            _bump_gen(conn)
        return node_id
    row = conn.execute(
        "SELECT canonical_name, aliases, confidence, mention_count FROM graph_nodes WHERE id = ?",
        (target,),
    ).fetchone()
    own_name, old_aliases_raw, old_conf, count = str(row[0]), row[1], float(row[2]), int(row[3])
    old_aliases = _load_aliases(old_aliases_raw)
    aliases = _merge_aliases([raw], old_aliases, own_name)
    new_count = count + 1
    conn.execute(
        "UPDATE graph_nodes SET updated_at = ?, mention_count = ?, confidence = ?, "
        "importance = ?, aliases = ? WHERE id = ?",
        (state.now, new_count, (old_conf * count + confidence) / new_count,
         _node_importance(new_count), _dump_aliases(aliases), target),
    )  # fmt: skip
    if upgrade:
        clash = conn.execute(
            "SELECT 1 FROM graph_nodes WHERE type = ? AND canonical_name = ?", (wanted, own_name)
        ).fetchone()
        if clash is None:
            conn.execute("UPDATE graph_nodes SET type = ? WHERE id = ?", (wanted, target))
    if aliases != old_aliases:
        state.gen_changed = True
        if _state is None:
            _bump_gen(conn)
    return target


def upsert_edge(
    conn: Tx,
    source_id: int,
    target_id: int,
    relation: object,
    confidence: float = CONFIDENCE_NOT_IN_TEXT,
    *,
    now: str | None = None,
    chunk_id: int | None = None,
) -> int | None:
    """Insert or refresh one relationship; None for an empty relation or a self-loop."""
    rel = _relation(relation)
    if not rel or source_id == target_id:
        return None
    now = now or now_ts()
    row = conn.execute(
        "SELECT id, confidence, seen_count FROM graph_edges WHERE source_node = ? "
        "AND target_node = ? AND relationship = ?",
        (source_id, target_id, rel),
    ).fetchone()
    if row is None:
        importance, weight = _edge_scores(confidence, 1)
        cur = conn.execute(
            "INSERT INTO graph_edges (source_node, target_node, relationship, confidence, "
            "importance, weight, created_at, last_seen, seen_count, source_chunk_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (source_id, target_id, rel, confidence, importance, weight, now, now, chunk_id),
        )
        return int(cur.lastrowid or 0)
    edge_id, old_conf, seen = int(row[0]), float(row[1]), int(row[2])
    new_seen = seen + 1
    new_conf = (old_conf * seen + confidence) / new_seen
    importance, weight = _edge_scores(new_conf, new_seen)
    conn.execute(
        "UPDATE graph_edges SET last_seen = ?, seen_count = ?, confidence = ?, importance = ?, "
        "weight = ?, source_chunk_id = COALESCE(source_chunk_id, ?) WHERE id = ?",
        (now, new_seen, new_conf, importance, weight, chunk_id, edge_id),
    )
    return edge_id


def _chunks_naming(
    names: Iterable[str], chunk_tokens: Sequence[tuple[int, tuple[str, ...]]]
) -> list[int]:
    """Chunks (in turn order) whose text names every one of ``names`` at a word boundary."""
    wanted = [n for n in names if _tokens(n)]
    if not wanted:
        return []
    return [cid for cid, tokens in chunk_tokens if all(_occurs(n, tokens) for n in wanted)]


def _chunks_naming_endpoints(
    forms: Sequence[tuple[str, str]], chunk_tokens: Sequence[tuple[int, tuple[str, ...]]]
) -> list[int]:
    """Chunks (in turn order) naming every endpoint, each by any of its forms."""
    wanted = [[f for f in pair if _tokens(f)] for pair in forms]
    wanted = [pair for pair in wanted if pair]
    if not wanted:
        return []
    return [
        cid
        for cid, tokens in chunk_tokens
        if all(any(_occurs(f, tokens) for f in pair) for pair in wanted)
    ]


def _fts_phrase(name: str) -> str:
    """An FTS5 phrase query for a name: one quoted string, so no operator can leak through."""
    return '"' + name.replace('"', '""') + '"'


def _backfill_mentions(conn: Tx, node_id: int, name: str, now: str) -> None:
    if not _tokens(name):
        return
    try:
        conn.execute(
            "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) "
            "SELECT ?, id, ? FROM (SELECT c.id AS id FROM chunks_fts "
            "JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? "
            "ORDER BY c.created_at DESC, c.id DESC LIMIT ?)",
            (node_id, now, _fts_phrase(name), FTS_BACKFILL_CHUNKS),
        )
    except sqlite3.Error as exc:
        logger.debug("FTS phrase link for a new node failed: %s", exc)


def _mention(conn: Tx, node_id: int, chunk_ids: Iterable[int], now: str) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) VALUES (?, ?, ?)",
        [(node_id, cid, now) for cid in chunk_ids],
    )


def delete_nodes(conn: Tx, node_ids: Sequence[int]) -> int:
    """Delete nodes (their edges and mentions cascade); returns the count.

    The label of a cluster that loses a member is cleared first (§5.7: "a label survives
    only while the member set is unchanged"): once the node is gone, compute_clusters
    sees the same set before and after, and the stale label stayed for good.
    """
    deleted = 0
    for part in _chunks(list(node_ids)):
        marks = ",".join("?" * len(part))
        conn.execute(
            "UPDATE graph_nodes SET cluster_label = NULL WHERE cluster_id IN (SELECT cluster_id "
            f"FROM graph_nodes WHERE id IN ({marks}) AND cluster_id IS NOT NULL)",
            part,
        )
        deleted += conn.execute(f"DELETE FROM graph_nodes WHERE id IN ({marks})", part).rowcount
    return deleted


def enforce_caps(conn: Tx, node_cap: int, edge_cap: int) -> tuple[int, int]:
    """Delete the lowest non-self nodes, then the lowest edges, down to the caps."""
    nodes_over = int(
        conn.execute("SELECT count(*) FROM graph_nodes WHERE type <> 'self'").fetchone()[0]
    ) - max(1, int(node_cap))
    removed_nodes = 0
    if nodes_over > 0:
        lowest = [
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM graph_nodes WHERE type <> 'self' "
                "ORDER BY importance, mention_count, updated_at, id LIMIT ?",
                (nodes_over,),
            )
        ]
        removed_nodes = delete_nodes(conn, lowest)
        _bump_gen(conn)
    edges_over = int(conn.execute("SELECT count(*) FROM graph_edges").fetchone()[0]) - max(
        1, int(edge_cap)
    )
    removed_edges = 0
    if edges_over > 0:
        removed_edges = conn.execute(
            "DELETE FROM graph_edges WHERE id IN (SELECT id FROM graph_edges "
            "ORDER BY importance, seen_count, last_seen, id LIMIT ?)",
            (edges_over,),
        ).rowcount
    return removed_nodes, removed_edges


def store_extraction(
    conn: Tx,
    entities: Iterable[Any],
    relationships: Iterable[Any],
    chunk_rows: Sequence[tuple[int, str]],
    *,
    source_text: str = "",
    node_cap: int = 2000,
    edge_cap: int = 5000,
    fts_enabled: bool = False,
    now: str | None = None,
) -> dict[str, int]:
    """Store one extraction's entities and relationships (§5.7), inside the caller's atomic().

    ``chunk_rows`` are the turn's ``(chunk_id, text)``: each entity is linked to the chunks that
    name it at a word boundary, else to the first chunk; each new node also to its ≤ 50 most
    recent FTS phrase matches. Caps are enforced last. Returns counts for logging.
    """
    state = _WriteState(now or now_ts(), ensure_self_node(conn))
    source_tokens = _text_tokens(source_text)
    chunk_tokens = [(int(cid), _text_tokens(text)) for cid, text in chunk_rows]
    first_chunk = [chunk_tokens[0][0]] if chunk_tokens else []
    resolved: dict[str, tuple[int, str]] = {}  # canonical → (node id, raw form)
    self_key = "\x00self"

    def resolve(raw_name: object, node_type: object, item: Mapping[str, Any]) -> str | None:
        if not isinstance(raw_name, str):
            return None
        if is_self_name(raw_name):
            resolved.setdefault(self_key, (state.self_id, ""))
            return self_key
        canonical = _canonicalize(raw_name)
        if not canonical:
            return None
        if canonical in resolved:
            return canonical
        raw = _raw_form(raw_name)
        in_text = _occurs(raw, source_tokens) or _occurs(canonical, source_tokens)
        node_id = upsert_node(conn, raw_name, node_type, _item_confidence(item, in_text),
                              _state=state)  # fmt: skip
        if node_id is None:
            return None
        resolved[canonical] = (node_id, raw)
        return canonical

    for item in entities or ():
        if isinstance(item, Mapping):
            resolve(item.get("name"), item.get("type"), item)
    edges = 0
    for item in relationships or ():
        if not isinstance(item, Mapping):
            continue
        raw_relation = item.get("relation")
        relation = _relation(raw_relation) if isinstance(raw_relation, str) else ""
        if not relation:
            continue
        source_key = resolve(item.get("source"), DEFAULT_TYPE, {})
        target_key = None if source_key is None else resolve(item.get("target"), DEFAULT_TYPE, {})
        if source_key is None or target_key is None:
            continue
        (source_id, source_raw), (target_id, target_raw) = (
            resolved[source_key],
            resolved[target_key],
        )
        if source_id == target_id:
            continue
        # Each non-self endpoint by its raw or its canonical form, as for nodes: "The
        # Jetson" is named by "my Jetson" (only the raw form was tried: 0.4, and the
        # source chunk a chunk naming neither endpoint).
        forms = [(raw, key) for raw, key in ((source_raw, source_key), (target_raw, target_key))
                 if raw]  # fmt: skip
        in_text = all(_occurs(raw, source_tokens) or _occurs(key, source_tokens)
                      for raw, key in forms)  # fmt: skip
        naming = _chunks_naming_endpoints(forms, chunk_tokens) or first_chunk
        chunk = naming[0] if naming else None
        confidence = _item_confidence(item, in_text)
        edge = upsert_edge(
            conn, source_id, target_id, relation, confidence, now=state.now, chunk_id=chunk
        )
        edges += edge is not None
    for key, (node_id, raw) in resolved.items():
        if key == self_key or not chunk_tokens:
            continue
        named = _chunks_naming([raw], chunk_tokens) or _chunks_naming([key], chunk_tokens)
        _mention(conn, node_id, named or first_chunk, state.now)
    if fts_enabled:
        for node_id in state.new_nodes:
            name = next((k for k, (nid, _) in resolved.items() if nid == node_id), "")
            _backfill_mentions(conn, node_id, name, state.now)
    if state.gen_changed:
        _bump_gen(conn)
    removed_nodes, removed_edges = enforce_caps(conn, node_cap, edge_cap)
    return {
        "nodes": len([k for k in resolved if k != self_key]),
        "new_nodes": len(state.new_nodes),
        "edges": edges,
        "trimmed_nodes": removed_nodes,
        "trimmed_edges": removed_edges,
    }


def link_chunks(conn: Tx, chunk_ids: Sequence[int], *,
                now: str | None = None) -> int:  # fmt: skip
    """The link job (§5.7): mention every known name or alias that appears in these chunks.

    ``INSERT OR IGNORE``, so it is idempotent. A node that gains a mention counts as seen now
    (``updated_at``), so a name that keeps coming up does not decay. Returns rows inserted.
    """
    ids = [int(c) for c in chunk_ids]
    if not ids:
        return 0
    index = _name_index(conn)
    if not index.by_first:
        return 0
    now = now or now_ts()
    rows: list[tuple[int, int, str]] = []
    for part in _chunks(ids):
        for chunk_id, text in conn.execute(
            f"SELECT id, text FROM chunks WHERE id IN ({','.join('?' * len(part))})", list(part)
        ):
            for node_id in index.matches(_text_tokens(text)):
                rows.append((node_id, int(chunk_id), now))
    inserted = 0
    touched: set[int] = set()
    for row in rows:
        cur = conn.execute(
            "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) VALUES (?, ?, ?)",
            row,
        )
        if cur.rowcount > 0:
            inserted += 1
            touched.add(row[0])
    for part in _chunks(sorted(touched)):
        conn.execute(
            f"UPDATE graph_nodes SET updated_at = ? WHERE id IN ({','.join('?' * len(part))}) "
            "AND updated_at < ?",
            (now, *part, now),
        )
    return inserted


def has_nodes(conn: Tx) -> bool:
    row = conn.execute("SELECT 1 FROM graph_nodes WHERE type <> 'self' LIMIT 1").fetchone()
    return row is not None


# -- maintenance ----------------------------------------------------------------------------


def apply_decay(
    conn: Tx, half_life_days: float, threshold: float, *, now: Any = None
) -> dict[str, int]:
    """Delete edges, then non-self nodes, whose ``confidence·r(age, h)`` fell below threshold.

    Edges age from ``last_seen`` and nodes from ``updated_at``. Returns
    ``graph_nodes_archived`` and ``graph_edges_archived`` (edges removed in total, including
    those that went with a decayed node).
    """
    moment = utcnow() if now is None else now

    def faded(confidence: float, ts: str) -> bool:
        return confidence * recency(age_days(ts, moment), half_life_days) < threshold

    edges_before = int(conn.execute("SELECT count(*) FROM graph_edges").fetchone()[0])
    dead_edges = [
        int(r[0])
        for r in conn.execute("SELECT id, confidence, last_seen FROM graph_edges")
        if faded(float(r[1]), str(r[2]))
    ]
    for part in _chunks(dead_edges):
        conn.execute(f"DELETE FROM graph_edges WHERE id IN ({','.join('?' * len(part))})", part)
    dead_nodes = [
        int(r[0])
        for r in conn.execute(
            "SELECT id, confidence, updated_at FROM graph_nodes WHERE type <> 'self'"
        )
        if faded(float(r[1]), str(r[2]))
    ]
    delete_nodes(conn, dead_nodes)
    if dead_nodes:
        _bump_gen(conn)
    edges_after = int(conn.execute("SELECT count(*) FROM graph_edges").fetchone()[0])
    return {"graph_nodes_archived": len(dead_nodes),
            "graph_edges_archived": edges_before - edges_after}  # fmt: skip


@dataclass(frozen=True)
class _Node:
    id: int
    type: str
    name: str
    aliases: tuple[str, ...]
    confidence: float
    mentions: int
    created_at: str
    updated_at: str


def _load_node(conn: Tx, node_id: int) -> _Node | None:
    row = conn.execute(
        "SELECT id, type, canonical_name, aliases, confidence, mention_count, created_at, "
        "updated_at FROM graph_nodes WHERE id = ?",
        (node_id,),
    ).fetchone()
    if row is None:
        return None
    return _Node(int(row[0]), str(row[1]), str(row[2]), tuple(_load_aliases(row[3])),
                 float(row[4]), int(row[5]), str(row[6]), str(row[7]))  # fmt: skip


def _fold_edge_into(conn: Tx, keep: int, drop: int) -> None:
    rows = {
        int(r[0]): r
        for r in conn.execute(
            "SELECT id, confidence, seen_count, last_seen, created_at, source_chunk_id "
            "FROM graph_edges WHERE id IN (?, ?)",
            (keep, drop),
        )
    }
    a, b = rows[keep], rows[drop]
    seen = int(a[2]) + int(b[2])
    confidence = (float(a[1]) * int(a[2]) + float(b[1]) * int(b[2])) / seen
    importance, weight = _edge_scores(confidence, seen)
    conn.execute("DELETE FROM graph_edges WHERE id = ?", (drop,))
    conn.execute(
        "UPDATE graph_edges SET seen_count = ?, confidence = ?, importance = ?, weight = ?, "
        "last_seen = ?, created_at = ?, source_chunk_id = COALESCE(source_chunk_id, ?) "
        "WHERE id = ?",
        (seen, confidence, importance, weight, max(str(a[3]), str(b[3])),
         min(str(a[4]), str(b[4])), b[5], keep),
    )  # fmt: skip


def fold_nodes(conn: Tx, a: int, b: int) -> int | None:
    """Fold two nodes into one (§5.7 Fold) and return the survivor's id.

    The survivor has more mentions (the older id on a tie) and takes the loser's name and
    aliases, summed mentions and the mention-weighted confidence; if the survivor was a plain
    ``entity`` it takes the loser's specific type. Edges are repointed (self-loops dropped,
    collisions folded), mentions repointed, and the loser deleted. The self node never folds.
    """
    first, second = _load_node(conn, a), _load_node(conn, b)
    if first is None or second is None or first.id == second.id:
        return None
    if SELF_TYPE in (first.type, second.type):
        return None
    survivor, loser = sorted((first, second), key=lambda n: (-n.mentions, n.id))
    mentions = survivor.mentions + loser.mentions
    confidence = (
        survivor.confidence * survivor.mentions + loser.confidence * loser.mentions
    ) / max(1, mentions)
    aliases = _merge_aliases([loser.name, *loser.aliases], survivor.aliases, survivor.name)
    conn.execute(
        "UPDATE graph_nodes SET aliases = ?, mention_count = ?, confidence = ?, importance = ?, "
        "updated_at = ?, created_at = ? WHERE id = ?",
        (_dump_aliases(aliases), mentions, confidence, _node_importance(mentions),
         max(survivor.updated_at, loser.updated_at), min(survivor.created_at, loser.created_at),
         survivor.id),
    )  # fmt: skip
    for edge_id, source, target, relation in conn.execute(
        "SELECT id, source_node, target_node, relationship FROM graph_edges "
        "WHERE source_node = ? OR target_node = ? ORDER BY id",
        (loser.id, loser.id),
    ).fetchall():
        new_source = survivor.id if source == loser.id else int(source)
        new_target = survivor.id if target == loser.id else int(target)
        if new_source == new_target:
            conn.execute("DELETE FROM graph_edges WHERE id = ?", (edge_id,))
            continue
        clash = conn.execute(
            "SELECT id FROM graph_edges WHERE source_node = ? AND target_node = ? "
            "AND relationship = ? AND id <> ?",
            (new_source, new_target, relation, edge_id),
        ).fetchone()
        if clash is not None:
            _fold_edge_into(conn, int(clash[0]), int(edge_id))
        else:
            conn.execute(
                "UPDATE graph_edges SET source_node = ?, target_node = ? WHERE id = ?",
                (new_source, new_target, edge_id),
            )
    conn.execute(
        "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) "
        "SELECT ?, chunk_id, created_at FROM graph_mentions WHERE node_id = ?",
        (survivor.id, loser.id),
    )
    delete_nodes(conn, [loser.id])
    if survivor.type == DEFAULT_TYPE and loser.type != DEFAULT_TYPE:
        clash = conn.execute(
            "SELECT 1 FROM graph_nodes WHERE type = ? AND canonical_name = ?",
            (loser.type, survivor.name),
        ).fetchone()
        if clash is None:
            conn.execute("UPDATE graph_nodes SET type = ? WHERE id = ?", (loser.type, survivor.id))
    _bump_gen(conn)
    return survivor.id


def dedupe_exact(conn: Tx) -> int:
    """Deterministic dedupe: fold each ``entity`` node into the specific-typed node of the
    same canonical name (the most-mentioned one if there are several). Returns folds made."""
    pairs = conn.execute(
        "SELECT e.id, (SELECT s.id FROM graph_nodes s WHERE s.canonical_name = e.canonical_name "
        "AND s.type NOT IN ('entity', 'self') ORDER BY s.mention_count DESC, s.id LIMIT 1) "
        "FROM graph_nodes e WHERE e.type = 'entity' ORDER BY e.id"
    ).fetchall()
    folded = 0
    for entity_id, specific_id in pairs:
        if specific_id is not None and fold_nodes(conn, int(entity_id), int(specific_id)):
            folded += 1
    return folded


def _pair_key(a: _Node, b: _Node) -> tuple[str, str, str, str]:
    (ta, na), (tb, nb) = sorted([(a.type, a.name), (b.type, b.name)])
    return ta, na, tb, nb


def _merge_tokens(name: str) -> set[str]:
    return {t for t in _tokens(name) if len(t) >= MERGE_TOKEN_MIN_CHARS and t not in STOPWORDS}


def merge_candidates(
    conn: Tx, review_window_days: float, *, now: Any = None
) -> list[tuple[_Node, _Node]]:
    """Unreviewed pairs worth asking about, oldest first (by larger id, then smaller id).

    Both non-self; same type or one is ``entity``; sharing a folded token of ≥ 3 characters
    (stopwords aside); at least one created within the review window.
    """
    cutoff = ts_minus(review_window_days * 86400.0, now)
    nodes = {
        int(r[0]): _Node(
            int(r[0]),
            str(r[1]),
            str(r[2]),
            tuple(_load_aliases(r[3])),
            float(r[4]),
            int(r[5]),
            str(r[6]),
            str(r[7]),
        )  # fmt: skip
        for r in conn.execute(
            "SELECT id, type, canonical_name, aliases, confidence, mention_count, created_at, "
            "updated_at FROM graph_nodes WHERE type <> 'self'"
        )
    }
    by_token: dict[str, list[int]] = {}
    for node in nodes.values():
        for token in _merge_tokens(node.name):
            by_token.setdefault(token, []).append(node.id)
    # Reviewed pairs by their names alone: a node's type can change after the review (a
    # lone "entity" is upgraded in place, a fold takes the loser's type), and the same two
    # nodes must not be asked about again (§9).
    reviewed = {
        tuple(sorted((str(r[0]), str(r[1]))))
        for r in conn.execute("SELECT name_a, name_b FROM graph_merge_reviews")
    }
    pairs: set[tuple[int, int]] = set()
    for node in nodes.values():
        if node.created_at < cutoff:
            continue
        for token in _merge_tokens(node.name):
            for other_id in by_token[token]:
                if other_id != node.id:
                    pairs.add((min(node.id, other_id), max(node.id, other_id)))
    out: list[tuple[_Node, _Node]] = []
    for low, high in sorted(pairs, key=lambda p: (p[1], p[0])):
        a, b = nodes[low], nodes[high]
        if a.type != b.type and DEFAULT_TYPE not in (a.type, b.type):
            continue
        if tuple(sorted((a.name, b.name))) in reviewed:
            continue
        out.append((a, b))
    return out


def llm_merge(
    database: Database,
    ask: Callable[[str], str],
    *,
    review_window_days: float = 7.0,
    max_calls: int = MERGE_CALLS_PER_SWEEP,
    now: Any = None,
) -> int:
    """Ask ``ask`` (the gated LLM) whether candidate pairs are one entity; fold the "yes" ones.

    At most ``max_calls`` calls; every yes/no verdict is recorded and never asked again; an
    unclear reply records nothing. A denied call (``GateDenied``) stops the step; a deferred
    one (``GateDeferred``) is raised, so the consolidate job goes back to the queue. The
    write lock is never held during a call. Returns the number of folds.
    """
    with database.read() as conn:
        candidates = merge_candidates(conn, review_window_days, now=now)
    gone: set[int] = set()
    calls = merged = 0
    for a, b in candidates:
        if calls >= max_calls:
            break
        if a.id in gone or b.id in gone:
            continue
        prompt = build_same_entity_prompt(a.name, a.type, b.name, b.type)
        calls += 1
        try:
            reply = ask(prompt)
        except GateDenied as exc:  # a GateDeferred puts the consolidate job back instead
            logger.info("entity merge review stopped: %s", exc)
            break
        verdict = parse_yes_no(reply)
        if verdict is None:
            continue
        with database.atomic() as conn:
            current_a, current_b = _load_node(conn, a.id), _load_node(conn, b.id)
            if current_a is None or current_b is None:
                continue
            key = _pair_key(a, b)
            conn.execute(
                "INSERT OR IGNORE INTO graph_merge_reviews (type_a, name_a, type_b, name_b, "
                "verdict, reviewed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (*key, "same" if verdict else "different", now_ts()),
            )
            if verdict:
                survivor = fold_nodes(conn, a.id, b.id)
                if survivor is not None:
                    merged += 1
                    gone.add(b.id if survivor == a.id else a.id)
    return merged


def merge_duplicates(
    database: Database,
    ask: Callable[[str], str] | None = None,
    *,
    review_window_days: float = 7.0,
    max_calls: int = MERGE_CALLS_PER_SWEEP,
) -> dict[str, int]:
    """Deterministic dedupe, then (when ``ask`` is given, i.e. at FULL) the LLM merge."""
    with database.atomic() as conn:
        stats = {"graph_deduped": dedupe_exact(conn)}
    if ask is not None:
        stats["graph_merged"] = llm_merge(
            database, ask, review_window_days=review_window_days, max_calls=max_calls
        )
    return stats


def components(conn: Tx) -> dict[int, set[int]]:
    """Connected components of ≥ 2 nodes over edges that do not touch the self node, keyed
    by their smallest member id (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for source, target in conn.execute(
        "SELECT e.source_node, e.target_node FROM graph_edges e "
        "JOIN graph_nodes s ON s.id = e.source_node JOIN graph_nodes t ON t.id = e.target_node "
        "WHERE s.type <> 'self' AND t.type <> 'self'"
    ):
        ra, rb = find(int(source)), find(int(target))
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[int, set[int]] = {}
    for node in list(parent):
        members.setdefault(find(node), set()).add(node)
    return {min(m): m for m in members.values() if len(m) >= 2}


def compute_clusters(conn: Tx) -> int:
    """Store the clusters: connected components (≥ 2 nodes), the self node excluded.

    ``cluster_id`` is the smallest member id. A label survives only while the member set is
    unchanged; nodes that left every cluster lose both id and label. Returns the count.
    """
    clusters = components(conn)
    old: dict[int, tuple[int | None, str | None]] = {
        int(r[0]): (None if r[1] is None else int(r[1]), r[2])
        for r in conn.execute(
            "SELECT id, cluster_id, cluster_label FROM graph_nodes WHERE cluster_id IS NOT NULL "
            "OR cluster_label IS NOT NULL"
        )
    }
    old_sets: dict[int, set[int]] = {}
    for node_id, (cluster_id, _label) in old.items():
        if cluster_id is not None:
            old_sets.setdefault(cluster_id, set()).add(node_id)
    wanted: dict[int, tuple[int | None, str | None]] = {}
    for cluster_id, nodes in clusters.items():
        label = None
        if old_sets.get(cluster_id) == nodes:
            labels = {old[n][1] for n in nodes} - {None}
            if len(labels) == 1:
                label = labels.pop()
        for node_id in nodes:
            wanted[node_id] = (cluster_id, label)
    for node_id in old:
        wanted.setdefault(node_id, (None, None))
    changes = [
        (cluster_id, label, node_id)
        for node_id, (cluster_id, label) in wanted.items()
        if old.get(node_id, (None, None)) != (cluster_id, label)
    ]
    conn.executemany(
        "UPDATE graph_nodes SET cluster_id = ?, cluster_label = ? WHERE id = ?", changes
    )
    if changes:
        _bump_gen(conn)  # the name index holds the labels
    return len(clusters)


def label_clusters(
    database: Database, ask: Callable[[str], str], *, max_calls: int = LABEL_CALLS_PER_SWEEP
) -> int:
    """Name unlabelled clusters, largest first (ties by id), ≤ ``max_calls`` calls per sweep.

    The prompt lists up to 12 member names, most mentioned first; a label is written only if
    the cluster's members did not change meanwhile. Returns the number of labels written.
    """
    with database.read() as conn:
        rows = conn.execute(
            "SELECT cluster_id, id, canonical_name, mention_count FROM graph_nodes "
            "WHERE cluster_id IS NOT NULL AND type <> 'self' AND cluster_id IN (SELECT "
            "cluster_id FROM graph_nodes WHERE cluster_id IS NOT NULL GROUP BY cluster_id "
            "HAVING max(cluster_label IS NOT NULL) = 0)"
        ).fetchall()
    groups: dict[int, list[tuple[int, str, int]]] = {}
    for cluster_id, node_id, name, mentions in rows:
        groups.setdefault(int(cluster_id), []).append((int(node_id), str(name), int(mentions)))
    order = sorted(groups, key=lambda c: (-len(groups[c]), c))
    calls = labelled = 0
    for cluster_id in order:
        if calls >= max_calls:
            break
        members = sorted(groups[cluster_id], key=lambda m: (-m[2], m[0]))
        prompt = build_cluster_label_prompt([m[1] for m in members[:LABEL_NAMES]])
        calls += 1
        try:
            reply = ask(prompt)
        except GateDenied as exc:  # a GateDeferred puts the consolidate job back instead
            logger.info("cluster labelling stopped: %s", exc)
            break
        label = clean_label(reply)
        if label is None or is_unsafe_llm_text(label):
            continue  # graph context lists labels verbatim: see guards checks 8 and 9
        ids = sorted(m[0] for m in members)
        with database.atomic() as conn:
            now_ids = sorted(
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM graph_nodes WHERE cluster_id = ?", (cluster_id,)
                )
            )
            if now_ids != ids:
                continue
            conn.execute(
                "UPDATE graph_nodes SET cluster_label = ? WHERE cluster_id = ?",
                (label, cluster_id),
            )
            _bump_gen(conn)  # the name index holds the labels
            labelled += 1
    return labelled


def list_clusters(conn: Tx) -> list[dict[str, Any]]:
    """``{cluster_id, label, members}`` (members: sorted canonical names), largest first."""
    groups: dict[int, dict[str, Any]] = {}
    for cluster_id, label, name in conn.execute(
        "SELECT cluster_id, cluster_label, canonical_name FROM graph_nodes "
        "WHERE cluster_id IS NOT NULL AND type <> 'self'"
    ):
        group = groups.setdefault(
            int(cluster_id), {"cluster_id": int(cluster_id), "label": None, "members": []}
        )
        group["members"].append(str(name))
        if label and group["label"] is None:
            group["label"] = str(label)
    out = [g for g in groups.values() if len(g["members"]) >= 2]
    for group in out:
        group["members"].sort()
    out.sort(key=lambda g: (-len(g["members"]), g["cluster_id"]))
    return out


# -- consolidation wrappers (called from background.run_consolidate) --------------------------


def consolidate_decay(database: Database, config: Any) -> dict[str, int]:
    with database.atomic() as conn:
        return apply_decay(conn, config.graph_decay_half_life_days, config.graph_archive_threshold)


def consolidate_dedupe(database: Database) -> dict[str, int]:
    return merge_duplicates(database)


def consolidate_llm_merge(services: Any, config: Any) -> dict[str, int]:
    def ask(prompt: str) -> str:
        return str(services.ask("entity_merge", prompt, max_tokens=LLM_REPLY_TOKENS))

    merged = llm_merge(services.db, ask, review_window_days=config.graph_merge_review_window_days)
    return {"graph_merged": merged}


def consolidate_clusters(database: Database) -> dict[str, int]:
    with database.atomic() as conn:
        return {"clusters": compute_clusters(conn)}


def consolidate_labels(services: Any) -> dict[str, int]:
    def ask(prompt: str) -> str:
        return str(services.ask("cluster_label", prompt, max_tokens=LLM_REPLY_TOKENS))

    return {"clusters_labeled": label_clusters(services.db, ask)}


# -- timeline -------------------------------------------------------------------------------


def timeline_key(conn: Tx, text: object) -> str | None:
    """A fact key for a question the fact search could not resolve, through the graph.

    Conservative: the query's seeds first, then their direct neighbours (never through the
    self node), each in turn by (depth, −strength, id); the first node whose name or alias
    occurs at a word boundary in a fact's key or value (any version) gives that fact's key,
    preferring a live row, then the newest. None when nothing is named or nothing matches.
    """
    tokens = _fold_tokens(sanitize(text))
    if not tokens:
        return None
    signal = _signal(conn, tokens, TIMELINE_HOPS)
    if signal is None:
        return None
    facts = [
        (int(r[0]), str(r[1]), str(r[2]), bool(r[3]))
        for r in conn.execute(
            "SELECT id, key, value, invalidated_at IS NULL FROM facts ORDER BY id"
        )
    ]
    matched = [(f, signal.matched_nodes(f[1], f[2])) for f in facts]
    ordered = sorted(signal.reached.values(), key=lambda r: (r.depth, -r.strength, r.node_id))
    for node in ordered:
        hits = [f for f, nodes in matched if node.node_id in nodes]
        if hits:
            return max(hits, key=lambda f: (f[3], f[0]))[1]
    return None
