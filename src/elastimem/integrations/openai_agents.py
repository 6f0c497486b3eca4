"""elastimem for the OpenAI Agents SDK: a ``Session`` with long-term memory, and memory tools.

    from agents import Agent, Runner
    from elastimem.integrations.openai_agents import ElastimemSession, memory_tools, with_memory

    mem = elastimem.open("memory.db")
    agent = Agent(name="a", instructions=with_memory("Be brief.", mem), tools=memory_tools(mem))
    await Runner.run(agent, "hi", session=ElastimemSession("chat-1", mem))

Two memories with two jobs. The SDK's session history (the exact items a run adds, read back
in order as the next run's input) is short-term and kept by an Agents SDK session that holds
JSON items as they are: by default the SDK's own ``SQLiteSession`` in a file beside the store
(``<store>.agent-sessions.sqlite``, so it survives a new process); for a PostgreSQL store in a
private file of this machine's data folder (``$XDG_DATA_HOME/elastimem/agent-sessions/``, one
per server address), which suits one host; where several hosts serve one conversation pass
``history=`` (for example the SDK's ``SQLAlchemySession`` on a database they share). The long-term
memory is elastimem's: every user and assistant message is recorded as a turn, so what was
said is searchable with ``recall()``/``build_context()`` from any later session, and shows in
export, the CLI, MCP and REST like any other turn. ``pop_item`` and ``clear_session`` act on
the history only: a turn once recorded is long-term memory (``mem.erase`` removes it).

``mem`` is an open ``Elastimem`` (its blocking calls run in a worker thread) or
``AsyncElastimem``. The SDK is imported when this module is, never by ``elastimem`` itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, function_tool
from agents.memory import Session as AgentsSession
from agents.memory import SQLiteSession
from agents.memory.session_settings import SessionSettings

from elastimem import ConfigError, Elastimem
from elastimem.aio import AsyncElastimem

Memory = Elastimem | AsyncElastimem

# Seconds add_items waits for the new turns to be indexed (embedded) by the store's worker,
# so the very next search finds them by meaning; the turns are stored before the wait either
# way. Tests on the built-in model measure ~10-30 ms a turn.
INDEX_WAIT_SECONDS = 5.0

HISTORY_SUFFIX = ".agent-sessions.sqlite"
HISTORY_FOLDER = "agent-sessions"


def _local_history_file(address: str) -> str:
    """The private history file of a server store on this machine: in the platform's data
    folder (``$XDG_DATA_HOME/elastimem``, else ``~/.local/share/elastimem``), one per server
    address (its digest: the address itself names a host and maybe a role)."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    folder = base / "elastimem" / HISTORY_FOLDER
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    file = folder / (hashlib.sha256(address.encode("utf-8")).hexdigest()[:24] + ".sqlite")
    if not file.exists():  # private like a store: it holds what was said
        os.close(os.open(file, os.O_CREAT | os.O_WRONLY, 0o600))
    return str(file)
# Items read back, beyond the ones just added, for user messages still waiting for an answer.
LOOKBACK = 20


async def call(mem: Memory, name: str, *args: Any, **kwargs: Any) -> Any:
    """``mem.<name>(...)`` awaited off the event loop, whichever kind of store ``mem`` is."""
    if isinstance(mem, AsyncElastimem):
        return await getattr(mem, name)(*args, **kwargs)
    if isinstance(mem, Elastimem):
        return await asyncio.to_thread(getattr(mem, name), *args, **kwargs)
    raise ConfigError(f"mem={mem!r} is invalid; pass an open Elastimem or AsyncElastimem")


def _check_mem(mem: object) -> Memory:
    if not isinstance(mem, (Elastimem, AsyncElastimem)):
        raise ConfigError(f"mem={mem!r} is invalid; pass an open Elastimem or AsyncElastimem")
    return mem


def message_text(item: object) -> tuple[str, str] | None:
    """``(role, text)`` of a user or assistant message item, else None (tool calls, reasoning,
    system messages carry nothing said between the user and the agent)."""
    if not isinstance(item, dict):
        return None
    role = item.get("role")
    if role not in ("user", "assistant") or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return role, content
    if not isinstance(content, list):
        return None
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") in ("input_text", "output_text")
        and isinstance(part.get("text"), str)
    ]
    return (role, "\n".join(texts)) if texts else None


