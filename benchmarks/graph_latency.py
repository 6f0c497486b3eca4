"""What the graph leg adds to ``recall`` latency (SPEC §5.6, §5.7; target ≤ 1 ms at p50).

Builds one store with ``--exchanges`` exchanges (one chunk each, spread over sessions),
``--nodes`` entities and ``--edges`` relationships (the default caps, 2,000 / 5,000), every
chunk naming one to three entities, plus a few hundred live facts (the fact leg scores every
live fact against the graph). Rows are written directly, in bulk, for speed; the queries go
through the public ``recall`` at FULL (``graph_hops`` 2), once with the graph leg and once
without it (``graph.build_signal`` answering None), interleaved query by query so drift hits
both sides alike. Texts and names are generated from a fixed seed, so runs are comparable.

Every query of the main set names an entity (the costly case); a second set names none (the
common case, where only the seed scan runs). Each pass times its own queries, never one
timed before (``--queries`` per pass, entities drawn at random, so a query repeats an
earlier one's entity only by chance, as in use): ``graph.build_signal`` keeps each node's
edges and mentions while the graph is unchanged, and repeating queries would time those
reads as free. The graph is not written during the timing, so that cache fills as queries
reach nodes, and once ``graph_walk.FULL_READ_FROM_QUERY`` queries have run under one graph stamp
every edge is read at once (one query pays 20-40 ms; it shows in the mean, not the p50):
the steady state between two writes. The row "first query after a graph write" gives every
query an empty cache instead (and no kept fact ids), which is what a turn's first queries
meet when the worker has written to the graph since the last ones.

Each timing is taken twice: wall clock, and the CPU time of the calling thread, which leaves
out the time other processes hold the core, so it stays comparable on a busy machine. The
load average is printed before and after, and the timing starts once the worker has primed
the keyword index. A third leg gives ``recall`` the graph's answers worked out beforehand:
what it adds is the ranking's share of the added time, which graph.py cannot remove. The
parts below the paired rows are timed alone, back to back, with warm caches: inside a
``recall`` they cost more (the rest of the query has evicted their data from the CPU
caches), so they sum to less than the paired figure.

    python benchmarks/graph_latency.py
    python benchmarks/graph_latency.py --exchanges 20000 --queries 500 --repeat 5
    python benchmarks/graph_latency.py --covering-edge-indexes   # a schema idea, measured
    git show d2c1d18:src/elastimem/graph/core.py > /tmp/graph_before.py   # before the split
    python benchmarks/graph_latency.py --baseline /tmp/graph_before.py

Runs on a busy machine differ by up to 2x, so compare versions with ``--baseline``: it loads
another single-module graph (imported as ``elastimem.graph._baseline``) beside the current
one and times off / baseline / current query by query, in one process on one store. A
baseline whose ``build_signal`` cannot read inside the ranking's snapshot (no ``conn``
argument, as before schema v6) is timed as ``recall`` ran it then: in a read transaction of
its own before the ranking's.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import elastimem
from elastimem import graph
from elastimem.clock import format_ts, utcnow
from elastimem.graph import facts_index as graph_facts
from elastimem.graph import names as graph_names
from elastimem.graph import neighbourhoods as graph_walk
from elastimem.graph import signal as graph_signal
from elastimem.retrieval.rank import Filters

EXCHANGES_PER_SESSION = 20
RELATIONS = ("knows", "works_at", "lives_in", "owns", "uses", "part_of", "likes", "visited")
_WORDS = (
    "the a my our we i you they it this that and but so because then when after before "
    "dog garden kitchen office meeting project deadline doctor appointment birthday sister "
    "brother friend trip train flight hotel coffee tea dinner recipe pasta running marathon "
    "knee book novel chapter code bug release database backup invoice tax budget salary rent "
    "moved started finished booked cancelled remembered forgot liked planned tomorrow "
    "yesterday weekend morning evening next last every often never always really very quite"
).split()
_SYLLABLES = (
    "ka to ri mi no sa lu be ra vo ze ni qu ta el an or is um fa go de pi ho ju ly we xe"
).split()


def _names(count: int, rng: random.Random) -> list[str]:
    """Distinct made-up, capitalised one- or two-word names ("Kato", "Rimi Sabe")."""
    seen: set[str] = set()
    names: list[str] = []
    while len(names) < count:
        words = [
            "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            for _ in range(rng.choice((1, 1, 2)))
        ]
        name = " ".join(words)
        canonical = graph_names._canonicalize(name)
        if name.casefold() not in seen and canonical not in graph_names.SELF_NAMES:
            seen.add(name.casefold())
            names.append(name)
    return names


def _sentence(rng: random.Random, mentioned: list[str]) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
    for name in mentioned:
        words.insert(rng.randrange(len(words) + 1), name)
    return " ".join(words).capitalize() + "."


def build(path: str, args: argparse.Namespace) -> tuple[elastimem.Elastimem, list[str]]:
    rng = random.Random(args.seed)
    names = _names(args.nodes, rng)
    mem = elastimem.Elastimem(
        path,
        tier_override="full",
        disable_builtin_embedder=True,
        graph_node_cap=max(args.nodes, 1),
        graph_edge_cap=max(args.edges, 1),
    )
    start = utcnow()
    sessions = max(1, args.exchanges // EXCHANGES_PER_SESSION)
    with mem._db.atomic() as conn:
        me = int(conn.execute("SELECT id FROM graph_nodes WHERE type = 'self'").fetchone()[0])
        now = format_ts(start)
        node_ids: list[int] = []
        for name in names:
            cur = conn.execute(
                "INSERT INTO graph_nodes (type, canonical_name, aliases, created_at, "
                "updated_at, importance, confidence, mention_count) "
                "VALUES ('thing', ?, '[]', ?, ?, 0.5, ?, 1)",
                (graph_names._canonicalize(name), now, now, rng.choice((0.4, 0.7, 0.7, 0.9))),
            )
            node_ids.append(int(cur.lastrowid or 0))
        pairs: set[tuple[int, int, str]] = set()
        while len(pairs) < args.edges:
            # One endpoint is drawn with a power-law skew, so hubs form as in real graphs
            # (--skew 2: the busiest entity has ~2% of the edges); ~5% touch the user.
            if rng.random() < 0.05:
                source = me
            else:
                source = node_ids[int(len(node_ids) * rng.random() ** args.skew)]
            target = rng.choice(node_ids)
            if source != target:
                pairs.add((source, target, rng.choice(RELATIONS)))
        conn.executemany(
            "INSERT INTO graph_edges (source_node, target_node, relationship, confidence, "
            "importance, weight, created_at, last_seen) VALUES (?, ?, ?, 0.7, 0.5, 0.7, ?, ?)",
            [(s, t, r, now, now) for s, t, r in pairs],
        )
        mentions: list[tuple[int, int, str]] = []
        exchange = 0
        for s in range(sessions):
            session_at = format_ts(start.replace(microsecond=0) - timedelta(days=sessions - s))
            session_id = conn.execute(
                "INSERT INTO sessions (started_at, ended_at, title, message_count) "
                "VALUES (?, ?, 'bench', ?)",
                (session_at, session_at, 2 * EXCHANGES_PER_SESSION),
            ).lastrowid
            for turn in range(EXCHANGES_PER_SESSION):
                if exchange >= args.exchanges:
                    break
                picked = rng.sample(range(len(names)), rng.randint(1, 3))
                user = _sentence(rng, [names[i] for i in picked])
                assistant = _sentence(rng, [])
                ids = []
                for role, text in (("user", user), ("assistant", assistant)):
                    ids.append(
                        conn.execute(
                            "INSERT INTO messages (session_id, turn, role, content, created_at, "
                            "token_estimate) VALUES (?, ?, ?, ?, ?, ?)",
                            (session_id, turn + 1, role, text, session_at, len(text) // 4),
                        ).lastrowid
                    )
                chunk_id = conn.execute(
                    "INSERT INTO chunks (session_id, first_msg_id, last_msg_id, text, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (
                        session_id,
                        ids[0],
                        ids[1],
                        f"User: {user}\nAssistant: {assistant}",
                        session_at,
                    ),
                ).lastrowid
                mentions += [(node_ids[i], int(chunk_id or 0), session_at) for i in picked]
                exchange += 1
        conn.executemany("INSERT OR IGNORE INTO graph_mentions VALUES (?, ?, ?)", mentions)
        for i in range(args.facts):
            conn.execute(
                "INSERT INTO facts (key, value, category, source, importance, created_at, "
                "valid_from) VALUES (?, ?, 'note', 'auto', 0.5, ?, ?)",
                (f"note_{i}", _sentence(rng, [rng.choice(names)])[:200], now, now),
            )
        conn.meta.bump("graph.gen")
        if args.covering_edge_indexes:
            # What a migration could add: the walk would read weights from the index pages
            # instead of one table row per edge.
            conn.execute(
                "CREATE INDEX bench_edges_out ON graph_edges(source_node, target_node, weight)"
            )
            conn.execute(
                "CREATE INDEX bench_edges_in ON graph_edges(target_node, source_node, weight)"
            )
    # Half name only (the hop case: the keyword leg is cheap), half with a common word too;
    # WARM_UP more for warming up, then --queries for each pass.
    queries = [
        f"what do I know about {rng.choice(names)}?"
        if i % 2
        else f"what did {rng.choice(names)} say about the {rng.choice(_WORDS[20:])}?"
        for i in range(WARM_UP + args.queries * max(1, args.repeat))
    ]
    return mem, queries


WARM_UP = 20


def plain_queries(count: int, seed: int) -> list[str]:
    """Queries made of common words only: they name no entity, so no node is a seed."""
    rng = random.Random(seed + 1)
    return [
        f"what did we say about the {rng.choice(_WORDS[20:])} {rng.choice(_WORDS[20:])}?"
        for _ in range(count)
    ]


def _no_signal(database: Any, text: object, hops: int, *, conn: Any = None) -> None:
    return None


@contextmanager
def fresh_neighbourhoods() -> Iterator[None]:
    """``build_signal`` as right after a graph write: nothing kept from earlier queries (and
    nothing it reads kept for later ones)."""
    original, original_facts = graph_walk._neighbourhoods_for, graph_facts._live_facts_for

    def fresh(identity: Any, stamp: str | None, self_id: int) -> Any:
        return None if stamp is None else graph_walk._Neighbourhoods(stamp, self_id)

    def fresh_facts(identity: Any, stamp: str) -> Any:
        return graph_facts._LiveFacts(stamp)

    graph_walk._neighbourhoods_for, graph_facts._live_facts_for = fresh, fresh_facts
    try:
        yield
    finally:
        graph_walk._neighbourhoods_for, graph_facts._live_facts_for = original, original_facts


def after_a_write(build_signal: Callable[..., Any]) -> Callable[..., Any]:
    """``build_signal`` with nothing kept from earlier queries."""

    def cold(database: Any, text: object, hops: int, *, conn: Any = None) -> Any:
        with fresh_neighbourhoods():
            return build_signal(database, text, hops, conn=conn)

    return cold


@contextmanager
def graph_leg(build_signal: Callable[..., Any]) -> Iterator[None]:
    """``recall`` with another ``build_signal``; ``_no_signal`` is the leg off, as with
    ``graph_hops`` 0."""
    original = graph.build_signal
    graph.build_signal = build_signal
    try:
        yield
    finally:
        graph.build_signal = original


def load_baseline(path: str) -> Callable[..., Any]:
    """``build_signal`` of another graph.py (say, the last commit's), imported beside the
    current module as ``elastimem.graph._baseline`` with its own caches."""
    spec = importlib.util.spec_from_file_location("elastimem.graph._baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "elastimem.graph"  # a single-module graph (core.py before the split)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    build_signal: Callable[..., Any] = module.build_signal
    if "conn" in inspect.signature(build_signal).parameters:
        return build_signal

    def own_transaction(database: Any, text: object, hops: int, *, conn: Any = None) -> Any:
        """The older flow: the signal read in a transaction of its own, before the ranking's
        (``recall`` calls this first thing in its read, so that one has read nothing yet)."""
        if conn is None or database.is_memory:
            return build_signal(database, text, hops)
        conn.execute("COMMIT")
        try:
            return build_signal(database, text, hops)
        finally:
            conn.execute("BEGIN")

    return own_transaction


class Timings:
    """Wall-clock and thread-CPU milliseconds of repeated calls of one kind."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def time(self, fn: Callable[[], Any]) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        fn()
        self.cpu.append((time.thread_time() - cpu) * 1000.0)
        self.wall.append((time.perf_counter() - wall) * 1000.0)

    def minus(self, other: Timings) -> Timings:
        """The paired differences, call by call."""
        out = Timings()
        out.wall = [a - b for a, b in zip(self.wall, other.wall, strict=True)]
        out.cpu = [a - b for a, b in zip(self.cpu, other.cpu, strict=True)]
        return out


def _row(name: str, timings: Timings) -> tuple[str, ...]:
    wall = sorted(timings.wall)
    p95 = wall[min(len(wall) - 1, int(0.95 * len(wall)))]
    return (
        name,
        f"{statistics.median(wall):.3f}",
        f"{p95:.3f}",
        f"{statistics.fmean(wall):.3f}",
        f"{statistics.median(timings.cpu):.3f}",
    )


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=10_000, help="exchanges (chunks)")
    parser.add_argument("--nodes", type=int, default=2_000, help="graph nodes")
    parser.add_argument("--edges", type=int, default=5_000, help="graph edges")
    parser.add_argument("--facts", type=int, default=300, help="live facts")
    parser.add_argument("--queries", type=int, default=200, help="queries per pass")
    parser.add_argument("--repeat", type=int, default=3, help="passes, each with new queries")
    parser.add_argument("--skew", type=float, default=2.0, help="hub skew (1 = none)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--db", help="store path (default: a temporary file)")
    parser.add_argument("--baseline", help="another graph.py to time beside this one")
    parser.add_argument(
        "--covering-edge-indexes",
        action="store_true",
        help="add (source, target, weight) and (target, source, weight) edge indexes first",
    )
    args = parser.parse_args(argv)

    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or str(Path(tmp) / "bench.db")
        started = time.perf_counter()
        mem, queries = build(path, args)
        build_s = time.perf_counter() - started
        try:
            results, reached = measure(
                mem,
                queries,
                plain_queries(len(queries), args.seed),
                max(1, args.repeat),
                load_baseline(args.baseline) if args.baseline else None,
            )
            stats = mem.stats()
            hub = _busiest(mem)
        finally:
            mem.close()

    print(
        f"store: {stats['chunks']} chunks, {stats['graph_nodes']} nodes, "
        f"{stats['graph_edges']} edges (busiest entity: {hub} edges), {stats['facts']} facts, "
        f"FTS {'on' if stats['fts_enabled'] else 'off'}; built in {build_s:.1f} s"
    )
    print(
        f"queries: {args.queries} naming an entity + {args.queries} naming none in each of "
        f"{max(1, args.repeat)} passes (new queries each pass), graph_hops 2, median reached "
        "nodes "
        f"{statistics.median(reached):.0f}"
    )
    print(f"load average (1, 5, 15 min): {load_before} before, {_load()} after")
    rows: list[tuple[str, ...]] = [("", "p50 ms", "p95 ms", "mean ms", "cpu p50 ms")]
    rows += [_row(name, timings) for name, timings in results.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(row)
            )
        )
    print("(rows from build_signal down: each part alone, back to back, warm caches)")
    added = results[ADDED]
    wall, cpu = statistics.median(added.wall), statistics.median(added.cpu)
    verdict = "met" if wall <= 1.0 else "NOT met"
    print(f"target: <= 1 ms added at p50 -> {verdict} ({wall:.3f} ms wall, {cpu:.3f} ms CPU)")
    return 0


