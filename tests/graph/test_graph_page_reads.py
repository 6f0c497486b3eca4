"""The graph page as a person reads it (issue #29): 15 turns naming people, places and
organisations, extracted by a scripted LLM, drawn with names as written, typed right, with
arrows, relations in words and labels that do not overlap, checked in headless Chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.graph import view as graph_view
from tests.conftest import ScriptedLLM
from tests.graph.conftest import database
from tests.graph.test_graph_view import ARTIFACTS, chromium_or_install, parse, run_chromium

# (what the user says, entities (name, type as a model might write it), relationships)
TURNS: list[tuple[str, list[tuple[str, str]], list[tuple[str, str, str]]]] = [
    ("My sister Sofia just moved to Chicago for her new job.",
     [("Sofia", "person"), ("Chicago", "city")],
     [("USER", "sister", "Sofia"), ("Sofia", "lives_in", "Chicago")]),
    ("Sofia works at Kaiser Permanente as a nurse.",
     [("Sofia", "person"), ("Kaiser Permanente", "organization")],
     [("Sofia", "works_at", "Kaiser Permanente")]),
    ("My dad Marco still lives in Lisbon.",
     [("Marco", "person"), ("Lisbon", "location")],
     [("Marco", "parent_of", "USER"), ("Marco", "lives_in", "Lisbon")]),
    ("Marco is Sofia's dad too, obviously.",
     [("Marco", "person"), ("Sofia", "person")], [("Marco", "parent_of", "Sofia")]),
    ("Our dog Biscuit sees Dr. Alvarez at Cherry Creek Animal Hospital.",
     [("Biscuit", "animal"), ("Dr. Alvarez", "person"),
      ("Cherry Creek Animal Hospital", "organisation")],
     [("USER", "owns", "Biscuit"), ("Dr. Alvarez", "works_at", "Cherry Creek Animal Hospital"),
      ("Biscuit", "treated_by", "Dr. Alvarez")]),
    ("Cherry Creek Animal Hospital is in Denver, near our flat.",
     [("Cherry Creek Animal Hospital", "org"), ("Denver", "place")],
     [("Cherry Creek Animal Hospital", "located_in", "Denver"), ("USER", "lives_in", "Denver")]),
    ("I work for Northwind Traders, mostly on their NASA contract.",
     [("Northwind Traders", "company"), ("NASA", "organization")],
     [("USER", "works_at", "Northwind Traders"), ("Northwind Traders", "client_of", "NASA")]),
    ("ok", [], []),
    ("My manager at Northwind Traders is Priya.",
     [("Priya", "person"), ("Northwind Traders", "company")],
     [("Priya", "manages", "USER"), ("Priya", "works_at", "Northwind Traders")]),
    ("Priya grew up in Mumbai.",
     [("Priya", "person"), ("Mumbai", "city")], [("Priya", "grew_up_in", "Mumbai")]),
    ("thanks!", [], []),
    ("Sofia's partner Tomás is a chef in Chicago.",
     [("Tomás", "person"), ("Chicago", "city")],
     [("Sofia", "partner_of", "Tomás"), ("Tomás", "works_in", "Chicago")]),
    ("We visit Marco in Lisbon every August.",
     [("Marco", "person"), ("Lisbon", "city")], [("USER", "visits", "Marco")]),
    ("My friend Jean-Luc O'Brien runs a bakery in Denver.",
     [("Jean-Luc O'Brien", "person"), ("Denver", "city")],
     [("USER", "friend_of", "Jean-Luc O'Brien"), ("Jean-Luc O'Brien", "works_in", "Denver")]),
    ("haha", [], []),
]  # fmt: skip
START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def fake_extract(prompt: str) -> str:
    """The extraction reply for the corpus turns the prompt carries; names in lower case, as
    small models often write them, so the page must find the written form itself."""
    by_text = {text: (ents, rels) for text, ents, rels in TURNS}
    out: dict[str, Any] = {"facts": {}, "entities": [], "relationships": []}
    for line in prompt.split("\n"):
        found = by_text.get(line.removeprefix("USER: ").strip())
        if line.startswith("USER: ") and found:
            out["entities"] += [{"name": n.lower(), "type": t} for n, t in found[0]]
            out["relationships"] += [
                {"source": s if s == "USER" else s.lower(), "relation": r,
                 "target": t if t == "USER" else t.lower()}
                for s, r, t in found[1]
            ]  # fmt: skip
    if not out["entities"]:
        return "NONE"
    return json.dumps(out)


@pytest.fixture
def people(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    mem = make_store(llm=ScriptedLLM({"extract": fake_extract}), tier_override="full")
    mem.begin_session(at=START)
    for i, (text, _e, _r) in enumerate(TURNS):
        mem.record_turn(text, "Noted.", at=START + timedelta(minutes=i))
    mem.end_session(wait=True)
    assert mem.drain(60)
    return mem


def test_names_types_and_relations_read_as_people_write_them(
    people: elastimem.Elastimem,
) -> None:
    page = graph_view.render_html(database(people))
    parsed = parse(page)
    names = {n["data-name"]: n for n in parsed.nodes}
    written_forms = (
        "Sofia", "Chicago", "Kaiser Permanente", "Dr. Alvarez", "Cherry Creek Animal Hospital",
        "NASA", "Tomás", "Jean-Luc O'Brien",
    )  # fmt: skip
    for written in written_forms:
        assert written in names, sorted(names, key=str)
    assert names["Kaiser Permanente"]["data-type"] == "org"  # "organization" is an org
    assert names["Cherry Creek Animal Hospital"]["data-type"] == "org"
    assert names["Chicago"]["data-type"] == "place"  # "city" is a place
    # Long names wrap onto lines instead of being cut.
    assert "…" not in page.split('class="nodes"')[1].split("</svg>")[0]
    assert ">Cherry Creek Animal</tspan>" in page and ">Hospital</tspan>" in page
    # Every edge is an arrow with its relation in words; none is dashed.
    edges = re.findall(r'<g class="edge[^"]*"[^>]*data-relation="([^"]*)"', page)
    assert "parent of" in edges and "works at" in edges and "located in" in edges
    assert not any("_" in relation for relation in edges)
    assert page.count('marker-end="url(#arrow)"') == len(edges)
    assert "dasharray" not in page
    marco, sofia = names["Marco"]["data-node-id"], names["Sofia"]["data-node-id"]
    assert f'data-source="{marco}" data-target="{sofia}" data-relation="parent of"' in page
    dot = graph_view.render_dot(database(people))
    assert 'label="Kaiser Permanente"' in dot and 'label="parent of"' in dot


def test_an_empty_graph_says_how_it_is_built(
    make_store: Callable[..., elastimem.Elastimem],
) -> None:
    mem = make_store()
    mem.record_turn("My sister Sofia moved to Chicago; Marco stayed in Lisbon.", "Noted.")
    page = graph_view.render_html(database(mem))
    assert 'data-empty="1"' in page and "llm=" in page and "--llm-url" in page


# Written into the page by the browser test: how many drawn labels overlap another one.
OVERLAP_PROBE = """
(function () {
  var boxes = [];
  var texts = document.querySelectorAll(".node text, .edge text:not(.off)");
  Array.prototype.forEach.call(texts, function (t) {
    var r = t.getBoundingClientRect();
    boxes.push([r.left, r.top, r.right, r.bottom, t.textContent]);
  });
  var clashes = [];
  for (var i = 0; i < boxes.length; i++) {
    for (var j = i + 1; j < boxes.length; j++) {
      var a = boxes[i], b = boxes[j];
      if (a[0] < b[2] - 1 && b[0] < a[2] - 1 && a[1] < b[3] - 1 && b[1] < a[3] - 1) {
        clashes.push(a[4] + " / " + b[4]);
      }
    }
  }
  document.documentElement.setAttribute("data-labels", String(boxes.length));
  document.documentElement.setAttribute("data-clashes", clashes.join(" | "));
})();
"""


@pytest.mark.slow
def test_labels_do_not_overlap_in_chromium(people: elastimem.Elastimem, tmp_path: Path) -> None:
    exe = chromium_or_install()
    if exe is None:
        pytest.skip("chromium is not installed and could not be installed")
    page = graph_view.render_html(database(people))
    digest = base64.b64encode(hashlib.sha256(OVERLAP_PROBE.encode()).digest()).decode()
    probed = page.replace("script-src ", f"script-src 'sha256-{digest}' ", 1)
    probed = probed.replace("</body>", f"<script>{OVERLAP_PROBE}</script>\n</body>", 1)
    path = tmp_path / "people.html"
    path.write_text(probed, encoding="utf-8")
    dumped = run_chromium(exe, path.as_uri(), "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = parse(dumped.stdout)
    assert int(dom.root.get("data-labels") or 0) > 20  # the probe ran and saw the labels
    assert dom.root.get("data-clashes") == "", dom.root.get("data-clashes")
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in ((1280, 800), (390, 844)):
        shot = ARTIFACTS / f"graph_people_{width}.png"
        shot.unlink(missing_ok=True)
        taken = run_chromium(exe, path.as_uri(), f"--window-size={width},{height}",
                             f"--screenshot={shot}")  # fmt: skip
        assert taken.returncode == 0 and shot.exists()
