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


def _rows() -> Any:
    """tests/rows.py, imported when first needed: child.py imports this module on a path
    without the repository's root."""
    from tests import rows

    return rows


def _is_postgres(store: Any) -> bool:
    return not isinstance(store, (str, os.PathLike)) and _rows().is_postgres(store)


class _PostgresConnection:
    """A user's rows on the test's PostgreSQL database, through a connection of the test's
    own (as the application role, under row-level security): statements written for SQLite,
    each committed as it runs, like ``raw_connect``'s."""

    def __init__(self, store: Any) -> None:
        import psycopg

        self._conn = psycopg.connect(_rows().postgres_url(), autocommit=True)
        self._conn.execute("SELECT set_config('elastimem.user_id', %s, false)", (store.user_id,))

    def execute(self, sql: str, params: Any = ()) -> Any:
        return _rows().postgres_execute(self._conn, sql, params)

    def close(self) -> None:
        self._conn.close()


def raw_connect(path: Any) -> Any:
    """A plain connection, the way a third-party tool would open the file (``path``: a file,
    or an open store; a store on PostgreSQL is reached as its user's rows there)."""
    if _is_postgres(path):
        return _PostgresConnection(path)
    conn = sqlite3.connect(str(getattr(path, "path", path)), isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def integrity(path: Any) -> str:
    """``PRAGMA integrity_check`` plus ``foreign_key_check``: "ok" or the problems found.
    On PostgreSQL the server checks its own pages and enforces every foreign key as it
    writes: "ok" once the user's rows can be read."""
    if _is_postgres(path):
        conn = raw_connect(path)
        try:
            conn.execute("SELECT count(*) FROM meta").fetchone()
        finally:
            conn.close()
        return "ok"
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


def table_counts(path: Any) -> dict[str, int]:
    conn = raw_connect(path)
    try:
        return {k: int(conn.execute(sql).fetchone()[0]) for k, sql in STAT_QUERIES.items()}
    finally:
        conn.close()


def stats_mismatches(mem: Any, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[Any, int]]:
    """Keys where ``stats()`` disagrees with a direct count (call with the store quiet)."""
    stats = mem.stats()
    counts = table_counts(mem)
    return {k: (stats.get(k), v) for k, v in counts.items() if k not in skip and stats.get(k) != v}


# On PostgreSQL: rows whose length in tokens is not the sum of their postings' frequencies.
_POSTINGS_DISAGREE = (
    "SELECT count(*) FROM {table} r WHERE r.term_count IS NOT NULL AND r.term_count <> "
    "(SELECT coalesce(sum(t.tf), 0) FROM {terms} t WHERE t.{ref} = r.id)"
)


def fts_consistent(path: Any) -> bool:
    """The external-content FTS indexes agree with their tables (vacuously true with FTS off);
    on PostgreSQL, every row's length in tokens agrees with its keyword postings."""
    if _is_postgres(path):
        conn = raw_connect(path)
        try:
            return all(
                conn.execute(_POSTINGS_DISAGREE.format(table=t, terms=terms, ref=ref)).fetchone()[0]
                == 0
                for t, terms, ref in (
                    ("chunks", "chunk_terms", "chunk_id"),
                    ("facts", "fact_terms", "fact_id"),
                )
            )
        finally:
            conn.close()
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
