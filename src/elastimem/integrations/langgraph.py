"""elastimem as LangGraph's long-term store and as a LangChain agent's memory (extra ``langgraph``).

store = ElastimemStore("~/.local/share/myagent/users")      # or "postgresql://..."
graph = builder.compile(store=store)                          # or create_agent(..., store=store)
agent = create_agent(model, tools, middleware=[ElastimemMiddleware(mem)])

``ElastimemStore`` is a ``langgraph.store.base.BaseStore``: each namespace belongs to one
elastimem user (``user_of(namespace)``, by default its first label), whose store is opened from
the TARGET on first use; each item is one fact of that store (``_store_items`` tells how), so
what an agent stores is an ordinary memory that recall, build_context, ``facts``/history,
export and erase see through the API, the CLI, MCP and REST. ``search`` with a ``query`` ranks
by elastimem's recall (meaning and keywords) within the prefix; items recall does not rank
follow with ``score=None``, so a search still lists everything under its prefix.

``ElastimemMiddleware`` puts ``build_context()`` of the latest user message into the system
message of every model call and records the exchange with ``record_turn()`` when the agent
has answered. One LangGraph thread (``thread_id``, whose messages a checkpointer carries) is
one elastimem session; a run without a thread is a session of its own, ended when the agent
answers, because build_context leaves the current session's turns to the host's messages.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Iterable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langgraph.config import get_config
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

import elastimem
from elastimem.aio import AsyncElastimem

from . import _store_items as items
from ._targets import UserStores

# langgraph >= 1.2.x checks the labels of ops handed to batch() directly, as its own stores
# do; older releases check them in put/get/search only.
validate_op_namespace: Callable[[Op], None] | None = getattr(
    importlib.import_module("langgraph.store.base"), "validate_op_namespace", None
)

__all__ = ["ElastimemMiddleware", "ElastimemStore"]

Decoded = tuple[tuple[str, ...], str, dict[str, Any]]

# How long a search waits for the embedder to load (once per store: the built-in model's
# first load converts it, ~20 s of CPU) and then for this process's queued embeddings of
# just-put items, so that what was put is found by meaning by the very next search.
WARM_UP_SECONDS = 120.0
DRAIN_SECONDS = 30.0


def first_label(namespace: tuple[str, ...]) -> str:
    """The default ``user_of``: ``("alice", "memories")`` belongs to user ``alice``."""
    return namespace[0]


class ElastimemStore(BaseStore):
    """A LangGraph store whose items are facts of one elastimem store per user.

    ``target`` is a folder (one SQLite file per user) or a ``postgresql://`` address;
    ``open_kw`` go to ``elastimem.open_user`` (``embedder=``, ``llm=``, options). Close it
    (or use it as a context manager) to close the stores it opened.
    """

    supports_ttl = False

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        user_of: Callable[[tuple[str, ...]], str] | None = None,
        **open_kw: Any,
    ) -> None:
        self._stores = UserStores(target, **open_kw)
        self._user_of = user_of or first_label
        # fact value text -> its decoded item, per user and fact key: a search reads every
        # item of the user, and parsing 10k JSON texts on each would cost more than the read.
        self._decoded: dict[tuple[str, str], tuple[str, Decoded | None]] = {}
        self._warm: set[int] = set()  # id() of the stores whose embedder is ready

    def __enter__(self) -> ElastimemStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stores.close()

    def store_of(self, namespace: tuple[str, ...]) -> elastimem.Elastimem:
        """The elastimem store holding ``namespace`` (opened, or created, on first use)."""
        mem = self._stores.get(self._user(namespace))
        assert mem is not None  # get() without existing=True always opens
        return mem

    # -- BaseStore ---------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if validate_op_namespace is not None:
            for op in ops:
                validate_op_namespace(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise ValueError(f"unknown operation type {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # The stores' calls block (SQLite, the embedder); run them off the event loop.
        return await asyncio.to_thread(self.batch, list(ops))

    # -- operations --------------------------------------------------------------------------

    def _user(self, namespace: tuple[str, ...]) -> str:
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        user = self._user_of(namespace)
        if not isinstance(user, str):
            raise InvalidNamespaceError(f"user_of{namespace} gave {user!r}, not a user id")
        return user

    def _existing(self, user: str) -> elastimem.Elastimem | None:
        try:
            return self._stores.get(user, existing=True)
        except elastimem.ConfigError as exc:
            raise InvalidNamespaceError(f"{exc} (the user of a namespace)") from exc

    def _get(self, op: GetOp) -> Item | None:
        mem = self._existing(self._user(op.namespace))
        if mem is None:
            return None
        return self._item(mem, items.fact_key(op.namespace, op.key), op.namespace, op.key)

    def _item(
        self,
        mem: elastimem.Elastimem,
        fact_key: str,
        namespace: tuple[str, ...],
        key: str,
        score: float | None = None,
        *,
        searched: bool = False,
    ) -> Item | None:
        """The item kept under ``fact_key``, dated by its fact's versions: created when the
        current run of versions began (a delete ends a run), updated with the live one."""
        started: elastimem.Fact | None = None
        live: elastimem.Fact | None = None
        for version in sorted(mem.fact_history(fact_key), key=lambda fact: fact.id):
            started = started or version
            if version.invalidated_at is None:
                live = version
            elif version.invalidated_by is None:  # ended by a delete: a later put starts anew
                started = None
        if live is None or started is None:
            return None
        decoded = items.decode(live.value)
        if decoded is None or decoded[:2] != (namespace, key):
            return None
        created = items.parse_time(started.created_at or started.valid_from)
        updated = items.parse_time(live.created_at or live.valid_from)
        if searched:
            return SearchItem(namespace, key, decoded[2], created, updated, score)
        return Item(value=decoded[2], key=key, namespace=namespace, created_at=created,
                    updated_at=updated)  # fmt: skip

    def _put(self, op: PutOp) -> None:
        user = self._user(op.namespace)
        fact_key = items.fact_key(op.namespace, op.key)
        if op.value is None:
            mem = self._existing(user)
            if mem is not None:
                mem.forget(fact_key)
            return
        text = items.encode(op.namespace, op.key, op.value)  # TypeError/ValueError: nothing written
        try:
            mem = self._stores.get(user)
        except elastimem.ConfigError as exc:
            raise InvalidNamespaceError(f"{exc} (the user of a namespace)") from exc
        assert mem is not None
        changed, reason = mem.remember(fact_key, text, "explicit")
        if not changed and reason != "already stored":
            raise ValueError(f"elastimem did not store {op.namespace}/{op.key!r}: {reason}")

    def _stores_for(self, prefix: tuple[str, ...]) -> list[tuple[str, elastimem.Elastimem]]:
        """(user, store) for each user a prefix can reach: the one it names, or every user
        (``UserStores.users``) when it names none."""
        if prefix:
            try:
                user = self._user(prefix)
            except (IndexError, KeyError):  # a user_of that needs more labels than given
                pass
            else:
                mem = self._existing(user)
                return [] if mem is None else [(user, mem)]
        return self._every_store()

    def _every_store(self) -> list[tuple[str, elastimem.Elastimem]]:
        found = []
        for user in self._stores.users():
            try:
                mem = self._existing(user)
            except InvalidNamespaceError:  # a file in the folder that is no user's store
                continue
            if mem is not None:
                found.append((user, mem))
        return found

    def _decode(self, user: str, fact_key: str, text: str) -> Decoded | None:
        """The item a fact of ``user``'s store holds, or None for any other fact (cached per
        fact key and text: a listing decodes every item of the user)."""
        cached = self._decoded.get((user, fact_key))
        if cached is not None and cached[0] == text:
            return cached[1]
        decoded = items.decode(text)
        if decoded is not None and (
            items.fact_key(*decoded[:2]) != fact_key  # a fact that only looks like an item
            or not self._owned_by(decoded[0], user)  # read back only from its own user's store
        ):
            decoded = None
        self._decoded[(user, fact_key)] = (text, decoded)
        return decoded

    def _items_of(self, user: str, mem: elastimem.Elastimem) -> dict[str, Decoded]:
        """fact key -> (namespace, key, value) of every item in the user's store, in
        ``facts()`` order (most recently updated first)."""
        found: dict[str, Decoded] = {}
        for fact_key, text in mem.facts().items():
            decoded = self._decode(user, fact_key, text)
            if decoded is not None:
                found[fact_key] = decoded
        return found

    def _owned_by(self, namespace: tuple[str, ...], user: str) -> bool:
        try:
            return bool(namespace) and self._user_of(namespace) == user
        except Exception:  # noqa: BLE001 - a namespace user_of cannot place is nobody's
            return False

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0:
            return []
        want = op.offset + op.limit

        def wanted(decoded: Decoded) -> bool:
            return items.has_prefix(decoded[0], op.namespace_prefix) and items.matches_filter(
                decoded[2], op.filter
            )

        found: list[tuple[float | None, int, elastimem.Elastimem, str, Decoded]] = []
        for user, mem in self._stores_for(op.namespace_prefix):
            ranked = self._ranked(user, mem, op.query, wanted, want) if op.query else {}
            rows: list[tuple[float | None, str, Decoded]] = [
                (score, fact_key, decoded) for fact_key, (score, decoded) in ranked.items()
            ]
            if len(rows) < want:  # then the prefix's other items, unranked (a full listing)
                rows += [
                    (None, fact_key, decoded)
                    for fact_key, decoded in self._items_of(user, mem).items()
                    if fact_key not in ranked and wanted(decoded)
                ][: want - len(rows)]
            found += [(score, n, mem, key, dec) for n, (score, key, dec) in enumerate(rows)]
        # Ranked first by score, then each store's own order (one store: exactly its order).
        found.sort(key=lambda row: (row[0] is None, -(row[0] or 0.0), row[1]))
        results: list[SearchItem] = []
        for score, _position, mem, fact_key, (namespace, key, _value) in found[op.offset : want]:
            item = self._item(mem, fact_key, namespace, key, score, searched=True)
            if isinstance(item, SearchItem):  # deleted since it was listed: left out
                results.append(item)
        return results

    def _ranked(
        self,
        user: str,
        mem: elastimem.Elastimem,
        query: str,
        wanted: Callable[[Decoded], bool],
        want: int,
    ) -> dict[str, tuple[float, Decoded]]:
        """fact key -> (recall score, item) for the wanted items recall ranks, best first.
        Recall over the user's facts is asked for more until ``want`` of them are ranked or
        it has no more; a hit's text is ``key: value``, so no listing is read for them."""
        if id(mem) not in self._warm:
            mem.warm_up(WARM_UP_SECONDS)  # False with no embedder at all: keywords only
            self._warm.add(id(mem))
        if mem.pending():
            mem.drain(DRAIN_SECONDS)  # the embeddings of items just put
        # Recall ranks at most ~40 facts per query (20 candidates per leg), so one call
        # usually answers; a larger page asks for more until recall has no more to give.
        k = max(4 * want, 64)
        while True:
            hits = mem.recall(query, k, kinds=["fact"])
            ranked: dict[str, tuple[float, Decoded]] = {}
            for hit in hits:
                fact_key, _, text = hit.text.partition(": ")
                decoded = self._decode(user, fact_key, text)
                if decoded is not None and wanted(decoded) and fact_key not in ranked:
                    ranked[fact_key] = (hit.score, decoded)
            if len(ranked) >= want or len(hits) < k:
                return ranked
            k *= 4

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix: tuple[str, ...] = ()
        if self._user_of is first_label:  # a concrete first label names the one user to read
            for condition in conditions:
                if condition.match_type == "prefix" and condition.path and condition.path[0] != "*":
                    prefix = (condition.path[0],)
        namespaces: set[tuple[str, ...]] = set()
        for user, mem in self._stores_for(prefix):
            for namespace, _key, _value in self._items_of(user, mem).values():
                if all(items.matches_condition(namespace, c.match_type, tuple(c.path))
                       for c in conditions):  # fmt: skip
                    namespaces.add(namespace[: op.max_depth] if op.max_depth else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]


