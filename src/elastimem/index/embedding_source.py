"""The active embedder behind one validated interface (SPEC §4.4, §5.13).

``EmbeddingSource`` hides whether vectors come from the host's ``embedder`` (label ``host``)
or the built-in model (label ``elastimem:…``), validates every result, records the active
dimension, caches query vectors and marks a host embedder failed after 3 straight failures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import observe
from .embedders import HOST_LABEL, BuiltinEmbedder, QueryVectorCache, to_unit_matrix, to_unit_vector

logger = logging.getLogger("elastimem")

HOST_FAILURES_BEFORE_GIVING_UP = 3


class EmbeddingSource:
    """The active embedder, host or built-in, behind one validated interface."""

    def __init__(
        self,
        host_embed: Callable[[list[str]], Any] | None,
        host_query: Callable[[str], Any] | None,
        builtin: BuiltinEmbedder | None,
    ) -> None:
        self.host_embed = host_embed
        self.host_query = host_query
        self.builtin = builtin
        self._host_failures = 0
        self._host_failed = False
        self.dims: dict[str, int] = {}
        self.query_cache = QueryVectorCache()
        # The vector leg asked the worker to load the built-in model (once per instance).
        self.load_requested = False
        self._query_warned = False
        # Wall seconds of the last query embedding that ran (not a cache hit), measured on
        # the thread that ran it; None until one has run.
        self.last_query_seconds: float | None = None

    @property
    def is_host(self) -> bool:
        return self.host_embed is not None or (self.host_query is not None and self.builtin is None)

    @property
    def configured(self) -> bool:
        return any(x is not None for x in (self.host_embed, self.host_query, self.builtin))

    def state(self) -> str:
        """``none | not_loaded | loading | ready | failed`` for ``stats()``."""
        if self.host_embed is not None:
            return "failed" if self._host_failed else "ready"
        if self.builtin is not None:
            return self.builtin.state
        return "none"

    @property
    def label(self) -> str | None:
        if self.host_embed is not None:
            return HOST_LABEL
        if self.builtin is not None:
            return self.builtin.label
        return None

    @property
    def failed(self) -> bool:
        return self.state() == "failed"

    def resident(self) -> bool:
        """An embedder that can answer now without loading anything."""
        return self.state() == "ready"

    def can_embed_passages(self) -> bool:
        """Worth queueing embed jobs: a usable host embedder, or a built-in not yet failed."""
        if self.host_embed is not None:
            return not self._host_failed
        return self.builtin is not None and self.builtin.state != "failed"

    # -- passages ----------------------------------------------------------------------------

    def embed_passages(self, texts: list[str], *, count_failure: bool = True) -> np.ndarray:
        """Unit float32 rows for ``texts``; raises on any invalid output (call off-lock).

        ``count_failure``: a failure counts toward giving the host embedder up (§5.13's
        rule for the embed job). ``reindex`` passes False: it raises ``EmbedderError`` for
        the host to fix the embedder and call it again, which three failures would refuse.
        """
        with observe.span("embed", "passages", count=len(texts)):
            return self._embed_passages(texts, count_failure)

    def _embed_passages(self, texts: list[str], count_failure: bool) -> np.ndarray:
        if self.host_embed is not None:
            try:
                matrix = self._check_dim(to_unit_matrix(self.host_embed(list(texts)), len(texts)))
            except Exception:
                if not count_failure:
                    raise
                self._host_failures += 1
                if self._host_failures >= HOST_FAILURES_BEFORE_GIVING_UP and not self._host_failed:
                    self._host_failed = True
                    logger.warning(
                        "the host embedder failed %d times in a row; semantic recall is off "
                        "for this instance and its chunks stay unembedded until a reopen",
                        self._host_failures,
                    )
                raise
            self._host_failures = 0
        elif self.builtin is not None and self.builtin.state == "ready":
            matrix = self._check_dim(self.builtin.embed(texts))
        else:
            raise RuntimeError("no embedder is ready")
        return matrix

    def _check_dim(self, matrix: np.ndarray) -> np.ndarray:
        """The dimension fixed by this instance's first call must not change (§5.13)."""
        known = self.dims.get(self.label or "")
        if known is not None and matrix.shape[0] and matrix.shape[1] != known:
            raise ValueError(
                f"the embedder returned {matrix.shape[1]}-dim vectors but this store's active "
                f"dimension is {known}; reopen the store to switch models, then reindex()"
            )
        return matrix

    def record_dim(self, label: str, dim: int) -> None:
        """The first successful call of the instance fixes the active dimension (§5.13)."""
        self.dims.setdefault(label, dim)

    def warn_query_failure(self, exc: BaseException) -> None:
        """The query encoder raised: keyword results only; warn once per instance.

        Only the exception's type is logged: a host callable's message may quote the query
        (user text), and logs never carry message text.
        """
        kind = type(exc).__name__
        if not self._query_warned:
            self._query_warned = True
            logger.warning(
                "the query embedding failed (%s), so recall uses keyword results "
                "(further failures are logged at debug level)",
                kind,
            )
        else:
            logger.debug("the query embedding failed (%s)", kind)

    # -- queries -----------------------------------------------------------------------------

    def query_vector(self, text: str, dim: int | None) -> np.ndarray | None:
        """The query's unit vector, or None when it cannot be had now (§5.13).

        Cached per ``(label, dim, text)`` in an LRU, so a repeated query (``build_context``
        then ``explain``, a retry) does not run the model again.
        """
        label = self.label
        if label is None or not self.resident():
            return None
        cached = self.query_cache.get(label, dim, text)
        if cached is not None:
            return cached
        raw: Any
        started = time.perf_counter()
        with observe.span("embed", "query", count=1):
            if self.host_query is not None:
                raw = self.host_query(text)
            elif self.host_embed is not None:
                raw = self.host_embed([text])
            elif self.builtin is not None:
                raw = self.builtin.embed_query(text)
            else:
                return None
        self.last_query_seconds = time.perf_counter() - started
        vector = to_unit_vector(raw, dim=dim)
        if vector is not None:
            self.query_cache.put(label, dim, text, vector)
        return vector
