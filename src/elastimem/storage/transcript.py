"""The transcript family's interface: sessions, messages and chunks (with their keyword table).

Code above ``storage`` calls these methods on ``tx.transcript``; each backend implements them
(``storage.sqlite.transcript.SqliteTranscriptRows``). Methods take and return plain values
(ints, strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or
cursors.

The rules (who owns a session, when it is an orphan, how a turn is chunked, what a title is)
live in ``memory.episodic``; these are row operations. Writing methods run inside the
caller's write transaction (``database.atomic()``); a backend that lets several processes
write one user at once (PostgreSQL) keeps what a docstring guarantees with its constraints
and row locks, not with the caller's reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol


class SessionState(NamedTuple):
    """What closing a session needs to know of it."""

    started_at: str
    ended_at: str | None
    backdated: bool


class OpenSession(NamedTuple):
    """A session that has not ended, with its owner and heartbeat (all None when unknown)."""

    id: int
    owner_pid: int | None
    owner_host: str | None
    heartbeat_at: str | None


class ChunkRow(NamedTuple):
    """One chunk of a session's transcript."""

    id: int
    first_msg_id: int
    last_msg_id: int
    text: str
    created_at: str
    importance: float


class StoredTurn(NamedTuple):
    """The rows ``insert_turn`` wrote: the turn's number, its messages' ids (in the order
    given) and its chunks' ids (in the order of the texts)."""

    turn: int
    message_ids: tuple[int, ...]
    chunk_ids: tuple[int, ...]


