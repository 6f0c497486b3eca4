"""A real PostgreSQL server for the tests of the PostgreSQL backend (issue #18).

``ELASTIMEM_TEST_PG_URL`` (a superuser's address, e.g. ``postgresql://postgres@127.0.0.1/postgres``)
names a server to use. Without it a private PostgreSQL 15 is started for the test session:
``initdb`` into a temporary folder (trust authentication, owned by the ``postgres`` user when
the tests run as root, since PostgreSQL refuses to run as root), its own free port on 127.0.0.1
and its own socket folder, and it is stopped and removed at the end. Where neither can be had,
``start`` raises ``PgUnavailable`` with the reason, and the PostgreSQL half of the tests skips.

The pgvector tests start a second private server the same way from the binaries of the
``pgserver`` wheel (PostgreSQL 16.2 with pgvector 0.6.2; ``pgvector_bin_dir``), whatever
``ELASTIMEM_TEST_PG_URL`` says.

Tests connect as two roles: the superuser (schema creation, test databases) and ``APP_ROLE``,
a login role without SUPERUSER or BYPASSRLS, so row-level security binds it as it binds an
application.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import pytest

URL_ENV_VAR = "ELASTIMEM_TEST_PG_URL"
BIN_ENV_VAR = "ELASTIMEM_TEST_PG_BIN"
DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
PGVECTOR_PACKAGE = "pgserver"
SERVER_USER = "postgres"
APP_ROLE = "elastimem_test_app"
START_TIMEOUT_SECONDS = 60
NO_DRIVER = "psycopg is not installed (pip install -e '.[postgres]')"


class PgUnavailable(Exception):
    """No PostgreSQL server can be had for the tests; the message says why."""


def _with_database(url: str, database: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database))


def _with_user(url: str, user: str, password: str | None) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host += f":{parts.port}"
    login = urllib.parse.quote(user, safe="")
    if password:
        login += ":" + urllib.parse.quote(password, safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{login}@{host}"))


class PgServer:
    """A reachable server: its superuser address, test databases and the application role."""

    def __init__(self, admin_url: str, *, stop: list[list[str]] | None = None) -> None:
        self.admin_url = admin_url
        self._stop_commands = stop or []
        self._folder: str | None = None
        self._databases: list[str] = []
        self._app_password = secrets.token_hex(12)
        self._app_role_ready = False

    # -- databases -----------------------------------------------------------------------

    def create_database(self, prefix: str = "elastimem_test") -> str:
        """A new empty database; returns its superuser address. Dropped at ``stop``. Skips
        the test where the role of ``ELASTIMEM_TEST_PG_URL`` may not create databases."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.Error as exc:
            pytest.skip(f"cannot create a test database on the server of {URL_ENV_VAR}: {exc}")
        self._databases.append(name)
        return _with_database(self.admin_url, name)

    def app_url(self, database_url: str) -> str:
        """The address of ``database_url`` for ``APP_ROLE`` (created on first use), with the
        privileges an application needs on every table there (``schema.grant_to``)."""
        import psycopg

        from elastimem.storage.postgres import schema

        with psycopg.connect(database_url, autocommit=True) as conn:
            if not self._app_role_ready:
                exists = conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,)
                ).fetchone()
                verb = "ALTER" if exists else "CREATE"
                password = conn.execute("SELECT quote_literal(%s)", (self._app_password,))
                literal = password.fetchone()[0]  # type: ignore[index]
                conn.execute(
                    f"{verb} ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB "
                    f"NOCREATEROLE PASSWORD {literal}"
                )
                self._app_role_ready = True
            schema.grant_to(conn, APP_ROLE)
        return _with_user(database_url, APP_ROLE, self._app_password)

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Drop the test databases (a server given by address) or stop the private server."""
        if self._stop_commands:
            for command in self._stop_commands:
                subprocess.run(command, capture_output=True, check=False)
            self._stop_commands = []
        elif self._databases:
            import psycopg

            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(self.admin_url, autocommit=True) as conn,
            ):
                for name in self._databases:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._databases = []
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(bin_dir: str | Path | None = None) -> PgServer:
    """A server for this test session (see the module doc); ``PgUnavailable`` if none.

    ``bin_dir`` starts a private server from those binaries (initdb, pg_ctl, postgres),
    whatever ``ELASTIMEM_TEST_PG_URL`` says: ``pgvector_bin_dir()`` gives pgserver's."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise PgUnavailable(NO_DRIVER) from exc
    url = os.environ.get(URL_ENV_VAR, "").strip()
    if url and bin_dir is None:
        return PgServer(url)
    return _start_private(bin_dir)


