"""elastimem as a Google ADK memory service.

    from elastimem.integrations.adk import ElastimemMemoryService
    runner = Runner(agent=agent, app_name="pal", session_service=sessions,
                    memory_service=ElastimemMemoryService("~/memory-users"))

``target`` is a folder (one SQLite store per user, ``<folder>/<app>.<user>.db``, as
``open_user``) or a ``postgresql://`` address (each ADK user an elastimem user there). An ADK
``(app_name, user_id)`` is the elastimem user ``<app_name>.<user_id>``: an app name has no
``.``, so two pairs never share a store, and ``elastimem --user pal.alice`` reads the memory
ADK wrote. Stores open on first use and stay open until ``close()``.

What a session said is stored as elastimem turns (a user message with the agent's answer), so
``recall``, ``build_context``, export and erase see it. Each ingestion (a whole session, or a
delta of its events) becomes one elastimem session whose ``host_tag`` records the ADK session
and the last event stored, so adding a session again stores only the events after that one:
adding the same session twice stores it once. Explicit memories (``add_memory``) are facts.

A search returns ``MemoryEntry`` items whose ``id`` names what ``delete_memory`` removes:
``fact/<key>`` forgets that fact (its history is kept, as ``forget``), and
``session/<n>/chunk/<m>`` erases the exchanges stored with that ingestion (erase works on
whole elastimem sessions; an ingestion per turn, as ADK's after-agent callbacks do, makes that
one exchange). The deleted events are not stored again when their session is added again.

``register()`` adds the ``elastimem://`` scheme to ADK's service registry, so ``adk web
--memory_service_uri=elastimem:///path/to/folder`` works from an agents folder whose
``services.py`` calls it (or whose ``services.yaml`` names this class; it takes ``uri=``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from google.adk.events.event import Event
from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

import elastimem
from elastimem import ConfigError, Elastimem, Hit, StoreError

SCHEME = "elastimem"
APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# Recall hits a search returns: ADK's own services return up to ten, and PreloadMemoryTool
# puts every one into the prompt.
SEARCH_K = 5
# Seconds an ingestion waits for its turns to be indexed (embedded), so the next search finds
# them by meaning; they are stored before the wait either way.
INDEX_WAIT_SECONDS = 5.0
TAG_KEY = "adk_session"


def target_of_uri(uri: str) -> str:
    """The folder or ``postgresql://`` address an ``elastimem://`` URI names."""
    prefix = f"{SCHEME}://"
    if not isinstance(uri, str) or not uri.startswith(prefix) or not uri[len(prefix) :]:
        raise ValueError(
            f"{uri!r} is not an elastimem memory URI; write elastimem:///path/to/folder "
            "or elastimem://postgresql://user@host/db"
        )
    return uri[len(prefix) :]


def user_of(app_name: str, user_id: str) -> str:
    """The elastimem user that holds an ADK app's user's memory."""
    if not isinstance(app_name, str) or not APP_NAME.fullmatch(app_name):
        raise ConfigError(
            f"app_name={app_name!r} is invalid; use 1-64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    if not isinstance(user_id, str):
        raise ConfigError(f"user_id={user_id!r} is invalid; pass a string")
    return f"{app_name}.{user_id}"


def event_text(event: Event) -> str:
    """The text an event says (thoughts, calls and their results left out)."""
    content = event.content
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text and not p.thought)


def _moment(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc)


def _turns(events: Sequence[Event]) -> list[tuple[str, str, datetime]]:
    """``(user text, agent text, when)``: each user message with the answer after it."""
    turns: list[tuple[str, str, datetime]] = []
    user: list[str] = []
    user_at: float | None = None
    for event in events:
        text = event_text(event)
        if not text:
            continue
        if event.author == "user":
            user.append(text)
            user_at = event.timestamp if user_at is None else user_at
            continue
        turns.append(("\n".join(user), text, _moment(user_at or event.timestamp)))
        user, user_at = [], None
    if user:
        turns.append(("\n".join(user), "", _moment(user_at or 0.0)))
    return turns


