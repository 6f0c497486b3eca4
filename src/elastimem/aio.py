"""``elastimem.aio``: the same store for asyncio hosts, without blocking the event loop.

mem = await elastimem.aio.open("memory.db")
async with mem:
    plan = await mem.build_context(user_text)
    await mem.record_turn(user_text, reply)

``AsyncElastimem`` holds an ``Elastimem`` and runs each call on a small thread pool of its
own, so SQLite, the embedder and waits on the worker never run on the loop, and one store's
slow call (a drain waiting on an LLM) never holds up another store's. Every public method
of ``Elastimem`` is here as a coroutine of the same name and parameters, derived from the
sync one (``_twin``), so there is one implementation of each; attributes (``path``,
``config``, ``profile``, ``session_id``…) are plain attributes. Cancelling an awaiting
task does not stop the call already running in its thread: it completes, unobserved.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from .config import ElastimemConfig
from .errors import ClosedError, ConfigError
from .governor import MemoryProfile
from .storage.addresses import refuse_database_url
from .store import Elastimem

P = ParamSpec("P")
R = TypeVar("R")

# Threads per store: reads run side by side under WAL while a write or a drain waits, and
# a store never takes more than this many threads however many requests queue on it.
THREADS_PER_STORE = 4


def check_target(path: object) -> None:
    """Refuse an address that names no store (a ``scheme://`` other than PostgreSQL's),
    before a thread starts for it."""
    refuse_database_url(path)


def _twin(
    method: Callable[Concatenate[Elastimem, P], R],
) -> Callable[Concatenate[AsyncElastimem, P], Coroutine[Any, Any, R]]:
    """The coroutine twin of an ``Elastimem`` method: same name, parameters and docstring;
    it runs the sync method on the store's threads."""
    name = method.__name__

    async def twin(self: AsyncElastimem, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(getattr(self._mem, name), *args, **kwargs)

    twin.__name__ = name
    twin.__qualname__ = f"AsyncElastimem.{name}"
    twin.__doc__ = method.__doc__
    twin.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return twin


class AsyncElastimem:
    """An ``Elastimem`` for asyncio: every method is a coroutine run off the event loop."""

    def __init__(self, mem: Elastimem, *, threads: int = THREADS_PER_STORE) -> None:
        if not isinstance(mem, Elastimem):
            raise ConfigError(f"mem={mem!r} is invalid; pass an open Elastimem")
        self._mem = mem
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="elastimem-aio")
        # foreground_begin/end must run on one thread (the LLM lock belongs to a thread),
        # and begin may wait for a background LLM call: a thread of their own.
        self._foreground_thread: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()

    @property
    def sync(self) -> Elastimem:
        """The ``Elastimem`` this delegates to, for code that already runs in a thread."""
        return self._mem

    async def _run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        return await self._submit(self._executor, fn, *args, **kwargs)

    async def _submit(
        self, executor: ThreadPoolExecutor, fn: Callable[..., R], *args: Any, **kwargs: Any
    ) -> R:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        try:
            future = loop.run_in_executor(executor, call)
        except RuntimeError:  # the pool was shut down by close()
            raise ClosedError(
                "this Elastimem store is closed; open a new instance to use it"
            ) from None
        return await future

    # -- attributes (plain, as on Elastimem) -------------------------------------------------

    @property
    def path(self) -> str:
        return self._mem.path

    @property
    def user_id(self) -> str | None:
        """Whose memory this instance serves (``Elastimem.user_id``)."""
        return self._mem.user_id

    @property
    def set_aside(self) -> str | None:
        """Where opening moved a damaged store file aside, else None (``Elastimem.set_aside``)."""
        return self._mem.set_aside

    @property
    def complete_fn(self) -> Callable[..., str] | None:
        return self._mem.complete_fn

    @complete_fn.setter
    def complete_fn(self, fn: Callable[..., str] | None) -> None:
        self._mem.complete_fn = fn

    @property
    def embed_fn(self) -> Callable[[list[str]], Any] | None:
        return self._mem.embed_fn

    @property
    def embed_query_fn(self) -> Callable[[str], Any] | None:
        return self._mem.embed_query_fn

    @property
    def tokenizer_fn(self) -> Callable[[str], int] | None:
        return self._mem.tokenizer_fn

    @property
    def fts_enabled(self) -> bool:
        return self._mem.fts_enabled

    @property
    def session_id(self) -> int | None:
        return self._mem.session_id

    @property
    def config(self) -> ElastimemConfig:
        return self._mem.config

    @property
    def profile(self) -> MemoryProfile:
        return self._mem.profile

    def __repr__(self) -> str:
        return f"<AsyncElastimem {self._mem!r}>"

    async def __aenter__(self) -> AsyncElastimem:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- methods: twins of Elastimem's ------------------------------------------------------

    add_lesson = _twin(Elastimem.add_lesson)
    begin_session = _twin(Elastimem.begin_session)
    build_context = _twin(Elastimem.build_context)
    clusters = _twin(Elastimem.clusters)
    discard_quarantined = _twin(Elastimem.discard_quarantined)
    drain = _twin(Elastimem.drain)
    end_session = _twin(Elastimem.end_session)
    erase = _twin(Elastimem.erase)
    explain = _twin(Elastimem.explain)
    export = _twin(Elastimem.export)
    fact_history = _twin(Elastimem.fact_history)
    fact_origins = _twin(Elastimem.fact_origins)
    facts = _twin(Elastimem.facts)
    forget = _twin(Elastimem.forget)
    has_vectors = _twin(Elastimem.has_vectors)
    holds_memories_outside = _twin(Elastimem.holds_memories_outside)
    import_ = _twin(Elastimem.import_)
    lessons = _twin(Elastimem.lessons)
    pending = _twin(Elastimem.pending)
    promote_quarantined = _twin(Elastimem.promote_quarantined)
    quarantine_entry = _twin(Elastimem.quarantine_entry)
    quarantine_page = _twin(Elastimem.quarantine_page)
    quarantine_entries = _twin(Elastimem.quarantine_entries)
    recall = _twin(Elastimem.recall)
    reconfigure = _twin(Elastimem.reconfigure)
    record_turn = _twin(Elastimem.record_turn)
    reindex = _twin(Elastimem.reindex)
    remember = _twin(Elastimem.remember)
    render_graph = _twin(Elastimem.render_graph)
    report_evictions = _twin(Elastimem.report_evictions)
    report_pressure = _twin(Elastimem.report_pressure)
    resume_session = _twin(Elastimem.resume_session)
    session_info = _twin(Elastimem.session_info)
    session_page = _twin(Elastimem.session_page)
    session_turns = _twin(Elastimem.session_turns)
    sessions = _twin(Elastimem.sessions)
    stats = _twin(Elastimem.stats)
    summary = _twin(Elastimem.summary)
    tick = _twin(Elastimem.tick)
    timeline = _twin(Elastimem.timeline)
    warm_up = _twin(Elastimem.warm_up)

    # -- foreground: begin and end on one thread of their own --------------------------------

    def _foreground_executor(self) -> ThreadPoolExecutor:
        with self._guard:
            if self._foreground_thread is None:
                self._foreground_thread = ThreadPoolExecutor(
                    1, thread_name_prefix="elastimem-aio-foreground"
                )
            return self._foreground_thread

    async def foreground_begin(self) -> None:
        await self._submit(self._foreground_executor(), self._mem.foreground_begin)

    async def foreground_end(self) -> None:
        await self._submit(self._foreground_executor(), self._mem.foreground_end)

    def foreground(self) -> Any:
        """``async with mem.foreground():`` holds off background LLM calls while the host's
        own model generates (the block of ``Elastimem.foreground``)."""
        self._mem._check_open()  # now, not when the block is entered (as the sync one)
        return self._foreground()

    @asynccontextmanager
    async def _foreground(self) -> AsyncIterator[None]:
        await self.foreground_begin()
        try:
            yield
        finally:
            await self.foreground_end()

    # -- close -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Drain briefly, stop the worker, persist state and close every connection."""
        try:
            await self._run(self._mem.close)
        except ClosedError:
            pass  # closed already: the pool is gone, and so is the store
        finally:
            with self._guard:
                executors = [self._executor, self._foreground_thread]
            for executor in executors:
                if executor is not None:
                    # Calls still queued run and meet the closed store (ClosedError), so
                    # their callers see why; the idle threads then exit.
                    executor.shutdown(wait=False)


async def open(  # noqa: A001 - the documented entry point, as elastimem.open
    path: str | os.PathLike[str], **kw: Any
) -> AsyncElastimem:
    """Open (or create) a store off the event loop: ``Elastimem(path, **kw)``, async."""
    check_target(path)
    mem = await asyncio.to_thread(Elastimem, path, **kw)
    return AsyncElastimem(mem)


async def open_user(root_dir: str | os.PathLike[str], user_id: str, **kw: Any) -> AsyncElastimem:
    """Open ``<root_dir>/<user_id>.db`` off the event loop, as ``elastimem.open_user``."""
    from .users import open_user as open_user_sync

    check_target(root_dir)
    mem = await asyncio.to_thread(open_user_sync, root_dir, user_id, **kw)
    return AsyncElastimem(mem)


__all__ = ["AsyncElastimem", "open", "open_user"]
