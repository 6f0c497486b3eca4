"""TRANSITIONAL shim: the lead rewrites callers at merge.

``background.py`` was split by what the code does (issue #16). This module only re-exports
the names other modules still import from here; it imports upward (``jobs``,
``retrieval``) and goes away once its callers import the new homes directly.
"""

from __future__ import annotations

from ..graph import list_clusters
from ..jobs.dispatch import make_worker
from ..jobs.embed import queue_fact_embedding, reindex
from ..jobs.summaries import persist_digest, report_evictions
from ..jobs.turns import queue_turn_jobs
from ..retrieval.legs import graph_signal, vector_leg
from ..retrieval.warm import keyword_index, warm_up
from .services import Services, preload_embedder
from .stats import collect_stats

__all__ = [
    "Services",
    "collect_stats",
    "graph_signal",
    "keyword_index",
    "list_clusters",
    "make_worker",
    "persist_digest",
    "preload_embedder",
    "queue_fact_embedding",
    "queue_turn_jobs",
    "reindex",
    "report_evictions",
    "vector_leg",
    "warm_up",
]
