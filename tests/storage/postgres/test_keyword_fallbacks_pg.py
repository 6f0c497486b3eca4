"""PostgreSQL's keyword fallbacks (``tx.postings.chunk_matches`` / ``fact_matches`` /
``chunk_term_counts`` / ``fact_term_counts``) score as SQLite's do, on the same rows:
FTS5's bm25 to the bit (one-token terms, phrases, repeated stems, filters) and the folded
substring counts of the LIKE legs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastimem import storage
from tests import pg_server
from tests.storage.contract.seed import fact, session, turn

psycopg = pytest.importorskip("psycopg", reason=pg_server.NO_DRIVER)

EXCHANGES = [
    ("The runners were running, RUNNING!", "2024-01-01T10:00:00.000000Z"),
    ("Café au lait, café; naïve résumé", "2024-01-02T10:00:00.000000Z"),
    ("garden tomato garden walrus", "2024-02-01T10:00:00.000000Z"),
    ("a a a b walrus garden", "2024-02-02T10:00:00.000000Z"),
    ("Zebra apple Ünïcode ångström zebra in room 5", "2024-03-01T10:00:00.000000Z"),
    ("the garden walrus ate the garden tomato", "2024-03-02T10:00:00.000000Z"),
    ("room 59 of 2025, with a cello", "2024-04-01T10:00:00.000000Z"),
]
FACTS = [
    ("favourite_drink", "Cafés au lait, running", "2024-01-01T00:00:00.000000Z"),
    ("pet", "a walrus named Zebra", "2024-02-01T00:00:00.000000Z"),
    ("pet", "a garden walrus named Zebra", "2024-03-01T00:00:00.000000Z"),
    ("hot_drink", "cafés daily", "2024-04-01T00:00:00.000000Z"),
]
# One-token terms, a phrase (several tokens), a phrase across a fact's key and value, a
# repeated stem, overlapping phrase hits, a term that makes no token, none found.
QUERIES = [
    ["running"],
    ["garden", "walrus"],
    ["garden walrus"],
    ["café", "zebra"],
    ["run", "running"],
    ["a a"],
    ["drink cafés"],
    ["lait running"],
    ["!!!", "tomato"],
    ["xylophone"],
]
LIKE_QUERIES = [["CAFÉ"], ["5"], ["room", "5"], ["favourite drink"], ["walrus", "zebra"], ["zz"]]


def _fill(database: Any) -> tuple[list[int], list[int], list[int]]:
    """Two sessions of EXCHANGES (the last two in the second) and the FACTS: (sessions,
    chunk ids, fact ids) in writing order."""
    with database.atomic() as tx:
        sessions = [session(tx), session(tx)]
        chunks = [
            turn(tx, sessions[n >= len(EXCHANGES) - 2], text, "fine", at=at).chunk_ids[0]
            for n, (text, at) in enumerate(EXCHANGES)
        ]
        facts = [fact(tx, key, value, at=at) for key, value, at in FACTS]
    return sessions, chunks, facts


def _results(database: Any) -> dict[str, Any]:
    """Every fallback's answer to every query, ids as positions in writing order."""
    sessions, chunks, facts = _fill(database)
    at_chunk = {row_id: n for n, row_id in enumerate(chunks)}
    at_fact = {row_id: n for n, row_id in enumerate(facts)}
    out: dict[str, Any] = {}
    with database.read() as tx:
        postings = tx.postings
        for q in QUERIES:
            key = " | ".join(q)
            for name, found in (
                ("chunks", postings.chunk_matches(q, 10)),
                ("chunks top 2", postings.chunk_matches(q, 2)),
                ("chunks outside", postings.chunk_matches(q, 10, exclude_session=sessions[0])),
                (
                    "chunks in window",
                    postings.chunk_matches(
                        q, 10, since="2024-01-02T00:00:00.000000Z", until="2024-03-02"
                    ),
                ),
            ):
                out[f"{name}: {key}"] = [(at_chunk[i], s) for i, s in found or []]
            for name, found in (
                ("facts", postings.fact_matches(q, 10)),
                ("fact versions", postings.fact_matches(q, 10, live_only=False)),
                ("facts since", postings.fact_matches(q, 10, since="2024-02-15")),
            ):
                out[f"{name}: {key}"] = [(at_fact[i], s) for i, s in found or []]
        for q in LIKE_QUERIES:
            key = " | ".join(q)
            for name, found in (
                ("chunk counts", postings.chunk_term_counts(q, 10)),
                ("chunk counts top 1", postings.chunk_term_counts(q, 1)),
                (
                    "chunk counts outside",
                    postings.chunk_term_counts(q, 10, exclude_session=sessions[1]),
                ),
                ("chunk counts until", postings.chunk_term_counts(q, 10, until="2024-02-02")),
            ):
                out[f"{name}: {key}"] = [(at_chunk[i], s) for i, s in found or []]
            for name, found in (
                ("fact counts", postings.fact_term_counts(q, 10)),
                ("fact version counts", postings.fact_term_counts(q, 10, live_only=False)),
                ("fact counts until", postings.fact_term_counts(q, 10, until="2024-03-01")),
            ):
                out[f"{name}: {key}"] = [(at_fact[i], s) for i, s in found or []]
    return out


def test_the_keyword_fallbacks_score_as_sqlites(open_pg: Any, tmp_path: Path) -> None:
    sqlite_db = storage.open_database(tmp_path / "same.db")
    try:
        want = _results(sqlite_db)
    finally:
        sqlite_db.close()
    got = _results(open_pg())
    assert got == want  # the very floats, not only the order
    # The cases the comparison is about are there: a phrase matches (overlapping hits count
    # twice), one across a fact's key and value does not, a repeated stem counts twice.
    assert want["chunks: garden walrus"] and want["chunks: a a"]
    assert want["facts: drink cafés"] == [] and want["facts: lait running"]
    assert want["chunks: run | running"][0][1] > want["chunks: running"][0][1]
    assert want["chunks: xylophone"] == [] and want["chunk counts: zz"] == []
    assert [n for n, _ in want["chunk counts: 5"]] == [4]  # "5" as a word: not "59"/"2025"


def test_a_users_keyword_fallbacks_see_only_its_rows(open_pg: Any) -> None:
    mine, theirs = open_pg(), open_pg()
    _fill(theirs)
    with mine.atomic() as tx:
        own = turn(tx, session(tx), "a walrus of my own").chunk_ids[0]
        own_fact = fact(tx, "pet", "my walrus")
    with mine.read() as tx:
        assert [i for i, _ in tx.postings.chunk_matches(["walrus"], 10) or []] == [own]
        assert [i for i, _ in tx.postings.chunk_term_counts(["walrus"], 10) or []] == [own]
        assert [i for i, _ in tx.postings.fact_matches(["walrus"], 10) or []] == [own_fact]
        assert [i for i, _ in tx.postings.fact_term_counts(["walrus"], 10) or []] == [own_fact]
