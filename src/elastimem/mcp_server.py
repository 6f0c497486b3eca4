"""An MCP server over stdio, so any MCP-capable client can use one elastimem store (§8.2).

``elastimem serve-mcp`` runs it (extra ``mcp``: the official SDK). One ``Elastimem`` is
opened per process and closed when the client disconnects, on Ctrl-C and on SIGTERM. The
eight tools are thin wrappers over the Python API; an argument the SDK's schema check or
elastimem's own validation rejects, or one the tool does not take, comes back as a tool error
(``isError``) in one plain sentence, and no tool call can stop the server. The server reports
elastimem's version to the client. stdout carries only the protocol: logs go to stderr.

This module deliberately has no ``from __future__ import annotations``: the SDK builds each
tool's JSON schema from its *runtime* annotations, and the tool functions are defined inside
``build_server`` (their types come from pydantic, which is only importable with the extra).
"""

import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import ElastimemError
from .text import normalize_key

logger = logging.getLogger("elastimem")

SERVER_NAME = "elastimem"
MISSING_EXTRA_MESSAGE = (
    "the MCP server needs the official MCP SDK; install it with: pip install 'elastimem[mcp]'"
)
INSTRUCTIONS = (
    "Long-term memory about the user, kept across conversations. Call build_context at the "
    "start of a reply to get what is known (facts, relevant past moments, previous sessions, "
    "lessons); call recall to search past conversations and facts; call remember when the "
    "user states a durable fact or preference; call record_turn after each exchange so it "
    "can be recalled later; call timeline to see how a fact changed over time."
)


class MissingExtraError(RuntimeError):
    """The ``mcp`` package is not installed (``pip install 'elastimem[mcp]'``)."""


def load_sdk() -> tuple[Any, type[Exception]]:
    """The SDK's high-level server class and its ``ToolError`` (mcp 2.x, else 1.x)."""
    import importlib

    # mcp 2.x renamed FastMCP to MCPServer; importing the old module raises there.
    for module_name, class_name in (
        ("mcp.server.mcpserver", "MCPServer"),
        ("mcp.server.fastmcp", "FastMCP"),
    ):
        try:
            module = importlib.import_module(module_name)
            errors = importlib.import_module(module_name + ".exceptions")
        except ImportError:
            continue
        return getattr(module, class_name), errors.ToolError
    raise MissingExtraError(MISSING_EXTRA_MESSAGE)


