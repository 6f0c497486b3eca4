"""Background work: queueing at each turn, the job handlers, digests, warm-up and reindex.

The worker (``worker.py``) runs these handlers; they receive a ``Services`` bundle with what
they need (database, gate, embedding source, vector index, current config and profile) and
never touch the facade. Every LLM call goes through ``gate.LLMGate.call``; every write goes
through ``db.atomic()`` and never while an LLM or embedder call is in flight.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import graph
from ..clock import now_ts
from ..config import ElastimemConfig
from ..enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from ..errors import EmbedderError
from ..extraction import Turn, build_extract_prompt, pack_turns, parse_extraction
from ..governor import MemoryProfile
from ..guards import is_instruction_like
from ..index.keyword import KeywordIndexes
from ..index.vectors import EmbeddingSource, VectorIndex, passage_texts, write_vectors
from ..memory import episodic, fact_vectors, procedural, semantic
from ..prompts import (
    build_condense_prompt,
    build_fact_merge_prompt,
    build_session_summary_prompt,
    clean_llm_text,
    clean_value,
    split_sentences,
)
from ..retrieval.rank import Filters, VectorFinish, fact_keyword_leg
from ..storage.sqlite import database as db
from ..storage.sqlite import files
from ..storage.tx import Tx
from ..text import collapse_whitespace, normalize_key, query_terms, word_tokens
from . import queue as jobs
from .gate import CallTimeout, GateDeferred, GateDenied, LLMGate, Watchdog
from .worker import Worker

logger = logging.getLogger("elastimem")

EXTRACT_CHUNK_IMPORTANCE = 0.8
BACKFILL_BATCH = 256
EMBED_BATCH = 64
SUMMARY_TURNS = 12
SUMMARY_TURN_CHARS = 160
EVICTED_SIDE_CHARS = 200
# At most this many evicted turns in one condense job (see _queue_condense).
CONDENSE_MAX_TURNS = 12
DIGEST_CLAUSE_CHARS = 120
MERGE_REVIEWS_PER_SWEEP = 5
MERGE_REPLY_LIMIT = 200
WARM_UP_FOR_REINDEX_SECONDS = 300.0
# Embedding 64 chunks takes well under a minute on any CPU; two minutes means it hangs.
EMBED_CALL_TIMEOUT_SECONDS = 120.0
# The query vector is computed on the host's thread inside recall/build_context: past this,
# the vector leg is skipped and the keyword legs answer (the built-in model needs ~20 ms).
QUERY_EMBED_TIMEOUT_SECONDS = 3.0
# A query embedding that took less than this last time is waited for at once, before the
# keyword legs: with the vector at hand, the exact scan runs beside them on another core
# instead (see retrieval._rank_chunks), and a quick call gains nothing from a thread of its
# own while the legs want the GIL. 10k-store hybrid recall p50 with the latency benchmark's
# ~0.2 ms embedder, A/B in one process: 4.18 ms waited for, 4.98 ms overlapped. A slow
# embedder (the built-in model, ~13 ms; a local server) still runs beside the legs.
QUERY_EMBED_OVERLAP_MIN_SECONDS = 0.002


@dataclass
class Services:
    """What the background handlers need from one store instance."""

    db: db.Database
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


def make_worker(services: Services, on_wake: Callable[[], None]) -> Worker:
    handlers = {
        "embed": lambda job: run_embed(services, job),
        "link": lambda job: run_link(services, job),
        "extract": lambda job: run_extract(services, job),
        "rolling_summary": lambda job: run_rolling_summary(services, job),
        "session_summary": lambda job: run_session_summary(services, job),
        "consolidate": lambda job: run_consolidate(services, job),
    }
    worker = Worker(
        services.db,
        services.owner,
        handlers,
        skip_kinds=lambda: jobs.LLM_KINDS if services.gate.blocks_llm_jobs() else frozenset(),
        on_wake=on_wake,
        on_idle=lambda idle_for: on_idle(services, idle_for),
        idle_seconds=lambda: services.config().idle_consolidate_seconds,
    )
    services.worker = worker
    return worker


# -- queueing ---------------------------------------------------------------------------------


def queue_turn_jobs(
    conn: Tx,
    services: Services,
    record: episodic.TurnRecord,
    user: str,
    profile: MemoryProfile,
    config: ElastimemConfig,
) -> None:
    """§5.10 step 3: link, embed and extract jobs for a freshly stored turn."""
    if not record.chunk_ids:
        return
    owner = services.owner
    chunk_payload = {"chunk_ids": list(record.chunk_ids)}
    if graph.has_nodes(conn):
        jobs.enqueue(conn, "link", owner, session_id=record.session_id, payload=chunk_payload)
    if profile.embeddings_enabled and services.embedding.can_embed_passages():
        jobs.enqueue(conn, "embed", owner, session_id=record.session_id, payload=chunk_payload)
    cadence = profile.extraction_cadence
    if (
        services.llm() is not None
        and profile.llm_extraction_enabled
        and cadence != Cadence.OFF
        and len(user.split()) >= config.min_query_words
    ):
        state = "queued" if cadence == Cadence.PER_TURN else "held"
        jobs.enqueue(
            conn,
            "extract",
            owner,
            state=state,
            session_id=record.session_id,
            payload={"turns": [record.turn]},
        )
        if (
            cadence == Cadence.BATCHED
            and jobs.count_held_extracts(conn, record.session_id) >= config.batched_every_n_turns
        ):
            jobs.release_held_extracts(conn, record.session_id, owner, "turn")


def on_idle(services: Services, idle_for: float) -> None:
    """Idle sweep and embedding backfill (§5.11)."""
    if services.db.read_only:
        return
    profile = services.profile()
    config = services.config()
    with services.db.atomic() as conn:
        if (
            idle_for >= config.idle_consolidate_seconds
            and profile.consolidation_level == ConsolidationLevel.FULL
            and not services.gate.foreground_active
            and conn.meta.get_int("writes_since_consolidation") > 0
            and not jobs.has_pending(conn, "consolidate", services.owner)
        ):
            jobs.enqueue(conn, "consolidate", services.owner)
        if (
            profile.embeddings_enabled
            and services.embedding.can_embed_passages()
            and not jobs.has_pending(conn, "embed", services.owner)
            and (
                conn.execute("SELECT 1 FROM chunks WHERE embedding IS NULL LIMIT 1").fetchone()
                or _facts_pending(services, conn)
            )
        ):
            jobs.enqueue(conn, "embed", services.owner, payload={"backfill": True})
            if services.worker is not None:
                services.worker.signal()  # run it now, not after the next idle wait


def _facts_pending(services: Services, conn: Tx) -> bool:
    """Live facts without a vector of the active model (known once it has loaded)."""
    label = services.embedding.label
    if label is None:
        return False
    return bool(fact_vectors.pending(conn, label, active_dim(services, conn, label), 1))


# -- embed ------------------------------------------------------------------------------------


def _ensure_embedder_loaded(services: Services) -> bool:
    """On the worker thread: load the built-in embedder if allowed. True when resident."""
    source = services.embedding
    if source.resident():
        return True
    if source.builtin is not None and services.profile().embedder_load_allowed:
        return source.builtin.load()
    return False


def active_dim(services: Services, conn: Tx, label: str) -> int | None:
    dim = services.embedding.dims.get(label)
    if dim is None:
        value = conn.meta.get_int(f"embedder.{label}.dim", 0)
        dim = value or None
    return dim


def run_embed(services: Services, job: jobs.Job) -> None:
    if not services.profile().embeddings_enabled or not _ensure_embedder_loaded(services):
        return  # backfilled later, when the tier allows it
    label = services.embedding.label
    if label is None:
        return
    with services.db.read() as conn:
        dim = active_dim(services, conn, label)
        if job.payload.get("backfill"):
            rows = conn.execute(
                "SELECT id, text FROM chunks WHERE embedding IS NULL ORDER BY id LIMIT ?",
                (BACKFILL_BATCH,),
            ).fetchall()
        else:
            ids = [int(i) for i in job.payload.get("chunk_ids", []) if isinstance(i, int)]
            rows = _chunks_needing_vectors(conn, ids, label, dim)
            rows += _waiting_chunks(conn, {int(r[0]) for r in rows}, EMBED_BATCH - len(rows))
        texts = passage_texts(conn, rows)
    for start in range(0, len(rows), EMBED_BATCH):
        batch = rows[start : start + EMBED_BATCH]
        matrix = _embed_in_job(services, texts[start : start + EMBED_BATCH])
        with services.db.atomic() as conn:
            batch_ids, own = [int(r[0]) for r in batch], [str(r[1]) for r in batch]
            write_vectors(conn, batch_ids, matrix, label, own)
        services.embedding.record_dim(label, int(matrix.shape[1]))
    _embed_facts(services, label)


def _embed_in_job(services: Services, texts: list[str]) -> Any:
    """The embed job's call of the embedder (bounded by the watchdog)."""
    try:
        return services.passage_watchdog.call(
            EMBED_CALL_TIMEOUT_SECONDS, services.embedding.embed_passages, texts
        )
    except CallTimeout:
        raise
    except Exception as exc:
        if services.embedding.host_embed is not None:
            # EmbeddingSource counts the host embedder's failures and warns once when
            # it gives up; a warning per job attempt would repeat it.
            raise jobs.ReportedFailure(type(exc).__name__) from exc
        raise


