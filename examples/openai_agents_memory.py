"""An OpenAI Agents SDK agent with elastimem as its memory, offline.

    pip install -e ".[openai-agents]" && python examples/openai_agents_memory.py

The model is the SDK's own ScriptedModel (no network, no key): swap in a real model name
(``Agent(model="gpt-4.1-mini")``) and nothing else changes. Two conversations in two sessions:
the second knows what the first said, through long-term memory, not through its history.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

import elastimem
from elastimem.integrations.openai_agents import ElastimemSession, memory_tools, with_memory


async def main(folder: Path) -> None:
    set_tracing_disabled(True)  # the SDK would otherwise try to export traces to OpenAI
    model = ScriptedModel(
        [
            [function_call("remember", {"key": "dog", "value": "Juniper"}, call_id="c1")],
            [assistant_message("A border collie called Juniper, noted.")],
            [assistant_message("Your dog is Juniper, the border collie.")],
        ]
    )
    with elastimem.open(str(folder / "memory.db"), disable_builtin_embedder=True) as mem:
        agent = Agent(
            name="pal",
            instructions=with_memory("You are a helpful assistant.", mem),
            model=model,
            tools=memory_tools(mem),
        )
        monday = ElastimemSession("monday", mem)
        result = await Runner.run(agent, "My border collie is called Juniper", session=monday)
        print("monday:", result.final_output)
        tuesday = ElastimemSession("tuesday", mem)  # a new conversation, empty history
        result = await Runner.run(agent, "What is my dog called?", session=tuesday)
        print("tuesday:", result.final_output)
        print("the model was told:\n" + (model.calls[-1].system_instructions or ""))
        print("items kept in monday's history:", len(await monday.get_items()))
        print("recall:", [hit.text for hit in mem.recall("border collie")])
        monday.close()
        tuesday.close()


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(folder))
