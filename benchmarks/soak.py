"""Soak: a long run of turns with extraction and embeddings; is anything drifting?

    python benchmarks/soak.py                          # 5,000 turns, a few minutes
    python benchmarks/soak.py --turns 100000           # the full soak (tens of minutes)
    python benchmarks/soak.py --turns 20000 --db /tmp/soak.db --keep --json soak.json

The store runs at STANDARD (batched LLM extraction, embeddings, dedupe-only consolidation)
with two host doubles: an LLM that answers extraction prompts instantly with a few facts,
entities and relationships drawn from the turn, and a deterministic 384-dimension
bag-of-words embedder (the size of MiniLM, so vectors cost what real ones do). Sessions end
every ``--session-turns`` turns and the host reports evictions as its window slides. The
host records as fast as it can, but waits whenever the background backlog passes
``--max-backlog`` jobs (a chat produces a turn every few seconds; an unthrottled loop would
only measure how far the worker falls behind), and the time spent waiting is reported.

Every tenth of the run prints: throughput, recall latency (p50/p95 of recalls timed during
that tenth, keyword + vector + graph legs), build_context p95, recall p50/p95 with the worker
idle (``q``: the backlog drained first, then ``--probe`` recalls), RSS, file size (main +
WAL) and the job backlog. At the end the queue is drained and ``stats()`` is checked against direct
counts of the tables; the exit code is 1 if they disagree or the integrity check fails.
Goals: flat recall latency, RSS growing no faster than the data it caches (the numpy vector
matrix costs 1.5 KB per chunk), and a backlog that does not grow without bound.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import os
import random
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import elastimem

VOCABULARY = 20_000
FUNCTION_WORDS = "i the a to and of my it in that was for on is with we so but at".split()
NAMES = [
    "Ada", "Bruno", "Chiara", "Dmitri", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas",
    "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tomoko",
]  # fmt: skip
PLACES = ["Lisbon", "Oslo", "Nairobi", "Kyoto", "Quito", "Tbilisi", "Perth", "Montreal"]
_WORD = re.compile(r"[^\W_]+")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{2,}\b")


class ZipfText:
    """Content words with a Zipf law over a 20k-word vocabulary, like real conversation."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        weights = [1.0 / (rank + 1) ** 1.07 for rank in range(VOCABULARY)]
        self.cumulative = list(itertools.accumulate(weights))
        syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo", "den", "par", "gel", "tor"]
        word_rng = random.Random(1)
        self.words = [
            "".join(word_rng.choice(syllables) for _ in range(word_rng.randint(2, 4)))
            for _ in range(VOCABULARY)
        ]

    def word(self) -> str:
        index = bisect.bisect(self.cumulative, self.rng.random() * self.cumulative[-1])
        return self.words[min(index, VOCABULARY - 1)]

    def sentence(self, words: int = 14) -> str:
        out = [
            self.rng.choice(FUNCTION_WORDS) if self.rng.random() < 0.45 else self.word()
            for _ in range(words)
        ]
        return " ".join(out).capitalize() + "."

    def user_turn(self) -> str:
        roll = self.rng.random()
        name, place = self.rng.choice(NAMES), self.rng.choice(PLACES)
        if roll < 0.05:
            return f"I live in {place} now. {self.sentence()}"
        if roll < 0.10:
            return f"My favorite {self.word()} is {self.word()}. {self.sentence()}"
        if roll < 0.40:
            return f"{name} and I talked about {place} and {self.word()}. {self.sentence()}"
        return self.sentence(self.rng.randint(6, 30))


class SoakLLM:
    """Answers every library prompt instantly; extraction yields facts, entities and edges."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.calls: dict[str, int] = {}

    def __call__(self, prompt: str, *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        task = prompt.split("\n", 1)[0].removeprefix("TASK:").strip()
        self.calls[task] = self.calls.get(task, 0) + 1
        if task == "extract":
            turns = prompt.split("\nConversation\n", 1)[-1]
            names = list(dict.fromkeys(n for n in _CAPITALISED.findall(turns) if n != "User"))[:4]
            facts = {f"topic_{self.rng.randrange(50)}": self.rng.choice(PLACES)}
            if names:
                facts["recent_friend"] = names[0]
            return json.dumps(
                {
                    "facts": facts,
                    "entities": [{"name": n, "type": "person"} for n in names],
                    "relationships": [
                        {"source": "USER", "relation": "talked_with", "target": n}
                        for n in names[:2]
                    ],
                }
            )
        if task == "summarise-session":
            return "The user talked about friends, places and plans."
        if task == "condense":
            return "They talked about friends and places."
        return {"same-entity": "no", "label": "Friends"}.get(task, "")


class SoakEmbedder:
    """Deterministic bag-of-words vectors of ``dim`` dimensions (384, like MiniLM)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._slots: dict[str, tuple[int, float]] = {}
        self.texts = 0

    def _slot(self, word: str) -> tuple[int, float]:
        slot = self._slots.get(word)
        if slot is None:
            digest = hashlib.blake2b(word.encode("utf-8", "replace"), digest_size=8).digest()
            slot = (int.from_bytes(digest[:4], "little") % self.dim, 1.0 if digest[4] & 1 else -1.0)
            self._slots[word] = slot
        return slot

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        matrix = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.casefold())[:2048]:
                index, sign = self._slot(word)
                matrix[row, index] += sign
            if not matrix[row].any():
                matrix[row, 0] = 1.0
        return matrix


def rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        import psutil

        return float(psutil.Process().memory_info().rss) / 2**20
    except ImportError:
        return float("nan")


def file_mb(path: str) -> float:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s)) / 2**20


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


STAT_QUERIES = {
    "facts": "SELECT count(*) FROM facts WHERE invalidated_at IS NULL AND archived = 0",
    "fact_versions": "SELECT count(*) FROM facts",
    "archived_facts": "SELECT count(*) FROM facts WHERE archived = 1 AND invalidated_at IS NULL",
    "sessions": "SELECT count(*) FROM sessions",
    "open_sessions": "SELECT count(*) FROM sessions WHERE ended_at IS NULL",
    "messages": "SELECT count(*) FROM messages",
    "chunks": "SELECT count(*) FROM chunks",
    "lessons": "SELECT count(*) FROM lessons WHERE archived = 0",
    "quarantine": "SELECT count(*) FROM quarantine",
    "graph_nodes": "SELECT count(*) FROM graph_nodes WHERE type <> 'self'",
    "graph_edges": "SELECT count(*) FROM graph_edges",
    "jobs_pending": "SELECT count(*) FROM jobs WHERE state IN ('queued', 'held', 'running')",
    "jobs_failed": "SELECT count(*) FROM jobs WHERE state = 'failed'",
}


