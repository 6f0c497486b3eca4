"""Load on ``elastimem serve``: N users × C concurrent clients, against the in-process API.

The script starts a real server (``python -m elastimem.cli serve``) on a free port with a
keys file for ``--users`` users, seeds every user's store with ``--seed`` exchanges, and
runs, at each client count of ``--clients`` (default 1, 4, 16), the same mix for
``--seconds``: each client (client i speaks for user i mod N, over one keep-alive
connection) loops over

    POST /v1/turns · POST /v1/recall · POST /v1/context · GET /v1/facts · PUT /v1/facts/{key}

It reports requests/s, p50/p95 per endpoint, errors (any status >= 300 or a failed
request) and lost turns (turns answered 201 that the store does not hold afterwards,
counted through /v1/stats). The same work then runs in process, on threads calling the
sync API (``open_user`` stores shared by the threads of a user, as the server shares them),
on a copy of the same seeded stores, so the difference is the HTTP overhead: JSON, the
event loop, the hop to the store's threads.

On PostgreSQL (``--backend postgres`` or ``both``) the server is given the address and
every user's store lives on that server; the in-process run uses other user ids on the same
database, seeded alike. ``--db`` names the server (use a throwaway database: the run leaves
its users there, as the application role would see them: no superuser); without it a
private PostgreSQL 15 is started for the run (``tests/pg_server.py``, trust authentication,
``fsync=off``) and removed after.

No embedder (keyword search), no LLM: this measures the service, not a model.

    python benchmarks/service_load.py                      # 8 users; 1, 4, 16 clients; ~1.5 min
    python benchmarks/service_load.py --backend both       # SQLite, then a private PostgreSQL
    python benchmarks/service_load.py --backend postgres --db postgresql://app@host/bench
    python benchmarks/service_load.py --clients 1 4 16 64 --seconds 10
    python benchmarks/service_load.py --json benchmarks/results/service_load.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import elastimem

ENDPOINTS = ("POST /v1/turns", "POST /v1/recall", "POST /v1/context", "GET /v1/facts",
             "PUT /v1/facts/{key}")  # fmt: skip
WORDS = (
    "garden tomato bicycle harbour violin lantern pepper museum glacier orchard "
    "falcon teapot canyon meadow pianist marble kettle tundra saffron compass"
).split()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sentence(i: int) -> str:
    return " ".join(WORDS[(i * k + 3) % len(WORDS)] for k in (1, 3, 7, 11))


def seed(root: Path | str, users: list[str], turns: int) -> None:
    for user in users:
        with elastimem.open_user(root, user, disable_builtin_embedder=True) as mem:
            for i in range(turns):
                mem.record_turn(f"I saw a {_sentence(i)} today", "Tell me more.")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.acked: dict[str, int] = defaultdict(int)

    def add(self, endpoint: str, seconds: float) -> None:
        with self.lock:
            self.latency[endpoint].append(seconds)


# One step of the mix: (endpoint, call) where call(client_number, i) does it.
Step = Callable[[int, int], object]


def run_clients(
    clients: int,
    seconds: float,
    make_steps: Callable[[int, Tally], list[tuple[str, Step]]],
    tally: Tally,
) -> float:  # noqa: E501
    stop = time.monotonic() + seconds
    started = time.perf_counter()

    def client(number: int) -> None:
        steps = make_steps(number, tally)
        i = 0
        while time.monotonic() < stop:
            for endpoint, step in steps:
                t0 = time.perf_counter()
                try:
                    step(number, i)
                except Exception as exc:  # counted, not fatal: the point is to count them
                    with tally.lock:
                        tally.errors.append(f"{endpoint}: {type(exc).__name__}: {exc}")
                    continue
                tally.add(endpoint, time.perf_counter() - t0)
            i += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


# -- over HTTP ------------------------------------------------------------------------------------


def http_steps(
    port: int, tokens: dict[str, str], users: list[str]
) -> Callable[[int, Tally], list[tuple[str, Step]]]:  # noqa: E501
    def make(number: int, tally: Tally) -> list[tuple[str, Step]]:
        user = users[number % len(users)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers = {"Authorization": f"Bearer {tokens[user]}", "Content-Type": "application/json"}

        def call(method: str, path: str, body: Any = None, expect: int = 200) -> Any:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            if response.status != expect:
                raise RuntimeError(f"{response.status} {payload[:200]!r}")
            return json.loads(payload)

        def turn(n: int, i: int) -> None:
            text = f"client {n} turn {i}: {_sentence(i + n)}"
            call("POST", "/v1/turns", {"user_text": text, "assistant_text": "ok"}, 201)
            with tally.lock:
                tally.acked[user] += 1

        return [
            ("POST /v1/turns", turn),
            ("POST /v1/recall", lambda n, i: call("POST", "/v1/recall",
                                                  {"query": _sentence(i), "k": 5})),
            ("POST /v1/context", lambda n, i: call("POST", "/v1/context",
                                                   {"user_input": _sentence(i + 1)})),
            ("GET /v1/facts", lambda n, i: call("GET", "/v1/facts")),
            ("PUT /v1/facts/{key}", lambda n, i: call("PUT", f"/v1/facts/pref_{n}",
                                                      {"value": f"value {i}"})),
        ]  # fmt: skip

    return make


def http_messages(port: int, token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", "/v1/stats", headers={"Authorization": f"Bearer {token}"})
    return int(json.loads(conn.getresponse().read())["messages"])


# -- in process -----------------------------------------------------------------------------------


def inproc_steps(
    stores: dict[str, Any], users: list[str]
) -> Callable[[int, Tally], list[tuple[str, Step]]]:  # noqa: E501
    def make(number: int, tally: Tally) -> list[tuple[str, Step]]:
        user = users[number % len(users)]
        mem = stores[user]

        def turn(n: int, i: int) -> None:
            mem.record_turn(f"client {n} turn {i}: {_sentence(i + n)}", "ok")
            with tally.lock:
                tally.acked[user] += 1

        def context(n: int, i: int) -> None:
            mem.build_context(_sentence(i + 1)).render()

        return [
            ("POST /v1/turns", turn),
            ("POST /v1/recall", lambda n, i: [h.text for h in mem.recall(_sentence(i), 5)]),
            ("POST /v1/context", context),
            ("GET /v1/facts", lambda n, i: mem.facts()),
            ("PUT /v1/facts/{key}", lambda n, i: mem.remember(f"pref_{n}", f"value {i}")),
        ]

    return make


# -- the run --------------------------------------------------------------------------------------


def summarise(
    backend: str, mode: str, clients: int, elapsed: float, tally: Tally, lost: int
) -> dict[str, Any]:
    total = sum(len(v) for v in tally.latency.values())
    return {
        "backend": backend,
        "mode": mode,
        "clients": clients,
        "requests": total,
        "requests_per_s": total / elapsed,
        "errors": len(tally.errors),
        "first_errors": tally.errors[:3],
        "lost_turns": lost,
        "endpoints": {
            e: {"p50_ms": 1000 * _percentile(tally.latency[e], 0.5),
                "p95_ms": 1000 * _percentile(tally.latency[e], 0.95),
                "n": len(tally.latency[e])}
            for e in ENDPOINTS
        },
    }  # fmt: skip


def print_table(rows: list[dict[str, Any]]) -> None:
    short = {e: e.split(" ", 1)[1].replace("/v1/", "").replace("/{key}", "/k") for e in ENDPOINTS}
    head = f"{'backend':<10}{'mode':<8}{'clients':>8}{'req/s':>9}{'errors':>8}{'lost':>6}  "
    head += "".join(f"{short[e] + ' p50/p95 ms':>26}" for e in ENDPOINTS)
    print(head)
    for row in rows:
        line = f"{row['backend']:<10}{row['mode']:<8}{row['clients']:>8}"
        line += f"{row['requests_per_s']:>9.0f}"
        line += f"{row['errors']:>8}{row['lost_turns']:>6}  "
        for e in ENDPOINTS:
            stats = row["endpoints"][e]
            line += f"{stats['p50_ms']:>15.1f} / {stats['p95_ms']:>7.1f}"
        print(line)
    for row in rows:
        for error in row["first_errors"]:
            print(f"  {row['backend']} {row['mode']} x{row['clients']}: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=8.0, help="per client count and mode")
    parser.add_argument("--seed", type=int, default=200, help="exchanges per user before")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--db", metavar="URL", help="postgresql:// (else a private server)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    if args.db and args.backend == "sqlite":
        args.backend = "postgres"

    rows: list[dict[str, Any]] = []
    if args.backend in ("sqlite", "both"):
        rows += run_sqlite(args)
    if args.backend in ("postgres", "both"):
        if args.db:
            rows += run_postgres(args, args.db)
        else:
            server, url = start_private_postgres()
            try:
                rows += run_postgres(args, url)
            finally:
                server.stop()

    print(f"\n{args.users} users, {args.seconds:.0f} s per row, keyword search, no LLM; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")  # fmt: skip
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


def run_sqlite(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One folder seeded, copied for the server and for the in-process run."""
    users = [f"user{i}" for i in range(args.users)]
    work = Path(tempfile.mkdtemp(prefix="elastimem-load-"))
    try:
        t0 = time.perf_counter()
        seed(work / "seeded", users, args.seed)
        shutil.copytree(work / "seeded", work / "http")
        shutil.copytree(work / "seeded", work / "inproc")
        print(f"seeded {len(users)} users x {args.seed} exchanges in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)  # fmt: skip
        rows = run_http(args, "sqlite", str(work / "http"), users, work)
        rows += run_inproc(args, "sqlite", str(work / "inproc"), users)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def run_postgres(args: argparse.Namespace, url: str) -> list[dict[str, Any]]:
    """Two sets of users on one database, seeded alike: the server's, and the in-process
    run's (a tag of this run keeps them apart from any earlier run's)."""
    tag = os.urandom(3).hex()
    http_users = [f"load-{tag}-http-{i}" for i in range(args.users)]
    inproc_users = [f"load-{tag}-inproc-{i}" for i in range(args.users)]
    t0 = time.perf_counter()
    seed(url, http_users + inproc_users, args.seed)
    print(f"seeded {2 * args.users} users x {args.seed} exchanges on PostgreSQL in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="elastimem-load-"))
    try:
        rows = run_http(args, "postgres", url, http_users, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows + run_inproc(args, "postgres", url, inproc_users)


def run_http(
    args: argparse.Namespace, backend: str, target: str, users: list[str], work: Path
) -> list[dict[str, Any]]:
    tokens = {u: f"bench-{os.urandom(12).hex()}" for u in users}
    keys = work / "keys.json"
    keys.write_text(json.dumps({t: u for u, t in tokens.items()}))
    keys.chmod(0o600)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastimem.cli", "--db", target, "serve",
         "--keys", str(keys), "--port", str(port), "--no-embedder"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    rows = []
    try:
        _wait_ready(port)
        for clients in args.clients:
            before = {u: http_messages(port, tokens[u]) // 2 for u in users}
            tally = Tally()
            make = http_steps(port, tokens, users)
            elapsed = run_clients(clients, args.seconds, make, tally)
            after = {u: http_messages(port, tokens[u]) // 2 for u in users}
            lost = sum(tally.acked[u] - (after[u] - before[u]) for u in users)
            rows.append(summarise(backend, "http", clients, elapsed, tally, lost))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    return rows


def run_inproc(
    args: argparse.Namespace, backend: str, target: str, users: list[str]
) -> list[dict[str, Any]]:
    stores = {u: elastimem.open_user(target, u, disable_builtin_embedder=True) for u in users}
    rows = []
    try:
        for clients in args.clients:
            before = {u: stores[u].stats()["messages"] // 2 for u in users}
            tally = Tally()
            elapsed = run_clients(clients, args.seconds, inproc_steps(stores, users), tally)
            after = {u: stores[u].stats()["messages"] // 2 for u in users}
            lost = sum(tally.acked[u] - (after[u] - before[u]) for u in users)
            rows.append(summarise(backend, "inproc", clients, elapsed, tally, lost))
    finally:
        for mem in stores.values():
            mem.close()
    return rows


def start_private_postgres() -> tuple[Any, str]:
    """A private PostgreSQL for this run (tests/pg_server.py) and the address of a new
    database with the schema, as the application role (no superuser)."""
    import psycopg

    from elastimem.storage.postgres import migrations

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests import pg_server

    try:
        server = pg_server.start()
    except pg_server.PgUnavailable as exc:
        raise SystemExit(f"{exc}; or pass --db postgresql://...") from None
    admin_url = server.create_database("elastimem_load")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the benchmark database")
    return server, server.app_url(admin_url)


def _wait_ready(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("the server did not start")


if __name__ == "__main__":
    main()
