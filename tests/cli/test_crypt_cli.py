"""``--key-file`` and ``encrypt`` / ``decrypt`` / ``rekey`` through the real console script
(issue 31): every call is a real process on a real store file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from elastimem.storage.sqlite.opening import SQLITE_HEADER
from tests.cli.test_cli import run, run_json

pytest.importorskip("sqlcipher3")

SENTENCE = "Quillon the marmoset hides emeralds under the violet staircase"


def key_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow  # about 20 console-script processes (30 s on a loaded 2-core machine)
def test_encrypt_rekey_decrypt_round_trip(tmp_path: Path) -> None:
    store = tmp_path / "notes.db"
    keys = tmp_path / "keys"
    keys.mkdir()
    old = key_file(keys, "old.key", "first passphrase")
    new = key_file(keys, "new.key", "second passphrase")
    db = ["--db", str(store)]
    run_json(*db, "remember", "secret_place", SENTENCE)
    run_json(*db, "remember", "pet", "marmoset")
    # A plain store: a key is refused, nothing changes.
    before = files_of(tmp_path)
    done = run(*db, "--key-file", str(old), "facts")
    assert done.returncode == 1 and b"is not encrypted" in done.stderr
    assert files_of(tmp_path) == before

    result = run_json(*db, "--key-file", str(old), "encrypt")
    assert result["encrypted"] is True and result["rows"] > 0
    data = store.read_bytes()
    assert not data.startswith(SQLITE_HEADER) and b"marmoset" not in data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys", "notes.db"]  # no leftovers
    assert store.stat().st_mode & 0o077 == 0

    for args, message in [
        ((), b"no key was given"),
        (("--key-file", str(new)), b"key is wrong"),
    ]:
        before = files_of(tmp_path)
        done = run(*db, *args, "facts")
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert b"first passphrase" not in done.stderr + done.stdout
        assert files_of(tmp_path) == before  # nothing moved aside, nothing written
    assert run_json(*db, "--key-file", str(old), "facts")["secret_place"] == SENTENCE
    # The environment works as --key-file does.
    facts = run_json(*db, "facts", env={"ELASTIMEM_KEY": "first passphrase"})
    assert facts["pet"] == "marmoset"

    run_json(*db, "--key-file", str(old), "rekey", "--new-key-file", str(new))
    assert run(*db, "--key-file", str(old), "facts").returncode == 1
    assert run_json(*db, "--key-file", str(new), "facts")["pet"] == "marmoset"
    hits = run_json(*db, "--key-file", str(new), "recall", "where are the emeralds")
    assert any("emeralds" in json.dumps(hit) for hit in hits)

    result = run_json(*db, "--key-file", str(new), "decrypt")
    assert result["encrypted"] is False
    assert store.read_bytes().startswith(SQLITE_HEADER)
    assert run_json(*db, "facts")["secret_place"] == SENTENCE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys", "notes.db"]


def test_conversions_refuse_what_they_cannot_do_and_change_nothing(tmp_path: Path) -> None:
    store = tmp_path / "notes.db"
    k = key_file(tmp_path, "k.key", "a passphrase")
    other = key_file(tmp_path, "o.key", "another passphrase")
    db = ["--db", str(store)]
    run_json(*db, "remember", "pet", "marmoset")
    before = files_of(tmp_path)
    cases = [
        (["encrypt"], 2, b"needs a key"),
        (["decrypt"], 2, b"needs the store's key"),
        (["--key-file", str(k), "decrypt"], 1, b"is not encrypted"),
        (["--key-file", str(tmp_path / "missing.key"), "encrypt"], 2, b"--key-file"),
    ]
    for args, code, message in cases:
        done = run(*db, *args)
        assert done.returncode == code and message in done.stderr, (args, done.stderr)
        assert files_of(tmp_path) == before
    run_json(*db, "--key-file", str(k), "encrypt")
    before = files_of(tmp_path)
    for args, code, message in [
        (["--key-file", str(k), "encrypt"], 1, b"already encrypted"),
        (["--key-file", str(other), "decrypt"], 1, b"cannot be read with the key"),
        (["--key-file", str(k), "rekey", "--new-key-file", str(k)], 2, b"is the current key"),
    ]:
        done = run(*db, *args)
        assert done.returncode == code and message in done.stderr, (args, done.stderr)
        assert files_of(tmp_path) == before


HOLDER = """
import sys, elastimem
with elastimem.open(sys.argv[1], disable_builtin_embedder=True) as mem:
    mem.remember("held", "yes")
    print("READY", flush=True)
    sys.stdin.read()
"""


def test_a_store_open_in_another_process_is_not_converted(tmp_path: Path) -> None:
    store = tmp_path / "notes.db"
    k = key_file(tmp_path, "k.key", "a passphrase")
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ),
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == b"READY"
            before = store.read_bytes()
            done = run("--db", str(store), "--key-file", str(k), "encrypt")
            assert done.returncode == 1 and b"open in another process" in done.stderr, done.stderr
            assert store.read_bytes() == before
            assert not [p for p in tmp_path.iterdir() if ".convert-" in p.name]
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
    run_json("--db", str(store), "--key-file", str(k), "encrypt")
    assert run_json("--db", str(store), "--key-file", str(k), "facts") == {"held": "yes"}


def test_export_of_an_encrypted_store_is_encrypted_unless_plain(tmp_path: Path) -> None:
    k = key_file(tmp_path, "k.key", "a passphrase")
    src = ["--db", str(tmp_path / "a.db"), "--key-file", str(k)]
    run_json(*src, "remember", "secret_place", SENTENCE)
    run_json(*src, "export", str(tmp_path / "a.export"))
    assert b"marmoset" not in (tmp_path / "a.export").read_bytes()
    run_json(*src, "export", "--plain", str(tmp_path / "a.jsonl"))
    assert b"marmoset" in (tmp_path / "a.jsonl").read_bytes()
    # Through a pipe, as the README shows, into a new encrypted store.
    exported = run(*src, "export", "-")
    assert exported.returncode == 0 and b"marmoset" not in exported.stdout
    dest = ["--db", str(tmp_path / "b.db"), "--key-file", str(k)]
    assert run(*dest, "import", "-", input=exported.stdout).returncode == 0
    assert run_json(*dest, "facts")["secret_place"] == SENTENCE
    done = run("--db", str(tmp_path / "c.db"), "import", str(tmp_path / "a.export"))
    assert done.returncode == 1 and b"is encrypted" in done.stderr
