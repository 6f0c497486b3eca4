"""``elastimem ui``: the web inspector for one store, served to its owner on loopback.

The store is opened once (async API) for the life of the server. On a loopback address no
sign-in is asked for (the inspector refuses requests whose Host is not a loopback name, so a
web page cannot reach it through DNS rebinding); any other address needs ``--keys``, and
browsers then sign in with a key of that file, as under ``serve``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import webbrowser
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import click

from .errors import ElastimemError

MISSING_EXTRA = (
    "elastimem ui needs Starlette, uvicorn and Jinja2; install them with: "
    "pip install 'elastimem[server]'"
)


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def ui_command(
    pass_state: Callable[..., Any],
    llm_options: Callable[..., Any],
    make_llm: Callable[[str | None, str | None, str | None], Any],
) -> click.Command:
    """The ``ui`` command, built from the CLI's state decorator and LLM options (handed in,
    as for ``serve``, so this module never imports the CLI back)."""

    @click.command(name="ui")
    @click.option(
        "--db",
        "db_opt",
        metavar="TARGET",
        help="The store (as the global --db): a file or a postgresql:// address.",
    )
    @click.option("--user", "user_opt", metavar="ID", help="Whose memory (as the global --user).")
    @click.option(
        "--host",
        default="127.0.0.1",
        show_default=True,
        help="Address to listen on; one that is not loopback needs --keys.",
    )
    @click.option(
        "--port",
        default=0,
        type=click.IntRange(0, 65535),
        help="Port to listen on [default: a free one].",
    )
    @click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
    @click.option(
        "--keys",
        "keys_path",
        metavar="KEYS.json",
        type=click.Path(dir_okay=False),
        help="Ask browsers to sign in with a key of this file (as serve's --keys).",
    )
    @llm_options
    @click.option("--no-embedder", is_flag=True, help="Keyword search only (no model is loaded).")
    @pass_state
    def ui(state: Any, db_opt: str | None, user_opt: str | None, host: str, port: int,
           no_browser: bool, keys_path: str | None, llm_url: str | None, llm_model: str | None,
           llm_key: str | None, no_embedder: bool) -> None:  # fmt: skip
        """See, search and correct what the store remembers, in your browser.

        Serves the store on 127.0.0.1 (a free port unless --port says), prints the address and
        opens it in the browser. Pages: overview, facts with their version history (edit,
        forget, erase), search with why each result ranked, sessions and transcripts, lessons,
        the quarantine of refused writes, the entity graph, export and import. Ctrl-C stops.

        \b
        Example:
          elastimem --db ~/agent-memory.db ui
          elastimem ui --db postgresql://app@db/memory --user alice --port 8780 --no-browser
        """
        try:
            import jinja2  # noqa: F401
            import starlette  # noqa: F401
            import uvicorn
        except ImportError as exc:
            raise click.ClickException(MISSING_EXTRA) from exc
        from starlette.applications import Starlette
        from starlette.routing import Mount

        from . import aio
        from .web.app import InspectorOptions, build_inspector
        from .web.signin import KeyGate

        if db_opt is not None:
            state.db = db_opt
        if user_opt is not None:
            state.user = user_opt
        if not is_loopback(host) and not keys_path:
            raise click.UsageError(
                f"--host {host} is not a loopback address: anyone who reaches it would read this "
                "store; pass --keys KEYS.json so that browsers must sign in with a key"
            )
        path = state.db_path()
        user_id = state.user_id()
        gate = None
        if keys_path:
            from .server.keys import KeyRing

            try:
                gate = KeyGate(KeyRing(keys_path), only_user=user_id)
            except ElastimemError as exc:
                raise click.ClickException(str(exc)) from exc
        options: dict[str, Any] = {"disable_builtin_embedder": no_embedder}
        llm = make_llm(llm_url, llm_model, llm_key)
        if llm is not None:
            options["llm"] = llm
        if state.tier:
            options["tier_override"] = state.tier
        opened: dict[str, aio.AsyncElastimem] = {}

        @asynccontextmanager
        async def lease(_user: str) -> AsyncIterator[aio.AsyncElastimem]:
            yield opened["mem"]  # one store: the session's user is its owner (or a key of it)

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            opened["mem"] = await aio.open(path, user_id=user_id, **options)
            try:
                yield
            finally:
                await opened["mem"].close()

        owner = None if gate is not None else (user_id or "owner")
        inspector = build_inspector(InspectorOptions(lease, owner=owner, gate=gate,
                                                     loopback_only=gate is None))  # fmt: skip
        app = Starlette(routes=[Mount("/", inspector)], lifespan=lifespan)
        sock = _bind(host, port)
        shown = f"[{host}]" if ":" in host else host
        address = f"http://{shown}:{sock.getsockname()[1]}/"
        click.echo(f"elastimem ui: {state.shown()} on {address} (Ctrl-C stops)", err=True)
        click.echo(address)
        if not no_browser:
            threading.Timer(0.5, webbrowser.open, args=(address,)).start()
        config = uvicorn.Config(app, lifespan="on", access_log=state.verbose, server_header=False,
                                log_level="info" if state.verbose else "warning")  # fmt: skip
        try:
            with sock:
                uvicorn.Server(config).run(sockets=[sock])
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc

    return ui


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    if os.name != "nt":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port} ({exc.strerror})") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
