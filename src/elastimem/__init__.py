"""elastimem: long-term memory for local-first LLM agents, kept in one SQLite file.

import elastimem
with elastimem.open("~/.local/share/myagent/memory.db") as mem:
    plan = mem.build_context(user_text)   # before the model call
    mem.record_turn(user_text, reply)     # after it
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("elastimem")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+dev"

from . import aio, llms
from .assembly import ContextPlan
from .config import ElastimemConfig
from .enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from .errors import (
    ClosedError,
    ConfigError,
    ElastimemError,
    EmbedderError,
    ImportFormatError,
    LLMError,
    SchemaTooNewError,
    StoreError,
    StoreLockedError,
)
from .governor import Budgets, MemoryProfile
from .store import Elastimem
from .users import open_user
from .values import (
    ChunkScoreBreakdown,
    ExplainResult,
    Fact,
    FactScoreBreakdown,
    GraphTraversalStep,
    Hit,
    TimelineResult,
)


def open(path: str, **kw: object) -> Elastimem:  # noqa: A001 - the documented entry point
    """Open (or create) a store: the same as ``Elastimem(path, **kw)``."""
    return Elastimem(path, **kw)  # type: ignore[arg-type]


__all__ = [
    "Budgets",
    "Cadence",
    "ChunkScoreBreakdown",
    "ClosedError",
    "ConfigError",
    "ConsolidationLevel",
    "ContextPlan",
    "Elastimem",
    "ElastimemConfig",
    "ElastimemError",
    "EmbedderError",
    "ExplainResult",
    "Fact",
    "FactScoreBreakdown",
    "GraphTraversalStep",
    "Hit",
    "ImportFormatError",
    "LLMError",
    "MemoryProfile",
    "RollingSummaryMode",
    "SchemaTooNewError",
    "StoreError",
    "StoreLockedError",
    "Tier",
    "TimelineResult",
    "__version__",
    "aio",
    "llms",
    "open",
    "open_user",
]