def _tag(session_id: str, last: Event) -> str:
    return json.dumps({TAG_KEY: session_id, "event": last.id, "ts": last.timestamp})


def _watermark(mem: Elastimem, session_id: str) -> tuple[str, float] | None:
    """The newest event of ``session_id`` already stored: its id and timestamp."""
    best: tuple[str, float] | None = None
    for row in mem.sessions(1 << 30):
        tag = row.get("host_tag")
        if not isinstance(tag, str) or not tag.startswith('{"' + TAG_KEY):
            continue
        try:
            mark = json.loads(tag)
        except ValueError:
            continue
        if mark.get(TAG_KEY) == session_id and (best is None or mark["ts"] > best[1]):
            best = (str(mark["event"]), float(mark["ts"]))
    return best


def _new_events(events: Sequence[Event], mark: tuple[str, float] | None) -> list[Event]:
    """The events after the watermark: after its event when that is among them, else the ones
    stamped later (a delta that does not hold it)."""
    if mark is None:
        return list(events)
    ids = [e.id for e in events]
    if mark[0] in ids:
        return list(events[ids.index(mark[0]) + 1 :])
    return [e for e in events if e.timestamp > mark[1]]


def _entry(hit: Hit) -> MemoryEntry:
    if hit.kind == "fact":
        key = hit.text.split(": ", 1)[0]
        memory_id, author = f"fact/{key}", "user"
    else:
        memory_id, author = f"session/{hit.session_id}/chunk/{hit.id}", "conversation"
    return MemoryEntry(
        id=memory_id,
        author=author,
        timestamp=hit.created_at or hit.date,
        content=types.Content(role="user", parts=[types.Part(text=hit.text)]),
        custom_metadata={"kind": hit.kind, "score": hit.score, "session_id": hit.session_id},
    )


