"""Private on disk (issue 20): every file elastimem makes for a store is 0600 from the moment
it exists and every folder it makes on the way is 0700, under a umask of 022; folders that
already exist keep their mode; an existing store others may read is named in one warning."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import StoreError
from elastimem.storage.sqlite import database as db
from elastimem.storage.sqlite import files

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common umask, under which files are made 0644 and folders 0755 by default."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A folder that exists with the usual 0755: it must keep it."""
    folder = tmp_path / "existing"
    folder.mkdir()
    os.chmod(folder, 0o755)
    return folder


def shared_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "other accounts" in r.getMessage()]


def test_a_new_store_its_side_files_and_its_folders_are_private(
    umask_022: None, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = base / "a" / "b" / "c" / "memory.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("diagnosis", "asthma")
        mem.record_turn("My bank is Northwind.", "Noted.")
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert wal.exists() and shm.exists()  # open in WAL mode, written
        assert (mode(path), mode(wal), mode(shm)) == (0o600, 0o600, 0o600)
        assert mem.stats()["file_mode"] == "0600"
    assert [mode(base / p) for p in ("a", "a/b", "a/b/c")] == [0o700, 0o700, 0o700]
    assert mode(base) == 0o755  # the user's folder keeps its mode
    assert shared_warnings(caplog) == []
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"diagnosis": "asthma"}  # the empty file became a real store
    assert shared_warnings(caplog) == []


