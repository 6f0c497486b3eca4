"""The OpenAI Agents SDK adapter, run for real: ``Runner.run`` with an ``ElastimemSession`` and
the SDK's own ``ScriptedModel``, on both backends (issue #28)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.extensions.memory import SQLAlchemySession  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import elastimem  # noqa: E402
from elastimem.integrations.openai_agents import (  # noqa: E402
    HISTORY_SUFFIX,
    ElastimemSession,
    memory_tools,
    with_memory,
)

set_tracing_disabled(True)  # no trace export: nothing leaves the machine

ITEMS: list[Any] = [
    {"role": "user", "content": "I keep bees on the roof of my flat in Leeds"},
    {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Rooftop bees!", "annotations": []}],
    },
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": [1, 2.5]}'},
    {"type": "function_call_output", "call_id": "c1", "output": "ünïcode ✓ \u2028"},
    {"type": "reasoning", "id": "r1", "summary": [], "content": None},
]


@pytest.fixture(scope="session")
def history_url(postgres_server: Any) -> str:
    """A database of the test server for the SDK's SQLAlchemy session history: a role of its
    own that may create tables (elastimem's application role may not)."""
    return postgres_server.create_database("agents_history").replace(
        "postgresql://", "postgresql+psycopg://", 1
    )


def history_for(backend: str, request: pytest.FixtureRequest, key: str) -> Any:
    """None (the default file beside the store) on SQLite; on PostgreSQL the SDK's own
    SQLAlchemy session on the same server, as the module docstring advises."""
    if backend == "sqlite":
        return None
    url = request.getfixturevalue("history_url")
    return SQLAlchemySession.from_url(key, url=url, create_tables=True)


@pytest.fixture
def session_of(
    store_backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., ElastimemSession]]:
    made: list[ElastimemSession] = []
    tag = os.urandom(4).hex()  # PostgreSQL history tables outlive a test: keys of its own

    def factory(session_id: str, mem: Any, **kw: Any) -> ElastimemSession:
        history = history_for(store_backend, request, f"{tag}/{session_id}")
        session = ElastimemSession(session_id, mem, history=history, **kw)
        made.append(session)
        return session

    yield factory
    for session in made:
        session.close()
        if isinstance(session.history, SQLAlchemySession):
            asyncio.run(session.history.engine.dispose())


def test_session_satisfies_the_protocol_and_keeps_items_exactly(
    mem: elastimem.Elastimem, session_of: Callable[..., ElastimemSession]
) -> None:
    session = session_of("chat-1", mem)
    assert isinstance(session, Session)

    async def scenario() -> None:
        await session.add_items(ITEMS[:2])
        await session.add_items(ITEMS[2:])
        assert await session.get_items() == ITEMS
        assert await session.get_items(2) == ITEMS[-2:]
        assert await session.pop_item() == ITEMS[-1]
        assert await session.get_items() == ITEMS[:-1]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None

    asyncio.run(scenario())
    # What was said is long-term memory, kept after the history was cleared.
    hits = mem.recall("bees on the roof")
    assert hits and "Rooftop bees!" in hits[0].text and "Leeds" in hits[0].text


def test_runner_run_with_the_session_on_both_backends(
    make_store: Callable[..., elastimem.Elastimem],
    session_of: Callable[..., ElastimemSession],
) -> None:
    mem = make_store()
    model = ScriptedModel(
        [
            [assistant_message("A border collie, lovely.")],
            [assistant_message("You said Juniper.")],
            [assistant_message("Juniper the border collie.")],
        ]
    )
    agent = Agent(name="pal", instructions=with_memory("Be brief.", mem), model=model)
    chat = session_of("chat-1", mem)

    async def scenario() -> None:
        await Runner.run(agent, "My border collie is called Juniper", session=chat)
        await Runner.run(agent, "What is my dog called?", session=chat)
        # The second run's input held the first run's items, read back from the session.
        first = model.calls[1].input
        assert first[0] == {"role": "user", "content": "My border collie is called Juniper"}
        assert [i.get("role") for i in first] == ["user", "assistant", "user"]
        # A later, different session: the history is empty, long-term memory is not.
        other = session_of("chat-2", mem)
        assert await other.get_items() == []
        await Runner.run(agent, "Tell me about Juniper", session=other)
        assert "Juniper" in (model.calls[2].system_instructions or "")
        assert model.calls[2].system_instructions.startswith("Be brief.")

    asyncio.run(scenario())
    texts = " ".join(h.text for h in mem.recall("Juniper border collie", k=5))
    assert "A border collie, lovely." in texts and "You said Juniper." in texts


def test_memory_tools_through_a_run(
    mem: elastimem.Elastimem, session_of: Callable[..., ElastimemSession]
) -> None:
    mem.record_turn("I moved to Porto last spring", "Porto is lovely.")
    model = ScriptedModel(
        [
            [function_call("remember", {"key": "favorite tea", "value": "sencha"}, call_id="a")],
            [function_call("recall", {"query": "Porto"}, call_id="b")],
            [function_call("forget", {"key": "favorite_tea"}, call_id="c")],
            [assistant_message("Done.")],
        ]
    )
    agent = Agent(name="pal", model=model, tools=memory_tools(mem))
    result = asyncio.run(Runner.run(agent, "tea and Porto", session=session_of("t", mem)))
    assert result.final_output == "Done."
    outputs = [i for i in model.calls[-1].input if i.get("type") == "function_call_output"]
    assert json.loads(outputs[0]["output"]) == {"stored": True, "reason": "stored"}
    assert "Porto" in json.loads(outputs[1]["output"])[0]["text"]
    assert json.loads(outputs[2]["output"]) == {"forgotten": True}
    assert "favorite_tea" not in mem.facts()
    assert [f.value for f in mem.fact_history("favorite_tea")] == ["sencha"]


