"""The resource governor: RAM probe, tiers, token budgets and the ``MemoryProfile`` (SPEC §5.2).

The governor answers one question for the rest of the library: what can this machine afford
right now? It probes total and available RAM, classifies the result into a ``Tier`` and turns
the tier plus the config into a ``MemoryProfile`` (token budgets and feature gates). ``tick``
re-probes and moves the tier down at once or up slowly; ``report_pressure`` lets the host say
"I'm short on memory" without waiting for the probe to notice.

The budget and profile functions are pure, so the assembly and worker modules can compute a
profile for any tier without a governor.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import ElastimemConfig
from .enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from .errors import ConfigError

__all__ = [
    "EMERGENCY_AVAILABLE_GIB",
    "GIB",
    "PRESSURE_WINDOW_SECONDS",
    "Budgets",
    "Cadence",
    "ConsolidationLevel",
    "Governor",
    "MemoryProfile",
    "RollingSummaryMode",
    "Tier",
    "build_profile",
    "classify",
    "compute_budgets",
    "probe_memory",
    "read_linux_memory",
]

logger = logging.getLogger("elastimem")

GIB = 2**30

# Below this much available RAM, any tier above LITE risks swapping the host's own model.
EMERGENCY_AVAILABLE_GIB = 1.2
# A host that reports pressure in a burst should lose one tier, not fall straight to LITE.
PRESSURE_WINDOW_SECONDS = 30.0

# What we assume when no probe works: an ordinary laptop, which classifies as STANDARD.
FALLBACK_TOTAL_BYTES = 8 * GIB
FALLBACK_AVAILABLE_BYTES = 4 * GIB

# Budget formula constants (§5.2). The LITE constants move most of the episodic and part of
# the sessions share into the working window: with no embedder, recall is weaker, so recent
# turns are the better use of the tokens.
MIN_DYNAMIC_TOKENS = 256
GRAPH_SHARE_OF_EPISODIC = 0.25
TOKENS_PER_TURN = 240
LITE_EPISODIC_KEEP = 0.45
LITE_EPISODIC_TO_WORKING = 0.55
LITE_SESSIONS_KEEP = 0.75
LITE_SESSIONS_TO_WORKING = 0.25

# Default locations of the Linux probe; parameters so that tests can feed temporary files.
PROC_MEMINFO_PATH = "/proc/meminfo"
CGROUP_MEMORY_MAX_PATH = "/sys/fs/cgroup/memory.max"
CGROUP_MEMORY_CURRENT_PATH = "/sys/fs/cgroup/memory.current"
# Subprocess probes (macOS) must never stall store construction.
SUBPROCESS_TIMEOUT_SECONDS = 2.0

ProbeFn = Callable[[], tuple[int, int]]
TierChangeFn = Callable[[Tier, Tier], Any]


# -- value types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Budgets:
    """Token budgets for the working window and each memory section of the prompt."""

    working: int
    facts: int
    episodic: int
    sessions: int
    lessons: int

    @property
    def memory_total(self) -> int:
        """Tokens the memory sections may use together (the working window excluded)."""
        return self.facts + self.episodic + self.sessions + self.lessons

    @property
    def graph(self) -> int:
        """The ``graph_context`` budget; carved out of ``episodic``, not added to it."""
        return int(self.episodic * GRAPH_SHARE_OF_EPISODIC)


@dataclass(frozen=True)
class MemoryProfile:
    """Everything the tier decides: budgets plus which background features may run."""

    tier: Tier
    budgets: Budgets
    embeddings_enabled: bool
    llm_extraction_enabled: bool
    extraction_cadence: Cadence
    consolidation_level: ConsolidationLevel
    episodic_top_k: int
    window_min_turns: int = 2
    graph_hops: int = 0
    vector_recall_enabled: bool = True
    embedder_load_allowed: bool = True
    rolling_summary_mode: RollingSummaryMode = RollingSummaryMode.LLM

    @property
    def rolling_summary_enabled(self) -> bool:
        """True when evicted turns are summarised by the LLM (not extractively)."""
        return self.rolling_summary_mode == RollingSummaryMode.LLM

    @property
    def keep_last_n_turns(self) -> int:
        """How many recent turns the host should keep verbatim in its window."""
        return max(self.window_min_turns, self.budgets.working // TOKENS_PER_TURN)


# -- budgets and profiles --------------------------------------------------------------------


def compute_budgets(config: ElastimemConfig, tier: Tier) -> Budgets:
    """Split the context window left after reserves into working and memory budgets (§5.2).

    The formulas are normative and reproduce the §5.2 example table exactly; the final trim
    only matters for splits that sum to slightly more than 1 (the config accepts ±1e-6), so
    that the budgets never add up to more than the tokens actually available.
    """
    tier = Tier.parse(tier)
    dynamic = max(
        MIN_DYNAMIC_TOKENS,
        config.context_tokens
        - config.output_reserve
        - config.tool_reserve
        - config.static_prompt_tokens,
    )
    working = int(dynamic * config.working_share)
    pool = dynamic - working
    split = config.memory_split
    ep, se = split["episodic"], split["sessions"]
    facts = int(pool * split["facts"])
    episodic = int(pool * ep)
    sessions = int(pool * se)
    lessons = int(pool * split["lessons"])
    if tier is Tier.LITE:
        episodic = int(pool * ep * LITE_EPISODIC_KEEP)
        sessions = int(pool * se * LITE_SESSIONS_KEEP)
        working += int(pool * (ep * LITE_EPISODIC_TO_WORKING + se * LITE_SESSIONS_TO_WORKING))
    values = {
        "working": working,
        "facts": facts,
        "episodic": episodic,
        "sessions": sessions,
        "lessons": lessons,
    }
    _trim_excess(values, dynamic)
    return Budgets(**values)


def _trim_excess(values: dict[str, int], limit: int) -> None:
    """Take any tokens over ``limit`` from the largest budgets, so the sum never exceeds it."""
    excess = sum(values.values()) - limit
    while excess > 0:
        name = max(values, key=lambda n: values[n])
        take = min(excess, values[name])
        values[name] -= take
        excess -= take


def build_profile(config: ElastimemConfig, tier: Tier) -> MemoryProfile:
    """The ``MemoryProfile`` for ``tier`` under ``config`` (the §5.2 profile table)."""
    tier = Tier.parse(tier)
    budgets = compute_budgets(config, tier)
    if tier is Tier.FULL:
        return MemoryProfile(
            tier=tier,
            budgets=budgets,
            embeddings_enabled=True,
            llm_extraction_enabled=True,
            extraction_cadence=Cadence.PER_TURN,
            consolidation_level=ConsolidationLevel.FULL,
            episodic_top_k=5,
            window_min_turns=2,
            graph_hops=2,
            vector_recall_enabled=True,
            embedder_load_allowed=True,
            rolling_summary_mode=RollingSummaryMode.LLM,
        )
    if tier is Tier.STANDARD:
        return MemoryProfile(
            tier=tier,
            budgets=budgets,
            embeddings_enabled=True,
            llm_extraction_enabled=True,
            extraction_cadence=Cadence.BATCHED,
            consolidation_level=ConsolidationLevel.DEDUPE_ONLY,
            episodic_top_k=4,
            window_min_turns=2,
            graph_hops=1,
            vector_recall_enabled=True,
            embedder_load_allowed=True,
            rolling_summary_mode=RollingSummaryMode.LLM,
        )
    # LITE: no model loads; LLM extraction only if the host opted in, and then only once per
    # session, at its end.
    opted_in = config.lite_llm_extraction
    return MemoryProfile(
        tier=tier,
        budgets=budgets,
        embeddings_enabled=False,
        llm_extraction_enabled=opted_in,
        extraction_cadence=Cadence.SESSION_END if opted_in else Cadence.OFF,
        consolidation_level=ConsolidationLevel.DEDUPE_ONLY,
        episodic_top_k=3,
        window_min_turns=2,
        graph_hops=1,
        vector_recall_enabled=True,
        embedder_load_allowed=False,
        rolling_summary_mode=RollingSummaryMode.EXTRACTIVE,
    )


# -- classification --------------------------------------------------------------------------


def classify(
    total_bytes: int, available_bytes: int, thresholds: Mapping[str, tuple[float, float]]
) -> Tier:
    """FULL, STANDARD or LITE from (total, available) bytes and the GiB ``thresholds``.

    Both figures must clear a tier's bar: a big machine that is nearly full is not FULL.
    """
    for name, tier in (("full", Tier.FULL), ("standard", Tier.STANDARD)):
        min_total, min_available = thresholds[name]
        if total_bytes >= min_total * GIB and available_bytes >= min_available * GIB:
            return tier
    return Tier.LITE


def _is_emergency(available_bytes: int) -> bool:
    return available_bytes < EMERGENCY_AVAILABLE_GIB * GIB


# -- the probe -------------------------------------------------------------------------------


def probe_memory() -> tuple[int, int]:
    """(total_bytes, available_bytes) of RAM, from the first source that works.

    Tries psutil, Linux /proc + cgroup v2, macOS sysctl/vm_stat, Windows
    GlobalMemoryStatusEx, and finally assumes 8 GiB / 4 GiB. Never raises: a memory probe
    must not be the reason a store fails to open.
    """
    for step in (_probe_psutil, read_linux_memory, _probe_macos, _probe_windows):
        try:
            return _checked_sample(step())
        except Exception:  # any failure just means "try the next source"
            continue
    return FALLBACK_TOTAL_BYTES, FALLBACK_AVAILABLE_BYTES


def _checked_sample(sample: object) -> tuple[int, int]:
    """Coerce a probe result to two ints, or raise ``ValueError`` when it is garbage.

    Available is clamped to total: some sources sample the two figures at different instants.
    """
    if not isinstance(sample, (tuple, list)) or len(sample) != 2:
        raise ValueError(f"probe returned {sample!r}, not (total_bytes, available_bytes)")
    total, available = sample
    for value in (total, available):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"probe returned {sample!r}; both figures must be finite and >= 0")
    if total <= 0:
        raise ValueError(f"probe returned {sample!r}; total memory must be > 0")
    total_i = int(total)
    return total_i, min(int(available), total_i)


def _probe_psutil() -> tuple[int, int]:
    import psutil  # optional; an ImportError falls through to the next source

    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def read_linux_memory(
    meminfo_path: str = PROC_MEMINFO_PATH,
    cgroup_max_path: str = CGROUP_MEMORY_MAX_PATH,
    cgroup_current_path: str = CGROUP_MEMORY_CURRENT_PATH,
) -> tuple[int, int]:
    """MemTotal/MemAvailable from ``/proc/meminfo``, capped by the cgroup v2 memory limit.

    In a container /proc/meminfo shows the host's RAM; the cgroup limit is what the process
    can really use. A missing or unreadable cgroup file (no cgroup v2, no limit) means no
    cap; a missing MemTotal or MemAvailable raises so the caller tries the next source.
    """
    fields: dict[str, int] = {}
    with open(meminfo_path, encoding="ascii", errors="replace") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if name in ("MemTotal", "MemAvailable") and parts:
                scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
                fields[name] = int(parts[0]) * scale
    total, available = fields["MemTotal"], fields["MemAvailable"]

    limit = _read_cgroup_int(cgroup_max_path)
    if limit is not None:
        total = min(total, limit)
        available = min(available, limit)
        current = _read_cgroup_int(cgroup_current_path)
        if current is not None:
            available = min(available, max(0, limit - current))
    return total, min(available, total)


def _read_cgroup_int(path: str) -> int | None:
    """The integer in a cgroup file, or None for "max", a missing file or anything odd."""
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def _probe_macos() -> tuple[int, int]:
    if sys.platform != "darwin":
        raise OSError("not macOS")
    total = int(_run(["sysctl", "-n", "hw.memsize"]).strip())
    return total, _parse_vm_stat(_run(["vm_stat"]))


def _run(argv: list[str]) -> str:
    return subprocess.run(
        argv, capture_output=True, text=True, check=True, timeout=SUBPROCESS_TIMEOUT_SECONDS
    ).stdout


_VM_STAT_PAGE_SIZE = re.compile(r"page size of (\d+) bytes")
_VM_STAT_LINE = re.compile(r"^(Pages free|Pages inactive):\s+(\d+)\.?\s*$", re.MULTILINE)


def _parse_vm_stat(text: str) -> int:
    """Bytes in free + inactive pages from ``vm_stat`` output (what macOS can hand out)."""
    size = _VM_STAT_PAGE_SIZE.search(text)
    if size is None:
        raise ValueError("vm_stat output has no page size")
    pages = {name: int(count) for name, count in _VM_STAT_LINE.findall(text)}
    return (pages["Pages free"] + pages["Pages inactive"]) * int(size.group(1))


def _probe_windows() -> tuple[int, int]:
    if sys.platform != "win32":
        raise OSError("not Windows")
    import ctypes

    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [
            ("dwLength", ctypes.c_ulong),
            ("dwMemoryLoad", ctypes.c_ulong),
            ("ullTotalPhys", ctypes.c_ulonglong),
            ("ullAvailPhys", ctypes.c_ulonglong),
            ("ullTotalPageFile", ctypes.c_ulonglong),
            ("ullAvailPageFile", ctypes.c_ulonglong),
            ("ullTotalVirtual", ctypes.c_ulonglong),
            ("ullAvailVirtual", ctypes.c_ulonglong),
            ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
        ]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(MemoryStatusEx)
    kernel32 = getattr(ctypes, "windll").kernel32  # noqa: B009 - windll exists only on Windows
    if not kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        raise OSError("GlobalMemoryStatusEx failed")
    return int(status.ullTotalPhys), int(status.ullAvailPhys)


# -- the governor ----------------------------------------------------------------------------


def _validated(config: object) -> ElastimemConfig:
    """A freshly validated copy, so a config mutated after construction cannot slip through."""
    if not isinstance(config, ElastimemConfig):
        raise ConfigError(f"config={config!r} is invalid; pass an ElastimemConfig")
    return dataclasses.replace(config)


class Governor:
    """Tracks the resource tier and the profile derived from it; safe to share across threads.

    State changes happen under one internal lock; ``on_tier_change`` is always called after
    that lock is released, so a callback may read the governor or even call ``tick()``.
    """

    def __init__(
        self,
        config: ElastimemConfig,
        *,
        probe_fn: ProbeFn | None = None,
        on_tier_change: TierChangeFn | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._probe_fn = probe_fn
        self._on_tier_change = on_tier_change
        self._clock = clock
        # Guards the warn-once flags; separate so warnings never need the state lock.
        self._warn_lock = threading.Lock()
        self._warned: set[str] = set()
        self._config = _validated(config)
        self._streak = 0
        self._last_pressure_drop: float | None = None  # none counts at start
        # Probe even when pinned: construction always probes once (SPEC §1.1), so a broken
        # probe_fn is reported up front rather than when the override is later cleared.
        classified = classify(*self._probe(), self._config.tier_thresholds_gib)
        override = self._override()
        self._tier = classified if override is None else override
        self._cap = self._tier
        self._profile = build_profile(self._config, self._tier)

    # -- read-only state -----------------------------------------------------------------------

    @property
    def tier(self) -> Tier:
        with self._lock:
            return self._tier

    @property
    def cap(self) -> Tier:
        """The highest tier automatic upgrades may reach: the override, else the first probe."""
        with self._lock:
            return self._cap

    @property
    def profile(self) -> MemoryProfile:
        with self._lock:
            return self._profile

    @property
    def config(self) -> ElastimemConfig:
        with self._lock:
            return self._config

    # -- transitions -----------------------------------------------------------------------------

    def tick(self) -> MemoryProfile:
        """Re-probe and apply the tier rules: down at once, up one step after a healthy streak."""
        if self._override_unlocked() is not None:
            return self.profile
        sample = self._probe()  # outside the lock: a probe may be slow or call back into us
        with self._lock:
            if self._override() is not None:
                return self._profile
            change = self._apply_tick_rules(sample)
            profile = self._profile
        self._notify(change)
        return profile

    def report_pressure(self) -> MemoryProfile:
        """Step down one tier because the host says memory is short; at most once per 30 s."""
        change: tuple[Tier, Tier] | None = None
        with self._lock:
            if self._override() is not None:
                return self._profile
            self._streak = 0
            now = self._clock()
            recent = (
                self._last_pressure_drop is not None
                and now - self._last_pressure_drop < PRESSURE_WINDOW_SECONDS
            )
            if not recent and self._tier > Tier.LITE:
                self._last_pressure_drop = now
                change = self._set_tier(Tier(self._tier - 1))
            profile = self._profile
        self._notify(change)
        return profile

    def reconfigure(self, config: ElastimemConfig, *, reprobe: bool = False) -> MemoryProfile:
        """Validate and adopt ``config``, rebuild the profile and apply any override change.

        Setting ``tier_override`` pins that tier (and cap) at once; clearing it re-probes and
        sets tier and cap to the fresh classification; ``reprobe=True`` without an override
        applies the ``tick()`` rules once.
        """
        new_config = _validated(config)
        new_override = (
            None if new_config.tier_override is None else Tier.parse(new_config.tier_override)
        )
        while True:
            # Probe outside the lock (it may be slow or call back into us). If a concurrent
            # reconfigure pinned the tier after we looked, loop and probe again.
            needs_sample = new_override is None and (
                reprobe or self._override_unlocked() is not None
            )
            sample = self._probe() if needs_sample else None
            with self._lock:
                was_pinned = self._override() is not None
                if new_override is None and (was_pinned or reprobe) and sample is None:
                    continue
                self._config = new_config
                change: tuple[Tier, Tier] | None = None
                if new_override is not None:
                    self._cap = new_override
                    change = self._set_tier(new_override)
                elif was_pinned and sample is not None:
                    fresh = classify(*sample, new_config.tier_thresholds_gib)
                    self._cap = fresh
                    self._streak = 0
                    change = self._set_tier(fresh)
                elif reprobe and sample is not None:
                    change = self._apply_tick_rules(sample)
                self._profile = build_profile(self._config, self._tier)
                profile = self._profile
            break
        self._notify(change)
        return profile

    # -- internals (the caller holds the lock unless the name says otherwise) -------------------

    def _override(self) -> Tier | None:
        override = self._config.tier_override
        return None if override is None else Tier.parse(override)

    def _override_unlocked(self) -> Tier | None:
        with self._lock:
            return self._override()

    def _apply_tick_rules(self, sample: tuple[int, int]) -> tuple[Tier, Tier] | None:
        total, available = sample
        if _is_emergency(available):
            if self._tier is not Tier.LITE:
                return self._set_tier(Tier.LITE)
            self._streak = 0
            return None
        target = classify(total, available, self._config.tier_thresholds_gib)
        if target < self._tier:
            return self._set_tier(target)  # may skip a level: memory is short now
        if target > self._tier and self._tier < self._cap:
            self._streak += 1
            if self._streak >= self._config.upgrade_healthy_ticks:
                return self._set_tier(Tier(self._tier + 1))
            return None
        self._streak = 0  # same tier, or already at the cap
        return None

    def _set_tier(self, new: Tier) -> tuple[Tier, Tier] | None:
        """Switch to ``new``; return (old, new) for the callback, or None when nothing changed."""
        old = self._tier
        if new == old:
            return None
        self._tier = Tier(new)
        self._streak = 0
        self._profile = build_profile(self._config, self._tier)
        logger.info("elastimem tier changed from %s to %s", old.name, self._tier.name)
        return old, self._tier

    def _probe(self) -> tuple[int, int]:
        """(total, available) from ``probe_fn`` or the built-in probe; never raises."""
        if self._probe_fn is None:
            return probe_memory()
        try:
            return _checked_sample(self._probe_fn())
        except Exception as exc:  # a host hook must not break the governor
            if self._first_warning("probe_fn"):
                logger.warning(
                    "probe_fn failed (%s); assuming 8 GiB total / 4 GiB available. "
                    "Make probe_fn return (total_bytes, available_bytes) as two ints.",
                    exc,
                )
            return FALLBACK_TOTAL_BYTES, FALLBACK_AVAILABLE_BYTES

    def _first_warning(self, topic: str) -> bool:
        """True exactly once per instance for ``topic``: warnings that could repeat log once."""
        with self._warn_lock:
            if topic in self._warned:
                return False
            self._warned.add(topic)
            return True

    def _notify(self, change: tuple[Tier, Tier] | None) -> None:
        """Call ``on_tier_change``; the lock is NOT held here, and its errors are swallowed."""
        if change is None or self._on_tier_change is None:
            return
        old, new = change
        try:
            self._on_tier_change(old, new)
        except Exception:  # the host's callback must not break the governor
            if self._first_warning("on_tier_change"):
                logger.warning(
                    "on_tier_change(%s, %s) raised; ignoring it (logged once per governor)",
                    old.name,
                    new.name,
                    exc_info=True,
                )
            else:
                logger.debug("on_tier_change(%s, %s) raised again", old.name, new.name)