class ElastimemMemoryService(BaseMemoryService):
    """A ``BaseMemoryService`` that keeps each ADK user's memory in an elastimem store."""

    def __init__(
        self,
        target: str | os.PathLike[str] | None = None,
        *,
        uri: str | None = None,
        k: int = SEARCH_K,
        index_wait: float = INDEX_WAIT_SECONDS,
        **open_kw: Any,
    ) -> None:
        open_kw.pop("agents_dir", None)  # what ADK's registry passes every factory
        if (target is None) == (uri is None):
            raise ConfigError("pass exactly one of target (a folder or address) and uri=")
        self.target = os.fspath(target) if target is not None else target_of_uri(str(uri))
        if "://" not in self.target:
            self.target = os.path.expanduser(self.target)
        self.k = k
        self.index_wait = index_wait
        self._open_kw = open_kw
        self._stores: dict[str, Elastimem] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # -- stores ------------------------------------------------------------------------------

    def store(self, app_name: str, user_id: str, *, create: bool = True) -> Elastimem | None:
        """The open store of an app's user (None when ``create`` is False and there is none)."""
        user = user_of(app_name, user_id)
        with self._guard:
            mem = self._stores.get(user)
            if mem is None:
                try:
                    mem = elastimem.open_user(self.target, user, create=create, **self._open_kw)
                except StoreError:
                    if create:
                        raise
                    return None
                self._stores[user] = mem
                self._locks[user] = threading.Lock()
            return mem

    def _lock(self, app_name: str, user_id: str) -> threading.Lock:
        with self._guard:
            return self._locks[user_of(app_name, user_id)]

    def close(self) -> None:
        """Close every store this service opened."""
        with self._guard:
            stores, self._stores = list(self._stores.values()), {}
        for mem in stores:
            mem.close()

    # -- writing -----------------------------------------------------------------------------

    def _ingest(
        self, app_name: str, user_id: str, session_id: str, events: Sequence[Event]
    ) -> None:
        mem = self.store(app_name, user_id)
        assert mem is not None
        with self._lock(app_name, user_id):
            new = _new_events(events, _watermark(mem, session_id))
            if not new:
                return
            mem.begin_session(_tag(session_id, new[-1]), at=_moment(new[0].timestamp))
            for user_text, agent_text, at in _turns(new):
                mem.record_turn(user_text, agent_text, at=at)
            mem.end_session(wait=False)
        if self.index_wait > 0:
            mem.drain(self.index_wait)

    async def add_session_to_memory(self, session: Session) -> None:
        await asyncio.to_thread(
            self._ingest, session.app_name, session.user_id, session.id, list(session.events)
        )

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store a delta of a session's events (those after the last one stored)."""
        await asyncio.to_thread(self._ingest, app_name, user_id, session_id or "", list(events))

    def _remember(self, app_name: str, user_id: str, memories: Sequence[MemoryEntry]) -> None:
        entries = []
        for memory in memories:
            if not isinstance(memory, MemoryEntry):
                raise TypeError(f"memories must hold MemoryEntry items, not {memory!r}")
            text = "\n".join(p.text for p in memory.content.parts or [] if p.text)
            if not text.strip():
                raise ValueError(f"memory {memory.id!r} has no text to store")
            key = memory.id or "memory_" + hashlib.sha256(text.encode()).hexdigest()[:12]
            entries.append((key, text))
        mem = self.store(app_name, user_id)
        assert mem is not None
        for key, text in entries:  # every entry checked before the first is stored
            changed, reason = mem.remember(key, text)
            if not changed and reason != "already stored":
                raise ValueError(f"memory {key!r} was not stored: {reason}")
        if self.index_wait > 0:
            mem.drain(self.index_wait)

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store explicit memories as facts (key: the entry's id, else a hash of its text)."""
        await asyncio.to_thread(self._remember, app_name, user_id, list(memories))

    # -- reading and deleting ----------------------------------------------------------------

    def _search(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        mem = self.store(app_name, user_id, create=False)
        if mem is None:
            return SearchMemoryResponse()
        return SearchMemoryResponse(memories=[_entry(h) for h in mem.recall(query, self.k)])

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        return await asyncio.to_thread(self._search, app_name, user_id, query)

    def _delete(self, app_name: str, user_id: str, memory_id: str) -> None:
        parts = memory_id.split("/")
        if len(parts) == 2 and parts[0] == "fact" and parts[1]:
            kind = "fact"
        elif len(parts) == 4 and parts[0] == "session" and parts[1].isdigit():
            kind = "session"
        else:
            raise ValueError(
                f"memory_id={memory_id!r} is not an id search_memory returned "
                "(fact/<key> or session/<n>/chunk/<m>)"
            )
        mem = self.store(app_name, user_id, create=False)
        if mem is None:
            return
        if kind == "fact":
            mem.forget(parts[1])
            return
        session_number = int(parts[1])
        with self._lock(app_name, user_id):
            tag = next(
                (r.get("host_tag") for r in mem.sessions(1 << 30) if r["id"] == session_number),
                None,
            )
            if tag is None:
                return  # already gone: as ADK's own services, deleting nothing is no error
            mem.erase(session_id=session_number)
            if isinstance(tag, str) and tag.startswith('{"' + TAG_KEY):
                # Keep the watermark in an empty session, so adding the ADK session again does
                # not store the deleted events again.
                mem.begin_session(tag)
                mem.end_session(wait=False)

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        if not memory_id:
            return
        await asyncio.to_thread(self._delete, app_name, user_id, memory_id)


def _factory(uri: str, **kwargs: Any) -> ElastimemMemoryService:
    return ElastimemMemoryService(uri=uri, **kwargs)


def register(registry: Any = None) -> None:
    """Add the ``elastimem://`` scheme to ADK's service registry (the process's own by
    default): call it from the agents folder's ``services.py``."""
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    registry.register_memory_service(SCHEME, _factory)


__all__ = ["ElastimemMemoryService", "register", "target_of_uri", "user_of"]
