"""Warm-up and priming: the embedder, the vector index and the keyword postings loaded
before the first query needs them, and the keyword index a query uses.
"""

from __future__ import annotations

import logging

from ..enums import Tier
from ..governor import MemoryProfile
from ..index.keyword import KeywordIndexes
from ..runtime.services import Services, active_dim
from ..runtime.worker import Worker

logger = logging.getLogger("elastimem")


def warm_up(services: Services, worker: Worker, profile: MemoryProfile, timeout: float) -> bool:
    keywords = keyword_index(services, profile)
    if keywords is not None and services.db.fts_enabled:
        request_prime(services, keywords, worker)
    ready = _warm_up_embedder(services, worker, profile, timeout)
    if ready and profile.vector_recall_enabled:
        _prime_vectors(services, worker)
    return ready


def _prime_keywords(services: Services, index: KeywordIndexes) -> None:
    """Read the chunk lengths now rather than in the first recall (a second at 1M chunks),
    and the postings of a small enough store (keyword_index.PRELOAD_MAX_POSTINGS)."""
    try:
        with services.db.read() as conn:
            index.prime(conn)
    except Exception as exc:  # only a head start: the first query loads them anyway
        logger.debug("priming the keyword index failed: %s", type(exc).__name__)
    finally:
        index.prime_requested = False


def _warm_up_embedder(
    services: Services, worker: Worker, profile: MemoryProfile, timeout: float
) -> bool:
    source = services.embedding
    if source.host_embed is not None:
        return not source.failed
    # No host embedder: passages are the built-in model's even with a host query_embedder.
    builtin = source.builtin
    if builtin is None:
        return False
    if builtin.state in ("ready", "failed") or not profile.embedder_load_allowed:
        return builtin.state == "ready"
    worker.submit(builtin.load)
    worker.wait_for(lambda: builtin.state in ("ready", "failed"), timeout)
    return builtin.state == "ready"


def _prime_vectors(services: Services, worker: Worker) -> None:
    """Have the worker load the vector index now, not inside the host's first recall
    (a million 384-dim vectors take seconds to read)."""
    label = services.embedding.label
    if label is None:
        return
    with services.db.read() as conn:
        dim = active_dim(services, conn, label)
    if dim is not None:
        services.vectors.attach_worker(worker.submit)
        worker.submit(lambda: services.vectors.prime(label, dim))


def keyword_index(services: Services, profile: MemoryProfile) -> KeywordIndexes | None:
    """The cached-postings BM25 of keyword_index, except at LITE, where its memory (a few
    bytes per chunk, twelve per cached posting) goes unspent and FTS5 ranks by itself.

    When the index would preload its postings (first use, or after a change it could
    not follow), the worker is asked to, once: this query reads its terms meanwhile."""
    if profile.tier is Tier.LITE:
        return None
    index = services.keyword
    worker = services.worker
    if worker is not None and index.wants_preload and services.db.fts_enabled:
        request_prime(services, index, worker)
    return index


def request_prime(services: Services, index: KeywordIndexes, worker: Worker) -> None:
    """Have the worker prime the index, unless a prime is already waiting or running."""
    if not index.prime_requested:
        index.prime_requested = True
        worker.submit(lambda: _prime_keywords(services, index))