def _embed_facts(services: Services, label: str) -> None:
    """Every embed job also embeds the live facts that have no vector of the model
    (fact_vectors.py): whatever wrote them, the next embed job after the write finds them."""
    while True:
        with services.db.read() as conn:
            rows = fact_vectors.pending(conn, label, active_dim(services, conn, label), EMBED_BATCH)
        if not rows:
            return
        texts = [fact_vectors.fact_text(key, value) for _, key, value in rows]
        matrix = _embed_in_job(services, texts)
        with services.db.atomic() as conn:
            written = fact_vectors.write(conn, rows, matrix, label)
        services.embedding.record_dim(label, int(matrix.shape[1]))
        if written < len(rows) or len(rows) < EMBED_BATCH:
            return  # the rest were erased or replaced meanwhile: their successors wait


def queue_fact_embedding(conn: Tx, services: Services) -> None:
    """After a fact write, in its transaction: have the worker embed the new facts."""
    fact_vectors.queue(conn, services)


def _waiting_chunks(conn: Tx, have: set[int], room: int) -> list[tuple[Any, ...]]:
    """Other chunks still without a vector, to fill the job's batch.

    A host recording turns faster than the model embeds them queues one job per turn;
    topping each batch up to ``EMBED_BATCH`` lets the model work on full batches (several
    times its single-text throughput), and the later jobs find their chunks done.
    """
    if room <= 0:
        return []
    rows = conn.execute(
        "SELECT id, text FROM chunks WHERE embedding IS NULL ORDER BY id LIMIT ?",
        (room + len(have),),
    ).fetchall()
    return [r for r in rows if int(r[0]) not in have][:room]


