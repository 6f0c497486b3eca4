"""Backups, restores and checks of one user's store, while its writers keep writing.

A backup of an SQLite store is a copy of its file (SQLite's online backup, one read snapshot:
``storage.sqlite.backup``). On PostgreSQL a backup is the user's rows as a lossless export
file (``Elastimem.export``, one read snapshot too); backing up the whole server is the
database's job (pg_dump, pgBackRest: README, "Operating the service"). Either kind of backup
restores into either kind of store: a restore into an SQLite file copies the file (an export
is first imported into a fresh file beside it); a restore into a PostgreSQL user imports an
export (an SQLite backup is exported first).

A restore refuses a target that holds memories unless ``force`` (SQLite only: on a server,
erase the user first). ``verify`` lists what is wrong with a store or a backup: an export or a
server's store is imported into a temporary SQLite file and that file is checked, so both
kinds are held to the same checks.

``key`` is the passphrase of an encrypted store (None: ``ELASTIMEM_KEY`` or
``ELASTIMEM_KEY_FILE``, as every open): the backup of an encrypted store is a copy encrypted
with the same key, and every temporary store made on the way is encrypted with it too.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from .. import open as open_store
from ..errors import ConfigError, StoreError
from ..storage.addresses import is_postgres_url
from ..storage.sqlite import backup as files
from ..storage.sqlite.sealed import looks_sealed

SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class BackupResult:
    path: str
    format: str  # "sqlite" (a store file) or "export" (JSON Lines)
    bytes: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _quiet(**kw: Any) -> dict[str, Any]:
    # A store opened only to copy rows: no model, no background extraction.
    return {"disable_builtin_embedder": True, **kw}


def backup(
    source: str, dest: str, *, user_id: str | None = None, key: str | None = None
) -> BackupResult:
    """Write a consistent copy of the store at ``source`` to the new file ``dest`` (0600)."""
    started = time.perf_counter()
    dest = os.path.abspath(os.path.expanduser(dest))
    if os.path.exists(dest):
        raise ConfigError(f"{dest} already exists; name a new file for the backup")
    if is_postgres_url(source):
        if key is not None:
            raise ConfigError("a PostgreSQL store takes no key; encryption is the server's")
        with open_store(source, create=False, user_id=user_id, **_quiet()) as mem:
            mem.export(dest)
        kind = "export"
    else:
        files.copy_online(source, dest, key=key)
        kind = "sqlite"
    return BackupResult(dest, kind, os.path.getsize(dest), time.perf_counter() - started)


def backup_format(path: str, *, key: str | None = None) -> str:
    """ "sqlite" or "export", from the file's first bytes (a backup is never an open store);
    an encrypted file is an export when the key opens it as one."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"cannot read the backup {path} ({exc.strerror})") from exc
    if head == SQLITE_HEADER:
        return "sqlite"
    if not looks_sealed(head):
        return "export"
    return "export" if files.is_encrypted_export(path, key=key) else "sqlite"


@contextmanager
def _as_sqlite(path: str, *, key: str | None) -> Iterator[str]:
    """The backup at ``path`` as a store file: itself, or an export imported into a temp file."""
    if backup_format(path, key=key) == "sqlite":
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="elastimem-restore-") as folder:
        temp = os.path.join(folder, "store.db")
        with open_store(temp, key=key, **_quiet()) as mem:
            mem.import_(path)
        yield temp


@contextmanager
def _as_export(path: str, *, key: str | None = None) -> Iterator[str]:
    """The backup at ``path`` as an export file: itself, or a copy of the store exported
    (plain: it goes to a server, which holds it in the clear anyway)."""
    if backup_format(path, key=key) == "export":
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="elastimem-restore-") as folder:
        copy = os.path.join(folder, "copy.db")
        files.copy_online(path, copy, key=key)  # opening it would migrate the backup itself
        export = os.path.join(folder, "store.jsonl")
        with open_store(copy, key=key, **_quiet()) as mem:
            mem.export(export, encrypt=False)
        yield export


def restore(
    source: str,
    target: str,
    *,
    user_id: str | None = None,
    force: bool = False,
    key: str | None = None,
) -> dict[str, Any]:
    """Put the backup ``source`` into the store ``target``; what the target holds after."""
    if not os.path.isfile(source):
        raise ConfigError(f"there is no backup at {source}; check the path")
    if is_postgres_url(target):
        with open_store(target, user_id=user_id, **_quiet()) as mem:
            if mem.stats()["messages"] or mem.facts() or mem.lessons():
                raise ConfigError(
                    f"user {user_id} already holds memories on this server; restore only into "
                    "a user with none (erase theirs first: --force is for store files)"
                )
            with _as_export(source, key=key) as export:
                mem.import_(export)
            return _summary(mem.stats())
    target = os.path.abspath(os.path.expanduser(target))
    if not force and files.holds_memories(target, key=key):
        raise ConfigError(
            f"{target} already holds memories; restore into a new file, or pass --force to "
            "replace them"
        )
    with _as_sqlite(source, key=key) as store_file:
        problems = files.check(store_file, key=key).problems
        if problems:
            raise StoreError(f"the backup {source} is damaged: {problems[0]}; nothing restored")
        files.restore_into(store_file, target, key=key)
    with open_store(target, create=False, user_id=user_id, key=key, **_quiet()) as mem:
        return _summary(mem.stats())


def _summary(stats: dict[str, Any]) -> dict[str, Any]:
    wanted = ("sessions", "messages", "chunks", "facts", "lessons")
    return {name: stats[name] for name in wanted}


def verify(target: str, *, user_id: str | None = None, key: str | None = None) -> files.CheckReport:
    """What is wrong with the store or backup at ``target`` (nothing: ``report.ok``)."""
    if is_postgres_url(target):
        with tempfile.TemporaryDirectory(prefix="elastimem-verify-") as folder:
            export = os.path.join(folder, "store.jsonl")
            with open_store(target, create=False, user_id=user_id, **_quiet()) as mem:
                mem.export(export)
            report = _verify_file(export, key=None)
            report.path = f"user {user_id} on the server"
            return report
    return _verify_file(os.path.abspath(os.path.expanduser(target)), key=key)


def _verify_file(path: str, *, key: str | None) -> files.CheckReport:
    if not os.path.isfile(path):
        return files.CheckReport(path, problems=[f"there is no file at {path}"])
    if backup_format(path, key=key) == "sqlite":
        return files.check(path, key=key)
    try:
        with _as_sqlite(path, key=key) as store_file:
            report = files.check(store_file, key=key)
    except Exception as exc:  # an export that does not import is what verify reports
        return files.CheckReport(path, problems=[f"the export does not import: {exc}"])
    report.path = path
    return report
