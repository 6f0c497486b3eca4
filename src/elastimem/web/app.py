"""The inspector as an ASGI app: routes, sign-in, CSRF, security headers, templates.

Every response carries a Content-Security-Policy that allows scripts and styles from the
app's own static files only (no inline script, no other origin), refuses framing by other
sites and sends no referrer. On loopback (``elastimem ui`` without keys) a request whose Host
is not a loopback name is refused, so a web page cannot reach the store by rebinding a DNS
name to 127.0.0.1.

Each page runs through ``_guarded``: it finds the browser session (starting one signed in as
the owner under ``elastimem ui``, or sending the browser to the sign-in form), checks the
CSRF token of a POST (403 without a valid one), leases the session user's store and turns a
refused argument into a 400 page. Nothing in a request names a user but the session.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigError
from . import pages
from .signin import COOKIE, LIFETIME_S, BrowserSession, KeyGate, Sessions, csrf_ok

logger = logging.getLogger("elastimem")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
# Largest form other than an import upload (which streams into a temporary file).
MAX_FORM_PART = 1024 * 1024


@dataclass
class InspectorOptions:
    """``lease(user_id)`` gives that user's store for one request. With ``owner`` set
    (``elastimem ui`` without keys) every browser is that user; otherwise ``gate`` signs
    browsers in by key."""

    lease: pages.Lease
    owner: str | None = None
    gate: KeyGate | None = None
    loopback_only: bool = False


class _Headers:
    """Pure ASGI: add the security headers a response does not set itself; check Host."""

    def __init__(self, app: ASGIApp, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback_only and not _loopback_host(scope):
            await Response("unknown host", 400)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


# The refusal of a change a signed-in key's scope does not cover (as the REST API's 403).
SCOPE_WORDS = {"read": "only look", "write": "look and change facts", "admin": "do everything"}
SCOPE_WORDS_NEEDED = {"read": "this page is for every key",
                      "write": "changing memories needs a write or admin key",
                      "admin": "erasing and importing need an admin key"}  # fmt: skip


def _loopback_host(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host.split("]")[0] + "]" in LOOPBACK_NAMES
            return host.rsplit(":", 1)[0] in LOOPBACK_NAMES
    return False


def _cookie_values(request: Request, name: str) -> list[str]:
    """Every value of cookie ``name``: cookies ignore the port, so an inspector on another
    port of the same host (``elastimem ui`` beside ``serve``) sends its own one as well."""
    values = []
    for part in request.headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            values.append(value.strip('"'))
    return values


def _over_tls(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _set_cookie(request: Request, response: Response, session: BrowserSession) -> None:
    response.set_cookie(
        COOKIE, session.id, max_age=LIFETIME_S, path=(request.scope.get("root_path") or "/"),
        httponly=True, samesite="strict", secure=_over_tls(request),
    )  # fmt: skip


def build_inspector(options: InspectorOptions) -> Starlette:
    """The inspector app (mount it anywhere; links follow the mount's root path)."""
    sessions = Sessions()
    folder = resources.files("elastimem.web")
    env = Environment(
        loader=FileSystemLoader(str(folder / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["fact_path"] = pages.fact_path

    def render_for(request: Request, session: BrowserSession) -> pages.Render:
        def render(template: str, title: str, *, status: int = 200, **values: Any) -> Response:
            html = env.get_template(template).render(
                title=title, base=request.scope.get("root_path", ""), csrf=session.csrf,
                signed_in=session.user_id is not None, can_sign_out=options.owner is None,
                can_write=session.allows("write"), can_erase=session.allows("admin"),
                nav=request.url.path, **values,
            )  # fmt: skip
            return HTMLResponse(html, status_code=status)

        return render

    def plain_page(request: Request, session: BrowserSession, template: str, title: str,
                   status: int = 200, **values: Any) -> Response:  # fmt: skip
        response = render_for(request, session)(template, title, status=status, **values)
        _set_cookie(request, response, session)
        return response

    def still_valid(session: BrowserSession) -> bool:
        """Whether a signed-in session's key still names its user (keys can be revoked)."""
        if options.gate is None or session.user_id is None:
            return True
        return session.key is not None and options.gate.user_for(session.key) == session.user_id

    def current(request: Request) -> tuple[BrowserSession, bool]:
        """The browser's session, and whether it is new (its cookie must be set)."""
        for value in _cookie_values(request, COOKIE):
            found = sessions.get(value)
            if found is not None and not still_valid(found):
                sessions.end(found.id)
                found = None
            if found is not None:
                return found, False
        return sessions.start(options.owner), True

    def guarded(
        handler: pages.Handler, needs: str = "read"
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session, new = current(request)
            if session.user_id is not None and not session.allows(needs):
                return plain_page(request, session, "missing.html", "Not allowed", 403,
                                  what=f"This key may {SCOPE_WORDS[session.scope]}; "
                                  f"{SCOPE_WORDS_NEEDED[needs]}.")  # fmt: skip
            form: dict[str, Any] = {}
            if request.method == "POST":
                async with request.form(max_part_size=MAX_FORM_PART) as data:
                    if new or not csrf_ok(session, data.get("csrf")):
                        return plain_page(request, session, "missing.html", "Refused", 403,
                                          what="The form had expired or did not come from "
                                          "this page; reload it and try again.")  # fmt: skip
                    if session.user_id is None:
                        return RedirectResponse(request.scope.get("root_path", "") + "/signin",
                                                303)  # fmt: skip
                    form = dict(data)
                    return await run(handler, request, session, form)
            if session.user_id is None:
                response: Response = RedirectResponse(
                    request.scope.get("root_path", "") + "/signin", 303
                )
                _set_cookie(request, response, session)
                return response
            response = await run(handler, request, session, form)
            if new:
                _set_cookie(request, response, session)
            return response

        endpoint.__name__ = handler.__name__
        return endpoint

    async def run(handler: pages.Handler, request: Request, session: BrowserSession,
                  form: dict[str, Any]) -> Response:  # fmt: skip
        assert session.user_id is not None
        try:
            async with options.lease(session.user_id) as mem:
                ctx = pages.Context(request, mem, form, render_for(request, session))
                return await handler(ctx)
        except (ConfigError, ValueError) as exc:
            message = str(exc).split("\n")[0]
            return plain_page(request, session, "missing.html", "Not understood", 400,
                              what=message)  # fmt: skip
        except Exception as exc:
            logger.error("inspector %s failed: %s", handler.__name__, type(exc).__name__,
                         exc_info=logger.isEnabledFor(10))  # fmt: skip
            return plain_page(request, session, "missing.html", "Something went wrong", 500,
                              what="The store could not answer; see the server log.")  # fmt: skip

    async def signin_form(request: Request) -> Response:
        session, _ = current(request)
        if session.user_id is not None:
            return RedirectResponse(request.scope.get("root_path", "") + "/", 303)
        return plain_page(request, session, "signin.html", "Sign in", error="")

    async def signin(request: Request) -> Response:
        session, new = current(request)
        async with request.form(max_part_size=MAX_FORM_PART) as data:
            token_ok = not new and csrf_ok(session, data.get("csrf"))
            key = data.get("key")
        if not token_ok:
            return plain_page(request, session, "signin.html", "Sign in", 403,
                              error="The form had expired; try again.")  # fmt: skip
        access = None
        if options.gate is not None and isinstance(key, str):
            access = options.gate.access_for(key)
        if access is None or not isinstance(key, str):
            return plain_page(request, session, "signin.html", "Sign in", 401,
                              error="That key is not valid here.")  # fmt: skip
        sessions.end(session.id)
        # A new id: the pre-sign-in one is not reused.
        signed = sessions.start(access[0], key.strip(), access[1])
        response = RedirectResponse(request.scope.get("root_path", "") + "/", 303)
        _set_cookie(request, response, signed)
        return response

    async def signout(request: Request) -> Response:
        session, new = current(request)
        async with request.form(max_part_size=MAX_FORM_PART) as data:
            if new or not csrf_ok(session, data.get("csrf")):
                return plain_page(request, session, "missing.html", "Refused", 403,
                                  what="The form had expired; reload the page.")  # fmt: skip
        sessions.end(session.id)
        response = RedirectResponse(request.scope.get("root_path", "") + "/signin", 303)
        response.delete_cookie(COOKIE, path=(request.scope.get("root_path") or "/"),
                               httponly=True, samesite="strict")  # fmt: skip
        return response

    def get(path: str, handler: pages.Handler, needs: str = "read") -> Route:
        return Route(path, guarded(handler, needs), methods=["GET"])

    def post(path: str, handler: pages.Handler, needs: str) -> Route:
        return Route(path, guarded(handler, needs), methods=["POST"])

    routes = [
        get("/", pages.overview),
        get("/facts", pages.facts),
        get("/facts/{key:path}/erase", pages.fact_erase_confirm, "admin"),
        post("/facts/{key:path}/edit", pages.fact_edit, "write"),
        post("/facts/{key:path}/forget", pages.fact_forget, "write"),
        post("/facts/{key:path}/erase", pages.fact_erase, "admin"),
        get("/facts/{key:path}", pages.fact),
        get("/search", pages.search),
        get("/sessions", pages.sessions),
        get("/sessions/{session_id:int}", pages.session),
        get("/sessions/{session_id:int}/erase", pages.session_erase_confirm, "admin"),
        post("/sessions/{session_id:int}/erase", pages.session_erase, "admin"),
        get("/lessons", pages.lessons),
        get("/quarantine", pages.quarantine),
        get("/quarantine/{entry_id:int}/promote", pages.promote_confirm, "write"),
        post("/quarantine/{entry_id:int}/promote", pages.quarantine_promote, "write"),
        post("/quarantine/{entry_id:int}/discard", pages.quarantine_discard, "write"),
        get("/graph", pages.graph),
        get("/graph/frame", pages.graph_frame),
        get("/transfer", pages.transfer),
        get("/export", pages.export),
        post("/import", pages.import_upload, "admin"),
        Route("/signin", signin_form, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", signout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(folder / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_Headers, loopback_only=options.loopback_only)
    return app
