"""A small pool's vector leg re-scored by each chunk's own text (issue 26).

The stored vectors embed each chunk with the turn before it (``vector_writes
.passage_texts``), which LoCoMo's stores of ~300 exchanges need. On a person's first small
store the same context lets an exchange ride on the turn before it ("Do I own any
animals?" -> the ramen exchange, embedded with the collie one), and the bare model (the
cosine of each exchange's own text) ranks better. So when the vector leg's pool is not
full (fewer than ``n`` candidates: the store, or what the filters leave of it, is small:
the same gate as ``scale.pool_share``), its cosines are replaced by the cosines of the
candidates' own texts, embedded once per text and kept in ``Services.own_text``. A full
pool (every large store) is returned untouched, at no cost.

Any failure (the embedder stuck, slow, in another dimension) keeps the passage cosines:
the ranking is then what it was without this step.
"""

from __future__ import annotations

import logging

import numpy as np

from ..index import vector_writes
from ..index.own_text import OwnTextHits
from ..index.vector_hits import VectorHits
from ..runtime.services import Services
from ..storage.tx import Tx

logger = logging.getLogger("elastimem")

# The first query of a small store embeds its chunks' own texts (at most n - 1 short texts,
# ~0.2 s with the built-in model): past this, that query keeps the passage cosines.
OWN_TEXT_TIMEOUT_SECONDS = 3.0


def rescore(
    services: Services,
    conn: Tx,
    label: str,
    query: np.ndarray | None,
    found: list[tuple[int, float]] | None,
    n: int,
) -> list[tuple[int, float]] | None:
    """``found`` (the vector leg's ``(chunk_id, cosine)`` rows) with each cosine taken on
    the chunk's own text when fewer than ``n`` were found; else ``found`` as it is."""
    if query is None or not found or len(found) >= n:
        return found
    dim = int(query.shape[0])
    rows = conn.transcript.chunk_texts([cid for cid, _ in found])
    # A chunk embedded without context (the first of its session, small talk) already has
    # its own text's vector stored: its cosine stands, and nothing is embedded again.
    passages = vector_writes.passage_texts(conn, rows)
    need = {
        cid: text for (cid, text), passage in zip(rows, passages, strict=True) if passage != text
    }
    vectors = _own_vectors(services, label, dim, list(need.values()))
    if vectors is None:
        return found
    own = {cid: vectors[text] for cid, text in need.items()}
    alone = np.fromiter((cid for cid, _ in rows if cid not in need), dtype=np.int64)
    if alone.size and isinstance(found, VectorHits):
        held, matrix = found.vectors_of(alone)  # for the feedback term
        own.update((cid, matrix[i]) for i, cid in enumerate(alone.tolist()) if held[i])
    out = [
        (cid, float(np.dot(own[cid], query)) if cid in need else cosine) for cid, cosine in found
    ]
    out.sort(key=lambda row: (-row[1], -row[0]))
    return OwnTextHits(out, own, dim, found)


def _own_vectors(
    services: Services, label: str, dim: int, texts: list[str]
) -> dict[str, np.ndarray] | None:
    """The own-text vector of each of ``texts``: cached ones, the rest embedded in one call;
    None when they cannot be had now."""
    cache = services.own_text
    out: dict[str, np.ndarray] = {}
    missing: list[str] = []
    for text in dict.fromkeys(texts):
        vector = cache.get(label, dim, text)
        if vector is None:
            missing.append(text)
        else:
            out[text] = vector
    if not missing:
        return out
    watchdog = services.query_watchdog
    if watchdog.stuck or not services.embedding.can_embed_passages():
        return None
    try:
        made = watchdog.call(
            OWN_TEXT_TIMEOUT_SECONDS,
            services.embedding.embed_passages,
            missing,
            count_failure=False,
        )
    except Exception as exc:  # a CallTimeout too: the passage cosines still serve
        logger.debug("embedding own texts for a query failed (%s)", type(exc).__name__)
        return None
    if made.shape != (len(missing), dim):
        return None
    for text, vector in zip(missing, made, strict=True):
        vector = np.asarray(vector, dtype=np.float32)
        cache.keep(label, dim, text, vector)
        out[text] = vector
    return out
