"""Agent-loop benchmark: build_context latency and LLM calls per 100 turns at each tier.

    python benchmarks/agent_loop.py                 # 10k exchanges, 200 facts
    python benchmarks/agent_loop.py --exchanges 2000 --samples 100
    python benchmarks/agent_loop.py --generate-ms 50   # the host holds foreground() per turn

build_context is measured keyword-only (no embedder), so the figure excludes the query
embedding, as issue 4 asks. The LLM is a counting double that answers instantly.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
import statistics
import tempfile
import time
from pathlib import Path

import elastimem

FUNCTION_WORDS = "i the a to and of my it in that was for on is with we so but at".split()
VOCABULARY = 20_000


class ZipfText:
    """Text whose content words follow a Zipf law over a 20k-word vocabulary, as real
    conversation does: a few words are everywhere, most are rare."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        weights = [1.0 / (rank + 1) ** 1.07 for rank in range(VOCABULARY)]
        self.cumulative = list(itertools.accumulate(weights))
        syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo", "den", "par", "gel", "tor"]
        word_rng = random.Random(1)
        self.words = ["".join(word_rng.choice(syllables) for _ in range(word_rng.randint(2, 4)))
                      for _ in range(VOCABULARY)]  # fmt: skip

    def sentence(self, words: int = 14) -> str:
        out = []
        for _ in range(words):
            if self.rng.random() < 0.45:
                out.append(self.rng.choice(FUNCTION_WORDS))
            else:
                index = bisect.bisect(self.cumulative, self.rng.random() * self.cumulative[-1])
                out.append(self.words[min(index, VOCABULARY - 1)])
        return " ".join(out).capitalize() + "."


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_build_context(exchanges: int, facts: int, samples: int) -> tuple[float, float, int]:
    text = ZipfText(7)
    sentence = text.sentence
    with (
        tempfile.TemporaryDirectory() as tmp,
        elastimem.open(str(Path(tmp) / "bench.db"), disable_builtin_embedder=True) as mem,
    ):
        per_session = 50
        for start in range(0, exchanges, per_session):
            mem.begin_session(at="2024-01-01T00:00:00Z")
            for _ in range(min(per_session, exchanges - start)):
                mem.record_turn(sentence(), sentence())
        mem.end_session(wait=False)
        for i in range(facts):
            mem.remember(f"note_{i}_{text.words[i * 7 + 100]}", sentence(6))
        for i in range(10):
            mem.add_lesson(f"lesson number {i}: {sentence()}")
        mem.drain(timeout=60)
        mem.begin_session()
        mem.warm_up()  # as a host does; then wait for the worker to prime the keyword index
        while mem._services.keyword.prime_requested:
            time.sleep(0.01)
        queries = [sentence(10) for _ in range(samples)]
        for q in queries[:10]:
            mem.build_context(q)  # warm caches
        times = []
        for q in queries:
            t0 = time.perf_counter()
            mem.build_context(q)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), percentile(times, 0.95), len(times)


def count_llm_calls(
    tier: str, turns: int, opt_in: bool = False, generate_ms: float = 0.0
) -> dict[str, int]:
    sentence = ZipfText(11).sentence
    calls: dict[str, int] = {}

    def llm(prompt: str, *, max_tokens: int, temperature: float) -> str:
        task = prompt.split("\n", 1)[0].removeprefix("TASK:").strip()
        calls[task] = calls.get(task, 0) + 1
        return "NONE" if task == "extract" else "A short summary."

    with (
        tempfile.TemporaryDirectory() as tmp,
        elastimem.open(
            str(Path(tmp) / "calls.db"),
            llm=llm,
            tier_override=tier,
            lite_llm_extraction=opt_in,
            disable_builtin_embedder=True,
        ) as mem,
    ):
        window: list[tuple[str, str]] = []
        for i in range(turns):
            if i % 20 == 0:
                mem.begin_session()
            user, reply = sentence(), sentence()
            if generate_ms:
                with mem.foreground():  # the host's model is busy: background calls wait
                    time.sleep(generate_ms / 1000)
            mem.record_turn(user, reply)
            window.append((user, reply))
            if len(window) > 6:  # a host with a six-turn window evicts the oldest
                mem.report_evictions([window.pop(0)])
        mem.end_session(wait=False)
        mem.drain(timeout=60)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exchanges", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=200)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument(
        "--generate-ms",
        type=float,
        default=0.0,
        help="the host holds foreground() this long per turn, as while its model generates",
    )
    args = parser.parse_args()

    p50, p95, n = bench_build_context(args.exchanges, args.facts, args.samples)
    print(f"build_context, {args.exchanges} exchanges, {args.facts} facts, keyword-only "
          f"({n} samples): p50 {p50:.2f} ms, p95 {p95:.2f} ms (target p50 <= 5 ms)")  # fmt: skip
    print(
        "\nLLM calls per 100 turns (5 sessions of 20 turns, six-turn host window, "
        f"{args.generate_ms:g} ms foreground generation per turn):"
    )
    print(f"{'tier':<22} {'total':>5}  by kind")
    for label, tier, opt_in in (("full", "full", False), ("standard", "standard", False),
                                ("lite", "lite", False), ("lite + lite_llm_extraction",
                                                          "lite", True)):  # fmt: skip
        calls = count_llm_calls(tier, 100, opt_in, args.generate_ms)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(calls.items())) or "-"
        print(f"{label:<22} {sum(calls.values()):>5}  {detail}")


if __name__ == "__main__":
    main()
