"""The worker of one store, with a handler for each job kind."""

from __future__ import annotations

from collections.abc import Callable

from ..runtime import queue as jobs
from ..runtime.services import Services
from ..runtime.worker import Worker
from .consolidate import run_consolidate
from .embed import run_embed
from .extract import run_extract
from .link import run_link
from .summaries import run_rolling_summary, run_session_summary
from .turns import on_idle


def make_worker(services: Services, on_wake: Callable[[], None]) -> Worker:
    handlers = {
        "embed": lambda job: run_embed(services, job),
        "link": lambda job: run_link(services, job),
        "extract": lambda job: run_extract(services, job),
        "rolling_summary": lambda job: run_rolling_summary(services, job),
        "session_summary": lambda job: run_session_summary(services, job),
        "consolidate": lambda job: run_consolidate(services, job),
    }
    worker = Worker(
        services.db,
        services.owner,
        handlers,
        skip_kinds=lambda: jobs.LLM_KINDS if services.gate.blocks_llm_jobs() else frozenset(),
        on_wake=on_wake,
        on_idle=lambda idle_for: on_idle(services, idle_for),
        idle_seconds=lambda: services.config().idle_consolidate_seconds,
    )
    services.worker = worker
    return worker
