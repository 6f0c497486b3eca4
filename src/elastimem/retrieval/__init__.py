"""retrieval: the one query path from a question to ranked memory (SPEC §5.6, §5.14).

Owns: the keyword, vector, fact-vector and graph legs of a query, their fusion and ranking
(``rank``), the timeline, and warm-up. ``recall``, ``explain`` and ``build_context`` all come
through here, so a hit scores the same wherever it is shown.
May import: the base modules, policy, ``storage`` (through its interfaces), ``index``,
``memory``, ``graph`` and ``runtime``. Never the facade (``store``) or the front ends.

``elastimem.retrieval`` keeps the names hosts import (``DEFAULT_WEIGHTS``, ``Weights``, the
value types re-exported for older code).
"""

from ..values import (
    ChunkScoreBreakdown,
    ExplainResult,
    FactScoreBreakdown,
    GraphTraversalStep,
    Hit,
    TimelineResult,
)
from .rank import DEFAULT_WEIGHTS, Filters, Weights

__all__ = [
    "DEFAULT_WEIGHTS",
    "ChunkScoreBreakdown",
    "ExplainResult",
    "FactScoreBreakdown",
    "Filters",
    "GraphTraversalStep",
    "Hit",
    "TimelineResult",
    "Weights",
]
