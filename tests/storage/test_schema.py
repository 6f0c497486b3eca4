"""Schema and migrations: a fresh store, migrated old layouts and the snapshot agree."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem.clock import TIMESTAMP_PATTERN
from elastimem.errors import SchemaTooNewError
from elastimem.storage.sqlite import migrations
from tests.legacy_layouts import create_legacy_store
from tests.rows import connect, is_postgres

SNAPSHOT = Path(__file__).parents[1] / "data" / "schema_v7.sql"
SNAPSHOT_V6 = Path(__file__).parents[1] / "data" / "schema_v6.sql"
SNAPSHOT_V5 = Path(__file__).parents[1] / "data" / "schema_v5.sql"
GRAPH_TRIGGERS = [
    f"graph_stamp_{part}_{when}"
    for part in ("nodes", "edges", "mentions")
    for when in ("ai", "ad", "au")
]


def normalised_schema(path: Path) -> str:
    """Every schema object's SQL, whitespace-normalised and sorted (FTS shadow tables out)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()
    lines = []
    for kind, name, sql in rows:
        if re.match(r"^(chunks|facts)_fts_(data|idx|docsize|config|content)$", name):
            continue
        lines.append(f"-- {kind} {name}\n" + " ".join(sql.split()) + ";")
    return "\n".join(lines) + "\n"


def open_and_close(path: Path) -> None:
    elastimem.Elastimem(str(path), disable_builtin_embedder=True).close()


def test_fresh_store_matches_the_checked_in_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    open_and_close(path)
    assert normalised_schema(path) == SNAPSHOT.read_text("utf-8")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_migrated_store_has_the_fresh_schema(tmp_path: Path, version: int) -> None:
    fresh = tmp_path / "fresh.db"
    old = create_legacy_store(tmp_path / f"v{version}.db", version)
    open_and_close(fresh)
    open_and_close(old)
    assert normalised_schema(old) == normalised_schema(fresh)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_migration_keeps_data_and_canonicalises_timestamps(tmp_path: Path, version: int) -> None:
    path = create_legacy_store(tmp_path / f"v{version}.db", version)
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"location": "Lisbon"}
        history = mem.fact_history("location")
        assert [f.value for f in history] == ["Porto", "Lisbon"]
        assert history[0].invalidated_by == history[1].id
        for fact in history:
            assert TIMESTAMP_PATTERN.match(fact.valid_from)
        assert mem.lessons() == ["Ask before deleting files"]
        hits = mem.recall("Lisbon")  # FTS rebuilt over the old rows
        assert any(h.kind == "chunk" and "Lisbon" in h.text for h in hits)
        stats = mem.stats()
        assert stats["schema_version"] == migrations.CURRENT_SCHEMA_VERSION == 7
        if version >= 2:
            # The old "user" node was folded into the self node; its edge survived on it.
            assert stats["graph_nodes"] == 1
            assert stats["graph_edges"] == 1
    conn = sqlite3.connect(path)
    try:
        ledger = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        assert ledger == [v for v in (2, 3, 4, 5, 6, 7) if v > version]
        kinds = [r[0] for r in conn.execute("SELECT kind FROM events ORDER BY id")]
        assert kinds.count("migrated") == len(ledger)
        lessons = conn.execute("SELECT created_at, last_used_at FROM lessons").fetchone()
        assert lessons[0] == lessons[1] == "2024-05-01T10:00:00.000000Z"
        self_nodes = conn.execute("SELECT count(*) FROM graph_nodes WHERE type='self'").fetchone()
        assert self_nodes[0] == 1
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def test_fresh_store_records_creation(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    open_and_close(path)
    conn = sqlite3.connect(path)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == "7"
        assert meta["created_by"] == elastimem.__version__
        assert TIMESTAMP_PATTERN.match(meta["created_at"])
        assert conn.execute("SELECT version, name FROM schema_migrations").fetchall() == [
            (7, "initial")
        ]
        assert [r[0] for r in conn.execute("SELECT kind FROM events")][:1] == ["created"]
    finally:
        conn.close()


def test_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    open_and_close(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaTooNewError, match="upgrade elastimem"):
        elastimem.Elastimem(str(path), disable_builtin_embedder=True)
    assert path.read_bytes() == before


def test_a_failing_step_rolls_back_and_names_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = create_legacy_store(tmp_path / "v3.db", 3)

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    monkeypatch.setattr(migrations, "STEPS", ((4, "m004_canonical", broken),))
    with pytest.raises(elastimem.StoreError, match="m004_canonical"):
        elastimem.Elastimem(str(path), disable_builtin_embedder=True)
    conn = sqlite3.connect(path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "half_done" not in names
        assert (
            conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "3"
        )
    finally:
        conn.close()


def test_every_written_timestamp_is_canonical(make_store, llm) -> None:  # type: ignore[no-untyped-def]
    mem = make_store(llm=llm)
    mem.record_turn("My name is Ada and I live in Zürich", "Hello Ada")
    mem.remember("favorite_color", "teal")
    mem.add_lesson("Keep answers short")
    mem.end_session()
    mem.drain()
    with connect(mem) as conn:
        if is_postgres(mem):  # the server's catalog, the same tables and columns
            listed = conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            ).fetchall()
        else:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE '%fts%'"
                )
            ]
            listed = [
                (table, r[1])
                for table in tables
                for r in conn.execute(f'PRAGMA table_info("{table}")')
            ]
        checked = 0
        for table, column in listed:
            if column not in migrations.TIMESTAMP_COLUMNS:
                continue
            for (value,) in conn.execute(
                f'SELECT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL'
            ):
                assert TIMESTAMP_PATTERN.match(value), (table, column, value)
                checked += 1
        assert checked > 0


