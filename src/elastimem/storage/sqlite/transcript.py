"""SQLite implementation of ``storage.transcript.TranscriptRows``: sessions, messages and chunks
(with their keyword table)."""

from __future__ import annotations

import sqlite3


class SqliteTranscriptRows:
    """``TranscriptRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
