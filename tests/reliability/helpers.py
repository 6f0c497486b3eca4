"""Checks shared by the reliability tests: integrity, invariants and stats() consistency."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("child.py")
REPO = Path(__file__).resolve().parents[2]


def raw_connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A plain connection, the way a third-party tool would open the file."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def integrity(path: str | os.PathLike[str]) -> str:
    """``PRAGMA integrity_check`` plus ``foreign_key_check``: "ok" or the problems found."""
    conn = raw_connect(path)
    try:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()
    problems = [r for r in rows if r != "ok"]
    if broken:
        problems.append(f"foreign keys: {broken[:5]}")
    return "ok" if not problems else "; ".join(map(str, problems))[:2000]


def duplicate_live_keys(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT key FROM facts WHERE invalidated_at IS NULL GROUP BY key HAVING count(*) > 1"
    ).fetchall()
    return [r[0] for r in rows]


def broken_fact_chains(conn: sqlite3.Connection) -> int:
    """Superseded versions whose ``invalidated_by`` does not point at their successor."""
    row = conn.execute(
        "SELECT count(*) FROM facts o LEFT JOIN facts n ON n.id = o.invalidated_by "
        "WHERE o.invalidated_at IS NOT NULL AND o.invalidated_by IS NOT NULL "
        "AND (n.id IS NULL OR n.key <> o.key OR n.valid_from <> o.invalidated_at)"
    ).fetchone()
    return int(row[0])


def half_written_turns(conn: sqlite3.Connection) -> int:
    """Turns with a user message but no chunk: record_turn writes both in one transaction."""
    row = conn.execute(
        "SELECT count(*) FROM messages m WHERE m.role = 'user' AND NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.first_msg_id = m.id)"
    ).fetchone()
    return int(row[0])


STAT_QUERIES = {
    "facts": "SELECT count(*) FROM facts WHERE invalidated_at IS NULL AND archived = 0",
    "fact_versions": "SELECT count(*) FROM facts",
    "archived_facts": "SELECT count(*) FROM facts WHERE archived = 1 AND invalidated_at IS NULL",
    "sessions": "SELECT count(*) FROM sessions",
    "open_sessions": "SELECT count(*) FROM sessions WHERE ended_at IS NULL",
    "messages": "SELECT count(*) FROM messages",
    "chunks": "SELECT count(*) FROM chunks",
    "lessons": "SELECT count(*) FROM lessons WHERE archived = 0",
    "quarantine": "SELECT count(*) FROM quarantine",
    "graph_nodes": "SELECT count(*) FROM graph_nodes WHERE type <> 'self'",
    "graph_edges": "SELECT count(*) FROM graph_edges",
    "jobs_pending": "SELECT count(*) FROM jobs WHERE state IN ('queued', 'held', 'running')",
    "jobs_failed": "SELECT count(*) FROM jobs WHERE state = 'failed'",
}


def table_counts(path: str | os.PathLike[str]) -> dict[str, int]:
    conn = raw_connect(path)
    try:
        return {k: int(conn.execute(sql).fetchone()[0]) for k, sql in STAT_QUERIES.items()}
    finally:
        conn.close()


def stats_mismatches(mem: Any, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[Any, int]]:
    """Keys where ``stats()`` disagrees with a direct count (call with the store quiet)."""
    stats = mem.stats()
    counts = table_counts(mem.path)
    return {k: (stats.get(k), v) for k, v in counts.items() if k not in skip and stats.get(k) != v}


def fts_consistent(path: str | os.PathLike[str]) -> bool:
    """The external-content FTS indexes agree with their tables (vacuously true with FTS off)."""
    conn = raw_connect(path)
    try:
        state = conn.execute("SELECT value FROM meta WHERE key = 'fts.state'").fetchone()
        if not state or state[0] != "on":
            return True
        for table in ("chunks_fts", "facts_fts"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH", ""), str(CHILD.parent)) if p
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


def run_child(
    *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=str(REPO),
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
