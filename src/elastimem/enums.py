"""The small enums shared by the governor, the config and the worker."""

from __future__ import annotations

import logging
import os
from enum import Enum, IntEnum

logger = logging.getLogger("elastimem")

TIER_ENV_VAR = "ELASTIMEM_TIER"


class Tier(IntEnum):
    """Resource tier: what the machine can afford right now. Ordered LITE < STANDARD < FULL."""

    LITE = 0
    STANDARD = 1
    FULL = 2

    @classmethod
    def parse(cls, value: object) -> Tier:
        """Accept a Tier, its int value or its name in any case ("lite", " FULL ")."""
        if isinstance(value, Tier):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1, 2):
            return cls(value)
        if isinstance(value, str):
            name = value.strip().upper()
            if name in cls.__members__:
                return cls[name]
        raise ValueError(f"unknown tier {value!r}; use 'lite', 'standard' or 'full'")

    @classmethod
    def from_env(cls) -> Tier | None:
        """The tier named by ``ELASTIMEM_TIER``, or None when it is unset or invalid."""
        raw = os.environ.get(TIER_ENV_VAR)
        if raw is None or not raw.strip():
            return None
        try:
            return cls.parse(raw)
        except ValueError:
            logger.warning(
                "ignoring %s=%r; set it to 'lite', 'standard' or 'full'", TIER_ENV_VAR, raw
            )
            return None


class Cadence(str, Enum):
    """When LLM extraction runs."""

    PER_TURN = "per_turn"
    BATCHED = "batched"
    SESSION_END = "session_end"
    OFF = "off"


class ConsolidationLevel(str, Enum):
    """How much consolidation does; the governor emits only FULL and DEDUPE_ONLY."""

    FULL = "full"
    DEDUPE_ONLY = "dedupe_only"
    OFF = "off"


class RollingSummaryMode(str, Enum):
    """How the rolling digest of evicted turns is written."""

    LLM = "llm"
    EXTRACTIVE = "extractive"
    MARKER = "marker"
