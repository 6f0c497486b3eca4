"""The schema and its numbered migrations (SPEC §4.2, §4.5).

A fresh file is created directly at ``CURRENT_SCHEMA_VERSION`` from the canonical DDL below.
Older files walk the steps ``m002_graph`` → ``m003_clusters`` → ``m004_canonical`` →
``m005_facts_stamp`` → ``m006_graph_stamp`` → ``m007_fact_vectors``, each in its own
``BEGIN IMMEDIATE`` together with its ledger row (``schema_migrations``), the new
``meta.schema_version`` and a ``migrated`` event.
``m004_canonical`` rebuilds every table from the canonical DDL, so a migrated store and a
fresh one have byte-identical schemas; a test compares both with the checked-in snapshot
``tests/data/schema_v7.sql``.

v5 (a departure from SPEC §4.2's v4, which it extends): three triggers that set
``meta.facts.stamp`` to a new random value whenever a fact is added, deleted, or changed in
a column ``build_context`` reads (never on a touch). ``build_context`` reads every live fact
on every turn; the stamp lets it keep them between turns, whichever process wrote (0.7 of
~4.5 ms a turn at 200 facts). A random value rather than a counter: an import that rebuilds
``meta`` can never bring back a stamp a cache holds.

v6: the same for the graph. Triggers on ``graph_nodes``, ``graph_edges`` and
``graph_mentions`` set ``meta.graph.stamp`` to a new random value on any insert, delete, or
change of a column the graph leg of a query reads (a node's id, type and confidence, an edge's
endpoints and weight, a mention's node and chunk); ``graph.gen`` only moves with names.
``graph.build_signal`` keeps each node's edges and mentions while the stamp holds, so a
query walks and scores the nodes an earlier query reached without reading them again.

v7: the table ``fact_vectors`` (one vector per fact version: the model label, its dimension
and an L2-normalised little-endian float32 BLOB, as for chunks; deleted with its fact) and
three triggers that set ``meta.fact_vectors.stamp`` to a new random value whenever one is
written or removed, so the in-memory copy the query side holds (``fact_vectors.py``) is
dropped whichever process changed them. Facts get no columns of their own: a fact's value is
never edited (§5.3), and its vector is derived data that ``reindex`` may replace.

The FTS tables are not part of these steps: they depend on whether this SQLite build has FTS5
and are reconciled on every open (``fts.reconcile``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ...clock import canonicalize_legacy_ts, now_ts
from ..graph import SELF_NODE_NAME
from ..meta import FACT_VECTORS_STAMP_KEY, FACTS_STAMP_KEY, GRAPH_STAMP_KEY

CURRENT_SCHEMA_VERSION = 7

# One statement per table, in foreign-key order. The text is the schema contract: keep the
# layout stable, since the schema test compares it byte for byte.
TABLES_V4: dict[str, str] = {
    "meta": """CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
)""",
    "schema_migrations": """CREATE TABLE schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)""",
    "events": """CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT
)""",
    "sessions": """CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    title TEXT,
    summary TEXT,
    rolling_summary TEXT,
    message_count INTEGER NOT NULL DEFAULT 0,
    host_tag TEXT,
    owner_pid INTEGER,
    owner_host TEXT,
    heartbeat_at TEXT,
    backdated INTEGER NOT NULL DEFAULT 0
)""",
    "messages": """CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    turn INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content TEXT NOT NULL,
    created_at TEXT NOT NULL,
    token_estimate INTEGER NOT NULL DEFAULT 0
)""",
    "chunks": """CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    first_msg_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    last_msg_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT,
    embedding_dim INTEGER,
    embed_seq INTEGER,
    importance REAL NOT NULL DEFAULT 0.5
)""",
    "facts": """CREATE TABLE facts (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    category TEXT NOT NULL CHECK (category IN ('profile', 'note')),
    source TEXT NOT NULL CHECK (source IN ('explicit', 'auto', 'rule', 'import', 'merge')),
    importance REAL NOT NULL,
    created_at TEXT NOT NULL,
    valid_from TEXT NOT NULL,
    invalidated_at TEXT,
    invalidated_by INTEGER REFERENCES facts(id) ON DELETE SET NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    last_accessed_at TEXT,
    access_count INTEGER NOT NULL DEFAULT 0,
    origin_session_id INTEGER REFERENCES sessions(id) ON DELETE SET NULL
)""",
    "fact_reviews": """CREATE TABLE fact_reviews (
    id INTEGER PRIMARY KEY,
    old_fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
    new_fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
    verdict TEXT NOT NULL CHECK (verdict IN ('merged', 'kept', 'rejected')),
    result_fact_id INTEGER REFERENCES facts(id) ON DELETE SET NULL,
    reviewed_at TEXT NOT NULL,
    UNIQUE (old_fact_id, new_fact_id)
)""",
    "lessons": """CREATE TABLE lessons (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL UNIQUE,
    tag TEXT,
    created_at TEXT NOT NULL,
    last_used_at TEXT NOT NULL,
    use_count INTEGER NOT NULL DEFAULT 1,
    archived INTEGER NOT NULL DEFAULT 0
)""",
    "quarantine": """CREATE TABLE quarantine (
    id INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    key TEXT,
    value TEXT,
    reason TEXT NOT NULL,
    source TEXT
)""",
    "graph_nodes": """CREATE TABLE graph_nodes (
    id INTEGER PRIMARY KEY,
    type TEXT NOT NULL DEFAULT 'entity'
        CHECK (type IN ('person', 'place', 'org', 'thing', 'entity', 'self')),
    canonical_name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    importance REAL NOT NULL DEFAULT 0.5,
    confidence REAL NOT NULL DEFAULT 0.5,
    mention_count INTEGER NOT NULL DEFAULT 1,
    cluster_id INTEGER,
    cluster_label TEXT
)""",
    "graph_edges": """CREATE TABLE graph_edges (
    id INTEGER PRIMARY KEY,
    source_node INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE,
    target_node INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE,
    relationship TEXT NOT NULL,
    confidence REAL NOT NULL DEFAULT 0.5,
    importance REAL NOT NULL DEFAULT 0.5,
    weight REAL NOT NULL DEFAULT 1.0,
    created_at TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1,
    source_chunk_id INTEGER REFERENCES chunks(id) ON DELETE SET NULL,
    CHECK (source_node <> target_node)
)""",
    "graph_mentions": """CREATE TABLE graph_mentions (
    node_id INTEGER NOT NULL REFERENCES graph_nodes(id) ON DELETE CASCADE,
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL,
    PRIMARY KEY (node_id, chunk_id)
) WITHOUT ROWID""",
    "graph_merge_reviews": """CREATE TABLE graph_merge_reviews (
    id INTEGER PRIMARY KEY,
    type_a TEXT NOT NULL,
    name_a TEXT NOT NULL,
    type_b TEXT NOT NULL,
    name_b TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('same', 'different')),
    reviewed_at TEXT NOT NULL,
    UNIQUE (type_a, name_a, type_b, name_b)
)""",
    "jobs": """CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('extract', 'embed', 'link', 'rolling_summary',
        'session_summary', 'consolidate')),
    state TEXT NOT NULL CHECK (state IN ('queued', 'held', 'running', 'failed')),
    phase TEXT NOT NULL DEFAULT 'turn',
    session_id INTEGER REFERENCES sessions(id) ON DELETE CASCADE,
    payload TEXT NOT NULL DEFAULT '{}',
    priority INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before TEXT,
    last_error TEXT,
    owner_pid INTEGER,
    owner_host TEXT,
    lease_until TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    "ann_index": """CREATE TABLE ann_index (
    label TEXT NOT NULL,
    dim INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    gen INTEGER NOT NULL,
    data BLOB NOT NULL,
    built_at TEXT NOT NULL,
    PRIMARY KEY (label, dim)
)""",
}

