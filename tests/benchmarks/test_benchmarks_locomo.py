"""The session-level metric of ``benchmarks/locomo.py`` on hand-made rankings.

The benchmark is a script, not part of the package: it is imported from its file. Each
ranking lists, per hit in rank order, the LoCoMo sessions its chunk covers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

LOCOMO_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "locomo.py"


@pytest.fixture(scope="module")
def locomo() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("benchmarks_locomo", LOCOMO_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def s(*sessions: int) -> frozenset[int]:
    return frozenset(sessions)


def test_turn_ids_map_to_their_sessions(locomo: ModuleType) -> None:
    assert locomo.sessions_of_turns({"D3:5", "D3:6", "D12:1"}) == {3, 12}
    assert locomo.sessions_of_turns(set()) == frozenset()


def test_duplicates_of_one_session_count_once(locomo: ModuleType) -> None:
    # Four exchanges of session 3 fill the top of the ranking before session 5 appears.
    ranked = [s(3), s(3), s(3), s(3), s(5), s(3)]
    assert locomo.distinct_sessions(ranked, 10) == [3, 5]
    assert locomo.distinct_sessions(ranked, 1) == [3]
    assert locomo.session_recall(ranked, {5}, 1) == 0.0
    assert locomo.session_recall(ranked, {5}, 2) == 1.0  # hit rank 5, session rank 2


def test_fewer_sessions_than_k_are_scored_as_they_are(locomo: ModuleType) -> None:
    ranked = [s(1), s(), s(2), s(1)]  # a hit covering no turn is skipped
    assert locomo.distinct_sessions(ranked, 5) == [1, 2]
    assert locomo.session_recall(ranked, {2, 7}, 5) == 0.5  # session 7 is missed, no padding
    assert locomo.session_recall([], {2}, 10) == 0.0


def test_evidence_in_several_sessions_counts_each_share(locomo: ModuleType) -> None:
    ranked = [s(4), s(4), s(2), s(9), s(2), s(6), s(8)]
    evidence = {2, 6, 8}
    assert locomo.distinct_sessions(ranked, 4) == [4, 2, 9, 6]
    assert locomo.session_recall(ranked, evidence, 1) == 0.0
    assert locomo.session_recall(ranked, evidence, 2) == pytest.approx(1 / 3)
    assert locomo.session_recall(ranked, evidence, 4) == pytest.approx(2 / 3)
    assert locomo.session_recall(ranked, evidence, 5) == 1.0


def test_a_chunk_spanning_sessions_adds_them_in_order(locomo: ModuleType) -> None:
    assert locomo.distinct_sessions([s(7, 2), s(2, 3)], 10) == [2, 7, 3]
    assert locomo.distinct_sessions([s(7, 2), s(2, 3)], 1) == [2]


def test_a_question_without_evidence_is_refused(locomo: ModuleType) -> None:
    with pytest.raises(ValueError, match="evidence session"):
        locomo.session_recall([s(1)], set(), 5)


def test_session_scores_average_over_questions(locomo: ModuleType) -> None:
    scores = locomo.SessionScores()
    scores.add([s(1), s(1), s(2)], s(2, 3))  # 2 distinct sessions: short at 5 and 10
    scores.add([s(n) for n in range(1, 13)], s(6, 11))  # 12 distinct: 6 in top 10, 11 not
    assert scores.n == 2
    assert scores.value(5, "share") == pytest.approx((0.5 + 0.0) / 2)
    assert scores.value(10, "share") == pytest.approx((0.5 + 0.5) / 2)
    assert scores.value(5, "any") == pytest.approx(0.5)
    assert scores.value(10, "any") == pytest.approx(1.0)
    assert scores.short == {5: 1, 10: 1}
    other = locomo.SessionScores()
    other.add([s(9)], s(9))
    scores.merge(other)
    assert scores.n == 3 and scores.short == {5: 2, 10: 2}
    assert scores.value(5, "share") == pytest.approx((0.5 + 0.0 + 1.0) / 3)


# -- the same figures on both backends (issue #18) ---------------------------------------------

TINY_TURNS = (
    ("Ana", "I adopted a grey kitten named Pixel last week."),
    ("Ben", "Pixel is a lovely name! How old is she?"),
    ("Ana", "Ten weeks. She sleeps on my keyboard while I paint."),
    ("Ben", "I started pottery classes at the community center."),
    ("Ana", "Pottery sounds relaxing. Do you use a wheel?"),
    ("Ben", "Yes, the wheel is hard but I made a small bowl."),
)
TINY_LATER = (
    ("Ana", "I sold two paintings at the harbor market on Saturday."),
    ("Ben", "Congratulations! Which ones?"),
    ("Ana", "The lighthouse one and a portrait of Pixel."),
    ("Ben", "My bowl cracked in the kiln, so I am making a vase now."),
)


def tiny_locomo(path: Path) -> Path:
    """A LoCoMo-shaped file: one conversation, two dated sessions, four questions."""
    conversation: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for number, (turns, date) in enumerate(
        ((TINY_TURNS, "1:56 pm on 8 May, 2023"), (TINY_LATER, "10:04 am on 20 June, 2023")),
        start=1,
    ):
        conversation[f"session_{number}_date_time"] = date
        conversation[f"session_{number}"] = [
            {"speaker": who, "text": text, "dia_id": f"D{number}:{i}"}
            for i, (who, text) in enumerate(turns, start=1)
        ]
    qa = [
        {"question": "What is the name of Ana's kitten?", "category": 4, "evidence": ["D1:1"]},
        {"question": "What class did Ben start?", "category": 4, "evidence": ["D1:4"]},
        {"question": "When did Ana sell paintings?", "category": 2, "evidence": ["D2:1"]},
        {"question": "What happened to Ben's bowl?", "category": 1, "evidence": ["D1:6", "D2:4"]},
    ]
    path.write_text(json.dumps([{"sample_id": "tiny", "conversation": conversation, "qa": qa}]))
    return path


def test_keyword_figures_are_the_same_on_both_backends(
    locomo: ModuleType, postgres_url: str, tmp_path: Path
) -> None:
    data = tiny_locomo(tmp_path / "tiny.json")

    def run(name: str, *extra: str) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        argv = ["--data", str(data), "--mode", "keyword", "--workdir", str(tmp_path / "stores")]
        assert locomo.main([*argv, "--json", str(out), *extra]) == 0
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures

    on_sqlite = run("sqlite")
    assert on_sqlite["keyword"]["0"]["n"] == 4
    assert on_sqlite["keyword"]["0"]["recall@10"] > 0
    # Loaded again through the API into a PostgreSQL user, and copied from the SQLite store.
    assert run("postgres", "--db-url", postgres_url) == on_sqlite
    assert run("copied", "--db-url", postgres_url, "--copy-sqlite") == on_sqlite
