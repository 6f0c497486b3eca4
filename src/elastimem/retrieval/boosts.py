"""Two adjustments of the fused chunk relevance, after the legs (SPEC §5.6, see ``rank``).

- Pseudo-relevance feedback: a candidate that reads like the best two candidates gains
  (``add_feedback``, ``FEEDBACK_WEIGHT``), its vectors handed over by the vector leg
  (``index.vectors.VectorHits``), not read again.
- The time-mention bonus: when the question asks *when*, a matching candidate that says when
  gains ``TIME_MENTION_BONUS`` (``add_time_bonus``, ``mentions_time``).
"""

from __future__ import annotations

import re
import string

import numpy as np

from ..index.vectors import VectorHits
from ..storage.tx import Tx

# The time-mention bonus and the feedback (see the module docstring). Tuned 2026-12-01 on
# the LoCoMo dev split only, through the API (benchmarks/locomo.py, R@5 / R@10 overall,
# then R@5/R@10 of category 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 760
# questions):
#
#   hybrid                        all                cat1       cat2       cat3       cat4
#   no bonus (neighbour rule)     0.74512 / 0.81312  .398/.509  .857/.915  .398/.464  .858/.915
#   bonus 0.10                    0.74578 / 0.81444  .398/.509  .861/.922  .398/.464  .858/.915 <-
#   bonus 0.15                    0.74644 / 0.81444  .395/.509  .867/.922  .398/.464  .858/.915
#   bonus 0.20                    0.74644 / 0.81312
#   ×1.1 / ×1.2 of relevance      0.74512 / 0.81444, 0.74447 / 0.81444
#   keyword only: 0.69982 / 0.76112 without, 0.70180 / 0.76112 with 0.10
# 0.10 is the largest bonus that lowers no category (0.15 costs multi-hop R@5). Alone it
# stays short of the 0.746 / 0.8153; with the feedback below it meets both.
#
# Pseudo-relevance feedback: a third fused term FB·s_fb, s_fb a candidate's cosine with the
# mean vector of the best m candidates by fused relevance (min-max over the candidates),
# relevance (ΣW·fused + FB·s_fb) / (ΣW + FB):
#   m 2, FB 0.05 / 0.06           0.74534 / 0.81597, 0.74534 / 0.81630 (cat3 R@10 .445)
#   m 2, FB 0.06, bonus 0.10      0.74732 / 0.81762  .399/.518  .867/.921  .398/.445  .858/.920 <-
#   m 1, 3, 4, 5 or FB 0.1-0.2    R@5 0.735-0.745 (R@10 up to 0.8188)
#   s_fb of the best 10/20/30     0.7426-0.7436 / 0.8161-0.8189
# Its cost: first measured reading the ~100 candidates' BLOBs (~0.45 ms a query, 1.2-1.4
# ms of hybrid p50 at 10k exchanges in benchmarks/latency.py: main 4.33 / 3.88 ms against
# 5.72 / 5.08), it was left out. The vectors now come from the vector index, decoded from
# the int8 codes it holds (VectorHits; 2026-12-01; the same figures as from the BLOBs, with
# the fine codes or the coarse ones alone): the term takes ~0.23 ms of CPU a query (p50),
# and hybrid p50 at 10k exchanges went 3.58 -> 3.89 ms in an interleaved in-process A/B
# (latency.py's store and queries, 3 x 200 pairs, load ~5 from other jobs); latency.py
# itself, main against this, 4.84 / 3.16 / 5.40 against 7.94 / 3.56 / 4.02 ms at load ~5,
# but 11.55 / 10.29 against 19.37 / 20.00 at load ~8 (the A/B there: +0.42 ms of CPU). So
# 0.3-0.4 ms, the price of the LoCoMo figures above. Giving s_fb 0 to candidates
# outside the vector leg's exact top 50 (their float32 vectors at hand) instead: 0.74403 /
# 0.81323, below the bonus alone, so every candidate gets its vector. Also no better:
# feedback mixed into the query vector (q + β·centroid, re-normalised as the vector leg:
# 0.735-0.745 / 0.809-0.815); feedback docs chosen by the keyword leg (0.742-0.745);
# feedback re-ranking only below the top 3 or 5 (R@5 unchanged, R@10 <= 0.8154); the
# question words ("when", "did", "what"...) dropped from the embedded query text, leading
# ones or all (0.742-0.744 / 0.812).
#
# Round 2 (issue 17), the vector side and aggregation, 2026-12-02: nothing below was kept.
# LoCoMo dev through the API (benchmarks/locomo.py, hybrid, exchange level R@5 / R@10,
# then cat 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop); from main 0.7640 / 0.8304
# (.405/.520 .880/.925 .415/.462 .880/.939), session level R@5 / R@10 0.879 / 0.945:
#
#   session support: each candidate gains w x (the best 2 other fused relevances of its
#     session, summed); w 0.05 / 0.1 / 0.2     0.7613/0.8308, 0.7611/0.8320, 0.7552/0.8281
#     (temporal R@5 .870; session level at w 0.1: 0.878 / 0.945)
#   the same, the best other only, w 0.1        0.7589 / 0.8330 (multi-hop .395/.514)
#   the same, mean of the best 3, w 0.1         0.7616 / 0.8301
#   only from givers to receivers (the neighbour rule's sets), best other, w 0.05 / 0.1
#                                               0.7600 / 0.8301, 0.7583 / 0.8316
#   near-duplicate penalty among the best 30: p x (best cosine with a better candidate -
#     c) / (1 - c); p 0.1, c 0.7 / p 0.2, c 0.6 0.7622 / 0.8281, 0.7654 / 0.8278 (cat1 R@10 .506)
#   exchanges next to the best 5 givers that no leg found join the pool, lent s x the
#     giver's fused relevance; s 0.4 / 0.55 / 0.7 0.7633/0.8317, 0.7646/0.8322, 0.7637/0.8295
#     (0.55: multi-hop .412/.526 but temporal .877/.918; a peak one question wide, so not
#     kept: 21 evidence turns outside the pool sit next to a top-10 hit, 87 do not)
#   per-turn vectors (each message embedded alone, offline): the leg's cosine the max of
#     the exchange's and its turns'            0.7607 / 0.8243 (open-domain .381/.451)
#     a·exchange + (1-a)·best turn, a 0.5 / 0.75 0.7657/0.8250, 0.7645/0.8242; 100 cands
#     at 0.75: 0.7661 / 0.8246. R@10 always lower: the exchange vector (with the previous
#     exchange as context) is the better evidence; the extra vectors would have doubled
#     the embedding work at ingest (2,760 messages) and needed a table on both backends.
#   a second query vector from the question as a statement (wh-word and auxiliaries
#     dropped), cosine 0.5/0.5 with the question's 0.7582 / 0.8300 (and a second embed)
#   VECTOR_CANDIDATES 30 / 80 (with everything above as chosen) 0.7572/0.8287, 0.7635/0.8253
# The graph and rule facts hold nothing to aggregate by on LoCoMo without an LLM (no facts,
# no mentions). Where the evidence sits (k=300): multi-hop 48% of evidence turns in the top
# 10, 29% at 11-50, 17% in no leg's candidates; open-domain 40% / 22% / 37%.
FEEDBACK_DOCS = 2
FEEDBACK_WEIGHT = 0.06
TIME_MENTION_BONUS = 0.10

