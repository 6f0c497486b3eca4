"""Moving a user's memory between backends (issue #18): ``export`` then ``import_``.

SQLite -> PostgreSQL -> SQLite gives the same export file, and so does PostgreSQL ->
PostgreSQL; importing into one PostgreSQL user never touches another user's rows. Public API
only: every comparison is between export files, which carry every exported row.

What differs between the exports, and is normalised (nothing else is):

- the header's ``exported_at``: the time of each export;
- the ``meta`` row ``user_id`` (the store's owner), when the SQLite file was opened without a
  ``user_id`` and so records none: a PostgreSQL store is always a user's and records its owner
  at open, so the first import into PostgreSQL adds that row, and it travels on from there.

The other owner and heartbeat fields, ``sessions.owner_pid``, ``owner_host`` and
``heartbeat_at`` of a session still open at export (and ``jobs.owner_*``), are carried
verbatim by ``import_``: the rich store below keeps a session open to show it. Only a later
open of the target may close that session as an orphan of its exporting process (§6), which
is the store's life after the move, not the move.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import ImportFormatError
from tests import pg_server
from tests.api.test_portability import split_lines
from tests.conftest import HashEmbedder, ScriptedLLM

# The owner field: the only one allowed to differ besides exported_at (see the module doc).
OWNER_META_KEYS = ("user_id",)
TRICKY = "Café ☕ — “quoted” back\\slash\tTab line\u2028separator 😀"


def _extract_reply(prompt: str) -> str:
    """The extraction double: entities and relationships for the graph, one fact."""
    found: dict[str, Any] = {"facts": {}, "entities": [], "relationships": []}
    conversation = prompt.split("Conversation", 1)[-1]
    if "Biscuit" in conversation:
        found["facts"]["dog_name"] = "Biscuit"
        found["entities"] += [{"name": "Biscuit", "type": "thing"}]
        found["relationships"] += [{"source": "USER", "relation": "owns", "target": "Biscuit"}]
    if "Seattle" in conversation:
        found["entities"] += [{"name": "Seattle", "type": "place"}]
        found["relationships"] += [
            {"source": "USER", "relation": "lives_in", "target": "Seattle"},
            {"source": "Biscuit", "relation": "lives_in", "target": "Seattle"},
        ]
    if not any(found.values()):
        return "NONE"
    return json.dumps(found)


def build_rich(mem: elastimem.Elastimem) -> None:
    """A user's memory with something in most exported tables, through the public API."""
    mem.begin_session("laptop", at="2025-01-05T10:00:00Z")
    mem.record_turn("Hi, my name is Maya and I live in Portland.", "Nice to meet you, Maya!",
                    at="2025-01-05T10:00:05Z")  # fmt: skip
    mem.record_turn(f"Some tricky text: {TRICKY}", "Noted " + TRICKY, at="2025-01-05T10:01:00Z")
    mem.record_turn("My dog Biscuit loves the beach.", "Biscuit sounds fun.",
                    at="2025-01-05T10:02:00Z")  # fmt: skip
    mem.end_session()
    mem.begin_session(at="2025-02-05T09:30:00Z")
    mem.record_turn("I moved to Seattle last month with Biscuit.", "How is Seattle?",
                    at="2025-02-05T09:30:10Z")  # fmt: skip
    mem.record_turn("I work as a nurse at the clinic.", "That is demanding work.")
    mem.remember("favorite_color", "teal", at="2025-02-05T09:31:00Z")
    mem.remember("favorite_color", "green")
    mem.remember("allergies", "none")
    mem.remember("old_phone", "555-0100")
    mem.forget("old_phone")  # a deletion: the version stays in the history, invalidated
    mem.remember("bad", "unknown", source="auto")  # quarantined
    mem.add_lesson("Ask before booking anything", tag="travel")
    mem.add_lesson("Keep answers short " + TRICKY)
    mem.end_session()
    # A third session left open: its heartbeat belongs to the instance holding it.
    mem.begin_session("phone", at="2025-03-01T08:00:00Z")
    mem.record_turn("Planning a trip to Lisbon in May.", "Lovely, May is a good month.")
    assert mem.drain(30)


def export_text(mem: elastimem.Elastimem) -> str:
    buffer = io.BytesIO()
    mem.export(buffer)
    return buffer.getvalue().decode("utf-8")


