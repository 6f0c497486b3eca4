"""The keys of ``serve``, read from ``KEYS.json``: who a bearer token is, and what it may do.

Two file formats:

- **hashed** (written by ``elastimem keys add``)::

    {"elastimem_keys": 1, "keys": [{"id": "k1a2b3c4d5e6", "label": "laptop", "user": "ana",
      "scope": "write", "created_at": "...", "hash": "scrypt$16384$8$1$<salt>$<digest>"}]}

  A token is ``em_<id>_<secret>``; only the scrypt hash of the whole token is stored, so
  the file gives nothing a client could present. The id (not secret, like an access-key
  id) picks the one entry to verify, so an unknown token costs no slow hash at all.
- **plain** (``{"<token>": "<user_id>"}``, the original format): still served, every key
  with the ``admin`` scope, and one warning at start that names ``keys add``.

Verifying a hashed token takes one scrypt (~50 ms, on purpose). A verified token is then
kept in memory under an HMAC of it with a key made at start (never the token itself), so
the next request pays one HMAC. Digests are compared with ``hmac.compare_digest``. Tokens
are never logged or put in a message; errors name the file and an entry's position only.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clock import now_ts
from ..errors import ConfigError
from ..users import check_user_id

logger = logging.getLogger("elastimem")

MAX_KEYS_FILE_BYTES = 16 * 1024 * 1024
MIN_TOKEN_CHARS = 16
FORMAT_MARK = "elastimem_keys"
SCOPES = ("read", "write", "admin")  # each allows what the ones before it allow
TOKEN_PREFIX = "em_"
# scrypt at n=2**14, r=8: 16 MiB and ~45 ms per hash on the CI machine; a stolen file
# costs an attacker that much per guess of a 256-bit secret, a request pays it once.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MAX_CACHED = 10_000  # verified tokens remembered; the cache starts over when full


@dataclass(frozen=True)
class Principal:
    """Who a token is: the user whose store it reaches, its scope, and its label."""

    user: str
    scope: str
    label: str

    def allows(self, needed: str) -> bool:
        """Whether this key's scope covers ``needed`` (read < write < admin)."""
        return SCOPES.index(self.scope) >= SCOPES.index(needed)


@dataclass(frozen=True)
class StoredKey:
    """One entry of a hashed keys file (what ``keys list`` shows, plus the hash)."""

    key_id: str
    label: str
    user: str
    scope: str
    created_at: str
    hash: str

    def as_json(self) -> dict[str, str]:
        return {"id": self.key_id, "label": self.label, "user": self.user,
                "scope": self.scope, "created_at": self.created_at, "hash": self.hash}  # fmt: skip


@dataclass(frozen=True)
class _Loaded:
    hashed: dict[str, StoredKey]  # by key id
    plain: tuple[tuple[bytes, Principal], ...]  # (SHA-256 of the token, who)

    def __len__(self) -> int:
        return len(self.hashed) + len(self.plain)


