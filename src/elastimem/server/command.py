"""``elastimem serve``: the click command and the uvicorn run behind it.

uvicorn owns SIGTERM and SIGINT: it stops accepting, lets the requests in flight finish (up
to ``--drain-timeout``), then runs the app's shutdown, which closes every store. It then
re-raises the signal to the handler that was in place before it; ours exits with status 0,
as a stop that was asked for and done cleanly. SIGHUP reloads the keys (see ``app``).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import click

from .. import cli_paths
from ..errors import ElastimemError
from .ops_cli import OpsOptions, check_metrics_key, ops_options

MISSING_EXTRA = (
    "elastimem serve needs Starlette and uvicorn; install them with: "
    "pip install 'elastimem[server]' (add the mcp extra for /mcp)"
)


def serve_command(
    pass_state: Callable[..., Any],
    llm_options: Callable[..., Any],
    make_llm: Callable[[str | None, str | None, str | None], Any],
) -> click.Command:
    """The ``serve`` command, built from the CLI's state decorator and LLM options (handed in,
    so this module never imports the CLI back)."""

    @click.command(name="serve")
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
    @click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
                  help="Port to listen on.")  # fmt: skip
    @click.option("--keys", "keys_path", required=True, metavar="KEYS.json",
                  type=click.Path(dir_okay=False),
                  help='JSON object {"<token>": "<user_id>"}; reloaded on SIGHUP.')  # fmt: skip
    @click.option("--max-open", default=64, show_default=True, type=click.IntRange(1),
                  help="Stores kept open at once (least recently used close first).")  # fmt: skip
    @click.option("--max-body", default=1024 * 1024, show_default=True, type=click.IntRange(1),
                  help="Largest request body in bytes (larger: 413).")  # fmt: skip
    @click.option("--drain-timeout", default=30, show_default=True, type=click.IntRange(0),
                  help="Seconds SIGTERM waits for requests in flight.")  # fmt: skip
    @click.option("--rate-limit", metavar="N/s|N/min",
                  help="Requests each key may send, such as 20/s or 600/min (past it: 429 "
                  "with Retry-After). Default: no limit.")  # fmt: skip
    @click.option("--rate-burst", type=click.IntRange(1), metavar="N",
                  help="Requests a key may send at once after a quiet spell (default: N of "
                  "--rate-limit).")  # fmt: skip
    @click.option("--read-timeout", default=30.0, show_default=True,
                  type=click.FloatRange(0.1),
                  help="Seconds a request's headers, and then its body, may take to arrive "
                  "(headers: the connection is closed; body: 408).")  # fmt: skip
    @llm_options
    @click.option("--no-embedder", is_flag=True, help="Keyword search only (no model is loaded).")
    @ops_options
    @pass_state
    def serve(state: Any, host: str, port: int, keys_path: str, max_open: int, max_body: int,
              drain_timeout: int, rate_limit: str | None, rate_burst: int | None,
              read_timeout: float, llm_url: str | None, llm_model: str | None,
              llm_key: str | None, no_embedder: bool, ops: OpsOptions) -> None:  # fmt: skip
        """Serve per-user memory over HTTP: REST under /v1 and MCP at /mcp.

        --db names a folder, where each user's store is <folder>/<user_id>.db, or a
        postgresql:// address, where every user's store lives in one schema (created at start
        when missing; the role needs the privileges to create it, or an owner creates it
        once). Every request needs
        "Authorization: Bearer <token>" with a token of the keys file, and reaches only that
        token's user, within its key's scope (see elastimem keys). Needs the extra: pip
        install 'elastimem[server,mcp]'.

        \b
        Example:
          elastimem keys add alice --keys keys.json --scope write --label laptop
          elastimem --db ~/memory-users serve --keys keys.json --port 8765 --rate-limit 20/s
          elastimem --db postgresql://app@db.internal/memory serve --keys keys.json
        """
        try:
            import starlette  # noqa: F401
            import uvicorn
        except ImportError as exc:
            raise click.ClickException(MISSING_EXTRA) from exc
        from .app import ServiceOptions, build_app
        from .deadlines import header_deadline_protocol
        from .keys import KeyRing
        from .limits import Rate
        from .pool import prepare_target

        target = (
            state.db
            or os.environ.get("ELASTIMEM_DB")
            or cli_paths.default_path("users")
        )
        store_options: dict[str, Any] = {"disable_builtin_embedder": no_embedder}
        llm = make_llm(llm_url, llm_model, llm_key)
        if llm is not None:
            store_options["llm"] = llm
        if state.tier:
            store_options["tier_override"] = state.tier
        try:
            keys = KeyRing(keys_path)
            rate = Rate.parse(rate_limit, rate_burst) if rate_limit is not None else None
            check_metrics_key(ops, keys)
            # "~" expanded, as the stores see it; a server is reached now, its password hidden.
            stores = prepare_target(target)
        except ElastimemError as exc:
            raise click.ClickException(str(exc)) from exc
        _configure_logging(state.verbose)
        options = ServiceOptions(target, keys, max_open, max_body, host, store_options, ops=ops)
        options.rate, options.read_timeout = rate, read_timeout
        app = build_app(options)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="on",
            # Paths and queries carry fact keys and questions: logged only with -v.
            access_log=state.verbose,
            log_level="info" if state.verbose else "warning",
            timeout_graceful_shutdown=drain_timeout,
            server_header=False,
            http=header_deadline_protocol(read_timeout),
            timeout_keep_alive=5,  # an idle connection is closed after 5 s (uvicorn's default)
        )
        # Bound here, before saying "serving": a port in use is one clear error (uvicorn
        # logged its errno line and exited 3), and --port 0 shows the port it got.
        sock = _listen(host, port)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        click.echo(
            f"elastimem: serving {len(keys)} key(s), stores {stores}, "
            f"on http://{shown}:{bound} (REST /v1, MCP /mcp, docs /openapi.json)",
            err=True,
        )
        if keys.plain:  # once, after the serving line
            click.echo(
                f"elastimem: warning: {keys_path} holds tokens in the clear, each with every "
                "scope; create hashed, scoped keys with: elastimem keys add USER --keys FILE",
                err=True,
            )
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _stopped)
        with sock:
            uvicorn.Server(config).run(sockets=[sock])

    return serve


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds it), or a ClickException saying why
    not and what to do."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise click.ClickException(
            f"cannot listen on {host}: it is no address of this machine ({exc}); pass --host "
            "with one, such as 127.0.0.1 or 0.0.0.0"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            message = (
                f"port {port} on {host} is already in use (another elastimem serve?); stop "
                "that process or pick another --port"
            )
        else:
            message = (
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another --host or --port"
            )
        raise click.ClickException(message) from None
    sock.set_inheritable(True)
    return sock


def _stopped(signum: int, frame: Any) -> None:
    """Runs after uvicorn's graceful shutdown, which re-raises the signal that asked for it,
    or for a signal that came before uvicorn took the signals over (no store is open yet).

    Exits at once instead of raising SystemExit: raised from a signal handler, it can land
    inside a weakref callback or a finaliser, where Python drops it, and the server went on
    serving (a SIGTERM just after the "serving" line). Both callers have nothing left to
    close: the lifespan closed every store before uvicorn re-raised the signal.
    """
    sys.stderr.write("elastimem: stopped\n")
    sys.stderr.flush()
    sys.stdout.flush()
    logging.shutdown()
    os._exit(0)


def _configure_logging(verbose: bool) -> None:
    from ..mcp_server import configure_stderr_logging

    configure_stderr_logging(verbose)
