"""Hybrid retrieval: keyword, vector and graph legs fused on one scale (SPEC §5.6).

Each *leg* proposes candidates with a normalised score in [0, 1]: chunk FTS5 BM25 (or a LIKE
scan when FTS5 is missing), chunk vectors (cosine, min-max normalised over the top 50), the
graph (chunks linked to entities reached from the query), and fact FTS/LIKE. Filters (the
excluded session, ``since``/``until``, live unarchived facts) apply inside every leg, before
its candidate cut. Then::

    relevance = (W_FTS·s_fts + W_VEC·s_vec) / Σ W of the legs that ran
    total     = relevance + W_IMP·(importance − 0.5) + W_REC·r(age, h) + W_GRAPH·g

Candidates with ``relevance > 0`` or ``g > 0`` are ranked by ``−total``; ties put facts first,
then the higher id.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from .clock import age_days, recency, utcnow
from .text import em_fold, fts_match_expression
from .values import (
    ChunkScoreBreakdown,
    ExplainResult,
    FactScoreBreakdown,
    GraphTraversalStep,
    Hit,
    TimelineResult,
)

__all__ = [
    "ChunkScoreBreakdown",
    "ExplainResult",
    "FactScoreBreakdown",
    "Filters",
    "GraphTraversalStep",
    "Hit",
    "TimelineResult",
    "Weights",
    "rank",
]

logger = logging.getLogger("elastimem")

FTS_CANDIDATES = 50
VECTOR_CANDIDATES = 50
FACT_CANDIDATES = 20
GRAPH_CANDIDATES = 10
LIKE_TERMS = 8
EXPLAIN_FACTS = 20


@dataclass(frozen=True)
class Weights:
    """Fusion weights. The defaults are the spec's starting point; see DEFAULT_WEIGHTS."""

    fts: float = 0.55
    vec: float = 0.45
    imp: float = 0.10
    rec: float = 0.08
    graph: float = 0.15


DEFAULT_WEIGHTS = Weights()


