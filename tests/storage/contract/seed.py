"""Rows for the contract suite, written through the memory layer (so any backend works)."""

from __future__ import annotations

from typing import Any

from elastimem.clock import now_ts
from elastimem.config import ElastimemConfig
from elastimem.memory import episodic, semantic
from elastimem.memory.episodic import Owner

ME = Owner(4242, "contract-host")
OTHER = Owner(4343, "elsewhere")
_CONFIG = ElastimemConfig()


def session(tx: Any, at: str | None = None) -> int:
    """A new open session of ``ME``."""
    return episodic.open_session(tx, ME, at=at, host_tag=None)


def turn(tx: Any, session_id: int, user: str, assistant: str = "ok", at: str | None = None) -> Any:
    """One exchange, one chunk (its text ``User: … Assistant: …``)."""
    return episodic.insert_turn(
        tx,
        session_id,
        user,
        assistant,
        at=at or now_ts(),
        chunk_texts=[episodic.exchange_text(user, assistant)],
        user_tokens=len(user.split()),
        assistant_tokens=len(assistant.split()),
    )


def fact(tx: Any, key: str, value: str, *, source: str = "explicit", at: str | None = None) -> int:
    """Write one fact version; its id."""
    written = semantic.write_fact(
        tx,
        key,
        value,
        source,
        profile_keys=_CONFIG.profile_keys,
        reserved_keys=_CONFIG.reserved_keys,
        quarantine_cap=_CONFIG.quarantine_cap,
        at=at,
    )
    assert written.fact_id is not None, written
    return int(written.fact_id)
