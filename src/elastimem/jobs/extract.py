"""The extract job: facts and graph items read out of turns by the LLM (§5.12)."""

from __future__ import annotations

import logging

from .. import graph
from ..extraction import Turn, build_extract_prompt, pack_turns, parse_extraction
from ..memory import episodic, semantic
from ..runtime import queue as jobs
from ..runtime.gate import GateDeferred, GateDenied
from ..runtime.services import Services
from ..storage.tx import Tx
from .embed import queue_fact_embedding
from .outcome import gate_outcome

logger = logging.getLogger("elastimem")


EXTRACT_CHUNK_IMPORTANCE = 0.8


def run_extract(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    wanted = [t for t in job.payload.get("turns", []) if isinstance(t, int)]
    if session_id is None or not wanted:
        return
    turns = _load_turns(services, session_id, wanted)
    if not turns:
        return  # erased meanwhile
    config = services.config()
    max_tokens = 2 * config.worker_max_tokens
    groups = pack_turns(turns, config.min_query_words)
    for done, group in enumerate(groups):
        try:
            reply = services.ask(
                "extract", build_extract_prompt(group), max_tokens=max_tokens, phase=job.phase
            )
        except (GateDeferred, GateDenied) as exc:
            if done:
                # The job comes back later: with only the turns still to read, or the
                # groups already extracted would be sent to the LLM again.
                left = [t.turn for g in groups[done:] for t in g]
                with services.db.atomic() as conn:
                    jobs.set_payload(conn, job.id, {**job.payload, "turns": left})
            gate_outcome(services, "extract", exc)
            return
        with services.db.atomic() as conn:
            store_extraction(services, session_id, group, reply)
            # In the same transaction: a retry after a later group fails (or a crash)
            # must not send the groups already stored to the LLM and store them again.
            left = [t.turn for g in groups[done + 1 :] for t in g]
            if left:
                jobs.set_payload(conn, job.id, {**job.payload, "turns": left})


def _load_turns(services: Services, session_id: int, wanted: list[int]) -> list[Turn]:
    with services.db.read() as conn:
        rows = conn.transcript.turn_messages(session_id, wanted)
    by_turn: dict[int, dict[str, str]] = {}
    for turn, role, content, created_at in rows:
        entry = by_turn.setdefault(int(turn), {"user": "", "assistant": "", "at": created_at})
        if role in ("user", "assistant"):
            entry[role] = content
    return [
        Turn(user=e["user"], assistant=e["assistant"], turn=t, at=e["at"])
        for t, e in sorted(by_turn.items())
    ]


def store_extraction(services: Services, session_id: int, group: list[Turn], reply: str) -> None:
    """Store facts (as ``auto``) and graph items of one extraction reply (§5.12)."""
    extraction = parse_extraction(reply)
    if extraction.is_empty:
        return
    config = services.config()
    at = group[-1].at or None
    turn_numbers = [t.turn for t in group]
    with services.db.atomic() as conn:
        if not episodic.exists(conn, session_id):
            return  # erased while the LLM read it: nothing of it may come back (§5.16)
        touched = False
        for key, value, reason in extraction.rejected:
            semantic.quarantine(conn, key, value, reason, "auto", config.quarantine_cap)
        for key, value in extraction.facts:
            result = semantic.write_fact(
                conn,
                key,
                value,
                "auto",
                profile_keys=config.profile_keys,
                reserved_keys=config.reserved_keys,
                quarantine_cap=config.quarantine_cap,
                at=at,
                origin_session_id=session_id,
            )
            touched = touched or result.changed or result.reason == "already stored"
        chunk_rows = _turn_chunks(conn, session_id, turn_numbers)
        if touched:
            episodic.raise_chunk_importance(
                conn, [r[0] for r in chunk_rows], EXTRACT_CHUNK_IMPORTANCE
            )
            queue_fact_embedding(conn, services)
        if extraction.entities or extraction.relationships:
            try:
                with services.db.atomic():  # a savepoint: graph errors never cost the facts
                    graph.store_extraction(
                        conn,
                        extraction.entities,
                        extraction.relationships,
                        chunk_rows,
                        source_text=" ".join(f"{t.user} {t.assistant}" for t in group),
                        node_cap=config.graph_node_cap,
                        edge_cap=config.graph_edge_cap,
                        fts_enabled=services.db.fts_enabled,
                    )
            except Exception as exc:
                logger.warning("storing extracted graph items failed: %s", exc)
        conn.meta.bump("writes_since_consolidation")


def _turn_chunks(conn: Tx, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
    return conn.transcript.turn_chunks(session_id, turns)
