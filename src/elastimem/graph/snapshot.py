"""One read of the entity graph for the pictures (``view``, ``picture``): nodes with their
names as people wrote them (``display``), edges, and render-time clusters.

Clusters are the connected components of §5.7 (the self node excluded), computed here so the
picture is right even before a consolidation sweep has stored them; a stored
``cluster_label`` names a component when its members carry one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..storage.tx import Tx
from .display import CHUNKS_PER_NODE, proper_names
from .maintenance import components
from .names import SELF_TYPE

SELF_LABEL = "(you)"
# Names are shown as written (looked up in mentioning chunks) for this many nodes, the most
# mentioned first, one indexed read each; the rest are title-cased.
WRITTEN_FORM_NODES = 400


@dataclass(frozen=True)
class ViewNode:
    id: int
    type: str
    name: str
    aliases: tuple[str, ...]
    mentions: int
    label: str | None
    # The name as people wrote it (``display.proper_names``); the canonical name when unknown.
    written: str = ""

    @property
    def display(self) -> str:
        if self.type == SELF_TYPE:
            return SELF_LABEL
        return self.written or self.name


@dataclass(frozen=True)
class ViewEdge:
    id: int
    source: int
    target: int
    relationship: str
    weight: float


@dataclass
class Snapshot:
    nodes: dict[int, ViewNode] = field(default_factory=dict)
    edges: list[ViewEdge] = field(default_factory=list)
    clusters: dict[int, set[int]] = field(default_factory=dict)

    def cluster_of(self) -> dict[int, int]:
        return {n: cid for cid, members in self.clusters.items() for n in members}

    def cluster_label(self, cluster_id: int) -> str | None:
        labels = sorted(
            {self.nodes[n].label for n in self.clusters[cluster_id] if self.nodes[n].label},
            key=str,
        )
        return labels[0] if labels else None


@contextmanager
def _transaction(source: Any) -> Iterator[Tx]:
    """A read transaction: ``source`` itself when it is one (a ``Tx``), else a snapshot of
    ``source``, an opened storage database."""
    if hasattr(source, "graph"):
        yield source
        return
    with source.read() as tx:
        yield tx


def _mention_texts(tx: Tx, nodes: list[Any]) -> dict[int, list[str]]:
    """Node id → the texts of its newest few mentioning chunks (where its written form is),
    for the most-mentioned ``WRITTEN_FORM_NODES`` nodes: one indexed read per node keeps a
    large graph's page quick; the rest are title-cased."""
    ranked = sorted(nodes, key=lambda row: (-row.mentions, row.id))[:WRITTEN_FORM_NODES]
    chosen = {row.id: tx.graph.newest_mentioned_chunks([row.id], CHUNKS_PER_NODE) for row in ranked}
    wanted = sorted({c for chunks in chosen.values() for c in chunks})
    texts = dict(tx.graph.chunk_texts(wanted)) if wanted else {}
    return {n: [texts[c] for c in chunks if c in texts] for n, chunks in chosen.items()}


def load_snapshot(source: Any) -> Snapshot:
    """Nodes (self included, names as people wrote them), edges and render-time clusters,
    read in one snapshot."""
    snap = Snapshot()
    with _transaction(source) as tx:
        rows = tx.graph.nodes(with_self=True)
        others = [row for row in rows if row.type != SELF_TYPE]
        written = proper_names(
            {row.id: row.name for row in others},
            {row.id: row.aliases for row in others},
            _mention_texts(tx, others),
        )
        for row in rows:
            node = ViewNode(row.id, row.type, row.name, row.aliases, row.mentions,
                            row.cluster_label, written.get(row.id, ""))  # fmt: skip
            snap.nodes[node.id] = node
        snap.edges = [ViewEdge(*edge) for edge in tx.graph.edges()]
        snap.clusters = components(tx)
    return snap
