"""SQLite implementation of ``storage.stats.StatsRows``: counts and sizes for stats()."""

from __future__ import annotations

import os
import sqlite3

from ..stats import COUNT_STATEMENTS, like_prefix
from . import files


class SqliteStatsRows:
    """``StatsRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _one(self, sql: str, *params: object) -> int:
        return int(self._conn.execute(sql, params).fetchone()[0])

    def counts(self) -> dict[str, int]:
        return {key: self._one(sql) for key, sql in COUNT_STATEMENTS.items()}

    def most_common_vector_model(self, prefix: str = "") -> str | None:
        row = self._conn.execute(
            "SELECT embedding_model FROM (SELECT embedding_model FROM chunks UNION ALL "
            "SELECT embedding_model FROM fact_vectors) WHERE embedding_model LIKE ? "
            "ESCAPE '\\' GROUP BY embedding_model ORDER BY count(*) DESC LIMIT 1",
            (like_prefix(prefix),),
        ).fetchone()
        return str(row[0]) if row else None

    def has_recorded_embedder(self, prefix: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM meta WHERE key LIKE ? ESCAPE '\\' LIMIT 1",
            (like_prefix("embedder." + prefix),),
        ).fetchone()
        return row is not None

    def chunk_vectors(self, label: str | None, dim: int | None) -> tuple[int, int]:
        if label is None:
            return 0, self._one("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")
        if dim is None:
            return 0, 0
        current = self._one(
            "SELECT count(*) FROM chunks WHERE embedding_model = ? AND embedding_dim = ?",
            label,
            dim,
        )
        stale = self._one(
            "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL AND "
            "(embedding_model IS NOT ? OR embedding_dim IS NOT ?)",
            label,
            dim,
        )
        return current, stale

    def embedded_facts(self, label: str | None, dim: int | None) -> int:
        return self._one(
            "SELECT count(*) FROM facts f JOIN fact_vectors v ON v.fact_id = f.id "
            "WHERE f.invalidated_at IS NULL AND f.archived = 0 AND v.embedding_model = ? "
            "AND v.embedding_dim = ?",
            label,
            dim if dim is not None else -1,
        )

    def _path(self) -> str:
        """The main database's file ("" in memory)."""
        for _seq, name, path in self._conn.execute("PRAGMA database_list"):
            if name == "main":
                return str(path or "")
        return ""

    def file_bytes(self) -> int:
        path = self._path()
        if not path:
            return 0
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += os.path.getsize(path + suffix)
            except OSError:
                pass
        return total

    def file_mode(self) -> str | None:
        path = self._path()
        return files.file_mode(path) if path else None
