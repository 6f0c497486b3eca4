"""PostgreSQL implementation of ``storage.vectors.VectorRows``: one user's chunk vectors on file
(float32 little-endian bytes in ``chunks.embedding``, as on SQLite) and the HNSW snapshots in
``ann_index``.

Without pgvector, searches run in the index layer over resident rows; the vectors are read
here in id order by keyset pages on the primary key ``(user_id, id)``, each page its own
statement, so a reader dropped half-way leaves no server-side cursor on the pooled
connection. Where the database has the ``vector`` extension (``schema.PGVECTOR_DOC``), every
write also sets the pgvector copy ``embedding_vec`` in the same statement, and ``nearest``
orders the user's rows by pgvector's cosine distance in the server: exactly (a scan of the
user's rows) or through an HNSW index of the dimension where one exists (``hnsw_dims``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...clock import now_ts
from ..sqlite.vectors import _block
from ..vectors import VectorBlock, VectorRows

_COUNTER_KEYS = ("vectors.gen", "vectors.seq")


def vector_text(vector: np.ndarray) -> str:
    """pgvector's text form of a float32 vector, exactly: the shortest decimal of each value
    as a double, which pgvector's ``strtof`` rounds back to the same float32."""
    values = np.asarray(vector, dtype="<f4").reshape(-1).astype(np.float64).tolist()
    return "[" + ",".join(map(repr, values)) + "]"


def hnsw_index_name(dim: int) -> str:
    """The name of the HNSW index over the ``dim``-sized vectors (``create_hnsw_index``)."""
    return f"idx_chunks_hnsw_{int(dim)}"


def hnsw_index_statement(dim: int) -> str:
    """The HNSW index an operator may create for the ``dim``-sized vectors (partial, on the
    cast to the fixed size HNSW needs; cosine, as the vector leg scores)."""
    dim = int(dim)
    return (
        f"CREATE INDEX IF NOT EXISTS {hnsw_index_name(dim)} ON chunks USING hnsw "
        f"((embedding_vec::vector({dim})) vector_cosine_ops) WHERE embedding_dim = {dim}"
    )


