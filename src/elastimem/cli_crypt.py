"""The command line's encryption at rest: the global ``--key-file`` option and the
``encrypt``, ``decrypt`` and ``rekey`` commands (issue 31).

``--key-file FILE`` is an option of the ``elastimem`` group, so every command (``serve`` and
``ui`` too) opens the store with that key. It works as ``ELASTIMEM_KEY_FILE=FILE`` does for
the one command (and hides ``ELASTIMEM_KEY`` meanwhile): the library reads the variable when
it opens a store, so no command needs code of its own for it. ``serve`` opens every user's
store of its folder with that one key.

The conversions write a new file, check it and swap it in (``storage.sqlite.rekey``); they
refuse a store that any process has open.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from .errors import ElastimemError
from .storage.addresses import is_postgres_url
from .storage.sqlite.cipher import (
    KEY_ENV_VAR,
    KEY_FILE_ENV_VAR,
    CipherKey,
    read_key_file,
    resolve_key,
)

__all__ = ["register"]

Emit = Callable[..., None]


def _use_key_file(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--key-file``: ``ELASTIMEM_KEY_FILE`` for this command, restored when it ends."""
    if value is None:
        return
    if not os.path.isfile(os.path.expanduser(value)):
        raise click.BadParameter(f"{value} is not a file holding a key", param_hint="--key-file")
    saved = {name: os.environ.get(name) for name in (KEY_ENV_VAR, KEY_FILE_ENV_VAR)}
    os.environ.pop(KEY_ENV_VAR, None)
    os.environ[KEY_FILE_ENV_VAR] = os.path.abspath(os.path.expanduser(value))

    def restore() -> None:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

    ctx.call_on_close(restore)


KEY_FILE_OPTION = click.Option(
    ["--key-file"],
    metavar="FILE",
    expose_value=False,
    is_eager=True,
    callback=_use_key_file,
    help="Open an encrypted store with the key in FILE (default: $ELASTIMEM_KEY, else "
    "$ELASTIMEM_KEY_FILE); needs the extra 'encrypt'.",
)


def _store_file(state: Any) -> str:
    path = state.require_store()
    if path == ":memory:" or is_postgres_url(path):
        raise click.UsageError("encrypt, decrypt and rekey convert a store file; pass --db FILE")
    return path


def _current_key() -> CipherKey | None:
    try:
        return resolve_key(None)
    except ElastimemError as exc:
        raise click.UsageError(str(exc)) from exc


def register(group: click.Group, pass_state: Any, emit: Emit) -> None:
    """Add ``--key-file`` to the ``elastimem`` group and ``encrypt``, ``decrypt`` and ``rekey``
    to it. ``pass_state`` and ``emit`` are cli.py's (passed in, as to ``serve_command``: run
    as ``python -m elastimem.cli``, that module is ``__main__``, whose classes are not
    ``elastimem.cli``'s)."""
    group.params.append(KEY_FILE_OPTION)

    def _convert(state: Any, path: str, old: CipherKey | None, new: CipherKey | None) -> None:
        from .storage.sqlite.rekey import convert

        try:
            result: dict[str, Any] = convert(path, old, new)
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        rows = result["rows"]
        summary = {"tables": len(rows), "rows": sum(rows.values())}
        emit(state, {"path": result["path"], "encrypted": result["encrypted"], **summary})

    @click.command()
    @pass_state
    def encrypt(state: Any) -> None:
        """Encrypt a plain store in place with the key of --key-file (or $ELASTIMEM_KEY /
        $ELASTIMEM_KEY_FILE): a new encrypted file is written, checked (it opens with the key,
        its integrity check passes, every table has the same rows), then swapped in. Stop every
        process using the store first. Keep the key safe: without it the store cannot be read.

        \b
        Example:
          head -c 32 /dev/urandom | base64 > ~/.elastimem.key && chmod 600 ~/.elastimem.key
          elastimem --db notes.db --key-file ~/.elastimem.key encrypt
        """
        path = _store_file(state)
        new = _current_key()
        if new is None:
            raise click.UsageError("encrypt needs a key: pass --key-file FILE")
        _convert(state, path, None, new)

    @click.command()
    @pass_state
    def decrypt(state: Any) -> None:
        """Decrypt an encrypted store in place (its key from --key-file, $ELASTIMEM_KEY or
        $ELASTIMEM_KEY_FILE): a plain copy is written, checked, then swapped in.

        \b
        Example:
          elastimem --db notes.db --key-file ~/.elastimem.key decrypt
        """
        path = _store_file(state)
        old = _current_key()
        if old is None:
            raise click.UsageError("decrypt needs the store's key: pass --key-file FILE")
        _convert(state, path, old, None)

    @click.command()
    @click.option("--new-key-file", metavar="FILE", required=True,
                  help="The file holding the new key.")  # fmt: skip
    @pass_state
    def rekey(state: Any, new_key_file: str) -> None:
        """Re-encrypt an encrypted store in place under a new key: the current key from
        --key-file ($ELASTIMEM_KEY, $ELASTIMEM_KEY_FILE), the new one from --new-key-file. The
        store is copied under the new key, checked, then swapped in.

        \b
        Example:
          elastimem --db notes.db --key-file old.key rekey --new-key-file new.key
        """
        path = _store_file(state)
        old = _current_key()
        if old is None:
            raise click.UsageError("rekey needs the store's current key: pass --key-file FILE")
        try:
            new = read_key_file(new_key_file, source="--new-key-file")
        except ElastimemError as exc:
            raise click.UsageError(str(exc)) from exc
        if new == old:
            raise click.UsageError("the new key is the current key; pass a different one")
        _convert(state, path, old, new)

    for command in (encrypt, decrypt, rekey):
        group.add_command(command)