def _sha256(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_token(token: str, salt: bytes | None = None) -> str:
    """The stored form of ``token``: ``scrypt$n$r$p$salt$digest``."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(token.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R,
                            p=SCRYPT_P, maxmem=64 * 1024 * 1024, dklen=32)  # fmt: skip
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def _verify(token: str, stored: str) -> bool:
    try:
        name, n, r, p, salt, digest = stored.split("$")
        expected = _unb64(digest)
        given = hashlib.scrypt(token.encode("utf-8", "surrogatepass"), salt=_unb64(salt),
                               n=int(n), r=int(r), p=int(p), maxmem=64 * 1024 * 1024,
                               dklen=len(expected))  # fmt: skip
    except (ValueError, UnicodeEncodeError):
        return False
    return name == "scrypt" and hmac.compare_digest(given, expected)


def _key_id_of(token: str) -> str | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    key_id, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    return key_id if sep and secret else None


class KeyRing:
    """The current keys; ``reload()`` swaps them in whole or keeps the old ones.

    ``lookup(token)`` is the one question callers ask (the REST and MCP endpoints, a web
    sign-in): the token's ``Principal``, or None. It may take one slow hash; ``cached``
    answers only from memory, for callers on an event loop that would rather not wait.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self._loaded = load_keys(self.path)
        self._cache_key = secrets.token_bytes(32)
        self._verified: dict[bytes, Principal] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._loaded)

    @property
    def plain(self) -> bool:
        """Whether the file holds tokens in the clear (the original format)."""
        return bool(self._loaded.plain)

    def _memo(self, token: str) -> bytes:
        return hmac.new(self._cache_key, token.encode("utf-8", "surrogatepass"), "sha256").digest()

    def cached(self, token: str) -> Principal | None:
        """The token's principal if it needs no slow hash (a plain key, or verified before)."""
        loaded = self._loaded
        if loaded.plain:
            given = _sha256(token)
            found: Principal | None = None
            for digest, principal in loaded.plain:  # every key, always: no early exit
                if hmac.compare_digest(given, digest):
                    found = principal
            if found is not None:
                return found
        return self._verified.get(self._memo(token))

    def needs_hash(self, token: str) -> bool:
        """Whether ``lookup`` would verify ``token`` with the slow hash (a known key id)."""
        key_id = _key_id_of(token)
        return key_id is not None and key_id in self._loaded.hashed

    def lookup(self, token: str) -> Principal | None:
        """Who ``token`` is, or None. At most one slow hash, and none for a known token."""
        found = self.cached(token)
        if found is not None:
            return found
        loaded = self._loaded
        key_id = _key_id_of(token)
        entry = loaded.hashed.get(key_id) if key_id is not None else None
        if entry is None or not _verify(token, entry.hash):
            return None
        principal = Principal(entry.user, entry.scope, entry.label)
        with self._lock:
            if self._loaded is loaded:  # not revoked by a reload meanwhile
                if len(self._verified) >= MAX_CACHED:
                    self._verified.clear()
                self._verified[self._memo(token)] = principal
        return principal

    def user_for(self, token: str) -> str | None:
        """The user id of ``token``, else None (``lookup``'s user)."""
        found = self.lookup(token)
        return found.user if found is not None else None

    def reload(self) -> bool:
        """Read the file again; on any problem keep the current keys and log why."""
        try:
            loaded = load_keys(self.path)
        except ConfigError as exc:
            logger.error("keeping the previous keys: %s", exc)
            return False
        with self._lock:
            self._loaded = loaded
            self._verified = {}  # a revoked key must not live on in the cache
        logger.info("reloaded %d key(s) from %s", len(loaded), self.path)
        return True


def _read_json(path: Path) -> tuple[Any, os.stat_result]:
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            raw = handle.read(MAX_KEYS_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the keys file {path} ({exc.strerror})") from exc
    if len(raw) > MAX_KEYS_FILE_BYTES:
        raise ConfigError(f"the keys file {path} is larger than 16 MiB; is it the right file?")
    try:
        return json.loads(raw.decode("utf-8")), info
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(
            f"the keys file {path} is not valid JSON; create it with elastimem keys add"
        ) from None


def load_keys(path: Path) -> _Loaded:
    """The keys of a file, hashed or plain; ``ConfigError`` naming the problem."""
    data, info = _read_json(path)
    if isinstance(data, dict) and FORMAT_MARK in data:
        entries = _hashed_entries(data, path)
        if not entries:  # every key revoked: a valid file, and every request is a 401
            logger.warning("the keys file %s has no keys; add one with elastimem keys add", path)
        loaded = _Loaded({e.key_id: e for e in entries}, ())
    else:
        loaded = _Loaded({}, _plain_entries(data, path))
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("the keys file %s can be read by other users; chmod 600 it", path)
    return loaded


def _plain_entries(data: Any, path: Path) -> tuple[tuple[bytes, Principal], ...]:
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f'the keys file {path} must be a non-empty JSON object {{"<token>": "<user_id>", ...}}'
            " or a file written by elastimem keys add"
        )
    keys: list[tuple[bytes, Principal]] = []
    for position, (token, user_id) in enumerate(data.items(), start=1):
        if len(token) < MIN_TOKEN_CHARS or token != token.strip() or not token.isprintable():
            raise ConfigError(
                f"key #{position} in {path} is too short or has spaces or control characters; "
                f"use random tokens of at least {MIN_TOKEN_CHARS} printable characters"
            )
        try:
            check_user_id(user_id)
        except ConfigError as exc:
            raise ConfigError(f"key #{position} in {path}: {exc}") from None
        keys.append((_sha256(token), Principal(user_id, "admin", f"key #{position}")))
    return tuple(keys)


