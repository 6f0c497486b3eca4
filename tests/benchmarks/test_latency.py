"""``benchmarks/latency.py`` runs end to end at a tiny size: SQLite alone (bulk-loaded), and
SQLite side by side with PostgreSQL (``--backend postgres``) on the test session's server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LATENCY_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "latency.py"
TINY = ["--sizes", "60", "--queries", "4", "--ann-queries", "4"]


def run(tmp_path: Path, *args: str) -> tuple[str, list[dict[str, object]]]:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(LATENCY_PY), *TINY, "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text(encoding="utf-8"))


def test_sqlite_alone_with_a_bulk_loaded_store(tmp_path: Path) -> None:
    stdout, rows = run(tmp_path, "--api-max", "0", "--no-hnsw", "--workdir", str(tmp_path))
    (row,) = rows
    assert row["size"] == 60
    for key in ("bulk_load_s", "keyword_p50_ms", "hybrid_numpy_p50_ms", "record_turn_p50_ms"):
        assert float(row[key]) > 0  # type: ignore[arg-type]
    assert "turn p50" in stdout and "kw p50" in stdout


def test_postgres_side_by_side_with_sqlite(tmp_path: Path, postgres_url: str) -> None:
    stdout, rows = run(tmp_path, "--backend", "postgres", "--pg-url", postgres_url, "--turns", "3")
    (row,) = rows
    assert row["size"] == 60
    for key in ("record_turn", "keyword", "hybrid", "vector"):
        for backend in ("sqlite", "postgres"):
            assert row[f"{backend}_{key}_p50_ms"] > 0  # type: ignore[operator]
            assert row[f"{backend}_{key}_p95_ms"] >= row[f"{backend}_{key}_p50_ms"]  # type: ignore[operator]
        assert row[f"{key}_ratio_p50"] > 0  # type: ignore[operator]
    assert row["postgres_bulk_load_s"] > 0  # type: ignore[operator]
    for title in ("record_turn", "keyword recall", "hybrid recall", "vector leg", "PG/SQLite"):
        assert title in stdout
