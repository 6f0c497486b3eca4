"""The database interface every layer above ``storage`` works with (SPEC §4.1).

``storage.open_database(target)`` returns one. It is a store's transactions and little more:
``atomic()`` writes, ``read()`` reads one consistent snapshot, both yield a ``Tx`` whose
families hold every statement. A backend implements it (``storage.sqlite.database.Database``
today, PostgreSQL with issue #18); nothing here names a driver, a file format or a pragma.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .tx import Tx


class Database(Protocol):
    """One opened store: its transactions, its write lock and what the open found."""

    @property
    def path(self) -> str:
        """Where the store lives, as resolved at open (a file path, or ``":memory:"``)."""
        ...

    @property
    def key(self) -> str:
        """What names this store within the process (the registry of open instances, the
        worker's running jobs): the file path, or a server address and the user's id."""
        ...

    @property
    def cipher(self) -> Any:
        """The key an encrypted store file was opened with (``sqlite.cipher.CipherKey``, which
        never shows its material), or None for a plain file and any server store."""
        ...

    @property
    def is_memory(self) -> bool:
        """True for a store that lives only as long as this object (nothing on disk)."""
        ...

    @property
    def read_only(self) -> bool:
        """True when this process may read the store but not change it: ``atomic()`` raises
        ``StoreError`` and nothing was migrated or repaired at open."""
        ...

    @property
    def fts_enabled(self) -> bool:
        """True when the store's own full-text index answers keyword searches; otherwise the
        keyword legs scan (``tx.postings`` and the families' LIKE searches)."""
        ...

    @property
    def set_aside(self) -> str | None:
        """Where this open moved a damaged store aside before starting a fresh one, else None."""
        ...

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran: every later ``atomic()`` / ``read()`` raises
        ``StoreClosedError``."""
        ...

    @property
    def lock(self) -> threading.RLock:
        """The write lock ``atomic()`` takes, shared by every open of this store in this
        process; hold it to keep writers out across several transactions."""
        ...

    def atomic(self) -> AbstractContextManager[Tx]:
        """A write transaction: committed when the block ends, rolled back whole when it
        raises; nested, a savepoint that rolls back only the inner block. Writers serialize."""
        ...

    def read(self) -> AbstractContextManager[Tx]:
        """A read-only snapshot: every statement in the block sees the same committed data
        (inside ``atomic()`` on this thread, that transaction's own view)."""
        ...

    def in_write(self) -> bool:
        """True when the calling thread is inside this database's ``atomic()``."""
        ...

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the store where that is cheap (never waits for
        readers or writers); a no-op where the backend has nothing to fold."""
        ...

    def close(self) -> None:
        """Release the store once the write in progress ends; reads still running on other
        threads are waited for a while. Idempotent."""
        ...
