"""The public methods the command line uses instead of the store's internals, on both
backends: ``has_vectors``, ``holds_memories_outside`` and ``render_graph``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import elastimem
from elastimem.errors import ConfigError
from tests.conftest import HashEmbedder

MakeStore = Callable[..., elastimem.Elastimem]


def test_has_vectors_by_model_label(make_store: MakeStore) -> None:
    mem = make_store(embedder=HashEmbedder())
    assert mem.has_vectors() is False
    mem.begin_session()
    mem.record_turn("My dog Biscuit loves hiking", "Noted!")
    mem.end_session()
    assert mem.drain(timeout=30)
    label = mem.stats()["embedding_model"]
    assert label and mem.has_vectors() is True
    assert mem.has_vectors(label) is True
    assert mem.has_vectors("elastimem:") is False  # not the built-in embedder's vectors
    with pytest.raises(ConfigError):
        mem.has_vectors(3)  # type: ignore[arg-type]


def test_holds_memories_outside_sessions(make_store: MakeStore) -> None:
    mem = make_store()
    assert mem.holds_memories_outside([]) is False  # an empty store
    first = mem.begin_session()
    mem.remember("pet", "cat")  # learned in the session
    mem.end_session()
    assert mem.holds_memories_outside([first]) is False
    assert mem.holds_memories_outside([]) is True
    mem.remember("color", "teal")  # in no session
    assert mem.holds_memories_outside([first]) is True
    other = make_store(":memory:")
    other.add_lesson("Answer in one sentence.")
    assert other.holds_memories_outside([]) is True
    with pytest.raises(ConfigError):
        mem.holds_memories_outside(["x"])  # type: ignore[list-item]


def test_render_graph_as_dot_and_html(make_store: MakeStore) -> None:
    mem = make_store()
    mem.record_turn("My sister Ana lives in Porto", "Nice!")
    mem.end_session()
    assert mem.drain(timeout=30)
    dot = mem.render_graph()
    # (The drawing of a graph's nodes is tests/graph/test_graph_view.py's.)
    assert dot.startswith("digraph elastimem {") and dot.rstrip().endswith("}")
    assert mem.render_graph("dot") == dot
    page = mem.render_graph("html")
    assert page.lstrip().lower().startswith("<!doctype html") and "<svg" in page
    with pytest.raises(ConfigError, match="'dot' or 'html'"):
        mem.render_graph("svg")
