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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..retrieval.rank import FACT_CANDIDATES, FactVectorFinish, Filters
from ..runtime import queue as jobs
from ..storage.sqlite.migrations import FACT_VECTORS_STAMP_KEY, FACTS_STAMP_KEY
from ..storage.tx import Tx

if TYPE_CHECKING:
    from ..governor import MemoryProfile
    from ..runtime.background import Services

logger = logging.getLogger("elastimem")

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
    """
    return f"my {key.replace('_', ' ')} is {value}"


# -- writing ------------------------------------------------------------------------------------


def pending(conn: Tx, label: str, dim: int | None, limit: int) -> list[tuple[int, str, str]]:
    """``(id, key, value)`` of live, unarchived facts without a vector of ``label``/``dim``."""
    return [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in conn.execute(
            "SELECT f.id, f.key, f.value FROM facts f WHERE f.invalidated_at IS NULL "
            "AND f.archived = 0 AND NOT EXISTS (SELECT 1 FROM fact_vectors v "
            "WHERE v.fact_id = f.id AND v.embedding_model = ? AND v.embedding_dim IS ?) "
            "ORDER BY f.id LIMIT ?",
            (label, dim if dim is not None else -1, limit),
        )
    ]


def any_without_vector(conn: Tx) -> bool:
    """Whether a live, unarchived fact has no vector at all (of any model)."""
    row = conn.execute(
        "SELECT 1 FROM facts f WHERE f.invalidated_at IS NULL AND f.archived = 0 AND NOT EXISTS "
        "(SELECT 1 FROM fact_vectors v WHERE v.fact_id = f.id) LIMIT 1"
    ).fetchone()
    return row is not None


def all_live(conn: Tx) -> list[tuple[int, str, str]]:
    """``(id, key, value)`` of every live, unarchived fact (``reindex(force=True)``)."""
    return [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in conn.execute(
            "SELECT id, key, value FROM facts WHERE invalidated_at IS NULL AND archived = 0 "
            "ORDER BY id"
        )
    ]


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
        row = conn.execute("SELECT key, value FROM facts WHERE id = ?", (fact_id,)).fetchone()
        if row is None or (str(row[0]), str(row[1])) != (key, value):
            continue
        conn.execute(
            "INSERT OR REPLACE INTO fact_vectors (fact_id, embedding_model, embedding_dim, "
            "embedding) VALUES (?, ?, ?, ?)",
            (fact_id, label, dim, np.asarray(vector, dtype="<f4").tobytes()),
        )
        written += 1
    # The dimension written is the active one, as for the chunks (vectors.write_vectors): a
    # host embedder that changed its dimension leaves it here, or the next process would
    # search the facts with the old one and find none of those re-embedded since.
    if written and conn.meta.get(f"embedder.{label}.dim") != str(dim):
        conn.meta.set(f"embedder.{label}.dim", dim)
    return written


def queue(conn: Tx, services: Services) -> None:
    """Ask for an embed job for facts just written (in the writer's transaction), unless
    one is already queued (every embed job embeds the pending facts) or none could run."""
    profile = services.profile()
    if not profile.embeddings_enabled or not services.embedding.can_embed_passages():
        return
    owner = services.owner
    queued = conn.execute(
        "SELECT 1 FROM jobs WHERE kind = 'embed' AND state = 'queued' AND owner_pid = ? "
        "AND owner_host = ? LIMIT 1",
        (owner.pid, owner.host),
    ).fetchone()
    if queued is None:
        jobs.enqueue(conn, "embed", owner, payload={"facts": True})


# -- querying -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactMatrix:
    """The live, unarchived facts' vectors of one model, as of one stamp pair."""

    ids: np.ndarray
    valid_from: np.ndarray
    vectors: np.ndarray

    def search(self, query: np.ndarray, filters: Filters, n: int) -> list[tuple[int, float]]:
        """The top ``n`` facts by exact cosine among those passing ``filters``' time
        bounds, ordered ``(-score, -id)``."""
        if self.ids.size == 0 or n <= 0:
            return []
        scores = np.add.reduce(
            self.vectors.astype(np.float64) * np.asarray(query, dtype=np.float64), axis=1
        )
        keep = np.ones(self.ids.size, dtype=bool)
        if filters.since is not None:
            keep &= self.valid_from >= filters.since.encode("ascii")
        if filters.until is not None:
            keep &= self.valid_from < filters.until.encode("ascii")
        ids, scores = self.ids[keep], scores[keep]
        order = np.lexsort((-ids, -scores))[:n]
        return [(int(ids[i]), float(scores[i])) for i in order]


_EMPTY = FactMatrix(
    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=_TS_DTYPE), np.zeros((0, 0), np.float32)
)


