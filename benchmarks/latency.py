"""Latency, throughput and memory of recall and record_turn at growing store sizes (§4.4, §5.6).

For each size (stored exchanges, one chunk each) the benchmark builds a store and reports:

* ``record_turn`` p50/p95 and ingest throughput. Sizes up to ``--api-max`` are ingested
  through ``record_turn`` with a host embedder (the worker embeds concurrently, as in
  real use); larger ones are bulk-loaded with SQL (FTS triggers fire as usual, vectors
  are written directly), then 200 more turns are timed through ``record_turn``;
* keyword ``recall`` p50/p95 (no embedder), hybrid ``recall`` p50/p95 with the numpy
  index and, with the ``vec`` extra, with the HNSW index, over ``--queries`` distinct
  queries each (a few warm-up queries are not counted; the first hybrid query, which
  loads the vectors, is reported on its own);
* the vector leg alone (top 50, as §5.6 asks): numpy vs HNSW latency and HNSW recall@10
  against numpy's exact top 10;
* vector memory (numpy matrix and parallel arrays, against N × dim × 4 bytes), the HNSW
  graph's memory, its build time, and the process RSS.

Vectors come from :class:`SyntheticEmbedder`, a deterministic 384-dim bag-of-words
embedder whose word vectors have rank 48 plus noise and a shared mean direction, which
gives the anisotropic, low-intrinsic-dimension geometry of real sentence embeddings (pure
random vectors are a much harder case for HNSW than any real model). Texts use a Zipfian
vocabulary of made-up words; a query takes the three rarest words of a random stored
exchange plus one other word of it, like a user asking about something specific.

``--builtin`` instead measures the built-in embedder end to end: ingest throughput of
``record_turn`` + worker embedding against the model's own batched throughput on the same
texts, and the cost of a query embedding, reported separately from the search.

    python benchmarks/latency.py                         # 1k, 10k, 100k
    python benchmarks/latency.py --sizes 10000 --queries 500
    python benchmarks/latency.py --big                   # adds 1M (HNSW build: minutes)
    python benchmarks/latency.py --builtin --builtin-turns 400
    python benchmarks/latency.py --json benchmarks/results/latency.json

``--backend postgres`` puts SQLite and PostgreSQL side by side in one run (issue #18): for
each size one SQLite store and one PostgreSQL user are bulk-loaded with the same exchanges and
vectors, then ``record_turn``, keyword recall, hybrid recall and the vector leg alone are
timed on both, alternating call by call (so a change of load hits both alike), and reported
as medians/p95 with the PostgreSQL/SQLite ratio. ``--pg-url`` names the server (a database
the role may create the schema in); without it a private PostgreSQL 15 is started for the run
(tests/pg_server.py) and removed afterwards.

With pgvector on the server (``--pgvector`` starts a private PostgreSQL 16 with it; a
``--pg-url`` database needs ``CREATE EXTENSION vector`` run by a superuser first), hybrid
recall and the vector leg are also timed with ``vector_backend="pgvector"``, where PostgreSQL
searches in the database (SQLite, without pgvector, searches as ``"auto"``); the path it took is
printed.

    python benchmarks/latency.py --backend postgres --sizes 10000 --queries 200
    python benchmarks/latency.py --backend postgres --pg-url postgresql://app@db/memory
    python benchmarks/latency.py --backend postgres --pgvector --sizes 10000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np

import elastimem
from elastimem.clock import format_ts
from elastimem.index import ann
from elastimem.index.vectors import VectorIndex
from elastimem.retrieval.rank import VECTOR_CANDIDATES, Filters
from elastimem.storage.sqlite import database as db

DIM = 384
RANK = 48
HASH_ROWS = 1 << 14
# A shared direction, as real models have: mean pairwise cosine ~0.3, like MiniLM's 0.32
# within one LoCoMo conversation.
MEAN_WEIGHT = 0.6
VOCAB = 30_000
ZIPF_S = 1.05
ZIPF_OFFSET = 150
EXCHANGES_PER_SESSION = 50
CORPUS_BLOCK = 1000
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
_WORD = re.compile(r"[^\W_]+")
_FILLER = (
    "i the a my we and to of it was so that but is in for on with at you this have just really"
).split()
_SYLLABLES = (
    "ka to ri mi no sa lu be ra vo ze ni qu ta el an or is um fa go de pi ho ju ly we xe po ki"
).split()


# -- the deterministic embedder ---------------------------------------------------------------


class SyntheticEmbedder:
    """Deterministic 384-dim text vectors with the geometry of a real sentence embedder."""

    def __init__(self, dim: int = DIM, rank: int = RANK, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        basis = rng.standard_normal((rank, dim)).astype(np.float32)
        table = rng.standard_normal((HASH_ROWS, rank)).astype(np.float32) @ basis
        table += 0.3 * rng.standard_normal((HASH_ROWS, dim)).astype(np.float32)
        self.table = table
        mean = rng.standard_normal(dim).astype(np.float32)
        self.mean = mean / np.linalg.norm(mean)
        self.dim = dim
        self.calls = 0

    def rows_for_words(self, word_lists: Sequence[Sequence[str]]) -> np.ndarray:
        out = np.empty((len(word_lists), self.dim), dtype=np.float32)
        for i, words in enumerate(word_lists):
            index = [zlib.crc32(w.encode()) % HASH_ROWS for w in words] or [0]
            out[i] = self.table[index].sum(axis=0)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        out += MEAN_WEIGHT * self.mean
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return self.rows_for_words([_WORD.findall(t.casefold()) for t in texts])


# -- the corpus -------------------------------------------------------------------------------


class Corpus:
    """Exchanges and queries over a Zipfian vocabulary of made-up words, from a fixed seed."""

    def __init__(self, seed: int = 11) -> None:
        rng = np.random.default_rng(seed)
        words: list[str] = []
        seen: set[str] = set()
        while len(words) < VOCAB:
            parts = rng.choice(_SYLLABLES, size=int(rng.integers(2, 5)))
            word = "".join(parts)
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        # Real text's most frequent words are function words, which the query terms drop;
        # content words start lower on the Zipf curve, hence the offset.
        ranks = np.arange(1, VOCAB + 1, dtype=np.float64) + ZIPF_OFFSET
        weights = ranks**-ZIPF_S
        self.cdf = np.cumsum(weights / weights.sum())
        self.seed = seed

    def word_ids(self, count: int, start: int) -> list[np.ndarray]:
        """Content-word ids of exchanges ``start .. start+count`` (12–30 words each).

        Generated in fixed blocks of ``CORPUS_BLOCK`` exchanges from ``(seed, block)``, so
        exchange i is the same whichever range it is asked in.
        """
        out: list[np.ndarray] = []
        end = start + count
        for block in range(start // CORPUS_BLOCK, (end - 1) // CORPUS_BLOCK + 1 if count else 0):
            rng = np.random.default_rng((self.seed, block))
            lengths = rng.integers(12, 31, size=CORPUS_BLOCK)
            flat = np.searchsorted(self.cdf, rng.random(int(lengths.sum())))
            rows = np.split(flat, np.cumsum(lengths)[:-1])
            first = block * CORPUS_BLOCK
            out.extend(rows[max(start, first) - first : min(end, first + CORPUS_BLOCK) - first])
        return out

    def texts(self, ids: np.ndarray) -> tuple[str, str]:
        words = [self.words[i] for i in ids]
        fill = _FILLER
        user = " ".join(
            w if j % 3 else f"{fill[(j + len(w)) % len(fill)]} {w}"
            for j, w in enumerate(words[: len(words) * 2 // 3])
        )
        assistant = " ".join(words[len(words) * 2 // 3 :])
        return user.capitalize() + ".", assistant.capitalize() + "."

    def query(self, ids: np.ndarray, rng: np.random.Generator) -> str:
        rarest = sorted(set(int(i) for i in ids), reverse=True)[:3]
        other = int(ids[int(rng.integers(0, len(ids)))])
        return "what did I say about " + " ".join(self.words[i] for i in [*rarest, other]) + "?"


# -- building stores --------------------------------------------------------------------------


def bulk_load(path: Path, corpus: Corpus, count: int, embedder: SyntheticEmbedder) -> float:
    """Write ``count`` exchanges straight into a fresh store; returns the seconds taken."""
    begin = time.perf_counter()
    store = db.open_store(path)
    try:
        block = 20_000
        seq = 0
        for start in range(0, count, block):
            n = min(block, count - start)
            word_ids = corpus.word_ids(n, start)
            pairs = [corpus.texts(ids) for ids in word_ids]
            vectors = embedder([f"User: {u}\nAssistant: {a}" for u, a in pairs])
            with store.atomic() as tx:
                conn = tx.conn  # raw SQL: the benchmark writes rows the fastest way
                for i, (user, assistant) in enumerate(pairs):
                    number = start + i
                    at = format_ts(START + timedelta(minutes=number))
                    if number % EXCHANGES_PER_SESSION == 0:
                        conn.execute(
                            "INSERT INTO sessions (started_at, ended_at, title, message_count) "
                            "VALUES (?, ?, ?, 0)",
                            (at, at, user[:80]),
                        )
                    session = number // EXCHANGES_PER_SESSION + 1
                    turn = number % EXCHANGES_PER_SESSION + 1
                    first = conn.execute(
                        "INSERT INTO messages (session_id, turn, role, content, created_at, "
                        "token_estimate) VALUES (?, ?, 'user', ?, ?, ?)",
                        (session, turn, user, at, len(user) // 4),
                    ).lastrowid
                    last = conn.execute(
                        "INSERT INTO messages (session_id, turn, role, content, created_at, "
                        "token_estimate) VALUES (?, ?, 'assistant', ?, ?, ?)",
                        (session, turn, assistant, at, len(assistant) // 4),
                    ).lastrowid
                    seq += 1
                    conn.execute(
                        "INSERT INTO chunks (session_id, first_msg_id, last_msg_id, text, "
                        "created_at, embedding, embedding_model, embedding_dim, embed_seq) "
                        "VALUES (?, ?, ?, ?, ?, ?, 'host', ?, ?)",
                        (
                            session,
                            first,
                            last,
                            f"User: {user}\nAssistant: {assistant}",
                            at,
                            vectors[i].astype("<f4").tobytes(),
                            embedder.dim,
                            seq,
                        ),
                    )
                conn.execute(
                    "UPDATE sessions SET message_count = 2 * ("
                    "SELECT count(*) FROM chunks c WHERE c.session_id = sessions.id) "
                    "WHERE id >= ?",
                    (start // EXCHANGES_PER_SESSION + 1,),
                )
                tx.meta.set("vectors.seq", seq)
                tx.meta.set("embedder.host.dim", embedder.dim)
            print(f"  bulk-loaded {start + n:,}/{count:,}", file=sys.stderr, end="\r")
        print(file=sys.stderr)
    finally:
        store.close()
    return time.perf_counter() - begin


def ingest_api(
    path: Path, corpus: Corpus, count: int, embedder: SyntheticEmbedder
) -> dict[str, float]:
    """Record ``count`` exchanges through record_turn; time each call and the whole ingest."""
    times: list[float] = []
    word_ids = corpus.word_ids(count, 0)
    begin = time.perf_counter()
    with elastimem.open(str(path), embedder=embedder, tier_override="standard") as mem:
        for number, ids in enumerate(word_ids):
            if number % EXCHANGES_PER_SESSION == 0:
                mem.begin_session(at=START + timedelta(minutes=number))
            user, assistant = corpus.texts(ids)
            at = START + timedelta(minutes=number)
            t0 = time.perf_counter()
            mem.record_turn(user, assistant, at=at)
            times.append(time.perf_counter() - t0)
        recorded = time.perf_counter() - begin
        while not mem.drain(60):
            pass
        embedded = time.perf_counter() - begin
        mem.end_session(wait=False)
    return {
        "record_turn_p50_ms": pct(times, 50),
        "record_turn_p95_ms": pct(times, 95),
        "record_turn_per_s": count / recorded,
        "ingest_with_embedding_per_s": count / embedded,
    }


def may_copy(conn: Any) -> bool:
    """Whether this role may ``COPY … FROM``: PostgreSQL refuses it on a table under row-level
    security (every elastimem table, forced) unless the role bypasses it."""
    row = conn.execute(
        "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    return bool(row and row[0])


def write_rows(conn: Any, table: str, columns: str, rows: Any, copy: bool) -> None:
    """Rows into ``table``: by COPY where the role may (psycopg formats its rows in C, where
    the arrays of an unnest are built in Python: half the load's time), else one pipelined
    INSERT per row (an application role under row-level security)."""
    if copy:
        with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as out:
            for row in rows:
                out.write_row(row)
        return
    values = list(rows)
    if values:
        marks = ", ".join(["%s"] * len(values[0]))
        conn.cursor().executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)


def pg_bulk_load(
    url: str, user: str, corpus: Corpus, count: int, embedder: SyntheticEmbedder
) -> float:
    """Write ``count`` exchanges into a PostgreSQL user's store a block of ``CORPUS_BLOCK``
    at a time (a transaction and a handful of multi-row statements per block: sessions,
    messages, chunks with their keyword postings made by the store's own tokenizer, then the
    vectors through the storage seam's batch write), the sessions ended; returns the seconds
    taken. Through ``record_turn``'s statement, a turn at a time, 100k took about an hour."""
    from elastimem import storage
    from elastimem.index.vector_writes import write_vectors
    from elastimem.memory import episodic
    from elastimem.storage.postgres.terms import posting_rows, terms_of

    begin = time.perf_counter()
    database = storage.open_database(url, user_id=user)
    try:
        with database.read() as tx:
            copy = may_copy(cast(Any, tx).conn)
        for start in range(0, count, CORPUS_BLOCK):
            n = min(CORPUS_BLOCK, count - start)
            pairs = [corpus.texts(ids) for ids in corpus.word_ids(n, start)]
            texts = [episodic.exchange_text(u, a) for u, a in pairs]
            vectors = embedder(texts)
            terms = terms_of(texts)
            stamps = [format_ts(START + timedelta(minutes=start + i)) for i in range(n)]
            numbers = range(start, start + n)
            sessions = sorted({number // EXCHANGES_PER_SESSION + 1 for number in numbers})
            with database.atomic() as tx:
                conn = cast(Any, tx).conn  # raw SQL: the benchmark writes rows the fastest way
                first_of = {number // EXCHANGES_PER_SESSION + 1: i for i, number in
                            reversed(list(enumerate(numbers)))}  # fmt: skip
                last_of = {number // EXCHANGES_PER_SESSION + 1: i for i, number in
                           enumerate(numbers)}  # fmt: skip
                conn.execute(
                    "INSERT INTO sessions (user_id, id, started_at, ended_at, title, "
                    "message_count) SELECT %s, * FROM unnest(%s::bigint[], %s::text[], "
                    "%s::text[], %s::text[], %s::bigint[])",
                    (
                        user,
                        sessions,
                        [stamps[first_of[s]] for s in sessions],
                        [stamps[last_of[s]] for s in sessions],
                        [pairs[first_of[s]][0][:80] for s in sessions],
                        [2 * (last_of[s] - first_of[s] + 1) for s in sessions],
                    ),
                )
                ids = [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT nextval(pg_get_serial_sequence('messages', 'id')) "
                        "FROM generate_series(1, %s) ORDER BY 1",
                        (2 * n,),
                    ).fetchall()
                ]
                write_rows(
                    conn,
                    "messages",
                    "user_id, id, session_id, turn, role, content, created_at, token_estimate",
                    (
                        (user, ids[2 * i + j], number // EXCHANGES_PER_SESSION + 1,
                         number % EXCHANGES_PER_SESSION + 1, role, pairs[i][j], stamps[i],
                         len(pairs[i][j]) // 4)
                        for i, number in enumerate(numbers)
                        for j, role in enumerate(("user", "assistant"))
                    ),
                    copy,
                )  # fmt: skip
                chunk_ids = [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT nextval(pg_get_serial_sequence('chunks', 'id')) "
                        "FROM generate_series(1, %s) ORDER BY 1",
                        (n,),
                    ).fetchall()
                ]
                write_rows(
                    conn,
                    "chunks",
                    "user_id, id, session_id, first_msg_id, last_msg_id, text, created_at, "
                    "term_count",
                    (
                        (user, chunk_ids[i], number // EXCHANGES_PER_SESSION + 1,
                         ids[2 * i], ids[2 * i + 1], texts[i], stamps[i], terms[i][1])
                        for i, number in enumerate(numbers)
                    ),
                    copy,
                )  # fmt: skip
                write_rows(
                    conn,
                    "chunk_terms",
                    "user_id, term, chunk_id, tf",
                    ((user, word, chunk_id, tf)
                     for word, chunk_id, tf in zip(*posting_rows(chunk_ids, terms))),
                    copy,
                )  # fmt: skip
                tx.meta.set(episodic.SESSION_ID_HIGH_WATER, sessions[-1])
                write_vectors(tx, chunk_ids, vectors, "host", texts)
            print(f"  postgres: loaded {start + n:,}/{count:,}", file=sys.stderr, end="\r")
        print(file=sys.stderr)
    finally:
        database.close()
    return time.perf_counter() - begin


def time_record_turn(
    path: Path, corpus: Corpus, embedder: SyntheticEmbedder, count: int = 200
) -> dict[str, float]:
    times: list[float] = []
    with elastimem.open(str(path), embedder=embedder, tier_override="standard") as mem:
        mem.begin_session()
        for ids in corpus.word_ids(count, 10**9):
            user, assistant = corpus.texts(ids)
            t0 = time.perf_counter()
            mem.record_turn(user, assistant)
            times.append(time.perf_counter() - t0)
        while not mem.drain(60):
            pass
        # Waited for: otherwise the session-end jobs (consolidation over the whole store)
        # run on the next instance's worker while its recalls are being timed.
        mem.end_session(wait=True, timeout=600)
    return {
        "record_turn_p50_ms": pct(times, 50),
        "record_turn_p95_ms": pct(times, 95),
        "record_turn_per_s": count / sum(times),
    }


# -- measuring --------------------------------------------------------------------------------


def pct(values_s: Sequence[float], p: float) -> float:
    """The p-th percentile of durations in seconds, in milliseconds."""
    return float(np.percentile(np.asarray(values_s) * 1000.0, p))


def rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    except Exception:
        return float("nan")


def make_queries(corpus: Corpus, count: int, n: int) -> list[str]:
    """``n`` distinct queries, each about one random stored exchange."""
    rng = np.random.default_rng(count + 3)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        pick = int(rng.integers(0, count))
        query = corpus.query(corpus.word_ids(1, pick)[0], rng)
        if query not in seen:
            seen.add(query)
            out.append(query)
    return out


def settle(mem: elastimem.Elastimem, timeout: float = 600.0) -> None:
    """What a host's ``warm_up()`` sets going, finished: the worker has primed the keyword
    index (for stores up to keyword_index.PRELOAD_MAX_POSTINGS tokens, every posting)."""
    mem.warm_up()
    deadline = time.monotonic() + timeout
    while mem._services.keyword.prime_requested and time.monotonic() < deadline:
        time.sleep(0.01)


def time_recall(mem: elastimem.Elastimem, queries: list[str], warm: int = 5) -> list[float]:
    for query in queries[:warm]:
        mem.recall(query, 5)
    times = []
    for query in queries:
        t0 = time.perf_counter()
        mem.recall(query, 5)
        times.append(time.perf_counter() - t0)
    return times


def vector_only(
    index: VectorIndex, database: Any, vectors: np.ndarray, n: int
) -> tuple[list[list[int]], list[float]]:
    found, times = [], []
    for vector in vectors:
        with database.read() as conn:
            t0 = time.perf_counter()
            result = index.search(conn, vector, "host", Filters(), n)
            times.append(time.perf_counter() - t0)
        found.append([cid for cid, _ in result])
    return found, times


def run_size(size: int, args: argparse.Namespace, corpus: Corpus, workdir: Path) -> dict[str, Any]:
    embedder = SyntheticEmbedder()
    path = workdir / f"latency-{size}.db"
    reuse = args.keep and path.exists()
    if not reuse:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    row: dict[str, Any] = {"size": size, "load_avg": os.getloadavg()[0]}
    print(f"== {size:,} exchanges{' (reused)' if reuse else ''}", file=sys.stderr)
    if reuse:
        row.update(time_record_turn(path, corpus, embedder))
    elif size <= args.api_max:
        row.update(ingest_api(path, corpus, size, embedder))
    else:
        row["bulk_load_s"] = bulk_load(path, corpus, size, embedder)
        row.update(time_record_turn(path, corpus, embedder))
    queries = make_queries(corpus, size, args.queries)
    gc.collect()

    with elastimem.open(str(path), disable_builtin_embedder=True, tier_override="standard") as mem:
        settle(mem)
        times = time_recall(mem, queries)
        row["keyword_p50_ms"], row["keyword_p95_ms"] = pct(times, 50), pct(times, 95)

    with elastimem.open(
        str(path), embedder=embedder, vector_backend="numpy", tier_override="standard"
    ) as mem:
        t0 = time.perf_counter()
        mem.recall(queries[0] + " first", 5)
        row["hybrid_first_query_ms"] = (time.perf_counter() - t0) * 1000
        settle(mem)
        times = time_recall(mem, queries)
        row["hybrid_numpy_p50_ms"], row["hybrid_numpy_p95_ms"] = pct(times, 50), pct(times, 95)
        vectors_index = mem._vectors
        row["vector_bytes"] = vectors_index.resident_bytes
        row["vector_rows"] = vectors_index.resident_rows
        row["vector_memory_ratio"] = vectors_index.resident_bytes / (
            max(1, vectors_index.resident_rows) * embedder.dim * 4
        )
        row["rss_numpy_mb"] = rss_mb()
        query_vectors = embedder(queries[: args.ann_queries])
        exact, times = vector_only(vectors_index, mem._db, query_vectors, VECTOR_CANDIDATES)
        row["vector_numpy_p50_ms"], row["vector_numpy_p95_ms"] = pct(times, 50), pct(times, 95)

    if not args.no_hnsw and ann.usearch_available() and size >= args.hnsw_min:
        with elastimem.open(
            str(path), embedder=embedder, vector_backend="hnsw", tier_override="standard"
        ) as mem:
            t0 = time.perf_counter()
            mem._vectors.build_ann_now("host", embedder.dim)
            row["hnsw_build_s"] = time.perf_counter() - t0
            with mem._db.read() as tx:
                blob = cast(Any, tx).conn.execute("SELECT length(data) FROM ann_index").fetchone()
            row["hnsw_snapshot_mb"] = (blob[0] / 2**20) if blob else 0.0
        gc.collect()
        with elastimem.open(
            str(path), embedder=embedder, vector_backend="hnsw", tier_override="standard"
        ) as mem:
            t0 = time.perf_counter()
            mem.recall(queries[0] + " first", 5)  # loads the persisted graph
            row["hnsw_first_query_ms"] = (time.perf_counter() - t0) * 1000
            assert mem.stats()["vector_backend"] == "hnsw"
            settle(mem)
            times = time_recall(mem, queries)
            row["hybrid_hnsw_p50_ms"], row["hybrid_hnsw_p95_ms"] = pct(times, 50), pct(times, 95)
            row["hnsw_memory_mb"] = mem._vectors.ann_bytes / 2**20
            row["rss_hnsw_mb"] = rss_mb()
            approx, times = vector_only(mem._vectors, mem._db, query_vectors, VECTOR_CANDIDATES)
            row["vector_hnsw_p50_ms"], row["vector_hnsw_p95_ms"] = pct(times, 50), pct(times, 95)
            hits = sum(len(set(a[:10]) & set(e[:10])) for a, e in zip(approx, exact))
            row["hnsw_recall_at_10"] = hits / (10 * len(exact))
            graph = mem._vectors._ann
            for width in args.hnsw_ef or []:
                # The same graph searched wider or narrower: latency vs recall@10.
                assert graph is not None
                graph.width = width
                approx, times = vector_only(mem._vectors, mem._db, query_vectors, VECTOR_CANDIDATES)
                hits = sum(len(set(a[:10]) & set(e[:10])) for a, e in zip(approx, exact))
                row.setdefault("hnsw_ef_sweep", []).append(
                    {
                        "ef": width,
                        "vector_p50_ms": pct(times, 50),
                        "vector_p95_ms": pct(times, 95),
                        "recall_at_10": hits / (10 * len(exact)),
                    }
                )
            if graph is not None:
                graph.width = None
                row["hnsw_default_width"] = ann.search_width(graph.size)
    row["load_avg_end"] = os.getloadavg()[0]
    if not args.keep:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    return row


# -- SQLite and PostgreSQL side by side ------------------------------------------------------

# (key, what is timed) of the side-by-side figures.
COMPARED = (
    ("record_turn", "record_turn"),
    ("keyword", "keyword recall"),
    ("hybrid", "hybrid recall"),
    ("vector", "vector leg"),
    # vector_backend "pgvector": where the server has pgvector, PostgreSQL searches in the
    # database (row "postgres_vector_path"); SQLite has none and searches as "auto" does.
    ("hybrid_in_db", "hybrid recall, pgvector"),
    ("vector_in_db", "vector leg, pgvector"),
)


def alternate(calls: dict[str, Any], items: Sequence[Any], warm: int = 3) -> dict[str, list[float]]:
    """Time ``calls[backend](item)`` for every item, the backends taking turns item by item
    (after ``warm`` untimed items each); durations in seconds per backend."""
    for item in items[:warm]:
        for call in calls.values():
            call(item)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for number, item in enumerate(items):
        order = list(calls.items())
        if number % 2:
            order.reverse()  # neither backend always goes first
        for name, call in order:
            t0 = time.perf_counter()
            call(item)
            times[name].append(time.perf_counter() - t0)
    return times


def record(row: dict[str, Any], key: str, times: dict[str, list[float]]) -> None:
    for name, values in times.items():
        row[f"{name}_{key}_p50_ms"] = pct(values, 50)
        row[f"{name}_{key}_p95_ms"] = pct(values, 95)
    if "sqlite" in times and "postgres" in times:
        row[f"{key}_ratio_p50"] = row[f"postgres_{key}_p50_ms"] / max(
            row[f"sqlite_{key}_p50_ms"], 1e-9
        )


def run_compare(
    size: int, args: argparse.Namespace, corpus: Corpus, workdir: Path, url: str
) -> dict[str, Any]:
    """One size on both backends (see the module doc)."""
    embedder = SyntheticEmbedder()
    path = workdir / f"latency-{size}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    user = f"latency-{size}-{os.urandom(4).hex()}"
    targets = {"sqlite": (str(path), {}), "postgres": (url, {"user_id": user})}
    row: dict[str, Any] = {"size": size, "backend": "sqlite+postgres", "user": user}
    row["load_avg"] = os.getloadavg()[0]
    print(f"== {size:,} exchanges, SQLite and PostgreSQL", file=sys.stderr)
    row["sqlite_bulk_load_s"] = bulk_load(path, corpus, size, embedder)
    row["postgres_bulk_load_s"] = pg_bulk_load(url, user, corpus, size, embedder)

    def open_all(**options: Any) -> dict[str, elastimem.Elastimem]:
        return {
            name: elastimem.open(where, tier_override="standard", **kw, **options)
            for name, (where, kw) in targets.items()
        }

    def close_all(stores: dict[str, elastimem.Elastimem]) -> None:
        for mem in stores.values():
            mem.close()

    turns = [corpus.texts(ids) for ids in corpus.word_ids(args.turns, 10**9)]
    stores = open_all(embedder=embedder)
    try:
        for mem in stores.values():
            mem.begin_session()
        times = alternate(
            {name: (lambda pair, m=mem: m.record_turn(*pair)) for name, mem in stores.items()},
            turns,
            warm=0,
        )
        record(row, "record_turn", times)
        for mem in stores.values():
            while not mem.drain(60):
                pass
            mem.end_session(wait=True, timeout=600)
    finally:
        close_all(stores)

    queries = make_queries(corpus, size, args.queries)
    gc.collect()
    stores = open_all(disable_builtin_embedder=True)
    try:
        for mem in stores.values():
            settle(mem)
        calls = {name: (lambda q, m=mem: m.recall(q, 5)) for name, mem in stores.items()}
        record(row, "keyword", alternate(calls, queries))
    finally:
        close_all(stores)

    stores = open_all(embedder=embedder, vector_backend="numpy")
    try:
        for mem in stores.values():
            mem.recall(queries[0] + " first", 5)  # loads the vectors
            settle(mem)
        calls = {name: (lambda q, m=mem: m.recall(q, 5)) for name, mem in stores.items()}
        record(row, "hybrid", alternate(calls, queries))
        query_vectors = list(embedder(queries[: args.ann_queries]))
        vector_calls = {
            name: (lambda v, m=mem: vector_only(m._vectors, m._db, v[None, :], VECTOR_CANDIDATES))
            for name, mem in stores.items()
        }
        record(row, "vector", alternate(vector_calls, query_vectors))
        row["sqlite_rss_mb"] = row["postgres_rss_mb"] = rss_mb()
    finally:
        close_all(stores)

    stores = open_all(embedder=embedder, vector_backend="pgvector")
    try:
        for mem in stores.values():
            mem.recall(queries[0] + " first", 5)
            settle(mem)
        path = stores["postgres"].stats()["vector_backend"]
        row["postgres_vector_path"] = path
        print(f"  postgres vector leg (pgvector): {path}", file=sys.stderr)
        if str(path).startswith("pgvector"):
            calls = {name: (lambda q, m=mem: m.recall(q, 5)) for name, mem in stores.items()}
            record(row, "hybrid_in_db", alternate(calls, queries))
            vector_calls = {
                name: (
                    lambda v, m=mem: vector_only(m._vectors, m._db, v[None, :], VECTOR_CANDIDATES)
                )
                for name, mem in stores.items()
            }
            record(row, "vector_in_db", alternate(vector_calls, query_vectors))
    finally:
        close_all(stores)
    row["load_avg_end"] = os.getloadavg()[0]
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return row


def print_compared(rows: list[dict[str, Any]]) -> None:
    table = [["size", "figure", "SQLite p50", "PG p50", "PG/SQLite", "SQLite p95", "PG p95"]]
    for row in rows:
        for key, title in COMPARED:
            if f"sqlite_{key}_p50_ms" not in row:
                continue
            table.append(
                [
                    f"{row['size']:,}",
                    title,
                    f"{row[f'sqlite_{key}_p50_ms']:.2f} ms",
                    f"{row[f'postgres_{key}_p50_ms']:.2f} ms",
                    f"{row[f'{key}_ratio_p50']:.2f}x",
                    f"{row[f'sqlite_{key}_p95_ms']:.2f} ms",
                    f"{row[f'postgres_{key}_p95_ms']:.2f} ms",
                ]
            )
        table.append(
            [
                f"{row['size']:,}",
                "bulk load",
                f"{row['sqlite_bulk_load_s']:.1f} s",
                f"{row['postgres_bulk_load_s']:.1f} s",
                f"{row['postgres_bulk_load_s'] / max(row['sqlite_bulk_load_s'], 1e-9):.2f}x",
                "",
                "",
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    for row in rows:
        path = row.get("postgres_vector_path")
        print(f"{row['size']:,}: PostgreSQL's vector leg (vector_backend pgvector) ran as {path}")
    print()


def private_postgres(pgvector: bool = False) -> tuple[Any, str]:
    """A private PostgreSQL server for this run (tests/pg_server.py) and the application
    role's address of a new database with the schema; ``pgvector``: PostgreSQL 16 with the
    extension created (the ``pgserver`` wheel's binaries)."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    import psycopg
    from tests import pg_server

    from elastimem.storage.postgres import migrations

    server = pg_server.start(pg_server.pgvector_bin_dir() if pgvector else None)
    admin_url = server.create_database("elastimem_latency")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if pgvector:
            conn.execute("CREATE EXTENSION vector")
        migrations.ensure_schema(conn, "the benchmark database")
    return server, server.app_url(admin_url)


# -- the built-in embedder end to end ---------------------------------------------------------


def run_builtin(args: argparse.Namespace, corpus: Corpus, workdir: Path) -> dict[str, Any]:
    """Ingest through record_turn with the built-in model vs the model's own throughput."""
    from elastimem.index.embedders import EMBED_BATCH_SIZE, BuiltinEmbedder
    from elastimem.index.vectors import passage_texts

    count = args.builtin_turns
    path = workdir / "builtin.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    word_ids = corpus.word_ids(count, 0)
    pairs = [corpus.texts(ids) for ids in word_ids]
    row: dict[str, Any] = {"turns": count, "load_avg": os.getloadavg()[0]}
    with elastimem.open(str(path), disable_builtin_embedder=False, tier_override="standard") as mem:
        t0 = time.perf_counter()
        if not mem.warm_up(timeout=300):
            raise SystemExit("the built-in embedder did not load; install elastimem[embed]")
        row["model_load_s"] = time.perf_counter() - t0
        row["model"] = mem.stats()["embedding_model"]
        begin = time.perf_counter()
        for number, (user, assistant) in enumerate(pairs):
            if number % EXCHANGES_PER_SESSION == 0:
                mem.begin_session()
            mem.record_turn(user, assistant)
        while not mem.drain(120):
            pass
        row["ingest_chunks_per_s"] = count / (time.perf_counter() - begin)
        with mem._db.read() as conn:
            rows = (
                cast(Any, conn).conn.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
            )
            passages = passage_texts(conn, rows)
        raw = [str(r[1]) for r in rows]
        queries = make_queries(corpus, count, args.queries)
        # Query embedding alone, then recall with a cold and with a cached query vector.
        builtin = mem._embedding.builtin
        assert builtin is not None
        times = []
        for query in queries:
            t0 = time.perf_counter()
            builtin.embed_query(query + " (uncached)")
            times.append(time.perf_counter() - t0)
        row["query_embedding_p50_ms"] = pct(times, 50)
        cold = []
        for query in queries:
            t0 = time.perf_counter()
            mem.recall(query, 5)
            cold.append(time.perf_counter() - t0)
        warm = []
        for query in queries:
            t0 = time.perf_counter()
            mem.recall(query, 5)
            warm.append(time.perf_counter() - t0)
        row["hybrid_recall_p50_ms_uncached"] = pct(cold, 50)
        row["hybrid_recall_p50_ms_cached_vector"] = pct(warm, 50)
    model = BuiltinEmbedder()
    model.load()

    def throughput(texts: list[str]) -> float:
        begin = time.perf_counter()
        for start in range(0, len(texts), EMBED_BATCH_SIZE):
            model.embed(texts[start : start + EMBED_BATCH_SIZE])
        return len(texts) / (time.perf_counter() - begin)

    row["model_chunks_per_s_passages"] = throughput(passages)
    row["model_chunks_per_s_bare_text"] = throughput(raw)
    row["ingest_vs_model"] = row["ingest_chunks_per_s"] / row["model_chunks_per_s_passages"]
    row["ingest_vs_model_bare"] = row["ingest_chunks_per_s"] / row["model_chunks_per_s_bare_text"]
    if not args.keep:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    return row


# -- output -----------------------------------------------------------------------------------


COLUMNS: list[tuple[str, str, str]] = [
    ("size", "exchanges", "{:,}"),
    ("record_turn_p50_ms", "turn p50", "{:.2f}"),
    ("record_turn_p95_ms", "turn p95", "{:.2f}"),
    ("record_turn_per_s", "turns/s", "{:,.0f}"),
    ("ingest_with_embedding_per_s", "ingest+emb/s", "{:,.0f}"),
    ("keyword_p50_ms", "kw p50", "{:.2f}"),
    ("keyword_p95_ms", "kw p95", "{:.2f}"),
    ("hybrid_numpy_p50_ms", "hyb np p50", "{:.2f}"),
    ("hybrid_numpy_p95_ms", "hyb np p95", "{:.2f}"),
    ("hybrid_hnsw_p50_ms", "hyb hnsw p50", "{:.2f}"),
    ("hybrid_hnsw_p95_ms", "hyb hnsw p95", "{:.2f}"),
]
COLUMNS_2: list[tuple[str, str, str]] = [
    ("size", "exchanges", "{:,}"),
    ("vector_numpy_p50_ms", "vec np p50", "{:.2f}"),
    ("vector_numpy_p95_ms", "vec np p95", "{:.2f}"),
    ("vector_hnsw_p50_ms", "vec hnsw p50", "{:.2f}"),
    ("vector_hnsw_p95_ms", "vec hnsw p95", "{:.2f}"),
    ("hnsw_recall_at_10", "hnsw R@10", "{:.3f}"),
    ("hnsw_build_s", "build s", "{:.1f}"),
    ("hnsw_snapshot_mb", "snap MB", "{:.0f}"),
    ("vector_memory_ratio", "np mem/raw", "{:.3f}"),
    ("vector_bytes", "np MB", "{}"),
    ("hnsw_memory_mb", "hnsw MB", "{:.0f}"),
    ("rss_numpy_mb", "RSS np MB", "{:.0f}"),
    ("rss_hnsw_mb", "RSS hnsw MB", "{:.0f}"),
    ("hybrid_first_query_ms", "1st np ms", "{:.0f}"),
    ("hnsw_first_query_ms", "1st hnsw ms", "{:.0f}"),
    ("load_avg", "load start", "{:.1f}"),
    ("load_avg_end", "load end", "{:.1f}"),
]


def print_rows(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> None:
    def cell(row: dict[str, Any], key: str, fmt: str) -> str:
        value = row.get(key)
        if value is None:
            return "-"
        if key == "vector_bytes":
            return f"{value / 2**20:.0f}"
        return fmt.format(value)

    table = [[title for _, title, _ in columns]]
    table += [[cell(r, key, fmt) for key, _, fmt in columns] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    for r in table:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--big", action="store_true", help="also 1,000,000 exchanges")
    parser.add_argument("--queries", type=int, default=300, help="timed queries per figure")
    parser.add_argument(
        "--ann-queries",
        type=int,
        default=200,
        help="queries for the vector-only numpy/HNSW comparison",
    )
    parser.add_argument(
        "--api-max",
        type=int,
        default=10_000,
        help="sizes up to this are ingested through record_turn",
    )
    parser.add_argument(
        "--hnsw-min",
        type=int,
        default=10_000,
        help="smallest size for which the HNSW index is built and measured",
    )
    parser.add_argument("--no-hnsw", action="store_true")
    parser.add_argument(
        "--hnsw-ef",
        type=int,
        nargs="*",
        default=None,
        help="also time the vector leg at these HNSW search widths (recall@10 vs latency)",
    )
    parser.add_argument(
        "--builtin", action="store_true", help="measure the built-in embedder end to end instead"
    )
    parser.add_argument("--builtin-turns", type=int, default=400)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the stores in --workdir, and reuse them (and their HNSW "
        "snapshot) on the next run",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: SQLite and PostgreSQL side by side in the same run",
    )
    parser.add_argument(
        "--pg-url",
        default=None,
        help="PostgreSQL server for --backend postgres (default: a private one for the run)",
    )
    parser.add_argument(
        "--turns", type=int, default=200, help="record_turn calls timed per backend (postgres)"
    )
    parser.add_argument(
        "--pgvector",
        action="store_true",
        help="the private server (no --pg-url) is PostgreSQL 16 with pgvector (pgserver wheel)",
    )
    args = parser.parse_args(argv)

    corpus = Corpus()
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="elastimem-latency-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.backend == "postgres":
            server = None
            url = args.pg_url
            if url is None:
                server, url = private_postgres(args.pgvector)
            try:
                rows = []
                for size in list(args.sizes) + ([1_000_000] if args.big else []):
                    rows.append(run_compare(size, args, corpus, workdir, url))
                    gc.collect()
            finally:
                if server is not None:
                    server.stop()
            print(
                f"SQLite vs PostgreSQL, one user, {args.queries} queries per figure, k=5, "
                f"alternating, {os.cpu_count()} CPUs"
            )
            print_compared(rows)
        elif args.builtin:
            row = run_builtin(args, corpus, workdir)
            width = max(len(k) for k in row)
            for key, value in row.items():
                shown = f"{value:,.2f}" if isinstance(value, float) else str(value)
                print(f"{key:<{width}}  {shown}")
            rows = [row]
        else:
            sizes = list(args.sizes) + ([1_000_000] if args.big else [])
            rows = []
            for size in sizes:
                rows.append(run_size(size, args, corpus, workdir))
                gc.collect()
            print(
                f"{DIM}-dim vectors, {args.queries} queries per figure, k=5, {os.cpu_count()} CPUs"
            )
            print_rows(rows, COLUMNS)
            print_rows(rows, COLUMNS_2)
            for row in rows:
                for point in row.get("hnsw_ef_sweep", []):
                    print(
                        f"{row['size']:,} exchanges, HNSW width {point['ef']}: vector leg "
                        f"p50 {point['vector_p50_ms']:.2f} ms, p95 {point['vector_p95_ms']:.2f} "
                        f"ms, recall@10 {point['recall_at_10']:.3f}"
                    )
    finally:
        if tmp is not None:
            tmp.cleanup()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
