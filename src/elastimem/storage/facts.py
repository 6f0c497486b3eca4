"""The facts family's interface: fact versions, quarantine and the facts' keyword table.

Code above ``storage`` calls these methods on ``tx.facts``; each backend implements them
(``storage.sqlite.facts.SqliteFactRows``). Methods take and return plain values (ints, strings,
tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.

The versioning rules (when a write replaces, refuses or is quarantined; which version is
older) live in ``memory.semantic``; these are row operations. One rule is the database's: a
key has at most ONE live version (``invalidated_at`` unset). Every backend keeps it as a
constraint (SQLite and PostgreSQL: a unique partial index on the live keys), so it holds
however many processes on however many machines write the same user at once; the caller
relies on it instead of on what it read earlier.

"Live" means not invalidated; archived versions are live too unless a method says "shown"
(live and not archived). "Shown order" is: profile facts first, then importance, valid_from
and id, all descending.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from ..values import Fact

# A live fact as build_context reads it: (id, key, value, category, importance, valid_from).
LiveFactRow = tuple[int, str, str, str, float, str]


# Shown order: profile first, then importance, valid_from and id, all descending.
SHOWN_ORDER = "category = 'profile' DESC, importance DESC, valid_from DESC, id DESC"
SHOWN = "invalidated_at IS NULL AND archived = 0"
FACT_COLUMNS = (
    "id, key, value, category, source, importance, valid_from, invalidated_at, archived, "
    "created_at, invalidated_by, last_accessed_at, access_count"
)
QUARANTINE_KEYS = ("ts", "key", "value", "reason", "source")


def fact_from_row(row: Sequence[Any]) -> Fact:
    """A fact from a row of ``FACT_COLUMNS``."""
    return Fact(
        id=int(row[0]),
        key=str(row[1]),
        value=str(row[2]),
        category=str(row[3]),
        source=str(row[4]),
        importance=float(row[5]),
        valid_from=str(row[6]),
        invalidated_at=row[7],
        archived=bool(row[8]),
        created_at=row[9],
        invalidated_by=row[10],
        last_accessed_at=row[11],
        access_count=int(row[12]),
    )


class LiveVersion(NamedTuple):
    """The live version of one key, as a write compares against it."""

    id: int
    value: str
    valid_from: str


class DecayCandidate(NamedTuple):
    """A shown fact that may decay, with what its decayed weight depends on."""

    id: int
    importance: float
    valid_from: str
    last_accessed_at: str | None
    access_count: int


class Replacement(NamedTuple):
    """A version (``old_id``) and the live version that replaced it (``new_id``)."""

    old_id: int
    new_id: int
    key: str
    old_value: str
    old_valid_from: str
    new_value: str
    new_valid_from: str


class FactRows(Protocol):
    """Fact versions, quarantine and the facts' keyword table."""

    # -- versions -----------------------------------------------------------------------------

    def live_version(self, key: str) -> LiveVersion | None:
        """The key's live version (archived or not), or None. In a write transaction the
        version stays live until the caller's transaction ends (a backend with concurrent
        writers locks the row)."""
        ...

    def insert_version(
        self,
        key: str,
        value: str,
        *,
        category: str,
        source: str,
        importance: float,
        created_at: str,
        valid_from: str,
        origin_session_id: int | None,
    ) -> int:
        """Add a live version of ``key`` and return its id. The key must have no live version
        (end it first with ``invalidate``): a second live version is refused by the database
        constraint with ``StoreError``, so two writers racing on one key never leave two."""
        ...

    def invalidate(self, fact_id: int, at: str) -> None:
        """End this version as of ``at`` (it stops being live)."""
        ...

    def link_successor(self, fact_id: int, successor_id: int) -> None:
        """Record that ``successor_id`` replaced this (ended) version."""
        ...

    def confirm(self, fact_id: int, at: str) -> None:
        """The same value was written again: count an access at ``at`` and unarchive it."""
        ...

    def end_live(self, key: str, at: str) -> bool:
        """End the key's live version as of ``at``; False when it had none."""
        ...

    def end_live_started_by(self, key: str, at: str) -> bool:
        """End the key's live version as of ``at`` only if it became true at or before
        ``at``; False when nothing was ended."""
        ...

    def touch(self, fact_ids: Sequence[int], at: str) -> None:
        """Count one access of each fact at ``at`` (absent ids: no-op)."""
        ...

    def archive(self, fact_ids: Sequence[int]) -> None:
        """Archive these facts (they stay live but are no longer shown)."""
        ...

    # -- reading ------------------------------------------------------------------------------

    def shown_facts(self) -> list[Fact]:
        """Every shown fact (live, unarchived), in shown order."""
        ...

    def shown_rows(self) -> list[LiveFactRow]:
        """``shown_facts`` as (id, key, value, category, importance, valid_from) tuples."""
        ...

    def shown_values(self) -> dict[str, str]:
        """key -> value of every shown fact, in shown order."""
        ...

    def live_values_of(self, keys: Sequence[str]) -> dict[str, str]:
        """key -> live value (archived included) for those of ``keys`` that have one."""
        ...

    def current_ids(self) -> list[int]:
        """The id of every key's live version (archived included), in no order."""
        ...

    def history(self, key: str) -> list[Fact]:
        """Every version of ``key``, oldest first (by valid_from, then id)."""
        ...

    def decay_candidates(self, below_importance: float) -> list[DecayCandidate]:
        """The shown facts whose importance is below ``below_importance``."""
        ...

    def stamp(self) -> str | None:
        """A token that changes (in the same transaction) whenever anything ``shown_rows``
        returns changes, whichever process changes it; accesses leave it alone. None on a
        store that has not set one yet."""
        ...

    # -- merge reviews ------------------------------------------------------------------------

    def unreviewed_replacements(self, since: str, limit: int) -> list[Replacement]:
        """Up to ``limit`` versions ended at or after ``since`` whose successor is still live,
        was not itself a merge, and has no review of the pair yet; oldest ending first (then
        id)."""
        ...

    def record_review(
        self, old_id: int, new_id: int, verdict: str, result_id: int | None, at: str
    ) -> bool:
        """Record the verdict (merged, kept or rejected) on one replacement; False (nothing
        changed) when the pair already has one. One review per pair is a database
        constraint, so concurrent reviewers never record two."""
        ...

    # -- quarantine ---------------------------------------------------------------------------

    def add_quarantine(
        self, *, at: str, key: str | None, value: str | None, reason: str, source: str | None
    ) -> None:
        """Record a refused write."""
        ...

    def trim_quarantine(self, keep: int) -> None:
        """Keep only the newest ``keep`` quarantine entries."""
        ...

    def origin_sessions(self, key: str) -> dict[int, int]:
        """Fact id -> the session it was learned in, for the versions of ``key`` that have one."""
        ...

    def quarantine_page(self, offset: int, n: int) -> list[dict[str, object]]:
        """Quarantine entries, newest first from the ``offset``-th on, as dicts with the keys
        of ``newest_quarantine`` and ``id``."""
        ...

    def quarantine_entry(self, entry_id: int) -> dict[str, object] | None:
        """One entry as ``quarantine_page`` shows it, or None when there is none."""
        ...

    def newest_quarantine(self, n: int) -> list[dict[str, object]]:
        """The ``n`` newest quarantine entries, oldest of them first, as dicts with the keys
        ts, key, value, reason, source."""
        ...

    # -- h15: reads and writes of the query path (retrieval) and the job handlers ----------

    def key_exists(self, key: str) -> bool:
        """Whether any version (live or not) of ``key`` is stored."""
        ...

    def keys_of(self, ids: list[int]) -> list[tuple[int, str, bool]]:
        """``(id, key, is live)`` of those fact versions that exist."""
        ...

    def archived_among(self, ids: list[int]) -> set[int]:
        """Those of ``ids`` that are archived."""
        ...

    def candidate_rows(self, ids: list[int]) -> list[tuple[int, str, str, str, float]]:
        """``(id, key, value, valid_from, importance)`` of those fact versions that exist."""
        ...

    def live_attributes(self, key: str) -> tuple[int, float, str | None, int | None] | None:
        """``(id, importance, category, origin_session_id)`` of the live version of ``key``
        (what a merge inherits), or None."""
        ...
