"""Contract: ``tx.transcript`` (storage.transcript.TranscriptRows) on every backend."""

from __future__ import annotations

from typing import Any

T0 = "2026-01-01T00:00:00.000000Z"
T1 = "2026-01-01T00:01:00.000000Z"
T2 = "2026-01-01T00:02:00.000000Z"
T3 = "2026-01-01T00:03:00.000000Z"


def _open(tx: Any, *, above: int = 0, started_at: str = T0, backdated: bool = False) -> int:
    return int(
        tx.transcript.insert_session(
            above=above,
            started_at=started_at,
            host_tag="tag",
            owner_pid=4242,
            owner_host="host-a",
            heartbeat_at=started_at,
            backdated=backdated,
        )
    )


def _turn(tx: Any, session_id: int, user: str, assistant: str, at: str) -> tuple[int, list[int]]:
    turn = tx.transcript.last_turn(session_id) + 1
    ids = [
        tx.transcript.insert_message(
            session_id, turn, role, text, created_at=at, token_estimate=len(text) // 4
        )
        for role, text in (("user", user), ("assistant", assistant))
        if text
    ]
    tx.transcript.count_turn(session_id, len(ids), user[:10] or None, at)
    return turn, ids


def test_session_ids_grow_past_existing_ids_and_the_floor(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        first = _open(tx)
        second = _open(tx)
        assert second > first
        floored = _open(tx, above=second + 10)
        assert floored > second + 10
        assert _open(tx) > floored


def test_session_state_and_existence(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        live = _open(tx, started_at=T0)
        dated = _open(tx, started_at=T1, backdated=True)
    with backend_database.read() as tx:
        assert tx.transcript.session_exists(live)
        assert not tx.transcript.session_exists(dated + 100)
        assert tx.transcript.session_state(dated + 100) is None
        state = tx.transcript.session_state(live)
        assert (state.started_at, state.ended_at, state.backdated) == (T0, None, False)
        assert tx.transcript.session_state(dated).backdated is True


def test_messages_turns_and_their_reading_order(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = _open(tx)
        assert tx.transcript.last_turn(session_id) == 0
        assert tx.transcript.first_user_message(session_id) is None
        assert tx.transcript.last_message_time(session_id) is None
        turn1, ids1 = _turn(tx, session_id, "first question", "first answer", T1)
        turn2, ids2 = _turn(tx, session_id, "", "an aside", T2)
        turn3, ids3 = _turn(tx, session_id, "third question", "", T3)
    assert (turn1, turn2, turn3) == (1, 2, 3)
    assert len(ids1) == 2 and len(ids2) == 1 and len(ids3) == 1
    assert len(set(ids1 + ids2 + ids3)) == 4
    with backend_database.read() as tx:
        assert tx.transcript.last_turn(session_id) == 3
        assert tx.transcript.first_user_message(session_id) == "first question"
        assert tx.transcript.last_message_time(session_id) == T3
        newest = list(tx.transcript.newest_messages(session_id))
        assert newest == [
            ("user", "third question", len("third question") // 4),
            ("assistant", "an aside", len("an aside") // 4),
            ("assistant", "first answer", len("first answer") // 4),
            ("user", "first question", len("first question") // 4),
        ]
        listed = tx.transcript.recent_sessions(5)
    assert listed[0]["id"] == session_id
    assert listed[0]["message_count"] == 4
    # count_turn sets the title only while the session has none.
    assert listed[0]["title"] == "first ques"


def test_newest_messages_can_stop_early(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = _open(tx)
        for n in range(5):
            _turn(tx, session_id, f"question {n}", f"answer {n}", T1)
    with backend_database.read() as tx:
        reader = tx.transcript.newest_messages(session_id)
        assert next(reader)[1] == "answer 4"
        assert next(reader)[1] == "question 4"


def test_ending_a_session_clears_its_owner_and_keeps_a_title(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        titled = _open(tx)
        _turn(tx, titled, "hello there", "hi", T1)
        untitled = _open(tx)
        tx.transcript.end_session(titled, T2, "ignored: it has one")
        tx.transcript.end_session(untitled, T3, "given")
    with backend_database.read() as tx:
        assert tx.transcript.session_state(titled).ended_at == T2
        assert tx.transcript.open_sessions() == []
        listed = {row["id"]: row for row in tx.transcript.recent_sessions(10)}
    assert listed[titled]["title"] == "hello ther"
    assert listed[untitled]["title"] == "given"
    assert listed[untitled]["ended_at"] == T3


def test_open_sessions_owner_heartbeat_and_clear_owner(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        kept = _open(tx)
        cleared = _open(tx)
        ended = _open(tx)
        tx.transcript.end_session(ended, T1, None)
        tx.transcript.set_heartbeat(kept, T3)
        tx.transcript.clear_owner(cleared)
    with backend_database.read() as tx:
        found = {row.id: row for row in tx.transcript.open_sessions()}
    assert set(found) == {kept, cleared}
    assert (found[kept].owner_pid, found[kept].owner_host) == (4242, "host-a")
    assert found[kept].heartbeat_at == T3
    assert (found[cleared].owner_pid, found[cleared].owner_host) == (None, None)
    assert found[cleared].heartbeat_at == T0


def test_recent_sessions_newest_start_first_and_limit(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        old = _open(tx, started_at=T0)
        new = _open(tx, started_at=T2)
        middle = _open(tx, started_at=T1)
    with backend_database.read() as tx:
        assert [row["id"] for row in tx.transcript.recent_sessions(10)] == [new, middle, old]
        assert [row["id"] for row in tx.transcript.recent_sessions(2)] == [new, middle]
        assert tx.transcript.recent_sessions(0) == []
        assert set(tx.transcript.recent_sessions(1)[0]) == {
            "id",
            "started_at",
            "ended_at",
            "title",
            "summary",
            "message_count",
            "host_tag",
        }


def test_latest_ended_session_needs_messages_and_honours_exclude(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        assert tx.transcript.latest_ended_session(None) is None
        older = _open(tx, started_at=T0)
        _turn(tx, older, "q", "a", T0)
        newer = _open(tx, started_at=T1)
        _turn(tx, newer, "q", "a", T1)
        empty = _open(tx, started_at=T2)
        still_open = _open(tx, started_at=T3)
        _turn(tx, still_open, "q", "a", T3)
        for session_id in (older, newer, empty):
            tx.transcript.end_session(session_id, T3, None)
    with backend_database.read() as tx:
        assert tx.transcript.latest_ended_session(None) == newer
        assert tx.transcript.latest_ended_session(newer) == older


def test_rolling_summary_is_none_until_written(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = _open(tx)
    with backend_database.read() as tx:
        assert tx.transcript.rolling_summary(session_id) is None
        assert tx.transcript.rolling_summary(session_id + 1) is None


def test_chunks_and_their_importance(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = _open(tx)
        _, message_ids = _turn(tx, session_id, "question", "answer", T1)
        chunk_ids = tx.transcript.insert_chunks(
            session_id, message_ids[0], message_ids[-1], ["one", "two", "three"], created_at=T1
        )
        assert tx.transcript.insert_chunks(session_id, 1, 1, [], created_at=T1) == []
        tx.transcript.raise_chunk_importance([chunk_ids[0], chunk_ids[2]], 0.9)
        tx.transcript.raise_chunk_importance([chunk_ids[2]], 0.1)  # never lowers
        tx.transcript.raise_chunk_importance([], 1.0)
    assert len(set(chunk_ids)) == 3
    with backend_database.read() as tx:
        chunks = tx.transcript.session_chunks(session_id)
    assert [c.id for c in chunks] == chunk_ids
    assert [c.text for c in chunks] == ["one", "two", "three"]
    assert {(c.first_msg_id, c.last_msg_id, c.created_at) for c in chunks} == {
        (message_ids[0], message_ids[-1], T1)
    }
    assert [c.importance for c in chunks] == [0.9, 0.5, 0.9]


def test_insert_turn_writes_messages_counters_and_chunks_at_once(backend_database: Any) -> None:
    with backend_database.atomic() as tx:
        session_id = _open(tx)
        _turn(tx, session_id, "before", "", T1)
        stored = tx.transcript.insert_turn(
            session_id,
            [("user", "kayak question", 3), ("assistant", "kayak answer", 4)],
            ["kayak one", "two", "kayak three"],
            created_at=T2,
            title="a title",
            heartbeat_at=T3,
        )
        aside = tx.transcript.insert_turn(
            session_id,
            [("assistant", "an aside", 2)],
            [],
            created_at=T3,
            title=None,
            heartbeat_at=T3,
        )
    assert (stored.turn, aside.turn) == (2, 3)
    assert len(stored.message_ids) == 2 and stored.message_ids[0] < stored.message_ids[1]
    assert len(stored.chunk_ids) == 3 and list(stored.chunk_ids) == sorted(stored.chunk_ids)
    assert aside.chunk_ids == () and len(aside.message_ids) == 1
    assert aside.message_ids[0] > stored.message_ids[1]
    with backend_database.read() as tx:
        assert tx.transcript.last_turn(session_id) == 3
        newest = list(tx.transcript.newest_messages(session_id))
        chunks = tx.transcript.session_chunks(session_id)
        listed = tx.transcript.recent_sessions(1)[0]
        open_session = tx.transcript.open_sessions()[0]
        found, _tf = tx.postings.term_postings("chunks", "kayak")
    assert newest[:3] == [
        ("assistant", "an aside", 2),
        ("assistant", "kayak answer", 4),
        ("user", "kayak question", 3),
    ]
    assert [c.id for c in chunks] == list(stored.chunk_ids)
    assert [c.text for c in chunks] == ["kayak one", "two", "kayak three"]
    assert {(c.first_msg_id, c.last_msg_id, c.created_at) for c in chunks} == {
        (stored.message_ids[0], stored.message_ids[1], T2)
    }
    # count_turn's work: 1 + 2 + 1 messages, the first title kept, the heartbeat.
    assert (listed["message_count"], listed["title"]) == (4, "before")
    assert open_session.heartbeat_at == T3
    assert list(found) == [stored.chunk_ids[0], stored.chunk_ids[2]]
