"""Old on-disk layouts (schema v1, v2, v3) for migration tests.

These mirror what earlier elastimem files looked like: second-precision ``+00:00``
timestamps, no jobs/ann/review tables, no ``schema_version`` in v1, graph tables from v2 and
cluster columns from v3.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

V1_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, ended_at TEXT,
    title TEXT, summary TEXT, rolling_summary TEXT, message_count INTEGER NOT NULL DEFAULT 0,
    host_tag TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL REFERENCES sessions(id),
    turn INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL,
    token_estimate INTEGER NOT NULL DEFAULT 0);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, session_id INTEGER NOT NULL, first_msg_id INTEGER
    NOT NULL, last_msg_id INTEGER NOT NULL, text TEXT NOT NULL, created_at TEXT NOT NULL,
    embedding BLOB, embedding_model TEXT, importance REAL NOT NULL DEFAULT 0.5);
CREATE TABLE facts (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value TEXT NOT NULL,
    category TEXT NOT NULL, source TEXT NOT NULL, importance REAL NOT NULL, created_at TEXT NOT
    NULL, valid_from TEXT NOT NULL, invalidated_at TEXT, invalidated_by INTEGER, archived INTEGER
    NOT NULL DEFAULT 0, last_accessed_at TEXT, access_count INTEGER NOT NULL DEFAULT 0);
CREATE TABLE lessons (id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE, tag TEXT,
    created_at TEXT NOT NULL, use_count INTEGER NOT NULL DEFAULT 1, archived INTEGER NOT NULL
    DEFAULT 0);
CREATE TABLE quarantine (id INTEGER PRIMARY KEY, ts TEXT NOT NULL, key TEXT, value TEXT,
    reason TEXT NOT NULL, source TEXT);
CREATE INDEX idx_old_facts_key ON facts(key);
"""

V2_DDL = """
CREATE TABLE graph_nodes (id INTEGER PRIMARY KEY, type TEXT NOT NULL DEFAULT 'entity',
    canonical_name TEXT NOT NULL, aliases TEXT NOT NULL DEFAULT '[]', created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, importance REAL NOT NULL DEFAULT 0.5, confidence REAL NOT NULL
    DEFAULT 0.5, mention_count INTEGER NOT NULL DEFAULT 1);
CREATE TABLE graph_edges (id INTEGER PRIMARY KEY, source_node INTEGER NOT NULL, target_node
    INTEGER NOT NULL, relationship TEXT NOT NULL, confidence REAL NOT NULL DEFAULT 0.5,
    created_at TEXT NOT NULL, last_seen TEXT NOT NULL, seen_count INTEGER NOT NULL DEFAULT 1);
"""

V3_DDL = """
ALTER TABLE graph_nodes ADD COLUMN cluster_id INTEGER;
ALTER TABLE graph_nodes ADD COLUMN cluster_label TEXT;
"""

T0 = "2024-05-01T10:00:00+00:00"
T1 = "2024-05-01T10:05:00+00:00"
T2 = "2024-06-01T08:00:00+00:00"


def _rows_v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO sessions VALUES (1, ?, ?, 'Moving day', NULL, NULL, 2, 'old')", (T0, T1)
    )
    conn.execute(
        "INSERT INTO messages VALUES (1, 1, 1, 'user', 'We moved to Lisbon today', ?, 6)", (T0,)
    )
    conn.execute(
        "INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'Welcome to Lisbon!', ?, 4)", (T0,)
    )
    conn.execute(
        "INSERT INTO chunks VALUES (1, 1, 1, 2, 'User: We moved to Lisbon today\n"
        "Assistant: Welcome to Lisbon!', ?, NULL, NULL, 0.5)",
        (T0,),
    )
    conn.execute(
        "INSERT INTO facts VALUES (1, 'location', 'Porto', 'profile', 'rule', 0.7, ?, ?, "
        "?, 2, 0, NULL, 0)",
        (T0, T0, T1),
    )
    conn.execute(
        "INSERT INTO facts VALUES (2, 'location', 'Lisbon', 'profile', 'rule', 0.7, ?, ?, "
        "NULL, NULL, 0, NULL, 0)",
        (T1, T1),
    )
    conn.execute(
        "INSERT INTO lessons VALUES (1, 'Ask before deleting files', NULL, ?, 2, 0)", (T0,)
    )
    conn.execute(
        "INSERT INTO quarantine VALUES (1, ?, 'user_said', 'hello', 'transcript key', 'auto')",
        (T0,),
    )
    conn.execute("INSERT INTO meta VALUES ('created_at', ?)", (T0,))


def _rows_v2(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO graph_nodes VALUES (1, 'place', 'lisbon', '[]', ?, ?, 0.5, 0.7, 1)", (T1, T1)
    )
    conn.execute(
        "INSERT INTO graph_nodes VALUES (2, 'entity', 'user', '[]', ?, ?, 0.5, 0.7, 3)", (T1, T1)
    )
    conn.execute("INSERT INTO graph_edges VALUES (1, 2, 1, 'lives_in', 0.7, ?, ?, 1)", (T1, T2))


def create_legacy_store(path: Path, version: int) -> Path:
    """Write a store in the layout of ``version`` (1, 2 or 3) with a few rows of data."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(V1_DDL)
        _rows_v1(conn)
        if version >= 2:
            conn.executescript(V2_DDL)
            _rows_v2(conn)
        if version >= 3:
            conn.executescript(V3_DDL)
        if version >= 2:
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(version),))
    finally:
        conn.close()
    return path
