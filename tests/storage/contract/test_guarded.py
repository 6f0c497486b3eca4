"""Contract: ``Tx.guarded`` on every backend. A block of reads that fails on its own (a
ranking leg) leaves its transaction usable for the reads after it. On PostgreSQL a failed
statement aborts the whole transaction unless a savepoint was set before it."""

from __future__ import annotations

from elastimem.storage import Database
from elastimem.storage.tx import Tx


def _bad_read(tx: Tx) -> bool:
    """A read whose LIMIT no 64-bit integer holds, in a guarded block: PostgreSQL rejects the
    statement (SQLite's driver, before sending it). True when it failed."""
    try:
        with tx.guarded():
            tx.transcript.recent_sessions(2**70)
    except Exception:
        return True
    return False


def test_a_failed_guarded_read_leaves_the_snapshot_usable(backend_database: Database) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("probe", "kept")
    with backend_database.read() as tx:
        assert _bad_read(tx)
        assert tx.meta.get("probe") == "kept"  # the snapshot still answers
        with tx.guarded():  # and a guarded block that succeeds changes nothing
            assert tx.meta.get("probe") == "kept"
        assert tx.meta.get("probe") == "kept"


def test_a_failed_guarded_read_inside_a_write_keeps_the_write(backend_database: Database) -> None:
    with backend_database.atomic() as tx:
        tx.meta.set("probe", "written")
        assert _bad_read(tx)
        tx.meta.set("after", "also")
    with backend_database.read() as tx:
        assert (tx.meta.get("probe"), tx.meta.get("after")) == ("written", "also")
