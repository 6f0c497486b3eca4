"""A store on the built-in model, loaded with turns and facts and fully embedded (for tests
marked ``embedder``); skips the test where the model is not installed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

import elastimem


@contextmanager
def builtin_store(
    path: Path, turns: Iterable[tuple[str, str]], facts: Mapping[str, str] | None = None
) -> Iterator[elastimem.Elastimem]:
    with elastimem.Elastimem(str(path)) as mem:
        if not mem.warm_up(120):
            pytest.skip("the built-in embedder is not installed")
        for user, assistant in turns:
            mem.record_turn(user, assistant)
        for key, value in (facts or {}).items():
            mem.remember(key, value)
        while not mem.drain(timeout=30):
            pass
        yield mem
