"""``serve --backup-dir DIR --backup-every ... --keep N``: a real server taking per-user
snapshots while requests keep coming, on both backends; and the interval parser."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elastimem.ops.schedule import parse_interval
from tests.service.test_server import BACKENDS, backend_target, start_server, stop_server
from tests.service.test_server import request as http

USERS = ("ana", "ben")


@pytest.mark.parametrize("backend", BACKENDS)
def test_scheduled_backups_rotate_per_user_and_never_hold_requests_up(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = backend_target(backend, request)
    backups = tmp_path / "backups"
    server = start_server(tmp_path, "--backup-dir", str(backups), "--backup-every", "1s",
                          "--keep", "2", target=target)  # fmt: skip
    slowest = 0.0
    try:
        deadline = time.monotonic() + 6  # several rounds
        i = 0
        while time.monotonic() < deadline:
            for user in USERS:
                started = time.perf_counter()
                turn = {"user_text": f"{user} waters the ferns, day {i}", "assistant_text": "ok"}
                assert http(server, "POST", "/v1/turns", user, turn)[0] == 201
                slowest = max(slowest, time.perf_counter() - started)
            i += 1
    finally:
        assert stop_server(server) == 0, server.log()
    assert slowest < 2.0, f"a request waited {slowest:.2f} s during backups"
    assert "backup round: 2 user(s) backed up, 0 failed" in server.log()
    suffix = ".db" if backend == "sqlite" else ".jsonl"
    for user in USERS:
        snapshots = sorted((backups / user).iterdir())
        assert len(snapshots) == 2, snapshots  # --keep 2: the older ones are gone
        assert stat.S_IMODE((backups / user).stat().st_mode) == 0o700
        for snapshot in snapshots:
            assert snapshot.name.startswith(f"{user}-") and snapshot.suffix == suffix
            assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
        newest = snapshots[-1]
        done = subprocess.run([sys.executable, "-m", "elastimem.cli", "verify", str(newest)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["counts"]["messages"] >= 2
    assert not list(backups.glob("**/.elastimem-*"))  # no half-written file left


def test_intervals() -> None:
    assert parse_interval("6h") == 6 * 3600
    assert parse_interval("15m") == 900
    assert parse_interval("1d") == 86400
    assert parse_interval("90") == 90
    for bad in ("", "0s", "-1h", "6 hours", "h"):
        with pytest.raises(ValueError):
            parse_interval(bad)


def test_a_bad_interval_is_a_usage_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", "--db", str(tmp_path), "serve", "--keys",
         str(keys), "--backup-dir", str(tmp_path / "b"), "--backup-every", "soon"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--backup-every" in done.stderr
