"""PostgreSQL implementation of ``storage.graph.GraphRows``: one user's nodes, edges, aliases,
mentions and clusters.

The tables are SQLite's (``schema``) with ``user_id`` in every key: ``graph_nodes`` unique by
(user, type, canonical name), ``aliases`` a JSON list; ``graph_edges`` unique by (user, source,
target, relationship); ``graph_mentions`` (node → chunk); ``graph_merge_reviews``. The
schema's triggers give ``meta['graph.stamp']`` a new value on any change the graph leg reads.

Id lists are bound as one array (``= ANY(%s)``), whatever their length. The "stamped" reads
are several statements where SQLite unions rows of mixed types: they are one snapshot in a
read (REPEATABLE READ) and in a write (the user's writers are serialised). The phrase search
of ``mention_chunks_naming`` uses the chunks' postings (``chunk_terms``) and the tokenizer of
``terms``, so it matches what FTS5's phrase query matches on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import StoreError
from ..graph import SELF_NODE_NAME, GraphNode, GraphRows, dump_aliases, load_aliases
from ..meta import FACTS_STAMP_KEY, GRAPH_STAMP_KEY
from .sql import limit as _limit
from .terms import holds_phrase, token_lists

_NODE_COLUMNS = (
    "id, type, canonical_name, aliases, confidence, mention_count, created_at, updated_at, "
    "cluster_id, cluster_label"
)
# Candidate chunks read per round trip while looking for a phrase.
_PHRASE_PAGE = 200


def _node(row: Sequence[Any]) -> GraphNode:
    return GraphNode(
        int(row[0]), str(row[1]), str(row[2]), load_aliases(row[3]), float(row[4]),
        int(row[5]), str(row[6]), str(row[7]), None if row[8] is None else int(row[8]),
        str(row[9]) if row[9] else None,
    )  # fmt: skip


def _ids(values: Iterable[int]) -> list[int]:
    return [int(v) for v in values]


def _chunk_filter(
    alias: str, exclude_session: int | None, since: str | None, until: str | None
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if exclude_session is not None:
        clauses.append(f"{alias}.session_id <> %s")
        params.append(exclude_session)
    if since is not None:
        clauses.append(f"{alias}.created_at >= %s")
        params.append(since)
    if until is not None:
        clauses.append(f"{alias}.created_at < %s")
        params.append(until)
    return "".join(f" AND {c}" for c in clauses), params


def _read_failed(exc: BaseException) -> StoreError:
    err = StoreError(f"a graph read failed: {exc}")
    err.__cause__ = exc
    return err


class PostgresGraphRows:
    """``GraphRows`` for one user on one psycopg connection (inside the caller's
    transaction). Every statement names the user as well as being confined to it by
    row-level security."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self._conn.execute(sql, (self._user, *params)).fetchall())

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, (self._user, *params)).fetchone()

    def _meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE user_id = %s AND key = %s", (key,))
        return None if row is None else str(row[0])

    # -- stamps and identity ---------------------------------------------------------------

    def store_identity(self) -> tuple[object, ...]:
        # One database holds many users' stores: the user tells them apart, the database
        # (name, server address and port; None over a socket) the servers, and the store's
        # creation time, which has microseconds, a store erased and made again.
        row = self._conn.execute(
            "SELECT current_database(), inet_server_addr()::text, inet_server_port()"
        ).fetchone()
        return ("postgresql", *row, self._user, self._meta("created_at"))

    def names_version(self) -> tuple[tuple[object, ...], str | None]:
        row = self._conn.execute(
            "SELECT (SELECT value FROM meta WHERE user_id = %s AND key = 'graph.gen'), "
            "(SELECT max(id) FROM graph_nodes WHERE user_id = %s), "
            "(SELECT canonical_name FROM graph_nodes WHERE user_id = %s "
            "ORDER BY id DESC LIMIT 1), "
            "(SELECT value FROM meta WHERE user_id = %s AND key = %s)",
            (self._user, self._user, self._user, self._user, GRAPH_STAMP_KEY),
        ).fetchone()
        *names, stamp = row
        return tuple(names), None if stamp is None else str(stamp)

    def facts_stamp(self) -> str | None:
        return self._meta(FACTS_STAMP_KEY)

    # -- nodes -----------------------------------------------------------------------------

    def self_node_id(self) -> int | None:
        row = self._one("SELECT id FROM graph_nodes WHERE user_id = %s AND type = 'self' LIMIT 1")
        return int(row[0]) if row else None

    def ensure_self_node(self) -> int:
        from ...clock import now_ts

        found = self._one(
            "SELECT id FROM graph_nodes WHERE user_id = %s AND type = 'self' "
            "AND canonical_name = %s",
            (SELF_NODE_NAME,),
        )
        if found:
            return int(found[0])
        now = now_ts()
        row = self._one(
            "INSERT INTO graph_nodes (user_id, type, canonical_name, aliases, created_at, "
            "updated_at) VALUES (%s, 'self', %s, '[]', %s, %s) RETURNING id",
            (SELF_NODE_NAME, now, now),
        )
        return int(row[0])

    def has_nodes(self) -> bool:
        return (
            self._one("SELECT 1 FROM graph_nodes WHERE user_id = %s AND type <> 'self' LIMIT 1")
            is not None
        )

    def node(self, node_id: int) -> GraphNode | None:
        row = self._one(
            f"SELECT {_NODE_COLUMNS} FROM graph_nodes WHERE user_id = %s AND id = %s", (node_id,)
        )
        return None if row is None else _node(row)

    def nodes(self, *, with_self: bool = False) -> list[GraphNode]:
        where = "" if with_self else " AND type <> 'self'"
        return [
            _node(r)
            for r in self._rows(
                f"SELECT {_NODE_COLUMNS} FROM graph_nodes WHERE user_id = %s{where} ORDER BY id"
            )
        ]

    def name_rows(self) -> list[tuple[int, str, str, tuple[str, ...], str | None]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]), load_aliases(r[3]), r[4] or None)
            for r in self._rows(
                "SELECT id, type, canonical_name, aliases, cluster_label FROM graph_nodes "
                "WHERE user_id = %s"
            )
        ]

    def node_names(self, node_ids: Sequence[int]) -> dict[int, tuple[str, str | None]]:
        if not node_ids:
            return {}
        return {
            int(r[0]): (str(r[1]), r[2] or None)
            for r in self._rows(
                "SELECT id, canonical_name, cluster_label FROM graph_nodes "
                "WHERE user_id = %s AND id = ANY(%s)",
                (_ids(node_ids),),
            )
        }

    def node_confidences(self, node_ids: Sequence[int]) -> dict[int, float]:
        if not node_ids:
            return {}
        from psycopg import Error

        try:
            rows = self._rows(
                "SELECT id, confidence FROM graph_nodes WHERE user_id = %s AND id = ANY(%s)",
                (_ids(node_ids),),
            )
        except Error as exc:
            raise _read_failed(exc) from exc
        return {int(r[0]): float(r[1]) for r in rows}

    def nodes_named(self, canonical: str) -> list[tuple[int, str, int]]:
        return [
            (int(r[0]), str(r[1]), int(r[2]))
            for r in self._rows(
                "SELECT id, type, mention_count FROM graph_nodes WHERE user_id = %s "
                "AND canonical_name = %s AND type <> 'self' ORDER BY mention_count DESC, id",
                (canonical,),
            )
        ]

    def node_exists(self, node_type: str, canonical: str) -> bool:
        return (
            self._one(
                "SELECT 1 FROM graph_nodes WHERE user_id = %s AND type = %s "
                "AND canonical_name = %s",
                (node_type, canonical),
            )
            is not None
        )

    def aliased_nodes(self) -> list[tuple[int, str, tuple[str, ...], int]]:
        return [
            (int(r[0]), str(r[1]), load_aliases(r[2]), int(r[3]))
            for r in self._rows(
                "SELECT id, type, aliases, mention_count FROM graph_nodes "
                "WHERE user_id = %s AND type <> 'self' AND aliases <> '[]'"
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
        row = self._one(
            "INSERT INTO graph_nodes (user_id, type, canonical_name, aliases, created_at, "
            "updated_at, importance, confidence, mention_count) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1) RETURNING id",
            (node_type, canonical, dump_aliases(aliases), now, now, importance, confidence),
        )
        return int(row[0])

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
        self._conn.execute(
            "UPDATE graph_nodes SET aliases = %s, mention_count = %s, confidence = %s, "
            "importance = %s, updated_at = %s, created_at = COALESCE(%s, created_at) "
            "WHERE user_id = %s AND id = %s",
            (dump_aliases(aliases), mentions, confidence, importance, updated_at, created_at,
             self._user, node_id),
        )  # fmt: skip

    def set_node_type(self, node_id: int, node_type: str) -> None:
        self._conn.execute(
            "UPDATE graph_nodes SET type = %s WHERE user_id = %s AND id = %s",
            (node_type, self._user, node_id),
        )

    def touch_nodes(self, node_ids: Sequence[int], now: str) -> None:
        if node_ids:
            # In id order, as any writer of several rows should lock them.
            self._conn.execute(
                "UPDATE graph_nodes SET updated_at = %s WHERE user_id = %s AND id = ANY(%s) "
                "AND updated_at < %s",
                (now, self._user, sorted(_ids(node_ids)), now),
            )

    def delete_nodes(self, node_ids: Sequence[int]) -> int:
        if not node_ids:
            return 0
        ids = _ids(node_ids)
        self._conn.execute(
            "UPDATE graph_nodes SET cluster_label = NULL WHERE user_id = %s AND cluster_id IN ("
            "SELECT cluster_id FROM graph_nodes WHERE user_id = %s AND id = ANY(%s) "
            "AND cluster_id IS NOT NULL)",
            (self._user, self._user, ids),
        )
        cur = self._conn.execute(
            "DELETE FROM graph_nodes WHERE user_id = %s AND id = ANY(%s)", (self._user, ids)
        )
        return int(cur.rowcount)

    def node_count(self) -> int:
        row = self._one("SELECT count(*) FROM graph_nodes WHERE user_id = %s AND type <> 'self'")
        return int(row[0])

    def weakest_nodes(self, count: int) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT id FROM graph_nodes WHERE user_id = %s AND type <> 'self' "
                "ORDER BY importance, mention_count, updated_at, id LIMIT %s",
                (_limit(count),),
            )
        ]

    def node_ages(self) -> list[tuple[int, float, str]]:
        return [
            (int(r[0]), float(r[1]), str(r[2]))
            for r in self._rows(
                "SELECT id, confidence, updated_at FROM graph_nodes "
                "WHERE user_id = %s AND type <> 'self'"
            )
        ]

    def entities_with_typed_twin(self) -> list[tuple[int, int | None]]:
        return [
            (int(r[0]), None if r[1] is None else int(r[1]))
            for r in self._rows(
                "SELECT e.id, (SELECT s.id FROM graph_nodes s WHERE s.user_id = e.user_id "
                "AND s.canonical_name = e.canonical_name AND s.type NOT IN ('entity', 'self') "
                "ORDER BY s.mention_count DESC, s.id LIMIT 1) "
                "FROM graph_nodes e WHERE e.user_id = %s AND e.type = 'entity' ORDER BY e.id"
            )
        ]

    # -- edges -----------------------------------------------------------------------------

    def edge_count(self) -> int:
        return int(self._one("SELECT count(*) FROM graph_edges WHERE user_id = %s")[0])

    def edge(self, source: int, target: int, relationship: str) -> tuple[int, float, int] | None:
        row = self._one(
            "SELECT id, confidence, seen_count FROM graph_edges WHERE user_id = %s "
            "AND source_node = %s AND target_node = %s AND relationship = %s",
            (source, target, relationship),
        )
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
        row = self._one(
            "INSERT INTO graph_edges (user_id, source_node, target_node, relationship, "
            "confidence, importance, weight, created_at, last_seen, seen_count, "
            "source_chunk_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1, %s) RETURNING id",
            (source, target, relationship, confidence, importance, weight, now, now, chunk_id),
        )
        return int(row[0])

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
        self._conn.execute(
            "UPDATE graph_edges SET seen_count = %s, confidence = %s, importance = %s, "
            "weight = %s, last_seen = %s, created_at = COALESCE(%s, created_at), "
            "source_chunk_id = COALESCE(source_chunk_id, %s) WHERE user_id = %s AND id = %s",
            (seen, confidence, importance, weight, last_seen, created_at, chunk_id, self._user,
             edge_id),
        )  # fmt: skip

    def edge_tallies(
        self, edge_ids: Sequence[int]
    ) -> dict[int, tuple[float, int, str, str, int | None]]:
        if not edge_ids:
            return {}
        return {
            int(r[0]): (
                float(r[1]),
                int(r[2]),
                str(r[3]),
                str(r[4]),
                None if r[5] is None else int(r[5]),
            )  # fmt: skip
            for r in self._rows(
                "SELECT id, confidence, seen_count, last_seen, created_at, source_chunk_id "
                "FROM graph_edges WHERE user_id = %s AND id = ANY(%s)",
                (_ids(edge_ids),),
            )
        }

    def edges_touching(self, node_id: int) -> list[tuple[int, int, int, str]]:
        return [
            (int(r[0]), int(r[1]), int(r[2]), str(r[3]))
            for r in self._rows(
                "SELECT id, source_node, target_node, relationship FROM graph_edges "
                "WHERE user_id = %s AND (source_node = %s OR target_node = %s) ORDER BY id",
                (node_id, node_id),
            )
        ]

    def other_edge(self, source: int, target: int, relationship: str, edge_id: int) -> int | None:
        row = self._one(
            "SELECT id FROM graph_edges WHERE user_id = %s AND source_node = %s "
            "AND target_node = %s AND relationship = %s AND id <> %s",
            (source, target, relationship, edge_id),
        )
        return None if row is None else int(row[0])

    def repoint_edge(self, edge_id: int, source: int, target: int) -> None:
        self._conn.execute(
            "UPDATE graph_edges SET source_node = %s, target_node = %s "
            "WHERE user_id = %s AND id = %s",
            (source, target, self._user, edge_id),
        )

    def delete_edges(self, edge_ids: Sequence[int]) -> int:
        if not edge_ids:
            return 0
        cur = self._conn.execute(
            "DELETE FROM graph_edges WHERE user_id = %s AND id = ANY(%s)",
            (self._user, _ids(edge_ids)),
        )
        return int(cur.rowcount)

    def delete_weakest_edges(self, count: int) -> int:
        cur = self._conn.execute(
            "DELETE FROM graph_edges WHERE user_id = %s AND id IN (SELECT id FROM graph_edges "
            "WHERE user_id = %s ORDER BY importance, seen_count, last_seen, id LIMIT %s)",
            (self._user, self._user, _limit(count)),
        )
        return int(cur.rowcount)

    def edge_ages(self) -> list[tuple[int, float, str]]:
        return [
            (int(r[0]), float(r[1]), str(r[2]))
            for r in self._rows(
                "SELECT id, confidence, last_seen FROM graph_edges WHERE user_id = %s"
            )
        ]

    def edges(self) -> list[tuple[int, int, int, str, float]]:
        return [
            (int(r[0]), int(r[1]), int(r[2]), str(r[3]), float(r[4]))
            for r in self._rows(
                "SELECT id, source_node, target_node, relationship, weight FROM graph_edges "
                "WHERE user_id = %s ORDER BY id"
            )
        ]

    def edges_between_others(self) -> list[tuple[int, int]]:
        return [
            (int(r[0]), int(r[1]))
            for r in self._rows(
                "SELECT e.source_node, e.target_node FROM graph_edges e "
                "JOIN graph_nodes s ON s.user_id = e.user_id AND s.id = e.source_node "
                "JOIN graph_nodes t ON t.user_id = e.user_id AND t.id = e.target_node "
                "WHERE e.user_id = %s AND s.type <> 'self' AND t.type <> 'self'"
            )
        ]

    def walk(
        self, seeds: Sequence[int], hops: int, self_id: int, hop_factor: float
    ) -> list[tuple[int, float, int]]:
        # As on SQLite: UNION for deep walks (a node reached twice the same way is expanded
        # once, so cycles cannot multiply the rows), UNION ALL for the usual ≤ 2 hops; the
        # per-node max/min and the top cut happen in the caller.
        compound = "UNION ALL" if hops <= 2 else "UNION"
        sql = (
            "WITH RECURSIVE walk(id, depth, strength) AS ("
            " SELECT id, 0, confidence FROM graph_nodes"
            "  WHERE user_id = %(user)s AND id = ANY(%(seeds)s) AND id <> %(me)s"
            f" {compound}"
            " SELECT CASE WHEN e.source_node = w.id THEN e.target_node ELSE e.source_node END,"
            "  w.depth + 1, w.strength * %(factor)s * e.weight"
            " FROM walk w JOIN graph_edges e ON e.user_id = %(user)s"
            "  AND (e.source_node = w.id OR e.target_node = w.id)"
            " WHERE w.depth < %(hops)s AND e.source_node <> %(me)s AND e.target_node <> %(me)s"
            ") SELECT id, strength, depth FROM walk"
        )
        from psycopg import Error

        params = {
            "user": self._user,
            "seeds": _ids(seeds),
            "me": self_id,
            "factor": float(hop_factor),
            "hops": int(hops),
        }
        try:
            rows = self._conn.execute(sql, params).fetchall()
        except Error as exc:
            raise _read_failed(exc) from exc
        return [(int(r[0]), float(r[1]), int(r[2])) for r in rows]

    def stamped_neighbourhoods(
        self, node_ids: Sequence[int], self_id: int
    ) -> Iterator[tuple[int, Any, Any, Any]]:
        ids = _ids(node_ids)
        return self._stamped(
            (
                "SELECT 1, id, confidence, NULL::double precision FROM graph_nodes "
                "WHERE user_id = %(user)s AND id = ANY(%(ids)s)"
                " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
                " WHERE user_id = %(user)s AND source_node = ANY(%(ids)s)"
                " AND source_node <> %(me)s AND target_node <> %(me)s"
                " UNION ALL SELECT 2, target_node, source_node, weight FROM graph_edges"
                " WHERE user_id = %(user)s AND target_node = ANY(%(ids)s)"
                " AND source_node <> %(me)s AND target_node <> %(me)s"
            ),
            {"user": self._user, "ids": ids, "me": self_id},
        )

    def stamped_graph(self, self_id: int) -> Iterator[tuple[int, Any, Any, Any]]:
        return self._stamped(
            (
                "SELECT 1, id, confidence, NULL::double precision FROM graph_nodes "
                "WHERE user_id = %(user)s"
                " UNION ALL SELECT 2, source_node, target_node, weight FROM graph_edges"
                " WHERE user_id = %(user)s AND source_node <> %(me)s AND target_node <> %(me)s"
            ),
            {"user": self._user, "me": self_id},
        )

    def _stamped(self, sql: str, params: dict[str, Any]) -> Iterator[tuple[int, Any, Any, Any]]:
        # The stamp is text and the rows are numbers, which one UNION cannot carry: two
        # statements of the same snapshot. Node rows carry (1, id, confidence, None) — the
        # confidence a float in the third place, as SQLite gives it.
        from psycopg import Error

        try:
            stamp = self._meta(GRAPH_STAMP_KEY)
            if stamp is not None:
                yield (0, stamp, None, None)
            # Iterating the cursor makes each row's tuple as it is handed on (the result
            # itself is already client-side: nothing is left open on the server).
            for kind, first, second, weight in self._conn.execute(sql, params):
                if kind == 1:
                    yield (1, int(first), float(second), None)
                else:
                    yield (2, int(first), int(second), float(weight))
        except Error as exc:
            raise _read_failed(exc) from exc

    # -- mentions --------------------------------------------------------------------------

    def stamped_mentions(self, node_ids: Sequence[int]) -> tuple[str | None, list[tuple[int, int]]]:
        if not node_ids:
            return None, []  # as on SQLite, which reads the stamp with the mentions
        stamp = self._meta(GRAPH_STAMP_KEY)
        if stamp is None:
            return None, []
        pairs = [
            (int(r[0]), int(r[1]))
            for r in self._rows(
                "SELECT node_id, chunk_id FROM graph_mentions WHERE user_id = %s "
                "AND node_id = ANY(%s)",
                (_ids(node_ids),),
            )
        ]
        return stamp, pairs

    def mentions_among(
        self, chunk_ids: Sequence[int], node_ids: Sequence[int]
    ) -> list[tuple[int, int]]:
        if not chunk_ids or not node_ids:
            return []
        return [
            (int(r[0]), int(r[1]))
            for r in self._rows(
                "SELECT chunk_id, node_id FROM graph_mentions WHERE user_id = %s "
                "AND chunk_id = ANY(%s) AND node_id = ANY(%s)",
                (_ids(chunk_ids), _ids(node_ids)),
            )
        ]

    def newest_mentioned_chunks(
        self,
        node_ids: Sequence[int],
        limit: int,
        *,
        exclude_session: int | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> list[int]:
        if not node_ids:
            return []
        where, params = _chunk_filter("c", exclude_session, since, until)
        join = " JOIN chunks c ON c.user_id = m.user_id AND c.id = m.chunk_id" if where else ""
        return [
            int(r[0])
            for r in self._rows(
                f"SELECT DISTINCT m.chunk_id FROM graph_mentions m{join} "
                f"WHERE m.user_id = %s AND m.node_id = ANY(%s){where} "
                "ORDER BY m.chunk_id DESC LIMIT %s",
                (_ids(node_ids), *params, _limit(limit)),
            )
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
        nodes: list[int] = []
        strengths: list[float] = []
        for strength, members in levels:
            for node_id in members:
                nodes.append(int(node_id))
                strengths.append(float(strength))
        if not nodes:
            return []
        where, params = _chunk_filter("c", exclude_session, since, until)
        join = " JOIN chunks c ON c.user_id = m.user_id AND c.id = m.chunk_id" if where else ""
        rows = self._conn.execute(
            "SELECT m.chunk_id, max(r.s) AS g FROM unnest(%s::bigint[], %s::double precision[]) "
            f"AS r(node_id, s) JOIN graph_mentions m ON m.user_id = %s AND m.node_id = r.node_id"
            f"{join} WHERE true{where} GROUP BY m.chunk_id ORDER BY g DESC, m.chunk_id DESC "
            "LIMIT %s",
            (nodes, strengths, self._user, *params, _limit(limit)),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def add_mentions(self, pairs: Iterable[tuple[int, int]], now: str) -> list[tuple[int, int]]:
        wanted = list(dict.fromkeys((int(n), int(c)) for n, c in pairs))
        if not wanted:
            return []
        added = {
            (int(r[0]), int(r[1]))
            for r in self._rows(
                "INSERT INTO graph_mentions (user_id, node_id, chunk_id, created_at) "
                "SELECT %s, n, c, %s FROM unnest(%s::bigint[], %s::bigint[]) AS p(n, c) "
                "ON CONFLICT DO NOTHING RETURNING node_id, chunk_id",
                (now, [n for n, _c in wanted], [c for _n, c in wanted]),
            )
        }
        return [pair for pair in wanted if pair in added]

    def mention_chunks_naming(self, node_id: int, name: str, now: str, limit: int) -> int:
        # FTS5's phrase query on SQLite: the chunks holding the name's tokens one after the
        # other. The postings give the chunks holding every token; their texts, tokenised
        # alike, say which hold them in order. Newest first, ``limit`` of them.
        from psycopg import Error

        (phrase,) = token_lists([name])
        if not phrase or limit == 0:
            return 0
        # A savepoint: the caller logs a failed search and goes on writing, which a failed
        # statement would otherwise forbid for the rest of the transaction.
        self._conn.execute("SAVEPOINT em_phrase")
        try:
            added = self._link_phrase(node_id, phrase, now, _limit(limit))
        except Error as exc:
            self._conn.execute("ROLLBACK TO SAVEPOINT em_phrase")
            self._conn.execute("RELEASE SAVEPOINT em_phrase")
            raise _read_failed(exc) from exc
        self._conn.execute("RELEASE SAVEPOINT em_phrase")
        return added

    def _link_phrase(self, node_id: int, phrase: list[str], now: str, wanted: int | None) -> int:
        distinct = sorted(set(phrase))
        matched: list[int] = []
        last: tuple[str, int] | None = None
        while wanted is None or len(matched) < wanted:
            after = "" if last is None else " AND (c.created_at, c.id) < (%s, %s)"
            rows = self._rows(
                "SELECT c.id, c.text, c.created_at FROM chunks c WHERE c.user_id = %s "
                "AND c.id IN (SELECT t.chunk_id FROM chunk_terms t WHERE t.user_id = %s "
                "AND t.term = ANY(%s) GROUP BY t.chunk_id "
                f"HAVING count(*) = %s){after} ORDER BY c.created_at DESC, c.id DESC LIMIT %s",
                (self._user, distinct, len(distinct), *(last or ()), _PHRASE_PAGE),
            )
            if not rows:
                break
            if len(phrase) == 1:
                matched.extend(int(r[0]) for r in rows)
            else:
                texts = token_lists([str(r[1]) for r in rows])
                matched.extend(int(r[0]) for r, tokens in zip(rows, texts, strict=True)
                               if holds_phrase(tokens, phrase))  # fmt: skip
            if len(rows) < _PHRASE_PAGE:
                break
            last = (str(rows[-1][2]), int(rows[-1][0]))
        if wanted is not None:
            matched = matched[:wanted]
        if not matched:
            return 0
        cur = self._conn.execute(
            "INSERT INTO graph_mentions (user_id, node_id, chunk_id, created_at) "
            "SELECT %s, %s, c, %s FROM unnest(%s::bigint[]) AS c ON CONFLICT DO NOTHING",
            (self._user, node_id, now, matched),
        )
        return int(cur.rowcount)

    def move_mentions(self, from_node: int, to_node: int) -> None:
        self._conn.execute(
            "INSERT INTO graph_mentions (user_id, node_id, chunk_id, created_at) "
            "SELECT user_id, %s, chunk_id, created_at FROM graph_mentions "
            "WHERE user_id = %s AND node_id = %s ON CONFLICT DO NOTHING",
            (to_node, self._user, from_node),
        )

    def chunk_texts(self, chunk_ids: Sequence[int]) -> list[tuple[int, str]]:
        if not chunk_ids:
            return []
        return [
            (int(r[0]), str(r[1]))
            for r in self._rows(
                "SELECT id, text FROM chunks WHERE user_id = %s AND id = ANY(%s)",
                (_ids(chunk_ids),),
            )
        ]

    # -- merges and clusters ---------------------------------------------------------------

    def merge_reviews(self) -> list[tuple[str, str]]:
        return [
            (str(r[0]), str(r[1]))
            for r in self._rows(
                "SELECT name_a, name_b FROM graph_merge_reviews WHERE user_id = %s ORDER BY id"
            )
        ]

    def record_merge_review(
        self, type_a: str, name_a: str, type_b: str, name_b: str, verdict: str, now: str
    ) -> None:
        self._conn.execute(
            "INSERT INTO graph_merge_reviews (user_id, type_a, name_a, type_b, name_b, "
            "verdict, reviewed_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (self._user, type_a, name_a, type_b, name_b, verdict, now),
        )

    def cluster_assignments(self) -> dict[int, tuple[int | None, str | None]]:
        return {
            int(r[0]): (None if r[1] is None else int(r[1]), r[2])
            for r in self._rows(
                "SELECT id, cluster_id, cluster_label FROM graph_nodes WHERE user_id = %s "
                "AND (cluster_id IS NOT NULL OR cluster_label IS NOT NULL)"
            )
        }

    def set_clusters(self, changes: Iterable[tuple[int, int | None, str | None]]) -> None:
        rows = [(cluster_id, label, self._user, node_id) for node_id, cluster_id, label in changes]
        if rows:
            with self._conn.cursor() as cur:
                cur.executemany(
                    "UPDATE graph_nodes SET cluster_id = %s, cluster_label = %s "
                    "WHERE user_id = %s AND id = %s",
                    rows,
                )

    def unlabelled_cluster_members(self) -> list[tuple[int, int, str, int]]:
        return [
            (int(r[0]), int(r[1]), str(r[2]), int(r[3]))
            for r in self._rows(
                "SELECT cluster_id, id, canonical_name, mention_count FROM graph_nodes "
                "WHERE user_id = %s AND cluster_id IS NOT NULL AND type <> 'self' "
                "AND cluster_id IN (SELECT cluster_id FROM graph_nodes WHERE user_id = %s "
                "AND cluster_id IS NOT NULL GROUP BY cluster_id "
                "HAVING bool_and(cluster_label IS NULL))",
                (self._user,),
            )
        ]

    def cluster_members(self, cluster_id: int) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT id FROM graph_nodes WHERE user_id = %s AND cluster_id = %s ORDER BY id",
                (cluster_id,),
            )
        ]

    def set_cluster_label(self, cluster_id: int, label: str) -> None:
        self._conn.execute(
            "UPDATE graph_nodes SET cluster_label = %s WHERE user_id = %s AND cluster_id = %s",
            (label, self._user, cluster_id),
        )

    def clustered_names(self) -> list[tuple[int, str | None, str]]:
        return [
            (int(r[0]), r[1] or None, str(r[2]))
            for r in self._rows(
                "SELECT cluster_id, cluster_label, canonical_name FROM graph_nodes "
                "WHERE user_id = %s AND cluster_id IS NOT NULL AND type <> 'self'"
            )
        ]

    # -- facts, as the graph reads them ----------------------------------------------------

    def newest_fact(self) -> tuple[int, str, str] | None:
        row = self._one(
            "SELECT id, key, value FROM facts WHERE user_id = %s ORDER BY id DESC LIMIT 1"
        )
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def fact_text(self, fact_id: int) -> tuple[int, str, str] | None:
        row = self._one(
            "SELECT id, key, value FROM facts WHERE user_id = %s AND id = %s", (fact_id,)
        )
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def fact_texts_after(self, fact_id: int) -> list[tuple[int, str, str]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._rows(
                "SELECT id, key, value FROM facts WHERE user_id = %s AND id > %s ORDER BY id",
                (fact_id,),
            )
        ]

    def fact_texts(self, fact_ids: Sequence[int]) -> list[tuple[int, str, str]]:
        if not fact_ids:
            return []
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in self._rows(
                "SELECT id, key, value FROM facts WHERE user_id = %s AND id = ANY(%s)",
                (_ids(fact_ids),),
            )
        ]

    def all_fact_texts(self) -> list[tuple[int, str, str, bool]]:
        return [
            (int(r[0]), str(r[1]), str(r[2]), bool(r[3]))
            for r in self._rows(
                "SELECT id, key, value, invalidated_at IS NULL FROM facts WHERE user_id = %s "
                "ORDER BY id"
            )
        ]

    def current_fact_ids(self) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT id FROM facts WHERE user_id = %s AND invalidated_at IS NULL"
            )
        ]

    def live_fact_ids(self) -> list[int]:
        return [
            int(r[0])
            for r in self._rows(
                "SELECT id FROM facts WHERE user_id = %s AND invalidated_at IS NULL "
                "AND archived = 0"
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
        # Two statements of one snapshot (a read) or of the user's only writer (a write).
        newest = self.newest_fact() if with_newest else None
        if not fact_ids:
            return newest, []
        where = ""
        params: list[object] = []
        if since is not None:
            where += " AND valid_from >= %s"
            params.append(since)
        if until is not None:
            where += " AND valid_from < %s"
            params.append(until)
        found = [
            int(r[0])
            for r in self._rows(
                "SELECT id FROM facts WHERE user_id = %s AND id = ANY(%s) "
                f"AND invalidated_at IS NULL AND archived = 0{where}",
                (_ids(fact_ids), *params),
            )
        ]
        return newest, found


if TYPE_CHECKING:  # mypy proves the class implements the interface

    def _implements(conn: Any) -> GraphRows:
        return PostgresGraphRows(conn, "user")
