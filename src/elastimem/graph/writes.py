"""Writes from extraction and the link job: nodes, edges and mentions (SPEC §5.7).

Every function runs inside the caller's ``atomic()``. Nodes are unique by (type, canonical
name); a name folded into another node by a merge resolves to the survivor through its
aliases. Each write that adds a node or changes a node's aliases bumps ``graph.gen`` (the
name index's cache key). Caps are enforced after each extraction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..clock import now_ts
from ..errors import StoreError
from ..storage.tx import Tx
from .names import (
    CONFIDENCE_NOT_IN_TEXT,
    DEFAULT_TYPE,
    FTS_BACKFILL_CHUNKS,
    _alias_key,
    _bump_gen,
    _canonicalize,
    _edge_scores,
    _item_confidence,
    _merge_aliases,
    _name_index,
    _node_importance,
    _node_type,
    _occurs,
    _raw_form,
    _relation,
    _text_tokens,
    _tokens,
    is_self_name,
)

logger = logging.getLogger("elastimem")


@dataclass
class _WriteState:
    """What one extraction learned so far: resolved names, new nodes, whether to bump."""

    now: str
    self_id: int
    gen_changed: bool = False
    new_nodes: list[int] = field(default_factory=list)
    alias_map: dict[str, list[tuple[int, str, int]]] | None = None


def _alias_lookup(conn: Tx, state: _WriteState, canonical: str) -> list[tuple[int, str, int]]:
    """Nodes that carry ``canonical`` as an alias (e.g. a merged-away name): (id, type, count)."""
    if state.alias_map is None:
        mapping: dict[str, list[tuple[int, str, int]]] = {}
        for node_id, node_type, aliases, count in conn.graph.aliased_nodes():
            for alias in aliases:
                # A folded-in name is stored in its canonical form, which canonicalises
                # again to itself except for doubled articles ("the the band"): keep both.
                for key in {_canonicalize(alias), _alias_key(alias)}:
                    mapping.setdefault(key, []).append((node_id, node_type, count))
        state.alias_map = mapping
    found = state.alias_map.get(canonical, [])
    return sorted(found, key=lambda item: (-item[2], item[0]))


def upsert_node(
    conn: Tx,
    name: object,
    node_type: object = DEFAULT_TYPE,
    confidence: float = CONFIDENCE_NOT_IN_TEXT,
    *,
    now: str | None = None,
    _state: _WriteState | None = None,
) -> int | None:
    """One entity inserted or updated; the node id, the self id for the user, None for no
    name."""
    if is_self_name(name):
        return conn.graph.ensure_self_node()
    canonical = _canonicalize(name)
    if not canonical:
        return None
    state = _state or _WriteState(now or now_ts(), conn.graph.ensure_self_node())
    wanted = _node_type(node_type)
    raw = _raw_form(name)
    rows = conn.graph.nodes_named(canonical)
    target: int | None = None
    upgrade = False
    if wanted == DEFAULT_TYPE:
        target = rows[0][0] if rows else None
    else:
        exact = [r for r in rows if r[1] == wanted]
        if exact:
            target = exact[0][0]
        elif len(rows) == 1 and rows[0][1] == DEFAULT_TYPE:
            target, upgrade = rows[0][0], True
    if target is None and not rows:
        # A name folded into another node by a merge resolves to the survivor.
        for node_id, alias_type, _count in _alias_lookup(conn, state, canonical):
            if wanted in (DEFAULT_TYPE, alias_type) or alias_type == DEFAULT_TYPE:
                target = node_id
                upgrade = wanted != DEFAULT_TYPE and alias_type == DEFAULT_TYPE
                break
    if target is None:
        aliases = _merge_aliases([raw], [], canonical)
        node_id = conn.graph.insert_node(
            wanted, canonical, aliases, now=state.now, importance=_node_importance(1),
            confidence=confidence,
        )  # fmt: skip
        state.new_nodes.append(node_id)
        state.gen_changed = True
        if _state is None:
            _bump_gen(conn)
        return node_id
    found = conn.graph.node(target)
    assert found is not None  # just read by name, inside this transaction
    own_name, old_conf, count = found.name, found.confidence, found.mentions
    old_aliases = list(found.aliases)
    aliases = _merge_aliases([raw], old_aliases, own_name)
    new_count = count + 1
    conn.graph.update_node(
        target,
        aliases=aliases,
        mentions=new_count,
        confidence=(old_conf * count + confidence) / new_count,
        importance=_node_importance(new_count),
        updated_at=state.now,
    )
    if upgrade and not conn.graph.node_exists(wanted, own_name):
        conn.graph.set_node_type(target, wanted)
    if aliases != old_aliases:
        state.gen_changed = True
        if _state is None:
            _bump_gen(conn)
    return target


def upsert_edge(
    conn: Tx,
    source_id: int,
    target_id: int,
    relation: object,
    confidence: float = CONFIDENCE_NOT_IN_TEXT,
    *,
    now: str | None = None,
    chunk_id: int | None = None,
) -> int | None:
    """One relationship inserted or refreshed; its id, None for an empty relation or a
    self-loop."""
    rel = _relation(relation)
    if not rel or source_id == target_id:
        return None
    now = now or now_ts()
    row = conn.graph.edge(source_id, target_id, rel)
    if row is None:
        importance, weight = _edge_scores(confidence, 1)
        return conn.graph.insert_edge(
            source_id, target_id, rel, confidence=confidence, importance=importance,
            weight=weight, now=now, chunk_id=chunk_id,
        )  # fmt: skip
    edge_id, old_conf, seen = row
    new_seen = seen + 1
    new_conf = (old_conf * seen + confidence) / new_seen
    importance, weight = _edge_scores(new_conf, new_seen)
    conn.graph.update_edge(
        edge_id, seen=new_seen, confidence=new_conf, importance=importance, weight=weight,
        last_seen=now, chunk_id=chunk_id,
    )  # fmt: skip
    return edge_id


def _chunks_naming(
    names: Iterable[str], chunk_tokens: Sequence[tuple[int, tuple[str, ...]]]
) -> list[int]:
    """Chunks (in turn order) whose text names every one of ``names`` at a word boundary."""
    wanted = [n for n in names if _tokens(n)]
    if not wanted:
        return []
    return [cid for cid, tokens in chunk_tokens if all(_occurs(n, tokens) for n in wanted)]


def _chunks_naming_endpoints(
    forms: Sequence[tuple[str, str]], chunk_tokens: Sequence[tuple[int, tuple[str, ...]]]
) -> list[int]:
    """Chunks (in turn order) naming every endpoint, each by any of its forms."""
    wanted = [[f for f in pair if _tokens(f)] for pair in forms]
    wanted = [pair for pair in wanted if pair]
    if not wanted:
        return []
    return [
        cid
        for cid, tokens in chunk_tokens
        if all(any(_occurs(f, tokens) for f in pair) for pair in wanted)
    ]


def _backfill_mentions(conn: Tx, node_id: int, name: str, now: str) -> None:
    if not _tokens(name):
        return
    try:
        conn.graph.mention_chunks_naming(node_id, name, now, FTS_BACKFILL_CHUNKS)
    except StoreError as exc:
        logger.debug("FTS phrase link for a new node failed: %s", exc)


def _mention(conn: Tx, node_id: int, chunk_ids: Iterable[int], now: str) -> None:
    conn.graph.add_mentions([(node_id, cid) for cid in chunk_ids], now)


def delete_nodes(conn: Tx, node_ids: Sequence[int]) -> int:
    """Nodes deleted (their edges and mentions with them); returns the count.

    The label of a cluster that loses a member is cleared first (§5.7: "a label survives
    only while the member set is unchanged"): once the node is gone, compute_clusters
    sees the same set before and after, and the stale label stayed for good.
    """
    return conn.graph.delete_nodes(node_ids)


def enforce_caps(conn: Tx, node_cap: int, edge_cap: int) -> tuple[int, int]:
    """The caps: the lowest non-self nodes, then the lowest edges, are deleted down to them."""
    nodes_over = conn.graph.node_count() - max(1, int(node_cap))
    removed_nodes = 0
    if nodes_over > 0:
        removed_nodes = delete_nodes(conn, conn.graph.weakest_nodes(nodes_over))
        _bump_gen(conn)
    edges_over = conn.graph.edge_count() - max(1, int(edge_cap))
    removed_edges = 0
    if edges_over > 0:
        removed_edges = conn.graph.delete_weakest_edges(edges_over)
    return removed_nodes, removed_edges


def store_extraction(
    conn: Tx,
    entities: Iterable[Any],
    relationships: Iterable[Any],
    chunk_rows: Sequence[tuple[int, str]],
    *,
    source_text: str = "",
    node_cap: int = 2000,
    edge_cap: int = 5000,
    fts_enabled: bool = False,
    now: str | None = None,
) -> dict[str, int]:
    """Store one extraction's entities and relationships (§5.7), inside the caller's atomic().

    ``chunk_rows`` are the turn's ``(chunk_id, text)``: each entity is linked to the chunks that
    name it at a word boundary, else to the first chunk; each new node also to its ≤ 50 most
    recent FTS phrase matches. Caps are enforced last. Returns counts for logging.
    """
    state = _WriteState(now or now_ts(), conn.graph.ensure_self_node())
    source_tokens = _text_tokens(source_text)
    chunk_tokens = [(int(cid), _text_tokens(text)) for cid, text in chunk_rows]
    first_chunk = [chunk_tokens[0][0]] if chunk_tokens else []
    resolved: dict[str, tuple[int, str]] = {}  # canonical → (node id, raw form)
    self_key = "\x00self"

    def resolve(raw_name: object, node_type: object, item: Mapping[str, Any]) -> str | None:
        if not isinstance(raw_name, str):
            return None
        if is_self_name(raw_name):
            resolved.setdefault(self_key, (state.self_id, ""))
            return self_key
        canonical = _canonicalize(raw_name)
        if not canonical:
            return None
        if canonical in resolved:
            return canonical
        raw = _raw_form(raw_name)
        in_text = _occurs(raw, source_tokens) or _occurs(canonical, source_tokens)
        node_id = upsert_node(conn, raw_name, node_type, _item_confidence(item, in_text),
                              _state=state)  # fmt: skip
        if node_id is None:
            return None
        resolved[canonical] = (node_id, raw)
        return canonical

    for item in entities or ():
        if isinstance(item, Mapping):
            resolve(item.get("name"), item.get("type"), item)
    edges = 0
    for item in relationships or ():
        if not isinstance(item, Mapping):
            continue
        raw_relation = item.get("relation")
        relation = _relation(raw_relation) if isinstance(raw_relation, str) else ""
        if not relation:
            continue
        source_key = resolve(item.get("source"), DEFAULT_TYPE, {})
        target_key = None if source_key is None else resolve(item.get("target"), DEFAULT_TYPE, {})
        if source_key is None or target_key is None:
            continue
        (source_id, source_raw), (target_id, target_raw) = (
            resolved[source_key],
            resolved[target_key],
        )
        if source_id == target_id:
            continue
        # Each non-self endpoint by its raw or its canonical form, as for nodes: "The
        # Jetson" is named by "my Jetson" (only the raw form was tried: 0.4, and the
        # source chunk a chunk naming neither endpoint).
        forms = [(raw, key) for raw, key in ((source_raw, source_key), (target_raw, target_key))
                 if raw]  # fmt: skip
        in_text = all(_occurs(raw, source_tokens) or _occurs(key, source_tokens)
                      for raw, key in forms)  # fmt: skip
        naming = _chunks_naming_endpoints(forms, chunk_tokens) or first_chunk
        chunk = naming[0] if naming else None
        confidence = _item_confidence(item, in_text)
        edge = upsert_edge(
            conn, source_id, target_id, relation, confidence, now=state.now, chunk_id=chunk
        )
        edges += edge is not None
    for key, (node_id, raw) in resolved.items():
        if key == self_key or not chunk_tokens:
            continue
        named = _chunks_naming([raw], chunk_tokens) or _chunks_naming([key], chunk_tokens)
        _mention(conn, node_id, named or first_chunk, state.now)
    if fts_enabled:
        for node_id in state.new_nodes:
            name = next((k for k, (nid, _) in resolved.items() if nid == node_id), "")
            _backfill_mentions(conn, node_id, name, state.now)
    if state.gen_changed:
        _bump_gen(conn)
    removed_nodes, removed_edges = enforce_caps(conn, node_cap, edge_cap)
    return {
        "nodes": len([k for k in resolved if k != self_key]),
        "new_nodes": len(state.new_nodes),
        "edges": edges,
        "trimmed_nodes": removed_nodes,
        "trimmed_edges": removed_edges,
    }


def link_chunks(conn: Tx, chunk_ids: Sequence[int], *,
                now: str | None = None) -> int:  # fmt: skip
    """The link job (§5.7): mention every known name or alias that appears in these chunks.

    ``INSERT OR IGNORE``, so it is idempotent. A node that gains a mention counts as seen now
    (``updated_at``), so a name that keeps coming up does not decay. Returns rows inserted.
    """
    ids = [int(c) for c in chunk_ids]
    if not ids:
        return 0
    index = _name_index(conn)
    if not index.by_first:
        return 0
    now = now or now_ts()
    rows: list[tuple[int, int]] = []
    for chunk_id, text in conn.graph.chunk_texts(ids):
        for node_id in index.matches(_text_tokens(text)):
            rows.append((node_id, chunk_id))
    added = conn.graph.add_mentions(rows, now)
    conn.graph.touch_nodes(sorted({node_id for node_id, _chunk in added}), now)
    return len(added)


def has_nodes(conn: Tx) -> bool:
    return conn.graph.has_nodes()