class TranscriptRows(Protocol):
    """Sessions, messages and chunks (with their keyword table)."""

    # -- sessions -----------------------------------------------------------------------------

    def insert_session(
        self,
        *,
        above: int,
        started_at: str,
        host_tag: str | None,
        owner_pid: int,
        owner_host: str,
        heartbeat_at: str,
        backdated: bool,
    ) -> int:
        """Add an open session and return its id: greater than every session id in the store
        and than ``above``, so an id is never given twice even when concurrent writers open
        sessions at once (the allocation is the backend's, under its own lock or sequence)."""
        ...

    def session_exists(self, session_id: int) -> bool:
        """Whether the session is stored (open or ended)."""
        ...

    def session_state(self, session_id: int) -> SessionState | None:
        """The session's start, end (None while open) and backdated flag; None when absent."""
        ...

    def first_user_message(self, session_id: int) -> str | None:
        """The content of the session's first user message (by turn, then id), or None."""
        ...

    def last_message_time(self, session_id: int) -> str | None:
        """The newest ``created_at`` of the session's messages, or None when it has none."""
        ...

    def end_session(self, session_id: int, ended_at: str, title: str | None) -> None:
        """Mark the session ended at ``ended_at`` and clear its owner; ``title`` is set only
        when the session has none yet."""
        ...

    def set_heartbeat(self, session_id: int, at: str) -> None:
        """Record that the session's owner is alive at ``at``."""
        ...

    def clear_owner(self, session_id: int) -> None:
        """Forget the session's owner (pid and host), leaving it open."""
        ...

    def open_sessions(self) -> list[OpenSession]:
        """Every session that has not ended, with its owner and heartbeat (no order)."""
        ...

    def recent_sessions(self, n: int) -> list[dict[str, object]]:
        """The ``n`` newest sessions (by start, then id, descending) as dicts with the keys
        id, started_at, ended_at, title, summary, message_count, host_tag."""
        ...

    def session_page(self, offset: int, n: int) -> list[dict[str, object]]:
        """``recent_sessions`` from the ``offset``-th newest on (a page of the list)."""
        ...

    def session_info(self, session_id: int) -> dict[str, object] | None:
        """The session as ``recent_sessions`` shows it, or None when there is none."""
        ...

    def latest_ended_session(self, exclude: int | None) -> int | None:
        """The id of the newest ended session (by start, then id) that has messages, other
        than ``exclude``; None when there is none."""
        ...

    def rolling_summary(self, session_id: int) -> str | None:
        """The session's rolling digest (None when it has none or the session is absent)."""
        ...

    # -- messages and chunks ------------------------------------------------------------------

    def last_turn(self, session_id: int) -> int:
        """The highest turn number of the session's messages (0 when it has none)."""
        ...

    def insert_message(
        self,
        session_id: int,
        turn: int,
        role: str,
        content: str,
        *,
        created_at: str,
        token_estimate: int,
    ) -> int:
        """Add one message (``role``: user, assistant or system) and return its id."""
        ...

    def count_turn(
        self, session_id: int, messages: int, title: str | None, heartbeat_at: str
    ) -> None:
        """Add ``messages`` to the session's message count, set ``title`` when it has none
        yet, and record the heartbeat."""
        ...

    def insert_turn(
        self,
        session_id: int,
        messages: Sequence[tuple[str, str, int]],
        chunk_texts: Sequence[str],
        *,
        created_at: str,
        title: str | None,
        heartbeat_at: str,
    ) -> StoredTurn:
        """One exchange at once: the next turn number of the session (``last_turn`` + 1),
        one message per (role, content, token estimate) of ``messages`` (at least one) with
        that turn, ``count_turn`` for them, and the chunks of ``chunk_texts`` spanning the
        first to the last of them (``insert_chunks``). A backend behind a network does it in
        one round trip."""
        ...

    def newest_messages(self, session_id: int) -> Iterator[tuple[str, str, int]]:
        """The session's messages as (role, content, token estimate), newest first (by turn,
        then id), read as the caller consumes them; consume inside the transaction."""
        ...

    def insert_chunks(
        self,
        session_id: int,
        first_msg_id: int,
        last_msg_id: int,
        texts: Sequence[str],
        *,
        created_at: str,
    ) -> list[int]:
        """Add one chunk per text (importance 0.5), spanning the messages
        ``first_msg_id..last_msg_id``; their ids in the order of ``texts``."""
        ...

    def session_chunks(self, session_id: int) -> list[ChunkRow]:
        """The session's chunks, oldest first (by id)."""
        ...

    def raise_chunk_importance(self, chunk_ids: Sequence[int], floor: float) -> None:
        """Lift the importance of these chunks to at least ``floor`` (absent ids: no-op)."""
        ...

    # -- for the context plan (assembly) ----------------------------------------------------

    def ended_session_summaries(
        self, exclude: int | None, n: int
    ) -> list[tuple[str, str | None, str | None]]:
        """(started_at, summary, title) of the ``n`` newest ended sessions that have a summary
        or a title, ``exclude`` aside, newest first."""
        ...

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def session_chunk_ids(self, session_id: int) -> list[int]:
        """The ids of one session's chunks (any order)."""
        ...

    def chunk_spans(self, ids: list[int]) -> dict[int, tuple[str, int | None, int | None]]:
        """``id -> (text, first message id, last message id)`` of those chunks that exist."""
        ...

    def chunk_rows(self, ids: list[int]) -> list[tuple[int, int, str, float]]:
        """``(id, session_id, created_at, importance)`` of those chunks that exist."""
        ...

    def chunk_texts(self, ids: list[int]) -> list[tuple[int, str]]:
        """``(id, text)`` of those chunks that exist, by id."""
        ...

    def consecutive_pairs(self, pairs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Of ``(a, b, session_id)`` pairs (``a < b``), the ``(a, b)`` with no chunk of that
        session between them."""
        ...

    def chunks_without_vector(self, limit: int, *, newest: bool = False) -> list[tuple[int, str]]:
        """``(id, text)`` of up to ``limit`` chunks with no vector, by id (the oldest first,
        or with ``newest`` the newest first)."""
        ...

    def any_chunk_without_vector(self) -> bool:
        """Whether some chunk has no vector."""
        ...

    def chunks_needing_vector(
        self, ids: list[int], label: str, dim: int | None
    ) -> list[tuple[int, str]]:
        """``(id, text)`` of those of ``ids`` without a vector of ``label``/``dim``, by id."""
        ...

    def all_chunk_ids(self) -> list[int]:
        """Every chunk id, ascending."""
        ...

    def chunk_ids_needing_vector(self, label: str, dim: int) -> list[int]:
        """Ids of the chunks without a vector of ``label``/``dim``, ascending."""
        ...

    def turn_messages(self, session_id: int, turns: list[int]) -> list[tuple[int, str, str, str]]:
        """``(turn, role, content, created_at)`` of a session's messages of ``turns``, in order."""
        ...

    def turn_chunks(self, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
        """``(id, text)`` of a session's chunks that begin in ``turns``, by id."""
        ...

    def set_rolling_summary(self, session_id: int, text: str | None) -> None:
        """Replace a session's rolling digest (None: none)."""
        ...

    def recent_user_messages(self, session_id: int, limit: int) -> list[str]:
        """The contents of a session's last ``limit`` user messages, newest first."""
        ...

    def set_session_summary(self, session_id: int, summary: str) -> None:
        """Replace a session's summary."""
        ...
