"""The jobs family's interface: the durable job queue.

Code above ``storage`` calls these methods on ``tx.jobs``; each backend implements them
(``storage.sqlite.jobs.SqliteJobRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.

Data model: one row per job (kind, state ``queued``/``held``/``running``/``failed``, phase,
session, JSON payload, priority, owner process ``(pid, host)``, attempts, retry time
``not_before``, lease end ``lease_until``). The rules (priorities, leases, retry delays,
adoption of dead owners) live in ``runtime.queue``; the family stores and finds rows.
``claim`` is the unit a second backend makes safe between processes (PostgreSQL: ``SELECT
... FOR UPDATE SKIP LOCKED`` then the update, in the caller's transaction; SQLite: the
write transaction already excludes other writers).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol


def load_payload(text: object) -> dict[str, Any]:
    """A job's payload; ``{}`` when it is not a JSON object."""
    try:
        value = json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


class JobOwner(Protocol):
    """The process a job belongs to (``memory.episodic.Owner``)."""

    @property
    def pid(self) -> int: ...

    @property
    def host(self) -> str: ...


@dataclass(frozen=True)
class Job:
    """One claimed job, as the worker runs it (an unreadable payload reads as ``{}``)."""

    id: int
    kind: str
    phase: str
    session_id: int | None
    attempts: int
    payload: dict[str, Any] = field(default_factory=dict)


class JobRows(Protocol):
    """The durable job queue."""

    def add(
        self,
        kind: str,
        owner: JobOwner,
        *,
        state: str,
        phase: str,
        session_id: int | None,
        payload: dict[str, Any],
        priority: int,
        now: str,
    ) -> int:
        """The id of a new job with these values (no attempts, no lease)."""
        ...

    def has_pending(self, kind: str, owner: JobOwner) -> bool:
        """Whether ``owner`` has a ``queued`` or ``running`` job of ``kind``."""
        ...

    def has_queued(self, kind: str, owner: JobOwner) -> bool:
        """Whether ``owner`` has a ``queued`` job of ``kind``."""
        ...

    def claim(
        self, owner: JobOwner, skip_kinds: Collection[str], *, now: str, lease_until: str
    ) -> Job | None:
        """The next runnable job, taken: ``queued``, past its ``not_before``, owned by
        ``owner`` or by nobody, not of ``skip_kinds``, lowest ``(priority, id)`` first; it is
        now ``running`` under ``owner`` until ``lease_until``. None when there is none."""
        ...

    def delete(self, job_id: int) -> None:
        """Remove one job (done)."""
        ...

    def set_state(self, job_id: int, state: str, *, now: str) -> None:
        """Move one job to ``state`` and drop its lease."""
        ...

    def attempts(self, job_id: int) -> int | None:
        """The attempts counted so far for one job; None when it is gone."""
        ...

    def mark_failed(
        self, job_id: int, attempts: int, error: str, *, now: str, failed_kept: int
    ) -> None:
        """Mark one job ``failed`` with its attempts and error, keeping only the newest
        ``failed_kept`` failed jobs."""
        ...

    def retry_later(
        self, job_id: int, attempts: int, error: str, *, not_before: str, now: str
    ) -> None:
        """Put one job back to ``queued`` with its attempts and error, runnable from
        ``not_before``."""
        ...

    def held_extracts(self, session_id: int) -> list[tuple[int, dict[str, Any]]]:
        """``(id, payload)`` of a session's ``held`` extract jobs, oldest first."""
        ...

    def delete_many(self, job_ids: Collection[int]) -> None:
        """Remove these jobs."""
        ...

    def count_held_extracts(self, session_id: int) -> int:
        """The number of a session's ``held`` extract jobs."""
        ...

    def sessions_with_held_extracts(self, owner: JobOwner) -> list[int]:
        """The sessions for which ``owner`` holds extract jobs (any order)."""
        ...

    def set_payload(self, job_id: int, payload: dict[str, Any], *, now: str) -> None:
        """Replace one job's payload."""
        ...

    def latest_queued(self, kind: str, session_id: int) -> tuple[int, dict[str, Any]] | None:
        """``(id, payload)`` of the newest ``queued`` job of ``kind`` for a session, or None."""
        ...

    def requeue_running(self, owner: JobOwner, keep: Collection[int], *, now: str) -> None:
        """Put ``owner``'s ``running`` jobs back to ``queued``, except ``keep``."""
        ...

    def requeue_expired(self, *, now: str) -> int:
        """Put every ``running`` job whose lease ended (or that has none) back to ``queued``;
        the number moved."""
        ...

    def unfinished_owners(self) -> list[tuple[int, int | None, str | None, str | None]]:
        """``(id, owner pid, owner host, updated_at)`` of every queued, held or running job."""
        ...

    def adopt(self, job_id: int, owner: JobOwner, *, now: str) -> None:
        """Give one job to ``owner``; a ``running`` one goes back to ``queued``."""
        ...

    def touch_owned(self, owner: JobOwner, *, now: str, older_than: str) -> None:
        """Set ``updated_at`` to ``now`` on ``owner``'s jobs last updated before
        ``older_than`` (the owner is alive)."""
        ...

    def release_owner(self, owner: JobOwner, keep: Collection[int]) -> None:
        """``owner``'s unfinished jobs, except ``keep``, lose their owner and lease (a
        ``running`` one goes back to ``queued``)."""
        ...

    def count_owned(self, owner: JobOwner, states: Collection[str]) -> int:
        """The number of ``owner``'s jobs in any of ``states``."""
        ...

    def count_runnable(self, owner: JobOwner, *, now: str) -> int:
        """``owner``'s ``running`` jobs plus its ``queued`` ones past their ``not_before``."""
        ...

    # -- for the facade (session end) -------------------------------------------------------

    def count_unfinished(self, job_ids: list[int]) -> int:
        """How many of ``job_ids`` are still queued or running (0 for an empty list)."""
        ...
