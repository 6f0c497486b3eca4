"""Recall and explain: keyword legs, filters, fusion bookkeeping and hostile queries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elastimem
from elastimem import text as text_module
from elastimem.index.vectors import VectorIndex
from elastimem.memory.fact_vectors import FactVectorCache
from elastimem.retrieval import rank as retrieval
from tests.rows import connect, execute, one


@pytest.fixture
def seeded(mem: elastimem.Elastimem) -> elastimem.Elastimem:
    mem.begin_session(at="2024-01-10")
    mem.record_turn("We flew to Zürich for the conference", "How was it?", at="2024-01-10")
    mem.record_turn("My sister Clara plays the cello", "Lovely instrument", at="2024-01-10")
    mem.begin_session(at="2024-03-02")
    mem.record_turn("I started learning Rust this week", "Great language", at="2024-03-02")
    mem.record_turn("The cello concert was amazing", "Glad you enjoyed it", at="2024-03-02")
    mem.end_session()
    mem.remember("favorite_instrument", "cello")
    return mem


def test_keyword_recall_finds_chunks_and_facts(seeded: elastimem.Elastimem) -> None:
    hits = seeded.recall("cello", k=5)
    kinds = [h.kind for h in hits]
    assert "fact" in kinds and kinds.count("chunk") == 2
    fact = next(h for h in hits if h.kind == "fact")
    assert fact.text == "favorite_instrument: cello" and fact.session_id is None
    assert fact.first_msg_id is None and fact.created_at == fact.date + fact.created_at[10:]
    chunk = next(h for h in hits if h.kind == "chunk")
    assert chunk.first_msg_id is not None and chunk.last_msg_id is not None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_diacritics_fold_both_ways(seeded: elastimem.Elastimem) -> None:
    with_accent = seeded.recall("Zürich", kinds=["chunk"])
    without = seeded.recall("zurich", kinds=["chunk"])
    assert with_accent and without and with_accent[0].id == without[0].id


@pytest.mark.parametrize("fts", [True, False])
def test_a_word_typed_as_stored_finds_itself_whatever_its_script(
    make_store: Any, monkeypatch: pytest.MonkeyPatch, fts: bool
) -> None:
    """Query terms keep the query's own characters: Python's casefold and NFKC fold some
    words differently from the FTS5 tokenizer (ß -> ss, İ -> i + dot, full-width and
    ligatures to ASCII), and the folded term then matched no token of the stored text."""
    if not fts:
        monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    mem = make_store()
    words = ["Hauptstraße", "İstanbul", "ＡＢＣ１２３", "ﬁnal", "Νίκος", "Ærøskøbing", "東京タワー"]
    for word in words:
        mem.record_turn(f"the word of the day is {word} again", "noted")
    mem.remember("street", "Hauptstraße 5")
    for word in words:
        hits = mem.recall(word, kinds=["chunk"])
        assert hits and word in hits[0].text, word
    assert [h.text for h in mem.recall("Hauptstraße", kinds=["fact"])] == ["street: Hauptstraße 5"]
    # A word NFKC changes is searched in both forms: the ASCII spelling finds the text too.
    mem.record_turn("the plain spelling is final", "ok")
    found = {h.text.split("\n")[0] for h in mem.recall("ﬁnal", kinds=["chunk"])}
    assert found == {"User: the word of the day is ﬁnal again", "User: the plain spelling is final"}
    terms = text_module.query_terms("Ｔｏｋｙｏ ﬁnal the")
    assert terms == ["Ｔｏｋｙｏ", "Tokyo", "ﬁnal", "final"]


def test_a_decomposed_query_finds_composed_text_and_back(make_store: Any) -> None:
    """macOS file names and pasted text come decomposed (NFD): the combining accent broke
    the word in two, and "Amélie" matched nothing."""
    import unicodedata

    mem = make_store()
    mem.record_turn("my niece Amélie starts school", "lovely")
    mem.record_turn(unicodedata.normalize("NFD", "we visited Zoë yesterday"), "nice")
    assert mem.recall(unicodedata.normalize("NFD", "Amélie"), kinds=["chunk"])
    assert mem.recall("Zoë", kinds=["chunk"])


def test_stopwords_are_dropped_but_a_stopword_only_query_still_works(
    seeded: elastimem.Elastimem,
) -> None:
    assert text_module.query_terms("what did I say about the cello?") == ["cello"]
    assert text_module.query_terms("the") == ["the"]
    assert seeded.recall("what did I say about Rust")[0].text.startswith("User: I started")


def test_kinds_since_until(seeded: elastimem.Elastimem) -> None:
    assert {h.kind for h in seeded.recall("cello", kinds=["fact"])} == {"fact"}
    assert {h.kind for h in seeded.recall("cello", kinds={"chunk"})} == {"chunk"}
    march = seeded.recall("cello", kinds=["chunk"], since="2024-02-01")
    assert [h.date for h in march] == ["2024-03-02"]
    january = seeded.recall("cello", kinds=["chunk"], until="2024-02-01")
    assert [h.date for h in january] == ["2024-01-10"]


def test_archived_and_invalidated_facts_never_appear(mem: elastimem.Elastimem) -> None:
    mem.remember("snack", "pretzels")
    mem.remember("snack", "almonds")
    assert [h.text for h in mem.recall("pretzels", kinds=["fact"])] == []
    mem.remember("drink", "kombucha", source="auto")
    execute(mem, "UPDATE facts SET archived = 1 WHERE key = 'drink'")
    assert mem.recall("kombucha") == [] and "drink" not in mem.facts()


def test_recall_includes_the_current_session(mem: elastimem.Elastimem) -> None:
    mem.record_turn("the trampoline arrived", "fun")
    assert mem.recall("trampoline")


def test_empty_and_termless_queries_return_nothing(seeded: elastimem.Elastimem) -> None:
    for query in ("", "   ", "!!!", "a", "?", "\x00"):
        assert seeded.recall(query) == []


def test_explain_matches_recall_and_sums(seeded: elastimem.Elastimem) -> None:
    for query in ("cello", "Rust conference", "Zürich sister"):
        result = seeded.explain(query, k=3)
        assert result.hits == seeded.recall(query, k=3)
        assert result.query == query
        for b in result.chunk_breakdowns:
            parts = b.fused_relevance + b.importance_nudge + b.recency_nudge + b.graph_nudge
            assert b.total == pytest.approx(parts, abs=1e-12)
        for f in result.fact_breakdowns:
            parts = f.relevance + f.importance_nudge + f.recency_nudge + f.graph_nudge
            assert f.total == pytest.approx(parts, abs=1e-12)
    assert seeded.explain("").hits == []


def test_like_fallback_ranks_by_terms_matched(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    with elastimem.open(str(tmp_path / "x.db"), disable_builtin_embedder=True) as mem:
        mem.record_turn("blue kayak on the lake", "ok")
        mem.record_turn("blue sky", "ok")
        hits = mem.recall("blue kayak lake")
        assert hits[0].text.startswith("User: blue kayak")
        assert mem.explain("blue kayak lake").chunk_breakdowns[1].fts == pytest.approx(1 / 3)


HOSTILE = [
    '"',
    "'",
    '""',
    "*",
    "-",
    ":",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(a b)",
    "a AND b OR NOT c",
    "col:value",
    "^start",
    "{a b}",
    "(((",
    ")",
    "\\",
    "\x00\x00",
    "\ud800",
    "💥" * 50,
    "'; DROP TABLE chunks; --",
    "SELECT * FROM facts",
    "x" * 1_000_000,
    "é" * 10_000,
    "cello*",
    '"cello"',
    "-cello",
    "cello NEAR rust",
    "%",
    "_",
    "%_%",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(seeded: elastimem.Elastimem, query: str) -> None:
    assert isinstance(seeded.recall(query), list)
    assert isinstance(seeded.explain(query), elastimem.ExplainResult)
    assert seeded.timeline(query).resolved_by in ("exact", "search", "none")
    assert seeded.stats()["chunks"] == 4


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=200))
def test_any_string_is_a_safe_query(seeded: elastimem.Elastimem, query: str) -> None:
    hits = seeded.recall(query)
    assert isinstance(hits, list)
    assert seeded.explain(query).hits == hits


def test_non_string_queries_are_coerced_not_raised(seeded: elastimem.Elastimem) -> None:
    assert seeded.recall(None) == []  # type: ignore[arg-type]
    assert isinstance(seeded.recall(12345), list)  # type: ignore[arg-type]


# Breaks the store by dropping its FTS5 table: on PostgreSQL the tables are shared by every
# user of the session's database (a failing keyword leg on both: test_semantic_recall).
@pytest.mark.sqlite_only
def test_recall_survives_a_broken_store_connection(seeded: elastimem.Elastimem) -> None:
    with connect(seeded) as conn:
        conn.execute("DROP TRIGGER chunks_fts_ai")
        conn.execute("DROP TABLE chunks_fts")
    assert seeded.recall("cello", kinds=["chunk"]) == []  # the leg fails, recall does not
    assert seeded.recall("cello", kinds=["fact"])


def _failing_in_the_database(conn: Any, *args: Any, **kwargs: Any) -> Any:
    """A leg whose statement the database itself rejects (as a timeout or a bad plan would)."""
    conn.conn.execute("SELECT no_such_column FROM chunks")
    raise AssertionError("the statement above fails")


@pytest.mark.parametrize(
    "failing",
    [
        (VectorIndex, "start_search"),  # the chunks' vector leg
        (FactVectorCache, "matrix"),  # the facts' vector leg
    ],
    ids=["chunk-vectors", "fact-vectors"],
)
def test_a_leg_failing_in_the_database_costs_only_that_leg(
    make_store: Any, embedder: Any, monkeypatch: pytest.MonkeyPatch, failing: tuple[type, str]
) -> None:
    """A failed statement aborts the whole transaction on PostgreSQL (every later one in it
    fails too), not on SQLite: the legs that may fail alone must not take the snapshot's
    other reads with them."""
    mem = make_store(embedder=embedder)
    mem.record_turn("My sister Clara plays the cello", "Lovely instrument")
    mem.remember("favorite_instrument", "cello")
    assert mem.drain(10)
    owner, method = failing
    monkeypatch.setattr(
        owner, method, lambda self, conn, *a, **kw: _failing_in_the_database(conn, *a, **kw)
    )
    hits = mem.recall("cello")
    assert sorted(h.kind for h in hits) == ["chunk", "fact"]  # by keyword
    assert mem.explain("cello").hits == hits
    assert mem.build_context("tell me about the cello").sections["user_facts"]


def test_only_adjacent_exchanges_of_one_session_lift_each_other(
    mem: elastimem.Elastimem,
) -> None:
    """The neighbour term (§5.6 refinement): a candidate gains W_NEIGHBOUR × the fused
    relevance of the chunk right before or after it in its session, when that is a
    candidate too; a chunk in between, or a session boundary, breaks the pair."""
    mem.begin_session(at="2024-01-10")
    texts = {
        "first": "The walrus mosaic is drying",
        "gap": "Walrus mosaic tiles arrived",
        "pair": "Grouting the walrus mosaic",
        "other": "A walrus mosaic in the next session",
    }
    for user in (texts["first"], "Nothing related at all", texts["gap"], texts["pair"]):
        mem.record_turn(user, "ok", at="2024-01-10")
    mem.begin_session(at="2024-01-11")
    mem.record_turn(texts["other"], "ok", at="2024-01-11")
    mem.end_session()
    ids = {
        one(mem, "SELECT id FROM chunks WHERE text LIKE '%' || ? || '%'", (user,)): name
        for name, user in texts.items()
    }
    result = mem.explain("walrus mosaic", k=10)
    by_name = {ids[c.chunk_id]: c for c in result.chunk_breakdowns if c.chunk_id in ids}
    assert set(by_name) == {"first", "gap", "pair", "other"}
    weight = elastimem.retrieval.rank.DEFAULT_WEIGHTS.neighbour
    legs = {name: c.fused_relevance - c.neighbour for name, c in by_name.items()}
    assert by_name["first"].neighbour == 0.0  # "gap" is two exchanges away
    assert by_name["other"].neighbour == 0.0  # "pair" ends the previous session
    assert by_name["gap"].neighbour == pytest.approx(weight * legs["pair"])
    assert by_name["pair"].neighbour == pytest.approx(weight * legs["gap"])


def test_neighbours_are_found_across_interleaved_sessions(
    make_store: Any,
) -> None:
    """Two stores writing one file interleave their chunk ids: exchanges of one session
    are still neighbours when only the other session's chunks lie between them."""
    mem, other = make_store(), make_store()
    mem.begin_session(at="2024-01-10")
    other.begin_session(at="2024-01-10")
    mem.record_turn("The walrus mosaic is drying", "ok", at="2024-01-10")
    other.record_turn("Unrelated chatter about tea", "ok", at="2024-01-10")
    mem.record_turn("Walrus mosaic tiles arrived", "ok", at="2024-01-10")
    result = mem.explain("walrus mosaic", k=5)
    walrus = [c for c in result.chunk_breakdowns if c.fused_relevance > 0]
    assert len(walrus) == 2
    weight = elastimem.retrieval.rank.DEFAULT_WEIGHTS.neighbour
    first, second = sorted(walrus, key=lambda c: c.chunk_id)
    assert second.chunk_id - first.chunk_id == 2
    assert first.neighbour == pytest.approx(weight * (second.fused_relevance - second.neighbour))
    assert second.neighbour == pytest.approx(weight * (first.fused_relevance - first.neighbour))


