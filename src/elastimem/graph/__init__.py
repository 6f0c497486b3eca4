"""graph: the knowledge graph of people, places and things the user speaks of (SPEC §5.7).

Owns: names and their index, the fact token index, expansion and the query-time ``Signal``,
writes from extraction, maintenance (decay, merges, clusters), the timeline key, and the
HTML/DOT view. Its rows are read and written through ``storage`` only.
May import: the base modules, policy and ``storage``. Never ``runtime``, ``retrieval`` or
anything above them.
"""
