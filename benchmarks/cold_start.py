"""Cold start: how long a fresh process takes to give its first hybrid recall (``embed`` extra).

Prepares, once, a store of a few sessions recorded with the built-in embedder (vectors on
file), then times ``--runs`` fresh processes of each kind, interleaved so machine load hits
them alike:

- ``open + first recall``: ``import elastimem``, ``elastimem.open(path)``, ``recall(q)``
  with no ``warm_up()``; timed inside the child from before the import to the result, and
  as the whole process's wall time. The child then checks, untimed, that the result used
  the vector leg (``explain().vector_leg == "used"``).
- ``CLI recall``: ``elastimem --db PATH recall QUESTION``, wall time.
- ``import numpy``: ``python -c "import numpy"``, the baseline for this machine's load.

It also reports the one-time conversion of the model to ONNX, measured in a fresh cache
folder (``--cache`` reuses a folder instead, and skips that figure). Children run with
bytecode caching on (as an installed package has), after one untimed run of each command.

    python benchmarks/cold_start.py
    python benchmarks/cold_start.py --runs 9 --cache ~/.cache/elastimem
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

QUESTION = "Do I own any animals?"
TURNS = [
    ("I have a border collie called Juniper; she is three.", "What a lovely dog!"),
    ("And a cat named Pixel who sleeps on my keyboard.", "Cats love warm keyboards."),
    ("I work as a tax accountant in Leeds.", "April must be busy."),
    ("We went hiking in the Lake District last weekend.", "Great walking country."),
    ("I'm learning to bake sourdough bread.", "Keep the starter warm."),
    ("My sister Dana moved to Lisbon in May.", "Lisbon is beautiful."),
    ("I need to renew my passport before the trip.", "Do it early."),
    ("The printer on the third floor keeps jamming.", "Try a new tray."),
]


def _env(cache: Path) -> dict[str, str]:
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env["ELASTIMEM_CACHE_DIR"] = str(cache)
    return env


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])}... failed:\n{done.stderr}")
    return wall, done.stdout


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def convert(env: dict[str, str]) -> float:
    wall, out = _run(
        _python(
            """
            import time
            started = time.perf_counter()
            from elastimem.index.embedders import BuiltinEmbedder
            e = BuiltinEmbedder()
            assert e.load(), e.failure
            print(time.perf_counter() - started)
            """
        ),
        env,
    )
    return float(out.strip().splitlines()[-1])


def prepare(path: Path, env: dict[str, str]) -> None:
    _run(
        _python(
            f"""
            import elastimem
            mem = elastimem.open({str(path)!r})
            for start in range(0, {len(TURNS)}, 4):
                mem.begin_session()
                for user, assistant in {TURNS!r}[start:start + 4]:
                    mem.record_turn(user, assistant)
                mem.end_session()
            assert mem.drain(300), "embedding did not finish"
            stats = mem.stats()
            assert stats["embedded_chunks"] == stats["chunks"] > 0, stats
            mem.close()
            """
        ),
        env,
    )


def first_recall_command(path: Path) -> list[str]:
    return _python(
        f"""
        import time
        started = time.perf_counter()
        import elastimem
        mem = elastimem.open({str(path)!r})
        hits = mem.recall({QUESTION!r})
        took = time.perf_counter() - started
        state = mem.explain({QUESTION!r}).vector_leg
        mem.close()
        print(took, state, hits[0].text.replace("\\n", " ")[:60] if hits else "-")
        """
    )


def cli_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "elastimem.cli", "--db", str(path), "recall", QUESTION, "-k", "3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes of each kind")
    parser.add_argument("--cache", type=Path, help="reuse this model cache (no conversion)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="elastimem-cold-"))
    try:
        cache = args.cache.expanduser() if args.cache else work / "cache"
        env = _env(cache)
        conversion = None if args.cache else convert(env)
        store = work / "store.db"
        prepare(store, env)
        commands = {
            "open + first recall": first_recall_command(store),
            "CLI recall (wall)": cli_command(store),
            "import numpy (wall)": _python("import numpy"),
        }
        for command in commands.values():  # untimed: writes bytecode, warms the page cache
            _run(command, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        times["open + first recall (wall)"] = []
        states: set[str] = set()
        first_hit = ""
        for _ in range(args.runs):
            for name, command in commands.items():
                wall, out = _run(command, env)
                if name == "open + first recall":
                    took, state, first_hit = out.strip().split(" ", 2)
                    times[name].append(float(took))
                    times["open + first recall (wall)"].append(wall)
                    states.add(state)
                else:
                    times[name].append(wall)
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.runs} runs each"
        )
        if conversion is not None:
            print(f"one-time conversion to ONNX (first process ever): {conversion:.1f} s")
        print(
            f"vector leg in the first recall: {', '.join(sorted(states))}; top hit: {first_hit!r}"
        )
        print()
        print(f"{'measure':<30} {'median s':>9} {'min s':>7} {'max s':>7}")
        for name in (
            "open + first recall",
            "open + first recall (wall)",
            "CLI recall (wall)",
            "import numpy (wall)",
        ):
            values = times[name]
            print(
                f"{name:<30} {statistics.median(values):>9.3f} {min(values):>7.3f} "
                f"{max(values):>7.3f}"
            )
        if args.json:
            args.json.write_text(json.dumps({"conversion": conversion, "times": times}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
