"""The inspector's pages: each handler reads the store and hands plain values to a template.

Handlers get the signed-in user's store from ``Context.lease`` (nothing in a request names a
user: the browser session does). Reads are GETs; every change is a POST whose form carries
the session's CSRF token (checked in ``app`` before the handler runs), answered with a
redirect to the page that shows the result (post/redirect/get). Pages that list are paged.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urlencode

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from ..aio import AsyncElastimem
from ..errors import ConfigError

PAGE = 50
TRANSCRIPT_TURNS = 25
SEARCH_K = 10
LESSONS_SHOWN = 200
# How each writer of a fact version is named on its timeline.
SOURCE_NAMES = {
    "explicit": "explicit (remember)",
    "auto": "LLM extraction",
    "rule": "rule",
    "import": "import",
    "merge": "LLM merge",
}
NO_GRAPH = (
    "The entity graph is built by the host's language model: open the store with "
    "llm=... (or run elastimem ui / serve with --llm-url) and, as conversations are "
    "recorded, it draws the people, places and organisations mentioned, with the "
    "relations between them (who is whose parent, who lives where)."
)

Lease = Callable[[str], AbstractAsyncContextManager[AsyncElastimem]]
Render = Callable[..., Response]


@dataclass
class Context:
    """What a handler needs besides the request: the user's store and the renderer."""

    request: Request
    mem: AsyncElastimem
    form: dict[str, Any]
    render: Render

    @property
    def base(self) -> str:
        return str(self.request.scope.get("root_path", ""))

    def redirect(self, path: str, **params: Any) -> Response:
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return RedirectResponse(self.base + path + (f"?{query}" if query else ""), 303)

    def int_param(self, name: str, default: int = 0) -> int:
        raw = self.request.query_params.get(name, "")
        try:
            return max(0, int(raw)) if raw else default
        except ValueError:
            raise ConfigError(f"{name}={raw[:20]!r} is not a whole number") from None


Handler = Callable[[Context], Awaitable[Response]]


def fact_path(key: str) -> str:
    return "/facts/" + quote(key, safe="")


def _pages(offset: int, count: int, size: int = PAGE) -> dict[str, int | None]:
    """Previous/next offsets of a page that showed ``count`` items from ``offset``."""
    return {
        "prev": max(0, offset - size) if offset > 0 else None,
        "next": offset + size if count >= size else None,
    }


# -- reading ------------------------------------------------------------------------------


async def overview(ctx: Context) -> Response:
    stats = await ctx.mem.summary()
    newest = await ctx.mem.session_page(0, 1)
    last = None
    if newest:
        last = newest[0].get("ended_at") or newest[0].get("started_at")
    embedder = stats.get("embedding_model") or "none"
    meaning_ready = stats.get("embedder") == "ready"
    return ctx.render(
        "overview.html", "Overview", stats=stats, last_activity=last, embedder=embedder,
        meaning_ready=meaning_ready, user_id=ctx.mem.user_id,
    )  # fmt: skip


async def facts(ctx: Context) -> Response:
    text = ctx.request.query_params.get("q", "").strip()
    offset = ctx.int_param("offset")
    live = await ctx.mem.facts()
    wanted = text.casefold()
    rows = sorted(
        (key, value)
        for key, value in live.items()
        if not wanted or wanted in key.casefold() or wanted in value.casefold()
    )
    shown = [{"key": k, "value": v, "href": fact_path(k)} for k, v in rows[offset : offset + PAGE]]
    return ctx.render(
        "facts.html", "Facts", facts=shown, q=text, total=len(rows), live=len(live),
        offset=offset, **_pages(offset, len(shown)),
    )  # fmt: skip


async def fact(ctx: Context) -> Response:
    key = ctx.request.path_params["key"]
    versions = await ctx.mem.fact_history(key)
    if not versions:
        return ctx.render("missing.html", "No such fact", status=404,
                          what=f"No fact is stored under the key {key!r}.")  # fmt: skip
    origins = await ctx.mem.fact_origins(key)
    shown = [
        {
            **asdict(v),
            "session_id": origins.get(v.id),
            "source_name": SOURCE_NAMES.get(v.source, v.source),
            "retired": v.invalidated_at is not None,
        }
        for v in sorted(versions, key=lambda v: (v.valid_from, v.id), reverse=True)
    ]
    live = next((v for v in shown if not v["retired"]), None)
    return ctx.render(
        "fact.html", f"Fact {key}", key=versions[0].key, versions=shown, live=live,
        href=fact_path(versions[0].key), message=ctx.request.query_params.get("msg", ""),
    )  # fmt: skip


