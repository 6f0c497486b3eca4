"""The steps of the open sequence (SPEC §4.5), run by ``database.open_store`` in order.

Before SQLite touches anything: the address is a file path (``refuse_database_url``), the
path resolves (``resolve_path``), the file is an SQLite database or nothing yet
(``check_file``), and this process may write it (``cannot_write``). Then a checked connection
(``connect_checked``) probes the schema and sets a corrupt file aside once, or a read-only
one (``connect_read_only``) reads it as it is. Last, ``migrate`` brings the schema to
``migrations.CURRENT_SCHEMA_VERSION`` one step per transaction, or creates a fresh store.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path

from ...clock import now_ts
from ...errors import ConfigError, EncryptionKeyError, SchemaTooNewError, StoreError
from ..addresses import refuse_database_url
from . import connection, files, fts, migrations
from .cipher import SQLITE_HEADER, CipherKey, looks_encrypted
from .connection import (
    MEMORY_PATH,
    SQLITE_CORRUPT,
    SQLITE_NOTADB,
    SQLITE_READONLY,
    configure,
    connect,
    error_code,
    open_here,
    raw_connect,
    translate_error,
)
from .meta import get_meta, log_event, set_meta
from .tx import SqliteTx

logger = logging.getLogger("elastimem")

# The tables every elastimem layout has had: a file holding them without a ``meta`` table is
# a very early store (version 1); a file without them is another program's database.
_CORE_TABLES = frozenset({"sessions", "messages", "chunks", "facts"})

# ``Database.atomic`` of the store being opened: a write transaction on its writer.
Atomic = Callable[[], AbstractContextManager[SqliteTx]]

__all__ = [
    "SQLITE_HEADER",
    "cannot_write",
    "check_file",
    "connect_checked",
    "connect_read_only",
    "migrate",
    "read_only_fts",
    "refuse_database_url",
    "require_existing",
    "resolve_path",
]


# -- before SQLite touches the file ------------------------------------------------------------


def resolve_path(path: str | os.PathLike[str]) -> str:
    """Expand ``~``, create missing parent folders (0700) and return the absolute path."""
    raw: object = os.fspath(path)
    if not isinstance(raw, str):  # a path-like object giving bytes
        raise ConfigError(f"path={path!r} is invalid; pass a str or a path-like giving str")
    if raw == MEMORY_PATH:
        return MEMORY_PATH
    if not raw or "\x00" in raw:
        raise StoreError(f"{raw!r} is not a usable store path; pass a file path or ':memory:'")
    target = Path(os.path.expanduser(raw))
    try:
        files.make_private_folders(target.parent)
    except OSError as exc:
        raise StoreError(
            f"cannot create the folder {target.parent} for the store ({exc.strerror}); "
            "choose a writable location"
        ) from exc
    try:
        if target.is_dir():
            raise StoreError(f"{target} is a folder; pass the path of a store file inside it")
        return str(target.resolve())
    except OSError as exc:  # a folder on the way this user may not search
        raise StoreError(
            f"cannot reach {target} ({exc.strerror}); check the permissions of its folders"
        ) from exc


def _missing_store(path: str) -> str:
    return (
        f"there is no elastimem store at {path}, and none was created (create=False): check "
        "the path, or open it with create=True to start a new store"
    )


def _no_store_yet(path: str) -> str:
    return (
        f"{path} holds no elastimem store yet (it is an empty database file); it was left "
        "unchanged (create=False): open it with create=True to make it a store"
    )


def require_existing(path: str | os.PathLike[str]) -> None:
    """``create=False``: refuse a path with no file before anything is created for it."""
    raw: object = os.fspath(path)
    if not isinstance(raw, str) or raw == MEMORY_PATH or not raw or "\x00" in raw:
        return  # resolve_path judges these (and ":memory:" is always new)
    target = os.path.expanduser(raw)
    try:
        found = os.path.exists(target)
    except (OSError, ValueError):
        return
    if not found:
        raise StoreError(_missing_store(os.path.abspath(target)))


def _needs_key(path: str) -> EncryptionKeyError:
    return EncryptionKeyError(
        f"{path} is encrypted (or is not an SQLite file) and no key was given; it was left "
        "unchanged: open it with its key (key=..., ELASTIMEM_KEY or ELASTIMEM_KEY_FILE, or "
        "--key-file on the command line)"
    )


def _not_encrypted(path: str) -> EncryptionKeyError:
    return EncryptionKeyError(
        f"a key was given but {path} is not encrypted; it was left unchanged: open it without "
        "a key, or encrypt it first (elastimem --db PATH --key-file FILE encrypt)"
    )


def wrong_key(path: str, exc: BaseException | None = None) -> StoreError:
    """The error for an encrypted store the key does not open: never 'corrupt', never moved."""
    if exc is not None and error_code(exc) == SQLITE_CORRUPT:
        return StoreError(
            f"{path} is an encrypted store with damaged pages ({exc}); it was left unchanged: "
            "restore it from a backup"
        )
    return EncryptionKeyError(
        f"{path} cannot be read with the key given: the key is wrong (or the file is not an "
        "elastimem store); it was left unchanged: open it with the key it was encrypted with"
    )


def check_file(resolved: str, *, create: bool, key: CipherKey | None = None) -> None:
    """§4.5 step 1, before SQLite touches the file: refuse what is not an SQLite database.

    A text file, a picture or an encrypted database given as the store was "corrupt" to the
    probe, so it was renamed away and a fresh store created in its place. Only a file that
    starts with the SQLite header can be a damaged store worth setting aside; anything else
    is someone's file, and left exactly as it is. An empty file is an empty database to
    SQLite (``sqlite3`` makes it one), so with ``create`` a store is created in it.
    """
    if resolved == MEMORY_PATH:
        return
    try:
        status = os.stat(resolved)
    except FileNotFoundError:
        if not create:
            raise StoreError(_missing_store(resolved)) from None
        return
    except OSError:
        return  # SQLite's own error says what is wrong (translate_error)
    if not stat.S_ISREG(status.st_mode):
        raise StoreError(
            f"{resolved} is not a regular file (a device, pipe or socket), so not an elastimem "
            "store; it was left unchanged: pass the path of a store file"
        )
    if status.st_size == 0:
        if not create:
            raise StoreError(_no_store_yet(resolved))
        return
    if open_here(resolved):
        # An open store (and reading it here would drop this process's locks on it).
        if connection.open_encrypted(resolved) and key is None:
            raise _needs_key(resolved)
        if not connection.open_encrypted(resolved) and key is not None:
            raise _not_encrypted(resolved)
        return
    try:
        with open(resolved, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError:
        return  # unreadable: SQLite's error names it
    if header == SQLITE_HEADER and key is not None:
        raise _not_encrypted(resolved)
    if header != SQLITE_HEADER and key is not None:
        return  # an encrypted store, or not: the keyed probe tells (``wrong_key``)
    if header != SQLITE_HEADER and looks_encrypted(resolved):
        raise _needs_key(resolved)
    if header != SQLITE_HEADER:
        raise StoreError(
            f"{resolved} is not an elastimem store (not an SQLite file); it was left unchanged: "
            "pass the path of a store, or of a file that does not exist yet to start one "
            "(if it was a store whose first bytes were damaged, restore it from a backup)"
        )


def cannot_write(resolved: str) -> bool:
    """An existing store this process may not write: the file, or its folder (WAL needs to
    create ``-wal``/``-shm`` beside it). ``os.access`` also reports read-only mounts and
    immutable files, which bind root too."""
    if resolved == MEMORY_PATH or not os.path.exists(resolved):
        return False
    folder = os.path.dirname(resolved) or "."
    return not os.access(resolved, os.W_OK) or not os.access(folder, os.W_OK)


# -- connecting: probe, and set a corrupt file aside ---------------------------------------------


def _probe(conn: sqlite3.Connection) -> None:
    """§4.5 step 2: read the schema, then ``meta.schema_version``: a damaged page in either
    raises here, where it is classified (a corrupt store is set aside), not later."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta:
        conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()


