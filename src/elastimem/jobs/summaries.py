"""Digests and summaries: the rolling digest of evicted turns (§5.9) and session summaries."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..enums import RollingSummaryMode, Tier
from ..guards import is_instruction_like
from ..prompts import (
    build_condense_prompt,
    build_session_summary_prompt,
    clean_llm_text,
    split_sentences,
)
from ..runtime import queue as jobs
from ..runtime.gate import GateDeferred, GateDenied
from ..runtime.services import Services
from ..storage.tx import Tx
from ..text import collapse_whitespace, sanitize
from .outcome import gate_outcome

SUMMARY_TURNS = 12


SUMMARY_TURN_CHARS = 160


EVICTED_SIDE_CHARS = 200


# At most this many evicted turns in one condense job (see _queue_condense).
CONDENSE_MAX_TURNS = 12


DIGEST_CLAUSE_CHARS = 120


def persist_digest(conn: Tx, session_id: int, items: list[str]) -> None:
    conn.transcript.set_rolling_summary(session_id, "\n".join(items) if items else None)


def leading_clause(text: str) -> str:
    """The first clause of a message: cut after the earliest '. ', '? ' or '! ' in 120 chars."""
    flat = collapse_whitespace(text)
    window = flat[: DIGEST_CLAUSE_CHARS + 1]
    cuts = [window.find(mark) for mark in (". ", "? ", "! ")]
    cuts = [c for c in cuts if 0 <= c < DIGEST_CLAUSE_CHARS]
    if cuts:
        return flat[: min(cuts) + 1]
    return flat[:DIGEST_CLAUSE_CHARS]


def fit_digest(items: list[str], budget: int, est: Callable[[str], int]) -> list[str]:
    """The newest items whose joined digest fits ``budget`` tokens (the oldest go first)."""
    kept = list(items)
    while kept and est("\n".join(kept)) > budget:
        kept.pop(0)
    return kept


def _evicted_pairs(turns: Iterable[Any]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for turn in turns if turns is not None else []:
        if isinstance(turn, dict):
            user, assistant = turn.get("user", ""), turn.get("assistant", "")
        elif isinstance(turn, (list, tuple)) and len(turn) == 2:
            user, assistant = turn
        else:
            continue
        pairs.append((sanitize(user), sanitize(assistant)))
    return pairs


def report_evictions(services: Services, turns: Iterable[Any]) -> None:
    """§5.9 rolling digest: extractive inline, then an LLM condense job when allowed."""
    pairs = _evicted_pairs(turns)
    if not pairs:
        return
    session_id = services.ensure_session()
    _, digest = services.current_digest()
    budget = services.profile().budgets.sessions
    items = list(digest)
    lowered = {i.casefold() for i in items}
    for user, _assistant in pairs:
        if not user.strip():
            continue
        item = "- " + leading_clause(user)
        if item.casefold() not in lowered:
            items.append(item)
            lowered.add(item.casefold())
    if not items and not digest and not any(u.strip() or a.strip() for u, a in pairs):
        # §5.9: only when every evicted turn was blank (an answer is no blank turn).
        items = [f"[{len(pairs)} earlier turns omitted; search memory for details]"]
    services.apply_digest(session_id, fit_digest(items, budget, services.est))
    profile = services.profile()
    said = any(u.strip() or a.strip() for u, a in pairs)  # blank turns: nothing to condense
    llm_mode = profile.rolling_summary_mode == RollingSummaryMode.LLM
    if said and llm_mode and services.llm() is not None:
        evicted = [[u[:EVICTED_SIDE_CHARS], a[:EVICTED_SIDE_CHARS]] for u, a in pairs]
        _queue_condense(services, session_id, evicted)
        if services.worker is not None:
            services.worker.signal()


def _queue_condense(services: Services, session_id: int, evicted: list[list[str]]) -> None:
    """Add the turns to the session's condense job still waiting in the queue, if any.

    While the host generates (``foreground``) or a slow local model works, evictions pile
    up; one condense call over all of them replaces the digest as well as one per eviction
    would (each reply covers the whole digest), at a fraction of the LLM time. The job
    keeps the latest ``CONDENSE_MAX_TURNS``; older turns are in the extractive digest the
    prompt carries anyway.
    """
    with services.db.atomic() as conn:
        row = conn.jobs.latest_queued("rolling_summary", session_id)
        waiting = _payload_turns(row[1]) if row is not None else None
        if row is None or waiting is None:
            payload = {"evicted": evicted[-CONDENSE_MAX_TURNS:]}
            jobs.enqueue(
                conn, "rolling_summary", services.owner, session_id=session_id, payload=payload
            )
            return
        merged = (waiting + evicted)[-CONDENSE_MAX_TURNS:]
        jobs.set_payload(conn, row[0], {"evicted": merged})


def _payload_turns(payload: dict[str, Any]) -> list[list[str]] | None:
    """The evicted turns of a queued condense job; None if its payload is not readable."""
    turns = payload.get("evicted")
    return turns if isinstance(turns, list) else None


def run_rolling_summary(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    if session_id is None:
        return
    current_id, digest = services.current_digest()
    if current_id != session_id:
        with services.db.read() as conn:
            if not conn.transcript.session_exists(session_id):
                return
            stored = conn.transcript.rolling_summary(session_id) or ""
        digest = [line for line in stored.split("\n") if line.strip()]
    evicted = [tuple(t) for t in job.payload.get("evicted", []) if isinstance(t, list)]
    prompt = build_condense_prompt(digest, evicted)
    try:
        reply = services.ask(
            "rolling_summary", prompt, max_tokens=services.config().worker_max_tokens
        )
    except (GateDeferred, GateDenied) as exc:
        gate_outcome(services, "rolling_summary", exc)
        return
    # The digest goes into the host's prompt verbatim: an instruction the LLM echoed (or
    # was talked into) is left out, as the fact guards leave it out of facts.
    sentences = [s for s in split_sentences(clean_llm_text(reply)) if not is_instruction_like(s)]
    if not sentences:
        return  # the extractive digest stays
    items = fit_digest(
        ["- " + s for s in sentences], services.profile().budgets.sessions, services.est
    )
    services.apply_digest(session_id, items)


def run_session_summary(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    if session_id is None or services.llm() is None:
        return
    if services.profile().tier < Tier.STANDARD:
        return
    with services.db.read() as conn:
        recent = conn.transcript.recent_user_messages(session_id, SUMMARY_TURNS)
    if len(recent) < 2:
        return
    user_turns = [content[:SUMMARY_TURN_CHARS] for content in reversed(recent)]
    try:
        reply = services.ask(
            "session_summary",
            build_session_summary_prompt(user_turns),
            max_tokens=services.config().worker_max_tokens,
        )
    except (GateDeferred, GateDenied) as exc:
        gate_outcome(services, "session_summary", exc)
        return
    summary = clean_llm_text(reply)
    if summary and not is_instruction_like(summary):  # it goes into prompts verbatim
        with services.db.atomic() as conn:
            conn.transcript.set_session_summary(session_id, summary)
