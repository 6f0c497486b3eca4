"""``elastimem.aio``: the coroutine twins of every ``Elastimem`` method, run off the loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import aio
from elastimem.errors import ClosedError, ConfigError

# Twins written by hand (the foreground ones keep begin and end on one thread).
HAND_WRITTEN = frozenset({"foreground", "foreground_begin", "foreground_end", "close"})
RELEASE_WAIT = 30.0  # a blocked loop never releases the call: it would wait this long


def _public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member) and not isinstance(member, property)
    }


def test_every_public_method_has_an_async_twin_with_the_same_parameters() -> None:
    sync_methods = _public_methods(elastimem.Elastimem)
    async_methods = _public_methods(aio.AsyncElastimem)
    assert len(sync_methods) > 30
    for name, method in sync_methods.items():
        assert name in async_methods, f"AsyncElastimem has no twin of {name}"
        twin = async_methods[name]
        assert inspect.signature(twin).parameters == inspect.signature(method).parameters, name
        if name != "foreground":  # an async context manager, not a coroutine
            assert inspect.iscoroutinefunction(twin), name
        if method.__doc__ and name not in HAND_WRITTEN:
            assert twin.__doc__ == method.__doc__, name
    # Attributes stay attributes (not coroutines), on both.
    for name, member in inspect.getmembers(elastimem.Elastimem):
        if isinstance(member, property):
            assert isinstance(getattr(aio.AsyncElastimem, name), property), name


def test_methods_run_off_the_loop_so_it_keeps_running(tmp_path: Path) -> None:
    """A host callable that blocks until the loop itself releases it: on the loop thread it
    would wait out ``RELEASE_WAIT``; off it, the loop's heartbeat releases it."""
    started = threading.Event()
    released = threading.Event()
    seen: dict[str, Any] = {}

    def slow_tokenizer(text: str) -> int:
        seen.setdefault("thread", threading.get_ident())
        started.set()
        seen.setdefault("released", released.wait(RELEASE_WAIT))
        return max(1, len(text) // 4)

    async def main() -> int:
        seen["loop_thread"] = threading.get_ident()
        beats = 0
        async with await aio.open(
            tmp_path / "m.db", tokenizer_fn=slow_tokenizer, disable_builtin_embedder=True
        ) as mem:
            call = asyncio.ensure_future(mem.record_turn("I live in Lisbon", "noted"))
            while not started.is_set():
                await asyncio.sleep(0.01)
                beats += 1
            released.set()  # only possible because the loop is free while the call runs
            await call
            facts = await mem.facts()
        assert facts == {"location": "Lisbon"}
        return beats

    asyncio.run(main())
    assert seen["released"] is True
    assert seen["thread"] != seen["loop_thread"]


def test_one_stores_slow_call_does_not_hold_up_another(tmp_path: Path) -> None:
    released = threading.Event()
    blocked = threading.Event()

    def stuck_tokenizer(text: str) -> int:
        blocked.set()
        released.wait(RELEASE_WAIT)
        return 1

    async def main() -> None:
        slow = await aio.open_user(
            tmp_path, "slow", tokenizer_fn=stuck_tokenizer, disable_builtin_embedder=True
        )
        fast = await aio.open_user(tmp_path, "fast", disable_builtin_embedder=True)
        try:
            pending = asyncio.ensure_future(slow.record_turn("hello", "hi"))
            while not blocked.is_set():
                await asyncio.sleep(0.01)
            for i in range(6):  # more calls than the slow store has threads
                await fast.remember(f"k{i}", "v")
            assert not pending.done()  # the fast store finished while the slow one waits
            released.set()
            await pending
            assert len(await fast.facts()) == 6
        finally:
            released.set()
            await slow.close()
            await fast.close()

    asyncio.run(main())


def test_async_with_closes_the_store(tmp_path: Path) -> None:
    path = tmp_path / "m.db"

    async def main() -> aio.AsyncElastimem:
        async with await aio.open(path, disable_builtin_embedder=True) as mem:
            assert mem.path == str(path)
            await mem.remember("favorite_color", "teal")
            assert mem.session_id is None and mem.config.max_lessons > 0
        with pytest.raises(ClosedError):
            await mem.facts()
        await mem.close()  # a second close is a no-op
        return mem

    asyncio.run(main())
    assert not Path(f"{path}-wal").exists()  # closed cleanly: the WAL was checkpointed away
    with elastimem.open(str(path), disable_builtin_embedder=True) as again:
        assert again.facts() == {"favorite_color": "teal"}


def test_foreground_is_an_async_context_manager(tmp_path: Path) -> None:
    async def main() -> None:
        mem = await aio.open(tmp_path / "m.db", disable_builtin_embedder=True)
        async with mem.foreground(), mem.foreground():  # nests, as the sync block does
            await mem.record_turn("my name is Ana", "hello Ana")
        await mem.foreground_begin()
        await mem.foreground_end()
        assert await mem.facts() == {"name": "Ana"}
        await mem.close()
        with pytest.raises(ClosedError):
            mem.foreground()

    asyncio.run(main())


def test_open_user_checks_the_id_and_opens_its_own_file(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(ConfigError):
            await aio.open_user(tmp_path, "../escape", disable_builtin_embedder=True)
        async with await aio.open_user(tmp_path, "ana", disable_builtin_embedder=True) as mem:
            assert Path(mem.path) == (tmp_path / "ana.db").resolve()
            assert isinstance(mem.sync, elastimem.Elastimem)

    asyncio.run(main())


@pytest.mark.parametrize("url", ["postgresql://localhost/memory", "postgres://u@h/db"])
def test_a_postgresql_address_needs_a_user(url: str, tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match="pass user_id="):
            await aio.open(url, disable_builtin_embedder=True)

    asyncio.run(main())
    assert not any(tmp_path.iterdir())
