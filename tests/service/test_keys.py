"""Hashed, scoped keys: ``elastimem keys`` on real files, ``KeyRing`` lookups, and a real
``serve`` process applying scopes on REST and on the /mcp tools, reloading on SIGHUP."""

from __future__ import annotations

import asyncio
import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="the server needs the extra elastimem[server]")
pytest.importorskip("uvicorn", reason="the server needs the extra elastimem[server]")

from elastimem.cli import main  # noqa: E402
from elastimem.errors import ConfigError  # noqa: E402
from elastimem.server.keys import KeyRing, Principal  # noqa: E402
from tests.service.test_server import (  # noqa: E402
    TOKENS,
    Server,
    _wait_for,
    request,
    start_server,
    stop_server,
)


def add_key(keys: Path, user: str, scope: str = "write", label: str | None = None) -> str:
    """``elastimem keys add`` in process; returns the token it printed."""
    args = ["keys", "add", user, "--keys", str(keys), "--scope", scope]
    args += ["--label", label] if label is not None else []
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert token.startswith("em_") and "\n" not in token
    return token


def call(server: Server, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    return request(server, method, path, body=body, headers={"Authorization": f"Bearer {token}"})


def test_keys_add_prints_the_token_once_and_stores_only_a_salted_hash(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    first = add_key(keys, "ana", "read", "phone")
    second = add_key(keys, "ana", "read", "tablet")
    assert first != second
    text = keys.read_text()
    assert first not in text and second not in text
    assert first.split("_", 2)[2] not in text  # nor the secret part alone
    entries = json.loads(text)["keys"]
    assert [e["label"] for e in entries] == ["phone", "tablet"]
    assert entries[0]["hash"].startswith("scrypt$")
    # Salted: the two hashes share no digest or salt.
    assert len({e["hash"].split("$")[4] for e in entries}) == 2
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    listed = CliRunner().invoke(main, ["keys", "list", "--keys", str(keys)])
    assert listed.exit_code == 0, listed.output
    shown = json.loads(listed.stdout)
    assert shown == [
        {"label": e["label"], "user": "ana", "scope": "read", "created_at": e["created_at"]}
        for e in entries
    ]
    assert "scrypt" not in listed.output and first not in listed.output
    table = CliRunner().invoke(main, ["--format", "table", "keys", "list", "--keys", str(keys)])
    assert "phone" in table.stdout and "scrypt" not in table.stdout


def test_keys_refuses_a_repeated_label_an_unknown_one_and_a_plain_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    add_key(keys, "ana", label="laptop")
    before = keys.read_bytes()
    again = CliRunner().invoke(main, ["keys", "add", "ben", "--keys", str(keys), "--label",
                                      "laptop"])  # fmt: skip
    assert again.exit_code == 1 and "already labelled 'laptop'" in again.output
    assert again.stdout.count("em_") == 0  # no token printed for a key never stored
    bad_user = CliRunner().invoke(main, ["keys", "add", "../x", "--keys", str(keys)])
    assert bad_user.exit_code == 1
    gone = CliRunner().invoke(main, ["keys", "revoke", "desk", "--keys", str(keys)])
    assert gone.exit_code == 1 and "no key is labelled 'desk'" in gone.output
    assert keys.read_bytes() == before
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({TOKENS["ana"]: "ana"}))
    refused = CliRunner().invoke(main, ["keys", "add", "ana", "--keys", str(plain)])
    assert refused.exit_code == 1 and "plain tokens" in refused.output
    assert json.loads(plain.read_text()) == {TOKENS["ana"]: "ana"}
    listed = CliRunner().invoke(main, ["keys", "list", "--keys", str(plain)])
    assert listed.exit_code == 1 and TOKENS["ana"] not in listed.output


def test_concurrent_keys_add_processes_lose_no_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    procs = [
        subprocess.Popen([sys.executable, "-m", "elastimem.cli", "keys", "add", f"u{i}",
                          "--keys", str(keys), "--label", f"k{i}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]  # fmt: skip
    tokens = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        tokens.append(out.strip())
    ring = KeyRing(keys)
    assert len(ring) == 4
    for i, token in enumerate(tokens):
        assert ring.lookup(token) == Principal(f"u{i}", "write", f"k{i}")
    assert not list(tmp_path.glob(".keys.json.*"))  # no temporary file left behind


def test_lookup_verifies_once_then_answers_from_memory_and_forgets_revoked(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.json"
    token = add_key(keys, "ana", "admin", "main")
    ring = KeyRing(keys)
    assert ring.cached(token) is None and ring.needs_hash(token)
    started = time.perf_counter()
    assert ring.lookup(token) == Principal("ana", "admin", "main")
    slow = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(100):
        assert ring.lookup(token) == Principal("ana", "admin", "main")
    fast = (time.perf_counter() - started) / 100
    assert fast < slow / 20, (fast, slow)  # the slow hash is paid once
    assert ring.user_for(token) == "ana"
    key_id = token.split("_")[1]
    assert ring.lookup(f"em_{key_id}_{'A' * 43}") is None  # right id, wrong secret
    assert ring.lookup(token + "x") is None
    assert ring.lookup("em_000000000000_x") is None and not ring.needs_hash("em_00_x")
    assert ring.lookup("") is None and ring.lookup("not-a-key") is None
    CliRunner().invoke(main, ["keys", "revoke", "main", "--keys", str(keys)])
    assert ring.reload() is True
    assert ring.lookup(token) is None and ring.cached(token) is None


def test_a_plain_keys_file_still_works_with_every_scope(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TOKENS["ana"]: "ana"}))
    ring = KeyRing(keys)
    assert ring.plain
    found = ring.lookup(TOKENS["ana"])
    assert found is not None and found.user == "ana" and found.scope == "admin"
    keys.write_text(json.dumps({"elastimem_keys": 1, "keys": [{"id": "x"}]}))
    with pytest.raises(ConfigError, match="lacks one of"):
        KeyRing(keys)


def _mcp_calls(server: Server, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    pytest.importorskip("mcp.server.mcpserver", reason="/mcp needs the MCP SDK 2")
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> list[Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            streamable_http_client(f"{server.base}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return [await session.call_tool(name, args) for name, args in calls]

    return asyncio.run(run())


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


def _text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def test_scopes_are_applied_on_rest_and_on_the_mcp_tools(tmp_path: Path) -> None:
    keys = tmp_path / "made.json"
    read = add_key(keys, "ana", "read", "reader")
    write = add_key(keys, "ana", "write", "writer")
    admin = add_key(keys, "ana", "admin", "owner")
    server = start_server(tmp_path, keys=json.loads(keys.read_text()))
    try:
        turn = {"user_text": "I keep bees", "assistant_text": "Noted."}
        assert call(server, "POST", "/v1/turns", write, turn)[0] == 201
        assert call(server, "PUT", "/v1/facts/hobby", write, {"value": "bees"})[0] == 200
        for method, path, body in [
            ("GET", "/v1/facts", None), ("POST", "/v1/recall", {"query": "bees"}),
            ("POST", "/v1/context", {"user_input": "hi"}), ("GET", "/v1/sessions", None),
            ("GET", "/v1/timeline?q=hobby", None), ("GET", "/v1/stats", None),
            ("GET", "/v1/facts/hobby/history", None),
        ]:  # fmt: skip
            assert call(server, method, path, read, body)[0] == 200, path
        status, text = request(server, "GET", "/v1/export",
                               headers={"Authorization": f"Bearer {read}"})  # fmt: skip
        assert status == 200 and "bees" in text
        refused = {
            ("POST", "/v1/turns", json.dumps(turn)): "write",
            ("PUT", "/v1/facts/hobby", '{"value": "wasps"}'): "write",
            ("DELETE", "/v1/facts/hobby", None): "write",
            ("POST", "/v1/lessons", '{"text": "be brief"}'): "write",
            ("POST", "/v1/sessions", "{}"): "write",
            ("POST", "/v1/sessions/1/end", None): "write",
            ("POST", "/v1/erase", '{"key": "hobby"}'): "admin",
        }
        for (method, path, raw), needed in refused.items():
            status, body = request(server, method, path, raw=raw.encode() if raw else None,
                                   headers={"Authorization": f"Bearer {read}"})  # fmt: skip
            assert status == 403, (path, body)
            assert body == {"error": f"this key's scope (read) does not allow {method} "
                            f"{path.replace('hobby', '{key}').replace('/1/', '/{session_id}/')}"
                            f"; it needs a {needed} key"}  # fmt: skip
        assert call(server, "POST", "/v1/erase", write, {"key": "hobby"})[0] == 403
        assert call(server, "GET", "/v1/facts", read)[1]["facts"] == {"hobby": "bees"}
        assert call(server, "POST", "/v1/erase", admin, {"key": "hobby"})[0] == 200
        # /mcp: a read key may recall but not remember; a write key may remember.
        recalled, remembered = _mcp_calls(
            server, read, [("recall", {"query": "bees"}), ("remember", {"key": "k", "value": "v"})]
        )
        assert not _is_error(recalled)
        assert _is_error(remembered)
        assert _text(remembered) == (
            "this key's scope (read) does not allow the tool 'remember'; it needs a write key"
        )
        (stored,) = _mcp_calls(server, write, [("remember", {"key": "k", "value": "v"})])
        assert not _is_error(stored)
        assert call(server, "GET", "/v1/facts", read)[1]["facts"] == {"k": "v"}
    finally:
        assert stop_server(server) == 0
    for token in (read, write, admin):
        assert token not in server.log()


def test_sighup_applies_keys_add_and_revoke_to_a_running_server(tmp_path: Path) -> None:
    made = tmp_path / "made.json"
    first = add_key(made, "ana", "write", "first")
    server = start_server(tmp_path, keys=json.loads(made.read_text()))
    try:
        assert "in the clear" not in server.log()
        assert call(server, "GET", "/v1/facts", first)[0] == 200
        second = add_key(server.keys, "ben", "read", "second")
        assert call(server, "GET", "/v1/facts", second)[0] == 401
        server.proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: call(server, "GET", "/v1/facts", second)[0] == 200)
        result = CliRunner().invoke(main, ["keys", "revoke", "first", "--keys", str(server.keys)])
        assert result.exit_code == 0, result.output
        assert call(server, "GET", "/v1/facts", first)[0] == 200  # cached until the reload
        server.proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: call(server, "GET", "/v1/facts", first)[0] == 401)
        assert call(server, "GET", "/v1/facts", second)[0] == 200
    finally:
        assert stop_server(server) == 0
    assert first not in server.log() and second not in server.log()


def test_a_plain_keys_file_is_served_with_one_warning_naming_keys_add(tmp_path: Path) -> None:
    server = start_server(tmp_path, keys={TOKENS["ana"]: "ana"})
    try:
        assert request(server, "POST", "/v1/erase", "ana", {"key": "none"})[0] == 404  # admin
        server.proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: "reloaded 1 key(s)" in server.log())
    finally:
        assert stop_server(server) == 0
    assert server.log().count("elastimem keys add") == 1, server.log()
    assert TOKENS["ana"] not in server.log()


def test_the_inspector_honours_each_keys_scope(tmp_path: Path) -> None:
    """Every key signs in to /ui and sees its user; a read key only looks, a write key also
    edits, only an admin key erases (as on the REST API)."""
    pytest.importorskip("jinja2", reason="the inspector needs Jinja2")
    import httpx

    from tests.web.test_inspector_http import csrf_of

    made = tmp_path / "made.json"
    read = add_key(made, "ana", "read", "reader")
    write = add_key(made, "ana", "write", "writer")
    admin = add_key(made, "ana", "admin", "owner")
    server = start_server(tmp_path, keys=json.loads(made.read_text()))
    try:
        assert call(server, "PUT", "/v1/facts/city", admin, {"value": "Lyon"})[0] in (200, 201)
        outcomes = {}
        for name, key in (("read", read), ("write", write), ("admin", admin)):
            with httpx.Client(base_url=server.base, follow_redirects=True) as browser:
                token = csrf_of(browser.get("/ui/facts").text)
                signed = browser.post("/ui/signin", data={"csrf": token, "key": key})
                assert signed.status_code == 200 and signed.url.path == "/ui/", name
                page = browser.get("/ui/facts")
                assert page.status_code == 200 and "city" in page.text, name
                token = csrf_of(page.text)
                edit = browser.post("/ui/facts/city/edit", data={"csrf": token, "value": name})
                erase = browser.get("/ui/facts/city/erase")
                outcomes[name] = (edit.status_code, erase.status_code)
                if name == "read":
                    assert "may only look" in edit.text
                # What a key may not do is not offered: no edit form for read, no erase link
                # below admin.
                shown = browser.get("/ui/facts/city").text
                assert ("Save as a new version" in shown) == (name != "read"), name
                assert ("Erase every version" in shown) == (name == "admin"), name
        assert outcomes == {"read": (403, 403), "write": (200, 403), "admin": (200, 200)}
    finally:
        assert stop_server(server) == 0