def normalised(text: str) -> list[Any]:
    """The export's lines as objects, without ``exported_at`` and the owner row."""
    out: list[Any] = []
    for line in split_lines(text):
        obj = json.loads(line)
        if "format" in obj:
            obj.pop("exported_at")
        elif obj["table"] == "meta" and obj["row"]["key"] in OWNER_META_KEYS:
            continue
        elif obj["table"] == "_end":
            obj.pop("rows")  # counts the owner row
        out.append(obj)
    return out


def differences(one: str, two: str) -> set[tuple[str, str]]:
    """(table, column or meta key) of every field that differs, ignoring nothing."""
    a, b = split_lines(one), split_lines(two)
    found: set[tuple[str, str]] = set()
    rows_a = [json.loads(x) for x in a]
    rows_b = [json.loads(x) for x in b]
    meta_a = {r["row"]["key"]: r["row"]["value"] for r in rows_a if r.get("table") == "meta"}
    meta_b = {r["row"]["key"]: r["row"]["value"] for r in rows_b if r.get("table") == "meta"}
    found |= {("meta", k) for k in set(meta_a) | set(meta_b) if meta_a.get(k) != meta_b.get(k)}
    for head_a, head_b in [(rows_a[0], rows_b[0])]:
        found |= {("header", k) for k in head_a if head_a[k] != head_b.get(k)}
    body_a = [r for r in rows_a[1:] if r.get("table") not in ("meta", "_end")]
    body_b = [r for r in rows_b[1:] if r.get("table") not in ("meta", "_end")]
    assert len(body_a) == len(body_b)
    for ra, rb in zip(body_a, body_b, strict=True):
        assert ra["table"] == rb["table"]
        found |= {(ra["table"], c) for c in ra["row"] if ra["row"][c] != rb["row"].get(c)}
    return found


def open_pg(url: str, user: str, **kw: Any) -> elastimem.Elastimem:
    return elastimem.open(url, user_id=user, disable_builtin_embedder=True, **kw)


def open_sqlite(path: Path, **kw: Any) -> elastimem.Elastimem:
    return elastimem.open(str(path), disable_builtin_embedder=True, **kw)


@pytest.fixture
def source(tmp_path: Path) -> str:
    """The export of a rich SQLite store (no owner recorded), made and closed."""
    llm = ScriptedLLM({"extract": _extract_reply})
    mem = open_sqlite(tmp_path / "source.db", embedder=HashEmbedder(), llm=llm,
                      tier_override="full")  # fmt: skip
    try:
        build_rich(mem)
        stats = mem.stats()
        assert stats["graph_nodes"] >= 2 and stats["graph_edges"] >= 2, stats
        assert stats["embedded_chunks"] == stats["chunks"] > 0
        assert stats["quarantine"] >= 1 and stats["lessons"] == 2
        assert stats["open_sessions"] == 1
        return export_text(mem)
    finally:
        mem.close()


def imported(mem: elastimem.Elastimem, text: str) -> str:
    """Import ``text`` into ``mem`` (closed afterwards) and return the store's export."""
    try:
        mem.import_(io.BytesIO(text.encode("utf-8")))
        return export_text(mem)
    finally:
        mem.close()


def test_sqlite_to_postgres_to_sqlite_round_trip(
    source: str, postgres_url: str, tmp_path: Path
) -> None:
    rows = [json.loads(x) for x in split_lines(source)[1:-1]]
    tables = {r["table"] for r in rows}
    for table in ("sessions", "messages", "chunks", "facts", "fact_vectors", "fact_reviews",
                  "lessons", "quarantine", "graph_nodes", "graph_edges",
                  "graph_mentions"):  # fmt: skip
        assert table in tables, table
    still_open = [r["row"] for r in rows if r["table"] == "sessions" and not r["row"]["ended_at"]]
    assert len(still_open) == 1 and still_open[0]["owner_pid"] and still_open[0]["heartbeat_at"]

    in_postgres = imported(open_pg(postgres_url, "maya"), source)
    back = imported(open_sqlite(tmp_path / "back.db"), in_postgres)
    assert normalised(in_postgres) == normalised(source)
    assert normalised(back) == normalised(in_postgres)
    # Exactly the owner row differs between SQLite's first export and the later ones: the
    # PostgreSQL store is maya's, and says so from then on (the SQLite file now too).
    assert differences(source, in_postgres) == {("header", "exported_at"), ("meta", "user_id")}
    assert differences(in_postgres, back) == {("header", "exported_at")}
    assert {"table": "meta", "row": {"key": "user_id", "value": "maya"}} in [
        json.loads(x) for x in split_lines(back)
    ]

    # The restored stores work: keyword and vector recall, history, the graph.
    for mem in (
        open_pg(postgres_url, "maya", embedder=HashEmbedder()),
        open_sqlite(tmp_path / "back.db", embedder=HashEmbedder(), user_id="maya"),
    ):
        try:
            hits = mem.recall("Seattle", kinds=["chunk"])
            assert hits and "Seattle" in hits[0].text
            assert any("Café" in h.text for h in mem.recall("café"))
            breakdown = mem.explain("nurse clinic").chunk_breakdowns
            assert breakdown and max(b.vector for b in breakdown) > 0
            assert [f.value for f in mem.fact_history("favorite_color")] == ["teal", "green"]
            assert "old_phone" not in mem.facts()
            assert mem.stats()["graph_edges"] >= 2
        finally:
            mem.close()