def _chunks_needing_vectors(
    conn: Tx, ids: list[int], label: str, dim: int | None
) -> list[tuple[Any, ...]]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return conn.execute(
        f"SELECT id, text FROM chunks WHERE id IN ({marks}) AND (embedding IS NULL "
        "OR embedding_model IS NOT ? OR embedding_dim IS NOT ?) ORDER BY id",
        (*ids, label, dim if dim is not None else -1),
    ).fetchall()


def reindex(
    services: Services,
    worker: Worker,
    progress: Callable[[int, int], None] | None,
    *,
    force: bool,
) -> int:
    """Re-embed chunks without a current vector (or all with ``force``), on this thread."""
    source = services.embedding
    if source.builtin is not None and not source.resident() and source.host_embed is None:
        if source.builtin.state == "not_loaded":
            worker.submit(source.builtin.load)
        worker.wait_for(
            lambda: source.builtin is None or source.builtin.state in ("ready", "failed"),
            WARM_UP_FOR_REINDEX_SECONDS,
        )
    label = source.label
    if label is None or not source.resident() or not source.can_embed_passages():
        services.warn_once("reindex", "reindex found no usable embedder; nothing was re-embedded")
        return 0
    dim = source.dims.get(label)
    if dim is None:
        # No successful call yet in this instance: the dimension in meta may be an older
        # model's (a host that swapped models keeps the label "host"), so ask the model.
        dim = int(_embed_or_raise(source, ["dimension probe"]).shape[1])
        source.record_dim(label, dim)
    with services.db.read() as conn:
        if force:
            ids = [int(r[0]) for r in conn.execute("SELECT id FROM chunks ORDER BY id")]
        else:
            ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM chunks WHERE embedding IS NULL OR embedding_model IS NOT ? "
                    "OR embedding_dim IS NOT ? ORDER BY id",
                    (label, dim),
                )
            ]
    total = len(ids)
    done = written = 0
    for start in range(0, total, EMBED_BATCH):
        part = ids[start : start + EMBED_BATCH]
        with services.db.read() as conn:
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT id, text FROM chunks WHERE id IN ({marks}) ORDER BY id", part
            ).fetchall()
            texts = passage_texts(conn, rows)
        if rows:
            matrix = _embed_or_raise(source, texts)
            with services.db.atomic() as conn:
                batch_ids, own = [int(r[0]) for r in rows], [str(r[1]) for r in rows]
                written += write_vectors(conn, batch_ids, matrix, label, own)
            source.record_dim(label, int(matrix.shape[1]))
        done += len(part)
        if progress is not None:
            progress(done, total)
    facts = _reindex_facts(services, label, dim, force=force)
    with services.db.atomic() as conn:
        conn.meta.bump("vectors.gen")
        conn.meta.log_event("reindex", chunks=written, facts=facts, label=label)
    # Cached query vectors may be the old model's (a host that swapped its model keeps the
    # label "host" and the dimension): they would score against the new vectors.
    source.query_cache.clear()
    return written


def _reindex_facts(services: Services, label: str, dim: int, *, force: bool) -> int:
    """Re-embed the live facts without a vector of the active model (all with ``force``),
    after the chunks; returns the number written."""
    with services.db.read() as conn:
        if force:
            rows = fact_vectors.all_live(conn)
        else:
            rows = fact_vectors.pending(conn, label, dim, 1 << 62)
    written = 0
    for start in range(0, len(rows), EMBED_BATCH):
        part = rows[start : start + EMBED_BATCH]
        matrix = _embed_or_raise(
            services.embedding, [fact_vectors.fact_text(key, value) for _, key, value in part]
        )
        with services.db.atomic() as conn:
            written += fact_vectors.write(conn, part, matrix, label)
    return written


def _embed_or_raise(source: EmbeddingSource, texts: list[str]) -> Any:
    try:
        return source.embed_passages(texts, count_failure=False)
    except Exception as exc:
        raise EmbedderError(
            f"the embedder failed during reindex ({exc}); fix the embedder and run reindex "
            "again, batches already written are kept"
        ) from exc


def warm_up(services: Services, worker: Worker, profile: MemoryProfile, timeout: float) -> bool:
    keywords = keyword_index(services, profile)
    if keywords is not None and services.db.fts_enabled:
        _request_prime(services, keywords, worker)
    ready = _warm_up_embedder(services, worker, profile, timeout)
    if ready and profile.vector_recall_enabled:
        _prime_vectors(services, worker)
    return ready


def _prime_keywords(services: Services, index: KeywordIndexes) -> None:
    """Read the chunk lengths now rather than in the first recall (a second at 1M chunks),
    and the postings of a small enough store (keyword_index.PRELOAD_MAX_POSTINGS)."""
    try:
        with services.db.read() as conn:
            index.prime(conn)
    except Exception as exc:  # only a head start: the first query loads them anyway
        logger.debug("priming the keyword index failed: %s", type(exc).__name__)
    finally:
        index.prime_requested = False


def _warm_up_embedder(
    services: Services, worker: Worker, profile: MemoryProfile, timeout: float
) -> bool:
    source = services.embedding
    if source.host_embed is not None:
        return not source.failed
    # No host embedder: passages are the built-in model's even with a host query_embedder.
    builtin = source.builtin
    if builtin is None:
        return False
    if builtin.state in ("ready", "failed") or not profile.embedder_load_allowed:
        return builtin.state == "ready"
    worker.submit(builtin.load)
    worker.wait_for(lambda: builtin.state in ("ready", "failed"), timeout)
    return builtin.state == "ready"


def _prime_vectors(services: Services, worker: Worker) -> None:
    """Have the worker load the vector index now, not inside the host's first recall
    (a million 384-dim vectors take seconds to read)."""
    label = services.embedding.label
    if label is None:
        return
    with services.db.read() as conn:
        dim = active_dim(services, conn, label)
    if dim is not None:
        services.vectors.attach_worker(worker.submit)
        worker.submit(lambda: services.vectors.prime(label, dim))


