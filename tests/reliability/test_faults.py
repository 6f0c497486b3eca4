"""Faults: a full disk, read-only files, corruption, locks and hanging host callables.

Each fault must end in a clear error — ``StoreError`` (or ``StoreLockedError``) with a message
that names the problem for validating calls, one logged error for ``record_turn`` — while reads
keep working and the last committed state survives a reopen intact. Where a fault is about
time (a hanging LLM or embedder), the test measures how long the host waits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import StoreError, StoreLockedError
from elastimem.storage.sqlite.connection import path_lock
from tests.rows import rows

from .doubles import HangingCallable, HostLLM, VecEmbedder
from .helpers import (
    CHILD,
    REPO,
    child_env,
    integrity,
    raw_connect,
    run_child,
    stats_mismatches,
)

pytestmark = pytest.mark.slow
posix_only = pytest.mark.skipif(
    sys.platform == "win32", reason="needs POSIX resource limits, signals and permissions"
)


def _fill(mem: elastimem.Elastimem, turns: int = 20) -> None:
    for i in range(turns):
        mem.record_turn(f"committed{i} we planted tomatoes and basil", f"committed{i} nice")
    mem.remember("favorite_color", "teal")
    mem.add_lesson("Water the tomatoes in the morning")


def _snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    conn = raw_connect(path)
    try:
        return {
            "messages": [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")],
            "facts": conn.execute(
                "SELECT key, value FROM facts WHERE invalidated_at IS NULL ORDER BY key"
            ).fetchall(),
            "lessons": [r[0] for r in conn.execute("SELECT text FROM lessons ORDER BY id")],
        }
    finally:
        conn.close()


def _digest(path: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if p.is_file()
    }


# -- disk full ----------------------------------------------------------------------------------


def _writer_made_by(open_store: Callable[[], elastimem.Elastimem], monkeypatch: Any) -> Any:
    """Open a store and return it with its writer connection: the one connection the open
    made to the store's file that may write (readers are ``query_only``). SQLite's
    ``max_page_count`` holds per connection, so a full disk is simulated on the writer."""
    made: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        made.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    try:
        mem = open_store()
    finally:
        monkeypatch.setattr(sqlite3, "connect", real_connect)
    writers = []
    for conn in made:
        try:
            files = {row[2] for row in conn.execute("PRAGMA database_list")}
            if mem.path in files and conn.execute("PRAGMA query_only").fetchone()[0] == 0:
                writers.append(conn)
        except sqlite3.ProgrammingError:  # closed during the open
            continue
    assert len(writers) == 1, writers
    return mem, writers[0]


@pytest.mark.sqlite_only  # PRAGMA max_page_count fills a file; a server's disk is the operator's
def test_disk_full_via_max_page_count(
    make_store: Callable[..., elastimem.Elastimem],
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    elastimem_logs: Any,
    figure: Any,
) -> None:
    mem, writer = _writer_made_by(make_store, monkeypatch)
    _fill(mem)
    mem.drain(10)
    committed = _snapshot(store_path)
    with path_lock(mem.path):  # the store's write lock: no write of its own runs meanwhile
        pages = int(writer.execute("PRAGMA page_count").fetchone()[0])
        writer.execute(f"PRAGMA max_page_count = {pages}")

    mem.record_turn("overflow " * 20_000, "this cannot fit")
    logged = [line for line in elastimem_logs.lines if line.startswith("ERROR")]
    assert len(logged) == 1 and "full" in logged[0], logged
    acknowledged: list[tuple[str, str]] = []
    with pytest.raises(StoreError) as remember_error:
        for i in range(500):
            mem.remember(f"filler_{i}", f"{i} " + "x" * 450)
            acknowledged.append((f"filler_{i}", f"{i} " + "x" * 450))
    assert type(remember_error.value) is StoreError
    assert "full" in str(remember_error.value)
    with pytest.raises(StoreError, match="full"):
        mem.add_lesson("y" * 20_000)
    # Reads still answer from the committed state.
    assert [h.text for h in mem.recall("tomatoes basil")][:1]
    assert mem.facts()["favorite_color"] == "teal"
    assert "teal" in mem.build_context("what colour do I like").render()
    mem.close()

    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as again:
        assert integrity(store_path) == "ok"
        after = _snapshot(store_path)
        assert after["messages"] == committed["messages"]
        assert after["lessons"] == committed["lessons"]
        assert sorted(after["facts"]) == sorted(committed["facts"] + acknowledged)
        again.record_turn("after the disk was freed", "ok")
        assert again.recall("freed")
    figure("disk full (max_page_count): record_turn log", logged[0][:120])
    figure("disk full (max_page_count): remember raises", str(remember_error.value)[:120])
    figure("remembers acknowledged before the disk filled", len(acknowledged))


@posix_only
def test_disk_full_via_file_size_limit_in_a_child(store_path: Path, figure: Any) -> None:
    """``RLIMIT_FSIZE`` (SIGXFSZ ignored) makes every write past the limit fail with EFBIG."""
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        _fill(mem)
    committed = _snapshot(store_path)
    limit = store_path.stat().st_size + 200_000
    done = run_child("fsize", str(store_path), str(limit), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.rsplit("RESULT ", 1)[1])
    acknowledged = [line[2:] for line in done.stdout.splitlines() if line.startswith("T ")]

    assert report["first_error"] is not None, "the file-size limit never produced an error"
    assert report["first_error"].startswith("ERROR record_turn")
    assert report["remember_error"] and "StoreError" in report["remember_error"]
    assert report["reads_ok"] and report["close_error"] is None
    assert integrity(store_path) == "ok"
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        after = _snapshot(store_path)
        tokens = {m.split(" ", 1)[0] for m in after["messages"]}
        assert all(t in tokens for t in acknowledged)
        assert after["messages"][: len(committed["messages"])] == committed["messages"]
        remembered = {line[2:] for line in done.stdout.splitlines() if line.startswith("F ")}
        assert {k for k, _ in after["facts"]} == {k for k, _ in committed["facts"]} | remembered
        assert stats_mismatches(mem, skip=("jobs_pending",)) == {}
    figure("file-size limit: turns acknowledged before the limit", len(acknowledged))
    figure("file-size limit: record_turn log", report["first_error"][:140])
    figure("file-size limit: remember raises", report["remember_error"][:140])
    # The message must point at the likely cause (space or quota), not only "disk I/O error".
    message = report["first_error"].replace(str(store_path), "<path>").lower()
    assert any(word in message for word in ("full", "space", "quota")), report["first_error"]


# -- read-only files and folders ----------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder under /tmp that an unprivileged child can reach (pytest's tmp is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="elastimem-ro-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for p in [base, *base.rglob("*")]:
            try:
                p.chmod(0o755 if p.is_dir() else 0o644)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)


READ_ONLY_CASES = {
    # name: (file mode, folder mode)
    "file": (0o444, 0o777),
    "folder": (0o666, 0o555),
    "both": (0o444, 0o555),
}


@posix_only
@pytest.mark.parametrize("opener", ["open", "open_user"])
@pytest.mark.parametrize("case", sorted(READ_ONLY_CASES))
def test_read_only_store_reads_work_and_writes_fail_clearly(
    shared_dir: Path, case: str, opener: str, figure: Any
) -> None:
    """What a user does: ``elastimem.open(path)`` (or ``open_user(root, id)``, which used to
    fail writing its owner tag) on a file they may not write.

    As root, permission bits do not apply, so the child drops to ``nobody`` (uid 65534) after
    importing everything; as any other user it runs as itself.
    """
    folder = shared_dir / "store"
    folder.mkdir()
    path = folder / "memory.db"
    if opener == "open_user":
        mem = elastimem.open_user(folder, "memory", disable_builtin_embedder=True)
    else:
        mem = elastimem.Elastimem(str(path), disable_builtin_embedder=True)
    with mem:
        mem.record_turn("I spread marmalade on toast every morning", "Classic")
        mem.remember("breakfast", "marmalade toast")
    file_mode, folder_mode = READ_ONLY_CASES[case]
    path.chmod(file_mode)
    folder.chmod(folder_mode)
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    user_args = ["memory"] if opener == "open_user" else []
    done = run_child("readonly", str(path), *user_args, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.rsplit("RESULT ", 1)[1])
    figure(
        f"read-only {case} via {opener}: open / write outcome",
        report.get("open_error") or f"remember -> {report.get('remember_error')}",
        note=f"close {report.get('close_seconds')} s, uid {report['uid']}",
    )
    assert "open_error" not in report, report["open_error"]
    assert "read_error" not in report, report["read_error"]
    assert report["facts"] == {"breakfast": "marmalade toast"}
    # FTS5 reads fine here: its probe (a temporary table) did not, and recall used LIKE.
    assert report["fts_enabled"] is True
    assert report["recall"] and "marmalade" in report["recall"][0]
    assert report["context_has_fact"] and report["timeline_key"] == "breakfast"
    assert report["record_turn_raised"] is None
    assert report["record_turn_logged"] and "read-only" in report["record_turn_errors"][0]
    assert report["remember_error"] and "StoreError" in report["remember_error"]
    assert "read-only" in report["remember_error"]
    assert report["close_error"] is None and report["close_seconds"] < 12
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


# -- corruption ---------------------------------------------------------------------------------


def _corrupt(path: Path, offset: int, length: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[offset : offset + length] = bytes((i * 37 + 11) % 256 for i in range(length))
    path.write_bytes(bytes(data))
    return bytes(data)


@pytest.mark.parametrize("where", ["header", "schema_page"])
def test_corrupt_file_is_set_aside_and_a_fresh_store_works(
    store_path: Path, where: str, figure: Any
) -> None:
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        _fill(mem)
    page_size = 4096
    # The header past its 16-byte magic: a file without the magic is not an SQLite file at
    # all, and is refused untouched instead (tests/storage/test_storage.py).
    offset, length = (16, 84) if where == "header" else (100, page_size - 100)
    damaged = _corrupt(store_path, offset, length)
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        mem.record_turn("a fresh start with sourdough", "good luck")
        assert mem.recall("sourdough")
        events = rows(mem, "SELECT detail FROM events WHERE kind = 'recovered_from_corruption'")
    aside = [p for p in store_path.parent.iterdir() if ".corrupt-" in p.name]
    main = [p for p in aside if not p.name.endswith(("-wal", "-shm"))]
    assert len(main) == 1 and main[0].read_bytes() == damaged
    assert len(events) == 1 and main[0].name in events[0][0]
    assert integrity(store_path) == "ok"
    figure(f"corrupt {where}: quarantined copies", len(aside), note=main[0].name)


def test_corruption_found_after_open_never_escapes_raw(
    store_path: Path, elastimem_logs: Any, figure: Any
) -> None:
    """Damage in a data page passes the open probe; later calls must still fail cleanly."""
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        for i in range(400):
            mem.record_turn(f"filler {i} " + "tomato basil " * 40, "ok")
        mem.remember("favorite_color", "teal")
    conn = raw_connect(store_path)
    try:
        pages = [
            int(r[0])
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = 'chunks' AND pagetype = 'leaf' "
                "ORDER BY pageno"
            )
        ]
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    victim = pages[len(pages) // 2]
    _corrupt(store_path, (victim - 1) * page_size + 8, page_size - 8)
    outcomes: dict[str, str] = {}
    try:
        mem = elastimem.Elastimem(str(store_path), disable_builtin_embedder=True)
    except StoreError as exc:
        figure("mid-file corruption", f"open refused: {exc}"[:120])
        return
    try:
        calls: dict[str, Callable[[], Any]] = {
            "record_turn": lambda: mem.record_turn("tomato basil again", "ok"),
            "recall": lambda: mem.recall("tomato basil"),
            "explain": lambda: mem.explain("tomato basil"),
            "timeline": lambda: mem.timeline("favorite_color"),
            "build_context": lambda: mem.build_context("tomato basil"),
            "remember": lambda: mem.remember("favorite_color", "red"),
            "facts": lambda: mem.facts(),
            "sessions": lambda: mem.sessions(),
            "stats": lambda: mem.stats(),
        }
        for name, call in calls.items():
            try:
                call()
                outcomes[name] = "ok"
            except elastimem.ElastimemError as exc:
                outcomes[name] = type(exc).__name__
            except Exception as exc:  # a raw sqlite3 error or worse: the finding
                outcomes[name] = f"RAW {type(exc).__module__}.{type(exc).__name__}"
    finally:
        mem.close()
    figure("mid-file corruption outcomes", ", ".join(f"{k}={v}" for k, v in outcomes.items()))
    assert not [k for k, v in outcomes.items() if v.startswith("RAW")], outcomes


# -- locks --------------------------------------------------------------------------------------


def _locker(path: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "locker", str(path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=str(REPO),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read() if proc.stderr else ""
    return proc


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.mark.parametrize("mode", ["write", "exclusive"])
def test_locked_file_raises_store_locked_error_and_renames_nothing(
    store_path: Path, fast_busy_timeout: None, mode: str, figure: Any
) -> None:
    with elastimem.Elastimem(str(store_path), disable_builtin_embedder=True) as mem:
        _fill(mem)
    locker = _locker(store_path, mode)
    try:
        before = _digest(store_path)
        started = time.monotonic()
        with pytest.raises(StoreLockedError) as info:
            elastimem.Elastimem(str(store_path), disable_builtin_embedder=True)
        waited = time.monotonic() - started
        assert _digest(store_path) == before
    finally:
        _release(locker)
    assert "locked" in str(info.value)
    assert integrity(store_path) == "ok"
    figure(f"locked file ({mode}): open raised after", round(waited, 2), "s", str(info.value))


def test_lock_taken_while_open_logs_for_record_turn_and_raises_for_remember(
    store_path: Path, fast_busy_timeout: None, elastimem_logs: Any, figure: Any
) -> None:
    mem = elastimem.Elastimem(str(store_path), disable_builtin_embedder=True)
    try:
        _fill(mem)
        locker = _locker(store_path, "write")
        try:
            mem.record_turn("blocked turn", "blocked")
            with pytest.raises(StoreLockedError):
                mem.remember("favorite_color", "red")
            assert mem.facts()["favorite_color"] == "teal"  # reads still work in WAL mode
        finally:
            _release(locker)
        logged = [line for line in elastimem_logs.lines if line.startswith("ERROR")]
        assert len(logged) == 1 and "locked" in logged[0]
        mem.record_turn("after the lock", "ok")
        assert mem.recall("after the lock")
    finally:
        mem.close()
    figure("write lock held elsewhere: record_turn log", logged[0][:120])


# -- hanging host callables ---------------------------------------------------------------------


def test_hanging_llm_leaves_the_store_responsive(
    make_store: Callable[..., elastimem.Elastimem],
    monkeypatch: pytest.MonkeyPatch,
    figure: Any,
) -> None:
    """An LLM call that never returns: other work continues, drain and close stay bounded,
    recall answers and the host can still take the foreground.

    ``gate.LLM_CALL_TIMEOUT_SECONDS`` bounds one LLM call (shortened here to 1 s).
    """
    from elastimem.runtime import gate

    monkeypatch.setattr(gate, "LLM_CALL_TIMEOUT_SECONDS", 1.0, raising=False)
    hang = HangingCallable(limit=60)
    llm = HostLLM(extract=hang)
    embedder = VecEmbedder(64)
    mem = make_store(llm=llm, embedder=embedder, tier_override="full")
    figures: dict[str, Any] = {}
    try:
        mem.record_turn("my sister Clara moved to Zürich last spring", "exciting")
        assert hang.entered.wait(10), "the extraction never reached the LLM"
        mem.record_turn("the second turn about sourdough bread baking", "tasty")

        started = time.monotonic()
        embedded = _wait(lambda: mem.stats()["embedded_chunks"] == 2, 8)
        figures["embed job after the hang"] = (
            f"done in {time.monotonic() - started:.1f} s" if embedded else "never ran (8 s)"
        )
        started = time.monotonic()
        drained = mem.drain(timeout=1.0)
        figures["drain(1.0)"] = f"{drained} after {time.monotonic() - started:.2f} s"
        started = time.monotonic()
        hits = mem.recall("sourdough bread")
        figures["recall during the hang"] = (
            f"{len(hits)} hits in {time.monotonic() - started:.2f} s"
        )
        took_foreground = _within(lambda: (mem.foreground_begin(), mem.foreground_end()), 3.0)
        figures["foreground_begin during the hang"] = "returned" if took_foreground else "blocked"
    finally:
        started = time.monotonic()
        mem.close()
        close_seconds = time.monotonic() - started
        hang.release()
    figures["close()"] = f"{close_seconds:.1f} s"
    figure("hanging LLM", "; ".join(f"{k}: {v}" for k, v in figures.items()))
    assert hits and drained is False
    assert close_seconds < 12.0
    assert took_foreground, "the host's foreground_begin() waits for the hanging call"
    assert embedded, "the worker stopped serving other jobs while the LLM hangs"


def test_hanging_embedder_leaves_the_store_responsive(
    make_store: Callable[..., elastimem.Elastimem],
    monkeypatch: pytest.MonkeyPatch,
    figure: Any,
) -> None:
    """A host embedder that never returns: recall still answers from the keyword leg within
    ``legs.QUERY_EMBED_TIMEOUT_SECONDS`` and the worker keeps running LLM work."""
    from elastimem.jobs import embed
    from elastimem.retrieval import legs

    monkeypatch.setattr(legs, "QUERY_EMBED_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(embed, "EMBED_CALL_TIMEOUT_SECONDS", 1.0)
    real = VecEmbedder(64)
    hang = HangingCallable(result=real, limit=30)
    llm = HostLLM()
    mem = make_store(embedder=hang, llm=llm, tier_override="full")
    figures: dict[str, Any] = {}
    recall_result: list[Any] = []
    try:
        mem.record_turn("my sister Clara moved to Zürich last spring", "exciting")
        assert hang.entered.wait(10), "the embed job never reached the embedder"
        started = time.monotonic()
        answered = _within(lambda: recall_result.append(mem.recall("Clara Zürich")), 5.0)
        figures["recall during the hang"] = (
            f"{len(recall_result[0])} hits in {time.monotonic() - started:.2f} s"
            if answered
            else "blocked (> 5 s)"
        )
        started = time.monotonic()
        extracted = _wait(lambda: llm.calls.get("extract", 0) > 0, 8)
        figures["extract job after the hang"] = (
            f"ran in {time.monotonic() - started:.1f} s" if extracted else "never ran (8 s)"
        )
    finally:
        started = time.monotonic()
        mem.close()
        close_seconds = time.monotonic() - started
        hang.release()
    figures["close()"] = f"{close_seconds:.1f} s"
    figure("hanging embedder", "; ".join(f"{k}: {v}" for k, v in figures.items()))
    assert close_seconds < 12.0
    assert answered and recall_result[0], "recall blocks on the hanging query embedding"
    assert extracted, "the worker stopped serving LLM jobs while the embedder hangs"


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _within(fn: Callable[[], Any], timeout: float) -> bool:
    """Run ``fn`` on a daemon thread; True if it finished within ``timeout`` seconds."""
    done = threading.Event()

    def target() -> None:
        try:
            fn()
        except Exception:
            pass  # only the timing matters here (a late call may meet a closed store)
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    return done.wait(timeout)


# -- small things -------------------------------------------------------------------------------


def test_memory_store_opens_without_a_wal_warning(
    monkeypatch: pytest.MonkeyPatch, elastimem_logs: Any, figure: Any
) -> None:
    """``:memory:`` has no journal file to put in WAL mode; that is not a refusing filesystem."""
    from elastimem.storage.sqlite import connection

    monkeypatch.setattr(connection, "_wal_warned", False)  # the warning is once per process
    with elastimem.Elastimem(":memory:", disable_builtin_embedder=True) as mem:
        mem.record_turn("hello", "hi")
    warnings = [line for line in elastimem_logs.lines if "WAL" in line]
    figure(":memory: open warnings", len(warnings), note=warnings[0] if warnings else "")
    assert warnings == []
