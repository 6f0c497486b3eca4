"""A small pool's vector leg re-scored by each chunk's own text (issue 26).

The stored vectors embed each chunk with the turn before it (``vector_writes
.passage_texts``), which LoCoMo's stores of ~300 exchanges need. On a person's first small
store the same context lets an exchange ride on the turn before it ("Do I own any
animals?" -> the ramen exchange, embedded with the collie one), and the bare model (the
cosine of each exchange's own text) ranks better. So when the vector leg's pool is not
full (fewer than ``n`` candidates: the store, or what the filters leave of it, is small:
the same gate as ``scale.pool_share``), its cosines are replaced by the cosines of the
candidates' own texts, embedded once per text and kept in ``Services.own_text``. A full
pool (every large store) is returned untouched, at no cost.

Half of each such cosine is the best cosine among the clauses of the user's own words in
the exchange (``user_clauses``). A person's turn often says several things ("I work night
shifts at the hospital as a nurse, so my sleep schedule is a mess"), and a question asks
about one of them; the whole exchange's vector also carries the assistant's reply, whose
words ("Estates are practical with kids") can match a question the user's words do not
answer. On the tuning part of ``benchmarks/data/small_stores.json``: top-1 0.871 -> 0.906,
top-3 0.964 -> 0.978, MRR 0.918 -> 0.944 (clause share 0.3: 0.878, 0.7: 0.885, 1.0: 0.849).

Any failure (the embedder stuck, slow, in another dimension) keeps the passage cosines:
the ranking is then what it was without this step.
"""

from __future__ import annotations

import logging
import re

import numpy as np

from ..index import vector_writes
from ..index.own_text import OwnTextHits
from ..index.vector_hits import VectorHits
from ..runtime.services import Services
from ..storage.tx import Tx

logger = logging.getLogger("elastimem")

# The first query of a small store embeds its chunks' own texts and their user clauses (at
# most n - 1 exchanges, ~0.5 s with the built-in model for 49 chatty ones): past this, that
# query keeps the passage cosines.
OWN_TEXT_TIMEOUT_SECONDS = 3.0


def rescore(
    services: Services,
    conn: Tx,
    label: str,
    query: np.ndarray | None,
    found: list[tuple[int, float]] | None,
    n: int,
) -> list[tuple[int, float]] | None:
    """``found`` (the vector leg's ``(chunk_id, cosine)`` rows) with each cosine taken on
    the chunk's own text when fewer than ``n`` were found; else ``found`` as it is."""
    if query is None or not found or len(found) >= n:
        return found
    dim = int(query.shape[0])
    rows = conn.transcript.chunk_texts([cid for cid, _ in found])
    # A chunk embedded without context (the first of its session, small talk) already has
    # its own text's vector stored: its cosine stands, and nothing is embedded again.
    passages = vector_writes.passage_texts(conn, rows)
    need = {
        cid: text for (cid, text), passage in zip(rows, passages, strict=True) if passage != text
    }
    said = {cid: user_clauses(text) for cid, text in rows}
    wanted = list(need.values()) + [c for clauses in said.values() for c in clauses]
    vectors = _own_vectors(services, label, dim, wanted)
    if vectors is None:
        return found
    own = {cid: vectors[text] for cid, text in need.items()}
    alone = np.fromiter((cid for cid, _ in rows if cid not in need), dtype=np.int64)
    if alone.size and isinstance(found, VectorHits):
        held, matrix = found.vectors_of(alone)  # for the feedback term
        own.update((cid, matrix[i]) for i, cid in enumerate(alone.tolist()) if held[i])
    out = []
    for cid, cosine in found:
        whole = float(np.dot(own[cid], query)) if cid in need else cosine
        clauses = said.get(cid, [])
        if clauses:
            best = max(float(np.dot(vectors[c], query)) for c in clauses)
            whole = (1.0 - CLAUSE_SHARE) * whole + CLAUSE_SHARE * best
        out.append((cid, whole))
    out.sort(key=lambda row: (-row[1], -row[0]))
    return OwnTextHits(out, own, dim, found)


