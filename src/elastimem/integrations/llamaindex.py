"""elastimem as a LlamaIndex memory block (extra ``llamaindex``).

memory = Memory.from_defaults(session_id="s1", memory_blocks=[ElastimemMemoryBlock(mem=mem)])

``aget(messages)`` returns what elastimem recalls for the latest messages, as text LlamaIndex
puts into the chat history it hands the model; ``aput(messages)`` records the messages that
short-term memory flushed as turns (a user message with the assistant's reply that follows
it), so they become long-term memory: facts, episodes and recall, as any recorded turn.
``mem`` is an open ``Elastimem`` or ``AsyncElastimem``; the block never closes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory.memory import BaseMemoryBlock

import elastimem
from elastimem.aio import AsyncElastimem

__all__ = ["ElastimemMemoryBlock"]

# How many of the latest messages make the query: the question alone is often too short
# ("and her?"), the whole history drowns it.
QUERY_MESSAGES = 2
# How long aget waits for the indexing of turns just put (this process's queued jobs), so
# what was flushed is found by the very next aget; bounded, as a host's LLM may be slow.
DRAIN_SECONDS = 10.0


class ElastimemMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory from an elastimem store, for ``Memory.from_defaults(memory_blocks=...)``."""

    name: str = Field(default="elastimem", description="The name of the memory block.")
    description: str | None = Field(
        default="What elastimem remembers about the user, relevant to the conversation.",
        description="A description of the memory block.",
    )
    mem: Any = Field(description="An open Elastimem or AsyncElastimem store.")
    k: int = Field(default=5, ge=1, description="How many memories aget returns at most.")

    def model_post_init(self, context: Any, /) -> None:
        if not isinstance(self.mem, (elastimem.Elastimem, AsyncElastimem)):
            raise elastimem.ConfigError(
                f"mem={self.mem!r} is invalid; pass an open Elastimem or AsyncElastimem"
            )

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.mem, AsyncElastimem):
            return await getattr(self.mem, name)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.mem, name), *args, **kwargs)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        latest = [m.content for m in (messages or [])[-QUERY_MESSAGES:] if m.content]
        query = "\n".join(str(text) for text in latest)
        if not query.strip():
            return ""
        if await self._call("pending"):
            await self._call("drain", DRAIN_SECONDS)
        hits = await self._call("recall", query, self.k)
        return "\n".join(f"- {hit.text}" for hit in hits)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for user_text, reply in _turns(messages):
            await self._call("record_turn", user_text, reply)


def _turns(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    """(user, assistant) pairs in order: consecutive user messages are one question, the
    assistant's messages up to the next user message one reply; tool and system messages are
    not part of what was said. A trailing question without a reply is kept with an empty one
    (short-term memory may flush a question whose answer stays behind)."""
    pairs: list[tuple[str, str]] = []
    asked: list[str] = []
    said: list[str] = []
    for message in messages:
        text = str(message.content or "").strip()
        if not text:
            continue
        if message.role == MessageRole.USER:
            if said:
                pairs.append(("\n".join(asked), "\n".join(said)))
                asked, said = [], []
            asked.append(text)
        elif message.role == MessageRole.ASSISTANT:
            said.append(text)
    if asked or said:
        pairs.append(("\n".join(asked), "\n".join(said)))
    return pairs
