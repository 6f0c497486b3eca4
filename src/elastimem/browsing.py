"""Pages of what a store holds, for inspectors (the web inspector, ``elastimem ui``).

``Browsing`` is a part of the ``Elastimem`` facade kept in its own module (the facade's module
has a size bound): paged reads of sessions, transcripts and the quarantine, and the two
decisions a person makes about a quarantined write: discard it, or promote it to a fact.
Every method reads or writes through the storage layer's interfaces, never SQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import arguments as args
from .arguments import int_arg as _int_arg
from .session import bump_writes
from .text import normalize_key

if TYPE_CHECKING:
    from .governor import Governor
    from .runtime.services import Services
    from .storage.database import Database

MAX_PAGE = 500


def _page(offset: object, limit: object) -> tuple[int, int]:
    offset_n, limit_n = _int_arg(offset, "offset"), _int_arg(limit, "limit")
    return max(0, offset_n), max(0, min(limit_n, MAX_PAGE))


class Browsing:
    """Paged reads and quarantine decisions; mixed into ``Elastimem``."""

    if TYPE_CHECKING:
        _db: Database
        _services: Services
        _governor: Governor

        def _check_open(self) -> None: ...

        def remember(
            self, key: str, value: str | int | float, source: str = "explicit", *, at: object = None
        ) -> tuple[bool, str]: ...

    def summary(self) -> dict[str, Any]:
        """What an overview shows, cheap at any size: the row counts of ``stats()`` (facts,
        fact_versions, sessions, messages, chunks, lessons, quarantine, graph_nodes,
        graph_edges, jobs_pending, jobs_failed …), db_bytes, file_mode, tier, embedder (its
        state: none, not_loaded, loading, ready, failed) and embedding_model. ``stats()`` also
        counts the vectors of every chunk, which takes seconds on a large store."""
        self._check_open()
        embedding = self._services.embedding
        with self._db.read() as conn:
            result: dict[str, Any] = dict(conn.stats.counts())
            result["db_bytes"] = conn.stats.file_bytes()
            result["file_mode"] = conn.stats.file_mode()
        result["tier"] = self._governor.profile.tier.name.lower()
        result["embedder"] = embedding.state()
        result["embedding_model"] = embedding.label
        return result

    def fact_origins(self, key: str) -> dict[int, int]:
        """For the versions of ``key`` learned in a session still stored: fact id -> that
        session's id (a version written outside any session, or whose session was erased,
        has none)."""
        self._check_open()
        with self._db.read() as conn:
            return conn.facts.origin_sessions(normalize_key(args.key_arg(key)))

    def session_page(self, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
        """Sessions newest first, ``limit`` (at most 500) from the ``offset``-th on, with the
        keys of ``sessions()``."""
        self._check_open()
        offset, limit = _page(offset, limit)
        with self._db.read() as conn:
            return conn.transcript.session_page(offset, limit)

    def session_info(self, session_id: int) -> dict[str, Any] | None:
        """One session with the keys of ``sessions()``, or None when there is none."""
        self._check_open()
        session_id = _int_arg(session_id, "session_id")
        with self._db.read() as conn:
            return conn.transcript.session_info(session_id)

    def session_turns(
        self, session_id: int, first_turn: int = 1, turns: int = 25
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages of ``turns`` (at most 500) exchanges of a session from ``first_turn``
        on, as dicts (turn, role, content, created_at), and the session's last turn number."""
        self._check_open()
        session_id = _int_arg(session_id, "session_id")
        first, count = _page(first_turn, turns)
        first = max(1, first)
        with self._db.read() as conn:
            last = conn.transcript.last_turn(session_id)
            wanted = list(range(first, min(first + count, last + 1)))
            rows = conn.transcript.turn_messages(session_id, wanted)
        keys = ("turn", "role", "content", "created_at")
        return [dict(zip(keys, row)) for row in rows], last

    def quarantine_page(self, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
        """Quarantine entries newest first, with the keys of ``quarantine_entries()`` and
        ``id`` (what ``discard_quarantined`` and ``promote_quarantined`` take)."""
        self._check_open()
        offset, limit = _page(offset, limit)
        with self._db.read() as conn:
            return conn.facts.quarantine_page(offset, limit)

    def quarantine_entry(self, entry_id: int) -> dict[str, Any] | None:
        """One quarantine entry as ``quarantine_page`` shows it, or None."""
        self._check_open()
        entry_id = _int_arg(entry_id, "entry_id")
        with self._db.read() as conn:
            return conn.facts.quarantine_entry(entry_id)

    def discard_quarantined(self, entry_id: int) -> bool:
        """Remove a quarantine entry; False when there is none with that id."""
        self._check_open()
        entry_id = _int_arg(entry_id, "entry_id")
        with self._db.atomic() as conn:
            removed = conn.admin.delete_quarantine([entry_id]) > 0
            if removed:
                bump_writes(conn)
        return removed

    def promote_quarantined(self, entry_id: int) -> tuple[bool, str]:
        """Store a quarantined write as an explicit fact and remove the entry.

        The person's decision overrides what held an automatic write back (a short value,
        a profile key); the guards every explicit write passes still apply, so a refused
        value stays in the quarantine and the reason is returned: ``(stored, reason)``."""
        self._check_open()
        entry_id = _int_arg(entry_id, "entry_id")
        entry = self.quarantine_entry(entry_id)
        if entry is None:
            return False, "no such quarantine entry"
        if not entry.get("key") or entry.get("value") is None:
            return False, "the entry names no fact (a refused lesson); discard it instead"
        changed, reason = self.remember(
            args.key_arg(str(entry["key"])), str(entry["value"]), "explicit"
        )
        if changed or reason == "already stored":
            self.discard_quarantined(entry_id)
            return True, reason
        return False, reason
