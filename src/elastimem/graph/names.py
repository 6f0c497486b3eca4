"""Names: canonical forms, aliases and tokens, and the cached name index behind seeds.

A raw extraction name becomes a canonical name (NFKC, casefolded, outer punctuation and one
leading article stripped, ≤ 80 characters). Queries and chunks are scanned as folded word
tokens; a name matches where its whole token sequence appears. ``detect_seed_nodes`` and the
query-time signal read the name index: every matchable folded name and alias keyed by its
first token, cached per store until ``meta['graph.gen']`` changes (every node insert, delete
or alias change bumps it, and so does a cluster change, because it also holds each node's
name and cluster label). The cache key comes from ``tx.graph.names_version()``, which also
returns the graph stamp the kept reads of ``neighbourhoods`` go by.

Also here, because every other graph module uses them: the shared cache lock and size, the
node and edge score formulas, and ``bump_gen``.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import unicodedata
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from ..storage.tx import Tx
from ..text import STOPWORDS, collapse_whitespace, em_fold, sanitize, word_tokens

logger = logging.getLogger("elastimem")

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
# Retrieval: at most this many seeds per query.
MAX_SEEDS = 5
# Name-index cache: one entry per (store, generation); a process rarely has more stores open.
_INDEX_CACHE_SIZE = 8
# Where the node-name generation counter lives in ``tx.meta``.
GEN_KEY = "graph.gen"


class Database(Protocol):
    """What the graph needs of an opened store: its transactions."""

    def read(self) -> AbstractContextManager[Tx]: ...

    def atomic(self) -> AbstractContextManager[Tx]: ...


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


# The words models use for the four types ("organization", "company", "city"…): without
# them an organisation an LLM calls "organization" would be drawn and matched as "entity".
TYPE_SYNONYMS = {
    **{word: "person" for word in ("people", "human", "individual", "family member",
                                   "relative", "friend", "colleague", "contact")},
    **{word: "place" for word in ("location", "city", "town", "country", "region", "state",
                                  "address", "neighbourhood", "neighborhood", "venue", "gpe")},
    **{word: "org" for word in ("organization", "organisation", "company", "business",
                                "employer", "institution", "school", "university", "hospital",
                                "clinic", "agency", "firm", "corporation", "team", "band")},
    **{word: "thing" for word in ("object", "item", "product", "animal", "pet", "device")},
}  # fmt: skip


def _node_type(value: object) -> str:
    if isinstance(value, str):
        folded = " ".join(value.strip().casefold().replace("_", " ").split())
        if folded in NODE_TYPES:
            return folded
        return TYPE_SYNONYMS.get(folded, DEFAULT_TYPE)
    return DEFAULT_TYPE


def _relation(value: object) -> str:
    """Lowercase, whitespace runs become ``_``, cut to 40 characters."""
    return "_".join(sanitize(value).lower().split())[:RELATION_MAX_CHARS]


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
    conn.meta.bump(GEN_KEY)


_warned: set[str] = set()


def _warn_once(topic: str, message: str, *args: object) -> None:
    """A warning that could repeat on every query is logged once, then at debug level."""
    if topic in _warned:
        logger.debug(message, *args)
    else:
        _warned.add(topic)
        logger.warning(message, *args)


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


def _store_identity(conn: Tx) -> tuple[object, ...]:
    """An opaque value telling this store apart (its file, or for an in-memory store its
    creation time)."""
    return conn.graph.store_identity()


# Database → its identity, read once: it does not change while a store is open, and the
# reads behind it were ~0.05 ms of every recall (benchmarks/graph_latency.py).
_identities: weakref.WeakKeyDictionary[Any, tuple[object, ...]] = weakref.WeakKeyDictionary()


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
    """(what identifies one store's name list, its graph stamp), read together.

    The first is (the store's identity, its names version: ``graph.gen`` and the newest
    node): every node insert, delete or
    alias change bumps ``graph.gen``; the newest node's id and name also catch a writer that
    forgot to, or ids reused after a rolled-back insert. The stamp changes with any edge,
    mention or confidence too (see ``_Neighbourhoods``); None in a store older than v6.
    """
    identity = identity or _store_identity(conn)
    names, stamp = conn.graph.names_version()
    return (identity, names), stamp


def _build_index(conn: Tx) -> _NameIndex:
    index = _NameIndex()
    for node_id, node_type, name, aliases, label in conn.graph.name_rows():
        if node_type == SELF_TYPE:
            index.self_id = node_id
            continue
        index.names[node_id] = (name, label)
        index.add(node_id, name)
        for alias in aliases:
            index.add(node_id, alias)
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
    index.identity, index.version = tuple(version[0]), version  # type: ignore[arg-type]
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
