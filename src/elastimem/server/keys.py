"""Bearer tokens mapped to user ids, read from ``KEYS.json`` (``{"<token>": "<user_id>"}``).

A lookup compares the presented token with every key (SHA-256 digests through
``hmac.compare_digest``, so neither the content nor the length of a key leaks through
timing, and no early exit tells how many keys were tried). Tokens are never logged or
put in a message; errors name the file and the position of a bad entry only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
from pathlib import Path

from ..errors import ConfigError
from ..users import check_user_id

logger = logging.getLogger("elastimem")

MAX_KEYS_FILE_BYTES = 16 * 1024 * 1024
MIN_TOKEN_CHARS = 16


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class KeyRing:
    """The current keys; ``reload()`` swaps them in whole or keeps the old ones."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self._keys: tuple[tuple[bytes, str], ...] = load_keys(self.path)

    def __len__(self) -> int:
        return len(self._keys)

    def user_for(self, token: str) -> str | None:
        """The user id of ``token``, else None; time independent of which key matched."""
        given = _digest(token)
        found: str | None = None
        for digest, user_id in self._keys:  # every key, always: no early exit
            if hmac.compare_digest(given, digest):
                found = user_id
        return found

    def reload(self) -> bool:
        """Read the file again; on any problem keep the current keys and log why."""
        try:
            keys = load_keys(self.path)
        except ConfigError as exc:
            logger.error("keeping the previous keys: %s", exc)
            return False
        self._keys = keys
        logger.info("reloaded %d key(s) from %s", len(keys), self.path)
        return True


def load_keys(path: Path) -> tuple[tuple[bytes, str], ...]:
    """The (token digest, user id) pairs of a keys file; ``ConfigError`` naming the problem."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            raw = handle.read(MAX_KEYS_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the keys file {path} ({exc.strerror})") from exc
    if len(raw) > MAX_KEYS_FILE_BYTES:
        raise ConfigError(f"the keys file {path} is larger than 16 MiB; is it the right file?")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(
            f"the keys file {path} is not valid JSON; write an object "
            '{"<token>": "<user_id>", ...}'
        ) from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f'the keys file {path} must be a non-empty JSON object {{"<token>": "<user_id>", ...}}'
        )
    keys: list[tuple[bytes, str]] = []
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
        keys.append((_digest(token), user_id))
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("the keys file %s can be read by other users; chmod 600 it", path)
    return tuple(keys)
