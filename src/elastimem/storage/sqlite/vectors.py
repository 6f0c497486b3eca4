"""SQLite implementation of ``storage.vectors.VectorRows``: the chunks' vectors on file (float32
little-endian BLOBs in ``chunks.embedding``) and the HNSW snapshots in ``ann_index``.

Indexes: ``idx_chunks_embedding(embedding_model, embedding_dim, embed_seq)`` serves counts,
the model probes and reads by ``embed_seq``. Reads that walk a whole model use a unary ``+``
on its columns to keep SQLite off that index (through it every row, blobs included, would be
sorted in a temporary B-tree: 1.5 GB at 1M rows) and walk the table in rowid order instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...clock import now_ts
from ..vectors import CREATED_DTYPE, VectorBlock, VectorRows

# Ids per ``IN (…)`` list: well under SQLite's variable limit.
IN_BATCH = 500


class SqliteVectorRows:
    """``VectorRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def counters(self) -> tuple[int, int]:
        rows = self._conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('vectors.gen', 'vectors.seq')"
        )
        values = dict(rows.fetchall())
        return int(values.get("vectors.gen", 0) or 0), int(values.get("vectors.seq", 0) or 0)

    def count(self, label: str, dim: int, *, after_seq: int | None = None) -> int:
        # Counted on idx_chunks_embedding alone: a model is only ever written with its vector.
        sql = "SELECT count(*) FROM chunks WHERE embedding_model = ? AND embedding_dim = ?"
        params: tuple[Any, ...] = (label, dim)
        if after_seq is not None:
            sql += " AND embed_seq > ?"
            params = (label, dim, after_seq)
        return int(self._conn.execute(sql, params).fetchone()[0])

    def other_model(self, label: str, dim: int) -> tuple[str, int | None] | None:
        # Three range probes on idx_chunks_embedding, not a scan: cheap at 1M rows.
        probes = (
            ("embedding_model < ?", (label,)),
            ("embedding_model > ?", (label,)),
            ("embedding_model = ? AND embedding_dim IS NOT ?", (label, dim)),
        )
        for where, params in probes:
            row = self._conn.execute(
                f"SELECT embedding_model, embedding_dim FROM chunks WHERE {where} LIMIT 1", params
            ).fetchone()
            if row is not None:
                return str(row[0]), None if row[1] is None else int(row[1])
        return None

    def blocks(
        self, label: str, dim: int, *, after_seq: int | None = None, size: int
    ) -> Iterator[VectorBlock]:
        if after_seq is None:
            cursor = self._conn.execute(
                "SELECT id, session_id, created_at, embedding FROM chunks "
                "WHERE +embedding_model = ? AND +embedding_dim = ? AND embedding IS NOT NULL "
                "ORDER BY id",
                (label, dim),
            )
        else:
            cursor = self._conn.execute(
                "SELECT id, session_id, created_at, embedding FROM chunks "
                "WHERE embedding_model = ? AND embedding_dim = ? AND embedding IS NOT NULL "
                "AND embed_seq > ? ORDER BY id",
                (label, dim, after_seq),
            )
        return _blocks(cursor, dim, size)

    def filtered_blocks(
        self,
        label: str,
        dim: int,
        *,
        exclude_session: int | None,
        since: str | None,
        until: str | None,
        size: int,
    ) -> Iterator[VectorBlock]:
        where = ""
        params: list[object] = [label, dim]
        if exclude_session is not None:
            where += " AND session_id <> ?"
            params.append(exclude_session)
        if since is not None:
            where += " AND created_at >= ?"
            params.append(since)
        if until is not None:
            where += " AND created_at < ?"
            params.append(until)
        cursor = self._conn.execute(
            "SELECT id, session_id, created_at, embedding FROM chunks WHERE embedding_model = ? "
            f"AND embedding_dim = ? AND embedding IS NOT NULL{where}",
            params,
        )
        return _blocks(cursor, dim, size)

    def after_id(
        self, label: str, dim: int, after_id: int, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        # By rowid range (the ``+`` keeps SQLite off idx_chunks_embedding): each block walks
        # its rows once instead of sorting every matching row to return the next few.
        rows = self._conn.execute(
            "SELECT id, embedding FROM chunks WHERE id > ? AND +embedding_model = ? "
            "AND +embedding_dim = ? AND embedding IS NOT NULL ORDER BY id LIMIT ?",
            (after_id, label, dim, limit),
        ).fetchall()
        ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4")
        return ids, matrix.reshape(len(rows), dim)

    def read(self, label: str, dim: int, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        found: list[int] = []
        blobs: list[bytes] = []
        size = dim * 4
        wanted = [int(i) for i in ids]
        for start in range(0, len(wanted), IN_BATCH):
            part = wanted[start : start + IN_BATCH]
            for cid, blob in self._conn.execute(
                # By rowid: the unary ``+`` keeps SQLite off idx_chunks_embedding, which
                # would walk every row of the model.
                "SELECT id, embedding FROM chunks WHERE +embedding_model = ? "
                f"AND +embedding_dim = ? AND id IN ({','.join('?' * len(part))})",
                (label, dim, *part),
            ):
                if blob is not None and len(blob) == size:
                    found.append(int(cid))
                    blobs.append(bytes(blob))
        matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(found), dim)
        return np.asarray(found, dtype=np.int64), matrix

    def previous_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        previous: dict[int, str] = {}
        ids = [int(i) for i in chunk_ids]
        for start in range(0, len(ids), IN_BATCH):
            part = ids[start : start + IN_BATCH]
            for cid, text in self._conn.execute(
                "SELECT c.id, (SELECT p.text FROM chunks p WHERE p.session_id = c.session_id "
                "AND p.id < c.id ORDER BY p.id DESC LIMIT 1) FROM chunks c "
                f"WHERE c.id IN ({','.join('?' * len(part))})",
                part,
            ):
                if text:
                    previous[int(cid)] = str(text)
        return previous

    def target(self, chunk_id: int) -> tuple[bool, str] | None:
        row = self._conn.execute(
            "SELECT embedding IS NOT NULL, text FROM chunks WHERE id = ?", (chunk_id,)
        ).fetchone()
        return None if row is None else (bool(row[0]), row[1])

    def store(self, chunk_id: int, vector: np.ndarray, label: str, seq: int) -> None:
        data = np.asarray(vector, dtype="<f4").reshape(-1)
        self._conn.execute(
            "UPDATE chunks SET embedding = ?, embedding_model = ?, embedding_dim = ?, "
            "embed_seq = ? WHERE id = ?",
            (data.tobytes(), label, int(data.shape[0]), seq, chunk_id),
        )

    def targets(self, chunk_ids: Sequence[int]) -> dict[int, tuple[bool, str]]:
        found: dict[int, tuple[bool, str]] = {}
        ids = [int(i) for i in chunk_ids]
        for start in range(0, len(ids), IN_BATCH):
            part = ids[start : start + IN_BATCH]
            for cid, has, text in self._conn.execute(
                "SELECT id, embedding IS NOT NULL, text FROM chunks "
                f"WHERE id IN ({','.join('?' * len(part))})",
                part,
            ):
                found[int(cid)] = (bool(has), text)
        return found

    def store_many(self, label: str, rows: Sequence[tuple[int, np.ndarray, int]]) -> None:
        data = [np.asarray(v, dtype="<f4").reshape(-1) for _, v, _ in rows]
        self._conn.executemany(
            "UPDATE chunks SET embedding = ?, embedding_model = ?, embedding_dim = ?, "
            "embed_seq = ? WHERE id = ?",
            [
                (d.tobytes(), label, int(d.shape[0]), seq, cid)
                for (cid, _, seq), d in zip(rows, data, strict=True)
            ],
        )

    # -- in-database search: not on SQLite (the index layer scans resident rows) ----------

    def searches_in_database(self) -> bool:
        return False

    def hnsw_dims(self) -> frozenset[int]:
        return frozenset()

    def nearest(
        self,
        label: str,
        dim: int,
        query: np.ndarray,
        limit: int,
        *,
        exclude_session: int | None,
        since: str | None,
        until: str | None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError("SQLite stores search their vectors in the index layer")

    def snapshot(self, label: str, dim: int) -> tuple[int, int, bytes] | None:
        row = self._conn.execute(
            "SELECT seq, gen, data FROM ann_index WHERE label = ? AND dim = ?", (label, dim)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), bytes(row[2]))

    def save_snapshot(self, label: str, dim: int, seq: int, gen: int, data: bytes) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO ann_index (label, dim, seq, gen, data, built_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (label, dim, seq, gen, data, now_ts()),
        )

    # -- for the command line ---------------------------------------------------------------

    def has_vectors_labelled(self, prefix: str) -> bool:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        row = self._conn.execute(
            "SELECT 1 FROM chunks WHERE embedding IS NOT NULL "
            "AND embedding_model LIKE ? ESCAPE '\\' UNION ALL SELECT 1 FROM fact_vectors "
            "WHERE embedding_model LIKE ? ESCAPE '\\' LIMIT 1",
            (pattern, pattern),
        ).fetchone()
        return row is not None


def _blocks(cursor: sqlite3.Cursor, dim: int, size: int) -> Iterator[VectorBlock]:
    while True:
        rows = cursor.fetchmany(size)
        if not rows:
            return
        yield _block(rows, dim)


def _block(rows: Sequence[tuple[Any, ...]], dim: int) -> VectorBlock:
    """``(id, session_id, created_at, embedding)`` rows as a ``VectorBlock``."""
    count = len(rows)
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=count)
    sessions = np.fromiter((r[1] for r in rows), dtype=np.int64, count=count)
    created = np.array(
        [str(r[2]).encode("ascii", "replace")[:27] for r in rows], dtype=CREATED_DTYPE
    )
    blobs = [r[3] for r in rows]
    sizes = {len(b) for b in blobs}
    if sizes != {dim * 4}:
        raise ValueError(
            f"a stored embedding does not hold {dim} float32 values; run reindex(force=True)"
        )
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(count, dim)
    return VectorBlock(ids, sessions, created, matrix.astype(np.float32, copy=False))


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: sqlite3.Connection) -> VectorRows:
        return SqliteVectorRows(conn)
