"""``Elastimem``: the facade the host talks to (SPEC §1).

It is deliberately thin. It validates arguments, holds the per-instance state (the open
session, the rolling digest, the governor, the worker) and delegates the work to the layer
modules: ``episodic`` (transcripts), ``semantic`` (facts), ``procedural`` (lessons),
``retrieval`` (ranking), ``assembly`` (context plans), ``background`` (job handlers), ``graph``
and ``vectors``. Nothing imports this module back.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from .assembly import ContextPlan, build_context_plan
from .clock import now_ts, to_ts
from .config import ElastimemConfig, check_option_names
from .enums import Cadence, Tier
from .errors import ClosedError, ConfigError, ElastimemError, EmbedderError, StoreError
from .governor import Governor, MemoryProfile
from .index.embedders import BuiltinEmbedder
from .index.vectors import EmbeddingSource, VectorIndex
from .memory import episodic, procedural, semantic
from .retrieval import rank as retrieval
from .retrieval.legs import graph_signal
from .retrieval.query import UNSET, rank_query
from .retrieval.timeline import resolve_timeline_key
from .rules import Ending, capture_rules, ending_keys, find_endings, names_part_of, retired_keys
from .runtime import background
from .runtime import queue as jobs
from .runtime.gate import LLMGate
from .runtime.worker import running_in_process
from .storage.sqlite import database as db
from .text import normalize_key, sanitize
from .values import ExplainResult, Fact, Hit, TimelineResult

logger = logging.getLogger("elastimem")

RULE_CHUNK_IMPORTANCE = 0.8
CLOSE_DRAIN_SECONDS = 5.0
HEARTBEAT_SECONDS = 60.0
VALID_KINDS = frozenset({"chunk", "fact"})
REMEMBER_SOURCES = ("explicit", "auto", "rule", "import")
# Queries are cut to this many characters before anything else: retrieval keeps at most 16
# terms anyway, while folding, seed detection and key normalisation are linear in the length
# (a 10 MB query took 5-22 s in each of recall, explain, timeline and build_context).
MAX_QUERY_CHARS = 16_384

Tokenizer = Callable[[str], int]


class Elastimem:
    """Long-term memory for one user, kept in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        llm: Callable[..., str] | None = None,
        embedder: Callable[[list[str]], Any] | None = None,
        query_embedder: Callable[[str], Any] | None = None,
        config: ElastimemConfig | None = None,
        tokenizer_fn: Tokenizer | None = None,
        probe_fn: Callable[[], tuple[int, int]] | None = None,
        on_tier_change: Callable[[Tier, Tier], Any] | None = None,
        complete_fn: Callable[..., str] | None = None,
        embed_fn: Callable[[list[str]], Any] | None = None,
        **config_overrides: Any,
    ) -> None:
        self._closed = True  # until construction succeeds
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigError(f"path={path!r} is invalid; pass a file path or ':memory:'")
        if not isinstance(create, bool):
            raise ConfigError(f"create={create!r} is invalid; pass True or False")
        llm = _pick_alias("llm", llm, "complete_fn", complete_fn)
        embedder = _pick_alias("embedder", embedder, "embed_fn", embed_fn)
        for name, fn in (
            ("llm", llm),
            ("embedder", embedder),
            ("query_embedder", query_embedder),
            ("tokenizer_fn", tokenizer_fn),
            ("probe_fn", probe_fn),
            ("on_tier_change", on_tier_change),
        ):
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name}={fn!r} is not callable; pass a function or None")
        if config is None:
            config = ElastimemConfig()
        elif not isinstance(config, ElastimemConfig):
            raise ConfigError(f"config={config!r} is invalid; pass an ElastimemConfig or None")
        check_option_names(config_overrides)
        self._config = config.with_overrides(config_overrides)

        self._llm = llm
        self._tokenizer = tokenizer_fn
        self._tokenizer_failed = False
        self._builtin: BuiltinEmbedder | None = None
        if embedder is None and not self._config.disable_builtin_embedder:
            self._builtin = BuiltinEmbedder()
        self._embedding = EmbeddingSource(embedder, query_embedder, self._builtin)

        self._db = db.open_store(path, create=create)
        self._owner = episodic.Owner.current()
        self._state_lock = threading.RLock()
        self._session_id: int | None = None
        self._digest: list[str] = []
        self._gate = LLMGate()
        self._vectors = VectorIndex(self._db, self._config)
        self._governor = Governor(self._config, probe_fn=probe_fn, on_tier_change=on_tier_change)
        self._after_tier_change(self._governor.profile)  # opened at LITE: stream from the start
        self._closed = False
        self._closing = False
        # Counted as open from here on (not once the worker runs): a sibling closing while
        # this one opens must see it and leave the process's jobs to it.
        siblings_open = _count_in(self._db)
        try:
            self._recover_at_open(siblings_open)
            self._services = background.Services(
                db=self._db,
                owner=self._owner,
                gate=self._gate,
                embedding=self._embedding,
                vectors=self._vectors,
                config=lambda: self._config,
                profile=lambda: self._governor.profile,
                llm=lambda: self._llm,
                est=self._est,
                current_digest=self._current_digest,
                apply_digest=self._apply_digest,
                ensure_session=self._ensure_session_now,
            )
            self._worker = background.make_worker(self._services, self._on_worker_wake)
            self._worker.start()
            background.preload_embedder(self._services, self._governor.profile)
        except BaseException:
            self._closed = True
            _count_out(self._db)
            self._db.close()
            raise

    # -- attributes --------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._db.path

    @property
    def set_aside(self) -> str | None:
        """Where this open moved a damaged store file (§4.5) before creating a fresh store
        at ``path``; None when it found nothing to set aside."""
        return self._db.set_aside

    @property
    def complete_fn(self) -> Callable[..., str] | None:
        return self._llm

    @complete_fn.setter
    def complete_fn(self, fn: Callable[..., str] | None) -> None:
        if fn is not None and not callable(fn):
            raise ConfigError(f"complete_fn={fn!r} is not callable; pass a function or None")
        self._llm = fn

    @property
    def embed_fn(self) -> Callable[[list[str]], Any] | None:
        return self._embedding.host_embed

    @property
    def embed_query_fn(self) -> Callable[[str], Any] | None:
        return self._embedding.host_query

    @property
    def tokenizer_fn(self) -> Tokenizer | None:
        return self._tokenizer

    @property
    def fts_enabled(self) -> bool:
        return self._db.fts_enabled

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def config(self) -> ElastimemConfig:
        return copy.deepcopy(self._config)

    @property
    def profile(self) -> MemoryProfile:
        return self._governor.profile

    def __enter__(self) -> Elastimem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"tier={self._governor.tier.name.lower()}"
        return f"<Elastimem {self._db.path!r} {state}>"

    # -- helpers -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this Elastimem store is closed; open a new instance to use it")

    def _est(self, text: str) -> int:
        """Token estimate: the host's tokenizer, else ``max(1, len // 4)`` (0 for "")."""
        if self._tokenizer is not None and not self._tokenizer_failed:
            try:
                value = self._tokenizer(text)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
                raise TypeError(f"returned {value!r}, not a non-negative int")
            except Exception as exc:
                self._tokenizer_failed = True
                # The type only: a host exception's text can quote the text it was given.
                logger.warning(
                    "tokenizer_fn failed (%s); using len(text)//4 from now on",
                    type(exc).__name__,
                )
        return episodic.length_estimate(text)

    def _chunk_estimator(self) -> episodic.Estimator:
        """``_est``, or the built-in estimate itself when no host tokenizer is in use, which
        lets chunking measure lengths instead of calling an estimator per candidate."""
        if self._tokenizer is None or self._tokenizer_failed:
            return episodic.length_estimate
        return self._est

    def _recover_at_open(self, siblings_open: bool) -> None:
        """Close orphan sessions and adopt abandoned jobs (§6; open step 5)."""
        if self._db.read_only:
            return  # another process with write access will recover them
        with self._db.atomic() as conn:
            for session_id in episodic.find_orphans(conn, self._owner, siblings_open):
                episodic.close_orphan(conn, session_id)
                jobs.release_held_extracts(conn, session_id, self._owner, "session_end")
                jobs.enqueue(conn, "session_summary", self._owner, session_id=session_id)
                conn.meta.log_event("orphan_closed", session_id=session_id)
            jobs.recover(conn, self._owner, running_in_process(self._db.path))

    def _on_worker_wake(self) -> None:
        """Runs on the worker at every wake: heartbeat the open session (≥ every 60 s)."""
        session_id = self._session_id
        if self._db.read_only:
            return
        with self._db.atomic() as conn:
            if session_id is not None:
                episodic.heartbeat(conn, session_id)
            jobs.refresh_ownership(conn, self._owner)

    def _bump_writes(self, conn: Any) -> None:
        conn.meta.bump("writes_since_consolidation")

    def _ensure_session(self, conn: Any, at: str | None) -> int:
        if self._session_id is not None and episodic.is_open(conn, self._session_id):
            return self._session_id
        self._session_id = episodic.open_session(conn, self._owner, at=at, host_tag=None)
        self._digest = []
        return self._session_id

    # -- governor ----------------------------------------------------------------------------

    def tick(self) -> MemoryProfile:
        self._check_open()
        return self._after_tier_change(self._governor.tick())

    def report_pressure(self) -> MemoryProfile:
        self._check_open()
        return self._after_tier_change(self._governor.report_pressure())

    def reconfigure(self, *, reprobe: bool = False, **overrides: Any) -> MemoryProfile:
        self._check_open()
        old_config = self._config
        new_config = old_config.with_overrides(overrides)
        # In force before the governor runs on_tier_change, so the hook sees the config
        # that changed the tier (and a hook that reconfigures builds on it).
        self._config = new_config
        try:
            self._governor.reconfigure(new_config, reprobe=reprobe)
        except BaseException:
            self._config = old_config
            raise
        # What is current now: the hook may have reconfigured again meanwhile.
        self._vectors.set_config(self._config)
        self._rewire_builtin_embedder()
        return self._after_tier_change(self._governor.profile)

    def _rewire_builtin_embedder(self) -> None:
        """Follow ``disable_builtin_embedder`` when it changes (no host embedder given)."""
        if self._embedding.host_embed is not None:
            return
        wanted = not self._config.disable_builtin_embedder
        if wanted == (self._builtin is not None):
            return
        self._builtin = BuiltinEmbedder() if wanted else None
        self._embedding.builtin = self._builtin  # a query in flight keeps the one it had
        self._embedding.load_requested = False
        if not wanted:
            self._vectors.drop()  # the model's rows; another model would reload its own

    def _after_tier_change(self, profile: MemoryProfile) -> MemoryProfile:
        # At LITE the vector matrix is freed and searched in streamed blocks instead.
        self._vectors.set_streaming(profile.tier == Tier.LITE)
        return profile

    # -- sessions and turns ------------------------------------------------------------------

    def begin_session(self, host_tag: str | None = None, *, at: object = None) -> int:
        self._check_open()
        at_ts = _parse_at(at, "at")
        if host_tag is not None and not isinstance(host_tag, str):
            raise ConfigError(f"host_tag={host_tag!r} is invalid; pass a string or None")
        with self._state_lock:
            self._close_current(wait=False, timeout=0.0)
            with self._db.atomic() as conn:
                self._session_id = episodic.open_session(
                    conn, self._owner, at=at_ts, host_tag=sanitize(host_tag) if host_tag else None
                )
            self._digest = []
            return self._session_id

    def record_turn(self, user_text: object, assistant_text: object, *, at: object = None) -> None:
        """Store one exchange; never raises (§5.10)."""
        self._check_open()
        try:
            self._record_turn(user_text, assistant_text, at)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("record_turn could not store the exchange: %s", _failure(exc))

    def _record_turn(self, user_text: object, assistant_text: object, at: object) -> None:
        user = sanitize(user_text)
        assistant = sanitize(assistant_text)
        if not user and not assistant:
            return
        try:
            at_ts = to_ts(at) if at is not None else None
        except (ValueError, TypeError, OverflowError):
            self._services.warn_once(
                "record_turn at", "record_turn got an unreadable at=%r; using the current time", at
            )
            at_ts = None
        # The tokenizer never runs under the write lock: measure and chunk first.
        user_tokens = self._est(user)
        assistant_tokens = self._est(assistant)
        chunk_texts = episodic.chunk_exchange(
            user, assistant, self._chunk_estimator(), self._config.chunk_target_tokens
        )
        captures = capture_rules(user) if user else []
        endings = find_endings(user) if user else []
        profile = self._governor.profile
        config = self._config
        with self._state_lock:
            with self._db.atomic() as conn:
                session_id = self._ensure_session(conn, at_ts)
                # "Now" under the lock, after a lazily opened session's start: taken before
                # the tokenizer ran and the lock was won, it came before the session began.
                turn_at = at_ts or now_ts()
                record = episodic.insert_turn(
                    conn,
                    session_id,
                    user,
                    assistant,
                    at=turn_at,
                    chunk_texts=chunk_texts,
                    user_tokens=user_tokens,
                    assistant_tokens=assistant_tokens,
                )
                self._bump_writes(conn)
                # Same transaction as the turn: a crash can never leave a stored turn without
                # its jobs (embeddings are backfilled, but links and extraction are not).
                background.queue_turn_jobs(conn, self._services, record, user, profile, config)
            if captures or endings:
                self._store_rule_captures(captures, endings, record)
        self._worker.signal()

    def _store_rule_captures(
        self, captures: list[tuple[str, str]], endings: list[Ending], record: episodic.TurnRecord
    ) -> None:
        """Write the turn's captures, then retire the live facts it says have ended (issue
        15: "I'm no longer vegetarian"), in one transaction."""
        config = self._config
        with self._db.atomic() as conn:
            touched = False
            # A shorter mention of the live value re-affirms it: "I'm Daniel" while name is
            # "Daniel Reyes", "I live in Austin" while location is "Austin, Texas".
            current = semantic.live_values_of(conn, [key for key, _ in captures])
            for key, value in captures:
                if key in current and names_part_of(key, value, current[key]):
                    value = current[key]
                result = semantic.write_fact(
                    conn,
                    key,
                    value,
                    "rule",
                    profile_keys=config.profile_keys,
                    reserved_keys=config.reserved_keys,
                    quarantine_cap=config.quarantine_cap,
                    at=record.created_at,
                    origin_session_id=record.session_id,
                )
                if result.changed or result.reason == "already stored":
                    touched = True
            if endings:
                live = semantic.live_values_of(conn, ending_keys(endings))
                keys = retired_keys(endings, (key for key, _ in captures), live)
                retired = [key for key in keys if semantic.retire(conn, key, record.created_at)]
                if retired:
                    self._bump_writes(conn)
                    touched = True
            if touched:
                episodic.raise_chunk_importance(conn, record.chunk_ids, RULE_CHUNK_IMPORTANCE)
                background.queue_fact_embedding(conn, self._services)

    def end_session(self, *, wait: bool = True, timeout: float = 30.0) -> None:
        self._check_open()
        timeout = _timeout_arg(timeout)
        with self._state_lock:
            job_ids = self._close_current(wait=wait, timeout=timeout)
        if wait and job_ids:
            self._wait_for_jobs(job_ids, timeout)

    def _close_current(self, *, wait: bool, timeout: float) -> list[int]:
        """§5.9 end_session steps 1–5; returns the ids of the jobs it queued."""
        session_id = self._session_id
        if session_id is None:
            return []
        job_ids: list[int] = []
        try:
            with self._db.atomic() as conn:
                if not episodic.is_open(conn, session_id):
                    self._session_id = None
                    self._digest = []
                    return []
                background.persist_digest(conn, session_id, self._digest)
                extract_id = jobs.release_held_extracts(
                    conn, session_id, self._owner, "session_end"
                )
                if extract_id is not None:
                    job_ids.append(extract_id)
                episodic.close_session(conn, session_id)
                job_ids.append(
                    jobs.enqueue(conn, "session_summary", self._owner, session_id=session_id)
                )
                job_ids.append(jobs.enqueue(conn, "consolidate", self._owner))
        except StoreError as exc:
            logger.error("could not end session %s cleanly: %s", session_id, exc)
        self._session_id = None
        self._digest = []
        self._worker.signal()
        return job_ids

    def _wait_for_jobs(self, job_ids: list[int], timeout: float) -> bool:
        marks = ",".join("?" * len(job_ids))

        def finished() -> bool:
            with self._db.read() as conn:
                row = conn.execute(
                    f"SELECT count(*) FROM jobs WHERE id IN ({marks}) "
                    "AND state IN ('queued', 'running')",
                    job_ids,
                ).fetchone()
            return int(row[0]) == 0

        return self._worker.wait_for(finished, timeout)

    def sessions(self, n: int = 20) -> list[dict[str, Any]]:
        self._check_open()
        n = _int_arg(n, "n")
        with self._db.read() as conn:
            return episodic.list_sessions(conn, n)

    def resume_session(
        self, session_id: int | None = None
    ) -> tuple[str | None, list[dict[str, str]]]:
        self._check_open()
        if session_id is not None:
            session_id = _int_arg(session_id, "session_id")
        budget = self._governor.profile.budgets.working
        with self._db.read() as conn:
            return episodic.resume_tail(conn, session_id, self._session_id, budget)

    def report_evictions(self, turns: Iterable[Any]) -> None:
        """Fold turns that left the host's window into the rolling digest; never raises."""
        self._check_open()
        try:
            # Read, extend and write the digest as one step: two host threads evicting at
            # once each wrote back what it had read, and one's items were lost.
            with self._state_lock:
                background.report_evictions(self._services, turns)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("report_evictions failed: %s", _failure(exc))

    def _current_digest(self) -> tuple[int | None, list[str]]:
        with self._state_lock:
            if self._session_id is not None:
                with self._db.read() as conn:
                    erased = not episodic.exists(conn, self._session_id)
                if erased:
                    # Another instance or process erased it: its digest quotes what was
                    # erased, and must not reach the next prompt.
                    self._session_id, self._digest = None, []
            return self._session_id, list(self._digest)

    def _apply_digest(self, session_id: int, items: list[str]) -> None:
        """Replace the digest of ``session_id`` (in memory if current) and persist it."""
        with self._state_lock:
            if session_id == self._session_id:
                self._digest = list(items)
            with self._db.atomic() as conn:
                background.persist_digest(conn, session_id, items)

    def _ensure_session_now(self) -> int:
        with self._state_lock, self._db.atomic() as conn:
            return self._ensure_session(conn, None)

    # -- facts -------------------------------------------------------------------------------

    def remember(
        self, key: str, value: str | int | float, source: str = "explicit", *, at: object = None
    ) -> tuple[bool, str]:
        self._check_open()
        if not isinstance(key, str):
            raise ConfigError(f"key={key!r} is invalid; fact keys are strings")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"value={value!r} is invalid; pass a str, int or float")
        if source not in REMEMBER_SOURCES:
            raise ConfigError(
                f"source={source!r} is invalid; use one of {', '.join(REMEMBER_SOURCES)}"
            )
        at_ts = _parse_at(at, "at")
        try:
            text_value = sanitize(value)
        except ValueError:  # str() refuses ints longer than sys.get_int_max_str_digits()
            raise ConfigError(
                "value is an integer too long to store; a fact value holds at most 500 characters"
            ) from None
        config = self._config
        with self._db.atomic() as conn:
            result = semantic.write_fact(
                conn,
                sanitize(key),
                text_value,
                source,
                profile_keys=config.profile_keys,
                reserved_keys=config.reserved_keys,
                quarantine_cap=config.quarantine_cap,
                at=at_ts,
                origin_session_id=self._session_id,
            )
            self._bump_writes(conn)
            if result.changed or result.reason == "already stored":
                background.queue_fact_embedding(conn, self._services)
        self._worker.signal()
        return result.changed, result.reason

    def forget(self, key: str) -> bool:
        self._check_open()
        if not isinstance(key, str):
            raise ConfigError(f"key={key!r} is invalid; fact keys are strings")
        with self._db.atomic() as conn:
            forgotten = semantic.forget(conn, normalize_key(key))
            self._bump_writes(conn)
        return forgotten

    def facts(self) -> dict[str, str]:
        self._check_open()
        with self._db.read() as conn:
            return semantic.live_values(conn)

    def fact_history(self, key: str) -> list[Fact]:
        self._check_open()
        if not isinstance(key, str):
            raise ConfigError(f"key={key!r} is invalid; fact keys are strings")
        with self._db.read() as conn:
            return semantic.history(conn, normalize_key(key))

    def timeline(self, query: str) -> TimelineResult:
        """The version history of the fact a question is about; never raises (§5.7)."""
        self._check_open()
        text = ""
        try:
            text = _query_text(query)  # inside the guard: str() of a host object can raise
            with self._db.read() as conn:
                key, how = resolve_timeline_key(conn, text, self._db.fts_enabled)
                versions = tuple(semantic.history(conn, key)) if key else ()
            return TimelineResult(text, key, how, versions)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("timeline failed: %s", _failure(exc))
            return TimelineResult(text, None, "none", ())

    def quarantine_entries(self, n: int = 20) -> list[dict[str, Any]]:
        self._check_open()
        n = _int_arg(n, "n")
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT ts, key, value, reason, source FROM quarantine ORDER BY id DESC LIMIT ?",
                (max(0, n),),
            ).fetchall()
        keys = ("ts", "key", "value", "reason", "source")
        return [dict(zip(keys, row)) for row in reversed(rows)]

    # -- lessons -----------------------------------------------------------------------------

    def add_lesson(self, text: str, tag: str | None = None) -> bool:
        """Save a lesson (§5.15). True when it is new or revived from the archive; False when
        it is empty, already one of the current lessons (its use is counted), or refused by
        the instruction and markup guards (it is then in ``quarantine_entries()``)."""
        self._check_open()
        if not isinstance(text, str):
            raise ConfigError(f"text={text!r} is invalid; a lesson is a string")
        if tag is not None and not isinstance(tag, str):
            raise ConfigError(f"tag={tag!r} is invalid; pass a string or None")
        with self._db.atomic() as conn:
            written = procedural.add_lesson(
                conn,
                sanitize(text),
                sanitize(tag) if tag else None,
                self._config.max_lessons,
                quarantine_cap=self._config.quarantine_cap,
            )
            if written.stored:
                self._bump_writes(conn)
        if written.refused is not None:
            logger.info("a lesson was refused (%s) and quarantined", written.refused)
        return written.added

    def lessons(self, n: int | None = None) -> list[str]:
        self._check_open()
        if n is not None:
            n = _int_arg(n, "n")
        if n is None or n <= 0:
            n = self._config.lessons_in_prompt
        with self._db.read() as conn:
            return procedural.top_lessons(conn, n)

    # -- recall ------------------------------------------------------------------------------

    def recall(
        self,
        query: str,
        k: int = 5,
        *,
        kinds: Iterable[str] | None = None,
        since: object = None,
        until: object = None,
    ) -> list[Hit]:
        """Hybrid search over chunks and facts (§5.6); never raises for any query."""
        self._check_open()
        k = _int_arg(k, "k")
        wanted = _parse_kinds(kinds)
        filters = retrieval.Filters(None, _parse_at(since, "since"), _parse_at(until, "until"))
        if k <= 0:
            return []
        try:
            ranking, _signal = self._rank(query, k, wanted, filters)
            return ranking.hits if ranking else []
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("recall failed: %s", _failure(exc))
            return []

    def explain(self, query: str, k: int = 5) -> ExplainResult:
        """The ranking of ``recall(query, k)`` with every score component; never raises."""
        self._check_open()
        k = _int_arg(k, "k")
        text = ""
        try:
            text = _query_text(query)  # inside the guard: str() of a host object can raise
            hops = self._governor.profile.graph_hops
            if k <= 0:
                return ExplainResult(text, hops)
            ranking, signal = self._rank(text, k, VALID_KINDS, retrieval.Filters())
            if signal is UNSET:  # no ranking, so no signal read with it
                signal = graph_signal(self._services, text)
            traversal = signal.traversal() if signal else []
            if ranking is None:
                return ExplainResult(text, hops, graph_traversal=traversal)
            return ranking.explain(text, hops, k, traversal)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("explain failed: %s", _failure(exc))
            return ExplainResult(text, 0)

    def _rank(
        self,
        query: object,
        k: int,
        kinds: frozenset[str],
        filters: retrieval.Filters,
        *,
        signal: Any = UNSET,
    ) -> tuple[retrieval.Ranking | None, Any]:
        """The ranking and the graph signal it used (``UNSET`` when the query has no terms
        and nothing was ranked), through the one query path (``retrieval.query``)."""
        return rank_query(
            self._services,
            _query_text(query),
            k=k,
            kinds=kinds,
            filters=filters,
            profile=self._governor.profile,
            signal=signal,
        )

    # -- context -----------------------------------------------------------------------------

    def build_context(self, user_input: str = "") -> ContextPlan:
        """The prompt sections for the next model call, fitted to budgets; never raises."""
        self._check_open()
        try:
            text = _query_text(user_input)
        except Exception as exc:  # str() of a host object can raise; plan without the input
            logger.error("build_context could not read user_input: %s", _failure(exc))
            text = ""
        return build_context_plan(self._services, text, self._session_id)

    # -- background work ---------------------------------------------------------------------

    def foreground(self) -> AbstractContextManager[None]:
        """Hold off background LLM calls while the host's own model generates."""
        self._check_open()  # now, not when the block is entered (§1.2: every method raises)
        return self._foreground()

    @contextmanager
    def _foreground(self) -> Iterator[None]:
        self.foreground_begin()
        try:
            yield
        finally:
            self.foreground_end()

    def foreground_begin(self) -> None:
        self._check_open()
        self._gate.foreground_begin()

    def foreground_end(self) -> None:
        if self._closed:
            self._gate.foreground_end()  # let a block that outlived close() go, then refuse
        self._check_open()
        if not self._gate.foreground_end():
            self._services.warn_once(
                "foreground_end", "foreground_end() without a matching foreground_begin(); ignored"
            )
        self._worker.signal()

    def drain(self, timeout: float = 5.0) -> bool:
        """Release batched extractions and wait for this process's jobs; False on timeout."""
        self._check_open()
        return self._drain(_timeout_arg(timeout))

    def _drain(self, timeout: float, *, runnable_only: bool = False) -> bool:
        """Release batched extractions and wait; ``runnable_only`` skips jobs in retry back-off."""
        batched = self._governor.profile.extraction_cadence == Cadence.BATCHED
        if batched and not self._db.read_only:
            with self._db.atomic() as conn:
                for session_id in jobs.sessions_with_held_extracts(conn, self._owner):
                    jobs.release_held_extracts(conn, session_id, self._owner, "turn")
        self._gate.drain_begin()
        try:
            self._worker.signal()

            def idle() -> bool:
                with self._db.read() as conn:
                    if runnable_only:
                        return jobs.count_runnable(conn, self._owner) == 0
                    return jobs.count_for_owner(conn, self._owner, ("queued", "running")) == 0

            return self._worker.wait_for(idle, timeout)
        finally:
            self._gate.drain_end()

    def pending(self) -> int:
        self._check_open()
        with self._db.read() as conn:
            return jobs.count_for_owner(conn, self._owner, ("queued", "held", "running"))

    def warm_up(self, timeout: float = 60.0) -> bool:
        """Have the worker load the built-in embedder; True when an embedder is ready."""
        self._check_open()
        timeout = _timeout_arg(timeout)
        return background.warm_up(self._services, self._worker, self._governor.profile, timeout)

    # -- maintenance and portability ---------------------------------------------------------

    def clusters(self) -> list[dict[str, Any]]:
        self._check_open()
        try:
            with self._db.read() as conn:
                return background.list_clusters(conn)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("clusters failed: %s", _failure(exc))
            return []

    def erase(
        self,
        *,
        key: str | None = None,
        session_id: int | None = None,
        include_facts: bool = False,
    ) -> dict[str, int]:
        self._check_open()
        if (key is None) == (session_id is None):
            raise ConfigError("erase needs exactly one target: key=... or session_id=...")
        if key is not None and not isinstance(key, str):
            raise ConfigError(f"key={key!r} is invalid; fact keys are strings")
        if session_id is not None:
            session_id = _int_arg(session_id, "session_id")
            with self._state_lock:
                if session_id == self._session_id:
                    self._session_id = None
                    self._digest = []
        from . import portability

        return portability.erase(
            self._services,
            key=None if key is None else normalize_key(key),
            session_id=session_id,
            include_facts=bool(include_facts),
        )

    def export(self, path_or_file: Any) -> dict[str, int]:
        self._check_open()
        from . import portability

        return portability.export(self._services, path_or_file)

    def import_(
        self, path_or_file: Any, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, int]:
        self._check_open()
        from . import portability

        return portability.import_(self._services, path_or_file, progress=progress)

    def reindex(
        self, progress: Callable[[int, int], None] | None = None, *, force: bool = False
    ) -> int:
        self._check_open()
        if progress is not None and not callable(progress):
            raise ConfigError(f"progress={progress!r} is invalid; pass a callable(done, total)")
        try:
            return background.reindex(self._services, self._worker, progress, force=bool(force))
        except (ClosedError, EmbedderError, StoreError):
            raise
        except ElastimemError:
            raise

    # -- stats -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        self._check_open()
        return background.collect_stats(self._services, self._governor.profile.tier)

    # -- close -------------------------------------------------------------------------------

    def close(self) -> None:
        """Drain briefly, stop the worker, persist state and close every connection."""
        if self._closed or self._closing:
            return
        self._closing = True
        # A recall waiting for the built-in model to load would wait out its
        # embedder_wait_seconds although the store is going away: release it now.
        self._services.closing = True
        if self._services.embedding.builtin is not None:
            self._services.embedding.builtin.wake()
        # Instances of one process on one file share their jobs (§5.11): while another is
        # open, it runs them, so this one neither drains nor gives them away. Counted out
        # first, so of two instances closing at once one is the last and hands them over.
        shared = _count_out(self._db)
        try:
            if not shared:
                try:
                    self._drain(CLOSE_DRAIN_SECONDS, runnable_only=True)
                except Exception as exc:
                    logger.warning("draining before close failed: %s", _failure(exc))
            self._gate.closing = True
            # A foreground block this thread still holds would keep the worker waiting for
            # the LLM lock for good (foreground_end raises once the store is closed).
            while self._gate.foreground_end():
                pass
            self._worker.stop()
            try:
                # A read-only store wrote nothing, so there is nothing to save.
                if not self._db.read_only:
                    with self._state_lock, self._db.atomic() as conn:
                        if self._session_id is not None:
                            background.persist_digest(conn, self._session_id, self._digest)
                            episodic.clear_owner(conn, self._session_id)
                        # Asked again: a sibling may have opened during the drain.
                        if not shared and not _others_open(self._db):
                            jobs.clear_owner(conn, self._owner, running_in_process(self._db.path))
            except Exception as exc:
                logger.warning("could not save session state at close: %s", _failure(exc))
            self._db.checkpoint("PASSIVE")
        finally:
            self._closed = True
            self._services.close()
            self._vectors.close()
            self._db.close()