def second_database(server: pg_server.PgServer) -> str:
    """Another database of the same server, with the schema, as the application role."""
    import psycopg

    from elastimem.storage.postgres import migrations

    admin_url = server.create_database()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the second test database")
    return server.app_url(admin_url)


def test_postgres_to_postgres_round_trip(
    source: str, postgres_url: str, postgres_server: pg_server.PgServer
) -> None:
    first = imported(open_pg(postgres_url, "nadia"), source)
    # The same user moved to another database: identical.
    moved = imported(open_pg(second_database(postgres_server), "nadia"), first)
    assert normalised(moved) == normalised(first)
    assert differences(first, moved) == {("header", "exported_at")}
    # Another user of the same database, from the owner-less SQLite export: the same rows
    # under its own owner, beside nadia's rows with the same ids.
    omar = imported(open_pg(postgres_url, "omar"), source)
    assert normalised(omar) == normalised(first)
    assert differences(first, omar) == {("header", "exported_at"), ("meta", "user_id")}
    # nadia's export (it names its owner) into another user: refused, as on SQLite (§5.16),
    # and the target is left as it was.
    other = open_pg(postgres_url, "pia")
    try:
        before = normalised(export_text(other))
        with pytest.raises(ImportFormatError, match="belongs to user 'nadia'"):
            other.import_(io.BytesIO(first.encode("utf-8")))
        assert normalised(export_text(other)) == before
    finally:
        other.close()


def test_an_import_into_one_user_never_touches_another(source: str, postgres_url: str) -> None:
    """Two users in one database hold rows with the same ids after importing the same file;
    importing, failing an import and erasing in one leaves the other's export unchanged."""
    first = imported(open_pg(postgres_url, "quinn"), source)
    reference = normalised(first)

    def quinn() -> list[Any]:
        mem = open_pg(postgres_url, "quinn")
        try:
            return normalised(export_text(mem))
        finally:
            mem.close()

    # A second user imports the same rows (same ids): both stores stay whole.
    rosa_export = imported(open_pg(postgres_url, "rosa"), source)
    assert normalised(rosa_export) == reference
    assert quinn() == reference
    # A damaged import into a third user fails half-way and rolls back, touching no one.
    lines = split_lines(source)
    damaged = "".join(lines[: len(lines) // 2]) + '{"table":"facts","row":{"id":"x"}}\n'
    sam = open_pg(postgres_url, "sam")
    try:
        with pytest.raises(ImportFormatError):
            sam.import_(io.BytesIO(damaged.encode("utf-8")))
        assert sam.stats()["sessions"] == 0
    finally:
        sam.close()
    assert quinn() == reference
    # Writing after the import (new ids above the imported ones) and erasing a session and
    # a key in one user leave the other's copy of the same ids as it was.
    rosa = open_pg(postgres_url, "rosa", embedder=HashEmbedder())
    try:
        rosa.begin_session(at="2025-04-01T12:00:00Z")
        rosa.record_turn("We adopted a cat called Miso.", "Welcome, Miso!")
        assert rosa.remember("cat_name", "Miso") == (True, "stored")
        rosa.remember("favorite_color", "plum")
        rosa.end_session()
        assert rosa.drain(30)
        assert rosa.facts()["favorite_color"] == "plum"
        assert "adopted a cat" in rosa.recall("Miso", kinds=["chunk"])[0].text
        assert rosa.erase(session_id=1, include_facts=True)["sessions"] == 1
        assert rosa.erase(key="favorite_color")["facts"] == 3
    finally:
        rosa.close()
    assert quinn() == reference
