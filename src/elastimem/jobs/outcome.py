"""What a job handler does when the LLM gate refuses its call (§5.11)."""

from __future__ import annotations

from ..enums import Tier
from ..runtime import queue as jobs
from ..runtime.gate import GateDeferred
from ..runtime.services import Services


def gate_outcome(services: Services, kind: str, exc: Exception) -> None:
    """Translate a gate refusal into the job outcome of §5.11."""
    if isinstance(exc, GateDeferred):
        raise jobs.JobDeferred(str(exc)) from exc
    config = services.config()
    if kind == "extract" and services.profile().tier == Tier.LITE and config.lite_llm_extraction:
        raise jobs.JobHeld(str(exc)) from exc
