"""A small store's vector leg on each chunk's own text (issue 26, retrieval/own_text.py).

A chunk's stored vector embeds the turn before it as context, which lets a short exchange
drown in its neighbour's words on a person's first small store. A pool that is not full is
re-scored by the cosine of each chunk's own text, embedded once per text and kept in
memory; a full pool (every large store) costs nothing more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import elastimem
from elastimem.retrieval import own_text
from elastimem.retrieval.own_text import user_clauses
from tests.conftest import HashEmbedder, wait_until
from tests.retrieval.builtin_stores import builtin_store

TERSE_TURNS = [
    ("postgres 15 on the prod box, 64GB ram", "Noted."),
    ("deploys via github actions, k8s on GKE", "Okay."),
    ("main service is Go, workers are python 3.12", "Got it."),
    ("oncall rotation: every 3rd week", "Noted."),
    ("hate YAML. prefer TOML for config", "Understood."),
    ("editor: neovim w/ lazy.nvim", "Noted."),
    ("team lead = Farid", "Ok."),
    ("tests take 14 min in CI, want < 5", "That's a reasonable target."),
    ("laptop: thinkpad x1, arch linux", "Noted."),
]


@pytest.fixture(scope="module")
def terse_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[elastimem.Elastimem]:
    with builtin_store(tmp_path_factory.mktemp("terse") / "terse.db", TERSE_TURNS) as mem:
        yield mem


@pytest.mark.embedder
@pytest.mark.parametrize(
    "question", ["What computer do I have?", "Which operating system is on my machine?"]
)
def test_a_short_exchange_is_not_drowned_by_the_turn_before_it(
    terse_store: elastimem.Elastimem, question: str
) -> None:
    # On main the "prod box" exchange came first: the laptop's vector carried the CI turn
    # before it, which said more than the eight words of its own.
    assert "thinkpad" in terse_store.recall(question, k=3)[0].text
    assert "thinkpad" in terse_store.explain(question, k=3).hits[0].text  # one query path


def _passages(embedder: HashEmbedder) -> list[str]:
    return [text for call in embedder.calls for text in call]


def test_a_small_store_embeds_each_chunks_own_text_once(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    embedder = HashEmbedder()
    mem = make_store(embedder=embedder, query_embedder=embedder.vector)
    for user, assistant in TERSE_TURNS[:4]:
        mem.record_turn(user, assistant)
    assert mem.drain(timeout=10)
    embedder.calls.clear()
    # the first query's pool, each chunk by its own text (without the turn before it),
    # except the session's first: its stored vector is of its own text already; and the
    # clauses of every chunk's user words
    mem.recall("what database do we run?", k=3)
    first = _passages(embedder)
    embedder.calls.clear()
    stored = {hit.text for hit in mem.recall("postgres github python oncall", k=10)}
    assert len(stored) == 4
    clauses = [c for text in stored for c in user_clauses(text)]
    assert "postgres 15 on the prod box, 64GB ram" in clauses  # "64GB ram" alone is too short
    assert "workers are python 3.12" in clauses  # not cut inside "3.12"
    own = [t for t in stored if "postgres 15" not in t]
    assert sorted(first) == sorted(dict.fromkeys(own + clauses))
    mem.recall("which language is the main service?", k=3)
    assert _passages(embedder) == []  # then from memory
    mem.record_turn(*TERSE_TURNS[8])
    assert mem.drain(timeout=10)
    embedder.calls.clear()
    hits = mem.recall("what laptop do I have?", k=3)
    (laptop,) = [hit.text for hit in hits if "thinkpad" in hit.text]
    assert _passages(embedder) == [laptop, *user_clauses(laptop)]  # only the new chunk's


def test_user_clauses_are_the_users_words_cut_at_clause_breaks() -> None:
    text = (
        "User: I work night shifts at the hospital as a nurse, so my sleep is a mess\n"
        "Assistant: Night shifts are hard, and so is sleep."
    )
    assert user_clauses(text) == [
        "I work night shifts at the hospital as a nurse",
        "my sleep is a mess",
    ]
    assert user_clauses("User: ok\nAssistant: Okay.") == ["ok"]  # short words kept whole
    assert user_clauses("Assistant: only the reply of a long exchange") == []
    assert user_clauses("User: laptop: thinkpad x1, arch linux") == [
        "laptop: thinkpad x1, arch linux"  # short pieces join a clause
    ]
    assert user_clauses("User: oncall rotation: every 3rd week") == [
        "oncall rotation: every 3rd week"
    ]
    many = "User: " + ", ".join(f"clause number {n} here" for n in range(50))
    assert len(user_clauses(many)) == 6  # bounded per exchange


ECHOES = [
    (
        [
            ("the twins are called Ava and Leo, both turned six in May", "Ava and Leo, lovely."),
            ("we bought a bigger car, a grey minivan", "Minivans are handy with kids."),
            ("ok", "Okay."),
        ],
        "What are my kids called?",
        "Ava and Leo",
    ),
    (
        [
            ("I run a little florist shop on Mill Street", "A florist, how lovely."),
            ("want to sell bouquets online too", "Online sales could grow the business."),
            ("thanks", "Anytime."),
        ],
        "What kind of business do I have?",
        "florist",
    ),
]


@pytest.mark.embedder
@pytest.mark.parametrize(("turns", "question", "answer"), ECHOES)
def test_the_users_words_outweigh_the_assistants_echo(
    tmp_path: Path, turns: list[tuple[str, str]], question: str, answer: str
) -> None:
    # The assistant's reply to another turn uses the question's word ("kids", "business");
    # on the whole exchanges' cosines that turn came first. Half of a small pool's cosine
    # is the best clause of the user's own words.
    with builtin_store(tmp_path / "echo.db", turns) as mem:
        assert answer in mem.recall(question, k=3)[0].text


def test_a_full_pool_embeds_nothing_at_query_time(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    embedder = HashEmbedder()
    mem = make_store(embedder=embedder, query_embedder=embedder.vector)
    for n in range(60):  # more chunks than the vector leg's pool (rank.VECTOR_CANDIDATES)
        mem.record_turn(f"note {n}: the server rack {n} runs postgres", "Noted.")
    assert mem.drain(timeout=30)
    embedder.calls.clear()
    assert mem.recall("which server runs postgres?", k=3)
    assert embedder.calls == []


def test_a_failing_embedder_keeps_the_stored_vectors(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    embedder = HashEmbedder()
    working = {"on": True}

    def embed(texts: list[str]) -> list[list[float]]:
        if not working["on"]:
            raise RuntimeError("the embedder is down")
        return embedder(texts)

    mem = make_store(embedder=embed, query_embedder=embedder.vector)
    for user, assistant in TERSE_TURNS[:4]:
        mem.record_turn(user, assistant)
    assert mem.drain(timeout=10)
    working["on"] = False
    hits = mem.explain("postgres prod box", k=3)
    assert hits.vector_leg == "used"
    assert "postgres" in hits.hits[0].text


def test_own_texts_embedded_after_the_query_gave_up_are_kept_for_the_next(
    make_store: Callable[..., elastimem.Elastimem], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow first query (a long store on a busy machine) used to throw its work away at the
    # timeout, so every later query timed out again and went without its vector leg.
    embedder = HashEmbedder()
    slow = threading.Event()

    def embed(texts: list[str]) -> list[list[float]]:
        if slow.is_set():
            time.sleep(0.6)
        return embedder(texts)

    mem = make_store(embedder=embed, query_embedder=embedder.vector)
    for user, assistant in TERSE_TURNS[:4]:
        mem.record_turn(user, assistant)
    assert mem.drain(timeout=10)
    embedder.calls.clear()
    monkeypatch.setattr(own_text, "OWN_TEXT_TIMEOUT_SECONDS", 0.1)
    slow.set()
    mem.recall("what database do we run?", k=3)  # gives up waiting for the own texts
    slow.clear()
    assert wait_until(lambda: bool(embedder.calls), 5)  # the late call has embedded them
    embedder.calls.clear()
    # While that call runs, queries go without the vector leg; once it has returned, the
    # next query finds the own texts it embedded and embeds nothing.
    question = "which language is the main service?"
    assert wait_until(lambda: mem.explain(question, k=3).vector_leg == "used", 5)
    assert _passages(embedder) == []
