"""Maintenance of the graph, run by consolidation (SPEC §5.7): decay, deterministic dedupe,
LLM-reviewed merges (folds), clusters and their labels.

Steps that call the LLM take the ``Database`` and an ``ask`` callable and never hold the write
lock across a call. ``ask`` raising one of ``stop_on`` (the gate's refusal) ends the step
quietly; any other exception (a deferral) propagates, so the job goes back to the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..clock import age_days, now_ts, recency, ts_minus, utcnow
from ..guards import is_unsafe_llm_text
from ..prompts import (
    build_cluster_label_prompt,
    build_same_entity_prompt,
    clean_label,
    parse_yes_no,
)
from ..storage.graph import GraphNode
from ..storage.tx import Tx
from ..text import STOPWORDS
from .names import (
    DEFAULT_TYPE,
    SELF_TYPE,
    Database,
    _bump_gen,
    _edge_scores,
    _merge_aliases,
    _node_importance,
    _tokens,
)
from .writes import delete_nodes

logger = logging.getLogger("elastimem")

MERGE_CALLS_PER_SWEEP = 5
LABEL_CALLS_PER_SWEEP = 5
LABEL_NAMES = 12
LLM_REPLY_TOKENS = 16
MERGE_TOKEN_MIN_CHARS = 3
# A node as maintenance reads it.
_Node = GraphNode
# ``ask(kind, prompt, max_tokens=…)``: one gated LLM call (``Services.ask``).
Ask = Callable[..., Any]


def apply_decay(
    conn: Tx, half_life_days: float, threshold: float, *, now: Any = None
) -> dict[str, int]:
    """Decay: edges, then non-self nodes, whose ``confidence·r(age, h)`` fell below threshold
    are deleted.

    Edges age from ``last_seen`` and nodes from ``updated_at``. Returns
    ``graph_nodes_archived`` and ``graph_edges_archived`` (edges removed in total, including
    those that went with a decayed node).
    """
    moment = utcnow() if now is None else now

    def faded(confidence: float, ts: str) -> bool:
        return confidence * recency(age_days(ts, moment), half_life_days) < threshold

    edges_before = conn.graph.edge_count()
    dead_edges = [edge_id for edge_id, confidence, seen in conn.graph.edge_ages()
                  if faded(confidence, seen)]  # fmt: skip
    conn.graph.delete_edges(dead_edges)
    dead_nodes = [node_id for node_id, confidence, updated in conn.graph.node_ages()
                  if faded(confidence, updated)]  # fmt: skip
    delete_nodes(conn, dead_nodes)
    if dead_nodes:
        _bump_gen(conn)
    edges_after = conn.graph.edge_count()
    return {"graph_nodes_archived": len(dead_nodes),
            "graph_edges_archived": edges_before - edges_after}  # fmt: skip


def _load_node(conn: Tx, node_id: int) -> _Node | None:
    return conn.graph.node(node_id)


def _fold_edge_into(conn: Tx, keep: int, drop: int) -> None:
    rows = conn.graph.edge_tallies([keep, drop])
    a, b = rows[keep], rows[drop]
    seen = a[1] + b[1]
    confidence = (a[0] * a[1] + b[0] * b[1]) / seen
    importance, weight = _edge_scores(confidence, seen)
    conn.graph.delete_edges([drop])
    conn.graph.update_edge(
        keep, seen=seen, confidence=confidence, importance=importance, weight=weight,
        last_seen=max(a[2], b[2]), created_at=min(a[3], b[3]), chunk_id=b[4],
    )  # fmt: skip


def fold_nodes(conn: Tx, a: int, b: int) -> int | None:
    """Fold two nodes into one (§5.7 Fold) and return the survivor's id.

    The survivor has more mentions (the older id on a tie) and takes the loser's name and
    aliases, summed mentions and the mention-weighted confidence; if the survivor was a plain
    ``entity`` it takes the loser's specific type. Edges are repointed (self-loops dropped,
    collisions folded), mentions repointed, and the loser deleted. The self node never folds.
    """
    first, second = _load_node(conn, a), _load_node(conn, b)
    if first is None or second is None or first.id == second.id:
        return None
    if SELF_TYPE in (first.type, second.type):
        return None
    survivor, loser = sorted((first, second), key=lambda n: (-n.mentions, n.id))
    mentions = survivor.mentions + loser.mentions
    confidence = (
        survivor.confidence * survivor.mentions + loser.confidence * loser.mentions
    ) / max(1, mentions)
    aliases = _merge_aliases([loser.name, *loser.aliases], survivor.aliases, survivor.name)
    conn.graph.update_node(
        survivor.id,
        aliases=aliases,
        mentions=mentions,
        confidence=confidence,
        importance=_node_importance(mentions),
        updated_at=max(survivor.updated_at, loser.updated_at),
        created_at=min(survivor.created_at, loser.created_at),
    )
    for edge_id, source, target, relation in conn.graph.edges_touching(loser.id):
        new_source = survivor.id if source == loser.id else source
        new_target = survivor.id if target == loser.id else target
        if new_source == new_target:
            conn.graph.delete_edges([edge_id])
            continue
        clash = conn.graph.other_edge(new_source, new_target, relation, edge_id)
        if clash is not None:
            _fold_edge_into(conn, clash, edge_id)
        else:
            conn.graph.repoint_edge(edge_id, new_source, new_target)
    conn.graph.move_mentions(loser.id, survivor.id)
    delete_nodes(conn, [loser.id])
    if (
        survivor.type == DEFAULT_TYPE
        and loser.type != DEFAULT_TYPE
        and not conn.graph.node_exists(loser.type, survivor.name)
    ):
        conn.graph.set_node_type(survivor.id, loser.type)
    _bump_gen(conn)
    return survivor.id


def dedupe_exact(conn: Tx) -> int:
    """Deterministic dedupe: fold each ``entity`` node into the specific-typed node of the
    same canonical name (the most-mentioned one if there are several). Returns folds made."""
    folded = 0
    for entity_id, specific_id in conn.graph.entities_with_typed_twin():
        if specific_id is not None and fold_nodes(conn, entity_id, specific_id):
            folded += 1
    return folded


def _pair_key(a: _Node, b: _Node) -> tuple[str, str, str, str]:
    (ta, na), (tb, nb) = sorted([(a.type, a.name), (b.type, b.name)])
    return ta, na, tb, nb


def _merge_tokens(name: str) -> set[str]:
    return {t for t in _tokens(name) if len(t) >= MERGE_TOKEN_MIN_CHARS and t not in STOPWORDS}


def merge_candidates(
    conn: Tx, review_window_days: float, *, now: Any = None
) -> list[tuple[_Node, _Node]]:
    """Unreviewed pairs worth asking about, oldest first (by larger id, then smaller id).

    Both non-self; same type or one is ``entity``; sharing a folded token of ≥ 3 characters
    (stopwords aside); at least one created within the review window.
    """
    cutoff = ts_minus(review_window_days * 86400.0, now)
    nodes = {node.id: node for node in conn.graph.nodes()}
    by_token: dict[str, list[int]] = {}
    for node in nodes.values():
        for token in _merge_tokens(node.name):
            by_token.setdefault(token, []).append(node.id)
    # Reviewed pairs by their names alone: a node's type can change after the review (a
    # lone "entity" is upgraded in place, a fold takes the loser's type), and the same two
    # nodes must not be asked about again (§9).
    reviewed = {tuple(sorted(pair)) for pair in conn.graph.merge_reviews()}
    pairs: set[tuple[int, int]] = set()
    for node in nodes.values():
        if node.created_at < cutoff:
            continue
        for token in _merge_tokens(node.name):
            for other_id in by_token[token]:
                if other_id != node.id:
                    pairs.add((min(node.id, other_id), max(node.id, other_id)))
    out: list[tuple[_Node, _Node]] = []
    for low, high in sorted(pairs, key=lambda p: (p[1], p[0])):
        a, b = nodes[low], nodes[high]
        if a.type != b.type and DEFAULT_TYPE not in (a.type, b.type):
            continue
        if tuple(sorted((a.name, b.name))) in reviewed:
            continue
        out.append((a, b))
    return out


def llm_merge(
    database: Database,
    ask: Callable[[str], str],
    *,
    review_window_days: float = 7.0,
    max_calls: int = MERGE_CALLS_PER_SWEEP,
    now: Any = None,
    stop_on: tuple[type[BaseException], ...] = (),
) -> int:
    """Ask ``ask`` (the gated LLM) whether candidate pairs are one entity; fold the "yes" ones.

    At most ``max_calls`` calls; every yes/no verdict is recorded and never asked again; an
    unclear reply records nothing. A call raising one of ``stop_on`` (the gate's
    ``GateDenied``) stops the step; any other exception (``GateDeferred``) is raised, so the
    consolidate job goes back to the queue. The write lock is never held during a call.
    Returns the number of folds.
    """
    with database.read() as conn:
        candidates = merge_candidates(conn, review_window_days, now=now)
    gone: set[int] = set()
    calls = merged = 0
    for a, b in candidates:
        if calls >= max_calls:
            break
        if a.id in gone or b.id in gone:
            continue
        prompt = build_same_entity_prompt(a.name, a.type, b.name, b.type)
        calls += 1
        try:
            reply = ask(prompt)
        except stop_on as exc:  # a GateDeferred puts the consolidate job back instead
            logger.info("entity merge review stopped: %s", exc)
            break
        verdict = parse_yes_no(reply)
        if verdict is None:
            continue
        with database.atomic() as conn:
            current_a, current_b = _load_node(conn, a.id), _load_node(conn, b.id)
            if current_a is None or current_b is None:
                continue
            key = _pair_key(a, b)
            conn.graph.record_merge_review(*key, "same" if verdict else "different", now_ts())
            if verdict:
                survivor = fold_nodes(conn, a.id, b.id)
                if survivor is not None:
                    merged += 1
                    gone.add(b.id if survivor == a.id else a.id)
    return merged


def merge_duplicates(
    database: Database,
    ask: Callable[[str], str] | None = None,
    *,
    review_window_days: float = 7.0,
    max_calls: int = MERGE_CALLS_PER_SWEEP,
    stop_on: tuple[type[BaseException], ...] = (),
) -> dict[str, int]:
    """Deterministic dedupe, then (when ``ask`` is given, i.e. at FULL) the LLM merge."""
    with database.atomic() as conn:
        stats = {"graph_deduped": dedupe_exact(conn)}
    if ask is not None:
        stats["graph_merged"] = llm_merge(
            database, ask, review_window_days=review_window_days, max_calls=max_calls,
            stop_on=stop_on,
        )  # fmt: skip
    return stats


def components(conn: Tx) -> dict[int, set[int]]:
    """Connected components of ≥ 2 nodes over edges that do not touch the self node, keyed
    by their smallest member id (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for source, target in conn.graph.edges_between_others():
        ra, rb = find(source), find(target)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[int, set[int]] = {}
    for node in list(parent):
        members.setdefault(find(node), set()).add(node)
    return {min(m): m for m in members.values() if len(m) >= 2}


def compute_clusters(conn: Tx) -> int:
    """Store the clusters: connected components (≥ 2 nodes), the self node excluded.

    ``cluster_id`` is the smallest member id. A label survives only while the member set is
    unchanged; nodes that left every cluster lose both id and label. Returns the count.
    """
    clusters = components(conn)
    old = conn.graph.cluster_assignments()
    old_sets: dict[int, set[int]] = {}
    for node_id, (cluster_id, _label) in old.items():
        if cluster_id is not None:
            old_sets.setdefault(cluster_id, set()).add(node_id)
    wanted: dict[int, tuple[int | None, str | None]] = {}
    for cluster_id, nodes in clusters.items():
        label = None
        if old_sets.get(cluster_id) == nodes:
            labels = {old[n][1] for n in nodes} - {None}
            if len(labels) == 1:
                label = labels.pop()
        for node_id in nodes:
            wanted[node_id] = (cluster_id, label)
    for node_id in old:
        wanted.setdefault(node_id, (None, None))
    changes = [
        (node_id, cluster_id, label)
        for node_id, (cluster_id, label) in wanted.items()
        if old.get(node_id, (None, None)) != (cluster_id, label)
    ]
    conn.graph.set_clusters(changes)
    if changes:
        _bump_gen(conn)  # the name index holds the labels
    return len(clusters)


def label_clusters(
    database: Database,
    ask: Callable[[str], str],
    *,
    max_calls: int = LABEL_CALLS_PER_SWEEP,
    stop_on: tuple[type[BaseException], ...] = (),
) -> int:
    """Name unlabelled clusters, largest first (ties by id), ≤ ``max_calls`` calls per sweep.

    The prompt lists up to 12 member names, most mentioned first; a label is written only if
    the cluster's members did not change meanwhile. A call raising one of ``stop_on`` stops
    the sweep (as in ``llm_merge``). Returns the number of labels written.
    """
    with database.read() as conn:
        rows = conn.graph.unlabelled_cluster_members()
    groups: dict[int, list[tuple[int, str, int]]] = {}
    for cluster_id, node_id, name, mentions in rows:
        groups.setdefault(cluster_id, []).append((node_id, name, mentions))
    order = sorted(groups, key=lambda c: (-len(groups[c]), c))
    calls = labelled = 0
    for cluster_id in order:
        if calls >= max_calls:
            break
        members = sorted(groups[cluster_id], key=lambda m: (-m[2], m[0]))
        prompt = build_cluster_label_prompt([m[1] for m in members[:LABEL_NAMES]])
        calls += 1
        try:
            reply = ask(prompt)
        except stop_on as exc:  # a GateDeferred puts the consolidate job back instead
            logger.info("cluster labelling stopped: %s", exc)
            break
        label = clean_label(reply)
        if label is None or is_unsafe_llm_text(label):
            continue  # graph context lists labels verbatim: see guards checks 8 and 9
        ids = sorted(m[0] for m in members)
        with database.atomic() as conn:
            if conn.graph.cluster_members(cluster_id) != ids:
                continue
            conn.graph.set_cluster_label(cluster_id, label)
            _bump_gen(conn)  # the name index holds the labels
            labelled += 1
    return labelled


def list_clusters(conn: Tx) -> list[dict[str, Any]]:
    """``{cluster_id, label, members}`` (members: sorted canonical names), largest first."""
    groups: dict[int, dict[str, Any]] = {}
    for cluster_id, label, name in conn.graph.clustered_names():
        group = groups.setdefault(
            cluster_id, {"cluster_id": cluster_id, "label": None, "members": []}
        )
        group["members"].append(name)
        if label and group["label"] is None:
            group["label"] = label
    out = [g for g in groups.values() if len(g["members"]) >= 2]
    for group in out:
        group["members"].sort()
    out.sort(key=lambda g: (-len(g["members"]), g["cluster_id"]))
    return out


# -- consolidation wrappers (called from background.run_consolidate) --------------------------


def consolidate_decay(database: Database, config: Any) -> dict[str, int]:
    with database.atomic() as conn:
        return apply_decay(conn, config.graph_decay_half_life_days, config.graph_archive_threshold)


def consolidate_dedupe(database: Database) -> dict[str, int]:
    return merge_duplicates(database)


def consolidate_llm_merge(
    database: Database,
    ask: Ask,
    config: Any,
    *,
    stop_on: tuple[type[BaseException], ...] = (),
) -> dict[str, int]:
    """The LLM merge step: ``ask(kind, prompt, max_tokens=…)`` is one gated call."""

    def ask_one(prompt: str) -> str:
        return str(ask("entity_merge", prompt, max_tokens=LLM_REPLY_TOKENS))

    merged = llm_merge(database, ask_one, stop_on=stop_on,
                       review_window_days=config.graph_merge_review_window_days)  # fmt: skip
    return {"graph_merged": merged}


def consolidate_clusters(database: Database) -> dict[str, int]:
    with database.atomic() as conn:
        return {"clusters": compute_clusters(conn)}


def consolidate_labels(
    database: Database, ask: Ask, *, stop_on: tuple[type[BaseException], ...] = ()
) -> dict[str, int]:
    """The cluster labelling step; ``ask`` as in ``consolidate_llm_merge``."""

    def ask_one(prompt: str) -> str:
        return str(ask("cluster_label", prompt, max_tokens=LLM_REPLY_TOKENS))

    return {"clusters_labeled": label_clusters(database, ask_one, stop_on=stop_on)}
