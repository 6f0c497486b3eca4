"""Seeing a layer's objects that a store makes, without reaching into the facade.

``instances_of(monkeypatch, VectorIndex)`` wraps the class's ``__init__`` for the test: every
instance made from then on is appended to the returned list (the store's own vector index,
embedding source, worker…), so a test can look at a layer through that layer's interface.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def instances_of(monkeypatch: pytest.MonkeyPatch, cls: type[T]) -> list[T]:
    """Every ``cls`` made while the test runs, in the order they were made."""
    made: list[T] = []
    original = cls.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(cls, "__init__", init)
    return made
