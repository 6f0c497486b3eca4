"""``benchmarks/tenants.py`` at toy size on the session's PostgreSQL server, and its checks.

The benchmark is a script, not part of the package: the smoke test runs it as a process
(its workers are spawned processes), the check of its read-back imports it from its file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import elastimem
from tests import pg_server

pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

REPO = Path(__file__).resolve().parents[2]
TENANTS_PY = REPO / "benchmarks" / "tenants.py"


@pytest.fixture(scope="module")
def tenants() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("benchmarks_tenants", TENANTS_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_a_small_run_from_two_processes_loses_nothing(postgres_url: str, tmp_path: Path) -> None:
    out = tmp_path / "tenants.json"
    done = subprocess.run(
        [sys.executable, str(TENANTS_PY), "--users", "6", "--turns", "3", "--processes", "2",
         "--fact-every", "2", "--dim", "32", "--pg-url", postgres_url, "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=str(REPO),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["turns"] == 18 and result["recalls"] == 18
    assert result["errors"] == result["turns_lost"] == result["duplicate_facts"] == 0
    assert result["empty_recalls"] == 0 and result["turns_per_second"] > 0
    assert "turns lost 0" in done.stdout


def test_the_read_back_counts_missing_turns_and_extra_live_facts(
    tenants: ModuleType, postgres_url: str
) -> None:
    """The lost-turn and duplicate checks are not vacuous: a user holding one exchange
    fewer than the run wrote counts one lost turn; an extra live key counts one fact."""
    args: dict[str, Any] = {
        "users": 2, "turns": 3, "processes": 1, "queries": 1, "fact_every": 2,
        "embedder": "none", "dim": 8, "url": postgres_url, "prefix": f"check-{os.getpid()}-",
    }  # fmt: skip
    for u, turns in ((0, 3), (1, 2)):
        user = tenants.user_id(args, u)
        with elastimem.open(postgres_url, user_id=user, disable_builtin_embedder=True) as mem:
            for i in range(turns):
                mem.record_turn(*tenants.turn_text(u, i))
            mem.remember(tenants.FACT_KEYS[0], f"value of {u}")
            if u == 1:
                mem.remember("stray_key", "one more live fact")
    report = tenants.read_phase(0, args)
    assert report["lost"] == 1
    assert report["duplicates"] == 1
    assert report["errors"] == 0 and len(report["latencies"]) == 2
