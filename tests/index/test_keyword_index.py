"""The cached-postings BM25 must rank exactly as FTS5's bm25() does, and stay in sync."""

from __future__ import annotations

import dataclasses
import math
import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.index import keyword as keyword_index
from elastimem.index.keyword import FACTS, KeywordIndex
from elastimem.storage.sqlite.database import open_store
from elastimem.storage.sqlite.fts import fts_match_expression
from elastimem.storage.sqlite.postings import SqlitePostingRows, SqliteTokenizer
from elastimem.storage.sqlite.tx import SqliteTx
from elastimem.text import query_terms
from tests.conftest import wait_until
from tests.rows import execute as execute_raw

# Checked against SQLite's own FTS5 (its bm25()): tests/storage/postgres checks the
# PostgreSQL postings give the same ranking.
pytestmark = pytest.mark.sqlite_only

# The facts' table as the index mirrors it from the first row (it waits for 16k by default).
SMALL_FACTS = dataclasses.replace(FACTS, min_rows=0)

WORDS = (
    "run running runs runner lighthouse keeper café cafe naïve garden tomato tomatoes "
    "jetson cuda robot wheel camera sister brother paris berlin müller straße 東京 "
    "vacation flight hotel budget invoice meeting monday friday piano guitar lesson"
).split()


def sentence(rng: random.Random) -> str:
    # Skewed choice, so some words are in most chunks and others in a few.
    words = [
        WORDS[min(int(rng.expovariate(0.15)), len(WORDS) - 1)] for _ in range(rng.randint(1, 25))
    ]
    return " ".join(words) + "."


