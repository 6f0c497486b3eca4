"""Per-key request rates (``serve --rate-limit 20/s``): one token bucket per key label.

A bucket holds up to ``burst`` requests (by default one period's worth: 20 for ``20/s``)
and refills at the rate, so a client may burst after a quiet spell but not sustain more
than the rate. Each key has its own bucket, so one busy key never slows another. The
buckets live on the event loop's thread only (no lock) and are dropped once full again,
so keys that went quiet cost no memory.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError

PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True)
class Rate:
    per_second: float
    burst: float

    @classmethod
    def parse(cls, text: str, burst: int | None = None) -> Rate:
        """``"20/s"`` or ``"600/min"``; ``ConfigError`` for anything else."""
        match = _RATE.match(text.lower())
        if match is None or match.group(2) not in PERIODS or float(match.group(1)) <= 0:
            raise ConfigError(
                f"--rate-limit {text!r} is not a rate; write requests per second or minute, "
                "such as 20/s or 600/min"
            )
        count = float(match.group(1))
        size = float(burst) if burst is not None else max(1.0, count)
        if size < 1:
            raise ConfigError("--rate-burst must be at least 1")
        return cls(count / PERIODS[match.group(2)], size)


class RateLimiter:
    """``wait_for(key)``: 0 when the request may go now (and is counted), else the seconds
    until one more request of that key would be allowed."""

    def __init__(self, rate: Rate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key: (tokens, at)

    def wait_for(self, key: str) -> float:
        now = self._clock()
        tokens, at = self._buckets.get(key, (self.rate.burst, now))
        tokens = min(self.rate.burst, tokens + (now - at) * self.rate.per_second)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            self._forget_full(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / self.rate.per_second

    def _forget_full(self, now: float) -> None:
        if len(self._buckets) < 1024:
            return
        refill = self.rate.burst / self.rate.per_second
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < refill}


def retry_after(seconds: float) -> str:
    """The ``Retry-After`` header: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))