def keyword_index(services: Services, profile: MemoryProfile) -> KeywordIndexes | None:
    """The cached-postings BM25 of keyword_index, except at LITE, where its memory (a few
    bytes per chunk, twelve per cached posting) goes unspent and FTS5 ranks by itself.

    When the index would preload its postings (first use, or after a change it could
    not follow), the worker is asked to, once: this query reads its terms meanwhile."""
    if profile.tier is Tier.LITE:
        return None
    index = services.keyword
    worker = services.worker
    if worker is not None and index.wants_preload and services.db.fts_enabled:
        _request_prime(services, index, worker)
    return index


def _request_prime(services: Services, index: KeywordIndexes, worker: Worker) -> None:
    """Have the worker prime the index, unless a prime is already waiting or running."""
    if not index.prime_requested:
        index.prime_requested = True
        worker.submit(lambda: _prime_keywords(services, index))


@dataclass
class VectorLegReport:
    """What became of one query's vector leg: ``ExplainResult.vector_leg`` (values.py)."""

    state: str = "not_run"


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
            row = conn.execute(
                "SELECT 1 FROM meta WHERE key LIKE 'embedder.elastimem:%' LIMIT 1"
            ).fetchone()
    except Exception as exc:  # only a head start
        logger.debug("checking for built-in vectors failed: %s", type(exc).__name__)
        return
    if row is not None:
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


def vector_leg(
    services: Services,
    text: str,
    profile: MemoryProfile,
    report: VectorLegReport | None = None,
) -> Any:
    """The vector leg for one query, or None when the gate of §5.6 says no.

    ``report.state`` says what became of it: the gate's reason, "failed" when the query
    vector could not be made or used, "used" once a search runs.
    """
    report = report if report is not None else VectorLegReport()
    source = services.embedding
    gate = vector_gate(services, profile)
    if gate != "ready":
        report.state = gate
        return None
    report.state = "failed"  # until a search runs
    label = source.label
    if label is None:
        return None
    watchdog = services.query_watchdog
    if watchdog.stuck:
        return None  # an earlier query embedding has not returned: keyword legs only
    pending = None
    # The dimension this instance fixed, if it embedded anything yet; otherwise the stored
    # one is read in the ranking's own snapshot (below) rather than in a read of its own.
    known_dim = source.dims.get(label)
    try:
        # A cached vector needs no call, so no helper thread either. Otherwise the query
        # is embedded on a helper thread: waited for now when it is quick, else while the
        # keyword legs run.
        query = source.query_cache.get(label, known_dim, text)
        if query is None:
            pending = watchdog.start(
                QUERY_EMBED_TIMEOUT_SECONDS, source.query_vector, text, known_dim
            )
            last = source.last_query_seconds
            if last is not None and last < QUERY_EMBED_OVERLAP_MIN_SECONDS:
                query, pending = pending.wait(), None  # quick: nothing worth overlapping
                if query is None:
                    return None
    except Exception as exc:  # a CallTimeout too: warned once, then at debug level
        source.warn_query_failure(exc)
        return None
    vectors = services.vectors
    if services.worker is not None:
        vectors.attach_worker(services.worker.submit)

    def usable(conn: Tx, vector: np.ndarray | None) -> bool:
        if vector is None:
            return False  # no query vector: the ranking runs without this leg
        dim = known_dim if known_dim is not None else active_dim(services, conn, label)
        return dim is None or vector.shape[0] == dim  # else: as if there were no leg

    def leg(conn: Tx, filters: Filters, n: int) -> VectorFinish:
        if pending is None:
            # The vector is at hand: the scan runs on the scan helpers while the keyword
            # legs run here.
            if query is None or not usable(conn, query):
                return _no_leg
            report.state = "used"
            return vectors.start_search(conn, query, label, filters, n)

        def finish() -> list[tuple[int, float]] | None:
            # The embedding ran beside the keyword legs; the search follows it.
            try:
                vector = pending.wait()
            except Exception as exc:
                source.warn_query_failure(exc)
                return None
            if not usable(conn, vector):
                return None
            report.state = "used"
            return vectors.search(conn, vector, label, filters, n)

        return finish

    return leg


def _no_leg() -> None:
    return None


# -- graph hooks ------------------------------------------------------------------------------


def run_link(services: Services, job: jobs.Job) -> None:
    ids = [int(i) for i in job.payload.get("chunk_ids", []) if isinstance(i, int)]
    if ids:
        with services.db.atomic() as conn:
            graph.link_chunks(conn, ids)


def graph_signal(services: Services, text: str, conn: Tx | None = None) -> Any:
    """The query's graph signal, read through ``conn`` when given (inside the caller's read
    snapshot: one transaction fewer); a failure is logged and ranking goes on without it."""
    hops = services.profile().graph_hops
    try:
        return graph.build_signal(services.db, text, hops, conn=conn)
    except Exception as exc:
        logger.warning("graph expansion failed; ranking without it: %s", exc)
        return None


def list_clusters(conn: Tx) -> list[dict[str, Any]]:
    return graph.list_clusters(conn)


# -- extraction -------------------------------------------------------------------------------


def _gate_outcome(services: Services, kind: str, exc: Exception) -> None:
    """Translate a gate refusal into the job outcome of §5.11."""
    if isinstance(exc, GateDeferred):
        raise jobs.JobDeferred(str(exc)) from exc
    config = services.config()
    if kind == "extract" and services.profile().tier == Tier.LITE and config.lite_llm_extraction:
        raise jobs.JobHeld(str(exc)) from exc
    # Any other denial: the job is simply done (deleted).


