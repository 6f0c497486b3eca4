"""The graph must earn its place: recall@5 on a synthetic multi-session corpus (§5.6, §5.7).

The corpus was written for these tests: 34 backdated sessions about one person's life, with
an LLM double that returns hand-written entities and relationships for each turn. Hop
questions name one entity while the memory that answers them only names a neighbour
("what do I know about my Jetson" → "Tuffy uses CUDA…", where Tuffy runs on the Jetson).
Keyword questions share words with their answer. The graph leg (hops 2, as at FULL) must
lift recall@5 on the hop questions and must not lower it on the keyword ones, compared with
the same ranking without the graph (``graph_hops`` 0).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import elastimem
from elastimem import graph
from elastimem.text import STOPWORDS, word_tokens
from tests.conftest import STORE_BACKENDS, HashEmbedder, ScriptedLLM
from tests.graph.conftest import reading

START = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
REPLIES = ["Got it.", "Noted.", "Understood.", "Okay, saved.", "Right."]

# (day, [(user text, entities "Name:type|…", relationships "Src>relation>Dst|…"), …])
Session = tuple[int, list[tuple[str, str, str]]]
CORPUS: list[Session] = [
    (0, [
        ("I set up my Jetson board on the workbench in the garage today",
         "Jetson:thing", "USER>owns>Jetson"),
        ("Tuffy is my little wheeled robot and it runs on the Jetson now",
         "Tuffy:thing|Jetson:thing", "Tuffy>runs on>Jetson|USER>built>Tuffy"),
    ]),
    (2, [
        ("My sister Maya moved to Lisbon last autumn for her new job",
         "Maya:person|Lisbon:place", "USER>sister>Maya|Maya>lives in>Lisbon"),
        ("The weather has been grey and rainy all week here",
         "", ""),
    ]),
    (4, [
        ("I started a new position at Northwind as a hardware engineer",
         "Northwind:org", "USER>works at>Northwind"),
        ("Helios is the battery product that Northwind is building this year",
         "Helios:thing|Northwind:org", "Helios>product of>Northwind"),
    ]),
    (6, [
        ("I signed up for the Berlin Marathon in September, scary but exciting",
         "Berlin Marathon:thing", "USER>runs>Berlin Marathon"),
        ("Sven is my running coach and he is preparing me for the Berlin Marathon",
         "Sven:person|Berlin Marathon:thing",
         "Sven>coach for>Berlin Marathon|USER>coached by>Sven"),
    ]),
    (8, [
        ("Our book club is reading Dune this month, the old paperback edition",
         "Book Club:org|Dune:thing", "Book Club>reads>Dune|USER>member of>Book Club"),
        ("I watched a documentary about deep sea creatures last night",
         "", ""),
    ]),
    (10, [
        ("Biscuit is our greyhound, he is four years old and very lazy",
         "Biscuit:thing", "USER>owns>Biscuit"),
        ("Dr. Okafor at the Riverside clinic is the vet who treats Biscuit",
         "Dr. Okafor:person|Biscuit:thing|Riverside Clinic:org",
         "Dr. Okafor>treats>Biscuit|Dr. Okafor>works at>Riverside Clinic"),
    ]),
    (12, [
        ("We are planning a trip to Kyoto in April to see the cherry blossoms",
         "Kyoto:place", "USER>visits>Kyoto"),
        ("We booked Ryokan Sakura, a small guesthouse in the Kyoto hills",
         "Ryokan Sakura:place|Kyoto:place", "Ryokan Sakura>located in>Kyoto"),
    ]),
    (14, [
        ("My side project Quill is a note taking app for the terminal",
         "Quill:thing", "USER>builds>Quill"),
        ("Ferris is a friend from university who contributes to Quill",
         "Ferris:person|Quill:thing", "Ferris>contributes to>Quill|USER>friend>Ferris"),
    ]),
    (16, [
        ("The Harbor Project is the new waterfront plan that Nadia is leading",
         "Harbor Project:thing|Nadia:person", "Nadia>leads>Harbor Project"),
        ("Nadia mentors Tomas, the youngest engineer on her team",
         "Nadia:person|Tomas:person", "Nadia>mentors>Tomas"),
    ]),
    (18, [
        ("My car is a Subaru Outback, a green one from 2016",
         "Subaru Outback:thing", "USER>drives>Subaru Outback"),
        ("Kowalski Garage services the Subaru Outback every spring",
         "Kowalski Garage:org|Subaru Outback:thing", "Kowalski Garage>services>Subaru Outback"),
    ]),
    (20, [
        ("Tuffy uses CUDA for its vision model now, it is much faster",
         "Tuffy:thing|CUDA:thing", "Tuffy>uses>CUDA"),
        ("I ordered a lidar sensor as well but it has not arrived",
         "", ""),
    ]),
    (22, [
        ("Maya adopted a grey cat called Pixel from a shelter",
         "Maya:person|Pixel:thing", "Maya>owns>Pixel"),
        ("For my birthday dinner I cooked mushroom risotto for six people",
         "", ""),
    ]),
    (24, [
        ("The release slipped to March because of the firmware bugs in Helios",
         "Helios:thing", ""),
        ("The Helios demo went well and the investors liked the battery life",
         "Helios:thing", ""),
    ]),
    (26, [
        ("Sven changed my intervals to 400 metre repeats on Tuesdays",
         "Sven:person", "USER>coached by>Sven"),
        ("Sven said to rest the sore knee for a week before the long run",
         "Sven:person", ""),
    ]),
    (28, [
        ("The reading group meets at Priya's flat on Thursday evenings",
         "Priya:person|Book Club:org", "Priya>hosts>Book Club"),
        ("Priya recommended reading Piranesi after we finish",
         "Priya:person|Piranesi:thing", "Priya>recommends>Piranesi"),
    ]),
    (30, [
        ("Dr. Okafor prescribed ear drops twice a day for two weeks",
         "Dr. Okafor:person", ""),
        ("Biscuit needs his rabies booster in May as well",
         "Biscuit:thing", ""),
    ]),
    (32, [
        ("Ryokan Sakura confirmed the booking for two nights with breakfast",
         "Ryokan Sakura:place", ""),
        ("Our flight leaves at 11:40 from Frankfurt on the 3rd of April",
         "Frankfurt:place", "USER>flies from>Frankfurt"),
    ]),
    (34, [
        ("Ferris rewrote the parser last week and it is twice as fast",
         "Ferris:person", ""),
        ("Quill is written in Rust and stores notes in SQLite",
         "Quill:thing|Rust:thing|SQLite:thing", "Quill>written in>Rust|Quill>uses>SQLite"),
    ]),
    (36, [
        ("Tomas passed his certification exam with a great score",
         "Tomas:person", ""),
        ("The waterfront consultation meeting is scheduled for June",
         "", ""),
    ]),
    (38, [
        ("Kowalski quoted six hundred euros for the timing belt",
         "Kowalski Garage:org", ""),
        ("The Outback needs new winter tires before December",
         "Subaru Outback:thing", ""),
    ]),
    (40, [
        ("The dentist appointment moved to the 14th at nine in the morning",
         "", ""),
        ("My rent went up to 1450 a month from March",
         "", ""),
    ]),
    (42, [
        ("The greenhouse tomatoes are finally ripening after the heat",
         "", ""),
        ("I planted basil and chillies next to them as well",
         "", ""),
    ]),
    (44, [
        ("My sourdough starter is called Clint Yeastwood and it smells great",
         "Clint Yeastwood:thing", "USER>owns>Clint Yeastwood"),
        ("I baked two loaves on Sunday but the crust was too pale",
         "", ""),
    ]),
    (46, [
        ("We discussed the first two hundred pages of Dune at the last meeting",
         "Dune:thing", ""),
        ("I find the desert ecology parts the most interesting",
         "", ""),
    ]),
    (48, [
        ("Northwind moved its office to the Docklands, closer to the river",
         "Northwind:org|Docklands:place", "Northwind>located in>Docklands"),
        ("My commute is now only twenty minutes by bike",
         "", ""),
    ]),
    (50, [
        ("I watched the new Villeneuve film and loved the sound design",
         "", ""),
        ("Popcorn prices at the cinema are getting ridiculous",
         "", ""),
    ]),
    (52, [
        ("The router password hint is the name of my first cat",
         "", ""),
        ("I switched the home internet provider to a fibre plan",
         "", ""),
    ]),
    (54, [
        ("I went climbing at the bouldering gym with some colleagues",
         "", ""),
        ("My forearms are still sore two days later",
         "", ""),
    ]),
    (56, [
        ("Lisbon trams are packed with tourists in the summer",
         "Lisbon:place", ""),
        ("I tried pastel de nata for the first time and loved it",
         "", ""),
    ]),
    (58, [
        ("The Berlin Marathon route goes past the Brandenburg Gate at the end",
         "Berlin Marathon:thing|Brandenburg Gate:place",
         "Berlin Marathon>passes>Brandenburg Gate"),
        ("I need new running shoes before the autumn",
         "", ""),
    ]),
    (60, [
        ("The Jetson fan is very loud when the robot is charging",
         "Jetson:thing", ""),
        ("I should print a quieter fan shroud for it",
         "", ""),
    ]),
    (62, [
        ("I started learning Portuguese with an app every morning",
         "", ""),
        ("The grammar is harder than I expected",
         "", ""),
    ]),
    (64, [
        ("The quarterly planning at work took the whole day",
         "", ""),
        ("I presented the thermal test results to the team",
         "", ""),
    ]),
    (66, [
        ("My neighbour lent me a ladder to clean the gutters",
         "", ""),
        ("The gutters were full of leaves and moss",
         "", ""),
    ]),
]  # fmt: skip

# (question, the user text of the turn that answers it)
HOP_QUESTIONS = [
    ("what do I know about my Jetson?", "Tuffy uses CUDA for its vision model now"),
    ("any news from Lisbon?", "Maya adopted a grey cat called Pixel"),
    ("how are things going at Northwind?", "The release slipped to March because of the"),
    ("what's the plan for the Berlin Marathon?", "Sven changed my intervals"),
    ("anything worth knowing about Dune?", "The reading group meets at Priya's flat"),
    ("how is Biscuit doing?", "Dr. Okafor prescribed ear drops"),
    ("what about my Kyoto trip?", "Ryokan Sakura confirmed the booking"),
    ("tell me about Quill", "Ferris rewrote the parser"),
    ("what do I know about my Subaru Outback?", "Kowalski quoted six hundred euros"),
    ("any updates on the Harbor Project?", "Nadia mentors Tomas"),
    ("who is Priya?", "Our book club is reading Dune this month"),
    ("how is Dr. Okafor?", "Biscuit is our greyhound"),
]
KEYWORD_QUESTIONS = [
    ("which tires does the Outback need?", "The Outback needs new winter tires"),
    ("what did I cook for my birthday dinner?", "For my birthday dinner I cooked"),
    ("when is the dentist appointment?", "The dentist appointment moved"),
    ("what did Sven say about my knee?", "Sven said to rest the sore knee"),
    ("how much is the rent now?", "My rent went up to 1450"),
    ("what is Quill written in?", "Quill is written in Rust"),
    ("what did Priya recommend?", "Priya recommended reading Piranesi"),
    ("when does Biscuit need the rabies booster?", "Biscuit needs his rabies booster"),
    ("where is the Northwind office?", "Northwind moved its office"),
    ("what is the router password hint?", "The router password hint"),
    ("how did the Helios demo go?", "The Helios demo went well"),
    ("what is my sourdough starter called?", "My sourdough starter is called"),
    ("how are the greenhouse tomatoes?", "The greenhouse tomatoes are finally"),
    ("when does our flight leave from Frankfurt?", "Our flight leaves at 11:40"),
    ("what pages of Dune did we discuss?", "We discussed the first two hundred pages"),
    ("is the Jetson fan loud?", "The Jetson fan is very loud"),
    ("where does the Berlin Marathon route go?", "The Berlin Marathon route goes past"),
    ("how are the Lisbon trams?", "Lisbon trams are packed"),
]


def _parse(entities: str, relationships: str) -> dict[str, Any]:
    ents = []
    for item in filter(None, entities.split("|")):
        name, kind = item.rsplit(":", 1)
        ents.append({"name": name, "type": kind})
    rels = []
    for item in filter(None, relationships.split("|")):
        source, relation, target = item.split(">")
        rels.append({"source": source, "relation": relation, "target": target})
    return {"entities": ents, "relationships": rels}


EXTRACTIONS = {user: _parse(ents, rels) for _, turns in CORPUS for user, ents, rels in turns}


def fake_extract(prompt: str) -> str:
    """The ``extract`` reply for whatever corpus turns the prompt carries."""
    out: dict[str, Any] = {"facts": {}, "entities": [], "relationships": []}
    for line in prompt.split("\n"):
        found = EXTRACTIONS.get(line.removeprefix("USER: ").strip())
        if line.startswith("USER: ") and found:
            out["entities"] += found["entities"]
            out["relationships"] += found["relationships"]
    if not out["entities"] and not out["relationships"]:
        return "NONE"
    return json.dumps(out)


def build_corpus(make_store: Callable[..., elastimem.Elastimem], **kw: Any) -> elastimem.Elastimem:
    llm = ScriptedLLM({"extract": fake_extract})
    mem = make_store(llm=llm, tier_override="full", **kw)
    for day, turns in CORPUS:
        at = START + timedelta(days=day)
        mem.begin_session(at=at)
        for i, (user, _e, _r) in enumerate(turns):
            mem.record_turn(user, REPLIES[(day + i) % len(REPLIES)], at=at + timedelta(minutes=i))
        assert mem.drain(30)
    mem.end_session(wait=True)
    assert mem.drain(30)
    return mem


def chunk_id(mem: elastimem.Elastimem, marker: str) -> int:
    with reading(mem) as conn:
        rows = conn.execute(
            "SELECT id FROM chunks WHERE text LIKE '%' || ? || '%'", ("User: " + marker,)
        ).fetchall()
    assert len(rows) == 1, marker
    return int(rows[0][0])


def top5(mem: elastimem.Elastimem, question: str, hops: int) -> list[int]:
    """The top five chunks ``recall`` gives with the graph leg walking ``hops`` steps."""
    build_signal = graph.build_signal

    def with_hops(database: Any, text: object, _hops: int, **kw: Any) -> Any:
        return build_signal(database, text, hops, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph, "build_signal", with_hops)
        return [h.id for h in mem.recall(question, k=5, kinds=["chunk"])]


def recall_at_5(
    mem: elastimem.Elastimem, questions: list[tuple[str, str]], hops: int
) -> dict[str, bool]:
    return {q: chunk_id(mem, marker) in top5(mem, q, hops) for q, marker in questions}


@pytest.fixture(scope="module", params=STORE_BACKENDS)
def corpus_stores(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """The corpus once with keyword search only, once with a (hash) embedder too: in
    files, or as two users of the test session's PostgreSQL database."""
    opened: list[elastimem.Elastimem] = []
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None

    def factory(path: str | None = None, **kw: Any) -> elastimem.Elastimem:
        kw.setdefault("disable_builtin_embedder", True)
        if url is not None:
            store = elastimem.Elastimem(url, user_id=f"corpus-{os.urandom(6).hex()}", **kw)
        else:
            where = str(path or tmp_path_factory.mktemp("corpus") / "m.db")
            store = elastimem.Elastimem(where, **kw)
        opened.append(store)
        return store

    stores = {
        "keyword": build_corpus(factory),
        "hybrid": build_corpus(factory, embedder=HashEmbedder()),
    }
    yield stores
    for store in opened:
        store.close()