# -- the agent middleware ------------------------------------------------------------------------

Memory = elastimem.Elastimem | AsyncElastimem


class ElastimemMiddleware(AgentMiddleware):
    """Long-term memory for a LangChain 1.x agent in one line.

    ``ElastimemMiddleware(mem)`` with an open ``Elastimem`` or ``AsyncElastimem``; or, for many
    users, ``ElastimemMiddleware(target, user_of=lambda runtime: runtime.context["user_id"])``
    with a folder or ``postgresql://`` address. Before each model call the system message gets
    ``build_context()`` of the latest user message; after the agent's answer, the exchange is
    recorded with ``record_turn()``.
    """

    def __init__(
        self,
        mem: Memory | str | os.PathLike[str],
        *,
        user_of: Callable[[Any], str] | None = None,
        **open_kw: Any,
    ) -> None:
        super().__init__()
        self._mem: Memory | None = None
        self._stores: UserStores | None = None
        if isinstance(mem, (elastimem.Elastimem, AsyncElastimem)):
            self._mem = mem
        elif user_of is None:
            raise elastimem.ConfigError(
                "a folder or address needs user_of=(runtime -> user id) to name the user"
            )
        else:
            self._stores = UserStores(mem, **open_kw)
        self._user_of = user_of
        self._threads: dict[int, str | None] = {}  # id(store) -> the thread its session is for

    def close(self) -> None:
        """Close the stores this middleware opened (not a store handed to it)."""
        if self._stores is not None:
            self._stores.close()

    def _memory(self, runtime: Any) -> Memory:
        if self._mem is not None:
            return self._mem
        assert self._stores is not None and self._user_of is not None
        mem = self._stores.get(self._user_of(runtime))
        assert mem is not None
        return mem

    # -- sessions: one per LangGraph thread ----------------------------------------------

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        mem = self._memory(runtime)
        if isinstance(mem, AsyncElastimem):
            raise TypeError("an AsyncElastimem serves async agents: call ainvoke/astream")
        thread = _thread_id()
        if thread is None or self._threads.get(id(mem)) != thread:
            # Another conversation's session (or any, for a run without a thread): its turns
            # are past now, for build_context to recall.
            mem.end_session(wait=False)
            if thread is not None:
                mem.begin_session(f"langgraph thread {thread}")
            self._threads[id(mem)] = thread
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        mem = self._memory(runtime)
        thread = _thread_id()
        if thread is None or self._threads.get(id(mem)) != thread:
            await _call(mem, "end_session", wait=False)
            if thread is not None:
                await _call(mem, "begin_session", f"langgraph thread {thread}")
            self._threads[id(mem)] = thread
        return None

    # -- before the model call ---------------------------------------------------------------

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        mem = self._memory(request.runtime)
        if isinstance(mem, AsyncElastimem):
            raise TypeError("an AsyncElastimem serves async agents: call ainvoke/astream")
        query = _latest_text(request.messages, HumanMessage)
        return handler(_with_memory(request, mem.build_context(query).render()))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        mem = self._memory(request.runtime)
        plan = await _call(mem, "build_context", _latest_text(request.messages, HumanMessage))
        return await handler(_with_memory(request, plan.render()))

    # -- after the answer --------------------------------------------------------------------

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        mem = self._memory(runtime)
        if isinstance(mem, AsyncElastimem):
            raise TypeError("an AsyncElastimem serves async agents: call ainvoke/astream")
        turn = _last_exchange(state["messages"])
        if turn is not None:
            mem.record_turn(*turn)
        if _thread_id() is None:  # a run of its own: its session ends with it
            mem.end_session(wait=False)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        mem = self._memory(runtime)
        turn = _last_exchange(state["messages"])
        if turn is not None:
            await _call(mem, "record_turn", *turn)
        if _thread_id() is None:
            await _call(mem, "end_session", wait=False)
        return None