# -- neighbour share, one-character terms (issue 15, point 4) ----------------------------------


class TableEmbedder:
    """Vectors chosen per text: the first known phrase in the text's first line decides."""

    TABLE = {
        "python": [1.0, 0.0, 0.0],
        "sourdough": [0.1, 0.995, 0.0],  # cosine 0.1 to the question: off-topic
        "pip": [0.5, 0.0, 0.866],  # cosine 0.5: about the question too
        "zurich": [0.2, 0.0, 0.98],
    }

    def vector(self, text: str) -> list[float]:
        first = text.casefold().split("\n", 1)[0]
        for phrase, vector in self.TABLE.items():
            if phrase in first:
                return vector
        return [0.0, 0.0, 1.0]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]


def test_an_off_topic_neighbour_does_not_ride_into_the_results(make_store: Any) -> None:
    mem = make_store(embedder=TableEmbedder())
    mem.begin_session()
    mem.record_turn("We flew to Zurich last spring", "Lovely city")
    mem.begin_session()
    mem.record_turn("I bake sourdough every weekend", "Sounds delicious.")
    mem.record_turn("How do I reverse a python list?", "Use slicing: items[::-1].")
    mem.record_turn("And pip keeps failing on my laptop", "Upgrade pip first.")
    mem.end_session()
    assert mem.drain(10)
    explained = mem.explain("reverse a python list", 5)
    texts = [h.text.split("\n")[0] for h in explained.hits]
    assert texts[0] == "User: How do I reverse a python list?"
    by_id = {b.chunk_id: b for b in explained.chunk_breakdowns}
    share = {h.text.split("\n")[0]: by_id[h.id].neighbour for h in explained.hits}
    # The sourdough exchange sits next to the answer but matches nothing of the question:
    # no share (it came second before). The pip one matches a little by meaning: it keeps it.
    assert share.get("User: I bake sourdough every weekend", 0.0) == 0.0
    assert share["User: And pip keeps failing on my laptop"] > 0
    assert texts.index("User: We flew to Zurich last spring") < texts.index(
        "User: I bake sourdough every weekend"
    )


