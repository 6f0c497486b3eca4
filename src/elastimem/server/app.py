"""The ASGI app of ``elastimem serve``: authentication, routes, errors, lifespan.

Every request but ``GET /healthz``, ``GET /openapi.json`` and the web inspector's pages under
``/ui`` must carry ``Authorization: Bearer <token>`` with a token of the keys file; anything
else is the same 401, whatever was wrong. The inspector (``elastimem.web``) signs browsers in
with a key of the same file and keeps them signed in with a session cookie, which no other path
reads; it never reads a bearer header. The user id the token maps to goes into the ASGI scope
and picks the store; nothing in a request can name another user. A REST body larger than the
limit is a 413 before it is read in full; any other refusal is a 4xx with ``{"error": one
sentence}``, and a failure inside the store a 5xx that names no file, so no request can stop
the server.

Each key has a scope (``keys``): a route or MCP tool beyond it is a 403. With ``rate`` set,
each key has its own token bucket (``limits``): past it, a 429 with ``Retry-After``. A body
that has not arrived ``read_timeout`` seconds after the headers is a 408.

The lifespan opens the store pool (and the MCP session manager); at shutdown, after uvicorn
has drained the requests in flight, it closes every store.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ClosedError, ConfigError, ElastimemError, StoreLockedError
from . import rest
from .keys import KeyRing, Principal
from .limits import Rate, RateLimiter, retry_after
from .mcp_http import NEEDS_SDK, PRINCIPAL_SCOPE_KEY, USER_SCOPE_KEY, McpEndpoint
from .ops_cli import OpsOptions
from .pool import DEFAULT_MAX_OPEN, StorePool, StoreUnavailable, open_store
from .telemetry import Telemetry

logger = logging.getLogger("elastimem")

DEFAULT_MAX_BODY = 1024 * 1024
DEFAULT_READ_TIMEOUT = 30.0  # seconds for a request body to arrive in full
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json"})
UNAUTHORIZED = "a valid bearer token is required"
MCP_METHODS = ["GET", "POST", "DELETE"]
UI_PREFIX = "/ui"


@dataclass
class ServiceOptions:
    target: str
    keys: KeyRing
    max_open: int = DEFAULT_MAX_OPEN
    max_body: int = DEFAULT_MAX_BODY
    host: str = "127.0.0.1"
    store_options: dict[str, Any] = field(default_factory=dict)
    rate: Rate | None = None  # per key; None: no limit
    read_timeout: float = DEFAULT_READ_TIMEOUT
    ops: OpsOptions = field(default_factory=OpsOptions)  # metrics, traces, backups (telemetry)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _Authenticate:
    """Pure ASGI: resolve the bearer token to its key (or 401), count the key's rate (or
    429), and give the request body a deadline (or 408)."""

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        limiter: RateLimiter | None,
        read_timeout: float,
        max_body: int,
    ) -> None:
        self.app = app
        self.keys = keys
        self.limiter = limiter
        self.read_timeout = read_timeout
        self.max_body = max_body
        # A token that needs the slow hash is verified off the loop, two at a time, so a
        # flood of wrong tokens cannot stall the requests of known keys.
        self._hashing = asyncio.Semaphore(2)

    async def _principal(self, scope: Scope) -> Principal | None:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                token = token.strip()
                if scheme.lower() != "bearer" or not token:
                    return None
                found = self.keys.cached(token)
                if found is None and self.keys.needs_hash(token):
                    async with self._hashing:
                        found = await asyncio.to_thread(self.keys.lookup, token)
                return found
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope["path"] in PUBLIC_PATHS and scope["method"] in ("GET", "HEAD")
        ):
            await self.app(scope, receive, send)
            return
        if scope["path"] == UI_PREFIX or scope["path"].startswith(UI_PREFIX + "/"):
            # The inspector signs browsers in itself (a key in a form, then a session
            # cookie); a bearer header is not read there, nor a cookie anywhere else.
            await self.app(scope, receive, send)
            return
        principal = await self._principal(scope)
        if principal is None:
            response = _error(401, UNAUTHORIZED)
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        wait = self.limiter.wait_for(principal.label) if self.limiter is not None else 0.0
        if wait > 0:
            response = _error(429, "this key sent more requests than its rate limit allows")
            response.headers["Retry-After"] = retry_after(wait)
            await response(scope, receive, send)
            return
        scope[USER_SCOPE_KEY] = principal.user
        scope[PRINCIPAL_SCOPE_KEY] = principal
        timed = _body_deadline(receive, self.read_timeout)
        if scope["path"] == "/mcp":
            # The MCP app answers any error of its own with a 500: its body is read here,
            # under the deadline and the limit, and handed to it whole.
            try:
                timed = await _buffered(timed, self.max_body)
            except rest.ApiError as exc:
                await _error(exc.status, exc.message)(scope, receive, send)
                return
        await self.app(scope, timed, send)


class _BodyTooSlow(rest.ApiError):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body did not arrive within {seconds:g} seconds")


async def _buffered(receive: Receive, limit: int) -> Receive:
    """Read the whole body now (``_BodyTooSlow``, or 413 past ``limit``); then replay it."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise rest.ApiError(400, "the client left before sending its request body")
        body += message.get("body", b"")
        if len(body) > limit:
            raise rest.ApiError(413, f"the request body is larger than {limit} bytes")
        if not message.get("more_body", False):
            break
    first: Message | None = {"type": "http.request", "body": bytes(body), "more_body": False}

    async def replay() -> Message:
        nonlocal first
        if first is not None:
            message, first = first, None
            return message
        return await receive()

    return replay