async def _call(mem: Memory, name: str, *args: Any, **kwargs: Any) -> Any:
    """``mem.<name>(...)`` off the event loop, whichever kind of store ``mem`` is."""
    if isinstance(mem, AsyncElastimem):
        return await getattr(mem, name)(*args, **kwargs)
    return await asyncio.to_thread(getattr(mem, name), *args, **kwargs)


def _thread_id() -> str | None:
    """The ``thread_id`` of the running graph's config, None outside a thread."""
    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # not inside a runnable context
        return None
    return None if thread is None else str(thread)


def _latest_text(messages: list[AnyMessage], kind: type) -> str:
    for message in reversed(messages):
        if isinstance(message, kind):
            return str(message.text)
    return ""


def _with_memory(request: Any, block: str) -> Any:
    """The request with the memory block after the agent's own system prompt."""
    if not block:
        return request
    own = request.system_message.text if request.system_message is not None else ""
    text = f"{own}\n\n{block}" if own else block
    return request.override(system_message=SystemMessage(content=text))


def _last_exchange(messages: list[AnyMessage]) -> tuple[str, str] | None:
    """(user text, answer text) of the run that just ended: the last user message and the
    last AI message after it with text (tool calls alone are not an answer)."""
    answer = ""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and not answer and str(message.text).strip():
            answer = str(message.text)
        elif isinstance(message, HumanMessage):
            text = str(message.text)
            return (text, answer) if answer and text.strip() else None
    return None