def pgvector_bin_dir() -> Path:
    """The binaries of PostgreSQL 16 with pgvector 0.6 that the ``pgserver`` wheel carries
    (dev extra), found without importing it (only its files are used); ``PgUnavailable``
    when it is not installed."""
    spec = importlib.util.find_spec(PGVECTOR_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        bin_dir = Path(location) / "pginstall" / "bin"
        if (bin_dir / "initdb").exists():
            return bin_dir
    raise PgUnavailable(
        f"no PostgreSQL server with pgvector: the {PGVECTOR_PACKAGE!r} package (PostgreSQL "
        f"16 + pgvector, in the dev extra) is not installed; pip install -e '.[dev]'"
    )


def _start_private(bin_dir: str | Path | None = None) -> PgServer:
    bin_dir = Path(bin_dir or os.environ.get(BIN_ENV_VAR, DEFAULT_BIN))
    if not (bin_dir / "initdb").exists() or not (bin_dir / "pg_ctl").exists():
        raise PgUnavailable(
            f"no PostgreSQL server: {bin_dir}/initdb is missing (install postgresql-15) and "
            f"{URL_ENV_VAR} is not set"
        )
    as_root = os.geteuid() == 0
    if as_root:
        try:
            owner = pwd.getpwnam(SERVER_USER)
        except KeyError as exc:
            raise PgUnavailable(
                f"no PostgreSQL server: running as root and there is no {SERVER_USER!r} user "
                f"to run it as; set {URL_ENV_VAR}"
            ) from exc
        # runuser lives in /usr/sbin or /sbin, which a CI job's PATH often leaves out.
        sbin = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
        runuser = shutil.which("runuser", path=sbin)
        if runuser is None:
            raise PgUnavailable(
                f"no PostgreSQL server: running as root and runuser (util-linux) is missing, "
                f"so initdb cannot run as {SERVER_USER!r}; set {URL_ENV_VAR}"
            )
        prefix = [runuser, "-u", SERVER_USER, "--"]
    else:
        prefix = []
    folder = tempfile.mkdtemp(prefix="elastimem-pg-")
    if as_root:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = os.path.join(folder, "data")
    port = _free_port()

    def run(*command: str) -> None:
        name = os.path.basename(command[0])
        try:
            done = subprocess.run(
                [*prefix, *command], capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise PgUnavailable(f"no PostgreSQL server: {name} could not run ({exc})") from exc
        if done.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise PgUnavailable(
                f"no PostgreSQL server: {name} failed "
                f"({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}"
            )

    # fsync off: a throwaway instance; nothing it holds must survive a power cut.
    initdb = str(bin_dir / "initdb")
    run(initdb, "-D", data, "-A", "trust", "-U", SERVER_USER, "-E", "UTF8", "--locale=C", "-N")
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = str(bin_dir / "pg_ctl")
    log = os.path.join(folder, "server.log")
    run(pg_ctl, "-D", data, "-o", options, "-l", log, "-w", "start")
    stop = [*prefix, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"]
    server = PgServer(f"postgresql://{SERVER_USER}@127.0.0.1:{port}/postgres", stop=[stop])
    server._folder = folder
    # A crashed or interrupted session must not leave a server running.
    atexit.register(server.stop)
    return server