_MONTHS = "january february march april may june july august september october november december"
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday"
# Round 2, keyword side (2026-12-02; hybrid before 0.7640 / 0.8304): nothing kept. RM3 expansion
# (the words of the best 2 chunks that are rare in the store, 8 terms, a fourth leg at 0.1):
# fed by the fused best 0.7615-0.7636 / 0.8270-0.8304; fed by the vector leg's best 0.7625 /
# 0.8389 (multi-hop .400/.528; session level 0.876 / 0.944 against 0.879 / 0.945; keyword
# only 0.7205 / 0.7744), but tokenising the feedback chunks' words and scoring the added
# terms and candidates took recall p50 at 10k exchanges from 6.7 to 13.6 ms (keyword) and
# 24.6 to 29.9 ms (hybrid), in-process A/B at load ~6. Other trials: below, at
# COMMON_NAME_SHARE (names.py), at K1 (index/keyword.py).
#
# Questions whose answer is spread over sessions, told by their form ("how many", "what" or
# "which" + a plural, "both", "has X <participle>": 93 of the dev split's 142 multi-hop
# questions, 47 of 418 single-hop), tried 2026-12-02 by re-ranking each question's
# recall(k=50) offline (hybrid from 0.7640 / 0.8304): a per-session cap with backfill for
# them only, 1 / 2 / 3 chunks: 0.7381 / 0.7952, 0.7555 / 0.8207, 0.7638 / 0.8297; a
# per-session penalty for them only, 0.02 / 0.05 / 0.1 / 0.2: 0.7623 / 0.8290, 0.7615 /
# 0.8296, 0.7617 / 0.8272, 0.7581 / 0.8244 (multi-hop R@10 at most .523 against .520;
# keyword only at best 0.7176 / 0.7696 against 0.7183 / 0.7677). Not kept: the evidence of
# a spread answer is as often the neighbour of a hit as in another session. Nor the words
# of a question's form ("how many", "kind/type/sort of", also "might", "would", "mention",
# "describe", "likely", "as") left out of the keyword terms: 0.7611-0.7615 / 0.8284-0.8290
# (keyword only 0.7164 / 0.7667-0.7680): BM25's idf already weighs them little. The other
# way round, stopwords kept as terms: "before" and "after" 0.7679 / 0.8321 (multi-hop
# .412/.527) but keyword only 0.7183 / 0.7673 (single-hop R@10 .857 against .859), about
# three questions either way; "again", "no", "not": no change.
# "When did…", "what year/month/day/date/time…", "how long ago…" (English only).
WHEN_QUESTION = re.compile(
    r"^\s*when\b|\bwhat (?:year|month|day|date|time)\b|\bhow long ago\b", re.IGNORECASE
)
# A time mention: one of these words, a year (1900-2099), "last/next/this/past" + one of
# _TIME_AFTER_SHIFT, or "<number, a, one, two, three, few, couple of> <span> ago". Checked on
# the words of a text (ASCII punctuation split off) rather than by one regular expression:
# a chunk costs a few set operations instead of trying ~40 alternatives at every word.
_TIME_WORDS = frozenset(
    f"yesterday today tonight tomorrow recently just {_MONTHS} {_WEEKDAYS}".split()
)
_YEARS = frozenset(str(year) for year in range(1900, 2100))
_TIME_SHIFTS = frozenset("last next this past".split())
_TIME_AFTER_SHIFT = frozenset(
    f"week weekend month year night summer winter spring fall {_WEEKDAYS}".split()
)
_TIME_SPANS = frozenset("day days week weeks month months year years".split())
_TIME_COUNTS = frozenset("a one two three few".split())
_SPLIT_PUNCTUATION = str.maketrans({ch: " " for ch in string.punctuation if ch != "_"})


