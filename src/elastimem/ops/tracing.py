"""OpenTelemetry spans for elastimem's memory operations (the ``otel`` extra).

``instrument()`` subscribes a tracing observer to ``elastimem.observe``; from then on every
memory operation of every store in the process is a span named for its GenAI memory
operation (``search_memory`` for recall, explain and build_context; ``create_memory`` for
record_turn; ``update_memory`` for remember; ``delete_memory`` for forget and erase), with
``gen_ai.operation.name``, ``gen_ai.memory.store.id`` (the store's user id, else its file
name) and ``gen_ai.memory.record.count``; the parts of a recall (``recall.graph_signal``,
``recall.rank``), the host's LLM calls (``text_completion``, by purpose) and embedder calls
made inside an operation are its child spans. LLM calls of the background worker are spans of
their own. The spans go to the tracer provider the host configured (the global one unless
one is passed); with none configured, OpenTelemetry's no-op tracer takes them.

The user's words (the query, the turn recorded, the memories a search returned) are added
only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``, as the GenAI
conventions ask. Nothing here is imported unless tracing is asked for, and ``opentelemetry``
only by this module.
"""

from __future__ import annotations

import json
import os
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .. import observe
from ..version import package_version

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SYSTEM = "elastimem"


def capture_content() -> bool:
    return os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"


class Tracing:
    """The observer that turns observations into spans of ``tracer_provider``'s tracer."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer = trace.get_tracer(
            "elastimem", package_version(), tracer_provider=tracer_provider
        )

    def begin(self, observation: observe.Observation) -> Any:
        kind = observation.kind
        if kind == "job_failed":
            return None
        if kind == "embed" and not trace.get_current_span().get_span_context().is_valid:
            return None  # background embedding outside any operation: no root span per batch
        span_name, span_kind, attributes = _describe(observation)
        span = self.tracer.start_span(span_name, kind=span_kind, attributes=attributes)
        token = context.attach(trace.set_span_in_context(span))
        return span, token

    def end(self, observation: observe.Observation, token: Any) -> None:
        if token is None:
            return
        span, attached = token
        try:
            _finish(span, observation)
        finally:
            context.detach(attached)
            span.end()


def _describe(observation: observe.Observation) -> tuple[str, SpanKind, dict[str, Any]]:
    kind, name, attrs = observation.kind, observation.name, observation.attributes
    if kind == "operation":
        operation = str(attrs.get("operation", name))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": SYSTEM,
            "gen_ai.memory.store.id": str(attrs.get("store_id", "")),
            "elastimem.method": name,
        }
        if capture_content() and "query" in attrs:
            attributes["gen_ai.memory.query.text"] = _text(attrs["query"])
        return operation, SpanKind.INTERNAL, attributes
    if kind == "leg":
        return f"recall.{name}", SpanKind.INTERNAL, {"elastimem.recall.leg": name}
    if kind == "llm":
        return "text_completion", SpanKind.CLIENT, {
            "gen_ai.operation.name": "text_completion",
            "elastimem.llm.purpose": observe.llm_purpose(name),
            "elastimem.llm.job_kind": name,
        }  # fmt: skip
    return "embeddings", SpanKind.CLIENT, {
        "gen_ai.operation.name": "embeddings",
        "elastimem.embedder.call": name,
        "elastimem.embedder.texts": int(attrs.get("count", 0)),
    }  # fmt: skip


def _finish(span: Any, observation: observe.Observation) -> None:
    attrs = observation.attributes
    if "record_count" in attrs:
        span.set_attribute("gen_ai.memory.record.count", int(attrs["record_count"]))
    if observation.kind == "llm":
        span.set_attribute("elastimem.llm.input_chars", int(attrs.get("input_chars", 0)))
        span.set_attribute("elastimem.llm.output_chars", int(attrs.get("output_chars", 0)))
    if observation.kind == "operation" and capture_content():
        records = _records(attrs)
        if records is not None:
            span.set_attribute("gen_ai.memory.records", records)
    if observation.error is not None:
        span.set_attribute("error.type", observation.error)
        span.set_status(Status(StatusCode.ERROR, observation.error))


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return ""


def _records(attrs: dict[str, Any]) -> str | None:
    """The memories the operation wrote or found, as JSON (content capture only)."""
    if "records" in attrs:
        return json.dumps([_text(r) for r in attrs["records"]], ensure_ascii=False)
    result = attrs.get("result")
    if isinstance(result, list):
        return json.dumps([_text(getattr(hit, "text", hit)) for hit in result], ensure_ascii=False)
    return None


_installed: Tracing | None = None


def instrument(tracer_provider: Any = None) -> Tracing:
    """Emit spans for every store of this process (idempotent); returns the observer."""
    global _installed
    if _installed is None:
        _installed = Tracing(tracer_provider)
        observe.subscribe(_installed)
    return _installed


def uninstrument() -> None:
    global _installed
    if _installed is not None:
        observe.unsubscribe(_installed)
        _installed = None
