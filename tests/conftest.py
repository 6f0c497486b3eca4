"""Shared fixtures: isolated environment, temporary stores, and deterministic host doubles.

The ``llm`` and ``embedder`` doubles stand in for the host's callables (which are the host's
by design). The built-in embedder is never faked: tests that need it are marked ``embedder``.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.storage.sqlite import connection as sqlite_connection
from tests import pg_server, rows

ENV_VARS = (
    "ELASTIMEM_DB",
    "ELASTIMEM_USER",
    "ELASTIMEM_TIER",
    "ELASTIMEM_DISABLE_FTS",
    "ELASTIMEM_ALLOW_MODEL_DOWNLOAD",
    "ELASTIMEM_LLM_URL",
    "ELASTIMEM_LLM_MODEL",
    "ELASTIMEM_LLM_API_KEY",
    "ELASTIMEM_KEY",
    "ELASTIMEM_KEY_FILE",
)


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ELASTIMEM_CACHE_DIR for the whole run: the built-in model is converted to ONNX
    once per session (~2 s), not once per test that loads it."""
    return tmp_path_factory.mktemp("elastimem_cache")


@pytest.fixture(autouse=True)
def isolated_env(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    model_cache_dir: Path,
) -> Path:
    """Point every default path at a temporary home; no test touches the user's files."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("ELASTIMEM_CACHE_DIR", str(model_cache_dir))
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def fast_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lock tests need SQLITE_BUSY in well under the production 10 s."""
    monkeypatch.setattr(sqlite_connection, "BUSY_TIMEOUT_MS", 300)


# -- host doubles -----------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")


