"""The session state of one open store: its open session and rolling digest (SPEC §5.9).

``SessionState`` is the state machine behind ``begin_session``, ``record_turn``,
``end_session``, ``report_evictions`` and the digest the context plan shows: at most one
session is open per instance, opened lazily by the first turn, closed (summary and
consolidation queued) by ``end_session`` or the next ``begin_session``. Every change of the
session id or digest happens under ``lock``; the tokenizer never runs under the write lock.
It is wired once: ``bind(services)`` after the ``Services`` it feeds (whose digest and
session callbacks are this object's methods) exist.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .clock import now_ts, to_ts
from .config import ElastimemConfig
from .errors import StoreError
from .governor import MemoryProfile
from .jobs.embed import queue_fact_embedding
from .jobs.summaries import persist_digest, report_evictions
from .jobs.turns import queue_turn_jobs
from .memory import episodic, semantic
from .rules import Ending, capture_rules, ending_keys, find_endings, names_part_of, retired_keys
from .runtime import queue as jobs
from .runtime.services import Services
from .storage import Database
from .storage.tx import Tx
from .text import sanitize

logger = logging.getLogger("elastimem")

RULE_CHUNK_IMPORTANCE = 0.8
WRITES_KEY = "writes_since_consolidation"


def bump_writes(tx: Tx) -> None:
    """Count one more write towards the next consolidation."""
    tx.meta.bump(WRITES_KEY)


class SessionState:
    """The open session and rolling digest of one store instance."""

    _services: Services  # set by bind()

    def __init__(
        self,
        database: Database,
        owner: episodic.Owner,
        *,
        config: Callable[[], ElastimemConfig],
        profile: Callable[[], MemoryProfile],
        est: Callable[[str], int],
        chunk_estimator: Callable[[], episodic.Estimator],
    ) -> None:
        self.lock = threading.RLock()
        self.session_id: int | None = None
        self.digest: list[str] = []
        self._db = database
        self._owner = owner
        self._config = config
        self._profile = profile
        self._est = est
        self._chunk_estimator = chunk_estimator

    def bind(self, services: Services) -> None:
        """Wire the services the turn's jobs are queued with (made after this object)."""
        self._services = services

    def _wake(self) -> None:
        worker = self._services.worker
        if worker is not None:
            worker.signal()

    def _reset(self) -> None:
        self.session_id = None
        self.digest = []

    # -- opening -----------------------------------------------------------------------------

    def ensure(self, tx: Tx, at: str | None) -> int:
        """The open session's id, opening one (at ``at``) when there is none."""
        if self.session_id is not None and episodic.is_open(tx, self.session_id):
            return self.session_id
        self.session_id = episodic.open_session(tx, self._owner, at=at, host_tag=None)
        self.digest = []
        return self.session_id

    def ensure_now(self) -> int:
        """``ensure`` in a transaction of its own (the services' ``ensure_session``)."""
        with self.lock, self._db.atomic() as tx:
            return self.ensure(tx, None)

    def begin(self, at: str | None, host_tag: str | None) -> int:
        """End the open session (without waiting) and open a new one."""
        with self.lock:
            self.close_current(wait=False, timeout=0.0)
            with self._db.atomic() as tx:
                self.session_id = episodic.open_session(
                    tx, self._owner, at=at, host_tag=sanitize(host_tag) if host_tag else None
                )
            self.digest = []
            return self.session_id

    # -- turns -------------------------------------------------------------------------------

    def record(self, user_text: object, assistant_text: object, at: object) -> None:
        """Store one exchange with its jobs, then what its rules capture (§5.10)."""
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
        config = self._config()
        chunk_texts = episodic.chunk_exchange(
            user, assistant, self._chunk_estimator(), config.chunk_target_tokens
        )
        captures = capture_rules(user) if user else []
        endings = find_endings(user) if user else []
        profile = self._profile()
        with self.lock:
            with self._db.atomic() as tx:
                session_id = self.ensure(tx, at_ts)
                # "Now" under the lock, after a lazily opened session's start: taken before
                # the tokenizer ran and the lock was won, it came before the session began.
                turn_at = at_ts or now_ts()
                record = episodic.insert_turn(
                    tx,
                    session_id,
                    user,
                    assistant,
                    at=turn_at,
                    chunk_texts=chunk_texts,
                    user_tokens=user_tokens,
                    assistant_tokens=assistant_tokens,
                )
                bump_writes(tx)
                # Same transaction as the turn: a crash can never leave a stored turn without
                # its jobs (embeddings are backfilled, but links and extraction are not).
                queue_turn_jobs(tx, self._services, record, user, profile, config)
            if captures or endings:
                self._store_rule_captures(captures, endings, record)
        self._wake()

    def _store_rule_captures(
        self, captures: list[tuple[str, str]], endings: list[Ending], record: episodic.TurnRecord
    ) -> None:
        """Write the turn's captures, then retire the live facts it says have ended (issue
        15: "I'm no longer vegetarian"), in one transaction."""
        config = self._config()
        with self._db.atomic() as tx:
            touched = False
            # A shorter mention of the live value re-affirms it: "I'm Daniel" while name is
            # "Daniel Reyes", "I live in Austin" while location is "Austin, Texas".
            current = semantic.live_values_of(tx, [key for key, _ in captures])
            for key, value in captures:
                if key in current and names_part_of(key, value, current[key]):
                    value = current[key]
                result = semantic.write_fact(
                    tx,
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
                live = semantic.live_values_of(tx, ending_keys(endings))
                keys = retired_keys(endings, (key for key, _ in captures), live)
                retired = [key for key in keys if semantic.retire(tx, key, record.created_at)]
                if retired:
                    bump_writes(tx)
                    touched = True
            if touched:
                episodic.raise_chunk_importance(tx, record.chunk_ids, RULE_CHUNK_IMPORTANCE)
                queue_fact_embedding(tx, self._services)

    # -- ending ------------------------------------------------------------------------------

    def end(self, *, wait: bool, timeout: float) -> None:
        """End the open session; with ``wait``, wait up to ``timeout`` for its jobs."""
        with self.lock:
            job_ids = self.close_current(wait=wait, timeout=timeout)
        if wait and job_ids:
            self.wait_for_jobs(job_ids, timeout)

    def close_current(self, *, wait: bool, timeout: float) -> list[int]:
        """§5.9 end_session steps 1–5; returns the ids of the jobs it queued."""
        session_id = self.session_id
        if session_id is None:
            return []
        job_ids: list[int] = []
        try:
            with self._db.atomic() as tx:
                if not episodic.is_open(tx, session_id):
                    self._reset()
                    return []
                persist_digest(tx, session_id, self.digest)
                extract_id = jobs.release_held_extracts(tx, session_id, self._owner, "session_end")
                if extract_id is not None:
                    job_ids.append(extract_id)
                episodic.close_session(tx, session_id)
                job_ids.append(
                    jobs.enqueue(tx, "session_summary", self._owner, session_id=session_id)
                )
                job_ids.append(jobs.enqueue(tx, "consolidate", self._owner))
        except StoreError as exc:
            logger.error("could not end session %s cleanly: %s", session_id, exc)
        self._reset()
        self._wake()
        return job_ids

    def wait_for_jobs(self, job_ids: list[int], timeout: float) -> bool:
        """Wait until none of ``job_ids`` is queued or running; False on timeout."""
        worker = self._services.worker
        if worker is None:
            return False

        def finished() -> bool:
            with self._db.read() as tx:
                return tx.jobs.count_unfinished(job_ids) == 0

        return worker.wait_for(finished, timeout)

    def forget(self, session_id: int) -> None:
        """Let go of ``session_id`` when it is the open one (it is being erased)."""
        with self.lock:
            if session_id == self.session_id:
                self._reset()

    # -- digest ------------------------------------------------------------------------------

    def report_evictions(self, turns: Iterable[Any]) -> None:
        """Fold turns that left the host's window into the rolling digest."""
        # Read, extend and write the digest as one step: two host threads evicting at
        # once each wrote back what it had read, and one's items were lost.
        with self.lock:
            report_evictions(self._services, turns)

    def current_digest(self) -> tuple[int | None, list[str]]:
        """The open session's id and a copy of its digest (the services' ``current_digest``)."""
        with self.lock:
            if self.session_id is not None:
                with self._db.read() as tx:
                    erased = not episodic.exists(tx, self.session_id)
                if erased:
                    # Another instance or process erased it: its digest quotes what was
                    # erased, and must not reach the next prompt.
                    self._reset()
            return self.session_id, list(self.digest)

    def apply_digest(self, session_id: int, items: list[str]) -> None:
        """Set the digest of ``session_id`` (in memory if current) and persist it."""
        with self.lock:
            if session_id == self.session_id:
                self.digest = list(items)
            with self._db.atomic() as tx:
                persist_digest(tx, session_id, items)

    # -- upkeep ------------------------------------------------------------------------------

    def on_worker_wake(self) -> None:
        """Runs on the worker at every wake: heartbeat the open session (≥ every 60 s)."""
        session_id = self.session_id
        if self._db.read_only:
            return
        with self._db.atomic() as tx:
            if session_id is not None:
                episodic.heartbeat(tx, session_id)
            jobs.refresh_ownership(tx, self._owner)

    def save(self, tx: Tx) -> None:
        """At close (``lock`` held): persist the digest and give up the open session."""
        if self.session_id is not None:
            persist_digest(tx, self.session_id, self.digest)
            episodic.clear_owner(tx, self.session_id)
