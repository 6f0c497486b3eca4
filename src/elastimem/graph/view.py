"""Pictures of the entity graph for people: Graphviz DOT here, one self-contained HTML page
in ``picture``. Both read one ``snapshot`` and, unlike every other view, draw the self node
(as ``(you)``), names as people wrote them and relations in words (``display``).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..text import strip_controls
from .display import relation_words, type_words
from .names import SELF_TYPE
from .picture import SELF_COLOUR, UNCLUSTERED_COLOUR, layout, render_html
from .snapshot import Snapshot, ViewEdge, ViewNode, load_snapshot

__all__ = ["SELF_COLOUR", "UNCLUSTERED_COLOUR", "Snapshot", "ViewEdge", "ViewNode", "layout",
           "load_snapshot", "render", "render_dot", "render_html"]  # fmt: skip


# -- DOT ------------------------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """A double-quoted DOT string: backslashes and quotes escaped, line breaks as ``\\n``;
    control and bidi-override characters dropped (see :func:`text.strip_controls`)."""
    cleaned = "".join(" " if ch in "\t\r" else ch for ch in strip_controls(text))
    escaped = cleaned.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def render_dot(source: Any) -> str:
    """The graph as Graphviz DOT (``digraph elastimem``).

    Nodes are ``n<id>`` with quoted, escaped names as people wrote them as labels (the self
    node is ``(you)``), edges carry their relationship in words as a label, and each cluster
    is a ``cluster_<id>`` subgraph labelled with its stored label when it has one.
    """
    snap = load_snapshot(source)
    lines = [
        "digraph elastimem {",
        '  graph [rankdir=LR, fontname="Helvetica"];',
        '  node [shape=ellipse, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    clustered = snap.cluster_of()

    def node_line(node: ViewNode, indent: str) -> str:
        attrs = [
            f"label={_dot_string(node.display)}",
            f"tooltip={_dot_string(type_words(node.type))}",
        ]
        if node.type == SELF_TYPE:
            attrs.append("shape=doublecircle")
        return f"{indent}n{node.id} [{', '.join(attrs)}];"

    for cluster_id in sorted(snap.clusters):
        label = snap.cluster_label(cluster_id)
        lines.append(f"  subgraph cluster_{cluster_id} {{")
        if label:
            lines.append(f"    label={_dot_string(label)};")
        for node_id in sorted(snap.clusters[cluster_id]):
            lines.append(node_line(snap.nodes[node_id], "    "))
        lines.append("  }")
    for node in snap.nodes.values():
        if node.id not in clustered:
            lines.append(node_line(node, "  "))
    for edge in snap.edges:
        lines.append(
            f"  n{edge.source} -> n{edge.target} "
            f"[label={_dot_string(relation_words(edge.relationship))}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(source: Any, as_: str = "dot") -> str:
    """The graph as ``"dot"`` (:func:`render_dot`) or ``"html"`` (:func:`render_html`);
    ``ConfigError`` for another format."""
    if as_ not in ("dot", "html"):
        raise ConfigError(f"as_={as_!r} is invalid; pass 'dot' or 'html'")
    return render_dot(source) if as_ == "dot" else render_html(source)
