"""Converting a store file in place between keys: encrypt, decrypt, rekey (issue 31).

``convert`` never rewrites the store's own pages. It writes a whole new file beside it with
``sqlcipher_export`` (under the new key, or none), checks the copy (it opens with the new key,
``integrity_check`` says ok, the schema, ``user_version`` and every table's row count equal
the original's), and only then renames it over the original, which is atomic on one
filesystem. Until the rename the original is untouched; if the copy fails its check, or the
rename fails, the copy is removed and the original stays as it was.

While it works it holds the original in SQLite's exclusive locking mode, after switching it
from WAL to a rollback journal: that switch is refused while any other connection has the
store open (so no process is left writing to a file that is then replaced), it empties and
removes the ``-wal`` (which must not be replayed onto the new file), and the exclusive lock
keeps any other process from opening the store until the new file is in place.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Any

from ...errors import ConfigError, StoreError, StoreLockedError
from . import connection, files
from .cipher import SQLITE_HEADER, CipherKey
from .connection import SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOTADB, cipher_connect, error_code


def is_encrypted(path: str) -> bool:
    """True when the file at ``path`` does not start with the plain SQLite header."""
    with open(path, "rb") as handle:
        return handle.read(len(SQLITE_HEADER)) != SQLITE_HEADER


def convert(path: str, old_key: CipherKey | None, new_key: CipherKey | None) -> dict[str, Any]:
    """Rewrite the store at ``path`` (keyed with ``old_key``, None: plain) under ``new_key``
    (None: plain), in place and safely (module docstring). Returns the tables and row counts
    that were checked."""
    if old_key is None and new_key is None:
        raise ConfigError("converting a store needs a key on at least one side")
    if connection.open_here(path):
        raise StoreError(f"{path} is open in this process; close it before converting it")
    encrypted = is_encrypted(path)
    if encrypted and old_key is None:
        raise ConfigError(f"{path} is already encrypted; give its key to decrypt or rekey it")
    if not encrypted and old_key is not None:
        raise ConfigError(f"{path} is not encrypted; encrypt it instead of decrypting it")
    folder = os.path.dirname(path)
    copy = os.path.join(folder, f".{os.path.basename(path)}.convert-{os.getpid()}")
    source = _lock_source(path, old_key)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.remove(copy)  # left by a run of this process id that was killed
        files.create_private_file(copy)  # private before SQLite writes a page of it
        try:
            counts = _export(source, copy, new_key)
            _verify(copy, new_key, counts, path)
            os.replace(copy, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(copy)
            raise
    finally:
        connection.close_quietly(source)
    return {"path": path, "encrypted": new_key is not None, "rows": counts}


def _lock_source(path: str, key: CipherKey | None) -> sqlite3.Connection:
    """The original, checkpointed into one file and held exclusively by this connection."""
    conn = cipher_connect(path, key, isolation_level=None, check_same_thread=False, timeout=2.0)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        # Leaving WAL needs the only connection: refused while another process has it open.
        mode = conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        if str(mode).lower() != "delete":
            raise StoreLockedError(_in_use(path))
        conn.execute("PRAGMA main.locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("COMMIT")  # the exclusive lock stays until the connection closes
    except connection.ERRORS as exc:
        conn.close()
        code = error_code(exc)
        if code in (SQLITE_BUSY, SQLITE_LOCKED):
            raise StoreLockedError(_in_use(path)) from exc
        if code == SQLITE_NOTADB and key is not None:
            raise ConfigError(
                f"{path} cannot be read with the key given; it was left unchanged: give the "
                "key it is encrypted with"
            ) from exc
        raise StoreError(f"could not read {path} to convert it ({exc}); it is unchanged") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _in_use(path: str) -> str:
    return (
        f"{path} is open in another process; it was left unchanged: stop the processes "
        "using it (agents, serve, ui) and run the command again"
    )


def _tables(conn: Any, schema: str) -> list[str]:
    rows = conn.execute(
        f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table' "
        "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
    ).fetchall()
    return [str(r[0]) for r in rows]


def _counts(conn: Any, schema: str) -> dict[str, int]:
    return {
        t: int(conn.execute(f'SELECT count(*) FROM {schema}."{t}"').fetchone()[0])
        for t in _tables(conn, schema)
    }


def _export(source: Any, copy: str, new_key: CipherKey | None) -> dict[str, int]:
    """Write the whole store to ``copy`` under ``new_key``; the original's row counts."""
    material = new_key.material if new_key is not None else b""
    # The key goes in as a bound value, never as part of the SQL text.
    source.execute("ATTACH DATABASE ? AS em_copy KEY ?", (copy, material))
    try:
        source.execute("SELECT sqlcipher_export('em_copy')")
        version = int(source.execute("PRAGMA main.user_version").fetchone()[0])
        source.execute(f"PRAGMA em_copy.user_version = {version}")
        counts = _counts(source, "main")
    finally:
        source.execute("DETACH DATABASE em_copy")
    return counts


def _verify(copy: str, key: CipherKey | None, counts: dict[str, int], path: str) -> None:
    """The copy opens with ``key``, is intact, and holds the same rows as the original."""
    try:
        conn = cipher_connect(copy, key, isolation_level=None, check_same_thread=False)
    except connection.ERRORS as exc:
        raise StoreError(f"the converted copy of {path} could not be opened ({exc})") from exc
    try:
        check = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        copied = _counts(conn, "main")
    except connection.ERRORS as exc:
        raise StoreError(
            f"the converted copy of {path} could not be read back ({exc}); the original was "
            "left unchanged"
        ) from exc
    finally:
        conn.close()
    if check != ["ok"] or copied != counts:
        raise StoreError(
            f"the converted copy of {path} did not match the original (integrity: "
            f"{'; '.join(check)[:200]}); the original was left unchanged"
        )
    if (key is None) == is_encrypted(copy):
        raise StoreError(f"the converted copy of {path} has the wrong encryption; unchanged")