def _hashed_entries(data: dict[str, Any], path: Path) -> list[StoredKey]:
    if data.get(FORMAT_MARK) != 1 or not isinstance(data.get("keys"), list):
        raise ConfigError(
            f"the keys file {path} is of an unknown version; it needs a newer elastimem"
        )
    entries: list[StoredKey] = []
    labels: set[str] = set()
    for position, item in enumerate(data["keys"], start=1):
        fields = ("id", "label", "user", "scope", "created_at", "hash")
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) for f in fields):
            raise ConfigError(f"key #{position} in {path} lacks one of: {', '.join(fields)}")
        if item["scope"] not in SCOPES:
            raise ConfigError(f"key #{position} in {path} has an unknown scope")
        if item["label"] in labels:
            raise ConfigError(f"key #{position} in {path} repeats the label {item['label']!r}")
        try:
            check_user_id(item["user"])
        except ConfigError as exc:
            raise ConfigError(f"key #{position} in {path}: {exc}") from None
        labels.add(item["label"])
        entries.append(StoredKey(item["id"], item["label"], item["user"], item["scope"],
                                 item["created_at"], item["hash"]))  # fmt: skip
    return entries


# -- writing a hashed file (``elastimem keys``) --------------------------------------------------


def read_entries(path: Path) -> list[StoredKey]:
    """The entries of a hashed keys file; ``ConfigError`` for a plain one."""
    data, _ = _read_json(path)
    if not (isinstance(data, dict) and FORMAT_MARK in data):
        raise ConfigError(
            f"the keys file {path} holds plain tokens; elastimem keys writes a new "
            "file of hashed keys: pass another --keys and move each client to a new key"
        )
    return _hashed_entries(data, path)


@contextmanager
def editing(path: Path) -> Iterator[list[StoredKey]]:
    """The entries of a hashed keys file (none if it does not exist), written back
    atomically (0600, fsynced, renamed over) when the block ends without an error; an
    exclusive lock beside the file keeps two edits from losing one another's change."""
    path = Path(os.path.expanduser(os.fspath(path)))
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        entries: list[StoredKey] = []
        if path.exists():
            entries = read_entries(path)
        yield entries
        _write_atomically(path, {FORMAT_MARK: 1, "keys": [e.as_json() for e in entries]})
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def new_key(
    user: str, scope: str, label: str | None, taken: list[StoredKey]
) -> tuple[str, StoredKey]:
    """A fresh random token and its entry (the token exists only in the return value)."""
    check_user_id(user)
    if scope not in SCOPES:
        raise ConfigError(f"the scope must be one of {', '.join(SCOPES)}")
    ids = {e.key_id for e in taken}
    key_id = secrets.token_hex(6)
    while key_id in ids:
        key_id = secrets.token_hex(6)
    label = label if label is not None else f"{user}-{key_id}"
    if not label.strip() or not label.isprintable() or len(label) > 200:
        raise ConfigError("the label must be printable text of at most 200 characters")
    if any(e.label == label for e in taken):
        raise ConfigError(f"a key is already labelled {label!r}; pick another --label")
    token = f"{TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    entry = StoredKey(key_id, label, user, scope, now_ts(), hash_token(token))
    return token, entry
