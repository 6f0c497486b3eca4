"""Contract: ``tx.postings`` (storage.postings.PostingRows) on every backend.

Tokens are never spelled out: the backend's own tokenizer says what a word becomes, and
the postings are checked against it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from elastimem.storage.postings import CORPORA, ERASE_GEN_KEY
from tests.storage import seed

TEXTS = [
    "garden tomato garden",
    "lighthouse keeper",
    "tomato soup with garden herbs garden garden",
    "walrus",
]


def tokens_of(database: Any, texts: list[str]) -> list[list[str]]:
    with database.read() as tx:
        tokenizer = tx.postings.tokenizer()
        try:
            return tokenizer.tokens(texts)
        finally:
            tokenizer.close()


@pytest.fixture
def chunks(backend_database: Any) -> list[int]:
    return seed.add_chunks(backend_database, seed.add_session(backend_database), TEXTS)


def test_an_empty_corpus_has_no_rows_and_no_postings(backend_database: Any) -> None:
    with backend_database.read() as tx:
        for corpus in CORPORA:
            state = tx.postings.state(corpus)
            assert (state.rows, state.tokens) == (0, 0)
            ids, lengths = tx.postings.doc_lengths(corpus)
            assert ids.size == 0 and lengths.size == 0
            assert tx.postings.docs_after(corpus, 0, 10) == []
            assert tx.postings.term_size(corpus, "garden") is None
            ids, freqs = tx.postings.term_postings(corpus, "garden")
            assert ids.size == 0 and freqs.size == 0
            assert list(tx.postings.all_postings(corpus, 8)) == []


def test_the_tokenizer_tokenises_texts_and_documents(backend_database: Any) -> None:
    with backend_database.read() as tx:
        tokenizer = tx.postings.tokenizer()
    try:
        tokens = tokenizer.tokens(["Garden gardens", "", "walrus"])
        assert len(tokens) == 3 and tokens[1] == []
        assert len(tokens[0]) == 2 and len(tokens[2]) == 1
        docs = tokenizer.documents([(7, "garden tomato garden"), (9, "walrus")])
        garden, tomato, _ = tokenizer.tokens(["garden tomato garden"])[0]
        assert docs == [(7, {garden: 2, tomato: 1}, 3), (9, {tokens[2][0]: 1}, 1)]
        # Reused: each call sees only its own texts.
        assert tokenizer.tokens(["walrus"]) == [tokens[2]]
    finally:
        tokenizer.close()


def test_state_counts_rows_and_tokens_and_marks_every_change(
    backend_database: Any, chunks: list[int]
) -> None:
    total = sum(len(t) for t in tokens_of(backend_database, TEXTS))
    with backend_database.read() as tx:
        first = tx.postings.state("chunks")
        assert (first.rows, first.tokens) == (len(TEXTS), total)
        assert tx.postings.state("chunks") == first  # nothing changed
    seed.add_chunks(backend_database, seed.add_session(backend_database), ["walrus"])
    with backend_database.read() as tx:
        second = tx.postings.state("chunks")
    assert (second.rows, second.tokens) == (len(TEXTS) + 1, total + 1)
    assert second.version != first.version
    # A delete and an add of the same length leave the counts as they were, not the marker.
    seed.delete_chunks(backend_database, [chunks[-1]])
    seed.add_chunks(backend_database, seed.add_session(backend_database), ["keeper"])
    with backend_database.read() as tx:
        third = tx.postings.state("chunks")
    assert (third.rows, third.tokens) == (second.rows, second.tokens)
    assert third.version != second.version and third.erase_gen == second.erase_gen
    with backend_database.atomic() as tx:
        tx.meta.bump(ERASE_GEN_KEY)
    with backend_database.read() as tx:
        assert tx.postings.state("chunks").erase_gen != third.erase_gen


def test_doc_lengths_and_docs_after(backend_database: Any, chunks: list[int]) -> None:
    lengths = [len(t) for t in tokens_of(backend_database, TEXTS)]
    with backend_database.read() as tx:
        ids, found = tx.postings.doc_lengths("chunks")
        assert ids.tolist() == chunks and found.tolist() == lengths
        assert tx.postings.docs_after("chunks", 0, 10) == list(zip(chunks, TEXTS))
        assert tx.postings.docs_after("chunks", chunks[0], 2) == list(zip(chunks[1:3], TEXTS[1:3]))
        assert tx.postings.docs_after("chunks", chunks[-1], 10) == []


def test_a_terms_postings_and_size(backend_database: Any, chunks: list[int]) -> None:
    tokenized = tokens_of(backend_database, TEXTS)
    garden = tokens_of(backend_database, ["garden"])[0][0]
    expected = [(cid, toks.count(garden)) for cid, toks in zip(chunks, tokenized) if garden in toks]
    with backend_database.read() as tx:
        ids, freqs = tx.postings.term_postings("chunks", garden)
        assert ids.dtype == np.int64 and freqs.dtype == np.float64
        assert list(zip(ids.tolist(), freqs.tolist())) == expected
        assert tx.postings.term_size("chunks", garden) == (
            len(expected),
            sum(f for _, f in expected),
        )
        assert tx.postings.term_size("chunks", "zzzunknown") is None


def test_all_postings_come_by_term_then_id_and_match_each_term(
    backend_database: Any, chunks: list[int]
) -> None:
    tokenized = tokens_of(backend_database, TEXTS)
    expected: dict[str, list[tuple[int, int]]] = {}
    for cid, toks in zip(chunks, tokenized):
        for token, n in sorted(Counter(toks).items()):
            expected.setdefault(token, []).append((cid, n))
    with backend_database.read() as tx:
        rows: list[tuple[str, int, int]] = []
        for terms, ids, freqs in tx.postings.all_postings("chunks", 3):
            assert len(terms) == ids.size == freqs.size <= 3
            rows.extend(zip(terms, ids.tolist(), freqs.tolist()))
        for token in expected:
            ids, freqs = tx.postings.term_postings("chunks", token)
            assert list(zip(ids.tolist(), freqs.astype(int).tolist())) == expected[token]
    order = [t for t, _, _ in rows]
    assert order == sorted(order)  # one run per term
    grouped: dict[str, list[tuple[int, int]]] = {}
    for term, cid, n in rows:
        grouped.setdefault(term, []).append((cid, n))
    assert grouped == expected


def test_facts_are_documents_of_key_and_value(backend_database: Any) -> None:
    pairs = [("garden_plan", "tomato garden"), ("pet", "walrus")]
    ids = seed.add_facts(backend_database, pairs)
    texts = [f"{k} {v}" for k, v in pairs]
    tokenized = tokens_of(backend_database, texts)
    with backend_database.read() as tx:
        state = tx.postings.state("facts")
        assert (state.rows, state.tokens) == (2, sum(len(t) for t in tokenized))
        assert tx.postings.docs_after("facts", 0, 10) == list(zip(ids, texts))
        found_ids, lengths = tx.postings.doc_lengths("facts")
        assert found_ids.tolist() == ids and lengths.tolist() == [len(t) for t in tokenized]
        walrus = tokenized[1][-1]
        found, freqs = tx.postings.term_postings("facts", walrus)
        assert found.tolist() == [ids[1]] and freqs.tolist() == [1.0]