ADDED = "added by the graph (paired)"
ADDED_COLD = "added, first query after a graph write (paired)"
ADDED_PLAIN = "added, query naming none (paired)"
ADDED_BASELINE = "added by the baseline graph.py (paired)"
ADDED_ANSWERED = "  of which ranking the graph's candidates"


def _paired(
    mem: elastimem.Elastimem, queries: list[str], legs: dict[str, Callable[..., Any]]
) -> dict[str, Timings]:
    """Timings of ``recall`` for each query under each ``build_signal`` in ``legs``, one
    after the other, the order rotating from query to query."""
    out = {name: Timings() for name in legs}
    names = list(legs)
    for i, query in enumerate(queries):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            with graph_leg(legs[name]):
                out[name].time(partial(mem.recall, query))
    return out


def measure(
    mem: elastimem.Elastimem,
    queries: list[str],
    plain: list[str],
    repeat: int,
    baseline: Callable[..., Any] | None = None,
) -> tuple[dict[str, Timings], list[float]]:
    """Paired timings (the same query with the leg off, on, on with nothing kept, and on
    through ``baseline``), the parts, and the number of nodes each query reaches. The first
    ``WARM_UP`` queries warm up; each query after them is timed in one pass only."""
    warm_up, timed = queries[:WARM_UP], queries[WARM_UP:]
    with fresh_neighbourhoods():  # worked out beforehand, but kept for no later query
        signals = {q: graph.build_signal(mem._db, q, 2) for q in timed}
        answered = {q: _Answered(s) for q, s in signals.items() if s is not None}
    current = graph.build_signal
    legs: dict[str, Callable[..., Any]] = {
        "off": _no_signal,
        "on": current,
        "cold": after_a_write(current),
        "answered": lambda database, text, hops, conn=None: answered.get(text),
    }
    if baseline is not None:
        legs["baseline"] = baseline
    for query in warm_up + plain[:WARM_UP]:  # warm the caches, statements and page cache
        for build_signal in legs.values():
            with graph_leg(build_signal):
                mem.recall(query)
    with graph_leg(legs["answered"]), fresh_neighbourhoods():
        for query in timed:  # work the answers out before the timing
            mem.recall(query)
    waited = settle(mem)
    print(f"waited {waited:.1f} s for the worker to prime the keyword index")
    named = _paired(mem, timed, legs)
    unnamed = _paired(mem, plain[: len(timed)], {"off": _no_signal, "on": current})
    on, off = named["on"], named["off"]
    seeded = [q for q in plain if graph.build_signal(mem._db, q, 2) is not None]
    if seeded:
        print(f"warning: {len(seeded)} of the queries naming none found a seed: {seeded[:3]}")
    parts = {
        "build_signal (one read)": Timings(),
        "build_signal, nothing kept": Timings(),
        "  expand (one query)": Timings(),
        "  walk from kept edges": Timings(),
        "build_signal, query naming none": Timings(),
        "extra_chunks (10)": Timings(),
        "chunk_scores (60 ids)": Timings(),
        "facts: fact_score on every live fact": Timings(),
        "facts: fact_candidates": Timings(),
    }
    with mem._db.read() as conn:
        index = graph_names._name_index(conn)
        facts = conn.execute("SELECT key, value FROM facts WHERE invalidated_at IS NULL").fetchall()
        chunk_ids = [int(r[0]) for r in conn.execute("SELECT id FROM chunks LIMIT 60")]
    for query, text in zip(timed, plain[: len(timed)], strict=True):
        parts["build_signal (one read)"].time(partial(graph.build_signal, mem._db, query, 2))
        with fresh_neighbourhoods():
            parts["build_signal, nothing kept"].time(partial(graph.build_signal, mem._db, query, 2))
        parts["build_signal, query naming none"].time(partial(graph.build_signal, mem._db, text, 2))
        found = graph.build_signal(mem._db, query, 2)  # through what the timing kept
        with mem._db.read() as conn:
            seeds = index.seeds(graph_names.word_tokens(query))
            parts["  expand (one query)"].time(
                partial(graph_walk.expand, conn, seeds, 2, self_id=index.self_id)
            )
            stamp = graph_names._index_version(conn)[1]
            kept = graph_walk._neighbourhoods_for(index.identity, stamp, index.self_id or -1)
            if kept is not None:
                parts["  walk from kept edges"].time(partial(kept.walk, conn, seeds, 2))
            if found is None:
                continue
            parts["extra_chunks (10)"].time(partial(found.extra_chunks, conn, Filters(), 10))
            parts["chunk_scores (60 ids)"].time(partial(found.chunk_scores, conn, chunk_ids))
            parts["facts: fact_score on every live fact"].time(partial(_score_all, found, facts))
            parts["facts: fact_candidates"].time(partial(found.fact_candidates, conn, Filters()))
    results = {
        "recall, graph leg off": off,
        "recall, graph leg on": on,
        ADDED: on.minus(off),
        ADDED_COLD: named["cold"].minus(off),
        ADDED_ANSWERED: named["answered"].minus(off),
        ADDED_PLAIN: unnamed["on"].minus(unnamed["off"]),
    }
    if baseline is not None:
        results[ADDED_BASELINE] = named["baseline"].minus(off)
        results["current - baseline (paired)"] = on.minus(named["baseline"])
    results.update(parts)
    return results, [float(len(s.reached)) if s else 0.0 for s in signals.values()]


