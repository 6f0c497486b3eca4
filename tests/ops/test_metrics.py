"""Metrics: ``GET /metrics`` of a real ``elastimem serve`` scraped over HTTP and parsed with
prometheus_client's parser, who may read it, and the library's counting hooks (LLM calls and
tokens by purpose, embedder calls, failed jobs) seen through the same exposition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import elastimem  # noqa: E402
from elastimem import observe  # noqa: E402
from elastimem.ops.metrics import Metrics  # noqa: E402
from tests.conftest import HashEmbedder, ScriptedLLM  # noqa: E402
from tests.service.test_server import (  # noqa: E402
    TOKENS,
    Server,
    request,
    start_server,
    stop_server,
)

METRICS_KEY = "metrics-" + "k" * 24
REMOTE = {"X-Forwarded-For": "203.0.113.9"}  # uvicorn trusts it from loopback: a remote client


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(parsed: dict[Any, float], name: str, **labels: str) -> float:
    return parsed.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(server: Server, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(server.base + "/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    os.environ["ELASTIMEM_METRICS_KEY"] = METRICS_KEY
    try:
        running = start_server(tmp_path_factory.mktemp("metrics"))
    finally:
        del os.environ["ELASTIMEM_METRICS_KEY"]
    yield running
    assert stop_server(running) == 0, running.log()


def test_metrics_count_requests_by_route_template_and_operations(server: Server) -> None:
    secret_key, query = "favorite_parsnip_variety", "which parsnips grow in clay"
    assert request(server, "PUT", f"/v1/facts/{secret_key}", "ana", {"value": "Gladiator"})[0] in (
        200,
        201,
    )
    turn = {"user_text": "I grow parsnips in clay soil", "assistant_text": "Noted."}
    assert request(server, "POST", "/v1/turns", "ana", turn)[0] == 201
    for _ in range(3):
        assert request(server, "POST", "/v1/recall", "ana", {"query": query})[0] == 200
    assert request(server, "POST", "/v1/context", "ana", {"user_input": query})[0] == 200
    assert request(server, "GET", "/v1/facts/no_such_key/history", "ana")[0] in (200, 404)
    assert request(server, "GET", "/v1/facts")[0] == 401  # no key: counted too
    assert request(server, "GET", "/no/such/route", "ana")[0] == 404

    status, content_type, text = scrape(server)
    assert status == 200 and content_type.startswith("text/plain")
    parsed = samples(text)
    total = "elastimem_http_requests_total"
    assert (
        value(parsed, total, method="PUT", route="/v1/facts/{key}", status="200")
        + value(parsed, total, method="PUT", route="/v1/facts/{key}", status="201")
        == 1
    )
    assert value(parsed, total, method="POST", route="/v1/recall", status="200") == 3
    assert value(parsed, total, method="GET", route="/v1/facts", status="401") == 1
    assert value(parsed, total, method="GET", route="unmatched", status="404") == 1
    hist = "elastimem_http_request_duration_seconds_count"
    assert value(parsed, hist, method="POST", route="/v1/recall") == 3
    ops = "elastimem_operation_duration_seconds_count"
    assert value(parsed, ops, operation="recall") == 3
    assert value(parsed, ops, operation="build_context") == 1
    assert value(parsed, ops, operation="record_turn") == 1
    assert value(parsed, ops, operation="remember") == 1
    assert value(parsed, "elastimem_stores_open") == 1
    assert ("elastimem_job_queue_depth", ()) in parsed
    assert all(name.startswith("elastimem_") for name, _ in parsed)
    # No user id, fact key, token or query word in any label or anywhere in the text.
    for private in ("ana", secret_key, "parsnip", "clay", TOKENS["ana"], "no_such_key"):
        assert private not in text


def test_metrics_are_for_loopback_or_the_metrics_key_never_a_user_key(server: Server) -> None:
    assert scrape(server, REMOTE)[0] == 403
    user_key = {"Authorization": f"Bearer {TOKENS['ana']}", **REMOTE}
    status, _, body = scrape(server, user_key)
    assert status == 403 and "elastimem_" not in body
    wrong = {"Authorization": "Bearer " + "x" * 32, **REMOTE}
    assert scrape(server, wrong)[0] == 403
    status, _, text = scrape(server, {"Authorization": f"Bearer {METRICS_KEY}", **REMOTE})
    assert status == 200 and "elastimem_http_requests_total" in text
    # The metrics key opens nothing else.
    assert (
        request(server, "GET", "/v1/facts", headers={"Authorization": f"Bearer {METRICS_KEY}"})[0]
        == 401
    )
    assert METRICS_KEY not in server.log()


def test_serve_refuses_a_metrics_key_that_is_a_user_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TOKENS["ana"]: "ana"}))
    keys.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", "--db", str(tmp_path / "users"), "serve",
         "--keys", str(keys), "--port", "0", "--no-embedder"],
        env={**os.environ, "ELASTIMEM_METRICS_KEY": TOKENS["ana"]},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "also a user's key" in done.stderr
    assert TOKENS["ana"] not in done.stderr


def test_serve_takes_the_metrics_key_as_an_option_and_checks_it(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TOKENS["ana"]: "ana"}))
    keys.chmod(0o600)
    serve = [sys.executable, "-m", "elastimem.cli", "--db", str(tmp_path / "users"), "serve",
             "--keys", str(keys), "--port", "0", "--no-embedder"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ELASTIMEM_METRICS_KEY"}
    for extra, refusal in (
        (["--metrics-key", TOKENS["ana"]], "also a user's key"),
        (["--metrics-key", "short"], "shorter than"),
        (["--metrics-key", METRICS_KEY, "--metrics-key-file", str(keys)], "not both"),
    ):
        done = subprocess.run([*serve, *extra], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 2 and refusal in done.stderr, done.stderr
        assert TOKENS["ana"] not in done.stderr


def test_library_hooks_count_llm_calls_tokens_embedder_and_legs(tmp_path: Path) -> None:
    metrics = Metrics().subscribe()
    llm = ScriptedLLM({"extract": '[{"key": "pet", "value": "a ferret"}]',
                       "summarise-session": "The user has a ferret."})  # fmt: skip
    try:
        with elastimem.open(tmp_path / "m.db", llm=llm, embedder=HashEmbedder(),
                            disable_builtin_embedder=True) as mem:  # fmt: skip
            for i in range(3):  # a session summary needs a few turns
                mem.record_turn(f"I have a ferret called Pip, day {i}", "Lovely.")
            mem.end_session(wait=True, timeout=30)
            assert mem.drain(30)
            mem.recall("ferret")
        parsed = samples(metrics.render().decode())
    finally:
        metrics.close()
    calls, tokens = "elastimem_llm_calls_total", "elastimem_llm_tokens_total"
    assert value(parsed, calls, purpose="extraction", outcome="ok") >= 1
    assert value(parsed, calls, purpose="summaries", outcome="ok") == 1
    assert value(parsed, tokens, purpose="extraction", direction="input") > 10
    assert value(parsed, tokens, purpose="summaries", direction="output") >= 5
    assert value(parsed, "elastimem_llm_call_duration_seconds_count", purpose="summaries") == 1
    assert value(parsed, "elastimem_embedder_calls_total", kind="passages", outcome="ok") >= 1
    assert value(parsed, "elastimem_embedder_texts_total", kind="passages") >= 1
    assert value(parsed, "elastimem_embedder_calls_total", kind="query", outcome="ok") >= 1
    assert value(parsed, "elastimem_embedder_duration_seconds_count", kind="query") >= 1
    assert value(parsed, "elastimem_recall_leg_duration_seconds_count", leg="rank") >= 1
    assert observe.llm_purpose("fact_merge") == observe.llm_purpose("entity_merge") == "merges"


def test_failed_jobs_are_counted_by_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from elastimem.runtime import queue as jobs

    monkeypatch.setattr(jobs, "RETRY_DELAYS_SECONDS", (0.0, 0.0))

    def broken(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the embedding server is down")

    metrics = Metrics().subscribe()
    try:
        with elastimem.open(tmp_path / "f.db", embedder=broken,
                            disable_builtin_embedder=True) as mem:  # fmt: skip
            mem.record_turn("the greyhound is called Biscuit", "ok")
            mem.drain(10)
        parsed = samples(metrics.render().decode())
    finally:
        metrics.close()
    assert value(parsed, "elastimem_jobs_failed_total", kind="embed") >= 1
    assert value(parsed, "elastimem_embedder_calls_total", kind="passages", outcome="error") >= 3
    assert value(parsed, "elastimem_operation_duration_seconds_count", operation="record_turn") == 1
