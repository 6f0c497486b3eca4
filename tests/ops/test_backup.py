"""``elastimem backup``, ``restore`` and ``verify``: real store files written by real writer
processes while the backup runs, the real CLI in a subprocess, and a user on the test
session's PostgreSQL server."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import elastimem

WRITERS = 4

# A writer process: records turns until the stop file appears, and after each
# record_turn that returned without logging an error, appends the turn's number to its
# acknowledgement file (flushed, so the test reads only acknowledged turns).
WRITER = r"""
import logging, os, sys
import elastimem
path, name, acks, stop = sys.argv[1:5]
failed = []
class Fail(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.ERROR:
            failed.append(record.getMessage())
logging.getLogger("elastimem").addHandler(Fail())
with elastimem.open(path, disable_builtin_embedder=True) as mem, open(acks, "a") as out:
    i = 0
    while not os.path.exists(stop):
        mem.record_turn(f"{name} says turn {i} about parsnips", f"{name} reply {i}")
        if failed:
            sys.exit("record_turn failed: " + failed[0])
        out.write(f"{i}\n")
        out.flush()
        i += 1
"""


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", *args], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, done.stderr
    return done


def export_rows(store_file: Path, tmp: Path) -> dict[str, list[str]]:
    """The rows of a store's export, per table, sorted (a copy is opened, never the file)."""
    copy = tmp / f"copy-{os.urandom(4).hex()}.db"
    assert cli("--db", str(copy), "restore", str(store_file)).returncode == 0
    out = tmp / f"export-{os.urandom(4).hex()}.jsonl"
    with elastimem.open(copy, disable_builtin_embedder=True) as mem:
        mem.export(out)
    return rows_of(out)


def rows_of(export: Path) -> dict[str, list[str]]:
    """An export's memories per table. Not ``meta`` (the store's own bookkeeping) nor
    ``jobs``: a store opened to read it runs the background jobs a backup carried."""
    tables: dict[str, list[str]] = {}
    for line in export.read_text().splitlines()[1:]:
        obj = json.loads(line)
        if "row" in obj and obj["table"] not in ("meta", "jobs"):
            tables.setdefault(obj["table"], []).append(json.dumps(obj["row"], sort_keys=True))
    return {table: sorted(rows) for table, rows in tables.items()}


def acknowledged(acks: list[Path]) -> dict[str, set[int]]:
    return {p.stem: {int(x) for x in p.read_text().split()} for p in acks}


@pytest.mark.slow
def test_backup_while_four_processes_write_keeps_every_acknowledged_turn(tmp_path: Path) -> None:
    store = tmp_path / "memory.db"
    with elastimem.open(store, disable_builtin_embedder=True) as mem:
        mem.remember("favorite_color", "teal")
    stop = tmp_path / "stop"
    acks = [tmp_path / f"w{n}.acks" for n in range(WRITERS)]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store), a.stem, str(a), str(stop)],
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for a in acks
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(a.exists() and len(a.read_text().split()) >= 15 for a in acks):
            assert time.monotonic() < deadline, "the writers did not get going"
            assert all(w.poll() is None for w in writers), [w.stderr.read() for w in writers]  # type: ignore[union-attr]
            time.sleep(0.1)
        before = acknowledged(acks)  # every turn acknowledged before the backup began
        backup = tmp_path / "backups" / "memory-1.db"
        shown = json.loads(cli("--db", str(store), "backup", str(backup)).stdout)
        during = acknowledged(acks)
        assert all(w.poll() is None for w in writers)  # they wrote all along
    finally:
        stop.touch()
        for w in writers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
    assert shown["format"] == "sqlite" and shown["bytes"] == backup.stat().st_size
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # private, as the store is
    assert sum(map(len, during.values())) > sum(map(len, before.values()))

    verified = cli("verify", str(backup))
    assert json.loads(verified.stdout)["ok"] is True

    with sqlite3.connect(f"file:{backup}?mode=ro", uri=True) as conn:
        held = {r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user'")}
    for name, turns in before.items():
        missing = [i for i in turns if f"{name} says turn {i} about parsnips" not in held]
        assert not missing, f"{name}: acknowledged turns missing from the backup: {missing}"

    # Restore into a new file: the same export as the backup (the source at that moment).
    restored = tmp_path / "restored.db"
    summary = json.loads(cli("--db", str(restored), "restore", str(backup)).stdout)
    assert summary["messages"] == len(held) * 2
    assert export_rows(restored, tmp_path) == export_rows(backup, tmp_path)
    assert stat.S_IMODE(restored.stat().st_mode) == 0o600


def _store_with_memories(path: Path) -> None:
    with elastimem.open(path, disable_builtin_embedder=True) as mem:
        for i in range(5):
            mem.record_turn(f"my cat Juniper likes tuna {i}", f"noted {i}")
        mem.remember("pet", "Juniper")
        mem.add_lesson("answer briefly")


def test_restore_refuses_a_store_holding_memories_unless_forced(tmp_path: Path) -> None:
    source, other = tmp_path / "a.db", tmp_path / "b.db"
    _store_with_memories(source)
    with elastimem.open(other, disable_builtin_embedder=True) as mem:
        mem.remember("pet", "a goldfish")
    backup = tmp_path / "a-backup.db"
    cli("--db", str(source), "backup", str(backup))
    refused = cli("--db", str(other), "restore", str(backup), check=False)
    assert refused.returncode == 1 and "already holds memories" in refused.stderr
    with elastimem.open(other, disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"pet": "a goldfish"}  # untouched
    cli("--db", str(other), "restore", "--force", str(backup))
    with elastimem.open(other, disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"pet": "Juniper"}
    again = cli("--db", str(source), "backup", str(backup), check=False)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_verify_names_a_damaged_vector_and_keyword_index(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with elastimem.open(store, embedder=lambda texts: [[1.0, 0.0, 0.0]] * len(texts),
                        disable_builtin_embedder=True) as mem:  # fmt: skip
        for i in range(4):
            mem.record_turn(f"the parsnip harvest {i}", "ok")
        assert mem.drain(10)
    assert json.loads(cli("--db", str(store), "verify").stdout)["ok"] is True
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE chunks SET embedding = x'0000' WHERE id = 1")
        conn.execute(
            "INSERT INTO chunks_fts(chunks_fts, rowid, text) "
            "SELECT 'delete', id, text FROM chunks WHERE id = 2"
        )
        conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (2, 'turnips instead')")
    done = cli("verify", str(store), check=False)
    assert done.returncode == 1
    assert "chunk vector(s) do not match" in done.stderr
    assert "keyword index chunks_fts does not match" in done.stderr
    missing = cli("verify", str(tmp_path / "nothing.db"), check=False)
    assert missing.returncode == 1 and "there is no file" in missing.stderr


def _second_database(postgres_server: Any) -> str:
    """Another database with the schema, as the application role: the server to restore to."""
    import psycopg

    from elastimem.storage.postgres import migrations

    admin_url = postgres_server.create_database("elastimem_restore")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the restore test database")
    return str(postgres_server.app_url(admin_url))


def test_postgres_backup_is_an_export_that_restores_anywhere(
    tmp_path: Path, postgres_url: str, postgres_server: Any
) -> None:
    user = f"bk-{os.urandom(4).hex()}"
    other_server = _second_database(postgres_server)
    with elastimem.open(postgres_url, user_id=user, disable_builtin_embedder=True) as mem:
        for i in range(3):
            mem.record_turn(f"I water the ferns on day {i}", "good")
        mem.remember("hobby", "ferns")
    with elastimem.open(postgres_url, user_id=user, disable_builtin_embedder=True) as mem:
        source_rows = _export(mem, tmp_path / "source.jsonl")  # the session ended: as backed up
    backup = tmp_path / "user.jsonl"
    shown = json.loads(cli("--db", postgres_url, "--user", user, "backup", str(backup)).stdout)
    assert shown["format"] == "export" and stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert json.loads(cli("verify", str(backup)).stdout)["ok"] is True
    assert json.loads(cli("--db", postgres_url, "--user", user, "verify").stdout)["ok"]

    # The user's rows, restored on another server (an export names its user: only theirs).
    cli("--db", other_server, "--user", user, "restore", str(backup))
    with elastimem.open(other_server, user_id=user, disable_builtin_embedder=True) as mem:
        assert _export(mem, tmp_path / "other.jsonl") == source_rows
    refused = cli("--db", postgres_url, "--user", user, "restore", str(backup), check=False)
    assert refused.returncode == 1 and "already holds memories" in refused.stderr

    as_file = tmp_path / "from-server.db"
    cli("--db", str(as_file), "--user", user, "restore", str(backup))
    with elastimem.open(as_file, user_id=user, disable_builtin_embedder=True) as mem:
        assert _export(mem, tmp_path / "file.jsonl") == source_rows


def _export(mem: Any, path: Path) -> dict[str, list[str]]:
    mem.export(path)
    return rows_of(path)


def test_an_encryption_key_is_passed_through_and_refused_clearly(tmp_path: Path) -> None:
    store = tmp_path / "k.db"
    _store_with_memories(store)
    env = {**os.environ, "STORE_KEY": "correct horse battery staple"}
    done = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", "--db", str(store), "backup",
         str(tmp_path / "k-backup.db"), "--key-env", "STORE_KEY"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    # A key for a plain store (issue 31 wired the key in): refused, nothing written.
    assert done.returncode == 1 and "cannot be read with the key given" in done.stderr
    assert "correct horse" not in done.stderr and not (tmp_path / "k-backup.db").exists()
    unset = cli("--db", str(store), "verify", "--key-env", "NO_SUCH_VARIABLE", check=False)
    assert unset.returncode == 2 and "NO_SUCH_VARIABLE" in unset.stderr
