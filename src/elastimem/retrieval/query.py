"""The one query path: from a question to a ranking (§5.6).

``recall``, ``explain`` and ``build_context``'s past moments all rank through
``rank_query``: the chunks and facts written before it but still waiting for their vectors
(``catch_up``), the query's terms, its vector legs (chunks and facts, with what became of
the chunks' leg), the graph signal and the keyword index, then ``rank.rank`` in ONE read
snapshot. A hit therefore scores the same wherever it is shown.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import observe
from ..clock import utcnow
from ..governor import MemoryProfile
from ..runtime.services import Services
from ..text import query_terms, symbol_terms
from . import catch_up, legs, names, temporal
from .rank import FactVectorLeg, Filters, Ranking, VectorLeg, rank
from .warm import keyword_index


class _Unset:
    """The type of ``UNSET``."""

    def __repr__(self) -> str:
        return "UNSET"


# "Not given": ``rank_query`` starts the leg or reads the signal itself. (None, given, means
# "without it".)
UNSET: Any = _Unset()


class QueryRanking(NamedTuple):
    """A query's ranking (None when the query has no search terms, so nothing was ranked)
    and the graph signal it used (``UNSET`` when none was read)."""

    ranking: Ranking | None
    signal: Any


def rank_query(
    services: Services,
    text: str,
    *,
    k: int,
    kinds: frozenset[str],
    filters: Filters,
    profile: MemoryProfile | None = None,
    signal: Any = UNSET,
    vector_leg: VectorLeg | None = UNSET,
    fact_leg: FactVectorLeg | None = UNSET,
) -> QueryRanking:
    """Rank ``text`` over ``kinds`` (``"chunk"``, ``"fact"``): the best ``k`` hits.

    Legs not given are started here when their kind is wanted (the chunks' vector leg
    first, so the query vector is embedded while the rest is read); the graph signal, unless
    given, is read inside the ranking's own snapshot (one transaction per query instead of
    two). ``ranking.vector_leg`` says what became of a vector leg started here.
    """
    # A query of symbols only ("🍜") matches them in facts (rank.fact_keyword_leg).
    terms = query_terms(text) or symbol_terms(text)
    if not terms:
        return QueryRanking(None, signal)
    profile = profile if profile is not None else services.profile()
    # The text the query vector is made of: without the time the question names (its
    # span boosts by date instead; temporal.py) nor the names most chunks hold (names.py).
    embedded = text
    scope = temporal.parse(text, utcnow()) if "chunk" in kinds else None
    if scope is not None and query_terms(scope.rest):
        embedded = scope.rest
    report: legs.VectorLegReport | None = None
    config = services.config()
    chunks, facts = vector_leg is UNSET and "chunk" in kinds, fact_leg is UNSET and "fact" in kinds
    if chunks or facts:
        # Before the snapshot opens, so the legs see what it stores.
        catch_up.embed_waiting(services, profile, chunks=chunks, facts=facts)
    with services.db.read() as conn:
        # The names most chunks hold are counted in the ranking's own snapshot; the legs
        # start once the text they embed is known (starting one reads nothing).
        if "chunk" in kinds and names.name_words(text):
            common = names.common_names(conn, text)
            terms = names.without(terms, common)
            embedded = names.strip(embedded, common)
        if vector_leg is UNSET:
            report = legs.VectorLegReport()
            vector_leg = (
                legs.vector_leg(services, embedded, profile, report) if "chunk" in kinds else None
            )
        if fact_leg is UNSET:
            fact_leg = legs.fact_vector_leg(services, text, profile) if "fact" in kinds else None
        if signal is UNSET:
            with observe.span("leg", "graph_signal"):
                signal = legs.graph_signal(services, text, conn)
        with observe.span("leg", "rank", terms=len(terms)):
            ranking = rank(
                conn,
                terms,
                k=k,
                kinds=kinds,
                filters=filters,
                fts_enabled=services.db.fts_enabled,
                chunk_half_life=config.episodic_recency_half_life_days,
                fact_half_life=config.fact_recency_half_life_days,
                vector_leg=vector_leg,
                graph=signal,
                keyword_index=keyword_index(services, profile),
                fact_vector_leg=fact_leg,
                question=text,
                scope=scope,
            )
    if report is not None:
        ranking.vector_leg = report.state
    return QueryRanking(ranking, signal)
