"""The graph pictures: DOT text and the self-contained HTML page, the latter in real Chromium."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

import elastimem
from elastimem import graph
from elastimem.graph import maintenance as graph_maint
from elastimem.graph import names as graph_names
from elastimem.graph import view as graph_view
from elastimem.graph.display import title_case
from tests.graph.conftest import database, reading, writing

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
NASTY = [
    'Tuffy "the <bot>"',
    "back\\slash",
    "O'Brien & Sons",
    "<script>alert(1)</script>",
    "Ünïcödé Nâmé",
    "🤖 robot",
    "line\u2028break",
    "x" * 120,
]


def put(
    mem: elastimem.Elastimem, entities: list[str], relationships: list[tuple[str, str, str]]
) -> None:
    with writing(mem) as conn:
        graph.store_extraction(
            conn,
            [{"name": n, "type": "thing"} for n in entities],
            [{"source": s, "relation": r, "target": t} for s, r, t in relationships],
            [],
            source_text=" ".join(entities),
        )


@pytest.fixture
def sample(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    mem = make_store()
    put(
        mem,
        ["Tuffy", "Jetson", "CUDA"],
        [("Tuffy", "runs on", "Jetson"), ("Tuffy", "uses", "CUDA"), ("USER", "built", "Tuffy")],
    )
    put(mem, ["Maya", "Lisbon"], [("Maya", "lives in", "Lisbon"), ("USER", "sister", "Maya")])
    put(mem, ["Lonely"], [])
    put(mem, NASTY, [(NASTY[0], 'says "hi"', NASTY[1]), (NASTY[2], "near", NASTY[3])])
    with writing(mem) as conn:
        graph_maint.compute_clusters(conn)
        conn.execute(
            "UPDATE graph_nodes SET cluster_label = 'Robots & <Co>' "
            "WHERE canonical_name = 'tuffy' OR canonical_name = 'jetson' "
            "OR canonical_name = 'cuda'"
        )
    return mem


def node_count(mem: elastimem.Elastimem) -> int:
    with reading(mem) as conn:
        return int(conn.execute("SELECT count(*) FROM graph_nodes").fetchone()[0])


# -- DOT --------------------------------------------------------------------------------------

_DOT_STRING = r'"(?:[^"\\\n]|\\.)*"'
_DOT_LINES = [
    re.compile(r"^digraph elastimem \{$"),
    re.compile(r"^\}$"),
    re.compile(r"^  (graph|node|edge) \[[^\]]*\];$"),
    re.compile(
        rf"^ {{2,4}}n\d+ \[label={_DOT_STRING}, tooltip={_DOT_STRING}(, shape=doublecircle)?\];$"
    ),
    re.compile(rf"^  n\d+ -> n\d+ \[label={_DOT_STRING}\];$"),
    re.compile(r"^  subgraph cluster_\d+ \{$"),
    re.compile(rf"^    label={_DOT_STRING};$"),
    re.compile(r"^  \}$"),
]


def test_dot(sample: elastimem.Elastimem) -> None:
    dot = graph_view.render_dot(database(sample))
    lines = dot.splitlines()
    assert lines[0] == "digraph elastimem {" and lines[-1] == "}"
    for line in lines:
        assert any(p.match(line) for p in _DOT_LINES), line
    assert 'label="(you)"' in dot and "@self" not in dot
    # Relations read as words, names as people write them (title case without a transcript).
    assert 'label="runs on"' in dot and 'label="says \\"hi\\""' in dot
    assert 'label="Tuffy \\"the <bot>"' in dot
    assert 'label="Back\\\\slash"' in dot
    assert 'label="Robots & <Co>";' in dot
    assert len(re.findall(r"^ +n\d+ \[", dot, re.M)) == node_count(sample)
    with reading(sample) as conn:
        assert graph_view.render_dot(conn) == dot  # a connection works as well


def test_dot_with_graphviz_if_present(sample: elastimem.Elastimem, tmp_path: Path) -> None:
    dot_exe = shutil.which("dot")
    if dot_exe is None:
        pytest.skip("Graphviz is not installed; the line grammar test covers the syntax")
    out = subprocess.run(
        [dot_exe, "-Tsvg"],
        input=graph_view.render_dot(database(sample)),
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_dot_of_an_empty_graph(make_store: Callable[..., elastimem.Elastimem]) -> None:
    dot = graph_view.render_dot(database(make_store()))
    # The self node is the store's first node (its id is n1 in a file; on PostgreSQL ids are
    # drawn from a sequence every user shares).
    dot = re.sub(r"^  n\d+ \[", "  n1 [", dot, flags=re.MULTILINE)
    assert dot == (
        "digraph elastimem {\n"
        '  graph [rankdir=LR, fontname="Helvetica"];\n'
        '  node [shape=ellipse, fontname="Helvetica"];\n'
        '  edge [fontname="Helvetica", fontsize=10];\n'
        '  n1 [label="(you)", tooltip="you", shape=doublecircle];\n'
        "}\n"
    )


# -- HTML -------------------------------------------------------------------------------------


class _Nodes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[dict[str, str | None]] = []
        self.fills: dict[str, str] = {}
        self.scripts = 0
        self.root: dict[str, str | None] = {}
        self.body: dict[str, str | None] = {}
        self._current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "html":
            self.root = found
        if tag == "body":
            self.body = found
        if tag == "script":
            self.scripts += 1
            assert "src" not in found
        if "node" in (found.get("class") or "").split():
            self.nodes.append(found)
            self._current = found.get("data-node-id")
        if tag == "circle" and self._current is not None:
            self.fills[self._current] = found.get("fill") or ""
            self._current = None


def parse(page: str) -> _Nodes:
    parser = _Nodes()
    parser.feed(page)
    return parser


def test_html_is_self_contained_and_escaped(sample: elastimem.Elastimem) -> None:
    page = graph_view.render_html(database(sample))
    assert page.startswith("<!DOCTYPE html>")
    for forbidden in ("http:", "https:", "//cdn", "<link", "@import", "src=", "@font-face"):
        assert forbidden not in page, forbidden
    assert not re.search(r"url\((?!#)", page)  # only references inside the page (the arrow)
    script_src = re.search(r"script-src ([^;]*);", page)
    assert script_src and script_src.group(1).startswith("'sha256-")  # no 'unsafe-inline'
    assert "unsafe" not in script_src.group(1)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Robots &amp; &lt;Co&gt;" in page
    parsed = parse(page)
    assert parsed.scripts == 1
    assert len(parsed.nodes) == node_count(sample)
    names = {n["data-name"] for n in parsed.nodes}
    assert "(you)" in names and "@self" not in names
    assert 'Tuffy "the <bot>' in names  # the parser unescapes attributes
    assert title_case(graph_names._canonicalize(NASTY[-1])) in names


def test_views_drop_control_and_bidi_override_characters(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    """A name stored with U+202E reads differently in the picture than it is stored, and
    C1 codes (U+009B) drive the terminal the CLI prints DOT to."""
    mem = make_store()
    spoof = "admin\u202egro.liamg@\u202c"
    put(mem, [spoof, "csi\u009b31m red\x7f", "tab\tand\rreturn"], [(spoof, "knows\u2066", "x")])
    forbidden = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
    page = graph_view.render_html(database(mem))
    dot = graph_view.render_dot(database(mem))
    assert not forbidden.search(page) and not forbidden.search(dot)
    shown = dot.lower()  # names are title-cased when no transcript shows how they are written
    assert "admingro.liamg@" in shown and "csi31m red" in shown and "tab and return" in shown


def test_html_colours_by_cluster(sample: elastimem.Elastimem) -> None:
    parsed = parse(graph_view.render_html(database(sample)))
    by_name = {n["data-name"]: n for n in parsed.nodes}
    fill = {name: parsed.fills[str(n["data-node-id"])] for name, n in by_name.items()}
    assert fill["Tuffy"] == fill["Jetson"] == fill["Cuda"]
    assert fill["Maya"] == fill["Lisbon"]
    assert fill["Tuffy"] != fill["Maya"]
    assert fill["Lonely"] == graph_view.UNCLUSTERED_COLOUR
    assert fill["(you)"] == graph_view.SELF_COLOUR
    assert by_name["Tuffy"]["data-cluster"] == by_name["Cuda"]["data-cluster"] != ""
    assert by_name["Lonely"]["data-cluster"] == ""


def test_html_layout_is_deterministic(sample: elastimem.Elastimem) -> None:
    assert graph_view.render_html(database(sample)) == graph_view.render_html(database(sample))
    positions = graph_view.layout(graph_view.load_snapshot(database(sample)))
    assert len(positions) == node_count(sample)
    assert len(set(positions.values())) == len(positions)  # no two nodes on one spot


def test_html_of_a_large_graph(make_store: Callable[..., elastimem.Elastimem]) -> None:
    mem = make_store()
    for c in range(25):
        names = [f"C{c} N{i}" for i in range(8)]
        put(mem, names, [(a, "near", b) for a, b in zip(names, names[1:])])
    parsed = parse(graph_view.render_html(database(mem)))
    assert len(parsed.nodes) == 201
    assert len(set(parsed.fills.values())) == 26  # 25 cluster colours + the self colour


# -- in a real browser ------------------------------------------------------------------------

ERROR_PROBE = """<script>
(function () {
  var root = document.documentElement;
  root.setAttribute("data-probe", "1");
  function note(kind, text) {
    root.setAttribute("data-errors", (root.getAttribute("data-errors") || "") + kind + ": " +
      text + "\\n");
  }
  window.addEventListener("error", function (e) { note("error", e.message); });
  window.addEventListener("unhandledrejection", function (e) { note("rejection", e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    note("csp", e.blockedURI + " " + e.violatedDirective);
  });
  var original = console.error;
  console.error = function () {
    note("console", Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
</script>"""


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_or_install() -> str | None:
    """The browser, installing Debian's ``chromium`` when we are root and apt is there."""
    found = find_chromium()
    if found or not shutil.which("apt-get") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        try:
            subprocess.run(command, env=env, capture_output=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return find_chromium()


def run_chromium(exe: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                exe,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1400,900",
                "--virtual-time-budget=3000",
                *extra,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )


@pytest.mark.slow
def test_html_in_headless_chromium(sample: elastimem.Elastimem, tmp_path: Path) -> None:
    topics = {
        "garden": ["Tomatoes", "Greenhouse", "Basil", "Compost", "Hose"],
        "running": ["Berlin Marathon", "Sven", "Intervals", "Brandenburg Gate"],
        "work": ["Northwind", "Helios", "Docklands", "Nadia", "Tomas", "Harbor Project"],
    }
    for names in topics.values():
        put(sample, names, [(names[0], "related to", n) for n in names[1:]])
        put(sample, [], [("USER", "likes", names[0])])
    exe = chromium_or_install()
    if exe is None:
        pytest.skip("chromium is not installed and could not be installed")
    page = graph_view.render_html(database(sample))
    # The page's CSP runs only its own script (by hash): the probe is let in by its hash too.
    probe_body = ERROR_PROBE.removeprefix("<script>").removesuffix("</script>")
    probe_hash = base64.b64encode(hashlib.sha256(probe_body.encode()).digest()).decode()
    probed = page.replace("script-src ", f"script-src 'sha256-{probe_hash}' ", 1)
    probed = probed.replace("</title>", "</title>\n" + ERROR_PROBE, 1)
    path = tmp_path / "graph.html"
    path.write_text(probed, encoding="utf-8")
    url = path.as_uri()

    dumped = run_chromium(exe, url, "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = parse(dumped.stdout)
    assert dom.root.get("data-probe") == "1"  # the error probe ran under the page's CSP
    assert dom.root.get("data-errors") is None, dom.root.get("data-errors")
    assert dom.body.get("data-ready") == "1"  # the page's script ran to its end
    assert len(dom.nodes) == node_count(sample)
    assert {n["data-node-id"] for n in dom.nodes} == {n["data-node-id"] for n in parse(page).nodes}
    console = [
        line
        for line in dumped.stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line or "Refused" in line)
    ]
    assert console == []

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "graph_view.png"
    shot.unlink(missing_ok=True)
    taken = run_chromium(exe, url, f"--screenshot={shot}")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
