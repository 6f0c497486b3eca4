"""Pictures of the entity graph for people: Graphviz DOT and one self-contained HTML page.

Both read one snapshot of ``graph_nodes``/``graph_edges`` and, unlike every other view, draw
the self node (as ``(you)``). Clusters are the connected components of §5.7 (the self node
excluded), computed at render time so the picture is right even before a consolidation sweep
has stored them; a stored ``cluster_label`` names a component when its members carry one.

The HTML page needs nothing from the network: the SVG, the CSS and a small script for pan,
zoom, search and neighbour highlighting are inline, fonts are the system's, and a
Content-Security-Policy forbids any fetch. The layout is computed here, deterministically:
each component sits on concentric rings (most-mentioned node in the middle) and components
are packed in rows, largest first, with unconnected nodes in a final grid.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..storage.tx import Tx
from ..text import strip_controls
from .maintenance import components
from .names import SELF_TYPE

SELF_LABEL = "(you)"
# Layout, in SVG user units.
NODE_SPACING = 64.0
NODE_RADIUS = 7.0
COMPONENT_GAP = 56.0
# Rows are as wide as makes the whole drawing about this much wider than tall.
ASPECT = 1.6
MIN_ROW_WIDTH = 700.0
MIN_VIEW_WIDTH = 900.0
MIN_VIEW_HEIGHT = 560.0
MARGIN = 40.0
# Relationship labels are drawn on the edges only for small graphs; larger ones keep them in
# the hover title, where they do not pile up into an unreadable smear.
EDGE_LABEL_LIMIT = 150
# Drawn node labels are cut to this many characters so neighbours stay readable.
LABEL_CHARS = 18
UNCLUSTERED_COLOUR = "#9aa0a6"
SELF_COLOUR = "#202124"
# Tableau 10, minus its grey (kept for unclustered nodes): easy to tell apart.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f")  # fmt: skip
# The golden angle spreads any number of cluster hues around the wheel without repeats.
_GOLDEN_ANGLE = 137.508


@dataclass(frozen=True)
class ViewNode:
    id: int
    type: str
    name: str
    aliases: tuple[str, ...]
    mentions: int
    label: str | None

    @property
    def display(self) -> str:
        return SELF_LABEL if self.type == SELF_TYPE else self.name


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


def load_snapshot(source: Any) -> Snapshot:
    """Nodes (self included), edges and render-time clusters, read in one snapshot."""
    snap = Snapshot()
    with _transaction(source) as tx:
        for row in tx.graph.nodes(with_self=True):
            node = ViewNode(row.id, row.type, row.name, row.aliases, row.mentions,
                            row.cluster_label)  # fmt: skip
            snap.nodes[node.id] = node
        snap.edges = [ViewEdge(*edge) for edge in tx.graph.edges()]
        snap.clusters = components(tx)
    return snap


# -- DOT ------------------------------------------------------------------------------------


def _dot_string(text: str) -> str:
    """A double-quoted DOT string: backslashes and quotes escaped, line breaks as ``\\n``;
    control and bidi-override characters dropped (see :func:`text.strip_controls`)."""
    cleaned = "".join(" " if ch in "\t\r" else ch for ch in strip_controls(text))
    escaped = cleaned.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def render_dot(source: Any) -> str:
    """The graph as Graphviz DOT (``digraph elastimem``).

    Nodes are ``n<id>`` with quoted, escaped names as labels (the self node is ``(you)``),
    edges carry their relationship as a label, and each cluster is a ``cluster_<id>``
    subgraph labelled with its stored label when it has one.
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
        attrs = [f"label={_dot_string(node.display)}", f"tooltip={_dot_string(node.type)}"]
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
            f"  n{edge.source} -> n{edge.target} [label={_dot_string(edge.relationship)}];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- layout ---------------------------------------------------------------------------------


def _ring_positions(count: int) -> list[tuple[float, float]]:
    """Offsets for ``count`` nodes: one in the middle, then rings of growing capacity."""
    if count <= 0:
        return []
    if count == 2:
        return [(-NODE_SPACING, 0.0), (NODE_SPACING, 0.0)]
    positions = [(0.0, 0.0)]
    ring = 1
    while len(positions) < count:
        radius = ring * NODE_SPACING
        capacity = max(6, int(2 * math.pi * radius / NODE_SPACING))
        take = min(capacity, count - len(positions))
        for i in range(take):
            angle = 2 * math.pi * i / take - math.pi / 2
            positions.append((radius * math.cos(angle), radius * math.sin(angle)))
        ring += 1
    return positions


