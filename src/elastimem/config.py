"""``ElastimemConfig``: every tunable, its default and its validation (SPEC §3)."""

from __future__ import annotations

import copy
import difflib
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .enums import Tier
from .errors import ConfigError
from .text import normalize_key

DEFAULT_PROFILE_KEYS = frozenset({"name", "email", "location", "age", "occupation", "pronouns"})
DEFAULT_TIER_THRESHOLDS_GIB: dict[str, tuple[float, float]] = {
    "full": (16.0, 6.0),
    "standard": (8.0, 2.5),
}
DEFAULT_MEMORY_SPLIT: dict[str, float] = {
    "facts": 0.40,
    "episodic": 0.30,
    "sessions": 0.15,
    "lessons": 0.15,
}
VECTOR_BACKENDS = ("auto", "numpy", "hnsw", "pgvector")


def _default_profile_keys() -> set[str]:
    return set(DEFAULT_PROFILE_KEYS)


def _default_thresholds() -> dict[str, tuple[float, float]]:
    return dict(DEFAULT_TIER_THRESHOLDS_GIB)


def _default_split() -> dict[str, float]:
    return dict(DEFAULT_MEMORY_SPLIT)


@dataclass
class ElastimemConfig:
    """Every option of an elastimem store. Validated on construction and on each reconfigure."""

    context_tokens: int = 4096
    output_reserve: int = 512
    tool_reserve: int = 600
    static_prompt_tokens: int = 0
    profile_keys: set[str] = field(default_factory=_default_profile_keys)
    reserved_keys: set[str] = field(default_factory=set)
    quarantine_cap: int = 200
    fact_merge_review_window_days: float = 7.0
    max_lessons: int = 15
    lessons_in_prompt: int = 5
    chunk_target_tokens: int = 400
    min_query_words: int = 4
    min_retrieval_query_words: int = 1
    disable_builtin_embedder: bool = False
    fact_decay_half_life_days: float = 60.0
    fact_archive_threshold: float = 0.15
    episodic_recency_half_life_days: float = 30.0
    fact_recency_half_life_days: float = 90.0
    # Read from ELASTIMEM_TIER when each config is built, never at import time.
    tier_override: Tier | str | None = field(default_factory=Tier.from_env)
    upgrade_healthy_ticks: int = 10
    idle_consolidate_seconds: float = 90.0
    tier_thresholds_gib: dict[str, tuple[float, float]] = field(default_factory=_default_thresholds)
    working_share: float = 0.55
    memory_split: dict[str, float] = field(default_factory=_default_split)
    worker_max_tokens: int = 96
    batched_every_n_turns: int = 2
    lite_llm_extraction: bool = False
    graph_node_cap: int = 2000
    graph_edge_cap: int = 5000
    graph_decay_half_life_days: float = 30.0
    graph_archive_threshold: float = 0.15
    graph_merge_review_window_days: float = 7.0
    vector_backend: str = "auto"
    ann_min_rows: int = 200000
    # How long recall/explain/build_context wait for the built-in model while it loads
    # (well under a second from the ONNX cache; the first-ever conversion takes 10-60 s
    # on a 2-core machine). Past it
    # the result is made without the vector leg, explain() says "not_ready" and a warning
    # is logged once. 0 never waits.
    embedder_wait_seconds: float = 10.0

    def __post_init__(self) -> None:
        self._validate()

    # -- validation ------------------------------------------------------------------------

    def _validate(self) -> None:
        _int_at_least(self, "context_tokens", 1024)
        for name in ("output_reserve", "tool_reserve", "static_prompt_tokens"):
            _int_at_least(self, name, 0)
        self.profile_keys = _key_set(self, "profile_keys")
        self.reserved_keys = _key_set(self, "reserved_keys")
        _int_at_least(self, "quarantine_cap", 1)
        _positive(self, "fact_merge_review_window_days")
        _int_at_least(self, "max_lessons", 1)
        _int_at_least(self, "lessons_in_prompt", 0)
        _int_at_least(self, "chunk_target_tokens", 32)
        _int_at_least(self, "min_query_words", 0)
        _int_at_least(self, "min_retrieval_query_words", 0)
        _boolean(self, "disable_builtin_embedder")
        _positive(self, "fact_decay_half_life_days")
        _unit_interval(self, "fact_archive_threshold")
        _positive(self, "episodic_recency_half_life_days")
        _positive(self, "fact_recency_half_life_days")
        if self.tier_override is not None:
            try:
                self.tier_override = Tier.parse(self.tier_override)
            except ValueError:
                raise ConfigError(
                    f"tier_override={self.tier_override!r} is invalid; "
                    "use Tier.LITE/STANDARD/FULL, 'lite', 'standard', 'full' or None"
                ) from None
        _int_at_least(self, "upgrade_healthy_ticks", 1)
        _positive(self, "idle_consolidate_seconds")
        self.tier_thresholds_gib = _thresholds(self.tier_thresholds_gib)
        if not (_is_number(self.working_share) and 0 < self.working_share < 1):
            raise ConfigError(
                f"working_share={self.working_share!r} is invalid; use a number with 0 < x < 1"
            )
        self.memory_split = _split(self.memory_split)
        _int_at_least(self, "worker_max_tokens", 16)
        _int_at_least(self, "batched_every_n_turns", 1)
        _boolean(self, "lite_llm_extraction")
        _int_at_least(self, "graph_node_cap", 1)
        _int_at_least(self, "graph_edge_cap", 1)
        _positive(self, "graph_decay_half_life_days")
        _unit_interval(self, "graph_archive_threshold")
        _positive(self, "graph_merge_review_window_days")
        if self.vector_backend not in VECTOR_BACKENDS:
            raise ConfigError(
                f"vector_backend={self.vector_backend!r} is invalid; use one of "
                + ", ".join(repr(b) for b in VECTOR_BACKENDS)
            )
        _int_at_least(self, "ann_min_rows", 1)
        if not _is_number(self.embedder_wait_seconds) or self.embedder_wait_seconds < 0:
            raise ConfigError(
                f"embedder_wait_seconds={self.embedder_wait_seconds!r} is invalid; "
                "use a number of seconds >= 0"
            )
        self.embedder_wait_seconds = float(self.embedder_wait_seconds)

    # -- helpers ---------------------------------------------------------------------------

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_overrides(self, overrides: dict[str, Any]) -> ElastimemConfig:
        """A validated copy with ``overrides`` applied; unknown names raise ``ConfigError``."""
        check_option_names(overrides)
        return replace(copy.deepcopy(self), **copy.deepcopy(overrides))


