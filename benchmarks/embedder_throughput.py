"""Throughput and latency of the built-in embedder (needs the ``embed`` or ``fastembed`` extra).

Measures, in one fresh process: the time to load the model (imports included), texts per
second for short chat-sized texts and for ~400-token chunks (the default
``chunk_target_tokens``), both sent in batches of ``EMBED_BATCH_SIZE``, and the latency of
a single query. Texts are generated deterministically, so runs are comparable.

    python benchmarks/embedder_throughput.py
    python benchmarks/embedder_throughput.py --torch-threads 1 --queries 100
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from elastimem.index.embedders import EMBED_BATCH_SIZE, BuiltinEmbedder

_WORDS = (  # noqa: SIM905 - a word list reads better as prose
    "the a my our we i you they it this that and but so because then when after before "
    "dog puppy cat garden kitchen office meeting project deadline doctor appointment "
    "birthday sister brother friend trip train flight hotel paris berlin lisbon coffee "
    "tea dinner recipe pasta running marathon knee injury physio book novel chapter "
    "python code bug release database backup invoice tax return budget salary rent "
    "moved started finished booked cancelled remembered forgot liked hated planned "
    "tomorrow yesterday weekend morning evening next last every often never always "
    "really very quite new old small large early late quick slow happy tired busy"
).split()


def _sentence(rng: random.Random, low: int, high: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


def short_texts(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [_sentence(rng, 6, 14) for _ in range(count)]


def chunk_texts(count: int, tokens: int, seed: int = 2) -> list[str]:
    """Texts whose elastimem estimate (len // 4) is about ``tokens``."""
    rng = random.Random(seed)
    chunks = []
    for _ in range(count):
        parts: list[str] = []
        while sum(len(p) + 1 for p in parts) < tokens * 4:
            parts.append(_sentence(rng, 8, 20))
        chunks.append(" ".join(parts)[: tokens * 4])
    return chunks


def _throughput(embedder: BuiltinEmbedder, texts: list[str]) -> float:
    start = time.perf_counter()
    for begin in range(0, len(texts), EMBED_BATCH_SIZE):
        embedder.embed(texts[begin : begin + EMBED_BATCH_SIZE])
    return len(texts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=256, help="number of short texts")
    parser.add_argument("--chunks", type=int, default=64, help="number of long chunks")
    parser.add_argument("--chunk-tokens", type=int, default=400, help="chunk size (len // 4)")
    parser.add_argument("--queries", type=int, default=50, help="single queries to time")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median shown)")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="call torch.set_num_threads(N) after loading (default: leave torch's choice)",
    )
    args = parser.parse_args(argv)

    embedder = BuiltinEmbedder()
    start = time.perf_counter()
    if not embedder.load():
        print(f"built-in embedder failed: {embedder.failure}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - start

    threads = "n/a"
    if "torch" in sys.modules:
        import torch

        if args.torch_threads is not None:
            torch.set_num_threads(args.torch_threads)
        threads = str(torch.get_num_threads())

    shorts = short_texts(args.short)
    chunks = chunk_texts(args.chunks, args.chunk_tokens)
    embedder.embed(shorts[:8])  # warm the allocator for both shapes before timing
    repeat = max(1, args.repeat)
    short_rate = statistics.median(_throughput(embedder, shorts) for _ in range(repeat))
    chunk_rate = statistics.median(_throughput(embedder, chunks) for _ in range(repeat))

    queries = [f"what did I say about {word}?" for word in short_texts(args.queries, seed=3)]
    latencies = []
    for query in queries * repeat:
        begin = time.perf_counter()
        embedder.embed_query(query)
        latencies.append((time.perf_counter() - begin) * 1000)
    latencies.sort()
    p90 = latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))]

    rows = [
        ("model", f"{embedder.label} (dim {embedder.dim})"),
        ("torch threads", threads),
        ("load (imports included)", f"{load_s:.2f} s"),
        (f"{args.short} short texts", f"{short_rate:.0f} texts/s"),
        (f"{args.chunks} chunks of ~{args.chunk_tokens} tokens", f"{chunk_rate:.1f} texts/s"),
        (
            f"single query, {args.queries} x {repeat} runs",
            f"median {statistics.median(latencies):.1f} ms, p90 {p90:.1f} ms",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
