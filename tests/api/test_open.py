"""What opening a path may do to it (§4.5 step 1–2): refuse a file that is not SQLite without
touching it, set aside only a real SQLite file that fails the probe (and say where), and with
``create=False`` open only an existing store, creating nothing."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

import elastimem
from elastimem.errors import ConfigError, StoreError
from elastimem.storage.sqlite import database as db


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` with its bytes and modification time (ns)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def open_store(path: Path, **kw: object) -> elastimem.Elastimem:
    return elastimem.open(str(path), disable_builtin_embedder=True, **kw)


NOT_SQLITE = {
    "text": b"my notes\nbuy milk\n" * 40,
    "shorter than the header": b"SQLite",
    "one byte": b"\n",
    "another format": b"SQLite format 2\x00" + b"\x00" * 200,
    "encrypted or random": bytes((i * 131 + 7) % 256 for i in range(4096)),
}


@pytest.mark.parametrize("create", [True, False])
@pytest.mark.parametrize("content", NOT_SQLITE.values(), ids=NOT_SQLITE.keys())
def test_a_file_that_is_not_sqlite_is_refused_untouched(
    tmp_path: Path, content: bytes, create: bool
) -> None:
    """It was renamed to notes.db.corrupt-… and an empty store created in its place."""
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = snapshot(tmp_path)
    if content == NOT_SQLITE["encrypted or random"]:
        # Whole pages without the header: maybe an encrypted store (issue 31), so the error
        # asks for its key.
        expected = "is encrypted \\(or is not an SQLite file\\) and no key was given"
    else:
        expected = "is not an elastimem store \\(not an SQLite file\\)"
    with pytest.raises(StoreError, match=expected):
        open_store(path, create=create)
    assert snapshot(tmp_path) == before  # no rename, no -wal/-shm, same bytes and mtime


def test_the_refusal_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("hello")
    with pytest.raises(StoreError) as info:
        open_store(path)
    message = str(info.value)
    assert str(path) in message and "left unchanged" in message
    assert "pass the path of a store" in message


def test_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "store.db"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            open_store(fifo)
        except BaseException as exc:
            outcome.append(exc)

    opener = threading.Thread(target=attempt, daemon=True)
    opener.start()
    opener.join(30)
    assert not opener.is_alive(), "opening a FIFO blocked"
    assert len(outcome) == 1 and isinstance(outcome[0], StoreError)
    assert "not a regular file" in str(outcome[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]


def test_a_damaged_sqlite_file_is_set_aside_and_the_store_says_where(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    damaged = db.SQLITE_HEADER + b"\xff" * 4000
    path.write_bytes(damaged)
    with open_store(path) as mem:
        assert mem.set_aside is not None
        aside = Path(mem.set_aside)
        assert aside.parent == tmp_path and aside.name.startswith("memory.db.corrupt-")
        assert aside.read_bytes() == damaged
        mem.remember("name", "Ada")  # a fresh store at the path
    with open_store(path) as mem:
        assert mem.set_aside is None and mem.facts() == {"name": "Ada"}
    with pytest.raises(AttributeError):
        mem.set_aside = "x"  # type: ignore[misc]


def test_create_false_leaves_a_damaged_store_where_it_is(tmp_path: Path) -> None:
    """Setting it aside would leave no store to open: a read must not rename files."""
    path = tmp_path / "memory.db"
    path.write_bytes(db.SQLITE_HEADER + b"\xff" * 4000)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match="is a damaged store .* left unchanged"):
        open_store(path, create=False)
    assert snapshot(tmp_path) == before


def test_an_empty_file_becomes_a_store_as_sqlite3_makes_it_one(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.write_bytes(b"")
    with open_store(path) as mem:
        assert mem.set_aside is None
        mem.remember("color", "teal")
    assert path.read_bytes().startswith(db.SQLITE_HEADER)
    assert [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name] == []


# -- create=False ------------------------------------------------------------------------------


def test_create_false_on_a_missing_path_creates_nothing(tmp_path: Path) -> None:
    for path in (tmp_path / "typo.db", tmp_path / "no" / "such" / "folder" / "typo.db"):
        with pytest.raises(StoreError, match="there is no elastimem store at") as info:
            open_store(path, create=False)
        assert str(path) in str(info.value) and "create=True" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no folder, no file, no -wal/-shm


def test_create_false_expands_the_tilde_before_looking(isolated_env: Path) -> None:
    with pytest.raises(StoreError, match=str(isolated_env / "deep" / "m.db")):
        open_store(Path("~/deep/m.db"), create=False)
    assert not (isolated_env / "deep").exists()
    with open_store(Path("~/m.db")) as mem:
        mem.remember("pet", "cat")
    with open_store(Path("~/m.db"), create=False) as mem:
        assert mem.facts() == {"pet": "cat"}


@pytest.mark.parametrize("kind", ["empty file", "sqlite file without tables"])
def test_create_false_refuses_a_file_that_holds_no_store_yet(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "blank.db"
    if kind == "empty file":
        path.write_bytes(b"")
    else:
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA user_version = 7")  # writes the header, no table
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match="holds no elastimem store yet"):
        open_store(path, create=False)
    assert snapshot(tmp_path) == before
    with open_store(path) as mem:  # the default creates it, as before
        mem.remember("a", "b")


def test_create_false_opens_an_existing_store_and_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with open_store(path) as mem:
        mem.remember("city", "Lyon")
    with open_store(path, create=False) as mem:
        assert mem.facts() == {"city": "Lyon"}
        assert mem.remember("city", "Nantes") == (True, "stored")  # it is a normal store
    with open_store(":memory:", create=False) as mem:  # nothing on disk to create
        assert mem.facts() == {}


@pytest.mark.parametrize("bad", [None, "no", 0, 1])
def test_create_must_be_a_bool(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="create="):
        open_store(tmp_path / "m.db", create=bad)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url", ["postgresql://localhost/memory", "postgres://u@h/db", "POSTGRESQL://h/db"]
)
@pytest.mark.parametrize("create", [True, False])
def test_a_postgresql_address_needs_a_user_and_creates_no_file(
    url: str, create: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was taken as a relative path: a folder "postgresql:" appeared in the working folder.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="pass user_id="):
        elastimem.open(url, create=create, disable_builtin_embedder=True)
    with pytest.raises(ConfigError, match="user_id="):
        elastimem.open(url, user_id="../x", create=create, disable_builtin_embedder=True)
    with pytest.raises(ConfigError, match="user_id="):
        elastimem.open_user(url, "", disable_builtin_embedder=True)
    assert not any(tmp_path.iterdir())


def test_an_unreachable_postgresql_server_is_a_clear_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.chdir(tmp_path)
    # Port 1 on the loopback: nothing listens there, so the connection is refused at once.
    url = "postgresql://app:s3cret-pw@127.0.0.1:1/memory?connect_timeout=2"
    with pytest.raises(StoreError) as raised:
        elastimem.open(url, user_id="alice", disable_builtin_embedder=True)
    assert "127.0.0.1" in str(raised.value)
    assert "s3cret-pw" not in str(raised.value)  # the password is never shown
    assert not any(tmp_path.iterdir())


def test_another_url_is_refused_as_no_file_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="is an address, not a file path"):
        elastimem.open("sqlite:///memory.db", disable_builtin_embedder=True)
    assert not any(tmp_path.iterdir())
