"""The REST endpoints under ``/v1``: one table (``ENDPOINTS``) gives each route its
arguments, checks and OpenAPI description, so the document served at ``/openapi.json`` is
built from what the server actually does.

Arguments are checked here before they reach the store: a wrong type, an unknown field, an
out-of-range ``k``, an unreadable time or an unknown kind is a 400 with one sentence in
``{"error": ...}``. Each handler receives the caller's ``AsyncElastimem`` (leased from the
pool for the request) and returns ``(status, body)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from ..aio import AsyncElastimem
from ..clock import to_ts
from ..text import normalize_key
from ..version import package_version

logger = logging.getLogger("elastimem")

MAX_K = 1000
MAX_LIST = 1000
MAX_TEXT = 1_000_000  # characters; the body limit usually bites first
EXPORT_CHUNK_BYTES = 64 * 1024
EXPORT_CHUNKS_IN_FLIGHT = 8
# Characters of a path or query value: percent-encoded (up to 9 bytes each) it keeps the
# request head under uvicorn's 16 KiB limit, past which the connection is just closed (the
# fuzzer found a 16,384-character ``q`` that the schema allowed cut off that way).
MAX_URL_TEXT = 1000
# Paths that reveal where the stores live on the server; left out of /v1/stats.
STATS_HIDDEN = frozenset({"path"})


@dataclass(frozen=True)
class Reply:
    """A handler's answer with a status other than its endpoint's usual one."""

    status: int
    body: Any


class ApiError(Exception):
    """A request the server refuses: an HTTP status and a one-sentence message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- argument checks (a small JSON-schema subset, also what OpenAPI shows) ---------------------


@dataclass(frozen=True)
class Arg:
    name: str
    schema: dict[str, Any]
    required: bool = False
    description: str = ""


def _text(description: str, *, min_length: int = 0, max_length: int = MAX_TEXT) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "maxLength": max_length}
    if min_length:
        schema["minLength"] = min_length
    schema["description"] = description
    return schema


EARLIEST = "0001-01-01T00:00:00Z"
LATEST = "9999-12-31T23:59:59.999999Z"
TIME = {
    "type": "string",
    "format": "date-time",
    "description": "An ISO-8601 date or date-time (UTC when no offset is given).",
}


def check(value: Any, schema: Mapping[str, Any], name: str) -> Any:
    """``value`` when it fits ``schema``; else ``ApiError(400)`` naming the argument."""
    kind = schema.get("type")
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            if _is_type(value, option.get("type")):
                return check(value, option, name)  # its own message: too long, out of range
        raise ApiError(400, f"{name} must be {_describe(schema)}")
    if kind == "string":
        if not isinstance(value, str):
            raise ApiError(400, f"{name} must be a string")
        if len(value) < schema.get("minLength", 0):
            raise ApiError(400, f"{name} must not be empty")
        if len(value) > schema.get("maxLength", MAX_TEXT):
            raise ApiError(400, f"{name} is longer than {schema['maxLength']} characters")
        if "enum" in schema and value not in schema["enum"]:
            raise ApiError(400, f"{name} must be one of {', '.join(schema['enum'])}")
        if schema.get("format") == "date-time":
            try:
                to_ts(value)
            except OverflowError:
                # Valid RFC 3339 whose UTC falls outside years 1-9999 (the fuzzer sent
                # "0001-01-01T00:00:00+01:01"): the nearest moment a store can hold.
                return EARLIEST if value.strip()[:4] == "0001" else LATEST
            except (ValueError, TypeError):
                raise ApiError(400, f"{name} is not a readable ISO-8601 time") from None
        return value
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON Schema: 244.0 is an integer (found by the fuzzer)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError(400, f"{name} must be an integer")
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ApiError(400, f"{name} must be between {low} and {high}")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ApiError(400, f"{name} must be a number")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ApiError(400, f"{name} must be true or false")
        return value
    if kind == "array":
        if not isinstance(value, list):
            raise ApiError(400, f"{name} must be a list")
        if len(value) > schema.get("maxItems", MAX_LIST):
            raise ApiError(400, f"{name} has too many items")
        return [check(item, schema["items"], f"each item of {name}") for item in value]
    raise AssertionError(f"unhandled schema {schema!r}")  # a bug in the table below


def _is_type(value: Any, kind: object) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "number":
        return isinstance(value, (int, float))
    python = {"string": str, "integer": int, "array": list, "object": dict}.get(str(kind))
    return python is not None and isinstance(value, python)


def _describe(schema: Mapping[str, Any]) -> str:
    names = {"string": "a string", "number": "a number", "integer": "an integer"}
    return " or ".join(names.get(o.get("type", ""), "a value") for o in schema["anyOf"])


