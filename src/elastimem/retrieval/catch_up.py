"""Read your writes by meaning: embed what is still waiting for its vector before a query.

A turn or fact is searchable by keyword once its write returns, but by meaning only after
the worker's embed job has stored its vector, a moment later. A recall made at once ("I
moved to Lisbon", then "where do I live?": no word shared) would miss it. So before a
query's read snapshot opens, :func:`embed_waiting` embeds the newest chunks and live facts
that have no vector yet (at most ``CATCH_UP_CHUNKS`` and ``CATCH_UP_FACTS``: a backlog of
thousands stays the worker's, the query pays for the last few writes only) and stores them,
as the embed job would, so the worker finds them done and the query's vector legs see them.

Bounded in time (``CATCH_UP_TIMEOUT_SECONDS``; a host embedder like a query vector) and never
raising: a failure leaves the items to the worker and the query to what is stored. Called by the one
query path (``query.rank_query``) and by ``build_context`` before they start their legs.
"""

from __future__ import annotations

import logging

from ..governor import MemoryProfile
from ..index.vectors import passage_texts, write_vectors
from ..memory import fact_vectors
from ..runtime.services import Services, active_dim, vector_gate
from . import legs

logger = logging.getLogger("elastimem")

# How many of the newest waiting chunks / facts a query embeds itself. A host records one
# turn (one or two chunks) between recalls; 32 covers a burst of turns or a small import
# and costs ~0.3 s with the built-in model on one core here (32 short chunks), once: the
# next query finds them stored.
CATCH_UP_CHUNKS = 32
CATCH_UP_FACTS = fact_vectors.WAITING_FACTS_LIMIT
# For the built-in model, longer than a query vector's 3 s: up to 64 passages, and the
# model's first call in a process allocates its buffers (over 3 s on a machine whose two
# cores ran 12 jobs, which left the turn to the worker and the answer without it). A host
# embedder may hang (tests/reliability/test_faults.py): it gets the query vector's bound.
CATCH_UP_TIMEOUT_SECONDS = 10.0


def embed_waiting(
    services: Services, profile: MemoryProfile, *, chunks: bool = True, facts: bool = True
) -> int:
    """Embed and store the newest chunks/facts still without a vector; the number stored.

    Only when the vector leg would run (its gate, which waits for a loading built-in
    model) and the embedder makes passage vectors. Never raises.
    """
    try:
        source = services.embedding
        if not profile.embeddings_enabled or not source.can_embed_passages():
            return 0
        if vector_gate(services, profile) != "ready" or services.query_watchdog.stuck:
            return 0
        label = source.label
        if label is None:
            return 0
        with services.db.read() as conn:
            dim = active_dim(services, conn, label)
            chunk_rows = (
                conn.transcript.chunks_without_vector(CATCH_UP_CHUNKS, newest=True)
                if chunks
                else []
            )
            chunk_texts = passage_texts(conn, chunk_rows)
            fact_rows = fact_vectors.pending(conn, label, dim, CATCH_UP_FACTS) if facts else []
        texts = chunk_texts + [fact_vectors.fact_text(k, v) for _, k, v in fact_rows]
        if not texts:
            return 0
        timeout = (
            CATCH_UP_TIMEOUT_SECONDS
            if source.host_embed is None
            else legs.QUERY_EMBED_TIMEOUT_SECONDS
        )
        matrix = services.query_watchdog.call(
            timeout, source.embed_passages, texts, count_failure=False
        )
        if matrix.shape[0] != len(texts) or (dim is not None and matrix.shape[1] != dim):
            return 0
        split = len(chunk_rows)
        written = 0
        with services.db.atomic() as conn:
            if chunk_rows:
                # Only those still without a vector: the worker may have stored some meanwhile,
                # and replacing a vector would make every index reload (vectors.gen).
                needing = conn.transcript.chunks_needing_vector(
                    [r[0] for r in chunk_rows], label, dim
                )
                still = {r[0] for r in needing}
                keep = [i for i, r in enumerate(chunk_rows) if r[0] in still]
                if keep:
                    written += write_vectors(
                        conn,
                        [chunk_rows[i][0] for i in keep],
                        matrix[keep],
                        label,
                        [chunk_rows[i][1] for i in keep],
                    )
            if fact_rows:
                written += fact_vectors.write(conn, fact_rows, matrix[split:], label)
        source.record_dim(label, int(matrix.shape[1]))
        return written
    except Exception as exc:  # a CallTimeout, a closed or read-only store: the worker's turn
        logger.debug("embedding waiting items for a query failed (%s: %s)", type(exc).__name__, exc)
        return 0
