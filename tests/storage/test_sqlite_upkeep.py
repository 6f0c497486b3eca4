"""``storage.sqlite.upkeep.peek_meta``: a store file's setting, read without writing."""

from __future__ import annotations

from pathlib import Path

from elastimem.storage.sqlite.database import open_store
from elastimem.storage.sqlite.upkeep import peek_meta


def test_peek_meta_reads_a_closed_store_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    database = open_store(path)
    with database.atomic() as tx:
        tx.meta.set("user_id", "ana")
    database.close()
    before = path.read_bytes()
    assert peek_meta(path, "user_id") == "ana"
    assert peek_meta(str(path), "absent") is None
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_peek_meta_of_what_is_no_store_is_none(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database, just words")
    assert peek_meta(notes, "user_id") is None
    assert peek_meta(tmp_path / "missing.db", "user_id") is None
    assert not (tmp_path / "missing.db").exists()
