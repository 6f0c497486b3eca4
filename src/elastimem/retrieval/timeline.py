"""§5.7 timeline: which fact key a question is about."""

from __future__ import annotations

from .. import graph
from ..storage.tx import Tx
from ..text import normalize_key, query_terms, word_tokens
from .rank import Filters, fact_keyword_leg


def resolve_timeline_key(conn: Tx, text: str, fts_enabled: bool) -> tuple[str | None, str]:
    """§5.7 timeline: an exact key, else the best fact row over all versions, else a key the
    question's words hint at, else one through the graph, else none."""
    key = normalize_key(text)
    if key and conn.facts.key_exists(key):
        return key, "exact"
    terms = query_terms(text)
    if terms:
        scores = fact_keyword_leg(conn, terms, Filters(), fts_enabled, live_only=False, limit=200)
        if scores:
            rows = conn.facts.keys_of(sorted(scores))
            best = max(rows, key=lambda r: (scores[r[0]], int(r[2]), r[0]))
            return best[1], "search"
    hinted = _hinted_timeline_key(conn, text)
    if hinted:
        return hinted, "search"
    found = graph.timeline_key(conn, text)
    if found:
        return found, "search"
    return None, "none"


# Words a question uses for a fact whose key and value it does not name ("where did I live
# before?" asks about location: Portland, then Denver), mapped to the keys rule capture and
# extraction write for it, in order of preference.
_PLACE_KEYS = ("location", "home_city", "city", "address", "home", "hometown")


_WORK_KEYS = ("employer", "occupation", "job", "job_title", "workplace", "company")


TIMELINE_KEY_HINTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("live", "lived", "living", "lives", "moved", "move", "stay"), _PLACE_KEYS),
    **dict.fromkeys(("work", "worked", "working", "works", "job", "jobs"), _WORK_KEYS),
    **dict.fromkeys(("called", "name", "named"), ("name",)),
    **dict.fromkeys(("eat", "ate", "diet"), ("diet",)),
    **dict.fromkeys(("allergic", "allergy", "allergies"), ("allergies",)),
}


def _hinted_timeline_key(conn: Tx, text: str) -> str | None:
    """The first stored key the question's words hint at (see TIMELINE_KEY_HINTS)."""
    for word in word_tokens(text):
        for key in TIMELINE_KEY_HINTS.get(word, ()):
            if conn.facts.key_exists(key):
                return key
    return None
