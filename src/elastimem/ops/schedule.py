"""Scheduled per-user snapshots: ``serve --backup-dir DIR --backup-every 6h --keep 14``.

One thread runs the rounds, one at a time: every ``every`` seconds it backs up each user's
store (``ops.backup``) to ``DIR/<user>/<user>-<UTC time>.db`` (``.jsonl`` on PostgreSQL),
then deletes that user's oldest snapshots beyond ``keep``. A round never holds a request
up: an SQLite snapshot reads one snapshot of the file from a connection of its own (in WAL
mode no writer waits for a reader), and a PostgreSQL export reads in its own transaction.
Each snapshot is written to a temporary name and renamed, so an interrupted round leaves
only whole files. Every round is logged; a user whose snapshot fails is logged and the
round goes on.

Which users: on a folder of SQLite stores, every ``<user>.db`` in it; on PostgreSQL, where
row-level security hides other users from the service's role, the users this service has
served since it started (back the whole server up with pg_dump: README).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from ..storage.addresses import is_postgres_url
from ..storage.sqlite.files import make_private_folders
from .backup import backup

logger = logging.getLogger("elastimem")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SNAPSHOT = re.compile(r"-(\d{8}T\d{6}(?:\.\d+)?Z)\.(db|jsonl)$")


def parse_interval(text: str) -> float:
    """Seconds in "90s", "15m", "6h", "1d" (or a bare number of seconds); ValueError else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text.lower())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is no interval; write it as 90s, 15m, 6h or 1d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def folder_users(folder: str) -> list[str]:
    """The users of a folder of stores: its ``<user>.db`` files."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n[: -len(".db")] for n in names if n.endswith(".db") and not n.startswith("."))


class BackupSchedule:
    def __init__(
        self,
        target: str,
        folder: str,
        *,
        every: float,
        keep: int,
        users: Callable[[], Iterable[str]],
        on_round: Callable[[int, int], None] | None = None,
    ) -> None:
        self.target = target
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.every = every
        self.keep = keep
        self.users = users
        self.on_round = on_round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round = threading.Lock()  # one round at a time, even when run_once is called

    def start(self) -> None:
        make_private_folders(self.folder)
        self._thread = threading.Thread(target=self._loop, name="elastimem-backups", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.run_once()

    def run_once(self) -> tuple[int, int]:
        """One round over every user; (snapshots written, snapshots failed)."""
        with self._round:
            started = time.perf_counter()
            done = failed = 0
            for user in sorted(set(self.users())):
                if self._stop.is_set() and self._thread is not None:
                    break
                try:
                    self._snapshot(user)
                    done += 1
                except Exception as exc:
                    failed += 1
                    logger.warning("backup of user %s failed: %s", user, exc)
            logger.info(
                "backup round: %d user(s) backed up, %d failed, in %.1f s, into %s",
                done, failed, time.perf_counter() - started, self.folder,
            )  # fmt: skip
            if self.on_round is not None:
                self.on_round(done, failed)
            return done, failed

    def _snapshot(self, user: str) -> None:
        folder = os.path.join(self.folder, user)
        make_private_folders(folder)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        on_server = is_postgres_url(self.target)
        name = f"{user}-{stamp}.{'jsonl' if on_server else 'db'}"
        source = self.target if on_server else os.path.join(self.target, f"{user}.db")
        backup(source, os.path.join(folder, name), user_id=user if on_server else None)
        self._prune(folder, user)

    def _prune(self, folder: str, user: str) -> None:
        snapshots = sorted(
            n for n in os.listdir(folder) if n.startswith(f"{user}-") and _SNAPSHOT.search(n)
        )
        for old in snapshots[: max(0, len(snapshots) - self.keep)]:
            try:
                os.unlink(os.path.join(folder, old))
            except OSError as exc:
                logger.warning("could not delete the old backup %s: %s", old, exc)
