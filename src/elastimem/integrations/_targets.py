"""One elastimem store per framework user, opened from a TARGET: a folder or a PostgreSQL address.

``UserStores(target, **open_kw)`` opens each user's store on first use through the public
``elastimem.open_user`` (``<folder>/<user>.db``, or the user's rows on the server) and keeps it
open until ``close()``. Any adapter that maps framework users to elastimem users shares it.
A read for a user with no store in a folder opens nothing (``existing=True``), so asking
about an unknown user never creates a file; on a server the user is opened (an empty store
is a few rows there, and telling "no such user" from a server that cannot be reached would
take the error's wording). Only a folder can list its users; on a server ``users()`` names
those opened by this process (elastimem has no public user listing).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import elastimem


def is_postgres_target(target: str) -> bool:
    return target.lower().startswith(("postgresql://", "postgres://"))


class UserStores:
    """Open ``Elastimem`` stores keyed by user id; thread-safe, closed together."""

    def __init__(self, target: str | os.PathLike[str], **open_kw: Any) -> None:
        if not isinstance(target, (str, os.PathLike)):
            raise elastimem.ConfigError(
                f"target={target!r} is invalid; pass a folder or a postgresql:// address"
            )
        raw = os.fspath(target)
        if not isinstance(raw, str) or not raw:
            raise elastimem.ConfigError("target is empty; pass a folder or a postgresql:// address")
        self.target = raw if is_postgres_target(raw) else os.path.expanduser(raw)
        self._open_kw = open_kw
        self._stores: dict[str, elastimem.Elastimem] = {}
        self._lock = threading.Lock()
        self._closed = False

    def get(self, user_id: str, *, existing: bool = False) -> elastimem.Elastimem | None:
        """The user's open store; with ``existing``, None for a folder user with no file yet.
        ``ConfigError`` (a ``ValueError``) for an id that cannot name a user."""
        with self._lock:
            if self._closed:
                raise elastimem.ClosedError("these stores are closed; create a new adapter")
            mem = self._stores.get(user_id)
            if mem is not None:
                return mem
            in_folder = not is_postgres_target(self.target)
            if existing and in_folder and not (Path(self.target) / f"{user_id}.db").is_file():
                return None
            mem = elastimem.open_user(self.target, user_id, **self._open_kw)
            self._stores[user_id] = mem
            return mem

    def users(self) -> list[str]:
        """Every user with a store in the folder, or every user opened here on a server."""
        with self._lock:
            known = set(self._stores)
        if not is_postgres_target(self.target):
            folder = Path(self.target)
            if folder.is_dir():
                known.update(path.stem for path in folder.glob("*.db") if path.is_file())
        return sorted(known)

    def close(self) -> None:
        with self._lock:
            stores, self._stores, self._closed = list(self._stores.values()), {}, True
        for mem in stores:
            mem.close()
