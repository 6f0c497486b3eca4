"""Which backend a store address names (SPEC §4.1).

A file path (or ``":memory:"``) names an SQLite store. ``postgresql://`` and ``postgres://``
name a PostgreSQL store, not supported yet (issue #18 opens them in ``open_database``). Any
other ``scheme://`` is no store address at all.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

# Taken as a path, "postgresql://h/db" made a folder "postgresql:" in the working folder and
# a SQLite file inside it.
POSTGRES_URL_PREFIXES = ("postgresql://", "postgres://")
POSTGRES_NOT_SUPPORTED = (
    "PostgreSQL stores are not supported yet; pass a file path (or a folder of "
    "per-user stores to elastimem serve)"
)
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_postgres_url(address: object) -> bool:
    """True when ``address`` is a PostgreSQL connection URL."""
    return isinstance(address, str) and address.lower().startswith(POSTGRES_URL_PREFIXES)


def refuse_database_url(path: object) -> None:
    """Refuse an address given where a store file (or a folder of them) is expected, before
    anything is created for it: PostgreSQL is not supported yet; any other ``scheme://`` is
    no file path."""
    if not isinstance(path, str):
        return
    if is_postgres_url(path):
        raise ConfigError(POSTGRES_NOT_SUPPORTED)
    if _URL_RE.match(path):
        raise ConfigError(
            f"{path!r} is an address, not a file path; pass the path of a store file "
            "(or ':memory:')"
        )
