"""The FTS5 tables of a store: their DDL, whether this build can use them, and their upkeep
on every open (SPEC §4.3).

``chunks_fts`` and ``facts_fts`` are external-content FTS5 tables kept in step by triggers.
A build without FTS5 (or with ``ELASTIMEM_DISABLE_FTS=1``) drops the triggers and searches
with the LIKE legs instead; the next open with FTS5 rebuilds the tables from their content.
"""

from __future__ import annotations

import os
import sqlite3

from . import connection
from .meta import get_meta, log_event, set_meta

FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
FTS_DISABLE_ENV_VAR = "ELASTIMEM_DISABLE_FTS"

FTS_TRIGGER_NAMES = (
    "chunks_fts_ai",
    "chunks_fts_ad",
    "chunks_fts_au",
    "facts_fts_ai",
    "facts_fts_ad",
    "facts_fts_au",
)

FTS_DDL = (
    f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id', "
    f"tokenize='{FTS_TOKENIZER}')",
    f"CREATE VIRTUAL TABLE facts_fts USING fts5(key, value, content='facts', "
    f"content_rowid='id', tokenize='{FTS_TOKENIZER}')",
    "CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN "
    "INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN "
    "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER chunks_fts_au AFTER UPDATE OF text ON chunks BEGIN "
    "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER facts_fts_ai AFTER INSERT ON facts BEGIN "
    "INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
    "CREATE TRIGGER facts_fts_ad AFTER DELETE ON facts BEGIN "
    "INSERT INTO facts_fts(facts_fts, rowid, key, value) "
    "VALUES ('delete', old.id, old.key, old.value); END",
    "CREATE TRIGGER facts_fts_au AFTER UPDATE OF key, value ON facts BEGIN "
    "INSERT INTO facts_fts(facts_fts, rowid, key, value) "
    "VALUES ('delete', old.id, old.key, old.value); "
    "INSERT INTO facts_fts(rowid, key, value) VALUES (new.id, new.key, new.value); END",
)


def _disabled() -> bool:
    return os.environ.get(FTS_DISABLE_ENV_VAR, "").strip() == "1"


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Probe FTS5 with a temporary table; ``ELASTIMEM_DISABLE_FTS=1`` makes the probe fail."""
    if _disabled():
        return False
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.em_fts_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.em_fts_probe")
        return True
    except connection.ERRORS:
        return False


def tables_readable(conn: sqlite3.Connection) -> bool:
    """FTS5 works on this read-only connection: a query on both tables runs.

    ``fts5_available`` creates a temporary table, which a ``mode=ro`` or immutable
    connection refuses even where FTS5 reads fine: recall then fell back to LIKE scans.
    """
    if _disabled():
        return False
    try:
        for table in ("chunks_fts", "facts_fts"):
            conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH '\"x\"' LIMIT 1")
        return True
    except connection.ERRORS:
        return False


def usable_read_only(conn: sqlite3.Connection) -> bool:
    """A store opened read-only searches its FTS tables only if they are current and readable
    (nothing may be rebuilt); otherwise the LIKE legs answer."""
    return (
        get_meta(conn, "fts.state") == "on"
        and get_meta(conn, "fts.tokenizer") == FTS_TOKENIZER
        and tables_readable(conn)
    )


def reconcile(conn: sqlite3.Connection) -> bool:
    """Bring the FTS tables in line with this build's FTS5 support (§4.3), inside the
    caller's write transaction; True when the store searches with FTS5."""
    available = fts5_available(conn)
    state = get_meta(conn, "fts.state")
    tokenizer = get_meta(conn, "fts.tokenizer")
    if available and (state != "on" or tokenizer != FTS_TOKENIZER):
        for name in FTS_TRIGGER_NAMES:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute("DROP TABLE IF EXISTS chunks_fts")
        conn.execute("DROP TABLE IF EXISTS facts_fts")
        for ddl in FTS_DDL:
            conn.execute(ddl)
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")
        set_meta(conn, "fts.state", "on")
        set_meta(conn, "fts.tokenizer", FTS_TOKENIZER)
        log_event(conn, "fts_rebuilt", previous_state=state)
    elif not available and state == "on":
        # Dropping triggers needs no FTS module; the tables stay for the next FTS open.
        for name in FTS_TRIGGER_NAMES:
            conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        set_meta(conn, "fts.state", "off")
        log_event(conn, "fts_disabled")
    elif not available and state is None:
        set_meta(conn, "fts.state", "off")
    return available


def fts_match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression for ``terms``: every term quoted, ORed together, so no term
    can inject FTS syntax."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
