"""ElastimemStore: LangGraph's BaseStore on elastimem, on both backends, with the real langgraph.

Most tests use the host embedder double (HashEmbedder: keyword-like vectors); the test of
meaning uses the real built-in model (marked ``embedder``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402
from langgraph.store.base import InvalidNamespaceError  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

import elastimem  # noqa: E402
from elastimem.integrations.langgraph import ElastimemStore  # noqa: E402
from tests.conftest import HashEmbedder  # noqa: E402
from tests.integrations import backends  # noqa: E402

target, users = backends.target, backends.users  # the fixtures this module uses


@pytest.fixture
def store(target: str) -> Iterator[ElastimemStore]:
    with ElastimemStore(target, embedder=HashEmbedder()) as opened:
        yield opened


def open_user(target: str, user: str) -> elastimem.Elastimem:
    return elastimem.open_user(target, user, embedder=HashEmbedder())


def test_get_returns_exactly_what_was_put_and_a_re_put_keeps_history(
    store: ElastimemStore, users: dict[str, str], target: str
) -> None:
    ns = (users["alice"], "memories")
    value = {"content": "Prefers window seats", "tags": ["travel", 7], "nested": {"x": None}}
    store.put(ns, "seat", value)
    item = store.get(ns, "seat")
    assert item is not None and item.value == value and item.key == "seat"
    assert item.namespace == ns
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    first_created = item.created_at

    store.put(ns, "seat", {"content": "Prefers aisle seats"})
    again = store.get(ns, "seat")
    assert again is not None and again.value == {"content": "Prefers aisle seats"}
    assert again.created_at == first_created and again.updated_at > first_created

    # The earlier value is in elastimem's history of that fact, seen through the plain API.
    with open_user(target, users["alice"]) as mem:
        (fact_key,) = [k for k, v in mem.facts().items() if "aisle" in v]
        versions = [f.value for f in mem.fact_history(fact_key)]
    assert [json.loads(v.rsplit("\n", 1)[1]) for v in versions] == [
        [list(ns), "seat", value], [list(ns), "seat", "content"]
    ]  # fmt: skip
    assert versions[1].startswith("Prefers aisle seats\n")

    store.delete(ns, "seat")
    assert store.get(ns, "seat") is None
    with open_user(target, users["alice"]) as mem:
        assert len(mem.fact_history(fact_key)) == 2  # a delete keeps the history
    store.put(ns, "seat", {"content": "back"})
    reborn = store.get(ns, "seat")
    assert reborn is not None and reborn.created_at > again.updated_at  # a new item


def test_search_prefix_filter_limit_offset_and_isolation(
    store: ElastimemStore, users: dict[str, str]
) -> None:
    alice, bob = users["alice"], users["bob"]
    for i in range(6):
        store.put((alice, "a"), f"k{i}", {"content": f"note {i} about kayaks", "n": i})
    store.put((alice, "b"), "other", {"content": "kayaks in another namespace", "n": 9})
    store.put((bob, "a"), "k0", {"content": "bob also likes kayaks", "n": 0})

    under_a = store.search((alice, "a"), limit=100)
    assert {i.key for i in under_a} == {f"k{i}" for i in range(6)}
    assert all(i.namespace == (alice, "a") for i in under_a)
    assert {i.namespace for i in store.search((alice,), limit=100)} == {(alice, "a"), (alice, "b")}
    assert [i.key for i in store.search((bob,), query="kayaks")] == ["k0"]

    hits = store.search((alice, "a"), query="kayaks", limit=100)
    assert {i.key for i in hits} == {f"k{i}" for i in range(6)}
    assert all(i.score is not None for i in hits)
    assert [i.score for i in hits] == sorted((i.score or 0 for i in hits), reverse=True)

    page1 = store.search((alice, "a"), query="kayaks", limit=3)
    page2 = store.search((alice, "a"), query="kayaks", limit=3, offset=3)
    assert [i.key for i in page1 + page2] == [i.key for i in hits]
    plain1 = store.search((alice, "a"), limit=4)
    plain2 = store.search((alice, "a"), limit=4, offset=4)
    assert len(plain1) == 4 and len(plain2) == 2
    assert {i.key for i in plain1 + plain2} == {f"k{i}" for i in range(6)}

    assert [i.key for i in store.search((alice, "a"), filter={"n": 2})] == ["k2"]
    ranged = store.search((alice,), filter={"n": {"$gte": 4}}, limit=100)
    assert sorted(i.key for i in ranged) == ["k4", "k5", "other"]
    assert store.search((alice, "a"), query="kayaks", filter={"n": {"$ne": 1}}, limit=100)
    assert store.search((alice, "zzz")) == [] and store.search((users["carol"],)) == []


def test_list_namespaces_prefix_suffix_depth(
    store: ElastimemStore, users: dict[str, str], store_backend: str, target: str
) -> None:
    alice, bob = users["alice"], users["bob"]
    store.put((alice, "notes", "v1"), "a", {"x": 1})
    store.put((alice, "notes", "v2"), "b", {"x": 1})
    store.put((alice, "todo"), "c", {"x": 1})
    store.put((bob, "notes", "v1"), "d", {"x": 1})

    assert store.list_namespaces(prefix=(alice,)) == [
        (alice, "notes", "v1"), (alice, "notes", "v2"), (alice, "todo")
    ]  # fmt: skip
    assert store.list_namespaces(prefix=(alice,), max_depth=2) == [
        (alice, "notes"), (alice, "todo")
    ]  # fmt: skip
    assert store.list_namespaces(prefix=(alice,), suffix=("v1",)) == [(alice, "notes", "v1")]
    assert store.list_namespaces(prefix=(alice, "*", "v2")) == [(alice, "notes", "v2")]
    assert store.list_namespaces(prefix=(alice,), limit=1, offset=1) == [(alice, "notes", "v2")]
    assert store.list_namespaces(prefix=(users["carol"],)) == []
    if store_backend == "sqlite":  # a file in the folder that is no user's store is skipped
        (Path(target) / "not a user.db").write_bytes(b"")
    everyone = store.list_namespaces(suffix=("notes", "v1"))  # every user this store knows
    assert (alice, "notes", "v1") in everyone and (bob, "notes", "v1") in everyone
    assert {item.key for item in store.search((), limit=100)} >= {"a", "b", "c", "d"}


def test_bad_input_gets_langgraphs_errors_and_loses_nothing(
    store: ElastimemStore, users: dict[str, str], store_backend: str, target: str
) -> None:
    ns = (users["alice"], "memories")
    store.put(ns, "k", {"content": "kept"})
    with pytest.raises(TypeError):
        store.put(ns, "k", {"when": datetime.now()})  # not JSON
    with pytest.raises(TypeError):
        store.put(ns, "k", {"s": {1, 2}})
    with pytest.raises(ValueError, match="at most 500"):
        store.put(ns, "k", {"content": "x" * 600})
    with pytest.raises(InvalidNamespaceError):
        store.put((users["alice"], "a.b"), "k", {"content": "dotted"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("../escape", "a"), "k", {"content": "not a user id"})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"content": "nowhere"})
    item = store.get(ns, "k")
    assert item is not None and item.value == {"content": "kept"}

    # Unknown namespaces and users: nothing found, and no store created for the asking.
    assert store.get((users["carol"], "x"), "k") is None
    assert store.search((users["carol"],), query="anything") == []
    store.delete((users["carol"], "x"), "k")
    if store_backend == "sqlite":
        assert not (Path(target) / f"{users['carol']}.db").exists()


def test_items_are_ordinary_memories_for_the_api_and_cli(
    tmp_path: Path, store: ElastimemStore, users: dict[str, str], target: str, store_backend: str
) -> None:
    ns = (users["alice"], "memories")
    store.put(ns, "pet", {"content": "Has a border collie named Pixel"})
    store.store_of(ns).drain()
    with open_user(target, users["alice"]) as mem:
        assert any("Pixel" in hit.text for hit in mem.recall("border collie Pixel"))
        assert "Pixel" in mem.build_context("tell me about my collie").render()
        (fact_key,) = [k for k, v in mem.facts().items() if "Pixel" in v]
        mem.export(tmp_path / "export.jsonl")
        assert "border collie named Pixel" in (tmp_path / "export.jsonl").read_text()
    where = (["--db", target, "--user", users["alice"]] if store_backend == "postgres"
             else ["--db", str(Path(target) / f"{users['alice']}.db")])  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "elastimem.cli", *where, "facts"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "Pixel" in json.loads(done.stdout)[fact_key]
    with open_user(target, users["alice"]) as mem:
        mem.erase(key=fact_key, include_facts=True)
    assert store.get(ns, "pet") is None  # erased through elastimem: gone from the store too


class State(TypedDict):
    question: str
    answer: str


def remember_then_search(state: State, runtime: Runtime) -> dict[str, str]:
    user = runtime.context["user"]
    assert runtime.store is not None
    runtime.store.put((user, "memories"), "diet", {"content": "vegetarian, loves lentil curry"})
    found = runtime.store.search((user, "memories"), query=state["question"], limit=1)
    return {"answer": found[0].value["content"] if found else ""}


def test_a_compiled_graph_uses_it_sync_and_async(
    store: ElastimemStore, users: dict[str, str]
) -> None:
    builder = StateGraph(State, context_schema=dict)
    builder.add_node("remember_then_search", remember_then_search)
    builder.add_edge(START, "remember_then_search")
    graph = builder.compile(store=store)
    out = graph.invoke({"question": "lentil curry"}, context={"user": users["alice"]})
    assert out["answer"] == "vegetarian, loves lentil curry"
    out = asyncio.run(graph.ainvoke({"question": "lentil"}, context={"user": users["bob"]}))
    assert out["answer"] == "vegetarian, loves lentil curry"
    assert asyncio.run(store.aget((users["bob"], "memories"), "diet")) is not None
    assert [i.key for i in asyncio.run(store.asearch((users["bob"],)))] == ["diet"]


@pytest.mark.embedder
def test_what_an_agent_puts_is_found_by_meaning_by_the_next_search(
    target: str, users: dict[str, str]
) -> None:
    ns = (users["alice"], "memories")
    with ElastimemStore(target) as store:  # the real built-in model
        store.put(ns, "m1", {"content": "My daughter plays the violin in the school orchestra"})
        store.put(ns, "m2", {"content": "I never eat meat; I have been vegetarian for years"})
        store.put(ns, "m3", {"content": "I work night shifts as a nurse at the hospital"})
        store.put(ns, "m4", {"content": "We adopted a grey cat called Miso last spring"})
        store.put((users["bob"], "memories"), "m1", {"content": "Bob is a vegetarian too"})
        found = store.search(ns, query="what food does the user avoid?", limit=3)
        assert found[0].key == "m2" and found[0].score is not None
        music = store.search(ns, query="musical instrument lessons for my kid", limit=1)
        assert [i.key for i in music] == ["m1"]
        assert store.search(ns, query="does she have pets?", limit=1)[0].key == "m4"
        assert [i.key for i in store.search((users["bob"],), query="food")] == ["m1"]


def test_the_rest_service_sees_what_the_store_put(tmp_path: Path) -> None:
    service = pytest.importorskip("tests.service.test_server")
    with ElastimemStore(tmp_path / "users", disable_builtin_embedder=True) as store:
        store.put(("ana", "memories"), "city", {"content": "Moved to Porto in May"})
        store.put(("ana", "memories"), "city", {"content": "Moved to Braga in June"})
    server = service.start_server(tmp_path)
    try:
        facts = service.request(server, "GET", "/v1/facts", "ana")[1]["facts"]
        (fact_key,) = [k for k, v in facts.items() if v.startswith("Moved to Braga in June\n")]
        hits = service.request(server, "POST", "/v1/recall", "ana", {"query": "Braga"})[1]["hits"]
        assert any(hit["text"].startswith(f"{fact_key}: Moved to Braga") for hit in hits)
        history = service.request(server, "GET", f"/v1/facts/{fact_key}/history", "ana")[1]
        assert [v["value"].split("\n")[0] for v in history["versions"]] == [
            "Moved to Porto in May", "Moved to Braga in June"
        ]  # fmt: skip
        assert service.request(server, "GET", "/v1/facts", "ben")[1]["facts"] == {}
    finally:
        assert service.stop_server(server) == 0
