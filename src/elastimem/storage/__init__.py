"""storage: every SQL statement of elastimem, behind small interfaces (SPEC §4).

Owns: connections, transactions, the schema and its migrations, the open sequence, and one
interface per table family (transcript, facts, lessons, jobs, graph rows, meta, vectors on
file, keyword postings). ``storage.sqlite`` implements them on one SQLite file per user; a
second backend implements the same interfaces without touching the layers above.
Nothing above this package writes SQL or sees a driver's connection: code above the seam
opens a ``Database`` (``open_database``) and receives a transaction handle (``Tx``) from it,
whose families' methods hold the statements.
May import: the base modules only (errors, clock, text, config, values, enums).
"""

from __future__ import annotations

import os

from ..errors import ConfigError
from .addresses import POSTGRES_NEEDS_USER, is_postgres_url
from .database import Database
from .sqlite import database as sqlite_database
from .sqlite.cipher import resolve_key

# Encryption at rest is SQLCipher's, so a file's; a server's data is the server's to protect.
POSTGRES_NO_KEY = (
    "an encryption key applies to SQLite store files only; a PostgreSQL store is protected by "
    "its server (encrypted disks, TLS): open it without key=, ELASTIMEM_KEY, "
    "ELASTIMEM_KEY_FILE or --key-file"
)

__all__ = ["Database", "open_database"]


def open_database(
    target: str | os.PathLike[str],
    *,
    create: bool = True,
    user_id: str | None = None,
    key: object = None,
) -> Database:
    """Open (creating, recovering and migrating as needed) the store at ``target``.

    The address picks the backend: a file path or ``":memory:"`` opens an SQLite store (one
    user's; ``user_id`` is the caller's to record); ``postgresql://`` and ``postgres://``
    open ``user_id``'s store on that server (``ConfigError`` without one; the extra
    ``postgres`` must be installed); any other ``scheme://`` raises ``ConfigError``.
    ``create`` False opens only an existing store and creates nothing (``StoreError``
    otherwise). ``key`` (a passphrase; when None, ``ELASTIMEM_KEY`` or ``ELASTIMEM_KEY_FILE``)
    opens an encrypted SQLite store (``sqlite.cipher``); with a server address it is a
    ``ConfigError``.
    """
    if is_postgres_url(target):
        if user_id is None:
            raise ConfigError(POSTGRES_NEEDS_USER)
        if resolve_key(key) is not None:
            raise ConfigError(POSTGRES_NO_KEY)
        from .postgres import database as postgres_database  # psycopg only when asked for

        return postgres_database.open_database(str(target), user_id, create=create)
    return sqlite_database.open_store(target, create=create, key=resolve_key(key))
