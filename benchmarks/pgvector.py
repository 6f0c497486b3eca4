"""The vector leg on PostgreSQL with pgvector (issue #18): per-process numpy vs the database.

For each size one user's store is bulk-loaded with the synthetic exchanges and vectors of
``latency.py`` (through the storage seam, as ``latency.py --backend postgres`` loads it), and
a small user (``--small`` exchanges) is loaded beside it. Then the vector leg alone (top 50,
as §5.6 asks) is timed for the big user on three paths:

* ``numpy``: today's resident search in this process (``vector_backend="numpy"``), with the
  bytes it holds per user;
* ``in-db exact``: pgvector's ``<=>`` over the user's rows in the server, re-scored exactly
  (``vector_backend="pgvector"``); ids and scores are checked equal to
  numpy's;
* ``in-db hnsw``: through a shared HNSW index over every user's rows (created here as the
  superuser: ``CREATE INDEX`` on the expression ``storage.postgres.vectors`` names), at
  several ``hnsw.ef_search`` widths, with recall@10 against the exact top 10 for the big
  user and for the small user (pgvector 0.6 filters ``user_id`` after the walk: the rows it
  returns for the small user are counted too).

``--pg-url`` is a superuser's address of a server with pgvector (the extension installable);
without it a private PostgreSQL 16 + pgvector from the ``pgserver`` wheel is started.

    python benchmarks/pgvector.py --sizes 10000 100000 --queries 100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = str(Path(__file__).resolve().parents[1])
for entry in (ROOT, str(Path(__file__).resolve().parent)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from latency import Corpus, SyntheticEmbedder, make_queries, pct, pg_bulk_load  # noqa: E402

from elastimem import storage  # noqa: E402
from elastimem.config import ElastimemConfig  # noqa: E402
from elastimem.index import in_database  # noqa: E402
from elastimem.index import vectors as vector_index  # noqa: E402
from elastimem.retrieval.rank import VECTOR_CANDIDATES, Filters  # noqa: E402
from elastimem.storage.postgres import migrations  # noqa: E402
from elastimem.storage.postgres.vectors import hnsw_index_name, hnsw_index_statement  # noqa: E402

LABEL = "host"


def prepare(admin_url: str | None) -> tuple[Any, str, str]:
    """(server or None, superuser address, application address) of a new database with the
    extension and the schema."""
    import psycopg
    from tests import pg_server

    server = None
    if admin_url is None:
        server = pg_server.start(pg_server.pgvector_bin_dir())
        admin_url = server.admin_url
    else:
        server = pg_server.PgServer(admin_url)
    database = server.create_database("elastimem_pgvector_bench")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        migrations.ensure_schema(conn, "the benchmark database")
    return server, database, server.app_url(database)


def search_all(
    index: vector_index.VectorIndex, database: Any, vectors: list[np.ndarray]
) -> tuple[list[list[tuple[int, float]]], list[float], str]:
    found, times = [], []
    for vector in vectors:
        with database.read() as conn:
            t0 = time.perf_counter()
            result = index.search(conn, vector, LABEL, Filters(), VECTOR_CANDIDATES)
            times.append(time.perf_counter() - t0)
        found.append(list(result))
    return found, times, index.backend_name()


def recall_at_10(found: list[list[int]], exact: list[list[int]]) -> float:
    hits = sum(len(set(a[:10]) & set(e[:10])) for a, e in zip(found, exact))
    return hits / max(1, sum(min(10, len(e)) for e in exact))


def raw_hnsw(
    database: Any, vectors: list[np.ndarray], ef: int, limit: int
) -> tuple[list[list[int]], list[float]]:
    """The rows pgvector's HNSW walk alone returns (no fallback)."""
    found, times = [], []
    for vector in vectors:
        with database.read() as conn:
            t0 = time.perf_counter()
            ids, _, _ = conn.vectors.nearest(
                LABEL,
                vector.shape[0],
                vector,
                limit,
                exclude_session=None,
                since=None,
                until=None,
                ef_search=ef,
            )
            times.append(time.perf_counter() - t0)
        found.append([int(i) for i in ids])
    return found, times


