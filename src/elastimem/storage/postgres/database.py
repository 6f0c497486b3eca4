"""One user's store on a PostgreSQL server: connections, transactions and the open sequence.

The surface is ``storage.sqlite.database.Database``'s, so the layers above use either:
``atomic()`` is the only way to write (nested: a SAVEPOINT) and ``read()`` gives one
consistent snapshot (REPEATABLE READ, READ ONLY); both yield a ``PostgresTx``.

Every transaction starts, in the same round trip as its BEGIN, with
``SET LOCAL elastimem.user_id = '<user>'``: the setting lasts until COMMIT or ROLLBACK, so a
pooled connection never carries a user into the next transaction (and it works through
PgBouncer in transaction mode, and Citus forwards it to the workers with
``citus.propagate_set_commands = 'local'``, which it does not do for ``set_config``), and
row-level security (``schema``) admits only that user's rows. A write transaction then
takes ``pg_advisory_xact_lock`` on the user (a 64-bit hash of the id): writers of one user
run one at a time, whichever process or machine they are on, as on SQLite, where
``BEGIN IMMEDIATE`` serialises the writers of a file; writers of different users never wait
for each other. ``lock_timeout`` bounds that wait like SQLite's busy timeout
(``StoreLockedError`` past it).

Connections come from one ``psycopg_pool.ConnectionPool`` per server address and process,
shared by every user's store opened on it (a connection belongs to no user between
transactions). Driver errors never leave this package raw: ``translate_error`` turns them into
``StoreError`` / ``StoreLockedError`` naming the server by ``path``, which is the address
without its password; the password is never logged or put in a message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ...clock import now_ts
from ...errors import ConfigError, StoreClosedError, StoreError, StoreLockedError
from ..admin import StoreUpkeep
from . import migrations
from .schema import USER_SETTING, has_pgvector_column
from .tx import PostgresTx

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

logger = logging.getLogger("elastimem")

URL_PREFIXES = ("postgresql://", "postgres://")
# As SQLite's busy timeout: ride out another writer of the same user, surface a stuck one.
LOCK_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_SECONDS = 10
# A transaction waits this long for a free pooled connection before StoreLockedError.
POOL_TIMEOUT_SECONDS = 30.0
POOL_MAX_SIZE = 10
# Writers of one user serialise on pg_advisory_xact_lock(hashtextextended(PREFIX || user, 0)).
USER_LOCK_PREFIX = "elastimem.user:"

_pools: dict[str, tuple[ConnectionPool[Any], int]] = {}
_pools_guard = threading.Lock()
_user_locks: dict[tuple[str, str], threading.RLock] = {}
_rls_checked: set[str] = set()


def is_postgres_url(path: object) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` address."""
    return isinstance(path, str) and path.lower().startswith(URL_PREFIXES)


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "PostgreSQL stores need the driver: pip install 'elastimem[postgres]' "
            "(psycopg and psycopg-pool)"
        ) from exc
    return psycopg


