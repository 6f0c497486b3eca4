"""``stats()``: counts and sizes of one store, with its embedder, worker and LLM state; and
the whole-store checks the command line makes (``has_vectors``, ``holds_memories_outside``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..arguments import int_arg, optional_text
from ..enums import Tier
from ..storage import Database
from .services import BUILTIN_LABEL_PREFIX, Services, active_dim


def collect_stats(services: Services, tier: Tier) -> dict[str, Any]:
    store = services.db
    source = services.embedding
    with store.read() as conn:
        label = source.label
        if label is None and (source.builtin is not None or not source.configured):
            # Not loaded yet in this process (or no embedder here at all, as in the CLI's
            # one-shot commands): count against the model most vectors on file come from,
            # the built-in one's if it is wired in. Otherwise every vector read as stale.
            # The facts' vectors count too: a store of remembered facts alone has no chunk.
            prefix = BUILTIN_LABEL_PREFIX if source.builtin is not None else ""
            label = conn.stats.most_common_vector_model(prefix)
        dim = active_dim(services, conn, label) if label else None
        embedded, stale = conn.stats.chunk_vectors(label, dim)
        counts = conn.stats.counts()
        result: dict[str, Any] = {
            "path": store.path,
            "db_bytes": conn.stats.file_bytes(),
            "file_mode": conn.stats.file_mode(),
            "fts_enabled": store.fts_enabled,
            "schema_version": conn.meta.get_int("schema_version"),
            "tier": tier.name.lower(),
            "facts": counts["facts"],
            "fact_versions": counts["fact_versions"],
            "archived_facts": counts["archived_facts"],
            "sessions": counts["sessions"],
            "open_sessions": counts["open_sessions"],
            "messages": counts["messages"],
            "chunks": counts["chunks"],
            "embedded_chunks": embedded,
            "stale_embeddings": stale,
            # Live facts with a vector of the model in use (the facts' vector leg).
            "embedded_facts": conn.stats.embedded_facts(label, dim),
            "embedder": source.state(),
            "embedding_model": source.label,
            "vector_backend": services.vectors.backend_name(),
            "lessons": counts["lessons"],
            "quarantine": counts["quarantine"],
            "graph_nodes": counts["graph_nodes"],
            "graph_edges": counts["graph_edges"],
            "jobs_pending": counts["jobs_pending"],
            "jobs_failed": counts["jobs_failed"],
            "llm_calls": dict(services.gate.calls),
        }
    return result


def has_vectors(db: Database, model_prefix: object) -> bool:
    """Whether a chunk or fact has a vector whose model label starts with ``model_prefix``."""
    prefix = optional_text(model_prefix, "model_prefix") or ""
    with db.read() as tx:
        return tx.vectors.has_vectors_labelled(prefix)


def holds_memories_outside(db: Database, session_ids: Iterable[object]) -> bool:
    """Whether a lesson, or a fact version learned outside ``session_ids`` (or in none), is
    stored: the demo refuses a store that holds more than its own sessions."""
    ids = [int_arg(i, "session_ids") for i in session_ids]
    with db.read() as tx:
        return tx.admin.has_memories_outside(ids)
