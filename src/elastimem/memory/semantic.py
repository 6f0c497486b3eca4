"""Facts: temporally versioned key/value memory about the user (SPEC §5.3, §5.4).

A fact key has at most one *live* version (``invalidated_at IS NULL``, enforced by a unique
partial index). A value is never edited: a change inserts a new version, stamps the old one's
``invalidated_at`` with the new ``valid_from`` and points its ``invalidated_by`` at the new row,
so ``fact_history`` shows every value the key ever had. Rejected automatic writes go to the
``quarantine`` table, trimmed to ``quarantine_cap`` rows, and are never injected.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..clock import now_ts, parse_moment, utcnow
from ..guards import guard_fact
from ..storage.sqlite.migrations import FACTS_STAMP_KEY
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

# facts() order: profile first, then importance, valid_from and id, all descending.
LIVE_ORDER = "category = 'profile' DESC, importance DESC, valid_from DESC, id DESC"
FACT_COLUMNS = (
    "id, key, value, category, source, importance, valid_from, invalidated_at, archived, "
    "created_at, invalidated_by, last_accessed_at, access_count"
)


@dataclass(frozen=True)
class FactWrite:
    changed: bool
    reason: str
    fact_id: int | None = None
    key: str = ""


def row_to_fact(row: Sequence[Any]) -> Fact:
    return Fact(
        id=int(row[0]),
        key=str(row[1]),
        value=str(row[2]),
        category=str(row[3]),
        source=str(row[4]),
        importance=float(row[5]),
        valid_from=str(row[6]),
        invalidated_at=row[7],
        archived=bool(row[8]),
        created_at=row[9],
        invalidated_by=row[10],
        last_accessed_at=row[11],
        access_count=int(row[12]),
    )


def quarantine(
    conn: Tx,
    key: str | None,
    value: str | None,
    reason: str,
    source: str | None,
    cap: int,
) -> None:
    """Record a rejected write and trim the table to the newest ``cap`` rows."""
    cur = conn.execute(
        "INSERT INTO quarantine (ts, key, value, reason, source) VALUES (?, ?, ?, ?, ?)",
        (
            now_ts(),
            None if key is None else key[:QUARANTINE_KEY_LIMIT],
            None if value is None else value[:QUARANTINE_VALUE_LIMIT],
            reason,
            source,
        ),
    )
    conn.execute("DELETE FROM quarantine WHERE id <= ?", (int(cur.lastrowid or 0) - cap,))


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
    live = conn.execute(
        "SELECT id, value, valid_from FROM facts WHERE key = ? AND invalidated_at IS NULL",
        (key,),
    ).fetchone()
    if live is not None and live[1] == value:
        conn.execute(
            "UPDATE facts SET last_accessed_at = ?, access_count = access_count + 1, "
            "archived = 0 WHERE id = ?",
            (now, live[0]),
        )
        return FactWrite(False, "already stored", int(live[0]), key)
    valid_from = at or now
    # Only a write dated with ``at`` can be older than the live value (§5.3 step 4): an
    # undated one is true from now on, even when the live value is dated ahead of this
    # clock (a future ``at``, or another machine's clock running fast). Refusing it would
    # refuse every later undated write of the key until that date.
    if live is not None and at is not None and at < live[2]:
        return FactWrite(False, "older than current value", int(live[0]), key)
    if live is not None and source == "auto" and len(value) < SHORT_AUTO_VALUE:
        quarantine(conn, key, value, "kept existing value", source, quarantine_cap)
        return FactWrite(False, "kept existing value", int(live[0]), key)
    if origin_session_id is not None and not episodic.exists(conn, origin_session_id):
        # Erased since (by another instance or process, or while a job waited): the fact
        # is still stored, without an origin, as the foreign key's ON DELETE SET NULL would.
        origin_session_id = None
    if live is not None:
        conn.execute("UPDATE facts SET invalidated_at = ? WHERE id = ?", (valid_from, live[0]))
    cur = conn.execute(
        "INSERT INTO facts (key, value, category, source, importance, created_at, valid_from, "
        "origin_session_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            key,
            value,
            category or ("profile" if key in profile_keys else "note"),
            source,
            SOURCE_IMPORTANCE.get(source, 0.5) if importance is None else importance,
            now,
            valid_from,
            origin_session_id,
        ),
    )
    new_id = int(cur.lastrowid or 0)
    if live is not None:
        conn.execute("UPDATE facts SET invalidated_by = ? WHERE id = ?", (new_id, live[0]))
    return FactWrite(True, "stored", new_id, key)


def live_facts(conn: Tx) -> list[Fact]:
    """Live, unarchived facts: profile first, then importance, valid_from, id (all desc)."""
    rows = conn.execute(
        f"SELECT {FACT_COLUMNS} FROM facts WHERE invalidated_at IS NULL AND archived = 0 "
        f"ORDER BY {LIVE_ORDER}"
    ).fetchall()
    return [row_to_fact(r) for r in rows]


def current_fact_ids(conn: Tx) -> list[int]:
    """Ids of the current version of every key (archived ones included), read from the
    partial index on live keys without touching the table: a few hundred ids however long
    the facts' history grows."""
    return [int(r[0]) for r in conn.execute("SELECT id FROM facts WHERE invalidated_at IS NULL")]