def run_size(size: int, args: argparse.Namespace, admin: str, app: str) -> dict[str, Any]:
    import psycopg

    corpus, embedder = Corpus(), SyntheticEmbedder()
    row: dict[str, Any] = {"size": size, "load_avg": os.getloadavg()[0]}
    big, small = f"big-{size}-{os.urandom(3).hex()}", f"small-{size}-{os.urandom(3).hex()}"
    print(f"== {size:,} exchanges (+ {args.small} for a small user)", file=sys.stderr)
    row["load_s"] = pg_bulk_load(app, big, corpus, size, embedder)
    pg_bulk_load(app, small, corpus, args.small, embedder)
    queries = make_queries(corpus, size, args.queries)
    vectors = list(embedder(queries))
    small_vectors = list(embedder(make_queries(corpus, args.small, args.queries)))
    databases = {user: storage.open_database(app, user_id=user) for user in (big, small)}
    try:
        db = databases[big]
        numpy_index = vector_index.VectorIndex(db, ElastimemConfig(vector_backend="numpy"))
        search_all(numpy_index, db, vectors[:3])  # loads the rows
        exact, times, path = search_all(numpy_index, db, vectors)
        row["numpy_p50_ms"], row["numpy_p95_ms"] = pct(times, 50), pct(times, 95)
        row["numpy_resident_mb"] = numpy_index.resident_bytes / 2**20
        numpy_index.close()
        in_db = vector_index.VectorIndex(db, ElastimemConfig(ann_min_rows=10**9))
        search_all(in_db, db, vectors[:3])
        found, times, path = search_all(in_db, db, vectors)
        row["exact_path"] = path
        row["in_db_exact_p50_ms"], row["in_db_exact_p95_ms"] = pct(times, 50), pct(times, 95)
        row["in_db_exact_identical"] = found == exact
        row["in_db_resident_mb"] = in_db.resident_bytes / 2**20
        in_db.close()
        exact_ids = [[cid for cid, _ in hits] for hits in exact]
        small_db = databases[small]
        small_index = vector_index.VectorIndex(small_db, ElastimemConfig(ann_min_rows=10**9))
        small_exact, _, _ = search_all(small_index, small_db, small_vectors)
        small_exact_ids = [[cid for cid, _ in hits] for hits in small_exact]
        t0 = time.perf_counter()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '256MB'")
            conn.execute(hnsw_index_statement(embedder.dim))
            conn.execute("ANALYZE chunks")
        row["hnsw_build_s"] = time.perf_counter() - t0
        hnsw = vector_index.VectorIndex(db, ElastimemConfig(vector_backend="hnsw"))
        for ef in args.ef:
            in_database.PGVECTOR_MIN_EF_SEARCH = ef
            found, times, path = search_all(hnsw, db, vectors)
            point = {
                "ef": ef,
                "path": path,
                "p50_ms": pct(times, 50),
                "p95_ms": pct(times, 95),
                "recall_at_10": recall_at_10([[c for c, _ in h] for h in found], exact_ids),
            }
            raw, raw_times = raw_hnsw(small_db, small_vectors, ef, VECTOR_CANDIDATES)
            point["small_raw_rows"] = float(np.mean([len(r) for r in raw]))
            point["small_raw_recall_at_10"] = recall_at_10(raw, small_exact_ids)
            point["small_raw_p50_ms"] = pct(raw_times, 50)
            row.setdefault("hnsw", []).append(point)
        hnsw.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP INDEX IF EXISTS {hnsw_index_name(embedder.dim)}")
    finally:
        for database in databases.values():
            database.close()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ef", type=int, nargs="*", default=[200, 400, 1000])
    parser.add_argument("--pg-url", default=None, help="a superuser's address (pgvector)")
    args = parser.parse_args(argv)
    server, admin, app = prepare(args.pg_url)
    try:
        for size in args.sizes:
            row = run_size(size, args, admin, app)
            for key, value in row.items():
                if key != "hnsw":
                    print(f"{size:>8,} {key:<24} {value}")
            for point in row.get("hnsw", []):
                print(f"{size:>8,} hnsw {point}")
            sys.stdout.flush()
    finally:
        if args.pg_url is None and server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
