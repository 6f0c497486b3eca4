"""The stats family's interface: counts and sizes for stats() and the governor.

Code above ``storage`` calls these methods on ``tx.stats``; each backend implements them
(``storage.sqlite.stats.SqliteStatsRows``). Methods take and return plain values.
"""

from __future__ import annotations

from typing import Protocol

# The keys of ``StatsRows.counts``.
COUNT_KEYS = (
    "facts",
    "fact_versions",
    "archived_facts",
    "sessions",
    "open_sessions",
    "messages",
    "chunks",
    "lessons",
    "quarantine",
    "graph_nodes",
    "graph_edges",
    "jobs_pending",
    "jobs_failed",
)


# The statement of each count, the same on both backends (confined to a user by row-level
# security on PostgreSQL).
COUNT_STATEMENTS = {
    "facts": "SELECT count(*) FROM facts WHERE invalidated_at IS NULL AND archived = 0",
    "fact_versions": "SELECT count(*) FROM facts",
    "archived_facts": "SELECT count(*) FROM facts WHERE archived = 1 AND invalidated_at IS NULL",
    "sessions": "SELECT count(*) FROM sessions",
    "open_sessions": "SELECT count(*) FROM sessions WHERE ended_at IS NULL",
    "messages": "SELECT count(*) FROM messages",
    "chunks": "SELECT count(*) FROM chunks",
    "lessons": "SELECT count(*) FROM lessons WHERE archived = 0",
    "quarantine": "SELECT count(*) FROM quarantine",
    "graph_nodes": "SELECT count(*) FROM graph_nodes WHERE type <> 'self'",
    "graph_edges": "SELECT count(*) FROM graph_edges",
    "jobs_pending": "SELECT count(*) FROM jobs WHERE state IN ('queued', 'held', 'running')",
    "jobs_failed": "SELECT count(*) FROM jobs WHERE state = 'failed'",
}


def like_prefix(prefix: str) -> str:
    """A LIKE pattern for values starting with ``prefix`` (its wildcards taken literally)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class StatsRows(Protocol):
    """Counts and sizes for ``stats()`` and the governor."""

    def counts(self) -> dict[str, int]:
        """The row counts of ``COUNT_KEYS``: live unarchived facts, all fact versions, live
        archived facts, sessions, open sessions, messages, chunks, unarchived lessons,
        quarantine entries, graph nodes (without the user's own), graph edges, unfinished
        jobs (queued, held or running) and failed jobs."""
        ...

    def most_common_vector_model(self, prefix: str = "") -> str | None:
        """The model label (starting with ``prefix``) of the most chunk and fact vectors on
        file; None when there is none."""
        ...

    def has_recorded_embedder(self, prefix: str) -> bool:
        """Whether a vector dimension is recorded for a model label starting with ``prefix``."""
        ...

    def chunk_vectors(self, label: str | None, dim: int | None) -> tuple[int, int]:
        """``(current, stale)`` chunk vectors: of ``label``/``dim``, and of anything else.
        With ``label`` None every vector is stale; with ``dim`` None (a model whose dimension
        is not known yet) both are 0."""
        ...

    def embedded_facts(self, label: str | None, dim: int | None) -> int:
        """Live, unarchived facts with a vector of ``label``/``dim`` (0 if either is None)."""
        ...

    def file_bytes(self) -> int:
        """The bytes the store takes on disk (with any journal files); 0 in memory."""
        ...

    def file_mode(self) -> str | None:
        """The permission bits of the store's file as four octal digits; None in memory."""
        ...
