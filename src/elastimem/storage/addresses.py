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


def refuse_database_url(path: object) -> None:
    """Refuse an address given where a store file is expected, before anything is created
    for it: a ``scheme://`` other than PostgreSQL's is no file path."""
    if not isinstance(path, str) or is_postgres_url(path):
        return
    if _URL_RE.match(path):
        raise ConfigError(
            f"{path!r} is an address, not a file path; pass the path of a store file "
            "(or ':memory:')"
        )
