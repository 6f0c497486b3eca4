"""Ready-made ``llm=`` callables (SPEC §1.3).

:func:`openai_compatible` talks to any OpenAI-compatible chat-completions endpoint (llama.cpp
server, Ollama, vLLM, LM Studio) with nothing but :mod:`urllib.request`. Every failure becomes
an :class:`~elastimem.errors.LLMError` whose message names the endpoint; the prompt and the API
key are never logged or put in a message.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, LLMError
from .prompts import strip_think
from .text import one_line, sanitize

logger = logging.getLogger("elastimem")

CHAT_COMPLETIONS_PATH = "/chat/completions"
DEFAULT_MAX_TOKENS = 256
# An error body is quoted in the exception message only this far, on one line.
ERROR_BODY_EXCERPT = 200
# A chat completion of a few hundred tokens is a few KB; refuse to buffer a runaway body.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turn a redirect into an HTTP error: following it would replay the Bearer key elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _display_url(url: str) -> str:
    """The URL without user-info, query or fragment, safe to put in messages and logs."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _endpoint(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith(CHAT_COMPLETIONS_PATH) else base + CHAT_COMPLETIONS_PATH


def _check_header(name: object, value: object) -> None:
    if not isinstance(name, str) or not isinstance(value, str):
        raise ConfigError("extra_headers must map str header names to str values.")
    if not name.strip() or any(c in name for c in "\r\n:") or any(c in value for c in "\r\n"):
        raise ConfigError(
            f"extra_headers has an invalid header {name!r}; names must be non-empty and neither "
            "names nor values may contain line breaks."
        )


class OpenAICompatibleLLM:
    """A callable ``(prompt, *, max_tokens=256, temperature=0.0) -> str`` for one endpoint.

    Build it with :func:`openai_compatible`. ``model`` and ``base_url`` are the values it was
    built with (``base_url`` without a trailing ``/``); ``url`` is the endpoint it POSTs to.
    """

    model: str
    base_url: str
    url: str
    timeout: float

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout: float,
        extra_headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = _endpoint(base_url)
        self.model = model
        self.timeout = timeout
        self._display = _display_url(self.url)
        self._api_key = api_key
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "elastimem",
        }
        if extra_headers:
            self._headers.update(extra_headers)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        # A local server must not be routed through an HTTP(S)_PROXY from the environment.
        if _is_loopback(urllib.parse.urlsplit(self.url).hostname or ""):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"openai_compatible({self._display!r}, model={self.model!r})"

    def __call__(
        self, prompt: str, *, max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = 0.0
    ) -> str:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"max_tokens must be a positive int, got {max_tokens!r}.")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise ConfigError(f"temperature must be a number, got {temperature!r}.")
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": sanitize(prompt)}],
            "max_tokens": max_tokens,
            "temperature": float(temperature),
            "stream": False,
        }
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        started = time.monotonic()
        raw = self._post(data)
        logger.debug(
            "LLM call to %s (model %s) took %.2fs",
            self._display,
            self.model,
            time.monotonic() - started,
        )
        return self._content(raw)

    def _fail(self, what: str) -> LLMError:
        return LLMError(f"LLM request to {self._display} {what}.")

    def _post(self, data: bytes) -> bytes:
        request = urllib.request.Request(self.url, data=data, headers=self._headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw: bytes = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            try:
                excerpt = self._excerpt(exc)
            finally:
                exc.close()
            detail = f": {excerpt}" if excerpt else ""
            raise self._fail(
                f"failed with HTTP {exc.code}{detail}; check the model name, key and server log"
            ) from None
        except urllib.error.URLError as exc:
            raise self._connection_error(exc.reason) from exc
        except TimeoutError as exc:
            raise self._connection_error(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._connection_error(exc) from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise self._fail(
                f"returned more than {MAX_RESPONSE_BYTES} bytes; check that it is a chat "
                "completions endpoint"
            )
        return raw

    def _connection_error(self, reason: object) -> LLMError:
        if isinstance(reason, TimeoutError):
            return self._fail(
                f"timed out after {self.timeout:g}s; raise timeout or use a smaller model"
            )
        if isinstance(reason, ConnectionRefusedError):
            return self._fail("was refused; check that the server is running on that port")
        text = one_line(sanitize(reason), ERROR_BODY_EXCERPT) or type(reason).__name__
        return self._fail(f"failed ({text}); check the URL and that the server is reachable")

    def _excerpt(self, exc: urllib.error.HTTPError) -> str:
        try:
            body = exc.read(ERROR_BODY_EXCERPT * 4)
        except Exception:  # the status alone is still a useful message
            return ""
        text = body.decode("utf-8", errors="replace")
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return one_line(sanitize(text), ERROR_BODY_EXCERPT)

    def _content(self, raw: bytes) -> str:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise self._fail(
                "returned a body that is not JSON; check that it is an OpenAI-compatible "
                "chat completions endpoint"
            ) from None
        if not isinstance(payload, dict):
            raise self._fail("returned JSON that is not an object; check the endpoint")
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            error = payload.get("error")
            if error:
                message = error.get("message") if isinstance(error, dict) else error
                text = one_line(sanitize(message), ERROR_BODY_EXCERPT)
                raise self._fail(f"returned an error ({text}); check the model name and server")
            return ""
        first = choices[0]
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            return ""
        return strip_think(content).strip()


def openai_compatible(
    base_url: str,
    model: str,
    api_key: str | None = None,
    timeout: float = 60.0,
    *,
    extra_headers: Mapping[str, str] | None = None,
) -> OpenAICompatibleLLM:
    """An ``llm=`` callable for an OpenAI-compatible chat-completions endpoint (§1.3).

    ``base_url`` is the API root (``http://127.0.0.1:8080/v1``) or the full
    ``…/chat/completions`` URL. Raises :class:`~elastimem.errors.ConfigError` for a URL that is
    not http(s), an empty model, a non-positive timeout or malformed headers; calls raise
    :class:`~elastimem.errors.LLMError` on HTTP errors, timeouts, refused connections and
    malformed JSON.

    Example::

        llm = openai_compatible("http://127.0.0.1:8080/v1", "qwen2.5-3b-instruct")
        memory = elastimem.open("me.db", llm=llm)
    """
    if not isinstance(base_url, str):
        raise ConfigError(
            f"base_url must be a str such as 'http://127.0.0.1:8080/v1', got {base_url!r}."
        )
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"base_url {_display_url(base_url)!r} is not an http(s) URL; use e.g. "
            "'http://127.0.0.1:8080/v1'."
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ConfigError(f"base_url {_display_url(base_url)!r} has an invalid port.") from None
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty str, got {model!r}.")
    if api_key is not None and not isinstance(api_key, str):
        raise ConfigError("api_key must be a str or None.")
    if api_key is not None and any(c in api_key for c in "\r\n"):
        raise ConfigError("api_key must not contain line breaks.")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if extra_headers is not None:
        if not isinstance(extra_headers, Mapping):
            raise ConfigError("extra_headers must be a mapping of header names to values.")
        for name, value in extra_headers.items():
            _check_header(name, value)
    return OpenAICompatibleLLM(
        base_url.strip(), model, api_key, float(timeout), dict(extra_headers or {})
    )
