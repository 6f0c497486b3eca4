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

import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import observe
from ..enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from ..governor import MemoryProfile

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

    Helper threads are kept between calls (a few, each idle at most ``IDLE_SECONDS``):
    starting a thread per call cost ~1 ms of every hybrid ``recall`` on the 2-core machine,
    handing a call to a waiting thread ~50 µs.
    """

    IDLE_SECONDS = 30.0
    MAX_IDLE = 4

    def __init__(self, what: str) -> None:
        self.what = what
        self._stuck: threading.Event | None = None
        self._guard = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Call | None]] = []
        self._closed = False

    @property
    def stuck(self) -> bool:
        return self._stuck is not None and not self._stuck.is_set()

    def call(self, timeout: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.start(timeout, fn, *args, **kwargs).wait()

    def start(self, timeout: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> _Call:
        """Hand the call to a helper thread and return at once; ``wait()`` on the result
        gives its value or raises, with ``timeout`` counted from now (so the caller can do
        other work meanwhile, as recall does while the query is embedded)."""
        if self.stuck:
            raise CallTimeout(f"{self.what} has not returned from an earlier call yet")
        call = _Call(self, fn, args, kwargs, time.monotonic() + timeout, timeout)
        with self._guard:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(inbox,), name=f"elastimem-call-{self.what}", daemon=True
            ).start()
        inbox.put(call)
        return call

    def close(self) -> None:
        """Let the idle helper threads end (a call still running ends when it returns)."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def _serve(self, inbox: queue.SimpleQueue[_Call | None]) -> None:
        while True:
            try:
                call = inbox.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._guard:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # a caller took this thread just now: its call is on the way
            if call is None:
                return
            call.run()
            with self._guard:
                keep = not self._closed and len(self._idle) < self.MAX_IDLE
                if keep:
                    self._idle.append(inbox)
            call.done.set()  # after rejoining the idle list, so the next call reuses this thread
            if not keep:
                return


class _Call:
    """One call handed to a helper thread, and its outcome."""

    __slots__ = (
        "args",
        "deadline",
        "done",
        "error",
        "fn",
        "kwargs",
        "timeout",
        "value",
        "watchdog",
    )

    def __init__(
        self,
        watchdog: Watchdog,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deadline: float,
        timeout: float,
    ) -> None:
        self.watchdog = watchdog
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.deadline, self.timeout = deadline, timeout
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def wait(self) -> Any:
        """The call's value; raises its error, or ``CallTimeout`` past the deadline (the
        watchdog then counts as stuck until the call returns)."""
        if not self.done.wait(max(0.0, self.deadline - time.monotonic())):
            self.watchdog._stuck = self.done
            raise CallTimeout(f"{self.watchdog.what} did not return within {self.timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.value

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args, **self.kwargs)
        except Exception as exc:  # handed to the waiting thread
            self.error = exc
        except BaseException as exc:
            # SystemExit or KeyboardInterrupt out of a host callable on this helper thread
            # is the callable's own doing (signals reach the main thread only). Handed on as
            # it is, it would end the thread that waits, the worker included, and every
            # background job would stall: it is a failed call like any other.
            self.error = HostCallError(
                f"{self.watchdog.what} raised {type(exc).__name__}; treated as a failed call"
            )
            self.error.__cause__ = exc


def reply_text(reply: object) -> str:
    """The text of an LLM reply. Bytes are decoded and an already parsed JSON object or
    array is written back as JSON; anything else that is not text (None, a number, another
    object) is an empty reply. ``str()`` of a number or of bytes used to be stored as a
    fact value or a session summary (found by a soak)."""
    if isinstance(reply, str):
        return reply
    if isinstance(reply, (bytes, bytearray)):
        return bytes(reply).decode("utf-8", "replace")
    if isinstance(reply, (dict, list)):
        try:
            return json.dumps(reply, ensure_ascii=False)
        except (TypeError, ValueError):
            return ""
    return ""


class HostCallError(Exception):
    """A host callable raised something that is not an ``Exception`` (see ``_Call.run``)."""


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
        """Let go of the lock taken by the matching begin; False when unbalanced."""
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
            with observe.span("llm", kind, input_chars=len(prompt)) as observation:
                reply = self.watchdog.call(
                    LLM_CALL_TIMEOUT_SECONDS,
                    llm,
                    prompt,
                    max_tokens=max_tokens,
                    temperature=temperature,
                )
                text = reply_text(reply)
                observation.set(output_chars=len(text))
        return text
