"""The timeline's graph step: a fact key for a question the fact search could not resolve."""

from __future__ import annotations

from ..storage.tx import Tx
from ..text import sanitize
from .names import _fold_tokens
from .signal import _signal

# Follow at most one hop from the query's seeds, to stay conservative.
TIMELINE_HOPS = 1


def timeline_key(conn: Tx, text: object) -> str | None:
    """A fact key for a question the fact search could not resolve, through the graph.

    Conservative: the query's seeds first, then their direct neighbours (never through the
    self node), each in turn by (depth, −strength, id); the first node whose name or alias
    occurs at a word boundary in a fact's key or value (any version) gives that fact's key,
    preferring a live row, then the newest. None when nothing is named or nothing matches.
    """
    tokens = _fold_tokens(sanitize(text))
    if not tokens:
        return None
    signal = _signal(conn, tokens, TIMELINE_HOPS)
    if signal is None:
        return None
    facts = conn.graph.all_fact_texts()
    matched = [(f, signal.matched_nodes(f[1], f[2])) for f in facts]
    ordered = sorted(signal.reached.values(), key=lambda r: (r.depth, -r.strength, r.node_id))
    for node in ordered:
        hits = [f for f, nodes in matched if node.node_id in nodes]
        if hits:
            return max(hits, key=lambda f: (f[3], f[0]))[1]
    return None