class ElastimemSession:
    """An Agents SDK ``Session`` whose user and assistant messages become long-term memory."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        mem: Memory,
        *,
        history: AgentsSession | None = None,
        session_settings: SessionSettings | None = None,
        index_wait: float = INDEX_WAIT_SECONDS,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ConfigError(f"session_id={session_id!r} is invalid; pass a non-empty string")
        self.session_id = session_id
        self.mem = _check_mem(mem)
        self.session_settings = session_settings
        self.index_wait = float(index_wait)
        self._owns_history = history is None
        self.history = history if history is not None else self._default_history()
        # A user message waits here for the answer it gets, to be recorded with it as one turn.
        self._pending_user: list[str] = []
        self._store_session: int | None = None
        self._lock = asyncio.Lock()

    def _default_history(self) -> AgentsSession:
        path = self.mem.path
        if "://" in path:
            file = _local_history_file(path)
        elif Path(path).exists():
            file = path + HISTORY_SUFFIX
        else:
            raise ConfigError(
                f"{path} is not a store file, so there is no file beside it for the session "
                "history; pass history= (an Agents SDK session, e.g. SQLAlchemySession)"
            )
        # Keyed by the store's user too: two users' stores may share a folder or a server.
        key = f"{self.mem.user_id or ''}/{self.session_id}"
        return SQLiteSession(key, file, session_settings=self.session_settings)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items added so far, oldest first (the last ``limit`` of them)."""
        # A run reads its history first: end another conversation's open session now, so
        # this run's build_context counts that one among the past, not as the current one.
        open_session = self.mem.session_id
        if open_session is not None and open_session != self._store_session:
            await call(self.mem, "end_session", wait=False)
        return await self.history.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        """Keep ``items`` exactly, then record what the user and the agent said as turns."""
        async with self._lock:
            # The history's own error (TypeError for an item JSON cannot hold) comes first,
            # before anything is recorded, as with the SDK's sessions.
            await self.history.add_items(items)
            recorded = seen_user = False
            for item in items:
                said = message_text(item)
                if said is None:
                    continue
                role, text = said
                if role == "user":
                    self._pending_user.append(text)
                    seen_user = True
                    continue
                if not (self._pending_user or seen_user or recorded):
                    self._pending_user = await self._unanswered_before(len(items))
                user_text = "\n".join(self._pending_user)
                self._pending_user = []
                await self._enter_own_session()
                await call(self.mem, "record_turn", user_text, text)
                recorded = True
            if recorded and self.index_wait > 0:
                await call(self.mem, "drain", self.index_wait)

    async def _unanswered_before(self, added: int) -> list[str]:
        """The user messages the history holds, before the ``added`` newest items, since its
        last answer: said in an earlier process (the pending list lives in memory), they are
        recorded with the answer they get now. Only read when nothing is pending."""
        before = (await self.history.get_items(LOOKBACK + added))[: -added or None]
        unanswered: list[str] = []
        for item in reversed(before):
            said = message_text(item)
            if said is None:
                continue
            if said[0] == "assistant":
                break
            unanswered.insert(0, said[1])
        return unanswered

    async def _enter_own_session(self) -> None:
        """Make this conversation the store's open session, so its turns are one elastimem
        session (tagged ``openai-agents:<session_id>``) and ``build_context`` counts them as
        the current conversation, not as past moments, while the history holds them."""
        if self._store_session is None or self.mem.session_id != self._store_session:
            tag = f"openai-agents:{self.session_id}"
            self._store_session = await call(self.mem, "begin_session", tag)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item of the history (long-term memory keeps it)."""
        async with self._lock:
            item = await self.history.pop_item()
            said = message_text(item)
            if said is not None and said[0] == "user" and self._pending_user:
                self._pending_user.pop()
            return item

    async def clear_session(self) -> None:
        """Empty the history (turns already recorded stay long-term memory)."""
        async with self._lock:
            self._pending_user = []
            await self.history.clear_session()

    def close(self) -> None:
        """Close the history this session opened (not ``mem``, which the caller owns)."""
        if self._owns_history and isinstance(self.history, SQLiteSession):
            self.history.close()


def memory_tools(mem: Memory, *, k: int = 5) -> list[FunctionTool]:
    """Function tools ``remember``, ``recall`` and ``forget`` over ``mem`` for an agent."""
    _check_mem(mem)

    @function_tool
    async def remember(key: str, value: str) -> str:
        """Store a fact about the user for later conversations (a new value of a key keeps the
        old one in its history).

        Args:
            key: A short name for the fact, e.g. favorite_color.
            value: The fact's value, e.g. teal.
        """
        changed, reason = await call(mem, "remember", key, value)
        return json.dumps({"stored": bool(changed), "reason": reason})

    @function_tool
    async def recall(query: str) -> str:
        """Search long-term memory (past conversations and known facts) by meaning and words.

        Args:
            query: What to look for, as a question or keywords.
        """
        hits = await call(mem, "recall", query, k)
        return json.dumps([{"text": h.text, "date": h.date, "kind": h.kind} for h in hits])

    @function_tool
    async def forget(key: str) -> str:
        """Forget a stored fact (its history is kept).

        Args:
            key: The fact's name, as given to remember.
        """
        return json.dumps({"forgotten": bool(await call(mem, "forget", key))})

    return [remember, recall, forget]


def latest_user_text(items: list[Any]) -> str:
    """The text of the newest user message among ``items`` ("" when there is none)."""
    for item in reversed(items):
        said = message_text(item)
        if said is not None and said[0] == "user":
            return said[1]
    return ""


def with_memory(
    instructions: str, mem: Memory
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic instructions for ``Agent(instructions=...)``: ``instructions`` followed by the
    ``build_context()`` of the run's current input (what elastimem knows that is relevant)."""
    _check_mem(mem)

    async def dynamic(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        plan = await call(mem, "build_context", latest_user_text(list(context.turn_input)))
        memory = plan.render().strip()
        return f"{instructions}\n\n{memory}" if memory else instructions

    return dynamic


__all__ = ["ElastimemSession", "memory_tools", "with_memory"]
