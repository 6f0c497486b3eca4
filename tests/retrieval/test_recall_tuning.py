"""The synthetic tuning set of §5.6: keyword, paraphrase and entity-hop questions.

A multi-session corpus written for this test (one person's life over three months), an LLM
double that returns hand-written entities and relationships for each turn (so the graph
is built through the real extraction path), and :class:`SynonymEmbedder`, a deterministic
embedder that folds synonyms and inflections onto one concept before hashing, so that a
paraphrase lands near its source while sharing no word with it. Three kinds of questions:

* keyword: shares distinctive words with the turn that answers it;
* paraphrase: shares *no* word with its answer, only concepts (checked below);
* hop: names an entity while the answer names only a neighbour in the graph.

``SYNTHETIC_FIGURES`` records recall@5 per kind with the tuned weights (and, for the
record, with the spec's starting weights); the fast test checks the figures within 0.01,
so a ranking change that moves them must update the record next to
``retrieval.DEFAULT_WEIGHTS`` too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

import elastimem
from elastimem.index.vectors import passage_texts
from elastimem.retrieval import query as query_path
from elastimem.retrieval import rank as retrieval
from elastimem.text import STOPWORDS, em_fold, query_terms, word_tokens
from tests.conftest import STORE_BACKENDS, ScriptedLLM
from tests.rows import open_storage, rows

START = datetime(2025, 3, 3, 8, 30, tzinfo=timezone.utc)
REPLIES = ["Got it.", "Noted.", "Okay.", "Understood.", "Sounds good."]

# Each group is one concept: SynonymEmbedder maps every member to the first one.
SYNONYMS = [
    "car automobile vehicle motor",
    "doctor physician gp medic dr",
    "dog puppy hound mutt",
    "buy bought purchase purchased",
    "film movie flick",
    "cook cooked prepare prepared",
    "trip journey vacation holiday travel",
    "sick ill unwell flu",
    "bike bicycle cycling",
    "job position role employment",
    "quit resigned resign leaving",
    "fix fixed repair repaired mend mended",
    "broken broke damaged cracked",
    "expensive pricey costly",
    "apartment flat lodging",
    "wedding marriage married",
    "teacher tutor instructor",
    "song tune melody",
    "phone smartphone mobile",
    "garden yard backyard",
    "novel book paperback",
    "happy glad delighted thrilled",
    "angry furious annoyed upset",
    "child kid kids children son daughter",
    "money cash savings funds",
    "ran run running jog jogging",
    "dinner supper meal",
    "begin began start started starting",
    "friend pal buddy mate",
    "boss manager supervisor",
    "lost misplaced missing",
    "keys keyring",
    "tooth teeth dentist dental",
    "rain rained rainy storm downpour",
    "cake dessert pastry",
    "hurt injured injury sprained sore",
    "laptop notebook computer",
    "house home",
    "fast quick speedy",
    "learn learning study studying",
    "guitar ukulele",
    "paint painted painting canvas",
    "beach seaside coast",
    "ticket tickets booking",
]
_CANON = {w: group.split()[0] for group in SYNONYMS for w in group.split()}

# (day, [(user text, entities "Name:type|…", relationships "Src>relation>Dst|…"), …])
CORPUS: list[tuple[int, list[tuple[str, str, str]]]] = [
    (
        0,
        [
            (
                "I finally bought a used car last weekend, a silver Volvo estate",
                "Volvo:thing",
                "USER>owns>Volvo",
            ),
            ("The seller threw in a set of winter tyres for free", "", ""),
        ],
    ),
    (
        2,
        [
            (
                "My daughter Lena starts primary school in September",
                "Lena:person",
                "USER>parent of>Lena",
            ),
            (
                "Miss Alvarez will be her teacher, she seemed lovely",
                "Miss Alvarez:person|Lena:person",
                "Miss Alvarez>teaches>Lena",
            ),
        ],
    ),
    (
        4,
        [
            ("I have been sick with the flu since Tuesday and stayed in bed", "", ""),
            (
                "Dr. Haddad told me to drink lots of water and rest",
                "Dr. Haddad:person",
                "USER>patient of>Dr. Haddad",
            ),
        ],
    ),
    (
        6,
        [
            (
                "We adopted a puppy from the shelter, a beagle called Pretzel",
                "Pretzel:thing",
                "USER>owns>Pretzel",
            ),
            ("Pretzel chewed through the sofa cushion on the first night", "Pretzel:thing", ""),
        ],
    ),
    (
        8,
        [
            (
                "I quit my job at Brightline after four years",
                "Brightline:org",
                "USER>worked at>Brightline",
            ),
            (
                "Oskar was my manager there and he threw me a farewell lunch",
                "Oskar:person|Brightline:org",
                "Oskar>works at>Brightline|Oskar>managed>USER",
            ),
        ],
    ),
    (
        10,
        [
            (
                "I started a new position at Corvid Labs as a data engineer",
                "Corvid Labs:org",
                "USER>works at>Corvid Labs",
            ),
            (
                "Project Falcon is the pipeline Corvid Labs hired me to rebuild",
                "Project Falcon:thing|Corvid Labs:org",
                "Project Falcon>run by>Corvid Labs",
            ),
        ],
    ),
    (
        12,
        [
            (
                "We watched an old film at the Rialto cinema, Casablanca in black and white",
                "Rialto:place|Casablanca:thing",
                "USER>visited>Rialto",
            ),
            ("The popcorn was stale but the organ music before the show was charming", "", ""),
        ],
    ),
    (
        14,
        [
            ("I cooked a lamb tagine for dinner with apricots and almonds", "", ""),
            ("It took three hours but everyone asked for seconds", "", ""),
        ],
    ),
    (
        16,
        [
            ("My bike got a flat tyre on the canal path this morning", "", ""),
            (
                "Dario at Spoke and Chain repaired it while I waited",
                "Dario:person|Spoke and Chain:org",
                "Dario>works at>Spoke and Chain",
            ),
        ],
    ),
    (
        18,
        [
            (
                "We are planning a trip to Crete in June, a week by the beach",
                "Crete:place",
                "USER>visits>Crete",
            ),
            (
                "Villa Thalassa is the guesthouse we booked near Chania",
                "Villa Thalassa:place|Crete:place|Chania:place",
                "Villa Thalassa>located in>Chania|Chania>part of>Crete",
            ),
        ],
    ),
    (
        20,
        [
            ("My phone screen cracked when I dropped it on the stairs", "", ""),
            ("The repair shop wants ninety euros to replace the glass", "", ""),
        ],
    ),
    (
        22,
        [
            (
                "My friend Yusuf is getting married in October in Izmir",
                "Yusuf:person|Izmir:place",
                "USER>friend>Yusuf|Yusuf>lives in>Izmir",
            ),
            ("I am the best man so I need to write a speech", "", ""),
        ],
    ),
    (
        24,
        [
            ("I am learning the guitar with an online course every evening", "", ""),
            ("My fingertips hurt from pressing the strings", "", ""),
        ],
    ),
    (
        26,
        [
            (
                "Pretzel has an ear infection so we went to Maple Street Vets",
                "Pretzel:thing|Maple Street Vets:org",
                "Maple Street Vets>treats>Pretzel",
            ),
            (
                "Dr. Ines Moreau at Maple Street Vets prescribed drops for two weeks",
                "Ines Moreau:person|Maple Street Vets:org",
                "Ines Moreau>works at>Maple Street Vets",
            ),
        ],
    ),
    (
        28,
        [
            ("Our apartment rent goes up by eighty euros in April", "", ""),
            (
                "The landlord Mr. Petrov says the boiler will be replaced too",
                "Mr. Petrov:person",
                "Mr. Petrov>landlord of>USER",
            ),
        ],
    ),
    (
        30,
        [
            ("Lena lost her first tooth at breakfast today", "Lena:person", ""),
            ("She put it under her pillow and wrote a note to the tooth fairy", "", ""),
        ],
    ),
    (
        32,
        [
            ("The Volvo failed its inspection because of a worn brake disc", "Volvo:thing", ""),
            (
                "Hartley Motors will fix the brakes on Friday",
                "Hartley Motors:org|Volvo:thing",
                "Hartley Motors>services>Volvo",
            ),
        ],
    ),
    (
        34,
        [
            (
                "Project Falcon went live and the nightly jobs now finish in ten minutes",
                "Project Falcon:thing",
                "",
            ),
            (
                "Mirela on my team wrote most of the migration scripts",
                "Mirela:person|Corvid Labs:org",
                "Mirela>works at>Corvid Labs",
            ),
        ],
    ),
    (
        36,
        [
            ("I ran my first half marathon in two hours and five minutes", "", ""),
            ("My left knee felt sore for days afterwards", "", ""),
        ],
    ),
    (
        38,
        [
            ("We planted tomatoes and courgettes in the garden", "", ""),
            ("Slugs ate half of the seedlings within a week", "", ""),
        ],
    ),
    (
        40,
        [
            (
                "My book club picked The Remains of the Day for next month",
                "Book Club:org|The Remains of the Day:thing",
                "Book Club>reads>The Remains of the Day|USER>member of>Book Club",
            ),
            (
                "Greta hosts the book club in her kitchen on Wednesdays",
                "Greta:person|Book Club:org",
                "Greta>hosts>Book Club",
            ),
        ],
    ),
    (
        42,
        [
            (
                "Yusuf sent the wedding invitation with a photo of the venue by the sea",
                "Yusuf:person",
                "",
            ),
            (
                "The reception is at a restaurant called Deniz Kizi",
                "Deniz Kizi:place",
                "Yusuf>celebrates at>Deniz Kizi",
            ),
        ],
    ),
    (
        44,
        [
            ("I lost my keys somewhere between the office and the tram stop", "", ""),
            ("A locksmith changed the front door lock for one hundred and twenty euros", "", ""),
        ],
    ),
    (
        46,
        [
            (
                "Miss Alvarez said Lena reads better than most of the class",
                "Miss Alvarez:person|Lena:person",
                "",
            ),
            ("We should get her a library card over the summer", "", ""),
        ],
    ),
    (
        48,
        [
            (
                "Oskar invited me to his fiftieth birthday party at a bowling alley",
                "Oskar:person",
                "",
            ),
            ("I have no idea what to give him as a present", "", ""),
        ],
    ),
    (
        50,
        [
            ("Our boiler broke during the cold snap and we had no hot water", "", ""),
            ("Mr. Petrov sent a plumber the next morning", "Mr. Petrov:person", ""),
        ],
    ),
    (
        52,
        [
            ("I baked a lemon cake for the office party and it disappeared in minutes", "", ""),
            ("Mirela asked me for the recipe", "Mirela:person", ""),
        ],
    ),
    (
        54,
        [
            (
                "Villa Thalassa emailed to say the pool will be closed for repairs",
                "Villa Thalassa:place",
                "",
            ),
            ("They offered a free airport transfer instead", "", ""),
        ],
    ),
    (
        56,
        [
            ("Dario sold me a new helmet and lights for the winter", "Dario:person", ""),
            ("The rear light charges over USB which is handy", "", ""),
        ],
    ),
    (
        58,
        [
            ("I painted the hallway a pale green colour over the weekend", "", ""),
            ("It needed three coats to cover the old yellow", "", ""),
        ],
    ),
    (
        60,
        [
            ("My laptop is getting slow so I upgraded the memory to thirty two gigabytes", "", ""),
            ("It boots in under ten seconds now", "", ""),
        ],
    ),
    (
        62,
        [
            ("Greta recommended a podcast about Japanese woodworking", "Greta:person", ""),
            ("I listened to two episodes while cleaning the kitchen", "", ""),
        ],
    ),
    (
        64,
        [
            ("Dr. Haddad referred me to a physiotherapist for my knee", "Dr. Haddad:person", ""),
            ("The physio gave me exercises with a resistance band", "", ""),
        ],
    ),
    (
        66,
        [
            ("It rained all weekend so we stayed home and played board games", "", ""),
            ("Lena beat everyone at Ticket to Ride", "Lena:person", ""),
        ],
    ),
    (
        68,
        [
            ("I saved enough money for a new sofa after the puppy incident", "", ""),
            ("We chose a dark blue one that hides the dog hair", "", ""),
        ],
    ),
    (
        70,
        [
            (
                "Hartley Motors called to say the Volvo also needs a new battery",
                "Hartley Motors:org",
                "",
            ),
            ("They quoted one hundred and forty euros including fitting", "", ""),
        ],
    ),
    (
        72,
        [
            (
                "Our flights to Crete leave from Vienna at six in the morning",
                "Vienna:place|Crete:place",
                "USER>flies from>Vienna",
            ),
            ("I still need to renew my passport before then", "", ""),
        ],
    ),
    (
        74,
        [
            (
                "The Corvid Labs offsite is in a castle hotel in the mountains",
                "Corvid Labs:org",
                "",
            ),
            ("We will do a hackathon on the second day", "", ""),
        ],
    ),
    (
        76,
        [
            ("I went to the dentist and need a filling in a molar", "", ""),
            ("The appointment for the filling is on the ninth at eight", "", ""),
        ],
    ),
    (
        78,
        [
            ("I was furious when the train was cancelled again this morning", "", ""),
            ("I had to take a taxi and arrived late for the standup", "", ""),
        ],
    ),
]

# (question, the start of the user text that answers it)
KEYWORD_QUESTIONS = [
    ("what colour is the Volvo estate?", "I finally bought a used car"),
    ("what did the seller throw in with the tyres?", "The seller threw in a set"),
    ("what did Pretzel chew through?", "Pretzel chewed through the sofa"),
    ("who threw me a farewell lunch?", "Oskar was my manager there"),
    ("what is Project Falcon?", "Project Falcon is the pipeline"),
    ("what did we watch at the Rialto?", "We watched an old film at the Rialto"),
    ("what was in the lamb tagine?", "I cooked a lamb tagine"),
    ("where did the flat tyre happen?", "My bike got a flat tyre"),
    ("which guesthouse did we book near Chania?", "Villa Thalassa is the guesthouse"),
    ("how much to replace the phone glass?", "The repair shop wants ninety euros"),
    ("where is Yusuf getting married?", "My friend Yusuf is getting married"),
    ("what did Dr. Ines Moreau prescribe?", "Dr. Ines Moreau at Maple Street Vets"),
    ("how much does the rent go up in April?", "Our apartment rent goes up"),
    ("why did the Volvo fail its inspection?", "The Volvo failed its inspection"),
    ("how long did my half marathon take?", "I ran my first half marathon"),
    ("what ate the seedlings?", "Slugs ate half of the seedlings"),
    ("which book did the book club pick?", "My book club picked"),
    ("what is the reception restaurant called?", "The reception is at a restaurant"),
    ("how much did the locksmith charge?", "A locksmith changed the front door lock"),
    ("where is Oskar's fiftieth birthday party?", "Oskar invited me to his fiftieth"),
    ("what happened to the Villa Thalassa pool?", "Villa Thalassa emailed to say the pool"),
    ("what colour did I paint the hallway?", "I painted the hallway"),
    ("how much memory did I put in the laptop?", "My laptop is getting slow"),
    ("what podcast did Greta recommend?", "Greta recommended a podcast"),
    ("who won at Ticket to Ride?", "Lena beat everyone at Ticket to Ride"),
    ("how much is the new Volvo battery?", "They quoted one hundred and forty euros"),
    ("when is the molar filling appointment?", "The appointment for the filling"),
]
# No word in common with the answer (the corpus test checks it), only concepts.
PARAPHRASE_QUESTIONS = [
    ("when did I purchase an automobile?", "I finally bought a used car"),
    ("what did the physician advise while I was unwell?", "Dr. Haddad told me to drink"),
    ("did we get a mutt?", "We adopted a puppy from the shelter"),
    ("why did I resign from my employment?", "I quit my job at Brightline"),
    ("what flick did we see?", "We watched an old film at the Rialto"),
    ("what did I prepare for supper?", "I cooked a lamb tagine"),
    ("who mended my bicycle?", "Dario at Spoke and Chain repaired it"),
    ("where are we going on vacation?", "We are planning a trip to Crete"),
    ("is my smartphone damaged?", "My phone screen cracked"),
    ("whose marriage is coming up?", "My friend Yusuf is getting married"),
    ("how is my ukulele studying going?", "I am learning the guitar"),
    ("what happened with the lodging costs?", "Our apartment rent goes up"),
    ("did my kid's teeth come out?", "Lena lost her first tooth"),
    ("who will repair the motor?", "Hartley Motors will fix the brakes"),
    ("how did my jogging go?", "I ran my first half marathon"),
    ("what is growing in the backyard?", "We planted tomatoes and courgettes"),
    ("what paperback are we reading together?", "My book club picked"),
    ("where did I misplace my keyring?", "I lost my keys somewhere"),
    ("was the heater damaged?", "Our boiler broke during the cold snap"),
    ("what dessert did I make for colleagues?", "I baked a lemon cake"),
    ("was I injured after the jog?", "My left knee felt sore"),
    ("which canvas colours went on the walls?", "I painted the hallway"),
    ("is the notebook computer speedy now?", "It boots in under ten seconds now"),
    ("when did the downpour keep us in?", "It rained all weekend"),
    ("did we get funds together for furniture?", "I saved enough money for a new sofa"),
    ("what did the dental visit find?", "I went to the dentist"),
    ("when was I annoyed about the commute?", "I was furious when the train"),
]
HOP_QUESTIONS = [
    ("what do I know about Corvid Labs?", "Mirela on my team wrote"),
    ("what do I know about Miss Alvarez?", "My daughter Lena starts primary school"),
    ("how is Brightline?", "Oskar invited me to his fiftieth"),
    ("anything about Chania?", "Villa Thalassa emailed to say"),
    ("what about Maple Street Vets?", "Pretzel chewed through the sofa"),
    ("tell me about Izmir", "The reception is at a restaurant"),
    ("any word from Spoke and Chain?", "Dario sold me a new helmet"),
    ("who is Greta?", "My book club picked"),
    ("what about Hartley Motors?", "I finally bought a used car"),
    ("tell me about The Remains of the Day", "Greta recommended a podcast"),
]

# recall@5 per kind, measured with the chosen weights and with the spec's starting
# weights (0.55/0.45, max-normalised keyword leg, no neighbour term), both at FULL.
# Measured 2026-11-29. The paraphrase misses are keyword noise outvoting the vector leg
# ("did we get a mutt?" matches "get" elsewhere; porter stems "used" to "us"), which the
# fusion keeps on purpose: on LoCoMo the keyword leg is the stronger one.
# 2026-12-01 (issue 15): the neighbour share only between exchanges that match the question
# by themselves (retrieval.NEIGHBOUR_MIN_COSINE) took paraphrase from 0.7407 to 0.7778
# ("did we get a mutt?" is now found), all from 0.8281 to 0.8438.
SYNTHETIC_FIGURES = {
    "tuned": {"keyword": 1.0, "paraphrase": 0.7778, "hop": 0.6, "all": 0.8438},
    "spec_start": {"keyword": 0.963, "paraphrase": 0.7778, "hop": 0.2, "all": 0.7656},
}

_WORD = re.compile(r"[^\W_]+")


class SynonymEmbedder:
    """Deterministic: fold synonyms and simple inflections, hash concepts to unit vectors."""

    def __init__(self, dim: int = 96) -> None:
        self.dim = dim
        self.calls = 0

    @staticmethod
    def concept(word: str) -> str | None:
        word = word.casefold()
        if word in STOPWORDS or len(word) < 2:
            return None
        if word in _CANON:
            return _CANON[word]
        if word.endswith("s") and word[:-1] in _CANON:
            return _CANON[word[:-1]]
        return word

    def _concept_vector(self, concept: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(concept.encode(), digest_size=8).digest(), "little")
        return np.random.default_rng(seed).standard_normal(self.dim)

    def vector(self, text: str) -> list[float]:
        total = np.zeros(self.dim)
        for word in _WORD.findall(text):
            concept = self.concept(word)
            if concept is not None:
                total += self._concept_vector(concept)
        if not total.any():
            total[0] = 1.0
        return list(total / np.linalg.norm(total))

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self.vector(t) for t in texts]


def _parse(entities: str, relationships: str) -> dict[str, Any]:
    ents = [
        dict(zip(("name", "type"), item.rsplit(":", 1)))
        for item in filter(None, entities.split("|"))
    ]
    rels = [
        dict(zip(("source", "relation", "target"), item.split(">")))
        for item in filter(None, relationships.split("|"))
    ]
    return {"entities": ents, "relationships": rels}


EXTRACTIONS = {user: _parse(ents, rels) for _, turns in CORPUS for user, ents, rels in turns}


def fake_extract(prompt: str) -> str:
    out: dict[str, Any] = {"facts": {}, "entities": [], "relationships": []}
    for line in prompt.split("\n"):
        found = EXTRACTIONS.get(line.removeprefix("USER: ").strip())
        if line.startswith("USER: ") and found:
            out["entities"] += found["entities"]
            out["relationships"] += found["relationships"]
    return json.dumps(out) if out["entities"] or out["relationships"] else "NONE"


def build_corpus(path: str, **kw: Any) -> elastimem.Elastimem:
    mem = elastimem.Elastimem(
        path,
        **kw,
        llm=ScriptedLLM({"extract": fake_extract}),
        embedder=SynonymEmbedder(),
        tier_override="full",
        disable_builtin_embedder=True,
    )
    for day, turns in CORPUS:
        at = START + timedelta(days=day)
        mem.begin_session(at=at)
        for i, (user, _e, _r) in enumerate(turns):
            mem.record_turn(user, REPLIES[(day + i) % len(REPLIES)], at=at + timedelta(minutes=i))
    mem.end_session(wait=False)
    assert mem.drain(60)
    return mem


def answer_id(mem: elastimem.Elastimem, start: str) -> int:
    found = rows(
        mem,
        "SELECT id FROM chunks WHERE substr(text, 1, ?) = ?",
        (len(start) + 6, "User: " + start),
    )
    assert len(found) == 1, start
    return int(found[0][0])


def recall_figures(
    mem: elastimem.Elastimem, rank: Callable[[str], list[int]] | None = None
) -> dict[str, float]:
    """recall@5 per kind; ``rank`` defaults to the public ``recall(q, 5, kinds=chunk)``."""

    def top5(question: str) -> list[int]:
        if rank is not None:
            return rank(question)
        return [int(h.id or 0) for h in mem.recall(question, 5, kinds=["chunk"])]

    figures: dict[str, float] = {}
    found_all = 0
    for kind, questions in (
        ("keyword", KEYWORD_QUESTIONS),
        ("paraphrase", PARAPHRASE_QUESTIONS),
        ("hop", HOP_QUESTIONS),
    ):
        found = sum(answer_id(mem, start) in top5(q) for q, start in questions)
        figures[kind] = round(found / len(questions), 4)
        found_all += found
    total = len(KEYWORD_QUESTIONS) + len(PARAPHRASE_QUESTIONS) + len(HOP_QUESTIONS)
    figures["all"] = round(found_all / total, 4)
    return figures


def ranker(
    mem: elastimem.Elastimem, weights: retrieval.Weights, normalise: Any = None
) -> Callable[[str], list[int]]:
    """The store's own ranking with other weights (what the tuning grid varies)."""

    def rank(question: str) -> list[int]:
        # The one query path, as recall runs it, with these weights.
        real = query_path.rank
        query_path.rank = functools.partial(real, weights=weights)
        try:
            return [int(h.id or 0) for h in mem.recall(question, 5, kinds=["chunk"])]
        finally:
            query_path.rank = real

    return rank


