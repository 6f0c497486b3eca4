"""Issue 27's reproductions on the served surfaces, with the real built-in model: a turn
recorded, then at once a question about it that shares no word with it. Before, the answer
was [] until the worker had embedded the turn; now the query embeds what still waits.

REST runs a real ``elastimem serve`` (uvicorn, a free loopback port) on both backends; MCP
runs a real ``elastimem serve-mcp`` subprocess driven by the SDK's stdio client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.service.test_server import backend_target, start_server, stop_server
from tests.service.test_server import request as http

pytestmark = [pytest.mark.embedder, pytest.mark.slow]


def _require_model() -> None:
    for name in ("onnxruntime", "tokenizers", "onnx"):
        pytest.importorskip(name)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_rest_recall_right_after_a_turn_finds_it_by_meaning(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _require_model()
    server = start_server(tmp_path, target=backend_target(backend, request), embedder=True)
    try:
        turn = {"user_text": "I moved to Lisbon", "assistant_text": "Lisbon is lovely."}
        assert http(server, "POST", "/v1/turns", "ana", turn)[0] == 201
        status, body = http(server, "POST", "/v1/recall", "ana", {"query": "where do I live?"})
        assert status == 200, body
        # The answer leads: the exchange, or the fact read from it (issue 26), then the other.
        texts = [hit["text"] for hit in body["hits"][:2]]
        assert texts and "Lisbon" in texts[0], body
        assert any("I moved to Lisbon" in text for text in texts), body
        # Another user asking the same learns nothing of ana's move.
        other = http(server, "POST", "/v1/recall", "ben", {"query": "where do I live?"})[1]
        assert not any("Lisbon" in hit["text"] for hit in other.get("hits", []))
    finally:
        assert stop_server(server) == 0, server.log()


def test_mcp_stdio_recall_right_after_a_turn_finds_it_by_meaning(tmp_path: Path) -> None:
    _require_model()
    pytest.importorskip("mcp", reason="the MCP server needs the extra elastimem[mcp]")
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.service.test_mcp import payload, server_command

    command = [part for part in server_command(str(tmp_path / "m.db")) if part != "--no-embedder"]

    async def session() -> Any:
        params = StdioServerParameters(
            command=command[0], args=command[1:], env={**os.environ, "PYTHONIOENCODING": "utf-8"}
        )
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):  # noqa: SIM117
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    turn = {
                        "user_text": "I have a border collie called Juniper.",
                        "assistant_text": "Collies are clever dogs!",
                    }
                    payload(await client.call_tool("record_turn", turn))
                    return payload(
                        await client.call_tool("recall", {"query": "Do I own any animals?"})
                    )

    hits = anyio.run(session)
    hits = hits.get("hits", hits) if isinstance(hits, dict) else hits
    assert hits and "border collie" in hits[0]["text"], hits