INDEXES_V4: tuple[str, ...] = (
    "CREATE INDEX idx_sessions_ended_at ON sessions(ended_at)",
    "CREATE INDEX idx_sessions_started_at ON sessions(started_at)",
    "CREATE INDEX idx_messages_session_turn ON messages(session_id, turn)",
    "CREATE INDEX idx_chunks_session ON chunks(session_id)",
    "CREATE INDEX idx_chunks_unembedded ON chunks(id) WHERE embedding IS NULL",
    "CREATE INDEX idx_chunks_embedding ON chunks(embedding_model, embedding_dim, embed_seq)",
    "CREATE INDEX idx_chunks_created_at ON chunks(created_at)",
    "CREATE INDEX idx_chunks_first_msg ON chunks(first_msg_id)",
    "CREATE INDEX idx_chunks_last_msg ON chunks(last_msg_id)",
    "CREATE UNIQUE INDEX idx_facts_live_key ON facts(key) WHERE invalidated_at IS NULL",
    "CREATE INDEX idx_facts_key_valid_from ON facts(key, valid_from)",
    "CREATE INDEX idx_facts_origin_session ON facts(origin_session_id)",
    "CREATE INDEX idx_facts_invalidated_by ON facts(invalidated_by)",
    "CREATE INDEX idx_fact_reviews_new ON fact_reviews(new_fact_id)",
    "CREATE INDEX idx_lessons_archived_used ON lessons(archived, last_used_at)",
    "CREATE UNIQUE INDEX idx_graph_nodes_type_name ON graph_nodes(type, canonical_name)",
    "CREATE INDEX idx_graph_nodes_name ON graph_nodes(canonical_name)",
    "CREATE INDEX idx_graph_nodes_cluster ON graph_nodes(cluster_id)",
    "CREATE INDEX idx_graph_nodes_trim ON graph_nodes(importance, mention_count, updated_at)",
    "CREATE UNIQUE INDEX idx_graph_edges_triple ON graph_edges(source_node, target_node, "
    "relationship)",
    "CREATE INDEX idx_graph_edges_target ON graph_edges(target_node)",
    "CREATE INDEX idx_graph_edges_chunk ON graph_edges(source_chunk_id)",
    "CREATE INDEX idx_graph_edges_trim ON graph_edges(importance, seen_count, last_seen)",
    "CREATE INDEX idx_graph_mentions_chunk ON graph_mentions(chunk_id)",
    "CREATE INDEX idx_jobs_claim ON jobs(state, priority, id)",
    "CREATE INDEX idx_jobs_session ON jobs(session_id)",
)

