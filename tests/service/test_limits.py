"""Rate limits and read deadlines of a real ``serve`` process, over real sockets: a key past
its rate gets 429 with Retry-After and no other key notices; a client trickling its headers
or body is cut off and never blocks the others."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the server needs the extra elastimem[server]")
pytest.importorskip("uvicorn", reason="the server needs the extra elastimem[server]")

from elastimem.errors import ConfigError  # noqa: E402
from elastimem.server.limits import Rate, RateLimiter, retry_after  # noqa: E402
from tests.service.test_server import TOKENS, Server, start_server, stop_server  # noqa: E402


def get(conn: http.client.HTTPConnection, user: str) -> http.client.HTTPResponse:
    conn.request("GET", "/v1/facts", headers={"Authorization": f"Bearer {TOKENS[user]}"})
    response = conn.getresponse()
    response.read()
    return response


def test_rate_parse_and_bucket_refill() -> None:
    assert Rate.parse("20/s") == Rate(20.0, 20.0)
    assert Rate.parse("600/min", 50) == Rate(10.0, 50.0)
    for bad in ("20", "20/h", "0/s", "-1/s", "x/s", ""):
        with pytest.raises(ConfigError, match="is not a rate"):
            Rate.parse(bad)
    now = [0.0]
    limiter = RateLimiter(Rate(2.0, 4.0), clock=lambda: now[0])
    assert [limiter.wait_for("a") for _ in range(4)] == [0.0] * 4  # the burst
    assert limiter.wait_for("a") == pytest.approx(0.5)
    assert limiter.wait_for("b") == 0.0  # another key: its own bucket
    now[0] += 0.5
    assert limiter.wait_for("a") == 0.0
    assert limiter.wait_for("a") == pytest.approx(0.5)
    now[0] += 100
    assert [limiter.wait_for("a") for _ in range(5)][-1] > 0  # refilled to the burst, no more
    assert retry_after(0.01) == "1" and retry_after(20.2) == "21"


def test_a_key_past_its_rate_gets_429_and_no_other_key_notices(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--rate-limit", "3/min")
    try:
        ana = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        ben = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        assert [get(ana, "ana").status for _ in range(3)] == [200, 200, 200]
        refused = get(ana, "ana")
        assert refused.status == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 20
        # Every other key has its own full bucket, whatever ana does.
        assert [get(ben, "ben").status for _ in range(3)] == [200, 200, 200]
        assert get(ana, "ana").status == 429
        assert get(ben, "ben").status == 429
        assert get(ana, "cy").status == 200  # the key counts, not the connection
        ana.request(
            "POST",
            "/mcp",
            body=b"{}",
            headers={
                "Authorization": f"Bearer {TOKENS['ana']}",
                "Content-Type": "application/json",
            },
        )
        mcp = ana.getresponse()
        mcp.read()
        assert mcp.status == 429  # /mcp counts on the same bucket
        ana.request("GET", "/healthz")
        assert ana.getresponse().status == 200  # needs no key, so counts for none
        ana.close()
        ben.close()
    finally:
        assert stop_server(server) == 0


def test_a_sustained_rate_per_second_is_held(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--rate-limit", "10/s", "--rate-burst", "5")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        started = time.monotonic()
        ok = sum(get(conn, "ana").status == 200 for _ in range(60))
        elapsed = time.monotonic() - started
        conn.close()
        # At most the burst plus what the rate refilled meanwhile.
        assert 5 <= ok <= 5 + 10 * elapsed + 1, (ok, elapsed)
    finally:
        assert stop_server(server) == 0


def _trickle(server: Server, data: bytes, stop: threading.Event, closed: list[float]) -> None:
    """Send ``data`` a byte every 0.2 s; note when the server closed the connection."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    started = time.monotonic()
    try:
        for byte in data:
            if stop.is_set():
                return
            sock.sendall(bytes([byte]))
            time.sleep(0.2)
        sock.settimeout(10)
        sock.recv(65536)  # a response or the end of the stream
    except OSError:
        pass
    finally:
        closed.append(time.monotonic() - started)
        sock.close()


def test_slow_headers_are_cut_off_and_never_block_other_clients(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--read-timeout", "1.5")
    stop = threading.Event()
    closed: list[float] = []
    headers = b"GET /v1/facts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"x" * 400
    slow = [threading.Thread(target=_trickle, args=(server, headers, stop, closed))
            for _ in range(30)]  # fmt: skip
    try:
        for thread in slow:
            thread.start()
        time.sleep(0.3)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for _ in range(10):  # meanwhile, others are answered at once
            started = time.monotonic()
            assert get(conn, "ana").status == 200
            assert time.monotonic() - started < 1.0
        conn.close()
        for thread in slow:
            thread.join(timeout=20)
        assert len(closed) == 30
        assert all(1.0 <= t <= 6.0 for t in closed), closed  # well before the 80 s trickle
        # A connection that sends nothing at all is closed too.
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        started = time.monotonic()
        assert idle.recv(1) == b""
        assert 1.0 <= time.monotonic() - started <= 6.0
        idle.close()
    finally:
        stop.set()
        assert stop_server(server) == 0


def test_a_trickled_body_is_a_408_after_the_read_timeout(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--read-timeout", "1.5")
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        body = json.dumps({"user_text": "x" * 200, "assistant_text": "y"}).encode()
        head = (
            f"POST /v1/turns HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKENS['ana']}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head)
        started = time.monotonic()
        reply = b""
        for byte in body:
            sock.sendall(bytes([byte]))
            sock.settimeout(0.2)
            try:
                reply += sock.recv(65536)
            except TimeoutError:
                continue
            break
        sock.settimeout(10)
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert 1.0 <= time.monotonic() - started <= 6.0
        assert b"did not arrive within 1.5 seconds" in reply + sock.recv(65536)
        sock.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        assert get(conn, "ana").status == 200
        assert get(conn, "ana").status == 200
        conn.close()
        # /mcp reads its body through the same deadline.
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\n"
            f"Authorization: Bearer {TOKENS['ana']}\r\nContent-Length: 100\r\n\r\n{{".encode()
        )
        started = time.monotonic()
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert 1.0 <= time.monotonic() - started <= 6.0
        sock.close()
    finally:
        assert stop_server(server) == 0
