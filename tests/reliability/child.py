"""Child processes for the reliability suite (run as a script: ``python child.py <role> ...``).

Roles:
- ``zygote``: imports everything once, then forks one ``crash`` child per ``spawn SEED PATH
  OUT ERR`` line on stdin (answering ``PID <pid>``) and reaps it on ``reap <pid>`` (answering
  ``REAPED <status>``), so a hundred crash rounds do not pay a hundred interpreter start-ups.
- ``crash PATH SEED``: records turns, remembers facts and queues extraction (a slow LLM
  double) in a loop until it is killed. It prints ``READY`` once open, then one line per
  acknowledged call, flushed before the next call: ``T <token>`` after ``record_turn``
  returned without logging an error (``E <token>`` if it logged one), ``F? <key> <value>``
  before and ``F <key> <value>`` after a ``remember``.
- ``window PATH``: dies right after ``record_turn`` committed a turn, before its rule capture.
- ``writer PATH INDEX TURNS``: one of the concurrent writers, with a reader thread.
- ``reader PATH STOPFILE``: recalls, explains and builds contexts until STOPFILE exists.
- ``fsize PATH LIMIT_BYTES``: writes under ``RLIMIT_FSIZE`` (SIGXFSZ ignored) until a write fails.
- ``locker PATH MODE``: holds a lock on the store until stdin closes.
- ``readonly PATH [USER_ID]``: drops root privileges (if any), then opens a read-only store
  (with ``open_user(dirname(PATH), USER_ID)`` when a user id is given).

Every role logs the ``elastimem`` logger to stderr as ``LEVEL message`` lines and ends with one
``RESULT {json}`` line on stdout when it gets that far.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import random
import resource
import signal
import sqlite3
import sys
import threading
import time
from typing import Any

from doubles import HostLLM, VecEmbedder
from helpers import raw_connect

import elastimem

out = sys.stdout
out.reconfigure(line_buffering=True)  # type: ignore[attr-defined]


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.errors = 0
        self.warnings = 0
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors += 1
        elif record.levelno >= logging.WARNING:
            self.warnings += 1
        line = f"{record.levelname} {record.getMessage()}"
        if record.levelno >= logging.WARNING:
            self.lines.append(line)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def setup_logging(level: int = logging.WARNING) -> Counter:
    handler = Counter()
    handler.setLevel(level)
    log = logging.getLogger("elastimem")
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    return handler


def emit(line: str) -> None:
    out.write(line + "\n")
    out.flush()


def result(**data: Any) -> None:
    emit("RESULT " + json.dumps(data, sort_keys=True))


# -- crash ------------------------------------------------------------------------------------


def crash(path: str, seed: int) -> None:
    logs = setup_logging()
    rnd = random.Random(seed)
    llm = HostLLM(delay=(0.002, 0.02), seed=seed)
    mem = elastimem.open(
        path,
        llm=llm,
        embedder=VecEmbedder(64),
        disable_builtin_embedder=True,
        tier_override="full",
        idle_consolidate_seconds=0.3,
    )
    emit("READY")
    names = ["Ada", "Bruno", "Chiara", "Dmitri", "Emeka", "Farah"]
    i = 0
    while True:
        i += 1
        token = f"tok{seed}x{i}"
        before = logs.errors
        friend, place = rnd.choice(names), rnd.choice(names)
        mem.record_turn(
            f"{token} my friend {friend} and I went hiking near {place}ville",
            f"{token} that sounds lovely, tell me more",
        )
        emit(("T " if logs.errors == before else "E ") + token)
        if i % 3 == 0:
            key, value = f"k{rnd.randrange(5)}", f"v{seed}-{i}"
            emit(f"F? {key} {value}")
            try:
                mem.remember(key, value)
                emit(f"F {key} {value}")
            except elastimem.ElastimemError as exc:
                emit(f"X remember {type(exc).__name__}: {exc}")
        if i % 7 == 0:
            mem.recall(rnd.choice(names) + " hiking")
        if i % 11 == 0:
            mem.report_evictions([(f"{token} evicted turn about {rnd.choice(names)}", "ok")])
        if i % 13 == 0:
            mem.end_session(wait=False)
        if i % 29 == 0:
            mem.add_lesson(f"lesson {i % 4}")


# -- concurrency ------------------------------------------------------------------------------


def writer(path: str, index: int, turns: int) -> None:
    logs = setup_logging()
    exceptions: list[str] = []
    mem = elastimem.open(
        path,
        llm=HostLLM(delay=(0.0, 0.003), seed=index),
        embedder=VecEmbedder(64),
        disable_builtin_embedder=True,
        tier_override="standard",
    )
    emit("READY")
    stop = threading.Event()
    recall_stats = {"calls": 0, "errors": 0, "latencies": []}

    def read_loop() -> None:
        rnd = random.Random(index)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                mem.recall(f"w{rnd.randrange(4)}t{rnd.randrange(turns)} garden", k=5)
                mem.facts()
            except Exception as exc:  # any raise is a finding
                recall_stats["errors"] += 1
                exceptions.append(f"reader thread: {type(exc).__name__}: {exc}")
            recall_stats["latencies"].append(time.perf_counter() - started)
            recall_stats["calls"] += 1
            time.sleep(0.005)

    reader = threading.Thread(target=read_loop, daemon=True)
    reader.start()
    latencies = []
    errors_logged_in_record_turn = 0
    for i in range(turns):
        token = f"w{index}t{i}"
        before = logs.errors
        started = time.perf_counter()
        mem.record_turn(f"{token} we talked about the garden and tomatoes", f"{token} noted")
        latencies.append(time.perf_counter() - started)
        if logs.errors != before:
            errors_logged_in_record_turn += 1
        if i % 25 == 0:
            try:
                mem.remember(f"shared_{i % 5}", f"writer {index} turn {i}")
            except Exception as exc:
                exceptions.append(f"remember: {type(exc).__name__}: {exc}")
    session_id = mem.session_id
    conn = raw_connect(path)  # a connection of the child's own, as another tool would open it
    try:
        ended = conn.execute("SELECT ended_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        my_sessions = [
            r[0]
            for r in conn.execute(
                "SELECT DISTINCT session_id FROM messages WHERE content LIKE ?",
                (f"w{index}t%",),
            )
        ]
    finally:
        conn.close()
    stop.set()
    reader.join(30)
    drained = mem.drain(60)
    mem.end_session(wait=True, timeout=30)
    mem.close()
    lat = sorted(latencies)
    rl = sorted(recall_stats["latencies"])
    result(
        index=index,
        session_id=session_id,
        session_open_at_end=bool(ended is not None and ended[0] is None),
        sessions_used=my_sessions,
        errors_logged=logs.errors,
        errors_logged_in_record_turn=errors_logged_in_record_turn,
        exceptions=exceptions,
        drained=drained,
        record_p50=lat[len(lat) // 2],
        record_p95=lat[int(len(lat) * 0.95)],
        record_max=lat[-1],
        recalls=recall_stats["calls"],
        recall_p95=rl[int(len(rl) * 0.95)] if rl else 0.0,
        recall_errors=recall_stats["errors"],
    )


def reader(path: str, stopfile: str) -> None:
    logs = setup_logging()
    mem = elastimem.open(path, embedder=VecEmbedder(64), disable_builtin_embedder=True)
    emit("READY")
    rnd = random.Random(os.getpid())
    calls = errors = 0
    latencies = []
    exceptions: list[str] = []
    while not os.path.exists(stopfile):
        started = time.perf_counter()
        try:
            query = f"w{rnd.randrange(4)}t{rnd.randrange(500)} tomatoes"
            choice = calls % 4
            if choice == 0:
                mem.recall(query)
            elif choice == 1:
                mem.build_context(query)
            elif choice == 2:
                mem.explain(query)
            else:
                mem.timeline("shared_1")
        except Exception as exc:
            errors += 1
            exceptions.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - started)
        calls += 1
        time.sleep(0.005)
    mem.close()
    lat = sorted(latencies)
    result(
        calls=calls,
        errors=errors,
        exceptions=exceptions[:5],
        errors_logged=logs.errors,
        p95=lat[int(len(lat) * 0.95)] if lat else 0.0,
    )


# -- faults -----------------------------------------------------------------------------------


def fsize(path: str, limit: int) -> None:
    logs = setup_logging()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    mem = elastimem.open(path, disable_builtin_embedder=True, tier_override="lite")
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    emit("READY")
    acknowledged = 0
    first_error = None
    remember_error = None
    for i in range(5000):
        before = logs.errors
        mem.record_turn(f"fsize{i} " + "lorem ipsum dolor " * 200, f"fsize{i} ok")
        if logs.errors != before:
            first_error = logs.lines[-1]
            break
        emit(f"T fsize{i}")
        acknowledged += 1
    remembered = 0
    for i in range(500):
        try:
            mem.remember(f"after_full_{i}", f"{i} " + "x" * 450)
        except Exception as exc:
            remember_error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
            break
        emit(f"F after_full_{i}")
        remembered += 1
    reads_ok = True
    try:
        mem.recall("lorem ipsum")
        mem.facts()
    except Exception as exc:
        reads_ok = False
        remember_error = (remember_error or "") + f" | read failed: {exc}"
    close_error = None
    try:
        mem.close()
    except Exception as exc:
        close_error = f"{type(exc).__name__}: {exc}"
    result(
        acknowledged=acknowledged,
        remembered=remembered,
        first_error=first_error,
        remember_error=remember_error,
        reads_ok=reads_ok,
        close_error=close_error,
        log_lines=logs.lines[-10:],
    )


def locker(path: str, mode: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    if mode == "exclusive":
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("UPDATE meta SET value = value WHERE key = 'created_at'")
        conn.execute("COMMIT")  # the exclusive file lock stays held in this locking mode
        conn.execute("BEGIN EXCLUSIVE")
    else:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE meta SET value = value WHERE key = 'created_at'")
    emit("READY")
    sys.stdin.read()  # hold until the parent closes our stdin
    conn.execute("ROLLBACK")
    conn.close()


def readonly(path: str, user_id: str | None = None) -> None:
    # Import every submodule first: after dropping root the interpreter's files may be
    # unreadable (a root-only pyenv), so nothing may be imported lazily later.
    for module in pkgutil.iter_modules(elastimem.__path__):
        if module.name not in ("mcp_server", "cli"):
            importlib.import_module(f"elastimem.{module.name}")

    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    logs = setup_logging()
    report: dict[str, Any] = {"uid": os.geteuid()}
    try:
        if user_id is None:
            mem = elastimem.open(path, disable_builtin_embedder=True)
        else:
            mem = elastimem.open_user(os.path.dirname(path), user_id, disable_builtin_embedder=True)
    except Exception as exc:
        report["open_error"] = f"{type(exc).__name__}: {exc}"
        result(**report)
        return
    try:
        report["facts"] = mem.facts()
        report["recall"] = [h.text for h in mem.recall("marmalade")]
        report["context_has_fact"] = "marmalade" in mem.build_context("marmalade please").render()
        report["timeline_key"] = mem.timeline("breakfast").key
        report["sessions"] = len(mem.sessions())
        report["stats_messages"] = mem.stats()["messages"]
        report["fts_enabled"] = mem.fts_enabled
    except Exception as exc:
        report["read_error"] = f"{type(exc).__name__}: {exc}"
    before = logs.errors
    try:
        mem.record_turn("a new turn about marmalade", "noted")
        report["record_turn_raised"] = None
    except Exception as exc:
        report["record_turn_raised"] = f"{type(exc).__name__}: {exc}"
    report["record_turn_errors"] = [line for line in logs.lines if line.startswith("ERROR")]
    report["record_turn_logged"] = logs.errors > before
    try:
        mem.remember("breakfast", "porridge")
        report["remember_error"] = None
    except Exception as exc:
        report["remember_error"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    started = time.monotonic()
    try:
        mem.close()
        report["close_error"] = None
    except Exception as exc:
        report["close_error"] = f"{type(exc).__name__}: {exc}"
    report["close_seconds"] = round(time.monotonic() - started, 3)
    report["log_lines"] = logs.lines[-10:]
    result(**report)


def window(path: str) -> None:
    """Die (os._exit, like a kill) right after record_turn stored the turn, before anything
    else it does: the rule capture that follows the turn's transaction."""
    setup_logging()
    mem = elastimem.open(
        path,
        llm=HostLLM(),
        embedder=VecEmbedder(64),
        disable_builtin_embedder=True,
        tier_override="full",
    )
    mem.record_turn("warm-up turn about the garden and the tomatoes", "ok")
    mem.drain(30)

    def die(*args: Any, **kwargs: Any) -> None:
        os._exit(3)

    from elastimem.session import SessionState

    SessionState._store_rule_captures = die  # type: ignore[method-assign]
    emit("READY")
    mem.record_turn("My name is Ada and my friend Bruno lives in Lisbon", "Nice to meet you")
    os._exit(4)  # not reached when the rule capture runs


def zygote() -> None:
    for line in sys.stdin:
        command, *args = line.split()
        if command == "spawn":
            seed, path, out_path, err_path = args
            pid = os.fork()
            if pid == 0:
                try:
                    stdout = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    stderr = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(stdout, 1)
                    os.dup2(stderr, 2)
                    crash(path, int(seed))
                finally:
                    os._exit(1)
            emit(f"PID {pid}")
        elif command == "reap":
            _, status = os.waitpid(int(args[0]), 0)
            emit(f"REAPED {status}")
        elif command == "quit":
            return


def main() -> None:
    role, *args = sys.argv[1:]
    if role == "zygote":
        zygote()
    elif role == "window":
        window(args[0])
    elif role == "crash":
        crash(args[0], int(args[1]))
    elif role == "writer":
        writer(args[0], int(args[1]), int(args[2]))
    elif role == "reader":
        reader(args[0], args[1])
    elif role == "fsize":
        fsize(args[0], int(args[1]))
    elif role == "locker":
        locker(args[0], args[1])
    elif role == "readonly":
        readonly(*args[:2])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
