"""The Google ADK adapter, run for real: an ADK ``Runner`` with ``ElastimemMemoryService``,
``PreloadMemoryTool`` and a small scripted ``BaseLlm``, on both backends (issue #28)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.memory import BaseMemoryService  # noqa: E402
from google.adk.memory.memory_entry import MemoryEntry  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService, Session  # noqa: E402
from google.adk.tools.preload_memory_tool import PreloadMemoryTool  # noqa: E402
from google.genai import types  # noqa: E402

import elastimem  # noqa: E402
from elastimem.integrations.adk import ElastimemMemoryService, register, user_of  # noqa: E402


class ScriptedLlm(BaseLlm):
    """Answers with the next scripted reply and keeps every request it got."""

    replies: list[str] = []
    requests: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        text = self.replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def request_text(request: LlmRequest) -> str:
    return "\n".join(p.text or "" for c in request.contents for p in c.parts or [])


@pytest.fixture
def target(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_backend == "sqlite":
        return str(tmp_path / "users")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def app() -> str:
    """An app name of the test's own: PostgreSQL users outlive a test in the shared database."""
    return f"pal-{os.urandom(4).hex()}"


@pytest.fixture
def service(target: str) -> Iterator[ElastimemMemoryService]:
    svc = ElastimemMemoryService(target, disable_builtin_embedder=True)
    yield svc
    svc.close()


def say(author: str, text: str, ts: float, event_id: str) -> Event:
    return Event(
        author=author,
        id=event_id,
        timestamp=ts,
        invocation_id="inv",
        content=types.Content(role="user" if author == "user" else "model",
                              parts=[types.Part(text=text)]),
    )  # fmt: skip


def session_of(app: str, user: str, sid: str, events: list[Event]) -> Session:
    return Session(id=sid, app_name=app, user_id=user, events=events, last_update_time=0.0)


SAID = [
    say("user", "My border collie is called Juniper", 1_700_000_000.0, "e1"),
    say("pal", "Juniper is a lovely name.", 1_700_000_001.0, "e2"),
    say("user", "I also grow chillies on the balcony", 1_700_000_002.0, "e3"),
    say("pal", "Hot ones?", 1_700_000_003.0, "e4"),
]


def test_runner_with_preload_memory_puts_memories_into_the_request(
    app: str, service: ElastimemMemoryService, target: str
) -> None:
    assert isinstance(service, BaseMemoryService)
    llm = ScriptedLlm(model="scripted", replies=["Lovely dog!", "Juniper, your collie."])
    agent = LlmAgent(name="pal", model=llm, tools=[PreloadMemoryTool()])
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name=app, session_service=sessions, memory_service=service)

    async def turn(session_id: str, text: str) -> None:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(
            user_id="alice", session_id=session_id, new_message=message
        ):
            pass

    async def scenario() -> None:
        await sessions.create_session(app_name=app, user_id="alice", session_id="s1")
        await turn("s1", "My border collie is called Juniper")
        first = await sessions.get_session(app_name=app, user_id="alice", session_id="s1")
        assert first is not None
        await service.add_session_to_memory(first)
        await sessions.create_session(app_name=app, user_id="alice", session_id="s2")
        await turn("s2", "What is my border collie called?")

    asyncio.run(scenario())
    memory = request_text(llm.requests[1])
    assert "<PAST_CONVERSATIONS>" in memory and "Juniper" in memory
    assert "Lovely dog!" in memory  # the agent's answer was stored with the user's words
    assert "<PAST_CONVERSATIONS>" not in request_text(llm.requests[0])
    # An ordinary elastimem memory: the CLI's --user pal.alice reads the same store.
    with elastimem.open_user(target, user_of(app, "alice"), disable_builtin_embedder=True) as mem:
        assert "Juniper" in mem.recall("border collie")[0].text


def test_adding_a_session_twice_stores_it_once_and_deltas_only_add_what_is_new(
    app: str,
    service: ElastimemMemoryService,
) -> None:
    async def scenario() -> list[MemoryEntry]:
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID[:2]))
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID[:2]))
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID))
        await service.add_events_to_memory(
            app_name=app, user_id="alice", session_id="s1", events=SAID[2:]
        )
        found = await service.search_memory(app_name=app, user_id="alice", query="Juniper")
        return found.memories

    memories = asyncio.run(scenario())
    mem = service.store(app, "alice")
    assert mem is not None
    texts = [h.text for h in mem.recall("Juniper chillies balcony collie", k=10)]
    assert len(texts) == 2  # one per exchange: nothing stored twice
    entry = memories[0]
    assert "Juniper is a lovely name." in (entry.content.parts or [])[0].text
    assert entry.author == "conversation" and entry.id and entry.id.startswith("session/")
    assert entry.timestamp and entry.timestamp.startswith("2023-11-14")


def test_users_and_apps_are_isolated(app: str, service: ElastimemMemoryService) -> None:
    async def scenario() -> tuple[int, int, int, int]:
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID))
        counts = []
        pairs = ((app, "alice"), (app, "bob"), (app + "-b", "alice"), (app, "alice.x"))
        for app_name, user in pairs:
            found = await service.search_memory(app_name=app_name, user_id=user, query="Juniper")
            counts.append(len(found.memories))
        return counts[0], counts[1], counts[2], counts[3]

    alice, bob, other_app, lookalike = asyncio.run(scenario())
    assert alice > 0 and bob == 0 and other_app == 0 and lookalike == 0
    with pytest.raises(ValueError, match="app_name"):
        asyncio.run(service.search_memory(app_name="pal.alice", user_id="x", query="Juniper"))


