"""Exact BM25 for the keyword legs, scored with numpy from cached postings (SPEC §5.6).

Why not let FTS5 rank: it computes ``bm25()`` for every row a MATCH returns before
``ORDER BY … LIMIT`` keeps the best fifty, about 2 µs a row on the 2-core machines we
measure on. An OR over a question's terms returns every chunk holding any of them, so one
everyday word makes a question on a 10k-exchange store score thousands of rows (~15 ms),
and the cost grows with the store. Searching only the rarer terms is no way out: on the
LoCoMo dev split the evidence often shares only the everyday words of the question
(keeping the rarest terms whose postings fit a tenth of the store cost 0.065 recall@5).

So this module computes the very formula of FTS5's ``bm25()`` — for each query term
(each FTS5 phrase) ``idf · f·(k1+1) / (f + k1·(1 − b + b·D/avgdl))`` with k1 1.2, b 0.75,
``idf = log((N − n + 0.5)/(n + 0.5))`` clamped to 1e-6, N, avgdl and D from FTS5's own
averages and docsize records — with numpy over each term's postings: (chunk id, frequency)
arrays read once through ``tx.postings`` (storage.postings: on SQLite, from the FTS5 index
through an ``fts5vocab`` table), then kept in sync. A
question costs tens of microseconds per term, whatever the store size. FTS5 stays the index
of record; whatever the cache cannot answer exactly (a term FTS5 splits into several
tokens, time filters, any failure) is answered by the FTS5 query, and the tests check
that both rank alike.

The same index serves the facts' FTS table, whose rows are every version of every fact (the
history grows without bound while the live facts stay a few hundred): a query scores all
versions, as FTS5 does, and keeps the live ones. A row spanning several columns (a fact's
key and value) counts as FTS5 counts it: frequencies summed over the columns, the length
of all of them.

Staying in sync: the postings' state (row count, total tokens, a change marker and the
store's erase count: ``tx.postings.state``; on SQLite FTS5's averages and structure
records, one statement, two rowid lookups) is read on every query. The marker changes with
every write to the index, so it says whether anything changed at all; the counts alone do
not: an erase and a new turn of the same length leave them as they were. When the table
changed only by new chunks after the highest one cached — what ``record_turn`` does —
those chunks are tokenised with the same tokenizer (``tx.postings.tokenizer()``) and their
postings appended; any other change (erase, import, another process deleting) drops the
cache, which refills on demand.

Preloading: reading one term's postings costs ~0.1 ms (on SQLite an fts5vocab cursor per
term), so a
question of four words never seen before paid ~0.5 ms before scoring. ``prime`` (run on the
worker by ``warm_up`` and after the first query) reads every posting of a table of up to
``PRELOAD_MAX_POSTINGS`` tokens in one pass (~1 s per million) into two flat arrays, from
which a term's postings are sliced instead of read; rows appended later are kept beside it
per term. A change other than appends drops it with the rest of the cache.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from ..errors import StoreError
from ..storage.postings import ERASE_GEN_KEY as ERASE_GEN_KEY  # portability imports it here
from ..storage.postings import PostingsState, Tokenizer
from ..storage.tx import Tx

logger = logging.getLogger("elastimem")

# FTS5's own constants (its bm25() has no others, and the index must rank as FTS5 does).
# Others tried on the LoCoMo dev split 2026-12-02 (hybrid / keyword only R@5 / R@10; FTS5's
# 0.7640 / 0.8304, 0.7183 / 0.7677): b 0.3 0.7670 / 0.8290, 0.7150 / 0.7688; b 0.5 0.7646 /
# 0.8277, 0.7156 / 0.7682; b 0.9 0.7580 / 0.8280, 0.7215 / 0.7654; k1 0.9 0.7622 / 0.8294,
# 0.7140 / 0.7685; k1 1.6 0.7572 / 0.8303, 0.7179 / 0.7667; k1 2.0 0.7627 / 0.8316, 0.7179 /
# 0.7652: a plateau.
K1 = 1.2
B = 0.75
# New rows since the last query are tokenised and appended up to this many; beyond it
# (a bulk import, another process ingesting) refetching the postings is cheaper.
APPEND_LIMIT = 512
# Cached postings, in entries (12 bytes each): at least this many, or 4 per row.
MIN_POSTINGS_CAP = 1_000_000
TERM_CACHE = 4096
# Tables of up to this many tokens are preloaded whole: 8 bytes a (term, row) pair, so at
# most ~32 MB, which is ~130k chunks of chat text.
PRELOAD_MAX_POSTINGS = 4_000_000
PRELOAD_BLOCK = 65_536
PRELOAD_MAX_RECENT = 250_000
# See _costly_to_read.
READ_INSTANCES_FREELY = 50_000
INSTANCES_PER_ROW = 4


@dataclass(frozen=True)
class Corpus:
    """A corpus of ``tx.postings`` the index can mirror (``chunks`` or ``facts``)."""

    name: str
    # Below this many rows FTS5 ranks faster than the index's fixed cost (None from top,
    # unless the caller says ``any_size``).
    min_rows: int = 0


CHUNKS = Corpus("chunks")
# recall's fact leg also reads the current versions' ids: ~1 ms the FTS5 query does not pay
# on a small table (build_context, which has them already, uses the index at any size).
# Measured p50 index / FTS5 (soak stores, load ~1): 200 versions 1.0 / 0.3 ms,
# 13k 1.5 / 1.3 ms, 88k 3.3 / 7.9 ms (p95 4.7 / 14.9).
FACTS = Corpus("facts", min_rows=16_384)


@dataclass
class _Postings:
    """One token's rows, by position (ascending), with the token's frequency in each."""

    rows: np.ndarray
    freqs: np.ndarray
    pending: list[tuple[int, int]] = field(default_factory=list)

    def merged(self) -> _Postings:
        if self.pending:
            extra = np.array(self.pending, dtype=np.int64)
            self.rows = np.concatenate([self.rows, extra[:, 0]])
            self.freqs = np.concatenate([self.freqs, extra[:, 1].astype(np.float64)])
            self.pending = []
        return self

    @property
    def size(self) -> int:
        return len(self.rows) + len(self.pending)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.freqs.nbytes) + 16 * len(self.pending)


class _Preloaded:
    """Every posting of a table as of one state: per term a slice of two flat arrays,
    plus the postings of rows appended since (per term, in id order). ``ids`` holds row ids
    as read, until ``KeywordIndex.prime`` turns them into positions (int32) on install."""

    def __init__(self, spans: dict[str, tuple[int, int]], ids: np.ndarray, freqs: np.ndarray):
        self.spans = spans
        self.ids = ids
        self.freqs = freqs
        self.recent: dict[str, list[tuple[int, int]]] = {}
        self.recent_count = 0
        # Ids (after, up to] appended while the arrays were read: in neither yet.
        self.catch_up: tuple[int, int] | None = None

    def postings(self, token: str) -> _Postings:
        start, end = self.spans.get(token, (0, 0))
        recent = self.recent.get(token)
        return _Postings(
            self.ids[start:end].astype(np.int64),
            self.freqs[start:end].astype(np.float64),
            list(recent) if recent else [],
        ).merged()


def _read_all_postings(conn: Tx, corpus: str) -> _Preloaded:
    """Every (term, row, frequency) of ``corpus``, in one ordered pass.

    The postings come grouped by term, so a term's postings are one run; the run starts
    are found with numpy on each block rather than row by row in Python.
    """
    starts: dict[str, int] = {}
    id_blocks: list[np.ndarray] = []
    freq_blocks: list[np.ndarray] = []
    position = 0
    last: object = None
    for terms, docs, counts in conn.postings.all_postings(corpus, PRELOAD_BLOCK):
        names = np.array(terms, dtype=object)
        change = np.empty(len(names), dtype=bool)
        change[0] = terms[0] != last
        change[1:] = names[1:] != names[:-1]
        for at in np.flatnonzero(change).tolist():
            starts[terms[at]] = position + at
        last = terms[-1]
        id_blocks.append(docs)
        freq_blocks.append(counts)
        position += len(terms)
    spans: dict[str, tuple[int, int]] = {}
    ordered = sorted(starts.items(), key=lambda item: item[1])
    for (term, start), (_next, end) in zip(ordered, [*ordered[1:], ("", position)]):
        spans[term] = (start, end)
    empty = np.zeros(0, dtype=np.int64)
    return _Preloaded(
        spans,
        np.concatenate(id_blocks) if id_blocks else empty,
        np.concatenate(freq_blocks) if freq_blocks else empty,
    )


class TermTokens:
    """The one token FTS5 makes of each query term, cached; shared by a store's two indexes
    (one tokenizer round trip per new term, not one per index)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None  # the storage's, made on first use
        self._closed = False
        self._cache: OrderedDict[str, str | None] = OrderedDict()

    def tokens(self, conn: Tx, terms: list[str]) -> list[str | None]:
        """Each term's token; None where FTS5 makes several (a phrase), "" where none."""
        with self._lock:
            new = [t for t in dict.fromkeys(terms) if t not in self._cache]
            if new and self._tokenizer is None:
                if self._closed:
                    raise StoreError("the keyword index is closed")
                self._tokenizer = conn.postings.tokenizer()
            tokenizer = self._tokenizer
            for term, tokens in zip(
                new, tokenizer.tokens(new) if tokenizer and new else [], strict=True
            ):
                self._cache[term] = tokens[0] if len(tokens) == 1 else (None if tokens else "")
            # Read and refresh this query's terms before evicting: evicting first could drop
            # one of them (an old term of the query, or any when it has more terms than the
            # cache holds).
            found = [self._cache[t] for t in terms]
            for term in terms:
                self._cache.move_to_end(term)
            while len(self._cache) > TERM_CACHE:
                self._cache.popitem(last=False)
            return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._tokenizer is not None:
                self._tokenizer.close()
                self._tokenizer = None


