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

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ...clock import now_ts
from ...errors import SchemaTooNewError, StoreError
from .schema import (
    CURRENT_SCHEMA_VERSION,
    LEDGER_TABLE,
    PGVECTOR_COLUMN,
    POSTINGS_DELETE_FUNCTION,
    POSTINGS_DELETE_TRIGGERS,
    SESSION_CHUNKS_INDEX,
    TABLES,
    create_statements,
    has_pgvector_column,
    has_pgvector_extension,
    pgvector_statements,
)
from .vectors import vector_text

logger = logging.getLogger("elastimem")

# The two-int advisory lock key of schema changes ("elas", 1). PostgreSQL keeps the two-int
# and the one-bigint key spaces apart, so it never meets a user's write lock.
SCHEMA_LOCK = (0x656C6173, 1)

Step = Callable[[Any], None]
# Rows back-filled per statement when the pgvector copy is added to existing chunks.
BACKFILL_PAGE = 1000


def m002_pgvector(conn: Any) -> None:
    """The pgvector copy of the chunk vectors (``schema.PGVECTOR_DOC``), where the database
    has the extension; nothing otherwise."""
    if has_pgvector_extension(conn):
        add_pgvector(conn)


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
    for table in ("chunks", "facts"):  # idempotent, as every step
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_delete_postings ON {table}")
    for statement in POSTINGS_DELETE_TRIGGERS:
        conn.execute(statement)
    conn.execute("DROP INDEX IF EXISTS idx_chunks_session")
    conn.execute(SESSION_CHUNKS_INDEX)


# (version, name, step) after version 1; each runs in the locked transaction with its ledger
# row.
STEPS: tuple[tuple[int, str, Step], ...] = (
    (2, "m002_pgvector", m002_pgvector),
    (3, "m003_cheaper_postings_and_session_chunks", m003_cheaper_postings_and_session_chunks),
)


def add_pgvector(conn: Any) -> int:
    """Create the pgvector part (idempotent) and back-fill the copy of every vector written
    before it, for every user; return the rows filled. In the caller's transaction.

    Row-level security is forced on ``chunks`` even for its owner: the back-fill lifts that
    for its own transaction (the rows it writes are each user's own, copied in place), and
    a role that may not (not the owner) fails here, as it would on any schema change."""
    for statement in pgvector_statements():
        conn.execute(statement)
    forced = conn.execute(
        "SELECT relforcerowsecurity FROM pg_class WHERE oid = to_regclass('chunks')"
    ).fetchone()
    if forced and forced[0]:
        conn.execute("ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY")
    filled = 0
    last: tuple[str, int] = ("", -1)
    while True:
        rows = conn.execute(
            "SELECT user_id, id, embedding FROM chunks WHERE (user_id, id) > (%s, %s) "
            f"AND embedding IS NOT NULL AND {PGVECTOR_COLUMN} IS NULL "
            "ORDER BY user_id, id LIMIT %s",
            (*last, BACKFILL_PAGE),
        ).fetchall()
        if not rows:
            break
        conn.execute(
            f"UPDATE chunks c SET {PGVECTOR_COLUMN} = v.vec::vector FROM unnest(%s::text[], "
            "%s::bigint[], %s::text[]) AS v(user_id, id, vec) "
            "WHERE c.user_id = v.user_id AND c.id = v.id",
            (
                [str(r[0]) for r in rows],
                [int(r[1]) for r in rows],
                [vector_text(np.frombuffer(bytes(r[2]), dtype="<f4")) for r in rows],
            ),
        )
        filled += len(rows)
        last = (str(rows[-1][0]), int(rows[-1][1]))
    if forced and forced[0]:
        conn.execute("ALTER TABLE chunks FORCE ROW LEVEL SECURITY")
    return filled


def needs_pgvector(conn: Any) -> bool:
    """Whether the database has the extension but ``chunks`` lacks the copy: the extension
    was installed after the schema was made."""
    return has_pgvector_extension(conn) and not has_pgvector_column(conn)


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
        if where not in _pgvector_refused and needs_pgvector(conn):
            _add_pgvector_late(conn, where)
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
            if has_pgvector_extension(conn):
                add_pgvector(conn)
            _record(conn, CURRENT_SCHEMA_VERSION)
            return CURRENT_SCHEMA_VERSION
        for step_version, _name, step in STEPS:
            if step_version > version:
                step(conn)
                _record(conn, step_version)
    return CURRENT_SCHEMA_VERSION


# Addresses where this role may not add the pgvector part: tried (and warned about) once.
_pgvector_refused: set[str] = set()


def _add_pgvector_late(conn: Any, where: str) -> None:
    """Add the pgvector part to a current schema whose database gained the extension since.
    A role that may not change the schema (not its owner) opens the store all the same,
    without the in-database vector search, and is told once who can add it."""
    from psycopg import errors as pg_errors

    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", SCHEMA_LOCK)
            if needs_pgvector(conn):  # another process may have done it meanwhile
                filled = add_pgvector(conn)
                logger.info("%s: added the pgvector copy of %d chunk vectors", where, filled)
    except pg_errors.InsufficientPrivilege as exc:
        _pgvector_refused.add(where)
        logger.warning(
            "%s has the vector extension but elastimem's schema has no pgvector column yet, "
            "and this role may not add it (%s); open it once as the schema's owner to add "
            "it; until then vector search runs in this process",
            where,
            str(exc).strip().splitlines()[0],
        )


def _record(conn: Any, version: int) -> None:
    conn.execute(
        f"INSERT INTO {LEDGER_TABLE} (version, applied_at) VALUES (%s, %s)", (version, now_ts())
    )