@pytest.fixture(params=["keyword", "hybrid"])
def corpus(request: pytest.FixtureRequest, corpus_stores: dict[str, Any]) -> elastimem.Elastimem:
    return corpus_stores[request.param]  # type: ignore[no-any-return]


def test_corpus_shape(corpus: elastimem.Elastimem) -> None:
    stats = corpus.stats()
    assert stats["sessions"] == len(CORPUS) >= 30
    assert stats["chunks"] == sum(len(t) for _, t in CORPUS)
    assert stats["graph_nodes"] >= 30 and stats["graph_edges"] >= 25
    # Hop answers really share no word with their question.
    for question, marker in HOP_QUESTIONS:
        asked = set(word_tokens(question)) - STOPWORDS
        target = chunk_id(corpus, marker)
        with reading(corpus) as conn:
            text = conn.execute("SELECT text FROM chunks WHERE id = ?", (target,)).fetchone()[0]
        assert not asked & set(word_tokens(text)), question


def hop_recall(corpus: elastimem.Elastimem) -> tuple[float, float, dict[str, bool]]:
    without = recall_at_5(corpus, HOP_QUESTIONS, hops=0)
    with_graph = recall_at_5(corpus, HOP_QUESTIONS, hops=2)
    # The graph never loses a hop answer the other legs had found.
    assert all(with_graph[q] for q, hit in without.items() if hit)
    n = len(HOP_QUESTIONS)
    return sum(without.values()) / n, sum(with_graph.values()) / n, with_graph


