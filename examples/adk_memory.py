"""A Google ADK agent with elastimem as its memory service, offline.

    pip install -e ".[adk]" && python examples/adk_memory.py

The model is a small scripted ``BaseLlm`` (no network, no key): swap in ``model="gemini-2.5-flash"``
and nothing else changes. ``PreloadMemoryTool`` searches elastimem before each model call and
puts what it finds into the request; the script prints what the model received.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from elastimem.integrations.adk import ElastimemMemoryService


class ScriptedLlm(BaseLlm):
    """Answers with the next scripted reply; prints the memory it was given."""

    replies: list[str] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        for content in llm_request.contents:
            for part in content.parts or []:
                if part.text and "<PAST_CONVERSATIONS>" in part.text:
                    print("the model was given:\n" + part.text)
        reply = types.Part(text=self.replies.pop(0))
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


async def main(folder: Path) -> None:
    llm = ScriptedLlm(model="scripted", replies=["Juniper, noted!", "Your dog is Juniper."])
    agent = LlmAgent(name="pal", model=llm, tools=[PreloadMemoryTool()])
    sessions = InMemorySessionService()
    memory = ElastimemMemoryService(folder / "users", disable_builtin_embedder=True)
    runner = Runner(agent=agent, app_name="pal", session_service=sessions, memory_service=memory)
    said = (("monday", "My border collie is Juniper"), ("tuesday", "My border collie?"))
    for session_id, text in said:
        await sessions.create_session(app_name="pal", user_id="alice", session_id=session_id)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in runner.run_async(
            user_id="alice", session_id=session_id, new_message=message
        ):
            if event.content and event.content.parts and event.author == "pal":
                print(f"{session_id}: {event.content.parts[0].text}")
        session = await sessions.get_session(app_name="pal", user_id="alice", session_id=session_id)
        assert session is not None
        await memory.add_session_to_memory(session)  # what was said becomes long-term memory
    memory.close()


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(folder))