def _body_deadline(receive: Receive, seconds: float) -> Receive:
    """``receive`` that raises ``_BodyTooSlow`` when the body is not in ``seconds`` after
    the headers: a client trickling its body cannot hold the request open for ever."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    done = False

    async def timed() -> Message:
        nonlocal done
        if done:  # the body is in: what follows (a disconnect) may come at any time
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            raise _BodyTooSlow(seconds) from None
        done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return timed


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise rest.ApiError(413, f"the request body is larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise rest.ApiError(413, f"the request body is larger than {limit} bytes")
    return bytes(body)


def _failure_response(exc: BaseException, where: str) -> JSONResponse:
    """The reply for an exception out of the store; logs what the client is not told."""
    if isinstance(exc, rest.ApiError):
        return _error(exc.status, exc.message)
    if isinstance(exc, ConfigError):  # the caller's argument, as the store judged it
        return _error(400, str(exc).split("\n")[0])
    if isinstance(exc, StoreUnavailable):
        return _error(503, str(exc))
    if isinstance(exc, (StoreLockedError, ClosedError)):
        logger.warning("%s: %s: %s", where, type(exc).__name__, exc)
        return _error(503, "the store is busy or closing; retry in a moment")
    if isinstance(exc, ElastimemError):
        logger.error("%s: %s: %s", where, type(exc).__name__, exc)
        return _error(500, "the store could not complete the request; see the server log")
    # Not ours: the message may quote user text, so only the type is logged.
    logger.error("%s failed: %s", where, type(exc).__name__, exc_info=logger.isEnabledFor(10))
    return _error(500, "internal error; see the server log")


class _ExportResponse(StreamingResponse):
    """Stops the export when the response ends, read in full or not (client gone)."""

    def __init__(self, content: Any, stop: threading.Event) -> None:
        super().__init__(
            content,
            media_type="application/x-ndjson",
            headers={"Content-Disposition": 'attachment; filename="elastimem-export.jsonl"'},
        )
        self._stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._stop.set()


def build_app(options: ServiceOptions) -> Starlette:
    """The service as an ASGI app (run it with uvicorn, lifespan on)."""
    state: dict[str, StorePool] = {}

    def pool() -> StorePool:
        return state["pool"]

    def route(endpoint: rest.Endpoint) -> Route:
        where = f"{endpoint.method} {endpoint.path}"

        async def handle(request: Request) -> Response:
            user_id = request.scope[USER_SCOPE_KEY]
            principal: Principal = request.scope[PRINCIPAL_SCOPE_KEY]
            if not principal.allows(endpoint.scope):
                return _error(403, f"this key's scope ({principal.scope}) does not allow "
                                   f"{where}; it needs a {endpoint.scope} key")  # fmt: skip
            try:
                body = await _read_body(request, options.max_body)
                if endpoint.streams:
                    if body.strip() or request.query_params:
                        raise rest.ApiError(400, f"{where} takes no arguments")
                    stack = AsyncExitStack()
                    mem = await stack.enter_async_context(pool().lease(user_id))
                    try:
                        chunks, stop = await rest.export_stream(stack, mem)
                    except BaseException:
                        await stack.aclose()
                        raise
                    return _ExportResponse(chunks, stop)
                async with pool().lease(user_id) as mem:
                    result = await rest.run_endpoint(
                        endpoint, mem, body, request.query_params, dict(request.path_params)
                    )
                if isinstance(result, rest.Reply):
                    return JSONResponse(result.body, status_code=result.status)
                return JSONResponse(result, status_code=endpoint.status)
            except Exception as exc:
                return _failure_response(exc, where)

        handle.__name__ = endpoint.operation_id
        return Route(endpoint.path, handle, methods=[endpoint.method])

    mcp: McpEndpoint | None
    try:
        mcp = McpEndpoint(pool, max_body=options.max_body, host=options.host)
    except ImportError:
        logger.warning("/mcp is off: %s", NEEDS_SDK)
        mcp = None
    document = rest.openapi_document(mcp=mcp is not None)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def no_mcp(request: Request) -> Response:
        return _error(501, NEEDS_SDK)

    routes: list[BaseRoute] = [route(endpoint) for endpoint in rest.ENDPOINTS]
    routes += _inspector(pool, options.keys)
    routes += [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/mcp", mcp) if mcp is not None else Route("/mcp", no_mcp, methods=MCP_METHODS),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def opener(user_id: str) -> Any:
            return await open_store(options.target, user_id, **options.store_options)

        state["pool"] = StorePool(opener, options.max_open)
        reload_on_hangup(options.keys)
        try:
            if mcp is not None:
                async with mcp.session_manager.run():
                    yield
            else:
                yield
        finally:
            await state["pool"].close_all()
            logger.info("every store is closed")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {404: "no such endpoint", 405: "method not allowed on this endpoint"}
        return _error(exc.status_code, message.get(exc.status_code, str(exc.detail)))

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error},
    )
    limiter = RateLimiter(options.rate) if options.rate is not None else None
    app.add_middleware(
        _Authenticate, keys=options.keys, limiter=limiter, read_timeout=options.read_timeout,
        max_body=options.max_body,
    )  # fmt: skip
    stores = lambda: state["pool"].stores() if "pool" in state else []  # noqa: E731
    app.add_middleware(Telemetry, options=options.ops, target=options.target, stores=stores,
                       routes=routes)  # fmt: skip
    return app


def _inspector(pool: Callable[[], StorePool], keys: KeyRing) -> list[BaseRoute]:
    """The web inspector at ``/ui`` for every key's user, or nothing without Jinja2."""
    try:
        from ..web.app import InspectorOptions, build_inspector
        from ..web.signin import KeyGate
    except ImportError:
        logger.warning(
            "/ui is off: the web inspector needs Jinja2 (pip install 'elastimem[server]')"
        )
        return []

    def lease(user_id: str) -> Any:
        return pool().lease(user_id)

    inspector = build_inspector(InspectorOptions(lease, gate=KeyGate(keys)))
    return [Mount(UI_PREFIX, inspector)]


def reload_on_hangup(keys: KeyRing) -> None:
    """SIGHUP reads the keys file again (off the loop); a bad file keeps the old keys."""
    if threading.current_thread() is not threading.main_thread():
        return
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is None:
        return
    loop = asyncio.get_running_loop()

    def on_hangup() -> None:
        task = loop.create_task(asyncio.to_thread(keys.reload))
        _reloads.add(task)
        task.add_done_callback(_reloads.discard)

    try:
        loop.add_signal_handler(hangup, on_hangup)
    except (NotImplementedError, RuntimeError):  # not the main loop, or no signals here
        logger.warning("SIGHUP reloading of the keys is not available on this platform")


_reloads: set[asyncio.Task[bool]] = set()
