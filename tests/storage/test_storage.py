"""The open sequence and storage faults: corrupt, locked, unwritable, FTS changes, threads."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastimem
from elastimem.errors import StoreClosedError, StoreError, StoreLockedError
from elastimem.storage.meta import EVENTS_KEPT
from elastimem.storage.sqlite import database as db
from elastimem.text import sanitize
from tests.rows import one, rows


def test_missing_parent_folders_are_created_and_tilde_expanded(isolated_env: Path) -> None:
    with elastimem.open("~/deep/er/memory.db", disable_builtin_embedder=True) as mem:
        assert mem.path == str((isolated_env / "deep" / "er" / "memory.db").resolve())
    assert (isolated_env / "deep" / "er" / "memory.db").exists()


def test_garbage_file_is_set_aside_with_its_side_files(tmp_path: Path) -> None:
    """A real SQLite file (its header intact) that fails the probe: §4.5 sets it aside."""
    path = tmp_path / "memory.db"
    garbage = db.SQLITE_HEADER + b"this is not a database at all " * 200
    path.write_bytes(garbage)
    Path(str(path) + "-wal").write_bytes(b"junk wal")
    Path(str(path) + "-shm").write_bytes(b"junk shm")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("name", "Ada")
        assert mem.facts() == {"name": "Ada"}
        events = rows(mem, "SELECT detail FROM events WHERE kind = 'recovered_from_corruption'")
        assert len(events) == 1
    aside = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    assert len(aside) == 3
    main = [
        p
        for p in tmp_path.iterdir()
        if p.name.endswith(tuple("0123456789Z")) and ".corrupt-" in p.name
    ]
    assert main and main[0].read_bytes() == garbage
    assert any(n.endswith("-wal") for n in aside) and any(n.endswith("-shm") for n in aside)


def test_a_store_whose_meta_page_is_damaged_is_set_aside(tmp_path: Path) -> None:
    """§4.5 step 2 probes meta.schema_version too: with only that page damaged, every
    open failed with "malformed" and nothing was set aside."""
    path = tmp_path / "memory.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("name", "Ada")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'meta'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as handle:  # page 1 (the schema) intact, meta's page garbage
        handle.seek((root - 1) * page_size)
        handle.write(b"\xff" * page_size)
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {}
        mem.remember("name", "Grace")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(tuple("0123456789Z"))]


def test_locked_file_raises_and_is_never_renamed(tmp_path: Path, fast_busy_timeout: None) -> None:
    path = tmp_path / "memory.db"
    elastimem.Elastimem(str(path), disable_builtin_embedder=True).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO meta (key, value) VALUES ('held', '1')")
    try:
        before = sorted(p.name for p in tmp_path.iterdir())
        with pytest.raises(StoreLockedError, match="locked"):
            elastimem.Elastimem(str(path), disable_builtin_embedder=True)
        assert sorted(p.name for p in tmp_path.iterdir()) == before
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.stats()["schema_version"] == 7


def test_a_path_that_cannot_be_created_gets_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the folder"):
        elastimem.Elastimem(str(blocker / "sub" / "memory.db"), disable_builtin_embedder=True)
    with pytest.raises(StoreError, match="is a folder"):
        elastimem.Elastimem(str(tmp_path), disable_builtin_embedder=True)


def test_bad_path_types_raise_config_error() -> None:
    with pytest.raises(elastimem.ConfigError):
        elastimem.Elastimem(42, disable_builtin_embedder=True)  # type: ignore[arg-type]


def test_store_created_without_fts_finds_old_rows_once_fts_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert not mem.fts_enabled
        mem.record_turn("We visited the aquarium in Zürich", "Sounds fun")
        mem.remember("favorite_animal", "octopus")
        # LIKE fallback, accent-insensitive both ways
        assert mem.recall("zurich aquarium", kinds=["chunk"])
        assert mem.recall("octopus", kinds=["fact"])[0].text == "favorite_animal: octopus"
    monkeypatch.delenv("ELASTIMEM_DISABLE_FTS")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.fts_enabled
        hits = mem.recall("aquarium")
        assert hits and "aquarium" in hits[0].text
        kinds = [r[0] for r in rows(mem, "SELECT kind FROM events ORDER BY id")]
        assert "fts_rebuilt" in kinds


def test_store_reopened_without_fts_still_accepts_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.record_turn("first turn about kayaks", "ok")
    monkeypatch.setenv("ELASTIMEM_DISABLE_FTS", "1")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.record_turn("second turn about canoes", "ok")
        mem.remember("boat", "kayak")
        assert mem.recall("canoes")
        kinds = [r[0] for r in rows(mem, "SELECT kind FROM events ORDER BY id")]
        triggers = one(
            mem, "SELECT count(*) FROM sqlite_master WHERE type='trigger' AND name LIKE '%fts%'"
        )
        assert "fts_disabled" in kinds and triggers == 0
    monkeypatch.delenv("ELASTIMEM_DISABLE_FTS")
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert [h.text for h in mem.recall("canoes")][0].startswith("User: second turn")


def test_memory_store_is_private_and_works_across_threads() -> None:
    with elastimem.open(":memory:", disable_builtin_embedder=True) as mem:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(20):
                    mem.record_turn(f"thread {n} message {i} about gardening", "noted")
                    mem.recall("gardening")
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert mem.stats()["messages"] == 160
        assert mem.stats()["db_bytes"] == 0
    with elastimem.open(":memory:", disable_builtin_embedder=True) as other:
        assert other.stats()["messages"] == 0


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_writes_stop_with_a_clear_error_once_the_file_is_gone(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite keeps writing to the file it holds open: without the check, every later
    turn went to a file nobody could open again, silently."""
    path = tmp_path / "memory.db"
    with elastimem.open(str(path), disable_builtin_embedder=True) as mem:
        mem.record_turn("the first turn", "ok")
        if how == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        else:
            with elastimem.open(str(tmp_path / "other.db"), disable_builtin_embedder=True):
                pass
            (tmp_path / "other.db").replace(path)
        with pytest.raises(StoreError, match="deleted or replaced"):
            mem.remember("city", "Lyon")
        mem.record_turn("a later turn", "ok")  # never raises: logged instead
        assert "deleted or replaced" in caplog.text
        errors: list[BaseException] = []

        def read_on_a_new_thread() -> None:  # its reader connection would open the path
            try:
                mem.sessions()
            except BaseException as exc:
                errors.append(exc)

        reader = threading.Thread(target=read_on_a_new_thread)
        reader.start()
        reader.join()
        assert len(errors) == 1 and "deleted or replaced" in str(errors[0])
    if how == "deleted":
        assert not path.exists()  # no empty store was created in its place