def build_server(mem: Any) -> Any:
    """An MCP server object exposing ``mem`` through the eight tools of SPEC §8.2."""
    server_class, tool_error = load_sdk()
    from typing import Annotated, Literal

    from pydantic import Field, StrictFloat, StrictInt, StrictStr

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # Elastimem's own argument errors (ConfigError) and runtime errors become tool errors
        # with their one-sentence message; the SDK turns any other exception into one too.
        try:
            return fn(*args, **kwargs)
        except ElastimemError as exc:
            raise tool_error(str(exc)) from exc

    from pydantic import ValidationError

    schemas: dict[str, dict[str, Any]] = {}

    class ElastimemServer(server_class):  # type: ignore[misc, valid-type]
        """The SDK's server with plain one-sentence argument errors: unknown arguments are
        refused (the SDK ignored them), and a failed schema check reads as a sentence, not
        as a pydantic dump."""

        async def call_tool(
            self, name: str, arguments: dict[str, Any], *args: Any, **kwargs: Any
        ) -> Any:
            if not schemas:
                for tool in await self.list_tools():
                    schema = getattr(tool, "input_schema", None)  # mcp 2.x
                    if schema is None:
                        schema = getattr(tool, "inputSchema", None)  # mcp 1.x
                    schemas[tool.name] = dict(schema or {})
            schema = schemas.get(name)
            if schema is not None:
                unknown = unknown_arguments_message(name, schema, arguments)
                if unknown is not None:
                    raise tool_error(unknown)
            try:
                return await super().call_tool(name, arguments, *args, **kwargs)
            except tool_error as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError) and schema is not None:
                    raise tool_error(
                        validation_message(name, schema, arguments, cause.errors())
                    ) from cause
                if isinstance(cause, tool_error):  # raised by call(): already one sentence
                    raise tool_error(str(cause)) from cause.__cause__
                raise

    options = version_option(server_class)
    server = ElastimemServer(SERVER_NAME, instructions=INSTRUCTIONS, **options)
    if "version" not in options and hasattr(server, "_mcp_server"):
        from .version import package_version

        server._mcp_server.version = package_version()  # mcp 1.x: its low-level server's field

    @server.tool(
        description="Store a durable fact about the user under a short key (e.g. "
        "favorite_color = teal). A new value for an existing key becomes a new version; "
        "the old one stays in the history. Returns {changed, reason, key} (key as stored)."
    )
    def remember(
        key: Annotated[
            StrictStr,
            Field(
                description="Fact name; normalised to snake_case, e.g. 'favorite color' "
                "becomes favorite_color.",
                min_length=1,
                max_length=200,
            ),
        ],
        value: Annotated[
            StrictStr | StrictInt | StrictFloat,
            Field(description="The value, at most 500 characters (numbers are stored as text)."),
        ],
        source: Annotated[
            Literal["explicit", "auto", "rule", "import"],
            Field(
                description="explicit: the user said it (default). auto: you inferred it "
                "(checked by guards, may be quarantined). import: copied from elsewhere."
            ),
        ] = "explicit",
    ) -> dict[str, Any]:
        changed, reason = call(mem.remember, key, value, source)
        # The key as stored, so the model can name it in forget or timeline.
        return {"changed": changed, "reason": reason, "key": normalize_key(key)}

    @server.tool(
        description="Search long-term memory (past conversation chunks and facts) by keyword "
        "and meaning. Returns hits, best first: {kind, text, date, score, session_id, id, "
        "created_at, first_msg_id, last_msg_id}."
    )
    def recall(
        query: Annotated[StrictStr, Field(description="What to look for, in plain words.")],
        k: Annotated[int, Field(description="How many hits to return (none when <= 0).")] = 5,
        kinds: Annotated[
            list[Literal["chunk", "fact"]] | None,
            Field(
                description="Only these kinds of hit: 'chunk' (conversation excerpts) "
                "and/or 'fact'. Default: both."
            ),
        ] = None,
        min_score: Annotated[
            float | None,
            Field(description="Leave out hits scoring below this (default: no cut)."),
        ] = None,
    ) -> list[dict[str, Any]]:
        hits = call(mem.recall, query, k, kinds=kinds, min_score=min_score)
        return [dataclasses.asdict(hit) for hit in hits]

    @server.tool(
        description="Stop using a fact (for example when the user says it is no longer "
        "true). Its history is kept. Returns {forgotten}: false if the key had no live value."
    )
    def forget(
        key: Annotated[StrictStr, Field(description="The fact key to forget.", min_length=1)],
    ) -> dict[str, Any]:
        return {"forgotten": bool(call(mem.forget, key))}

    @server.tool(description="Every fact currently known about the user, as {key: value}.")
    def facts() -> dict[str, str]:
        return dict(call(mem.facts))

    @server.tool(
        description="How one fact changed over time: finds the fact a question is about (a "
        "key such as 'location', or words like 'where did I live') and returns "
        "{query, key, resolved_by, versions} with every version, oldest first."
    )
    def timeline(
        query: Annotated[StrictStr, Field(description="A fact key or a question about one.")],
    ) -> dict[str, Any]:
        result = call(mem.timeline, query)
        return {
            "query": result.query,
            "key": result.key,
            "resolved_by": result.resolved_by,
            "versions": [dataclasses.asdict(v) for v in result.versions],
        }

    @server.tool(
        description="Save a short lesson learned from a mistake (e.g. 'Ask before booking "
        "anything'), shown in future contexts. Returns {added}."
    )
    def add_lesson(
        text: Annotated[StrictStr, Field(description="The lesson, one sentence.", min_length=1)],
        tag: Annotated[
            StrictStr | None, Field(description="Optional topic tag for the lesson.")
        ] = None,
    ) -> dict[str, Any]:
        return {"added": bool(call(mem.add_lesson, text, tag))}

    @server.tool(
        description="Record one exchange (the user's message and your reply) so it can be "
        "recalled in later conversations; simple facts it states are captured. Returns {ok}."
    )
    def record_turn(
        user_text: Annotated[StrictStr, Field(description="What the user said.")],
        assistant_text: Annotated[StrictStr, Field(description="What you replied.")],
    ) -> dict[str, Any]:
        call(mem.record_turn, user_text, assistant_text)
        return {"ok": True}

    @server.tool(
        description="Everything memory holds that is relevant to the next reply, fitted to "
        "a token budget: `rendered` is ready to paste into a prompt; also returns the "
        "separate sections, rolling_summary, keep_last_n_turns and token counts."
    )
    def build_context(
        user_input: Annotated[
            StrictStr, Field(description="The user's latest message (may be empty).")
        ] = "",
    ) -> dict[str, Any]:
        plan = call(mem.build_context, user_input)
        return {
            "rendered": plan.render(),
            "sections": dict(plan.sections),
            "rolling_summary": plan.rolling_summary,
            "keep_last_n_turns": plan.keep_last_n_turns,
            "tokens": dict(plan.tokens),
        }

    return server


