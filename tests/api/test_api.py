"""The public surface: exports, construction, attributes, validation and close()."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import pytest

import elastimem
from elastimem import ClosedError, ConfigError, ElastimemConfig
from tests.rows import rows


def test_all_is_sorted_and_complete() -> None:
    assert elastimem.__all__ == sorted(elastimem.__all__)
    expected = {
        "open",
        "open_user",
        "Elastimem",
        "ElastimemConfig",
        "MemoryProfile",
        "Budgets",
        "Tier",
        "Cadence",
        "ConsolidationLevel",
        "RollingSummaryMode",
        "Fact",
        "Hit",
        "ContextPlan",
        "ExplainResult",
        "ChunkScoreBreakdown",
        "FactScoreBreakdown",
        "GraphTraversalStep",
        "TimelineResult",
        "ElastimemError",
        "ConfigError",
        "StoreError",
        "StoreLockedError",
        "SchemaTooNewError",
        "ClosedError",
        "ImportFormatError",
        "LLMError",
        "EmbedderError",
        "EncryptionKeyError",
        "__version__",
        "aio",
        "llms",
    }
    assert set(elastimem.__all__) == expected
    for name in elastimem.__all__:
        assert hasattr(elastimem, name), name


def test_version_and_legacy_import_paths() -> None:
    assert isinstance(elastimem.__version__, str) and elastimem.__version__
    from elastimem.assembly import ContextPlan
    from elastimem.retrieval import (  # noqa: F401
        ChunkScoreBreakdown,
        ExplainResult,
        FactScoreBreakdown,
        Hit,
        TimelineResult,
    )

    assert ContextPlan is elastimem.ContextPlan


def test_error_tree() -> None:
    assert issubclass(ConfigError, (TypeError, ValueError, elastimem.ElastimemError))
    assert issubclass(elastimem.StoreLockedError, elastimem.StoreError)
    assert issubclass(elastimem.SchemaTooNewError, (elastimem.StoreError, RuntimeError))
    assert issubclass(ClosedError, RuntimeError)
    assert issubclass(elastimem.ImportFormatError, ValueError)


def test_value_types_are_frozen() -> None:
    hit = elastimem.Hit("chunk", "t", "2025-01-01", 1.0, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.text = "x"  # type: ignore[misc]


def test_open_is_the_constructor(tmp_path: Path) -> None:
    with elastimem.open(str(tmp_path / "a.db"), disable_builtin_embedder=True) as mem:
        assert isinstance(mem, elastimem.Elastimem)


def test_unknown_option_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'context_tokens'\\? valid options: "):
        elastimem.Elastimem(str(tmp_path / "a.db"), context_token=8192)
    with pytest.raises(ConfigError, match="unknown option 'zzzz'; valid options: "):
        elastimem.Elastimem(str(tmp_path / "a.db"), zzzz=1)
    with pytest.raises(TypeError):  # ConfigError is also a TypeError
        elastimem.Elastimem(str(tmp_path / "a.db"), bogus=1)
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("context_tokens", 1000),
        ("context_tokens", "4096"),
        ("output_reserve", -1),
        ("working_share", 1.0),
        ("memory_split", {"facts": 1.0}),
        ("vector_backend", "faiss"),
        ("tier_override", "turbo"),
        ("fact_archive_threshold", 1.0),
        ("chunk_target_tokens", 8),
        ("tier_thresholds_gib", {"full": (4, 1), "standard": (8, 2.5)}),
        ("disable_builtin_embedder", "yes"),
        ("max_lessons", 0),
        ("ann_min_rows", 0),
    ],
)
def test_invalid_config_names_field_and_value(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=name):
        ElastimemConfig(**{name: value})


def test_config_inputs_are_copied_and_keys_normalised() -> None:
    keys = {"Favourite Colour", "name"}
    cfg = ElastimemConfig(profile_keys=keys, reserved_keys={"Agent Name"})
    keys.add("other")
    assert cfg.profile_keys == {"favourite_colour", "name"}
    assert cfg.reserved_keys == {"agent_name"}


def test_tier_override_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTIMEM_TIER", " Lite ")
    assert ElastimemConfig().tier_override == elastimem.Tier.LITE
    monkeypatch.setenv("ELASTIMEM_TIER", "bogus")
    assert elastimem.Tier.from_env() is None


def test_alias_conflicts_raise(tmp_path: Path) -> None:
    def one(*a: Any, **k: Any) -> str:
        return ""

    def two(*a: Any, **k: Any) -> str:
        return ""

    with pytest.raises(ConfigError, match="alias"):
        elastimem.Elastimem(str(tmp_path / "a.db"), llm=one, complete_fn=two)
    with pytest.raises(ConfigError, match="alias"):
        elastimem.Elastimem(str(tmp_path / "a.db"), embedder=one, embed_fn=two)
    with elastimem.Elastimem(
        str(tmp_path / "a.db"), llm=one, complete_fn=one, disable_builtin_embedder=True
    ) as mem:
        assert mem.complete_fn is one


def test_attributes(make_store: Any, embedder: Any) -> None:
    mem = make_store(embedder=embedder)
    assert mem.embed_fn is embedder
    with pytest.raises(AttributeError):
        mem.embed_fn = embedder
    with pytest.raises(AttributeError):
        mem.embed_query_fn = None
    with pytest.raises(AttributeError):
        mem.tokenizer_fn = len
    with pytest.raises(AttributeError):
        mem.path = "elsewhere"
    assert mem.session_id is None and mem.fts_enabled is True
    mem.complete_fn = lambda p, **k: "NONE"
    assert mem.complete_fn is not None
    cfg = mem.config
    cfg.context_tokens = 99999
    cfg.profile_keys.add("zzz")
    assert mem.config.context_tokens == 4096 and "zzz" not in mem.config.profile_keys
    assert isinstance(mem.profile, elastimem.MemoryProfile)


def test_inline_overrides_replace_config_fields(make_store: Any) -> None:
    base = ElastimemConfig(context_tokens=8192, max_lessons=3)
    mem = make_store(config=base, max_lessons=7)
    assert mem.config.context_tokens == 8192 and mem.config.max_lessons == 7
    assert base.max_lessons == 3


def test_construction_never_calls_the_llm_or_loads_a_model(tmp_path: Path) -> None:
    calls: list[str] = []
    mem = elastimem.Elastimem(str(tmp_path / "a.db"), llm=lambda p, **k: calls.append(p) or "")
    try:
        assert mem.stats()["embedder"] == "not_loaded"
    finally:
        mem.close()
    assert calls == []


def test_every_method_raises_closed_error_after_close(make_store: Any) -> None:
    mem = make_store()
    mem.close()
    mem.close()  # idempotent
    calls = [
        lambda: mem.tick(),
        lambda: mem.report_pressure(),
        lambda: mem.reconfigure(),
        lambda: mem.build_context("x"),
        lambda: mem.begin_session(),
        lambda: mem.record_turn("a", "b"),
        lambda: mem.foreground_begin(),
        lambda: mem.foreground_end(),
        lambda: mem.report_evictions([("a", "b")]),
        lambda: mem.drain(),
        lambda: mem.pending(),
        lambda: mem.warm_up(),
        lambda: mem.recall("x"),
        lambda: mem.explain("x"),
        lambda: mem.sessions(),
        lambda: mem.resume_session(),
        lambda: mem.end_session(),
        lambda: mem.remember("a", "b"),
        lambda: mem.facts(),
        lambda: mem.fact_history("a"),
        lambda: mem.timeline("a"),
        lambda: mem.clusters(),
        lambda: mem.forget("a"),
        lambda: mem.erase(key="a"),
        lambda: mem.add_lesson("x"),
        lambda: mem.lessons(),
        lambda: mem.quarantine_entries(),
        lambda: mem.stats(),
        lambda: mem.export("x"),
        lambda: mem.import_("x"),
        lambda: mem.reindex(),
    ]
    for call in calls:
        with pytest.raises(ClosedError):
            call()
    with pytest.raises(ClosedError):
        mem.foreground()  # at the call, not when the block is entered


def test_reconfigure_wires_the_built_in_embedder_in_and_out(make_store: Any) -> None:
    """The config said one thing and the store did another: the flag was read at open only."""
    mem = make_store()  # disable_builtin_embedder=True
    assert mem.stats()["embedder"] == "none"
    mem.reconfigure(disable_builtin_embedder=False)
    assert mem.stats()["embedder"] == "not_loaded"  # wired in; loaded lazily as ever
    mem.reconfigure(disable_builtin_embedder=True)
    assert mem.stats()["embedder"] == "none" and mem.config.disable_builtin_embedder


def test_on_tier_change_sees_the_config_that_changed_the_tier(make_store: Any) -> None:
    seen: list[tuple[Any, int]] = []
    holder: list[Any] = []

    def hook(old: Any, new: Any) -> None:
        mem = holder[0]
        seen.append((mem.config.tier_override, mem.config.context_tokens))
        if new == elastimem.Tier.FULL:  # a hook that reconfigures builds on the new config
            mem.reconfigure(context_tokens=16384)

    mem = make_store(on_tier_change=hook, tier_override="standard")
    holder.append(mem)
    mem.reconfigure(tier_override="lite", context_tokens=8192)
    assert seen[-1] == (elastimem.Tier.LITE, 8192)
    mem.reconfigure(tier_override="full")
    assert (mem.config.tier_override, mem.config.context_tokens) == (elastimem.Tier.FULL, 16384)
    assert mem.profile.tier == elastimem.Tier.FULL
    with elastimem.Elastimem(
        ":memory:", disable_builtin_embedder=True, tier_override="full", context_tokens=16384
    ) as reference:
        assert mem.profile.budgets == reference.profile.budgets


def test_stats_has_every_documented_key(mem: elastimem.Elastimem, store_backend: str) -> None:
    expected = {
        "path",
        "db_bytes",
        "file_mode",
        "fts_enabled",
        "schema_version",
        "tier",
        "facts",
        "fact_versions",
        "archived_facts",
        "sessions",
        "open_sessions",
        "messages",
        "chunks",
        "embedded_chunks",
        "stale_embeddings",
        "embedder",
        "embedding_model",
        "vector_backend",
        "lessons",
        "quarantine",
        "graph_nodes",
        "graph_edges",
        "jobs_pending",
        "jobs_failed",
        "llm_calls",
    }
    stats = mem.stats()
    assert expected <= set(stats)
    assert stats["embedder"] == "none" and stats["db_bytes"] > 0 and stats["graph_nodes"] == 0
    if store_backend == "postgres":  # the server's files are the operator's, not the store's
        assert stats["file_mode"] is None
    elif os.name == "posix":
        assert stats["file_mode"] == "0600"


def test_logging_goes_only_to_the_elastimem_logger(
    make_store: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    mem = make_store(tokenizer_fn=lambda t: "not an int")
    mem.record_turn("hello there", "hi")
    mem.record_turn("hello again", "hi")
    assert {r.name for r in caplog.records} <= {"elastimem"}
    warnings = [r for r in caplog.records if "tokenizer_fn" in r.getMessage()]
    assert len(warnings) == 1  # a repeating warning is logged once per instance
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_integers_past_sqlite_range_are_clamped_not_an_overflow(mem: elastimem.Elastimem) -> None:
    """Bound as they were, they raised a raw OverflowError (and the CLI a traceback)."""
    mem.record_turn("the lighthouse keeper waved", "hello")
    assert [s["id"] for s in mem.sessions(2**63)] == [mem.session_id]
    assert mem.sessions(-(2**70)) == []
    assert mem.erase(session_id=2**64)["sessions"] == 0
    assert mem.erase(session_id=-(2**64))["sessions"] == 0
    assert mem.recall("lighthouse keeper", k=2**80)
    assert mem.explain("lighthouse keeper", k=2**80).chunk_breakdowns


def test_argument_validation_raises_config_error(mem: elastimem.Elastimem) -> None:
    with pytest.raises(ConfigError):
        mem.remember(1, "x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        mem.remember("k", True)
    with pytest.raises(ConfigError):
        mem.remember("k", ["x"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        mem.remember("k", "v", source="merge")
    with pytest.raises(ConfigError):
        mem.remember("k", "v", at="not a date")
    with pytest.raises(ConfigError):
        mem.recall("x", kinds={"chunk", "bogus"})
    with pytest.raises(ConfigError):
        mem.recall("x", since="yesterday-ish")
    with pytest.raises(ConfigError):
        mem.erase()
    with pytest.raises(ConfigError):
        mem.erase(key="a", session_id=1)
    with pytest.raises(ConfigError):
        mem.begin_session(at="the day before")
    for bad in ("5", None, -1, float("nan"), True):
        with pytest.raises(ConfigError, match="timeout"):
            mem.drain(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="timeout"):
            mem.warm_up(bad)  # type: ignore[arg-type]
    mem.record_turn("a turn to end", "ok")
    with pytest.raises(ConfigError, match="timeout"):
        mem.end_session(timeout="30")  # type: ignore[arg-type]
    assert mem.session_id is not None  # validated before any work: still open
    with pytest.raises(ConfigError, match="progress"):
        mem.reindex(progress=5)  # type: ignore[arg-type]
    for target in (5, None, object(), ""):
        with pytest.raises(ConfigError, match="cannot export"):
            mem.export(target)
    assert mem.facts() == {}
    assert mem.recall("x", k=0) == [] and mem.recall("x", k=-3) == []


def test_a_path_like_giving_bytes_is_a_config_error(tmp_path: Path) -> None:
    class BytesPath:
        def __fspath__(self) -> bytes:
            return str(tmp_path / "b.db").encode()

    with pytest.raises(ConfigError, match="path"):
        elastimem.Elastimem(BytesPath(), disable_builtin_embedder=True)  # type: ignore[arg-type]
    assert not (tmp_path / "b.db").exists()


def test_warnings_that_could_repeat_are_logged_once_per_instance(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mem = make_store()
    with caplog.at_level(logging.DEBUG, logger="elastimem"):
        for _ in range(3):
            mem.foreground_end()
            mem.record_turn("a", "b", at="not a time")
            mem.reindex()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("foreground_end()" in m for m in warnings) == 1
    assert sum("unreadable at=" in m for m in warnings) == 1
    assert sum("reindex found no usable embedder" in m for m in warnings) == 1


SECRET = "Quokkasecret77"  # stands for user text a host exception quotes


class HostileStr:
    """A host object whose ``__str__`` raises with the user's text in the message."""

    def __str__(self) -> str:
        raise RuntimeError(f"cannot render the message about {SECRET}")