class KeywordIndex:
    """BM25 top-k over one corpus from cached postings; thread-safe, see module doc."""

    def __init__(self, table: Corpus = CHUNKS, terms: TermTokens | None = None) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None  # the storage's, made on first append
        self._owns_terms = terms is None
        self._terms = TermTokens() if terms is None else terms
        self._closed = False
        self._resets = 0
        self._reset()

    def _reset(self) -> None:
        self._resets += 1
        self._state: PostingsState | None = None  # as cached
        self._rows = 0
        self._total_tokens = 0
        self._max_id = 0
        # Row i (by ascending id) of the cache: its id and its length in tokens. Positions,
        # not ids, index every array, so memory follows the rows of this store, not the
        # size of the id space (on PostgreSQL one sequence serves every user). Both grow
        # by doubling; the first ``_size`` entries are in use.
        self._ids = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.uint32)
        self._size = 0
        self._postings: OrderedDict[str, _Postings] = OrderedDict()
        self._cached_entries = 0
        self._loaded = False
        self._preloaded: _Preloaded | None = None

    def top(
        self,
        conn: Tx,
        terms: list[str],
        limit: int,
        *,
        exclude: Collection[int] = (),
        only: Collection[int] | None = None,
        any_size: bool = False,
    ) -> list[tuple[int, float]] | None:
        """The best ``limit`` rows as (id, −bm25), best first, ties to the higher id.

        Rows in ``exclude``, or outside ``only`` when given (the live facts), are left out
        before the cut. ``conn`` must be inside one read snapshot. None when this query
        needs FTS5 itself, or when the table has fewer than ``min_rows`` rows, unless
        ``any_size`` (a caller that already holds what made small tables slow here).
        """
        try:
            with self._lock:
                if self._closed:
                    return None
                state = self._read_state(conn)
                if not any_size and state.rows < self.table.min_rows:
                    return None
                if not self._sync(conn, state):
                    return None
                if self._preloaded is not None and self._preloaded.catch_up is not None:
                    self._catch_up(conn, self._preloaded)
                tokens = self._tokens(conn, terms)
                if any(t is None for t in tokens):
                    return None
                return self._score(conn, [t for t in tokens if t], limit, exclude, only)
        except _LeaveToFts5:
            return None
        except (StoreError, ValueError, MemoryError) as exc:
            logger.debug("keyword index unavailable for this query: %s", type(exc).__name__)
            with self._lock:
                self._reset()
            return None

    def answers(self, conn: Tx) -> bool:
        """Whether ``top`` would rank at all (the table has ``min_rows``): lets a caller skip
        work it only does for the index (one small read)."""
        try:
            return self._read_state(conn).rows >= self.table.min_rows
        except (StoreError, ValueError):
            return False

    def prime(self, conn: Tx) -> None:
        """Load what every query needs (the row lengths) and, for a table of up to
        ``PRELOAD_MAX_POSTINGS`` tokens, every posting. ``conn`` must be inside one read
        snapshot; queries go on meanwhile (the pass runs outside the lock)."""
        try:
            with self._lock:
                if self._closed:
                    return
                state = self._read_state(conn)
                if not self._sync(conn, state) or not self.wants_preload:
                    return
                resets, read_up_to = self._resets, self._max_id
                # Positions never move while the index only appends (a reset makes new
                # arrays), so this view maps the postings read below to positions.
                known = self._ids[: self._size]
            preloaded = _read_all_postings(conn, self.table.name)
            preloaded.ids = _positions(known, preloaded.ids).astype(np.int32)
            with self._lock:
                # Install over the state it was read from, or one that only gained rows
                # since (queries appended them; the next query adds them to ``recent``).
                if not self._closed and self._loaded and self._resets == resets:
                    if self._max_id > read_up_to:
                        preloaded.catch_up = (read_up_to, self._max_id)
                    self._preloaded = preloaded
        except (StoreError, ValueError, MemoryError) as exc:
            logger.debug("priming the keyword index failed: %s", type(exc).__name__)

    @property
    def wants_preload(self) -> bool:
        """True when ``prime`` would read every posting (not yet done, and small enough)."""
        return (
            self._preloaded is None
            and not self._closed
            and self._total_tokens <= PRELOAD_MAX_POSTINGS
        )

    @property
    def preloaded(self) -> bool:
        return self._preloaded is not None

    def close(self) -> None:
        """Free the cache and the tokenizer; a later query answers None."""
        with self._lock:
            self._reset()
            self._closed = True
            if self._tokenizer is not None:
                self._tokenizer.close()
                self._tokenizer = None
            if self._owns_terms:
                self._terms.close()

    @property
    def cached_entries(self) -> int:
        """Postings held in memory, over all cached terms."""
        return self._cached_entries

    @property
    def loaded_rows(self) -> int:
        """Rows whose lengths are loaded (0 until the first query or ``prime``)."""
        return self._rows if self._loaded else 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the arrays the index holds: the rows' ids and lengths, the preloaded
        postings and the cached terms' postings. It follows the rows of the store, whatever
        their ids."""
        with self._lock:
            held = int(self._ids.nbytes + self._lengths.nbytes)
            if self._preloaded is not None:
                held += int(self._preloaded.ids.nbytes + self._preloaded.freqs.nbytes)
                held += 16 * self._preloaded.recent_count
            return held + sum(p.nbytes for p in self._postings.values())

    # -- keeping in sync ----------------------------------------------------------------------

    def _read_state(self, conn: Tx) -> PostingsState:
        """The postings' state, with the store's erase count.

        The erase count is what tells an erase followed by new turns from appends alone:
        SQLite hands the erased newest ids out again, and when the new rows also bring the
        same number of tokens, counts and averages look exactly like an append (the cache
        then served the erased rows' postings).
        """
        return conn.postings.state(self.table.name)

    def _sync(self, conn: Tx, state: PostingsState) -> bool:
        if self._loaded and state == self._state:
            return True
        rows, total = state.rows, state.tokens
        erased = self._state is not None and state.erase_gen != self._state.erase_gen
        if self._loaded and not erased and self._append(conn, rows, total):
            self._state = state
            return True
        self._reset()
        if self._load_lengths(conn) != rows:
            # FTS5 and its docsize table disagree (an index being rebuilt): let FTS5 answer.
            self._reset()
            return False
        self._rows, self._total_tokens, self._state = rows, total, state
        self._loaded = True
        return True

    def _append(self, conn: Tx, rows: int, total: int) -> bool:
        """Take in rows added after the last one cached; False if that is not the change."""
        new = conn.postings.docs_after(self.table.name, self._max_id, APPEND_LIMIT + 1)
        if not new or len(new) > APPEND_LIMIT or rows != self._rows + len(new):
            return False
        docs = self._tokenizer_for(conn).documents(new)
        if total != self._total_tokens + sum(length for _, _, length in docs):
            return False
        self._grow(self._size + len(docs))
        for doc_id, counts, length in docs:
            row = self._size
            self._ids[row] = doc_id
            self._lengths[row] = length
            self._size += 1
            for token, freq in counts.items():
                postings = self._postings.get(token)
                if postings is not None:
                    postings.pending.append((row, freq))
                    self._cached_entries += 1
                if self._preloaded is not None:
                    self._preloaded.recent.setdefault(token, []).append((row, freq))
                    self._preloaded.recent_count += 1
        if self._preloaded is not None and self._preloaded.recent_count > PRELOAD_MAX_RECENT:
            # Kept as Python tuples, appended postings cost ~8× the flat arrays: drop the
            # preload (wants_preload asks for a new one, folding them into the arrays).
            self._preloaded = None
        self._rows, self._total_tokens = rows, total
        self._max_id = int(new[-1][0])
        return True

    def _catch_up(self, conn: Tx, preloaded: _Preloaded) -> None:
        """Add to ``recent`` the rows appended while the preload was being read."""
        assert preloaded.catch_up is not None
        after, up_to = preloaded.catch_up
        new = [
            (i, t)
            for i, t in conn.postings.docs_after(self.table.name, after, self._size)
            if i <= up_to
        ]
        rows = _positions(self._ids[: self._size], np.array([i for i, _ in new], dtype=np.int64))
        for row, (_doc_id, counts, _length) in zip(
            rows.tolist(), self._tokenizer_for(conn).documents(new), strict=True
        ):
            for token, freq in counts.items():
                preloaded.recent.setdefault(token, []).append((row, freq))
                preloaded.recent_count += 1
        preloaded.catch_up = None

    def _tokenizer_for(self, conn: Tx) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = conn.postings.tokenizer()
        return self._tokenizer

    def _load_lengths(self, conn: Tx) -> int:
        """Every row's length in tokens; returns the count."""
        ids, lengths = conn.postings.doc_lengths(self.table.name)
        self._max_id = int(ids[-1]) if ids.size else 0
        self._ids = np.asarray(ids, dtype=np.int64).copy()
        self._lengths = np.asarray(lengths, dtype=np.uint32).copy()
        self._size = int(ids.size)
        return self._size

    def _grow(self, rows: int) -> None:
        """Room for ``rows`` rows in the id and length arrays."""
        if rows > len(self._ids):
            capacity = max(rows, 2 * len(self._ids))
            for name, dtype in (("_ids", np.int64), ("_lengths", np.uint32)):
                grown = np.zeros(capacity, dtype=dtype)
                grown[: self._size] = getattr(self, name)[: self._size]
                setattr(self, name, grown)

    # -- terms and postings -------------------------------------------------------------------

    def _tokens(self, conn: Tx, terms: list[str]) -> list[str | None]:
        """The one token FTS5 makes of each term; None where it makes several (a phrase)."""
        return self._terms.tokens(conn, terms)

    def _postings_for(self, conn: Tx, tokens: list[str]) -> dict[str, _Postings]:
        """Each token's postings: cached, or read from storage one token at a time."""
        found: dict[str, _Postings] = {}
        for token in tokens:
            cached = self._postings.get(token)
            if cached is not None:
                self._postings.move_to_end(token)
                found[token] = cached.merged()
        missing = [t for t in dict.fromkeys(tokens) if t not in found]
        if not missing:
            return found
        cap = max(MIN_POSTINGS_CAP, 4 * self._rows)
        for token in missing:
            if self._preloaded is not None:
                postings = self._preloaded.postings(token)
            else:
                size = conn.postings.term_size(self.table.name, token)
                if size is not None and _costly_to_read(*size):
                    raise _LeaveToFts5(token)
                ids, freqs = conn.postings.term_postings(self.table.name, token)
                postings = _Postings(_positions(self._ids[: self._size], ids), freqs)
            found[token] = postings
            if postings.size <= cap:
                self._postings[token] = postings
                self._cached_entries += postings.size
        while self._cached_entries > cap and len(self._postings) > 1:
            _, evicted = self._postings.popitem(last=False)
            self._cached_entries -= evicted.size
        return found

    # -- scoring ------------------------------------------------------------------------------

    def _score(
        self,
        conn: Tx,
        tokens: list[str],
        limit: int,
        exclude: Collection[int],
        only: Collection[int] | None,
    ) -> list[tuple[int, float]]:
        if not tokens or self._rows == 0:
            return []
        n_rows = float(self._rows)
        avgdl = self._total_tokens / n_rows
        row_parts: list[np.ndarray] = []
        score_parts: list[np.ndarray] = []
        all_postings = self._postings_for(conn, tokens)
        for token in tokens:  # one FTS5 phrase per term, so a repeated stem counts twice
            postings = all_postings[token]
            df = len(postings.rows)
            if df == 0:
                continue
            idf = math.log((n_rows - df + 0.5) / (df + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            f = postings.freqs
            dl = self._lengths[postings.rows]
            row_parts.append(postings.rows)
            score_parts.append(idf * (f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * dl / avgdl)))
        if not row_parts:
            return []
        rows, scores = _sum_by_row(
            np.concatenate(row_parts), np.concatenate(score_parts), self._size
        )
        ids = self._ids[rows]
        if only is not None:
            keep = np.isin(ids, np.fromiter(only, dtype=np.int64, count=len(only)))
            ids, scores = ids[keep], scores[keep]
        if exclude:
            keep = ~np.isin(ids, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))
            ids, scores = ids[keep], scores[keep]
        return _best(ids, scores, limit)


def _sum_by_row(
    rows: np.ndarray, scores: np.ndarray, row_count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Unique row positions (ascending) and the sum of their scores.

    Adding into one slot per row is linear; sorting the positions (np.unique) is cheaper
    only when the postings are few next to the rows (rare terms, a very large store).
    """
    if row_count <= 8 * len(rows) + 65_536:
        totals = np.bincount(rows, weights=scores, minlength=row_count)
        unique = np.flatnonzero(totals)
        return unique, totals[unique]
    unique, inverse = np.unique(rows, return_inverse=True)
    return unique, np.bincount(inverse, weights=scores, minlength=len(unique))


def _positions(known: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The positions in ``known`` (ascending ids) of ``ids``; ValueError when one is not
    there (postings of a row whose length the index has not loaded)."""
    ids = np.asarray(ids, dtype=np.int64)
    rows = np.searchsorted(known, ids)
    if ids.size and (int(rows.max()) >= len(known) or not np.array_equal(known[rows], ids)):
        raise ValueError("postings of a row the keyword index does not hold")
    return rows


def _best(ids: np.ndarray, scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """Top ``limit`` by score descending, then id descending (the FTS5 query's order)."""
    if len(ids) > limit:
        cut = np.partition(scores, len(scores) - limit)[len(scores) - limit]
        keep = scores >= cut
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((-ids, -scores))[:limit]
    return [(int(ids[i]), float(scores[i])) for i in order]


class _LeaveToFts5(Exception):
    """A query term whose postings cost far more to read than FTS5 pays to rank it."""


def _costly_to_read(rows: int, instances: int) -> bool:
    """Reading a term's postings costs ~3 µs per instance (each occurrence is a row of the
    fts5vocab table); FTS5 ranks it for ~2 µs per matching row. A term repeated many times
    in each row it is in (a 10 MB message of a few words: 410k instances in 12k rows, 1.9 s
    to read) is left to FTS5; ordinary text (a few instances a row) is read and cached."""
    return instances > READ_INSTANCES_FREELY and instances > INSTANCES_PER_ROW * rows


class KeywordIndexes:
    """One store's indexes: chunks and facts."""

    def __init__(self) -> None:
        self._terms = TermTokens()
        self.chunks = KeywordIndex(CHUNKS, self._terms)
        self.facts = KeywordIndex(FACTS, self._terms)
        self.prime_requested = False

    @property
    def wants_preload(self) -> bool:
        return self.chunks.wants_preload or self.facts.wants_preload

    def prime(self, conn: Tx) -> None:
        self.chunks.prime(conn)
        self.facts.prime(conn)

    def close(self) -> None:
        self.chunks.close()
        self.facts.close()
        self._terms.close()
