"""Prometheus metrics of a process running elastimem, fed by ``elastimem.observe``.

``Metrics`` keeps its own registry (nothing lands in prometheus-client's global one, so two
services in one process, or a test, never collide) and subscribes to the observation seam.
Every name starts with ``elastimem_``. Labels are bounded, fixed vocabularies: an HTTP
route's template (``/v1/facts/{key}``, never the path with the key filled in), a method, a
status, an operation, a job kind or LLM purpose, an embedder call kind. No user id, store,
query or content ever becomes a label.

LLM tokens are estimated (4 characters a token): the host's ``llm`` callable returns text,
not usage figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import observe

CONTENT_TYPE = CONTENT_TYPE_LATEST
CHARS_PER_TOKEN = 4

# Operation latencies span a cached recall (~1 ms) to a build_context waiting on the query
# embedder (seconds); LLM calls span a local model's fraction of a second to minutes.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The service's metrics; ``subscribe()`` starts counting what the library does."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "elastimem_http_requests", "HTTP requests answered, by route template and status.",
            ["method", "route", "status"], registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "elastimem_http_request_duration_seconds", "HTTP request latency by route template.",
            ["method", "route"], buckets=FAST_BUCKETS, registry=r,
        )  # fmt: skip
        self.operation_seconds = Histogram(
            "elastimem_operation_duration_seconds",
            "Latency of the memory operations (recall, build_context, record_turn, ...).",
            ["operation"], buckets=FAST_BUCKETS, registry=r,
        )  # fmt: skip
        self.operation_errors = Counter(
            "elastimem_operation_errors", "Memory operations that raised, by operation.",
            ["operation"], registry=r,
        )  # fmt: skip
        self.leg_seconds = Histogram(
            "elastimem_recall_leg_duration_seconds", "Latency of the parts of one recall.",
            ["leg"], buckets=FAST_BUCKETS, registry=r,
        )  # fmt: skip
        self.llm_calls = Counter(
            "elastimem_llm_calls", "Calls of the host's LLM by purpose and outcome.",
            ["purpose", "outcome"], registry=r,
        )  # fmt: skip
        self.llm_tokens = Counter(
            "elastimem_llm_tokens",
            "Tokens sent to and received from the host's LLM by purpose (estimated: 4 "
            "characters a token).",
            ["purpose", "direction"], registry=r,
        )  # fmt: skip
        self.llm_seconds = Histogram(
            "elastimem_llm_call_duration_seconds", "LLM call latency by purpose.",
            ["purpose"], buckets=LLM_BUCKETS, registry=r,
        )  # fmt: skip
        self.embedder_calls = Counter(
            "elastimem_embedder_calls", "Embedder calls (passages: background; query: recall).",
            ["kind", "outcome"], registry=r,
        )  # fmt: skip
        self.embedder_texts = Counter(
            "elastimem_embedder_texts", "Texts embedded.", ["kind"], registry=r
        )
        self.embedder_seconds = Histogram(
            "elastimem_embedder_duration_seconds", "Time spent in the embedder per call.",
            ["kind"], buckets=FAST_BUCKETS, registry=r,
        )  # fmt: skip
        self.jobs_failed = Counter(
            "elastimem_jobs_failed", "Background jobs marked failed after their last attempt.",
            ["kind"], registry=r,
        )  # fmt: skip
        self.stores_open = Gauge(
            "elastimem_stores_open", "User stores open in this process.", registry=r
        )
        self.queue_depth = Gauge(
            "elastimem_job_queue_depth",
            "Background jobs queued, held or running in the open stores.", registry=r,
        )  # fmt: skip
        self.backups = Counter(
            "elastimem_backups", "Scheduled per-user backups by outcome.", ["outcome"],
            registry=r,
        )  # fmt: skip
        self.last_backup = Gauge(
            "elastimem_backup_last_success_timestamp_seconds",
            "When the last scheduled backup round finished without a failure.", registry=r,
        )  # fmt: skip
        self._subscribed = False

    # -- the observer ------------------------------------------------------------------------

    def subscribe(self) -> Metrics:
        observe.subscribe(self)
        self._subscribed = True
        return self

    def close(self) -> None:
        if self._subscribed:
            observe.unsubscribe(self)
            self._subscribed = False

    def begin(self, observation: observe.Observation) -> None:
        return None

    def end(self, observation: observe.Observation, token: Any) -> None:
        kind, name, seconds = observation.kind, observation.name, observation.seconds
        if kind == "operation":
            self.operation_seconds.labels(name).observe(seconds)
            if observation.error is not None:
                self.operation_errors.labels(name).inc()
        elif kind == "leg":
            self.leg_seconds.labels(name).observe(seconds)
        elif kind == "llm":
            purpose = observe.llm_purpose(name)
            outcome = "error" if observation.error else "ok"
            self.llm_calls.labels(purpose, outcome).inc()
            self.llm_seconds.labels(purpose).observe(seconds)
            sent = int(observation.attributes.get("input_chars", 0))
            received = int(observation.attributes.get("output_chars", 0))
            self.llm_tokens.labels(purpose, "input").inc(-(-sent // CHARS_PER_TOKEN))
            self.llm_tokens.labels(purpose, "output").inc(-(-received // CHARS_PER_TOKEN))
        elif kind == "embed":
            self.embedder_calls.labels(name, "error" if observation.error else "ok").inc()
            self.embedder_texts.labels(name).inc(int(observation.attributes.get("count", 0)))
            self.embedder_seconds.labels(name).observe(seconds)
        elif kind == "job_failed":
            self.jobs_failed.labels(name).inc()

    # -- the service -------------------------------------------------------------------------

    def request_done(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.request_seconds.labels(method, route).observe(seconds)

    def backup_round(self, done: int, failed: int) -> None:
        self.backups.labels("ok").inc(done)
        self.backups.labels("failed").inc(failed)
        if not failed:
            self.last_backup.set(time.time())

    def render(
        self, stores: Iterable[Any] = (), pending: Callable[[Any], int] | None = None
    ) -> bytes:
        """The text exposition; ``stores`` (open now) and ``pending`` set the two gauges."""
        open_now = list(stores)
        self.stores_open.set(len(open_now))
        if pending is not None:
            depth = 0
            for store in open_now:
                try:
                    depth += pending(store)
                except Exception:  # closed while counted: it holds no queue here any more
                    continue
            self.queue_depth.set(depth)
        return generate_latest(self.registry)