def _radius(count: int) -> float:
    positions = _ring_positions(count)
    return max((math.hypot(x, y) for x, y in positions), default=0.0) + NODE_SPACING / 2


def layout(snap: Snapshot) -> dict[int, tuple[float, float]]:
    """Deterministic positions: components on rings, packed in rows, largest first."""
    groups: list[list[int]] = []
    for cluster_id in sorted(snap.clusters, key=lambda c: (-len(snap.clusters[c]), c)):
        members = sorted(snap.clusters[cluster_id], key=lambda n: (-snap.nodes[n].mentions, n))
        groups.append(members)
    clustered = snap.cluster_of()
    self_nodes = [n for n, node in snap.nodes.items() if node.type == SELF_TYPE]
    loose = [n for n in snap.nodes if n not in clustered and n not in self_nodes]
    loose.sort(key=lambda n: (-snap.nodes[n].mentions, n))
    blocks = [self_nodes, *groups] if self_nodes else groups
    area = sum((2 * _radius(len(b)) + COMPONENT_GAP) ** 2 for b in blocks)
    area += len(loose) * (NODE_SPACING * 2) * NODE_SPACING
    row_width = max(MIN_ROW_WIDTH, math.sqrt(area * ASPECT))
    positions: dict[int, tuple[float, float]] = {}
    x = y = MARGIN
    row_height = 0.0
    for members in blocks:
        radius = _radius(len(members))
        size = 2 * radius
        if x > MARGIN and x + size > row_width:
            x = MARGIN
            y += row_height + COMPONENT_GAP
            row_height = 0.0
        cx, cy = x + radius, y + radius
        for node_id, (dx, dy) in zip(members, _ring_positions(len(members)), strict=True):
            positions[node_id] = (cx + dx, cy + dy)
        x += size + COMPONENT_GAP
        row_height = max(row_height, size)
    if loose:
        y += row_height + COMPONENT_GAP
        per_row = max(1, int((row_width - MARGIN) // (NODE_SPACING * 2)))
        for i, node_id in enumerate(loose):
            positions[node_id] = (
                MARGIN + NODE_SPACING + (i % per_row) * NODE_SPACING * 2,
                y + (i // per_row) * NODE_SPACING,
            )
    return positions


def _colour(index: int) -> str:
    """A distinct colour per cluster: a qualitative palette, then golden-angle hues."""
    if index < len(PALETTE):
        return PALETTE[index]
    hue = (index * _GOLDEN_ANGLE) % 360.0
    return f"hsl({hue:.1f}, 62%, 48%)"


# -- HTML -----------------------------------------------------------------------------------

_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: #202124; background: #fafafa; display: flex; height: 100vh; }
#side { width: 260px; padding: 12px; overflow: auto; border-right: 1px solid #ddd;
  background: #fff; }
#side h1 { font-size: 16px; margin: 0 0 8px; }
#side input { width: 100%; padding: 6px; margin: 6px 0 10px; }
#side ul { list-style: none; padding: 0; margin: 0; }
#side li { margin: 3px 0; display: flex; align-items: center; gap: 6px; }
.swatch { width: 12px; height: 12px; border-radius: 50%; flex: none; }
#stage { flex: 1; position: relative; }
#stage svg { width: 100%; height: 100%; display: block; cursor: grab; }
.edge line { stroke: #b0b4ba; stroke-width: 1; }
.edge.self line { stroke-dasharray: 3 3; stroke: #d5d7db; }
.edge text { font-size: 9px; fill: #6b7075; }
.node circle { stroke: #fff; stroke-width: 1.5; }
.node text { font-size: 11px; fill: #202124; paint-order: stroke; stroke: #fafafa;
  stroke-width: 3px; }
.node.self text { font-weight: 600; }
.dim { opacity: 0.15; }
.hit circle { stroke: #202124; stroke-width: 3; }
"""

_JS = """
(function () {
  "use strict";
  var svg = document.getElementById("graph");
  var view = document.getElementById("viewport");
  var box = svg.viewBox.baseVal;
  var scale = 1, tx = 0, ty = 0, drag = null;
  function apply() {
    view.setAttribute("transform", "translate(" + tx + " " + ty + ") scale(" + scale + ")");
  }
  function toUser(evt) {
    var r = svg.getBoundingClientRect();
    var k = Math.max(box.width / r.width, box.height / r.height) || 1;
    return { x: (evt.clientX - r.left) * k + box.x, y: (evt.clientY - r.top) * k + box.y };
  }
  svg.addEventListener("wheel", function (evt) {
    evt.preventDefault();
    var p = toUser(evt), f = evt.deltaY < 0 ? 1.15 : 1 / 1.15;
    var next = Math.min(20, Math.max(0.05, scale * f));
    f = next / scale;
    tx = p.x - (p.x - tx) * f;
    ty = p.y - (p.y - ty) * f;
    scale = next;
    apply();
  }, { passive: false });
  svg.addEventListener("mousedown", function (evt) {
    var p = toUser(evt);
    drag = { x: p.x - tx, y: p.y - ty };
  });
  window.addEventListener("mousemove", function (evt) {
    if (!drag) { return; }
    var p = toUser(evt);
    tx = p.x - drag.x;
    ty = p.y - drag.y;
    apply();
  });
  window.addEventListener("mouseup", function () { drag = null; });
  var nodes = Array.prototype.slice.call(document.querySelectorAll(".node"));
  var edges = Array.prototype.slice.call(document.querySelectorAll(".edge"));
  var selected = null;
  function clear() {
    nodes.concat(edges).forEach(function (el) { el.classList.remove("dim", "hit"); });
  }
  function focus(id) {
    clear();
    if (id === null) { return; }
    var keep = {};
    keep[id] = true;
    edges.forEach(function (e) {
      var s = e.getAttribute("data-source"), t = e.getAttribute("data-target");
      if (s === id || t === id) { keep[s] = true; keep[t] = true; }
      else { e.classList.add("dim"); }
    });
    nodes.forEach(function (n) {
      if (!keep[n.getAttribute("data-node-id")]) { n.classList.add("dim"); }
    });
  }
  nodes.forEach(function (n) {
    n.addEventListener("click", function (evt) {
      evt.stopPropagation();
      var id = n.getAttribute("data-node-id");
      selected = selected === id ? null : id;
      focus(selected);
    });
  });
  svg.addEventListener("click", function () { selected = null; focus(null); });
  var search = document.getElementById("search");
  search.addEventListener("input", function () {
    var q = search.value.trim().toLowerCase();
    clear();
    if (!q) { return; }
    nodes.forEach(function (n) {
      var name = (n.getAttribute("data-name") || "").toLowerCase();
      n.classList.add(name.indexOf(q) >= 0 ? "hit" : "dim");
    });
  });
  apply();
  document.body.setAttribute("data-ready", "1");
})();
"""

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; font-src 'none'; connect-src 'none'"
)


def _short(text: str) -> str:
    """A drawn label: long names are cut (the hover title and data-name keep them whole)."""
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1].rstrip() + "…"


def _esc(text: object) -> str:
    """HTML-escaped, without control or bidi-override characters: a name stored with
    U+202E would read differently in the picture than it is stored."""
    return html.escape(strip_controls(str(text)), quote=True)


def render(source: Any, as_: str = "dot") -> str:
    """The graph as ``"dot"`` (:func:`render_dot`) or ``"html"`` (:func:`render_html`);
    ``ConfigError`` for another format."""
    if as_ not in ("dot", "html"):
        raise ConfigError(f"as_={as_!r} is invalid; pass 'dot' or 'html'")
    return render_dot(source) if as_ == "dot" else render_html(source)


def render_html(source: Any, *, title: str = "elastimem graph") -> str:
    """The graph as one self-contained HTML page (inline SVG, CSS and JS; no network).

    Every node is one ``<g class="node">`` with ``data-node-id``, ``data-name``,
    ``data-type`` and ``data-cluster`` attributes; names are HTML-escaped; nodes are coloured
    by cluster, the self node is drawn as ``(you)``.
    """
    snap = load_snapshot(source)
    positions = layout(snap)
    clustered = snap.cluster_of()
    order = sorted(snap.clusters, key=lambda c: (-len(snap.clusters[c]), c))
    colours = {cid: _colour(i) for i, cid in enumerate(order)}

    def colour_of(node: ViewNode) -> str:
        if node.type == SELF_TYPE:
            return SELF_COLOUR
        cluster_id = clustered.get(node.id)
        return colours[cluster_id] if cluster_id is not None else UNCLUSTERED_COLOUR

    xs = [p[0] for p in positions.values()] or [0.0]
    ys = [p[1] for p in positions.values()] or [0.0]
    # A small graph keeps a readable scale instead of being blown up to fill the window.
    width = max(MIN_VIEW_WIDTH, max(xs) - min(xs) + MARGIN * 4)
    height = max(MIN_VIEW_HEIGHT, max(ys) - min(ys) + MARGIN * 3)
    min_x = (min(xs) + max(xs)) / 2 - width / 2
    min_y = (min(ys) + max(ys)) / 2 - height / 2
    self_ids = {n.id for n in snap.nodes.values() if n.type == SELF_TYPE}
    edge_parts: list[str] = []
    show_labels = len(snap.edges) <= EDGE_LABEL_LIMIT
    for edge in snap.edges:
        if edge.source not in positions or edge.target not in positions:
            continue
        (x1, y1), (x2, y2) = positions[edge.source], positions[edge.target]
        source_name = snap.nodes[edge.source].display
        target_name = snap.nodes[edge.target].display
        css = "edge self" if {edge.source, edge.target} & self_ids else "edge"
        text = ""
        if show_labels:
            text = (
                f'<text x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2 - 3:.1f}" '
                f'text-anchor="middle">{_esc(edge.relationship)}</text>'
            )
        edge_parts.append(
            f'<g class="{css}" data-source="{edge.source}" data-target="{edge.target}">'
            f"<title>{_esc(source_name)} {_esc(edge.relationship)} {_esc(target_name)}</title>"
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>{text}</g>'
        )
    node_parts: list[str] = []
    for node in snap.nodes.values():
        x, y = positions[node.id]
        cluster_id = clustered.get(node.id)
        cluster_attr = "" if cluster_id is None else str(cluster_id)
        css = "node self" if node.type == SELF_TYPE else "node"
        radius = NODE_RADIUS + min(6.0, math.log1p(max(0, node.mentions - 1)) * 2)
        tip = f"{node.display} ({node.type})"
        if node.aliases:
            tip += " — also: " + ", ".join(node.aliases)
        node_parts.append(
            f'<g class="{css}" data-node-id="{node.id}" data-name="{_esc(node.display)}" '
            f'data-type="{_esc(node.type)}" data-cluster="{cluster_attr}">'
            f"<title>{_esc(tip)}</title>"
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour_of(node)}"/>'
            f'<text x="{x:.1f}" y="{y + radius + 12:.1f}" text-anchor="middle">'
            f"{_esc(_short(node.display))}</text></g>"
        )
    legend: list[str] = []
    for cluster_id in order:
        label = snap.cluster_label(cluster_id)
        members = sorted(snap.clusters[cluster_id], key=lambda n: (-snap.nodes[n].mentions, n))
        names = [snap.nodes[n].name for n in members]
        shown = label or ", ".join(names[:3]) + ("…" if len(names) > 3 else "")
        legend.append(
            f'<li data-cluster="{cluster_id}"><span class="swatch" '
            f'style="background:{colours[cluster_id]}"></span>'
            f"{_esc(shown)} ({len(members)})</li>"
        )
    visible = len([n for n in snap.nodes.values() if n.type != SELF_TYPE])
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_esc(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            '<div id="side">',
            f"<h1>{_esc(title)}</h1>",
            f"<p>{visible} entities, {len(snap.edges)} relationships, "
            f"{len(snap.clusters)} clusters.</p>",
            '<input id="search" type="search" placeholder="Find a name" aria-label="Find a name">',
            "<ul>",
            *legend,
            "</ul>",
            "<p>Drag to pan, scroll to zoom, click a node to see its neighbours.</p>",
            "</div>",
            '<div id="stage">',
            f'<svg id="graph" role="img" '
            f'aria-label="{_esc(title)}" viewBox="{min_x:.1f} {min_y:.1f} {width:.1f} '
            f'{height:.1f}" preserveAspectRatio="xMidYMid meet">',
            '<g id="viewport">',
            '<g class="edges">',
            *edge_parts,
            "</g>",
            '<g class="nodes">',
            *node_parts,
            "</g>",
            "</g>",
            "</svg>",
            "</div>",
            f"<script>{_JS}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )
