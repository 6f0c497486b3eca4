"""Backups of an encrypted store (issues 30 and 31): an encrypted copy with the same key,
verified and restored with it; real files, real SQLCipher, the real console script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import elastimem
from elastimem import EncryptionKeyError
from elastimem.ops import backup as ops

pytest.importorskip("sqlcipher3")

KEY = "tangerine submarine 42"
SENTENCE = "Quillon the marmoset hides emeralds under the violet staircase"


def make_store(path: Path) -> None:
    with elastimem.open(str(path), key=KEY, disable_builtin_embedder=True) as mem:
        mem.begin_session()
        mem.record_turn(f"Remember this: {SENTENCE}.", "I will.")
        mem.remember("secret_place", SENTENCE)
        mem.end_session()


def test_backup_verify_restore_of_an_encrypted_store(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    make_store(store)
    copy = tmp_path / "backups" / "s-copy.db"
    result = ops.backup(str(store), str(copy), key=KEY)
    assert result.format == "sqlite"
    assert b"marmoset" not in copy.read_bytes().lower()
    assert not copy.read_bytes().startswith(b"SQLite format 3")
    assert ops.verify(str(copy), key=KEY).ok
    assert not ops.verify(str(copy), key="another key").ok
    with pytest.raises(EncryptionKeyError):
        elastimem.open(str(copy), disable_builtin_embedder=True)
    target = tmp_path / "restored.db"
    summary = ops.restore(str(copy), str(target), key=KEY)
    assert summary["facts"] == 1
    assert b"marmoset" not in target.read_bytes().lower()
    with elastimem.open(str(target), key=KEY, disable_builtin_embedder=True) as mem:
        assert mem.facts()["secret_place"] == SENTENCE
    # An encrypted export is a backup too: restored with the key into a new store.
    with elastimem.open(str(store), key=KEY, disable_builtin_embedder=True) as mem:
        mem.export(tmp_path / "s.export")
    assert ops.backup_format(str(tmp_path / "s.export"), key=KEY) == "export"
    assert ops.verify(str(tmp_path / "s.export"), key=KEY).ok
    ops.restore(str(tmp_path / "s.export"), str(tmp_path / "from-export.db"), key=KEY)
    with elastimem.open(
        str(tmp_path / "from-export.db"), key=KEY, disable_builtin_embedder=True
    ) as mem:
        assert mem.facts()["secret_place"] == SENTENCE


def test_the_cli_backup_takes_the_global_key_file(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    make_store(store)
    key_file = tmp_path / "k.key"
    key_file.write_text(KEY + "\n")
    base = [sys.executable, "-m", "elastimem.cli", "--db", str(store), "--key-file", str(key_file)]
    done = subprocess.run(
        [*base, "backup", str(tmp_path / "b.db")],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"marmoset" not in (tmp_path / "b.db").read_bytes().lower()
    checked = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", "--db", str(tmp_path / "b.db"),
         "--key-file", str(key_file), "verify"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert KEY not in done.stderr + done.stdout + checked.stderr + checked.stdout
