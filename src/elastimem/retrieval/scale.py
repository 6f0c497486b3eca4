"""The scale of each leg's scores, and how it changes with the size of the store (§5.6).

A leg's raw scores (BM25, cosines) are put on [0, 1] before the fusion. On a store of
thousands of exchanges, min-max over the top 50 candidates, floored at the 50th
(``normalise_with_floor``), says how far a candidate stands above the ones that barely
made the cut; that is what LoCoMo was tuned on. On a person's first small store the legs
return a handful of candidates, and min-max over a handful turns noise into 1.0: the best
of twelve unrelated exchanges scored like a true match, whatever the question (issue 26).
So the scale moves with how full the candidate pool is (``pool_share``): a full pool is
min-max as before, a small one is mostly the absolute cosine (``absolute_cosines``), which
means the same for every query and lets a host set a cut-off (``min_score``).

The facts' vector leg is always on an absolute scale (``normalise_fact_cosines``): facts
are few at any store size.
"""

from __future__ import annotations

from ..index.own_text import OwnTextHits

# The chunks' absolute cosine scale (all-MiniLM-L6-v2), on the tuning part of
# benchmarks/data/small_stores.json: see the record in rank.py (issue 26).
CHUNK_COSINE_FLOOR = 0.15
CHUNK_COSINE_FULL = 0.55

# The facts' vector leg maps a cosine c to s_vec = clamp((c − FLOOR) / (FULL − FLOOR), 0, 1).
# Chosen 2026-12-01 with the built-in all-MiniLM-L6-v2 on tests/data/fact_queries.json
# (24 facts embedded as fact_vectors.fact_text; 27 questions about them, 36 off-topic
# questions): every question's right fact scored ≥ 0.343 and every off-topic question's
# best fact ≤ 0.317, except one sharing the fact's topic ("is coffee bad for you?" →
# coffee order, 0.42), so the floor sits between them and off-topic questions bring no
# fact; half the right facts score ≥ 0.51, and a right fact at 0.6 is as sure a match as
# the model gives for a paraphrase, hence FULL.
FACT_COSINE_FLOOR = 0.33
FACT_COSINE_FULL = 0.60
# A fact is embedded as a sentence about the user (``fact_vectors.fact_text``: "my role is
# backend engineer"), which shares the frame of every question about the user ("what is
# my ...?"), so its cosine runs higher than an exchange's for the same evidence. On a small
# pool's shared scale a fact's cosine counts this much less. Tuning part of
# benchmarks/data/small_stores.json, top-1: no lift 0.906, 0.05 0.914, 0.10 0.914, 0.15
# 0.906. Ranking the bare cosines of exchanges and facts together on the same part also
# did best with facts lowered by 0.05-0.10 (top-3 0.928 -> 0.950).
FACT_TEMPLATE_LIFT = 0.10


def normalise_with_floor(rows: list[tuple[int, float]], pool: int) -> dict[int, float]:
    """Min-max over a leg's top ``pool`` scores, floored at the pool's last one (or 0).

    ``rows`` come best first. With a full pool the weakest candidate scores 0, so a leg's
    scale reflects how far a candidate stands above the ones that barely made the cut
    rather than its ratio to the best; with fewer rows it is ``score / best``. All 1.0
    when the best equals the floor; the leg is empty when the best is not positive.
    """
    if not rows:
        return {}
    best = max(score for _, score in rows)
    if best <= 0:
        return {}
    low = rows[pool - 1][1] if len(rows) >= pool else 0.0
    if best <= low:
        return {cid: 1.0 for cid, _ in rows}
    span = best - low
    return {cid: min(1.0, max(0.0, (score - low) / span)) for cid, score in rows}


def normalise_vector_scores(rows: list[tuple[int, float]], pool: int) -> dict[int, float]:
    """The chunks' vector leg: ``share`` of the min-max over the top ``pool`` cosines
    (floored at the last, or 0), plus ``1 − share`` of the absolute scale
    (``absolute_cosines``), ``share = pool_share(len(rows), pool)``. A full pool is pure
    min-max, as before; a small store's few candidates are mostly judged by their cosine.
    """
    relative = normalise_with_floor(rows, pool)
    share = pool_share(len(rows), pool)
    if share >= 1.0:
        return relative
    absolute = absolute_cosines(rows)
    mixed = {cid: share * s + (1.0 - share) * absolute.get(cid, 0.0) for cid, s in relative.items()}
    return {cid: s for cid, s in mixed.items() if s > 0.0}


def absolute_cosines(rows: list[tuple[int, float]]) -> dict[int, float]:
    """Cosines on the fixed scale of CHUNK_COSINE_FLOOR .. CHUNK_COSINE_FULL (a best above
    FULL is 1.0 and stretches the scale)."""
    if not rows:
        return {}
    top = max(CHUNK_COSINE_FULL, max(cosine for _, cosine in rows))
    span = top - CHUNK_COSINE_FLOOR
    return {
        cid: (cosine - CHUNK_COSINE_FLOOR) / span
        for cid, cosine in rows
        if cosine > CHUNK_COSINE_FLOOR
    }