# -- instances open in this process -----------------------------------------------------------

# Open instances per store file in this process (a ``:memory:`` store is private: not counted).
_open_instances: dict[str, int] = {}
_open_instances_guard = threading.Lock()


def _count_in(database: db.Database) -> bool:
    """Count an opening instance in; True when others of this process have the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        before = _open_instances.get(database.path, 0)
        _open_instances[database.path] = before + 1
        return before > 0


def _others_open(database: db.Database) -> bool:
    """Whether an instance of this process other than a closing one has the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        return _open_instances.get(database.path, 0) > 0


def _count_out(database: db.Database) -> bool:
    """Count a closing instance out; True when another of this process keeps the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        left = _open_instances.get(database.path, 0) - 1
        if left > 0:
            _open_instances[database.path] = left
        else:
            _open_instances.pop(database.path, None)
        return left > 0


# -- argument helpers ------------------------------------------------------------------------


def _failure(exc: BaseException) -> str:
    """A caught failure as logged by the never-raise methods.

    A store error is ours: its message names the file and the fix. Anything else may come
    from a host callable (LLM, embedder, tokenizer, a ``__str__``) whose message can quote the
    user's text, so only its type is logged.
    """
    if isinstance(exc, StoreError):
        return f"{type(exc).__name__}: {exc}"
    return type(exc).__name__


def _query_text(value: object) -> str:
    """A query (or build_context input) as searchable text, cut to ``MAX_QUERY_CHARS``."""
    if isinstance(value, str) and len(value) > MAX_QUERY_CHARS:
        value = value[:MAX_QUERY_CHARS]
    return sanitize(value)[:MAX_QUERY_CHARS]


def _pick_alias(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    if value is not None and alias_value is not None and value is not alias_value:
        raise ConfigError(f"both {name}= and its alias {alias}= were given; pass only {name}=")
    return value if value is not None else alias_value


def _parse_at(value: object, name: str) -> str | None:
    if value is None:
        return None
    try:
        return to_ts(value)
    except (ValueError, TypeError, OverflowError):
        raise ConfigError(
            f"{name}={value!r} is not a readable time; pass a datetime or an ISO-8601 string"
        ) from None


def _int_arg(value: object, name: str) -> int:
    """An integer argument, clamped to SQLite's 64-bit range: a count past it means "all",
    an id past it names nothing (bound unclamped, it raised OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name}={value!r} is invalid; pass an integer")
    return max(_INT64_MIN, min(_INT64_MAX, value))


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _timeout_arg(value: object, name: str = "timeout") -> float:
    """A wait in seconds: a real number >= 0 (infinity waits for good)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{name}={value!r} is invalid; pass a number of seconds >= 0")
    return float(value)


def _parse_kinds(kinds: Iterable[str] | None) -> frozenset[str]:
    if kinds is None:
        return VALID_KINDS
    if isinstance(kinds, str):
        kinds = [kinds]
    try:
        wanted = frozenset(kinds)
    except TypeError:
        raise ConfigError(
            f"kinds={kinds!r} is invalid; use a subset of {{'chunk', 'fact'}}"
        ) from None
    if not wanted <= VALID_KINDS:
        raise ConfigError(
            f"kinds={sorted(map(str, wanted))!r} is invalid; use a subset of {{'chunk', 'fact'}}"
        )
    return wanted
