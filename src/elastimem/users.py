"""Per-user stores: one file per user under a root folder (SPEC §1.3).

``open_user(root, user_id)`` opens ``<root>/<user_id>.db``. The id becomes a file name, so it
is checked before any file access: a strict character pattern (no separators, no NUL, no
leading dot, so no ``..`` or absolute path), no Windows device name (``con``, ``nul.txt``…),
and the resolved file must sit directly in the resolved root (which also defeats a symlink
planted under the root). The root, and each folder made on the way to it, is created private
(0o700). Each file records its owner in ``meta.user_id`` and refuses to open under another id,
so a renamed or copied file is caught.
A store this process may not write opens read-only: the owner is still checked, reads work and
writes raise the store's read-only ``StoreError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .arguments import check_user_id
from .errors import ConfigError
from .lifecycle import owner_mismatch
from .storage.addresses import is_postgres_url, refuse_database_url
from .storage.sqlite import files
from .storage.sqlite.cipher import resolve_key
from .storage.sqlite.upkeep import peek_meta

ROOT_MODE = files.FOLDER_MODE


def _root(root_dir: object) -> Path:
    if not isinstance(root_dir, (str, os.PathLike)):
        raise ConfigError(f"root_dir={root_dir!r} is invalid; pass a folder path")
    raw = os.fspath(root_dir)
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise ConfigError(f"root_dir={root_dir!r} is invalid; pass a non-empty folder path")
    refuse_database_url(raw, file_only=True)
    root = Path(os.path.expanduser(raw))
    if not root.exists():
        try:
            # Every level it creates is 0700, as for any store's folders (files.py).
            files.make_private_folders(root)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the user folder {root} ({exc.strerror}); choose a writable path"
            ) from exc
    elif not root.is_dir():
        raise ConfigError(f"root_dir={raw!r} is not a folder; pass the folder holding user stores")
    return root


def _recorded_user(path: Path, key: object = None) -> str | None:
    """``meta.user_id`` of an existing store, read without writing anything (no locks, no
    ``-wal``/``-shm`` created). A value still in another process's WAL is missed here and
    caught by the check after opening; a file that is not a store yet gives None (and so does
    an encrypted one whose key is wrong or missing: the open then refuses it)."""
    return peek_meta(path, "user_id", resolve_key(key))


def open_user(root_dir: str | os.PathLike[str], user_id: str, **kw: Any) -> Any:
    """Open ``<root_dir>/<user_id>.db``, creating ``root_dir`` with mode 0o700; given a
    ``postgresql://`` address, open the user's store on that server."""
    from .store import Elastimem

    check_user_id(user_id)
    if is_postgres_url(root_dir):
        return Elastimem(root_dir, user_id=user_id, **kw)  # every user's rows on one server
    root = _root(root_dir)
    target = (root / f"{user_id}.db").resolve()
    if target.parent != root.resolve():
        raise ConfigError(f"user_id={user_id!r} would escape the root folder {root}")
    if target.exists():
        # Refuse another user's file before opening it (opening recovers and writes).
        recorded = _recorded_user(target, kw.get("key"))
        if recorded is not None and recorded != user_id:
            raise owner_mismatch(str(target), recorded, user_id)
    return Elastimem(target, user_id=user_id, **kw)
