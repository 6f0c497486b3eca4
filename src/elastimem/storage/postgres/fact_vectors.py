"""PostgreSQL implementation of ``storage.fact_vectors.FactVectorRows``: one vector per fact
version of one user, on file (``fact_vectors``, float32 little-endian bytes as on SQLite).

``meta.fact_vectors.stamp`` and ``meta.facts.stamp`` follow the rows through the schema's
triggers (``schema._STAMPED``), as SQLite's do. Every statement names the user as well as
being confined to it by row-level security.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..fact_vectors import FactVectorRows
from ..meta import FACT_VECTORS_STAMP_KEY, FACTS_STAMP_KEY
from .sql import limit as _limit

_LIVE = "f.user_id = %s AND f.invalidated_at IS NULL AND f.archived = 0"


class PostgresFactVectorRows:
    """``FactVectorRows`` for one user on one psycopg connection (inside the caller's
    transaction)."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def pending(self, label: str, dim: int | None, limit: int) -> list[tuple[int, str, str]]:
        # As on SQLite, a dimension of None matches no vector: every live fact is pending.
        rows = self._conn.execute(
            f"SELECT f.id, f.key, f.value FROM facts f WHERE {_LIVE} AND NOT EXISTS ("
            "SELECT 1 FROM fact_vectors v WHERE v.user_id = f.user_id AND v.fact_id = f.id "
            "AND v.embedding_model = %s AND v.embedding_dim = %s) ORDER BY f.id LIMIT %s",
            (self._user, label, dim if dim is not None else -1, _limit(limit)),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def any_without_vector(self) -> bool:
        row = self._conn.execute(
            f"SELECT 1 FROM facts f WHERE {_LIVE} AND NOT EXISTS (SELECT 1 FROM fact_vectors v "
            "WHERE v.user_id = f.user_id AND v.fact_id = f.id) LIMIT 1",
            (self._user,),
        ).fetchone()
        return row is not None

    def all_live(self) -> list[tuple[int, str, str]]:
        rows = self._conn.execute(
            f"SELECT f.id, f.key, f.value FROM facts f WHERE {_LIVE} ORDER BY f.id",
            (self._user,),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def put(self, fact_id: int, key: str, value: str, label: str, vector: np.ndarray) -> bool:
        row = self._conn.execute(
            "SELECT key, value FROM facts WHERE user_id = %s AND id = %s", (self._user, fact_id)
        ).fetchone()
        if row is None or (str(row[0]), str(row[1])) != (key, value):
            return False
        blob = np.asarray(vector, dtype="<f4")
        self._conn.execute(
            "INSERT INTO fact_vectors (user_id, fact_id, embedding_model, embedding_dim, "
            "embedding) VALUES (%s, %s, %s, %s, %s) ON CONFLICT (user_id, fact_id) DO UPDATE "
            "SET embedding_model = excluded.embedding_model, "
            "embedding_dim = excluded.embedding_dim, embedding = excluded.embedding",
            (self._user, fact_id, label, int(blob.shape[0]), blob.tobytes()),
        )
        return True

    def stamps(self) -> tuple[str | None, str | None]:
        found = dict(
            self._conn.execute(
                "SELECT key, value FROM meta WHERE user_id = %s AND key IN (%s, %s)",
                (self._user, FACTS_STAMP_KEY, FACT_VECTORS_STAMP_KEY),
            ).fetchall()
        )
        return found.get(FACTS_STAMP_KEY), found.get(FACT_VECTORS_STAMP_KEY)

    def live_vectors(self, label: str, dim: int) -> list[tuple[int, str, bytes]]:
        rows = self._conn.execute(
            "SELECT f.id, f.valid_from, v.embedding FROM facts f JOIN fact_vectors v "
            f"ON v.user_id = f.user_id AND v.fact_id = f.id WHERE {_LIVE} "
            "AND v.embedding_model = %s AND v.embedding_dim = %s ORDER BY f.id",
            (self._user, label, dim),
        ).fetchall()
        return [(int(r[0]), str(r[1]), bytes(r[2])) for r in rows if r[2] is not None]

    def waiting(self, label: str, dim: int, limit: int) -> list[tuple[int, str, str, str]]:
        rows = self._conn.execute(
            f"SELECT f.id, f.key, f.value, f.valid_from FROM facts f WHERE {_LIVE} "
            "AND NOT EXISTS (SELECT 1 FROM fact_vectors v WHERE v.user_id = f.user_id "
            "AND v.fact_id = f.id AND v.embedding_model = %s AND v.embedding_dim = %s) "
            "ORDER BY f.id DESC LIMIT %s",
            (self._user, label, dim, _limit(limit)),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> FactVectorRows:
        return PostgresFactVectorRows(conn, "user")