def version_option(server_class: Any) -> dict[str, Any]:
    """``version=elastimem.__version__`` for the SDK's server, so a client's ``initialize``
    reports it (serverInfo.version); mcp 1.x's FastMCP takes no version (set afterwards)."""
    import inspect

    from .version import package_version

    try:
        accepted = "version" in inspect.signature(server_class).parameters
    except (TypeError, ValueError):
        accepted = False
    return {"version": package_version()} if accepted else {}


def unknown_arguments_message(
    tool: str, schema: dict[str, Any], arguments: dict[str, Any]
) -> str | None:
    """The sentence refusing arguments ``tool`` does not take, or None."""
    known = list(schema.get("properties", {}))
    unknown = [name for name in arguments if name not in known]
    if not unknown:
        return None
    names = _either([f"'{name}'" for name in unknown], "and")
    takes = f"its arguments are {', '.join(known)}" if known else "it takes no arguments"
    noun = "argument" if len(unknown) == 1 else "arguments"
    return f"{tool} has no {noun} {names}; {takes}."


# pydantic error types that mean "the wrong kind of value" (the schema says which kind);
# the others (too short, too long, out of range) carry their own reason.
_TYPE_ERRORS = frozenset({"literal_error", "enum", "int_from_float", "none_required"})


def validation_message(
    tool: str, schema: dict[str, Any], arguments: dict[str, Any], errors: list[Any]
) -> str:
    """One plain sentence for the first argument the SDK's schema check refused."""
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    arg = str(loc[0]) if loc else ""
    prop = schema.get("properties", {}).get(arg, {})
    if first.get("type") == "missing":
        return f"{tool} needs the argument '{arg}' ({describe_schema(prop)})."
    value = arguments.get(arg)
    own = [e for e in errors if tuple(e.get("loc", ()))[:1] == (arg,)]
    if all(_is_type_error(str(e.get("type", ""))) for e in own):
        index = next((part for part in loc[1:] if isinstance(part, int)), None)
        if index is not None and isinstance(value, list) and 0 <= index < len(value):
            got = f" (item {index + 1} is {_shown(value[index])})"
        else:
            got = f", not {_shown(value)}"
        return f"argument '{arg}' of {tool} must be {describe_schema(prop)}{got}."
    reason = str(first.get("msg", "invalid value"))
    return f"argument '{arg}' of {tool} is invalid: {reason[:1].lower()}{reason[1:]}."


def _is_type_error(kind: str) -> bool:
    return kind.endswith(("_type", "_parsing")) or kind in _TYPE_ERRORS


_TYPE_NAMES = {
    "string": ("a string", "strings"),
    "integer": ("an integer", "integers"),
    "number": ("a number", "numbers"),
    "boolean": ("true or false", "true or false values"),
    "object": ("an object", "objects"),
    "array": ("a list", "lists"),
    "null": ("null", "nulls"),
}