def test_atomic_nests_as_savepoints_and_rolls_back(tmp_path: Path) -> None:
    store = db.open_store(tmp_path / "x.db")
    try:
        with store.atomic() as tx:
            tx.meta.set("outer", 1)
            with pytest.raises(RuntimeError), store.atomic() as inner:
                inner.meta.set("inner", 1)
                raise RuntimeError("undo the inner level only")
        with store.read() as tx:
            assert tx.meta.get("outer") == "1"
            assert tx.meta.get("inner") is None
        with pytest.raises(RuntimeError), store.atomic() as tx:
            tx.meta.set("gone", 1)
            raise RuntimeError("undo everything")
        with store.read() as tx:
            assert tx.meta.get("gone") is None
    finally:
        store.close()


def test_sqlite_errors_are_wrapped(tmp_path: Path) -> None:
    store = db.open_store(tmp_path / "x.db")
    try:
        with pytest.raises(StoreError) as info, store.atomic() as tx:
            tx.conn.execute("INSERT INTO no_such_table VALUES (1)")
        assert isinstance(info.value.__cause__, sqlite3.Error)
    finally:
        store.close()


def test_a_store_file_this_user_may_not_read_gets_its_own_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "check that its folder exists and is writable", about a folder that was."""
    path = tmp_path / "locked.db"
    path.write_bytes(b"")
    cant_open = sqlite3.OperationalError("unable to open database file")
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # as root, always True
    message = str(db.translate_error(cant_open, str(path), "open"))
    assert message == f"cannot open {path}: this user may not read it; fix its permissions"


def test_readers_cannot_write(tmp_path: Path) -> None:
    store = db.open_store(tmp_path / "x.db")
    try:
        reader = threading.Thread(target=lambda: None)
        reader.start()
        reader.join()
        with pytest.raises(StoreError), store.read() as tx:
            tx.conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
    finally:
        store.close()


def test_events_keep_the_newest_thousand(tmp_path: Path) -> None:
    store = db.open_store(tmp_path / "x.db")
    try:
        with store.atomic() as tx:
            for i in range(1100):
                tx.meta.log_event("reindex", n=i)
        [(count, newest)] = rows(store, "SELECT count(*), max(id) FROM events")
        assert count == EVENTS_KEPT and newest >= 1100
    finally:
        store.close()


class _Text(str):
    """A ``str`` subclass: sanitize still returns a plain ``str``."""


@settings(max_examples=500, deadline=None)
@given(
    st.text(
        st.one_of(
            st.characters(codec=None, exclude_categories=()),
            st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00", "é", "a"]),
        )
    )
)
def test_sanitize_replaces_exactly_nul_and_surrogates(text: str) -> None:
    expected = "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    assert sanitize(text) == expected
    clean = sanitize(_Text(text))
    assert clean == expected and type(clean) is str


# -- close() racing other threads ---------------------------------------------------------------


def test_close_waits_for_a_read_running_on_another_thread(tmp_path: Path) -> None:
    """A reader connection closed while another thread steps it can crash the process
    (seen as a segfault by a soak): close() waits for the read, then closes it; later
    reads raise StoreClosedError, which is both a ClosedError and a StoreError."""
    store = db.open_store(tmp_path / "race.db")
    inside, go_on, results = threading.Event(), threading.Event(), []

    def reader() -> None:
        with store.read() as tx:
            inside.set()
            assert go_on.wait(10)
            results.append(tx.meta.get_int("schema_version"))

    thread = threading.Thread(target=reader)
    thread.start()
    assert inside.wait(10)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # waiting for the read
    go_on.set()
    closer.join(10)
    thread.join(10)
    assert not closer.is_alive() and results and results[0] > 0
    with pytest.raises(StoreClosedError) as raised, store.read():
        pass
    assert isinstance(raised.value, elastimem.ClosedError)
    assert isinstance(raised.value, StoreError)


def test_a_read_outliving_the_close_wait_closes_its_own_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "CLOSE_READ_WAIT_SECONDS", 0.05)
    store = db.open_store(tmp_path / "slow.db")
    inside, go_on, seen = threading.Event(), threading.Event(), []

    def reader() -> None:
        with store.read() as tx:
            inside.set()
            assert go_on.wait(10)
            # close() gave up waiting, yet this connection is still open for this read.
            seen.append(tx.conn.execute("SELECT 1").fetchone()[0])
            seen.append(tx.conn)

    thread = threading.Thread(target=reader)
    thread.start()
    assert inside.wait(10)
    store.close()  # returns after the short wait
    go_on.set()
    thread.join(10)
    assert seen and seen[0] == 1
    with pytest.raises(sqlite3.ProgrammingError):  # closed by its own thread at the end
        seen[1].execute("SELECT 1")


@pytest.mark.slow
def test_closing_a_store_under_busy_threads_never_crashes(tmp_path: Path) -> None:
    """Real threads inside recall, explain, build_context and record_turn while close()
    runs: each ends with ClosedError, nothing is logged as an error, and the process
    survives (run in a child, so a crash fails this test instead of the whole run)."""
    script = f"""
