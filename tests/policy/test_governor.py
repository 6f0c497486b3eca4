"""Tests for the governor: budgets, profiles, classification, the probe and tier transitions."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastimem import enums, governor
from elastimem.config import ElastimemConfig
from elastimem.errors import ConfigError
from elastimem.governor import (
    EMERGENCY_AVAILABLE_GIB,
    GIB,
    PRESSURE_WINDOW_SECONDS,
    Budgets,
    Cadence,
    ConsolidationLevel,
    Governor,
    MemoryProfile,
    RollingSummaryMode,
    Tier,
    build_profile,
    classify,
    compute_budgets,
    probe_memory,
    read_linux_memory,
)

# (total GiB, available GiB) samples that classify to each tier under the default thresholds.
FULL_RAM = (32 * GIB, 20 * GIB)
STANDARD_RAM = (12 * GIB, 4 * GIB)
LITE_RAM = (4 * GIB, 2 * GIB)
DEFAULT_THRESHOLDS = {"full": (16.0, 6.0), "standard": (8.0, 2.5)}


def cfg(**overrides: Any) -> ElastimemConfig:
    """A config that ignores ELASTIMEM_TIER in the test environment unless a test pins a tier."""
    overrides.setdefault("tier_override", None)
    return ElastimemConfig(**overrides)


class FakeProbe:
    """A probe whose reading the test sets; counts calls."""

    def __init__(self, sample: tuple[int, int]) -> None:
        self.sample = sample
        self.calls = 0

    def __call__(self) -> tuple[int, int]:
        self.calls += 1
        return self.sample


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[Tier, Tier]] = []

    def __call__(self, old: Tier, new: Tier) -> None:
        self.changes.append((old, new))


def make(
    sample: tuple[int, int], *, clock: FakeClock | None = None, **config: Any
) -> tuple[Governor, FakeProbe, Recorder]:
    probe = FakeProbe(sample)
    rec = Recorder()
    gov = Governor(cfg(**config), probe_fn=probe, on_tier_change=rec, clock=clock or FakeClock())
    return gov, probe, rec


# -- re-exports and value types ----------------------------------------------------------------


def test_enums_are_reexported() -> None:
    assert governor.Tier is enums.Tier
    assert governor.Cadence is enums.Cadence
    assert governor.ConsolidationLevel is enums.ConsolidationLevel
    assert governor.RollingSummaryMode is enums.RollingSummaryMode


def test_constants() -> None:
    assert GIB == 2**30
    assert EMERGENCY_AVAILABLE_GIB == 1.2
    assert PRESSURE_WINDOW_SECONDS == 30.0


def test_memory_profile_field_order_and_defaults() -> None:
    names = [f.name for f in dataclasses.fields(MemoryProfile)]
    assert names == [
        "tier",
        "budgets",
        "embeddings_enabled",
        "llm_extraction_enabled",
        "extraction_cadence",
        "consolidation_level",
        "episodic_top_k",
        "window_min_turns",
        "graph_hops",
        "vector_recall_enabled",
        "embedder_load_allowed",
        "rolling_summary_mode",
    ]
    budgets = Budgets(1000, 10, 20, 30, 40)
    profile = MemoryProfile(
        Tier.FULL, budgets, True, True, Cadence.PER_TURN, ConsolidationLevel.FULL, 5
    )
    assert profile.window_min_turns == 2
    assert profile.graph_hops == 0
    assert profile.vector_recall_enabled is True
    assert profile.embedder_load_allowed is True
    assert profile.rolling_summary_mode is RollingSummaryMode.LLM
    assert profile.rolling_summary_enabled is True
    assert profile.keep_last_n_turns == 4  # 1000 // 240
    extractive = dataclasses.replace(profile, rolling_summary_mode=RollingSummaryMode.EXTRACTIVE)
    assert extractive.rolling_summary_enabled is False
    # The mode given by its value (a str enum compares equal to it) counts the same.
    assert dataclasses.replace(profile, rolling_summary_mode="llm").rolling_summary_enabled is True
    assert dataclasses.replace(profile, window_min_turns=9).keep_last_n_turns == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.tier = Tier.LITE  # type: ignore[misc]


def test_budgets_properties() -> None:
    budgets = Budgets(working=5, facts=1, episodic=403, sessions=3, lessons=4)
    assert budgets.memory_total == 411
    assert budgets.graph == 100  # int(403 * 0.25)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budgets.working = 1  # type: ignore[misc]


# -- the §5.2 budget table, row by row -----------------------------------------------------------

STATIC_1200 = {"static_prompt_tokens": 1200}
# Reserves larger than the window: dynamic is clamped up to the 256 floor.
FLOOR = {"context_tokens": 1024, "output_reserve": 4000}
# dynamic is exactly 256 without any clamping.
EXACT_256 = {"context_tokens": 1024, "output_reserve": 768, "tool_reserve": 0}

# (config overrides, tier, working, facts, episodic, graph, sessions, lessons, keep_last_n_turns)
BUDGET_TABLE = [
    ({}, Tier.FULL, 1641, 537, 402, 100, 201, 201, 6),
    ({}, Tier.STANDARD, 1641, 537, 402, 100, 201, 201, 6),
    ({}, Tier.LITE, 1912, 537, 181, 45, 151, 201, 7),
    (STATIC_1200, Tier.FULL, 981, 321, 240, 60, 120, 120, 4),
    (STATIC_1200, Tier.STANDARD, 981, 321, 240, 60, 120, 120, 4),
    (STATIC_1200, Tier.LITE, 1143, 321, 108, 27, 90, 120, 4),
    (FLOOR, Tier.FULL, 140, 46, 34, 8, 17, 17, 2),
    (FLOOR, Tier.STANDARD, 140, 46, 34, 8, 17, 17, 2),
    (EXACT_256, Tier.FULL, 140, 46, 34, 8, 17, 17, 2),
]


@pytest.mark.parametrize(
    ("overrides", "tier", "working", "facts", "episodic", "graph", "sessions", "lessons", "keep"),
    BUDGET_TABLE,
)
def test_budget_table_row(
    overrides: dict[str, int],
    tier: Tier,
    working: int,
    facts: int,
    episodic: int,
    graph: int,
    sessions: int,
    lessons: int,
    keep: int,
) -> None:
    config = cfg(**overrides)
    assert compute_budgets(config, tier) == Budgets(working, facts, episodic, sessions, lessons)
    profile = build_profile(config, tier)
    assert profile.budgets.graph == graph
    assert profile.keep_last_n_turns == keep


# -- the §5.2 profile table ------------------------------------------------------------------------


def test_profile_full() -> None:
    p = build_profile(cfg(), Tier.FULL)
    assert p.tier is Tier.FULL
    assert (p.embeddings_enabled, p.vector_recall_enabled, p.embedder_load_allowed) == (
        True,
        True,
        True,
    )
    assert p.llm_extraction_enabled is True
    assert p.extraction_cadence is Cadence.PER_TURN
    assert p.rolling_summary_mode is RollingSummaryMode.LLM
    assert p.rolling_summary_enabled is True
    assert p.consolidation_level is ConsolidationLevel.FULL
    assert (p.episodic_top_k, p.graph_hops, p.window_min_turns) == (5, 2, 2)


def test_profile_standard() -> None:
    p = build_profile(cfg(), Tier.STANDARD)
    assert p.tier is Tier.STANDARD
    assert (p.embeddings_enabled, p.vector_recall_enabled, p.embedder_load_allowed) == (
        True,
        True,
        True,
    )
    assert p.llm_extraction_enabled is True
    assert p.extraction_cadence is Cadence.BATCHED
    assert p.rolling_summary_mode is RollingSummaryMode.LLM
    assert p.consolidation_level is ConsolidationLevel.DEDUPE_ONLY
    assert (p.episodic_top_k, p.graph_hops, p.window_min_turns) == (4, 1, 2)


@pytest.mark.parametrize(("opt_in", "cadence"), [(False, Cadence.OFF), (True, Cadence.SESSION_END)])
def test_profile_lite(opt_in: bool, cadence: Cadence) -> None:
    p = build_profile(cfg(lite_llm_extraction=opt_in), Tier.LITE)
    assert p.tier is Tier.LITE
    assert (p.embeddings_enabled, p.vector_recall_enabled, p.embedder_load_allowed) == (
        False,
        True,
        False,
    )
    assert p.llm_extraction_enabled is opt_in
    assert p.extraction_cadence is cadence
    assert p.rolling_summary_mode is RollingSummaryMode.EXTRACTIVE
    assert p.rolling_summary_enabled is False
    assert p.consolidation_level is ConsolidationLevel.DEDUPE_ONLY
    assert (p.episodic_top_k, p.graph_hops, p.window_min_turns) == (3, 1, 2)


def test_lite_opt_in_does_not_change_other_tiers() -> None:
    for tier in (Tier.FULL, Tier.STANDARD):
        assert build_profile(cfg(lite_llm_extraction=True), tier) == build_profile(cfg(), tier)


def test_build_profile_accepts_tier_names() -> None:
    assert build_profile(cfg(), "lite") == build_profile(cfg(), Tier.LITE)  # type: ignore[arg-type]


def test_split_over_one_never_overspends() -> None:
    # The config accepts a split summing to 1 + 1e-6; on a large window int(pool * share)
    # would then add up to more than the pool without the final trim.
    split = {
        "facts": 0.25 + 2.5e-7,
        "episodic": 0.25 + 2.5e-7,
        "sessions": 0.25 + 2.5e-7,
        "lessons": 0.25 + 2.5e-7,
    }
    config = cfg(
        context_tokens=10_001_112,
        output_reserve=512,
        tool_reserve=600,
        working_share=0.5,
        memory_split=split,
    )
    dynamic = 10_000_000
    pool = dynamic - int(dynamic * 0.5)
    assert sum(int(pool * share) for share in split.values()) > pool  # the trim is needed
    for tier in Tier:
        b = compute_budgets(config, tier)
        assert b.working + b.memory_total <= dynamic
        assert min(b.working, b.facts, b.episodic, b.sessions, b.lessons) >= 0


# -- property: budgets stay within the window at every tier -------------------------------------


@st.composite
def configs(draw: st.DrawFn) -> ElastimemConfig:
    weights = draw(st.lists(st.integers(0, 1000), min_size=4, max_size=4).filter(any))
    fudge = 1.0 + draw(st.floats(0.0, 9e-7))  # the config tolerates a sum up to 1 + 1e-6
    total = sum(weights)
    split = dict(
        zip(
            ("facts", "episodic", "sessions", "lessons"),
            (w / total * fudge for w in weights),
            strict=True,
        )
    )
    return cfg(
        context_tokens=draw(st.integers(1024, 2_000_000)),
        output_reserve=draw(st.integers(0, 50_000)),
        tool_reserve=draw(st.integers(0, 50_000)),
        static_prompt_tokens=draw(st.integers(0, 500_000)),
        working_share=draw(
            st.floats(0.0, 1.0, exclude_min=True, exclude_max=True, allow_subnormal=False)
        ),
        memory_split=split,
        lite_llm_extraction=draw(st.booleans()),
    )


@settings(max_examples=300, deadline=None)
@given(config=configs(), tier=st.sampled_from(list(Tier)))
def test_budgets_property(config: ElastimemConfig, tier: Tier) -> None:
    b = build_profile(config, tier).budgets
    dynamic = (
        config.context_tokens
        - config.output_reserve
        - config.tool_reserve
        - config.static_prompt_tokens
    )
    assert min(b.working, b.facts, b.episodic, b.sessions, b.lessons, b.graph) >= 0
    assert b.graph <= b.episodic
    assert b.working + b.memory_total <= max(256, dynamic)


# -- classification ------------------------------------------------------------------------------

EPS = 1  # one byte


@pytest.mark.parametrize(
    ("total", "available", "tier"),
    [
        (16 * GIB, 6 * GIB, Tier.FULL),
        (64 * GIB, 60 * GIB, Tier.FULL),
        (16 * GIB - EPS, 6 * GIB, Tier.STANDARD),
        (16 * GIB, 6 * GIB - EPS, Tier.STANDARD),
        (8 * GIB, int(2.5 * GIB), Tier.STANDARD),
        (64 * GIB, int(2.5 * GIB), Tier.STANDARD),  # big but busy is not FULL
        (8 * GIB - EPS, int(2.5 * GIB), Tier.LITE),
        (8 * GIB, int(2.5 * GIB) - EPS, Tier.LITE),
        (64 * GIB, 1 * GIB, Tier.LITE),
        (0, 0, Tier.LITE),
    ],
)
def test_classify_edges(total: int, available: int, tier: Tier) -> None:
    assert classify(total, available, DEFAULT_THRESHOLDS) is tier


def test_classify_uses_configured_thresholds() -> None:
    thresholds = {"full": (4.0, 2.0), "standard": (2.0, 1.0)}
    assert classify(4 * GIB, 2 * GIB, thresholds) is Tier.FULL
    assert classify(2 * GIB, 1 * GIB, thresholds) is Tier.STANDARD
    assert classify(2 * GIB, 1 * GIB - 1, thresholds) is Tier.LITE


# -- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "tier"),
    [(FULL_RAM, Tier.FULL), (STANDARD_RAM, Tier.STANDARD), (LITE_RAM, Tier.LITE)],
)
def test_construction_probes_once_and_sets_cap(sample: tuple[int, int], tier: Tier) -> None:
    gov, probe, rec = make(sample)
    assert probe.calls == 1
    assert gov.tier is tier
    assert gov.cap is tier
    assert gov.profile == build_profile(gov.config, tier)
    assert rec.changes == []


def test_construction_rejects_bad_config() -> None:
    with pytest.raises(ConfigError):
        Governor("not a config", probe_fn=FakeProbe(FULL_RAM))  # type: ignore[arg-type]
    config = cfg()
    config.working_share = 2.0  # mutated after validation
    with pytest.raises(ConfigError):
        Governor(config, probe_fn=FakeProbe(FULL_RAM))


def test_env_override_pins_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTIMEM_TIER", "lite")
    probe = FakeProbe(FULL_RAM)
    gov = Governor(ElastimemConfig(), probe_fn=probe)
    assert (gov.tier, gov.cap) == (Tier.LITE, Tier.LITE)


# -- tick --------------------------------------------------------------------------------------


def test_tick_downgrade_is_immediate_and_may_skip_a_level() -> None:
    gov, probe, rec = make(FULL_RAM)
    probe.sample = LITE_RAM
    profile = gov.tick()
    assert gov.tier is Tier.LITE
    assert profile.tier is Tier.LITE
    assert profile == build_profile(gov.config, Tier.LITE)
    assert rec.changes == [(Tier.FULL, Tier.LITE)]


def test_tick_upgrades_one_step_per_streak_up_to_cap() -> None:
    gov, probe, rec = make(FULL_RAM, upgrade_healthy_ticks=3)
    probe.sample = LITE_RAM
    gov.tick()
    probe.sample = FULL_RAM
    tiers = [gov.tick().tier for _ in range(8)]
    assert tiers == [
        Tier.LITE,
        Tier.LITE,
        Tier.STANDARD,  # one step, not straight to FULL
        Tier.STANDARD,
        Tier.STANDARD,
        Tier.FULL,
        Tier.FULL,
        Tier.FULL,
    ]
    assert rec.changes == [
        (Tier.FULL, Tier.LITE),
        (Tier.LITE, Tier.STANDARD),
        (Tier.STANDARD, Tier.FULL),
    ]


def test_tick_never_upgrades_above_cap() -> None:
    gov, probe, rec = make(STANDARD_RAM, upgrade_healthy_ticks=1)
    probe.sample = FULL_RAM
    for _ in range(20):
        gov.tick()
    assert gov.tier is Tier.STANDARD
    assert gov.cap is Tier.STANDARD
    assert rec.changes == []

    probe.sample = LITE_RAM
    gov.tick()
    probe.sample = FULL_RAM
    for _ in range(20):
        gov.tick()
    assert gov.tier is Tier.STANDARD  # back up to the cap, no further
    assert rec.changes == [(Tier.STANDARD, Tier.LITE), (Tier.LITE, Tier.STANDARD)]


def test_same_tier_tick_resets_streak() -> None:
    gov, probe, _ = make(STANDARD_RAM, upgrade_healthy_ticks=3)
    probe.sample = LITE_RAM
    gov.tick()
    probe.sample = STANDARD_RAM
    gov.tick()
    gov.tick()
    probe.sample = LITE_RAM  # same tier as now: streak resets
    gov.tick()
    probe.sample = STANDARD_RAM
    gov.tick()
    gov.tick()
    assert gov.tier is Tier.LITE
    gov.tick()
    assert gov.tier is Tier.STANDARD


def test_pressure_resets_streak() -> None:
    clock = FakeClock()
    gov, probe, _ = make(STANDARD_RAM, clock=clock, upgrade_healthy_ticks=3)
    probe.sample = LITE_RAM
    gov.tick()
    probe.sample = STANDARD_RAM
    gov.tick()
    gov.tick()
    gov.report_pressure()  # at LITE already: no drop, but the streak resets
    gov.tick()
    gov.tick()
    assert gov.tier is Tier.LITE
    gov.tick()
    assert gov.tier is Tier.STANDARD


def test_emergency_threshold_forces_lite() -> None:
    # Thresholds low enough that 1.1 GiB available would otherwise still be FULL.
    low = {"full": (1.0, 0.5), "standard": (0.5, 0.25)}
    gov, probe, rec = make((32 * GIB, 8 * GIB), tier_thresholds_gib=low)
    assert gov.tier is Tier.FULL
    threshold = EMERGENCY_AVAILABLE_GIB * GIB  # 1288490188.8 bytes
    probe.sample = (32 * GIB, math.ceil(threshold))  # at the threshold: not an emergency
    gov.tick()
    assert gov.tier is Tier.FULL
    probe.sample = (32 * GIB, math.floor(threshold))
    gov.tick()
    assert gov.tier is Tier.LITE
    assert rec.changes == [(Tier.FULL, Tier.LITE)]
    gov.tick()  # staying in the emergency changes nothing more
    assert rec.changes == [(Tier.FULL, Tier.LITE)]


# -- report_pressure ---------------------------------------------------------------------------


def test_pressure_drops_one_tier_at_most_once_per_window() -> None:
    clock = FakeClock(0.0)  # a monotonic clock may start at 0: no drop counts at start
    gov, _, rec = make(FULL_RAM, clock=clock)
    assert gov.report_pressure().tier is Tier.STANDARD
    clock.now = PRESSURE_WINDOW_SECONDS - 0.1
    assert gov.report_pressure().tier is Tier.STANDARD
    clock.now = PRESSURE_WINDOW_SECONDS
    assert gov.report_pressure().tier is Tier.LITE
    clock.now = 10 * PRESSURE_WINDOW_SECONDS
    assert gov.report_pressure().tier is Tier.LITE  # LITE is the floor
    assert rec.changes == [(Tier.FULL, Tier.STANDARD), (Tier.STANDARD, Tier.LITE)]
    assert gov.cap is Tier.FULL  # pressure does not lower the cap


def test_pressure_at_floor_does_not_start_window() -> None:
    clock = FakeClock(0.0)
    gov, probe, _ = make(FULL_RAM, clock=clock, upgrade_healthy_ticks=1)
    probe.sample = LITE_RAM
    gov.tick()
    gov.report_pressure()  # at LITE: nothing dropped, so no window starts
    probe.sample = FULL_RAM
    gov.tick()
    assert gov.tier is Tier.STANDARD
    clock.now = 1.0
    assert gov.report_pressure().tier is Tier.LITE


# -- override and reconfigure -------------------------------------------------------------------


def test_override_pins_tier_and_cap() -> None:
    clock = FakeClock(0.0)
    gov, probe, rec = make(FULL_RAM, clock=clock, tier_override="lite", upgrade_healthy_ticks=1)
    assert (gov.tier, gov.cap) == (Tier.LITE, Tier.LITE)
    assert probe.calls == 1  # construction probes once even when pinned
    for sample in (FULL_RAM, LITE_RAM, (32 * GIB, 0)):
        probe.sample = sample
        gov.tick()
        gov.report_pressure()
        clock.now += 100
    assert gov.tier is Tier.LITE
    assert rec.changes == []
    assert probe.calls == 1  # a pinned tick does not even probe

    gov2, probe2, rec2 = make(LITE_RAM, clock=clock, tier_override=Tier.FULL)
    probe2.sample = (4 * GIB, 0)
    assert gov2.tick().tier is Tier.FULL
    assert gov2.report_pressure().tier is Tier.FULL
    assert rec2.changes == []


def test_reconfigure_setting_override_takes_effect_at_once() -> None:
    gov, probe, rec = make(LITE_RAM)
    profile = gov.reconfigure(cfg(tier_override=Tier.FULL))
    assert profile.tier is Tier.FULL
    assert (gov.tier, gov.cap) == (Tier.FULL, Tier.FULL)
    assert rec.changes == [(Tier.LITE, Tier.FULL)]
    gov.tick()
    gov.report_pressure()
    assert gov.tier is Tier.FULL


def test_reconfigure_clearing_override_reprobes_and_resets_cap() -> None:
    gov, probe, rec = make(FULL_RAM, tier_override="lite", upgrade_healthy_ticks=1)
    calls = probe.calls
    probe.sample = STANDARD_RAM
    profile = gov.reconfigure(cfg(upgrade_healthy_ticks=1))
    assert probe.calls == calls + 1
    assert profile.tier is Tier.STANDARD
    assert (gov.tier, gov.cap) == (Tier.STANDARD, Tier.STANDARD)
    assert rec.changes == [(Tier.LITE, Tier.STANDARD)]
    # tick works again, and the cap is the fresh classification, not the first probe.
    probe.sample = FULL_RAM
    gov.tick()
    assert gov.tier is Tier.STANDARD
    probe.sample = LITE_RAM
    gov.tick()
    assert gov.tier is Tier.LITE


def test_reconfigure_without_reprobe_keeps_tier_and_rebuilds_budgets() -> None:
    gov, probe, rec = make(FULL_RAM)
    calls = probe.calls
    probe.sample = LITE_RAM
    profile = gov.reconfigure(cfg(static_prompt_tokens=1200))
    assert probe.calls == calls
    assert gov.tier is Tier.FULL
    assert profile.budgets == Budgets(981, 321, 240, 120, 120)
    assert gov.profile is profile
    assert gov.config.static_prompt_tokens == 1200
    assert rec.changes == []


def test_reconfigure_reprobe_applies_tick_rules_once() -> None:
    gov, probe, rec = make(FULL_RAM, upgrade_healthy_ticks=2)
    probe.sample = LITE_RAM
    assert gov.reconfigure(cfg(upgrade_healthy_ticks=2), reprobe=True).tier is Tier.LITE
    probe.sample = FULL_RAM
    assert gov.reconfigure(cfg(upgrade_healthy_ticks=2), reprobe=True).tier is Tier.LITE
    assert gov.reconfigure(cfg(upgrade_healthy_ticks=2), reprobe=True).tier is Tier.STANDARD
    assert rec.changes == [(Tier.FULL, Tier.LITE), (Tier.LITE, Tier.STANDARD)]


def test_reconfigure_rejects_invalid_config_and_keeps_state() -> None:
    gov, _, _ = make(FULL_RAM)
    before = (gov.tier, gov.cap, gov.profile, gov.config)
    bad = cfg()
    bad.memory_split = {"facts": 1.0}
    with pytest.raises(ConfigError):
        gov.reconfigure(bad)
    with pytest.raises(ConfigError):
        gov.reconfigure({"context_tokens": 8192})  # type: ignore[arg-type]
    assert (gov.tier, gov.cap, gov.profile, gov.config) == before


def test_config_is_a_validated_copy() -> None:
    config = cfg()
    gov = Governor(config, probe_fn=FakeProbe(FULL_RAM))
    config.context_tokens = 100_000
    assert gov.config.context_tokens == 4096


# -- on_tier_change ------------------------------------------------------------------------------


def test_callback_runs_outside_the_lock() -> None:
    seen: list[Tier] = []
    probe = FakeProbe(FULL_RAM)

    def callback(old: Tier, new: Tier) -> None:
        # Another thread must be able to read the governor while the callback runs.
        reader = threading.Thread(target=lambda: seen.append(gov.tier))
        reader.start()
        reader.join(timeout=5)
        assert not reader.is_alive(), "governor lock held during on_tier_change"

    gov = Governor(cfg(), probe_fn=probe, on_tier_change=callback)
    probe.sample = LITE_RAM
    gov.tick()
    assert seen == [Tier.LITE]
    gov.reconfigure(cfg(tier_override="standard"))
    assert seen == [Tier.LITE, Tier.STANDARD]


def test_callback_may_reenter_the_governor() -> None:
    clock = FakeClock(0.0)
    probe = FakeProbe(FULL_RAM)
    calls: list[tuple[Tier, Tier]] = []

    def callback(old: Tier, new: Tier) -> None:
        calls.append((old, new))
        gov.tick()  # same thread: a non-reentrant lock still held here would deadlock
        gov.report_pressure()
        assert gov.profile.tier is gov.tier

    gov = Governor(cfg(), probe_fn=probe, on_tier_change=callback, clock=clock)
    outcome: list[Tier] = []
    worker = threading.Thread(target=lambda: outcome.append(gov.report_pressure().tier))
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "deadlock when on_tier_change re-entered the governor"
    # FULL -> STANDARD by pressure; the nested pressure falls inside the 30 s window.
    assert calls == [(Tier.FULL, Tier.STANDARD)]
    assert gov.tier is Tier.STANDARD


def test_callback_exceptions_are_logged_once_and_swallowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def callback(old: Tier, new: Tier) -> None:
        raise RuntimeError("host bug")

    probe = FakeProbe(FULL_RAM)
    gov = Governor(cfg(), probe_fn=probe, on_tier_change=callback)
    with caplog.at_level(logging.DEBUG, logger="elastimem"):
        probe.sample = LITE_RAM
        assert gov.tick().tier is Tier.LITE
        gov.reconfigure(cfg(tier_override="full"))
        assert gov.tier is Tier.FULL
    warnings = [
        r for r in caplog.records if r.levelno >= logging.WARNING and "on_tier_change" in r.message
    ]
    assert len(warnings) == 1
    assert warnings[0].name == "elastimem"
    assert warnings[0].exc_info is not None


def test_concurrent_use_keeps_tier_within_cap() -> None:
    clock = FakeClock(0.0)
    samples = [FULL_RAM, STANDARD_RAM, LITE_RAM]
    counter = iter(range(10**9))
    lock = threading.Lock()

    def probe() -> tuple[int, int]:
        with lock:
            return samples[next(counter) % 3]

    changes: list[tuple[Tier, Tier]] = []
    gov = Governor(
        cfg(upgrade_healthy_ticks=1),
        probe_fn=probe,
        on_tier_change=lambda o, n: changes.append((o, n)),
        clock=clock,
    )
    errors: list[BaseException] = []

    def hammer() -> None:
        try:
            for i in range(200):
                profile = gov.report_pressure() if i % 7 == 0 else gov.tick()
                assert profile.tier <= gov.cap
                clock.now += 1.0
        except BaseException as exc:  # collected for the main thread to report
            errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert gov.profile.tier is gov.tier
    assert all(old != new for old, new in changes)


# -- probe_fn failures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "8,4",
        (1,),
        (1, 2, 3),
        (-1, 5),
        (8 * GIB, -1),
        (0, 0),
        (math.nan, 1),
        (math.inf, 1),
        (True, 1),
        ("8", "4"),
        {"total": 1},
    ],
)
def test_probe_fn_garbage_uses_guess(garbage: object, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elastimem"):
        gov = Governor(cfg(), probe_fn=lambda: garbage)  # type: ignore[arg-type,return-value]
        gov.tick()
        gov.reconfigure(cfg(), reprobe=True)
    assert gov.tier is Tier.STANDARD  # 8 GiB / 4 GiB
    assert gov.cap is Tier.STANDARD
    assert len([r for r in caplog.records if "probe_fn" in r.message]) == 1


def test_probe_fn_raising_uses_guess(caplog: pytest.LogCaptureFixture) -> None:
    def probe() -> tuple[int, int]:
        raise OSError("no /proc here")

    with caplog.at_level(logging.WARNING, logger="elastimem"):
        gov = Governor(cfg(), probe_fn=probe)
        for _ in range(3):
            gov.tick()
    assert gov.tier is Tier.STANDARD
    records = [r for r in caplog.records if "probe_fn" in r.message]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING


def test_probe_fn_available_above_total_is_clamped() -> None:
    gov = Governor(cfg(), probe_fn=lambda: (16 * GIB, 64 * GIB))
    assert gov.tier is Tier.FULL


def test_probe_fn_floats_are_accepted() -> None:
    gov = Governor(cfg(), probe_fn=lambda: (16.0 * GIB, 6.0 * GIB))  # type: ignore[arg-type,return-value]
    assert gov.tier is Tier.FULL


# -- the built-in probe ----------------------------------------------------------------------------

MEMINFO = """\
MemTotal:       16384000 kB
MemFree:         1000000 kB
MemAvailable:    8192000 kB
Buffers:          100000 kB
"""


@pytest.fixture
def meminfo(tmp_path: Any) -> dict[str, str]:
    paths = {
        "meminfo_path": str(tmp_path / "meminfo"),
        "cgroup_max_path": str(tmp_path / "memory.max"),
        "cgroup_current_path": str(tmp_path / "memory.current"),
    }
    (tmp_path / "meminfo").write_text(MEMINFO)
    return paths


def test_linux_meminfo_without_cgroup(meminfo: dict[str, str]) -> None:
    assert read_linux_memory(**meminfo) == (16384000 * 1024, 8192000 * 1024)


def test_linux_cgroup_unlimited(meminfo: dict[str, str]) -> None:
    with open(meminfo["cgroup_max_path"], "w") as fh:
        fh.write("max\n")
    with open(meminfo["cgroup_current_path"], "w") as fh:
        fh.write("123456\n")
    assert read_linux_memory(**meminfo) == (16384000 * 1024, 8192000 * 1024)


def test_linux_cgroup_limit_caps_total_and_available(meminfo: dict[str, str]) -> None:
    with open(meminfo["cgroup_max_path"], "w") as fh:
        fh.write(f"{4 * GIB}\n")
    with open(meminfo["cgroup_current_path"], "w") as fh:
        fh.write(f"{1 * GIB}\n")
    assert read_linux_memory(**meminfo) == (4 * GIB, 3 * GIB)


def test_linux_cgroup_limit_without_current(meminfo: dict[str, str]) -> None:
    with open(meminfo["cgroup_max_path"], "w") as fh:
        fh.write(f"{2 * GIB}\n")
    assert read_linux_memory(**meminfo) == (2 * GIB, 2 * GIB)


def test_linux_cgroup_over_limit_means_zero_available(meminfo: dict[str, str]) -> None:
    with open(meminfo["cgroup_max_path"], "w") as fh:
        fh.write(f"{2 * GIB}\n")
    with open(meminfo["cgroup_current_path"], "w") as fh:
        fh.write(f"{3 * GIB}\n")
    assert read_linux_memory(**meminfo) == (2 * GIB, 0)


def test_linux_garbage_cgroup_is_ignored(meminfo: dict[str, str]) -> None:
    with open(meminfo["cgroup_max_path"], "w") as fh:
        fh.write("lots\n")
    assert read_linux_memory(**meminfo) == (16384000 * 1024, 8192000 * 1024)


def test_linux_meminfo_missing_fields_raises(tmp_path: Any) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal: 1000 kB\nMemFree: 10 kB\n")
    with pytest.raises(KeyError):
        read_linux_memory(str(path), str(tmp_path / "x"), str(tmp_path / "y"))
    with pytest.raises(OSError):
        read_linux_memory(str(tmp_path / "missing"))


def test_parse_vm_stat() -> None:
    text = (
        "Mach Virtual Memory Statistics: (page size of 16384 bytes)\n"
        "Pages free:                               10000.\n"
        "Pages active:                            200000.\n"
        "Pages inactive:                           30000.\n"
        "Pages speculative:                         5000.\n"
    )
    assert governor._parse_vm_stat(text) == 40000 * 16384


def _fail() -> tuple[int, int]:
    raise OSError("unavailable")


def test_probe_memory_falls_through_to_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_probe_psutil", "read_linux_memory", "_probe_macos", "_probe_windows"):
        monkeypatch.setattr(governor, name, _fail)
    assert probe_memory() == (8 * GIB, 4 * GIB)


def test_probe_memory_skips_failing_and_garbage_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governor, "_probe_psutil", _fail)
    monkeypatch.setattr(governor, "read_linux_memory", lambda: (-5, "x"))
    monkeypatch.setattr(governor, "_probe_macos", lambda: (6 * GIB, 2 * GIB))
    monkeypatch.setattr(governor, "_probe_windows", _fail)
    assert probe_memory() == (6 * GIB, 2 * GIB)


def test_probe_memory_prefers_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governor, "_probe_psutil", lambda: (3 * GIB, 1 * GIB))
    monkeypatch.setattr(governor, "read_linux_memory", lambda: (6 * GIB, 2 * GIB))
    assert probe_memory() == (3 * GIB, 1 * GIB)


def test_probe_memory_on_this_machine() -> None:
    total, available = probe_memory()
    assert isinstance(total, int) and isinstance(available, int)
    assert 0 <= available <= total
    assert total > 0


def test_default_governor_probes_this_machine() -> None:
    gov = Governor(cfg())
    assert gov.tier in set(Tier)
    assert gov.tick().tier <= gov.cap
