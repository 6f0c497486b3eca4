"""ElastimemMemoryBlock in a real LlamaIndex ``Memory`` (and a ``SimpleChatEngine`` with
LlamaIndex's MockLLM), on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.chat_engine import SimpleChatEngine  # noqa: E402
from llama_index.core.llms import ChatMessage, MockLLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

import elastimem  # noqa: E402
from elastimem.integrations.llamaindex import ElastimemMemoryBlock  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402
from tests.integrations import backends  # noqa: E402

target, users = backends.target, backends.users  # the fixtures this module uses


@pytest.fixture
def mem(target: str, users: dict[str, str]) -> Iterator[elastimem.Elastimem]:
    with elastimem.open_user(target, users["alice"], embedder=HashEmbedder()) as opened:
        yield opened


def exchange(user: str, reply: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=user), ChatMessage(role="assistant", content=reply)]


@asynccontextmanager
async def memory_with(block: ElastimemMemoryBlock, **kw: Any) -> AsyncIterator[Memory]:
    """A LlamaIndex Memory on its default in-memory chat store, whose engine is disposed on
    the loop it ran on (else aiosqlite's connection is collected after the loop closed)."""
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    chat_store = SQLAlchemyChatStore(table_name="llama_index_memory", async_engine=engine)
    try:
        yield Memory.from_defaults(memory_blocks=[block], chat_store=chat_store, **kw)
    finally:
        await engine.dispose()


# Short-term memory small enough that a few exchanges flush into the block.
SMALL = {"token_limit": 80, "chat_history_token_ratio": 0.5, "token_flush_size": 30}


def test_flushed_messages_become_turns_and_come_back_for_the_latest_messages(
    mem: elastimem.Elastimem,
) -> None:
    block = ElastimemMemoryBlock(mem=mem)
    assert block.name == "elastimem"

    async def chat() -> list[ChatMessage]:
        async with memory_with(block, session_id="s1", **SMALL) as memory:
            said = "My sister Ana lives in Lisbon and works as a nurse."
            await memory.aput_messages(exchange(said, "Lisbon is lovely."))
            await memory.aput_messages(exchange("I restore old bicycles at weekends.", "Fun!"))
            await memory.aput_messages(exchange("The weather is grey today.", "Sorry to hear."))
            await memory.aput_messages(exchange("Where does my sister Ana live?", "Let me check."))
            await asyncio.to_thread(mem.drain)
            return await memory.aget()

    messages = asyncio.run(chat())
    turns = [h.text for h in mem.recall("sister Ana Lisbon nurse", kinds=["chunk"])]
    assert any("Ana lives in Lisbon" in text and "Lisbon is lovely" in text for text in turns)
    system = str(messages[0].content)
    assert messages[0].role == "system" and "<elastimem>" in system and "Lisbon" in system
    assert str(messages[-1].content) == "Let me check."  # short-term memory kept the latest


def test_aget_returns_relevant_memories_as_text(mem: elastimem.Elastimem) -> None:
    mem.remember("favorite_food", "mushroom risotto")
    mem.remember("employer", "Acme Robotics")
    block = ElastimemMemoryBlock(mem=mem, k=1)
    text = asyncio.run(block.aget([ChatMessage(role="user", content="what food do I like?")]))
    assert text == "- favorite_food: mushroom risotto"
    assert asyncio.run(block.aget([])) == ""


def test_an_async_store_in_a_chat_engine(target: str, users: dict[str, str]) -> None:
    async def main() -> str:
        mem = await elastimem.aio.open_user(target, users["bob"], embedder=HashEmbedder())
        async with mem:
            await mem.remember("pet_name", "Biscuit")
            async with memory_with(ElastimemMemoryBlock(mem=mem), session_id="s2") as memory:
                engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=memory)
                await engine.achat("What is my pet's name?")
                sent = await memory.aget()
                return str(sent[0].content)

    assert "Biscuit" in asyncio.run(main())


def test_bad_input(mem: elastimem.Elastimem, target: str, users: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="Elastimem"):  # pydantic's ValidationError
        ElastimemMemoryBlock(mem="not a store")
    block = ElastimemMemoryBlock(mem=mem)
    odd = [
        ChatMessage(role="tool", content="{'raw': 1}"),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="user", content="x" * 20_000),  # huge: recorded, not lost
        ChatMessage(role="system", content="be nice"),
    ]
    asyncio.run(block.aput(odd, from_short_term_memory=True))
    assert mem.sessions()[0]["message_count"] == 1  # the question (an empty reply is no message)
    with elastimem.open_user(target, users["carol"], embedder=HashEmbedder()) as other:
        assert asyncio.run(ElastimemMemoryBlock(mem=other).aget(odd)) == ""  # nobody else's


@pytest.mark.embedder
def test_what_was_put_is_found_by_meaning_by_the_next_aget(
    target: str, users: dict[str, str]
) -> None:
    async def main() -> str:
        mem = await elastimem.aio.open_user(target, users["alice"])  # the built-in model
        async with mem:
            assert await mem.warm_up(120)
            block = ElastimemMemoryBlock(mem=mem, k=1)
            await block.aput(exchange("My sister Ana works night shifts as a nurse.", "Tiring!"))
            await block.aput(exchange("I restore old bicycles at weekends.", "Nice hobby."))
            await block.aput(exchange("We are repainting the kitchen blue.", "Sounds fresh."))
            asked = [
                ChatMessage(role="user", content="Is anyone in the family in the medical field?")
            ]
            return await block.aget(asked)

    assert "nurse" in asyncio.run(main())
