"""elastimem: long-term memory for local-first LLM agents, kept in one SQLite file.

import elastimem
with elastimem.open("~/.local/share/myagent/memory.db") as mem:
    plan = mem.build_context(user_text)   # before the model call
    mem.record_turn(user_text, reply)     # after it
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .assembly import ContextPlan
from .config import ElastimemConfig
from .enums import Cadence, ConsolidationLevel, RollingSummaryMode, Tier
from .errors import (
    ClosedError,
    ConfigError,
    ElastimemError,
    EmbedderError,
    EncryptionKeyError,
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

if TYPE_CHECKING:
    from . import aio, llms

    __version__: str

# Submodules of the public surface loaded on first use (see __getattr__).
_LAZY_MODULES = ("aio", "llms")


def __getattr__(name: str) -> Any:
    """``__version__``, ``aio`` and ``llms`` on first use: importlib.metadata, asyncio and
    the HTTP client modules cost ~0.2 s of every start (CLI, first recall) that most
    processes never use."""
    if name == "__version__":
        from .version import package_version

        version = package_version()
        globals()["__version__"] = version
        return version
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "EncryptionKeyError",
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
