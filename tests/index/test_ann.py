"""How the vector index reads a large store (§4.4): one pass in rowid order, never a sort.

At 1M chunks the vectors are 1.5 GB of BLOBs. Read through ``idx_chunks_embedding`` with
``ORDER BY id``, SQLite sorts every matching row, blobs included, in a temporary B-tree;
the HNSW build, which reads 8192-row blocks, would do that once per block. These tests
capture the SQL that the full load and the build actually run and check SQLite's plan.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import elastimem
from elastimem.index import ann as ann_module
from elastimem.storage.sqlite import database as db_module
from tests import rows as raw
from tests.conftest import HashEmbedder
from tests.index.chunk_vectors import (
    LABEL,
    add_chunks,
    index_for,
    needs_usearch,
    search,
    unit_rows,
)


@pytest.fixture
def database(tmp_path: Path) -> Iterator[db_module.Database]:
    store = db_module.open_store(tmp_path / "ann.db")
    yield store
    store.close()


def _plans(database: db_module.Database, statements: list[str]) -> list[tuple[str, str]]:
    """``(statement, plan)`` for each captured SELECT that reads the embedding column."""
    out = []
    for sql in statements:
        if sql.lstrip().upper().startswith("SELECT") and "embedding FROM chunks" in sql:
            rows = raw.rows(database, "EXPLAIN QUERY PLAN " + sql)
            out.append((sql, " | ".join(str(r[3]) for r in rows)))
    return out


@contextlib.contextmanager
def _tracing(database: db_module.Database) -> Iterator[list[str]]:
    """Every statement this thread's read connection runs (``read()`` reuses it)."""
    statements: list[str] = []
    with database.read() as tx:
        conn = tx.conn
    conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        conn.set_trace_callback(None)


def test_the_full_load_walks_the_table_without_sorting(database: db_module.Database) -> None:
    rng = np.random.default_rng(31)
    add_chunks(database, unit_rows(rng, 300, 8))
    index = index_for(database, vector_backend="numpy")
    query = unit_rows(rng, 1, 8)[0]
    with _tracing(database) as statements:
        search(index, database, query, 5)
    plans = _plans(database, statements)
    assert plans, statements
    for sql, plan in plans:
        assert "TEMP B-TREE" not in plan and "idx_chunks_embedding" not in plan, (sql, plan)
    assert index.resident_rows == 300