# Columns that hold timestamps, rewritten to canonical form when an old layout is rebuilt.
TIMESTAMP_COLUMNS = frozenset(
    {
        "ts",
        "applied_at",
        "started_at",
        "ended_at",
        "heartbeat_at",
        "created_at",
        "valid_from",
        "invalidated_at",
        "last_accessed_at",
        "reviewed_at",
        "last_used_at",
        "updated_at",
        "last_seen",
        "not_before",
        "lease_until",
        "built_at",
    }
)

Step = Callable[[sqlite3.Connection], None]


# Any change to what build_context reads of the facts gives ``facts.stamp`` a new value
# (see the module doc); access counts and times (the touch) leave it alone.
_NEW_STAMP = (
    f"INSERT OR REPLACE INTO meta (key, value) VALUES ('{FACTS_STAMP_KEY}', hex(randomblob(8)))"
)
TRIGGERS_V5: tuple[str, ...] = (
    f"CREATE TRIGGER facts_stamp_ai AFTER INSERT ON facts BEGIN {_NEW_STAMP}; END",
    f"CREATE TRIGGER facts_stamp_ad AFTER DELETE ON facts BEGIN {_NEW_STAMP}; END",
    "CREATE TRIGGER facts_stamp_au AFTER UPDATE OF key, value, category, importance, "
    f"valid_from, invalidated_at, archived ON facts BEGIN {_NEW_STAMP}; END",
)

# Any change to what the graph leg of a query reads gives ``graph.stamp`` a new value (see the
# module doc). Node upserts touch ``confidence`` (so they change it), but the bookkeeping
# columns alone (``updated_at``, counts, importance, names, clusters) leave it alone.
_NEW_GRAPH_STAMP = (
    f"INSERT OR REPLACE INTO meta (key, value) VALUES ('{GRAPH_STAMP_KEY}', hex(randomblob(8)))"
)
_GRAPH_STAMPED = (  # (trigger name part, table, the columns the graph leg reads)
    ("nodes", "graph_nodes", "id, type, confidence"),
    ("edges", "graph_edges", "source_node, target_node, weight"),
    ("mentions", "graph_mentions", "node_id, chunk_id"),
)
TRIGGERS_V6: tuple[str, ...] = tuple(
    ddl
    for part, table, columns in _GRAPH_STAMPED
    for ddl in (
        f"CREATE TRIGGER graph_stamp_{part}_ai AFTER INSERT ON {table} "
        f"BEGIN {_NEW_GRAPH_STAMP}; END",
        f"CREATE TRIGGER graph_stamp_{part}_ad AFTER DELETE ON {table} "
        f"BEGIN {_NEW_GRAPH_STAMP}; END",
        f"CREATE TRIGGER graph_stamp_{part}_au AFTER UPDATE OF {columns} ON {table} "
        f"BEGIN {_NEW_GRAPH_STAMP}; END",
    )
)


