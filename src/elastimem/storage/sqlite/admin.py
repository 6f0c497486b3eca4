"""SQLite implementation of ``storage.admin.AdminRows``: whole-store work: export/import of
rows, erase, whole-store checks. What an erase does to the file itself is in ``upkeep.py``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from . import connection, migrations

FTS_TABLES = {"chunks": "chunks_fts", "facts": "facts_fts"}
# Export order within a table: its primary key.
_ORDER_BY = {
    "meta": "key",
    "graph_mentions": "node_id, chunk_id",
    "fact_vectors": "fact_id",
    "ann_index": "label, dim",
}


class SqliteAdminRows:
    """``AdminRows`` on one SQLite connection (inside the caller's transaction)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    # -- erase -------------------------------------------------------------------------------

    def quarantined_keys(self) -> list[tuple[int, str]]:
        rows = self._conn.execute(
            "SELECT id, key FROM quarantine WHERE key IS NOT NULL ORDER BY id"
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def delete_quarantine(self, ids: Sequence[int]) -> int:
        removed = 0
        for quarantine_id in ids:
            removed += self._conn.execute(
                "DELETE FROM quarantine WHERE id = ?", (quarantine_id,)
            ).rowcount
        return removed

    def erase_fact_key(self, key: str) -> tuple[int, int]:
        ids = [int(r[0]) for r in self._conn.execute("SELECT id FROM facts WHERE key = ?", (key,))]
        if not ids:
            return 0, 0
        marks = ",".join("?" * len(ids))
        vectors = int(
            self._conn.execute(
                f"SELECT count(*) FROM fact_vectors WHERE fact_id IN ({marks})", ids
            ).fetchone()[0]
        )  # removed by the cascade below
        self._conn.execute(
            f"DELETE FROM fact_reviews WHERE old_fact_id IN ({marks}) "
            f"OR new_fact_id IN ({marks}) OR result_fact_id IN ({marks})",
            (*ids, *ids, *ids),
        )
        versions = self._conn.execute("DELETE FROM facts WHERE key = ?", (key,)).rowcount
        return versions, vectors

    def keys_learned_in(self, session_id: int) -> list[str]:
        rows = self._conn.execute(
            "SELECT DISTINCT key FROM facts WHERE origin_session_id = ? ORDER BY key",
            (session_id,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def session_sizes(self, session_id: int) -> tuple[int, int, int]:
        row = self._conn.execute(
            "SELECT (SELECT count(*) FROM messages WHERE session_id = :s), "
            "(SELECT count(*) FROM chunks WHERE session_id = :s), "
            "(SELECT count(*) FROM chunks WHERE session_id = :s AND embedding IS NOT NULL)",
            {"s": session_id},
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def nodes_only_in_session(self, session_id: int) -> list[int]:
        rows = self._conn.execute(
            "SELECT m.node_id FROM graph_mentions m JOIN graph_nodes n ON n.id = m.node_id "
            "WHERE n.type <> 'self' GROUP BY m.node_id "
            "HAVING sum(m.chunk_id IN (SELECT id FROM chunks WHERE session_id = :s)) = count(*) "
            "ORDER BY m.node_id",
            {"s": session_id},
        ).fetchall()
        return [int(r[0]) for r in rows]

    def unlink_session_from_graph(self, session_id: int) -> tuple[int, int]:
        in_chunks = "(SELECT id FROM chunks WHERE session_id = :s)"
        params = {"s": session_id}
        edges = self._conn.execute(
            f"DELETE FROM graph_edges WHERE source_chunk_id IN {in_chunks}", params
        ).rowcount
        mentions = self._conn.execute(
            f"DELETE FROM graph_mentions WHERE chunk_id IN {in_chunks}", params
        ).rowcount
        return edges, mentions

    def unlinked_node(self, node_id: int) -> tuple[str, str] | None:
        row = self._conn.execute(
            "SELECT type, canonical_name FROM graph_nodes WHERE id = ? AND NOT EXISTS "
            "(SELECT 1 FROM graph_edges WHERE source_node = ? OR target_node = ?)",
            (node_id, node_id, node_id),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def delete_merge_reviews_naming(self, node_type: str, name: str) -> int:
        return self._conn.execute(
            "DELETE FROM graph_merge_reviews WHERE (type_a = ? AND name_a = ?) "
            "OR (type_b = ? AND name_b = ?)",
            (node_type, name, node_type, name),
        ).rowcount

    def delete_session(self, session_id: int) -> tuple[int, int]:
        jobs = self._conn.execute("DELETE FROM jobs WHERE session_id = ?", (session_id,)).rowcount
        # The cascade removes messages and chunks; the chunk triggers remove their FTS rows.
        sessions = self._conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount
        return sessions, jobs

    def drop_ann_snapshot(self) -> None:
        self._conn.execute("DELETE FROM ann_index")

    # -- export ------------------------------------------------------------------------------

    def columns(self, table: str) -> list[tuple[str, bool]]:
        return [
            (str(r[1]), str(r[2]).upper() == "BLOB")
            for r in self._conn.execute(f'PRAGMA table_info("{table}")')
        ]

    def main_vector_label(self) -> str | None:
        row = self._conn.execute(
            "SELECT embedding_model FROM chunks WHERE embedding IS NOT NULL "
            "GROUP BY embedding_model ORDER BY count(*) DESC, embedding_model LIMIT 1"
        ).fetchone()
        return None if row is None else row[0]

    def export_rows(
        self, table: str, columns: Sequence[str], keys: Sequence[str] | None = None
    ) -> Iterator[tuple[Any, ...]]:
        where = ""
        params: tuple[str, ...] = ()
        if keys is not None:
            where = f" WHERE key IN ({','.join('?' * len(keys))})"
            params = tuple(keys)
        order = _ORDER_BY.get(table, "id")
        quoted = ", ".join(f'"{c}"' for c in columns)
        yield from self._conn.execute(
            f'SELECT {quoted} FROM "{table}"{where} ORDER BY {order}', params
        )

    # -- import ------------------------------------------------------------------------------

    def occupied_table(self) -> str | None:
        for table, where in (
            ("sessions", ""),
            ("facts", ""),
            ("lessons", ""),
            ("quarantine", ""),
            ("graph_nodes", " WHERE type <> 'self'"),
        ):
            if self._conn.execute(f"SELECT 1 FROM {table}{where} LIMIT 1").fetchone():
                return table
        return None

    def has_running_job(self) -> bool:
        row = self._conn.execute("SELECT 1 FROM jobs WHERE state = 'running' LIMIT 1").fetchone()
        return row is not None

    def prepare_import(self) -> None:
        self._conn.execute("PRAGMA defer_foreign_keys = ON")
        self._conn.execute(
            "DELETE FROM graph_nodes WHERE type = 'self' AND canonical_name = ?",
            (migrations.SELF_NODE_NAME,),
        )
        self._conn.execute("DELETE FROM graph_merge_reviews")
        self._conn.execute("DELETE FROM jobs")
        self._conn.execute("DELETE FROM ann_index")

    def insert_row(self, table: str, names: Sequence[str], values: Sequence[Any]) -> str | None:
        quoted = ", ".join(f'"{n}"' for n in names)
        try:
            self._conn.execute(
                f'INSERT INTO "{table}" ({quoted}) VALUES ({",".join("?" * len(values))})',
                list(values),
            )
        except connection.INTEGRITY_ERRORS as exc:
            return str(exc)
        return None

    def broken_reference(self) -> tuple[str, int, str] | None:
        row = self._conn.execute("PRAGMA foreign_key_check").fetchone()
        return None if row is None else (str(row[0]), row[1], str(row[2]))

    def ensure_self_node(self) -> None:
        migrations.ensure_self_node(self._conn)

    def rebuild_keyword_tables(self) -> None:
        for table in FTS_TABLES.values():
            self._conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")

    def vector_dims(self) -> list[tuple[str, int]]:
        rows = self._conn.execute(
            "SELECT embedding_model, embedding_dim FROM (SELECT embedding_model, embedding_dim "
            "FROM chunks UNION ALL SELECT embedding_model, embedding_dim FROM fact_vectors) "
            "WHERE embedding_model IS NOT NULL AND embedding_dim IS NOT NULL "
            "GROUP BY embedding_model, embedding_dim ORDER BY count(*) DESC, embedding_dim"
        ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    # -- whole-store checks ------------------------------------------------------------------

    def has_memories_outside(self, session_ids: Sequence[int]) -> bool:
        marks = ",".join("?" * len(session_ids))  # SQLite takes an empty list: NOT IN () is true
        other_facts = self._conn.execute(
            "SELECT 1 FROM facts WHERE origin_session_id IS NULL OR origin_session_id NOT IN "
            f"({marks}) LIMIT 1",
            list(session_ids),
        ).fetchone()
        lessons = self._conn.execute("SELECT 1 FROM lessons LIMIT 1").fetchone()
        return other_facts is not None or lessons is not None
