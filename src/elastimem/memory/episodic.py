"""Sessions, messages and chunks: the verbatim transcript (SPEC §5.1, §5.9, §5.10).

A *session* is one conversation; ``ended_at`` is NULL while it is live, and a live session
records its owner (pid, host) and a heartbeat so other processes never close it by mistake.
Each ``record_turn`` adds a user and/or assistant *message* with the same ``turn`` number and
one or more *chunks*: the searchable text of the exchange, cut at ``chunk_target_tokens``.
"""

from __future__ import annotations

import os
import re
import socket
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from ..clock import now_ts, parse_moment, ts_minus
from ..storage.tx import Tx
from ..text import collapse_whitespace

TITLE_LIMIT = 80
# Session ids are never given twice, even after the newest session is erased: another
# instance may still hold the erased id, and would write into (and close) the new session.
# An INTEGER PRIMARY KEY hands out max(id) + 1 again, so the highest id given is kept here.
SESSION_ID_HIGH_WATER = "sessions.last_id"
# A session whose owner has not refreshed its heartbeat for this long is an orphan.
ORPHAN_HEARTBEAT_SECONDS = 900.0
# A sentence ends after ".", "!" or "?" followed by whitespace, and at every newline.
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")

Estimator = Callable[[str], int]


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str

    @classmethod
    def current(cls) -> Owner:
        return cls(os.getpid(), socket.gethostname())


@dataclass(frozen=True)
class TurnRecord:
    session_id: int
    turn: int
    message_ids: tuple[int, ...]
    chunk_ids: tuple[int, ...]
    created_at: str


def make_title(text: str) -> str | None:
    """The first ``TITLE_LIMIT`` characters of ``text`` with its whitespace collapsed."""
    # Collapsing a prefix gives a prefix of the collapsed whole, so a growing prefix reaches
    # the title without collapsing a 10 MB message (which took 0.4 s).
    size = 4 * TITLE_LIMIT
    while True:
        title = collapse_whitespace(text[:size])
        if len(title) >= TITLE_LIMIT or size >= len(text):
            return title[:TITLE_LIMIT] or None
        size *= 4


# -- chunking ---------------------------------------------------------------------------------


def exchange_text(user: str, assistant: str) -> str:
    lines = []
    if user:
        lines.append("User: " + user)
    if assistant:
        lines.append("Assistant: " + assistant)
    return "\n".join(lines)


def length_estimate(text: str) -> int:
    """The built-in token estimate: ``max(1, len // 4)``, and 0 for ""."""
    return 0 if not text else max(1, len(text) // 4)


def chunk_exchange(user: str, assistant: str, est: Estimator, target: int) -> list[str]:
    """Split an exchange into chunks of at most ``target`` estimated tokens (§5.1).

    The text is cut at sentence ends and newlines; a sentence too long for a chunk is cut at
    word boundaries (a single huge word by length), and the pieces are joined greedily, with
    one space, while the chunk still fits.
    """
    text = exchange_text(user, assistant)
    if not text:
        return []
    if est(text) <= target:
        return [text]
    sentences = _sentences(text)
    if est is length_estimate:
        # Lengths decide everything, so the greedy joins are prefix-sum searches instead of
        # building and measuring every candidate, and a huge word is sliced by index instead
        # of re-copying what is left of it (quadratic). On a busy 2-core box: a 10 MB word
        # 7.1 s -> 0.3 s, the reliability suite's 10 MB + 10 MB exchange 6.4 s -> 3.2 s.
        limit = _char_limit(target)
        pieces: list[str] = []
        for sentence in sentences:
            if len(sentence) <= limit:
                pieces.append(sentence)
            else:
                pieces.extend(_cut_words_by_length(sentence, target, limit))
        return _join_greedy(pieces, limit)
    pieces = []
    for sentence in sentences:
        if est(sentence) <= target:
            pieces.append(sentence)
        else:
            pieces.extend(_cut_words(sentence, est, target))
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current} {piece}" if current else piece
        if current and est(candidate) > target:
            chunks.append(current)
            current = piece
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def _sentences(text: str) -> list[str]:
    """The stripped, non-empty sentences and lines of ``text``.

    The same pieces as splitting at ``(?<=[.!?])\\s+|\\n+`` and stripping: every cut lies in one
    of those separators and each separator holds a cut, so only whitespace moves. A search
    that starts at a character class is what ``re`` scans fast; the look-behind was tried at
    every position (10 MB of SPEC.md: 1.15 s -> 0.72 s on a busy 2-core box).
    """
    ends = [match.end() for match in _SENTENCE_END.finditer(text)]
    ends.append(len(text))
    pieces = (text[start:end].strip() for start, end in zip([0, *ends], ends))
    return [piece for piece in pieces if piece]