def redact(conninfo: str) -> str:
    """The address of ``conninfo`` without its password (what messages and logs show)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(conninfo)
    except Exception:  # an unparsable address says nothing safe to show
        return "postgresql://(unparsable address)"
    user = params.get("user")
    host = params.get("host") or params.get("hostaddr") or ""
    port = params.get("port")
    dbname = params.get("dbname") or ""
    login = f"{user}@" if user else ""
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{login}{where}/{dbname}"


def _password(conninfo: str) -> str | None:
    from psycopg.conninfo import conninfo_to_dict

    try:
        value = conninfo_to_dict(conninfo).get("password")
    except Exception:
        return None
    return str(value) if value else None


def translate_error(
    exc: BaseException, where: str, action: str = "access", secret: str | None = None
) -> StoreError:
    """A ``StoreError`` (or ``StoreLockedError``) for a driver error, with a fix, never
    showing ``secret`` (the password)."""
    psycopg = _psycopg()
    from psycopg import errors as pg_errors
    from psycopg_pool import PoolTimeout

    detail = str(exc).strip().replace("\n", " ")
    if secret:
        detail = detail.replace(secret, "***")
    if isinstance(exc, PoolTimeout):
        err: StoreError = StoreLockedError(
            f"no free connection to {where} within {POOL_TIMEOUT_SECONDS:g} s (every pooled "
            "connection is in use); retry later or raise the server's connection limit"
        )
    elif isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected)):
        err = StoreLockedError(
            f"{where} stayed locked by another writer of this user ({detail}); close that "
            "process or retry later"
        )
    elif isinstance(exc, pg_errors.SerializationFailure):
        err = StoreLockedError(f"{where}: a concurrent write got in the way ({detail}); retry")
    elif isinstance(exc, pg_errors.QueryCanceled):
        err = StoreError(
            f"a statement on {where} was cancelled ({detail}): the server's statement_timeout "
            "or an operator stopped it; the transaction was rolled back"
        )
    elif isinstance(exc, pg_errors.InsufficientPrivilege):
        err = StoreError(
            f"the role may not {action} {where} ({detail}); grant it the privileges the "
            "schema needs (storage.postgres.schema.grant_to), or create the schema once as its "
            "owner"
        )
    elif isinstance(exc, pg_errors.DiskFull):
        err = StoreError(f"the disk of the server {where} is full; free some space and retry")
    elif isinstance(exc, psycopg.OperationalError):
        err = StoreError(
            f"cannot {action} {where}: {detail}; check that the server is running and the "
            "address, user and password are right"
        )
    else:
        err = StoreError(f"could not {action} {where}: {detail}; the store was left unchanged")
    err.__cause__ = exc
    return err


def _check_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id.strip():
        raise ConfigError(
            f"user_id={user_id!r} is invalid; a PostgreSQL store serves one user: pass a "
            "non-empty user id string"
        )
    if "\x00" in user_id:
        raise ConfigError("user_id must not contain NUL characters")
    return user_id


def _begin_sql(conn: psycopg.Connection[Any], user_id: str, *, write: bool) -> bytes:
    """BEGIN and the transaction's setup as one simple-query string (one round trip)."""
    from psycopg import sql

    user = sql.Literal(user_id)
    if write:
        text = sql.SQL(
            "BEGIN; SET LOCAL {setting} = {user}; "
            "SET LOCAL lock_timeout = {timeout}; "
            "SELECT pg_advisory_xact_lock(hashtextextended({prefix} || {user}, 0))"
        ).format(
            setting=sql.SQL(USER_SETTING),
            user=user,
            timeout=sql.Literal(f"{LOCK_TIMEOUT_MS}ms"),
            prefix=sql.Literal(USER_LOCK_PREFIX),
        )
    else:
        text = sql.SQL(
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET LOCAL {setting} = {user}"
        ).format(setting=sql.SQL(USER_SETTING), user=user)
    return text.as_bytes(conn)


def _acquire_pool(conninfo: str, where: str, max_size: int) -> ConnectionPool[Any]:
    """This process's pool for ``conninfo`` (made on first use, shared by every store on it,
    closed with the last one)."""
    from psycopg_pool import ConnectionPool

    with _pools_guard:
        entry = _pools.get(conninfo)
        if entry is not None:
            _pools[conninfo] = (entry[0], entry[1] + 1)
            return entry[0]
    # A first connection made directly: the pool retries a failing server in the background
    # and would only time out, where this says why (refused, unknown host, bad password…).
    psycopg = _psycopg()
    try:
        psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT_SECONDS).close()
    except psycopg.Error as exc:
        raise translate_error(exc, where, "connect to", _password(conninfo)) from exc
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS},
        timeout=POOL_TIMEOUT_SECONDS,
        name=f"elastimem {where}",
        open=False,
    )
    try:
        pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
    except Exception as exc:
        pool.close()
        raise translate_error(exc, where, "connect to", _password(conninfo)) from exc
    with _pools_guard:
        entry = _pools.get(conninfo)
        if entry is None:
            _pools[conninfo] = (pool, 1)
            return pool
        _pools[conninfo] = (entry[0], entry[1] + 1)  # another thread made one meanwhile
    pool.close()
    return entry[0]


def _release_pool(conninfo: str) -> None:
    with _pools_guard:
        entry = _pools.get(conninfo)
        if entry is None:
            return
        pool, users = entry
        if users > 1:
            _pools[conninfo] = (pool, users - 1)
            return
        del _pools[conninfo]
    pool.close()


def _user_lock(where: str, user_id: str) -> threading.RLock:
    with _pools_guard:
        lock = _user_locks.get((where, user_id))
        if lock is None:
            lock = _user_locks[(where, user_id)] = threading.RLock()
        return lock


