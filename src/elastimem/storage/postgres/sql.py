"""Small pieces of SQL the PostgreSQL families share."""

from __future__ import annotations


def limit(n: int) -> int | None:
    """A LIMIT as SQLite reads it: a negative one is no limit (NULL is ALL on PostgreSQL)."""
    return None if n < 0 else n
