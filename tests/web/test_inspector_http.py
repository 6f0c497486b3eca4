"""The web inspector over HTTP: pages, escaping, CSRF, cookies, sign-in, isolation (issue 29).

In-process (Starlette's TestClient) for the pages on both backends; a real ``elastimem serve``
and a real ``elastimem ui`` process for sign-in and the command.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jinja2", reason="the inspector needs the extra elastimem[server]")
pytest.importorskip("uvicorn", reason="the inspector needs the extra elastimem[server]")

from click.testing import CliRunner  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import elastimem  # noqa: E402
from elastimem.aio import AsyncElastimem  # noqa: E402
from elastimem.cli import main  # noqa: E402
from elastimem.web.app import InspectorOptions, build_inspector  # noqa: E402
from tests.service.test_server import TOKENS, start_server, stop_server  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"
SCRIPT_END = "</script><script>alert(2)</script>"
BASE = "http://127.0.0.1"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


@pytest.fixture
def seeded(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    mem = make_store()
    mem.begin_session()
    mem.record_turn(f"my note is {XSS}", f"noted {SCRIPT_END}")
    for i in range(30):
        mem.record_turn(f"turn {i} about Chicago", f"answer {i}")
    mem.end_session()
    mem.remember("city", "Chicago")
    mem.remember("city", "Denver")
    mem.remember("payload", XSS)
    mem.remember("closing", SCRIPT_END)
    mem.remember("city", "x", source="auto")  # too short to replace: quarantined
    mem.add_lesson("Answer briefly.")
    return mem


@pytest.fixture
def client(seeded: elastimem.Elastimem) -> Iterator[TestClient]:
    wrapped = AsyncElastimem(seeded)

    @asynccontextmanager
    async def lease(user_id: str) -> AsyncIterator[AsyncElastimem]:
        yield wrapped

    app = build_inspector(InspectorOptions(lease, owner="owner", loopback_only=True))
    with TestClient(app, base_url=BASE) as test_client:
        yield test_client


def test_every_page_renders_escaped_with_a_strict_policy(client: TestClient) -> None:
    session_id = int(re.findall(r"/sessions/(\d+)", client.get("/sessions").text)[0])
    paths = ["/", "/facts", "/facts?q=chic", "/facts/city", "/facts/payload", "/facts/closing",
             "/search?q=note&timeline=1", "/search", f"/sessions/{session_id}", "/sessions",
             "/lessons", "/quarantine", "/graph", "/transfer", "/facts/city/erase",
             f"/sessions/{session_id}/erase"]  # fmt: skip
    for path in paths:
        reply = client.get(path)
        assert reply.status_code == 200, (path, reply.text[:300])
        policy = reply.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "<img src=x" not in reply.text and "<script>alert" not in reply.text, path
    assert "&lt;img src=x onerror=alert(1)&gt;" in client.get("/facts").text
    assert "&lt;/script&gt;" in client.get(f"/sessions/{session_id}").text
    assert "&lt;img src=x" in client.get("/search?q=note").text


def test_overview_counts_and_empty_states(
    client: TestClient, make_store: Callable[..., elastimem.Elastimem], tmp_path: Path
) -> None:
    page = client.get("/").text
    for label in ("Sessions", "Exchanges", "Facts live / versions", "Lessons", "Quarantined",
                  "Graph nodes", "Tier", "Embedder", "Queue", "Last activity"):  # fmt: skip
        assert label in page
    empty = AsyncElastimem(make_store(tmp_path / "empty.db"))

    @asynccontextmanager
    async def lease(user_id: str) -> AsyncIterator[AsyncElastimem]:
        yield empty

    app = build_inspector(InspectorOptions(lease, owner="owner", loopback_only=True))
    with TestClient(app, base_url=BASE) as other:
        assert "Nothing is remembered yet" in other.get("/").text
        assert "No facts yet" in other.get("/facts").text
        assert "No sessions" in other.get("/sessions").text
        assert "No lessons yet" in other.get("/lessons").text
        assert "quarantine is empty" in other.get("/quarantine").text
        assert "graph is built by the host" in other.get("/graph").text
        assert "Type a question" in other.get("/search").text


def test_fact_history_edit_forget_and_erase(client: TestClient, seeded: Any) -> None:
    page = client.get("/facts/city").text
    assert page.index("Denver") < page.index("Chicago")  # newest first
    assert "retired" in page and "current" in page and "explicit (remember)" in page
    token = csrf_of(page)
    reply = client.post("/facts/city/edit", data={"csrf": token, "value": "Boston"})
    assert reply.status_code == 200 and "Stored as a new version" in reply.text
    assert seeded.facts()["city"] == "Boston"
    assert [v.value for v in seeded.fact_history("city")][-1] == "Boston"
    client.post("/facts/city/forget", data={"csrf": token})
    assert "city" not in seeded.facts() and len(seeded.fact_history("city")) == 3
    confirm = client.get("/facts/city/erase").text
    assert "3 version(s)" in confirm and "Erase for good" in confirm
    client.post("/facts/city/erase", data={"csrf": token})
    assert seeded.fact_history("city") == []
    assert client.get("/facts/city").status_code == 404


def test_every_change_needs_a_post_with_the_sessions_csrf_token(
    client: TestClient, seeded: Any
) -> None:
    client.get("/")  # a session
    entry = seeded.quarantine_page()[0]["id"]
    session_id = seeded.sessions()[0]["id"]
    posts = ["/facts/city/edit", "/facts/city/forget", "/facts/city/erase",
             f"/sessions/{session_id}/erase", f"/quarantine/{entry}/promote",
             f"/quarantine/{entry}/discard", "/import"]  # fmt: skip
    for path in posts:
        assert client.post(path, data={"value": "Evil"}).status_code == 403, path
        assert client.post(path, data={"csrf": "forged", "value": "Evil"}).status_code == 403
        client.get(path)  # a GET is at most a confirmation page: it changes nothing
    fresh = TestClient(client.app, base_url=BASE)  # another browser: its own token
    fresh.get("/")
    stolen = csrf_of(client.get("/facts/city").text)
    assert fresh.post("/facts/city/edit", data={"csrf": stolen, "value": "Evil"}).status_code == 403
    assert seeded.facts()["city"] == "Denver" and seeded.quarantine_page()[0]["id"] == entry
    assert seeded.sessions()[0]["id"] == session_id and len(seeded.fact_history("city")) == 2


def test_cookie_is_httponly_strict_and_secure_behind_tls(client: TestClient) -> None:
    fresh = TestClient(client.app, base_url=BASE)
    cookie = fresh.get("/").headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "Secure" not in cookie
    tls = TestClient(client.app, base_url=BASE)
    cookie = tls.get("/", headers={"X-Forwarded-Proto": "https"}).headers["set-cookie"]
    assert "Secure" in cookie


def test_a_non_loopback_host_is_refused_on_loopback(client: TestClient) -> None:
    assert client.get("/", headers={"Host": "evil.example:8000"}).status_code == 400
    assert client.get("/", headers={"Host": "localhost:8000"}).status_code == 200


def test_search_shows_the_legs_and_the_timeline(client: TestClient) -> None:
    page = client.get("/search?q=Chicago&timeline=1").text
    assert "Why it ranked here" in page and "<meter" in page and "keyword" in page
    assert "About the fact" in page and 'href="/facts/city"' in page


def test_sessions_are_paged_and_a_session_is_erased_after_confirming(
    client: TestClient, seeded: Any
) -> None:
    session_id = seeded.sessions()[0]["id"]
    first = client.get(f"/sessions/{session_id}").text
    assert "turns 1–25 of 31" in first and "Later turns" in first
    later = client.get(f"/sessions/{session_id}?from=26").text
    assert "turn 29 about Chicago" in later and "turn 0 about" not in later
    confirm = client.get(f"/sessions/{session_id}/erase").text
    assert "62 message(s)" in confirm
    token = csrf_of(confirm)
    client.post(f"/sessions/{session_id}/erase", data={"csrf": token})
    assert seeded.sessions() == []
    assert client.get(f"/sessions/{session_id}").status_code == 404


def test_quarantine_promote_after_confirming_and_discard(client: TestClient, seeded: Any) -> None:
    seeded.remember("city", "y", source="auto")
    entries = seeded.quarantine_page()
    assert len(entries) == 2
    confirm = client.get(f"/quarantine/{entries[0]['id']}/promote").text
    assert "kept existing value" in confirm and "Promote" in confirm
    token = csrf_of(confirm)
    reply = client.post(f"/quarantine/{entries[0]['id']}/promote", data={"csrf": token})
    assert "Promoted to a fact" in reply.text
    assert seeded.facts()["city"] == "y"
    client.post(f"/quarantine/{entries[1]['id']}/discard", data={"csrf": token})
    assert seeded.quarantine_page() == []


def test_export_downloads_and_import_goes_only_into_an_empty_store(
    client: TestClient,
    make_store: Callable[..., elastimem.Elastimem],
    tmp_path: Path,
    store_backend: str,
) -> None:
    exported = client.get("/export")
    assert exported.status_code == 200 and b'"city"' in exported.content
    assert "only goes into an empty store" in client.get("/transfer").text
    token = csrf_of(client.get("/facts/city").text)
    refused = client.post("/import", data={"csrf": token},
                          files={"file": ("e.jsonl", exported.content)})  # fmt: skip
    assert "only goes into an empty store" in refused.text
    target = make_store(tmp_path / "target.db")
    wrapped = AsyncElastimem(target)

    @asynccontextmanager
    async def lease(user_id: str) -> AsyncIterator[AsyncElastimem]:
        yield wrapped

    app = build_inspector(InspectorOptions(lease, owner="owner", loopback_only=True))
    with TestClient(app, base_url=BASE) as other:
        token = csrf_of(other.get("/transfer").text)
        reply = other.post("/import", data={"csrf": token},
                           files={"file": ("e.jsonl", exported.content)})  # fmt: skip
        if store_backend == "postgres":  # another user's export: refused, and the page says why
            assert reply.status_code == 400 and "that user&#39;s store" in reply.text
            return
        assert "Imported" in reply.text
    assert target.facts()["city"] == "Denver" and target.sessions()


def test_ui_refuses_a_non_loopback_host_without_keys(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "m.db"), "ui", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "not a loopback address" in result.output


def test_ui_serves_the_store_on_loopback_and_prints_the_address(tmp_path: Path) -> None:
    store = tmp_path / "m.db"
    with elastimem.open(store, disable_builtin_embedder=True) as mem:
        mem.remember("city", "Lisbon")
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastimem.cli", "ui", "--db", str(store), "--no-browser",
         "--no-embedder"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", address), address
        for _ in range(100):
            try:
                with urllib.request.urlopen(address + "facts", timeout=10) as reply:
                    page = reply.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert "Lisbon" in page
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_serve_signs_in_by_key_and_a_key_sees_only_its_user(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from tests.service.test_server import backend_target

    server = start_server(tmp_path, target=backend_target(backend, request))
    try:
        for user, city in (("ana", "Oslo"), ("ben", "Lima")):
            with server.open_user(user) as mem:
                mem.remember("city", city)
        import httpx

        with httpx.Client(base_url=server.base, follow_redirects=True) as browser:
            form = browser.get("/ui/facts")
            assert form.url.path == "/ui/signin" and "API key" in form.text
            token = csrf_of(form.text)
            assert browser.post("/ui/signin", data={"csrf": token, "key": "wrong" * 5}
                                ).status_code == 401  # fmt: skip
            assert browser.post("/ui/signin", data={"key": TOKENS["ana"]}).status_code == 403
            signed = browser.post("/ui/signin", data={"csrf": token, "key": TOKENS["ana"]})
            assert signed.status_code == 200 and signed.url.path == "/ui/"
            facts = browser.get("/ui/facts").text
            assert "Oslo" in facts and "Lima" not in facts
            # The cookie is no bearer token for the REST API, and a key is not read at /ui.
            assert browser.get("/v1/facts").status_code == 401
            anon = httpx.get(server.base + "/ui/facts",
                             headers={"Authorization": f"Bearer {TOKENS['ben']}"})  # fmt: skip
            assert anon.status_code == 303 or "API key" in anon.text
            out = browser.post("/ui/signout", data={"csrf": csrf_of(facts)})
            assert out.url.path == "/ui/signin"
            assert browser.get("/ui/facts").url.path == "/ui/signin"
    finally:
        assert stop_server(server) == 0


def test_a_version_links_the_session_it_was_learned_in(client: TestClient, seeded: Any) -> None:
    session_id = seeded.begin_session()
    seeded.remember("pet", "Rex")
    assert (
        f'href="/sessions/{session_id}">session {session_id}</a>' in client.get("/facts/pet").text
    )


def test_the_graph_frame_is_sandboxed_and_framed_only_by_the_inspector(client: TestClient) -> None:
    frame = client.get("/graph/frame")
    policy = frame.headers["content-security-policy"]
    assert frame.status_code == 200 and "<svg" in frame.text
    assert policy.startswith("sandbox allow-scripts;") and "frame-ancestors 'self'" in policy
    assert "connect-src" not in policy and "default-src 'none'" in policy


def test_a_session_expires_and_then_needs_a_key_again() -> None:
    from elastimem.web.signin import LIFETIME_S, Sessions

    now = [1000.0]
    sessions = Sessions(clock=lambda: now[0])
    signed = sessions.start("ana")
    assert sessions.get(signed.id) is signed
    now[0] += LIFETIME_S + 1
    assert sessions.get(signed.id) is None
    sessions.end("unknown")  # signing out twice is harmless


def test_every_control_has_a_label(client: TestClient, seeded: Any) -> None:
    session_id = seeded.sessions()[0]["id"]
    for path in ("/facts", "/facts/city", "/search?q=Chicago&timeline=1", "/quarantine",
                 f"/sessions/{session_id}", "/transfer", "/facts/city/erase"):  # fmt: skip
        page = client.get(path).text
        labelled = set(re.findall(r'<label for="([^"]+)"', page))
        for control in re.findall(r"<(?:input|select|textarea)\b[^>]*>", page):
            if 'type="hidden"' in control or "aria-label" in control:
                continue
            found = re.search(r'id="([^"]+)"', control)
            wrapped = 'type="checkbox"' in control  # inside its <label>
            assert wrapped or (found and found.group(1) in labelled), (path, control)


def test_a_revoked_key_signs_its_browsers_out(seeded: Any, tmp_path: Path) -> None:
    import json

    from elastimem.server.keys import KeyRing
    from elastimem.web.signin import KeyGate

    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({TOKENS["ana"]: "ana", TOKENS["ben"]: "ben"}))
    ring = KeyRing(keys_file)
    wrapped = AsyncElastimem(seeded)
    leased: list[str] = []

    @asynccontextmanager
    async def lease(user_id: str) -> AsyncIterator[AsyncElastimem]:
        leased.append(user_id)
        yield wrapped

    app = build_inspector(InspectorOptions(lease, gate=KeyGate(ring)))
    with TestClient(app, base_url="http://elastimem.example") as browser:
        token = csrf_of(browser.get("/signin").text)
        browser.post("/signin", data={"csrf": token, "key": TOKENS["ana"]})
        assert browser.get("/facts").status_code == 200 and set(leased) == {"ana"}
        before = len(leased)
        keys_file.write_text(json.dumps({TOKENS["ben"]: "ben"}))
        assert ring.reload()
        reply = browser.get("/facts", follow_redirects=False)
        assert reply.status_code == 303 and reply.headers["location"] == "/signin"
        assert len(leased) == before  # the store was not reached