def _quarantine_corrupt(resolved: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = f"{resolved}.corrupt-{stamp}"
    counter = 1
    while os.path.exists(aside):
        counter += 1
        aside = f"{resolved}.corrupt-{stamp}-{counter}"
    try:
        os.replace(resolved, aside)
        moved = [aside]
        for suffix in ("-wal", "-shm"):
            if os.path.exists(resolved + suffix):
                os.replace(resolved + suffix, aside + suffix)
                moved.append(aside + suffix)
    except OSError as exc:
        raise StoreError(
            f"{resolved} is corrupt and could not be set aside ({exc.strerror}); "
            "move it away by hand and reopen"
        ) from exc
    # A rename keeps the mode: a copy set aside from a store made before files were private
    # would stay readable by others, under a name no one opens or checks.
    for path in moved:
        files.make_private(path)
    files.create_private_file(resolved)  # the fresh store, private before SQLite opens it
    return aside


def connect_read_only(
    resolved: str, key: CipherKey | None = None
) -> tuple[sqlite3.Connection, str]:
    """A read-only connection and the URI that made it (readers reuse it)."""
    base = "file:" + urllib.parse.quote(resolved) + "?mode=ro"
    try:
        conn = connect(resolved, writer=True, read_only_uri=base, key=key)
        _probe(conn)
        return conn, base
    except connection.ERRORS as exc:
        if key is not None and error_code(exc) in (SQLITE_NOTADB, SQLITE_CORRUPT):
            raise wrong_key(resolved, exc) from exc
        if error_code(exc) != SQLITE_READONLY:
            raise translate_error(exc, resolved, "open") from exc
    # A WAL store in a folder we cannot write has no -shm to share: SQLite can then read it
    # only as an immutable snapshot.
    immutable = base + "&immutable=1"
    try:
        conn = connect(resolved, writer=True, read_only_uri=immutable, key=key)
        _probe(conn)
    except connection.ERRORS as exc:
        if key is not None and error_code(exc) in (SQLITE_NOTADB, SQLITE_CORRUPT):
            raise wrong_key(resolved, exc) from exc
        raise translate_error(exc, resolved, "open") from exc
    pending = os.path.exists(resolved + "-wal")
    logger.warning(
        "%s is in a read-only folder; it is read as a snapshot, so changes other processes "
        "make while it is open are not seen%s",
        resolved,
        " (and the changes still in its -wal file are not seen either)" if pending else "",
    )
    return conn, immutable


def connect_checked(
    resolved: str, *, create: bool = True, key: CipherKey | None = None
) -> tuple[sqlite3.Connection, dict[str, str] | None]:
    """Connect and probe, setting a corrupt file aside once. Returns (conn, recovery detail).

    With ``create`` False the file is opened with ``mode=rw``, so a file removed since it was
    checked is not created anew, and a file without tables is refused untouched. With a
    ``key`` nothing is ever set aside: a page the key cannot read means a wrong key far more
    often than damage, and moving a store away for a mistyped passphrase would lose it.
    """
    recovery: dict[str, str] | None = None
    for attempt in range(2):
        conn: sqlite3.Connection | None = None
        try:
            existing_only = not create and resolved != MEMORY_PATH
            conn = raw_connect(
                "file:" + urllib.parse.quote(resolved) + "?mode=rw" if existing_only else resolved,
                uri=existing_only,
                key=key,
            )
            # Before configure: switching to WAL would already change a foreign file.
            version = None if resolved == MEMORY_PATH else _schema_version(conn, resolved)
            if version is None and existing_only:
                raise StoreError(_no_store_yet(resolved))
            configure(conn, writer=True, memory=resolved == MEMORY_PATH)
            _probe(conn)
            return conn, recovery
        except StoreError:
            if conn is not None:
                conn.close()
            raise
        except connection.ERRORS as exc:
            code = error_code(exc)
            corrupt = code in (SQLITE_NOTADB, SQLITE_CORRUPT) and resolved != MEMORY_PATH
            if corrupt and key is not None:
                if conn is not None:
                    conn.close()
                raise wrong_key(resolved, exc) from exc
            aside = None
            if corrupt and existing_only:
                # Setting it aside would leave no store at all: say so, change nothing.
                if conn is not None:
                    conn.close()
                raise StoreError(
                    f"{resolved} is a damaged store ({exc}); it was left unchanged "
                    "(create=False): restore it from a backup, or open it with create=True "
                    "(on the command line, a command that stores something), which moves it "
                    "aside and starts a fresh store"
                ) from exc
            if corrupt and attempt == 0:
                # Rename before closing: closing could otherwise delete the side files,
                # and they may hold the only copy of recent writes.
                aside = _quarantine_corrupt(resolved)
            if conn is not None:
                conn.close()
            if aside is None:
                raise translate_error(exc, resolved, "open") from exc
            logger.warning(
                "%s was not a readable elastimem store (%s); it was moved to %s and a "
                "fresh store was created",
                resolved,
                exc,
                aside,
            )
            recovery = {"moved_to": os.path.basename(aside), "error": str(exc)}
    raise StoreError(f"could not open {resolved} after setting a corrupt file aside")


# -- the schema: its version, migrations, a fresh store ------------------------------------------


def _schema_version(conn: sqlite3.Connection, path: str = "") -> int | None:
    """None for a file with no tables; 1 for tables without a recorded version.

    Raises ``StoreError`` for another program's SQLite database: migrating it would add
    elastimem's tables to it, and rebuild any of its own that share a name.
    """
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if "meta" not in tables and not tables >= _CORE_TABLES:
        raise StoreError(
            f"{path or 'this file'} is an SQLite database of another program, not an "
            "elastimem store; it was left unchanged: pass the path of a store (or of a new file)"
        )
    if "meta" not in tables:
        return 1
    value = get_meta(conn, "schema_version")
    if value is None:
        return 1
    try:
        return int(value)
    except ValueError as exc:
        raise StoreError(f"meta.schema_version={value!r} in the store is unreadable") from exc


def _too_new(path: str, version: int) -> SchemaTooNewError:
    return SchemaTooNewError(
        f"{path} has schema version {version} but this elastimem supports "
        f"{migrations.CURRENT_SCHEMA_VERSION}; upgrade elastimem to open it"
    )


def migrate(conn: sqlite3.Connection, atomic: Atomic, path: str) -> None:
    """Create a fresh store, or run every migration step newer than the file's version.

    ``conn`` is the store's writer, outside any transaction; the caller holds the store's
    write lock. Each step runs in its own ``atomic()`` and is rolled back whole on failure.
    """
    try:
        version = _schema_version(conn, path)
    except connection.ERRORS as exc:
        raise translate_error(exc, path, "read") from exc
    if version is None:
        _create_fresh(atomic)
        return
    if version > migrations.CURRENT_SCHEMA_VERSION:
        raise _too_new(path, version)
    for step_version, name, step in migrations.STEPS:
        if step_version > version:
            _run_step(conn, atomic, path, step_version, name, step)


def _create_fresh(atomic: Atomic) -> None:
    from ...version import package_version

    __version__ = package_version()

    with atomic() as tx:
        conn = tx.conn
        if _schema_version(conn) is not None:
            return  # another process created it while we waited for the lock
        migrations.create_fresh(conn)
        now = now_ts()
        set_meta(conn, "schema_version", migrations.CURRENT_SCHEMA_VERSION)
        set_meta(conn, "created_at", now)
        set_meta(conn, "created_by", __version__)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'initial', ?)",
            (migrations.CURRENT_SCHEMA_VERSION, now),
        )
        log_event(conn, "created", schema_version=migrations.CURRENT_SCHEMA_VERSION)