def test_a_v4_store_gains_the_facts_stamp_triggers(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    old = tmp_path / "v4.db"
    open_and_close(fresh)
    with elastimem.Elastimem(str(old), disable_builtin_embedder=True) as mem:
        mem.remember("location", "Lisbon")
    conn = sqlite3.connect(old)  # back to v4 as an older elastimem left it
    with conn:
        undo_v7(conn)
        for name in ("facts_stamp_ai", "facts_stamp_ad", "facts_stamp_au", *GRAPH_TRIGGERS):
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM meta WHERE key IN ('facts.stamp', 'graph.stamp')")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        conn.execute("UPDATE schema_migrations SET version = 4")
    conn.close()
    with elastimem.Elastimem(str(old), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"location": "Lisbon"}
        mem.remember("location", "Porto")
        assert mem.stats()["schema_version"] == 7
    assert normalised_schema(old) == normalised_schema(fresh)
    conn = sqlite3.connect(old)
    try:
        ledger = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        stamp = conn.execute("SELECT value FROM meta WHERE key = 'facts.stamp'").fetchone()
    finally:
        conn.close()
    assert ledger == [4, 5, 6, 7] and stamp is not None


def undo_v7(conn: sqlite3.Connection) -> None:
    """What v7 added (the fact vectors), gone as in a store of an older elastimem."""
    for name in ("fact_vectors_stamp_ai", "fact_vectors_stamp_ad", "fact_vectors_stamp_au"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE fact_vectors")
    conn.execute("DELETE FROM meta WHERE key = 'fact_vectors.stamp'")


def back_to_v6(path: Path) -> None:
    conn = sqlite3.connect(path)
    with conn:
        undo_v7(conn)
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
        conn.execute("UPDATE schema_migrations SET version = 6")
    conn.close()


def test_a_v6_store_migrates_to_v7_keeps_its_facts_and_embeds_them(
    tmp_path: Path, embedder: Any
) -> None:
    fresh = tmp_path / "fresh.db"
    old = tmp_path / "v6.db"
    open_and_close(fresh)
    with elastimem.Elastimem(str(old), disable_builtin_embedder=True) as mem:
        mem.remember("allergies", "peanuts")
    back_to_v6(old)
    assert normalised_schema(old) == SNAPSHOT_V6.read_text("utf-8")
    with elastimem.Elastimem(str(old), embedder=embedder) as mem:
        assert mem.stats()["schema_version"] == 7
        # The worker's idle backfill embeds the facts stored before v7.
        for _ in range(200):
            if mem.stats()["embedded_facts"] == 1:
                break
            mem.drain(0.1)
        assert mem.stats()["embedded_facts"] == 1
        assert [h.text for h in mem.recall("peanuts allergies", kinds=["fact"])] == [
            "allergies: peanuts"
        ]
    assert normalised_schema(old) == normalised_schema(fresh) == SNAPSHOT.read_text("utf-8")
    conn = sqlite3.connect(old)
    try:
        ledger = conn.execute("SELECT version, name FROM schema_migrations ORDER BY 1").fetchall()
    finally:
        conn.close()
    assert ledger == [(6, "initial"), (7, "m007_fact_vectors")]


def back_to_v5(path: Path) -> None:
    """What an elastimem of schema v5 left: no graph stamp triggers, no stamp."""
    conn = sqlite3.connect(path)
    with conn:
        undo_v7(conn)
        for name in GRAPH_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DELETE FROM meta WHERE key = 'graph.stamp'")
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        conn.execute("UPDATE schema_migrations SET version = 5")
    conn.close()


def test_a_v5_store_migrates_to_v6_and_equals_a_fresh_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    old = tmp_path / "v5.db"
    open_and_close(fresh)
    with elastimem.Elastimem(str(old), disable_builtin_embedder=True) as mem:
        mem.remember("location", "Lisbon")
    back_to_v5(old)
    assert normalised_schema(old) == SNAPSHOT_V5.read_text("utf-8")
    with elastimem.Elastimem(str(old), disable_builtin_embedder=True) as mem:
        assert mem.facts() == {"location": "Lisbon"}
        assert mem.stats()["schema_version"] == 7
    assert normalised_schema(old) == normalised_schema(fresh) == SNAPSHOT.read_text("utf-8")
    conn = sqlite3.connect(old)
    try:
        ledger = conn.execute("SELECT version, name FROM schema_migrations ORDER BY 1").fetchall()
        stamp = conn.execute("SELECT value FROM meta WHERE key = 'graph.stamp'").fetchone()
    finally:
        conn.close()
    assert ledger == [(5, "initial"), (6, "m006_graph_stamp"), (7, "m007_fact_vectors")]
    assert stamp is not None and re.fullmatch(r"[0-9A-F]{16}", stamp[0])


def graph_stamp(conn: sqlite3.Connection) -> str:
    return str(conn.execute("SELECT value FROM meta WHERE key = 'graph.stamp'").fetchone()[0])


def test_the_graph_stamp_changes_with_what_the_graph_leg_reads(tmp_path: Path) -> None:
    path = tmp_path / "stamp.db"
    with elastimem.Elastimem(str(path), disable_builtin_embedder=True) as mem:
        mem.record_turn("Tuffy runs on the Jetson", "Nice robot")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    now = "2025-01-01T00:00:00.000000Z"
    stamps = [graph_stamp(conn)]

    def changed(sql: str, *params: object) -> bool:
        conn.execute(sql, params)
        stamps.append(graph_stamp(conn))
        return stamps[-1] != stamps[-2]

    node = (
        "INSERT INTO graph_nodes (type, canonical_name, created_at, updated_at) VALUES (?, ?, ?, ?)"
    )
    assert changed(node, "thing", "tuffy", now, now)
    assert changed(node, "thing", "jetson", now, now)
    a, b = (r[0] for r in conn.execute("SELECT id FROM graph_nodes WHERE type = 'thing'"))
    chunk = conn.execute("SELECT id FROM chunks").fetchone()[0]
    edge = (
        "INSERT INTO graph_edges (source_node, target_node, relationship, created_at, "
        "last_seen) VALUES (?, ?, 'runs_on', ?, ?)"
    )
    assert changed(edge, a, b, now, now)
    assert changed("INSERT INTO graph_mentions VALUES (?, ?, ?)", a, chunk, now)
    assert changed("UPDATE graph_nodes SET confidence = 0.9 WHERE id = ?", a)
    assert changed("UPDATE graph_edges SET weight = 0.3")
    assert changed(node, "thing", "cuda", now, now)
    c = conn.execute("SELECT max(id) FROM graph_nodes").fetchone()[0]
    assert changed("UPDATE graph_edges SET target_node = ? WHERE source_node = ?", c, a)
    # Bookkeeping the graph leg does not read leaves it alone, and so do reads.
    assert not changed("UPDATE graph_nodes SET updated_at = ?, mention_count = 3", now)
    assert not changed("UPDATE graph_nodes SET cluster_id = 1, cluster_label = 'robots'")
    assert not changed("UPDATE graph_edges SET last_seen = ?, seen_count = 2", now)
    assert not changed("SELECT * FROM graph_nodes JOIN graph_edges JOIN graph_mentions")
    assert changed("DELETE FROM graph_mentions")
    assert changed("DELETE FROM graph_edges")
    assert changed("DELETE FROM graph_nodes WHERE id = ?", b)
    conn.close()
    assert len(set(stamps)) == len(stamps) - 4