def test_graph_lifts_recall_on_hop_questions(corpus: elastimem.Elastimem) -> None:
    off, on, with_graph = hop_recall(corpus)
    assert on >= off
    if corpus.stats()["embedded_chunks"] == 0:
        # Measured: 0.00 without the graph, 0.83 with it. The two misses lose to weak
        # keyword matches ("news" stems to "new", "plan" to "planning"), which is the
        # intended size of the nudge: the graph adds candidates, it does not outvote words.
        assert on >= 0.8, {q: hit for q, hit in with_graph.items() if not hit}
        assert on - off >= 0.5, (off, on)


def test_graph_lifts_recall_on_hop_questions_with_vectors(
    corpus_stores: dict[str, Any],
) -> None:
    off, on, _ = hop_recall(corpus_stores["hybrid"])
    assert on >= 0.5, (off, on)


def test_graph_does_not_lower_recall_on_keyword_questions(corpus: elastimem.Elastimem) -> None:
    without = recall_at_5(corpus, KEYWORD_QUESTIONS, hops=0)
    with_graph = recall_at_5(corpus, KEYWORD_QUESTIONS, hops=2)
    lost = [q for q, hit in without.items() if hit and not with_graph[q]]
    assert lost == []
    assert sum(with_graph.values()) >= sum(without.values())
    assert sum(with_graph.values()) / len(KEYWORD_QUESTIONS) >= 0.9