@contextmanager
def snapshot(path: Path) -> Iterator[SqliteTx]:
    """A read snapshot of the store's file on a connection of the test's own, like the
    store's readers; ``.conn`` runs the FTS5 reference queries."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("BEGIN")
    try:
        yield SqliteTx(conn)
    finally:
        conn.rollback()
        conn.close()


def fts5_top(
    tx: SqliteTx, terms: list[str], limit: int, exclude: int | None = None
) -> list[tuple[int, float]]:
    conn = tx.conn
    sql = "SELECT rowid, -bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
    params: list[object] = [fts_match_expression(terms)]
    if exclude is not None:
        sql += " AND rowid NOT IN (SELECT id FROM chunks WHERE session_id = ?)"
        params.append(exclude)
    rows = conn.execute(sql + " ORDER BY s DESC, rowid DESC LIMIT ?", (*params, limit))
    return [(int(r[0]), float(r[1])) for r in rows]


def assert_same_ranking(ours: list[tuple[int, float]], theirs: list[tuple[int, float]]) -> None:
    """Same scores; same ids, except that ids tied (to rounding) with the cut may differ."""
    assert len(ours) == len(theirs)
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    cut = theirs[-1][1] if theirs else 0.0
    sure = {i for i, s in theirs if not math.isclose(s, cut, rel_tol=1e-9)}
    assert sure <= {i for i, _ in ours}
    ours_scores = dict(ours)
    for i, s in theirs:
        if i in ours_scores:
            assert math.isclose(ours_scores[i], s, rel_tol=1e-9, abs_tol=1e-12)


def fill(mem: elastimem.Elastimem, rng: random.Random, turns: int, sessions: int = 3) -> None:
    for _ in range(sessions):
        mem.begin_session()
        for _ in range(turns // sessions):
            mem.record_turn(sentence(rng), sentence(rng))
        mem.end_session(wait=False)


def queries(rng: random.Random, n: int) -> list[list[str]]:
    out = []
    while len(out) < n:
        terms = query_terms(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))))
        if terms:
            out.append(terms)
    return out


@pytest.fixture
def filled(make_store: Callable[..., elastimem.Elastimem], store_path: Path) -> elastimem.Elastimem:
    mem = make_store()
    fill(mem, random.Random(5), 240)
    return mem


def test_scores_and_order_match_fts5_bm25(filled: elastimem.Elastimem, store_path: Path) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        for terms in queries(random.Random(1), 60):
            for limit in (5, 50):
                ours = index.top(conn, terms, limit)
                assert ours is not None
                assert_same_ranking(ours, fts5_top(conn, terms, limit))


SHORT_WORDS = "5 7 59 2 2024 c x v room ticket printer python version floor".split()


def test_one_character_terms_rank_as_in_fts5(
    make_store: Callable[..., elastimem.Elastimem], store_path: Path
) -> None:
    """Digits and one-letter words are query terms too (issue 15): each is one FTS5
    token, scored from the cached postings exactly as bm25() scores it."""
    mem = make_store()
    rng = random.Random(21)
    mem.begin_session()
    for _ in range(150):
        mem.record_turn(
            " ".join(rng.choice(SHORT_WORDS) for _ in range(rng.randint(1, 12))),
            " ".join(rng.choice(SHORT_WORDS) for _ in range(rng.randint(0, 6))),
        )
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        for _ in range(40):
            terms = query_terms(" ".join(rng.choice(SHORT_WORDS) for _ in range(rng.randint(1, 5))))
            assert terms
            for limit in (5, 50):
                ours = index.top(conn, terms, limit)
                assert ours is not None
                assert_same_ranking(ours, fts5_top(conn, terms, limit))
        assert_same_ranking(index.top(conn, ["7"], 50) or [], fts5_top(conn, ["7"], 50))


def test_a_stem_shared_by_two_terms_counts_twice_as_in_fts5(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        terms = ["running", "runs", "garden"]  # both stem to "run": two FTS5 phrases
        assert_same_ranking(index.top(conn, terms, 20) or [], fts5_top(conn, terms, 20))


def test_excluding_a_session_matches_the_fts5_query(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        session = conn.conn.execute("SELECT min(session_id) FROM chunks").fetchone()[0]
        for terms in queries(random.Random(2), 20):
            excluded = [r[0] for r in conn.conn.execute(
                "SELECT id FROM chunks WHERE session_id = ?", (session,))]  # fmt: skip
            ours = index.top(conn, terms, 30, exclude=excluded)
            assert ours is not None
            assert_same_ranking(ours, fts5_top(conn, terms, 30, exclude=session))
            assert not set(excluded) & {i for i, _ in ours}


def test_new_turns_are_appended_without_refetching(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    terms = ["garden", "tomato", "lighthouse", "running"]
    with snapshot(store_path) as conn:
        index.top(conn, terms, 50)
    cached = index.cached_entries
    rng = random.Random(9)
    for round_ in range(5):
        filled.record_turn(f"garden tomato party {round_}", sentence(rng))
        with snapshot(store_path) as conn:
            assert_same_ranking(index.top(conn, terms, 50) or [], fts5_top(conn, terms, 50))
    assert index.cached_entries >= cached + 5  # appended, not dropped and refetched


def test_erasing_a_session_drops_the_cache_and_stays_exact(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    terms = ["garden", "tomato", "berlin"]
    with snapshot(store_path) as conn:
        before = index.top(conn, terms, 50) or []
        session = conn.conn.execute("SELECT min(session_id) FROM chunks").fetchone()[0]
    filled.erase(session_id=session)
    filled.record_turn("garden gnome", "tomato soup")  # a delete and an append together
    with snapshot(store_path) as conn:
        after = index.top(conn, terms, 50)
        assert after is not None and after != before
        assert_same_ranking(after, fts5_top(conn, terms, 50))


@pytest.mark.parametrize("preload", [True, False])
def test_an_erase_and_a_turn_of_the_same_length_are_seen(
    make_store: Callable[..., elastimem.Elastimem],
    monkeypatch: pytest.MonkeyPatch,
    preload: bool,
) -> None:
    """Erasing a session and recording a turn as long as the erased one leaves FTS5's
    averages record (rows, tokens) exactly as it was. The index used to take that for "no
    change": the new turn was never found, and the erased turn's words still matched the
    chunk that took its id. The structure record, which changes on every write, is
    checked too (found by a soak)."""
    if not preload:
        monkeypatch.setattr(keyword_index, "PRELOAD_MAX_POSTINGS", 0)
    mem = make_store(tier_override="full")
    mem.record_turn("alpha bravo", "ok")
    mem.end_session()
    mem.record_turn("zulu yankee", "ok")
    erased = mem.session_id
    mem.end_session()
    assert [h.text for h in mem.recall("zulu")] == ["User: zulu yankee\nAssistant: ok"]
    mem.erase(session_id=erased)
    mem.record_turn("charlie delta", "ok")  # takes the erased chunk's id
    mem.end_session()
    assert [h.text for h in mem.recall("charlie")] == ["User: charlie delta\nAssistant: ok"]
    assert mem.recall("zulu yankee") == []


def test_an_erase_then_appended_turns_reusing_its_ids_are_seen(
    make_store: Callable[..., elastimem.Elastimem], store_path: Path
) -> None:
    """Another instance erases the newest session, then records turns: SQLite hands out
    the erased ids again, and with as many tokens as the erased rows, counts and averages
    looked like an append alone. The cache kept the erased rows' postings (found by a
    soak); every erase now bumps a count the cache checks."""
    mine = make_store(tier_override="standard")
    other = make_store(store_path, tier_override="standard")
    for i in range(3):
        mine.record_turn(f"base{i} fresh walk with the dog", "nice")
    erased = mine.begin_session()
    mine.record_turn("secretword one about hiking trails", "ok")
    mine.record_turn("secretword two about hiking trails", "ok")
    assert len(mine.recall("secretword")) == 2 and len(mine.recall("fresh", 10)) == 3
    other.erase(session_id=erased)
    other.begin_session()
    for word in ("newone", "newtwo", "newthree"):  # the first two take the erased ids
        other.record_turn(f"{word} fresh about hiking trails", "ok")
    assert mine.recall("secretword") == []
    assert {h.id for h in mine.recall("fresh", 10)} == {h.id for h in other.recall("fresh", 10)}
    assert len(mine.recall("fresh", 10)) == 6


def test_a_fact_erased_and_one_of_the_same_length_are_seen(
    make_store: Callable[..., elastimem.Elastimem], store_path: Path
) -> None:
    """The same hole in the facts' index: erasing a fact and remembering one as long."""
    mem = make_store(tier_override="full")
    mem.remember("pet", "rex")
    mem.remember("car", "volvo")
    index = KeywordIndex(SMALL_FACTS)

    def ranked(terms: list[str]) -> list[tuple[int, float]] | None:
        with snapshot(store_path) as conn:
            live = [r[0] for r in conn.conn.execute(
                "SELECT id FROM facts WHERE invalidated_at IS NULL AND archived = 0")]  # fmt: skip
            ours = index.top(conn, terms, 5, only=live)
            assert ours is not None
            assert_same_ranking(ours, fts5_facts_top(conn, terms, 5))
            return ours

    assert ranked(["volvo"])
    mem.erase(key="car")
    mem.remember("boat", "yacht")  # as many tokens as "car volvo"
    assert ranked(["yacht"]) and not ranked(["volvo"])


