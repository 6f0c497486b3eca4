"""graph: the knowledge graph of people, places and things the user speaks of (SPEC §5.7).

Owns: names and their index (``names``), the fact token index (``facts_index``), expansion
and what it keeps between queries (``neighbourhoods``), the query-time ``Signal``
(``signal``), writes from extraction and the link job (``writes``), maintenance: decay,
merges, clusters and the consolidation steps (``maintenance``), the timeline key
(``timeline``), and the pictures, imported on their own: one read of the graph
(``snapshot``), names, types and relations as people read them (``display``), DOT (``view``)
and the HTML page (``picture``). Its rows are read and
written through ``tx.graph`` (``storage.graph.GraphRows``) only.
May import: the base modules, policy and ``storage``. Never ``runtime``, ``retrieval`` or
anything above them; what those layers own (the LLM gate, the ranking's filters) comes in as
arguments.

Other packages use the names re-exported here: ``from .. import graph`` then ``graph.X``.
"""

from .maintenance import (
    consolidate_clusters,
    consolidate_decay,
    consolidate_dedupe,
    consolidate_labels,
    consolidate_llm_merge,
    list_clusters,
)
from .signal import build_signal
from .timeline import timeline_key
from .writes import delete_nodes, has_nodes, link_chunks, store_extraction

__all__ = [
    "build_signal",
    "consolidate_clusters",
    "consolidate_decay",
    "consolidate_dedupe",
    "consolidate_labels",
    "consolidate_llm_merge",
    "delete_nodes",
    "has_nodes",
    "link_chunks",
    "list_clusters",
    "store_extraction",
    "timeline_key",
]
