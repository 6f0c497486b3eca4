"""Fixtures for the reliability suite: figure reporting, log capture and stores.

Every test here reports at least one figure through the ``figure`` fixture: it is printed
(visible with ``-s``), collected, shown in a "reliability figures" section at the end of the
run and, when ``ELASTIMEM_FIGURES`` names a file, appended to it as JSON lines.

Hypothesis budgets come from two profiles: ``reliability-dev`` (``ELASTIMEM_HYPOTHESIS_EXAMPLES``
examples per test, default 300) and ``reliability-ci`` (selected when ``CI=true``; per-test
counts that add up to at least 10,000 examples across the suite). They are applied per test
(``settings(parent=...)``), never loaded globally, so the rest of the test suite keeps its own.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

FIGURES: list[dict[str, Any]] = []


def record_figure(test: str, name: str, value: Any, unit: str = "", note: str = "") -> None:
    entry = {"test": test, "name": name, "value": value, "unit": unit, "note": note}
    FIGURES.append(entry)
    print(
        f"FIGURE {test}: {name} = {value}{(' ' + unit) if unit else ''}"
        f"{('  (' + note + ')') if note else ''}"
    )
    target = os.environ.get("ELASTIMEM_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**entry, "ts": time.time()}) + "\n")


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[..., None]:
    def report(name: str, value: Any, unit: str = "", note: str = "") -> None:
        record_figure(request.node.name, name, value, unit, note)

    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("reliability figures")
    for f in FIGURES:
        unit = f" {f['unit']}" if f["unit"] else ""
        note = f"  ({f['note']})" if f["note"] else ""
        terminalreporter.write_line(f"{f['test']}: {f['name']} = {f['value']}{unit}{note}")


class LogCapture(logging.Handler):
    """Every record of the ``elastimem`` logger, formatted, at DEBUG and above."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        try:
            text = record.getMessage()
        except Exception as exc:  # a bad format string is itself worth seeing
            text = f"<unformattable {record.msg!r}: {exc}>"
        if record.exc_info and record.exc_info[1] is not None:
            text += " | " + repr(record.exc_info[1])
        self.lines.append(f"{record.levelname} {text}")

    def at_least(self, level: int) -> list[str]:
        return [line for record, line in zip(self.records, self.lines) if record.levelno >= level]


@pytest.fixture
def elastimem_logs() -> Iterator[LogCapture]:
    logger = logging.getLogger("elastimem")
    handler = LogCapture()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
