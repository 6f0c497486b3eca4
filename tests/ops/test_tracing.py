"""Traces: spans of the GenAI memory conventions collected with the OpenTelemetry SDK's
in-memory exporter, in-process and from a real ``elastimem serve`` that continues an
incoming W3C ``traceparent``; and that nothing of OpenTelemetry is imported without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

import elastimem  # noqa: E402
from elastimem.ops import tracing  # noqa: E402
from tests.conftest import HashEmbedder, ScriptedLLM  # noqa: E402
from tests.service.test_server import request, start_server, stop_server  # noqa: E402


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.instrument(tracer_provider=provider)
    try:
        yield spans
    finally:
        tracing.uninstrument()
        provider.shutdown()


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def test_memory_operations_are_genai_spans_with_children(
    exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(tracing.CAPTURE_ENV, raising=False)
    llm = ScriptedLLM({"extract": '[{"key": "pet", "value": "a ferret"}]'})
    with elastimem.open(tmp_path / "t.db", user_id="ana", llm=llm, embedder=HashEmbedder(),
                        disable_builtin_embedder=True) as mem:  # fmt: skip
        mem.record_turn("I have a ferret called Pip", "Lovely.")
        assert mem.drain(30)
        hits = mem.recall("ferret called Pip")
        mem.remember("favorite_color", "teal")
        mem.forget("favorite_color")
    spans = exporter.get_finished_spans()
    search = by_name(spans, "search_memory")
    assert len(search) == 1
    attrs = search[0].attributes
    assert attrs["gen_ai.operation.name"] == "search_memory"
    assert attrs["gen_ai.memory.store.id"] == "ana"
    assert attrs["gen_ai.memory.record.count"] == len(hits) > 0
    assert "gen_ai.memory.query.text" not in attrs and "gen_ai.memory.records" not in attrs
    children = [s for s in spans if s.parent and s.parent.span_id == search[0].context.span_id]
    assert {"recall.rank", "recall.graph_signal"} <= {s.name for s in children}
    assert all(s.context.trace_id == search[0].context.trace_id for s in children)
    create = by_name(spans, "create_memory")[0]
    assert create.attributes["gen_ai.memory.record.count"] == 2
    assert by_name(spans, "update_memory")[0].attributes["gen_ai.memory.record.count"] == 1
    assert by_name(spans, "delete_memory")[0].attributes["gen_ai.memory.record.count"] == 1
    llm_spans = by_name(spans, "text_completion")
    assert llm_spans and llm_spans[0].attributes["elastimem.llm.purpose"] == "extraction"
    assert llm_spans[0].attributes["gen_ai.operation.name"] == "text_completion"
    everything = json.dumps([dict(s.attributes or {}) for s in spans])
    assert "ferret" not in everything and "Pip" not in everything  # no content by default


def test_content_is_captured_only_when_asked(
    exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    with elastimem.open(tmp_path / "c.db", disable_builtin_embedder=True) as mem:
        mem.record_turn("I have a ferret called Pip", "Lovely.")
        mem.recall("ferret")
    spans = exporter.get_finished_spans()
    search = by_name(spans, "search_memory")[0].attributes
    assert search["gen_ai.memory.query.text"] == "ferret"
    assert "ferret called Pip" in search["gen_ai.memory.records"]
    created = by_name(spans, "create_memory")[0].attributes
    assert json.loads(created["gen_ai.memory.records"]) == ["I have a ferret called Pip", "Lovely."]


def test_an_operation_that_raises_is_an_error_span(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    with (
        elastimem.open(tmp_path / "e.db", disable_builtin_embedder=True) as mem,
        pytest.raises(elastimem.ConfigError),
    ):
        mem.recall("x", k="many")  # type: ignore[arg-type]
    span = by_name(exporter.get_finished_spans(), "search_memory")[0]
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "ConfigError"


def test_without_tracing_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys, elastimem\n"
        f"with elastimem.open({str(tmp_path / 'n.db')!r}, disable_builtin_embedder=True) as m:\n"
        "    m.record_turn('hello there', 'hi'); m.recall('hello')\n"
        "print(sorted(n for n in sys.modules if n.startswith(('opentelemetry', 'prometheus'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


# The server's tracer provider, set at interpreter start as opentelemetry-instrument does
# (a sitecustomize on PYTHONPATH): every finished span becomes a JSON line of a file.
SITECUSTOMIZE = r"""
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

class ToFile(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_FILE"], "a") as out:
            for s in spans:
                parent = s.parent.span_id if s.parent else None
                out.write(json.dumps({"name": s.name, "trace": s.context.trace_id,
                                      "span": s.context.span_id, "parent": parent}) + "\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ToFile()))
trace.set_tracer_provider(provider)
"""


def test_serve_continues_an_incoming_traceparent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # CI installs the package and sets no PYTHONPATH; a developer's may point at src/.
    inherited = os.environ.get("PYTHONPATH")
    site = str(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{inherited}" if inherited else site)
    monkeypatch.setenv("SPANS_FILE", str(spans_file))
    server = start_server(tmp_path)
    try:
        trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        header = {"traceparent": f"00-{trace_id}-{parent_id}-01"}
        status, _ = request(server, "POST", "/v1/recall", "ana", {"query": "hello"}, headers=header)
        assert status == 200
        assert request(server, "POST", "/v1/recall", "ana", {"query": "again"})[0] == 200
    finally:
        assert stop_server(server) == 0, server.log()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    search = [s for s in spans if s["name"] == "search_memory"]
    assert len(search) == 2
    assert search[0]["trace"] == int(trace_id, 16) and search[0]["parent"] == int(parent_id, 16)
    assert search[1]["trace"] != int(trace_id, 16) and search[1]["parent"] is None
