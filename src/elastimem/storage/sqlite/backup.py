"""Online copies of one store file, and the checks that a file is a whole store.

``copy_online`` uses SQLite's online backup API from a read-only connection, in one step
(``pages=-1``): the copy is the one read snapshot the step ran in, so it holds every commit
made before it began and none made after. In WAL mode a reader blocks no writer, so the
store's writers keep writing while it runs (a stepped backup would restart each time another
connection wrote, and could starve under steady writes). The copy is written to a private
temporary file beside the destination (0600, as a store is) and renamed onto it at the end,
so a failed copy never leaves a half-written file under the requested name.

``restore_into`` copies a backup onto a store file the same way, into SQLite's own write
lock on the target, so a process holding the target open sees the restored pages.

``check`` opens a file read-only and lists what is wrong with it: SQLite's
``integrity_check``, the schema version, that every stored vector has the bytes its dimension
says and a model label, and that the FTS5 keyword indexes hold exactly their chunks and
facts. ``key`` is the passphrase of an encrypted store (None: ``ELASTIMEM_KEY`` or
``ELASTIMEM_KEY_FILE``, else a plain store): every connection here is then an SQLCipher one
keyed with it (``connection.raw_connect``), so the backup of an encrypted store is a copy
encrypted with the same key, page for page, and a restore writes the target encrypted too.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import urllib.parse
from contextlib import closing, suppress
from dataclasses import dataclass, field

from ...errors import ConfigError, StoreError
from . import connection
from .cipher import CipherKey, resolve_key
from .connection import SQLITE_NOTADB, error_code, raw_connect, translate_error
from .files import FILE_MODE, make_private_folders
from .migrations import CURRENT_SCHEMA_VERSION

# Rows that mean the store holds someone's memories (a restore refuses to overwrite them).
_MEMORY_TABLES = ("messages", "facts", "lessons")
_COUNTED = ("sessions", "messages", "chunks", "facts", "lessons", "graph_nodes", "jobs")


@dataclass
class CheckReport:
    path: str
    schema_version: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _failed(exc: BaseException, path: str, action: str, key: CipherKey | None) -> StoreError:
    if key is not None and error_code(exc) == SQLITE_NOTADB:
        return StoreError(
            f"could not {action} {path}: it cannot be read with the key given (a wrong key, or "
            "the store is not encrypted); it was left unchanged"
        )
    return translate_error(exc, path, action)


def _read_only(path: str, key: CipherKey | None) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    return raw_connect(uri, uri=True, key=key)


def is_encrypted_export(path: str, *, key: str | None = None) -> bool:
    """Whether the SQLCipher file at ``path`` is an encrypted export (``sealed``), not an
    encrypted store; False when the key cannot read it (the store checks then say so)."""
    cipher = resolve_key(key)
    if cipher is None:
        return False
    try:
        with closing(_read_only(path, cipher)) as conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'export_lines'"
            ).fetchone()
    except connection.ERRORS:
        return False
    return found is not None


def copy_online(source: str, dest: str, *, key: str | None = None) -> int:
    """Copy the store file ``source`` to the new private file ``dest``; its size in bytes."""
    cipher = resolve_key(key)
    if not os.path.isfile(source):
        raise StoreError(f"there is no store file at {source}; check the path")
    if os.path.exists(dest):
        raise ConfigError(f"{dest} already exists; name a new file for the backup")
    folder = os.path.dirname(os.path.abspath(dest))
    try:
        make_private_folders(folder)
        fd, temp = tempfile.mkstemp(prefix=".elastimem-backup-", suffix=".db", dir=folder)
    except OSError as exc:
        raise StoreError(f"cannot write the backup to {dest} ({exc.strerror})") from exc
    os.close(fd)  # mkstemp made it 0600; SQLite writes into it
    try:
        try:
            with (
                closing(_read_only(source, cipher)) as src,
                closing(raw_connect(temp, key=cipher)) as out,
            ):
                src.backup(out, pages=-1)
                # A backup of a WAL store is a WAL file too: make it one self-contained file.
                out.execute("PRAGMA journal_mode = DELETE")
        except connection.ERRORS as exc:
            raise _failed(exc, source, "back up", cipher) from exc
        os.chmod(temp, FILE_MODE)
        os.replace(temp, dest)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    return os.path.getsize(dest)


def holds_memories(path: str, *, key: str | None = None) -> bool:
    """Whether the store file at ``path`` holds any message, fact or lesson."""
    cipher = resolve_key(key)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return False
    try:
        with closing(_read_only(path, cipher)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return any(
                conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]
                for table in _MEMORY_TABLES
                if table in tables
            )
    except connection.ERRORS as exc:
        raise _failed(exc, path, "read", cipher) from exc


def restore_into(backup: str, target: str, *, key: str | None = None) -> None:
    """Copy the store file ``backup`` onto ``target`` (created private when missing)."""
    cipher = resolve_key(key)
    make_private_folders(os.path.dirname(os.path.abspath(target)))
    if not os.path.exists(target):
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        os.close(fd)
    try:
        with (
            closing(_read_only(backup, cipher)) as src,
            closing(raw_connect(target, key=cipher)) as out,
        ):
            src.backup(out, pages=-1)
    except connection.ERRORS as exc:
        raise _failed(exc, target, "restore", cipher) from exc


def check(path: str, *, key: str | None = None) -> CheckReport:
    """What is wrong with the store file at ``path`` (nothing: ``report.ok``)."""
    cipher = resolve_key(key)
    report = CheckReport(path)
    if not os.path.isfile(path):
        report.problems.append(f"there is no file at {path}")
        return report
    try:
        # Read-write, though nothing is written: FTS5 runs its 'integrity-check' command
        # only on a connection that could write. A file this user may not write is read.
        writable = os.access(path, os.W_OK)
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"
        conn = raw_connect(uri, uri=True, key=cipher) if writable else _read_only(path, cipher)
        with closing(conn):
            _check(conn, report)
    except connection.ERRORS as exc:
        if cipher is not None and error_code(exc) == SQLITE_NOTADB:
            report.problems.append("it cannot be read with the key given (or is not encrypted)")
        else:
            report.problems.append(f"SQLite cannot read it: {exc}")
    return report


def _check(conn: sqlite3.Connection, report: CheckReport) -> None:
    problems = report.problems
    verdict = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if verdict != ["ok"]:
        problems.extend(f"integrity_check: {line}" for line in verdict[:20])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        problems.append("it is not an elastimem store (no meta table)")
        return
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(row[0]) if row and str(row[0]).isdigit() else None
    report.schema_version = version
    if version is None:
        problems.append("it records no schema version")
    elif version > CURRENT_SCHEMA_VERSION:
        problems.append(
            f"schema version {version} is newer than this elastimem's "
            f"{CURRENT_SCHEMA_VERSION}; check it with a newer elastimem"
        )
    for table in _COUNTED:
        if table in tables:
            report.counts[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    bad = conn.execute(
        "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL AND (embedding_model IS NULL "
        "OR embedding_dim IS NULL OR length(embedding) != 4 * embedding_dim)"
    ).fetchone()[0]
    if bad:
        problems.append(f"{bad} chunk vector(s) do not match their recorded dimension or model")
    if "fact_vectors" in tables:
        bad = conn.execute(
            "SELECT count(*) FROM fact_vectors v LEFT JOIN facts f ON f.id = v.fact_id "
            "WHERE f.id IS NULL OR length(v.embedding) != 4 * v.embedding_dim"
        ).fetchone()[0]
        if bad:
            problems.append(f"{bad} fact vector(s) have no fact or the wrong size")
    for fts, content in (("chunks_fts", "chunks"), ("facts_fts", "facts")):
        if fts in tables:
            _check_fts(conn, fts, content, problems)


def _check_fts(conn: sqlite3.Connection, fts: str, content: str, problems: list[str]) -> None:
    indexed = conn.execute(f"SELECT count(*) FROM {fts}_docsize").fetchone()[0]
    rows = conn.execute(f"SELECT count(*) FROM {content}").fetchone()[0]
    if indexed != rows:
        problems.append(f"the keyword index {fts} holds {indexed} rows for {rows} {content}")
        return
    try:
        # rank 1: compare the index with the content table, not only with itself.
        conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
    except connection.ERRORS as exc:
        problems.append(f"the keyword index {fts} does not match its {content} ({exc})")