class _Answered:
    """One query's signal with its answers worked out before the timing: ``recall`` through it
    adds only what ranking the graph's extra candidates costs, the part graph.py cannot
    remove (a memo lookup per call is counted with it)."""

    def __init__(self, signal: graph_signal.Signal) -> None:
        self._signal = signal
        self._answers: dict[tuple[object, ...], Any] = {}

    def _answer(self, key: tuple[object, ...], work: Callable[[], Any]) -> Any:
        if key not in self._answers:
            self._answers[key] = work()
        return self._answers[key]

    def extra_chunks(self, conn: Any, filters: Filters, limit: int) -> Any:
        work = partial(self._signal.extra_chunks, conn, filters, limit)
        return self._answer(("extra", filters, limit), work)

    def chunk_scores(self, conn: Any, chunk_ids: list[int]) -> Any:
        work = partial(self._signal.chunk_scores, conn, chunk_ids)
        return self._answer(("chunks", *chunk_ids), work)

    def fact_candidates(self, conn: Any, filters: Filters) -> Any:
        return self._answer(
            ("facts", filters), partial(self._signal.fact_candidates, conn, filters)
        )

    def fact_score(self, key: str, value: str) -> Any:
        return self._signal.fact_score(key, value)

    def traversal(self) -> Any:
        return self._signal.traversal()


