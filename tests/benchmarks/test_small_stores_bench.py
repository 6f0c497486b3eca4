"""``benchmarks/small_stores.py`` runs end to end on a tiny labelled set, and counts a fact the
store captured from a labelled turn as the right answer, as the exchange itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SMALL_STORES_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "small_stores.py"
TINY = {
    "about": "a tiny set for the test",
    "stores": [
        {
            "name": "tiny",
            "voice": "plain",
            "turns": [
                ["I'm vegetarian, have been for years", "Noted."],
                ["We adopted a grey cat called Miso", "Lovely!"],
                ["thanks!", "You're welcome!"],
            ],
            "facts": {"employer": "Acme Corp"},
            "questions": [
                {"q": "Do I eat meat?", "a": [0], "type": "direct"},
                {"q": "Do I have a pet?", "a": [1], "type": "direct"},
                {"q": "Which company employs me?", "a": ["fact:employer"], "type": "fact"},
            ],
        }
    ],
    "off_topic": ["zzzz qqq xxxx"],
}


@pytest.mark.embedder
def test_the_benchmark_runs_and_a_captured_fact_counts_for_its_turn(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(TINY), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SMALL_STORES_PY), "--data", str(data), "--part", "all", "--misses"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if "did not load" in done.stdout + done.stderr:
        pytest.skip("the built-in embedder is not installed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sqlite, part all: 3 questions" in done.stdout
    recall = next(line for line in done.stdout.splitlines() if line.strip().startswith("recall"))
    bare = next(line for line in done.stdout.splitlines() if "bare model" in line)
    # "Do I eat meat?" answers diet: vegetarian (captured from turn 0) first: right, not a miss
    assert recall.split()[1] == "1.000", done.stdout
    assert bare.split()[2] == "1.000", done.stdout
    assert "miss:" not in done.stdout
