"""Opening, wiring and closing one store instance, and the instances open in this process (§5.11).

Instances of one process on one file share their jobs: while another is open it runs them,
so a closing instance neither drains nor gives them away. The registry here counts the
open instances per file (a ``:memory:`` store is private: not counted); ``recover_at_open``
closes orphan sessions and adopts abandoned jobs; ``start`` wires the ``Services`` and starts
the worker; ``wind_down`` and ``release`` are the close
protocol: drain briefly, stop the worker, save the session state, free every resource.
``rewire_builtin_embedder`` follows a reconfigured ``disable_builtin_embedder``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .arguments import failure
from .config import ElastimemConfig
from .enums import Cadence
from .errors import ConfigError
from .governor import MemoryProfile
from .index.embedders import BuiltinEmbedder
from .index.vectors import EmbeddingSource, VectorIndex
from .jobs.dispatch import make_worker
from .memory import episodic
from .runtime import queue as jobs
from .runtime.gate import LLMGate
from .runtime.services import Services, preload_embedder
from .runtime.worker import Worker, running_in_process
from .session import SessionState
from .storage import Database

logger = logging.getLogger("elastimem")

CLOSE_DRAIN_SECONDS = 5.0

# Open instances per store file in this process.
_open_instances: dict[str, int] = {}
_open_instances_guard = threading.Lock()


def claim_user(database: Database, user_id: str | None) -> str | None:
    """Record ``user_id`` as the store's owner (``meta.user_id``) or check it is the one
    recorded: a store opened under another user's id raises ``ConfigError``. A read-only
    store is checked but not tagged. None claims nothing. Returns the store's owner (None
    for a store that records none)."""
    if user_id is None:
        with database.read() as tx:
            return tx.meta.get("user_id")
    if database.read_only:
        with database.read() as tx:
            recorded = tx.meta.get("user_id")
        if recorded is None:
            return user_id  # an untagged file stays untagged: it may not be written
    else:
        with database.atomic() as tx:
            recorded = tx.meta.get("user_id")
            if recorded is None:
                tx.meta.set("user_id", user_id)
                recorded = user_id
    if recorded != user_id:
        raise owner_mismatch(database.path, str(recorded), user_id)
    return user_id


def owner_mismatch(path: str, recorded: str, user_id: str) -> ConfigError:
    return ConfigError(
        f"{path} belongs to user {recorded!r}, not {user_id!r}; check the root folder and the id"
    )


def count_in(database: Database) -> bool:
    """Count an opening instance in; True when others of this process have the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        before = _open_instances.get(database.key, 0)
        _open_instances[database.key] = before + 1
        return before > 0


def others_open(database: Database) -> bool:
    """Whether an instance of this process other than a closing one has the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        return _open_instances.get(database.key, 0) > 0


def count_out(database: Database) -> bool:
    """Count a closing instance out; True when another of this process keeps the file open."""
    if database.is_memory:
        return False
    with _open_instances_guard:
        left = _open_instances.get(database.key, 0) - 1
        if left > 0:
            _open_instances[database.key] = left
        else:
            _open_instances.pop(database.key, None)
        return left > 0


def recover_at_open(database: Database, owner: episodic.Owner, siblings_open: bool) -> None:
    """Close orphan sessions and adopt abandoned jobs (§6; open step 5)."""
    if database.read_only:
        return  # another process with write access will recover them
    with database.atomic() as tx:
        for session_id in episodic.find_orphans(tx, owner, siblings_open):
            episodic.close_orphan(tx, session_id)
            jobs.release_held_extracts(tx, session_id, owner, "session_end")
            jobs.enqueue(tx, "session_summary", owner, session_id=session_id)
            tx.meta.log_event("orphan_closed", session_id=session_id)
        jobs.recover(tx, owner, running_in_process(database.key))


def start(
    database: Database,
    owner: episodic.Owner,
    session: SessionState,
    *,
    gate: LLMGate,
    embedding: EmbeddingSource,
    vectors: VectorIndex,
    llm: Callable[[], Callable[..., str] | None],
    config: Callable[[], ElastimemConfig],
    profile: Callable[[], MemoryProfile],
    est: Callable[[str], int],
) -> tuple[Services, Worker]:
    """Wire the services of an instance, start its worker and preload the embedder."""
    services = Services(
        db=database,
        owner=owner,
        gate=gate,
        embedding=embedding,
        vectors=vectors,
        config=config,
        profile=profile,
        llm=llm,
        est=est,
        current_digest=session.current_digest,
        apply_digest=session.apply_digest,
        ensure_session=session.ensure_now,
    )
    session.bind(services)
    worker = make_worker(services, session.on_worker_wake)
    worker.start()
    preload_embedder(services, profile())
    return services, worker


def drain(services: Services, worker: Worker, timeout: float, *, runnable_only: bool) -> bool:
    """Wait for this process's jobs (batched extractions released first); False on timeout.
    ``runnable_only`` skips jobs in retry back-off."""
    database, owner = services.db, services.owner
    batched = services.profile().extraction_cadence == Cadence.BATCHED
    if batched and not database.read_only:
        with database.atomic() as tx:
            for session_id in jobs.sessions_with_held_extracts(tx, owner):
                jobs.release_held_extracts(tx, session_id, owner, "turn")
    services.gate.drain_begin()
    try:
        worker.signal()

        def idle() -> bool:
            with database.read() as tx:
                if runnable_only:
                    return jobs.count_runnable(tx, owner) == 0
                return jobs.count_for_owner(tx, owner, ("queued", "running")) == 0

        return worker.wait_for(idle, timeout)
    finally:
        services.gate.drain_end()


def wind_down(services: Services, worker: Worker, session: SessionState) -> None:
    """Close protocol up to freeing resources: drain briefly (unless a sibling instance runs
    the jobs), stop the worker, save the session state, hand over the jobs, checkpoint."""
    database = services.db
    # A recall waiting for the built-in model to load would wait out its
    # embedder_wait_seconds although the store is going away: release it now.
    services.closing = True
    if services.embedding.builtin is not None:
        services.embedding.builtin.wake()
    # Counted out first, so of two instances closing at once one is the last and hands
    # the jobs over.
    shared = count_out(database)
    if not shared:
        try:
            drain(services, worker, CLOSE_DRAIN_SECONDS, runnable_only=True)
        except Exception as exc:
            logger.warning("draining before close failed: %s", failure(exc))
    services.gate.closing = True
    # A foreground block this thread still holds would keep the worker waiting for
    # the LLM lock for good (foreground_end raises once the store is closed).
    while services.gate.foreground_end():
        pass
    worker.stop()
    try:
        # A read-only store wrote nothing, so there is nothing to save.
        if not database.read_only:
            with session.lock, database.atomic() as tx:
                session.save(tx)
                # Asked again: a sibling may have opened during the drain.
                if not shared and not others_open(database):
                    jobs.clear_owner(tx, services.owner, running_in_process(database.key))
    except Exception as exc:
        logger.warning("could not save session state at close: %s", failure(exc))
    database.checkpoint()


def release(services: Services) -> None:
    """Free what the instance holds: caches, helper threads, the vectors, every connection."""
    services.close()
    services.vectors.close()
    services.db.close()


def rewire_builtin_embedder(
    embedding: EmbeddingSource, vectors: VectorIndex, config: ElastimemConfig
) -> None:
    """Follow ``disable_builtin_embedder`` when it changes (no host embedder given)."""
    if embedding.host_embed is not None:
        return
    wanted = not config.disable_builtin_embedder
    if wanted == (embedding.builtin is not None):
        return
    embedding.builtin = BuiltinEmbedder() if wanted else None  # a query in flight keeps its own
    embedding.load_requested = False
    if not wanted:
        vectors.drop()  # the model's rows; another model would reload its own