def settle(mem: elastimem.Elastimem, timeout: float = 600.0) -> float:
    """What a host's ``warm_up()`` sets going, finished (the worker priming the keyword index,
    as in benchmarks/latency.py); returns the seconds waited. Timed beside the worker, every
    query hands it the GIL at each SQLite call, and the graph leg makes more calls than the
    rest; steady state is what is measured here."""
    started = time.perf_counter()
    mem.warm_up()
    while mem._services.keyword.prime_requested and time.perf_counter() - started < timeout:
        time.sleep(0.01)
    return time.perf_counter() - started


def _score_all(found: graph_signal.Signal, facts: list[tuple[str, str]]) -> None:
    """What ranking does today: ``fact_score`` on every live fact."""
    for key, value in facts:
        found.fact_score(key, value)


def _busiest(mem: elastimem.Elastimem) -> int:
    with mem._db.read() as conn:
        row = conn.execute(
            "SELECT count(*) AS c FROM (SELECT source_node AS n FROM graph_edges UNION ALL "
            "SELECT target_node FROM graph_edges) JOIN graph_nodes g ON g.id = n "
            "WHERE g.type <> 'self' GROUP BY n ORDER BY c DESC LIMIT 1"
        ).fetchone()
    return int(row[0]) if row else 0


if __name__ == "__main__":
    sys.exit(main())