@needs_usearch
def test_the_hnsw_build_reads_blocks_by_rowid(
    database: db_module.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(32)
    add_chunks(database, unit_rows(rng, 250, 8))
    monkeypatch.setattr(ann_module, "BUILD_BLOCK_ROWS", 100)
    with _tracing(database) as statements:
        built = ann_module.build(database, LABEL, 8)
    assert built.size == 250
    plans = _plans(database, statements)
    assert len(plans) == 4  # 100 + 100 + 50 rows, then an empty block
    for sql, plan in plans:
        assert "INTEGER PRIMARY KEY" in plan and "TEMP B-TREE" not in plan, (sql, plan)


@needs_usearch
def test_a_restored_snapshot_searches_as_wide_as_a_built_one(
    database: db_module.Database,
) -> None:
    rng = np.random.default_rng(33)
    add_chunks(database, unit_rows(rng, 500, 16))
    built = ann_module.build(database, LABEL, 16)
    restored = ann_module.AnnIndex.from_bytes(LABEL, 16, built.gen, built.seq, built.to_bytes())
    assert restored.size == built.size == restored.saved_size == 500
    assert restored._index.expansion_search == ann_module.EXPANSION_SEARCH
    assert restored._index.connectivity == ann_module.CONNECTIVITY
    query = unit_rows(rng, 1, 16)[0]
    assert list(restored.search(query, 20)) == list(built.search(query, 20))


@needs_usearch
def test_hnsw_answers_match_numpy_on_a_store(database: db_module.Database) -> None:
    rng = np.random.default_rng(34)
    add_chunks(database, unit_rows(rng, 1000, 16))
    exact = index_for(database, vector_backend="numpy")
    approx = index_for(database, vector_backend="hnsw")
    approx.build_ann_now(LABEL, 16)
    assert approx.backend_name() == "hnsw"
    hits = 0
    for query in unit_rows(rng, 20, 16):
        found = search(approx, database, query, 10)
        truth = dict(search(exact, database, query, 1000))
        # Exact scores, (-score, -id) order; a graph may leave a node or two unreachable
        # (HNSW pruning), so overlap, not equality, is the approximate part.
        assert all(score == truth[cid] for cid, score in found)
        assert found == sorted(found, key=lambda item: (-item[1], -item[0]))
        hits += len({cid for cid, _ in found} & set(list(truth)[:10]))
    assert hits / 200 >= 0.98


_REOPEN_WITHOUT_USEARCH = r"""
import json, logging, sys

sys.modules["usearch"] = None  # the vec extra is not installed in this process
sys.modules["usearch.index"] = None

import elastimem
from tests.conftest import HashEmbedder

records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("elastimem").addHandler(handler)
user = sys.argv[2] if len(sys.argv) > 2 else None  # a PostgreSQL store's user
options = {"user_id": user, "embedder": HashEmbedder(), "vector_backend": "hnsw"}
with elastimem.open(sys.argv[1], **options) as mem:
    counts = [len(mem.recall("lighthouse keeper", 5)) for _ in range(3)]
    vector = mem.explain("lighthouse keeper").chunk_breakdowns[0].vector
    stats = mem.stats()
warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
print(json.dumps({"counts": counts, "vector": vector, "stats": stats, "warnings": warnings}))
"""


@needs_usearch
@pytest.mark.slow
def test_a_process_without_the_vec_extra_reopens_an_hnsw_store(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    embedder = HashEmbedder()
    mem = make_store(embedder=embedder, vector_backend="hnsw")
    for i in range(30):
        mem.record_turn(f"note {i} about the lighthouse keeper", "Noted.")
    assert mem.drain(10)
    mem.close()
    database = raw.open_storage(mem)
    try:
        assert index_for(database, vector_backend="hnsw").build_ann_now(LABEL, embedder.dim)
    finally:
        database.close()
    built_at = raw.rows(mem, "SELECT built_at FROM ann_index")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _REOPEN_WITHOUT_USEARCH, *raw.open_args(mem)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["counts"] == [5, 5, 5] and seen["vector"] > 0  # exact numpy answered
    stats = seen["stats"]
    assert stats["vector_backend"] == "numpy"
    assert stats["chunks"] == 30 and stats["embedded_chunks"] == 30
    assert len([w for w in seen["warnings"] if "usearch" in w]) == 1, seen["warnings"]
    # The snapshot is only a cache, and it is still there for a process that has usearch.
    again = make_store(embedder=HashEmbedder(), vector_backend="hnsw")
    assert again.recall("lighthouse keeper", 5)
    assert again.stats()["vector_backend"] == "hnsw"
    assert raw.rows(again, "SELECT built_at FROM ann_index") == built_at  # not rebuilt


@needs_usearch
def test_a_graph_built_while_the_tier_fell_to_lite_is_not_installed(
    database: db_module.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LITE frees the matrix and the graph; a build finishing after that installed its
    graph anyway, and it stayed resident for as long as the store was at LITE."""
    add_chunks(database, unit_rows(np.random.default_rng(5), 300, 16))
    index = index_for(database, vector_backend="hnsw")
    real_build = ann_module.build

    def build_then_lite(*args: object) -> ann_module.AnnIndex:
        built = real_build(*args)  # type: ignore[arg-type]
        index.set_streaming(True)  # the tier drops to LITE while the build finishes
        return built

    monkeypatch.setattr(ann_module, "build", build_then_lite)
    index._build(LABEL, 16)
    assert index.backend_name() == "numpy-stream" and index.ann_bytes == 0


def test_the_search_width_grows_with_the_square_root_of_the_size() -> None:
    width = ann_module.search_width
    assert width(1) == width(ann_module.WIDTH_REFERENCE_ROWS) == ann_module.EXPANSION_SEARCH
    assert width(4 * ann_module.WIDTH_REFERENCE_ROWS) == 2 * ann_module.EXPANSION_SEARCH
    assert 1200 <= width(1_000_000) <= 1300


@needs_usearch
def test_a_graph_is_searched_at_its_width_unless_one_is_fixed(
    database: db_module.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(35)
    add_chunks(database, unit_rows(rng, 300, 8))
    graph = ann_module.build(database, LABEL, 8)
    monkeypatch.setattr(ann_module, "WIDTH_REFERENCE_ROWS", 75)  # 300 rows: twice as wide
    graph.search(unit_rows(rng, 1, 8)[0], 10)
    assert graph._index.expansion_search == 2 * ann_module.EXPANSION_SEARCH
    graph.width = 123
    graph.search(unit_rows(rng, 1, 8)[0], 10)
    assert graph._index.expansion_search == 123
