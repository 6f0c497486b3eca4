"""The operator's options of ``serve`` (metrics, tracing, scheduled backups), as one decorator
that hands the command a single ``ops`` argument (``OpsOptions``).

Imports neither Starlette nor prometheus-client: ``serve`` checks its extra first.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

METRICS_KEY_ENV = "ELASTIMEM_METRICS_KEY"
MIN_METRICS_KEY = 16


@dataclass
class OpsOptions:
    metrics: bool = True
    metrics_key: str | None = None
    tracing: bool = False
    backup_dir: str | None = None
    backup_every: float = 6 * 3600.0
    backup_keep: int = 14


def ops_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    @click.option("--metrics/--no-metrics", default=True, show_default=True,
                  help="Serve GET /metrics (Prometheus) to loopback clients and to requests "
                  "with the metrics key.")  # fmt: skip
    @click.option("--metrics-key", metavar="KEY",
                  help="The key that opens /metrics to remote scrapers; never a user's key. "
                  "Other users of the machine can read it in the process list: prefer "
                  f"--metrics-key-file or ${METRICS_KEY_ENV}.")  # fmt: skip
    @click.option("--metrics-key-file", type=click.Path(dir_okay=False, exists=True),
                  help=f"File holding the key that opens /metrics to remote scrapers (or set "
                  f"${METRICS_KEY_ENV}); never a user's key.")  # fmt: skip
    @click.option("--otel/--no-otel", default=None,
                  help="OpenTelemetry spans for the memory operations, parented by an "
                  "incoming traceparent (default: on when opentelemetry-api is "
                  "installed).")  # fmt: skip
    @click.option("--backup-dir", type=click.Path(file_okay=False),
                  help="Write scheduled per-user snapshots under this folder.")  # fmt: skip
    @click.option("--backup-every", default="6h", show_default=True, metavar="INTERVAL",
                  help="Time between backup rounds: 90s, 15m, 6h, 1d.")  # fmt: skip
    @click.option("--keep", "backup_keep", default=14, show_default=True,
                  type=click.IntRange(1),
                  help="Snapshots kept per user (oldest go first).")  # fmt: skip
    @functools.wraps(fn)
    def wrapper(*args: Any, metrics: bool, metrics_key: str | None,
                metrics_key_file: str | None, otel: bool | None,
                backup_dir: str | None, backup_every: str, backup_keep: int,
                **kwargs: Any) -> Any:  # fmt: skip
        from ..ops.schedule import parse_interval

        try:
            every = parse_interval(backup_every)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--backup-every") from None
        if otel is None:
            otel = importlib.util.find_spec("opentelemetry") is not None
        elif otel and importlib.util.find_spec("opentelemetry") is None:
            raise click.UsageError("--otel needs the extra: pip install 'elastimem[otel]'")
        if metrics_key is not None and metrics_key_file is not None:
            raise click.UsageError("give --metrics-key or --metrics-key-file, not both")
        key = _metrics_key(metrics_key_file, metrics_key)
        ops = OpsOptions(metrics, key, otel, backup_dir, every,
                         backup_keep)  # fmt: skip
        return fn(*args, ops=ops, **kwargs)

    return wrapper


def _metrics_key(path: str | None, given: str | None = None) -> str | None:
    if given is not None:
        key, where = given.strip(), "--metrics-key"
    elif path is not None:
        with open(path, encoding="utf-8") as handle:
            key = handle.read().strip()
        where = f"--metrics-key-file {path}"
    else:
        key = os.environ.get(METRICS_KEY_ENV, "").strip()
        where = f"${METRICS_KEY_ENV}"
    if not key:
        return None
    if len(key) < MIN_METRICS_KEY:
        raise click.UsageError(f"{where}: the metrics key is shorter than {MIN_METRICS_KEY}")
    return key


def check_metrics_key(ops: Any, keys: Any) -> None:
    """Refuse a metrics key that is also a user's bearer key (it would open both doors)."""
    if ops.metrics_key and keys.user_for(ops.metrics_key) is not None:
        raise click.UsageError("the metrics key is also a user's key in the keys file; use another")
