"""Shared fixtures: isolated environment, temporary stores, and deterministic host doubles.

The ``llm`` and ``embedder`` doubles stand in for the host's callables (which are the host's
by design). The built-in embedder is never faked: tests that need it are marked ``embedder``.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.storage.sqlite import connection as sqlite_connection

ENV_VARS = (
    "ELASTIMEM_DB",
    "ELASTIMEM_TIER",
    "ELASTIMEM_DISABLE_FTS",
    "ELASTIMEM_ALLOW_MODEL_DOWNLOAD",
    "ELASTIMEM_LLM_URL",
    "ELASTIMEM_LLM_MODEL",
    "ELASTIMEM_LLM_API_KEY",
)


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ELASTIMEM_CACHE_DIR for the whole run: the built-in model is converted to ONNX
    once per session (seconds of torch), not once per test that loads it."""
    return tmp_path_factory.mktemp("elastimem_cache")


@pytest.fixture(autouse=True)
def isolated_env(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    model_cache_dir: Path,
) -> Path:
    """Point every default path at a temporary home; no test touches the user's files."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("ELASTIMEM_CACHE_DIR", str(model_cache_dir))
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def fast_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lock tests need SQLITE_BUSY in well under the production 10 s."""
    monkeypatch.setattr(sqlite_connection, "BUSY_TIMEOUT_MS", 300)


# -- host doubles -----------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")


class HashEmbedder:
    """Deterministic bag-of-words embedder: texts sharing words get similar vectors."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.casefold()):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dim
            vec[index] += 1.0 if digest[4] % 2 else -1.0
        if not any(vec):
            vec[0] = 1.0
        norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            self.calls.append(list(texts))
        return [self.vector(t) for t in texts]


class ScriptedLLM:
    """Routes on the prompt's ``TASK:`` line and records every call."""

    def __init__(self, replies: dict[str, Any] | None = None) -> None:
        self.replies: dict[str, Any] = {
            "extract": "NONE",
            "condense": "",
            "summarise-session": "",
            "merge": "",
            "same-entity": "no",
            "label": "",
        }
        self.replies.update(replies or {})
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    @staticmethod
    def task_of(prompt: str) -> str:
        first = prompt.split("\n", 1)[0]
        return first.removeprefix("TASK:").strip()

    def kinds(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]

    def __call__(self, prompt: str, *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        task = self.task_of(prompt)
        with self.lock:
            self.calls.append(
                (task, prompt, {"max_tokens": max_tokens, "temperature": temperature})
            )
        reply = self.replies.get(task, "")
        if callable(reply):
            reply = reply(prompt)
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "memory.db"


@pytest.fixture
def make_store(store_path: Path) -> Iterator[Callable[..., elastimem.Elastimem]]:
    """Open stores (file-backed by default, no built-in embedder); all closed afterwards."""
    opened: list[elastimem.Elastimem] = []

    def factory(path: str | Path | None = None, **kw: Any) -> elastimem.Elastimem:
        kw.setdefault("disable_builtin_embedder", True)
        mem = elastimem.Elastimem(str(path or store_path), **kw)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


@pytest.fixture
def mem(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    return make_store()


@pytest.fixture
def memory_store(make_store: Callable[..., elastimem.Elastimem]) -> elastimem.Elastimem:
    return make_store(":memory:")


def wait_until(condition: Callable[[], object], seconds: float = 5.0) -> bool:
    """Poll ``condition`` until it is true or ``seconds`` pass; its last truth value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())
