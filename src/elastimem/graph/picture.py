"""The entity graph as one self-contained HTML page: a deterministic layout, an inline SVG,
CSS and a small script for pan, zoom, search and neighbour highlighting. Nothing comes from
the network, fonts are the system's, and the page's Content-Security-Policy allows its one
script by hash (no ``unsafe-inline``) and forbids every fetch.

Layout: each component sits on concentric rings (most-mentioned node in the middle) and
components are packed in rows, largest first, with unconnected nodes in a final grid. Edges
are arrows (``parent of`` reads source → target); two edges between one pair bend apart.
Relation labels are placed greedily where they overlap no node, name or other label; a label
with no free place is hidden and shows when its node is selected (and in the hover title).
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from dataclasses import dataclass

from ..text import strip_controls
from .display import relation_words, type_words
from .names import SELF_TYPE
from .snapshot import Snapshot, ViewNode, load_snapshot

# Layout, in SVG user units.
NODE_SPACING = 104.0
NODE_RADIUS = 7.0
COMPONENT_GAP = 72.0
# Rows are as wide as makes the whole drawing about this much wider than tall.
ASPECT = 1.6
MIN_ROW_WIDTH = 700.0
MIN_VIEW_WIDTH = 900.0
MIN_VIEW_HEIGHT = 560.0
MARGIN = 40.0
# Relationship labels are placed on the edges only for graphs up to this size; larger ones
# show them on selection and in the hover title, where they do not pile up.
EDGE_LABEL_LIMIT = 300
# Drawn node labels wrap at this many characters a line, on at most LABEL_LINES lines.
LABEL_CHARS = 20
LABEL_LINES = 3
# Text boxes for label placement: average glyph width and line height at the page's sizes.
NODE_FONT_PX, EDGE_FONT_PX = 11.0, 10.0
GLYPH_WIDTH = 0.6
LINE_HEIGHT = 1.25
# Where along an edge (0 = source, 1 = target) a relation label may sit, in order of taste.
LABEL_SPOTS = (0.5, 0.38, 0.62, 0.28, 0.72)
# Two or more edges between one pair bend apart by this much each.
BEND = 22.0
UNCLUSTERED_COLOUR = "#9aa0a6"
SELF_COLOUR = "#202124"
# Tableau 10, minus its grey (kept for unclustered nodes): easy to tell apart.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f")  # fmt: skip
# The golden angle spreads any number of cluster hues around the wheel without repeats.
_GOLDEN_ANGLE = 137.508
EMPTY_GRAPH_HELP = (
    "No entities yet. The entity graph is built by the host's LLM (llm= in elastimem.open, "
    "--llm-url on the command line) as turns are recorded; without one it stays empty. With "
    "one it shows the people, places, organisations and things you mention, and how they "
    "relate: who is whose sister, who lives or works where."
)


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


# -- labels ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Box:
    left: float
    top: float
    right: float
    bottom: float

    def hits(self, other: _Box) -> bool:
        return not (
            self.right <= other.left
            or other.right <= self.left
            or self.bottom <= other.top
            or other.bottom <= self.top
        )


def _text_box(cx: float, top: float, lines: list[str], font_px: float) -> _Box:
    width = max((len(line) for line in lines), default=0) * font_px * GLYPH_WIDTH
    height = len(lines) * font_px * LINE_HEIGHT
    return _Box(cx - width / 2 - 2, top - 1, cx + width / 2 + 2, top + height + 1)


def wrap_name(name: str) -> list[str]:
    """A node's drawn label: whole words on lines of at most ``LABEL_CHARS`` characters, at
    most ``LABEL_LINES`` lines (the last one ending in … when the name goes on); the hover
    title and ``data-name`` keep the name whole."""
    lines: list[str] = []
    current = ""
    for word in name.split():
        while len(word) > LABEL_CHARS:  # a word longer than a line is split across lines
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:LABEL_CHARS])
            word = word[LABEL_CHARS:]
        if current and len(current) + 1 + len(word) > LABEL_CHARS:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    if len(lines) > LABEL_LINES:
        last = lines[LABEL_LINES - 1][: LABEL_CHARS - 1].rstrip()
        lines = [*lines[: LABEL_LINES - 1], last + "…"]
    return lines or [""]


def _radius_of(node: ViewNode) -> float:
    return NODE_RADIUS + min(6.0, math.log1p(max(0, node.mentions - 1)) * 2)


@dataclass(frozen=True)
class _Curve:
    """An edge drawn from the rim of its source to the rim of its target, bent by ``bend``
    (a quadratic Bézier through a control point beside the midpoint)."""

    x1: float
    y1: float
    cx: float
    cy: float
    x2: float
    y2: float

    def at(self, t: float) -> tuple[float, float]:
        u = 1 - t
        return (
            u * u * self.x1 + 2 * u * t * self.cx + t * t * self.x2,
            u * u * self.y1 + 2 * u * t * self.cy + t * t * self.y2,
        )

    def path(self) -> str:
        return (
            f"M{self.x1:.1f} {self.y1:.1f} Q{self.cx:.1f} {self.cy:.1f} {self.x2:.1f} {self.y2:.1f}"
        )


def _curve(
    start: tuple[float, float], end: tuple[float, float], r1: float, r2: float, bend: float
) -> _Curve:
    (x1, y1), (x2, y2) = start, end
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    # The normal of the pair's canonical direction, so opposite edges bend to opposite sides.
    nx, ny = -uy, ux
    mx, my = (x1 + x2) / 2 + nx * bend, (y1 + y2) / 2 + ny * bend

    def rim(px: float, py: float, qx: float, qy: float, r: float) -> tuple[float, float]:
        vx, vy = qx - px, qy - py
        d = math.hypot(vx, vy) or 1.0
        return px + vx / d * r, py + vy / d * r

    sx, sy = rim(x1, y1, mx, my, r1 + 1.0)
    # The arrowhead's tip ends on the target's rim, clear of its white stroke.
    ex, ey = rim(x2, y2, mx, my, r2 + 2.5)
    return _Curve(sx, sy, mx, my, ex, ey)


# -- HTML -----------------------------------------------------------------------------------

_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: #202124; background: #fafafa; display: flex; height: 100vh; }
#side { width: 280px; padding: 12px; overflow: auto; border-right: 1px solid #ddd;
  background: #fff; flex: none; }
#side h1 { font-size: 16px; margin: 0 0 8px; }
#side label { display: block; font-weight: 600; margin-top: 8px; }
#side input { width: 100%; padding: 6px; margin: 4px 0 10px; font: inherit; }
#side ul { list-style: none; padding: 0; margin: 0; }
#side li { margin: 3px 0; display: flex; align-items: center; gap: 6px; }
#side .help { color: #5f6368; font-size: 13px; }
.swatch { width: 12px; height: 12px; border-radius: 50%; flex: none; }
#stage { flex: 1; position: relative; min-height: 0; }
#stage svg { width: 100%; height: 100%; display: block; cursor: grab; }
#stage svg:focus { outline: 2px solid #1a73e8; outline-offset: -2px; }
#controls { position: absolute; top: 10px; right: 10px; display: flex; gap: 4px; }
#controls button { min-width: 36px; min-height: 36px; font: 600 16px system-ui, sans-serif;
  background: #fff; border: 1px solid #c4c7cc; border-radius: 6px; cursor: pointer; }
#controls button:focus-visible { outline: 2px solid #1a73e8; }
#empty { position: absolute; inset: 0; display: flex; align-items: center;
  justify-content: center; padding: 24px; }
#empty p { max-width: 34em; background: #fff; border: 1px solid #ddd; border-radius: 8px;
  padding: 16px 20px; color: #3c4043; }
.edge path { fill: none; stroke: #80868b; stroke-width: 1.2; }
.edge.self path { stroke: #5f6368; }
.edge text { font-size: 10px; fill: #3c4043; paint-order: stroke; stroke: #fafafa;
  stroke-width: 3px; }
.edge text.off { display: none; }
.edge.lit text.off { display: inline; }
.edge.lit path { stroke: #202124; stroke-width: 1.8; }
#arrow path { fill: #80868b; }
.node { cursor: pointer; }
.node circle { stroke: #fff; stroke-width: 1.5; }
.node text { font-size: 11px; fill: #202124; paint-order: stroke; stroke: #fafafa;
  stroke-width: 3px; }
.node.self text { font-weight: 600; }
.node:focus { outline: none; }
.node:focus circle { stroke: #1a73e8; stroke-width: 3; }
.dim { opacity: 0.15; }
.hit circle { stroke: #202124; stroke-width: 3; }
@media (max-width: 640px) {
  body { flex-direction: column; }
  #side { width: auto; max-height: 38vh; border-right: 0; border-bottom: 1px solid #ddd; }
}
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
  function centre() {
    return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
  }
  function zoom(f, p) {
    var next = Math.min(20, Math.max(0.05, scale * f));
    f = next / scale;
    tx = p.x - (p.x - tx) * f;
    ty = p.y - (p.y - ty) * f;
    scale = next;
    apply();
  }
  svg.addEventListener("wheel", function (evt) {
    evt.preventDefault();
    zoom(evt.deltaY < 0 ? 1.15 : 1 / 1.15, toUser(evt));
  }, { passive: false });
  svg.addEventListener("pointerdown", function (evt) {
    var p = toUser(evt);
    drag = { x: p.x - tx, y: p.y - ty };
  });
  window.addEventListener("pointermove", function (evt) {
    if (!drag) { return; }
    var p = toUser(evt);
    tx = p.x - drag.x;
    ty = p.y - drag.y;
    apply();
  });
  window.addEventListener("pointerup", function () { drag = null; });
  document.getElementById("zoom-in").addEventListener("click", function () {
    zoom(1.3, centre());
  });
  document.getElementById("zoom-out").addEventListener("click", function () {
    zoom(1 / 1.3, centre());
  });
  document.getElementById("zoom-fit").addEventListener("click", function () {
    scale = 1; tx = 0; ty = 0; apply();
  });
  svg.addEventListener("keydown", function (evt) {
    var step = box.width / 20 / scale, k = evt.key;
    if (k === "+" || k === "=") { zoom(1.3, centre()); }
    else if (k === "-") { zoom(1 / 1.3, centre()); }
    else if (k === "ArrowLeft") { tx += step; apply(); }
    else if (k === "ArrowRight") { tx -= step; apply(); }
    else if (k === "ArrowUp") { ty += step; apply(); }
    else if (k === "ArrowDown") { ty -= step; apply(); }
    else { return; }
    evt.preventDefault();
  });
  var nodes = Array.prototype.slice.call(document.querySelectorAll(".node"));
  var edges = Array.prototype.slice.call(document.querySelectorAll(".edge"));
  var selected = null;
  function clear() {
    nodes.concat(edges).forEach(function (el) { el.classList.remove("dim", "hit", "lit"); });
  }
  function focus(id) {
    clear();
    if (id === null) { return; }
    var keep = {};
    keep[id] = true;
    edges.forEach(function (e) {
      var s = e.getAttribute("data-source"), t = e.getAttribute("data-target");
      if (s === id || t === id) { keep[s] = true; keep[t] = true; e.classList.add("lit"); }
      else { e.classList.add("dim"); }
    });
    nodes.forEach(function (n) {
      if (!keep[n.getAttribute("data-node-id")]) { n.classList.add("dim"); }
    });
  }
  function toggle(n) {
    var id = n.getAttribute("data-node-id");
    selected = selected === id ? null : id;
    focus(selected);
  }
  nodes.forEach(function (n) {
    n.addEventListener("click", function (evt) { evt.stopPropagation(); toggle(n); });
    n.addEventListener("keydown", function (evt) {
      if (evt.key === "Enter" || evt.key === " ") { evt.preventDefault(); toggle(n); }
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

# The page's one script is allowed by its hash: no inline script but this one can run.
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(_JS.encode()).digest()).decode()
CSP = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src '{SCRIPT_HASH}'; "
    "img-src data:; font-src 'none'; connect-src 'none'"
)


def _esc(text: object) -> str:
    """HTML-escaped, without control or bidi-override characters: a name stored with
    U+202E would read differently in the picture than it is stored."""
    return html.escape(strip_controls(str(text)), quote=True)


def _node_label(node: ViewNode, x: float, y: float, radius: float) -> tuple[str, _Box]:
    lines = wrap_name(node.display)
    top = y + radius + 4
    step = NODE_FONT_PX * LINE_HEIGHT
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{step if i else NODE_FONT_PX:.1f}">{_esc(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    text = f'<text x="{x:.1f}" y="{top:.1f}" text-anchor="middle">{spans}</text>'
    return text, _text_box(x, top, lines, NODE_FONT_PX)


def _bends(snap: Snapshot) -> dict[int, float]:
    """Edge id → its bend: 0 for the only edge of a pair, spread apart for several."""
    pairs: dict[tuple[int, int], list[int]] = {}
    for edge in snap.edges:
        pairs.setdefault((min(edge.source, edge.target), max(edge.source, edge.target)),
                         []).append(edge.id)  # fmt: skip
    bends: dict[int, float] = {}
    by_id = {edge.id: edge for edge in snap.edges}
    for (low, _high), ids in pairs.items():
        count = len(ids)
        for i, edge_id in enumerate(sorted(ids)):
            offset = (i - (count - 1) / 2) * BEND
            # Bends are measured against the pair's canonical direction (low → high).
            bends[edge_id] = offset if by_id[edge_id].source == low else -offset
    return bends


def render_html(source: object, *, title: str = "elastimem graph") -> str:
    """The graph as one self-contained HTML page (inline SVG, CSS and JS; no network).

    Every node is one ``<g class="node">`` with ``data-node-id``, ``data-name`` (the name as
    written), ``data-type`` and ``data-cluster`` attributes; every edge one ``<g
    class="edge">`` with ``data-source``/``data-target``, an arrow and its relation in words.
    Names are HTML-escaped; nodes are coloured by cluster; the self node is drawn as ``(you)``.
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
    width = max(MIN_VIEW_WIDTH, max(xs) - min(xs) + MARGIN * 6)
    height = max(MIN_VIEW_HEIGHT, max(ys) - min(ys) + MARGIN * 4)
    min_x = (min(xs) + max(xs)) / 2 - width / 2
    min_y = (min(ys) + max(ys)) / 2 - height / 2
    self_ids = {n.id for n in snap.nodes.values() if n.type == SELF_TYPE}
    radii = {node.id: _radius_of(node) for node in snap.nodes.values()}

    node_parts: list[str] = []
    taken: list[_Box] = []
    for node in snap.nodes.values():
        x, y = positions[node.id]
        radius = radii[node.id]
        taken.append(_Box(x - radius, y - radius, x + radius, y + radius))
        label, label_box = _node_label(node, x, y, radius)
        taken.append(label_box)
        cluster_id = clustered.get(node.id)
        cluster_attr = "" if cluster_id is None else str(cluster_id)
        css = "node self" if node.type == SELF_TYPE else "node"
        tip = f"{node.display} ({type_words(node.type)})"
        if node.aliases:
            tip += " — also: " + ", ".join(node.aliases)
        node_parts.append(
            f'<g class="{css}" tabindex="0" role="button" data-node-id="{node.id}" '
            f'data-name="{_esc(node.display)}" data-type="{_esc(node.type)}" '
            f'data-cluster="{cluster_attr}" aria-label="{_esc(tip)}">'
            f"<title>{_esc(tip)}</title>"
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour_of(node)}"/>'
            f"{label}</g>"
        )

    edge_parts: list[str] = []
    place_labels = len(snap.edges) <= EDGE_LABEL_LIMIT
    bends = _bends(snap)
    # Strong edges claim the free spots first.
    for edge in sorted(snap.edges, key=lambda e: (-e.weight, e.id)):
        if edge.source not in positions or edge.target not in positions:
            continue
        curve = _curve(positions[edge.source], positions[edge.target], radii[edge.source],
                       radii[edge.target], bends.get(edge.id, 0.0))  # fmt: skip
        words = relation_words(edge.relationship)
        spot: tuple[float, float] | None = None
        if place_labels:
            for t in LABEL_SPOTS:
                px, py = curve.at(t)
                candidate = _text_box(px, py - EDGE_FONT_PX * 0.8, [words], EDGE_FONT_PX)
                if not any(candidate.hits(other) for other in taken):
                    taken.append(candidate)
                    spot = (px, py)
                    break
        if spot is None:  # shown when its node is selected, where it does not pile up
            px, py = curve.at(0.5)
            hidden = ' class="off"'
        else:
            (px, py), hidden = spot, ""
        source_name = snap.nodes[edge.source].display
        target_name = snap.nodes[edge.target].display
        css = "edge self" if {edge.source, edge.target} & self_ids else "edge"
        edge_parts.append(
            f'<g class="{css}" data-source="{edge.source}" data-target="{edge.target}" '
            f'data-relation="{_esc(words)}">'
            f"<title>{_esc(source_name)} → {_esc(words)} → {_esc(target_name)}</title>"
            f'<path d="{curve.path()}" marker-end="url(#arrow)"/>'
            f'<text{hidden} x="{px:.1f}" y="{py + EDGE_FONT_PX * 0.35:.1f}" '
            f'text-anchor="middle">{_esc(words)}</text></g>'
        )

    legend: list[str] = []
    for cluster_id in order:
        cluster_name = snap.cluster_label(cluster_id)
        members = sorted(snap.clusters[cluster_id], key=lambda n: (-snap.nodes[n].mentions, n))
        names = [snap.nodes[n].display for n in members]
        shown = cluster_name or ", ".join(names[:3]) + ("…" if len(names) > 3 else "")
        legend.append(
            f'<li data-cluster="{cluster_id}"><span class="swatch" '
            f'style="background:{colours[cluster_id]}"></span>'
            f"{_esc(shown)} ({len(members)})</li>"
        )
    visible = len([n for n in snap.nodes.values() if n.type != SELF_TYPE])
    empty = (
        [f'<div id="empty" data-empty="1"><p>{_esc(EMPTY_GRAPH_HELP)}</p></div>']
        if visible == 0
        else []
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_esc(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            '<div id="side">',
            f"<h1>{_esc(title)}</h1>",
            f"<p>{visible} entities, {len(snap.edges)} relationships, "
            f"{len(snap.clusters)} clusters.</p>",
            '<label for="search">Find a name</label>',
            '<input id="search" type="search" placeholder="e.g. Sofia">',
            "<ul>",
            *legend,
            "</ul>",
            '<p class="help">Drag to pan, scroll or use + and − to zoom, click a name to see '
            "its relations; arrows point from who or what a relation is about.</p>",
            "</div>",
            '<div id="stage">',
            f'<svg id="graph" role="img" tabindex="0" '
            f'aria-label="{_esc(title)}" viewBox="{min_x:.1f} {min_y:.1f} {width:.1f} '
            f'{height:.1f}" preserveAspectRatio="xMidYMid meet">',
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
            'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
            '<path d="M0 0L10 5L0 10z"/></marker></defs>',
            '<g id="viewport">',
            '<g class="edges">',
            *edge_parts,
            "</g>",
            '<g class="nodes">',
            *node_parts,
            "</g>",
            "</g>",
            "</svg>",
            '<div id="controls">',
            '<button id="zoom-in" type="button" aria-label="Zoom in">+</button>',
            '<button id="zoom-out" type="button" aria-label="Zoom out">−</button>',
            '<button id="zoom-fit" type="button" aria-label="Show the whole graph">Fit</button>',
            "</div>",
            *empty,
            "</div>",
            f"<script>{_JS}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )
