"""Many users on one PostgreSQL server from many processes (issue #18).

``--users`` users (default 1,000) each get ``--turns`` exchanges (default 50), written by
``--processes`` concurrent worker processes (default 8, ``multiprocessing`` with spawn). User
``u`` belongs to process ``u mod P``; a process opens its users one after another with
``elastimem.open(url, user_id=...)`` (the public API), writes the user's turns with
``record_turn`` and, every ``--fact-every`` turns, ``remember``s a new value for one of three
keys, then closes the store (which drains its embed jobs). The write phase's wall time gives
turns/s. Then each process reopens its users and times ``--queries`` hybrid ``recall``s per
user (``recall p50/p95`` are over those, in ms), and reads back through ``stats()`` and
``fact_history()``:

* **turns lost**: exchanges whose messages or chunk the user's store does not hold
  (``stats()["messages"] == 2 × turns`` and ``stats()["chunks"] == turns`` for every user);
* **duplicate facts**: keys with more than one live version, or a live-fact count other than
  the keys written;
* **errors**: exceptions out of any call, plus every WARNING or worse the ``elastimem`` logger
  emitted (``record_turn`` logs instead of raising, so the log is the evidence).

All three must be 0. The embedder is a cheap deterministic host embedder (``--dim``-wide
hashed bag of words, 384 by default, as the built-in model's) so vectors are written and the
vector leg runs, while the figures measure storage, not a model; ``--embedder none`` turns
vectors off (keyword recall only). No LLM.

Without ``--pg-url`` a private PostgreSQL 15 is started for the run (``tests/pg_server.py``;
note it runs with ``fsync=off``, so commits do not wait for the disk), with a new database
holding the schema, addressed as a role without SUPERUSER or BYPASSRLS so row-level
security applies as in production. ``--pg-url`` names a database to use instead (its schema
is created on first open when the role may).

    python benchmarks/tenants.py                                   # 1000 × 50 × 8
    python benchmarks/tenants.py --users 100 --turns 20 --processes 4
    python benchmarks/tenants.py --json benchmarks/results/tenants.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORDS = (
    "garden tomato bicycle harbour violin lantern pepper museum glacier orchard falcon teapot "
    "canyon meadow pianist marble kettle tundra saffron compass ferry quartz thistle walnut"
).split()
FACT_KEYS = ("home_city", "favorite_food", "current_project")
_WORD = re.compile(r"[^\W_]+")


class HashEmbedder:
    """Deterministic hashed bag of words: cheap, so the run measures storage."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.casefold()):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            vec[int.from_bytes(digest[:4], "little") % self.dim] += 1.0 if digest[4] % 2 else -1.0
        if not any(vec):
            vec[0] = 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]