import logging, sys, threading, time
import elastimem
from tests.conftest import HashEmbedder
errors = []
class Catch(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.ERROR:
            errors.append(record.getMessage())
logging.getLogger("elastimem").addHandler(Catch())
for round_ in range(4):
    mem = elastimem.open(r"{tmp_path}/busy%d.db" % round_, embedder=HashEmbedder(32),
                         disable_builtin_embedder=True, tier_override="full")
    for i in range(150):
        mem.record_turn(f"hello world item{{i}} blue green {{i % 7}} red", "ok")
    mem.remember("pet", "rex")
    others = []
    def loop(kind):
        while True:
            try:
                q = f"blue green rex item{{kind}}"
                if kind < 3:
                    (mem.build_context, mem.recall, mem.explain)[kind](q)
                else:
                    mem.record_turn(q, "ok")
            except elastimem.ClosedError:
                return
            except Exception as exc:
                others.append(repr(exc))
                return
    threads = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3 + 0.1 * round_)
    mem.close()
    for t in threads:
        t.join(30)
    assert not others, others
assert not errors, errors
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_a_folder_this_user_may_not_search_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stat() of the store path fails with EACCES under a folder without search permission
    (root ignores permissions, so the refusal is simulated); it raised a raw
    PermissionError from the constructor, and the CLI printed a traceback."""

    def refuse(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", refuse)
    with pytest.raises(StoreError, match="cannot reach .*Permission denied"):
        elastimem.open(tmp_path / "locked" / "memory.db", disable_builtin_embedder=True)
