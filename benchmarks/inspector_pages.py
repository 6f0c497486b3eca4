"""Server time of every web-inspector page on a large store (issue 29: < 200 ms at 100k).

Builds a store of ``--size`` exchanges with ``latency.py``'s bulk loader (50 exchanges per
session, host vectors), adds ``--facts`` facts with three versions each, lessons and
quarantine entries through the API, then asks each page ``--repeat`` times through the
inspector app in process (Starlette's TestClient: no network, so the time is the server's:
routing, the store's reads, the template) and prints the median and the slowest.

    nice -n 10 python benchmarks/inspector_pages.py                 # 100k exchanges
    python benchmarks/inspector_pages.py --size 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402 - beside this file
from starlette.testclient import TestClient  # noqa: E402

import elastimem  # noqa: E402
from elastimem.aio import AsyncElastimem  # noqa: E402
from elastimem.web.app import InspectorOptions, build_inspector  # noqa: E402

BUDGET_MS = 200.0


def seed(mem: elastimem.Elastimem, facts: int) -> None:
    for i in range(facts):
        for version in range(3):
            mem.remember(f"topic {i}", f"value {version} of topic {i}")
    for i in range(40):
        mem.add_lesson(f"lesson {i}: answer in short sentences about subject {i}")
        mem.remember(f"topic {i}", "x", source="auto")  # too short: quarantined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--facts", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.db"
        embedder = latency.SyntheticEmbedder()
        took = latency.bulk_load(path, latency.Corpus(), args.size, embedder)
        print(f"bulk-loaded {args.size:,} exchanges in {took:.0f} s", file=sys.stderr)
        mem = elastimem.open(path, embedder=embedder)
        seed(mem, args.facts)
        while mem.pending():  # the facts' vectors: not timed alongside the pages
            mem.drain(60)
        wrapped = AsyncElastimem(mem)

        @asynccontextmanager
        async def lease(user_id: str) -> AsyncIterator[AsyncElastimem]:
            yield wrapped

        app = build_inspector(InspectorOptions(lease, owner="owner", loopback_only=True))
        sessions = mem.session_page(0, 1)
        middle = sessions[0]["id"] // 2 if sessions else 1
        pages = [
            "/", "/facts", "/facts?q=topic 99", "/facts?offset=900", "/facts/topic 7",
            "/search?q=" + latency.make_queries(latency.Corpus(), args.size, 1)[0],
            "/search?q=value 2 of topic 12&timeline=1", "/sessions", "/sessions?offset=1000",
            f"/sessions/{middle}", f"/sessions/{middle}?from=26", "/lessons", "/quarantine",
            "/graph", "/graph/frame", "/transfer", f"/sessions/{middle}/erase",
            "/facts/topic 7/erase",
        ]  # fmt: skip
        rows = []
        with TestClient(app, base_url="http://127.0.0.1") as client:
            for page in pages:
                times = []
                for _ in range(args.repeat + 1):
                    begin = time.perf_counter()
                    reply = client.get(page)
                    times.append((time.perf_counter() - begin) * 1000)
                    assert reply.status_code == 200, (page, reply.status_code, reply.text[:200])
                times = times[1:]  # the first one warms caches (vectors, the facts' index)
                rows.append((page, statistics.median(times), max(times)))
        mem.close()
    print(f"\n{'page':<58} {'median ms':>10} {'max ms':>8}")
    for page, median, slowest in rows:
        flag = "" if slowest < BUDGET_MS else "  over budget"
        print(f"{page[:58]:<58} {median:>10.1f} {slowest:>8.1f}{flag}")
    return 0 if all(slowest < BUDGET_MS for _, _, slowest in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