def load_demo(mem: elastimem.Elastimem) -> None:
    from elastimem.cli import load_demo_conversation

    for session in load_demo_conversation()["sessions"]:
        mem.begin_session(session["host_tag"], at=session["started_at"])
        for user, assistant in session["turns"]:
            mem.record_turn(user, assistant)
        mem.end_session()


def test_the_demo_names_the_dog_first_keyword_only(make_store: Any) -> None:
    mem = make_store()
    load_demo(mem)
    assert "named Biscuit" in mem.recall("What is my dog called?", 1)[0].text


@pytest.mark.embedder
def test_the_demo_names_the_dog_first_with_the_builtin_embedder(tmp_path: Any) -> None:
    with elastimem.Elastimem(str(tmp_path / "demo.db")) as mem:
        if not mem.warm_up(120):
            pytest.skip("the built-in embedder is not installed")
        load_demo(mem)
        assert mem.drain(60)
        hits = mem.recall("What is my dog called?", 3)
        assert "named Biscuit" in hits[0].text, [h.text[:60] for h in hits]


@pytest.mark.parametrize("fts", [True, False])
def test_one_character_words_and_numbers_are_searched(
    make_store: Any, monkeypatch: pytest.MonkeyPatch, fts: bool
) -> None:
    if not fts:
        monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    mem = make_store()
    mem.record_turn("Ticket 59: the printer on floor 2 jams", "I'll escalate ticket 59.")
    mem.record_turn("Ticket 7: the printer prints blank pages", "Try a new cartridge.")
    mem.record_turn("We moved the meeting to room 5", "Got it.")
    mem.record_turn("The meeting is in room 12 on Monday", "Noted.")
    mem.record_turn("I still write scripts in python 2", "Consider upgrading.")
    mem.record_turn("Our new service runs on python 3.12", "Nice.")
    assert mem.recall("ticket 7 printer", 1)[0].text.startswith("User: Ticket 7:")
    assert mem.recall("room 5", 1)[0].text.startswith("User: We moved the meeting to room 5")
    assert mem.recall("python 3", 1)[0].text.startswith("User: Our new service")


