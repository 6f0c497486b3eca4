"""The graph family's interface: nodes, edges, aliases, mentions and clusters.

Code above ``storage`` calls these methods on ``tx.graph``; each backend implements them
(``storage.sqlite.graph.SqliteGraphRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class GraphRows(Protocol):
    """Nodes, edges, aliases, mentions and clusters."""
