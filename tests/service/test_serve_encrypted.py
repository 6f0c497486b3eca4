"""``serve`` with ``--key-file`` (issue 31): every user's store of the folder is created and
opened encrypted with the one key; a real server process and real HTTP requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import elastimem
from elastimem import EncryptionKeyError
from tests.service.test_server import (
    START_TIMEOUT,
    TOKENS,
    Server,
    _free_port,
    request,
    stop_server,
)

pytest.importorskip("starlette")
pytest.importorskip("sqlcipher3")

SENTENCE = "Quillon the marmoset hides emeralds under the violet staircase"


def test_serve_with_a_key_file_keeps_every_users_store_encrypted(tmp_path: Path) -> None:
    key_file = tmp_path / "server.key"
    key_file.write_text("the server's passphrase\n")
    key_file.chmod(0o600)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({TOKENS["ana"]: "ana", TOKENS["ben"]: "ben"}))
    keys.chmod(0o600)
    root = tmp_path / "users"
    port = _free_port()
    cmd = [sys.executable, "-m", "elastimem.cli", "-v", "--db", str(root)]
    cmd += ["--key-file", str(key_file), "serve", "--keys", str(keys), "--port", str(port)]
    cmd += ["--no-embedder"]
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env)  # fmt: skip
    server = Server(proc, port, root, keys, str(root))
    assert proc.stderr is not None
    stream = proc.stderr
    server.reader = threading.Thread(target=lambda: server.stderr.extend(stream), daemon=True)
    server.reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, server.log()
            try:
                if request(server, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        for user in ("ana", "ben"):
            status, _ = request(
                server, "PUT", "/v1/facts/secret_place", user, {"value": f"{user}: {SENTENCE}"}
            )
            assert status == 200
        status, body = request(server, "GET", "/v1/facts", "ana")
        assert status == 200 and body["facts"]["secret_place"] == f"ana: {SENTENCE}"
        for user in ("ana", "ben"):
            for suffix in ("", "-wal"):
                path = root / f"{user}.db{suffix}"
                if path.exists():
                    assert b"marmoset" not in path.read_bytes().lower()
        assert "the server's passphrase" not in server.log()
    finally:
        assert stop_server(server) == 0, server.log()
    with pytest.raises(EncryptionKeyError):
        elastimem.open_user(root, "ana", disable_builtin_embedder=True)
    with elastimem.open_user(
        root, "ben", key="the server's passphrase", disable_builtin_embedder=True
    ) as mem:
        assert mem.facts()["secret_place"] == f"ben: {SENTENCE}"
