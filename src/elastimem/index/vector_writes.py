"""The chunks' vectors as the embed job makes and writes them (SPEC §4.4).

``passage_texts`` says what text a chunk is embedded from (the chunk, then the one before
it in its session); ``write_vectors`` stores the vectors through ``tx.vectors`` and keeps the
``vectors.seq`` / ``vectors.gen`` counters the in-memory indexes sync on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..storage.tx import Tx
from ..text import is_filler

# The embed job embeds a chunk together with the chunk before it in the same session
# (current text first, so a model that truncates keeps the chunk itself). Chat turns are
# short and elliptic ("Wow, where was that?"); the previous exchange says what they are
# about. On the LoCoMo dev split (benchmarks/locomo.py, through the API) this raised hybrid
# recall@5 from 0.729 to 0.746 and recall@10 from 0.799 to 0.815 (--passage-context 0
# reproduces the former). Offline, 200 characters of context gave about half the gain and
# 400 nearly all of it; the bound keeps the embedding cost within ~2x of the bare chunk
# for the default 400-token chunks, and MiniLM reads only its first 256 tokens anyway.
PASSAGE_CONTEXT_CHARS = 1600


def passage_texts(conn: Tx, rows: Sequence[tuple[Any, ...]]) -> list[str]:
    """The text the embed job embeds for each ``(id, text)`` row (see PASSAGE_CONTEXT_CHARS).

    The chunk's own text, then the text of the chunk before it in the same session, cut
    to ``PASSAGE_CONTEXT_CHARS``; small talk (``text.is_filler``) alone. Only earlier
    chunks are used, so a vector never depends on a turn recorded after it.
    """
    if not rows or PASSAGE_CONTEXT_CHARS <= 0:
        return [str(r[1]) for r in rows]
    previous = conn.vectors.previous_texts([int(r[0]) for r in rows])
    out = []
    for row in rows:
        text = str(row[1])
        # Small talk ("thanks!") gets no context: embedded with the turn before it, it
        # scored as that turn did and came second for its questions (issue 26).
        context = "" if is_filler(text) else previous.get(int(row[0]), "")[:PASSAGE_CONTEXT_CHARS]
        out.append(f"{text}\n{context}" if context else text)
    return out


def write_vectors(
    conn: Tx,
    chunk_ids: list[int],
    matrix: np.ndarray,
    label: str,
    texts: Sequence[str] | None = None,
) -> int:
    """Store unit vectors for chunks (inside ``atomic()``); bumps ``vectors.seq``/``gen``.

    Each row gets the next ``embed_seq``; replacing a vector that existed (a re-embed or a
    model change) also bumps ``vectors.gen`` so every index drops the old one. Chunks
    erased meanwhile are skipped. Returns the number written.

    ``texts`` are the chunks' own texts as they were read for embedding: a row whose text
    differs now is skipped (see below).
    """

    dim = int(matrix.shape[1])
    seq = conn.meta.get_int("vectors.seq")
    replaced = False
    written = 0
    # Read and written a batch at a time (one statement each on PostgreSQL, not two per
    # chunk); a chunk listed twice keeps its last vector, as writing them in turn would.
    found = conn.vectors.targets(chunk_ids)
    batch: dict[int, tuple[int, np.ndarray, int]] = {}
    for index, (chunk_id, vector) in enumerate(zip(chunk_ids, matrix)):
        row = found.get(int(chunk_id))
        if row is None:
            continue  # erased meanwhile
        if texts is not None and row[1] != texts[index]:
            # Erased meanwhile, and its id taken by a new chunk (SQLite reuses the highest
            # ids): this vector is the erased text's. The new chunk gets its own job.
            continue
        replaced = replaced or bool(row[0]) or int(chunk_id) in batch
        seq += 1
        batch.pop(int(chunk_id), None)
        batch[int(chunk_id)] = (int(chunk_id), vector, seq)
        written += 1
    conn.vectors.store_many(label, list(batch.values()))
    if written:
        conn.meta.set("vectors.seq", seq)
    if conn.meta.get(f"embedder.{label}.dim") != str(dim):
        conn.meta.set(f"embedder.{label}.dim", dim)
    if replaced:
        conn.meta.bump("vectors.gen")
    return written
