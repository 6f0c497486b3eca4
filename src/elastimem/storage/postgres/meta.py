"""PostgreSQL implementation of ``storage.meta.MetaRows``: one user's key/value settings,
generation counters and event log."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...clock import now_ts
from ..meta import EVENTS_KEPT, MetaRows

SCHEMA_VERSION_KEY = "schema_version"


class PostgresMetaRows:
    """``MetaRows`` for one user on one psycopg connection (inside the caller's
    transaction). Every statement names the user as well as being confined to it by
    row-level security."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def get(self, key: str, default: str | None = None) -> str | None:
        if key == SCHEMA_VERSION_KEY:
            # The schema is the server's, one for every user: its ledger says the version.
            row = self._conn.execute("SELECT max(version) FROM elastimem_schema").fetchone()
            return str(row[0]) if row and row[0] is not None else default
        row = self._conn.execute(
            "SELECT value FROM meta WHERE user_id = %s AND key = %s", (self._user, key)
        ).fetchone()
        return str(row[0]) if row else default

    def get_int(self, key: str, default: int = 0) -> int:
        value = self.get(key)
        try:
            return int(value) if value is not None else default
        except ValueError:
            return default

    def set(self, key: str, value: object) -> None:
        self._conn.execute(
            "INSERT INTO meta (user_id, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value",
            (self._user, key, str(value)),
        )

    def bump(self, key: str, by: int = 1) -> int:
        # One round trip (it runs on every turn). A value that is no integer counts as 0,
        # as get_int reads it.
        row = self._conn.execute(
            "INSERT INTO meta AS m (user_id, key, value) VALUES (%(user)s, %(key)s, %(first)s) "
            "ON CONFLICT (user_id, key) DO UPDATE SET value = ((CASE WHEN "
            "btrim(m.value) ~ '^[-+]?[0-9]{1,18}$' THEN btrim(m.value)::bigint ELSE 0 END) "
            "+ %(by)s::bigint)::text "
            "RETURNING value",
            {"user": self._user, "key": key, "first": str(int(by)), "by": int(by)},
        ).fetchone()
        return int(row[0])

    def log_event(self, kind: str, **detail: object) -> None:
        self._conn.execute(
            "INSERT INTO events (user_id, ts, kind, detail) VALUES (%s, %s, %s, %s)",
            (self._user, now_ts(), kind, json.dumps(detail, sort_keys=True, default=str)),
        )
        self.trim_events()

    def trim_events(self) -> None:
        # Ids come from a sequence all users share, so "the newest EVENTS_KEPT" is found by
        # position in this user's primary key, not by arithmetic on the highest id.
        self._conn.execute(
            "DELETE FROM events WHERE user_id = %s AND id < ("
            "SELECT id FROM events WHERE user_id = %s ORDER BY id DESC OFFSET %s LIMIT 1)",
            (self._user, self._user, EVENTS_KEPT - 1),
        )


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> MetaRows:
        return PostgresMetaRows(conn, "user")
