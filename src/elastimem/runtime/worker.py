"""The background worker thread (SPEC §5.11).

One daemon thread per store instance claims jobs from the durable queue in
``(priority, id)`` order and runs the handler registered for each kind. It receives what it
needs (the database, the handlers, a few callbacks) and never reaches into the facade.

Handlers signal outcomes by returning (done: the job is deleted) or raising ``JobDeferred``
(back to queued, no attempt counted), ``JobHeld`` (back to held) or any other exception (an
attempt is counted; retried after 10 s, 60 s, then failed). Besides jobs, the worker runs
in-memory *tasks* (``submit``), such as loading the built-in embedder off the host's thread.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from .. import observe
from ..errors import StoreError
from ..memory.episodic import Owner
from ..storage.database import Database
from . import queue as jobs

logger = logging.getLogger("elastimem")

# Wake at least this often to refresh heartbeats and run idle work.
MAX_WAIT_SECONDS = 30.0
STOP_JOIN_SECONDS = 5.0

Handler = Callable[[jobs.Job], None]


# Jobs the workers of this process are executing now, per store file. The job table says
# only "running, owned by this pid": this says which of those a thread here still runs, so
# close() never gives one away (another process would run it twice) and the next open in
# this process requeues one whose thread is gone (a call that outlived close() could not
# record its outcome).
_running: dict[str, set[int]] = {}
_running_guard = threading.Lock()


def _running_here(path: str, job_id: int, running: bool) -> None:
    with _running_guard:
        ids = _running.setdefault(path, set())
        if running:
            ids.add(job_id)
        else:
            ids.discard(job_id)


def running_in_process(path: str) -> frozenset[int]:
    """Ids of the jobs of ``path`` a worker thread of this process is executing now."""
    with _running_guard:
        return frozenset(_running.get(path, ()))


class Worker:
    def __init__(
        self,
        db: Database,
        owner: Owner,
        handlers: dict[str, Handler],
        *,
        skip_kinds: Callable[[], frozenset[str]],
        on_wake: Callable[[], None],
        on_idle: Callable[[float], None],
        idle_seconds: Callable[[], float],
    ) -> None:
        self._db = db
        self._owner = owner
        self._handlers = handlers
        self._skip_kinds = skip_kinds
        self._on_wake = on_wake
        self._on_idle = on_idle
        self._idle_seconds = idle_seconds
        self._cond = threading.Condition()
        self._tasks: deque[Callable[[], object]] = deque()
        self._stopping = False
        self._signalled = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="elastimem-worker", daemon=True)

    # -- control -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def signal(self) -> None:
        with self._cond:
            self._signalled = True
            self._cond.notify_all()

    def submit(self, task: Callable[[], object]) -> None:
        """Run ``task`` on the worker thread before the next job."""
        with self._cond:
            self._tasks.append(task)
            self._signalled = True
            self._cond.notify_all()

    def stop(self, timeout: float = STOP_JOIN_SECONDS) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def is_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` is true, re-checking after every job; False on timeout."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                if predicate():
                    return True
            except StoreError as exc:
                logger.warning("waiting for background work failed: %s", exc)
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                self._cond.wait(min(remaining, 0.25))

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                if self._stopping:
                    return
                task = self._tasks.popleft() if self._tasks else None
            if task is not None:
                self._run_task(task)
                continue
            self._safe(self._on_wake)
            job = self._claim()
            if job is not None:
                try:
                    self._execute(job)
                finally:
                    _running_here(self._db.key, job.id, False)
                idle_since = time.monotonic()
                with self._cond:
                    self._cond.notify_all()
                continue
            idle_for = time.monotonic() - idle_since
            self._safe(functools.partial(self._on_idle, idle_for))
            with self._cond:
                if self._stopping:
                    return
                if not self._signalled and not self._tasks:
                    wait = min(
                        self._safe_float(self._idle_seconds, MAX_WAIT_SECONDS), MAX_WAIT_SECONDS
                    )
                    self._cond.wait(max(0.05, wait))
                self._signalled = False
                self._cond.notify_all()

    def _claim(self) -> jobs.Job | None:
        if self._db.read_only:
            return None  # a read-only store runs only in-memory tasks (model loading)
        claimed: jobs.Job | None = None
        try:
            with self._db.atomic() as conn:
                claimed = jobs.claim(conn, self._owner, self._skip_kinds())
                if claimed is not None:
                    # Inside the claim's transaction: recovery at another instance's open
                    # (under the same write lock) never sees it running and unclaimed here.
                    _running_here(self._db.key, claimed.id, True)
            return claimed
        except Exception as exc:  # a locked or closed store: try again on the next wake
            if claimed is not None:
                _running_here(self._db.key, claimed.id, False)
            logger.debug("claiming a job failed: %s", exc)
            return None

    def _execute(self, job: jobs.Job) -> None:
        handler = self._handlers.get(job.kind)
        outcome = "done"
        error = ""
        try:
            if handler is not None:
                handler(job)
        except jobs.JobDeferred:
            outcome = "queued"
        except jobs.JobHeld:
            outcome = "held"
        except Exception as exc:
            outcome = "failed"
            reported = isinstance(exc, jobs.ReportedFailure)
            cause = exc.__cause__ if reported and exc.__cause__ is not None else exc
            error = f"{type(cause).__name__}: {cause}"
            # Only the type goes to the log: the host's LLM or embedder may quote its input
            # (the user's words) in the message. The full text stays in jobs.last_error.
            logger.log(
                logging.DEBUG if reported else logging.WARNING,
                "background %s job %d failed (%s); its error is kept in jobs.last_error",
                job.kind,
                job.id,
                type(cause).__name__,
            )
        try:
            with self._db.atomic() as conn:
                if outcome == "done":
                    jobs.complete(conn, job.id)
                elif outcome == "failed":
                    if jobs.fail(conn, job.id, error):  # its last attempt
                        observe.note("job_failed", job.kind)
                else:
                    jobs.set_state(conn, job.id, outcome)
        except Exception as exc:
            logger.warning("could not record the outcome of job %d: %s", job.id, exc)
        if outcome == "queued":
            # Deferred (foreground or closing): do not spin on it; wait for a signal.
            with self._cond:
                if not self._stopping and not self._signalled:
                    self._cond.wait(0.2)

    def _run_task(self, task: Callable[[], object]) -> None:
        self._safe(task)
        with self._cond:
            self._cond.notify_all()

    @staticmethod
    def _safe(fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:
            logger.warning("background task failed: %s", exc)

    @staticmethod
    def _safe_float(fn: Callable[[], float], default: float) -> float:
        try:
            return float(fn())
        except Exception:
            return default
