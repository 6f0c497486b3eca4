"""PostgreSQL implementation of ``storage.facts.FactRows``: one user's fact versions,
quarantine and the facts' keyword postings.

One live version per key and user is the unique partial index ``idx_facts_live_key``
(``schema``); ``live_version`` in a write transaction locks the live row (``FOR UPDATE``).
``meta.facts.stamp`` follows the rows through the schema's trigger. A version's postings
(``fact_terms``, key and value counted together) are written with it; a version's key and
value never change afterwards, and its postings go with it (ON DELETE CASCADE).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
from .terms import fact_text, posting_rows, terms_of

# The columns above are plain SQL both backends read alike; every statement here adds the
# user.
_LIVE_KEY_INDEX = "idx_facts_live_key"


class PostgresFactRows:
    """``FactRows`` for one user on one psycopg connection (inside the caller's
    transaction). ``writable`` is False in a read-only snapshot, where no row is locked."""

    __slots__ = ("_conn", "_user", "_writable")

    def __init__(self, conn: Any, user_id: str, *, writable: bool = True) -> None:
        self._conn = conn
        self._user = user_id
        self._writable = writable

    # -- versions -----------------------------------------------------------------------------

    def live_version(self, key: str) -> LiveVersion | None:
        lock = " FOR UPDATE" if self._writable else ""
        row = self._conn.execute(
            "SELECT id, value, valid_from FROM facts WHERE user_id = %s AND key = %s "
            f"AND invalidated_at IS NULL{lock}",
            (self._user, key),
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
        from psycopg import errors as pg_errors

        ((found, length),) = terms_of([fact_text(key, value)])
        # A savepoint: a refused insert leaves the caller's transaction usable, as a failed
        # statement does on SQLite.
        self._conn.execute("SAVEPOINT em_fact_insert")
        try:
            row = self._conn.execute(
                "INSERT INTO facts (user_id, key, value, category, source, importance, "
                "created_at, valid_from, origin_session_id, term_count) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    self._user,
                    key,
                    value,
                    category,
                    source,
                    importance,
                    created_at,
                    valid_from,
                    origin_session_id,
                    length,
                ),
            ).fetchone()
        except pg_errors.UniqueViolation as exc:
            self._conn.execute("ROLLBACK TO SAVEPOINT em_fact_insert")
            self._conn.execute("RELEASE SAVEPOINT em_fact_insert")
            if exc.diag.constraint_name != _LIVE_KEY_INDEX:
                raise
            raise StoreError(
                f"the fact key {key!r} already has a live version; end it before storing "
                "another (nothing was stored)"
            ) from exc
        except BaseException:
            self._conn.execute("ROLLBACK TO SAVEPOINT em_fact_insert")
            self._conn.execute("RELEASE SAVEPOINT em_fact_insert")
            raise
        self._conn.execute("RELEASE SAVEPOINT em_fact_insert")
        fact_id = int(row[0])
        words, ids, freqs = posting_rows([fact_id], [(found, length)])
        if words:
            self._conn.execute(
                "INSERT INTO fact_terms (user_id, term, fact_id, tf) "
                "SELECT %s, * FROM unnest(%s::text[], %s::bigint[], %s::integer[])",
                (self._user, words, ids, freqs),
            )
        return fact_id

    def invalidate(self, fact_id: int, at: str) -> None:
        self._conn.execute(
            "UPDATE facts SET invalidated_at = %s WHERE user_id = %s AND id = %s",
            (at, self._user, fact_id),
        )

    def link_successor(self, fact_id: int, successor_id: int) -> None:
        self._conn.execute(
            "UPDATE facts SET invalidated_by = %s WHERE user_id = %s AND id = %s",
            (successor_id, self._user, fact_id),
        )

    def confirm(self, fact_id: int, at: str) -> None:
        self._conn.execute(
            "UPDATE facts SET last_accessed_at = %s, access_count = access_count + 1, "
            "archived = 0 WHERE user_id = %s AND id = %s",
            (at, self._user, fact_id),
        )

    def end_live(self, key: str, at: str) -> bool:
        cur = self._conn.execute(
            "UPDATE facts SET invalidated_at = %s "
            "WHERE user_id = %s AND key = %s AND invalidated_at IS NULL",
            (at, self._user, key),
        )
        return bool(cur.rowcount > 0)

    def end_live_started_by(self, key: str, at: str) -> bool:
        cur = self._conn.execute(
            "UPDATE facts SET invalidated_at = %s WHERE user_id = %s AND key = %s "
            "AND invalidated_at IS NULL AND valid_from <= %s",
            (at, self._user, key, at),
        )
        return bool(cur.rowcount > 0)

    def touch(self, fact_ids: Sequence[int], at: str) -> None:
        if fact_ids:
            self._conn.execute(
                "UPDATE facts SET access_count = access_count + 1, last_accessed_at = %s "
                "WHERE user_id = %s AND id = ANY(%s)",
                (at, self._user, [int(i) for i in fact_ids]),
            )

    def archive(self, fact_ids: Sequence[int]) -> None:
        if fact_ids:
            self._conn.execute(
                "UPDATE facts SET archived = 1 WHERE user_id = %s AND id = ANY(%s)",
                (self._user, [int(i) for i in fact_ids]),
            )

    # -- reading ------------------------------------------------------------------------------

    def shown_facts(self) -> list[Fact]:
        rows = self._conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = %s AND {SHOWN} "
            f"ORDER BY {SHOWN_ORDER}",
            (self._user,),
        ).fetchall()
        return [fact_from_row(r) for r in rows]

    def shown_rows(self) -> list[LiveFactRow]:
        rows = self._conn.execute(
            "SELECT id, key, value, category, importance, valid_from FROM facts "
            f"WHERE user_id = %s AND {SHOWN} ORDER BY {SHOWN_ORDER}",
            (self._user,),
        ).fetchall()
        return [tuple(r) for r in rows]

    def shown_values(self) -> dict[str, str]:
        rows = self._conn.execute(
            f"SELECT key, value FROM facts WHERE user_id = %s AND {SHOWN} ORDER BY {SHOWN_ORDER}",
            (self._user,),
        ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def live_values_of(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        rows = self._conn.execute(
            "SELECT key, value FROM facts WHERE user_id = %s AND invalidated_at IS NULL "
            "AND key = ANY(%s)",
            (self._user, list(keys)),
        ).fetchall()
        return {str(k): str(v) for k, v in rows}

    def current_ids(self) -> list[int]:
        rows = self._conn.execute(
            "SELECT id FROM facts WHERE user_id = %s AND invalidated_at IS NULL", (self._user,)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def history(self, key: str) -> list[Fact]:
        rows = self._conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE user_id = %s AND key = %s "
            "ORDER BY valid_from, id",
            (self._user, key),
        ).fetchall()
        return [fact_from_row(r) for r in rows]

    def decay_candidates(self, below_importance: float) -> list[DecayCandidate]:
        rows = self._conn.execute(
            "SELECT id, importance, valid_from, last_accessed_at, access_count FROM facts "
            f"WHERE user_id = %s AND {SHOWN} AND importance < %s",
            (self._user, below_importance),
        ).fetchall()
        return [DecayCandidate(int(r[0]), float(r[1]), str(r[2]), r[3], int(r[4])) for r in rows]

    def stamp(self) -> str | None:
        found = self._conn.execute(
            "SELECT value FROM meta WHERE user_id = %s AND key = %s",
            (self._user, FACTS_STAMP_KEY),
        ).fetchone()
        return None if found is None else str(found[0])

    # -- merge reviews ------------------------------------------------------------------------

    def unreviewed_replacements(self, since: str, limit: int) -> list[Replacement]:
        rows = self._conn.execute(
            "SELECT o.id, n.id, n.key, o.value, o.valid_from, n.value, n.valid_from "
            "FROM facts o JOIN facts n ON n.user_id = o.user_id AND n.id = o.invalidated_by "
            "WHERE o.user_id = %s AND o.invalidated_at >= %s AND n.invalidated_at IS NULL "
            "AND n.source <> 'merge' AND NOT EXISTS (SELECT 1 FROM fact_reviews r "
            "WHERE r.user_id = o.user_id AND r.old_fact_id = o.id AND r.new_fact_id = n.id) "
            "ORDER BY o.invalidated_at, o.id LIMIT %s",
            (self._user, since, max(0, limit)),
        ).fetchall()
        return [
            Replacement(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]))
            for r in rows
        ]

    def record_review(
        self, old_id: int, new_id: int, verdict: str, result_id: int | None, at: str
    ) -> bool:
        cur = self._conn.execute(
            "INSERT INTO fact_reviews (user_id, old_fact_id, new_fact_id, verdict, "
            "result_fact_id, reviewed_at) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (user_id, old_fact_id, new_fact_id) DO NOTHING",
            (self._user, old_id, new_id, verdict, result_id, at),
        )
        return bool(cur.rowcount > 0)

    # -- quarantine ---------------------------------------------------------------------------

    def add_quarantine(
        self, *, at: str, key: str | None, value: str | None, reason: str, source: str | None
    ) -> None:
        self._conn.execute(
            "INSERT INTO quarantine (user_id, ts, key, value, reason, source) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (self._user, at, key, value, reason, source),
        )

    def trim_quarantine(self, keep: int) -> None:
        # Ids come from a sequence all users share: the newest ``keep`` are found by position
        # in this user's rows, not by arithmetic on the highest id.
        if keep <= 0:
            self._conn.execute("DELETE FROM quarantine WHERE user_id = %s", (self._user,))
            return
        self._conn.execute(
            "DELETE FROM quarantine WHERE user_id = %s AND id < ("
            "SELECT id FROM quarantine WHERE user_id = %s ORDER BY id DESC OFFSET %s LIMIT 1)",
            (self._user, self._user, keep - 1),
        )

    def origin_sessions(self, key: str) -> dict[int, int]:
        rows = self._conn.execute(
            "SELECT id, origin_session_id FROM facts "
            "WHERE user_id = %s AND key = %s AND origin_session_id IS NOT NULL",
            (self._user, key),
        ).fetchall()
        return {int(r[0]): int(r[1]) for r in rows}

    def quarantine_page(self, offset: int, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT ts, key, value, reason, source, id FROM quarantine WHERE user_id = %s "
            "ORDER BY id DESC LIMIT %s OFFSET %s",
            (self._user, max(0, n), max(0, offset)),
        ).fetchall()
        return [dict(zip((*QUARANTINE_KEYS, "id"), row)) for row in rows]

    def quarantine_entry(self, entry_id: int) -> dict[str, object] | None:
        row = self._conn.execute(
            "SELECT ts, key, value, reason, source, id FROM quarantine "
            "WHERE user_id = %s AND id = %s",
            (self._user, entry_id),
        ).fetchone()
        return None if row is None else dict(zip((*QUARANTINE_KEYS, "id"), row))

    def newest_quarantine(self, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT ts, key, value, reason, source FROM quarantine WHERE user_id = %s "
            "ORDER BY id DESC LIMIT %s",
            (self._user, max(0, n)),
        ).fetchall()
        return [dict(zip(QUARANTINE_KEYS, row)) for row in reversed(rows)]

    # -- h15 (runtime branch, not yet on redesign): the query path and the job handlers -------

    def key_exists(self, key: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM facts WHERE user_id = %s AND key = %s LIMIT 1", (self._user, key)
        ).fetchone()
        return row is not None

    def keys_of(self, ids: list[int]) -> list[tuple[int, str, bool]]:
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT id, key, invalidated_at IS NULL FROM facts WHERE user_id = %s AND id = ANY(%s)",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return [(int(r[0]), str(r[1]), bool(r[2])) for r in rows]

    def archived_among(self, ids: list[int]) -> set[int]:
        if not ids:
            return set()
        rows = self._conn.execute(
            "SELECT id FROM facts WHERE user_id = %s AND id = ANY(%s) AND archived <> 0",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def candidate_rows(self, ids: list[int]) -> list[tuple[int, str, str, str, float]]:
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT id, key, value, valid_from, importance FROM facts WHERE user_id = %s "
            "AND id = ANY(%s)",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4])) for r in rows]

    def live_attributes(self, key: str) -> tuple[int, float, str | None, int | None] | None:
        row = self._conn.execute(
            "SELECT id, importance, category, origin_session_id FROM facts "
            "WHERE user_id = %s AND key = %s AND invalidated_at IS NULL",
            (self._user, key),
        ).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), row[2], row[3])


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> FactRows:
        return PostgresFactRows(conn, "user")
