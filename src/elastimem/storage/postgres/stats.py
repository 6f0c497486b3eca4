"""PostgreSQL implementation of ``storage.stats.StatsRows``: one user's counts and sizes.

A server's files hold every user's rows, so there is no file of one user's store to measure:
``file_bytes`` is the bytes of this user's rows as stored (``pg_column_size`` of each row
over every user table, TOAST-compressed values at their stored size), without the indexes,
free space and dead row versions the server also keeps for them (the database's size,
``pg_database_size``, would tell one user about all the others). It reads every row of the
user (measured: 0.11 s for 10k chunks, against 8 ms for ``counts``), which is fine for
``stats()`` and is why nothing on a hot path asks for it. ``file_mode`` is None: the
server's files are the operator's, not the library's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..stats import COUNT_STATEMENTS, StatsRows, like_prefix
from .schema import USER_TABLES

# The user's rows of every table, one statement: (table's rows' bytes) summed.
_ROW_BYTES = " UNION ALL ".join(
    f"SELECT sum(pg_column_size(t.*)) AS n FROM {table} t WHERE t.user_id = %(user)s"
    for table in USER_TABLES
)


def _scoped(sql: str) -> str:
    """A count of ``COUNT_STATEMENTS`` (plain SQL both backends read alike) for one user."""
    if " WHERE " in sql:
        return sql.replace(" WHERE ", " WHERE user_id = %s AND ", 1)
    return sql + " WHERE user_id = %s"


class PostgresStatsRows:
    """``StatsRows`` for one user on one psycopg connection (inside the caller's
    transaction)."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def _one(self, sql: str, *params: object) -> int:
        return int(self._conn.execute(sql, (self._user, *params)).fetchone()[0] or 0)

    def counts(self) -> dict[str, int]:
        selects = ", ".join(f"({_scoped(sql)})" for sql in COUNT_STATEMENTS.values())
        row = self._conn.execute(
            f"SELECT {selects}", [self._user] * len(COUNT_STATEMENTS)
        ).fetchone()
        return {key: int(value) for key, value in zip(COUNT_STATEMENTS, row, strict=True)}

    def most_common_vector_model(self, prefix: str = "") -> str | None:
        row = self._conn.execute(
            "SELECT embedding_model FROM (SELECT embedding_model FROM chunks "
            "WHERE user_id = %(user)s UNION ALL SELECT embedding_model FROM fact_vectors "
            "WHERE user_id = %(user)s) m WHERE embedding_model LIKE %(like)s ESCAPE '\\' "
            "GROUP BY embedding_model ORDER BY count(*) DESC, embedding_model LIMIT 1",
            {"user": self._user, "like": like_prefix(prefix)},
        ).fetchone()
        return str(row[0]) if row else None

    def has_recorded_embedder(self, prefix: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM meta WHERE user_id = %s AND key LIKE %s ESCAPE '\\' LIMIT 1",
            (self._user, like_prefix("embedder." + prefix)),
        ).fetchone()
        return row is not None

    def chunk_vectors(self, label: str | None, dim: int | None) -> tuple[int, int]:
        if label is None:
            return 0, self._one(
                "SELECT count(*) FROM chunks WHERE user_id = %s AND embedding IS NOT NULL"
            )
        if dim is None:
            return 0, 0
        row = self._conn.execute(
            "SELECT count(*) FILTER (WHERE embedding_model = %s AND embedding_dim = %s), "
            "count(*) FILTER (WHERE embedding IS NOT NULL AND (embedding_model IS DISTINCT "
            "FROM %s OR embedding_dim IS DISTINCT FROM %s)) FROM chunks WHERE user_id = %s",
            (label, dim, label, dim, self._user),
        ).fetchone()
        return int(row[0]), int(row[1])

    def embedded_facts(self, label: str | None, dim: int | None) -> int:
        return self._one(
            "SELECT count(*) FROM facts f JOIN fact_vectors v ON v.user_id = f.user_id "
            "AND v.fact_id = f.id WHERE f.user_id = %s AND f.invalidated_at IS NULL "
            "AND f.archived = 0 AND v.embedding_model = %s AND v.embedding_dim = %s",
            label,
            dim if dim is not None else -1,
        )

    def file_bytes(self) -> int:
        row = self._conn.execute(
            f"SELECT coalesce(sum(n), 0) FROM ({_ROW_BYTES}) sizes", {"user": self._user}
        ).fetchone()
        return int(row[0])

    def file_mode(self) -> str | None:
        return None


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> StatsRows:
        return PostgresStatsRows(conn, "user")
