"""The graph family's interface: nodes, edges, aliases, mentions and clusters.

Code above ``storage`` calls these methods on ``tx.graph``; each backend implements them
(``storage.sqlite.graph.SqliteGraphRows``). Methods take and return plain values (ints, strings,
tuples, ``GraphNode``), never a driver's rows or cursors. Id lists may be of any length.

Entities are nodes, unique by (type, canonical name), with up to 8 raw aliases; exactly one
node is the user (type ``self``). Edges are directed relationships, unique by (source, target,
relationship); deleting a node deletes its edges and mentions. A mention links a node to a
transcript chunk. The graph also reads fact texts (the graph leg scores facts naming a node).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# The canonical name of the one node of type ``self`` (the user).
SELF_NODE_NAME = "@self"


def load_aliases(raw: object) -> tuple[str, ...]:
    """The aliases stored as a JSON list; anything unreadable is no aliases."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(a for a in value if isinstance(a, str) and a)


def dump_aliases(aliases: Sequence[str]) -> str:
    return json.dumps(list(aliases), ensure_ascii=False)


@dataclass(frozen=True)
class GraphNode:
    """One node as stored."""

    id: int
    type: str
    name: str
    aliases: tuple[str, ...]
    confidence: float
    mentions: int
    created_at: str
    updated_at: str
    cluster_id: int | None = None
    cluster_label: str | None = None


