"""Open stores, one per user, kept in an LRU with a bound.

``lease(user_id)`` yields the user's ``AsyncElastimem``, opening it on first use (two
requests racing to open the same user share one open). A store is closed when it falls out
of the LRU, but never while a lease on it is held: with every open store leased, the pool
runs over its bound until leases end. A user whose store is closing waits for the close
before it is opened again. ``close_all()`` (shutdown) waits for the leases, then closes
everything.

``open_store`` is the one place that turns the service's TARGET and a user id into a store
(``open_user``): a folder holds one SQLite file per user; on a PostgreSQL server every user's
rows share one schema, each store confined to its user. ``prepare_target`` checks the TARGET
once at start, so an unreachable server or a schema the role cannot create is one error
before serving, not a 503 on every user's first request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from .. import aio
from ..errors import ConfigError
from ..storage.addresses import is_postgres_url

logger = logging.getLogger("elastimem")

DEFAULT_MAX_OPEN = 64


def check_target(target: str) -> str:
    """The TARGET when this version can serve it (a folder with ``~`` expanded, or a
    PostgreSQL address as given), else ``ConfigError``. Touches no server."""
    aio.check_target(target)
    if not target or "\x00" in target:
        raise ConfigError("--db is empty; pass the folder that holds the users' stores")
    if is_postgres_url(target):
        return target
    path = os.path.expanduser(target)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(
            f"{target} is a file; elastimem serve needs a folder (one store per user in it)"
        )
    return path


def prepare_target(target: str) -> str:
    """Check TARGET before serving and say where the stores are, for the start line: "under
    <absolute folder>", or "on <address without its password>" once the PostgreSQL server has
    answered and holds the current schema (created if missing). ``ConfigError`` or
    ``StoreError`` otherwise, in one sentence that never shows the password."""
    checked = check_target(target)
    if is_postgres_url(checked):
        from ..storage.postgres.database import prepare_server  # psycopg only when asked for

        return f"on {prepare_server(checked)}"
    return f"under {os.path.abspath(checked)}"


async def open_store(target: str, user_id: str, **kw: Any) -> aio.AsyncElastimem:
    """The store of ``user_id`` under TARGET (a folder of per-user SQLite files, or a
    PostgreSQL address)."""
    return await aio.open_user(check_target(target), user_id, **kw)


class StoreUnavailable(Exception):
    """The user's store cannot be had now (shutting down, or it failed to open: logged)."""


class _Entry:
    __slots__ = ("leases", "store")

    def __init__(self, store: aio.AsyncElastimem) -> None:
        self.store = store
        self.leases = 0


class StorePool:
    def __init__(
        self,
        opener: Callable[[str], Awaitable[aio.AsyncElastimem]],
        max_open: int = DEFAULT_MAX_OPEN,
    ) -> None:
        if max_open < 1:
            raise ConfigError(f"max_open={max_open!r} is invalid; keep at least one store open")
        self._opener = opener
        self.max_open = max_open
        self._open: OrderedDict[str, _Entry] = OrderedDict()
        self._opening: dict[str, asyncio.Task[aio.AsyncElastimem]] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._leases = 0
        self._all_idle = asyncio.Event()
        self._all_idle.set()
        self._shut = False

    def __len__(self) -> int:
        return len(self._open)

    def stores(self) -> list[aio.AsyncElastimem]:
        """The stores open now (a snapshot: the metrics count their queued jobs)."""
        return [entry.store for entry in self._open.values()]

    @asynccontextmanager
    async def lease(self, user_id: str) -> AsyncIterator[aio.AsyncElastimem]:
        entry = await self._acquire(user_id)
        try:
            yield entry.store
        finally:
            # No await here: a cancelled request must still give its lease back.
            entry.leases -= 1
            self._leases -= 1
            if self._leases == 0:
                self._all_idle.set()
            self._evict_over_bound()

    async def _acquire(self, user_id: str) -> _Entry:
        while True:
            if self._shut:
                raise StoreUnavailable("the server is shutting down; retry in a moment")
            entry = self._open.get(user_id)
            if entry is not None:
                entry.leases += 1
                self._leases += 1
                self._all_idle.clear()
                self._open.move_to_end(user_id)
                self._evict_over_bound()
                return entry
            closing = self._closing.get(user_id)
            if closing is not None:
                await asyncio.shield(closing)
                continue
            opening = self._opening.get(user_id)
            if opening is None:
                opening = asyncio.ensure_future(self._opener(user_id))
                self._opening[user_id] = opening
                opening.add_done_callback(functools.partial(self._opened, user_id))
            # Shielded: a request cancelled while waiting must not cancel the open others
            # wait for (its store would open anyway and then never be closed).
            try:
                await asyncio.shield(opening)
            except Exception as exc:
                # The message names server paths: for the log, not for the client.
                logger.error("cannot open the store of user %s: %s", user_id, exc)
                raise StoreUnavailable(
                    "this user's store cannot be opened; see the server log"
                ) from exc

    def _opened(self, user_id: str, task: asyncio.Task[aio.AsyncElastimem]) -> None:
        self._opening.pop(user_id, None)
        if task.cancelled() or task.exception() is not None:
            return  # each waiter sees the error; the next request tries again
        store = task.result()
        if self._shut:
            self._close_later(user_id, store)
            return
        # Evicted only once its waiters are done with it: not here, before they hold it.
        self._open[user_id] = _Entry(store)

    def _evict_over_bound(self) -> None:
        """Close least recently used stores nobody holds, down to the bound."""
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return
        for user_id in [u for u, e in self._open.items() if e.leases == 0][:excess]:
            entry = self._open.pop(user_id)
            logger.info("closing the store of user %s (least recently used)", user_id)
            self._close_later(user_id, entry.store)

    def _close_later(self, user_id: str, store: aio.AsyncElastimem) -> None:
        task = asyncio.ensure_future(store.close())
        self._closing[user_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._closing.get(user_id) is t:
                del self._closing[user_id]
            if not t.cancelled() and t.exception() is not None:
                logger.error(
                    "closing the store of user %s failed: %s",
                    user_id,
                    type(t.exception()).__name__,
                )

        task.add_done_callback(done)

    async def close_all(self) -> None:
        """Refuse new leases, wait for the current ones, close every store."""
        self._shut = True
        await self._all_idle.wait()
        openings = list(self._opening.values())
        if openings:
            await asyncio.gather(*openings, return_exceptions=True)  # each closes as it lands
        while self._open:
            user_id, entry = self._open.popitem(last=False)
            self._close_later(user_id, entry.store)
        closing = list(self._closing.values())
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)
