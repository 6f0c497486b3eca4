"""Encryption at rest: SQLCipher connections for a store opened with a key (issue 31).

A store opened with a key is one SQLCipher 4 file (the ``sqlcipher3`` wheel, extra
``encrypt``): every page of the main file and of its ``-wal`` is encrypted and authenticated
(AES-256, HMAC-SHA512, the key stretched with PBKDF2); temporary tables and sort files stay in
memory (``temp_store = MEMORY``), so no plain copy reaches the disk. The key is applied first,
before any other statement touches the file.

``CipherKey`` holds the key material and never shows it (``repr``/``str`` are redacted, it
is never logged or put in a message). A passphrase is any non-empty str or UTF-8 bytes; a raw
256-bit key is SQLCipher's own form ``"x'<64 hex digits>'"``, used without key derivation.

Also here: where a store's key comes from (``resolve_key``: ``key=``, ``ELASTIMEM_KEY``,
``ELASTIMEM_KEY_FILE``). SQLCipher connections are made by ``connection.cipher_connect`` (and
``connection.connect_destination``, an empty file keyed as a store, e.g. for an online
backup); converting a store between keys is ``rekey``'s.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ...errors import ConfigError

ENCRYPT_EXTRA_HINT = "install the extra: pip install 'elastimem[encrypt]'"
# The first 16 bytes of every plain SQLite 3 database file (https://sqlite.org/fileformat.html);
# an SQLCipher file starts with its random salt instead.
SQLITE_HEADER = b"SQLite format 3\x00"
_RAW_KEY = re.compile(r"x'[0-9a-fA-F]{64}'")
# SQLCipher's smallest page size: an encrypted file is whole pages of random-looking bytes.
_MIN_PAGE = 512


class CipherKey:
    """An encryption key, kept out of every ``repr``, ``str``, log line and message."""

    __slots__ = ("_material",)

    def __init__(self, material: bytes) -> None:
        self._material = material

    @property
    def material(self) -> bytes:
        """The key as SQLCipher's ``sqlite3_key`` takes it (passphrase or ``x'…'`` raw key)."""
        return self._material

    @property
    def raw(self) -> bool:
        return _RAW_KEY.fullmatch(self._material.decode("ascii", "replace")) is not None

    def __repr__(self) -> str:
        return "CipherKey(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CipherKey) and other._material == self._material

    def __hash__(self) -> int:
        return hash(self._material)

    def __reduce__(self) -> Any:  # never pickled into a job, a queue or a log record
        raise TypeError("a CipherKey cannot be pickled")


def cipher_key(value: object, *, source: str = "key") -> CipherKey | None:
    """The ``CipherKey`` for ``value`` (str or UTF-8 bytes passphrase, or ``"x'<64 hex>'"``),
    None for None. ``source`` names where it came from in a ``ConfigError`` (never the key)."""
    if value is None or isinstance(value, CipherKey):
        return value
    if isinstance(value, str):
        material = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, (bytes, bytearray)):
        material = bytes(value)
        try:
            material.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                f"{source} is not UTF-8 text; pass a str or UTF-8 bytes passphrase, or a raw "
                "256-bit key as \"x'<64 hex digits>'\""
            ) from None
    else:
        raise ConfigError(f"{source} must be a str or bytes passphrase, not {type(value).__name__}")
    if not material:
        # SQLCipher reads an empty key as "no encryption": refuse it instead.
        raise ConfigError(f"{source} is empty; pass a non-empty passphrase")
    if b"\x00" in material:
        raise ConfigError(f"{source} holds a NUL character; pass a passphrase without one")
    if material[:2].lower() == b"x'" and not _RAW_KEY.fullmatch(material.decode()):
        raise ConfigError(
            f"{source} starts like a raw key but is not \"x'<64 hex digits>'\"; fix it "
            "(or use a passphrase that does not start with x')"
        )
    return CipherKey(material)


def driver() -> Any:
    """The ``sqlcipher3`` DB-API module; ``ConfigError`` saying what to install without it.
    Connections are made through ``connection.cipher_connect``, which also makes its error
    classes (not subclasses of ``sqlite3.Error``) part of ``connection.ERRORS``."""
    try:
        from sqlcipher3 import dbapi2
    except ImportError:
        raise ConfigError(
            f"opening an encrypted store needs SQLCipher: {ENCRYPT_EXTRA_HINT}"
        ) from None
    return dbapi2


def apply_key(conn: Any, key: CipherKey) -> None:
    """Key a new SQLCipher connection: before any statement reads or writes a page."""
    # SQLCipher logs a failed page check (a wrong key) to stderr by default; the caller
    # raises EncryptionKeyError instead.
    conn.execute("PRAGMA cipher_log_level = NONE")
    conn.set_key(key.material)
    # Temporary tables, indexes and sorts in memory: a temp file would be another file
    # holding store content (SQLCipher encrypts those too, but nothing is better).
    conn.execute("PRAGMA temp_store = MEMORY")


def looks_encrypted(path: str) -> bool:
    """True for a file that may be an SQLCipher store: no SQLite header, whole pages.

    Only a guess (it cannot be told from random bytes without the key); it picks the
    message, never what happens to the file: nothing is changed either way.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError:
        return False
    return header != SQLITE_HEADER and size >= _MIN_PAGE and size % _MIN_PAGE == 0


KEY_ENV_VAR = "ELASTIMEM_KEY"
KEY_FILE_ENV_VAR = "ELASTIMEM_KEY_FILE"


def read_key_file(path: str, *, source: str = "the key file") -> CipherKey:
    """The key held in the file at ``path`` (one trailing newline ignored)."""
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {source} {path} ({exc.strerror}); check the path and its permissions"
        ) from None
    if data.endswith(b"\n"):
        data = data[:-1]
    if data.endswith(b"\r"):
        data = data[:-1]
    key = cipher_key(data, source=f"{source} {path}")
    assert key is not None  # bytes, never None
    return key


def resolve_key(value: object) -> CipherKey | None:
    """The key a store opens with: ``value`` when given (``key=``), else ``ELASTIMEM_KEY``,
    else the file named by ``ELASTIMEM_KEY_FILE``, else None (a plain store). Both variables
    set is a ``ConfigError``: which one wins would be a guess."""
    if value is not None:
        return cipher_key(value)
    text = os.environ.get(KEY_ENV_VAR)
    path = os.environ.get(KEY_FILE_ENV_VAR)
    if text and path:
        raise ConfigError(
            f"both {KEY_ENV_VAR} and {KEY_FILE_ENV_VAR} are set; set only one of them"
        )
    if text:
        return cipher_key(text, source=KEY_ENV_VAR)
    if path:
        return read_key_file(path, source=f"{KEY_FILE_ENV_VAR}")
    return None
