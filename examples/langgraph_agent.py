"""A LangChain agent whose long-term memory is elastimem, offline (extra ``langgraph``).

    python examples/langgraph_agent.py

Two pieces: ``ElastimemStore`` is the agent's LangGraph store (its tools save and search
memories there, each an ordinary elastimem fact of the user), and ``ElastimemMiddleware``
puts what elastimem knows into the system message before each model call and records each
exchange. The model is langchain_core's scripted fake model, so no key or network is needed;
the second conversation finds what the first one saved.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

import elastimem
from elastimem.integrations.langgraph import ElastimemMiddleware, ElastimemStore


@dataclass
class Context:
    user_id: str


class ScriptedModel(GenericFakeChatModel):
    """langchain_core's fake chat model, accepting tools (it replies from its script)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@tool
def save_memory(content: str, runtime: ToolRuntime[Context]) -> str:
    """Save something worth remembering about the user."""
    key = f"m{len(runtime.store.search((runtime.context.user_id, 'memories'))) + 1}"
    runtime.store.put((runtime.context.user_id, "memories"), key, {"content": content})
    return f"saved {key}"


@tool
def search_memories(query: str, runtime: ToolRuntime[Context]) -> str:
    """Search what was saved about the user."""
    found = runtime.store.search((runtime.context.user_id, "memories"), query=query, limit=3)
    return "\n".join(item.value["content"] for item in found) or "nothing saved"


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": name}])


def main() -> None:
    folder = tempfile.mkdtemp(prefix="elastimem-langgraph-")  # or a postgresql:// address
    store = ElastimemStore(folder)
    memory = ElastimemMiddleware(folder, user_of=lambda runtime: runtime.context.user_id)
    model = ScriptedModel(
        messages=iter(
            [
                call("save_memory", content="Allergic to peanuts; loves Thai food"),
                AIMessage(content="Noted: no peanuts, and Thai food is a favourite."),
                call("search_memories", query="what can this person not eat?"),
                AIMessage(content="Green curry without peanuts, then."),
            ]
        )
    )
    agent = create_agent(
        model,
        [save_memory, search_memories],
        store=store,
        middleware=[memory],
        context_schema=Context,
    )
    alice = Context(user_id="alice")
    for text in ("I'm allergic to peanuts, and I love Thai food.", "What should I cook?"):
        out = agent.invoke({"messages": [HumanMessage(text)]}, context=alice)
        for message in out["messages"][1:]:
            print(f"  {type(message).__name__}: {message.content}")
    store.close()
    memory.close()
    with elastimem.open_user(folder, "alice") as mem:  # the same memory, through the plain API
        print("facts:", mem.facts())
        print("recall:", [hit.text for hit in mem.recall("peanut allergy", 3)])


if __name__ == "__main__":
    main()