class ErrorCount(logging.Handler):
    """Counts the ``elastimem`` logger's WARNING-or-worse records; keeps the first few."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.samples: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.samples) < 5:
            self.samples.append(f"{record.levelname} {record.getMessage()}"[:300])


def user_id(args: dict[str, Any], u: int) -> str:
    return f"{args['prefix']}{u:05d}"


def turn_text(u: int, i: int) -> tuple[str, str]:
    words = " ".join(WORDS[(u * 7 + i * k + 3) % len(WORDS)] for k in (1, 3, 5, 11))
    return f"Turn {i} of user {u}: today I thought about {words}.", f"Noted, {words}."


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _options(args: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"disable_builtin_embedder": True}
    if args["embedder"] == "hash":
        options["embedder"] = HashEmbedder(args["dim"])
    return options


def write_phase(worker: int, args: dict[str, Any]) -> dict[str, Any]:
    """Write every turn of this worker's users; returns its error tally."""
    import elastimem

    errors = ErrorCount()
    logging.getLogger("elastimem").addHandler(errors)
    exceptions: list[str] = []
    options = _options(args)
    turns, fact_every = args["turns"], args["fact_every"]
    for u in range(worker, args["users"], args["processes"]):
        try:
            with elastimem.open(args["url"], user_id=user_id(args, u), **options) as mem:
                for i in range(turns):
                    mem.record_turn(*turn_text(u, i))
                    if fact_every and i % fact_every == fact_every - 1:
                        key = FACT_KEYS[(i // fact_every) % len(FACT_KEYS)]
                        mem.remember(key, f"value {i} of user {u}")
        except Exception as exc:  # counted: the point is to count them
            exceptions.append(f"write {user_id(args, u)}: {type(exc).__name__}: {exc}"[:300])
    logging.getLogger("elastimem").removeHandler(errors)
    return {"errors": errors.count + len(exceptions), "samples": errors.samples + exceptions}


def expected_facts(turns: int, fact_every: int) -> set[str]:
    if not fact_every:
        return set()
    return {FACT_KEYS[(i // fact_every) % len(FACT_KEYS)] for i in range(turns)
            if i % fact_every == fact_every - 1}  # fmt: skip


def read_phase(worker: int, args: dict[str, Any]) -> dict[str, Any]:
    """Time recalls per user and check what each user's store holds."""
    import elastimem

    errors = ErrorCount()
    logging.getLogger("elastimem").addHandler(errors)
    exceptions: list[str] = []
    latencies: list[float] = []
    lost = duplicates = empty_recalls = 0
    options = _options(args)
    turns = args["turns"]
    keys = expected_facts(turns, args["fact_every"])
    for u in range(worker, args["users"], args["processes"]):
        try:
            with elastimem.open(args["url"], user_id=user_id(args, u), **options) as mem:
                for q in range(args["queries"]):
                    words = turn_text(u, (q * 17) % max(turns, 1))[1]
                    started = time.perf_counter()
                    hits = mem.recall(f"what did I say about {words}", k=5)
                    latencies.append(time.perf_counter() - started)
                    empty_recalls += not hits
                stats = mem.stats()
                lost += max(turns - stats["messages"] // 2, turns - stats["chunks"], 0)
                for key in keys:
                    live = [f for f in mem.fact_history(key) if f.invalidated_at is None]
                    duplicates += max(len(live) - 1, 0)
                duplicates += abs(stats["facts"] - len(keys))
        except Exception as exc:
            exceptions.append(f"read {user_id(args, u)}: {type(exc).__name__}: {exc}"[:300])
    logging.getLogger("elastimem").removeHandler(errors)
    return {
        "errors": errors.count + len(exceptions),
        "samples": errors.samples + exceptions,
        "latencies": latencies,
        "lost": lost,
        "duplicates": duplicates,
        "empty_recalls": empty_recalls,
    }


def _run_phase(phase: Any, args: dict[str, Any]) -> tuple[float, list[dict[str, Any]]]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(args["processes"]) as pool:
        started = time.perf_counter()
        pending = [pool.apply_async(phase, (w, args)) for w in range(args["processes"])]
        results = [p.get() for p in pending]
        return time.perf_counter() - started, results


def private_database() -> tuple[str, Any]:
    """A fresh database with the schema on a private server, as the application role."""
    sys.path.insert(0, str(REPO))
    import psycopg
    from tests import pg_server

    from elastimem.storage.postgres import migrations

    server = pg_server.start()
    admin_url = server.create_database("elastimem_tenants")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the benchmark database")
    return server.app_url(admin_url), server


def run(args: dict[str, Any]) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    write_seconds, writes = _run_phase(write_phase, args)
    read_seconds, reads = _run_phase(read_phase, args)
    latencies = [s for r in reads for s in r["latencies"]]
    total_turns = args["users"] * args["turns"]
    return {
        "users": args["users"],
        "turns_per_user": args["turns"],
        "processes": args["processes"],
        "embedder": f"hash-{args['dim']}" if args["embedder"] == "hash" else "none",
        "turns": total_turns,
        "write_seconds": round(write_seconds, 2),
        "turns_per_second": round(total_turns / write_seconds, 1),
        "recalls": len(latencies),
        "read_seconds": round(read_seconds, 2),
        "recall_p50_ms": round(1000 * _percentile(latencies, 0.50), 2),
        "recall_p95_ms": round(1000 * _percentile(latencies, 0.95), 2),
        "empty_recalls": sum(r["empty_recalls"] for r in reads),
        "errors": sum(r["errors"] for r in writes + reads),
        "error_samples": [s for r in writes + reads for s in r["samples"]][:10],
        "turns_lost": sum(r["lost"] for r in reads),
        "duplicate_facts": sum(r["duplicates"] for r in reads),
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=50, help="exchanges per user")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--queries", type=int, default=3, help="timed recalls per user")
    parser.add_argument("--fact-every", type=int, default=10,
                        help="remember a new fact value every N turns (0: never)")  # fmt: skip
    parser.add_argument("--embedder", choices=("hash", "none"), default="hash")
    parser.add_argument("--dim", type=int, default=384, help="the hash embedder's width")
    parser.add_argument("--pg-url", help="a database to use (default: a private server)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--prefix", help="user ids are PREFIX00000, PREFIX00001...; default: "
                        "new per run, so a run meets no earlier run's users")  # fmt: skip
    ns = parser.parse_args(argv)
    if min(ns.users, ns.turns, ns.processes) < 1 or ns.queries < 0 or ns.fact_every < 0:
        parser.error("--users, --turns and --processes must be at least 1")
    server = None
    url = ns.pg_url
    if url is None:
        url, server = private_database()
    prefix = ns.prefix or f"tenant-{os.urandom(3).hex()}-"
    args = {**vars(ns), "url": url, "prefix": prefix}
    args.pop("json")
    args.pop("pg_url")
    try:
        result = run(args)
    finally:
        if server is not None:
            server.stop()
    print(
        f"{result['users']} users x {result['turns_per_user']} turns from "
        f"{result['processes']} processes (embedder {result['embedder']}, "
        f"load {result['load_avg'][0]} -> {result['load_avg'][1]})"
    )
    print(
        f"write: {result['turns']} turns in {result['write_seconds']} s = "
        f"{result['turns_per_second']} turns/s"
    )
    print(
        f"recall: {result['recalls']} in {result['read_seconds']} s, "
        f"p50 {result['recall_p50_ms']} ms, p95 {result['recall_p95_ms']} ms, "
        f"empty {result['empty_recalls']}"
    )
    print(
        f"errors {result['errors']}, turns lost {result['turns_lost']}, "
        f"duplicate facts {result['duplicate_facts']}"
    )
    for sample in result["error_samples"]:
        print("  " + sample)
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    ok = result["errors"] == result["turns_lost"] == result["duplicate_facts"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