def test_query_terms_keep_short_terms_that_carry_the_question() -> None:
    terms = text_module.query_terms
    assert terms("ticket 7 printer") == ["ticket", "7", "printer"]
    assert terms("room 5") == ["room", "5"]
    assert terms("vitamin C") == ["vitamin", "C"]
    # Stopwords and what apostrophes leave of contractions are still no terms.
    assert terms("I'm a nurse, it's what I do, don't ask") == ["nurse", "don", "ask"]


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_query_terms_properties(query: str) -> None:
    terms = text_module.query_terms(query)
    assert len(terms) <= text_module.MAX_QUERY_TERMS
    assert len({t.lower() for t in terms}) == len(terms)
    for term in terms:
        assert term and all(ch.isalnum() for ch in term)
        assert term.lower() not in text_module.CONTRACTION_PIECES
    if any(t.lower() not in text_module.STOPWORDS for t in terms):
        assert all(t.lower() not in text_module.STOPWORDS for t in terms)
    # Every digit typed as a word of its own stays a term (within the first 16).
    words = text_module._WORD_RUN.findall(query)
    if len(words) <= text_module.MAX_QUERY_TERMS and all(w.isascii() for w in words):
        for word in words:
            if len(word) == 1 and word.isdigit():
                assert word in terms


def test_a_when_question_prefers_the_exchange_that_says_when(make_store: Any) -> None:
    mem = make_store()
    mem.record_turn("Ana went to Lisbon in May", "Nice.")
    mem.record_turn("Ana showed me her Lisbon photos", "Nice.")
    # Not asking when: the later exchange, as good a match, comes first.
    assert "photos" in mem.recall("Did Ana go to Lisbon?", 2)[0].text
    # Asking when: the exchange that says when comes first (retrieval.TIME_MENTION_BONUS).
    assert "in May" in mem.recall("When did Ana go to Lisbon?", 2)[0].text
    assert "in May" in mem.recall("What year did Ana go to Lisbon?", 2)[0].text
    explained = mem.explain("When did Ana go to Lisbon?", 2)
    by_id = {b.chunk_id: b.time_bonus for b in explained.chunk_breakdowns}
    bonus = {h.text.split(" ")[2]: by_id[h.id] for h in explained.hits}
    assert bonus == {"went": pytest.approx(retrieval.TIME_MENTION_BONUS), "showed": 0.0}