def pool_share(found: int, pool: int) -> float:
    """How full a leg's candidate pool is: 1.0 when it reached ``pool``, else found / pool."""
    return 1.0 if found >= pool else (found / pool) ** 2


def normalise_fact_cosines(rows: list[tuple[int, float]], share: float = 1.0) -> dict[int, float]:
    """The facts' vector leg on an absolute scale (see FACT_COSINE_FLOOR); facts at or
    below the floor are left out.

    In a small pool (``share`` < 1) the chunks are judged mostly by their absolute cosine
    (``absolute_cosines``), and a fact must compete with them on that scale: ``1 − share``
    of its score is its cosine on the chunks' scale, less ``FACT_TEMPLATE_LIFT`` (see there),
    and the chunks' floor plus that lift (0.25) is its floor there too. Without this, a fact
    at cosine 0.36 scored 0.11 against 0.25 for an exchange at 0.25, and "my role is backend
    engineer" lost "what do I do for a living?" to an exchange about Python workers; and
    "my employer is Acme Corp" (0.30 for "where do I work?") was not a hit at all. Tuning
    part: top-3 0.978 -> 0.986 with the shared floor, top-1 and min_score unchanged.
    """
    span = FACT_COSINE_FULL - FACT_COSINE_FLOOR
    scores = {
        fid: min(1.0, (cosine - FACT_COSINE_FLOOR) / span)
        for fid, cosine in rows
        if cosine > FACT_COSINE_FLOOR
    }
    if share >= 1.0 or not rows:
        return scores
    chunk_span = CHUNK_COSINE_FULL - CHUNK_COSINE_FLOOR
    out = {}
    for fid, cosine in rows:
        on_chunks = (cosine - FACT_TEMPLATE_LIFT - CHUNK_COSINE_FLOOR) / chunk_span
        mixed = share * scores.get(fid, 0.0) + (1.0 - share) * min(1.0, on_chunks)
        if mixed > 0.0:
            out[fid] = mixed
    return out


def gate_keyword(
    keyword: dict[int, float], found: list[tuple[int, float]], share: float
) -> dict[int, float]:
    """A small pool's keyword scores, each scaled by how well the chunk matches by meaning.

    BM25 over a dozen exchanges cannot tell a shared word from a shared topic ("what do I
    do for a living?" and "we're repainting the living room"): each keyword score keeps
    ``share`` of itself plus ``1 − share`` of itself times the chunk's absolute cosine
    score. A full pool (``share`` 1.0) is left as it is.
    """
    if share >= 1.0 or not keyword:
        return keyword
    meaning = absolute_cosines(found)
    kept = share
    return {
        cid: score * (kept + (1.0 - kept) * min(1.0, meaning.get(cid, 0.0)))
        for cid, score in keyword.items()
    }


# Tuned on the tuning part of benchmarks/data/small_stores.json (top-1, SQLite): 0 0.777,
# 0.3 0.813, 0.5 0.799, 1.0 0.770 (see the record in benchmarks/README.md).
RIDE_SHARE = 0.3


def unride(
    found: list[tuple[int, float]], rows: list[tuple[int, int, str, float]]
) -> list[tuple[int, float]]:
    """A small pool's cosines with what each chunk owes the turn before it taken out.

    A chunk is embedded with the chunk before it in its session as context
    (``vector_writes.passage_texts``), so an exchange right after the one a question is
    about scores nearly as high, or higher ("Do I own any animals?" -> the ramen exchange
    embedded with the collie one). The part of the previous chunk's cosine that is its own
    (above the cosine of the chunk before *it*, its own context) is what the next one may
    owe it: ``RIDE_SHARE`` of that is taken from the next chunk's cosine. Cosines already
    taken on the chunks' own texts (``index.own_text.OwnTextHits``) owe nothing: returned
    as given.
    """
    if isinstance(found, OwnTextHits):
        return found
    cosine = dict(found)
    by_session: dict[int, list[int]] = {}
    for cid, session_id, _created, _importance in rows:
        by_session.setdefault(session_id, []).append(cid)
    owed: dict[int, float] = {}
    for members in by_session.values():
        members.sort()
        for n in range(1, len(members)):
            before = cosine.get(members[n - 1], 0.0)
            its_context = cosine.get(members[n - 2], 0.0) if n >= 2 else 0.0
            owed[members[n]] = RIDE_SHARE * max(0.0, before - its_context)
    rows_out = [(cid, c - owed.get(cid, 0.0)) for cid, c in found]
    rows_out.sort(key=lambda row: (-row[1], -row[0]))
    return rows_out
