"""The consolidate job (§5.14): decay, merge review, graph upkeep, clusters, trims."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from .. import graph
from ..clock import now_ts, ts_minus
from ..enums import ConsolidationLevel
from ..memory import procedural, semantic
from ..prompts import build_fact_merge_prompt, clean_value
from ..runtime import queue as jobs
from ..runtime.gate import GateDeferred, GateDenied
from ..runtime.services import Services
from .embed import queue_fact_embedding

logger = logging.getLogger("elastimem")


MERGE_REVIEWS_PER_SWEEP = 5


MERGE_REPLY_LIMIT = 200


def run_consolidate(services: Services, job: jobs.Job) -> None:
    """§5.14: each step in its own guard; stats to the log and to ``meta``."""
    level = services.profile().consolidation_level
    if level == ConsolidationLevel.OFF:
        return
    config = services.config()
    with services.db.atomic() as conn:
        conn.meta.set("writes_since_consolidation", 0)
    stats: dict[str, int] = {}
    full = level == ConsolidationLevel.FULL

    def step(name: str, fn: Callable[[], dict[str, int] | None]) -> None:
        try:
            result = fn()
            if result:
                stats.update(result)
        except (jobs.JobDeferred, jobs.JobHeld):
            raise
        except GateDeferred as exc:
            # The host began generating (or the store is closing): §5.11 puts the job back
            # without counting an attempt. Skipping would lose the LLM steps for good,
            # since nothing queues another consolidation until new writes come.
            raise jobs.JobDeferred(str(exc)) from exc
        except Exception as exc:
            logger.warning("consolidation step %s failed: %s", name, exc)

    def decay() -> dict[str, int]:
        with services.db.atomic() as conn:
            return {
                "archived": semantic.apply_decay(
                    conn, config.fact_decay_half_life_days, config.fact_archive_threshold
                )
            }

    step("fact decay", decay)
    if full:
        step("fact merge review", lambda: review_fact_merges(services))
    step("graph decay", lambda: graph.consolidate_decay(services.db, config))
    step("graph dedupe", lambda: graph.consolidate_dedupe(services.db))
    if full:
        step(
            "graph merge",
            lambda: graph.consolidate_llm_merge(
                services.db, services.ask, config, stop_on=(GateDenied,)
            ),
        )
    step("clusters", lambda: graph.consolidate_clusters(services.db))
    if full:
        step(
            "cluster labels",
            lambda: graph.consolidate_labels(services.db, services.ask, stop_on=(GateDenied,)),
        )

    def trims() -> None:
        with services.db.atomic() as conn:
            procedural.apply_cap(conn, config.max_lessons)
            conn.facts.trim_quarantine(config.quarantine_cap)
            conn.meta.trim_events()

    step("trims", trims)
    with services.db.atomic() as conn:
        conn.meta.set("last_consolidation", json.dumps(stats, sort_keys=True))
        conn.meta.set("last_consolidated_at", now_ts())
    logger.info("consolidation finished: %s", stats)


def review_fact_merges(services: Services) -> dict[str, int]:
    """LLM review of recent supersessions; a merge is a new version, never an edit."""
    config = services.config()
    cutoff = ts_minus(config.fact_merge_review_window_days * 86400.0)
    with services.db.read() as conn:
        pairs = conn.facts.unreviewed_replacements(cutoff, MERGE_REVIEWS_PER_SWEEP)
    merged = kept = 0
    for old_id, new_id, key, old_value, old_at, new_value, new_at in pairs:
        prompt = build_fact_merge_prompt(key, old_value, old_at, new_value, new_at)
        try:
            reply = services.ask("fact_merge", prompt, max_tokens=48)
        except GateDenied:
            break  # inside consolidate a denied call just skips its step (a deferred one
            # puts the job back: see run_consolidate)
        value = clean_value(reply)
        with services.db.atomic() as conn:
            live = conn.facts.live_attributes(key)
            verdict, result_id = "rejected", None
            if live is not None and int(live[0]) == int(new_id):
                if value == new_value:
                    verdict = "kept"
                    kept += 1
                elif value and len(value) <= MERGE_REPLY_LIMIT:
                    result = semantic.write_fact(
                        conn,
                        key,
                        value,
                        "merge",
                        profile_keys=config.profile_keys,
                        reserved_keys=config.reserved_keys,
                        quarantine_cap=config.quarantine_cap,
                        origin_session_id=live[3],
                        importance=float(live[1]),
                        category=live[2],
                    )
                    if result.changed:
                        verdict, result_id = "merged", result.fact_id
                        merged += 1
                        queue_fact_embedding(conn, services)
            conn.facts.record_review(old_id, new_id, verdict, result_id, now_ts())
    return {"merged": merged, "kept": kept}
