"""What an operator sees of ``serve``: ``GET /metrics``, request metrics, trace context, and
the scheduled backups, as one pure ASGI middleware around the whole app.

``/metrics`` (Prometheus text format, ``ops.metrics``) is answered here, before the bearer
check, and only to a loopback client or a request carrying ``Authorization: Bearer
<metrics key>`` (``--metrics-key-file`` / ``ELASTIMEM_METRICS_KEY``); a user's key never
opens it (the service refuses to start with a metrics key that is also a user's key). Behind
a reverse proxy on the same machine, uvicorn takes the client from the proxy's
``X-Forwarded-For``, so remote clients stay remote.

Every other request is counted by method, route template (never the path itself: it holds
fact keys) and status, and timed. With tracing on (``ops.tracing``), an incoming W3C
``traceparent`` becomes the parent of the spans the request's memory operations make.
The backup schedule (``ops.schedule``) starts with the app and stops before its stores close.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .mcp_http import USER_SCOPE_KEY
from .ops_cli import OpsOptions

logger = logging.getLogger("elastimem")

METRICS_PATH = "/metrics"
METRICS_REFUSED = b'{"error": "metrics are served to loopback clients or with the metrics key"}'


def _route_template(scope: Scope, routes: list[Any]) -> str:
    """The template of the route that served the request, or would have (a request refused
    before routing, a 401); "unmatched" for a path no route takes (never the path itself)."""
    route = scope.get("route")
    if route is None:
        for candidate in routes:
            if candidate.matches(scope)[0] != Match.NONE:
                route = candidate
                break
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else "unmatched"


def _is_loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(str(client[0])).is_loopback
    except ValueError:
        return False


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


class Telemetry:
    """Pure ASGI: metrics, request timing, trace context and the backup schedule."""

    def __init__(
        self,
        app: ASGIApp,
        options: OpsOptions,
        target: str,
        stores: Callable[[], list[Any]],
        routes: list[Any],
    ) -> None:
        self.app = app
        self.routes = routes
        self.options = options
        self.stores = stores
        self.seen_users: set[str] = set()
        self.metrics: Any = None
        if options.metrics:
            from ..ops.metrics import Metrics

            self.metrics = Metrics()
        self.schedule: Any = None
        if options.backup_dir:
            from ..ops.schedule import BackupSchedule, folder_users
            from ..storage.addresses import is_postgres_url
            from .pool import check_target

            target = check_target(target)  # "~" expanded, as the stores see it

            def users() -> list[str]:
                if is_postgres_url(target):
                    return sorted(self.seen_users)
                return folder_users(target)

            on_round = self.metrics.backup_round if self.metrics is not None else None
            self.schedule = BackupSchedule(
                target, options.backup_dir, every=options.backup_every,
                keep=options.backup_keep, users=users, on_round=on_round,
            )  # fmt: skip
        self._extract: Any = None
        if options.tracing:
            from opentelemetry import context, propagate

            from ..ops.tracing import instrument

            instrument()
            self._extract = (propagate.extract, context.attach, context.detach)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._lifespan(receive), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == METRICS_PATH and self.metrics is not None:
            await self._serve_metrics(scope, send)
            return
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        token = None
        if self._extract is not None:
            extract, attach, _ = self._extract
            carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            token = attach(extract(carrier))
        started = time.perf_counter()
        try:
            await self.app(scope, receive, sending)
        finally:
            if token is not None:
                self._extract[2](token)
            user = scope.get(USER_SCOPE_KEY)
            if isinstance(user, str):
                self.seen_users.add(user)
            if self.metrics is not None:
                self.metrics.request_done(
                    scope["method"], _route_template(scope, self.routes), status[0],
                    time.perf_counter() - started,
                )  # fmt: skip

    def _lifespan(self, receive: Receive) -> Receive:
        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.metrics is not None:
                    self.metrics.subscribe()
                if self.schedule is not None:
                    self.schedule.start()
            elif message["type"] == "lifespan.shutdown":
                if self.schedule is not None:
                    await asyncio.to_thread(self.schedule.stop)
                if self.metrics is not None:
                    self.metrics.close()
            return message

        return receiving

    def _allowed(self, scope: Scope) -> bool:
        token = _bearer(scope)
        key = self.options.metrics_key
        if key and token and hmac.compare_digest(token.encode(), key.encode()):
            return True
        return _is_loopback(scope)

    async def _serve_metrics(self, scope: Scope, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _reply(send, 405, b'{"error": "method not allowed on this endpoint"}')
            return
        if not self._allowed(scope):
            await _reply(send, 403, METRICS_REFUSED)
            return
        from ..ops.metrics import CONTENT_TYPE

        body = await asyncio.to_thread(
            self.metrics.render, self.stores(), lambda store: store.sync.pending()
        )
        await _reply(send, 200, body, CONTENT_TYPE, head=scope["method"] == "HEAD")


async def _reply(
    send: Send, status: int, body: bytes, content_type: str = "application/json",
    *, head: bool = False,
) -> None:  # fmt: skip
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
