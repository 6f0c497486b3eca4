"""Embedding: the embed job (chunks, then the facts without a vector) and ``reindex``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import EmbedderError
from ..index.vectors import EmbeddingSource, passage_texts, write_vectors
from ..memory import fact_vectors
from ..runtime import queue as jobs
from ..runtime.gate import CallTimeout
from ..runtime.services import Services, active_dim, ensure_embedder_loaded
from ..runtime.worker import Worker
from ..storage.tx import Tx

BACKFILL_BATCH = 256


EMBED_BATCH = 64


WARM_UP_FOR_REINDEX_SECONDS = 300.0


# Embedding 64 chunks takes well under a minute on any CPU; two minutes means it hangs.
EMBED_CALL_TIMEOUT_SECONDS = 120.0


def run_embed(services: Services, job: jobs.Job) -> None:
    if not services.profile().embeddings_enabled or not ensure_embedder_loaded(services):
        return  # backfilled later, when the tier allows it
    label = services.embedding.label
    if label is None:
        return
    with services.db.read() as conn:
        dim = active_dim(services, conn, label)
        if job.payload.get("backfill"):
            rows = conn.transcript.chunks_without_vector(BACKFILL_BATCH)
        else:
            ids = [int(i) for i in job.payload.get("chunk_ids", []) if isinstance(i, int)]
            rows = conn.transcript.chunks_needing_vector(ids, label, dim)
            rows += _waiting_chunks(conn, {r[0] for r in rows}, EMBED_BATCH - len(rows))
        texts = passage_texts(conn, rows)
    for start in range(0, len(rows), EMBED_BATCH):
        batch = rows[start : start + EMBED_BATCH]
        matrix = _embed_in_job(services, texts[start : start + EMBED_BATCH])
        with services.db.atomic() as conn:
            batch_ids, own = [int(r[0]) for r in batch], [str(r[1]) for r in batch]
            write_vectors(conn, batch_ids, matrix, label, own)
        services.embedding.record_dim(label, int(matrix.shape[1]))
    _embed_facts(services, label)


def _embed_in_job(services: Services, texts: list[str]) -> Any:
    """The embed job's call of the embedder (bounded by the watchdog)."""
    try:
        return services.passage_watchdog.call(
            EMBED_CALL_TIMEOUT_SECONDS, services.embedding.embed_passages, texts
        )
    except CallTimeout:
        raise
    except Exception as exc:
        if services.embedding.host_embed is not None:
            # EmbeddingSource counts the host embedder's failures and warns once when
            # it gives up; a warning per job attempt would repeat it.
            raise jobs.ReportedFailure(type(exc).__name__) from exc
        raise


def _embed_facts(services: Services, label: str) -> None:
    """Every embed job also embeds the live facts that have no vector of the model
    (fact_vectors.py): whatever wrote them, the next embed job after the write finds them."""
    while True:
        with services.db.read() as conn:
            rows = fact_vectors.pending(conn, label, active_dim(services, conn, label), EMBED_BATCH)
        if not rows:
            return
        texts = [fact_vectors.fact_text(key, value) for _, key, value in rows]
        matrix = _embed_in_job(services, texts)
        with services.db.atomic() as conn:
            written = fact_vectors.write(conn, rows, matrix, label)
        services.embedding.record_dim(label, int(matrix.shape[1]))
        if written < len(rows) or len(rows) < EMBED_BATCH:
            return  # the rest were erased or replaced meanwhile: their successors wait


def queue_fact_embedding(conn: Tx, services: Services) -> None:
    """After a fact write, in its transaction: have the worker embed the new facts.

    Asks for an embed job unless one is already queued (every embed job embeds the pending
    facts) or none could run."""
    profile = services.profile()
    if not profile.embeddings_enabled or not services.embedding.can_embed_passages():
        return
    if not conn.jobs.has_queued("embed", services.owner):
        jobs.enqueue(conn, "embed", services.owner, payload={"facts": True})


