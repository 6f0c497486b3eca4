"""SQLite implementation of ``storage.fact_vectors.FactVectorRows``: one vector per fact version,
on file (schema v7, ``migrations.TABLES_V7``)."""

from __future__ import annotations

import sqlite3

import numpy as np

from ..meta import FACT_VECTORS_STAMP_KEY, FACTS_STAMP_KEY


class SqliteFactVectorRows:
    """``FactVectorRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def pending(self, label: str, dim: int | None, limit: int) -> list[tuple[int, str, str]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._conn.execute(
                "SELECT f.id, f.key, f.value FROM facts f WHERE f.invalidated_at IS NULL "
                "AND f.archived = 0 AND NOT EXISTS (SELECT 1 FROM fact_vectors v "
                "WHERE v.fact_id = f.id AND v.embedding_model = ? AND v.embedding_dim IS ?) "
                "ORDER BY f.id LIMIT ?",
                (label, dim if dim is not None else -1, limit),
            )
        ]

    def any_without_vector(self) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM facts f WHERE f.invalidated_at IS NULL AND f.archived = 0 "
            "AND NOT EXISTS (SELECT 1 FROM fact_vectors v WHERE v.fact_id = f.id) LIMIT 1"
        ).fetchone()
        return row is not None

    def all_live(self) -> list[tuple[int, str, str]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._conn.execute(
                "SELECT id, key, value FROM facts WHERE invalidated_at IS NULL AND archived = 0 "
                "ORDER BY id"
            )
        ]

    def put(self, fact_id: int, key: str, value: str, label: str, vector: np.ndarray) -> bool:
        row = self._conn.execute("SELECT key, value FROM facts WHERE id = ?", (fact_id,)).fetchone()
        if row is None or (str(row[0]), str(row[1])) != (key, value):
            return False
        blob = np.asarray(vector, dtype="<f4")
        self._conn.execute(
            "INSERT OR REPLACE INTO fact_vectors (fact_id, embedding_model, embedding_dim, "
            "embedding) VALUES (?, ?, ?, ?)",
            (fact_id, label, int(blob.shape[0]), blob.tobytes()),
        )
        return True

    def stamps(self) -> tuple[str | None, str | None]:
        found = dict(
            self._conn.execute(
                "SELECT key, value FROM meta WHERE key IN (?, ?)",
                (FACTS_STAMP_KEY, FACT_VECTORS_STAMP_KEY),
            ).fetchall()
        )
        return found.get(FACTS_STAMP_KEY), found.get(FACT_VECTORS_STAMP_KEY)

    def live_vectors(self, label: str, dim: int) -> list[tuple[int, str, bytes]]:
        rows = self._conn.execute(
            "SELECT f.id, f.valid_from, v.embedding FROM facts f JOIN fact_vectors v "
            "ON v.fact_id = f.id WHERE f.invalidated_at IS NULL AND f.archived = 0 "
            "AND v.embedding_model = ? AND v.embedding_dim = ? ORDER BY f.id",
            (label, dim),
        ).fetchall()
        return [(int(r[0]), str(r[1]), bytes(r[2])) for r in rows if r[2] is not None]

    def waiting(self, label: str, dim: int, limit: int) -> list[tuple[int, str, str, str]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]))
            for r in self._conn.execute(
                "SELECT f.id, f.key, f.value, f.valid_from FROM facts f WHERE f.invalidated_at "
                "IS NULL AND f.archived = 0 AND NOT EXISTS (SELECT 1 FROM fact_vectors v "
                "WHERE v.fact_id = f.id AND v.embedding_model = ? AND v.embedding_dim = ?) "
                "ORDER BY f.id DESC LIMIT ?",
                (label, dim, limit),
            )
        ]