async def fact_erase_confirm(ctx: Context) -> Response:
    key = ctx.request.path_params["key"]
    versions = await ctx.mem.fact_history(key)
    if not versions:
        return ctx.redirect("/facts")
    return ctx.render(
        "confirm.html", "Erase a fact",
        question=f"Erase every version of the fact {versions[0].key!r}?",
        goes=[f"{len(versions)} version(s) of {versions[0].key!r}, with their vectors and "
              "the quarantine entries naming the key",
              "This cannot be undone; forget keeps the history, erase does not."],
        action=fact_path(versions[0].key) + "/erase", cancel=fact_path(versions[0].key),
        button="Erase for good",
    )  # fmt: skip


async def search(ctx: Context) -> Response:
    query = ctx.request.query_params.get("q", "").strip()
    with_timeline = ctx.request.query_params.get("timeline") == "1"
    results: list[dict[str, Any]] = []
    explained = None
    timeline = None
    if query:
        explained = await ctx.mem.explain(query, SEARCH_K)
        results = _explained_hits(explained)
        if with_timeline:
            found = await ctx.mem.timeline(query)
            timeline = {"key": found.key, "how": found.resolved_by,
                        "versions": [asdict(v) for v in found.versions],
                        "href": fact_path(found.key) if found.key else None}  # fmt: skip
    return ctx.render(
        "search.html", "Search", q=query, results=results, with_timeline=with_timeline,
        timeline=timeline,
        vector_leg=explained.vector_leg if explained is not None else None,
    )  # fmt: skip


def _explained_hits(explained: Any) -> list[dict[str, Any]]:
    """Each hit with its legs (name, value, share of the largest value of the page)."""
    chunks = {b.chunk_id: b for b in explained.chunk_breakdowns}
    facts_by_id = {b.fact_id: b for b in explained.fact_breakdowns}
    rows: list[tuple[dict[str, Any], list[tuple[str, float]]]] = []
    for hit in explained.hits:
        legs: list[tuple[str, float]] = []
        if hit.kind == "fact" and hit.id in facts_by_id:
            b = facts_by_id[hit.id]
            legs = [("keyword", b.fts), ("meaning", b.vector), ("importance", b.importance_nudge),
                    ("recency", b.recency_nudge), ("graph", b.graph_nudge)]  # fmt: skip
        elif hit.id in chunks:
            c = chunks[hit.id]
            legs = [("keyword", c.fts), ("meaning", c.vector), ("time", c.time_bonus),
                    ("neighbours", c.neighbour), ("importance", c.importance_nudge),
                    ("recency", c.recency_nudge), ("graph", c.graph_nudge)]  # fmt: skip
        rows.append((asdict(hit), legs))
    top = max((abs(v) for _, legs in rows for _, v in legs), default=0.0) or 1.0
    return [
        {"hit": hit, "legs": [{"name": n, "value": v, "share": abs(v) / top} for n, v in legs]}
        for hit, legs in rows
    ]


async def sessions(ctx: Context) -> Response:
    offset = ctx.int_param("offset")
    rows = await ctx.mem.session_page(offset, PAGE)
    return ctx.render("sessions.html", "Sessions", sessions=rows, offset=offset,
                      **_pages(offset, len(rows)))  # fmt: skip


async def session(ctx: Context) -> Response:
    session_id = int(ctx.request.path_params["session_id"])
    info = await ctx.mem.session_info(session_id)
    if info is None:
        return ctx.render("missing.html", "No such session", status=404,
                          what=f"There is no session {session_id}.")  # fmt: skip
    first = max(1, ctx.int_param("from", 1))
    messages, last = await ctx.mem.session_turns(session_id, first, TRANSCRIPT_TURNS)
    return ctx.render(
        "session.html", f"Session {session_id}", session=info, messages=messages,
        last_turn=last, first=first,
        prev=max(1, first - TRANSCRIPT_TURNS) if first > 1 else None,
        next=first + TRANSCRIPT_TURNS if first + TRANSCRIPT_TURNS <= last else None,
    )  # fmt: skip


async def session_erase_confirm(ctx: Context) -> Response:
    session_id = int(ctx.request.path_params["session_id"])
    info = await ctx.mem.session_info(session_id)
    if info is None:
        return ctx.redirect("/sessions")
    return ctx.render(
        "confirm.html", "Erase a session",
        question=f"Erase session {session_id} ({info.get('title') or 'untitled'})?",
        goes=[f"its {info.get('message_count', 0)} message(s), their chunks and vectors, "
              "and the graph mentions found only in them",
              "facts learned in it stay (they have their own history)",
              "This cannot be undone."],
        action=f"/sessions/{session_id}/erase", cancel=f"/sessions/{session_id}",
        button="Erase session",
    )  # fmt: skip


async def lessons(ctx: Context) -> Response:
    return ctx.render("lessons.html", "Lessons", lessons=await ctx.mem.lessons(LESSONS_SHOWN))


async def quarantine(ctx: Context) -> Response:
    offset = ctx.int_param("offset")
    rows = [
        {**e, "source": SOURCE_NAMES.get(str(e.get("source")), e.get("source"))}
        for e in await ctx.mem.quarantine_page(offset, PAGE)
    ]
    return ctx.render("quarantine.html", "Quarantine", entries=rows, offset=offset,
                      message=ctx.request.query_params.get("msg", ""),
                      **_pages(offset, len(rows)))  # fmt: skip