# How much of a small pool's cosine is the best of the user's own clauses (module docstring).
CLAUSE_SHARE = 0.5
_USER = "User: "
_ASSISTANT = "\nAssistant: "
# Where a clause ends: sentence and list punctuation before a space or the end (not "3.12"),
# a line break, or a conjunction that starts a new statement.
_CLAUSE_BREAK = re.compile(r"[.;:!?,]+(?=\s|$)|\n+|\s(?:so|but|and|although|because|while)\s")
_CLAUSE_MIN_WORDS = 3
# Clauses read per exchange: a long turn's first few (a chunk holds at most a few hundred
# words); bounds what a small pool's first query embeds.
_CLAUSES_PER_CHUNK = 6


def user_clauses(text: str) -> list[str]:
    """The user's words of a chunk (``User: ...`` before ``Assistant: ...``) cut into clauses
    of 3+ words, a shorter piece joined to the clause after it (a short last one to the clause
    before: "laptop: thinkpad x1, arch linux" stays whole); the first ``_CLAUSES_PER_CHUNK``;
    [] when the chunk holds no user words."""
    if not text.startswith(_USER):
        return []
    said = text[len(_USER) :].split(_ASSISTANT, 1)[0]
    pieces: list[tuple[int, int]] = []
    at = 0
    for cut in _CLAUSE_BREAK.finditer(said):
        pieces.append((at, cut.start()))
        at = cut.end()
    pieces.append((at, len(said)))
    spans: list[tuple[int, int]] = []
    begin: int | None = None
    for start, end in pieces:
        if not said[start:end].strip():
            continue
        begin = start if begin is None else begin
        if len(said[begin:end].split()) >= _CLAUSE_MIN_WORDS:
            spans.append((begin, end))
            begin = None
        if len(spans) == _CLAUSES_PER_CHUNK:
            break
    else:
        if begin is not None:  # a short tail: part of the clause before it, or all there is
            tail_end = pieces[-1][1]
            spans[-1:] = [(spans[-1][0] if spans else begin, tail_end)]
    return [said[start:end].strip() for start, end in spans]


def _own_vectors(
    services: Services, label: str, dim: int, texts: list[str]
) -> dict[str, np.ndarray] | None:
    """The own-text vector of each of ``texts``: cached ones, the rest embedded in one call;
    None when they cannot be had now."""
    cache = services.own_text
    out: dict[str, np.ndarray] = {}
    missing: list[str] = []
    for text in dict.fromkeys(texts):
        vector = cache.get(label, dim, text)
        if vector is None:
            missing.append(text)
        else:
            out[text] = vector
    if not missing:
        return out
    watchdog = services.query_watchdog
    if watchdog.stuck or not services.embedding.can_embed_passages():
        return None
    try:
        made = watchdog.call(
            OWN_TEXT_TIMEOUT_SECONDS, _embed_and_keep, services, label, dim, missing
        )
    except Exception as exc:  # a CallTimeout too: the passage cosines still serve
        logger.debug("embedding own texts for a query failed (%s)", type(exc).__name__)
        return None
    if made.shape != (len(missing), dim):
        return None
    out.update(zip(missing, made, strict=True))
    return out


def _embed_and_keep(services: Services, label: str, dim: int, texts: list[str]) -> np.ndarray:
    """Embed ``texts`` and keep their vectors, on the watchdog's thread: a call that outlives
    the query's wait still fills the cache, so the next query finds them (without this, a
    slow first query of a 35-exchange store timed out, and every query after it did too)."""
    made = np.asarray(
        services.embedding.embed_passages(texts, count_failure=False), dtype=np.float32
    )
    if made.shape == (len(texts), dim):
        for text, vector in zip(texts, made, strict=True):
            services.own_text.keep(label, dim, text, vector)
    return made
