"""The wiring of one open store: ``Services``, and the embedder's loading and gate.

``Services`` bundles what the job handlers (``elastimem.jobs``) and the query path
(``elastimem.retrieval``) need from one instance (database, gate, embedding source, vector
index, current config and profile, caches) so they never touch the facade. The helpers
here decide whether the built-in embedder is resident, being loaded, or may be waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import ElastimemConfig
from ..governor import MemoryProfile
from ..index.keyword import KeywordIndexes
from ..index.own_text import OwnTextVectors
from ..index.vectors import EmbeddingSource, VectorIndex
from ..memory import episodic, fact_vectors, semantic
from ..storage.database import Database
from ..storage.tx import Tx
from .gate import LLMGate, Watchdog
from .worker import Worker

logger = logging.getLogger("elastimem")

# The built-in models' labels start with this (``index.embedders``).
BUILTIN_LABEL_PREFIX = "elastimem:"


@dataclass
class Services:
    """What the background handlers need from one store instance."""

    db: Database
    owner: episodic.Owner
    gate: LLMGate
    embedding: EmbeddingSource
    vectors: VectorIndex
    config: Callable[[], ElastimemConfig]
    profile: Callable[[], MemoryProfile]
    llm: Callable[[], Callable[..., str] | None]
    est: Callable[[str], int]
    current_digest: Callable[[], tuple[int | None, list[str]]]
    apply_digest: Callable[[int, list[str]], None]
    ensure_session: Callable[[], int]
    worker: Worker | None = None
    passage_watchdog: Watchdog = field(default_factory=lambda: Watchdog("the embedder"))
    query_watchdog: Watchdog = field(default_factory=lambda: Watchdog("the query embedder"))
    keyword: KeywordIndexes = field(default_factory=KeywordIndexes)
    live_facts: semantic.LiveFactsCache = field(default_factory=semantic.LiveFactsCache)
    fact_vectors: fact_vectors.FactVectorCache = field(default_factory=fact_vectors.FactVectorCache)
    own_text: OwnTextVectors = field(default_factory=OwnTextVectors)
    warned: set[str] = field(default_factory=set)
    # Set by close() first thing: a recall waiting for the model stops waiting (vector_gate).
    closing: bool = False

    def warn_once(self, kind: str, message: str, *args: object) -> None:
        """A warning that could repeat is logged once per instance, then at debug level."""
        level = logging.DEBUG if kind in self.warned else logging.WARNING
        self.warned.add(kind)
        logger.log(level, message, *args)

    def close(self) -> None:
        """Free what outlives a call: cached postings and the idle helper threads."""
        self.keyword.close()
        for watchdog in (self.passage_watchdog, self.query_watchdog, self.gate.watchdog):
            watchdog.close()

    def ask(self, kind: str, prompt: str, *, max_tokens: int, phase: str = "turn") -> str:
        """One LLM call through the gate; ``GateDeferred`` / ``GateDenied`` propagate."""
        return self.gate.call(
            kind,
            prompt,
            llm=self.llm(),
            profile=self.profile(),
            max_tokens=max_tokens,
            phase=phase,
        )


def active_dim(services: Services, conn: Tx, label: str) -> int | None:
    dim = services.embedding.dims.get(label)
    if dim is None:
        value = conn.meta.get_int(f"embedder.{label}.dim", 0)
        dim = value or None
    return dim


def ensure_embedder_loaded(services: Services) -> bool:
    """On the worker thread: load the built-in embedder if allowed. True when resident."""
    source = services.embedding
    if source.resident():
        return True
    if source.builtin is not None and services.profile().embedder_load_allowed:
        return source.builtin.load()
    return False


def request_embedder_load(services: Services, profile: MemoryProfile) -> bool:
    """Ask the worker, once per instance, to load the built-in model if the tier allows.

    Called right after open (so the first recall rarely waits) and by the vector gate.
    True when a load is coming or done.
    """
    source = services.embedding
    builtin = source.builtin
    if builtin is None or source.host_embed is not None or not profile.embedder_load_allowed:
        return False
    if builtin.state != "not_loaded" or source.load_requested:
        return builtin.state != "failed"
    worker = services.worker
    if worker is None:
        return False
    source.load_requested = True
    worker.submit(builtin.load)
    return True


def preload_embedder(services: Services, profile: MemoryProfile) -> None:
    """At open: start loading the built-in model when the store holds vectors it made, so
    the first recall rarely waits. A store without them (new, or host-embedded) loads it
    at its first embed job or query, as before: a process that never searches them pays
    nothing (90 MB of RAM, a fraction of a second of a core)."""
    source = services.embedding
    if source.builtin is None or source.host_embed is not None:
        return
    try:
        with services.db.read() as conn:
            found = conn.stats.has_recorded_embedder(BUILTIN_LABEL_PREFIX)
    except Exception as exc:  # only a head start
        logger.debug("checking for built-in vectors failed: %s", type(exc).__name__)
        return
    if found:
        request_embedder_load(services, profile)


def vector_gate(services: Services, profile: MemoryProfile) -> str:
    """§5.6's vector gate: "ready", or why the leg cannot run (a VECTOR_LEG_STATES value).

    A built-in model that is loading (or queued to load) is waited for, up to
    ``embedder_wait_seconds``, on the caller's thread; the load itself runs on the worker.
    """
    source = services.embedding
    if not profile.vector_recall_enabled:
        return "disabled"
    if not source.configured:
        return "no_embedder"
    if source.failed:
        return "failed"
    if source.resident():
        return "ready"
    builtin = source.builtin
    if builtin is None:
        return "no_embedder"  # a query encoder alone embeds no passages
    if not profile.embedder_load_allowed:
        return "not_loaded"
    worker = services.worker
    if not request_embedder_load(services, profile) or worker is None:
        return "failed" if builtin.state == "failed" else "not_loaded"
    if worker.is_worker_thread:
        return "not_ready"  # the load is queued behind this very call: waiting would hang
    wait = services.config().embedder_wait_seconds
    state = builtin.wait(wait, stop=lambda: services.closing)
    if state == "ready":
        return "ready"
    if state == "failed":
        return "failed"
    if services.closing:
        return "not_ready"  # close() ended the wait: the store is going away
    services.warn_once(
        "embedder_not_ready",
        "the built-in embedder was still loading after %.1f s (embedder_wait_seconds), so "
        "this result was made without meaning-search; explain() reports vector_leg="
        "'not_ready' while it loads",
        wait,
    )
    return "not_ready"