def describe_schema(prop: dict[str, Any]) -> str:
    """What a JSON-schema property accepts, in words: 'a string, an integer or a number'."""
    if "enum" in prop:
        return "one of " + _either([_json(v) for v in prop["enum"]])
    if "anyOf" in prop:
        options = [p for p in prop["anyOf"] if p.get("type") != "null"]
        words = _either([describe_schema(p) for p in options])
        if len(options) == len(prop["anyOf"]):
            return words
        return f"{words}, or null" if " or " in words else f"{words} or null"
    kind = str(prop.get("type", ""))
    if kind == "array":
        items = prop.get("items", {})
        if "enum" in items:
            return "a list of " + _either([_json(v) for v in items["enum"]])
        plural = _TYPE_NAMES.get(str(items.get("type", "")), (None, None))[1]
        return f"a list of {plural}" if plural else "a list"
    return _TYPE_NAMES.get(kind, ("a valid value", ""))[0]


def _either(words: list[str], last: str = "or") -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _shown(value: Any) -> str:
    """A refused value as the sentence names it: a short string as itself, else its kind."""
    if isinstance(value, str):
        return _json(value) if len(value) <= 40 else "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


def serve(
    db_path: str,
    *,
    llm: Callable[..., str] | None = None,
    tier: str | None = None,
    builtin_embedder: bool = True,
    user_id: str | None = None,
) -> bool:
    """Run the server on stdin/stdout until the client disconnects or SIGTERM/SIGINT.

    ``db_path`` and ``user_id`` are as ``Elastimem`` takes them (a ``postgresql://`` address
    needs the user).

    Returns True when a SIGTERM stopped it: the SDK's thread reading stdin then stays
    blocked until the client closes its end, so the caller should end the process.
    """
    load_sdk()  # fail before opening the store when the extra is missing
    from .store import Elastimem

    kw: dict[str, Any] = {"llm": llm, "disable_builtin_embedder": not builtin_embedder}
    if tier:
        kw["tier_override"] = tier
    # The handler is in place before the store opens, so a SIGTERM at any point after this
    # line unwinds through the ``finally`` that closes it.
    with _sigterm_stops() as terminated:
        try:
            mem = Elastimem(db_path, user_id=user_id, **kw)
        except KeyboardInterrupt:
            return terminated.fired
        try:
            server = build_server(mem)
            logger.info("elastimem MCP server ready on stdio (store %s)", mem.path)
            server.run("stdio")
        except KeyboardInterrupt:
            pass
        except BaseException:
            # A SIGTERM raises where the main thread happens to be. Inside anyio's own
            # bookkeeping it surfaces wrapped (an ExceptionGroup, or "Attempted to exit a
            # cancel scope that isn't the current task's"): still the stop that was asked.
            if not terminated.fired:
                raise
        finally:
            mem.close()
            logger.info("elastimem MCP server stopped; store closed")
    return terminated.fired


class _Terminated(KeyboardInterrupt):
    """Raised by the SIGTERM handler so the event loop unwinds like on Ctrl-C."""


class _TermState:
    fired = False


@contextmanager
def _sigterm_stops() -> Iterator[_TermState]:
    """Turn the first SIGTERM into ``_Terminated``; ignore repeats while shutting down."""
    state = _TermState()
    main = threading.current_thread() is threading.main_thread()
    if not main or not hasattr(signal, "SIGTERM"):
        yield state
        return

    def stop(signum: int, frame: Any) -> None:
        if not state.fired:
            state.fired = True
            raise _Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


def configure_stderr_logging(verbose: bool) -> None:
    """Send elastimem's log records to stderr only (stdout is the protocol channel)."""
    log = logging.getLogger("elastimem")
    if not any(getattr(h, "_elastimem_stderr", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s elastimem: %(message)s"))
        handler._elastimem_stderr = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    # The SDK configures the root logger too; one stderr line per record is enough.
    log.propagate = False
    log.setLevel(logging.INFO if verbose else logging.WARNING)
