"""SQLite implementation of ``storage.facts.FactRows``: fact versions, quarantine and the facts'
keyword table.

One live version per key is the unique partial index ``idx_facts_live_key`` (migrations); the
facts' keyword table and ``meta.facts.stamp`` follow the rows through the schema's triggers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import StoreError
from ...values import Fact
from ..facts import (
    FACT_COLUMNS,
    QUARANTINE_KEYS,
    SHOWN,
    SHOWN_ORDER,
    DecayCandidate,
    FactRows,
    LiveFactRow,
    LiveVersion,
    Replacement,
    fact_from_row,
)
from ..meta import FACTS_STAMP_KEY
from . import connection


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SqliteFactRows:
    """``FactRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- versions -----------------------------------------------------------------------------

    def live_version(self, key: str) -> LiveVersion | None:
        # A write transaction here is BEGIN IMMEDIATE: no other writer until it ends.
        row = self._conn.execute(
            "SELECT id, value, valid_from FROM facts WHERE key = ? AND invalidated_at IS NULL",
            (key,),
        ).fetchone()
        return None if row is None else LiveVersion(int(row[0]), str(row[1]), str(row[2]))

    def insert_version(
        self,
        key: str,
        value: str,
        *,
        category: str,
        source: str,
        importance: float,
        created_at: str,
        valid_from: str,
        origin_session_id: int | None,
    ) -> int:
        try:
            cur = self._conn.execute(
                "INSERT INTO facts (key, value, category, source, importance, created_at, "
                "valid_from, origin_session_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    value,
                    category,
                    source,
                    importance,
                    created_at,
                    valid_from,
                    origin_session_id,
                ),
            )
        except connection.INTEGRITY_ERRORS as exc:
            if self.live_version(key) is None:
                raise  # another constraint (a CHECK): the store's own error says which
            raise StoreError(
                f"the fact key {key!r} already has a live version; end it before storing "
                "another (nothing was stored)"
            ) from exc
        return int(cur.lastrowid or 0)

    def invalidate(self, fact_id: int, at: str) -> None:
        self._conn.execute("UPDATE facts SET invalidated_at = ? WHERE id = ?", (at, fact_id))

    def link_successor(self, fact_id: int, successor_id: int) -> None:
        self._conn.execute(
            "UPDATE facts SET invalidated_by = ? WHERE id = ?", (successor_id, fact_id)
        )

    def confirm(self, fact_id: int, at: str) -> None:
        self._conn.execute(
            "UPDATE facts SET last_accessed_at = ?, access_count = access_count + 1, "
            "archived = 0 WHERE id = ?",
            (at, fact_id),
        )

    def end_live(self, key: str, at: str) -> bool:
        cur = self._conn.execute(
            "UPDATE facts SET invalidated_at = ? WHERE key = ? AND invalidated_at IS NULL",
            (at, key),
        )
        return cur.rowcount > 0

    def end_live_started_by(self, key: str, at: str) -> bool:
        cur = self._conn.execute(
            "UPDATE facts SET invalidated_at = ? "
            "WHERE key = ? AND invalidated_at IS NULL AND valid_from <= ?",
            (at, key, at),
        )
        return cur.rowcount > 0

    def touch(self, fact_ids: Sequence[int], at: str) -> None:
        if fact_ids:
            self._conn.execute(
                "UPDATE facts SET access_count = access_count + 1, last_accessed_at = ? "
                f"WHERE id IN ({_marks(len(fact_ids))})",
                (at, *fact_ids),
            )

    def archive(self, fact_ids: Sequence[int]) -> None:
        self._conn.executemany(
            "UPDATE facts SET archived = 1 WHERE id = ?", [(fact_id,) for fact_id in fact_ids]
        )

    # -- reading ------------------------------------------------------------------------------

    def shown_facts(self) -> list[Fact]:
        rows = self._conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE {SHOWN} ORDER BY {SHOWN_ORDER}"
        ).fetchall()
        return [fact_from_row(r) for r in rows]

    def shown_rows(self) -> list[LiveFactRow]:
        return self._conn.execute(
            "SELECT id, key, value, category, importance, valid_from FROM facts "
            f"WHERE {SHOWN} ORDER BY {SHOWN_ORDER}"
        ).fetchall()

    def shown_values(self) -> dict[str, str]:
        rows = self._conn.execute(
            f"SELECT key, value FROM facts WHERE {SHOWN} ORDER BY {SHOWN_ORDER}"
        ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def live_values_of(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        rows = self._conn.execute(
            "SELECT key, value FROM facts WHERE invalidated_at IS NULL "
            f"AND key IN ({_marks(len(keys))})",
            list(keys),
        ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def current_ids(self) -> list[int]:
        # Read from the partial index on live keys without touching the table: a few hundred
        # ids however long the facts' history grows.
        return [
            int(r[0])
            for r in self._conn.execute("SELECT id FROM facts WHERE invalidated_at IS NULL")
        ]

    def history(self, key: str) -> list[Fact]:
        rows = self._conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE key = ? ORDER BY valid_from, id", (key,)
        ).fetchall()
        return [fact_from_row(r) for r in rows]

    def decay_candidates(self, below_importance: float) -> list[DecayCandidate]:
        rows = self._conn.execute(
            "SELECT id, importance, valid_from, last_accessed_at, access_count FROM facts "
            f"WHERE {SHOWN} AND importance < ?",
            (below_importance,),
        ).fetchall()
        return [DecayCandidate(int(r[0]), float(r[1]), str(r[2]), r[3], int(r[4])) for r in rows]

    def stamp(self) -> str | None:
        found = self._conn.execute(
            "SELECT value FROM meta WHERE key = ?", (FACTS_STAMP_KEY,)
        ).fetchone()
        return None if found is None else str(found[0])

    # -- merge reviews ------------------------------------------------------------------------

    def unreviewed_replacements(self, since: str, limit: int) -> list[Replacement]:
        rows = self._conn.execute(
            "SELECT o.id, n.id, n.key, o.value, o.valid_from, n.value, n.valid_from "
            "FROM facts o JOIN facts n ON n.id = o.invalidated_by "
            "WHERE o.invalidated_at >= ? AND n.invalidated_at IS NULL AND n.source <> 'merge' "
            "AND NOT EXISTS (SELECT 1 FROM fact_reviews r WHERE r.old_fact_id = o.id "
            "AND r.new_fact_id = n.id) ORDER BY o.invalidated_at, o.id LIMIT ?",
            (since, max(0, limit)),
        ).fetchall()
        return [
            Replacement(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]))
            for r in rows
        ]

    def record_review(
        self, old_id: int, new_id: int, verdict: str, result_id: int | None, at: str
    ) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO fact_reviews (old_fact_id, new_fact_id, verdict, "
            "result_fact_id, reviewed_at) VALUES (?, ?, ?, ?, ?)",
            (old_id, new_id, verdict, result_id, at),
        )
        return cur.rowcount > 0

    # -- quarantine ---------------------------------------------------------------------------

    def add_quarantine(
        self, *, at: str, key: str | None, value: str | None, reason: str, source: str | None
    ) -> None:
        self._conn.execute(
            "INSERT INTO quarantine (ts, key, value, reason, source) VALUES (?, ?, ?, ?, ?)",
            (at, key, value, reason, source),
        )

    def trim_quarantine(self, keep: int) -> None:
        self._conn.execute(
            "DELETE FROM quarantine WHERE id <= (SELECT max(id) FROM quarantine) - ?", (keep,)
        )

    def origin_sessions(self, key: str) -> dict[int, int]:
        rows = self._conn.execute(
            "SELECT id, origin_session_id FROM facts "
            "WHERE key = ? AND origin_session_id IS NOT NULL",
            (key,),
        ).fetchall()
        return {int(r[0]): int(r[1]) for r in rows}

    def quarantine_page(self, offset: int, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT ts, key, value, reason, source, id FROM quarantine "
            "ORDER BY id DESC LIMIT ? OFFSET ?",
            (max(0, n), max(0, offset)),
        ).fetchall()
        return [dict(zip((*QUARANTINE_KEYS, "id"), row)) for row in rows]

    def quarantine_entry(self, entry_id: int) -> dict[str, object] | None:
        row = self._conn.execute(
            "SELECT ts, key, value, reason, source, id FROM quarantine WHERE id = ?", (entry_id,)
        ).fetchone()
        return None if row is None else dict(zip((*QUARANTINE_KEYS, "id"), row))

    def newest_quarantine(self, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT ts, key, value, reason, source FROM quarantine ORDER BY id DESC LIMIT ?",
            (max(0, n),),
        ).fetchall()
        return [dict(zip(QUARANTINE_KEYS, row)) for row in reversed(rows)]

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def key_exists(self, key: str) -> bool:
        row = self._conn.execute("SELECT 1 FROM facts WHERE key = ? LIMIT 1", (key,))
        return row.fetchone() is not None

    def keys_of(self, ids: list[int]) -> list[tuple[int, str, bool]]:
        if not ids:
            return []
        return [
            (int(r[0]), str(r[1]), bool(r[2]))
            for r in self._conn.execute(
                "SELECT id, key, invalidated_at IS NULL FROM facts "
                f"WHERE id IN ({','.join('?' * len(ids))})",
                ids,
            )
        ]

    def archived_among(self, ids: list[int]) -> set[int]:
        if not ids:
            return set()
        return {
            int(r[0])
            for r in self._conn.execute(
                f"SELECT id FROM facts WHERE id IN ({','.join('?' * len(ids))}) AND archived != 0",
                ids,
            )
        }

    def candidate_rows(self, ids: list[int]) -> list[tuple[int, str, str, str, float]]:
        if not ids:
            return []
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]))
            for r in self._conn.execute(
                "SELECT f.id, f.key, f.value, f.valid_from, f.importance FROM facts f "
                f"WHERE f.id IN ({','.join('?' * len(ids))})",
                ids,
            )
        ]

    def live_attributes(self, key: str) -> tuple[int, float, str | None, int | None] | None:
        row = self._conn.execute(
            "SELECT id, importance, category, origin_session_id FROM facts "
            "WHERE key = ? AND invalidated_at IS NULL",
            (key,),
        ).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), row[2], row[3])


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: sqlite3.Connection) -> FactRows:
        return SqliteFactRows(conn)