def mentions_time(text: str) -> bool:
    """Whether ``text`` says when: see ``_TIME_WORDS`` and the phrases above them."""
    words = text.lower().translate(_SPLIT_PUNCTUATION).split()
    present = set(words)
    if not _TIME_WORDS.isdisjoint(present) or not _YEARS.isdisjoint(present):
        return True
    if not _TIME_SHIFTS.isdisjoint(present):
        for before, after in zip(words, words[1:]):
            if before in _TIME_SHIFTS and after in _TIME_AFTER_SHIFT:
                return True
    if "ago" in present:
        for n, word in enumerate(words):
            if word == "ago" and n >= 2 and words[n - 1] in _TIME_SPANS:
                count = words[n - 2]
                if (
                    count.isdigit()
                    or count in _TIME_COUNTS
                    or words[n - 3 : n - 1] == ["couple", "of"]
                ):
                    return True
    return False


def add_feedback(
    fused: dict[int, float],
    weight_sum: float,
    found: list[tuple[int, float]] | None,
    weight: float = FEEDBACK_WEIGHT,
) -> dict[int, float]:
    """Pseudo-relevance feedback (see FEEDBACK_WEIGHT): fold ``FEEDBACK_WEIGHT × s_fb``
    into every candidate's fused relevance, ``s_fb`` its cosine with the mean vector of the
    best ``FEEDBACK_DOCS`` candidates, min-max over the candidates (floored at the lowest,
    as normalise_with_floor with the whole pool). The vectors come from the vector leg
    (``VectorHits``); a candidate without one (not embedded yet) scores 0, and without the
    best candidate's the term is left out. Returns what it changed, by candidate.
    ``weight`` is FEEDBACK_WEIGHT shrunk on a small pool (``scale.scaled_weights``): the
    best two of a dozen candidates are as often noise as evidence."""
    if not isinstance(found, VectorHits):
        return {}
    ids = np.fromiter(fused, dtype=np.int64, count=len(fused))
    relevance = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
    top = np.lexsort((ids, relevance))[: -FEEDBACK_DOCS - 1 : -1]  # by (-relevance, -id)
    held, matrix = found.vectors_of(ids)
    if not held[top[0]]:
        return {}
    # Cosines up to the centroid's length, which the min-max below divides out.
    # einsum, not @: BLAS would wake its spinning threads (see scan.py).
    products = np.einsum("ij,j->i", matrix, matrix[top[held[top]]].sum(axis=0))
    every = bool(held.all())
    among = products if every else products[held]
    best, low = float(among.max()), float(among.min())
    if best <= 0:
        return {}
    if best <= low:
        s_fb = held.astype(np.float64)
    else:
        s_fb = (products - low) / (best - low)
        if not every:
            s_fb[~held] = 0.0
    new = relevance * weight_sum
    new += weight * s_fb
    new /= weight_sum + weight
    keys = ids.tolist()
    fused.update(zip(keys, new.tolist()))
    return dict(zip(keys, (new - relevance).tolist()))


def add_time_bonus(conn: Tx, fused: dict[int, float]) -> set[int]:
    """A question asking when: ``TIME_MENTION_BONUS`` for each matching candidate whose
    text mentions a time (``mentions_time``); returns their ids."""
    ids = [cid for cid, relevance in fused.items() if relevance > 0]
    timed: set[int] = set()
    for cid, text in conn.transcript.chunk_texts(ids):
        if mentions_time(text):
            fused[cid] += TIME_MENTION_BONUS
            timed.add(cid)
    return timed
