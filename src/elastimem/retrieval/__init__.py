"""retrieval: the one query path from a question to ranked memory (SPEC §5.6, §5.14).

Owns: the one query path (``query.rank_query``), embedding what still waits for a vector
before a query (``catch_up``: read your writes by meaning), the legs of a query (``legs``: the
chunks' and the facts' vector legs, the graph signal; ``own_text``: a small pool re-scored
on each chunk's own text), their fusion and ranking (``rank``, on ``scale``'s scales),
the timeline (``timeline``), and warm-up and priming with the keyword index a query uses
(``warm``). ``recall``, ``explain`` and ``build_context`` all rank through ``rank_query``,
so a hit scores the same wherever it is shown.
May import: the base modules, policy, ``storage`` (through its interfaces), ``index``,
``memory``, ``graph`` and ``runtime``. Never ``jobs`` (its sibling: the job handlers), the
facade (``store``) or the front ends.

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