def _waiting_chunks(conn: Tx, have: set[int], room: int) -> list[tuple[int, str]]:
    """Other chunks still without a vector, to fill the job's batch.

    A host recording turns faster than the model embeds them queues one job per turn;
    topping each batch up to ``EMBED_BATCH`` lets the model work on full batches (several
    times its single-text throughput), and the later jobs find their chunks done.
    """
    if room <= 0:
        return []
    rows = conn.transcript.chunks_without_vector(room + len(have))
    return [r for r in rows if r[0] not in have][:room]


def reindex(
    services: Services,
    worker: Worker,
    progress: Callable[[int, int], None] | None,
    *,
    force: bool,
) -> int:
    """Re-embed chunks without a current vector (or all with ``force``), on this thread."""
    source = services.embedding
    if source.builtin is not None and not source.resident() and source.host_embed is None:
        if source.builtin.state == "not_loaded":
            worker.submit(source.builtin.load)
        worker.wait_for(
            lambda: source.builtin is None or source.builtin.state in ("ready", "failed"),
            WARM_UP_FOR_REINDEX_SECONDS,
        )
    label = source.label
    if label is None or not source.resident() or not source.can_embed_passages():
        services.warn_once("reindex", "reindex found no usable embedder; nothing was re-embedded")
        return 0
    dim = source.dims.get(label)
    if dim is None:
        # No successful call yet in this instance: the dimension in meta may be an older
        # model's (a host that swapped models keeps the label "host"), so ask the model.
        dim = int(_embed_or_raise(source, ["dimension probe"]).shape[1])
        source.record_dim(label, dim)
    with services.db.read() as conn:
        if force:
            ids = conn.transcript.all_chunk_ids()
        else:
            ids = conn.transcript.chunk_ids_needing_vector(label, dim)
    total = len(ids)
    done = written = 0
    for start in range(0, total, EMBED_BATCH):
        part = ids[start : start + EMBED_BATCH]
        with services.db.read() as conn:
            rows = conn.transcript.chunk_texts(part)
            texts = passage_texts(conn, rows)
        if rows:
            matrix = _embed_or_raise(source, texts)
            with services.db.atomic() as conn:
                batch_ids, own = [int(r[0]) for r in rows], [str(r[1]) for r in rows]
                written += write_vectors(conn, batch_ids, matrix, label, own)
            source.record_dim(label, int(matrix.shape[1]))
        done += len(part)
        if progress is not None:
            progress(done, total)
    facts = _reindex_facts(services, label, dim, force=force)
    with services.db.atomic() as conn:
        conn.meta.bump("vectors.gen")
        conn.meta.log_event("reindex", chunks=written, facts=facts, label=label)
    # Cached query vectors may be the old model's (a host that swapped its model keeps the
    # label "host" and the dimension): they would score against the new vectors.
    source.query_cache.clear()
    return written


def _reindex_facts(services: Services, label: str, dim: int, *, force: bool) -> int:
    """Re-embed the live facts without a vector of the active model (all with ``force``),
    after the chunks; returns the number written."""
    with services.db.read() as conn:
        if force:
            rows = fact_vectors.all_live(conn)
        else:
            rows = fact_vectors.pending(conn, label, dim, 1 << 62)
    written = 0
    for start in range(0, len(rows), EMBED_BATCH):
        part = rows[start : start + EMBED_BATCH]
        matrix = _embed_or_raise(
            services.embedding, [fact_vectors.fact_text(key, value) for _, key, value in part]
        )
        with services.db.atomic() as conn:
            written += fact_vectors.write(conn, part, matrix, label)
    return written


def _embed_or_raise(source: EmbeddingSource, texts: list[str]) -> Any:
    try:
        return source.embed_passages(texts, count_failure=False)
    except Exception as exc:
        raise EmbedderError(
            f"the embedder failed during reindex ({exc}); fix the embedder and run reindex "
            "again, batches already written are kept"
        ) from exc
