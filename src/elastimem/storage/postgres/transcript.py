"""PostgreSQL implementation of ``storage.transcript.TranscriptRows``: one user's sessions,
messages and chunks, with the chunks' keyword postings (``chunk_terms``, written with the
chunks; ``schema.KEYWORD_DOC``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..transcript import ChunkRow, OpenSession, SessionState, StoredTurn, TranscriptRows
from .sql import limit as sql_limit
from .terms import posting_rows, terms_of

_SESSION_LIST_KEYS = (
    "id",
    "started_at",
    "ended_at",
    "title",
    "summary",
    "message_count",
    "host_tag",
)
# newest_messages reads this many rows first, then pages of twice as many up to the cap.
_FIRST_PAGE = 32
_MAX_PAGE = 1024


class PostgresTranscriptRows:
    """``TranscriptRows`` for one user on one psycopg connection (inside the caller's
    transaction). Every statement names the user as well as being confined to it by
    row-level security."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

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
        # Writers of one user are serialised (the user's advisory lock, taken by every write
        # transaction), so nobody adds a session of this user between the max() and the
        # insert; ids are per user, so other users' sessions do not matter.
        row = self._conn.execute(
            "INSERT INTO sessions (user_id, id, started_at, host_tag, owner_pid, owner_host, "
            "heartbeat_at, backdated) SELECT %s, greatest(coalesce(max(id), 0), %s) + 1, "
            "%s, %s, %s, %s, %s, %s FROM sessions WHERE user_id = %s RETURNING id",
            (
                self._user,
                int(above),
                started_at,
                host_tag,
                owner_pid,
                owner_host,
                heartbeat_at,
                1 if backdated else 0,
                self._user,
            ),
        ).fetchone()
        return int(row[0])

    def session_exists(self, session_id: int) -> bool:
        found = self._conn.execute(
            "SELECT 1 FROM sessions WHERE user_id = %s AND id = %s", (self._user, session_id)
        )
        return found.fetchone() is not None

    def session_state(self, session_id: int) -> SessionState | None:
        row = self._conn.execute(
            "SELECT started_at, ended_at, backdated FROM sessions WHERE user_id = %s AND id = %s",
            (self._user, session_id),
        ).fetchone()
        if row is None:
            return None
        return SessionState(str(row[0]), row[1], bool(row[2]))

    def first_user_message(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT content FROM messages WHERE user_id = %s AND session_id = %s "
            "AND role = 'user' ORDER BY turn, id LIMIT 1",
            (self._user, session_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def last_message_time(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT max(created_at) FROM messages WHERE user_id = %s AND session_id = %s",
            (self._user, session_id),
        ).fetchone()
        return str(row[0]) if row and row[0] else None

    def end_session(self, session_id: int, ended_at: str, title: str | None) -> None:
        self._conn.execute(
            "UPDATE sessions SET ended_at = %s, title = COALESCE(title, %s), owner_pid = NULL, "
            "owner_host = NULL WHERE user_id = %s AND id = %s",
            (ended_at, title, self._user, session_id),
        )

    def set_heartbeat(self, session_id: int, at: str) -> None:
        self._conn.execute(
            "UPDATE sessions SET heartbeat_at = %s WHERE user_id = %s AND id = %s",
            (at, self._user, session_id),
        )

    def clear_owner(self, session_id: int) -> None:
        self._conn.execute(
            "UPDATE sessions SET owner_pid = NULL, owner_host = NULL "
            "WHERE user_id = %s AND id = %s",
            (self._user, session_id),
        )

    def open_sessions(self) -> list[OpenSession]:
        rows = self._conn.execute(
            "SELECT id, owner_pid, owner_host, heartbeat_at FROM sessions "
            "WHERE user_id = %s AND ended_at IS NULL",
            (self._user,),
        ).fetchall()
        return [OpenSession(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def recent_sessions(self, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions WHERE user_id = %s ORDER BY started_at DESC, id DESC LIMIT %s",
            (self._user, max(0, n)),
        ).fetchall()
        return [dict(zip(_SESSION_LIST_KEYS, row)) for row in rows]

    def session_page(self, offset: int, n: int) -> list[dict[str, object]]:
        rows = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions WHERE user_id = %s ORDER BY started_at DESC, id DESC "
            "LIMIT %s OFFSET %s",
            (self._user, max(0, n), max(0, offset)),
        ).fetchall()
        return [dict(zip(_SESSION_LIST_KEYS, row)) for row in rows]

    def session_info(self, session_id: int) -> dict[str, object] | None:
        row = self._conn.execute(
            "SELECT id, started_at, ended_at, title, summary, message_count, host_tag "
            "FROM sessions WHERE user_id = %s AND id = %s",
            (self._user, session_id),
        ).fetchone()
        return None if row is None else dict(zip(_SESSION_LIST_KEYS, row))

    def latest_ended_session(self, exclude: int | None) -> int | None:
        row = self._conn.execute(
            "SELECT id FROM sessions WHERE user_id = %s AND ended_at IS NOT NULL "
            "AND message_count > 0 AND id IS DISTINCT FROM %s "
            "ORDER BY started_at DESC, id DESC LIMIT 1",
            (self._user, exclude),
        ).fetchone()
        return None if row is None else int(row[0])

    def rolling_summary(self, session_id: int) -> str | None:
        row = self._conn.execute(
            "SELECT rolling_summary FROM sessions WHERE user_id = %s AND id = %s",
            (self._user, session_id),
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    # -- messages and chunks ------------------------------------------------------------------

    def last_turn(self, session_id: int) -> int:
        row = self._conn.execute(
            "SELECT coalesce(max(turn), 0) FROM messages WHERE user_id = %s AND session_id = %s",
            (self._user, session_id),
        ).fetchone()
        return int(row[0])

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
        row = self._conn.execute(
            "INSERT INTO messages (user_id, session_id, turn, role, content, created_at, "
            "token_estimate) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (self._user, session_id, turn, role, content, created_at, token_estimate),
        ).fetchone()
        return int(row[0])

    def count_turn(
        self, session_id: int, messages: int, title: str | None, heartbeat_at: str
    ) -> None:
        self._conn.execute(
            "UPDATE sessions SET message_count = message_count + %s, "
            "title = COALESCE(title, %s), heartbeat_at = %s WHERE user_id = %s AND id = %s",
            (messages, title, heartbeat_at, self._user, session_id),
        )

    def newest_messages(self, session_id: int) -> Iterator[tuple[str, str, int]]:
        # Pages by position (turn, id), each its own statement: a reader dropped half-way
        # leaves no server-side cursor behind on the pooled connection.
        page = _FIRST_PAGE
        rows = self._conn.execute(
            "SELECT role, content, token_estimate, turn, id FROM messages "
            "WHERE user_id = %s AND session_id = %s ORDER BY turn DESC, id DESC LIMIT %s",
            (self._user, session_id, page),
        ).fetchall()
        while rows:
            for role, content, tokens, _turn, _id in rows:
                yield str(role), str(content), int(tokens)
            if len(rows) < page:
                return
            last_turn, last_id = rows[-1][3], rows[-1][4]
            page = min(page * 2, _MAX_PAGE)
            rows = self._conn.execute(
                "SELECT role, content, token_estimate, turn, id FROM messages "
                "WHERE user_id = %s AND session_id = %s AND (turn, id) < (%s, %s) "
                "ORDER BY turn DESC, id DESC LIMIT %s",
                (self._user, session_id, last_turn, last_id, page),
            ).fetchall()

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
        # One statement, one round trip, for what took six (the turn number, each message,
        # the session's counters, the chunks with their postings): on a server a round trip
        # costs more than the statement, and a busy machine adds a context switch to each.
        if not messages:
            raise ValueError("a turn needs at least one message")
        params: dict[str, Any] = {
            "user": self._user,
            "session": session_id,
            "at": created_at,
            "n_messages": len(messages),
            "roles": [role for role, _content, _tokens in messages],
            "contents": [content for _role, content, _tokens in messages],
            "tokens": [int(tokens) for _role, _content, tokens in messages],
            "title": title,
            "heartbeat": heartbeat_at,
        }
        chunk_ctes, chunk_ids = self._chunk_ctes(
            chunk_texts,
            params,
            "(SELECT min(id) FROM message_ids)",
            "(SELECT max(id) FROM message_ids)",
        )
        rows = self._conn.execute(
            "WITH turn AS (SELECT coalesce(max(turn), 0) + 1 AS n FROM messages "
            "WHERE user_id = %(user)s AND session_id = %(session)s), "
            "message_drawn AS (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id "
            "FROM generate_series(1, %(n_messages)s)), "
            "message_ids AS (SELECT row_number() OVER (ORDER BY id) AS ord, id "
            "FROM message_drawn), "
            "written AS (INSERT INTO messages (user_id, id, session_id, turn, role, content, "
            "created_at, token_estimate) SELECT %(user)s, i.id, %(session)s, turn.n, m.role, "
            "m.content, %(at)s, m.tokens FROM turn, unnest(%(roles)s::text[], "
            "%(contents)s::text[], %(tokens)s::bigint[]) WITH ORDINALITY AS m(role, content, "
            "tokens, ord) JOIN message_ids i USING (ord)), "
            "counted AS (UPDATE sessions SET message_count = message_count + %(n_messages)s, "
            "title = COALESCE(title, %(title)s), heartbeat_at = %(heartbeat)s "
            "WHERE user_id = %(user)s AND id = %(session)s)"
            f"{chunk_ctes} "
            "SELECT 0, 0, n FROM turn UNION ALL SELECT 1, ord, id FROM message_ids"
            f"{' UNION ALL SELECT 2, ord, id FROM chunk_ids' if chunk_ids else ''} "
            "ORDER BY 1, 2",
            params,
        ).fetchall()
        turn = int(rows[0][2])
        return StoredTurn(
            turn,
            tuple(int(r[2]) for r in rows if r[0] == 1),
            tuple(int(r[2]) for r in rows if r[0] == 2),
        )

    def insert_chunks(
        self,
        session_id: int,
        first_msg_id: int,
        last_msg_id: int,
        texts: Sequence[str],
        *,
        created_at: str,
    ) -> list[int]:
        params: dict[str, Any] = {"user": self._user, "session": session_id, "at": created_at}
        ctes, any_chunk = self._chunk_ctes(texts, params, "%(first)s", "%(last)s")
        if not any_chunk:
            return []
        params.update(first=first_msg_id, last=last_msg_id)
        rows = self._conn.execute(
            f"WITH {ctes.removeprefix(', ')} SELECT id FROM chunk_ids ORDER BY ord", params
        ).fetchall()
        return [int(r[0]) for r in rows]

    @staticmethod
    def _chunk_ctes(
        texts: Sequence[str], params: dict[str, Any], first: str, last: str
    ) -> tuple[str, bool]:
        """The CTEs (each after ", ") inserting one chunk per text of the session
        ``%(session)s`` spanning messages ``first``..``last`` (SQL expressions), with their
        postings; they name the new ids ``chunk_ids(ord, id)``. Their parameters go into
        ``params``. ("", False) where there are no texts."""
        terms = terms_of(list(texts))
        if not terms:
            return "", False
        # Ids drawn from the table's sequence (ascending, in the texts' order, as SQLite
        # hands them out), the rows and their postings inserted together.
        words, ordinals, freqs = posting_rows(range(1, len(terms) + 1), terms)
        params.update(
            n_chunks=len(terms),
            texts=list(texts),
            lengths=[length for _found, length in terms],
            words=words,
            ordinals=ordinals,
            freqs=freqs,
        )
        return (
            ", chunk_drawn AS (SELECT nextval(pg_get_serial_sequence('chunks', 'id')) AS id "
            "FROM generate_series(1, %(n_chunks)s)), "
            "chunk_ids AS (SELECT row_number() OVER (ORDER BY id) AS ord, id FROM chunk_drawn), "
            "made AS (INSERT INTO chunks (user_id, id, session_id, first_msg_id, last_msg_id, "
            f"text, created_at, term_count) SELECT %(user)s, i.id, %(session)s, {first}, "
            f"{last}, d.text, %(at)s, d.n FROM unnest(%(texts)s::text[], %(lengths)s::integer[]) "
            "WITH ORDINALITY AS d(text, n, ord) JOIN chunk_ids i USING (ord)), "
            "posted AS (INSERT INTO chunk_terms (user_id, term, chunk_id, tf) "
            "SELECT %(user)s, p.term, i.id, p.tf FROM unnest(%(words)s::text[], "
            "%(ordinals)s::bigint[], %(freqs)s::integer[]) AS p(term, ord, tf) "
            "JOIN chunk_ids i USING (ord))",
            True,
        )

    def session_chunks(self, session_id: int) -> list[ChunkRow]:
        rows = self._conn.execute(
            "SELECT id, first_msg_id, last_msg_id, text, created_at, importance FROM chunks "
            "WHERE user_id = %s AND session_id = %s ORDER BY id",
            (self._user, session_id),
        ).fetchall()
        return [
            ChunkRow(int(r[0]), int(r[1]), int(r[2]), str(r[3]), str(r[4]), float(r[5]))
            for r in rows
        ]

    def raise_chunk_importance(self, chunk_ids: Sequence[int], floor: float) -> None:
        if chunk_ids:
            self._conn.execute(
                "UPDATE chunks SET importance = greatest(importance, %s) "
                "WHERE user_id = %s AND id = ANY(%s)",
                (floor, self._user, [int(i) for i in chunk_ids]),
            )

    # -- for the context plan (assembly) ----------------------------------------------------

    def ended_session_summaries(
        self, exclude: int | None, n: int
    ) -> list[tuple[str, str | None, str | None]]:
        rows = self._conn.execute(
            "SELECT started_at, summary, title FROM sessions WHERE user_id = %s "
            "AND ended_at IS NOT NULL AND id IS DISTINCT FROM %s "
            "AND (summary IS NOT NULL OR title IS NOT NULL) "
            "ORDER BY started_at DESC, id DESC LIMIT %s",
            (self._user, exclude, sql_limit(n)),
        ).fetchall()
        return [(str(r[0]), r[1], r[2]) for r in rows]

    # -- h15 (runtime branch, not yet on redesign): the query path and the job handlers -------

    def session_chunk_ids(self, session_id: int) -> list[int]:
        rows = self._conn.execute(
            "SELECT id FROM chunks WHERE user_id = %s AND session_id = %s",
            (self._user, session_id),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def chunk_spans(self, ids: list[int]) -> dict[int, tuple[str, int | None, int | None]]:
        if not ids:
            return {}
        rows = self._conn.execute(
            "SELECT id, text, first_msg_id, last_msg_id FROM chunks "
            "WHERE user_id = %s AND id = ANY(%s)",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return {int(r[0]): (str(r[1]), r[2], r[3]) for r in rows}

    def chunk_rows(self, ids: list[int]) -> list[tuple[int, int, str, float]]:
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT id, session_id, created_at, importance FROM chunks "
            "WHERE user_id = %s AND id = ANY(%s)",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return [(int(r[0]), int(r[1]), str(r[2]), float(r[3])) for r in rows]

    def chunk_texts(self, ids: list[int]) -> list[tuple[int, str]]:
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT id, text FROM chunks WHERE user_id = %s AND id = ANY(%s) ORDER BY id",
            (self._user, [int(i) for i in ids]),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def consecutive_pairs(self, pairs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        if not pairs:
            return []
        rows = self._conn.execute(
            "SELECT p.a, p.b FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) "
            "AS p(a, b, s) WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.user_id = %s "
            "AND c.session_id = p.s AND c.id > p.a AND c.id < p.b)",
            (
                [int(p[0]) for p in pairs],
                [int(p[1]) for p in pairs],
                [int(p[2]) for p in pairs],
                self._user,
            ),
        ).fetchall()
        return [(int(r[0]), int(r[1])) for r in rows]

    def chunks_without_vector(self, limit: int, *, newest: bool = False) -> list[tuple[int, str]]:
        order = "DESC" if newest else "ASC"  # both walk idx_chunks_unembedded
        rows = self._conn.execute(
            "SELECT id, text FROM chunks WHERE user_id = %s AND embedding IS NULL "
            f"ORDER BY id {order} LIMIT %s",
            (self._user, sql_limit(limit)),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def any_chunk_without_vector(self) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM chunks WHERE user_id = %s AND embedding IS NULL LIMIT 1", (self._user,)
        ).fetchone()
        return row is not None

    def chunks_needing_vector(
        self, ids: list[int], label: str, dim: int | None
    ) -> list[tuple[int, str]]:
        if not ids:
            return []
        rows = self._conn.execute(
            "SELECT id, text FROM chunks WHERE user_id = %s AND id = ANY(%s) "
            "AND (embedding IS NULL OR embedding_model IS DISTINCT FROM %s "
            "OR embedding_dim IS DISTINCT FROM %s) ORDER BY id",
            (self._user, [int(i) for i in ids], label, dim if dim is not None else -1),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def all_chunk_ids(self) -> list[int]:
        rows = self._conn.execute(
            "SELECT id FROM chunks WHERE user_id = %s ORDER BY id", (self._user,)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def chunk_ids_needing_vector(self, label: str, dim: int) -> list[int]:
        rows = self._conn.execute(
            "SELECT id FROM chunks WHERE user_id = %s AND (embedding IS NULL "
            "OR embedding_model IS DISTINCT FROM %s OR embedding_dim IS DISTINCT FROM %s) "
            "ORDER BY id",
            (self._user, label, dim),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def turn_messages(self, session_id: int, turns: list[int]) -> list[tuple[int, str, str, str]]:
        if not turns:
            return []
        rows = self._conn.execute(
            "SELECT turn, role, content, created_at FROM messages WHERE user_id = %s "
            "AND session_id = %s AND turn = ANY(%s) ORDER BY turn, id",
            (self._user, session_id, [int(t) for t in turns]),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def turn_chunks(self, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
        if not turns:
            return []
        rows = self._conn.execute(
            "SELECT c.id, c.text FROM chunks c JOIN messages m ON m.user_id = c.user_id "
            "AND m.id = c.first_msg_id WHERE c.user_id = %s AND c.session_id = %s "
            "AND m.turn = ANY(%s) ORDER BY c.id",
            (self._user, session_id, [int(t) for t in turns]),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def set_rolling_summary(self, session_id: int, text: str | None) -> None:
        self._conn.execute(
            "UPDATE sessions SET rolling_summary = %s WHERE user_id = %s AND id = %s",
            (text, self._user, session_id),
        )

    def recent_user_messages(self, session_id: int, limit: int) -> list[str]:
        rows = self._conn.execute(
            "SELECT content FROM messages WHERE user_id = %s AND session_id = %s "
            "AND role = 'user' ORDER BY turn DESC, id DESC LIMIT %s",
            (self._user, session_id, sql_limit(limit)),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def set_session_summary(self, session_id: int, summary: str) -> None:
        self._conn.execute(
            "UPDATE sessions SET summary = %s WHERE user_id = %s AND id = %s",
            (summary, self._user, session_id),
        )


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> TranscriptRows:
        return PostgresTranscriptRows(conn, "user")