# v7 (module doc): a vector per fact version. Kept apart from TABLES_V4, which
# ``m004_canonical`` rebuilds a v3 layout from.
TABLES_V7: dict[str, str] = {
    "fact_vectors": """CREATE TABLE fact_vectors (
    fact_id INTEGER PRIMARY KEY REFERENCES facts(id) ON DELETE CASCADE,
    embedding_model TEXT NOT NULL,
    embedding_dim INTEGER NOT NULL,
    embedding BLOB NOT NULL
)""",
}
_NEW_FACT_VECTORS_STAMP = (
    f"INSERT OR REPLACE INTO meta (key, value) VALUES ('{FACT_VECTORS_STAMP_KEY}', "
    "hex(randomblob(8)))"
)
TRIGGERS_V7: tuple[str, ...] = tuple(
    f"CREATE TRIGGER fact_vectors_stamp_{part} AFTER {event} ON fact_vectors "
    f"BEGIN {_NEW_FACT_VECTORS_STAMP}; END"
    for part, event in (("ai", "INSERT"), ("ad", "DELETE"), ("au", "UPDATE"))
)


def create_fresh(conn: sqlite3.Connection) -> None:
    """Create every table, index and trigger of the current schema (inside the caller's
    transaction)."""
    for ddl in (*TABLES_V4.values(), *TABLES_V7.values()):
        conn.execute(ddl)
    for ddl in INDEXES_V4:
        conn.execute(ddl)
    for ddl in (*TRIGGERS_V5, *TRIGGERS_V6, *TRIGGERS_V7):
        conn.execute(ddl)
    ensure_self_node(conn)


def ensure_self_node(conn: Any) -> int:
    """The id of the one ``self`` node, creating it if needed."""
    row = conn.execute(
        "SELECT id FROM graph_nodes WHERE type = 'self' AND canonical_name = ?", (SELF_NODE_NAME,)
    ).fetchone()
    if row:
        return int(row[0])
    now = now_ts()
    cur = conn.execute(
        "INSERT INTO graph_nodes (type, canonical_name, aliases, created_at, updated_at) "
        "VALUES ('self', ?, '[]', ?, ?)",
        (SELF_NODE_NAME, now, now),
    )
    return int(cur.lastrowid or 0)


# -- the steps --------------------------------------------------------------------------------


