"""Sessions and transcripts: recording, chunking, backdating, resuming, owners and orphans."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastimem
from elastimem.clock import TIMESTAMP_PATTERN
from elastimem.memory import episodic
from elastimem.text import collapse_whitespace
from tests.rows import execute, one, rows


def messages(mem: elastimem.Elastimem) -> list[tuple[Any, ...]]:
    return rows(mem, "SELECT session_id, turn, role, content, created_at FROM messages ORDER BY id")


def test_record_turn_opens_a_session_lazily_and_counts(mem: elastimem.Elastimem) -> None:
    assert mem.session_id is None
    mem.record_turn("  Hello   there,\n how are you?  ", "Fine, thanks.")
    mem.record_turn("", "assistant only")
    mem.record_turn("user only", "")
    mem.record_turn("", "")  # nothing to store
    sid = mem.session_id
    assert sid is not None
    rows = messages(mem)
    assert [(r[1], r[2]) for r in rows] == [
        (1, "user"),
        (1, "assistant"),
        (2, "assistant"),
        (3, "user"),
    ]
    assert rows[0][3] == "  Hello   there,\n how are you?  "  # stored exactly as given
    info = mem.sessions()[0]
    assert info["message_count"] == 4 and info["ended_at"] is None
    assert info["title"] == "Hello there, how are you?"


def test_a_turn_is_never_dated_before_the_session_it_opened(make_store: Any) -> None:
    """ "Now" was read before a slow tokenizer ran and the lock was won, and the session the
    turn opened lazily started later than its own first message."""

    def slow_tokenizer(text: str) -> int:
        time.sleep(0.05)
        return len(text) // 4

    mem = make_store(tokenizer_fn=slow_tokenizer)
    mem.record_turn("the first words of a new session", "hello")
    started = mem.sessions()[0]["started_at"]
    first = one(mem, "SELECT min(created_at) FROM messages")
    assert started <= first


def test_chunks_stay_within_the_target_under_a_host_tokenizer(make_store: Any) -> None:
    """A word longer than a chunk was cut into slices sized as if its tokens were evenly
    spread: CJK text (no spaces) measured by a CJK-aware tokenizer came out ~3x over."""

    def cjk_tokens(text: str) -> int:  # a token per CJK character, 4 characters otherwise
        wide = sum(1 for ch in text if ord(ch) > 0x2E80)
        return wide + (len(text) - wide) // 4

    mem = make_store(tokenizer_fn=cjk_tokens, chunk_target_tokens=64)
    mem.record_turn("東京タワーに行きました" * 40 + "abcd" * 300, "はい")  # dense, then sparse
    texts = [r[0] for r in rows(mem, "SELECT text FROM chunks ORDER BY id")]
    assert len(texts) > 3 and max(cjk_tokens(t) for t in texts) <= 64
    assert "".join(t.replace("User: ", "").replace("\n", "") for t in texts).count("東京") == 40


def test_text_is_sanitised_but_otherwise_kept(mem: elastimem.Elastimem) -> None:
    huge = "word " * 250_000  # > 1 MB
    mem.record_turn("nul\x00byte and lone \ud800 surrogate", huge)
    mem.record_turn(None, 12345)  # type: ignore[arg-type]
    rows = messages(mem)
    assert rows[0][3] == "nul\ufffdbyte and lone \ufffd surrogate"
    assert rows[1][3] == huge
    assert rows[2][3] == "12345" and rows[2][2] == "assistant"
    assert mem.recall("surrogate")


def test_long_exchanges_are_chunked_at_the_target(make_store: Any) -> None:
    mem = make_store(chunk_target_tokens=40)
    sentences = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(40))
    mem.record_turn(sentences, "Short answer.")
    chunks = rows(mem, "SELECT text, first_msg_id, last_msg_id FROM chunks")
    assert len(chunks) > 5
    assert all(len(text) // 4 <= 40 for text, _, _ in chunks)
    user, assistant = (r[0] for r in rows(mem, "SELECT id FROM messages ORDER BY id"))
    assert {(first, last) for _, first, last in chunks} == {(user, assistant)}
    joined = " ".join(text for text, _, _ in chunks)
    assert "topic 39" in joined and "Short answer." in joined


def test_chunking_splits_an_overlong_word() -> None:
    est = lambda t: 0 if not t else max(1, len(t) // 4)  # noqa: E731
    chunks = episodic.chunk_exchange("x" * 1000, "", est, 32)
    assert all(est(c) <= 32 for c in chunks)
    assert "".join(c.replace("User: ", "") for c in chunks).count("x") == 1000


# -- chunking stays the same, in linear time ---------------------------------------------------


def _reference_chunks(user: str, assistant: str, est: episodic.Estimator, target: int) -> list[str]:
    """The chunker as it was before it was made linear, kept to check nothing changed."""
    text = episodic.exchange_text(user, assistant)
    if not text:
        return []
    if est(text) <= target:
        return [text]
    pieces: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        sentence = sentence.strip()
        if not sentence:
            continue
        if est(sentence) <= target:
            pieces.append(sentence)
            continue
        current = ""
        for word in sentence.split():
            while est(word) > target:
                size = max(1, len(word) * target // max(1, est(word)))
                if current:
                    pieces.append(current)
                    current = ""
                pieces.append(word[:size])
                word = word[size:]
            candidate = f"{current} {word}" if current else word
            if current and est(candidate) > target:
                pieces.append(current)
                current = word
            else:
                current = candidate
        if current:
            pieces.append(current)
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


# Sentence ends, newlines, every kind of whitespace, accents and words long enough to be cut.
_CHUNK_TEXT = st.lists(
    st.sampled_from(
        [
            " ",
            "  ",
            "\n",
            "\n\n",
            "\t",
            "\r",
            "\u2028",
            "\x1c",
            "\xa0",
            ".",
            "!",
            "?",
            ". ",
            "a",
            "word",
            "Zürich",
            "é",
            "x" * 150,
            "y" * 700,
            "end.\n",
            "?!",
            "...",
            " \n ",
        ]
    ),  # fmt: skip
    max_size=300,
).map("".join)


def _word_count(text: str) -> int:
    return len(text.split())


@settings(max_examples=300, deadline=None)
@given(_CHUNK_TEXT, _CHUNK_TEXT, st.integers(32, 60))
def test_chunks_match_the_reference_chunker(user: str, assistant: str, target: int) -> None:
    fast = episodic.chunk_exchange(user, assistant, episodic.length_estimate, target)
    assert fast == _reference_chunks(user, assistant, episodic.length_estimate, target)
    # A host tokenizer takes the general path; it must agree with the reference too.
    assert episodic.chunk_exchange(user, assistant, _word_count, 3) == _reference_chunks(
        user, assistant, _word_count, 3
    )


def test_chunking_a_ten_megabyte_message_is_linear() -> None:
    """A huge word was cut by re-copying what was left (quadratic): 10 MB took 4-7 s."""
    word = "w" * 10_000_000
    started = time.perf_counter()
    chunks = episodic.chunk_exchange(word, "", episodic.length_estimate, 400)
    elapsed = time.perf_counter() - started
    assert chunks[0] == "User:" and "".join(chunks[1:]) == word
    assert all(len(c) <= 4 * 400 + 3 for c in chunks)
    assert elapsed < 2.5, f"{elapsed:.2f} s"


@settings(max_examples=300, deadline=None)
@given(_CHUNK_TEXT)
def test_titles_are_the_collapsed_prefix(text: str) -> None:
    expected = collapse_whitespace(text)[: episodic.TITLE_LIMIT] or None
    assert episodic.make_title(text) == expected


def test_tokenizer_fn_is_used_for_estimates(make_store: Any) -> None:
    mem = make_store(tokenizer_fn=lambda text: len(text.split()))
    mem.record_turn("one two three", "four five")
    assert [r[0] for r in rows(mem, "SELECT token_estimate FROM messages")] == [3, 2]


def test_backdated_sessions_keep_their_times(mem: elastimem.Elastimem) -> None:
    sid = mem.begin_session("import", at="2024-01-05")
    mem.record_turn("We planted tomatoes", "Nice", at="2024-01-05T10:00:00+02:00")
    mem.record_turn("And basil", "Lovely", at="2024-01-05T10:30:00Z")
    mem.end_session()
    info = mem.sessions()[0]
    assert info["id"] == sid and info["host_tag"] == "import"
    assert info["started_at"] == "2024-01-05T00:00:00.000000Z"
    assert info["ended_at"] == "2024-01-05T10:30:00.000000Z"  # the last message, not now
    assert messages(mem)[0][4] == "2024-01-05T08:00:00.000000Z"
    hit = mem.recall("tomatoes")[0]
    assert hit.date == "2024-01-05"


def test_unreadable_at_in_record_turn_uses_now(
    mem: elastimem.Elastimem, caplog: pytest.LogCaptureFixture
) -> None:
    mem.record_turn("hello", "hi", at="someday")
    created = messages(mem)[0][4]
    assert TIMESTAMP_PATTERN.match(created) and created.startswith("20")
    assert "unreadable" in caplog.text


def test_begin_session_closes_the_previous_one(mem: elastimem.Elastimem) -> None:
    first = mem.begin_session()
    mem.record_turn("first session talk", "ok")
    second = mem.begin_session()
    assert second != first
    by_id = {s["id"]: s for s in mem.sessions()}
    assert by_id[first]["ended_at"] is not None and by_id[second]["ended_at"] is None
    assert by_id[first]["title"] == "first session talk"


def test_end_session_is_a_noop_without_a_session(mem: elastimem.Elastimem) -> None:
    mem.end_session()
    assert mem.sessions() == []


def test_sessions_are_newest_first(mem: elastimem.Elastimem) -> None:
    for day in ("2024-03-01", "2024-01-01", "2024-02-01"):
        mem.begin_session(at=day)
        mem.record_turn(f"talk on {day}", "ok", at=day)
    mem.end_session()
    assert [s["started_at"][:10] for s in mem.sessions()] == [
        "2024-03-01",
        "2024-02-01",
        "2024-01-01",
    ]
    assert len(mem.sessions(2)) == 2


def test_resume_session_returns_the_tail_within_the_working_budget(make_store: Any) -> None:
    mem = make_store(context_tokens=1024)  # working budget 140 tokens at the floor
    mem.begin_session()
    for i in range(30):
        mem.record_turn(f"user message {i} " + "pad " * 20, f"assistant reply {i} " + "pad " * 20)
    mem.report_evictions([("user message 0 about the garden. More text", "ok")])
    mem.end_session()
    digest, tail = mem.resume_session()
    assert digest is not None and "user message 0 about the garden." in digest
    assert (
        tail and tail[0]["role"] == "user" and tail[-1]["content"].startswith("assistant reply 29")
    )
    budget = mem.profile.budgets.working
    assert sum(max(1, len(m["content"]) // 4) for m in tail) <= budget
    assert mem.resume_session(999) == (None, [])
    assert mem.session_id is None  # resume does not start a session


def test_resume_session_keeps_at_least_one_message(make_store: Any) -> None:
    mem = make_store(context_tokens=1024)
    mem.record_turn("x " * 5000, "")
    mem.end_session()
    _, tail = mem.resume_session()
    assert len(tail) == 1


CHILD = textwrap.dedent(
    """
    import os, sys, elastimem
    mem = elastimem.Elastimem(sys.argv[1], disable_builtin_embedder=True)
    mem.record_turn("child process talking about sailing", "ok")
    print(mem.session_id, flush=True)
    if sys.argv[2] == "die":
        os._exit(0)  # no close(): the session stays open with this pid as owner
    sys.stdin.readline()  # stay alive until told
    mem.close()
    """
)


def _run_child(path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_opening_never_closes_a_live_process_session(store_path: Path) -> None:
    child = _run_child(store_path, "live")
    try:
        child_session = int(child.stdout.readline())  # type: ignore[union-attr]
        with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
            by_id = {s["id"]: s for s in mem.sessions()}
            assert by_id[child_session]["ended_at"] is None
    finally:
        child.communicate("\n", timeout=30)


def test_opening_closes_a_dead_process_session(store_path: Path) -> None:
    child = _run_child(store_path, "die")
    out, _ = child.communicate(timeout=30)
    child_session = int(out.split()[0])
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        info = {s["id"]: s for s in mem.sessions()}[child_session]
        assert info["ended_at"] is not None
        assert info["title"] == "child process talking about sailing"
        kinds = [r[0] for r in rows(mem, "SELECT kind FROM events")]
        assert "orphan_closed" in kinds


def test_a_session_with_a_stale_heartbeat_is_an_orphan(store_path: Path) -> None:
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        mem.record_turn("hello", "hi")
        sid = mem.session_id
    # Closed (so no worker of ours heartbeats it), then pretend another live process on
    # another host owns it but went silent.
    execute(
        store_path,
        "UPDATE sessions SET owner_pid = 1, owner_host = 'elsewhere', "
        "heartbeat_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?",
        (sid,),
    )
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        assert {s["id"]: s for s in mem.sessions()}[sid]["ended_at"] is not None


def test_a_silent_session_of_this_very_pid_is_an_orphan_too(store_path: Path) -> None:
    """A crashed process that came back with the same pid (a container's pid 1) left it:
    skipping every session of this pid kept it open for good."""
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        mem.record_turn("hello from the crashed run", "hi")
        sid = mem.session_id
    me = episodic.Owner.current()  # closed above, so no worker of ours heartbeats it
    execute(
        store_path,
        "UPDATE sessions SET owner_pid = ?, owner_host = ?, "
        "heartbeat_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?",
        (me.pid, me.host, sid),
    )
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        assert {s["id"]: s for s in mem.sessions()}[sid]["ended_at"] is not None


def test_a_live_session_of_another_instance_of_this_process_stays_open(make_store: Any) -> None:
    first = make_store()
    first.record_turn("still talking", "yes")
    second = make_store()
    assert {s["id"]: s for s in second.sessions()}[first.session_id]["ended_at"] is None


WRITER = textwrap.dedent(
    """
    import sys, elastimem
    mem = elastimem.Elastimem(sys.argv[1], disable_builtin_embedder=True)
    for i in range(int(sys.argv[3])):
        mem.record_turn(f"{sys.argv[2]} turn {i} about rivers", "ok")
    mem.close()
    """
)


def test_two_processes_record_into_one_file(store_path: Path) -> None:
    elastimem.Elastimem(str(store_path), disable_builtin_embedder=True).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store_path), name, "60"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Error" not in err
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        stats = mem.stats()
        assert stats["messages"] == 240 and stats["sessions"] == 2
        assert one(mem, "PRAGMA integrity_check") == "ok"


def test_close_keeps_the_session_for_the_next_open(store_path: Path) -> None:
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        mem.record_turn("remember the milk", "ok")
        mem.report_evictions([("remember the milk", "ok")])
        sid = mem.session_id
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        info = {s["id"]: s for s in mem.sessions()}[sid]
        assert info["ended_at"] is not None  # no owner after close: closed as an orphan
        digest, _ = mem.resume_session(sid)
        assert digest == "- remember the milk"


def test_pid_alive() -> None:
    assert episodic.pid_alive(os.getpid())


def test_an_erased_session_id_is_never_given_again(make_store: Any) -> None:
    """Instance A still holds session 1 when instance B erases it and begins a session."""
    a = make_store()
    first = a.begin_session()
    a.record_turn("a private note", "ok")
    b = make_store()
    b.erase(session_id=first)
    second = b.begin_session()
    assert second != first
    b.record_turn("b's own words", "ok")
    a.record_turn("a keeps talking", "ok")  # must not land in b's session
    a.end_session()  # must not close b's session
    b_rows = b.sessions(n=10)
    mine = next(s for s in b_rows if s["id"] == second)
    assert mine["ended_at"] is None and mine["message_count"] == 2
    reopened = make_store()
    assert reopened.begin_session() not in (first, second)
