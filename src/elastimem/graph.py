"""The entity graph (SPEC §5.7) — interface placeholder, replaced by the graph issue's work.

Only the functions the rest of the library calls are defined here; each is a safe no-op.
"""

from __future__ import annotations

import sqlite3
from typing import Any


def has_nodes(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM graph_nodes WHERE type <> 'self' LIMIT 1").fetchone()
    return row is not None


def link_chunks(conn: sqlite3.Connection, chunk_ids: list[int]) -> int:
    return 0


def build_signal(database: Any, text: str, hops: int) -> Any:
    return None


def list_clusters(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return []


def store_extraction(conn: sqlite3.Connection, entities: Any, relationships: Any,
                     chunk_rows: Any, **kw: Any) -> None:  # fmt: skip
    return None


def consolidate_decay(database: Any, config: Any) -> dict[str, int]:
    return {}


def consolidate_dedupe(database: Any) -> dict[str, int]:
    return {}


def consolidate_llm_merge(services: Any, config: Any) -> dict[str, int]:
    return {}


def consolidate_clusters(database: Any) -> dict[str, int]:
    return {}


def consolidate_labels(services: Any) -> dict[str, int]:
    return {}


def timeline_key(conn: sqlite3.Connection, text: str) -> str | None:
    return None
