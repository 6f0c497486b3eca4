"""Where the command line keeps a user's memory when no ``--db`` or ``ELASTIMEM_DB`` says.

The platform's data folder: ``$XDG_DATA_HOME/elastimem`` (else ``~/.local/share/elastimem``)
on Linux and other Unix systems, ``~/Library/Application Support/elastimem`` on macOS and
``%APPDATA%\\elastimem`` on Windows (click's app folder there). Memory is data, not
configuration: backups and sync tools treat the two folders differently.

Before issue 27 the default on Linux was click's app folder, the *configuration* folder
(``$XDG_CONFIG_HOME/elastimem``, else ``~/.config/elastimem``). A store already there keeps
being found and used, so an upgrade never answers from a new, empty store beside it; the
new default is used only when no store sits at the old one.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import click

from .errors import ConfigError
from .storage.addresses import is_postgres_url, refuse_database_url

APP_NAME = "elastimem"
DB_ENV_VAR = "ELASTIMEM_DB"
USER_ENV_VAR = "ELASTIMEM_USER"


def data_dir() -> str:
    """The platform's per-user data folder for elastimem (not created here)."""
    if sys.platform in ("win32", "darwin"):
        return click.get_app_dir(APP_NAME)  # the data folder on these platforms
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.expanduser("~/.local/share")
    return os.path.join(base, APP_NAME)


def legacy_dir() -> str:
    """The folder the default store lived in before issue 27 (click's app folder)."""
    return click.get_app_dir(APP_NAME)


def default_path(name: str) -> str:
    """``name`` (a store file or the service's users folder) in :func:`data_dir`, unless only
    the folder of earlier versions holds it: then that one, so it keeps being used."""
    current = os.path.join(data_dir(), name)
    legacy = os.path.join(legacy_dir(), name)
    if legacy != current and not os.path.exists(current) and os.path.exists(legacy):
        return legacy
    return current


def default_db_path() -> str:
    """The default store file: ``memory.db`` in the data folder (or where it already is)."""
    return default_path("memory.db")


def is_legacy(path: str) -> bool:
    """Whether ``path`` lies in the folder of earlier versions (``elastimem path`` says so)."""
    legacy = Path(legacy_dir())
    return legacy != Path(data_dir()) and Path(path).parent == legacy


def store_address(db: str | None, user_id: Callable[[], str | None]) -> str:
    """The store's address from ``--db``, else ``ELASTIMEM_DB``, else the default: a file,
    ``~`` expanded and absolute (what ``path`` shows is what opens), or a ``postgresql://``
    address as given (which needs a user: ``user_id()``)."""
    if db is not None and not db.strip():
        raise click.UsageError("--db is empty; pass the path of a store file")
    raw = db or os.environ.get(DB_ENV_VAR) or default_db_path()
    if is_postgres_url(raw):
        if user_id() is None:
            raise click.UsageError(
                "a PostgreSQL store holds many users' memory: pass --user ID (or set "
                f"{USER_ENV_VAR}) to say whose memory to use"
            )
        return raw
    try:
        refuse_database_url(raw)  # before realpath makes "mysql://h/db" a path
    except ConfigError:
        # Only the scheme: the rest of an address may hold a password.
        scheme = raw.split(":", 1)[0]
        raise click.ClickException(
            f"{scheme}://… is an address, not a file path; pass the path of a store file, "
            "':memory:' or a postgresql:// address"
        ) from None
    # realpath, as the store resolves it: a symlink shows the file that opens.
    return raw if raw == ":memory:" else os.path.realpath(os.path.expanduser(raw))


def no_store(shown: str, user_id: str | None) -> str:
    """The CLI's words for a server with no store for this user (not the API's create=)."""
    again = f"elastimem --db URL --user {shlex.quote(user_id or 'ID')} remember KEY VALUE"
    return (
        f"there is no elastimem store for user {user_id!r} on {shown} (nothing was created); "
        f"check the address and --user, or create it with a command that stores something, "
        f"e.g. {again}"
    )
