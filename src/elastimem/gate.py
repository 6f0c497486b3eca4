"""The LLM gate: the one function through which every library LLM call passes (SPEC §5.11).

It checks, when the call is about to run (not when its job was queued), that the instance is
not closing and has an LLM, that the current profile allows this kind of call, and that the
host is not generating (the foreground flag), unless a ``drain`` is running. The call itself
runs under ``llm_lock``, which ``foreground_begin`` also takes: a background call and the
host's own generation never overlap. A call that does not return within
``LLM_CALL_TIMEOUT_SECONDS`` is abandoned (see :class:`Watchdog`), so a hung LLM costs one job
attempt instead of the worker, and ``foreground_begin`` waits at most that long.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from .enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from .governor import MemoryProfile

LLM = Callable[..., str]

# A 2×96-token extraction takes seconds even on a slow CPU model; two minutes means it hangs.
LLM_CALL_TIMEOUT_SECONDS = 120.0


class CallTimeout(Exception):
    """A host callable did not return in time; the job counts a failed attempt."""


class Watchdog:
    """Runs one kind of host call (LLM, passage embedding, query embedding) on a helper thread
    and stops waiting after a timeout.

    Python cannot interrupt the call, so a call that times out keeps running on its daemon
    thread; until it returns, further calls of the same kind fail at once instead of piling
    more stuck threads (or overlapping calls) onto a host callable that is not answering.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._stuck: threading.Event | None = None

    @property
    def stuck(self) -> bool:
        return self._stuck is not None and not self._stuck.is_set()

    def call(self, timeout: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.stuck:
            raise CallTimeout(f"{self.what} has not returned from an earlier call yet")
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the waiting thread below
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name=f"elastimem-call-{self.what}", daemon=True).start()
        if not done.wait(timeout):
            self._stuck = done
            raise CallTimeout(f"{self.what} did not return within {timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]


class GateDeferred(Exception):
    """Not now (host generating, or closing): the job goes back to ``queued``."""


class GateDenied(Exception):
    """Not allowed by the current profile (or no LLM)."""


def kind_allowed(kind: str, profile: MemoryProfile, phase: str = "turn") -> bool:
    if kind == "extract":
        return (
            profile.llm_extraction_enabled
            and profile.extraction_cadence != Cadence.OFF
            and (profile.tier != Tier.LITE or phase == "session_end")
        )
    if kind == "rolling_summary":
        return profile.rolling_summary_mode == RollingSummaryMode.LLM
    if kind == "session_summary":
        return profile.tier >= Tier.STANDARD
    if kind in ("fact_merge", "entity_merge", "cluster_label"):
        return profile.consolidation_level == ConsolidationLevel.FULL
    return False


class LLMGate:
    def __init__(self) -> None:
        self.llm_lock = threading.RLock()
        self._flag_guard = threading.Lock()
        self._foreground_depth = 0
        self._drains = 0
        self.closing = False
        self.calls: Counter[str] = Counter()
        self.watchdog = Watchdog("the LLM")

    # -- foreground --------------------------------------------------------------------------

    @property
    def foreground_active(self) -> bool:
        return self._foreground_depth > 0

    @property
    def draining(self) -> bool:
        return self._drains > 0

    def foreground_begin(self) -> None:
        with self._flag_guard:
            self._foreground_depth += 1
        self.llm_lock.acquire()

    def foreground_end(self) -> bool:
        """Release the lock taken by the matching begin; False when unbalanced."""
        with self._flag_guard:
            if self._foreground_depth <= 0:
                return False
        try:
            self.llm_lock.release()
        except RuntimeError:
            return False  # ended on a thread that never began
        with self._flag_guard:
            self._foreground_depth -= 1
        return True

    def drain_begin(self) -> None:
        with self._flag_guard:
            self._drains += 1

    def drain_end(self) -> None:
        with self._flag_guard:
            self._drains = max(0, self._drains - 1)

    def blocks_llm_jobs(self) -> bool:
        return self.foreground_active and not self.draining

    # -- the call ----------------------------------------------------------------------------

    def call(
        self,
        kind: str,
        prompt: str,
        *,
        llm: LLM | None,
        profile: MemoryProfile,
        max_tokens: int,
        temperature: float = 0.0,
        phase: str = "turn",
    ) -> str:
        if self.closing:
            raise GateDeferred("closing")
        if llm is None:
            raise GateDenied("no llm")
        if not kind_allowed(kind, profile, phase):
            raise GateDenied(f"{kind} not allowed at {profile.tier.name}")
        if self.blocks_llm_jobs():
            raise GateDeferred("foreground")
        with self.llm_lock:
            # The host may have begun generating while we waited for the lock.
            if self.blocks_llm_jobs():
                raise GateDeferred("foreground")
            if self.closing:
                raise GateDeferred("closing")
            self.calls[kind] += 1
            reply = self.watchdog.call(
                LLM_CALL_TIMEOUT_SECONDS,
                llm,
                prompt,
                max_tokens=max_tokens,
                temperature=temperature,
            )
        return reply if isinstance(reply, str) else ("" if reply is None else str(reply))