def test_add_memory_and_delete_memory(app: str, service: ElastimemMemoryService) -> None:
    note = MemoryEntry(id="tea", content=types.Content(parts=[types.Part(text="likes sencha")]))

    async def search(query: str) -> list[MemoryEntry]:
        found = await service.search_memory(app_name=app, user_id="alice", query=query)
        return found.memories

    async def scenario() -> None:
        await service.add_memory(app_name=app, user_id="alice", memories=[note])
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID[:2]))
        fact = [m for m in await search("sencha") if m.id == "fact/tea"]
        assert fact and (fact[0].content.parts or [])[0].text == "tea: likes sencha"
        await service.delete_memory(app_name=app, user_id="alice", memory_id="fact/tea")
        assert not [m for m in await search("sencha") if m.id == "fact/tea"]
        chunk = (await search("Juniper"))[0]
        await service.delete_memory(app_name=app, user_id="alice", memory_id=chunk.id)
        assert await search("Juniper") == []
        # Deleted events are not stored again when their session is added again.
        await service.add_session_to_memory(session_of(app, "alice", "s1", SAID))
        assert await search("Juniper") == []
        assert await search("chillies")
        await service.delete_memory(app_name=app, user_id="alice", memory_id=chunk.id)

    asyncio.run(scenario())
    mem = service.store(app, "alice")
    assert mem is not None and [f.value for f in mem.fact_history("tea")] == ["likes sencha"]


def test_bad_input_gets_an_error_and_loses_nothing(
    app: str, service: ElastimemMemoryService
) -> None:
    asyncio.run(service.add_session_to_memory(session_of(app, "alice", "s1", SAID[:2])))
    empty = MemoryEntry(content=types.Content(parts=[types.Part(text="  ")]))
    good = MemoryEntry(id="tea", content=types.Content(parts=[types.Part(text="likes sencha")]))
    with pytest.raises(ValueError, match="no text"):
        asyncio.run(service.add_memory(app_name=app, user_id="alice", memories=[good, empty]))
    with pytest.raises(ValueError, match="memory_id"):
        asyncio.run(service.delete_memory(app_name=app, user_id="alice", memory_id="e1"))
    with pytest.raises(ValueError, match="user_id"):
        asyncio.run(service.search_memory(app_name=app, user_id="../bob", query="x"))
    mem = service.store(app, "alice")
    assert mem is not None and "tea" not in mem.facts()  # all checked before any is stored
    assert "Juniper" in mem.recall("Juniper")[0].text


def test_elastimem_uri_resolves_through_adks_registry(
    app: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ADK puts the agents folder on sys.path and imports its services.py as "services".
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "services", raising=False)
    from google.adk.cli.service_registry import ServiceRegistry, load_services_module
    from google.adk.cli.utils.service_factory import create_memory_service_from_options

    registry = ServiceRegistry()
    register(registry)
    made = registry.create_memory_service(f"elastimem://{tmp_path}/users", agents_dir="x")
    assert isinstance(made, ElastimemMemoryService) and made.target == f"{tmp_path}/users"
    made.close()
    # What `adk web --memory_service_uri=elastimem://...` runs, with the agents folder's
    # services.py calling register().
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "services.py").write_text(
        "from elastimem.integrations.adk import register\nregister()\n"
    )
    load_services_module(str(agents))
    sys.modules.pop("services", None)
    service = create_memory_service_from_options(
        base_dir=str(agents), memory_service_uri=f"elastimem://{tmp_path}/users"
    )
    assert isinstance(service, ElastimemMemoryService)
    assert service.target == f"{tmp_path}/users"
    assert service.store(app, "alice") is not None  # the built-in model would load on a write
    assert (tmp_path / "users" / f"{app}.alice.db").exists()
    service.close()
    # The same through a services.yaml naming the class (ADK passes it uri=).
    yaml_agents = tmp_path / "yaml-agents"
    yaml_agents.mkdir()
    (yaml_agents / "services.yaml").write_text(
        "services:\n  - scheme: elastimem\n    type: memory\n"
        "    class: elastimem.integrations.adk.ElastimemMemoryService\n"
    )
    load_services_module(str(yaml_agents))
    service = create_memory_service_from_options(
        base_dir=str(yaml_agents), memory_service_uri=f"elastimem://{tmp_path}/other"
    )
    assert isinstance(service, ElastimemMemoryService)
    assert service.target == f"{tmp_path}/other"
    service.close()
    register()  # leave the process's registry with this module's factory
    with pytest.raises(ValueError, match="elastimem memory URI"):
        ElastimemMemoryService(uri="elastimem://")


@pytest.mark.embedder
def test_what_an_agent_stored_is_found_by_meaning_by_the_next_search(app: str, target: str) -> None:
    service = ElastimemMemoryService(target)
    try:
        mem = service.store(app, "alice")
        assert mem is not None and mem.warm_up(timeout=300)
        other = [
            say("user", "The printer on floor two jams every morning", 1_600_000_000.0, "c"),
            say("pal", "Annoying.", 1_600_000_001.0, "d"),
        ]
        said = [
            say("user", "My sister Ines is a cardiologist in Lisbon", 1_700_000_000.0, "a"),
            say("pal", "Impressive.", 1_700_000_001.0, "b"),
        ]
        asyncio.run(service.add_session_to_memory(session_of(app, "alice", "s0", other)))
        asyncio.run(service.add_session_to_memory(session_of(app, "alice", "s1", said)))
        found: Any = asyncio.run(
            service.search_memory(
                app_name=app, user_id="alice", query="which relative is a heart doctor?"
            )
        )
        assert "Ines" in found.memories[0].content.parts[0].text
    finally:
        service.close()


def test_the_example_runs_offline(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "examples" / "adk_memory.py"
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "<PAST_CONVERSATIONS>" in out and "My border collie is Juniper" in out
    assert (tmp_path / "users" / "pal.alice.db").exists()
