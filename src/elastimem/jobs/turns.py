"""Queueing at each turn and the idle sweep (§5.10 step 3, §5.11)."""

from __future__ import annotations

from .. import graph
from ..config import ElastimemConfig
from ..enums import Cadence, ConsolidationLevel
from ..governor import MemoryProfile
from ..memory import episodic, fact_vectors
from ..runtime import queue as jobs
from ..runtime.services import Services, active_dim
from ..storage.tx import Tx


def queue_turn_jobs(
    conn: Tx,
    services: Services,
    record: episodic.TurnRecord,
    user: str,
    profile: MemoryProfile,
    config: ElastimemConfig,
) -> None:
    """§5.10 step 3: link, embed and extract jobs for a freshly stored turn."""
    if not record.chunk_ids:
        return
    owner = services.owner
    chunk_payload = {"chunk_ids": list(record.chunk_ids)}
    if graph.has_nodes(conn):
        jobs.enqueue(conn, "link", owner, session_id=record.session_id, payload=chunk_payload)
    if profile.embeddings_enabled and services.embedding.can_embed_passages():
        jobs.enqueue(conn, "embed", owner, session_id=record.session_id, payload=chunk_payload)
    cadence = profile.extraction_cadence
    if (
        services.llm() is not None
        and profile.llm_extraction_enabled
        and cadence != Cadence.OFF
        and len(user.split()) >= config.min_query_words
    ):
        state = "queued" if cadence == Cadence.PER_TURN else "held"
        jobs.enqueue(
            conn,
            "extract",
            owner,
            state=state,
            session_id=record.session_id,
            payload={"turns": [record.turn]},
        )
        if (
            cadence == Cadence.BATCHED
            and jobs.count_held_extracts(conn, record.session_id) >= config.batched_every_n_turns
        ):
            jobs.release_held_extracts(conn, record.session_id, owner, "turn")


def on_idle(services: Services, idle_for: float) -> None:
    """Idle sweep and embedding backfill (§5.11)."""
    if services.db.read_only:
        return
    profile = services.profile()
    config = services.config()
    with services.db.atomic() as conn:
        if (
            idle_for >= config.idle_consolidate_seconds
            and profile.consolidation_level == ConsolidationLevel.FULL
            and not services.gate.foreground_active
            and conn.meta.get_int("writes_since_consolidation") > 0
            and not jobs.has_pending(conn, "consolidate", services.owner)
        ):
            jobs.enqueue(conn, "consolidate", services.owner)
        if (
            profile.embeddings_enabled
            and services.embedding.can_embed_passages()
            and not jobs.has_pending(conn, "embed", services.owner)
            and (conn.transcript.any_chunk_without_vector() or _facts_pending(services, conn))
        ):
            jobs.enqueue(conn, "embed", services.owner, payload={"backfill": True})
            if services.worker is not None:
                services.worker.signal()  # run it now, not after the next idle wait


def _facts_pending(services: Services, conn: Tx) -> bool:
    """Live facts without a vector of the active model (known once it has loaded)."""
    label = services.embedding.label
    if label is None:
        return False
    return bool(fact_vectors.pending(conn, label, active_dim(services, conn, label), 1))