class HashEmbedder:
    """Deterministic bag-of-words embedder: texts sharing words get similar vectors."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.casefold()):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vec[index] += 1.0 if digest[4] % 2 else -1.0
        if not any(vec):
            vec[0] = 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.calls.append(list(texts))
        return [self.vector(t) for t in texts]


class ScriptedLLM:
    """Routes on the prompt's ``TASK:`` line and records every call."""

    def __init__(self, replies: dict[str, Any] | None = None) -> None:
        self.replies: dict[str, Any] = {
            "extract": "NONE",
            "condense": "",
            "summarise-session": "",
            "merge": "",
            "same-entity": "no",
            "label": "",
        }
        self.replies.update(replies or {})
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    @staticmethod
    def task_of(prompt: str) -> str:
        first = prompt.split("\n", 1)[0]
        return first.removeprefix("TASK:").strip()

    def kinds(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]

    def __call__(self, prompt: str, *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        task = self.task_of(prompt)
        with self.lock:
            self.calls.append(
                (task, prompt, {"max_tokens": max_tokens, "temperature": temperature})
            )
        reply = self.replies.get(task, "")
        if callable(reply):
            reply = reply(prompt)
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "memory.db"


# -- the backend a test's stores live on ------------------------------------------------------
# Every test that opens its stores through ``make_store`` (or ``mem`` / ``memory_store``) runs
# on both backends: an SQLite file, and a user's store on the session's PostgreSQL server
# (issue #18: the API behaves the same on both). A test about what only a file has is marked
# ``sqlite_only``.

STORE_BACKENDS = ("sqlite", "postgres")
# Issue 31: the API test modules (behaviour, not files) also run once on an encrypted SQLite
# file (SQLCipher, extra ``encrypt``), opened with this passphrase.
ENCRYPTED_BACKEND = "sqlcipher"
ENCRYPTED_MODULE_DIRS = ("api",)
TEST_STORE_KEY = rows.TEST_STORE_KEY
# Tests of those modules that open stores themselves (elastimem.open, open_user, aio) run once
# more with ELASTIMEM_KEY set, so every store they open is encrypted (``at_rest``); except in
# the modules about the file and the export format themselves.
PLAIN_FILE_MODULES = ("test_open.py", "test_portability.py", "test_backend_round_trip.py")

# Set by .ci/run: a PostgreSQL server that cannot be started fails the run instead of
# skipping the PostgreSQL half.
REQUIRE_POSTGRES_ENV_VAR = "ELASTIMEM_REQUIRE_POSTGRES"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_backend" in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        backends = STORE_BACKENDS[:1] if only_sqlite else STORE_BACKENDS
        plain_bytes = metafunc.definition.get_closest_marker("plain_file") is not None
        if (
            not only_sqlite
            and not plain_bytes
            and metafunc.definition.path.parent.name in ENCRYPTED_MODULE_DIRS
        ):
            backends = (*backends, ENCRYPTED_BACKEND)
        metafunc.parametrize("store_backend", backends, scope="function")
    elif (
        metafunc.definition.path.name not in PLAIN_FILE_MODULES
        and metafunc.definition.path.parent.name in ENCRYPTED_MODULE_DIRS
        and metafunc.definition.get_closest_marker("plain_file") is None
        and metafunc.definition.get_closest_marker("sqlite_only") is None
    ):
        metafunc.parametrize("at_rest", ["plain", ENCRYPTED_BACKEND], indirect=True)


@pytest.fixture(autouse=True)
def at_rest(request: pytest.FixtureRequest, isolated_env: Path) -> str:
    """"plain", or "sqlcipher": ELASTIMEM_KEY is set, so every SQLite store the test opens
    (in this process or a child) is encrypted with ``TEST_STORE_KEY`` (issue 31)."""
    mode = str(getattr(request, "param", "plain"))
    if mode == ENCRYPTED_BACKEND:
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("ELASTIMEM_KEY", TEST_STORE_KEY)
    return mode


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pg_server.PgServer]:
    """The test session's PostgreSQL server (tests/pg_server.py); skips the PostgreSQL half,
    with the reason, where none can be had."""
    try:
        server = pg_server.start()
    except pg_server.PgUnavailable as exc:
        if os.environ.get(REQUIRE_POSTGRES_ENV_VAR):  # CI: the PostgreSQL half must run
            pytest.fail(f"{REQUIRE_POSTGRES_ENV_VAR} is set but {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: pg_server.PgServer) -> str:
    """A database with the current schema, addressed as the application role (not a
    superuser, so row-level security binds it as it binds an application)."""
    import psycopg

    from elastimem.storage.postgres import migrations

    admin_url = postgres_server.create_database()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the test database")
    url = postgres_server.app_url(admin_url)
    rows.POSTGRES_URLS.append(url)
    return url


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[pg_server.PgServer]:
    """A private PostgreSQL 16 with pgvector for the test session (the ``pgserver`` wheel's
    binaries, dev extra); skips, with the reason, where it cannot be had (fails in CI)."""
    try:
        server = pg_server.start(pg_server.pgvector_bin_dir())
    except pg_server.PgUnavailable as exc:
        if os.environ.get(REQUIRE_POSTGRES_ENV_VAR):  # CI: the pgvector half must run too
            pytest.fail(f"{REQUIRE_POSTGRES_ENV_VAR} is set but {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


def pgvector_database(server: pg_server.PgServer) -> str:
    """A new database of the pgvector ``server`` where the superuser ran ``CREATE EXTENSION
    vector`` and then created the schema; returns its superuser address."""
    import psycopg

    from elastimem.storage.postgres import migrations

    admin_url = server.create_database("elastimem_pgvector")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrations.ensure_schema(conn, "the pgvector test database")
    return admin_url


@pytest.fixture(scope="session")
def pgvector_url(pgvector_server: pg_server.PgServer) -> str:
    """A database of the pgvector server (``pgvector_database``) addressed as the
    application role (as ``postgres_url``), shared by the session."""
    url = pgvector_server.app_url(pgvector_database(pgvector_server))
    rows.POSTGRES_URLS.insert(0, url)  # the last stays postgres_url's (rows.postgres_url)
    return url


@pytest.fixture
def make_store(
    store_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., elastimem.Elastimem]]:
    """Open stores (no built-in embedder) on the test's backend; all closed afterwards.

    On SQLite ``path`` is the store's file (``store_path`` by default); on "sqlcipher" it is
    an encrypted file opened with ``TEST_STORE_KEY``. On PostgreSQL every
    distinct ``path`` of the test is a new user of the session's database, and the same
    ``path`` opens that user again (``":memory:"`` is a new user each time).
    """
    opened: list[elastimem.Elastimem] = []
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    users: dict[str, str] = {}

    def factory(path: str | Path | None = None, **kw: Any) -> elastimem.Elastimem:
        kw.setdefault("disable_builtin_embedder", True)
        where = str(path or store_path)
        if store_backend == ENCRYPTED_BACKEND:
            kw.setdefault("key", TEST_STORE_KEY)
            if where != ":memory:":
                rows.ENCRYPTED_PATHS.add(os.path.realpath(where))
        if url is None:
            mem = elastimem.Elastimem(where, **kw)
        else:
            if where == ":memory:" or where not in users:
                users[where] = f"u{len(users)}-{os.urandom(6).hex()}"
            mem = elastimem.Elastimem(url, user_id=kw.pop("user_id", users[where]), **kw)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


@pytest.fixture
def mem(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    return make_store()


@pytest.fixture
def memory_store(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    return make_store(":memory:")


def wait_until(condition: Callable[[], object], seconds: float = 5.0) -> bool:
    """Poll ``condition`` until it is true or ``seconds`` pass; its last truth value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())
