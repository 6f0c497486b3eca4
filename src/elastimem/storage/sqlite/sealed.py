"""Encrypted exports: an export's JSON Lines kept in an SQLCipher file (issue 31).

The export of an encrypted store is encrypted with the store's key unless the caller asks
for a plain one. Rather than a cipher format of our own, the lines go into a small SQLCipher
database (``export_lines``: line number, the line's bytes), so the export has the store's own
protection (AES-256, HMAC-SHA512 per page, PBKDF2 key derivation) and its key handling. A
plain export starts with ``{``; an encrypted one with SQLCipher's random salt, which is how
``import`` tells them apart (``looks_sealed``).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import Any

from ...errors import ImportFormatError
from . import connection
from .cipher import CipherKey
from .connection import SQLITE_NOTADB, cipher_connect, error_code

# Lines inserted per statement batch: the export streams, memory stays flat.
BATCH_LINES = 1000


def looks_sealed(head: bytes) -> bool:
    """True when an export file whose first 16 bytes are ``head`` is an encrypted one.

    An encrypted export starts with SQLCipher's random 16-byte salt, which is all but never
    printable UTF-8 text; anything that reads as text (a damaged export, another file) is
    left to the JSON Lines reader, which names the line that is wrong.
    """
    if len(head) < 16 or head.startswith(b"{"):
        return False
    try:  # incremental: a character cut at byte 16 is still text
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return any(ch < " " and ch not in "\t\r\n" for ch in text)


class SealedWriter:
    """Writes export lines into a new, empty SQLCipher file at ``path`` keyed with ``key``;
    the same ``write``/``flush`` as the plain sink, then ``close``."""

    def __init__(self, path: str, key: CipherKey) -> None:
        self._conn: Any = cipher_connect(path, key, isolation_level=None)
        self._conn.execute("CREATE TABLE export_lines (n INTEGER PRIMARY KEY, line BLOB NOT NULL)")
        self._conn.execute("BEGIN")
        self._batch: list[tuple[int, bytes]] = []
        self._count = 0

    def write(self, line: str) -> None:
        self._count += 1
        self._batch.append((self._count, line.encode("utf-8")))
        if len(self._batch) >= BATCH_LINES:
            self._insert()

    def flush(self) -> None:
        self._insert()

    def _insert(self) -> None:
        if self._batch:
            self._conn.executemany("INSERT INTO export_lines (n, line) VALUES (?, ?)", self._batch)
            self._batch = []

    def close(self) -> None:
        """Commit every line and close the file."""
        try:
            self._insert()
            self._conn.execute("COMMIT")
        finally:
            self._conn.close()

    def abort(self) -> None:
        connection.close_quietly(self._conn)


class SealedReader:
    """The lines of an encrypted export at ``path``, read with ``key``."""

    def __init__(self, path: str, key: CipherKey) -> None:
        self._conn: Any = cipher_connect(path, key, isolation_level=None)
        try:
            self.count = int(self._conn.execute("SELECT count(*) FROM export_lines").fetchone()[0])
        except connection.ERRORS as exc:
            self._conn.close()
            if error_code(exc) == SQLITE_NOTADB:
                raise ImportFormatError(
                    "the export is encrypted with another key (or is not an elastimem export); "
                    "open the target store with the key of the store it was exported from"
                ) from None
            raise ImportFormatError(f"the encrypted export cannot be read ({exc})") from None

    def lines(self) -> Iterator[bytes]:
        """Each line, with its newline, in order."""
        cursor = self._conn.execute("SELECT line FROM export_lines ORDER BY n")
        for (line,) in cursor:
            yield bytes(line)

    def close(self) -> None:
        connection.close_quietly(self._conn)
