"""PostgreSQL implementation of ``storage.admin.AdminRows`` (whole-store work for one user:
export/import of rows, erase, whole-store checks) and its ``StoreUpkeep``, which does nothing.

Tables are named by their logical names (those of an export file, the same on both
backends); ``user_id`` and the keyword columns (``term_count``) are this backend's own and
never exported. Every statement names the user as well as being confined to it by row-level
security. An import defers the foreign keys to its commit (they are DEFERRABLE, see
``schema``) and inserts each row under a savepoint, so a refused row is reported and the
transaction stays usable, as on SQLite.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..admin import AdminRows, StoreUpkeep
from ..graph import SELF_NODE_NAME
from .graph import PostgresGraphRows
from .schema import ID_TABLES, PGVECTOR_COLUMN, TABLES, TERM_TOTALS_KEYS, USER_TABLES
from .terms import fact_text, posting_rows, terms_of

# Columns of this backend's own, never exported or imported.
_INTERNAL_COLUMNS = ("user_id", "term_count", PGVECTOR_COLUMN)
# Export order within a table: its primary key after user_id.
_ORDER_BY = {
    "meta": ("key",),
    "graph_mentions": ("node_id", "chunk_id"),
    "fact_vectors": ("fact_id",),
    "ann_index": ("label", "dim"),
}
EXPORT_PAGE = 1000
# table -> the qualified name of its id sequence (the schema's, the same for every user)
_sequences: dict[str, str] = {}
KEYWORD_PAGE = 500
_POSTINGS_TABLES = ("chunk_terms", "fact_terms")  # rebuilt after an import, never imported
# Every foreign key of the imported tables: (table, column, referenced table), in creation
# order.
_REFERENCES: tuple[tuple[str, str, str], ...] = tuple(
    (table, column, parent)
    for table, ddl in TABLES.items()
    if table not in _POSTINGS_TABLES
    for column, parent in re.findall(
        r"FOREIGN KEY \(user_id, (\w+)\) REFERENCES (\w+) \(user_id, id\)", ddl
    )
)


def _table(table: str) -> str:
    if table not in USER_TABLES or table in _POSTINGS_TABLES:
        raise ValueError(f"no table {table!r} to export or import")
    return table


def _quoted(names: Sequence[str]) -> str:
    for name in names:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"no column {name!r}")
    return ", ".join(f'"{n}"' for n in names)


class PostgresAdminRows:
    """``AdminRows`` for one user on one psycopg connection (inside the caller's
    transaction)."""

    __slots__ = ("_conn", "_user")

    def __init__(self, conn: Any, user_id: str) -> None:
        self._conn = conn
        self._user = user_id

    def _all(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._conn.execute(sql, (self._user, *params)).fetchall()]

    def _count(self, sql: str, *params: Any) -> int:
        return int(self._conn.execute(sql, (self._user, *params)).rowcount or 0)

    # -- erase -------------------------------------------------------------------------------

    def quarantined_keys(self) -> list[tuple[int, str]]:
        rows = self._all(
            "SELECT id, key FROM quarantine WHERE user_id = %s AND key IS NOT NULL ORDER BY id"
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    def delete_quarantine(self, ids: Sequence[int]) -> int:
        if not ids:
            return 0
        return self._count(
            "DELETE FROM quarantine WHERE user_id = %s AND id = ANY(%s)", [int(i) for i in ids]
        )

    def erase_fact_key(self, key: str) -> tuple[int, int]:
        ids = [
            int(r[0])
            for r in self._all("SELECT id FROM facts WHERE user_id = %s AND key = %s", key)
        ]
        if not ids:
            return 0, 0
        vectors = int(
            self._all(
                "SELECT count(*) FROM fact_vectors WHERE user_id = %s AND fact_id = ANY(%s)", ids
            )[0][0]
        )  # removed by the cascade below
        self._count(
            "DELETE FROM fact_reviews WHERE user_id = %s AND (old_fact_id = ANY(%s) "
            "OR new_fact_id = ANY(%s) OR result_fact_id = ANY(%s))",
            ids,
            ids,
            ids,
        )
        versions = self._count("DELETE FROM facts WHERE user_id = %s AND key = %s", key)
        return versions, vectors

    def keys_learned_in(self, session_id: int) -> list[str]:
        rows = self._all(
            "SELECT key FROM facts WHERE user_id = %s AND origin_session_id = %s "
            'GROUP BY key ORDER BY key COLLATE "C"',
            session_id,
        )
        return [str(r[0]) for r in rows]

    def session_sizes(self, session_id: int) -> tuple[int, int, int]:
        row = self._conn.execute(
            "SELECT (SELECT count(*) FROM messages WHERE user_id = %(u)s AND session_id = %(s)s), "
            "(SELECT count(*) FROM chunks WHERE user_id = %(u)s AND session_id = %(s)s), "
            "(SELECT count(*) FROM chunks WHERE user_id = %(u)s AND session_id = %(s)s "
            "AND embedding IS NOT NULL)",
            {"u": self._user, "s": session_id},
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def nodes_only_in_session(self, session_id: int) -> list[int]:
        rows = self._conn.execute(
            "SELECT m.node_id FROM graph_mentions m JOIN graph_nodes n "
            "ON n.user_id = m.user_id AND n.id = m.node_id "
            "LEFT JOIN chunks c ON c.user_id = m.user_id AND c.id = m.chunk_id "
            "AND c.session_id = %(s)s "
            "WHERE m.user_id = %(u)s AND n.type <> 'self' GROUP BY m.node_id "
            "HAVING count(c.id) = count(*) ORDER BY m.node_id",
            {"u": self._user, "s": session_id},
        ).fetchall()
        return [int(r[0]) for r in rows]

    def unlink_session_from_graph(self, session_id: int) -> tuple[int, int]:
        in_chunks = "(SELECT id FROM chunks WHERE user_id = %s AND session_id = %s)"
        edges = self._count(
            f"DELETE FROM graph_edges WHERE user_id = %s AND source_chunk_id IN {in_chunks}",
            self._user,
            session_id,
        )
        mentions = self._count(
            f"DELETE FROM graph_mentions WHERE user_id = %s AND chunk_id IN {in_chunks}",
            self._user,
            session_id,
        )
        return edges, mentions

    def unlinked_node(self, node_id: int) -> tuple[str, str] | None:
        rows = self._all(
            "SELECT type, canonical_name FROM graph_nodes n WHERE user_id = %s AND id = %s "
            "AND NOT EXISTS (SELECT 1 FROM graph_edges e WHERE e.user_id = n.user_id "
            "AND (e.source_node = n.id OR e.target_node = n.id))",
            node_id,
        )
        return None if not rows else (str(rows[0][0]), str(rows[0][1]))

    def delete_merge_reviews_naming(self, node_type: str, name: str) -> int:
        return self._count(
            "DELETE FROM graph_merge_reviews WHERE user_id = %s AND ((type_a = %s AND name_a = %s) "
            "OR (type_b = %s AND name_b = %s))",
            node_type,
            name,
            node_type,
            name,
        )

    def delete_session(self, session_id: int) -> tuple[int, int]:
        jobs = self._count("DELETE FROM jobs WHERE user_id = %s AND session_id = %s", session_id)
        # The cascade removes messages, chunks and their keyword postings.
        sessions = self._count("DELETE FROM sessions WHERE user_id = %s AND id = %s", session_id)
        return sessions, jobs

    def drop_ann_snapshot(self) -> None:
        self._count("DELETE FROM ann_index WHERE user_id = %s")

    # -- export ------------------------------------------------------------------------------

    def columns(self, table: str) -> list[tuple[str, bool]]:
        rows = self._conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s "
            "AND NOT (column_name = ANY(%s)) ORDER BY ordinal_position",
            (_table(table), list(_INTERNAL_COLUMNS)),
        ).fetchall()
        return [(str(name), str(kind) == "bytea") for name, kind in rows]

    def main_vector_label(self) -> str | None:
        rows = self._all(
            "SELECT embedding_model FROM chunks WHERE user_id = %s AND embedding IS NOT NULL "
            'GROUP BY embedding_model ORDER BY count(*) DESC, embedding_model COLLATE "C" '
            "LIMIT 1"
        )
        return None if not rows else str(rows[0][0])

    def export_rows(
        self, table: str, columns: Sequence[str], keys: Sequence[str] | None = None
    ) -> Iterator[tuple[Any, ...]]:
        table = _table(table)
        order = _ORDER_BY.get(table, ("id",))
        width = len(order)
        where = "" if keys is None else " AND key = ANY(%s)"
        key_params: tuple[Any, ...] = () if keys is None else (list(keys),)
        # Keyset pages on the primary key, each its own statement: a reader dropped half-way
        # leaves no server-side cursor behind on the pooled connection.
        selected = f"{_quoted(order)}, {_quoted(columns)}" if columns else _quoted(order)
        # Text keys in byte order, as SQLite sorts them.
        keyed = ", ".join(f'"{c}"' + (' COLLATE "C"' if c in ("key", "label") else "")
                          for c in order)  # fmt: skip
        marks = ", ".join(["%s"] * width)
        last: tuple[Any, ...] | None = None
        while True:
            after = "" if last is None else f" AND ({keyed}) > ({marks})"
            if last is not None and width == 1:
                after = f" AND {keyed} > %s"
            rows = self._conn.execute(
                f'SELECT {selected} FROM "{table}" WHERE user_id = %s{where}{after} '
                f"ORDER BY {keyed} LIMIT %s",
                (self._user, *key_params, *(last or ()), EXPORT_PAGE),
            ).fetchall()
            for row in rows:
                yield tuple(row[width:])
            if len(rows) < EXPORT_PAGE:
                return
            last = tuple(rows[-1][:width])

    # -- import ------------------------------------------------------------------------------

    def occupied_table(self) -> str | None:
        for table, where in (
            ("sessions", ""),
            ("facts", ""),
            ("lessons", ""),
            ("quarantine", ""),
            ("graph_nodes", " AND type <> 'self'"),
        ):
            if self._all(f"SELECT 1 FROM {table} WHERE user_id = %s{where} LIMIT 1"):
                return table
        return None

    def has_running_job(self) -> bool:
        return bool(
            self._all("SELECT 1 FROM jobs WHERE user_id = %s AND state = 'running' LIMIT 1")
        )

    def prepare_import(self) -> None:
        self._conn.execute("SET CONSTRAINTS ALL DEFERRED")
        self._count(
            "DELETE FROM graph_nodes WHERE user_id = %s AND type = 'self' AND canonical_name = %s",
            SELF_NODE_NAME,
        )
        for table in ("graph_merge_reviews", "jobs", "ann_index"):
            self._count(f"DELETE FROM {table} WHERE user_id = %s")

    def insert_row(self, table: str, names: Sequence[str], values: Sequence[Any]) -> str | None:
        from psycopg import errors as pg_errors

        table = _table(table)
        names = [n for n in names]
        if any(n in _INTERNAL_COLUMNS for n in names):
            return f"{table} has no importable column named " + ", ".join(
                n for n in names if n in _INTERNAL_COLUMNS
            )
        marks = ", ".join(["%s"] * (len(values) + 1))
        self._conn.execute("SAVEPOINT em_import_row")
        try:
            self._conn.execute(
                f'INSERT INTO "{table}" (user_id, {_quoted(names)}) VALUES ({marks})'
                if names
                else f'INSERT INTO "{table}" (user_id) VALUES (%s)',
                (self._user, *values),
            )
        except (pg_errors.IntegrityError, pg_errors.DataError) as exc:
            self._conn.execute("ROLLBACK TO SAVEPOINT em_import_row")
            self._conn.execute("RELEASE SAVEPOINT em_import_row")
            return str(exc).strip().splitlines()[0]
        except BaseException:
            self._conn.execute("ROLLBACK TO SAVEPOINT em_import_row")
            self._conn.execute("RELEASE SAVEPOINT em_import_row")
            raise
        self._conn.execute("RELEASE SAVEPOINT em_import_row")
        if table in ID_TABLES and "id" in names:
            self._move_sequence_past(table, int(values[list(names).index("id")]))
        return None

    def _move_sequence_past(self, table: str, row_id: int) -> None:
        """Keep ``table``'s id sequence (shared by all users) above an imported id, so ids
        drawn later for this user never meet it. Only this user's ids must stay unique, and
        this user's writers are serialised, so a race with other users' draws is harmless."""
        from psycopg import sql

        name = _sequences.get(table)
        if name is None:
            row = self._conn.execute("SELECT pg_get_serial_sequence(%s, 'id')", (table,))
            name = _sequences[table] = str(row.fetchone()[0])
        self._conn.execute(
            sql.SQL("SELECT setval(%s::regclass, %s) FROM {} WHERE last_value < %s").format(
                sql.SQL(name)
            ),
            (name, row_id, row_id),
        )

    def broken_reference(self) -> tuple[str, int, str] | None:
        for table, column, parent in _REFERENCES:
            key = "id" if table in ID_TABLES else _ORDER_BY.get(table, ("id",))[0]
            rows = self._all(
                f"SELECT t.{key} FROM {table} t WHERE t.user_id = %s AND t.{column} IS NOT NULL "
                f"AND NOT EXISTS (SELECT 1 FROM {parent} p WHERE p.user_id = t.user_id "
                f"AND p.id = t.{column}) ORDER BY t.{key} LIMIT 1"
            )
            if rows:
                return table, int(rows[0][0]), parent
        return None

    def ensure_self_node(self) -> None:
        PostgresGraphRows(self._conn, self._user).ensure_self_node()

    def rebuild_keyword_tables(self) -> None:
        for table, postings, column, text in (
            ("chunks", "chunk_terms", "chunk_id", "text"),
            ("facts", "fact_terms", "fact_id", "key, value"),
        ):
            self._count(f"DELETE FROM {postings} WHERE user_id = %s")
            last = 0
            while True:
                rows = self._all(
                    f"SELECT id, {text} FROM {table} WHERE user_id = %s AND id > %s "
                    "ORDER BY id LIMIT %s",
                    last,
                    KEYWORD_PAGE,
                )
                if not rows:
                    break
                ids = [int(r[0]) for r in rows]
                texts = [str(r[1]) if table == "chunks" else fact_text(r[1], r[2]) for r in rows]
                terms = terms_of(texts)
                self._conn.execute(
                    f"UPDATE {table} t SET term_count = v.n FROM unnest(%s::bigint[], "
                    "%s::integer[]) AS v(id, n) WHERE t.user_id = %s AND t.id = v.id",
                    (ids, [length for _found, length in terms], self._user),
                )
                words, doc_ids, freqs = posting_rows(ids, terms)
                if words:
                    self._conn.execute(
                        f"INSERT INTO {postings} (user_id, term, {column}, tf) "
                        "SELECT %s, * FROM unnest(%s::text[], %s::bigint[], %s::integer[])",
                        (self._user, words, doc_ids, freqs),
                    )
                last = ids[-1]
            # Rewritten postings are a change even where every count came out the same.
            self._count(
                "UPDATE meta SET value = split_part(value, ' ', 1) || ' ' || "
                "split_part(value, ' ', 2) || ' ' || upper(substr(md5(random()::text), 1, 16)) "
                "WHERE user_id = %s AND key = %s",
                TERM_TOTALS_KEYS[table],
            )

    def vector_dims(self) -> list[tuple[str, int]]:
        rows = self._all(
            "SELECT embedding_model, embedding_dim FROM (SELECT embedding_model, embedding_dim "
            "FROM chunks WHERE user_id = %s UNION ALL SELECT embedding_model, embedding_dim "
            "FROM fact_vectors WHERE user_id = %s) v "
            "WHERE embedding_model IS NOT NULL AND embedding_dim IS NOT NULL "
            "GROUP BY embedding_model, embedding_dim ORDER BY count(*) DESC, embedding_dim",
            self._user,
        )
        return [(str(r[0]), int(r[1])) for r in rows]

    # -- whole-store checks ------------------------------------------------------------------

    def has_memories_outside(self, session_ids: Sequence[int]) -> bool:
        other_facts = self._all(
            "SELECT 1 FROM facts WHERE user_id = %s AND (origin_session_id IS NULL "
            "OR NOT (origin_session_id = ANY(%s))) LIMIT 1",
            [int(i) for i in session_ids],
        )
        lessons = self._all("SELECT 1 FROM lessons WHERE user_id = %s LIMIT 1")
        return bool(other_facts) or bool(lessons)


class PostgresUpkeep:
    """``StoreUpkeep`` on PostgreSQL: nothing to do here.

    An erase deletes the user's rows (and with them their keyword postings and vectors), so
    the library can no longer read them. The bytes of deleted rows stay in the server's
    files until VACUUM reuses their space, in the write-ahead log and its archive until they
    are recycled, and in backups and replicas until those expire: a privacy-grade erase is
    the database operator's work (VACUUM the tables, limit WAL and backup retention), which a
    role serving many users cannot and should not do per erase (README, PostgreSQL).
    """

    def __init__(self, database: Any = None) -> None:
        self._database = database

    @contextmanager
    def secure_delete(self) -> Iterator[None]:
        yield

    def purge_erased(self, tables: Collection[str]) -> None:
        """Nothing: the server's files are the operator's (see the class doc)."""


if TYPE_CHECKING:  # mypy proves the classes implement the interfaces

    def _implements(conn: Any) -> AdminRows:
        return PostgresAdminRows(conn, "user")

    def _upkeeps(database: Any) -> StoreUpkeep:
        return PostgresUpkeep(database)
