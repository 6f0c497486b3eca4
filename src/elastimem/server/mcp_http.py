"""The ``serve-mcp`` tools over streamable HTTP at ``/mcp``, each call on its caller's store.

The tools are ``mcp_server.build_server``'s, unchanged: they are given a stand-in store
(``_CallerStore``) that forwards to whichever store the current tool call is bound to. An
SDK middleware binds it: for ``tools/call`` it leases the store of the user whose key
authenticated the HTTP request (put in the ASGI scope by the app) for the length of the
call, once it has checked that the key's scope allows the tool (``TOOL_SCOPES``). The SDK
runs each (sync) tool on a worker thread with the caller's context, so the
binding follows the call and nothing else. The request's user is also handed to the SDK as
its authenticated principal, so an MCP session only answers the key's user that opened it.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Any

from ..errors import ClosedError
from .pool import StorePool

USER_SCOPE_KEY = "elastimem.user_id"
PRINCIPAL_SCOPE_KEY = "elastimem.principal"  # the key's ``keys.Principal``
# The least key scope each tool needs (as the REST routes that do the same); a tool not
# listed needs admin, so a new tool is closed until it is placed here.
TOOL_SCOPES = {
    "recall": "read", "facts": "read", "timeline": "read", "build_context": "read",
    "remember": "write", "forget": "write", "add_lesson": "write", "record_turn": "write",
}  # fmt: skip
NEEDS_SDK = (
    "MCP over HTTP needs the official MCP SDK 2 or newer; install it with: "
    "pip install 'elastimem[mcp]'"
)

_bound: contextvars.ContextVar[Any] = contextvars.ContextVar("elastimem_mcp_store", default=None)


class _CallerStore:
    """Stands for the ``Elastimem`` of the user making the current MCP tool call."""

    def __getattr__(self, name: str) -> Any:
        mem = _bound.get()
        if mem is None:
            raise ClosedError("no store is bound to this MCP call; retry the call")
        return getattr(mem, name)


class McpEndpoint:
    """The ``/mcp`` ASGI app, and the session manager to run for the app's lifetime."""

    def __init__(self, pool: Callable[[], StorePool], *, max_body: int, host: str) -> None:
        from ..mcp_server import MissingExtraError, build_server

        try:
            server = build_server(_CallerStore())
        except MissingExtraError as exc:
            raise ImportError(NEEDS_SDK) from exc
        if not logging.getLogger("elastimem").isEnabledFor(logging.INFO):
            # The SDK logs each session at INFO on its own handler; quiet unless -v.
            logging.getLogger("mcp").setLevel(logging.WARNING)
        if not hasattr(server, "middleware"):  # mcp 1.x: no per-message middleware
            raise ImportError(NEEDS_SDK)

        async def bind_store(ctx: Any, call_next: Any) -> Any:
            if ctx.method != "tools/call":
                return await call_next(ctx)
            scope = getattr(ctx.request, "scope", None) or {}
            user_id = scope.get(USER_SCOPE_KEY)
            principal = scope.get(PRINCIPAL_SCOPE_KEY)
            if user_id is None or principal is None:  # the app authenticates every /mcp request
                raise ClosedError("this MCP call carries no authenticated user")
            name = str((ctx.params or {}).get("name", ""))
            needed = TOOL_SCOPES.get(name, "admin")
            if not principal.allows(needed):
                message = (
                    f"this key's scope ({principal.scope}) does not allow the tool {name!r}; "
                    f"it needs a {needed} key"
                )
                return {"content": [{"type": "text", "text": message}], "isError": True}
            async with pool().lease(user_id) as store:
                token = _bound.set(store.sync)
                try:
                    return await call_next(ctx)
                finally:
                    _bound.reset(token)

        server.middleware.append(bind_store)
        self._app = server.streamable_http_app(
            streamable_http_path="/mcp", max_request_body_size=max_body, host=host
        )
        self.session_manager = server.session_manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        # The principal the SDK binds sessions to: the user, never the token itself.
        principal = AccessToken(token="", client_id=scope[USER_SCOPE_KEY], scopes=[])
        scope["user"] = AuthenticatedUser(principal)
        await self._app(scope, receive, send)