def live_fact_rows(conn: Tx) -> list[tuple[int, str, str, str, float, str]]:
    """``live_facts`` as (id, key, value, category, importance, valid_from) tuples: what
    build_context reads on every turn, without building a Fact per row."""
    return conn.execute(
        "SELECT id, key, value, category, importance, valid_from FROM facts "
        f"WHERE invalidated_at IS NULL AND archived = 0 ORDER BY {LIVE_ORDER}"
    ).fetchall()


class LiveFactsCache:
    """``live_fact_rows`` kept while ``meta.facts.stamp`` stays the same: the schema's
    triggers give it a new random value on any change to what those rows hold, whichever
    process makes it (migrations module doc). One meta lookup instead of reading every
    live fact on every turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stamp: str | None = None
        self._rows: list[tuple[int, str, str, str, float, str]] = []

    def rows(self, conn: Tx) -> list[tuple[int, str, str, str, float, str]]:
        """``live_fact_rows(conn)``; ``conn`` inside one read snapshot."""
        found = conn.execute("SELECT value FROM meta WHERE key = ?", (FACTS_STAMP_KEY,)).fetchone()
        stamp = None if found is None else str(found[0])
        with self._lock:
            if stamp is not None and stamp == self._stamp:
                return list(self._rows)
        rows = live_fact_rows(conn)
        with self._lock:
            self._stamp, self._rows = stamp, rows
        return list(rows)


def live_values(conn: Tx) -> dict[str, str]:
    """``facts()``: key → value of live, unarchived facts, in ``live_facts`` order."""
    rows = conn.execute(
        f"SELECT key, value FROM facts WHERE invalidated_at IS NULL AND archived = 0 "
        f"ORDER BY {LIVE_ORDER}"
    ).fetchall()
    return {str(k): str(v) for k, v in rows}


def history(conn: Tx, key: str) -> list[Fact]:
    rows = conn.execute(
        f"SELECT {FACT_COLUMNS} FROM facts WHERE key = ? ORDER BY valid_from, id", (key,)
    ).fetchall()
    return [row_to_fact(r) for r in rows]


def forget(conn: Tx, key: str) -> bool:
    cur = conn.execute(
        "UPDATE facts SET invalidated_at = ? WHERE key = ? AND invalidated_at IS NULL",
        (now_ts(), key),
    )
    return cur.rowcount > 0


def retire(conn: Tx, key: str, at: str) -> bool:
    """End the live version of ``key`` as of ``at`` without a successor, as ``forget`` does
    (the user said it has ended: "I'm no longer vegetarian"). A version that became true
    after ``at`` (a turn recorded with an older date) is left alone."""
    cur = conn.execute(
        "UPDATE facts SET invalidated_at = ? "
        "WHERE key = ? AND invalidated_at IS NULL AND valid_from <= ?",
        (at, key, at),
    )
    return cur.rowcount > 0


def live_values_of(conn: Tx, keys: list[str]) -> dict[str, str]:
    """key → live value for those of ``keys`` that have one (archived included)."""
    if not keys:
        return {}
    marks = ",".join("?" * len(keys))
    rows = conn.execute(
        f"SELECT key, value FROM facts WHERE invalidated_at IS NULL AND key IN ({marks})", keys
    ).fetchall()
    return {str(k): str(v) for k, v in rows}


def touch(conn: Tx, fact_ids: list[int]) -> None:
    if fact_ids:
        marks = ",".join("?" * len(fact_ids))
        conn.execute(
            f"UPDATE facts SET access_count = access_count + 1, last_accessed_at = ? "
            f"WHERE id IN ({marks})",
            (now_ts(), *fact_ids),
        )


def decay_horizon_factor(access_count: int) -> float:
    """The half-life multiplier ``1 + ln(1 + access_count)``."""
    return 1.0 + math.log1p(max(0, access_count))


def apply_decay(conn: Tx, half_life_days: float, threshold: float) -> int:
    """Archive live low-importance facts whose decayed weight fell below ``threshold``."""
    now = utcnow()
    rows = conn.execute(
        "SELECT id, importance, valid_from, last_accessed_at, access_count FROM facts "
        "WHERE invalidated_at IS NULL AND archived = 0 AND importance < ?",
        (DECAY_IMPORTANCE_CEILING,),
    ).fetchall()
    archived: list[int] = []
    for fact_id, importance, valid_from, last_accessed, access_count in rows:
        anchor = max(valid_from, last_accessed or valid_from)
        try:
            age = max(0.0, (now - parse_moment(anchor)).total_seconds() / 86400.0)
        except ValueError:
            continue
        h = half_life_days * decay_horizon_factor(int(access_count))
        if float(importance) * 0.5 ** (age / h) < threshold:
            archived.append(int(fact_id))
    for fact_id in archived:
        conn.execute("UPDATE facts SET archived = 1 WHERE id = ?", (fact_id,))
    return len(archived)