@dataclass(frozen=True)
class Filters:
    exclude_session: int | None = None
    since: str | None = None
    until: str | None = None

    def chunk_sql(self, alias: str = "c") -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        if self.exclude_session is not None:
            clauses.append(f"{alias}.session_id <> ?")
            params.append(self.exclude_session)
        if self.since is not None:
            clauses.append(f"{alias}.created_at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append(f"{alias}.created_at < ?")
            params.append(self.until)
        return "".join(f" AND {c}" for c in clauses), params

    def fact_sql(self, alias: str = "f") -> tuple[str, list[object]]:
        sql = f" AND {alias}.invalidated_at IS NULL AND {alias}.archived = 0"
        params: list[object] = []
        if self.since is not None:
            sql += f" AND {alias}.valid_from >= ?"
            params.append(self.since)
        if self.until is not None:
            sql += f" AND {alias}.valid_from < ?"
            params.append(self.until)
        return sql, params


# (conn, filters, n) -> [(chunk_id, cosine)], best first, filters applied before the cut.
VectorLeg = Callable[[sqlite3.Connection, Filters, int], list[tuple[int, float]]]


class GraphSignal(Protocol):
    """What the ranking needs from the graph expansion of one query (§5.7)."""

    def chunk_scores(
        self, conn: sqlite3.Connection, chunk_ids: list[int]
    ) -> dict[int, tuple[float, tuple[str, ...]]]: ...

    def extra_chunks(
        self, conn: sqlite3.Connection, filters: Filters, limit: int
    ) -> list[tuple[int, float]]: ...

    def fact_score(self, key: str, value: str) -> tuple[float, tuple[str, ...]]: ...

    def fact_candidates(
        self, conn: sqlite3.Connection, filters: Filters
    ) -> dict[int, tuple[float, tuple[str, ...]]]: ...

    def traversal(self) -> list[GraphTraversalStep]: ...


@dataclass
class _Candidate:
    kind: str
    id: int
    fts: float = 0.0
    vector: float = 0.0
    relevance: float = 0.0
    g: float = 0.0
    names: tuple[str, ...] = ()
    importance_nudge: float = 0.0
    recency_nudge: float = 0.0
    graph_nudge: float = 0.0
    total: float = 0.0
    importance: float = 0.5
    text: str = ""
    created_at: str = ""
    session_id: int | None = None
    first_msg_id: int | None = None
    last_msg_id: int | None = None


@dataclass
class Ranking:
    hits: list[Hit] = field(default_factory=list)
    chunks: list[_Candidate] = field(default_factory=list)
    facts: list[_Candidate] = field(default_factory=list)

    def explain(self, query: str, graph_hops: int, k: int,
                traversal: list[GraphTraversalStep]) -> ExplainResult:  # fmt: skip
        return ExplainResult(
            query=query,
            graph_hops=graph_hops,
            chunk_breakdowns=[_chunk_breakdown(c) for c in self.chunks[:k]],
            fact_breakdowns=[_fact_breakdown(c) for c in self.facts[:EXPLAIN_FACTS]],
            graph_traversal=traversal,
            hits=list(self.hits),
        )


def _chunk_breakdown(c: _Candidate) -> ChunkScoreBreakdown:
    return ChunkScoreBreakdown(
        chunk_id=c.id,
        fts=c.fts,
        vector=c.vector,
        fused_relevance=c.relevance,
        importance_nudge=c.importance_nudge,
        recency_nudge=c.recency_nudge,
        graph_nudge=c.graph_nudge,
        graph_matched_names=c.names,
        total=c.total,
    )


def _fact_breakdown(c: _Candidate) -> FactScoreBreakdown:
    return FactScoreBreakdown(
        fact_id=c.id,
        relevance=c.relevance,
        importance=c.importance,
        recency_nudge=c.recency_nudge,
        graph_nudge=c.graph_nudge,
        graph_matched_names=c.names,
        total=c.total,
        importance_nudge=c.importance_nudge,
    )


# -- legs -------------------------------------------------------------------------------------


def _normalise_bm25(rows: list[tuple[int, float]]) -> dict[int, float]:
    if not rows:
        return {}
    best = max(score for _, score in rows)
    if best <= 0:
        return {cid: 1.0 for cid, _ in rows}
    return {cid: max(0.0, score / best) for cid, score in rows}


def _normalise_counts(rows: list[tuple[int, float]]) -> dict[int, float]:
    if not rows:
        return {}
    best = max(score for _, score in rows) or 1.0
    return {cid: score / best for cid, score in rows}


def chunk_fts_leg(
    conn: sqlite3.Connection, terms: list[str], filters: Filters, limit: int = FTS_CANDIDATES
) -> dict[int, float]:
    where, params = filters.chunk_sql("c")
    try:
        rows = conn.execute(
            "SELECT c.id, -bm25(chunks_fts) AS s FROM chunks_fts "
            "JOIN chunks c ON c.id = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ?{where} ORDER BY s DESC, c.id DESC LIMIT ?",
            (fts_match_expression(terms), *params, limit),
        ).fetchall()
    except sqlite3.Error as exc:
        logger.debug("chunk FTS leg failed: %s", exc)
        return {}
    return _normalise_bm25([(int(r[0]), float(r[1])) for r in rows])


def _like_clause(expr: str, terms: list[str]) -> tuple[str, list[object]]:
    folded = [em_fold(t) for t in terms[:LIKE_TERMS]]
    parts = [f"(instr({expr}, ?) > 0)" for _ in folded]
    return " + ".join(parts), list(folded)


def chunk_like_leg(
    conn: sqlite3.Connection, terms: list[str], filters: Filters, limit: int = FTS_CANDIDATES
) -> dict[int, float]:
    """Keyword fallback without FTS5: count folded terms contained in each chunk."""
    where, params = filters.chunk_sql("c")
    matched, like_params = _like_clause("em_fold(c.text)", terms)
    try:
        rows = conn.execute(
            f"SELECT id, m FROM (SELECT c.id AS id, ({matched}) AS m FROM chunks c "
            f"WHERE 1 = 1{where}) WHERE m > 0 ORDER BY m DESC, id DESC LIMIT ?",
            (*like_params, *params, limit),
        ).fetchall()
    except sqlite3.Error as exc:
        logger.debug("chunk LIKE leg failed: %s", exc)
        return {}
    return _normalise_counts([(int(r[0]), float(r[1])) for r in rows])


def fact_keyword_leg(
    conn: sqlite3.Connection,
    terms: list[str],
    filters: Filters,
    fts_enabled: bool,
    *,
    live_only: bool = True,
    limit: int = FACT_CANDIDATES,
) -> dict[int, float]:
    where, params = filters.fact_sql("f") if live_only else ("", [])
    try:
        if fts_enabled:
            rows = conn.execute(
                "SELECT f.id, -bm25(facts_fts) AS s FROM facts_fts "
                "JOIN facts f ON f.id = facts_fts.rowid "
                f"WHERE facts_fts MATCH ?{where} ORDER BY s DESC, f.id DESC LIMIT ?",
                (fts_match_expression(terms), *params, limit),
            ).fetchall()
            return _normalise_bm25([(int(r[0]), float(r[1])) for r in rows])
        # Keys are snake_case: fold '_' to a space so "favorite color" finds favorite_color.
        matched, like_params = _like_clause(
            "em_fold(replace(f.key, '_', ' ') || ' ' || f.value)", terms
        )
        rows = conn.execute(
            f"SELECT id, m FROM (SELECT f.id AS id, ({matched}) AS m FROM facts f "
            f"WHERE 1 = 1{where}) WHERE m > 0 ORDER BY m DESC, id DESC LIMIT ?",
            (*like_params, *params, limit),
        ).fetchall()
        return _normalise_counts([(int(r[0]), float(r[1])) for r in rows])
    except sqlite3.Error as exc:
        logger.debug("fact keyword leg failed: %s", exc)
        return {}


def normalise_vector_scores(rows: list[tuple[int, float]], pool: int) -> dict[int, float]:
    """Min-max over the top ``pool`` cosines, floored at the pool's last score (or 0)."""
    if not rows:
        return {}
    c_max = max(score for _, score in rows)
    if c_max <= 0:
        return {}
    c_low = rows[pool - 1][1] if len(rows) >= pool else 0.0
    if c_max == c_low:
        return {cid: 1.0 for cid, _ in rows}
    span = c_max - c_low
    return {cid: min(1.0, max(0.0, (score - c_low) / span)) for cid, score in rows}


# -- ranking ----------------------------------------------------------------------------------


def rank(
    conn: sqlite3.Connection,
    terms: list[str],
    *,
    k: int,
    kinds: frozenset[str],
    filters: Filters,
    fts_enabled: bool,
    chunk_half_life: float,
    fact_half_life: float,
    vector_leg: VectorLeg | None = None,
    graph: GraphSignal | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    now: datetime | None = None,
) -> Ranking:
    """Run the legs, fuse, and rank. ``conn`` must be inside one read snapshot."""
    # Ages are measured from the current minute, not the current microsecond, so that two
    # calls a moment apart (explain right after recall) score identically.
    now = (now or utcnow()).replace(second=0, microsecond=0)
    candidates: list[_Candidate] = []
    chunks: list[_Candidate] = []
    facts: list[_Candidate] = []
    if "chunk" in kinds:
        chunks = _rank_chunks(conn, terms, filters, fts_enabled, chunk_half_life,
                              vector_leg, graph, weights, now)  # fmt: skip
        candidates.extend(chunks)
    if "fact" in kinds:
        facts = _rank_facts(conn, terms, filters, fts_enabled, fact_half_life, graph, weights, now)
        candidates.extend(facts)
    candidates.sort(key=lambda c: (-c.total, 0 if c.kind == "fact" else 1, -c.id))
    hits = [_to_hit(c) for c in candidates[:k]]
    chunks.sort(key=lambda c: (-c.total, -c.id))
    facts.sort(key=lambda c: (-c.total, -c.id))
    return Ranking(hits, chunks, facts)


def _rank_chunks(
    conn: sqlite3.Connection,
    terms: list[str],
    filters: Filters,
    fts_enabled: bool,
    half_life: float,
    vector_leg: VectorLeg | None,
    graph: GraphSignal | None,
    weights: Weights,
    now: datetime,
) -> list[_Candidate]:
    if fts_enabled:
        keyword = chunk_fts_leg(conn, terms, filters)
    else:
        keyword = chunk_like_leg(conn, terms, filters)
    vector: dict[int, float] = {}
    weight_sum = weights.fts
    if vector_leg is not None:
        weight_sum += weights.vec
        try:
            vector = normalise_vector_scores(vector_leg(conn, filters, VECTOR_CANDIDATES),
                                             VECTOR_CANDIDATES)  # fmt: skip
        except Exception as exc:  # the vector leg failing must never cost the keyword hits
            logger.warning("vector leg failed; using keyword results only: %s", exc)
            vector = {}
    ids = set(keyword) | set(vector)
    graph_scores: dict[int, tuple[float, tuple[str, ...]]] = {}
    if graph is not None:
        try:
            for chunk_id, _g in graph.extra_chunks(conn, filters, GRAPH_CANDIDATES):
                ids.add(chunk_id)
            graph_scores = graph.chunk_scores(conn, sorted(ids))
        except Exception as exc:
            logger.warning("graph leg failed; ranking without it: %s", exc)
            graph_scores = {}
    if not ids:
        return []
    rows = _fetch_chunks(conn, sorted(ids))
    out: list[_Candidate] = []
    for row in rows:
        cid = int(row[0])
        s_fts = keyword.get(cid, 0.0)
        s_vec = vector.get(cid, 0.0)
        relevance = (weights.fts * s_fts + weights.vec * s_vec) / weight_sum
        g, names = graph_scores.get(cid, (0.0, ()))
        if relevance <= 0 and g <= 0:
            continue
        cand = _Candidate(
            kind="chunk", id=cid, fts=s_fts, vector=s_vec, relevance=relevance, g=g,
            names=names, session_id=int(row[1]), text=str(row[2]), created_at=str(row[3]),
            importance=float(row[4]), first_msg_id=row[5], last_msg_id=row[6],
        )  # fmt: skip
        _finish_scores(cand, weights, half_life, now)
        out.append(cand)
    return out


def _fetch_chunks(conn: sqlite3.Connection, ids: list[int]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        rows.extend(
            conn.execute(
                "SELECT id, session_id, text, created_at, importance, first_msg_id, last_msg_id "
                f"FROM chunks WHERE id IN ({','.join('?' * len(part))})",
                part,
            ).fetchall()
        )
    return rows


def _rank_facts(
    conn: sqlite3.Connection,
    terms: list[str],
    filters: Filters,
    fts_enabled: bool,
    half_life: float,
    graph: GraphSignal | None,
    weights: Weights,
    now: datetime,
) -> list[_Candidate]:
    matched = fact_keyword_leg(conn, terms, filters, fts_enabled)
    lifted: dict[int, tuple[float, tuple[str, ...]]] = {}
    if graph is not None:
        # Facts the graph alone lifts (names of reached nodes in their key or value).
        try:
            lifted = graph.fact_candidates(conn, filters)
        except Exception as exc:
            logger.debug("graph fact candidates failed: %s", exc)
    ids = sorted(set(matched) | set(lifted))
    if not ids:
        return []
    rows = conn.execute(
        "SELECT f.id, f.key, f.value, f.valid_from, f.importance FROM facts f "
        f"WHERE f.id IN ({','.join('?' * len(ids))})",
        ids,
    ).fetchall()
    out: list[_Candidate] = []
    for fid, key, value, valid_from, importance in rows:
        relevance = matched.get(int(fid), 0.0)
        g, names = lifted.get(int(fid), (0.0, ()))
        if relevance <= 0 and g <= 0:
            continue
        cand = _Candidate(
            kind="fact", id=int(fid), fts=relevance, relevance=relevance, g=g,  # type: ignore[arg-type]
            names=names, text=f"{key}: {value}", created_at=str(valid_from),
            importance=float(importance),  # type: ignore[arg-type]
        )  # fmt: skip
        _finish_scores(cand, weights, half_life, now)
        out.append(cand)
    return out


def _finish_scores(c: _Candidate, weights: Weights, half_life: float, now: datetime) -> None:
    c.importance_nudge = weights.imp * (c.importance - 0.5)
    c.recency_nudge = weights.rec * recency(age_days(c.created_at, now), half_life)
    c.graph_nudge = weights.graph * c.g
    c.total = c.relevance + c.importance_nudge + c.recency_nudge + c.graph_nudge


def _to_hit(c: _Candidate) -> Hit:
    return Hit(
        kind=c.kind,
        text=c.text,
        date=c.created_at[:10],
        score=c.total,
        session_id=c.session_id,
        id=c.id,
        created_at=c.created_at,
        first_msg_id=c.first_msg_id,  # type: ignore[arg-type]
        last_msg_id=c.last_msg_id,  # type: ignore[arg-type]
    )
