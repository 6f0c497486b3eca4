"""``benchmarks/encryption.py`` runs end to end at a tiny size (issue 31)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlcipher3")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "encryption.py"


def test_plain_and_encrypted_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    args = ["--size", "60", "--queries", "4", "--turns", "4", "--opens", "2", "--raw-key"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--workdir", str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["measure"]: row for row in json.loads(out.read_text(encoding="utf-8"))}
    for measure in ("keyword recall", "hybrid recall", "record_turn", "open + first recall"):
        assert rows[measure]["plain_p50_ms"] > 0 and rows[measure]["encrypted_p50_ms"] > 0
    assert b"SQLite format 3" not in (tmp_path / "encrypted.db").read_bytes()[:16]
    assert "ratio" in done.stdout
