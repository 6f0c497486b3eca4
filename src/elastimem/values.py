"""Frozen value types returned to the host (SPEC §2). New fields go last, with defaults."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fact:
    """One version of a fact. ``invalidated_at`` is None for the current version."""

    id: int
    key: str
    value: str
    category: str
    source: str
    importance: float
    valid_from: str
    invalidated_at: str | None
    archived: bool
    created_at: str | None = None
    invalidated_by: int | None = None
    last_accessed_at: str | None = None
    access_count: int = 0


@dataclass(frozen=True)
class Hit:
    """One recall result: a chunk of conversation or a fact rendered as ``key: value``."""

    kind: str
    text: str
    date: str
    score: float
    session_id: int | None
    id: int | None = None
    created_at: str | None = None
    first_msg_id: int | None = None
    last_msg_id: int | None = None


@dataclass(frozen=True)
class ChunkScoreBreakdown:
    chunk_id: int
    fts: float
    vector: float
    fused_relevance: float
    importance_nudge: float
    recency_nudge: float
    graph_nudge: float
    graph_matched_names: tuple[str, ...]
    total: float
    # The neighbouring-exchange term, already counted inside ``fused_relevance``; last and
    # defaulted so positional construction from before it existed keeps working.
    neighbour: float = 0.0
    # The time-mention bonus, already counted in ``fused_relevance`` too:
    # fused_relevance = legs + time_bonus + neighbour (retrieval.py).
    time_bonus: float = 0.0
    # What pseudo-relevance feedback changed in ``fused_relevance`` (it re-weighs the legs,
    # so it can be negative), counted in it too:
    # fused_relevance = legs + feedback + time_bonus + neighbour (retrieval.py).
    feedback: float = 0.0


@dataclass(frozen=True)
class FactScoreBreakdown:
    fact_id: int
    relevance: float
    importance: float
    recency_nudge: float
    graph_nudge: float
    graph_matched_names: tuple[str, ...]
    total: float
    importance_nudge: float = 0.0
    # The two legs ``relevance`` fuses (keyword s_fts, vector s_vec, §5.6); last and
    # defaulted, as ``ChunkScoreBreakdown.neighbour``.
    fts: float = 0.0
    vector: float = 0.0


@dataclass(frozen=True)
class GraphTraversalStep:
    canonical_name: str
    hop_distance: int
    is_seed: bool
    strength: float = 0.0


@dataclass(frozen=True)
class ExplainResult:
    query: str
    graph_hops: int
    # Lists, so that ``explain(q, k).hits == recall(q, k)`` holds as plain equality.
    chunk_breakdowns: list[ChunkScoreBreakdown] = field(default_factory=list)
    fact_breakdowns: list[FactScoreBreakdown] = field(default_factory=list)
    graph_traversal: list[GraphTraversalStep] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    # Whether the vector (meaning) leg took part; one of VECTOR_LEG_STATES (see there).
    vector_leg: str = "not_run"


# ``ExplainResult.vector_leg``: "used" when the vector leg ran; otherwise why the result was
# made without it: "not_ready" (the built-in model was still loading after
# ``embedder_wait_seconds``), "not_loaded" (not loaded, and the tier does not allow loading
# it), "failed" (the embedder failed, or this query's vector could not be made or used),
# "disabled" (vector recall is off at this tier), "no_embedder" (none configured), and
# "not_run" (nothing was ranked: no query terms, k <= 0, or an error).
VECTOR_LEG_STATES = (
    "used",
    "not_ready",
    "not_loaded",
    "failed",
    "disabled",
    "no_embedder",
    "not_run",
)


@dataclass(frozen=True)
class TimelineResult:
    query: str
    key: str | None
    resolved_by: str
    versions: tuple[Fact, ...] = ()
