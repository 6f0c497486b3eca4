"""LangChain agents on elastimem: ``create_agent(..., store=ElastimemStore)`` with langmem's
memory tools, and ``ElastimemMiddleware``; both backends, the framework's scripted fake model."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langmem")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langmem import create_manage_memory_tool, create_search_memory_tool  # noqa: E402
from pydantic import Field  # noqa: E402

import elastimem  # noqa: E402
from elastimem.integrations.langgraph import ElastimemMiddleware, ElastimemStore  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402
from tests.integrations import backends  # noqa: E402

target, users = backends.target, backends.users  # the fixtures this module uses


class ScriptedChat(GenericFakeChatModel):
    """langchain_core's scripted chat model, able to take tools and noting what it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def scripted(*replies: AIMessage) -> ScriptedChat:
    return ScriptedChat(messages=iter(replies))


def tool_call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


@pytest.fixture
def store(target: str) -> Iterator[ElastimemStore]:
    with ElastimemStore(target, embedder=HashEmbedder()) as opened:
        yield opened


def memory_tools() -> list[Any]:
    namespace = ("{langgraph_user_id}", "memories")
    return [create_manage_memory_tool(namespace), create_search_memory_tool(namespace)]


def test_langmem_tools_in_an_agent_store_and_find_memories(
    store: ElastimemStore, users: dict[str, str], target: str
) -> None:
    model = scripted(
        tool_call("manage_memory", "c1", content="Favourite tea is oolong", action="create"),
        tool_call("search_memory", "c2", query="oolong tea"),
        AIMessage(content="You like oolong."),
    )
    agent = create_agent(model, memory_tools(), store=store)
    config = {"configurable": {"langgraph_user_id": users["alice"]}}
    out = agent.invoke({"messages": [HumanMessage("I love oolong tea")]}, config)
    found = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "search_memory"]
    assert "Favourite tea is oolong" in str(found[0].content)
    assert out["messages"][-1].content == "You like oolong."

    (item,) = store.search((users["alice"], "memories"))
    assert item.value == {"content": "Favourite tea is oolong"}
    assert store.search((users["bob"], "memories"), query="oolong") == []
    with elastimem.open_user(target, users["alice"], embedder=HashEmbedder()) as mem:
        assert any("oolong" in value for value in mem.facts().values())

    # An update through the tool is a new version; the old one stays in the history.
    update = scripted(
        tool_call(
            "manage_memory", "c3", content="Now prefers green tea", action="update", id=item.key
        ),  # fmt: skip
        AIMessage(content="Noted."),
    )
    create_agent(update, memory_tools(), store=store).invoke(
        {"messages": [HumanMessage("I switched to green tea")]}, config
    )
    got = store.get((users["alice"], "memories"), item.key)
    assert got is not None and got.value == {"content": "Now prefers green tea"}
    with elastimem.open_user(target, users["alice"], embedder=HashEmbedder()) as mem:
        (fact_key,) = [k for k, v in mem.facts().items() if "green tea" in v]
        assert [f.value.split("\n")[0] for f in mem.fact_history(fact_key)] == [
            "Favourite tea is oolong", "Now prefers green tea"
        ]  # fmt: skip


def test_a_tool_putting_a_huge_memory_gets_an_error_and_loses_nothing(
    store: ElastimemStore, users: dict[str, str]
) -> None:
    ns, key = (users["alice"], "memories"), str(uuid.uuid4())  # langmem's keys are UUIDs
    store.put(ns, key, {"content": "Lives in Porto"})
    model = scripted(
        tool_call("manage_memory", "c1", content="x" * 2000, action="update", id=key),
        AIMessage(content="Sorry."),
    )
    agent = create_agent(model, memory_tools(), store=store)
    config = {"configurable": {"langgraph_user_id": users["alice"]}}
    try:
        out = agent.invoke({"messages": [HumanMessage("remember this")]}, config)
    except ValueError as exc:  # the tool's error, as LangGraph raises it by default
        assert "at most 500" in str(exc)
    else:  # or handed to the model as the tool's error message
        (reply,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert reply.status == "error" and "at most 500" in str(reply.content)
    got = store.get(ns, key)
    assert got is not None and got.value == {"content": "Lives in Porto"}


def system_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages if isinstance(m, SystemMessage))


