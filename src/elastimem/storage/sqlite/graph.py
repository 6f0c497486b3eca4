"""SQLite implementation of ``storage.graph.GraphRows``: nodes, edges, aliases, mentions and
clusters.

Data model (schema v7): ``graph_nodes`` (unique by type and canonical name; ``aliases`` a JSON
list), ``graph_edges`` (unique by source, target and relationship; deleting a node cascades
to its edges and mentions), ``graph_mentions`` (node → chunk provenance) and
``graph_merge_reviews``. Triggers give ``meta['graph.stamp']`` a new value on any change the
query-time graph leg reads; ``meta['facts.stamp']`` does the same for facts.

Id lists are bound padded to a power of two (see ``_padded``) and cut into batches of
``PARAM_BATCH`` so statements stay in sqlite3's statement cache and under SQLite's bound
parameter limit; callers pass plain lists of any length.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ...errors import StoreError
from ..graph import GraphNode, dump_aliases, load_aliases
from ..meta import FACTS_STAMP_KEY, GRAPH_STAMP_KEY
from . import connection
from .migrations import ensure_self_node

PARAM_BATCH = 500

_NODE_COLUMNS = (
    "id, type, canonical_name, aliases, confidence, mention_count, created_at, updated_at, "
    "cluster_id, cluster_label"
)
# Each is one b-tree probe: a count(*) would read the whole table on every query (measured:
# ~0.5 ms at 2,000 nodes once chunk reads have evicted its pages).
_NAMES_VERSION_COLUMNS = (
    "(SELECT value FROM meta WHERE key = 'graph.gen'), (SELECT max(id) FROM graph_nodes), "
    "(SELECT canonical_name FROM graph_nodes ORDER BY id DESC LIMIT 1)"
)
_STAMP_COLUMN = f"(SELECT value FROM meta WHERE key = '{GRAPH_STAMP_KEY}')"
# The newest fact row, marked 0 to tell it from the candidates (marked 1) it is read with.
_NEWEST_FACT_ROW = "SELECT 0, id, key, value FROM facts WHERE id = (SELECT max(id) FROM facts)"
_NEWEST_FACT_COLUMNS = (
    "(SELECT max(id) FROM facts), (SELECT key FROM facts ORDER BY id DESC LIMIT 1), "
    "(SELECT value FROM facts ORDER BY id DESC LIMIT 1)"
)


def _padded(ids: Sequence[int]) -> list[int]:
    """``ids`` with the last one repeated up to the next power of two (at least 8).

    An ``IN (?, ?, …)`` list is a new statement for every length, and preparing one costs
    about half of running it (46 vs 101 µs for 64 chunk ids); padded lengths keep a handful
    of prepared statements reusable in sqlite3's statement cache. A repeated id changes
    nothing in an ``IN`` list.
    """
    size = max(8, 1 << (len(ids) - 1).bit_length())
    return [*ids, *[ids[-1]] * (size - len(ids))] if ids else []


def _marks(ids: Sequence[int]) -> str:
    """The placeholders for ``_padded(ids)``."""
    return ",".join("?" * max(8, 1 << (len(ids) - 1).bit_length()))


def _batches(seq: Sequence[Any], size: int = PARAM_BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _node(row: Sequence[Any]) -> GraphNode:
    return GraphNode(
        int(row[0]), str(row[1]), str(row[2]), load_aliases(row[3]), float(row[4]),
        int(row[5]), str(row[6]), str(row[7]), None if row[8] is None else int(row[8]),
        str(row[9]) if row[9] else None,
    )  # fmt: skip


def _chunk_filter(
    alias: str, exclude_session: int | None, since: str | None, until: str | None
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if exclude_session is not None:
        clauses.append(f"{alias}.session_id <> ?")
        params.append(exclude_session)
    if since is not None:
        clauses.append(f"{alias}.created_at >= ?")
        params.append(since)
    if until is not None:
        clauses.append(f"{alias}.created_at < ?")
        params.append(until)
    return "".join(f" AND {c}" for c in clauses), params


def _read_failed(exc: BaseException) -> StoreError:
    err = StoreError(f"a graph read failed: {exc}")
    err.__cause__ = exc
    return err


class SqliteGraphRows:
    """``GraphRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- stamps and identity ---------------------------------------------------------------

    def store_identity(self) -> tuple[object, ...]:
        # In-memory stores all report "" as their file and are told apart by their creation
        # time, which has microseconds.
        try:
            files = [
                str(r[2]) for r in self._conn.execute("PRAGMA database_list") if r[1] == "main"
            ]
        except connection.ERRORS:
            files = []
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
        return (files[0] if files else None, row[0] if row else None)

    def names_version(self) -> tuple[tuple[object, ...], str | None]:
        *names, stamp = self._conn.execute(
            f"SELECT {_NAMES_VERSION_COLUMNS}, {_STAMP_COLUMN}"
        ).fetchone()
        return tuple(names), None if stamp is None else str(stamp)

    def facts_stamp(self) -> str | None:
        row = self._conn.execute(
            "SELECT value FROM meta WHERE key = ?", (FACTS_STAMP_KEY,)
        ).fetchone()
        return None if row is None else str(row[0])

    # -- nodes -----------------------------------------------------------------------------

    def self_node_id(self) -> int | None:
        row = self._conn.execute(
            "SELECT id FROM graph_nodes WHERE type = 'self' LIMIT 1"
        ).fetchone()
        return int(row[0]) if row else None

    def ensure_self_node(self) -> int:
        return ensure_self_node(self._conn)

    def has_nodes(self) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM graph_nodes WHERE type <> 'self' LIMIT 1"
        ).fetchone()
        return row is not None

    def node(self, node_id: int) -> GraphNode | None:
        row = self._conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM graph_nodes WHERE id = ?", (node_id,)
        ).fetchone()
        return None if row is None else _node(row)

    def nodes(self, *, with_self: bool = False) -> list[GraphNode]:
        where = "" if with_self else " WHERE type <> 'self'"
        return [
            _node(r)
            for r in self._conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM graph_nodes{where} ORDER BY id"
            )
        ]

    def name_rows(self) -> list[tuple[int, str, str, tuple[str, ...], str | None]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]), load_aliases(r[3]), r[4] or None)
            for r in self._conn.execute(
                "SELECT id, type, canonical_name, aliases, cluster_label FROM graph_nodes"
            )
        ]

    def node_names(self, node_ids: Sequence[int]) -> dict[int, tuple[str, str | None]]:
        out: dict[int, tuple[str, str | None]] = {}
        for part in _batches(list(node_ids)):
            marks = ",".join("?" * len(part))
            for r in self._conn.execute(
                f"SELECT id, canonical_name, cluster_label FROM graph_nodes WHERE id IN ({marks})",
                list(part),
            ):
                out[int(r[0])] = (str(r[1]), r[2] or None)
        return out

    def node_confidences(self, node_ids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        try:
            for part in _batches(list(node_ids)):
                marks = ",".join("?" * len(part))
                out.update(
                    self._conn.execute(
                        f"SELECT id, confidence FROM graph_nodes WHERE id IN ({marks})", list(part)
                    )
                )
        except connection.ERRORS as exc:
            raise _read_failed(exc) from exc
        return out

    def nodes_named(self, canonical: str) -> list[tuple[int, str, int]]:
        return [
            (int(r[0]), str(r[1]), int(r[2]))
            for r in self._conn.execute(
                "SELECT id, type, mention_count FROM graph_nodes WHERE canonical_name = ? "
                "AND type <> 'self' ORDER BY mention_count DESC, id",
                (canonical,),
            )
        ]

    def node_exists(self, node_type: str, canonical: str) -> bool:
        return (
            self._conn.execute(
                "SELECT 1 FROM graph_nodes WHERE type = ? AND canonical_name = ?",
                (node_type, canonical),
            ).fetchone()
            is not None
        )

    def aliased_nodes(self) -> list[tuple[int, str, tuple[str, ...], int]]:
        return [
            (int(r[0]), str(r[1]), load_aliases(r[2]), int(r[3]))
            for r in self._conn.execute(
                "SELECT id, type, aliases, mention_count FROM graph_nodes "
                "WHERE type <> 'self' AND aliases <> '[]'"
            )
        ]

    def insert_node(
        self,
        node_type: str,
        canonical: str,
        aliases: Sequence[str],
        *,
        now: str,
        importance: float,
        confidence: float,
    ) -> int:
        cur = self._conn.execute(
            "INSERT INTO graph_nodes (type, canonical_name, aliases, created_at, updated_at, "
            "importance, confidence, mention_count) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
            (node_type, canonical, dump_aliases(aliases), now, now, importance, confidence),
        )
        return int(cur.lastrowid or 0)

    def update_node(
        self,
        node_id: int,
        *,
        aliases: Sequence[str],
        mentions: int,
        confidence: float,
        importance: float,
        updated_at: str,
        created_at: str | None = None,
    ) -> None:
        if created_at is None:
            self._conn.execute(
                "UPDATE graph_nodes SET updated_at = ?, mention_count = ?, confidence = ?, "
                "importance = ?, aliases = ? WHERE id = ?",
                (updated_at, mentions, confidence, importance, dump_aliases(aliases), node_id),
            )
            return
        self._conn.execute(
            "UPDATE graph_nodes SET aliases = ?, mention_count = ?, confidence = ?, "
            "importance = ?, updated_at = ?, created_at = ? WHERE id = ?",
            (dump_aliases(aliases), mentions, confidence, importance, updated_at, created_at,
             node_id),
        )  # fmt: skip

    def set_node_type(self, node_id: int, node_type: str) -> None:
        self._conn.execute("UPDATE graph_nodes SET type = ? WHERE id = ?", (node_type, node_id))

    def touch_nodes(self, node_ids: Sequence[int], now: str) -> None:
        for part in _batches(sorted(node_ids)):
            self._conn.execute(
                f"UPDATE graph_nodes SET updated_at = ? WHERE id IN ({','.join('?' * len(part))}) "
                "AND updated_at < ?",
                (now, *part, now),
            )

    def delete_nodes(self, node_ids: Sequence[int]) -> int:
        deleted = 0
        for part in _batches(list(node_ids)):
            marks = ",".join("?" * len(part))
            self._conn.execute(
                "UPDATE graph_nodes SET cluster_label = NULL WHERE cluster_id IN (SELECT "
                f"cluster_id FROM graph_nodes WHERE id IN ({marks}) AND cluster_id IS NOT NULL)",
                list(part),
            )
            deleted += self._conn.execute(
                f"DELETE FROM graph_nodes WHERE id IN ({marks})", list(part)
            ).rowcount
        return deleted

    def node_count(self) -> int:
        return int(
            self._conn.execute("SELECT count(*) FROM graph_nodes WHERE type <> 'self'").fetchone()[
                0
            ]
        )

    def weakest_nodes(self, count: int) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT id FROM graph_nodes WHERE type <> 'self' "
                "ORDER BY importance, mention_count, updated_at, id LIMIT ?",
                (count,),
            )
        ]

    def node_ages(self) -> list[tuple[int, float, str]]:
        return [
            (int(r[0]), float(r[1]), str(r[2]))
            for r in self._conn.execute(
                "SELECT id, confidence, updated_at FROM graph_nodes WHERE type <> 'self'"
            )
        ]

    def entities_with_typed_twin(self) -> list[tuple[int, int | None]]:
        return [
            (int(r[0]), None if r[1] is None else int(r[1]))
            for r in self._conn.execute(
                "SELECT e.id, (SELECT s.id FROM graph_nodes s "
                "WHERE s.canonical_name = e.canonical_name AND s.type NOT IN ('entity', 'self') "
                "ORDER BY s.mention_count DESC, s.id LIMIT 1) "
                "FROM graph_nodes e WHERE e.type = 'entity' ORDER BY e.id"
            )
        ]

    # -- edges -----------------------------------------------------------------------------

    def edge_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM graph_edges").fetchone()[0])

    def edge(self, source: int, target: int, relationship: str) -> tuple[int, float, int] | None:
        row = self._conn.execute(
            "SELECT id, confidence, seen_count FROM graph_edges WHERE source_node = ? "
            "AND target_node = ? AND relationship = ?",
            (source, target, relationship),
        ).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), int(row[2]))

    def insert_edge(
        self,
        source: int,
        target: int,
        relationship: str,
        *,
        confidence: float,
        importance: float,
        weight: float,
        now: str,
        chunk_id: int | None,
    ) -> int:
        cur = self._conn.execute(
            "INSERT INTO graph_edges (source_node, target_node, relationship, confidence, "
            "importance, weight, created_at, last_seen, seen_count, source_chunk_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (source, target, relationship, confidence, importance, weight, now, now, chunk_id),
        )
        return int(cur.lastrowid or 0)

    def update_edge(
        self,
        edge_id: int,
        *,
        seen: int,
        confidence: float,
        importance: float,
        weight: float,
        last_seen: str,
        chunk_id: int | None,
        created_at: str | None = None,
    ) -> None:
        if created_at is None:
            self._conn.execute(
                "UPDATE graph_edges SET last_seen = ?, seen_count = ?, confidence = ?, "
                "importance = ?, weight = ?, source_chunk_id = COALESCE(source_chunk_id, ?) "
                "WHERE id = ?",
                (last_seen, seen, confidence, importance, weight, chunk_id, edge_id),
            )
            return
        self._conn.execute(
            "UPDATE graph_edges SET seen_count = ?, confidence = ?, importance = ?, weight = ?, "
            "last_seen = ?, created_at = ?, source_chunk_id = COALESCE(source_chunk_id, ?) "
            "WHERE id = ?",
            (seen, confidence, importance, weight, last_seen, created_at, chunk_id, edge_id),
        )

    def edge_tallies(
        self, edge_ids: Sequence[int]
    ) -> dict[int, tuple[float, int, str, str, int | None]]:
        out: dict[int, tuple[float, int, str, str, int | None]] = {}
        for part in _batches(list(edge_ids)):
            for r in self._conn.execute(
                "SELECT id, confidence, seen_count, last_seen, created_at, source_chunk_id "
                f"FROM graph_edges WHERE id IN ({','.join('?' * len(part))})",
                list(part),
            ):
                out[int(r[0])] = (float(r[1]), int(r[2]), str(r[3]), str(r[4]),
                                  None if r[5] is None else int(r[5]))  # fmt: skip
        return out

    def edges_touching(self, node_id: int) -> list[tuple[int, int, int, str]]:
        return [
            (int(r[0]), int(r[1]), int(r[2]), str(r[3]))
            for r in self._conn.execute(
                "SELECT id, source_node, target_node, relationship FROM graph_edges "
                "WHERE source_node = ? OR target_node = ? ORDER BY id",
                (node_id, node_id),
            ).fetchall()
        ]

    def other_edge(self, source: int, target: int, relationship: str, edge_id: int) -> int | None:
        row = self._conn.execute(
            "SELECT id FROM graph_edges WHERE source_node = ? AND target_node = ? "
            "AND relationship = ? AND id <> ?",
            (source, target, relationship, edge_id),
        ).fetchone()
        return None if row is None else int(row[0])

    def repoint_edge(self, edge_id: int, source: int, target: int) -> None:
        self._conn.execute(
            "UPDATE graph_edges SET source_node = ?, target_node = ? WHERE id = ?",
            (source, target, edge_id),
        )

    def delete_edges(self, edge_ids: Sequence[int]) -> int:
        deleted = 0
        for part in _batches(list(edge_ids)):
            deleted += self._conn.execute(
                f"DELETE FROM graph_edges WHERE id IN ({','.join('?' * len(part))})", list(part)
            ).rowcount
        return deleted

    def delete_weakest_edges(self, count: int) -> int:
        return self._conn.execute(
            "DELETE FROM graph_edges WHERE id IN (SELECT id FROM graph_edges "
            "ORDER BY importance, seen_count, last_seen, id LIMIT ?)",
            (count,),
        ).rowcount

    def edge_ages(self) -> list[tuple[int, float, str]]:
        return [
            (int(r[0]), float(r[1]), str(r[2]))
            for r in self._conn.execute("SELECT id, confidence, last_seen FROM graph_edges")
        ]

    def edges(self) -> list[tuple[int, int, int, str, float]]:
        return [
            (int(r[0]), int(r[1]), int(r[2]), str(r[3]), float(r[4]))
            for r in self._conn.execute(
                "SELECT id, source_node, target_node, relationship, weight FROM graph_edges "
                "ORDER BY id"
            )
        ]

    def edges_between_others(self) -> list[tuple[int, int]]:
        return [
            (int(r[0]), int(r[1]))
            for r in self._conn.execute(
                "SELECT e.source_node, e.target_node FROM graph_edges e "
                "JOIN graph_nodes s ON s.id = e.source_node "
                "JOIN graph_nodes t ON t.id = e.target_node "
                "WHERE s.type <> 'self' AND t.type <> 'self'"
            )
        ]

    def walk(
        self, seeds: Sequence[int], hops: int, self_id: int, hop_factor: float
    ) -> list[tuple[int, float, int]]:
        marks = ",".join("?" * len(seeds))
        # Deep walks use UNION, which drops repeated (node, depth, strength) rows, so a node
        # reached twice the same way is expanded once and cycles cannot multiply the rows. For
        # the ≤ 2 hops every tier asks for, a repeat only repeats a few leaves, and UNION ALL
        # skips the b-tree of seen rows (~15% of the walk). The OR join uses both edge indexes.
        # The per-node max/min and the top cut happen in the caller: GROUP BY, ORDER BY and
        # LIMIT here cost ~0.17 ms of temporary b-trees per query, several times the Python
        # loop over the ~40 rows a 2-hop walk yields (benchmarks/graph_latency.py).
        compound = "UNION ALL" if hops <= 2 else "UNION"
        sql = (
            "WITH RECURSIVE walk(id, depth, strength) AS ("
            f" SELECT id, 0, confidence FROM graph_nodes WHERE id IN ({marks}) AND id <> ?"
            f" {compound}"
            " SELECT CASE WHEN e.source_node = w.id THEN e.target_node ELSE e.source_node END,"
            "  w.depth + 1, w.strength * ? * e.weight"
            " FROM walk w JOIN graph_edges e ON (e.source_node = w.id OR e.target_node = w.id)"
            " WHERE w.depth < ? AND e.source_node <> ? AND e.target_node <> ?"
            ") SELECT id, strength, depth FROM walk"
        )
        try:
            return self._conn.execute(
                sql, (*seeds, self_id, hop_factor, hops, self_id, self_id)
            ).fetchall()
        except connection.ERRORS as exc:
            raise _read_failed(exc) from exc

    def stamped_neighbourhoods(
        self, node_ids: Sequence[int], self_id: int
    ) -> Iterator[tuple[int, Any, Any, Any]]:
        marks, padded, me = _marks(node_ids), _padded(node_ids), self_id
        return self._stamped(
            "SELECT 0, value, NULL, NULL FROM meta WHERE key = ?"
            f" UNION ALL SELECT 1, id, confidence, NULL FROM graph_nodes WHERE id IN ({marks})"
            " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
            f" WHERE source_node IN ({marks}) AND source_node <> ? AND target_node <> ?"
            " UNION ALL SELECT 2, target_node, source_node, weight FROM graph_edges"
            f" WHERE target_node IN ({marks}) AND source_node <> ? AND target_node <> ?",
            (GRAPH_STAMP_KEY, *padded, *padded, me, me, *padded, me, me),
        )

    def stamped_graph(self, self_id: int) -> Iterator[tuple[int, Any, Any, Any]]:
        return self._stamped(
            "SELECT 0, value, NULL, NULL FROM meta WHERE key = ?"
            " UNION ALL SELECT 1, id, confidence, NULL FROM graph_nodes"
            " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
            " WHERE source_node <> ? AND target_node <> ?",
            (GRAPH_STAMP_KEY, self_id, self_id),
        )

    def _stamped(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[int, Any, Any, Any]]:
        # Rows are handed on one by one, not fetched all at once: ~7,000 row tuples alive
        # together set off the garbage collector's full pass (~80 ms in the benchmark).
        try:
            yield from self._conn.execute(sql, params)
        except connection.ERRORS as exc:
            raise _read_failed(exc) from exc

    # -- mentions --------------------------------------------------------------------------

    def stamped_mentions(self, node_ids: Sequence[int]) -> tuple[str | None, list[tuple[int, int]]]:
        stamps: set[object] = set()
        pairs: list[tuple[int, int]] = []
        for part in _batches(list(node_ids)):
            seen = False
            for kind, node_id, chunk_id in self._conn.execute(
                "SELECT 0, value, NULL FROM meta WHERE key = ? UNION ALL"
                " SELECT 1, node_id, chunk_id FROM graph_mentions"
                f" WHERE node_id IN ({_marks(part)})",
                (GRAPH_STAMP_KEY, *_padded(part)),
            ):
                if kind:
                    pairs.append((node_id, chunk_id))
                else:
                    stamps.add(node_id)
                    seen = True
            if not seen:
                return None, []
        if len(stamps) != 1:
            return None, []
        stamp = stamps.pop()
        return None if stamp is None else str(stamp), pairs

    def mentions_among(
        self, chunk_ids: Sequence[int], node_ids: Sequence[int]
    ) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        nodes = list(node_ids)
        if not nodes:
            return out
        for part in _batches(list(chunk_ids)):
            # Only the given nodes' mentions come back: a chunk can mention a dozen entities.
            # The "+" keeps node_id off the index, so SQLite reads each chunk's mentions once
            # and filters them, instead of probing every (chunk, node) pair (soak store, 115
            # chunks x 64 nodes: 0.6 ms against 1.2 ms unfiltered, 3.1 ms probing).
            out.extend(
                self._conn.execute(
                    f"SELECT chunk_id, node_id FROM graph_mentions WHERE chunk_id IN "
                    f"({_marks(part)}) AND +node_id IN ({_marks(nodes)})",
                    (*_padded(part), *_padded(nodes)),
                )
            )
        return out

    def newest_mentioned_chunks(
        self,
        node_ids: Sequence[int],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[int]:
        where, params = _chunk_filter("c", exclude_session, since, until)
        join = " JOIN chunks c ON c.id = m.chunk_id" if where else ""
        marks = ",".join("?" * len(node_ids))
        return [
            int(r[0])
            for r in self._conn.execute(
                f"SELECT DISTINCT m.chunk_id FROM graph_mentions m{join} "
                f"WHERE m.node_id IN ({marks}){where} ORDER BY m.chunk_id DESC LIMIT ?",
                (*node_ids, *params, limit),
            ).fetchall()
        ]

    def strongest_mentioned_chunks(
        self,
        levels: Sequence[tuple[float, Sequence[int]]],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[tuple[int, float]]:
        where, params = _chunk_filter("c", exclude_session, since, until)
        join = " JOIN chunks c ON c.id = m.chunk_id" if where else ""
        pairs: list[object] = []
        for strength, nodes in levels:
            for node_id in nodes:
                pairs += [node_id, strength]
        if not pairs:
            return []
        values = ",".join("(?, ?)" for _ in range(len(pairs) // 2))
        rows = self._conn.execute(
            f"WITH r(node_id, s) AS (VALUES {values}) "
            f"SELECT m.chunk_id, max(r.s) AS g FROM r JOIN graph_mentions m "
            f"ON m.node_id = r.node_id{join} WHERE 1 = 1{where} "
            "GROUP BY m.chunk_id ORDER BY g DESC, m.chunk_id DESC LIMIT ?",
            (*pairs, *params, limit),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def add_mentions(self, pairs: Iterable[tuple[int, int]], now: str) -> list[tuple[int, int]]:
        added: list[tuple[int, int]] = []
        for node_id, chunk_id in pairs:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) "
                "VALUES (?, ?, ?)",
                (node_id, chunk_id, now),
            )
            if cur.rowcount > 0:
                added.append((node_id, chunk_id))
        return added

    def mention_chunks_naming(self, node_id: int, name: str, now: str, limit: int) -> int:
        # An FTS5 phrase query for the name: one quoted string, so no operator can leak
        # through.
        phrase = '"' + name.replace('"', '""') + '"'
        try:
            return self._conn.execute(
                "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) "
                "SELECT ?, id, ? FROM (SELECT c.id AS id FROM chunks_fts "
                "JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ? "
                "ORDER BY c.created_at DESC, c.id DESC LIMIT ?)",
                (node_id, now, phrase, limit),
            ).rowcount
        except connection.ERRORS as exc:
            raise _read_failed(exc) from exc

    def move_mentions(self, from_node: int, to_node: int) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO graph_mentions (node_id, chunk_id, created_at) "
            "SELECT ?, chunk_id, created_at FROM graph_mentions WHERE node_id = ?",
            (to_node, from_node),
        )

    def chunk_texts(self, chunk_ids: Sequence[int]) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for part in _batches(list(chunk_ids)):
            out.extend(
                (int(r[0]), str(r[1]))
                for r in self._conn.execute(
                    f"SELECT id, text FROM chunks WHERE id IN ({','.join('?' * len(part))})",
                    list(part),
                )
            )
        return out

    # -- merges and clusters ---------------------------------------------------------------

    def merge_reviews(self) -> list[tuple[str, str]]:
        return [
            (str(r[0]), str(r[1]))
            for r in self._conn.execute("SELECT name_a, name_b FROM graph_merge_reviews")
        ]

    def record_merge_review(
        self, type_a: str, name_a: str, type_b: str, name_b: str, verdict: str, now: str
    ) -> None:
        self._conn.execute(
            "INSERT OR IGNORE INTO graph_merge_reviews (type_a, name_a, type_b, name_b, "
            "verdict, reviewed_at) VALUES (?, ?, ?, ?, ?, ?)",
            (type_a, name_a, type_b, name_b, verdict, now),
        )

    def cluster_assignments(self) -> dict[int, tuple[int | None, str | None]]:
        return {
            int(r[0]): (None if r[1] is None else int(r[1]), r[2])
            for r in self._conn.execute(
                "SELECT id, cluster_id, cluster_label FROM graph_nodes "
                "WHERE cluster_id IS NOT NULL OR cluster_label IS NOT NULL"
            )
        }

    def set_clusters(self, changes: Iterable[tuple[int, int | None, str | None]]) -> None:
        self._conn.executemany(
            "UPDATE graph_nodes SET cluster_id = ?, cluster_label = ? WHERE id = ?",
            [(cluster_id, label, node_id) for node_id, cluster_id, label in changes],
        )

    def unlabelled_cluster_members(self) -> list[tuple[int, int, str, int]]:
        return [
            (int(r[0]), int(r[1]), str(r[2]), int(r[3]))
            for r in self._conn.execute(
                "SELECT cluster_id, id, canonical_name, mention_count FROM graph_nodes "
                "WHERE cluster_id IS NOT NULL AND type <> 'self' AND cluster_id IN (SELECT "
                "cluster_id FROM graph_nodes WHERE cluster_id IS NOT NULL GROUP BY cluster_id "
                "HAVING max(cluster_label IS NOT NULL) = 0)"
            ).fetchall()
        ]

    def cluster_members(self, cluster_id: int) -> list[int]:
        return sorted(
            int(r[0])
            for r in self._conn.execute(
                "SELECT id FROM graph_nodes WHERE cluster_id = ?", (cluster_id,)
            )
        )

    def set_cluster_label(self, cluster_id: int, label: str) -> None:
        self._conn.execute(
            "UPDATE graph_nodes SET cluster_label = ? WHERE cluster_id = ?", (label, cluster_id)
        )

    def clustered_names(self) -> list[tuple[int, str | None, str]]:
        return [
            (int(r[0]), r[1] or None, str(r[2]))
            for r in self._conn.execute(
                "SELECT cluster_id, cluster_label, canonical_name FROM graph_nodes "
                "WHERE cluster_id IS NOT NULL AND type <> 'self'"
            )
        ]

    # -- facts, as the graph reads them ----------------------------------------------------

    def newest_fact(self) -> tuple[int, str, str] | None:
        top_id, key, value = self._conn.execute(f"SELECT {_NEWEST_FACT_COLUMNS}").fetchone()
        return None if top_id is None else (int(top_id), str(key), str(value))

    def fact_text(self, fact_id: int) -> tuple[int, str, str] | None:
        row = self._conn.execute(
            "SELECT id, key, value FROM facts WHERE id = ?", (fact_id,)
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def fact_texts_after(self, fact_id: int) -> list[tuple[int, str, str]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._conn.execute(
                "SELECT id, key, value FROM facts WHERE id > ? ORDER BY id", (fact_id,)
            )
        ]

    def fact_texts(self, fact_ids: Sequence[int]) -> list[tuple[int, str, str]]:
        out: list[tuple[int, str, str]] = []
        for part in _batches(list(fact_ids)):
            out.extend(
                (int(r[0]), str(r[1]), str(r[2]))
                for r in self._conn.execute(
                    f"SELECT id, key, value FROM facts WHERE id IN ({_marks(part)})", _padded(part)
                )
            )
        return out

    def all_fact_texts(self) -> list[tuple[int, str, str, bool]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]), bool(r[3]))
            for r in self._conn.execute(
                "SELECT id, key, value, invalidated_at IS NULL FROM facts ORDER BY id"
            )
        ]

    def current_fact_ids(self) -> list[int]:
        # Read from the partial index on live keys without touching the table.
        return [
            int(r[0])
            for r in self._conn.execute("SELECT id FROM facts WHERE invalidated_at IS NULL")
        ]

    def live_fact_ids(self) -> list[int]:
        return [
            int(r[0])
            for r in self._conn.execute(
                "SELECT id FROM facts WHERE invalidated_at IS NULL AND archived = 0"
            )
        ]

    def live_facts_among(
        self,
        fact_ids: Sequence[int],
        *,
        since: str | None = None,
        until: str | None = None,
        with_newest: bool = False,
    ) -> tuple[tuple[int, str, str] | None, list[int]]:
        where = " AND f.invalidated_at IS NULL AND f.archived = 0"
        params: list[object] = []
        if since is not None:
            where += " AND f.valid_from >= ?"
            params.append(since)
        if until is not None:
            where += " AND f.valid_from < ?"
            params.append(until)
        newest: tuple[int, str, str] | None = None
        found: list[int] = []
        parts: list[Sequence[int]] = list(_batches(list(fact_ids))) or [()]
        for index, part in enumerate(parts):
            selects, binds = [], []
            if with_newest and index == 0:
                selects.append(_NEWEST_FACT_ROW)
            if part:
                selects.append(
                    f"SELECT 1, f.id, NULL, NULL FROM facts f WHERE f.id IN ({_marks(part)}){where}"
                )
                binds += [*_padded(part), *params]
            if not selects:
                continue
            for candidate, fact_id, key, value in self._conn.execute(
                " UNION ALL ".join(selects), binds
            ):
                if candidate:
                    found.append(int(fact_id))
                else:
                    newest = (int(fact_id), str(key), str(value))
        return newest, found