def test_recall_uses_the_graph_at_full(corpus: elastimem.Elastimem) -> None:
    """The public path (profile hops) gives the graph ranking, and explain shows why."""
    question, marker = HOP_QUESTIONS[0]
    hits = corpus.recall(question, k=5, kinds=["chunk"])
    assert [h.id for h in hits] == top5(corpus, question, 2)
    target = chunk_id(corpus, marker)
    explained = corpus.explain(question, k=100)
    breakdown = next(b for b in explained.chunk_breakdowns if b.chunk_id == target)
    assert breakdown.fts == 0 and breakdown.graph_nudge > 0
    assert "tuffy" in breakdown.graph_matched_names
    names = [s.canonical_name for s in explained.graph_traversal]
    assert names[0] == "jetson" and "tuffy" in names and "@self" not in names


def test_related_topics_in_the_context(corpus: elastimem.Elastimem) -> None:
    corpus.begin_session()
    plan = corpus.build_context("what do I know about my Jetson?")
    assert "tuffy" in plan.sections["graph_context"]
    assert "@self" not in plan.render()
    assert plan.tokens["graph_context"] + plan.tokens["relevant_past_moments"] <= (
        plan.profile.budgets.episodic
    )
    corpus.end_session(wait=True)


def test_clusters_after_consolidation(corpus: elastimem.Elastimem) -> None:
    clusters = corpus.clusters()
    members = {name for c in clusters for name in c["members"]}
    assert {"jetson", "tuffy", "cuda"} <= members
    assert "@self" not in members
    # The user is linked to nearly everything, yet topics stay apart.
    by_name = {name: c["cluster_id"] for c in clusters for name in c["members"]}
    assert by_name["tuffy"] != by_name["maya"]
