"""Tests for ``elastimem.llms.openai_compatible`` against a real loopback HTTP server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from elastimem.errors import ConfigError, LLMError
from elastimem.llms import openai_compatible


@dataclass
class Behaviour:
    """What the fake server answers, and what it saw."""

    status: int = 200
    body: bytes | None = None
    content: Any = "hello"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: Behaviour


class Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        behaviour = self.server.behaviour
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        behaviour.requests.append(
            {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw)}
        )
        if behaviour.delay:
            behaviour.release.wait(behaviour.delay)
        if behaviour.body is not None:
            body = behaviour.body
        elif self.path in ("/v1/chat/completions", "/chat/completions"):
            body = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": behaviour.content},
                            "finish_reason": "stop",
                        }
                    ],
                }
            ).encode()
        else:
            self.send_error(404)
            return
        try:
            self.send_response(behaviour.status)
            for name, value in behaviour.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout test)
            pass


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    httpd = FakeOpenAI(("127.0.0.1", 0), Handler)
    httpd.behaviour = Behaviour()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.behaviour.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def base(httpd: FakeOpenAI) -> str:
    host, port = httpd.server_address[:2]
    return f"http://{host}:{port}/v1"


def test_success_and_request_shape(server: FakeOpenAI) -> None:
    llm = openai_compatible(base(server), "tiny-model")
    assert llm("Say hello", max_tokens=32, temperature=0.2) == "hello"
    (request,) = server.behaviour.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["json"] == {
        "model": "tiny-model",
        "messages": [{"role": "user", "content": "Say hello"}],
        "max_tokens": 32,
        "temperature": 0.2,
        "stream": False,
    }
    assert "Authorization" not in request["headers"]
    assert request["headers"]["Content-Type"] == "application/json"
    assert llm.model == "tiny-model"
    assert llm.base_url == base(server)


def test_defaults(server: FakeOpenAI) -> None:
    openai_compatible(base(server), "m")("hi")
    body = server.behaviour.requests[0]["json"]
    assert body["max_tokens"] == 256 and body["temperature"] == 0.0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>let me reason {json}</think>\n\nThe answer.", "The answer."),
        ("<think>\nstill thinking when the tokens ran out", ""),
        ("template opened it</think>final", "final"),
        ("  plain  ", "plain"),
        (None, ""),
        ("", ""),
    ],
)
def test_think_blocks_are_removed(server: FakeOpenAI, content: Any, expected: str) -> None:
    server.behaviour.content = content
    assert openai_compatible(base(server), "m")("q") == expected


def test_bearer_key_and_extra_headers(server: FakeOpenAI) -> None:
    llm = openai_compatible(
        base(server), "m", api_key="sk-test-123", extra_headers={"X-Trace": "abc"}
    )
    assert llm("q") == "hello"
    headers = server.behaviour.requests[0]["headers"]
    assert headers["Authorization"] == "Bearer sk-test-123"
    assert headers["X-Trace"] == "abc"
    assert "sk-test-123" not in repr(llm)


@pytest.mark.parametrize(
    "suffix",
    ["/v1", "/v1/", "/v1//", "/v1/chat/completions", "/v1/chat/completions/"],
)
def test_url_joining(server: FakeOpenAI, suffix: str) -> None:
    host, port = server.server_address[:2]
    llm = openai_compatible(f"http://{host}:{port}{suffix}", "m")
    assert llm("q") == "hello"
    assert server.behaviour.requests[0]["path"] == "/v1/chat/completions"
    assert llm.url == f"http://{host}:{port}/v1/chat/completions"
    assert not llm.base_url.endswith("/")


def test_root_url_without_path(server: FakeOpenAI) -> None:
    host, port = server.server_address[:2]
    assert openai_compatible(f"http://{host}:{port}", "m")("q") == "hello"
    assert server.behaviour.requests[0]["path"] == "/chat/completions"


def test_http_error(server: FakeOpenAI) -> None:
    server.behaviour.status = 500
    server.behaviour.body = b'{"error": {"message": "model tiny not loaded"}}' + b" pad" * 500
    with pytest.raises(LLMError) as info:
        openai_compatible(base(server), "m", api_key="sk-secret")("q")
    message = str(info.value)
    assert "HTTP 500" in message
    assert "model tiny not loaded" in message
    assert base(server) + "/chat/completions" in message
    assert len(message) < 600
    assert "sk-secret" not in message


def test_error_body_echoing_the_key_is_redacted(server: FakeOpenAI) -> None:
    server.behaviour.status = 401
    server.behaviour.body = b"bad key sk-secret"
    with pytest.raises(LLMError) as info:
        openai_compatible(base(server), "m", api_key="sk-secret")("q")
    assert "HTTP 401" in str(info.value) and "sk-secret" not in str(info.value)


def test_not_found_path(server: FakeOpenAI) -> None:
    host, port = server.server_address[:2]
    with pytest.raises(LLMError, match="HTTP 404"):
        openai_compatible(f"http://{host}:{port}/nowhere", "m")("q")


def test_redirect_is_not_followed(server: FakeOpenAI) -> None:
    server.behaviour.status = 307
    server.behaviour.headers = {"Location": "http://127.0.0.1:9/steal"}
    server.behaviour.body = b""
    with pytest.raises(LLMError, match="HTTP 307"):
        openai_compatible(base(server), "m", api_key="sk-secret")("q")
    assert len(server.behaviour.requests) == 1


@pytest.mark.parametrize("body", [b"not json", b'{"choices": [', b"\xff\xfe", b"[" * 100_000])
def test_malformed_json(server: FakeOpenAI, body: bytes) -> None:
    server.behaviour.body = body
    with pytest.raises(LLMError, match="not JSON"):
        openai_compatible(base(server), "m")("q")


@pytest.mark.parametrize(
    "payload",
    [
        {"id": "x"},
        {"choices": []},
        {"choices": None},
        {"choices": [{}]},
        {"choices": [{"message": {}}]},
        {"choices": [{"message": {"content": 42}}]},
        {"choices": ["text"]},
    ],
)
def test_missing_choices_give_empty_string(server: FakeOpenAI, payload: dict[str, Any]) -> None:
    server.behaviour.body = json.dumps(payload).encode()
    assert openai_compatible(base(server), "m")("q") == ""


def test_json_that_is_not_an_object(server: FakeOpenAI) -> None:
    server.behaviour.body = b"[1, 2]"
    with pytest.raises(LLMError):
        openai_compatible(base(server), "m")("q")


def test_error_object_in_a_200_reply(server: FakeOpenAI) -> None:
    server.behaviour.body = b'{"error": {"message": "context length exceeded"}}'
    with pytest.raises(LLMError, match="context length exceeded"):
        openai_compatible(base(server), "m")("q")


def test_timeout(server: FakeOpenAI) -> None:
    server.behaviour.delay = 5.0
    llm = openai_compatible(base(server), "m", timeout=0.2)
    with pytest.raises(LLMError, match="timed out after 0.2s"):
        llm("q")


def test_connection_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = openai_compatible(f"http://127.0.0.1:{port}/v1", "m", timeout=2.0)
    with pytest.raises(LLMError) as info:
        llm("q")
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "refused" in str(info.value)


def test_prompt_with_surrogates_is_sent(server: FakeOpenAI) -> None:
    assert openai_compatible(base(server), "m")("a\ud800b\x00c") == "hello"
    sent = server.behaviour.requests[0]["json"]["messages"][0]["content"]
    assert sent == "a\ufffdb\ufffdc"


def test_unicode_round_trip(server: FakeOpenAI) -> None:
    server.behaviour.content = "Café ☕ ünïcode"
    assert openai_compatible(base(server), "m")("Grüße") == "Café ☕ ünïcode"
    assert server.behaviour.requests[0]["json"]["messages"][0]["content"] == "Grüße"


def test_concurrent_calls(server: FakeOpenAI) -> None:
    llm = openai_compatible(base(server), "m")
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(llm("q"))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["hello"] * 8


# --- construction-time validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/v1",
        "file:///etc/passwd",
        "127.0.0.1:8080/v1",
        "",
        "http://",
        "http://127.0.0.1:99999/v1",
        "javascript:alert(1)",
    ],
)
def test_bad_url_raises_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        openai_compatible(url, "m")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": ""},
        {"model": None},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": float("nan")},
        {"timeout": True},
        {"api_key": 123},
        {"api_key": "sk\r\nX-Evil: 1"},
        {"extra_headers": {"X-A": "b\r\nX-Evil: 1"}},
        {"extra_headers": {"": "x"}},
        {"extra_headers": {"X-A": 1}},
        {"extra_headers": ["X-A"]},
    ],
)
def test_bad_arguments_raise_config_error(kwargs: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"base_url": "http://127.0.0.1:8080/v1", "model": "m"}
    arguments.update(kwargs)
    with pytest.raises(ConfigError):
        openai_compatible(**arguments)


def test_bad_url_message_hides_credentials() -> None:
    with pytest.raises(ConfigError) as info:
        openai_compatible("ftp://user:hunter2@127.0.0.1/v1", "m")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs", [{"max_tokens": 0}, {"max_tokens": True}, {"temperature": "hot"}]
)
def test_bad_call_arguments(kwargs: dict[str, Any]) -> None:
    llm = openai_compatible("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ConfigError):
        llm("q", **kwargs)


def test_no_network_at_construction() -> None:
    llm = openai_compatible("http://127.0.0.1:9/v1", "m", api_key="k")
    assert llm.base_url == "http://127.0.0.1:9/v1"
    assert llm.model == "m"