def _run_step(
    conn: sqlite3.Connection,
    atomic: Atomic,
    path: str,
    version: int,
    name: str,
    step: migrations.Step,
) -> None:
    # Table rebuilds must not fire cascades or rewrite child references (§4.5 step 3→4).
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA legacy_alter_table = ON")
    migrations.register_migration_functions(conn)
    try:
        with atomic():
            current = _schema_version(conn) or 1
            if current >= version:
                return
            for ddl in (
                migrations.TABLES_V4["meta"],
                migrations.TABLES_V4["schema_migrations"],
                migrations.TABLES_V4["events"],
            ):
                conn.execute(ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
            step(conn)
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                # Old files may hold dangling references; drop those rows rather than
                # refuse to open years of memory.
                _drop_dangling(conn, broken)
            set_meta(conn, "schema_version", version)
            conn.execute(
                "INSERT OR REPLACE INTO schema_migrations (version, name, applied_at) "
                "VALUES (?, ?, ?)",
                (version, name, now_ts()),
            )
            log_event(conn, "migrated", step=name, from_version=current, to_version=version)
    except StoreError as exc:
        raise StoreError(
            f"migration step {name} failed on {path} and was rolled back: {exc.__cause__}"
        ) from exc.__cause__
    except Exception as exc:
        raise StoreError(
            f"migration step {name} failed on {path} and was rolled back: {exc}"
        ) from exc
    finally:
        conn.execute("PRAGMA legacy_alter_table = OFF")
        conn.execute("PRAGMA foreign_keys = ON")


def _drop_dangling(conn: sqlite3.Connection, broken: list[tuple[object, ...]]) -> None:
    for table, rowid, _parent, _fk in broken:
        if rowid is not None:
            conn.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))


def read_only_fts(conn: sqlite3.Connection, path: str) -> bool:
    """Check a store opened read-only (nothing can be migrated or rebuilt) and say whether
    its FTS tables answer searches; raises ``StoreError`` when it cannot be used as it is."""
    try:
        version = _schema_version(conn, path)
        if version is None:
            raise StoreError(f"{path} is read-only and holds no elastimem store")
        if version > migrations.CURRENT_SCHEMA_VERSION:
            raise _too_new(path, version)
        if version < migrations.CURRENT_SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {version} and needs an upgrade, but it "
                "is read-only; open it once with write access to migrate it"
            )
        return fts.usable_read_only(conn)
    except connection.ERRORS as exc:
        raise translate_error(exc, path, "read") from exc
