"""Time: the one timestamp format, parsing, ages and recency weights (SPEC §4.1).

Every stored timestamp is ISO-8601 UTC with microseconds and ``Z``
(``2025-03-04T05:06:07.123456Z``). The fixed width makes string order equal time order,
so SQL compares timestamps as plain text and cutoffs are computed here, never in SQL.
"""

from __future__ import annotations

import functools
import re
from datetime import date, datetime, timedelta, timezone
from typing import Any

TIMESTAMP_PATTERN = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
SECONDS_PER_DAY = 86400.0
_BARE_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def format_ts(moment: datetime) -> str:
    """The canonical string of an aware or naive (taken as UTC) datetime."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    # isoformat, not strftime("%Y"): the C library writes year 999 as "999", which breaks
    # the fixed width that makes string order time order (isoformat pads it to "0999").
    utc = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds") + "Z"


def now_ts() -> str:
    """The current time as a canonical timestamp."""
    return format_ts(utcnow())


def parse_moment(value: object) -> datetime:
    """Parse a ``datetime``, ``date`` or ISO string into an aware UTC datetime.

    A naive value is UTC; a bare date is midnight UTC; a trailing ``Z`` is accepted.
    Raises ``ValueError`` for anything else.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("empty timestamp")
        if _BARE_DATE.match(text):
            text += "T00:00:00"
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        moment = datetime.fromisoformat(text)
    else:
        raise ValueError(f"cannot read {type(value).__name__} as a time")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def to_ts(value: object) -> str:
    """Canonical timestamp string for any accepted time value (raises ``ValueError``)."""
    return format_ts(parse_moment(value))


def canonicalize_legacy_ts(value: Any) -> Any:
    """Rewrite an old-layout timestamp into canonical form; leave anything unreadable as is."""
    if not isinstance(value, str) or TIMESTAMP_PATTERN.match(value):
        return value
    try:
        return to_ts(value)
    except ValueError:
        return value


@functools.lru_cache(maxsize=65536)
def epoch_seconds(ts: str) -> float | None:
    """Seconds since the epoch of a stored timestamp (cached: ranking parses the same ones
    again and again); None when unreadable."""
    try:
        return parse_moment(ts).timestamp()
    except (ValueError, TypeError, OverflowError):
        return None


def age_days(ts: str | None, now: datetime | None = None) -> float:
    """Age in days of a stored timestamp, never negative; unreadable counts as age 0."""
    if not ts:
        return 0.0
    seconds = epoch_seconds(ts)
    if seconds is None:
        return 0.0
    return max(0.0, ((now or utcnow()).timestamp() - seconds) / SECONDS_PER_DAY)


def recency(age: float, half_life_days: float) -> float:
    """``0.5 ** (age / h)``: 1.0 now, 0.5 after one half-life."""
    return float(0.5 ** (age / half_life_days))


def ts_minus(seconds: float, now: datetime | None = None) -> str:
    """The canonical timestamp ``seconds`` before now (for cutoffs bound as parameters)."""
    return format_ts((now or utcnow()) - timedelta(seconds=seconds))


def ts_plus(seconds: float, now: datetime | None = None) -> str:
    return format_ts((now or utcnow()) + timedelta(seconds=seconds))