class TopicEmbedder:
    """Vectors by topic word: 'paddle' reads like 'kayak', 'garden' does not."""

    TABLE = {
        "kayak": [0.9, 0.0, 0.436],  # the question reads [0, 0, 1]
        "paddle": [0.95, 0.0, 0.312],
        "garden": [0.0, 0.95, 0.312],  # as close to the question as the paddle
    }

    def vector(self, text: str) -> list[float]:
        first = text.casefold().split("\n", 1)[0]
        for word, vector in self.TABLE.items():
            if word in first:
                return vector
        return [0.0, 0.0, 1.0]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]


def test_feedback_lifts_the_exchange_that_reads_like_the_best_hits(make_store: Any) -> None:
    mem = make_store(embedder=TopicEmbedder())
    for user in (
        "Mia took her kayak out on Saturday",
        "Mia packed the kayak on Saturday",
        "Mia oiled the paddle",
        "Mia tidied the garden",
    ):
        mem.begin_session()  # one session each: no neighbour shares
        mem.record_turn(user, "Nice.")
        mem.end_session()
    assert mem.drain(10)
    question = "What does Mia do on Saturday?"
    texts = [h.text.split("\n")[0] for h in mem.recall(question, 4)]
    assert texts[:2] == [
        "User: Mia packed the kayak on Saturday",
        "User: Mia took her kayak out on Saturday",
    ]
    # The paddle and garden exchanges match the question alike (one word, the same cosine);
    # the paddle one reads like the best hits, so the feedback puts it first (the garden
    # one, recorded later, came first without it: retrieval.FEEDBACK_WEIGHT).
    assert texts[2:] == ["User: Mia oiled the paddle", "User: Mia tidied the garden"]
    # explain() shows the term: the paddle exchange gains, the garden one loses.
    explained = mem.explain(question, 4)
    by_id = {b.chunk_id: b for b in explained.chunk_breakdowns}
    part = {h.text.split(" ")[2]: by_id[h.id] for h in explained.hits}
    assert part["oiled"].feedback > 0 > part["tidied"].feedback
    assert part["oiled"].fused_relevance > part["tidied"].fused_relevance
    assert part["oiled"].fts == part["tidied"].fts and part["oiled"].vector == part["tidied"].vector
