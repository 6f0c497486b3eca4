"""Encryption at rest (issue 31): an SQLCipher store file, its key, and what a wrong one does.

Real files, real SQLCipher (the ``sqlcipher3`` wheel, extra ``encrypt``), real processes.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import elastimem
from elastimem import ConfigError, EncryptionKeyError, ImportFormatError, StoreError
from elastimem.storage.sqlite import cipher, connection
from elastimem.storage.sqlite.opening import SQLITE_HEADER
from tests.conftest import HashEmbedder

pytest.importorskip("sqlcipher3")

KEY = "tangerine submarine 42"
# Distinctive enough that any plain copy of a page would show it.
SENTENCE = "Quillon the marmoset hides emeralds under the violet staircase"
WORDS = (b"quillon", b"marmoset", b"emeralds", b"staircase")


def open_store(path: Path | str, **kw: object) -> elastimem.Elastimem:
    kw.setdefault("disable_builtin_embedder", True)
    return elastimem.open(str(path), **kw)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of ``folder``: bytes, mtime and mode (what "left unchanged" means)."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def holds_words(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    data = path.read_bytes().lower()
    return [w for w in WORDS if w in data]


def fill(mem: elastimem.Elastimem) -> None:
    mem.begin_session()
    mem.record_turn(f"Remember this: {SENTENCE}.", "I will remember it.")
    mem.remember("secret_place", SENTENCE)
    mem.end_session()


def encrypted_store(path: Path) -> None:
    with open_store(path, key=KEY, embedder=HashEmbedder()) as mem:
        fill(mem)


# -- the file ---------------------------------------------------------------------------------


def test_the_file_and_its_wal_never_hold_the_stored_sentence(tmp_path: Path) -> None:
    plain = tmp_path / "plain.db"
    secret = tmp_path / "secret.db"
    with open_store(plain, embedder=HashEmbedder()) as mem:
        fill(mem)
        # The check means something: a plain store shows the sentence while open.
        assert holds_words(plain) or holds_words(Path(f"{plain}-wal"))
    with open_store(secret, key=KEY, embedder=HashEmbedder()) as mem:
        fill(mem)
        assert Path(f"{secret}-wal").exists()  # WAL mode, with the writes in it
        assert holds_words(secret) == [] and holds_words(Path(f"{secret}-wal")) == []
        assert not secret.read_bytes().startswith(SQLITE_HEADER)
        # Every feature works unchanged: FTS (the porter tokenizer: "emerald" finds
        # "emeralds"), vectors, facts and the graph.
        assert mem.fts_enabled
        assert mem.drain(10)
        hits = mem.recall("where are the emerald hidden", k=3)
        assert hits and "Quillon" in hits[0].text
        assert mem.explain("marmoset staircase").hits
        assert mem.facts()["secret_place"] == SENTENCE
        assert mem.stats()["sessions"] >= 1
    assert holds_words(secret) == [] and holds_words(Path(f"{secret}-wal")) == []
    with open_store(secret, key=KEY) as mem:
        assert mem.facts()["secret_place"] == SENTENCE
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("secret")) in (
        ["secret.db"],
        ["secret.db", "secret.db-shm", "secret.db-wal"],
    )


def test_temporary_tables_stay_in_memory(tmp_path: Path) -> None:
    encrypted_store(tmp_path / "s.db")
    conn = connection.cipher_connect(str(tmp_path / "s.db"), cipher.cipher_key(KEY))
    try:
        assert conn.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
        assert conn.execute("PRAGMA cipher_version").fetchone()[0].startswith("4.")
    finally:
        conn.close()


# -- a missing or wrong key changes nothing ---------------------------------------------------


@pytest.mark.parametrize("create", [True, False])
@pytest.mark.parametrize("given", [None, "not the key", "x'" + "ab" * 32 + "'"])
def test_no_key_or_a_wrong_key_is_a_clear_error_and_changes_nothing(
    tmp_path: Path, given: str | None, create: bool, caplog: pytest.LogCaptureFixture
) -> None:
    encrypted_store(tmp_path / "s.db")
    (tmp_path / "neighbour.txt").write_text("next to the store")
    before = snapshot(tmp_path)
    with (
        caplog.at_level(logging.DEBUG, logger="elastimem"),
        pytest.raises(EncryptionKeyError) as info,
    ):
        open_store(tmp_path / "s.db", key=given, create=create)
    message = str(info.value)
    assert "left unchanged" in message and "key" in message
    assert "corrupt" not in message and "moved" not in message
    if given is not None:
        assert given not in message and given not in caplog.text
    assert isinstance(info.value, StoreError)
    assert snapshot(tmp_path) == before  # same files, bytes, times and modes: nothing set aside
    with open_store(tmp_path / "s.db", key=KEY) as mem:
        assert mem.facts()["secret_place"] == SENTENCE


def test_a_key_for_a_plain_store_is_refused_untouched(tmp_path: Path) -> None:
    with open_store(tmp_path / "p.db") as mem:
        mem.remember("k", "v")
    before = snapshot(tmp_path)
    with pytest.raises(EncryptionKeyError, match="is not encrypted"):
        open_store(tmp_path / "p.db", key=KEY)
    assert snapshot(tmp_path) == before


def test_a_second_open_in_the_same_process_without_the_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(path, key=KEY) as mem:
        mem.remember("k", "v")
        with pytest.raises(EncryptionKeyError, match="no key was given"):
            open_store(path)
        mem.remember("k2", "v2")  # the open store is unharmed (its locks were kept)
    with open_store(path, key=KEY) as again:
        assert again.facts() == {"k": "v", "k2": "v2"}


def test_a_damaged_encrypted_store_is_never_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    encrypted_store(path)
    data = bytearray(path.read_bytes())
    data[100:200] = bytes(100)  # inside the first page: its HMAC no longer matches
    path.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    with pytest.raises(StoreError):
        open_store(path, key=KEY)
    assert snapshot(tmp_path) == before


# -- the key: its forms, where it comes from, never shown ------------------------------------


def test_passphrase_forms_and_a_raw_key(tmp_path: Path) -> None:
    with open_store(tmp_path / "b.db", key=KEY.encode()) as mem:  # bytes
        mem.remember("k", "v")
    with open_store(tmp_path / "b.db", key=KEY) as mem:  # the same passphrase as str
        assert mem.facts() == {"k": "v"}
    raw = "x'" + "0123456789abcdef" * 4 + "'"
    with open_store(tmp_path / "r.db", key=raw) as mem:
        mem.remember("k", "v")
    with pytest.raises(EncryptionKeyError):
        open_store(tmp_path / "r.db", key=raw.upper().replace("X'", "x'")[:-3] + "00'")
    with open_store(tmp_path / "r.db", key=raw) as mem:
        assert mem.facts() == {"k": "v"}


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("", "is empty"),
        (b"", "is empty"),
        (b"\xff\xfe", "not UTF-8"),
        ("a\x00b", "NUL"),
        ("x'abc'", "raw key"),
        (42, "str or bytes"),
    ],
)
def test_bad_keys_are_config_errors_before_any_file_exists(
    tmp_path: Path, key: object, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        open_store(tmp_path / "new" / "s.db", key=key)
    assert not (tmp_path / "new" / "s.db").exists()


def test_the_key_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encrypted_store(tmp_path / "s.db")
    monkeypatch.setenv("ELASTIMEM_KEY", KEY)
    with open_store(tmp_path / "s.db") as mem:
        assert mem.facts()["secret_place"] == SENTENCE
    key_file = tmp_path / "key.txt"
    key_file.write_text(KEY + "\n")  # one trailing newline is not part of the key
    monkeypatch.setenv("ELASTIMEM_KEY_FILE", str(key_file))
    with pytest.raises(ConfigError, match="set only one"):
        open_store(tmp_path / "s.db")
    monkeypatch.delenv("ELASTIMEM_KEY")
    with open_store(tmp_path / "s.db") as mem:
        assert mem.facts()["secret_place"] == SENTENCE
    monkeypatch.setenv("ELASTIMEM_KEY_FILE", str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match="cannot read ELASTIMEM_KEY_FILE"):
        open_store(tmp_path / "s.db")


def test_a_key_with_a_postgresql_address_is_a_config_error() -> None:
    # Refused before any connection: no server listens at port 1.
    with pytest.raises(ConfigError, match="SQLite store files only"):
        elastimem.open("postgresql://app@127.0.0.1:1/memory", user_id="alice", key=KEY)


def test_the_key_is_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key = cipher.cipher_key(KEY)
    assert KEY not in repr(key) and KEY not in str(key)
    with pytest.raises(TypeError):
        pickle.dumps(key)
    with (
        caplog.at_level(logging.DEBUG, logger="elastimem"),
        open_store(tmp_path / "s.db", key=KEY) as mem,
    ):
        fill(mem)
        assert KEY not in repr(mem)
        assert KEY not in str(mem.stats())
    assert KEY not in caplog.text


def test_open_user_checks_the_owner_of_an_encrypted_store(tmp_path: Path) -> None:
    with elastimem.open_user(tmp_path, "alice", key=KEY, disable_builtin_embedder=True) as mem:
        mem.remember("k", "v")
    os.replace(tmp_path / "alice.db", tmp_path / "bob.db")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="belongs to user 'alice'"):
        elastimem.open_user(tmp_path, "bob", key=KEY, disable_builtin_embedder=True)
    assert snapshot(tmp_path) == before


# -- exports and backups ----------------------------------------------------------------------


def test_exports_are_encrypted_with_the_stores_key(tmp_path: Path) -> None:
    source = tmp_path / "s.db"
    encrypted_store(source)
    with open_store(source, key=KEY) as mem:
        counts = mem.export(tmp_path / "e.bin")
        plain_counts = mem.export(tmp_path / "e.jsonl", encrypt=False)
    assert counts == plain_counts and counts["facts"] == 1
    assert holds_words(tmp_path / "e.bin") == []
    assert holds_words(tmp_path / "e.jsonl") != []
    with open_store(tmp_path / "t.db", key=KEY) as target:
        assert target.import_(tmp_path / "e.bin") == counts
        assert target.facts()["secret_place"] == SENTENCE
    with open_store(tmp_path / "w.db", key="another key") as other:
        with pytest.raises(ImportFormatError, match="another key"):
            other.import_(tmp_path / "e.bin")
        assert other.facts() == {}
    with open_store(tmp_path / "p.db") as plain:
        with pytest.raises(ImportFormatError, match="is encrypted"):
            plain.import_(tmp_path / "e.bin")
        with pytest.raises(ConfigError, match="encrypt=True needs an encrypted store"):
            plain.export(tmp_path / "x.bin", encrypt=True)


def test_an_encrypted_export_streams_through_a_binary_file_object(tmp_path: Path) -> None:
    import io

    encrypted_store(tmp_path / "s.db")
    stream = io.BytesIO()
    with open_store(tmp_path / "s.db", key=KEY) as mem:
        mem.export(stream)
        with pytest.raises(ConfigError, match="binary"):
            mem.export(io.StringIO())
    assert stream.getvalue() and SENTENCE.encode() not in stream.getvalue()
    stream.seek(0)
    with open_store(tmp_path / "t.db", key=KEY) as target:
        target.import_(stream)
        assert target.facts()["secret_place"] == SENTENCE


def test_a_backup_destination_keyed_like_the_store_is_an_encrypted_copy(tmp_path: Path) -> None:
    """``connection.connect_destination``: the destination of an online backup of an
    encrypted store (the backup itself copies pages between two SQLCipher connections; the
    source is a connection as the store makes them, ``raw_connect(path, key=...)``)."""
    encrypted_store(tmp_path / "s.db")
    key = cipher.cipher_key(KEY)
    source = connection.raw_connect(str(tmp_path / "s.db"), key=key)
    dest = connection.connect_destination(str(tmp_path / "copy.db"), key)
    try:
        source.backup(dest)
    finally:
        dest.close()
        source.close()
    assert (tmp_path / "copy.db").stat().st_mode & 0o077 == 0
    assert holds_words(tmp_path / "copy.db") == []
    with open_store(tmp_path / "copy.db", key=KEY) as mem:
        assert mem.facts()["secret_place"] == SENTENCE


# -- processes ---------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, elastimem
    path, index, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with elastimem.open(path, disable_builtin_embedder=True) as mem:  # key: ELASTIMEM_KEY
        for n in range(turns):
            mem.record_turn(f"writer {index} turn {n} about the marmoset", "noted")
            mem.recall("marmoset")
        mem.remember(f"writer_{index}", "done")
    print("OK")
    """
)


def test_processes_share_an_encrypted_store(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    encrypted_store(path)
    env = {**os.environ, "ELASTIMEM_KEY": KEY}
    with open_store(path, key=KEY) as held:  # open in this process throughout
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(path), str(i), "15"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(3)
        ]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()[-2000:]
            assert out.strip() == b"OK"
        held.remember("parent", "done")
    with open_store(path, key=KEY) as mem:
        facts = mem.facts()
        assert {f"writer_{i}" for i in range(3)} <= set(facts) and "parent" in facts
        assert len(mem.recall("writer turn marmoset", k=50)) >= 45
    assert holds_words(path) == [] and holds_words(Path(f"{path}-wal")) == []
