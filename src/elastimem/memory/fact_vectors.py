"""Facts found by meaning: a vector per fact version, and the facts' vector leg (§5.6, §5.13).

Data model (schema v7, ``migrations.TABLES_V7``): ``fact_vectors(fact_id → facts, model
label, dimension, embedding)``, one L2-normalised little-endian float32 BLOB per fact
version, deleted with its fact. A fact's key and value never change (§5.3), so its vector
never goes stale except by a change of model, which ``reindex`` handles like the chunks'.

Writing: the worker's embed job embeds the live, unarchived facts that have no vector of
the active model (``pending``), whatever wrote them (remember, rule capture, extraction,
merge, import); ``queue`` asks for such a job in the writer's transaction, and the idle
backfill catches anything else. The text embedded is :func:`fact_text`.

Querying: facts are few (hundreds), so the search is an exact scan over an in-memory
matrix of the live, unarchived facts' vectors (``FactVectorCache``), reloaded when
``meta.facts.stamp`` (any fact change, v5) or ``meta.fact_vectors.stamp`` (any vector
write or delete, v7) moves, whichever process made the change. Live facts still without a
vector of the model (up to ``WAITING_FACTS_LIMIT``, listed with the matrix) are embedded for
the query itself, so a fact is found by meaning before the worker has stored its vector.

Where the rest lives: the rows behind ``tx.fact_vectors`` (``storage.fact_vectors``), the
embed job and ``queue`` in ``jobs.embed``, the query-time leg in ``retrieval.legs``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..storage.tx import Tx

_TS_DTYPE = "S27"  # the fixed-width canonical timestamp, compared as bytes


def fact_text(key: str, value: str) -> str:
    """What a fact's vector is made from: ``my <key, underscores as spaces> is <value>``.

    Chosen on a labelled set of 27 questions about 24 facts and 36 off-topic questions
    (all-MiniLM-L6-v2; the set is ``tests/data/fact_queries.json``): the plain
    ``favorite color: teal`` put the right fact first for 24 of 27 questions, and its
    weakest right answer (0.227, "which company pays my salary?" → employer) scored below
    eight off-topic questions' best fact (up to 0.317); as a sentence about the user,
    26 of 27 come first and every right answer (≥ 0.343) scores above every off-topic best
    but one that shares the fact's topic ("is coffee bad for you?" → coffee order, 0.42).

    Two kinds of text carry no meaning and are left out, because a model reads them as words
    and they move a fact's score by chance: a key's hexadecimal id parts (a framework item's
    ``memories_3f9a1c0b2d4e``) and a value's last line when it is a JSON list or object after
    lines of words (an item's ``[namespace, key, field]`` trailer). With them, "what food does
    the user avoid?" scored the item "I never eat meat; …" between 0.326 and 0.399 depending
    on the user's id, across the 0.33 fact floor; without them 0.356 for every user.
    """
    words = " ".join(part for part in key.split("_") if part and not _HEX_ID.fullmatch(part))
    return f"my {words or key.replace('_', ' ')} is {_without_json_trailer(value)}"


# A key part made of 8+ hexadecimal digits with at least one digit: an id or a digest.
_HEX_ID = re.compile(r"(?=[a-f]*[0-9])[0-9a-f]{8,}")


def _without_json_trailer(value: str) -> str:
    """``value`` without a last line that is a JSON list or object, when lines precede it."""
    head, newline, last = value.rpartition("\n")
    if not newline or not head.strip() or last.lstrip()[:1] not in ("[", "{"):
        return value
    try:
        json.loads(last)
    except (ValueError, RecursionError):
        return value
    return head


# -- writing ------------------------------------------------------------------------------------


def pending(conn: Tx, label: str, dim: int | None, limit: int) -> list[tuple[int, str, str]]:
    """``(id, key, value)`` of live, unarchived facts without a vector of ``label``/``dim``."""
    return conn.fact_vectors.pending(label, dim, limit)


def any_without_vector(conn: Tx) -> bool:
    """Whether a live, unarchived fact has no vector at all (of any model)."""
    return conn.fact_vectors.any_without_vector()


def all_live(conn: Tx) -> list[tuple[int, str, str]]:
    """``(id, key, value)`` of every live, unarchived fact (``reindex(force=True)``)."""
    return conn.fact_vectors.all_live()


def write(
    conn: Tx,
    rows: Sequence[tuple[int, str, str]],
    matrix: np.ndarray,
    label: str,
) -> int:
    """Store the unit vectors of ``rows`` (inside ``atomic()``); returns the number written.

    A fact erased meanwhile is skipped, and so is one whose id a new fact took (SQLite
    hands the highest erased ids out again): its key or value differs from what was
    embedded, and the new fact is embedded on its own.
    """
    dim = int(matrix.shape[1])
    written = 0
    for (fact_id, key, value), vector in zip(rows, matrix, strict=True):
        if conn.fact_vectors.put(fact_id, key, value, label, vector):
            written += 1
    # The dimension written is the active one, as for the chunks (vectors.write_vectors): a
    # host embedder that changed its dimension leaves it here, or the next process would
    # search the facts with the old one and find none of those re-embedded since.
    if written and conn.meta.get(f"embedder.{label}.dim") != str(dim):
        conn.meta.set(f"embedder.{label}.dim", dim)
    return written


# -- querying -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactMatrix:
    """The live, unarchived facts' vectors of one model, as of one stamp pair."""

    ids: np.ndarray
    valid_from: np.ndarray
    vectors: np.ndarray

    def search(
        self, query: np.ndarray, n: int, *, since: str | None = None, until: str | None = None
    ) -> list[tuple[int, float]]:
        """The top ``n`` facts by exact cosine among those valid from ``since`` (inclusive)
        to ``until`` (exclusive), ordered ``(-score, -id)``."""
        if self.ids.size == 0 or n <= 0:
            return []
        scores = np.add.reduce(
            self.vectors.astype(np.float64) * np.asarray(query, dtype=np.float64), axis=1
        )
        keep = np.ones(self.ids.size, dtype=bool)
        if since is not None:
            keep &= self.valid_from >= since.encode("ascii")
        if until is not None:
            keep &= self.valid_from < until.encode("ascii")
        ids, scores = self.ids[keep], scores[keep]
        order = np.lexsort((-ids, -scores))[:n]
        return [(int(ids[i]), float(scores[i])) for i in order]


def timestamps(values: Sequence[str]) -> np.ndarray:
    """``FactMatrix.valid_from`` for these timestamps (fixed-width bytes, compared as such)."""
    return np.array([str(v).encode("ascii", "replace")[:27] for v in values], _TS_DTYPE)


EMPTY_MATRIX = FactMatrix(
    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=_TS_DTYPE), np.zeros((0, 0), np.float32)
)