class FactVectorCache:
    """The live facts' vectors of the active model, and the live facts still without one
    (``_waiting``), kept while both stamps hold."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._matrix = _EMPTY
        self._waiting: list[tuple[int, str, str, str]] = []
        # Vectors made for queries of facts still waiting, by (label, dim, id, text): a store
        # the worker cannot write to (read-only) embeds them once, not at every recall.
        self._inline: dict[tuple[str, int, int, str], np.ndarray] = {}

    def matrix(
        self, conn: Tx, label: str, dim: int
    ) -> tuple[FactMatrix, list[tuple[int, str, str, str]]]:
        """``conn`` inside one read snapshot."""
        stamps = dict(
            conn.execute(
                "SELECT key, value FROM meta WHERE key IN (?, ?)",
                (FACTS_STAMP_KEY, FACT_VECTORS_STAMP_KEY),
            ).fetchall()
        )
        key = (stamps.get(FACTS_STAMP_KEY), stamps.get(FACT_VECTORS_STAMP_KEY), label, dim)
        with self._lock:
            if key == self._key:
                return self._matrix, self._waiting
        rows = conn.execute(
            "SELECT f.id, f.valid_from, v.embedding FROM facts f JOIN fact_vectors v "
            "ON v.fact_id = f.id WHERE f.invalidated_at IS NULL AND f.archived = 0 "
            "AND v.embedding_model = ? AND v.embedding_dim = ? ORDER BY f.id",
            (label, dim),
        ).fetchall()
        rows = [r for r in rows if r[2] is not None and len(r[2]) == 4 * dim]
        if rows:
            matrix = FactMatrix(
                np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                np.array([str(r[1]).encode("ascii", "replace")[:27] for r in rows], _TS_DTYPE),
                np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype="<f4").reshape(
                    len(rows), dim
                ),
            )
        else:
            matrix = _EMPTY
        waiting = _waiting(conn, label, dim)
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
            self._key, self._matrix, self._waiting = None, _EMPTY, []
            self._inline = {}


# (conn, filters) -> its finisher, started inside the ranking's read snapshot.
FactVectorLeg = Callable[[Tx, Filters], FactVectorFinish]


def leg(services: Services, text: str, profile: MemoryProfile) -> FactVectorLeg | None:
    """The facts' vector leg for one query, or None when the gate of §5.6 says no.

    Run after the chunks' vector leg (recall ranks chunks first; build_context orders its
    facts after the past moments), so the query vector is normally in the query cache by
    then; otherwise it is embedded here, bounded as the chunks' leg is.
    """
    from ..runtime.background import QUERY_EMBED_TIMEOUT_SECONDS, active_dim, vector_gate

    source = services.embedding
    # The same gate as the chunks' leg: a built-in model still loading is waited for (it
    # already was when chunks are asked for too), so recall(kinds=["fact"]) never answers
    # without meaning while the model loads.
    if vector_gate(services, profile) != "ready":
        return None
    label = source.label
    if label is None:
        return None

    def start(conn: Tx, filters: Filters) -> FactVectorFinish:
        dim = source.dims.get(label) or active_dim(services, conn, label)
        if dim is None:
            return _no_vectors
        matrix, waiting = services.fact_vectors.matrix(conn, label, dim)
        if not source.can_embed_passages():
            waiting = []

        def finish() -> list[tuple[int, float]] | None:
            if matrix.ids.size == 0 and not waiting:
                return []  # the leg ran and found nothing: no query vector needed
            vector = _query_vector(services, text, label, QUERY_EMBED_TIMEOUT_SECONDS)
            if vector is None or vector.shape[0] != dim:
                return None  # no query vector: the ranking runs without this leg
            found = matrix.search(vector, filters, FACT_CANDIDATES)
            extra = _embed_waiting(services, waiting, label, dim, QUERY_EMBED_TIMEOUT_SECONDS)
            if extra.ids.size == 0:
                return found
            found += extra.search(vector, filters, FACT_CANDIDATES)
            found.sort(key=lambda hit: (-hit[1], -hit[0]))
            return found[:FACT_CANDIDATES]

        return finish

    return start


def _no_vectors() -> list[tuple[int, float]]:
    return []


# Live facts the worker has not embedded yet (just written, imported from an older export,
# or stored before v7) are embedded for the query itself, up to this many: without them a
# fact is found only by its words until the embed job or the backfill has run.
WAITING_FACTS_LIMIT = 32


def _waiting(conn: Tx, label: str, dim: int) -> list[tuple[int, str, str, str]]:
    """``(id, key, value, valid_from)`` of live facts without a vector of ``label``/``dim``."""
    return [
        (int(r[0]), str(r[1]), str(r[2]), str(r[3]))
        for r in conn.execute(
            "SELECT f.id, f.key, f.value, f.valid_from FROM facts f WHERE f.invalidated_at "
            "IS NULL AND f.archived = 0 AND NOT EXISTS (SELECT 1 FROM fact_vectors v "
            "WHERE v.fact_id = f.id AND v.embedding_model = ? AND v.embedding_dim = ?) "
            "ORDER BY f.id DESC LIMIT ?",
            (label, dim, WAITING_FACTS_LIMIT),
        )
    ]


def _embed_waiting(
    services: Services,
    rows: list[tuple[int, str, str, str]],
    label: str,
    dim: int,
    timeout: float,
) -> FactMatrix:
    """The vectors of ``rows`` for this query (the worker stores them; until then they are
    kept in memory), or none when the embedder fails or answers in another dimension."""
    if not rows:
        return _EMPTY
    cache = services.fact_vectors
    texts = [fact_text(key, value) for _, key, value, _ in rows]
    vectors: list[Any] = [cache.inline(label, dim, r[0], t) for r, t in zip(rows, texts)]
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        watchdog = services.query_watchdog
        if watchdog.stuck:
            return _EMPTY
        try:
            made = watchdog.call(
                timeout,
                services.embedding.embed_passages,
                [texts[i] for i in missing],
                count_failure=False,
            )
        except Exception as exc:  # a CallTimeout too: the stored vectors still serve
            logger.debug("embedding facts for a query failed (%s)", type(exc).__name__)
            return _EMPTY
        if made.shape != (len(missing), dim):
            return _EMPTY
        for i, vector in zip(missing, made, strict=True):
            vectors[i] = vector
            cache.keep_inline(label, dim, rows[i][0], texts[i], vector)
    return FactMatrix(
        np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
        np.array([r[3].encode("ascii", "replace")[:27] for r in rows], _TS_DTYPE),
        np.asarray(np.stack(vectors), dtype=np.float32),
    )


def _query_vector(services: Services, text: str, label: str, timeout: float) -> Any:
    source = services.embedding
    known = source.dims.get(label)
    for dim in dict.fromkeys((known, None)):
        cached = source.query_cache.get(label, dim, text)
        if cached is not None:
            return cached
    watchdog = services.query_watchdog
    if watchdog.stuck:
        return None
    try:
        return watchdog.call(timeout, source.query_vector, text, known)
    except Exception as exc:  # a CallTimeout too: warned once, then at debug level
        source.warn_query_failure(exc)
        return None