class PostgresVectorRows:
    """``VectorRows`` for one user on one psycopg connection (inside the caller's
    transaction). Every statement names the user as well as being confined to it by
    row-level security."""

    __slots__ = ("_conn", "_pgvector", "_user")

    def __init__(self, conn: Any, user_id: str, *, pgvector: bool = False) -> None:
        self._conn = conn
        self._user = user_id
        self._pgvector = pgvector  # chunks has the pgvector copy (schema.PGVECTOR_DOC)

    # -- in-database search (pgvector) -------------------------------------------------------

    def searches_in_database(self) -> bool:
        return self._pgvector

    def hnsw_dims(self) -> frozenset[int]:
        if not self._pgvector:
            return frozenset()
        rows = self._conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = 'chunks' AND starts_with(indexname, %s)",
            (hnsw_index_name(0)[:-1],),
        ).fetchall()
        dims = (str(name).rsplit("_", 1)[-1] for (name,) in rows)
        return frozenset(int(d) for d in dims if d.isdigit())

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
        if not self._pgvector:
            raise NotImplementedError("this database has no pgvector copy of the vectors")
        dim = int(dim)
        # The size as a literal: the HNSW index of a size is partial (WHERE embedding_dim =
        # its size), and the planner can use it only where it sees the value.
        where = f"embedding_model = %s AND embedding_dim = {dim} AND embedding_vec IS NOT NULL"
        params: list[Any] = [label]
        if exclude_session is not None:
            where += " AND session_id <> %s"
            params.append(exclude_session)
        if since is not None:
            where += " AND created_at >= %s"
            params.append(since)
        if until is not None:
            where += " AND created_at < %s"
            params.append(until)
        if ef_search is None:
            # Exact: a scan of the user's rows (no HNSW index is on this expression).
            distance = "embedding_vec <=> %s::vector"
        else:
            # The expression of the HNSW index of this size.
            distance = f"embedding_vec::vector({dim}) <=> %s::vector({dim})"
            self._conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true)", (str(int(ef_search)),)
            )
        # Never prepared: a generic plan, made without the user's id, would pick one path
        # for every user (a scan of every user's rows even for a small user); each search
        # is planned with its own values.
        rows = self._conn.execute(
            f"SELECT id, embedding, {distance} FROM chunks WHERE user_id = %s AND {where} "
            f"ORDER BY {distance} LIMIT %s",
            (vector_text(query), self._user, *params, vector_text(query), int(limit)),
            prepare=False,
        ).fetchall()
        count = len(rows)
        ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=count)
        distances = np.fromiter((float(r[2]) for r in rows), dtype=np.float64, count=count)
        blobs = [bytes(r[1]) for r in rows]
        if any(len(b) != dim * 4 for b in blobs):
            raise ValueError(
                f"a stored embedding does not hold {dim} float32 values; run reindex(force=True)"
            )
        matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(count, dim)
        return ids, distances, matrix.astype(np.float32, copy=False)

    def counters(self) -> tuple[int, int]:
        rows = self._conn.execute(
            "SELECT key, value FROM meta WHERE user_id = %s AND key = ANY(%s)",
            (self._user, list(_COUNTER_KEYS)),
        ).fetchall()
        values = dict(rows)
        return int(values.get("vectors.gen", 0) or 0), int(values.get("vectors.seq", 0) or 0)

    def count(self, label: str, dim: int, *, after_seq: int | None = None) -> int:
        sql = (
            "SELECT count(*) FROM chunks WHERE user_id = %s AND embedding_model = %s "
            "AND embedding_dim = %s"
        )
        params: tuple[Any, ...] = (self._user, label, dim)
        if after_seq is not None:
            sql += " AND embed_seq > %s"
            params = (*params, after_seq)
        return int(self._conn.execute(sql, params).fetchone()[0])

    def other_model(self, label: str, dim: int) -> tuple[str, int | None] | None:
        # Range probes on idx_chunks_embedding (user_id, embedding_model, embedding_dim, …).
        probes = (
            "embedding_model < %s",
            "embedding_model > %s",
            "embedding_model = %s AND embedding_dim IS DISTINCT FROM %s",
        )
        for n, where in enumerate(probes):
            params: tuple[Any, ...] = (self._user, label) if n < 2 else (self._user, label, dim)
            row = self._conn.execute(
                f"SELECT embedding_model, embedding_dim FROM chunks WHERE user_id = %s "
                f"AND {where} LIMIT 1",
                params,
            ).fetchone()
            if row is not None:
                return str(row[0]), None if row[1] is None else int(row[1])
        return None

    def blocks(
        self, label: str, dim: int, *, after_seq: int | None = None, size: int
    ) -> Iterator[VectorBlock]:
        where = "embedding_model = %s AND embedding_dim = %s AND embedding IS NOT NULL"
        params: tuple[Any, ...] = (label, dim)
        if after_seq is not None:
            where += " AND embed_seq > %s"
            params = (*params, after_seq)
        return self._pages(where, params, dim, size)

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
        where = "embedding_model = %s AND embedding_dim = %s AND embedding IS NOT NULL"
        params: list[Any] = [label, dim]
        if exclude_session is not None:
            where += " AND session_id <> %s"
            params.append(exclude_session)
        if since is not None:
            where += " AND created_at >= %s"
            params.append(since)
        if until is not None:
            where += " AND created_at < %s"
            params.append(until)
        return self._pages(where, tuple(params), dim, size)

    def _pages(
        self, where: str, params: tuple[Any, ...], dim: int, size: int
    ) -> Iterator[VectorBlock]:
        """The matching vectors in ascending id, a keyset page per block."""
        last = None
        while True:
            after = "" if last is None else " AND id > %s"
            rows = self._conn.execute(
                "SELECT id, session_id, created_at, embedding FROM chunks WHERE user_id = %s "
                f"AND {where}{after} ORDER BY id LIMIT %s",
                (self._user, *params, *(() if last is None else (last,)), size),
            ).fetchall()
            if not rows:
                return
            yield _block(rows, dim)
            if len(rows) < size:
                return
            last = int(rows[-1][0])

    def after_id(
        self, label: str, dim: int, after_id: int, limit: int
    ) -> tuple[np.ndarray, np.ndarray]:
        rows = self._conn.execute(
            "SELECT id, embedding FROM chunks WHERE user_id = %s AND id > %s "
            "AND embedding_model = %s AND embedding_dim = %s AND embedding IS NOT NULL "
            "ORDER BY id LIMIT %s",
            (self._user, after_id, label, dim, limit),
        ).fetchall()
        ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4")
        return ids, matrix.reshape(len(rows), dim)

    def read(self, label: str, dim: int, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        size = dim * 4
        found: list[int] = []
        blobs: list[bytes] = []
        if ids:
            for cid, blob in self._conn.execute(
                "SELECT id, embedding FROM chunks WHERE user_id = %s AND id = ANY(%s) "
                "AND embedding_model = %s AND embedding_dim = %s",
                (self._user, [int(i) for i in ids], label, dim),
            ):
                if blob is not None and len(blob) == size:
                    found.append(int(cid))
                    blobs.append(bytes(blob))
        matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(found), dim)
        return np.asarray(found, dtype=np.int64), matrix

    def previous_texts(self, chunk_ids: Sequence[int]) -> dict[int, str]:
        if not chunk_ids:
            return {}
        rows = self._conn.execute(
            "SELECT c.id, p.text FROM chunks c CROSS JOIN LATERAL ("
            "SELECT text FROM chunks p WHERE p.user_id = c.user_id "
            "AND p.session_id = c.session_id AND p.id < c.id ORDER BY p.id DESC LIMIT 1) p "
            "WHERE c.user_id = %s AND c.id = ANY(%s)",
            (self._user, [int(i) for i in chunk_ids]),
        ).fetchall()
        return {int(cid): str(text) for cid, text in rows if text}

    def target(self, chunk_id: int) -> tuple[bool, str] | None:
        row = self._conn.execute(
            "SELECT embedding IS NOT NULL, text FROM chunks WHERE user_id = %s AND id = %s",
            (self._user, chunk_id),
        ).fetchone()
        return None if row is None else (bool(row[0]), str(row[1]))

    def store(self, chunk_id: int, vector: np.ndarray, label: str, seq: int) -> None:
        self.store_many(label, [(chunk_id, vector, seq)])

    def targets(self, chunk_ids: Sequence[int]) -> dict[int, tuple[bool, str]]:
        rows = self._conn.execute(
            "SELECT id, embedding IS NOT NULL, text FROM chunks WHERE user_id = %s "
            "AND id = ANY(%s::bigint[])",
            (self._user, [int(i) for i in chunk_ids]),
        ).fetchall()
        return {int(cid): (bool(has), str(text)) for cid, has, text in rows}

    def store_many(self, label: str, rows: Sequence[tuple[int, np.ndarray, int]]) -> None:
        """One statement for the whole batch."""
        if not rows:
            return
        data = [np.asarray(v, dtype="<f4").reshape(-1) for _, v, _ in rows]
        # With pgvector, its copy goes in the same statement (the trigger's slow decoding of
        # the bytes is only the fallback).
        copy, copied, texts = "", "", []
        if self._pgvector:
            copy, copied = ", embedding_vec = v.vec::vector", ", %s::text[]"
            texts = [[vector_text(d) for d in data]]
        self._conn.execute(
            "UPDATE chunks c SET embedding = v.embedding, embedding_model = %s, "
            f"embedding_dim = v.dim, embed_seq = v.seq{copy} FROM unnest(%s::bigint[], "
            f"%s::bytea[], %s::integer[], %s::bigint[]{copied}) "
            f"AS v(id, embedding, dim, seq{', vec' if copy else ''}) "
            "WHERE c.user_id = %s AND c.id = v.id",
            (
                label,
                [int(cid) for cid, _, _ in rows],
                [d.tobytes() for d in data],
                [int(d.shape[0]) for d in data],
                [int(seq) for _, _, seq in rows],
                *texts,
                self._user,
            ),
        )

    def snapshot(self, label: str, dim: int) -> tuple[int, int, bytes] | None:
        row = self._conn.execute(
            "SELECT seq, gen, data FROM ann_index WHERE user_id = %s AND label = %s AND dim = %s",
            (self._user, label, dim),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), bytes(row[2]))

    def save_snapshot(self, label: str, dim: int, seq: int, gen: int, data: bytes) -> None:
        self._conn.execute(
            "INSERT INTO ann_index (user_id, label, dim, seq, gen, data, built_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (user_id, label, dim) DO UPDATE "
            "SET seq = excluded.seq, gen = excluded.gen, data = excluded.data, "
            "built_at = excluded.built_at",
            (self._user, label, dim, seq, gen, data, now_ts()),
        )

    # -- for the command line ---------------------------------------------------------------

    def has_vectors_labelled(self, prefix: str) -> bool:
        # starts_with: no LIKE wildcards to escape in the prefix.
        row = self._conn.execute(
            "SELECT 1 FROM chunks WHERE user_id = %s AND embedding IS NOT NULL "
            "AND starts_with(embedding_model, %s) UNION ALL SELECT 1 FROM fact_vectors "
            "WHERE user_id = %s AND starts_with(embedding_model, %s) LIMIT 1",
            (self._user, prefix, self._user, prefix),
        ).fetchone()
        return row is not None


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> VectorRows:
        return PostgresVectorRows(conn, "user")