class PostgresDatabase:
    """One user's store on a PostgreSQL server: its transactions on the shared pool."""

    def __init__(self, conninfo: str, user_id: str, *, pool_max_size: int = POOL_MAX_SIZE) -> None:
        _psycopg()  # ConfigError naming the extra, before anything else
        self.user_id = _check_user_id(user_id)  # ConfigError before any connection
        self.path = redact(conninfo)
        # Every user's rows share the address: a store is the address and the user.
        self.key = f"{self.path}#user={self.user_id}"
        self.is_memory = False
        self.cipher = None  # encryption at rest is the server's (README)
        self.read_only = False
        self.read_only_uri: str | None = None
        # The keyword index (chunk_terms / fact_terms) is part of the schema: always on.
        self.fts_enabled = True
        self.set_aside: str | None = None
        self._conninfo = conninfo
        self._secret = _password(conninfo)
        self._pool = _acquire_pool(conninfo, self.path, pool_max_size)
        # Writers of this user in this process take it (the advisory lock does the same
        # across processes); code above holds it around work that must not interleave.
        self._lock = _user_lock(self.path, self.user_id)
        self._depth = 0
        self._owner: int | None = None
        self._write_conn: psycopg.Connection[Any] | None = None
        self._closed = False
        # chunks has the pgvector copy of the vectors (schema.PGVECTOR_DOC): set at open.
        self.pgvector = False

    def _translate(self, exc: BaseException, action: str) -> StoreError:
        return translate_error(exc, f"{self.path} (user {self.user_id!r})", action, self._secret)

    # -- transactions ------------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[PostgresTx]:
        """The only way to write: BEGIN at the top (serialised per user), SAVEPOINT when
        nested; rolled back on any exception."""
        psycopg = _psycopg()
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"{self.path} is closed")
            depth = self._depth
            if depth == 0:
                conn = self._begin(write=True)
                self._write_conn = conn
            else:
                conn = self._writer()
                try:
                    conn.execute(f"SAVEPOINT em_sp{depth}")
                except psycopg.Error as exc:
                    raise self._translate(exc, "write to") from exc
            self._depth = depth + 1
            self._owner = threading.get_ident()
            try:
                yield PostgresTx(conn, self.user_id, pgvector=self.pgvector)
            except BaseException as exc:
                self._finish(depth, commit=False)
                if isinstance(exc, psycopg.Error):
                    raise self._translate(exc, "write to") from exc
                raise
            else:
                try:
                    self._finish(depth, commit=True)
                except psycopg.Error as exc:
                    raise self._translate(exc, "write to") from exc

    def _writer(self) -> psycopg.Connection[Any]:
        conn = self._write_conn
        if conn is None:  # pragma: no cover - depth > 0 always has one
            raise StoreError(f"{self.path}: no write transaction is open")
        return conn

    def _finish(self, depth: int, *, commit: bool) -> None:
        """COMMIT/RELEASE or ROLLBACK the level opened at ``depth``, then pop it; at the top
        the connection goes back to the pool whatever happened. A failed COMMIT raises."""
        psycopg = _psycopg()
        conn = self._writer()
        try:
            if depth == 0:
                conn.execute("COMMIT" if commit else "ROLLBACK")
            elif commit:
                conn.execute(f"RELEASE SAVEPOINT em_sp{depth}")
            else:
                conn.execute(f"ROLLBACK TO SAVEPOINT em_sp{depth}")
                conn.execute(f"RELEASE SAVEPOINT em_sp{depth}")
        except psycopg.Error:
            if depth > 0:
                # The failed level leaves the whole transaction aborted: the top level
                # rolls it back when it ends.
                self._depth = depth
                if commit:
                    raise
                return
            if commit:
                self._end_write(conn)
                raise
            # A rollback that failed: the pool rolls the connection back or discards it.
        if depth == 0:
            self._end_write(conn)
        else:
            self._depth = depth

    def _end_write(self, conn: psycopg.Connection[Any]) -> None:
        self._depth = 0
        self._owner = None
        self._write_conn = None
        self._checkin(conn)

    def in_write(self) -> bool:
        """True when the calling thread is inside this store's ``atomic()``."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextmanager
    def read(self) -> Iterator[PostgresTx]:
        """One consistent snapshot for reading (REPEATABLE READ, READ ONLY); inside this
        thread's ``atomic()``, that transaction (it sees its own writes)."""
        psycopg = _psycopg()
        if self.in_write():
            with self._lock:
                try:
                    yield PostgresTx(self._writer(), self.user_id, pgvector=self.pgvector)
                except psycopg.Error as exc:
                    raise self._translate(exc, "read") from exc
            return
        if self._closed:
            raise StoreClosedError(f"{self.path} is closed")
        conn = self._begin(write=False)
        try:
            try:
                yield PostgresTx(conn, self.user_id, writable=False, pgvector=self.pgvector)
            except psycopg.Error as exc:
                raise self._translate(exc, "read") from exc
            finally:
                try:
                    conn.execute("COMMIT")
                except psycopg.Error:
                    pass
        finally:
            self._checkin(conn)

    def _begin(self, *, write: bool) -> psycopg.Connection[Any]:
        """A pooled connection inside a new transaction for this user.

        A pooled connection the server dropped while it sat idle (a restart, an idle
        timeout, ``pg_terminate_backend``) fails its BEGIN before any work ran: it is
        discarded and the BEGIN retried once on a fresh connection.
        """
        psycopg = _psycopg()
        action = "write to" if write else "read"
        for attempt in range(2):
            conn = self._checkout(action)
            try:
                conn.execute(_begin_sql(conn, self.user_id, write=write))
                return conn
            except psycopg.Error as exc:
                broken = conn.broken
                self._checkin(conn)
                if not broken or attempt:
                    raise self._translate(exc, action) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _checkout(self, action: str) -> psycopg.Connection[Any]:
        psycopg = _psycopg()
        try:
            return self._pool.getconn()
        except psycopg.Error as exc:  # PoolTimeout and PoolClosed derive from it
            if self._closed:
                raise StoreClosedError(f"{self.path} is closed") from exc
            raise self._translate(exc, action) from exc

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        """Back to the pool (which rolls back a transaction left open, discards a broken
        connection, and closes it if the pool was closed meanwhile)."""
        try:
            self._pool.putconn(conn)
        except Exception:  # pragma: no cover - a connection the pool no longer knows
            conn.close()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def closed(self) -> bool:
        return self._closed

    def upkeep(self) -> StoreUpkeep:
        """What an erase does to the server's files: nothing (``admin.PostgresUpkeep``)."""
        from .admin import PostgresUpkeep

        return PostgresUpkeep(self)

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Nothing to do: the server checkpoints its own write-ahead log."""

    def close(self) -> None:
        """Stop serving this user (after the write in progress, which holds the lock); the
        pool closes with the last store using it, connections in use when they come back.
        New reads and writes raise :class:`StoreClosedError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _release_pool(self._conninfo)


def open_database(
    conninfo: str, user_id: str, *, create: bool = True, pool_max_size: int = POOL_MAX_SIZE
) -> PostgresDatabase:
    """Open ``user_id``'s store on the server at ``conninfo``: create or upgrade the schema
    (idempotent, safe when several processes start at once; a newer schema is refused with
    ``SchemaTooNewError``), then record the user's store on first use.

    ``create`` False opens only a user whose store exists: ``StoreError`` otherwise, and
    nothing is written. ``pool_max_size`` applies when this opens the process's first store
    on ``conninfo`` (later stores share that pool).
    """
    psycopg = _psycopg()
    db = PostgresDatabase(conninfo, user_id, pool_max_size=pool_max_size)
    try:
        conn = db._checkout("open")
        try:
            version = migrations.ensure_schema(conn, db.path, create=create)
            db.pgvector = has_pgvector_column(conn)
            _warn_if_rls_bypassed(conn, db.path)
        except psycopg.Error as exc:
            raise translate_error(exc, db.path, "create the schema on", db._secret) from exc
        finally:
            db._checkin(conn)
        _ensure_user(db, version, create=create)
    except BaseException:
        db.close()
        raise
    return db


def _ensure_user(db: PostgresDatabase, version: int, *, create: bool) -> None:
    """The user's own ``meta`` record of its store (created_at, created_by) and a ``created``
    event, written once whichever process gets there first."""
    from ...version import package_version

    __version__ = package_version()

    with db.read() as tx:
        if tx.meta.get("created_at") is not None:
            return
    if not create:
        raise StoreError(
            f"there is no elastimem store for user {db.user_id!r} on {db.path}, and none was "
            "created (create=False): check the user id, or open it with create=True"
        )
    with db.atomic() as tx:
        if tx.meta.get("created_at") is not None:
            return  # another process created it while we waited for the user's lock
        tx.meta.set("created_at", now_ts())
        tx.meta.set("created_by", __version__)
        tx.meta.set("user_id", db.user_id)
        tx.graph.ensure_self_node()  # as an SQLite store's schema creates it
        tx.meta.log_event("created", schema_version=version)


def _warn_if_rls_bypassed(conn: psycopg.Connection[Any], where: str) -> None:
    """Say once per address when row-level security does not bind this role."""
    if where in _rls_checked:
        return
    _rls_checked.add(where)
    row = conn.execute(
        "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if row and row[0]:
        logger.warning(
            "%s: this role is a superuser or has BYPASSRLS, so row-level security does not "
            "confine it to one user's rows; connect as an ordinary role in production",
            where,
        )


def prepare_server(conninfo: str) -> str:
    """Check that the server at ``conninfo`` answers and holds the current schema, creating
    or upgrading it as the first ``open_database`` would; return the address without its
    password. For a service that opens users' stores later: it fails at start, with
    ``StoreError`` (or ``SchemaTooNewError``) saying why and never showing the password,
    instead of on each user's first request. No user's store is created."""
    psycopg = _psycopg()
    where = redact(conninfo)
    secret = _password(conninfo)
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
    except psycopg.Error as exc:
        raise translate_error(exc, where, "connect to", secret) from exc
    try:
        with conn:
            migrations.ensure_schema(conn, where)
            _warn_if_rls_bypassed(conn, where)
    except psycopg.Error as exc:
        raise translate_error(exc, where, "create the schema on", secret) from exc
    return where