def test_an_item_json_cannot_hold_is_refused_and_nothing_is_lost(
    mem: elastimem.Elastimem, session_of: Callable[..., ElastimemSession]
) -> None:
    session = session_of("chat-1", mem)
    asyncio.run(session.add_items(ITEMS[:2]))
    bad = {"role": "user", "content": "a set is not JSON", "extra": {1, 2}}
    with pytest.raises(TypeError):
        asyncio.run(session.add_items([bad, {"role": "assistant", "content": "x"}]))
    assert asyncio.run(session.get_items()) == ITEMS[:2]
    assert "Rooftop bees!" in mem.recall("bees")[0].text
    with pytest.raises(ValueError, match="session_id"):
        ElastimemSession("", mem)
    with pytest.raises(ValueError, match="mem="):
        ElastimemSession("x", "memory.db")  # type: ignore[arg-type]


def test_a_huge_item_is_kept_exactly_and_recorded(
    mem: elastimem.Elastimem, session_of: Callable[..., ElastimemSession]
) -> None:
    big = "lorem ipsum dolor " * 60_000 + "zebra crossing"  # ~1 MB
    items = [{"role": "user", "content": big}, {"role": "assistant", "content": "Long!"}]
    session = session_of("chat-1", mem)
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    assert any("zebra crossing" in h.text for h in mem.recall("zebra crossing", k=3))


def test_async_store_and_a_new_process_see_the_same_history(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"

    async def scenario() -> None:
        mem = await elastimem.aio.open(str(path), disable_builtin_embedder=True)
        async with mem:
            session = ElastimemSession("chat-1", mem)
            await session.add_items(ITEMS)
            session.close()

    asyncio.run(scenario())
    assert Path(str(path) + HISTORY_SUFFIX).exists()
    code = (
        "import asyncio, json, elastimem\n"
        "from elastimem.integrations.openai_agents import ElastimemSession\n"
        f"mem = elastimem.open({str(path)!r}, disable_builtin_embedder=True)\n"
        "s = ElastimemSession('chat-1', mem)\n"
        "print(json.dumps(asyncio.run(s.get_items())))\n"
        "print(json.dumps([h.text for h in mem.recall('bees')]))\n"
        "s.close(); mem.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert json.loads(out[0]) == ITEMS
    assert "Rooftop bees!" in json.loads(out[1])[0]


def test_the_default_history_works_on_both_backends_and_outlives_the_session(
    make_store: Callable[..., elastimem.Elastimem], store_backend: str, tmp_path: Path
) -> None:
    """No history= needed: beside the store file, or for a PostgreSQL store in a private
    file of the data folder; a new session object (as in a new process) reads it back."""
    mem = make_store()
    first = ElastimemSession("x", mem)
    asyncio.run(first.add_items(ITEMS))
    first.close()
    again = ElastimemSession("x", mem)
    assert asyncio.run(again.get_items()) == ITEMS
    other_user = make_store(path=tmp_path / "other.db")
    assert asyncio.run(ElastimemSession("x", other_user).get_items()) == []
    again.close()
    if store_backend == "postgres":
        folder = Path(os.environ["XDG_DATA_HOME"]) / "elastimem" / "agent-sessions"
        files = list(folder.iterdir())
        assert files and all(f.stat().st_mode & 0o077 == 0 for f in files)
    else:  # an in-memory store has no file to keep a history beside
        with pytest.raises(ValueError, match="history="):
            ElastimemSession("x", make_store(path=":memory:"))


@pytest.mark.embedder
def test_what_a_run_says_is_found_by_meaning_by_the_next_search(
    make_store: Callable[..., elastimem.Elastimem],
    session_of: Callable[..., ElastimemSession],
) -> None:
    mem = make_store(disable_builtin_embedder=False)
    assert mem.warm_up(timeout=300)  # the first load in a test session converts the model
    model = ScriptedModel([[assistant_message("Noted.")]])
    agent = Agent(name="pal", model=model)
    chat = session_of("chat-1", mem)
    mem.record_turn("The printer on floor two jams every morning", "Annoying.")
    asyncio.run(Runner.run(agent, "My sister Ines is a cardiologist in Lisbon", session=chat))
    # No shared word: only the meaning leg can find it.
    hits = mem.recall("which relative works as a heart doctor?", k=1)
    assert hits and "Ines" in hits[0].text
    assert mem.explain("which relative works as a heart doctor?").vector_leg == "used"


def test_the_example_runs_offline(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "examples" / "openai_agents_memory.py"
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "tuesday: Your dog is Juniper" in out
    assert "- dog: Juniper" in out and "RELEVANT PAST MOMENTS" in out


def test_a_question_asked_before_a_restart_is_recorded_with_its_answer(
    make_store: Callable[..., elastimem.Elastimem],
    session_of: Callable[..., ElastimemSession],
) -> None:
    mem = make_store()
    first = session_of("chat-1", mem)
    asyncio.run(first.add_items([{"role": "user", "content": "Is the heron back at the pond?"}]))
    # A new session object (as in a new process) over the same history gets the answer: the
    # question is read back from the history and recorded with it.
    again = session_of("chat-1", mem)
    answer = {"role": "assistant", "content": "Yes, since Tuesday."}
    asyncio.run(again.add_items([answer]))
    asyncio.run(again.add_items([{"role": "assistant", "content": "Anything else?"}]))
    texts = [h.text for h in mem.recall("heron pond Tuesday", k=5)]
    assert "User: Is the heron back at the pond?\nAssistant: Yes, since Tuesday." in texts
    assert sum("heron" in t for t in texts) == 1  # not repeated with the next answer
