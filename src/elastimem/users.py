"""Per-user stores: one file per user under a root folder (SPEC §1.3)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .errors import ConfigError

USER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_WINDOWS_DEVICES = frozenset(
    {"con", "prn", "aux", "nul"}
    | {f"com{i}" for i in range(1, 10)}
    | {f"lpt{i}" for i in range(1, 10)}
)


def check_user_id(user_id: object) -> str:
    """The id itself when it is safe as a file name under the root; else ``ConfigError``."""
    if not isinstance(user_id, str) or not USER_ID_PATTERN.fullmatch(user_id):
        raise ConfigError(
            f"user_id={user_id!r} is invalid; use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if user_id in (".", "..") or user_id.split(".")[0].casefold() in _WINDOWS_DEVICES:
        raise ConfigError(f"user_id={user_id!r} is a reserved name; choose another id")
    return user_id


def open_user(root_dir: str | os.PathLike[str], user_id: str, **kw: Any) -> Any:
    """Open ``<root_dir>/<user_id>.db``, creating ``root_dir`` with mode 0o700."""
    from .db import get_meta, set_meta
    from .store import Elastimem

    check_user_id(user_id)
    if not isinstance(root_dir, (str, os.PathLike)):
        raise ConfigError(f"root_dir={root_dir!r} is invalid; pass a folder path")
    root = Path(os.path.expanduser(os.fspath(root_dir)))
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the user folder {root} ({exc.strerror})") from exc
    target = (root / f"{user_id}.db").resolve()
    if target.parent != root.resolve():
        raise ConfigError(f"user_id={user_id!r} would escape the root folder {root}")
    store = Elastimem(target, **kw)
    try:
        with store._db.atomic() as conn:
            recorded = get_meta(conn, "user_id")
            if recorded is None:
                set_meta(conn, "user_id", user_id)
            elif recorded != user_id:
                raise ConfigError(
                    f"{target} belongs to user {recorded!r}, not {user_id!r}; check the root"
                )
    except BaseException:
        store.close()
        raise
    return store
