"""Per-user stores (SPEC §1.3): ids that could escape the root are rejected, files are tagged."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

import elastimem
from elastimem import ConfigError, StoreError
from elastimem.storage.sqlite import database as db_module
from elastimem.users import check_user_id
from tests.rows import connect, file_connection

ESCAPING_IDS = [
    "",
    ".",
    "..",
    "../x",
    "..\\x",
    "a/b",
    "a\\b",
    "/etc/passwd",
    "/tmp/x",
    "C:\\Users\\x",
    "C:x",
    "~",
    "~root",
    ".hidden",
    "-rf",
    "_x",
    "a\x00b",
    "\x00",
    "bob\n",
    "bob ",
    " bob",
    "a b",
    "bøb",
    "ｂｏｂ",  # fullwidth letters
    "a" * 129,
    "a*",
    "a?",
    'a"b',
    "a:b",
    "a|b",
    "a<b",
]
DEVICE_IDS = [
    "con",
    "CON",
    "Con",
    "prn",
    "aux",
    "NUL",
    "nul.txt",
    "NuL.db.bak",
    "com1",
    "COM9.json",
    "lpt1",
    "LpT9.tar.gz",
    "aux.",
]
VALID_IDS = ["bob", "Bob.Smith-1_2", "7", "a" * 128, "console", "com10", "com0", "lpt", "a..b"]


@pytest.mark.parametrize("user_id", ESCAPING_IDS + DEVICE_IDS)
def test_unsafe_ids_are_rejected_before_any_file_access(tmp_path: Path, user_id: str) -> None:
    root = tmp_path / "users"
    with pytest.raises(ConfigError):
        elastimem.open_user(root, user_id)
    assert not root.exists() or list(root.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["users"])


@pytest.mark.parametrize("user_id", [None, 5, 1.5, b"bob", ["bob"], Path("bob"), True])
def test_non_string_ids_are_rejected(tmp_path: Path, user_id: object) -> None:
    with pytest.raises(ConfigError):
        elastimem.open_user(tmp_path, user_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("user_id", VALID_IDS)
def test_valid_ids_pass_the_check(user_id: str) -> None:
    assert check_user_id(user_id) == user_id


def test_config_error_is_also_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        elastimem.open_user(tmp_path, "..")


@pytest.mark.parametrize("root", ["", "a\x00b", 5, None])
def test_bad_roots_are_rejected(root: object) -> None:
    with pytest.raises(ConfigError):
        elastimem.open_user(root, "bob")  # type: ignore[arg-type]


def test_root_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        elastimem.open_user(blocker, "bob")


def test_opens_one_file_per_user_in_a_private_root(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "users"
    old_umask = os.umask(0o022)
    try:
        with elastimem.open_user(root, "alice", disable_builtin_embedder=True) as alice:
            alice.remember("favorite_color", "teal")
            assert Path(alice.path) == (root / "alice.db").resolve()
        with elastimem.open_user(root, "bob", disable_builtin_embedder=True) as bob:
            assert bob.facts() == {}
    finally:
        os.umask(old_umask)
    if sys.platform != "win32":
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert sorted(p.name for p in root.glob("*.db")) == ["alice.db", "bob.db"]
    with elastimem.open_user(root, "alice", disable_builtin_embedder=True) as again:
        assert again.facts() == {"favorite_color": "teal"}


def test_existing_root_keeps_its_mode(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with elastimem.open_user(root, "carol", disable_builtin_embedder=True):
        pass
    if sys.platform != "win32":
        assert stat.S_IMODE(root.stat().st_mode) == 0o755


def test_user_id_is_recorded_in_meta(tmp_path: Path) -> None:
    with elastimem.open_user(tmp_path, "dave", disable_builtin_embedder=True):
        pass
    conn = file_connection(tmp_path / "dave.db")
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'user_id'").fetchone()
    finally:
        conn.close()
    assert row == ("dave",)


def test_a_copied_file_is_refused_under_another_id(tmp_path: Path) -> None:
    with elastimem.open_user(tmp_path, "erin", disable_builtin_embedder=True) as erin:
        erin.remember("secret", "erin's")
    shutil.copy(tmp_path / "erin.db", tmp_path / "frank.db")
    before = (tmp_path / "frank.db").read_bytes()
    with pytest.raises(ConfigError, match="belongs to user 'erin'"):
        elastimem.open_user(tmp_path, "frank", disable_builtin_embedder=True)
    # Refused before opening: the file was not touched, no side files were created.
    assert (tmp_path / "frank.db").read_bytes() == before
    assert not (tmp_path / "frank.db-wal").exists()


def test_a_mismatch_found_after_opening_closes_the_store(tmp_path: Path) -> None:
    # A plain store (no meta.user_id yet) claimed by one id, then tampered with.
    gina = elastimem.open_user(tmp_path, "gina", disable_builtin_embedder=True)
    with connect(gina) as conn:
        conn.execute("UPDATE meta SET value = 'henry' WHERE key = 'user_id'")
    gina.close()
    with pytest.raises(ConfigError, match="belongs to user 'henry'"):
        elastimem.open_user(tmp_path, "gina", disable_builtin_embedder=True)
    # The store was closed again: another open succeeds at once with the right id.
    (tmp_path / "gina.db").rename(tmp_path / "henry.db")
    with elastimem.open_user(tmp_path, "henry", disable_builtin_embedder=True) as henry:
        assert henry.facts() == {}


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_a_symlink_under_the_root_cannot_lead_outside(tmp_path: Path) -> None:
    root = tmp_path / "users"
    root.mkdir()
    outside = tmp_path / "outside.db"
    (root / "ivan.db").symlink_to(outside)
    with pytest.raises(ConfigError, match="escape"):
        elastimem.open_user(root, "ivan", disable_builtin_embedder=True)
    assert not outside.exists()


def test_options_pass_through_and_bad_options_are_config_errors(tmp_path: Path) -> None:
    with elastimem.open_user(
        tmp_path, "judy", disable_builtin_embedder=True, context_tokens=8192
    ) as judy:
        assert judy.config.context_tokens == 8192
    with pytest.raises(ConfigError, match="context_token"):
        elastimem.open_user(tmp_path, "judy", context_token=1)


@pytest.mark.parametrize("tagged", [True, False])
def test_a_read_only_store_opens_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tagged: bool
) -> None:
    """It used to fail writing ``meta.user_id``; now reads work and writes raise the store's
    read-only error. Permission bits bind nobody as root, so there the check that reads them
    is forced; tests/reliability/test_faults.py runs the real thing as an unprivileged child."""
    if tagged:
        with elastimem.open_user(tmp_path, "kate", disable_builtin_embedder=True) as kate:
            kate.remember("tea", "earl grey")
    else:  # a plain store moved under the root, never opened through open_user
        with elastimem.Elastimem(tmp_path / "kate.db", disable_builtin_embedder=True) as plain:
            plain.remember("tea", "earl grey")
    path = tmp_path / "kate.db"
    path.chmod(0o444)
    if getattr(os, "geteuid", lambda: -1)() == 0:
        monkeypatch.setattr(db_module.opening, "cannot_write", lambda resolved: True)
    before = path.read_bytes()
    with elastimem.open_user(tmp_path, "kate", disable_builtin_embedder=True) as kate:
        assert kate.facts() == {"tea": "earl grey"}
        assert kate.recall("tea")
        with pytest.raises(StoreError, match="read-only"):
            kate.remember("tea", "green")
    assert path.read_bytes() == before  # an untagged file stays untagged


def test_user_id_on_open_records_the_owner_and_refuses_another(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with elastimem.open(path, disable_builtin_embedder=True) as mem:
        assert mem.user_id is None  # nothing recorded, nothing claimed
    with elastimem.open(path, user_id="ana", disable_builtin_embedder=True) as mem:
        assert mem.user_id == "ana"
    with elastimem.open(path, disable_builtin_embedder=True) as mem:
        assert mem.user_id == "ana"  # what the file records
    with pytest.raises(ConfigError, match="belongs to user 'ana', not 'ben'"):
        elastimem.open(path, user_id="ben", disable_builtin_embedder=True)
    with pytest.raises(ConfigError, match="user_id="):
        elastimem.open(path, user_id="../ana", disable_builtin_embedder=True)
    with pytest.raises(ConfigError, match="belongs to user 'ana', not 'm'"):
        elastimem.open_user(tmp_path, "m", disable_builtin_embedder=True)  # the same file
    with elastimem.open_user(tmp_path, "zoe", disable_builtin_embedder=True) as other:
        assert other.user_id == "zoe"