def run_extract(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    wanted = [t for t in job.payload.get("turns", []) if isinstance(t, int)]
    if session_id is None or not wanted:
        return
    turns = _load_turns(services, session_id, wanted)
    if not turns:
        return  # erased meanwhile
    config = services.config()
    max_tokens = 2 * config.worker_max_tokens
    groups = pack_turns(turns, config.min_query_words)
    for done, group in enumerate(groups):
        try:
            reply = services.ask(
                "extract", build_extract_prompt(group), max_tokens=max_tokens, phase=job.phase
            )
        except (GateDeferred, GateDenied) as exc:
            if done:
                # The job comes back later: with only the turns still to read, or the
                # groups already extracted would be sent to the LLM again.
                left = [t.turn for g in groups[done:] for t in g]
                with services.db.atomic() as conn:
                    jobs.set_payload(conn, job.id, {**job.payload, "turns": left})
            _gate_outcome(services, "extract", exc)
            return
        with services.db.atomic() as conn:
            store_extraction(services, session_id, group, reply)
            # In the same transaction: a retry after a later group fails (or a crash)
            # must not send the groups already stored to the LLM and store them again.
            left = [t.turn for g in groups[done + 1 :] for t in g]
            if left:
                jobs.set_payload(conn, job.id, {**job.payload, "turns": left})


def _load_turns(services: Services, session_id: int, wanted: list[int]) -> list[Turn]:
    marks = ",".join("?" * len(wanted))
    with services.db.read() as conn:
        rows = conn.execute(
            f"SELECT turn, role, content, created_at FROM messages WHERE session_id = ? "
            f"AND turn IN ({marks}) ORDER BY turn, id",
            (session_id, *wanted),
        ).fetchall()
    by_turn: dict[int, dict[str, str]] = {}
    for turn, role, content, created_at in rows:
        entry = by_turn.setdefault(int(turn), {"user": "", "assistant": "", "at": created_at})
        if role in ("user", "assistant"):
            entry[role] = content
    return [
        Turn(user=e["user"], assistant=e["assistant"], turn=t, at=e["at"])
        for t, e in sorted(by_turn.items())
    ]


def store_extraction(services: Services, session_id: int, group: list[Turn], reply: str) -> None:
    """Store facts (as ``auto``) and graph items of one extraction reply (§5.12)."""
    extraction = parse_extraction(reply)
    if extraction.is_empty:
        return
    config = services.config()
    at = group[-1].at or None
    turn_numbers = [t.turn for t in group]
    with services.db.atomic() as conn:
        if not episodic.exists(conn, session_id):
            return  # erased while the LLM read it: nothing of it may come back (§5.16)
        touched = False
        for key, value, reason in extraction.rejected:
            semantic.quarantine(conn, key, value, reason, "auto", config.quarantine_cap)
        for key, value in extraction.facts:
            result = semantic.write_fact(
                conn,
                key,
                value,
                "auto",
                profile_keys=config.profile_keys,
                reserved_keys=config.reserved_keys,
                quarantine_cap=config.quarantine_cap,
                at=at,
                origin_session_id=session_id,
            )
            touched = touched or result.changed or result.reason == "already stored"
        chunk_rows = _turn_chunks(conn, session_id, turn_numbers)
        if touched:
            episodic.raise_chunk_importance(
                conn, [r[0] for r in chunk_rows], EXTRACT_CHUNK_IMPORTANCE
            )
            queue_fact_embedding(conn, services)
        if extraction.entities or extraction.relationships:
            try:
                with services.db.atomic():  # a savepoint: graph errors never cost the facts
                    graph.store_extraction(
                        conn,
                        extraction.entities,
                        extraction.relationships,
                        chunk_rows,
                        source_text=" ".join(f"{t.user} {t.assistant}" for t in group),
                        node_cap=config.graph_node_cap,
                        edge_cap=config.graph_edge_cap,
                        fts_enabled=services.db.fts_enabled,
                    )
            except Exception as exc:
                logger.warning("storing extracted graph items failed: %s", exc)
        conn.meta.bump("writes_since_consolidation")


def _turn_chunks(conn: Tx, session_id: int, turns: list[int]) -> list[tuple[int, str]]:
    marks = ",".join("?" * len(turns))
    rows = conn.execute(
        f"SELECT c.id, c.text FROM chunks c JOIN messages m ON m.id = c.first_msg_id "
        f"WHERE c.session_id = ? AND m.turn IN ({marks}) ORDER BY c.id",
        (session_id, *turns),
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


# -- digests and summaries --------------------------------------------------------------------


def persist_digest(conn: Tx, session_id: int, items: list[str]) -> None:
    conn.execute(
        "UPDATE sessions SET rolling_summary = ? WHERE id = ?",
        ("\n".join(items) if items else None, session_id),
    )


def leading_clause(text: str) -> str:
    """The first clause of a message: cut after the earliest '. ', '? ' or '! ' in 120 chars."""
    flat = collapse_whitespace(text)
    window = flat[: DIGEST_CLAUSE_CHARS + 1]
    cuts = [window.find(mark) for mark in (". ", "? ", "! ")]
    cuts = [c for c in cuts if 0 <= c < DIGEST_CLAUSE_CHARS]
    if cuts:
        return flat[: min(cuts) + 1]
    return flat[:DIGEST_CLAUSE_CHARS]


def fit_digest(items: list[str], budget: int, est: Callable[[str], int]) -> list[str]:
    """Drop the oldest items until the joined digest fits ``budget`` tokens."""
    kept = list(items)
    while kept and est("\n".join(kept)) > budget:
        kept.pop(0)
    return kept


def _evicted_pairs(turns: Iterable[Any]) -> list[tuple[str, str]]:
    from ..text import sanitize

    pairs: list[tuple[str, str]] = []
    for turn in turns if turns is not None else []:
        if isinstance(turn, dict):
            user, assistant = turn.get("user", ""), turn.get("assistant", "")
        elif isinstance(turn, (list, tuple)) and len(turn) == 2:
            user, assistant = turn
        else:
            continue
        pairs.append((sanitize(user), sanitize(assistant)))
    return pairs


def report_evictions(services: Services, turns: Iterable[Any]) -> None:
    """§5.9 rolling digest: extractive inline, then an LLM condense job when allowed."""
    pairs = _evicted_pairs(turns)
    if not pairs:
        return
    session_id = services.ensure_session()
    _, digest = services.current_digest()
    budget = services.profile().budgets.sessions
    items = list(digest)
    lowered = {i.casefold() for i in items}
    for user, _assistant in pairs:
        if not user.strip():
            continue
        item = "- " + leading_clause(user)
        if item.casefold() not in lowered:
            items.append(item)
            lowered.add(item.casefold())
    if not items and not digest and not any(u.strip() or a.strip() for u, a in pairs):
        # §5.9: only when every evicted turn was blank (an answer is no blank turn).
        items = [f"[{len(pairs)} earlier turns omitted; search memory for details]"]
    services.apply_digest(session_id, fit_digest(items, budget, services.est))
    profile = services.profile()
    said = any(u.strip() or a.strip() for u, a in pairs)  # blank turns: nothing to condense
    llm_mode = profile.rolling_summary_mode == RollingSummaryMode.LLM
    if said and llm_mode and services.llm() is not None:
        evicted = [[u[:EVICTED_SIDE_CHARS], a[:EVICTED_SIDE_CHARS]] for u, a in pairs]
        _queue_condense(services, session_id, evicted)
        if services.worker is not None:
            services.worker.signal()


def _queue_condense(services: Services, session_id: int, evicted: list[list[str]]) -> None:
    """Add the turns to the session's condense job still waiting in the queue, if any.

    While the host generates (``foreground``) or a slow local model works, evictions pile
    up; one condense call over all of them replaces the digest as well as one per eviction
    would (each reply covers the whole digest), at a fraction of the LLM time. The job
    keeps the latest ``CONDENSE_MAX_TURNS``; older turns are in the extractive digest the
    prompt carries anyway.
    """
    with services.db.atomic() as conn:
        row = conn.execute(
            "SELECT id, payload FROM jobs WHERE kind = 'rolling_summary' AND state = 'queued' "
            "AND session_id = ? ORDER BY id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        waiting = _payload_turns(row[1]) if row is not None else None
        if row is None or waiting is None:
            payload = {"evicted": evicted[-CONDENSE_MAX_TURNS:]}
            jobs.enqueue(
                conn, "rolling_summary", services.owner, session_id=session_id, payload=payload
            )
            return
        merged = (waiting + evicted)[-CONDENSE_MAX_TURNS:]
        jobs.set_payload(conn, int(row[0]), {"evicted": merged})


def _payload_turns(payload: object) -> list[list[str]] | None:
    """The evicted turns of a queued condense job; None if its payload is not readable."""
    try:
        turns = json.loads(str(payload)).get("evicted")
    except (ValueError, AttributeError):
        return None
    return turns if isinstance(turns, list) else None


def run_rolling_summary(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    if session_id is None:
        return
    current_id, digest = services.current_digest()
    if current_id != session_id:
        with services.db.read() as conn:
            row = conn.execute(
                "SELECT rolling_summary FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        if row is None:
            return
        digest = [line for line in (row[0] or "").split("\n") if line.strip()]
    evicted = [tuple(t) for t in job.payload.get("evicted", []) if isinstance(t, list)]
    prompt = build_condense_prompt(digest, evicted)
    try:
        reply = services.ask(
            "rolling_summary", prompt, max_tokens=services.config().worker_max_tokens
        )
    except (GateDeferred, GateDenied) as exc:
        _gate_outcome(services, "rolling_summary", exc)
        return
    # The digest goes into the host's prompt verbatim: an instruction the LLM echoed (or
    # was talked into) is left out, as the fact guards leave it out of facts.
    sentences = [s for s in split_sentences(clean_llm_text(reply)) if not is_instruction_like(s)]
    if not sentences:
        return  # the extractive digest stays
    items = fit_digest(
        ["- " + s for s in sentences], services.profile().budgets.sessions, services.est
    )
    services.apply_digest(session_id, items)


def run_session_summary(services: Services, job: jobs.Job) -> None:
    session_id = job.session_id
    if session_id is None or services.llm() is None:
        return
    if services.profile().tier < Tier.STANDARD:
        return
    with services.db.read() as conn:
        rows = conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
            "ORDER BY turn DESC, id DESC LIMIT ?",
            (session_id, SUMMARY_TURNS),
        ).fetchall()
    if len(rows) < 2:
        return
    user_turns = [str(r[0])[:SUMMARY_TURN_CHARS] for r in reversed(rows)]
    try:
        reply = services.ask(
            "session_summary",
            build_session_summary_prompt(user_turns),
            max_tokens=services.config().worker_max_tokens,
        )
    except (GateDeferred, GateDenied) as exc:
        _gate_outcome(services, "session_summary", exc)
        return
    summary = clean_llm_text(reply)
    if summary and not is_instruction_like(summary):  # it goes into prompts verbatim
        with services.db.atomic() as conn:
            conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary, session_id))


# -- consolidation ----------------------------------------------------------------------------


def run_consolidate(services: Services, job: jobs.Job) -> None:
    """§5.14: each step in its own guard; stats to the log and to ``meta``."""
    level = services.profile().consolidation_level
    if level == ConsolidationLevel.OFF:
        return
    config = services.config()
    with services.db.atomic() as conn:
        conn.meta.set("writes_since_consolidation", 0)
    stats: dict[str, int] = {}
    full = level == ConsolidationLevel.FULL

    def step(name: str, fn: Callable[[], dict[str, int] | None]) -> None:
        try:
            result = fn()
            if result:
                stats.update(result)
        except (jobs.JobDeferred, jobs.JobHeld):
            raise
        except GateDeferred as exc:
            # The host began generating (or the store is closing): §5.11 puts the job back
            # without counting an attempt. Skipping would lose the LLM steps for good,
            # since nothing queues another consolidation until new writes come.
            raise jobs.JobDeferred(str(exc)) from exc
        except Exception as exc:
            logger.warning("consolidation step %s failed: %s", name, exc)

    def decay() -> dict[str, int]:
        with services.db.atomic() as conn:
            return {
                "archived": semantic.apply_decay(
                    conn, config.fact_decay_half_life_days, config.fact_archive_threshold
                )
            }

    step("fact decay", decay)
    if full:
        step("fact merge review", lambda: review_fact_merges(services))
    step("graph decay", lambda: graph.consolidate_decay(services.db, config))
    step("graph dedupe", lambda: graph.consolidate_dedupe(services.db))
    if full:
        step(
            "graph merge",
            lambda: graph.consolidate_llm_merge(
                services.db, services.ask, config, stop_on=(GateDenied,)
            ),
        )
    step("clusters", lambda: graph.consolidate_clusters(services.db))
    if full:
        step(
            "cluster labels",
            lambda: graph.consolidate_labels(services.db, services.ask, stop_on=(GateDenied,)),
        )

    def trims() -> None:
        with services.db.atomic() as conn:
            procedural.apply_cap(conn, config.max_lessons)
            conn.execute(
                "DELETE FROM quarantine WHERE id <= (SELECT max(id) FROM quarantine) - ?",
                (config.quarantine_cap,),
            )
            conn.meta.trim_events()

    step("trims", trims)
    with services.db.atomic() as conn:
        conn.meta.set("last_consolidation", json.dumps(stats, sort_keys=True))
        conn.meta.set("last_consolidated_at", now_ts())
    logger.info("consolidation finished: %s", stats)


def review_fact_merges(services: Services) -> dict[str, int]:
    """LLM review of recent supersessions; a merge is a new version, never an edit."""
    from ..clock import ts_minus

    config = services.config()
    cutoff = ts_minus(config.fact_merge_review_window_days * 86400.0)
    with services.db.read() as conn:
        pairs = conn.execute(
            "SELECT o.id, n.id, n.key, o.value, o.valid_from, n.value, n.valid_from "
            "FROM facts o JOIN facts n ON n.id = o.invalidated_by "
            "WHERE o.invalidated_at >= ? AND n.invalidated_at IS NULL AND n.source <> 'merge' "
            "AND NOT EXISTS (SELECT 1 FROM fact_reviews r WHERE r.old_fact_id = o.id "
            "AND r.new_fact_id = n.id) ORDER BY o.invalidated_at, o.id LIMIT ?",
            (cutoff, MERGE_REVIEWS_PER_SWEEP),
        ).fetchall()
    merged = kept = 0
    for old_id, new_id, key, old_value, old_at, new_value, new_at in pairs:
        prompt = build_fact_merge_prompt(key, old_value, old_at, new_value, new_at)
        try:
            reply = services.ask("fact_merge", prompt, max_tokens=48)
        except GateDenied:
            break  # inside consolidate a denied call just skips its step (a deferred one
            # puts the job back: see run_consolidate)
        value = clean_value(reply)
        with services.db.atomic() as conn:
            live = conn.execute(
                "SELECT id, importance, category, origin_session_id FROM facts "
                "WHERE key = ? AND invalidated_at IS NULL",
                (key,),
            ).fetchone()
            verdict, result_id = "rejected", None
            if live is not None and int(live[0]) == int(new_id):
                if value == new_value:
                    verdict = "kept"
                    kept += 1
                elif value and len(value) <= MERGE_REPLY_LIMIT:
                    result = semantic.write_fact(
                        conn,
                        key,
                        value,
                        "merge",
                        profile_keys=config.profile_keys,
                        reserved_keys=config.reserved_keys,
                        quarantine_cap=config.quarantine_cap,
                        origin_session_id=live[3],
                        importance=float(live[1]),
                        category=live[2],
                    )
                    if result.changed:
                        verdict, result_id = "merged", result.fact_id
                        merged += 1
                        queue_fact_embedding(conn, services)
            conn.execute(
                "INSERT OR IGNORE INTO fact_reviews (old_fact_id, new_fact_id, verdict, "
                "result_fact_id, reviewed_at) VALUES (?, ?, ?, ?, ?)",
                (old_id, new_id, verdict, result_id, now_ts()),
            )
    return {"merged": merged, "kept": kept}


# -- timeline ---------------------------------------------------------------------------------


def resolve_timeline_key(conn: Tx, text: str, fts_enabled: bool) -> tuple[str | None, str]:
    """§5.7 timeline: an exact key, else the best fact row over all versions, else a key the
    question's words hint at, else one through the graph, else none."""
    key = normalize_key(text)
    if key and conn.execute("SELECT 1 FROM facts WHERE key = ? LIMIT 1", (key,)).fetchone():
        return key, "exact"
    terms = query_terms(text)
    if terms:
        scores = fact_keyword_leg(conn, terms, Filters(), fts_enabled, live_only=False, limit=200)
        if scores:
            ids = sorted(scores)
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                f"SELECT id, key, invalidated_at IS NULL FROM facts WHERE id IN ({marks})", ids
            ).fetchall()
            best = max(rows, key=lambda r: (scores[int(r[0])], int(r[2]), int(r[0])))
            return str(best[1]), "search"
    hinted = _hinted_timeline_key(conn, text)
    if hinted:
        return hinted, "search"
    found = graph.timeline_key(conn, text)
    if found:
        return found, "search"
    return None, "none"


# Words a question uses for a fact whose key and value it does not name ("where did I live
# before?" asks about location: Portland, then Denver), mapped to the keys rule capture and
# extraction write for it, in order of preference.
_PLACE_KEYS = ("location", "home_city", "city", "address", "home", "hometown")
_WORK_KEYS = ("employer", "occupation", "job", "job_title", "workplace", "company")
TIMELINE_KEY_HINTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("live", "lived", "living", "lives", "moved", "move", "stay"), _PLACE_KEYS),
    **dict.fromkeys(("work", "worked", "working", "works", "job", "jobs"), _WORK_KEYS),
    **dict.fromkeys(("called", "name", "named"), ("name",)),
    **dict.fromkeys(("eat", "ate", "diet"), ("diet",)),
    **dict.fromkeys(("allergic", "allergy", "allergies"), ("allergies",)),
}