def check_option_names(names: Any) -> None:
    """Raise ``ConfigError`` for the first unknown option, suggesting the closest name."""
    valid = ElastimemConfig.field_names()
    for name in names:
        if name not in valid:
            close = difflib.get_close_matches(str(name), valid, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                f"unknown option {name!r}; {hint}valid options: {', '.join(sorted(valid))}"
            )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_at_least(cfg: ElastimemConfig, name: str, minimum: int) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}={value!r} is invalid; use an integer >= {minimum}")


def _positive(cfg: ElastimemConfig, name: str) -> None:
    value = getattr(cfg, name)
    if not _is_number(value) or value <= 0:
        raise ConfigError(f"{name}={value!r} is invalid; use a number > 0")
    setattr(cfg, name, float(value))


def _unit_interval(cfg: ElastimemConfig, name: str) -> None:
    value = getattr(cfg, name)
    if not _is_number(value) or not 0 <= value < 1:
        raise ConfigError(f"{name}={value!r} is invalid; use a number in [0, 1)")
    setattr(cfg, name, float(value))


def _boolean(cfg: ElastimemConfig, name: str) -> None:
    value = getattr(cfg, name)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is invalid; use True or False")


def _key_set(cfg: ElastimemConfig, name: str) -> set[str]:
    value = getattr(cfg, name)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(f"{name}={value!r} is invalid; use a set of key strings")
    keys: set[str] = set()
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{name} holds {item!r}; every key must be a string")
        normalised = normalize_key(item)
        if normalised:
            keys.add(normalised)
    return keys


def _thresholds(value: object) -> dict[str, tuple[float, float]]:
    hint = "use {'full': (total, available), 'standard': (total, available)} in GiB, all > 0"
    if not isinstance(value, dict) or set(value) != {"full", "standard"}:
        raise ConfigError(f"tier_thresholds_gib={value!r} is invalid; {hint}")
    out: dict[str, tuple[float, float]] = {}
    for tier_name, pair in value.items():
        try:
            total, available = pair
        except (TypeError, ValueError):
            raise ConfigError(f"tier_thresholds_gib={value!r} is invalid; {hint}") from None
        if not (_is_number(total) and _is_number(available) and total > 0 and available > 0):
            raise ConfigError(f"tier_thresholds_gib={value!r} is invalid; {hint}")
        out[tier_name] = (float(total), float(available))
    full, standard = out["full"], out["standard"]
    if full[0] < standard[0] or full[1] < standard[1]:
        raise ConfigError(
            f"tier_thresholds_gib={value!r} is invalid; the 'full' thresholds must be at least "
            "the 'standard' ones"
        )
    return out


def _split(value: object) -> dict[str, float]:
    names = set(DEFAULT_MEMORY_SPLIT)
    hint = "use {'facts', 'episodic', 'sessions', 'lessons'} shares >= 0 that sum to 1"
    if not isinstance(value, dict) or set(value) != names:
        raise ConfigError(f"memory_split={value!r} is invalid; {hint}")
    if not all(_is_number(v) and v >= 0 for v in value.values()):
        raise ConfigError(f"memory_split={value!r} is invalid; {hint}")
    if abs(sum(value.values()) - 1.0) > 1e-6:
        raise ConfigError(f"memory_split={value!r} is invalid; {hint}")
    return {k: float(v) for k, v in value.items()}
