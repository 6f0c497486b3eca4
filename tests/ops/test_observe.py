"""The observation seam: free when nobody listens, and an observer that fails never breaks
the work it watches (logged once)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import observe


class Broken:
    def begin(self, observation: observe.Observation) -> Any:
        raise RuntimeError("the collector is gone")

    def end(self, observation: observe.Observation, token: Any) -> None:
        raise RuntimeError("the collector is gone")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float, str | None]] = []

    def begin(self, observation: observe.Observation) -> None:
        return None

    def end(self, observation: observe.Observation, token: Any) -> None:
        self.seen.append((observation.kind, observation.name, observation.seconds,
                          observation.error))  # fmt: skip


def test_nothing_subscribed_is_one_shared_do_nothing_context() -> None:
    assert not observe.active()
    assert observe.span("leg", "rank") is observe.span("llm", "extract")
    with observe.span("leg", "rank", terms=3) as nothing:
        nothing.set(anything=1)
    observe.note("job_failed", "embed")  # no one to tell: nothing happens


def test_a_failing_observer_never_breaks_the_work(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken, recorder = Broken(), Recorder()
    observe.subscribe(broken)
    observe.subscribe(recorder)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="elastimem"),
            elastimem.open(tmp_path / "o.db", disable_builtin_embedder=True) as mem,
        ):
            mem.record_turn("the heron nests by the weir", "lovely")
            assert mem.recall("heron") and mem.recall("weir")
    finally:
        observe.unsubscribe(broken)
        observe.unsubscribe(recorder)
    assert not observe.active()
    failures = [r for r in caplog.records if "observer Broken failed" in r.getMessage()]
    assert len(failures) == 1
    operations = [(k, n) for k, n, _, _ in recorder.seen if k == "operation"]
    assert operations == [("operation", "record_turn"), ("operation", "recall"),
                          ("operation", "recall")]  # fmt: skip
    assert all(seconds >= 0 and error is None for _, _, seconds, error in recorder.seen)
