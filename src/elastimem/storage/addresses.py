"""Which backend a store address names (SPEC §4.1).

A file path (or ``":memory:"``) names an SQLite store. ``postgresql://`` and ``postgres://``
name a PostgreSQL server, where every user's store lives: opening one needs a user id. Any
other ``scheme://`` is no store address at all.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

# Taken as a path, "postgresql://h/db" made a folder "postgresql:" in the working folder and
# a SQLite file inside it.
POSTGRES_URL_PREFIXES = ("postgresql://", "postgres://")
POSTGRES_NEEDS_USER = (
    "a PostgreSQL store holds many users' memory: pass user_id= (--user on the command "
    "line) to say whose memory this instance serves"
)
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_postgres_url(address: object) -> bool:
    """True when ``address`` is a PostgreSQL connection URL."""
    return isinstance(address, str) and address.lower().startswith(POSTGRES_URL_PREFIXES)


def refuse_database_url(path: object, *, file_only: bool = False) -> None:
    """Refuse an address given where a store file is expected, before anything is created
    for it: a ``scheme://`` other than PostgreSQL's is no file path; with ``file_only``
    (where only a file or folder can follow, e.g. SQLite's own open) PostgreSQL's is
    refused too, so the address never becomes a folder ``postgresql:`` on disk."""
    if not isinstance(path, str):
        return
    if is_postgres_url(path):
        if file_only:
            raise ConfigError(
                f"{redact_address(path)} is a PostgreSQL address, not a file path; open it "
                "with elastimem.open(address, user_id=...)"
            )
        return
    if _URL_RE.match(path):
        raise ConfigError(
            f"{path!r} is an address, not a file path; pass the path of a store file "
            "(or ':memory:')"
        )


def redact_address(address: str) -> str:
    """``address`` without the password it may carry (``scheme://user:secret@host``)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:/@]*):[^/]*@", r"\1:***@", address)