@pytest.mark.plain_file  # watches the sqlite3 module open the file
def test_the_file_is_private_before_sqlite_opens_it(
    umask_022: None, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = base / "memory.db"
    seen: list[int | None] = []
    real_connect = sqlite3.connect

    def connect(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if str(database) == str(path):
            seen.append(mode(path) if path.exists() else None)
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True):
        pass
    assert seen and seen[0] == 0o600  # there when SQLite first opens it, already 0600


def test_an_existing_folder_on_the_way_keeps_its_mode(umask_022: None, base: Path) -> None:
    mine = base / "mine"
    mine.mkdir()
    os.chmod(mine, 0o750)
    with elastimem.Elastimem(str(mine / "new" / "m.db"), disable_builtin_embedder=True):
        pass
    assert (mode(base), mode(mine), mode(mine / "new")) == (0o755, 0o750, 0o700)
    assert mode(mine / "new" / "m.db") == 0o600


def test_a_strict_umask_still_leaves_a_usable_private_store(base: Path) -> None:
    old = os.umask(0o277)  # would take the owner's own write bit
    try:
        path = base / "strict" / "m.db"
        with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
            mem.remember("pet", "cat")
    finally:
        os.umask(old)
    assert (mode(path.parent), mode(path)) == (0o700, 0o600)


def test_an_existing_shared_store_is_named_once_and_left_as_it_is(
    umask_022: None, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = base / "old.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("pet", "cat")
    os.chmod(path, 0o644)  # as stores were made before
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        for _ in range(2):
            with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
                assert mem.stats()["file_mode"] == "0644"
    warnings = shared_warnings(caplog)
    assert len(warnings) == 1
    assert str(path) in warnings[0] and f"chmod 600 {path}" in warnings[0]
    assert "read" in warnings[0] and "write" not in warnings[0]
    assert mode(path) == 0o644  # not changed behind the user's back


def test_a_group_writable_store_opened_read_only_is_named_too(
    umask_022: None, base: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = base / "ro.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("pet", "cat")
    os.chmod(path, 0o664)
    # A store this process may not write opens read-only; root writes any file, so the
    # refusal is simulated.
    monkeypatch.setattr(db.opening, "cannot_write", lambda resolved: True)
    with (
        caplog.at_level(logging.WARNING, logger="elastimem"),
        elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem,
    ):
        assert mem.facts() == {"pet": "cat"}
        with pytest.raises(StoreError, match="read-only"):
            mem.remember("pet", "dog")
    (warning,) = shared_warnings(caplog)
    assert "read and write" in warning and f"chmod 600 {path}" in warning
    assert mode(path) == 0o664


def test_a_memory_store_has_no_file_mode() -> None:
    with elastimem.Elastimem(":memory:", disable_builtin_embedder=True) as mem:
        assert mem.stats()["file_mode"] is None


def _damage_meta_page(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'meta'").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xff" * page_size)


@pytest.mark.plain_file  # an encrypted store is never set aside (test_encryption.py)
@pytest.mark.parametrize("old_mode", [0o600, 0o644])
def test_set_aside_copies_of_a_corrupt_store_are_private(
    umask_022: None, base: Path, old_mode: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A store made private keeps 0600 through the rename; one made before (0644), and the
    side files next to it, are set aside private too. The fresh store is private."""
    path = base / "memory.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("name", "Ada")
    _damage_meta_page(path)
    os.chmod(path, old_mode)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        side.write_bytes(b"")
        os.chmod(side, old_mode)
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {}
        assert mem.stats()["file_mode"] == "0600"
    aside = sorted(p for p in base.iterdir() if ".corrupt-" in p.name)
    assert len(aside) == 3
    assert {p.name: mode(p) for p in aside} == {p.name: 0o600 for p in aside}
    assert mode(path) == 0o600
    assert shared_warnings(caplog) == []


def test_an_export_is_private(umask_022: None, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renamed: list[tuple[str, int]] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        renamed.append((os.path.basename(src), mode(src)))
        real_replace(src, dst)

    with elastimem.Elastimem(str(base / "m.db"), disable_builtin_embedder=True) as mem:
        mem.remember("salary", "90k")
        target = base / "backup.jsonl"
        with monkeypatch.context() as patched:
            patched.setattr(os, "replace", replace)
            mem.export(target)
        assert mode(target) == 0o600
    # The temporary file it was written to was private the whole time, too.
    assert [(name.startswith(".elastimem-export-"), m) for name, m in renamed] == [(True, 0o600)]
    assert sorted(p.name for p in base.iterdir() if p.name.startswith(".elastimem")) == []
    with elastimem.Elastimem(str(base / "copy.db"), disable_builtin_embedder=True) as other:
        other.import_(target)
        assert other.facts() == {"salary": "90k"}
    assert mode(base / "copy.db") == 0o600


def test_open_user_makes_every_missing_level_private(umask_022: None, base: Path) -> None:
    root = base / "tenants" / "users"
    with elastimem.open_user(root, "alice", disable_builtin_embedder=True) as alice:
        alice.remember("pet", "cat")
    assert (mode(base / "tenants"), mode(root), mode(root / "alice.db")) == (0o700, 0o700, 0o600)
    assert mode(base) == 0o755


def test_make_private_folders_leaves_existing_levels_and_reports_a_file_in_the_way(
    umask_022: None, base: Path
) -> None:
    (base / "file").write_text("x")
    with pytest.raises(OSError):
        files.make_private_folders(base / "file" / "sub")
    files.make_private_folders(base)  # exists: nothing to do
    assert mode(base) == 0o755


# -- real processes under umask 022 -------------------------------------------------------------


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    found = shutil.which("elastimem", path=str(Path(sys.executable).parent))
    command = [found] if found else [sys.executable, "-m", "elastimem.cli"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **env},
        timeout=120,
        stdin=subprocess.DEVNULL,
        umask=0o022,
    )


def test_the_default_cli_store_and_its_folders_are_private(base: Path) -> None:
    home = base / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    data = home / ".local" / "share"  # the platform's data folder (issue 27)
    env = {"HOME": str(home), "XDG_DATA_HOME": str(data)}
    done = cli("remember", "allergy", "peanuts", env=env)
    assert done.returncode == 0, done.stderr.decode()
    store = data / "elastimem" / "memory.db"
    made = (home / ".local", data, store.parent)
    assert [mode(p) for p in (*made, store)] == [0o700, 0o700, 0o700, 0o600]
    assert mode(home) == 0o755
    done = cli("stats", env=env)
    assert done.returncode == 0, done.stderr.decode()
    stats = json.loads(done.stdout)
    assert stats["file_mode"] == "0600" and stats["path"] == str(store)
    assert b"other accounts" not in done.stderr


def test_the_demo_store_is_private(base: Path) -> None:
    kept = base / "demo" / "nested" / "demo.db"
    done = cli("demo", "--no-embedder", "--db", str(kept), env={})
    assert done.returncode == 0, done.stderr.decode()
    assert (mode(base / "demo"), mode(kept.parent), mode(kept)) == (0o700, 0o700, 0o600)
    assert mode(base) == 0o755


def test_a_shared_store_is_named_by_the_cli(base: Path) -> None:
    path = base / "shared.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("pet", "cat")
    os.chmod(path, 0o644)
    done = cli("--db", str(path), "stats", env={})
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["file_mode"] == "0644"
    err = done.stderr.decode()
    assert err.count("other accounts") == 1 and f"chmod 600 {path}" in err
    assert mode(path) == 0o644


def test_a_graph_page_written_by_the_cli_is_private(base: Path) -> None:
    path = base / "graph.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.remember("pet", "cat")
    page = base / "graph.html"
    done = cli("--db", str(path), "graph", "--as", "html", "-o", str(page), env={})
    assert done.returncode == 0, done.stderr.decode()
    assert mode(page) == 0o600 and page.read_text(encoding="utf-8").startswith("<!")
    kept = base / "kept.dot"
    kept.write_text("old", encoding="utf-8")
    os.chmod(kept, 0o644)
    done = cli("--db", str(path), "graph", "--as", "dot", "-o", str(kept), env={})
    assert done.returncode == 0, done.stderr.decode()
    assert mode(kept) == 0o644 and "digraph elastimem" in kept.read_text(encoding="utf-8")
