"""The observation seam: timed pieces of work the library announces, for whoever listens.

The library names what it does (a memory operation, a recall leg, an LLM call, an embedder
call, a failed job) and times it; observers subscribed here turn that into metrics
(``elastimem.ops.metrics``) or trace spans (``elastimem.ops.tracing``). Nothing subscribes by
default, and then each seam is one check of an empty tuple: ``span()`` hands back a shared
do-nothing context, and ``instrument`` passes straight through to the method.

Kinds and names (``Observation.kind`` / ``.name``), and the attributes each one carries:

- ``operation``: ``recall``, ``explain``, ``build_context``, ``record_turn``, ``remember``,
  ``forget``, ``erase``; ``operation`` (the GenAI memory operation name),
  ``store_id``, ``record_count`` when known, and ``query`` / ``records`` / ``result`` (the
  user's text and what came back, for observers that may keep content when allowed).
- ``leg``: a part of one recall (``graph_signal``, ``rank``).
- ``llm``: ``extract``, ``session_summary``, ``fact_merge``, ... (the job kind asking);
  ``input_chars``, ``output_chars``.
- ``embed``: ``passages`` or ``query``; ``count`` (texts embedded).
- ``job_failed``: the job kind, once, when a job is marked failed for good (no duration).

An observer that raises is logged once and never breaks the work it observes.
Imports nothing of elastimem: every layer may use it.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

logger = logging.getLogger("elastimem")

F = TypeVar("F", bound=Callable[..., Any])


class Observation:
    """One timed piece of work: what it is, its attributes, and (at its end) how it went."""

    __slots__ = ("attributes", "error", "kind", "name", "seconds", "started")

    def __init__(self, kind: str, name: str, attributes: dict[str, Any]) -> None:
        self.kind = kind
        self.name = name
        self.attributes = attributes
        self.started = time.perf_counter()
        self.seconds = 0.0
        self.error: str | None = None  # the exception's type name when the work raised

    def set(self, **attributes: Any) -> None:
        self.attributes.update(attributes)


class Observer(Protocol):
    def begin(self, observation: Observation) -> Any:
        """Called as the work starts; what it returns comes back to ``end``."""

    def end(self, observation: Observation, token: Any) -> None:
        """Called when the work is over (``observation.seconds`` and ``.error`` are set)."""


_observers: tuple[Observer, ...] = ()
_subscribe_lock = threading.Lock()
_failed: set[int] = set()


def subscribe(observer: Observer) -> None:
    """Start handing every observation to ``observer`` (once, however often called)."""
    global _observers
    with _subscribe_lock:
        if observer not in _observers:
            _observers = (*_observers, observer)


def unsubscribe(observer: Observer) -> None:
    global _observers
    with _subscribe_lock:
        _observers = tuple(o for o in _observers if o is not observer)


def active() -> bool:
    return bool(_observers)


class _Null:
    """The observation nobody listens to: a reusable context whose ``set`` does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, **attributes: Any) -> None:
        return None


_NULL = _Null()


class _Observed:
    __slots__ = ("observation", "observers", "tokens")

    def __init__(self, observers: tuple[Observer, ...], observation: Observation) -> None:
        self.observers = observers
        self.observation = observation
        self.tokens: list[Any] = []

    def __enter__(self) -> Observation:
        for observer in self.observers:
            self.tokens.append(_safely(observer, "begin", self.observation))
        self.observation.started = time.perf_counter()
        return self.observation

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        observation = self.observation
        observation.seconds = time.perf_counter() - observation.started
        if exc_type is not None:
            observation.error = exc_type.__name__
        for observer, token in zip(reversed(self.observers), reversed(self.tokens)):
            _safely(observer, "end", observation, token)


def _safely(observer: Observer, method: str, *args: Any) -> Any:
    try:
        return getattr(observer, method)(*args)
    except Exception as exc:  # an observer must never break the work it watches
        if id(observer) not in _failed:
            _failed.add(id(observer))
            logger.warning(
                "observer %s failed in %s (%s); further failures are not logged",
                type(observer).__name__,
                method,
                type(exc).__name__,
            )
        return None


def span(kind: str, name: str, **attributes: Any) -> _Observed | _Null:
    """A context timing one piece of work; what it yields takes ``.set(**attributes)``."""
    observers = _observers
    if not observers:
        return _NULL
    return _Observed(observers, Observation(kind, name, attributes))


def note(kind: str, name: str, **attributes: Any) -> None:
    """An event without a duration (a job failed for good)."""
    observers = _observers
    if observers:
        with _Observed(observers, Observation(kind, name, attributes)):
            pass


# The job kind that asked for an LLM call -> the purpose metrics and spans report.
LLM_PURPOSES = {
    "extract": "extraction",
    "rolling_summary": "summaries",
    "session_summary": "summaries",
    "fact_merge": "merges",
    "entity_merge": "merges",
    "cluster_label": "labels",
}


def llm_purpose(kind: str) -> str:
    return LLM_PURPOSES.get(kind, "other")


# -- the facade's operations -----------------------------------------------------------------

# Method -> GenAI memory operation name (the OpenTelemetry semantic conventions' values).
OPERATIONS: dict[str, str] = {
    "recall": "search_memory",
    "explain": "search_memory",
    "build_context": "search_memory",
    "record_turn": "create_memory",
    "remember": "update_memory",
    "forget": "delete_memory",
    "erase": "delete_memory",
}


def _record_count(method: str, result: Any) -> int | None:
    if method == "recall" and isinstance(result, list):
        return len(result)
    if method == "record_turn":
        return 2  # the user's message and the reply
    if method == "remember":
        return 1 if result and result[0] else 0
    if method == "forget":
        return int(bool(result))
    if method == "erase" and isinstance(result, dict):
        return sum(v for v in result.values() if isinstance(v, int))
    return None


def _observed_method(method: str, operation: str, fn: F) -> F:
    @functools.wraps(fn)
    def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _observers:
            return fn(self, *args, **kwargs)
        store_id = self.user_id or os.path.basename(self.path)
        attributes: dict[str, Any] = {"operation": operation, "store_id": store_id}
        if args and method in ("recall", "explain", "build_context"):
            attributes["query"] = args[0]
        elif method == "record_turn" and len(args) >= 2:
            attributes["records"] = [args[0], args[1]]
        with span("operation", method, **attributes) as observation:
            result = fn(self, *args, **kwargs)
            count = _record_count(method, result)
            if count is not None:
                observation.set(record_count=count)
            observation.set(result=result)  # a reference: only content-keeping observers read it
            return result

    return observed  # type: ignore[return-value]


def instrument(cls: type) -> type:
    """Wrap ``cls``'s public operations (``OPERATIONS``) so observers see each call."""
    for method, operation in OPERATIONS.items():
        setattr(cls, method, _observed_method(method, operation, getattr(cls, method)))
    return cls