def backlog(path: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return int(
            conn.execute(
                "SELECT count(*) FROM jobs WHERE state IN ('queued', 'held', 'running')"
            ).fetchone()[0]
        )
    finally:
        conn.close()


def quiet_probe(
    mem: elastimem.Elastimem, queries: list[str], args: argparse.Namespace, turn: int
) -> list[float]:
    """Recall latency with the worker idle: drain the backlog, then time ``--probe`` recalls.

    The recalls timed during ingest share two cores with a worker that is never idle (the
    host records as fast as it can), so they mostly measure that contention; a chat leaves
    the worker idle between turns. The probe isolates what the store's growth costs.
    """
    mem.drain(timeout=args.drain_timeout)
    times = []
    for i in range(args.probe):
        query = queries[(turn + 7 * i) % len(queries)]
        t0 = time.perf_counter()
        mem.recall(query, k=10)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = None
    if args.db:
        path = str(Path(args.db).expanduser().resolve())
    else:
        tmp = tempfile.TemporaryDirectory(prefix="elastimem-soak-")
        path = str(Path(tmp.name) / "soak.db")
    text = ZipfText(args.seed)
    llm = SoakLLM(args.seed)
    embedder = SoakEmbedder(args.dim)
    mem = elastimem.open(
        path,
        llm=llm,
        embedder=embedder,
        disable_builtin_embedder=True,
        tier_override=args.tier,
    )
    print(f"soak: {args.turns} turns into {path} at {args.tier.upper()}, {args.dim}-dim vectors")
    print(
        f"{'done':>7} {'turns/s':>8} {'recall p50':>11} {'recall p95':>11} {'ctx p95':>8} "
        f"{'q p50':>6} {'q p95':>6} "
        f"{'RSS MB':>8} {'file MB':>8} {'backlog':>8} {'waited s':>9}"
    )
    rss_start = rss_mb()
    started = time.perf_counter()
    step = max(1, args.turns // 10)
    rows: list[dict[str, Any]] = []
    recall_ms: list[float] = []
    context_ms: list[float] = []
    window: list[tuple[str, str]] = []
    step_started = time.perf_counter()
    queries = [text.sentence(8) for _ in range(500)]
    record_ms: list[float] = []
    waited = 0.0
    for turn in range(1, args.turns + 1):
        if turn % args.session_turns == 1 and turn > 1:
            mem.end_session(wait=False)
            window = []
        user, assistant = text.user_turn(), text.sentence()
        t0 = time.perf_counter()
        mem.record_turn(user, assistant)
        record_ms.append((time.perf_counter() - t0) * 1000)
        if turn % 50 == 0 and backlog(path) > args.max_backlog:
            t0 = time.perf_counter()
            while backlog(path) > args.max_backlog // 2:
                time.sleep(0.05)
            waited += time.perf_counter() - t0
        window.append((user, assistant))
        if len(window) > args.window:
            mem.report_evictions(window[: len(window) - args.window])
            window = window[-args.window :]
        if turn % args.recall_every == 0:
            query = queries[turn % len(queries)]
            t0 = time.perf_counter()
            mem.recall(query, k=10)
            recall_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            mem.build_context(query)
            context_ms.append((time.perf_counter() - t0) * 1000)
        if turn % step == 0 or turn == args.turns:
            elapsed = time.perf_counter() - step_started
            quiet_ms = quiet_probe(mem, queries, args, turn)
            row = {
                "turns": turn,
                "turns_per_s": round(step / elapsed, 1) if elapsed else 0.0,
                "recall_p50_ms": round(percentile(recall_ms, 0.5), 2),
                "recall_p95_ms": round(percentile(recall_ms, 0.95), 2),
                "context_p95_ms": round(percentile(context_ms, 0.95), 2),
                "quiet_recall_p50_ms": round(percentile(quiet_ms, 0.5), 2),
                "quiet_recall_p95_ms": round(percentile(quiet_ms, 0.95), 2),
                "rss_mb": round(rss_mb(), 1),
                "file_mb": round(file_mb(path), 1),
                "backlog": backlog(path),
                "waited_s": round(waited, 1),
            }
            rows.append(row)
            print(
                f"{turn:>7} {row['turns_per_s']:>8} {row['recall_p50_ms']:>11} "
                f"{row['recall_p95_ms']:>11} {row['context_p95_ms']:>8} "
                f"{row['quiet_recall_p50_ms']:>6} {row['quiet_recall_p95_ms']:>6} "
                f"{row['rss_mb']:>8} "
                f"{row['file_mb']:>8} {row['backlog']:>8} {row['waited_s']:>9}",
                flush=True,
            )
            recall_ms, context_ms = [], []
            step_started = time.perf_counter()  # the probe's drain is not ingest time
    writing = time.perf_counter() - started
    mem.end_session(wait=False)
    t0 = time.perf_counter()
    drained = mem.drain(timeout=args.drain_timeout)
    drain_s = time.perf_counter() - t0
    stats = mem.stats()
    conn = sqlite3.connect(path, timeout=30)
    try:
        counts = {k: int(conn.execute(sql).fetchone()[0]) for k, sql in STAT_QUERIES.items()}
        t0 = time.perf_counter()
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        integrity_s = time.perf_counter() - t0
    finally:
        conn.close()
    mismatches = {k: (stats.get(k), v) for k, v in counts.items() if stats.get(k) != v}
    mem.close()
    result = {
        "turns": args.turns,
        "tier": args.tier,
        "dim": args.dim,
        "write_seconds": round(writing, 1),
        "turns_per_s": round(args.turns / writing, 1),
        "record_turn_p50_ms": round(percentile(record_ms, 0.5), 2),
        "record_turn_p95_ms": round(percentile(record_ms, 0.95), 2),
        "waited_for_worker_s": round(waited, 1),
        "drained": drained,
        "drain_seconds": round(drain_s, 1),
        "rss_start_mb": round(rss_start, 1),
        "rss_end_mb": rows[-1]["rss_mb"],
        "file_mb": round(file_mb(path), 1),
        "integrity": integrity,
        "integrity_seconds": round(integrity_s, 1),
        "stats_mismatches": mismatches,
        "stats": {k: stats[k] for k in (*STAT_QUERIES, "embedded_chunks") if k in stats},
        "llm_calls": dict(llm.calls),
        "texts_embedded": embedder.texts,
        "per_tenth": rows,
    }
    first, last = rows[0], rows[-1]
    chunks = max(1, int(stats.get("chunks", 0)))
    print(
        f"\nthroughput {result['turns_per_s']} turns/s over {writing:.0f} s "
        f"({waited:.0f} s of it waiting for the worker); record_turn p50/p95 "
        f"{result['record_turn_p50_ms']} / {result['record_turn_p95_ms']} ms; drain "
        f"{'done' if drained else 'TIMED OUT'} in {drain_s:.1f} s\n"
        f"recall p95 first/last tenth: {first['recall_p95_ms']} / {last['recall_p95_ms']} ms "
        f"(worker idle: p50 {first['quiet_recall_p50_ms']} / {last['quiet_recall_p50_ms']}, "
        f"p95 {first['quiet_recall_p95_ms']} / {last['quiet_recall_p95_ms']} ms); "
        f"build_context p95: {first['context_p95_ms']} / {last['context_p95_ms']} ms\n"
        f"RSS {rss_start:.0f} -> {last['rss_mb']:.0f} MB "
        f"({(last['rss_mb'] - rss_start) * 1024 / chunks:.2f} KB per chunk; "
        f"the vector matrix alone is {args.dim * 4 / 1024:.2f} KB per chunk)\n"
        f"file {result['file_mb']} MB ({result['file_mb'] * 1024 / chunks:.2f} KB per chunk); "
        f"integrity {integrity} in {integrity_s:.1f} s\n"
        f"stats() vs tables: {mismatches or 'consistent'}"
    )
    if tmp is not None and not args.keep:
        tmp.cleanup()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5_000, help="exchanges to record")
    parser.add_argument("--db", help="store file (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    parser.add_argument("--tier", choices=["lite", "standard", "full"], default="standard")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension")
    parser.add_argument("--session-turns", type=int, default=40, help="turns per session")
    parser.add_argument("--window", type=int, default=8, help="host window before evictions")
    parser.add_argument("--recall-every", type=int, default=10, help="time a recall every N")
    parser.add_argument(
        "--max-backlog", type=int, default=1000, help="wait for the worker above this backlog"
    )
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--probe", type=int, default=50, help="recalls timed with the worker idle, per tenth"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["integrity"] == "ok" and not result["stats_mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
