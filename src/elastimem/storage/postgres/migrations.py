"""Creating and upgrading the PostgreSQL schema (the layout is in ``schema``).

The ledger ``elastimem_schema(version, applied_at)`` holds one row per applied version; the
schema's version is its highest. ``ensure_schema`` reads it without any lock first, so a store
opened on a current schema runs no DDL and needs no privilege beyond its rows. Otherwise it
creates or upgrades inside one transaction holding ``pg_advisory_xact_lock(SCHEMA_LOCK)``: of
several processes starting at once, one does the work and the others, once it commits, find
the schema current. DDL is transactional in PostgreSQL, so a failed step leaves nothing
behind. A ledger higher than this version knows is refused (``SchemaTooNewError``) before
anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...clock import now_ts
from ...errors import SchemaTooNewError, StoreError
from .schema import (
    CURRENT_SCHEMA_VERSION,
    LEDGER_TABLE,
    POSTINGS_DELETE_FUNCTION,
    POSTINGS_DELETE_TRIGGERS,
    SESSION_CHUNKS_INDEX,
    TABLES,
    create_statements,
)

# The two-int advisory lock key of schema changes ("elas", 1). PostgreSQL keeps the two-int
# and the one-bigint key spaces apart, so it never meets a user's write lock.
SCHEMA_LOCK = (0x656C6173, 1)

Step = Callable[[Any], None]


def m003_cheaper_postings_and_session_chunks(conn: Any) -> None:
    """The keyword postings lose their foreign keys; a statement trigger on chunks and facts
    deletes a row's postings with it instead (``schema.KEYWORD_DOC``). The chunks' session
    index gains the id (``schema.SESSION_CHUNKS_INDEX``)."""
    for table, key in (
        ("chunk_terms", "chunk_terms_user_id_chunk_id_fkey"),
        ("fact_terms", "fact_terms_user_id_fact_id_fkey"),
    ):
        conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {key}")
    conn.execute(POSTINGS_DELETE_FUNCTION)
    for statement in POSTINGS_DELETE_TRIGGERS:
        conn.execute(statement)
    conn.execute("DROP INDEX IF EXISTS idx_chunks_session")
    conn.execute(SESSION_CHUNKS_INDEX)


# (version, name, step) after version 1; each runs in the locked transaction with its ledger
# row.
STEPS: tuple[tuple[int, str, Step], ...] = (
    (3, "m003_cheaper_postings_and_session_chunks", m003_cheaper_postings_and_session_chunks),
)


def schema_version(conn: Any) -> int | None:
    """The ledger's highest version; None where there is no ledger (an empty database)."""
    row = conn.execute("SELECT to_regclass(%s)", (LEDGER_TABLE,)).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute(f"SELECT max(version) FROM {LEDGER_TABLE}").fetchone()
    if found is None or found[0] is None:
        raise StoreError(
            f"the ledger table {LEDGER_TABLE} exists but records no version; this database "
            "holds a damaged elastimem schema or another program's table of that name"
        )
    return int(found[0])


def _refuse_newer(version: int | None, where: str) -> None:
    if version is not None and version > CURRENT_SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{where} has elastimem schema version {version} but this elastimem supports "
            f"{CURRENT_SCHEMA_VERSION}; upgrade elastimem to open it"
        )


def ensure_schema(conn: Any, where: str, *, create: bool = True) -> int:
    """Bring the schema at ``conn`` (a psycopg connection in autocommit mode) to
    ``CURRENT_SCHEMA_VERSION`` and return it. ``create`` False refuses a database without
    one (``StoreError``) instead of creating it."""
    version = schema_version(conn)
    _refuse_newer(version, where)
    if version == CURRENT_SCHEMA_VERSION:
        return version
    if version is None and not create:
        raise StoreError(
            f"{where} holds no elastimem schema, and none was created (create=False): check "
            "the address, or open it with create=True"
        )
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", SCHEMA_LOCK)
        version = schema_version(conn)  # another process may have done it meanwhile
        _refuse_newer(version, where)
        if version is None:
            conn.execute(TABLES[LEDGER_TABLE])
            for statement in create_statements():
                conn.execute(statement)
            _record(conn, CURRENT_SCHEMA_VERSION)
            return CURRENT_SCHEMA_VERSION
        for step_version, _name, step in STEPS:
            if step_version > version:
                step(conn)
                _record(conn, step_version)
    return CURRENT_SCHEMA_VERSION


def _record(conn: Any, version: int) -> None:
    conn.execute(
        f"INSERT INTO {LEDGER_TABLE} (version, applied_at) VALUES (%s, %s)", (version, now_ts())
    )
