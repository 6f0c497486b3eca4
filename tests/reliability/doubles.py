"""Host doubles shared by the reliability tests and their child processes.

Child processes run ``child.py`` as a script, so this module must import nothing from the
test tree (``tests.conftest`` pulls in pytest fixtures); it is imported as ``doubles`` there
and as ``tests.reliability.doubles`` in-process.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from typing import Any

import numpy as np

_WORD = re.compile(r"[^\W_]+")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{2,}\b")
_QUOTED_TURNS = re.compile(r"^USER: (.*)$", re.MULTILINE)


class VecEmbedder:
    """Deterministic bag-of-words embedder (numpy, any dimension; 384 like MiniLM by default).

    Texts sharing words get similar vectors, so the vector leg behaves like a real one on
    keyword-heavy data, at a cost of microseconds per text.
    """

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.calls = 0
        self.texts = 0
        self._cache: dict[str, tuple[int, float]] = {}

    def _slot(self, word: str) -> tuple[int, float]:
        slot = self._cache.get(word)
        if slot is None:
            digest = hashlib.blake2b(word.encode("utf-8", "replace"), digest_size=8).digest()
            slot = (int.from_bytes(digest[:4], "little") % self.dim, 1.0 if digest[4] % 2 else -1.0)
            if len(self._cache) < 200_000:
                self._cache[word] = slot
        return slot

    def vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for word in _WORD.findall(text.casefold())[:4096]:
            index, sign = self._slot(word)
            vec[index] += sign
        if not vec.any():
            vec[0] = 1.0
        return vec / np.linalg.norm(vec)

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dim))


def task_of(prompt: str) -> str:
    return prompt.split("\n", 1)[0].removeprefix("TASK:").strip()


def extraction_reply(prompt: str, rnd: random.Random | None = None) -> str:
    """A plausible extraction: facts, entities (capitalised words) and USER relationships."""
    rnd = rnd or random.Random(hashlib.blake2b(prompt.encode("utf-8", "replace")).digest())
    turns = _QUOTED_TURNS.findall(prompt.split("\nConversation\n", 1)[-1])
    text = " ".join(turns)
    names = []
    for name in _CAPITALISED.findall(text):
        if name not in names and name not in ("User", "Assistant"):
            names.append(name)
    names = names[:4]
    facts: dict[str, str] = {}
    if names:
        facts["mentioned_person"] = names[0]
    facts[rnd.choice(["favorite_drink", "home_city", "pet_name", "hobby"])] = rnd.choice(
        ["tea", "coffee", "Lisbon", "Oslo", "Biscuit", "Pepper", "climbing", "chess"]
    )
    entities = [{"name": n, "type": rnd.choice(["person", "place", "org", "thing"])} for n in names]
    relationships = [{"source": "USER", "relation": "knows", "target": n} for n in names[:2]]
    return json.dumps({"facts": facts, "entities": entities, "relationships": relationships})


class HostLLM:
    """An LLM double that answers every TASK the library sends, optionally after a delay.

    ``extract`` can be overridden with a fixed reply, a callable or an exception.
    """

    def __init__(
        self,
        *,
        delay: tuple[float, float] = (0.0, 0.0),
        extract: Any = None,
        seed: int = 0,
    ) -> None:
        self.delay = delay
        self.extract = extract
        self.rnd = random.Random(seed)
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}

    def __call__(self, prompt: str, *, max_tokens: int = 256, temperature: float = 0.0) -> Any:
        task = task_of(prompt)
        with self.lock:
            self.calls[task] = self.calls.get(task, 0) + 1
            pause = self.rnd.uniform(*self.delay) if self.delay[1] > 0 else 0.0
        if pause:
            time.sleep(pause)
        if task == "extract":
            reply = self.extract
            if reply is None:
                return extraction_reply(prompt)
            if callable(reply):
                reply = reply(prompt)
            if isinstance(reply, BaseException):
                raise reply
            return reply
        return {
            "condense": "They talked about plans.",
            "summarise-session": "The user talked about their week.",
            "merge": "",
            "same-entity": "no",
            "label": "Everyday life",
        }.get(task, "")


class HangingCallable:
    """Blocks every call until ``release()`` (or ``limit`` seconds), counting the calls."""

    def __init__(self, result: Any = None, limit: float = 60.0) -> None:
        self.event = threading.Event()
        self.result = result
        self.limit = limit
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.entered.set()
        self.event.wait(self.limit)
        result = self.result
        return result(*args, **kwargs) if callable(result) else result

    def release(self) -> None:
        self.event.set()
