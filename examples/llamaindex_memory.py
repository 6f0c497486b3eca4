"""A LlamaIndex chat engine whose long-term memory is elastimem, offline (extra ``llamaindex``).

    python examples/llamaindex_memory.py

``ElastimemMemoryBlock`` is one block of LlamaIndex's ``Memory``: what short-term memory
flushes is recorded as turns, and before each reply the block adds what elastimem recalls for
the latest messages. The model is LlamaIndex's MockLLM (it echoes), so no key or network.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory

import elastimem
from elastimem.integrations.llamaindex import ElastimemMemoryBlock


async def main() -> None:
    path = Path(tempfile.mkdtemp(prefix="elastimem-llamaindex-")) / "memory.db"
    mem = await elastimem.aio.open(str(path))  # an Elastimem works too
    async with mem:
        memory = Memory.from_defaults(
            session_id="demo",
            token_limit=120,  # small, so early turns flush into elastimem
            memory_blocks=[ElastimemMemoryBlock(mem=mem)],
        )
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=12), memory=memory)
        for text in (
            "My sister Ana lives in Lisbon and works as a nurse.",
            "I restore old bicycles at the weekend.",
            "The weather is grey again today, and the train was late.",
            "Remind me: what does my sister do?",
        ):
            await engine.achat(text)
        await mem.drain()
        context = await memory.aget()
        print("what the model gets first:\n" + str(context[0].content))
        print("facts:", await mem.facts())


if __name__ == "__main__":
    asyncio.run(main())
