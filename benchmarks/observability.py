"""What metrics and tracing cost a recall, and what a backup costs, on a bulk-loaded store.

Recall p50/p95 over one store (``--size`` exchanges, bulk-loaded by ``latency.bulk_load``,
hybrid recall with ``latency.SyntheticEmbedder``) in five modes, A/B in one run: every query
is timed in each mode in turn, the mode that goes first rotating query by query (so the
query-vector cache and any change of load favour no mode):

* ``bare``: the undecorated method (``Elastimem.recall.__wrapped__``): no seam at all;
* ``off``: the shipped method with nothing subscribed (the seam's cost when unused);
* ``otel_noop``: ``ops.tracing`` subscribed to OpenTelemetry's no-op tracer provider;
* ``otel_sdk``: subscribed to an SDK tracer provider whose processor drops every span;
* ``metrics``: ``ops.metrics.Metrics`` subscribed.

``--backup-size`` then bulk-loads a store of that many exchanges and times
``elastimem backup`` (``ops.backup.backup``) and ``verify`` on it, with the file sizes.

    nice -n 10 python benchmarks/observability.py --size 10000 --queries 300
    nice -n 10 python benchmarks/observability.py --size 0 --backup-size 100000
    nice -n 10 python benchmarks/observability.py --size 0 --backup-size 100000 --backend postgres
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency  # noqa: E402 - the bulk loader, corpus and embedder of the latency benchmark

import elastimem  # noqa: E402
from elastimem import observe  # noqa: E402


def observers() -> dict[str, list[Any]]:
    """Mode -> the observers subscribed while it is timed."""
    modes: dict[str, list[Any]] = {"bare": [], "off": []}
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
        from opentelemetry.trace import NoOpTracerProvider

        from elastimem.ops.tracing import Tracing

        class Drop(SpanExporter):
            def export(self, spans: Any) -> Any:
                from opentelemetry.sdk.trace.export import SpanExportResult

                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Drop()))
        modes["otel_noop"] = [Tracing(NoOpTracerProvider())]
        modes["otel_sdk"] = [Tracing(provider)]
    except ImportError:
        print("opentelemetry is not installed: the otel modes are skipped", file=sys.stderr)
    try:
        from elastimem.ops.metrics import Metrics

        modes["metrics"] = [Metrics()]
    except ImportError:
        print("prometheus-client is not installed: the metrics mode is skipped", file=sys.stderr)
    return modes


def time_modes(mem: elastimem.Elastimem, queries: list[str]) -> dict[str, list[float]]:
    modes = observers()
    bare = type(mem).recall.__wrapped__  # type: ignore[attr-defined]
    calls: dict[str, Callable[[str], Any]] = {
        name: (lambda q: bare(mem, q, 5)) if name == "bare" else (lambda q: mem.recall(q, 5))
        for name in modes
    }
    names = list(modes)
    times: dict[str, list[float]] = {name: [] for name in names}
    for number, query in enumerate([*queries[:5], *queries]):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            for observer in modes[name]:
                observe.subscribe(observer)
            try:
                started = time.perf_counter()
                calls[name](query)
                elapsed = time.perf_counter() - started
            finally:
                for observer in modes[name]:
                    observe.unsubscribe(observer)
            if number >= 5:  # the first five warm every mode up
                times[name].append(elapsed)
    return times


def run_overhead(args: argparse.Namespace, workdir: Path) -> None:
    corpus, embedder = latency.Corpus(), latency.SyntheticEmbedder()
    path = workdir / f"overhead-{args.size}.db"
    print(f"bulk-loading {args.size:,} exchanges ...", file=sys.stderr)
    latency.bulk_load(path, corpus, args.size, embedder)
    queries = latency.make_queries(corpus, args.size, args.queries)
    with elastimem.open(path, embedder=embedder, disable_builtin_embedder=True) as mem:
        latency.settle(mem)
        times = time_modes(mem, queries)
    seam_ns = seam_cost()
    base = float(np.percentile(times["bare"], 50))
    print(f"\nrecall at {args.size:,} exchanges, {args.queries} queries per mode, interleaved")
    print(f"{'mode':<10} {'p50 ms':>8} {'p95 ms':>8} {'p50 vs bare':>12}")
    for name, values in times.items():
        p50 = float(np.percentile(values, 50))
        print(f"{name:<10} {latency.pct(values, 50):8.3f} {latency.pct(values, 95):8.3f} "
              f"{(p50 - base) * 1e6:+10.1f}µs")  # fmt: skip
    print(f"an unobserved seam (observe.span with nothing subscribed): {seam_ns:.0f} ns a call")


def seam_cost(calls: int = 1_000_000) -> float:
    """Nanoseconds one ``with observe.span(...)`` costs with nothing subscribed."""
    started = time.perf_counter()
    for _ in range(calls):
        with observe.span("leg", "rank"):
            pass
    return (time.perf_counter() - started) / calls * 1e9


def run_backup(args: argparse.Namespace, workdir: Path) -> None:
    from elastimem.ops.backup import backup, verify

    corpus, embedder = latency.Corpus(), latency.SyntheticEmbedder()
    path = workdir / f"backup-{args.backup_size}.db"
    print(f"bulk-loading {args.backup_size:,} exchanges ...", file=sys.stderr)
    latency.bulk_load(path, corpus, args.backup_size, embedder)
    dest = workdir / "backup.db"
    result = backup(str(path), str(dest))
    started = time.perf_counter()
    report = verify(str(dest))
    checked = time.perf_counter() - started
    print(
        f"\nbackup of {args.backup_size:,} exchanges (store {os.path.getsize(path) / 1e6:.1f} MB)"
    )
    print(f"backup   {result.seconds:7.2f} s  {result.bytes / 1e6:8.1f} MB  ({result.format})")
    print(f"verify   {checked:7.2f} s  ok={report.ok} counts={report.counts}")


def run_pg_backup(args: argparse.Namespace, workdir: Path) -> None:
    """The same on PostgreSQL: one user bulk-loaded on a private server, backed up (an
    export file) and the export verified."""
    from elastimem.ops.backup import backup, verify

    server, url = latency.private_postgres()
    try:
        corpus, embedder = latency.Corpus(), latency.SyntheticEmbedder()
        print(f"bulk-loading {args.backup_size:,} exchanges on PostgreSQL ...", file=sys.stderr)
        latency.pg_bulk_load(url, "bench", corpus, args.backup_size, embedder)
        dest = workdir / "backup.jsonl"
        result = backup(url, str(dest), user_id="bench")
        started = time.perf_counter()
        report = verify(str(dest))
        checked = time.perf_counter() - started
    finally:
        server.stop()
    print(f"\nPostgreSQL backup of {args.backup_size:,} exchanges (one user)")
    print(f"backup   {result.seconds:7.2f} s  {result.bytes / 1e6:8.1f} MB  ({result.format})")
    print(f"verify   {checked:7.2f} s  ok={report.ok} counts={report.counts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="exchanges (0: skip)")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per mode")
    parser.add_argument("--backup-size", type=int, default=0, help="exchanges (0: skip)")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where --backup-size is measured (postgres: a private server)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="elastimem-observability-") as temp:
        workdir = args.workdir or Path(temp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.size:
            run_overhead(args, workdir)
        if args.backup_size and args.backend == "postgres":
            run_pg_backup(args, workdir)
        elif args.backup_size:
            run_backup(args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