def _query_value(raw: str, schema: Mapping[str, Any], name: str) -> Any:
    if schema.get("type") == "integer":
        try:
            return check(int(raw.strip()), schema, name)
        except ValueError:
            raise ApiError(400, f"{name} must be an integer") from None
    return check(raw, schema, name)


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object; an empty body is ``{}`` (but not one of stray bytes
    such as vertical tabs, which the fuzzer found taken for an empty body)."""
    if not raw:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not valid UTF-8") from None

    def no_constants(name: str) -> Any:
        raise ValueError(name)

    try:
        data = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return data


def check_fields(given: Mapping[str, Any], args: tuple[Arg, ...], where: str) -> dict[str, Any]:
    known = {a.name: a for a in args}
    for name in given:
        if name not in known:
            expected = ", ".join(known) or "none"
            raise ApiError(400, f"unknown {where} {name!r}; expected: {expected}")
    values: dict[str, Any] = {}
    for arg in args:
        if arg.name in given and given[arg.name] is not None:
            if where == "query parameter":
                values[arg.name] = _query_value(given[arg.name], arg.schema, arg.name)
            else:
                values[arg.name] = check(given[arg.name], arg.schema, arg.name)
        elif arg.required:
            raise ApiError(400, f"{arg.name} is required")
    return values


# -- the endpoints ------------------------------------------------------------------------------

Handler = Callable[[AsyncElastimem, dict[str, Any], dict[str, str]], Awaitable[Any]]


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    summary: str
    handler: Handler
    body: tuple[Arg, ...] | None = None
    query: tuple[Arg, ...] = ()
    status: int = 200
    response: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    streams: bool = False
    # Other answers: a status with its description (the body has the same schema) ...
    also: tuple[tuple[int, str], ...] = ()
    # ... and refusals beyond the 400/401/403/408/413/429/503 every endpoint may give.
    refusals: tuple[int, ...] = ()
    # The least key scope that may call it: read < write < admin (``keys.SCOPES``).
    scope: str = "read"
    # More of the body's JSON schema than its fields say (which fields go together).
    body_rule: dict[str, Any] = field(default_factory=dict)

    @property
    def operation_id(self) -> str:
        return self.handler.__name__.strip("_")


def _asdict(value: Any) -> Any:
    return dataclasses.asdict(value)


async def _record_turn(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    await mem.record_turn(a["user_text"], a["assistant_text"], at=a.get("at"))
    return {"recorded": True, "session_id": mem.session_id}


async def _recall(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    hits = await mem.recall(
        a["query"], a.get("k", 5), kinds=a.get("kinds"), since=a.get("since"),
        until=a.get("until"), min_score=a.get("min_score"),
    )  # fmt: skip
    return {"hits": [_asdict(hit) for hit in hits]}


async def _context(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    plan = await mem.build_context(a.get("user_input", ""))
    return {
        "text": plan.render(),
        "sections": dict(plan.sections),
        "rolling_summary": plan.rolling_summary,
        "keep_last_n_turns": plan.keep_last_n_turns,
        "tokens": dict(plan.tokens),
    }


async def _facts(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    return {"facts": await mem.facts()}


async def _remember(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    changed, reason = await mem.remember(
        p["key"], a["value"], a.get("source", "explicit"), at=a.get("at")
    )
    if reason.startswith("rejected: "):
        raise ApiError(422, f"the fact was not stored: {reason.removeprefix('rejected: ')}")
    # The key as stored (keys are normalised: "Favorite Color" is favorite_color).
    return {"changed": changed, "reason": reason, "key": normalize_key(p["key"])}


async def _fact_history(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    return {"versions": [_asdict(v) for v in await mem.fact_history(p["key"])]}


async def _forget(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    if not await mem.forget(p["key"]):
        raise ApiError(404, f"there is no current fact under {p['key']!r}")
    return {"forgotten": True}


async def _timeline(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    result = await mem.timeline(a["q"])
    return {
        "query": result.query,
        "key": result.key,
        "resolved_by": result.resolved_by,
        "versions": [_asdict(v) for v in result.versions],
    }


async def _add_lesson(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    if await mem.add_lesson(a["text"], a.get("tag")):
        return {"added": True}
    return Reply(200, {"added": False})  # already current, or refused by the guards


async def _sessions(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    return {"sessions": await mem.sessions(a.get("n", 20))}


async def _begin_session(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    return {"session_id": await mem.begin_session(a.get("host_tag"), at=a.get("at"))}


async def _end_session(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    raw = p["session_id"]
    # ASCII digits only: "³7".isdigit() is true and int() refuses it (a 500 the fuzzer found).
    if not (raw.isascii() and raw.isdigit()) or mem.session_id != int(raw):
        raise ApiError(404, f"session {raw} is not this user's open session")
    # The summary and consolidation it queues run on the store's worker, after the reply.
    await mem.end_session(wait=False)
    return {"ended": int(raw)}


async def _erase(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    counts = await mem.erase(
        key=a.get("key"),
        session_id=a.get("session_id"),
        include_facts=a.get("include_facts", False),
    )
    if not any(counts.values()):  # as the CLI's erase exits 1
        if "session_id" in a:
            raise ApiError(404, f"nothing to erase: no session {a['session_id']}")
        raise ApiError(404, f"nothing to erase: no fact has the key {a['key']!r}")
    return {"erased": counts}


async def _stats(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    stats = await mem.stats()
    return {k: v for k, v in stats.items() if k not in STATS_HIDDEN}


async def _export(mem: AsyncElastimem, a: dict[str, Any], p: dict[str, str]) -> Any:
    raise AssertionError("the export streams: the app serves it with export_stream")


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


_STR = {"type": "string"}
_INT = {"type": "integer"}
# Fields a value may leave empty are null in JSON (the fuzzer found them undeclared).
_STR_OR_NULL = {"type": ["string", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_HIT = _obj(
    kind=_STR, text=_STR, date=_STR, score={"type": "number"}, session_id=_INT_OR_NULL,
    id=_INT_OR_NULL, created_at=_STR_OR_NULL, first_msg_id=_INT_OR_NULL,
    last_msg_id=_INT_OR_NULL,
)  # fmt: skip
_FACT = _obj(
    id=_INT, key=_STR, value=_STR, category=_STR, source=_STR, importance={"type": "number"},
    valid_from=_STR, invalidated_at=_STR_OR_NULL, archived={"type": "boolean"},
    created_at=_STR_OR_NULL, invalidated_by=_INT_OR_NULL, last_accessed_at=_STR_OR_NULL,
    access_count=_INT,
)  # fmt: skip
_VERSIONS = {"type": "array", "items": _FACT}
KINDS = {"type": "string", "enum": ["chunk", "fact"]}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "POST", "/v1/turns", "Record one exchange (never fails for its content).", _record_turn,
        body=(
            Arg("user_text", _text("What the user said."), required=True),
            Arg("assistant_text", _text("What the assistant replied."), required=True),
            Arg("at", TIME),
        ),
        status=201, response=_obj(recorded={"type": "boolean"}, session_id=_INT),
        scope="write",
    ),
    Endpoint(
        "POST", "/v1/recall", "Search conversations and facts, best first.", _recall,
        body=(
            Arg("query", _text("What to look for."), required=True),
            Arg("k", {"type": "integer", "minimum": 0, "maximum": MAX_K,
                      "description": "How many hits (default 5)."}),
            Arg("kinds", {"type": "array", "items": KINDS, "maxItems": 2,
                          "description": "Only these kinds of hit (default both)."}),
            Arg("since", TIME),
            Arg("until", TIME),
            Arg("min_score", {"type": "number", "minimum": -1e9, "maximum": 1e9,
                              "description": "Leave out hits scoring below this (default: "
                              "no cut)."}),
        ),
        response=_obj(hits={"type": "array", "items": _HIT}),
    ),
    Endpoint(
        "POST", "/v1/context", "The prompt sections for the next reply, fitted to budgets.",
        _context,
        body=(Arg("user_input", _text("The user's latest message (may be empty).")),),
        response=_obj(
            text={"type": "string", "description": "The rendered plan, ready for a prompt."},
            sections={"type": "object", "additionalProperties": _STR},
            rolling_summary=_STR, keep_last_n_turns=_INT,
            tokens={"type": "object", "additionalProperties": _INT},
        ),
    ),
    Endpoint(
        "GET", "/v1/facts", "Every current fact, as {key: value}.", _facts,
        response=_obj(facts={"type": "object", "additionalProperties": _STR}),
    ),
    Endpoint(
        "PUT", "/v1/facts/{key}", "Store a fact; a new value becomes a new version.", _remember,
        body=(
            Arg("value", {"anyOf": [_text("The value.", max_length=100_000),
                                    {"type": "number"}]}, required=True),
            Arg("source", {"type": "string", "enum": ["explicit", "auto", "rule", "import"],
                           "description": "Who stated it (default explicit)."}),
            Arg("at", TIME),
        ),
        response=_obj(changed={"type": "boolean"}, reason=_STR, key=_STR),
        refusals=(422,),
        scope="write",
    ),
    Endpoint(
        "GET", "/v1/facts/{key}/history", "Every version of a fact, oldest first.",
        _fact_history, response=_obj(versions=_VERSIONS),
    ),
    Endpoint(
        "DELETE", "/v1/facts/{key}", "Stop using a fact (its history is kept); 404 when none.",
        _forget, response=_obj(forgotten={"type": "boolean"}),
        scope="write",
    ),
    Endpoint(
        "GET", "/v1/timeline", "How the fact a question is about changed over time.", _timeline,
        query=(Arg("q", _text("A fact key or a question about one.", min_length=1,
                              max_length=MAX_URL_TEXT), required=True),),
        response=_obj(query=_STR, key=_STR_OR_NULL, resolved_by=_STR, versions=_VERSIONS),
    ),
    Endpoint(
        "POST", "/v1/lessons", "Save a lesson learned, shown in later contexts.", _add_lesson,
        body=(
            Arg("text", _text("The lesson, one sentence.", min_length=1), required=True),
            Arg("tag", _text("Optional topic tag.", max_length=200)),
        ),
        status=201, response=_obj(added={"type": "boolean"}),
        also=((200, "Not added: already a current lesson, or refused by the guards."),),
        scope="write",
    ),
    Endpoint(
        "GET", "/v1/sessions", "The most recent sessions, newest first.", _sessions,
        query=(Arg("n", {"type": "integer", "minimum": 0, "maximum": MAX_LIST,
                         "description": "How many (default 20)."}),),
        response=_obj(sessions={"type": "array", "items": {"type": "object"}}),
    ),
    Endpoint(
        "POST", "/v1/sessions", "Start a session (the open one ends).", _begin_session,
        body=(Arg("at", TIME), Arg("host_tag", _text("A label for the host.", max_length=200))),
        status=201, response=_obj(session_id=_INT),
        scope="write",
    ),
    Endpoint(
        "POST", "/v1/sessions/{session_id}/end", "End the open session; its summary follows.",
        _end_session, body=(), response=_obj(ended=_INT),
        scope="write",
    ),
    Endpoint(
        "POST", "/v1/erase", "Erase a fact's history or a session, unrecoverably; 404 when "
        "there is nothing to erase.", _erase,
        body=(
            Arg("key", _text("A fact key.", min_length=1, max_length=1000)),
            Arg("session_id", {"type": "integer", "minimum": 0}),
            Arg("include_facts", {"type": "boolean",
                                  "description": "Also the facts the session taught."}),
        ),
        response=_obj(erased={"type": "object", "additionalProperties": _INT}),
        refusals=(404,),
        scope="admin",
        body_rule={"oneOf": [  # exactly one target that is not null
            {"required": ["key"], "properties": {"key": {"type": "string"}}},
            {"required": ["session_id"], "properties": {"session_id": {"type": "integer"}}},
        ]},
    ),
    Endpoint(
        "GET", "/v1/export", "The whole store as JSON Lines, streamed.", _export, streams=True,
    ),
    Endpoint("GET", "/v1/stats", "Counts, sizes, tier and background work.", _stats),
)  # fmt: skip


async def run_endpoint(
    endpoint: Endpoint,
    mem: AsyncElastimem,
    body: bytes,
    query: Mapping[str, str],
    path_params: dict[str, str],
) -> Any:
    if endpoint.body is None and body.strip():
        raise ApiError(400, f"{endpoint.method} {endpoint.path} takes no request body")
    for name, value in path_params.items():
        if len(value) > MAX_URL_TEXT:
            raise ApiError(400, f"{name} is longer than {MAX_URL_TEXT} characters")
    args = check_fields(query, endpoint.query, "query parameter")
    if endpoint.body is not None:
        args.update(check_fields(parse_body(body), endpoint.body, "field"))
    return await endpoint.handler(mem, args, path_params)


# -- export, streamed ---------------------------------------------------------------------------


class _Pipe(io.RawIOBase):
    """The file the export writes into (on a store thread), read by the response.

    At most ``EXPORT_CHUNKS_IN_FLIGHT`` chunks wait for the client; a slow client slows
    the export down, and a client that left (``stop``) makes the next write raise.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]):
        super().__init__()
        self._loop = loop
        self._queue = queue
        self._buffer = bytearray()
        self.slots = threading.Semaphore(EXPORT_CHUNKS_IN_FLIGHT)
        self.stop = threading.Event()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._buffer += data
        if len(self._buffer) >= EXPORT_CHUNK_BYTES:
            self._post(bytes(self._buffer))
            self._buffer.clear()
        return len(data)

    def _post(self, chunk: bytes) -> None:
        while not self.slots.acquire(timeout=0.2):
            if self.stop.is_set():
                break
        if self.stop.is_set():
            raise BrokenPipeError("the client stopped reading the export")
        self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)

    def tail(self) -> bytes:
        return bytes(self._buffer)


