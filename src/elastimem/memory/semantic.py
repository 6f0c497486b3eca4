"""Facts: temporally versioned key/value memory about the user (SPEC §5.3, §5.4).

A fact key has at most one *live* version (no ``invalidated_at``), a database constraint of
the facts family (``storage.facts``) that holds under concurrent writers. A value is never
edited: a change inserts a new version, stamps the old one's ``invalidated_at`` with the new
``valid_from`` and points its ``invalidated_by`` at the new row, so ``fact_history`` shows
every value the key ever had. Rejected automatic writes go to the ``quarantine`` table,
trimmed to ``quarantine_cap`` rows, and are never injected.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from ..clock import now_ts, parse_moment, utcnow
from ..guards import guard_fact
from ..storage.facts import LiveFactRow
from ..storage.tx import Tx
from ..values import Fact
from . import episodic

SOURCES = ("explicit", "auto", "rule", "import", "merge")
SOURCE_IMPORTANCE = {"explicit": 1.0, "import": 0.8, "rule": 0.7, "auto": 0.5}
# Facts at or above this importance (explicit, import, rule) never decay.
DECAY_IMPORTANCE_CEILING = 0.7
QUARANTINE_KEY_LIMIT = 200
QUARANTINE_VALUE_LIMIT = 500
SHORT_AUTO_VALUE = 2


@dataclass(frozen=True)
class FactWrite:
    changed: bool
    reason: str
    fact_id: int | None = None
    key: str = ""


def quarantine(
    conn: Tx,
    key: str | None,
    value: str | None,
    reason: str,
    source: str | None,
    cap: int,
) -> None:
    """Record a rejected write and trim the table to the newest ``cap`` rows."""
    conn.facts.add_quarantine(
        at=now_ts(),
        key=None if key is None else key[:QUARANTINE_KEY_LIMIT],
        value=None if value is None else value[:QUARANTINE_VALUE_LIMIT],
        reason=reason,
        source=source,
    )
    conn.facts.trim_quarantine(cap)


def write_fact(
    conn: Tx,
    raw_key: str,
    value: str,
    source: str,
    *,
    profile_keys: set[str] | frozenset[str],
    reserved_keys: set[str] | frozenset[str],
    quarantine_cap: int,
    at: str | None = None,
    origin_session_id: int | None = None,
    importance: float | None = None,
    category: str | None = None,
) -> FactWrite:
    """The one path for every fact write (§5.3). Call inside ``atomic()``.

    ``value`` must already be sanitised text. ``importance`` and ``category`` override the
    defaults (merges inherit them from the version they replace).
    """
    value = value.strip()
    key, reason = guard_fact(raw_key, value, source, reserved_keys)
    if reason is not None:
        if source in ("auto", "rule", "merge"):
            quarantine(conn, key or raw_key, value, reason, source, quarantine_cap)
        return FactWrite(False, f"rejected: {reason}", key=key)
    now = now_ts()
    live = conn.facts.live_version(key)
    if live is not None and live.value == value:
        conn.facts.confirm(live.id, now)
        return FactWrite(False, "already stored", live.id, key)
    valid_from = at or now
    # Only a write dated with ``at`` can be older than the live value (§5.3 step 4): an
    # undated one is true from now on, even when the live value is dated ahead of this
    # clock (a future ``at``, or another machine's clock running fast). Refusing it would
    # refuse every later undated write of the key until that date.
    if live is not None and at is not None and at < live.valid_from:
        return FactWrite(False, "older than current value", live.id, key)
    if live is not None and source == "auto" and len(value) < SHORT_AUTO_VALUE:
        quarantine(conn, key, value, "kept existing value", source, quarantine_cap)
        return FactWrite(False, "kept existing value", live.id, key)
    if origin_session_id is not None and not episodic.exists(conn, origin_session_id):
        # Erased since (by another instance or process, or while a job waited): the fact
        # is still stored, without an origin, as the foreign key's ON DELETE SET NULL would.
        origin_session_id = None
    if live is not None:
        conn.facts.invalidate(live.id, valid_from)
    # The one live version per key is the database's constraint: should another writer
    # have stored one since the read above, this raises and the transaction stores nothing.
    new_id = conn.facts.insert_version(
        key,
        value,
        category=category or ("profile" if key in profile_keys else "note"),
        source=source,
        importance=SOURCE_IMPORTANCE.get(source, 0.5) if importance is None else importance,
        created_at=now,
        valid_from=valid_from,
        origin_session_id=origin_session_id,
    )
    if live is not None:
        conn.facts.link_successor(live.id, new_id)
    return FactWrite(True, "stored", new_id, key)


def live_facts(conn: Tx) -> list[Fact]:
    """Live, unarchived facts: profile first, then importance, valid_from, id (all desc)."""
    return conn.facts.shown_facts()


def current_fact_ids(conn: Tx) -> list[int]:
    """Ids of the current version of every key (archived ones included)."""
    return conn.facts.current_ids()


def live_fact_rows(conn: Tx) -> list[LiveFactRow]:
    """``live_facts`` as (id, key, value, category, importance, valid_from) tuples: what
    build_context reads on every turn, without building a Fact per row."""
    return conn.facts.shown_rows()


class LiveFactsCache:
    """``live_fact_rows`` kept while the facts' stamp (``tx.facts.stamp()``) stays the same:
    it changes on any change to what those rows hold, whichever process makes it. One
    lookup instead of reading every live fact on every turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp: str | None = None
        self._rows: list[LiveFactRow] = []

    def rows(self, conn: Tx) -> list[LiveFactRow]:
        """``live_fact_rows(conn)``; ``conn`` inside one read snapshot."""
        stamp = conn.facts.stamp()
        with self._lock:
            if stamp is not None and stamp == self._stamp:
                return list(self._rows)
        rows = live_fact_rows(conn)
        with self._lock:
            self._stamp, self._rows = stamp, rows
        return list(rows)


