"""The query-time legs of one recall: the chunks' and the facts' vector legs, and the
graph signal (§5.6, §5.7). Each is started before the ranking's read snapshot (or inside it)
and fails soft: a leg that cannot run leaves the ranking to the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import graph
from ..governor import MemoryProfile
from ..memory import fact_vectors
from ..runtime.services import Services, active_dim, vector_gate
from ..storage.tx import Tx
from . import own_text
from .rank import FACT_CANDIDATES, FactVectorFinish, FactVectorLeg, Filters, VectorFinish

logger = logging.getLogger("elastimem")


# The query vector is computed on the host's thread inside recall/build_context: past this,
# the vector leg is skipped and the keyword legs answer (the built-in model needs ~20 ms).
QUERY_EMBED_TIMEOUT_SECONDS = 3.0


# A query embedding that took less than this last time is waited for at once, before the
# keyword legs: with the vector at hand, the exact scan runs beside them on another core
# instead (see retrieval._rank_chunks), and a quick call gains nothing from a thread of its
# own while the legs want the GIL. 10k-store hybrid recall p50 with the latency benchmark's
# ~0.2 ms embedder, A/B in one process: 4.18 ms waited for, 4.98 ms overlapped. A slow
# embedder (the built-in model, ~13 ms; a local server) still runs beside the legs.
QUERY_EMBED_OVERLAP_MIN_SECONDS = 0.002


@dataclass
class VectorLegReport:
    """What became of one query's vector leg: ``ExplainResult.vector_leg`` (values.py)."""

    state: str = "not_run"


def vector_leg(
    services: Services,
    text: str,
    profile: MemoryProfile,
    report: VectorLegReport | None = None,
) -> Any:
    """The vector leg for one query, or None when the gate of §5.6 says no.

    ``report.state`` says what became of it: the gate's reason, "failed" when the query
    vector could not be made or used, "used" once a search runs.
    """
    report = report if report is not None else VectorLegReport()
    source = services.embedding
    gate = vector_gate(services, profile)
    if gate != "ready":
        report.state = gate
        return None
    report.state = "failed"  # until a search runs
    label = source.label
    if label is None:
        return None
    watchdog = services.query_watchdog
    if watchdog.stuck:
        return None  # an earlier query embedding has not returned: keyword legs only
    pending = None
    # The dimension this instance fixed, if it embedded anything yet; otherwise the stored
    # one is read in the ranking's own snapshot (below) rather than in a read of its own.
    known_dim = source.dims.get(label)
    try:
        # A cached vector needs no call, so no helper thread either. Otherwise the query
        # is embedded on a helper thread: waited for now when it is quick, else while the
        # keyword legs run.
        query = source.query_cache.get(label, known_dim, text)
        if query is None:
            pending = watchdog.start(
                QUERY_EMBED_TIMEOUT_SECONDS, source.query_vector, text, known_dim
            )
            last = source.last_query_seconds
            if last is not None and last < QUERY_EMBED_OVERLAP_MIN_SECONDS:
                query, pending = pending.wait(), None  # quick: nothing worth overlapping
                if query is None:
                    return None
    except Exception as exc:  # a CallTimeout too: warned once, then at debug level
        source.warn_query_failure(exc)
        return None
    vectors = services.vectors
    if services.worker is not None:
        vectors.attach_worker(services.worker.submit)

    def usable(conn: Tx, vector: np.ndarray | None) -> bool:
        if vector is None:
            return False  # no query vector: the ranking runs without this leg
        dim = known_dim if known_dim is not None else active_dim(services, conn, label)
        return dim is None or vector.shape[0] == dim  # else: as if there were no leg

    def leg(conn: Tx, filters: Filters, n: int) -> VectorFinish:
        if pending is None:
            # The vector is at hand: the scan runs on the scan helpers while the keyword
            # legs run here.
            if query is None or not usable(conn, query):
                return _no_leg
            report.state = "used"
            search = vectors.start_search(conn, query, label, filters, n)
            # a small pool is re-scored on the chunks' own texts (own_text.py)
            return lambda: own_text.rescore(services, conn, label, query, search(), n)

        def finish() -> list[tuple[int, float]] | None:
            # The embedding ran beside the keyword legs; the search follows it.
            try:
                vector = pending.wait()
            except Exception as exc:
                source.warn_query_failure(exc)
                return None
            if not usable(conn, vector):
                return None
            report.state = "used"
            found = vectors.search(conn, vector, label, filters, n)
            return own_text.rescore(services, conn, label, vector, found, n)

        return finish

    return leg


def _no_leg() -> None:
    return None


def graph_signal(services: Services, text: str, conn: Tx | None = None) -> Any:
    """The query's graph signal, read through ``conn`` when given (inside the caller's read
    snapshot: one transaction fewer); a failure is logged and ranking goes on without it."""
    hops = services.profile().graph_hops
    try:
        if conn is None:
            return graph.build_signal(services.db, text, hops)
        with conn.guarded():
            return graph.build_signal(services.db, text, hops, conn=conn)
    except Exception as exc:
        logger.warning("graph expansion failed; ranking without it: %s", exc)
        return None


# -- the facts' vector leg ------------------------------------------------------------------


def fact_vector_leg(services: Services, text: str, profile: MemoryProfile) -> FactVectorLeg | None:
    """The facts' vector leg for one query, or None when the gate of §5.6 says no.

    Run after the chunks' vector leg (recall ranks chunks first; build_context orders its
    facts after the past moments), so the query vector is normally in the query cache by
    then; otherwise it is embedded here, bounded as the chunks' leg is.
    """
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
            found = matrix.search(vector, FACT_CANDIDATES, since=filters.since, until=filters.until)
            extra = _embed_waiting(services, waiting, label, dim, QUERY_EMBED_TIMEOUT_SECONDS)
            if extra.ids.size == 0:
                return found
            found += extra.search(vector, FACT_CANDIDATES, since=filters.since, until=filters.until)
            found.sort(key=lambda hit: (-hit[1], -hit[0]))
            return found[:FACT_CANDIDATES]

        return finish

    return start


def _no_vectors() -> list[tuple[int, float]]:
    return []


def _embed_waiting(
    services: Services,
    rows: list[tuple[int, str, str, str]],
    label: str,
    dim: int,
    timeout: float,
) -> fact_vectors.FactMatrix:
    """The vectors of ``rows`` for this query (the worker stores them; until then they are
    kept in memory), or none when the embedder fails or answers in another dimension."""
    if not rows:
        return fact_vectors.EMPTY_MATRIX
    cache = services.fact_vectors
    texts = [fact_vectors.fact_text(key, value) for _, key, value, _ in rows]
    vectors: list[Any] = [cache.inline(label, dim, r[0], t) for r, t in zip(rows, texts)]
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        watchdog = services.query_watchdog
        if watchdog.stuck:
            return fact_vectors.EMPTY_MATRIX
        try:
            made = watchdog.call(
                timeout,
                services.embedding.embed_passages,
                [texts[i] for i in missing],
                count_failure=False,
            )
        except Exception as exc:  # a CallTimeout too: the stored vectors still serve
            logger.debug("embedding facts for a query failed (%s)", type(exc).__name__)
            return fact_vectors.EMPTY_MATRIX
        if made.shape != (len(missing), dim):
            return fact_vectors.EMPTY_MATRIX
        for i, vector in zip(missing, made, strict=True):
            vectors[i] = vector
            cache.keep_inline(label, dim, rows[i][0], texts[i], vector)
    return fact_vectors.FactMatrix(
        np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
        fact_vectors.timestamps([r[3] for r in rows]),
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