async def promote_confirm(ctx: Context) -> Response:
    entry_id = int(ctx.request.path_params["entry_id"])
    entry = await ctx.mem.quarantine_entry(entry_id)
    if entry is None:
        return ctx.redirect("/quarantine")
    return ctx.render(
        "confirm.html", "Promote to a fact",
        question=f"Store {entry.get('key')!r} = {entry.get('value')!r} as a fact?",
        goes=[f"It was held back because: {entry.get('reason')}.",
              "It becomes the live value of the key (the old one stays in its history); "
              "the quarantine entry is removed."],
        action=f"/quarantine/{entry_id}/promote", cancel="/quarantine", button="Promote",
    )  # fmt: skip


async def graph(ctx: Context) -> Response:
    stats = await ctx.mem.summary()
    return ctx.render("graph.html", "Graph", nodes=stats.get("graph_nodes", 0),
                      edges=stats.get("graph_edges", 0), no_graph=NO_GRAPH)  # fmt: skip


async def graph_frame(ctx: Context) -> Response:
    page = await ctx.mem.render_graph("html")
    # Its own policy: the page's inline script and style, in a sandbox without the
    # inspector's origin (no cookies, no requests as the user), framed by the inspector only.
    csp = ("sandbox allow-scripts; default-src 'none'; style-src 'unsafe-inline'; "
           "script-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'")  # fmt: skip
    return Response(page, media_type="text/html", headers={"Content-Security-Policy": csp})


async def transfer(ctx: Context) -> Response:
    stats = await ctx.mem.summary()
    empty = not any(stats.get(k, 0) for k in ("sessions", "fact_versions", "lessons"))
    return ctx.render("transfer.html", "Export and import", empty=empty,
                      message=ctx.request.query_params.get("msg", ""))  # fmt: skip


async def export(ctx: Context) -> Response:
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)  # noqa: SIM115
    await ctx.mem.export(spool)
    spool.seek(0)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while block := spool.read(256 * 1024):
                yield block
        finally:
            spool.close()

    return StreamingResponse(
        chunks(), media_type="application/x-ndjson",
        headers={"Content-Disposition": 'attachment; filename="elastimem-export.jsonl"'},
    )  # fmt: skip


# -- changing (POST; CSRF checked before these run) -----------------------------------------


async def fact_edit(ctx: Context) -> Response:
    key = ctx.request.path_params["key"]
    value = str(ctx.form.get("value", "")).strip()
    if not value:
        return ctx.redirect(fact_path(key), msg="A value is needed; nothing was changed.")
    changed, reason = await ctx.mem.remember(key, value, "explicit")
    msg = "Stored as a new version." if changed else f"Not stored: {reason}."
    return ctx.redirect(fact_path(key), msg=msg)


async def fact_forget(ctx: Context) -> Response:
    key = ctx.request.path_params["key"]
    forgotten = await ctx.mem.forget(key)
    msg = (
        "Forgotten: the value is retired; its history stays."
        if forgotten
        else ("It had no live value.")
    )
    return ctx.redirect(fact_path(key), msg=msg)


async def fact_erase(ctx: Context) -> Response:
    await ctx.mem.erase(key=ctx.request.path_params["key"])
    return ctx.redirect("/facts")


async def session_erase(ctx: Context) -> Response:
    await ctx.mem.erase(session_id=int(ctx.request.path_params["session_id"]))
    return ctx.redirect("/sessions")


async def quarantine_discard(ctx: Context) -> Response:
    removed = await ctx.mem.discard_quarantined(int(ctx.request.path_params["entry_id"]))
    return ctx.redirect("/quarantine", msg="Discarded." if removed else "It was already gone.")


async def quarantine_promote(ctx: Context) -> Response:
    stored, reason = await ctx.mem.promote_quarantined(int(ctx.request.path_params["entry_id"]))
    msg = "Promoted to a fact." if stored else f"Not promoted: {reason}."
    return ctx.redirect("/quarantine", msg=msg)


async def import_upload(ctx: Context) -> Response:
    upload = ctx.form.get("file")
    if not isinstance(upload, UploadFile):
        return ctx.redirect("/transfer", msg="Choose an export file to import.")
    stats = await ctx.mem.summary()
    if any(stats.get(k, 0) for k in ("sessions", "fact_versions", "lessons")):
        return ctx.redirect("/transfer", msg="Import only goes into an empty store; "
                            "this one already holds memories.")  # fmt: skip
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as out:
            while block := await upload.read(256 * 1024):
                out.write(block)
        counts = await ctx.mem.import_(path)
    finally:
        os.unlink(path)
    summary = ", ".join(f"{n} {name}" for name, n in counts.items())
    return ctx.redirect("/transfer", msg=f"Imported {summary or 'nothing'}.")
