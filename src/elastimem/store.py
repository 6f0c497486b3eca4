"""``Elastimem``: the facade the host talks to (SPEC §1).

It is deliberately thin. It checks arguments (``arguments``), holds the parts of one open
instance and delegates the work: ``session`` (the open session, turns and the rolling digest),
``lifecycle`` (open recovery, the instances open in this process, the close protocol),
``memory`` (facts, lessons), ``retrieval`` (the one query path), ``assembly`` (context plans),
``portability`` (erase, export, import), ``jobs`` (reindex). Nothing imports this back.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from . import arguments as args
from . import lifecycle, observe, storage
from .arguments import VALID_KINDS
from .arguments import failure as _failure
from .arguments import int_arg as _int_arg
from .arguments import parse_at as _parse_at
from .arguments import parse_kinds as _parse_kinds
from .arguments import query_text as _query_text
from .arguments import timeout_arg as _timeout_arg
from .assembly import ContextPlan, build_context_plan
from .browsing import Browsing
from .config import ElastimemConfig, check_option_names
from .enums import Tier
from .errors import ClosedError, ConfigError
from .governor import Governor, MemoryProfile
from .graph import list_clusters
from .graph import view as graph_view
from .index.embedders import BuiltinEmbedder
from .index.vectors import EmbeddingSource, VectorIndex
from .jobs.embed import queue_fact_embedding, reindex
from .memory import episodic, procedural, semantic
from .retrieval import rank as retrieval
from .retrieval.legs import graph_signal
from .retrieval.query import UNSET, rank_query
from .retrieval.timeline import resolve_timeline_key
from .retrieval.warm import warm_up
from .runtime import queue as jobs
from .runtime import stats as store_checks
from .runtime.gate import LLMGate
from .runtime.tokens import TokenEstimate
from .session import SessionState, bump_writes
from .text import normalize_key, sanitize
from .values import ExplainResult, Fact, Hit, TimelineResult

logger = logging.getLogger("elastimem")

Tokenizer = Callable[[str], int]


@observe.instrument
class Elastimem(Browsing):
    """Long-term memory for one user: one SQLite file, or the user's rows on a PostgreSQL server."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        user_id: str | None = None,
        key: str | bytes | None = None,
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
        user_id = args.check_open(path, create, user_id)
        llm = args.pick_alias("llm", llm, "complete_fn", complete_fn)
        embedder = args.pick_alias("embedder", embedder, "embed_fn", embed_fn)
        args.check_callables(llm=llm, embedder=embedder, query_embedder=query_embedder,
                             tokenizer_fn=tokenizer_fn, probe_fn=probe_fn,
                             on_tier_change=on_tier_change)  # fmt: skip
        config = args.config_arg(config)
        check_option_names(config_overrides)
        self._config = config.with_overrides(config_overrides)

        self._llm = llm
        self._tokens = TokenEstimate(tokenizer_fn)
        builtin = None
        if embedder is None and not self._config.disable_builtin_embedder:
            builtin = BuiltinEmbedder()
        self._embedding = EmbeddingSource(embedder, query_embedder, builtin)
        self._db = storage.open_database(path, create=create, user_id=user_id, key=key)
        try:
            self._user_id = lifecycle.claim_user(self._db, user_id)
        except BaseException:
            self._db.close()
            raise
        self._owner = episodic.Owner.current()
        self._session = SessionState(
            self._db,
            self._owner,
            config=lambda: self._config,
            profile=lambda: self._governor.profile,
            est=self._tokens.est,
            chunk_estimator=self._tokens.chunk_estimator,
        )
        self._gate = LLMGate()
        self._vectors = VectorIndex(self._db, self._config)
        self._governor = Governor(self._config, probe_fn=probe_fn, on_tier_change=on_tier_change)
        self._after_tier_change(self._governor.profile)  # opened at LITE: stream from the start
        self._closed = False
        self._closing = False
        # Counted as open from here on (not once the worker runs): a sibling closing while
        # this one opens must see it and leave the process's jobs to it.
        siblings_open = lifecycle.count_in(self._db)
        try:
            lifecycle.recover_at_open(self._db, self._owner, siblings_open)
            self._services, self._worker = lifecycle.start(
                self._db, self._owner, self._session, gate=self._gate,
                embedding=self._embedding, vectors=self._vectors, llm=lambda: self._llm,
                config=lambda: self._config, profile=lambda: self._governor.profile,
                est=self._tokens.est,
            )  # fmt: skip
        except BaseException:
            self._closed = True
            lifecycle.count_out(self._db)
            self._db.close()
            raise

    # -- attributes --------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._db.path

    @property
    def user_id(self) -> str | None:
        """Whose memory this instance serves: the ``user_id`` given at open, else the owner
        the store records (``open_user`` records one), else None."""
        return self._user_id

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
        args.check_callables(complete_fn=fn)
        self._llm = fn

    @property
    def embed_fn(self) -> Callable[[list[str]], Any] | None:
        return self._embedding.host_embed

    @property
    def embed_query_fn(self) -> Callable[[str], Any] | None:
        return self._embedding.host_query

    @property
    def tokenizer_fn(self) -> Tokenizer | None:
        return self._tokens.tokenizer

    @property
    def fts_enabled(self) -> bool:
        return self._db.fts_enabled

    @property
    def session_id(self) -> int | None:
        return self._session.session_id

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

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this Elastimem store is closed; open a new instance to use it")

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
        lifecycle.rewire_builtin_embedder(self._embedding, self._vectors, self._config)
        return self._after_tier_change(self._governor.profile)

    def _after_tier_change(self, profile: MemoryProfile) -> MemoryProfile:
        # At LITE the vector matrix is freed and searched in streamed blocks instead.
        self._vectors.set_streaming(profile.tier == Tier.LITE)
        return profile

    # -- sessions and turns ------------------------------------------------------------------

    def begin_session(self, host_tag: str | None = None, *, at: object = None) -> int:
        self._check_open()
        at_ts = _parse_at(at, "at")
        return self._session.begin(at_ts, args.optional_text(host_tag, "host_tag"))

    def record_turn(self, user_text: object, assistant_text: object, *, at: object = None) -> None:
        """Store one exchange; never raises (§5.10)."""
        self._check_open()
        try:
            self._session.record(user_text, assistant_text, at)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("record_turn could not store the exchange: %s", _failure(exc))

    def end_session(self, *, wait: bool = True, timeout: float = 30.0) -> None:
        self._check_open()
        self._session.end(wait=wait, timeout=_timeout_arg(timeout))

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
            return episodic.resume_tail(conn, session_id, self._session.session_id, budget)

    def report_evictions(self, turns: Iterable[Any]) -> None:
        """Fold turns that left the host's window into the rolling digest; never raises."""
        self._check_open()
        try:
            self._session.report_evictions(turns)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("report_evictions failed: %s", _failure(exc))

    # -- facts -------------------------------------------------------------------------------

    def remember(
        self, key: str, value: str | int | float, source: str = "explicit", *, at: object = None
    ) -> tuple[bool, str]:
        self._check_open()
        key, text_value = args.key_arg(key), args.fact_value(value)
        source, at_ts = args.source_arg(source), _parse_at(at, "at")
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
                origin_session_id=self._session.session_id,
            )
            bump_writes(conn)
            if result.changed or result.reason == "already stored":
                queue_fact_embedding(conn, self._services)
        self._worker.signal()
        return result.changed, result.reason

    def forget(self, key: str) -> bool:
        self._check_open()
        with self._db.atomic() as conn:
            forgotten = semantic.forget(conn, normalize_key(args.key_arg(key)))
            bump_writes(conn)
        return forgotten

    def facts(self) -> dict[str, str]:
        self._check_open()
        with self._db.read() as conn:
            return semantic.live_values(conn)

    def fact_history(self, key: str) -> list[Fact]:
        self._check_open()
        with self._db.read() as conn:
            return semantic.history(conn, normalize_key(args.key_arg(key)))

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
            return conn.facts.newest_quarantine(max(0, n))

    # -- lessons -----------------------------------------------------------------------------

    def add_lesson(self, text: str, tag: str | None = None) -> bool:
        """Save a lesson (§5.15). True when it is new or revived from the archive; False when
        it is empty, already one of the current lessons (its use is counted), or refused by
        the instruction and markup guards (it is then in ``quarantine_entries()``)."""
        self._check_open()
        if not isinstance(text, str):
            raise ConfigError(f"text={text!r} is invalid; a lesson is a string")
        tag = args.optional_text(tag, "tag")
        with self._db.atomic() as conn:
            written = procedural.add_lesson(
                conn,
                sanitize(text),
                sanitize(tag) if tag else None,
                self._config.max_lessons,
                quarantine_cap=self._config.quarantine_cap,
            )
            if written.stored:
                bump_writes(conn)
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
        min_score: float | None = None,
    ) -> list[Hit]:
        """Hybrid search over chunks and facts (§5.6); never raises; ``min_score`` cuts hits."""
        self._check_open()
        k, floor, wanted = _int_arg(k, "k"), args.min_score_arg(min_score), _parse_kinds(kinds)
        filters = retrieval.Filters(None, _parse_at(since, "since"), _parse_at(until, "until"))
        if k <= 0:
            return []
        try:
            ranking, _signal = self._rank(query, k, wanted, filters)
            return [hit for hit in (ranking.hits if ranking else []) if hit.score >= floor]
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
        return build_context_plan(self._services, text, self._session.session_id)

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
        """Wait for this process's jobs (batched extractions released first); False on timeout."""
        self._check_open()
        timeout = _timeout_arg(timeout)
        return lifecycle.drain(self._services, self._worker, timeout, runnable_only=False)

    def pending(self) -> int:
        self._check_open()
        with self._db.read() as conn:
            return jobs.count_for_owner(conn, self._owner, ("queued", "held", "running"))

    def warm_up(self, timeout: float = 60.0) -> bool:
        """Have the worker load the built-in embedder; True when an embedder is ready."""
        self._check_open()
        timeout = _timeout_arg(timeout)
        return warm_up(self._services, self._worker, self._governor.profile, timeout)

    # -- maintenance and portability ---------------------------------------------------------

    def clusters(self) -> list[dict[str, Any]]:
        self._check_open()
        try:
            with self._db.read() as conn:
                return list_clusters(conn)
        except ClosedError:
            raise
        except Exception as exc:
            logger.error("clusters failed: %s", _failure(exc))
            return []

    def has_vectors(self, model_prefix: str = "") -> bool:
        """Whether a chunk or fact has a vector whose model label starts with ``model_prefix``."""
        self._check_open()
        return store_checks.has_vectors(self._db, model_prefix)

    def holds_memories_outside(self, session_ids: Iterable[int]) -> bool:
        """Whether a lesson, or a fact version learned outside these sessions, is stored."""
        self._check_open()
        return store_checks.holds_memories_outside(self._db, session_ids)

    def render_graph(self, as_: str = "dot") -> str:
        """The entity graph as Graphviz DOT (``"dot"``) or one self-contained HTML page."""
        self._check_open()
        return graph_view.render(self._db, as_)

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
        if session_id is not None:
            session_id = _int_arg(session_id, "session_id")
            self._session.forget(session_id)
        from . import portability

        return portability.erase(
            self._services,
            key=None if key is None else normalize_key(args.key_arg(key)),
            session_id=session_id,
            include_facts=bool(include_facts),
        )

    def export(self, path_or_file: Any, *, encrypt: bool | None = None) -> dict[str, int]:
        self._check_open()
        from . import portability

        return portability.export(self._services, path_or_file, encrypt=encrypt)

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
        return reindex(self._services, self._worker, progress, force=bool(force))

    # -- stats -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        self._check_open()
        return store_checks.collect_stats(self._services, self._governor.profile.tier)

    # -- close -------------------------------------------------------------------------------

    def close(self) -> None:
        """Drain briefly, stop the worker, persist state and close every connection."""
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            lifecycle.wind_down(self._services, self._worker, self._session)
        finally:
            self._closed = True
            lifecycle.release(self._services)