class NotAStr:
    def __str__(self) -> Any:
        return 42  # str() raises TypeError


def _leaks(records: list[logging.LogRecord], events: list[str]) -> list[str]:
    lines = [r.getMessage() for r in records]
    lines += [logging.Formatter().formatException(r.exc_info) for r in records if r.exc_info]
    return [line for line in lines + events if SECRET.casefold() in line.casefold()]


def test_host_exception_text_never_reaches_logs_or_events(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="elastimem")

    def tokenizer(text: str) -> int:
        raise ValueError(f"tokenizer cannot read {text[:40]!r} ({SECRET})")

    mem = make_store(tokenizer_fn=tokenizer)
    mem.record_turn(f"my cousin {SECRET} sings", "nice")
    mem.record_turn(HostileStr(), "ok")
    assert mem.recall(HostileStr()) == []  # type: ignore[arg-type]
    mem.explain(HostileStr())  # type: ignore[arg-type]
    mem.timeline(HostileStr())  # type: ignore[arg-type]
    mem.build_context(HostileStr())  # type: ignore[arg-type]
    events = [f"{k} {d}" for k, d in rows(mem, "SELECT kind, detail FROM events")]
    logged = [r.getMessage() for r in caplog.records]
    assert any("tokenizer_fn failed (ValueError)" in line for line in logged), logged
    assert sum("RuntimeError" in line for line in logged) >= 5, logged
    assert _leaks(caplog.records, events) == []


HOSTILE_QUERIES = [
    HostileStr(),
    NotAStr(),
    10**5000,  # str() refuses ints this long
    "lone \ud800 surrogate \udfff",
    "nul \x00 inside",
    "w" * 10_000_000 + " tomato",
    "tomato " * 1_500_000,
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=lambda q: type(q).__name__)
def test_query_calls_never_raise_on_hostile_input(
    make_store: Any, caplog: pytest.LogCaptureFixture, query: Any
) -> None:
    mem = make_store()
    mem.record_turn("we planted tomato seedlings in the garden", "great")
    mem.remember("favorite_vegetable", "tomato")
    explained = mem.explain(query)
    timeline = mem.timeline(query)
    plan = mem.build_context(query)
    recalled = mem.recall(query)
    assert isinstance(explained, elastimem.ExplainResult)
    assert isinstance(timeline, elastimem.TimelineResult)
    assert isinstance(plan.render(), str) and isinstance(recalled, list)
    for text in (explained.query, timeline.query):
        text.encode("utf-8")  # no lone surrogate survives
        assert "\x00" not in text and len(text) <= 16_384
    assert rows(mem, "PRAGMA integrity_check") == [("ok",)]
    assert SECRET not in caplog.text