class GraphRows(Protocol):
    """Nodes, edges, aliases, mentions and clusters."""

    # -- stamps and identity ---------------------------------------------------------------

    def store_identity(self) -> tuple[object, ...]:
        """An opaque value telling this store apart from any other open in the process."""
        ...

    def names_version(self) -> tuple[tuple[object, ...], str | None]:
        """(an opaque version of the node names: the ``graph.gen`` counter and the newest
        node, the graph stamp: a value that changes with any change to nodes, edges or
        mentions; None when the store keeps none), read together."""
        ...

    def facts_stamp(self) -> str | None:
        """A value that changes whenever a fact is added, removed or changes liveness."""
        ...

    # -- nodes -----------------------------------------------------------------------------

    def self_node_id(self) -> int | None:
        """The id of the self node, None when there is none."""
        ...

    def ensure_self_node(self) -> int:
        """The id of the self node, created when missing."""
        ...

    def has_nodes(self) -> bool:
        """Whether any node but the self node exists."""
        ...

    def node(self, node_id: int) -> GraphNode | None:
        """One node, None when it does not exist."""
        ...

    def nodes(self, *, with_self: bool = False) -> list[GraphNode]:
        """Every node (the self node only ``with_self``), by id."""
        ...

    def name_rows(self) -> list[tuple[int, str, str, tuple[str, ...], str | None]]:
        """(id, type, canonical name, aliases, cluster label) of every node."""
        ...

    def node_names(self, node_ids: Sequence[int]) -> dict[int, tuple[str, str | None]]:
        """id → (canonical name, cluster label) for those of ``node_ids`` that exist."""
        ...

    def node_confidences(self, node_ids: Sequence[int]) -> dict[int, float]:
        """id → confidence for those of ``node_ids`` that exist; StoreError on a failed read."""
        ...

    def nodes_named(self, canonical: str) -> list[tuple[int, str, int]]:
        """(id, type, mention count) of the non-self nodes of this canonical name, most
        mentioned first, then by id."""
        ...

    def node_exists(self, node_type: str, canonical: str) -> bool:
        """Whether a node of this type and canonical name exists."""
        ...

    def aliased_nodes(self) -> list[tuple[int, str, tuple[str, ...], int]]:
        """(id, type, aliases, mention count) of the non-self nodes that have aliases."""
        ...

    def insert_node(
        self,
        node_type: str,
        canonical: str,
        aliases: Sequence[str],
        *,
        now: str,
        importance: float,
        confidence: float,
    ) -> int:
        """The id of a new node, mentioned once."""
        ...

    def update_node(
        self,
        node_id: int,
        *,
        aliases: Sequence[str],
        mentions: int,
        confidence: float,
        importance: float,
        updated_at: str,
        created_at: str | None = None,
    ) -> None:
        """Overwrite a node's tallies (``created_at`` too when given)."""
        ...

    def set_node_type(self, node_id: int, node_type: str) -> None:
        """Change a node's type."""
        ...

    def touch_nodes(self, node_ids: Sequence[int], now: str) -> None:
        """Move ``updated_at`` of these nodes forward to ``now`` (never back)."""
        ...

    def delete_nodes(self, node_ids: Sequence[int]) -> int:
        """Delete nodes with their edges and mentions, clearing the label of any cluster
        that loses a member; the count deleted."""
        ...

    def node_count(self) -> int:
        """The number of nodes, the self node aside."""
        ...

    def weakest_nodes(self, count: int) -> list[int]:
        """Ids of the ``count`` non-self nodes lowest by (importance, mention count,
        updated_at, id)."""
        ...

    def node_ages(self) -> list[tuple[int, float, str]]:
        """(id, confidence, updated_at) of every non-self node."""
        ...

    def entities_with_typed_twin(self) -> list[tuple[int, int | None]]:
        """(id of each ``entity``-typed node by id, the most mentioned node of the same
        canonical name with a specific type or None)."""
        ...

    # -- edges -----------------------------------------------------------------------------

    def edge_count(self) -> int:
        """The number of edges."""
        ...

    def edge(self, source: int, target: int, relationship: str) -> tuple[int, float, int] | None:
        """(id, confidence, seen count) of this edge, None when missing."""
        ...

    def insert_edge(
        self,
        source: int,
        target: int,
        relationship: str,
        *,
        confidence: float,
        importance: float,
        weight: float,
        now: str,
        chunk_id: int | None,
    ) -> int:
        """The id of a new edge, seen once."""
        ...

    def update_edge(
        self,
        edge_id: int,
        *,
        seen: int,
        confidence: float,
        importance: float,
        weight: float,
        last_seen: str,
        chunk_id: int | None,
        created_at: str | None = None,
    ) -> None:
        """Overwrite an edge's tallies; its source chunk becomes ``chunk_id`` only if unset."""
        ...

    def edge_tallies(
        self, edge_ids: Sequence[int]
    ) -> dict[int, tuple[float, int, str, str, int | None]]:
        """id → (confidence, seen count, last_seen, created_at, source chunk)."""
        ...

    def edges_touching(self, node_id: int) -> list[tuple[int, int, int, str]]:
        """(id, source, target, relationship) of the edges at this node, by id."""
        ...

    def other_edge(self, source: int, target: int, relationship: str, edge_id: int) -> int | None:
        """The id of another edge than ``edge_id`` with this source, target and relationship."""
        ...

    def repoint_edge(self, edge_id: int, source: int, target: int) -> None:
        """Give an edge new endpoints."""
        ...

    def delete_edges(self, edge_ids: Sequence[int]) -> int:
        """Delete these edges; the count deleted."""
        ...

    def delete_weakest_edges(self, count: int) -> int:
        """Delete the ``count`` edges lowest by (importance, seen count, last_seen, id)."""
        ...

    def edge_ages(self) -> list[tuple[int, float, str]]:
        """(id, confidence, last_seen) of every edge."""
        ...

    def edges(self) -> list[tuple[int, int, int, str, float]]:
        """(id, source, target, relationship, weight) of every edge, by id."""
        ...

    def edges_between_others(self) -> list[tuple[int, int]]:
        """(source, target) of every edge that does not touch the self node."""
        ...

    def walk(
        self, seeds: Sequence[int], hops: int, self_id: int, hop_factor: float
    ) -> list[tuple[int, float, int]]:
        """(node, strength, depth) of every step of a walk from ``seeds`` (at their
        confidence, never ``self_id``) along edges either way, ``hops`` steps at most, each
        multiplying by ``hop_factor``·weight and never through ``self_id``; a node may come
        several times, in no order. StoreError on a failed read."""
        ...

    def stamped_neighbourhoods(
        self, node_ids: Sequence[int], self_id: int
    ) -> Iterator[tuple[int, Any, Any, Any]]:
        """Rows read together: ``(0, graph stamp, None, None)`` first (missing when the
        store keeps no stamp), then ``(1, node, confidence, None)`` per existing node of
        ``node_ids`` and ``(2, node, other end, weight)`` per edge at one of them that does
        not touch ``self_id``. To be read inside the transaction."""
        ...

    def stamped_graph(self, self_id: int) -> Iterator[tuple[int, Any, Any, Any]]:
        """``stamped_neighbourhoods`` of every node: each edge once, (2, source, target,
        weight)."""
        ...

    # -- mentions --------------------------------------------------------------------------

    def stamped_mentions(self, node_ids: Sequence[int]) -> tuple[str | None, list[tuple[int, int]]]:
        """(graph stamp, the (node, chunk) mentions of ``node_ids``) read together; (None,
        []) when the store keeps no stamp."""
        ...

    def mentions_among(
        self, chunk_ids: Sequence[int], node_ids: Sequence[int]
    ) -> list[tuple[int, int]]:
        """(chunk, node) of the mentions linking one of ``chunk_ids`` to one of ``node_ids``."""
        ...

    def newest_mentioned_chunks(
        self,
        node_ids: Sequence[int],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[int]:
        """The ``limit`` highest ids of chunks mentioning one of ``node_ids`` (not of
        ``exclude_session``, created in [since, until)), highest first."""
        ...

    def strongest_mentioned_chunks(
        self,
        levels: Sequence[tuple[float, Sequence[int]]],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]]:
        """(chunk, g) of the ``limit`` best chunks mentioning a node of ``levels`` ((strength,
        nodes) pairs; g: the highest strength among the chunk's nodes), by (−g, −chunk id);
        filters as ``newest_mentioned_chunks``."""
        ...

    def add_mentions(self, pairs: Iterable[tuple[int, int]], now: str) -> list[tuple[int, int]]:
        """Add (node, chunk) mentions; the pairs that were not there yet."""
        ...

    def mention_chunks_naming(self, node_id: int, name: str, now: str, limit: int) -> int:
        """Mention the node in the ``limit`` newest chunks whose text holds ``name`` as a
        phrase (full-text search); the count added. StoreError when the search fails."""
        ...

    def move_mentions(self, from_node: int, to_node: int) -> None:
        """Give ``to_node`` every mention ``from_node`` has (keeping their times)."""
        ...

    def chunk_texts(self, chunk_ids: Sequence[int]) -> list[tuple[int, str]]:
        """(id, text) of those of ``chunk_ids`` that exist."""
        ...

    # -- merges and clusters ---------------------------------------------------------------

    def merge_reviews(self) -> list[tuple[str, str]]:
        """(name a, name b) of every recorded merge review."""
        ...

    def record_merge_review(
        self, type_a: str, name_a: str, type_b: str, name_b: str, verdict: str, now: str
    ) -> None:
        """Record a merge verdict (the first one for a pair stays)."""
        ...

    def cluster_assignments(self) -> dict[int, tuple[int | None, str | None]]:
        """node → (cluster id, cluster label) of every node carrying either."""
        ...

    def set_clusters(self, changes: Iterable[tuple[int, int | None, str | None]]) -> None:
        """Set (node, cluster id, cluster label) for each change."""
        ...

    def unlabelled_cluster_members(self) -> list[tuple[int, int, str, int]]:
        """(cluster id, node, canonical name, mention count) of the non-self members of
        every cluster none of whose members has a label."""
        ...

    def cluster_members(self, cluster_id: int) -> list[int]:
        """The ids of a cluster's members, sorted."""
        ...

    def set_cluster_label(self, cluster_id: int, label: str) -> None:
        """Label every member of a cluster."""
        ...

    def clustered_names(self) -> list[tuple[int, str | None, str]]:
        """(cluster id, label, canonical name) of every clustered non-self node."""
        ...

    # -- facts, as the graph reads them ----------------------------------------------------

    def newest_fact(self) -> tuple[int, str, str] | None:
        """(id, key, value) of the fact row with the highest id."""
        ...

    def fact_text(self, fact_id: int) -> tuple[int, str, str] | None:
        """(id, key, value) of one fact row (any version)."""
        ...

    def fact_texts_after(self, fact_id: int) -> list[tuple[int, str, str]]:
        """(id, key, value) of every fact row with a higher id, by id."""
        ...

    def fact_texts(self, fact_ids: Sequence[int]) -> list[tuple[int, str, str]]:
        """(id, key, value) of those of ``fact_ids`` that exist."""
        ...

    def all_fact_texts(self) -> list[tuple[int, str, str, bool]]:
        """(id, key, value, whether it is the current version) of every fact row, by id."""
        ...

    def current_fact_ids(self) -> list[int]:
        """Ids of the current version of every key (archived ones included)."""
        ...

    def live_fact_ids(self) -> list[int]:
        """Ids of the live facts: current and not archived."""
        ...

    def live_facts_among(
        self,
        fact_ids: Sequence[int],
        *,
        since: str | None = None,
        until: str | None = None,
        with_newest: bool = False,
    ) -> tuple[tuple[int, str, str] | None, list[int]]:
        """(``newest_fact()`` read with them when ``with_newest``, else None; the live facts
        among ``fact_ids`` valid from within [since, until))."""
        ...