def _hinted_timeline_key(conn: Tx, text: str) -> str | None:
    """The first stored key the question's words hint at (see TIMELINE_KEY_HINTS)."""
    for word in word_tokens(text):
        for key in TIMELINE_KEY_HINTS.get(word, ()):
            if conn.execute("SELECT 1 FROM facts WHERE key = ? LIMIT 1", (key,)).fetchone():
                return key
    return None


# -- stats ------------------------------------------------------------------------------------


def collect_stats(services: Services, tier: Tier) -> dict[str, Any]:
    store = services.db
    source = services.embedding
    with store.read() as conn:

        def one(sql: str, *params: object) -> int:
            return int(conn.execute(sql, params).fetchone()[0])

        label = source.label
        if label is None and (source.builtin is not None or not source.configured):
            # Not loaded yet in this process (or no embedder here at all, as in the CLI's
            # one-shot commands): count against the model most vectors on file come from,
            # the built-in one's if it is wired in. Otherwise every vector read as stale.
            pattern = "elastimem:%" if source.builtin is not None else "%"
            # The facts' vectors count too: a store of remembered facts alone has no chunk.
            row = conn.execute(
                "SELECT embedding_model FROM (SELECT embedding_model FROM chunks UNION ALL "
                "SELECT embedding_model FROM fact_vectors) WHERE embedding_model LIKE ? "
                "GROUP BY embedding_model ORDER BY count(*) DESC LIMIT 1",
                (pattern,),
            ).fetchone()
            label = row[0] if row else None
        dim = active_dim(services, conn, label) if label else None
        embedded = stale = 0
        if label is not None and dim is not None:
            embedded = one(
                "SELECT count(*) FROM chunks WHERE embedding_model = ? AND embedding_dim = ?",
                label,
                dim,
            )
            stale = one(
                "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL AND "
                "(embedding_model IS NOT ? OR embedding_dim IS NOT ?)",
                label,
                dim,
            )
        elif label is None:
            stale = one("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")
        result: dict[str, Any] = {
            "path": store.path,
            "db_bytes": _db_bytes(store.path),
            "file_mode": None if store.is_memory else files.file_mode(store.path),
            "fts_enabled": store.fts_enabled,
            "schema_version": conn.meta.get_int("schema_version"),
            "tier": tier.name.lower(),
            "facts": one(
                "SELECT count(*) FROM facts WHERE invalidated_at IS NULL AND archived = 0"
            ),
            "fact_versions": one("SELECT count(*) FROM facts"),
            "archived_facts": one(
                "SELECT count(*) FROM facts WHERE archived = 1 AND invalidated_at IS NULL"
            ),
            "sessions": one("SELECT count(*) FROM sessions"),
            "open_sessions": one("SELECT count(*) FROM sessions WHERE ended_at IS NULL"),
            "messages": one("SELECT count(*) FROM messages"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "embedded_chunks": embedded,
            "stale_embeddings": stale,
            # Live facts with a vector of the model in use (the facts' vector leg).
            "embedded_facts": one(
                "SELECT count(*) FROM facts f JOIN fact_vectors v ON v.fact_id = f.id "
                "WHERE f.invalidated_at IS NULL AND f.archived = 0 AND v.embedding_model = ? "
                "AND v.embedding_dim = ?",
                label,
                dim if dim is not None else -1,
            ),
            "embedder": source.state(),
            "embedding_model": source.label,
            "vector_backend": services.vectors.backend_name(),
            "lessons": one("SELECT count(*) FROM lessons WHERE archived = 0"),
            "quarantine": one("SELECT count(*) FROM quarantine"),
            "graph_nodes": one("SELECT count(*) FROM graph_nodes WHERE type <> 'self'"),
            "graph_edges": one("SELECT count(*) FROM graph_edges"),
            "jobs_pending": one(
                "SELECT count(*) FROM jobs WHERE state IN ('queued', 'held', 'running')"
            ),
            "jobs_failed": one("SELECT count(*) FROM jobs WHERE state = 'failed'"),
            "llm_calls": dict(services.gate.calls),
        }
    return result


def _db_bytes(path: str) -> int:
    import os

    if path == db.MEMORY_PATH:
        return 0
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(path + suffix)
        except OSError:
            pass
    return total