_exports: set[asyncio.Future[None]] = set()


async def export_stream(
    stack: AsyncExitStack, mem: AsyncElastimem
) -> tuple[AsyncIterator[bytes], threading.Event]:
    """The export's bytes as they are written, and the event that stops it.

    The export starts now and owns ``stack`` (the store's lease): it is released when the
    export ends, whether the client read it all or left.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    pipe = _Pipe(loop, queue)

    async def produce() -> None:
        try:
            await mem.export(pipe)
            queue.put_nowait(pipe.tail())
        except BrokenPipeError:
            pass
        except Exception as exc:
            # Headers are out: the stream just ends, without the trailer line that a
            # complete export has, so the client can tell.
            logger.error("export failed midway: %s", type(exc).__name__)
        finally:
            queue.put_nowait(None)
            await stack.aclose()

    producer = asyncio.ensure_future(produce())
    _exports.add(producer)  # the loop keeps only a weak reference to a task
    producer.add_done_callback(_exports.discard)

    async def chunks() -> AsyncIterator[bytes]:
        while True:
            chunk = await queue.get()
            if chunk is None:
                return
            pipe.slots.release()
            if chunk:
                yield chunk

    return chunks(), pipe.stop


def openapi_document(*, mcp: bool) -> dict[str, Any]:
    """The OpenAPI 3.1 description of every route, built from ``ENDPOINTS``."""
    error = {
        "description": 'Refused: {"error": one sentence}.',
        "content": {"application/json": {"schema": _obj(error=_STR)}},
    }
    paths: dict[str, dict[str, Any]] = {}
    for ep in ENDPOINTS:
        parameters = [
            {
                "name": name,
                "in": "path",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_URL_TEXT},
            }
            for name in _path_names(ep.path)
        ] + [
            {"name": a.name, "in": "query", "required": a.required, "schema": a.schema}
            for a in ep.query
        ]
        content_type = "application/x-ndjson" if ep.streams else "application/json"
        operation: dict[str, Any] = {
            "summary": ep.summary,
            "operationId": ep.operation_id,
            "parameters": parameters,
            "responses": {
                str(ep.status): {
                    "description": "Done.",
                    "content": {content_type: {"schema": ep.response}},
                },
                "400": error,
                "401": error,
                "403": error,
                "408": error,
                "413": error,
                "429": error,
                "503": error,
            },
        }
        if ep.body:
            operation["requestBody"] = {
                "required": any(a.required for a in ep.body) or bool(ep.body_rule),
                "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {a.name: a.schema if a.required else _or_null(a.schema)
                                   for a in ep.body},
                    "required": [a.name for a in ep.body if a.required],
                    "additionalProperties": False,
                    **ep.body_rule,
                }}},
            }  # fmt: skip
        for status, description in ep.also:
            operation["responses"][str(status)] = {
                "description": description,
                "content": {content_type: {"schema": ep.response}},
            }
        for status in ep.refusals:
            operation["responses"][str(status)] = error
        if "{" in ep.path:
            operation["responses"]["404"] = error
        paths.setdefault(ep.path, {})[ep.method.lower()] = operation
    public = {"security": [], "responses": {"200": {"description": "OK."}}}
    paths["/healthz"] = {"get": {"summary": "Liveness; needs no key.", **public}}
    paths["/openapi.json"] = {"get": {"summary": "This document; needs no key.", **public}}
    if mcp:
        not_mcp = {"description": "Not an MCP message the session accepts (JSON-RPC error)."}
        mcp_op = {
            "summary": "MCP over streamable HTTP (the serve-mcp tools).",
            "responses": {
                "200": {"description": "MCP messages."},
                "202": {"description": "A notification or response, accepted."},
                **{status: not_mcp for status in ("400", "404", "405", "406", "415")},
                **{status: error for status in ("401", "403", "408", "413", "429")},
            },
        }
        paths["/mcp"] = {m: dict(mcp_op) for m in ("get", "post", "delete")}
    return {
        "openapi": "3.1.0",
        "info": {"title": "elastimem", "version": package_version(),
                 "description": "Long-term memory for LLM agents, one store per user."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }  # fmt: skip


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional field's schema: null means "not given" (``check_fields``), as the fuzzer
    found the document did not say."""
    return {"anyOf": [schema, {"type": "null"}]}


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