@pytest.fixture(scope="module", params=STORE_BACKENDS)
def corpus(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[elastimem.Elastimem]:
    """The corpus in a file, or as a user of the test session's PostgreSQL database: the
    figures are the same on both."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        mem = build_corpus(url, user_id=f"tuning-{os.urandom(6).hex()}")
    else:
        mem = build_corpus(str(tmp_path_factory.mktemp("tuning") / "m.db"))
    yield mem
    mem.close()


def test_the_set_is_what_it_claims(
    corpus: elastimem.Elastimem, request: pytest.FixtureRequest
) -> None:
    total = len(KEYWORD_QUESTIONS) + len(PARAPHRASE_QUESTIONS) + len(HOP_QUESTIONS)
    assert total >= 60
    stats = corpus.stats()
    assert stats["sessions"] == len(CORPUS)
    assert stats["embedded_chunks"] == stats["chunks"] == sum(len(t) for _, t in CORPUS)
    assert stats["graph_nodes"] >= 25 and stats["graph_edges"] >= 25
    embed = SynonymEmbedder()
    database = open_storage(corpus)  # the storage layer's own reader, beside the store
    request.addfinalizer(database.close)
    for question, start in PARAPHRASE_QUESTIONS + HOP_QUESTIONS:
        target = answer_id(corpus, start)
        row = rows(corpus, "SELECT id, text FROM chunks WHERE id = ?", (target,))[0]
        with database.read() as conn:
            embedded = passage_texts(conn, [row])[0]
        shared = {em_fold(t) for t in query_terms(question)} & set(word_tokens(row[1]))
        assert not shared, (question, shared)
        if (question, start) in PARAPHRASE_QUESTIONS:
            # ...but they do share a concept with what the embedder saw (the chunk and
            # the exchange before it).
            asked = {embed.concept(w) for w in word_tokens(question)} - {None}
            said = {embed.concept(w) for w in word_tokens(embedded)} - {None}
            assert asked & said, question


def test_synthetic_recall_matches_the_recorded_figures(corpus: elastimem.Elastimem) -> None:
    figures = recall_figures(corpus)
    for kind, recorded in SYNTHETIC_FIGURES["tuned"].items():
        assert figures[kind] == pytest.approx(recorded, abs=0.01), figures


def test_spec_start_weights_figures(
    corpus: elastimem.Elastimem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's baseline: the spec's starting weights and max-normalised BM25."""
    floor = retrieval.normalise_with_floor
    monkeypatch.setattr(retrieval, "normalise_vector_scores", floor)
    monkeypatch.setattr(
        retrieval, "normalise_with_floor", lambda rows, pool: retrieval._normalise_bm25(rows)
    )
    start = retrieval.Weights(fts=0.55, vec=0.45, graph=0.15, neighbour=0.0)
    figures = recall_figures(corpus, ranker(corpus, start))
    for kind, recorded in SYNTHETIC_FIGURES["spec_start"].items():
        assert figures[kind] == pytest.approx(recorded, abs=0.01), figures