def _cut_words(sentence: str, est: Estimator, target: int) -> list[str]:
    """Cut an over-long sentence at word boundaries (a single huge word is cut by length)."""
    out: list[str] = []
    current = ""
    for word in sentence.split():
        tokens = est(word)
        while tokens > target:
            # A word longer than a whole chunk: cut it into character slices.
            size = max(1, len(word) * target // max(1, tokens))
            if size > 1 and est(word[:size]) > target:
                # That assumed the tokens spread evenly over the word; a host tokenizer on
                # text without spaces (CJK) disagrees: the longest prefix that fits.
                size = _longest_fitting_prefix(word, size - 1, est, target)
            if current:
                out.append(current)
                current = ""
            out.append(word[:size])
            word = word[size:]
            tokens = est(word)
        candidate = f"{current} {word}" if current else word
        if current and est(candidate) > target:
            out.append(current)
            current = word
        else:
            current = candidate
    if current:
        out.append(current)
    return out


def _longest_fitting_prefix(word: str, longest: int, est: Estimator, target: int) -> int:
    """The largest ``n <= longest`` with ``est(word[:n]) <= target`` (at least 1)."""
    low, high = 1, max(1, longest)
    while low < high:
        middle = (low + high + 1) // 2
        if est(word[:middle]) <= target:
            low = middle
        else:
            high = middle - 1
    return low


def _char_limit(target: int) -> int:
    """The longest text ``length_estimate`` keeps within ``target`` tokens (0: none)."""
    return 4 * target + 3 if target >= 1 else 0


def _cut_words_by_length(sentence: str, target: int, limit: int) -> list[str]:
    """``_cut_words`` for ``length_estimate``: the same slices and joins, found by arithmetic."""
    out: list[str] = []
    run: list[str] = []  # words since the last slice, joined greedily at the next one
    for word in sentence.split():
        length = len(word)
        if length > limit:
            out.extend(_join_greedy(run, limit))
            run = []
            start = 0
            while length - start > limit:
                # The slice _cut_words takes from what is left of the word.
                rest = length - start
                size = max(1, rest * target // max(1, rest // 4))
                out.append(word[start : start + size])
                start += size
            word = word[start:]
        run.append(word)
    out.extend(_join_greedy(run, limit))
    return out


def _join_greedy(items: list[str], limit: int) -> list[str]:
    """Join consecutive items with one space while the result stays within ``limit`` chars.

    The first item of a group is always taken. ``ends[j] - ends[i - 1] - 1`` is the length of
    items ``i..j`` joined, so each group's end is one binary search.
    """
    ends = list(accumulate(map((1).__add__, map(len, items))))
    out: list[str] = []
    start, base = 0, 0
    while start < len(items):
        stop = max(start + 1, bisect_right(ends, base + limit + 1, start))
        out.append(" ".join(items[start:stop]))
        base = ends[stop - 1]
        start = stop
    return out


# -- sessions ---------------------------------------------------------------------------------


def open_session(conn: Tx, owner: Owner, *, at: str | None, host_tag: str | None) -> int:
    now = now_ts()
    session_id = conn.transcript.insert_session(
        above=conn.meta.get_int(SESSION_ID_HIGH_WATER),
        started_at=at or now,
        host_tag=host_tag,
        owner_pid=owner.pid,
        owner_host=owner.host,
        heartbeat_at=now,
        backdated=bool(at),
    )
    conn.meta.set(SESSION_ID_HIGH_WATER, session_id)
    return session_id


def exists(conn: Tx, session_id: int) -> bool:
    return conn.transcript.session_exists(session_id)


def is_open(conn: Tx, session_id: int) -> bool:
    state = conn.transcript.session_state(session_id)
    return state is not None and state.ended_at is None


def close_session(conn: Tx, session_id: int) -> bool:
    """End a session (§5.9 step 3). Returns False when it was not open."""
    state = conn.transcript.session_state(session_id)
    if state is None or state.ended_at is not None:
        return False
    if state.backdated:
        ended_at = conn.transcript.last_message_time(session_id) or state.started_at
    else:
        ended_at = now_ts()
    _finish_session_row(conn, session_id, ended_at)
    return True


def close_orphan(conn: Tx, session_id: int) -> None:
    """Close a session left open by a dead process: it ends at its last message."""
    state = conn.transcript.session_state(session_id)
    if state is None:
        return
    ended_at = conn.transcript.last_message_time(session_id) or state.started_at
    _finish_session_row(conn, session_id, ended_at)


def _finish_session_row(conn: Tx, session_id: int, ended_at: str) -> None:
    first_user = conn.transcript.first_user_message(session_id)
    title = make_title(first_user) if first_user is not None else None
    conn.transcript.end_session(session_id, ended_at, title)


def heartbeat(conn: Tx, session_id: int) -> None:
    conn.transcript.set_heartbeat(session_id, now_ts())


def clear_owner(conn: Tx, session_id: int) -> None:
    conn.transcript.clear_owner(session_id)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (signal 0 probes without killing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def owner_is_gone(pid: int | None, host: str | None, stamp: str | None, me: Owner) -> bool:
    """True when an owner (of a session or a job) is missing, dead, or silent for 900 s."""
    if pid is None and host is None:
        return True
    if host == me.host and pid is not None and pid != me.pid and not pid_alive(int(pid)):
        return True
    return stamp is None or stamp < ts_minus(ORPHAN_HEARTBEAT_SECONDS)


def find_orphans(conn: Tx, me: Owner, siblings_open: bool = False) -> list[int]:
    """Open sessions to close at open (§6). ``siblings_open``: other instances of this
    process have the file open; then no session of this pid is an orphan (a sibling may be
    inside a long job that holds its heartbeat back)."""
    orphans = []
    stale = ts_minus(ORPHAN_HEARTBEAT_SECONDS)
    for session_id, pid, host, beat in conn.transcript.open_sessions():
        if pid == me.pid and host == me.host:
            # With no other instance of this process open, a session of this pid is a
            # crashed process's that came back with the same pid (routine in containers,
            # where the app is pid 1) once its heartbeat is stale.
            if not siblings_open and (beat is None or beat < stale):
                orphans.append(int(session_id))
            continue
        if owner_is_gone(pid, host, beat, me):
            orphans.append(int(session_id))
    return orphans


# -- turns ------------------------------------------------------------------------------------


def insert_turn(
    conn: Tx,
    session_id: int,
    user: str,
    assistant: str,
    *,
    at: str,
    chunk_texts: list[str],
    user_tokens: int,
    assistant_tokens: int,
) -> TurnRecord:
    """Store one exchange: its messages, its chunks, and the session counters (§5.10).

    The chunk texts are cut beforehand: the tokenizer must never run under the write lock.
    """
    messages = [
        (role, content, tokens)
        for role, content, tokens in (
            ("user", user, user_tokens),
            ("assistant", assistant, assistant_tokens),
        )
        if content
    ]
    stored = conn.transcript.insert_turn(
        session_id,
        messages,
        chunk_texts,
        created_at=at,
        title=make_title(user) if user else None,
        heartbeat_at=now_ts(),
    )
    return TurnRecord(session_id, stored.turn, stored.message_ids, stored.chunk_ids, at)


def raise_chunk_importance(conn: Tx, chunk_ids: tuple[int, ...] | list[int], floor: float) -> None:
    if chunk_ids:
        conn.transcript.raise_chunk_importance(chunk_ids, floor)


# -- reading ----------------------------------------------------------------------------------


def list_sessions(conn: Tx, n: int) -> list[dict[str, object]]:
    return conn.transcript.recent_sessions(n)


def resume_tail(
    conn: Tx, session_id: int | None, exclude: int | None, budget: int
) -> tuple[str | None, list[dict[str, str]]]:
    """The digest and the newest messages of a session that fit ``budget`` tokens (§5.9)."""
    if session_id is None:
        session_id = conn.transcript.latest_ended_session(exclude)
        if session_id is None:
            return None, []
    # An absent session has no digest and no messages: (None, []).
    summary = conn.transcript.rolling_summary(session_id)
    messages: list[dict[str, str]] = []
    used = 0
    for role, content, tokens in conn.transcript.newest_messages(session_id):
        if messages and used + tokens > budget:
            break
        used += tokens
        messages.append({"role": role, "content": content})
    messages.reverse()
    if len(messages) > 1 and messages[0]["role"] == "assistant":
        messages = messages[1:]
    return (summary or None), messages


def turn_time(at: object) -> str:
    """A canonical time for ``at`` (raises ValueError when unreadable)."""
    from ..clock import format_ts

    return format_ts(parse_moment(at))
