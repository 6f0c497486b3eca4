"""The admin family's interface: whole-store work: export/import of rows, erase, whole-store
checks; and the upkeep an erase needs outside any transaction.

Code above ``storage`` calls the ``AdminRows`` methods on ``tx.admin``; each backend implements
them (``storage.sqlite.admin.SqliteAdminRows``). Methods take and return plain values (ints,
strings, tuples), never a driver's rows or cursors. Tables are named by their logical names
(``sessions``, ``chunks``, ``facts`` …, the names an export file carries).

``StoreUpkeep`` (from ``upkeep(database)``) is the part of an erase that is about the bytes the
database keeps after rows are deleted: on SQLite, zeroing freed pages, merging keyword index
segments, rewriting the file and truncating the write-ahead log. A server database
(PostgreSQL) leaves that to its operator (autovacuum, backups), so its upkeep does nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class AdminRows(Protocol):
    """Whole-store work: export/import of rows, erase, whole-store checks."""

    # -- erase -------------------------------------------------------------------------------

    def quarantined_keys(self) -> list[tuple[int, str]]:
        """(id, key) of every quarantine entry that names a fact key, in id order."""
        ...

    def delete_quarantine(self, ids: Sequence[int]) -> int:
        """Remove these quarantine entries; returns how many were removed."""
        ...

    def erase_fact_key(self, key: str) -> tuple[int, int]:
        """Remove every version of ``key``, the merge reviews naming any of them and their
        vectors; returns (versions removed, vectors removed)."""
        ...

    def keys_learned_in(self, session_id: int) -> list[str]:
        """The distinct fact keys with a version learned in the session, sorted."""
        ...

    def session_sizes(self, session_id: int) -> tuple[int, int, int]:
        """(messages, chunks, chunks with a vector) of the session."""
        ...

    def nodes_only_in_session(self, session_id: int) -> list[int]:
        """Ids of the graph nodes (never the self node) every mention of which is in a chunk
        of the session, in id order."""
        ...

    def unlink_session_from_graph(self, session_id: int) -> tuple[int, int]:
        """Remove the graph edges drawn from and the mentions found in the session's chunks;
        returns (edges removed, mentions removed)."""
        ...

    def unlinked_node(self, node_id: int) -> tuple[str, str] | None:
        """(type, canonical name) of the node when no edge touches it; None when an edge
        does or the node does not exist."""
        ...

    def delete_merge_reviews_naming(self, node_type: str, name: str) -> int:
        """Remove the node merge verdicts that name this node; returns how many."""
        ...

    def delete_session(self, session_id: int) -> tuple[int, int]:
        """Remove the session with its messages, chunks (and their keyword rows) and its
        jobs; returns (sessions removed: 0 or 1, jobs removed)."""
        ...

    def drop_ann_snapshot(self) -> None:
        """Remove the stored approximate-nearest-neighbour snapshot (a cache, rebuilt later)."""
        ...

    # -- export ------------------------------------------------------------------------------

    def columns(self, table: str) -> list[tuple[str, bool]]:
        """(name, holds bytes) of each column of ``table``, in the table's column order."""
        ...

    def main_vector_label(self) -> str | None:
        """The model label most chunk vectors carry (ties: the smallest label); None when no
        chunk has a vector."""
        ...

    def export_rows(
        self, table: str, columns: Sequence[str], keys: Sequence[str] | None = None
    ) -> Iterator[tuple[Any, ...]]:
        """The values of ``columns`` of every row of ``table`` in a stable order (its primary
        key), streamed; ``keys`` limits the key/value table ``meta`` to those keys."""
        ...

    # -- import ------------------------------------------------------------------------------

    def occupied_table(self) -> str | None:
        """The first of sessions, facts, lessons, quarantine and graph_nodes (the self node
        aside) that holds a row; None when the store holds no memories."""
        ...

    def has_running_job(self) -> bool:
        """Whether a job is being run now."""
        ...

    def prepare_import(self) -> None:
        """Make this empty store ready to take exported rows, ids included: references between
        rows are checked at commit and by ``broken_reference``; the self node, node merge
        verdicts, jobs and the ANN snapshot are removed (the export brings its own)."""
        ...

    def insert_row(self, table: str, names: Sequence[str], values: Sequence[Any]) -> str | None:
        """Insert one exported row as it is; None when stored, else why it was refused (a
        duplicate id, a missing required value…)."""
        ...

    def broken_reference(self) -> tuple[str, int, str] | None:
        """(table, row id, referenced table) of a row that refers to a missing row; None when
        every reference holds."""
        ...

    def ensure_self_node(self) -> None:
        """Create the one self node of the graph when it is missing."""
        ...

    def rebuild_keyword_tables(self) -> None:
        """Rebuild the keyword search tables of chunks and facts from their rows."""
        ...

    def vector_dims(self) -> list[tuple[str, int]]:
        """(model label, dimension) of the stored vectors (chunks' and facts'), the most
        common pair first."""
        ...

    # -- whole-store checks ------------------------------------------------------------------

    def has_memories_outside(self, session_ids: Sequence[int]) -> bool:
        """Whether a fact version was learned outside these sessions (or in none), or any
        lesson is stored."""
        ...


class StoreUpkeep(Protocol):
    """What an erase does to the database's files outside any transaction."""

    def secure_delete(self) -> AbstractContextManager[None]:
        """While entered (the caller holds the database's write lock), deleted rows' bytes are
        overwritten instead of left in free space."""
        ...

    def purge_erased(self, tables: Collection[str]) -> None:
        """After an erase that deleted rows of ``tables`` ("chunks", "facts"): remove the
        erased text from keyword index segments, free space and the write-ahead log (logs a
        warning when part of it cannot be done now)."""
        ...


def upkeep(database: Any) -> StoreUpkeep:
    """The upkeep of ``database`` (one implementation per backend): a database that makes its
    own (``upkeep()``, as the PostgreSQL one does) gives it; otherwise SQLite's."""
    own = getattr(database, "upkeep", None)
    if callable(own):
        made: StoreUpkeep = own()
        return made
    from .sqlite.upkeep import SqliteUpkeep

    return SqliteUpkeep(database)