def live_values(conn: Tx) -> dict[str, str]:
    """``facts()``: key → value of live, unarchived facts, in ``live_facts`` order."""
    return conn.facts.shown_values()


def history(conn: Tx, key: str) -> list[Fact]:
    return conn.facts.history(key)


def forget(conn: Tx, key: str) -> bool:
    return conn.facts.end_live(key, now_ts())


def retire(conn: Tx, key: str, at: str) -> bool:
    """End the live version of ``key`` as of ``at`` without a successor, as ``forget`` does
    (the user said it has ended: "I'm no longer vegetarian"). A version that became true
    after ``at`` (a turn recorded with an older date) is left alone."""
    return conn.facts.end_live_started_by(key, at)


def live_values_of(conn: Tx, keys: list[str]) -> dict[str, str]:
    """key → live value for those of ``keys`` that have one (archived included)."""
    return conn.facts.live_values_of(keys) if keys else {}


def touch(conn: Tx, fact_ids: list[int]) -> None:
    if fact_ids:
        conn.facts.touch(fact_ids, now_ts())


def decay_horizon_factor(access_count: int) -> float:
    """The half-life multiplier ``1 + ln(1 + access_count)``."""
    return 1.0 + math.log1p(max(0, access_count))


def apply_decay(conn: Tx, half_life_days: float, threshold: float) -> int:
    """Archive live low-importance facts whose decayed weight fell below ``threshold``."""
    now = utcnow()
    archived: list[int] = []
    for fact_id, importance, valid_from, last_accessed, access_count in conn.facts.decay_candidates(
        DECAY_IMPORTANCE_CEILING
    ):
        anchor = max(valid_from, last_accessed or valid_from)
        try:
            age = max(0.0, (now - parse_moment(anchor)).total_seconds() / 86400.0)
        except ValueError:
            continue
        h = half_life_days * decay_horizon_factor(access_count)
        if importance * 0.5 ** (age / h) < threshold:
            archived.append(fact_id)
    if archived:
        conn.facts.archive(archived)
    return len(archived)
