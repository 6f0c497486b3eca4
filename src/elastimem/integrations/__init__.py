"""Adapters that give agent frameworks elastimem as their memory (issue #28).

One module per framework, each importing its framework lazily inside the module, so the core
install never needs one: ``langgraph`` (LangGraph ``BaseStore`` and a LangChain agent
middleware), ``openai_agents`` (an Agents SDK ``Session`` and memory tools), ``adk`` (a Google
ADK ``BaseMemoryService``) and ``llamaindex`` (a LlamaIndex memory block). Each sits on the
public facade (``elastimem.open``, ``Elastimem``, ``AsyncElastimem``) and may import nothing
below it.
"""