def test_middleware_puts_context_before_the_model_and_records_the_answer(
    target: str, users: dict[str, str]
) -> None:
    with elastimem.open_user(target, users["alice"], embedder=HashEmbedder()) as mem:
        mem.remember("favorite_color", "teal")
        model = scripted(AIMessage(content="Your favourite colour is teal, and Rex is fine."))
        agent = create_agent(
            model, [], system_prompt="Be brief.", middleware=[ElastimemMiddleware(mem)]
        )
        agent.invoke({"messages": [HumanMessage("What colour do I like? My dog is Rex.")]})
        (sent,) = model.seen
        assert system_text(sent).startswith("Be brief.") and "teal" in system_text(sent)
        mem.drain()
        texts = [hit.text for hit in mem.recall("dog Rex colour", kinds=["chunk"])]
        assert any("Rex is fine" in text for text in texts)  # the exchange was recorded


def test_middleware_async_and_one_store_per_user(target: str, users: dict[str, str]) -> None:
    alice, bob = users["alice"], users["bob"]
    middleware = ElastimemMiddleware(
        target, user_of=lambda runtime: runtime.context["user"], embedder=HashEmbedder()
    )
    try:
        first = scripted(AIMessage(content="Noted: you are training for the Lisbon marathon."))
        agent = create_agent(first, [], middleware=[middleware], context_schema=dict)
        asyncio.run(
            agent.ainvoke(
                {"messages": [HumanMessage("I am training for the Lisbon marathon")]},
                context={"user": alice},
            )
        )
        with elastimem.open_user(target, alice, embedder=HashEmbedder()) as mem:
            assert mem.drain()  # the recorded turn indexed (this process's jobs)
        later = scripted(AIMessage(content="ok"), AIMessage(content="ok"))
        agent = create_agent(later, [], middleware=[middleware], context_schema=dict)
        for user in (alice, bob):
            agent.invoke({"messages": [HumanMessage("which marathon?")]}, context={"user": user})
        alice_sees, bob_sees = (system_text(sent) for sent in later.seen)
        assert "Lisbon marathon" in alice_sees and "Lisbon" not in bob_sees
    finally:
        middleware.close()


def test_middleware_with_an_async_store(target: str, users: dict[str, str]) -> None:
    async def main() -> list[list[BaseMessage]]:
        mem = await elastimem.aio.open_user(target, users["carol"], embedder=HashEmbedder())
        async with mem:
            await mem.remember("home_city", "Porto")
            model = scripted(AIMessage(content="You live in Porto."))
            agent = create_agent(model, [], middleware=[ElastimemMiddleware(mem)])
            await agent.ainvoke({"messages": [HumanMessage("Where is my home city?")]})
            assert await mem.drain()
            assert any("You live in Porto" in h.text for h in await mem.recall("home city"))
            return model.seen

    (sent,) = asyncio.run(main())
    assert "Porto" in system_text(sent)


def test_middleware_keeps_one_session_per_thread(target: str, users: dict[str, str]) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    with elastimem.open_user(target, users["alice"], embedder=HashEmbedder()) as mem:
        model = scripted(*(AIMessage(content=f"answer {i}") for i in range(4)))
        agent = create_agent(
            model, [], middleware=[ElastimemMiddleware(mem)], checkpointer=InMemorySaver()
        )
        for thread, text in [("t1", "one"), ("t1", "two"), ("t2", "three")]:
            config = {"configurable": {"thread_id": thread}}
            agent.invoke({"messages": [HumanMessage(f"message {text}")]}, config)
        loose = create_agent(model, [], middleware=[ElastimemMiddleware(mem)])
        loose.invoke({"messages": [HumanMessage("message four")]})  # no thread: its own session
        counts = [s["message_count"] for s in reversed(mem.sessions())]
        assert counts == [4, 2, 2]  # t1's two exchanges, t2's one, the thread-less run
        assert [s["host_tag"] for s in reversed(mem.sessions())][:2] == [
            "langgraph thread t1", "langgraph thread t2"
        ]  # fmt: skip
