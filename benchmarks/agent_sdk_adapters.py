"""The OpenAI Agents SDK and Google ADK adapters against each framework's own memory.

    nice -n 10 python benchmarks/agent_sdk_adapters.py                  # keyword-only stores
    nice -n 10 python benchmarks/agent_sdk_adapters.py --builtin        # with the built-in model

Agents SDK: ``ElastimemSession`` vs the SDK's ``SQLiteSession`` (a file), same items: the p50
of ``add_items`` of one exchange (a user message and the assistant's answer, which elastimem
also records as a turn and, with ``--builtin``, waits to embed; ``index_wait=0`` does not wait)
and of ``get_items()`` of the whole history, after ``--exchanges`` exchanges.

ADK: ``ElastimemMemoryService`` vs ADK's ``InMemoryMemoryService``, the same ``--adk-exchanges``
exchanges ingested in sessions of ten: the p50 of ``search_memory`` over ``--queries`` queries
(each names an exchange's topic in other words where it can), and how many of them find the
exchange they mean among the results (hit rate).

Timings are wall-clock medians on this machine; run with ``nice`` beside other work.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

TOPICS = [
    ("my border collie Juniper", "which dog do I have?"),
    ("the sourdough starter I feed every morning", "what bread do I bake?"),
    ("my sister who is a cardiologist", "which relative is a heart doctor?"),
    ("the kayak I bought for the lake", "what boat do I own?"),
    ("learning the cello on Sundays", "which instrument am I studying?"),
    ("the allotment where I grow leeks", "where do I grow vegetables?"),
    ("my flight to Osaka in April", "when do I travel to Japan?"),
    ("the marathon I am training for", "what race am I preparing for?"),
]
FILLER = [
    "printer",
    "budget",
    "meeting",
    "invoice",
    "laptop",
    "parking",
    "coffee",
    "badge",
    "report",
    "slides",
    "taxes",
    "car",
    "boiler",
    "lease",
    "visa",
    "dentist",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def exchange(i: int, rng: random.Random) -> tuple[str, str, int | None]:
    """A user message, an answer, and the topic it states (None for filler)."""
    if i % 25 == 0:
        topic = (i // 25) % len(TOPICS)
        return f"Let me tell you about {TOPICS[topic][0]}.", "Noted, thanks.", topic
    # Everyday sentences with the function words a real conversation has everywhere.
    a, b = rng.sample(FILLER, 2)
    day = rng.choice(DAYS)
    user = f"I have to sort out the {a} and the {b} on {day}, what do you think I should do?"
    return user, f"I would do the {a} first, then the {b}.", None


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def open_kw(builtin: bool) -> dict[str, Any]:
    return {} if builtin else {"disable_builtin_embedder": True}


async def bench_agents(folder: Path, n: int, builtin: bool) -> None:
    from agents.memory import SQLiteSession

    import elastimem
    from elastimem.integrations.openai_agents import INDEX_WAIT_SECONDS, ElastimemSession

    rng = random.Random(7)
    mem = elastimem.open(str(folder / "agents.db"), **open_kw(builtin))
    if builtin:
        mem.warm_up(timeout=300)
    rows = []
    # The SDK's session first: measured while the store's worker is idle.
    for name in ("SQLiteSession", "ElastimemSession", "ElastimemSession, index_wait=0"):
        if name == "SQLiteSession":
            session: Any = SQLiteSession("bench", str(folder / "sdk.sqlite"))
        else:
            wait = 0.0 if "index_wait=0" in name else INDEX_WAIT_SECONDS
            session = ElastimemSession(name, mem, index_wait=wait)
        adds: list[float] = []
        gets: list[float] = []
        for i in range(n):
            user, answer, _ = exchange(i, rng)
            items = [
                {"role": "user", "content": user},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": f"m{i}",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer, "annotations": []}],
                },
            ]
            start = time.perf_counter()
            await session.add_items(items)
            adds.append(time.perf_counter() - start)
        for _ in range(50):
            start = time.perf_counter()
            got = await session.get_items()
            gets.append(time.perf_counter() - start)
        assert len(got) == 2 * n
        rows.append((name, p50_ms(adds), p50_ms(gets)))
        session.close()
    mem.close()
    print(f"\nAgents SDK session, {n} exchanges ({2 * n} items), builtin model: {builtin}")
    print(f"{'session':<30} {'add_items p50 ms':>17} {'get_items p50 ms':>17}")
    for name, add, get in rows:
        print(f"{name:<30} {add:>17.2f} {get:>17.2f}")


async def bench_adk(folder: Path, n: int, queries: int, builtin: bool) -> None:
    from google.adk.events.event import Event
    from google.adk.memory import InMemoryMemoryService
    from google.genai import types

    from elastimem.integrations.adk import ElastimemMemoryService

    rng = random.Random(11)
    said: list[tuple[str, str, int | None]] = [exchange(i, rng) for i in range(n)]
    services: dict[str, Any] = {
        "ElastimemMemoryService": ElastimemMemoryService(folder / "adk", **open_kw(builtin)),
        "InMemoryMemoryService": InMemoryMemoryService(),
    }
    if builtin:
        store = services["ElastimemMemoryService"].store("bench", "alice")
        store.warm_up(timeout=300)
    asks = [TOPICS[i % len(TOPICS)][1] for i in range(queries)]
    rows = []
    for name, service in services.items():
        start_ingest = time.perf_counter()
        for first in range(0, n, 10):
            events = []
            for i in range(first, min(n, first + 10)):
                user, answer, _ = said[i]
                for author, text, k in (("user", user, 0), ("pal", answer, 1)):
                    events.append(
                        Event(
                            author=author,
                            id=f"e{i}-{k}",
                            invocation_id="bench",
                            timestamp=1_700_000_000.0 + 2 * i + k,
                            content=types.Content(parts=[types.Part(text=text)]),
                        )
                    )
            await service.add_events_to_memory(
                app_name="bench", user_id="alice", events=events, session_id=f"s{first}"
            )
        ingest = time.perf_counter() - start_ingest
        samples: list[float] = []
        found = 0
        for q, ask in enumerate(asks):
            start = time.perf_counter()
            result = await service.search_memory(app_name="bench", user_id="alice", query=ask)
            samples.append(time.perf_counter() - start)
            wanted = TOPICS[q % len(TOPICS)][0]
            texts = " ".join(p.text or "" for m in result.memories for p in (m.content.parts or []))
            found += wanted in texts
        rows.append((name, ingest, p50_ms(samples), found / len(asks)))
        if hasattr(service, "close"):
            service.close()
    print(f"\nADK memory service, {n} exchanges, {queries} queries, builtin model: {builtin}")
    print(f"{'service':<24} {'ingest s':>9} {'search p50 ms':>14} {'hit rate':>9}")
    for name, ingest, p50, rate in rows:
        print(f"{name:<24} {ingest:>9.2f} {p50:>14.2f} {rate:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=200, help="Agents SDK history size")
    parser.add_argument("--adk-exchanges", type=int, default=1000, help="ADK memory size")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--builtin", action="store_true", help="elastimem with its model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench_agents(Path(tmp), args.exchanges, args.builtin))
        asyncio.run(bench_adk(Path(tmp), args.adk_exchanges, args.queries, args.builtin))


if __name__ == "__main__":
    main()