def test_turns_written_by_another_process_are_seen(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    terms = ["zeppelin", "garden"]
    with snapshot(store_path) as conn:
        assert_same_ranking(index.top(conn, terms, 50) or [], fts5_top(conn, terms, 50))
    script = (
        "import sys, elastimem\n"
        "with elastimem.open(sys.argv[1], disable_builtin_embedder=True) as mem:\n"
        "    for i in range(600):\n"  # more than APPEND_LIMIT: a refetch, not an append
        "        mem.record_turn(f'zeppelin garden {i}', 'noted')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(store_path)], check=True, timeout=120)
    with snapshot(store_path) as conn:
        ours = index.top(conn, terms, 50)
        assert ours is not None and len(ours) == 50
        assert_same_ranking(ours, fts5_top(conn, terms, 50))


def test_a_term_fts5_splits_in_two_is_left_to_fts5(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    with snapshot(store_path) as conn:
        assert KeywordIndex().top(conn, ["garden", "tomato-soup"], 10) is None


def test_empty_store_and_unknown_terms(
    make_store: Callable[..., elastimem.Elastimem], store_path: Path
) -> None:
    make_store()
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        assert index.top(conn, ["anything"], 10) == []
    make_store().record_turn("hello there", "general kenobi")
    with snapshot(store_path) as conn:
        assert index.top(conn, ["nowhere"], 10) == []
        assert [i for i, _ in index.top(conn, ["kenobi"], 10) or []] == [1]


def test_the_postings_cache_is_bounded(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_index, "MIN_POSTINGS_CAP", 50)
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        rows = conn.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        for terms in queries(random.Random(3), 40):
            assert_same_ranking(index.top(conn, terms, 10) or [], fts5_top(conn, terms, 10))
    assert index.cached_entries <= max(50, 4 * rows) + 2 * rows  # one term may exceed alone


def test_a_full_term_cache_never_drops_the_terms_of_the_query_it_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Once the store had seen TERM_CACHE distinct query terms, a query mixing its oldest
    cached term with new ones evicted that term before reading it, and recall failed with a
    KeyError (found by the latency benchmark after ~2,400 queries)."""
    monkeypatch.setattr(keyword_index, "TERM_CACHE", 4)
    terms = keyword_index.TermTokens()
    database = open_store(tmp_path / "terms.db")
    try:
        with database.read() as tx:
            assert terms.tokens(tx, ["cat", "dog", "fox", "owl"]) == ["cat", "dog", "fox", "owl"]
            # "cat" is the least recently used entry; two new terms push two entries out.
            assert terms.tokens(tx, ["cat", "yak", "ant"]) == ["cat", "yak", "ant"]
            assert terms.tokens(tx, ["cat", "ant"]) == ["cat", "ant"]
            # More distinct terms than the cache holds, and repeats: all answered, in order.
            many = ["elk", "gnu", "hen", "bat", "cow", "pig", "elk"]
            assert terms.tokens(tx, many) == many
            assert terms.tokens(tx, ["Running", "two words"]) == ["run", None]
    finally:
        terms.close()
        database.close()


def test_recall_ranks_alike_with_and_without_the_index(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    """Through the public API: LITE ranks with FTS5 itself, STANDARD with the index."""
    mem = make_store()
    fill(mem, random.Random(11), 150)
    lite = make_store(tier_override="lite")
    for terms in queries(random.Random(4), 15):
        question = " ".join(terms)
        full = [(h.id, round(h.score, 9)) for h in mem.recall(question, k=8, kinds=["chunk"])]
        small = [(h.id, round(h.score, 9)) for h in lite.recall(question, k=8, kinds=["chunk"])]
        assert full == small


@pytest.fixture
def used_indexes(monkeypatch: pytest.MonkeyPatch) -> list[KeywordIndex]:
    """Every KeywordIndex queried or primed from now on (a store's own included)."""
    seen: list[KeywordIndex] = []
    for name in ("top", "prime"):
        real = getattr(KeywordIndex, name)

        def spy(index: KeywordIndex, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if not any(index is other for other in seen):
                seen.append(index)
            return _real(index, *args, **kwargs)

        monkeypatch.setattr(KeywordIndex, name, spy)
    return seen


def loaded_chunk_rows(indexes: list[KeywordIndex]) -> int:
    return max((i.loaded_rows for i in indexes if i.table.name == "chunks"), default=0)


def test_warm_up_loads_the_chunk_lengths_before_the_first_recall(
    make_store: Callable[..., elastimem.Elastimem], used_indexes: list[KeywordIndex]
) -> None:
    mem = make_store()
    for i in range(30):
        mem.record_turn(f"note {i} about the lighthouse keeper", "Noted.")
    mem.close()
    again = make_store()
    assert loaded_chunk_rows(used_indexes) == 0
    again.warm_up(timeout=5)
    assert wait_until(lambda: loaded_chunk_rows(used_indexes) == 30, 10)


def test_lite_leaves_the_index_unused(
    make_store: Callable[..., elastimem.Elastimem], used_indexes: list[KeywordIndex]
) -> None:
    mem = make_store(tier_override="lite")
    mem.record_turn("the lighthouse keeper", "Noted.")
    assert mem.recall("lighthouse keeper")
    mem.warm_up(timeout=5)
    assert all(index.loaded_rows == 0 for index in used_indexes)


def test_a_closed_index_leaves_queries_to_fts5(
    filled: elastimem.Elastimem, store_path: Path
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        assert index.top(conn, ["garden"], 5) is not None
        index.close()
        assert index.top(conn, ["garden"], 5) is None
        index.prime(conn)  # no error


def fts5_facts_top(tx: SqliteTx, terms: list[str], limit: int) -> list[tuple[int, float]]:
    rows = tx.conn.execute(
        "SELECT f.id, -bm25(facts_fts) AS s FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid "
        "WHERE facts_fts MATCH ? AND f.invalidated_at IS NULL AND f.archived = 0 "
        "ORDER BY s DESC, f.id DESC LIMIT ?",
        (fts_match_expression(terms), limit),
    )
    return [(int(r[0]), float(r[1])) for r in rows]


def test_facts_rank_as_fts5_ranks_their_live_versions(
    make_store: Callable[..., elastimem.Elastimem], store_path: Path
) -> None:
    """Facts span two columns (key, value) and keep every version in the FTS table."""
    mem = make_store()
    rng = random.Random(8)
    for i in range(150):
        mem.remember(f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{i % 40}", sentence(rng))
    assert (
        KeywordIndex(FACTS).top(SqliteTx(sqlite3.connect(store_path)), ["garden"], 5) is None
    )  # small
    index = KeywordIndex(SMALL_FACTS)
    for round_ in range(2):
        with snapshot(store_path) as conn:
            live = [r[0] for r in conn.conn.execute(
                "SELECT id FROM facts WHERE invalidated_at IS NULL AND archived = 0")]  # fmt: skip
            for terms in queries(random.Random(round_), 30):
                for limit in (2, 20):
                    ours = index.top(conn, terms, limit, only=live)
                    assert ours is not None
                    assert_same_ranking(ours, fts5_facts_top(conn, terms, limit))
        mem.remember("garden_tomato_1", "garden tomato garden")  # a new version: appended
        mem.forget("garden_tomato_2")


def test_recall_ranks_facts_alike_with_and_without_the_index(
    make_store: Callable[..., elastimem.Elastimem],
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keyword_index, "FACTS", SMALL_FACTS)
    mem = make_store()
    rng = random.Random(12)
    for i in range(120):
        mem.remember(f"{rng.choice(WORDS)}_{i % 30}", sentence(rng))
    # Decay archives facts; the FTS rows stay.
    execute_raw(
        store_path, "UPDATE facts SET archived = 1 WHERE invalidated_at IS NULL AND id % 3 = 0"
    )
    shown = {h.id for h in mem.recall("garden tomato lighthouse", k=50, kinds=["fact"])}
    lite = make_store(tier_override="lite")
    for terms in queries(random.Random(6), 15):
        question = " ".join(terms)
        full = [(h.id, round(h.score, 9)) for h in mem.recall(question, k=8, kinds=["fact"])]
        small = [(h.id, round(h.score, 9)) for h in lite.recall(question, k=8, kinds=["fact"])]
        assert full == small
    assert shown and all(i % 3 != 0 for i in shown)


def test_build_context_orders_notes_alike_with_and_without_the_index(
    make_store: Callable[..., elastimem.Elastimem],
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """build_context ranks notes with the index at any table size (it passes the live
    ids it read), exactly as FTS5 ranks them at LITE."""
    answered: list[int] = []
    real_top = KeywordIndex.top

    def counted(index: KeywordIndex, *args: Any, **kwargs: Any) -> Any:
        found = real_top(index, *args, **kwargs)
        if index.table.name == "facts" and found is not None:
            answered.append(len(found))
        return found

    monkeypatch.setattr(KeywordIndex, "top", counted)
    mem = make_store(tier_override="standard")
    rng = random.Random(14)
    for i in range(90):
        mem.remember(f"{rng.choice(WORDS)}_{i % 40}", sentence(rng))  # versions pile up
    execute_raw(
        store_path, "UPDATE facts SET archived = 1 WHERE invalidated_at IS NULL AND id % 4 = 0"
    )
    lite = make_store(tier_override="lite")
    for terms in queries(random.Random(8), 20):
        question = " ".join(terms)
        before = len(answered)
        ours = mem.build_context(question).fact_ids
        assert len(answered) > before  # the index did answer
        before = len(answered)
        theirs = lite.build_context(question).fact_ids
        assert len(answered) == before  # and is unused at LITE
        shown = min(len(ours), len(theirs))  # the tiers' budgets differ
        assert shown > 0 and ours[:shown] == theirs[:shown]


# -- preloading every posting -------------------------------------------------------------------


def test_a_preloaded_index_ranks_as_fts5_without_reading_terms(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        index.prime(conn)
    assert index.preloaded and not index.wants_preload
    # Every term now comes from the preloaded arrays: reading one from SQL would fail.
    monkeypatch.setattr(SqlitePostingRows, "term_postings", _fail)
    monkeypatch.setattr(SqlitePostingRows, "term_size", _fail)
    with snapshot(store_path) as conn:
        for terms in [*queries(random.Random(11), 40), ["zzzunknown"], ["running", "runs"]]:
            for limit in (5, 50):
                assert_same_ranking(
                    index.top(conn, terms, limit) or [], fts5_top(conn, terms, limit)
                )


def test_rows_appended_after_a_preload_are_scored(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        index.prime(conn)
    monkeypatch.setattr(SqlitePostingRows, "term_postings", _fail)
    monkeypatch.setattr(SqlitePostingRows, "term_size", _fail)
    # Terms cached before the appends and terms first asked after them, a brand-new word too.
    terms = ["garden", "tomato", "quokka"]
    with snapshot(store_path) as conn:
        index.top(conn, ["garden"], 5)
    for round_ in range(4):
        filled.record_turn(f"garden tomato quokka {round_}", "tomato")
        with snapshot(store_path) as conn:
            assert_same_ranking(index.top(conn, terms, 50) or [], fts5_top(conn, terms, 50))
    assert index.preloaded


def prime_while(
    index: KeywordIndex,
    store_path: Path,
    meanwhile: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``index.prime`` with ``meanwhile`` run after it read the postings, before it installs
    them (what a turn or an erase on another thread can do)."""
    real_read = keyword_index._read_all_postings

    def read_then(conn: SqliteTx, corpus: str) -> object:
        preloaded = real_read(conn, corpus)  # from the prime's (older) snapshot
        meanwhile()
        return preloaded

    monkeypatch.setattr(keyword_index, "_read_all_postings", read_then)
    with snapshot(store_path) as conn:
        index.prime(conn)
    monkeypatch.setattr(keyword_index, "_read_all_postings", real_read)


def test_rows_appended_while_the_preload_is_read_are_caught_up(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = KeywordIndex()

    def append() -> None:
        filled.record_turn("walrus walrus garden", "late arrival")
        with snapshot(store_path) as newer:
            index.top(newer, ["berlin"], 5)  # a query appends the new row meanwhile

    prime_while(index, store_path, append, monkeypatch)
    assert index.preloaded
    filled.record_turn("walrus again", "garden")  # and one more after the install
    with snapshot(store_path) as conn:
        for terms in (["walrus"], ["walrus", "garden"], ["arrival"]):
            assert_same_ranking(index.top(conn, terms, 20) or [], fts5_top(conn, terms, 20))


def test_a_preload_over_a_changed_table_is_dropped_and_asked_again(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        session = conn.conn.execute("SELECT min(session_id) FROM chunks").fetchone()[0]

    def erase() -> None:
        filled.erase(session_id=session)
        with snapshot(store_path) as newer:
            index.top(newer, ["garden"], 5)  # sees the erase: the cache is reset

    prime_while(index, store_path, erase, monkeypatch)
    assert not index.preloaded and index.wants_preload
    with snapshot(store_path) as conn:
        assert_same_ranking(index.top(conn, ["garden"], 50) or [], fts5_top(conn, ["garden"], 50))
        index.prime(conn)
    assert index.preloaded


def test_tables_over_the_limit_are_not_preloaded(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_index, "PRELOAD_MAX_POSTINGS", 10)
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        index.prime(conn)
        assert not index.preloaded and not index.wants_preload
        assert_same_ranking(index.top(conn, ["garden"], 50) or [], fts5_top(conn, ["garden"], 50))


def test_too_many_appended_postings_drop_the_preload(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_index, "PRELOAD_MAX_RECENT", 20)
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        index.prime(conn)
    assert index.preloaded
    for i in range(5):
        filled.record_turn(f"garden tomato walrus lighthouse {i}", "berlin paris cafe")
    with snapshot(store_path) as conn:
        assert_same_ranking(index.top(conn, ["walrus"], 50) or [], fts5_top(conn, ["walrus"], 50))
    assert not index.preloaded and index.wants_preload


def test_the_first_recall_has_the_worker_preload_the_store(
    make_store: Callable[..., elastimem.Elastimem], used_indexes: list[KeywordIndex]
) -> None:
    mem = make_store(tier_override="standard")
    for i in range(30):
        mem.record_turn(f"note {i} about the lighthouse keeper", "Noted.")
    assert not used_indexes
    assert mem.recall("lighthouse keeper")
    chunks = [i for i in used_indexes if i.table.name == "chunks"]
    assert chunks and wait_until(lambda: chunks[0].preloaded, 10)
    assert [h.id for h in mem.recall("lighthouse keeper", k=30)] == [
        h.id for h in mem.recall("lighthouse keeper", k=30)
    ]


def _fail(*_args: object) -> None:
    raise AssertionError("postings were read from SQL")


def test_a_stores_two_indexes_tokenise_a_new_term_once(
    filled: elastimem.Elastimem, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = SqliteTokenizer.tokens

    def counted(self: object, texts: list[str]) -> list[list[str]]:
        calls.append(list(texts))
        return real(self, texts)  # type: ignore[arg-type]

    monkeypatch.setattr(SqliteTokenizer, "tokens", counted)
    indexes = keyword_index.KeywordIndexes()
    try:
        with snapshot(store_path) as conn:
            chunks = indexes.chunks.top(conn, ["garden", "walrus"], 5)
            indexes.facts.top(conn, ["garden", "walrus"], 5, any_size=True)
            assert_same_ranking(chunks or [], fts5_top(conn, ["garden", "walrus"], 5))
    finally:
        indexes.close()
    assert calls == [["garden", "walrus"]]


def test_a_term_repeated_throughout_its_rows_is_left_to_fts5(
    make_store: Callable[..., elastimem.Elastimem],
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading postings costs per occurrence, FTS5 per matching row: a word repeated
    thousands of times in a few rows (a pasted log, a 10 MB message) goes to FTS5."""
    monkeypatch.setattr(keyword_index, "READ_INSTANCES_FREELY", 10)
    mem = make_store()
    mem.record_turn("echo " * 30 + "lighthouse", "ok")
    mem.record_turn("echo once near the lighthouse", "ok")
    index = KeywordIndex()
    with snapshot(store_path) as conn:
        assert index.top(conn, ["echo"], 5) is None  # 31 occurrences in 2 rows
        assert index.top(conn, ["lighthouse"], 5) is not None  # 2 in 2: read and cached
        assert index.top(conn, ["lighthouse", "echo"], 5) is None
        assert index.loaded_rows == 2  # nothing was reset
    assert [h.text[:10] for h in mem.recall("echo", k=2)] == ["User: echo"] * 2