class FactVectorCache:
    """The live facts' vectors of the active model, and the live facts still without one
    (``_waiting``), kept while both stamps hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._matrix = EMPTY_MATRIX
        self._waiting: list[tuple[int, str, str, str]] = []
        # Vectors made for queries of facts still waiting, by (label, dim, id, text): a store
        # the worker cannot write to (read-only) embeds them once, not at every recall.
        self._inline: dict[tuple[str, int, int, str], np.ndarray] = {}

    def matrix(
        self, conn: Tx, label: str, dim: int
    ) -> tuple[FactMatrix, list[tuple[int, str, str, str]]]:
        """``conn`` inside one read snapshot."""
        key = (*conn.fact_vectors.stamps(), label, dim)
        with self._lock:
            if key == self._key:
                return self._matrix, self._waiting
        rows = [r for r in conn.fact_vectors.live_vectors(label, dim) if len(r[2]) == 4 * dim]
        if rows:
            matrix = FactMatrix(
                np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                timestamps([r[1] for r in rows]),
                np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), dim),
            )
        else:
            matrix = EMPTY_MATRIX
        waiting = conn.fact_vectors.waiting(label, dim, WAITING_FACTS_LIMIT)
        wanted = {(label, dim, r[0], fact_text(r[1], r[2])) for r in waiting}
        with self._lock:
            self._key, self._matrix, self._waiting = key, matrix, waiting
            self._inline = {k: v for k, v in self._inline.items() if k in wanted}
        return matrix, waiting

    def inline(self, label: str, dim: int, fact_id: int, text: str) -> np.ndarray | None:
        with self._lock:
            return self._inline.get((label, dim, fact_id, text))

    def keep_inline(self, label: str, dim: int, fact_id: int, text: str, vector: Any) -> None:
        with self._lock:
            if len(self._inline) < 4 * WAITING_FACTS_LIMIT:
                self._inline[(label, dim, fact_id, text)] = vector

    def clear(self) -> None:
        with self._lock:
            self._key, self._matrix, self._waiting = None, EMPTY_MATRIX, []
            self._inline = {}


# Live facts the worker has not embedded yet (just written, imported from an older export,
# or stored before v7) are embedded for the query itself, up to this many: without them a
# fact is found only by its words until the embed job or the backfill has run.
WAITING_FACTS_LIMIT = 32
