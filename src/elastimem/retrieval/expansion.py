"""Query expansion on the keyword leg from the store's own words (SPEC §5.6, see ``rank``).

RM3-style: the best ``EXPANSION_DOCS`` candidates of the vector leg (of the keyword leg
when the vector leg did not run) are taken as relevant; their words that are frequent in
them and rare in the store (``rm_weight × idf``, at most ``EXPANSION_MAX_SHARE`` of the
rows, in at least ``EXPANSION_MIN_DF``) become ``EXPANSION_TERMS`` more keyword terms,
each weighted by that score relative to the best one. Their BM25 over the whole store is
a fourth leg, ``s_exp``, min-max normalised with a floor like the keyword leg, fused with
``EXPANSION_WEIGHT``. It brings in exchanges that share the specific words of what the
question's meaning found ("dinosaur", "marshmallows") without sharing the question's
words: an answer spread over a conversation is told in the words of its first mention.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable

from ..index.keyword import KeywordIndex
from ..storage.tx import Tx
from ..text import STOPWORDS

# Tuned 2026-12-02 on the LoCoMo dev split only (benchmarks/locomo.py through the API,
# exchange level R@5 / R@10; cat 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop;
# before: hybrid 0.7640 / 0.8304, keyword only 0.7183 / 0.7677):
#
#   hybrid, feedback docs by                  all                c1         c3         c4
#   fused relevance, 3 docs, w 0.05-0.2       0.7615-0.7636 / 0.8270-0.8304 (no gain)
#   half-weight keyword + vector, w 0.1       0.7618 / 0.8303
#   vector leg, 3 docs, w 0.1                 0.7609 / 0.8372  .392/.533  .415/.492  .878/.944
#   vector leg, 1 / 5 docs                    0.7634 / 0.8376, 0.7616 / 0.8396
#   vector leg, 2 docs, w 0.07 / 0.15         0.7628 / 0.8360, 0.7617 / 0.8391 (3 docs)
#   vector leg, 2 docs, 4 / 12 terms          0.7612 / 0.8362 (3 docs), 0.7625 / 0.8377
#   vector leg, 3 docs, no new candidates     0.7609 / 0.8358
#   vector leg, 2 docs, 8 terms, w 0.1        0.7632 / 0.8384  .397/.525  .415/.492  .881/.949 <-
#   keyword only (keyword docs), w 0.1: 1 / 2 / 3 docs 0.7178 / 0.7735, 0.7181 / 0.7752,
#   0.7199 / 0.7744 (single-hop .823/.864, .823/.866, .826/.866 against .826/.859) <-
#   (EXPANSION_KEYWORD_DOCS); 5 docs 0.7140 / 0.7750; w 0.3 0.7187 / 0.7768.
# R@10 gains on a plateau (+0.006 to +0.009) at the price of R@5 -0.001 to -0.003; the
# idf exponent (0 / 0.5 / 1), the share (0.03 / 0.05 / 0.1) and a word in two docs instead
# of one move it by ±0.002. The question's best keyword hits as the feedback (classic RM3)
# add nothing in hybrid mode: the vector leg's feedback (boosts.FEEDBACK_WEIGHT) already
# reads what they say.
EXPANSION_DOCS = 2
EXPANSION_KEYWORD_DOCS = 3
EXPANSION_TERMS = 8
EXPANSION_WEIGHT = 0.10
EXPANSION_MAX_SHARE = 0.10
EXPANSION_MIN_DF = 2
EXPANSION_CANDIDATES = 50
# Below this many rows a share says little (every word is rare in a new store).
EXPANSION_MIN_ROWS = 20

_WORD = re.compile(r"[^\W\d_]{3,}")

logger = logging.getLogger("elastimem")


def leg(
    conn: Tx,
    terms: list[str],
    index: KeywordIndex | None,
    keyword: dict[int, float],
    found: list[tuple[int, float]] | None,
    normalise: Callable[[list[tuple[int, float]], int], dict[int, float]],
) -> dict[int, float]:
    """``s_exp`` per chunk, fed by the vector leg's best (``found``, cosines best first),
    or the keyword leg's when it did not run; ``normalise`` as the keyword leg's. Empty
    without the keyword index (FTS5 missing) or when it fails: the ranking goes on."""
    feedback = list(found[:EXPANSION_DOCS]) if found else []
    if not feedback:
        feedback = sorted(keyword.items(), key=lambda item: (-item[1], -item[0]))
        feedback = feedback[:EXPANSION_KEYWORD_DOCS]
    if index is None or not feedback or EXPANSION_WEIGHT <= 0:
        return {}
    try:
        with conn.guarded():
            rows = expansion_leg(conn, index, terms, feedback)
    except Exception as exc:  # the expansion failing must never cost the other legs' hits
        logger.warning("query expansion failed; ranking without it: %s", exc)
        return {}
    return normalise(rows, EXPANSION_CANDIDATES)


def expansion_leg(
    conn: Tx,
    index: KeywordIndex,
    terms: list[str],
    feedback: list[tuple[int, float]],
) -> list[tuple[int, float]]:
    """The best ``EXPANSION_CANDIDATES`` chunks by the BM25 of the words the ``feedback``
    chunks ((id, score), taken as relevant) add to ``terms``, as (id, score) best first (the
    caller normalises them as the keyword leg); empty when there is nothing to add."""
    docs = [(cid, score) for cid, score in feedback if score > 0]
    if not docs:
        return []
    texts = dict(conn.transcript.chunk_texts([cid for cid, _ in docs]))
    total = sum(score for _, score in docs)
    rm: dict[str, float] = {}  # RM1: sum over the docs of P(doc) · P(word | doc)
    for cid, score in docs:
        words = [w.lower() for w in _WORD.findall(texts.get(cid, ""))]
        for word in words:
            if word not in STOPWORDS:
                rm[word] = rm.get(word, 0.0) + score / total / len(words)
    if not rm:
        return []
    found = index.document_frequencies(conn, [*terms, *rm])
    if found is None or found[0] < EXPANSION_MIN_ROWS:
        return []
    rows, frequencies = found
    asked = {frequencies[t][0] for t in terms if t in frequencies}
    chosen: dict[str, list[str | float]] = {}  # token -> [a word of it, summed RM1 weight]
    for word, weight in rm.items():
        token, df = frequencies.get(word, ("", 0))
        if token and token not in asked and EXPANSION_MIN_DF <= df <= EXPANSION_MAX_SHARE * rows:
            entry = chosen.setdefault(token, [word, 0.0])
            entry[1] = float(entry[1]) + weight * math.log((rows - df + 0.5) / (df + 0.5))
    best = sorted(((str(w), float(s)) for w, s in chosen.values()), key=lambda i: (-i[1], i[0]))
    best = best[:EXPANSION_TERMS]
    if not best:
        return []
    hits = index.top(
        conn,
        [word for word, _ in best],
        EXPANSION_CANDIDATES,
        any_size=True,
        weights=[score / best[0][1] for _, score in best],
    )
    return hits or []
