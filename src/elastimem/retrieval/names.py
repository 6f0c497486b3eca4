"""Name discrimination (SPEC §5.6, see ``query.rank_query``).

A name that occurs in a large share of the exchanges (the two speakers of a conversation,
the user's own name: "Thanks, Caroline!") says nothing about which exchange a question
means, yet it matches every greeting in the keyword leg and pulls the query vector toward
them. ``common_names`` finds the names of a question (capitalised words past the start of
a sentence) that occur in more than ``COMMON_NAME_SHARE`` of the chunks; the query then
runs without them, in both legs (``without``, ``strip``). A name that discriminates (a
friend mentioned in a few exchanges, a place) stays and counts like any other term.
"""

from __future__ import annotations

import logging
import re

from ..errors import StoreError
from ..storage.tx import Tx

logger = logging.getLogger("elastimem")

# Tuned 2026-12-01 on the LoCoMo dev split only (benchmarks/locomo.py, hybrid, exchange
# level R@5 / R@10; cat 1 multi-hop, 3 open-domain; with temporal.py as chosen). The two
# speakers' names are in ~25-60% of a conversation's exchanges ("Thanks, Mel!").
#
#   names kept (temporal.py only)            0.7640 / 0.8284
#   share 0.3, left out of both legs         0.7640 / 0.8304  cat1 .405/.520  cat3 .415/.462 <-
#   share 0.2, keyword terms only            0.7630 / 0.8283
#   share 0.2, query vector only             0.7566 / 0.8331
#   share 0.5, both legs                     0.7613 / 0.8275
#   share 0.2 / 0.1, both (no date bonus)    0.7391 / 0.8219, 0.7367 / 0.8182 (main 0.7473 / 0.8176)
# Keyword only, share 0.3: 0.7183 / 0.7677 against 0.7018 / 0.7611. A lower share also
# drops names that still say who did what ("Melanie's kids"), so the smallest step that
# helps both granularities (session R@10 0.933 -> 0.945 with the date bonus) was kept.
# A name that discriminates (in the question, not calendar words, below the share) was also
# given its own bonus, NAME_BONUS × the share of such names a matching chunk holds (2026-12-02;
# hybrid / keyword only): 0.05 0.7604 / 0.8262, 0.7193 / 0.7681; 0.1 0.7602 / 0.8255,
# 0.7219 / 0.7655; 0.2 0.7501 / 0.8122, 0.7169 / 0.7622. Not kept: such a name is rare, so
# BM25's idf already makes it count, and a bonus lifts every passing mention of it.
COMMON_NAME_SHARE = 0.3
# Below this many chunks a share says little (a new store's first exchanges all greet).
MIN_CHUNKS = 20

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$")


def name_words(question: str) -> list[str]:
    """Capitalised words of ``question`` that do not start a sentence, as written
    ("What do Melanie's kids like?" -> ["Melanie"]); "I" is no name."""
    out: list[str] = []
    for match in _WORD.finditer(question):
        word = match.group().split("'")[0].split("’")[0]
        if not word[:1].isupper() or word == "I" or len(word) < 2:
            continue
        before = question[: match.start()]
        if not before.strip() or _SENTENCE_END.search(before) or before.rstrip().endswith('"'):
            continue
        out.append(word)
    return out


def common_names(conn: Tx, question: str, corpus: str = "chunks") -> frozenset[str]:
    """The names of ``question`` (lower-cased) found in more than ``COMMON_NAME_SHARE`` of
    the corpus's rows; empty on a store of fewer than ``MIN_CHUNKS`` rows."""
    names = {w.lower() for w in name_words(question)}
    if not names:
        return frozenset()
    common = set()
    try:
        rows = conn.postings.state(corpus).rows
        if rows < MIN_CHUNKS:
            return frozenset()
        for name in sorted(names):
            size = conn.postings.term_size(corpus, name)
            if size is not None and size[0] > COMMON_NAME_SHARE * rows:
                common.add(name)
    except StoreError as exc:  # no keyword index to ask (FTS5 missing): names stay
        logger.debug("name shares unavailable: %s", exc)
        return frozenset()
    return frozenset(common)


def without(terms: list[str], common: frozenset[str]) -> list[str]:
    """``terms`` less the common names, unless nothing else would remain."""
    kept = [t for t in terms if t.lower() not in common]
    return kept if kept else terms


def strip(question: str, common: frozenset[str]) -> str:
    """``question`` without the common names (and their possessive "'s"), for the query
    vector; the question itself when nothing else would remain."""
    if not common:
        return question
    alternatives = "|".join(re.escape(n) for n in sorted(common))
    pattern = rf"\b(?:{alternatives})(?:['’]s)?\b"
    out = re.sub(r"\s{2,}", " ", re.sub(pattern, "", question, flags=re.IGNORECASE)).strip()
    return out if _WORD.search(out) else question
