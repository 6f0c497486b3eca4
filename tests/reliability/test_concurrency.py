"""Concurrency: four writer processes and several readers on one file at the same time.

Each writer (``child.py writer``) records 500 turns while a reader thread in the same process
recalls, and remembers values for five keys the writers share; two more processes recall,
explain, build contexts and read timelines until the writers finish. Writers start staggered,
so every open (and its orphan sweep) happens while other processes hold live sessions.
Afterwards: no exception reached any caller, no error was logged (``record_turn`` logs instead of
raising, so its stderr is the evidence), nothing said "database is locked", all 2,000 exchanges
are present, each writer kept one session that nobody else closed, and the file is intact.

``ELASTIMEM_CONCURRENCY_TURNS`` (default 500) sets the turns per writer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import elastimem

from .helpers import (
    CHILD,
    REPO,
    broken_fact_chains,
    child_env,
    duplicate_live_keys,
    fts_consistent,
    half_written_turns,
    integrity,
    percentile,
    raw_connect,
    stats_mismatches,
)

pytestmark = pytest.mark.slow

WRITERS = 4
READERS = 2
TURNS = int(os.environ.get("ELASTIMEM_CONCURRENCY_TURNS", "500"))
STAGGER_SECONDS = 0.4


def _spawn(
    args: list[str], tmp_path: Path, name: str
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    out_file = tmp_path / f"{name}.out"
    err_file = tmp_path / f"{name}.err"
    with open(out_file, "wb") as out, open(err_file, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=out,
            stderr=err,
            env=child_env(OPENBLAS_NUM_THREADS="1"),
            cwd=str(REPO),
        )
    return proc, out_file, err_file


def _wait_ready(out_file: Path, proc: subprocess.Popen[bytes], err_file: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out_file.read_text(errors="replace").startswith("READY"):
            return
        assert proc.poll() is None, err_file.read_text()[-3000:]
        time.sleep(0.02)
    raise AssertionError(f"{out_file.name} never became ready")


def _result(out_file: Path) -> dict[str, Any]:
    for line in out_file.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise AssertionError(f"{out_file.name} printed no RESULT")


def test_four_writers_and_readers_share_one_file(tmp_path: Path, figure: Any) -> None:
    path = tmp_path / "shared.db"
    elastimem.Elastimem(str(path), disable_builtin_embedder=True).close()
    stopfile = tmp_path / "stop"
    started = time.monotonic()
    readers = []
    writers = []
    try:
        for w in range(WRITERS):
            if w < READERS:  # readers open too while earlier writers hold live sessions
                readers.append(_spawn(["reader", str(path), str(stopfile)], tmp_path, f"reader{w}"))
            proc, out_file, err_file = _spawn(
                ["writer", str(path), str(w), str(TURNS)], tmp_path, f"writer{w}"
            )
            writers.append((proc, out_file, err_file))
            _wait_ready(out_file, proc, err_file)
            time.sleep(STAGGER_SECONDS)  # later opens meet live sessions and busy writers
        for proc, _, err_file in writers:
            assert proc.wait(600) == 0, err_file.read_text()[-3000:]
        writing = time.monotonic() - started
    finally:
        stopfile.touch()
        for proc, _, _ in readers + writers:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for proc, _, err_file in readers:
        assert proc.returncode == 0, err_file.read_text()[-3000:]

    writer_results = [_result(out) for _, out, _ in writers]
    reader_results = [_result(out) for _, out, _ in readers]
    stderr = "".join(err.read_text(errors="replace") for _, _, err in readers + writers)
    error_lines = [line for line in stderr.splitlines() if line.startswith(("ERROR", "CRITICAL"))]
    locked_lines = [line for line in stderr.splitlines() if "locked" in line.lower()]
    exceptions = [e for r in writer_results for e in r["exceptions"]] + [
        e for r in reader_results for e in r["exceptions"]
    ]

    conn = raw_connect(path)
    try:
        tokens = {
            str(r[0]).split(" ", 1)[0]
            for r in conn.execute("SELECT content FROM messages WHERE role = 'user'")
        }
        assistant = int(
            conn.execute("SELECT count(*) FROM messages WHERE role = 'assistant'").fetchone()[0]
        )
        duplicates = duplicate_live_keys(conn)
        chains = broken_fact_chains(conn)
        halves = half_written_turns(conn)
        shared_versions = int(
            conn.execute("SELECT count(*) FROM facts WHERE key LIKE 'shared%'").fetchone()[0]
        )
    finally:
        conn.close()
    expected = {f"w{w}t{i}" for w in range(WRITERS) for i in range(TURNS)}
    missing = expected - tokens

    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mismatches = stats_mismatches(mem, skip=("jobs_pending", "open_sessions"))

    record_p95 = max(r["record_p95"] for r in writer_results)
    figure("exchanges present", f"{len(expected) - len(missing)}/{len(expected)}")
    figure("errors (exceptions reaching callers + ERROR logs)", len(exceptions) + len(error_lines))
    figure("'database is locked' seen by callers or in logs", len(locked_lines))
    figure(
        "writers whose session another process closed",
        sum(not r["session_open_at_end"] or len(r["sessions_used"]) != 1 for r in writer_results),
    )
    figure(
        "write throughput",
        round(len(expected) / writing, 1),
        "turns/s",
        note=f"{WRITERS} processes, {READERS} reader processes + {WRITERS} reader threads",
    )
    figure(
        "record_turn p95 / max under contention",
        f"{record_p95 * 1000:.1f} / {max(r['record_max'] for r in writer_results) * 1000:.1f}",
        "ms",
    )
    figure(
        "concurrent reads",
        sum(r["recalls"] for r in writer_results) + sum(r["calls"] for r in reader_results),
        note=f"reader-process p95 {max(r['p95'] for r in reader_results) * 1000:.1f} ms",
    )
    figure("shared-key fact versions", shared_versions, note="one live version per key")

    assert not exceptions, exceptions[:5]
    assert not error_lines, error_lines[:5]
    assert not locked_lines, locked_lines[:5]
    assert not missing, sorted(missing)[:10]
    assert assistant == len(expected)
    for r in writer_results:
        assert r["session_open_at_end"], r
        assert r["sessions_used"] == [r["session_id"]], r
        assert r["errors_logged"] == 0 and r["drained"], r
    assert not duplicates and not chains and not halves
    assert integrity(path) == "ok"
    assert fts_consistent(path)
    assert not mismatches, mismatches
    assert percentile([r["recall_p95"] for r in writer_results], 1.0) < 10.0