def m002_graph(conn: sqlite3.Connection) -> None:
    """v1 → v2: the first graph tables (their v2 shape; step 4 brings them to v4)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS graph_nodes (id INTEGER PRIMARY KEY, type TEXT NOT NULL "
        "DEFAULT 'entity', canonical_name TEXT NOT NULL, aliases TEXT NOT NULL DEFAULT '[]', "
        "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, importance REAL NOT NULL "
        "DEFAULT 0.5, confidence REAL NOT NULL DEFAULT 0.5, mention_count INTEGER NOT NULL "
        "DEFAULT 1)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS graph_edges (id INTEGER PRIMARY KEY, source_node INTEGER "
        "NOT NULL, target_node INTEGER NOT NULL, relationship TEXT NOT NULL, confidence REAL "
        "NOT NULL DEFAULT 0.5, created_at TEXT NOT NULL, last_seen TEXT NOT NULL, seen_count "
        "INTEGER NOT NULL DEFAULT 1)"
    )


def m003_clusters(conn: sqlite3.Connection) -> None:
    """v2 → v3: cluster columns on graph nodes."""
    existing = _columns(conn, "graph_nodes")
    if "cluster_id" not in existing:
        conn.execute("ALTER TABLE graph_nodes ADD COLUMN cluster_id INTEGER")
    if "cluster_label" not in existing:
        conn.execute("ALTER TABLE graph_nodes ADD COLUMN cluster_label TEXT")


def m004_canonical(conn: sqlite3.Connection) -> None:
    """v3 → v4: rebuild every table from the canonical DDL, canonical timestamps, self node.

    Runs with ``foreign_keys=OFF`` and ``legacy_alter_table=ON`` (set by the caller outside
    the transaction) so renaming a parent table does not rewrite its children's references.
    """
    for name in [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]:
        conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    for name in ("chunks_fts", "facts_fts"):
        if _table_exists(conn, name):
            conn.execute(f"DROP TABLE {name}")
    legacy_indexes = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
        )
    ]
    for name in legacy_indexes:
        conn.execute(f'DROP INDEX IF EXISTS "{name}"')
    for table, ddl in TABLES_V4.items():
        if not _table_exists(conn, table):
            conn.execute(ddl)
            continue
        old_columns = _columns(conn, table)
        conn.execute(f'ALTER TABLE "{table}" RENAME TO "{table}__v3"')
        conn.execute(ddl)
        new_columns = _columns(conn, table)
        shared = [c for c in new_columns if c in old_columns]
        selects = [f"em_canon_ts({c})" if c in TIMESTAMP_COLUMNS else c for c in shared]
        if table == "lessons" and "last_used_at" not in old_columns:
            shared.append("last_used_at")
            selects.append("em_canon_ts(created_at)")
        if table == "graph_edges":
            # Old edges may point at nodes that no longer exist or at themselves.
            where = " WHERE source_node <> target_node"
        else:
            where = ""
        conn.execute(
            f'INSERT INTO "{table}" ({", ".join(shared)}) '
            f'SELECT {", ".join(selects)} FROM "{table}__v3"{where}'
        )
        conn.execute(f'DROP TABLE "{table}__v3"')
    for ddl in INDEXES_V4:
        conn.execute(ddl)
    _fold_user_node_into_self(conn)
    # The FTS tables were dropped above; the next reconcile recreates and rebuilds them.
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('fts.state', 'stale')")


def m005_facts_stamp(conn: sqlite3.Connection) -> None:
    """v4 → v5: the triggers that keep ``meta.facts.stamp`` (see the module doc)."""
    for ddl in TRIGGERS_V5:
        conn.execute(ddl)


def m006_graph_stamp(conn: sqlite3.Connection) -> None:
    """v5 → v6: the triggers that keep ``meta.graph.stamp``, and a first stamp."""
    for ddl in TRIGGERS_V6:
        conn.execute(ddl)
    conn.execute(_NEW_GRAPH_STAMP)


def m007_fact_vectors(conn: sqlite3.Connection) -> None:
    """v6 → v7: the ``fact_vectors`` table and its stamp triggers (see the module doc); the
    worker's idle backfill embeds the facts already stored."""
    for ddl in TABLES_V7.values():
        conn.execute(ddl)
    for ddl in TRIGGERS_V7:
        conn.execute(ddl)


def _fold_user_node_into_self(conn: sqlite3.Connection) -> None:
    self_id = ensure_self_node(conn)
    user_nodes = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM graph_nodes WHERE canonical_name IN "
            "('user', 'the user', 'me', 'myself', 'i', '@self') "
            "AND type <> 'self'"
        )
    ]
    for node_id in user_nodes:
        for column in ("source_node", "target_node"):
            conn.execute(
                f"UPDATE OR IGNORE graph_edges SET {column} = ? WHERE {column} = ?",
                (self_id, node_id),
            )
        conn.execute("DELETE FROM graph_edges WHERE source_node = target_node")
        conn.execute(
            "DELETE FROM graph_edges WHERE source_node = ? OR target_node = ?", (node_id, node_id)
        )
        conn.execute("DELETE FROM graph_nodes WHERE id = ?", (node_id,))


STEPS: tuple[tuple[int, str, Step], ...] = (
    (2, "m002_graph", m002_graph),
    (3, "m003_clusters", m003_clusters),
    (4, "m004_canonical", m004_canonical),
    (5, "m005_facts_stamp", m005_facts_stamp),
    (6, "m006_graph_stamp", m006_graph_stamp),
    (7, "m007_fact_vectors", m007_fact_vectors),
)


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')]


def register_migration_functions(conn: sqlite3.Connection) -> None:
    conn.create_function("em_canon_ts", 1, canonicalize_legacy_ts, deterministic=True)


def event_detail(**detail: object) -> str:
    return json.dumps(detail, sort_keys=True)
