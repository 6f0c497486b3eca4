"""Retrieval quality on the LoCoMo development split, through the public API only.

Each dev conversation is loaded into a fresh store: one store session per LoCoMo session
(``begin_session(at=<its date>)``), consecutive dialog turns paired into exchanges with
``record_turn(first, second, at=...)``, then ``end_session``. With the built-in embedder the
loader waits for every chunk to be embedded (``warm_up`` + ``drain``). Every category 1–4
question is then asked through ``recall(question, k=10, kinds=["chunk"])``, once with the
keyword legs only (the same file reopened with ``disable_builtin_embedder=True``) and once
hybrid. A question's evidence turns (``D<session>:<turn>``) are mapped to chunks through the
messages each chunk covers.

Figures, at two granularities:

- exchange level (unchanged since the first version, so past figures stay comparable):
  recall@k is the share of a question's evidence turns found in the top k chunks of
  ``recall(question, k=10)``, averaged over questions (``--metric any`` counts a question as
  found when any evidence turn is); MRR uses the rank of the first chunk holding an evidence
  turn.
- session level (the granularity of MemPalace's and basic-memory's published figures): the
  same question is asked again with ``k=--session-depth`` (50); the hits are walked in rank
  order and each hit's LoCoMo session (``D3:5`` -> session 3, from the turns its chunk covers)
  is kept at its first occurrence only, giving a ranking of distinct sessions. Session
  recall@k (k = 5, 10) is the share of the question's evidence sessions among the first k of
  them. When the deep ranking reaches fewer than k distinct sessions, the shorter list is
  scored as it is (no padding): an evidence session outside it counts as missed; the tables'
  ``<10 sess`` column (and ``session_short@k`` in ``--json``) say how often that happened.

Both are given for every category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop) and
for all of them, in each mode.

    python benchmarks/locomo.py                      # keyword-only and hybrid, all 5 dev convs
    python benchmarks/locomo.py --convs conv-26 --per-category
    python benchmarks/locomo.py --session-depth 0    # exchange level only (one recall each)
    python benchmarks/locomo.py --mode keyword       # no model needed
    python benchmarks/locomo.py --data PATH/locomo_dev.json --workdir /tmp/locomo
    python benchmarks/locomo.py --backend postgres   # the same on a private PostgreSQL 15
    python benchmarks/locomo.py --db-url postgresql://app@db/memory --workdir /tmp/locomo-pg

On PostgreSQL (issue #18) each conversation is loaded into its own user of one database,
through the same calls; ``--backend postgres`` starts a private server for the run
(``tests/pg_server.py``), ``--db-url`` uses yours. ``--copy-sqlite`` fills each user instead
with ``import_`` of the export of the conversation's SQLite store in ``--workdir`` (built
there when missing), so both backends answer from the very same rows and only the search
differs.

The dataset is not shipped; by default it is read from ``../shared/data/locomo`` next to the
repository (or ``$LOCOMO_DEV``). Tune only on this split.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import elastimem

KS = (1, 3, 5, 10)
SESSION_KS = (5, 10)
SESSION_DEPTH = 50  # hits asked for the session ranking: enough for 10 distinct sessions
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 0: "all"}
DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
)
_DIA = re.compile(r"D(\d+):(\d+)")
_DATE = re.compile(r"(\d{1,2}):(\d\d)\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)
_MONTH_NAMES = (
    "january february march april may june july august september october november december"
)
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES.split(), start=1)}


# -- loading ----------------------------------------------------------------------------------


def parse_locomo_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware UTC datetime."""
    match = _DATE.search(text)
    if not match:
        raise ValueError(f"unreadable LoCoMo date {text!r}")
    hour, minute, half, day, month, year = match.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(
        int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=timezone.utc
    )


def turn_text(turn: dict[str, Any], *, speaker_names: bool, captions: bool) -> str:
    text = str(turn.get("text", ""))
    if captions and turn.get("blip_caption"):
        text = f"{text} [image: {turn['blip_caption']}]".strip()
    if speaker_names:
        text = f"{turn['speaker']}: {text}"
    return text


@dataclass
class Loaded:
    sample_id: str
    path: Path  # the SQLite file, or the --workdir name of the PostgreSQL user's map file
    # None on SQLite; on PostgreSQL the server's address and the conversation's user
    url: str | None = None
    user_id: str | None = None
    # chunk id -> the dia ids ("D3:5") of the messages it covers
    chunk_dias: dict[int, frozenset[str]] = field(default_factory=dict)
    exchanges: int = 0
    load_seconds: float = 0.0
    embed_seconds: float = 0.0


def sessions_of(conversation: dict[str, Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    out = []
    for key, value in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(value, list) and value:
            number = int(match.group(1))
            out.append((number, conversation[f"session_{number}_date_time"], value))
    return sorted(out)


def load_conversation(
    sample: dict[str, Any],
    path: Path,
    *,
    speaker_names: bool,
    captions: bool,
    embed: bool,
    store_kw: dict[str, Any],
    url: str | None = None,
    user_id: str | None = None,
) -> Loaded:
    """Ingest one conversation through the public API; returns the chunk → turns map."""
    loaded = Loaded(sample["sample_id"], path, url, user_id)
    # message (store session id, turn, role) -> dia id, filled while recording
    dia_of: dict[tuple[int, int, str], str] = {}
    start = time.perf_counter()
    kw = dict(store_kw)
    if not embed:
        kw["disable_builtin_embedder"] = True
    with open_store(loaded, **kw) as mem:
        for _number, date_text, turns in sessions_of(sample["conversation"]):
            at = parse_locomo_date(date_text)
            session_id = mem.begin_session(at=at)
            for index in range(0, len(turns), 2):
                pair = turns[index : index + 2]
                first = turn_text(pair[0], speaker_names=speaker_names, captions=captions)
                second = ""
                if len(pair) > 1:
                    second = turn_text(pair[1], speaker_names=speaker_names, captions=captions)
                turn_number = index // 2 + 1
                mem.record_turn(first, second, at=at + timedelta(seconds=index))
                dia_of[(session_id, turn_number, "user")] = pair[0]["dia_id"]
                if len(pair) > 1:
                    dia_of[(session_id, turn_number, "assistant")] = pair[1]["dia_id"]
                loaded.exchanges += 1
            mem.end_session(wait=False)
        loaded.load_seconds = time.perf_counter() - start
        if embed:
            begin = time.perf_counter()
            if not mem.warm_up(timeout=300):
                raise SystemExit("the built-in embedder did not load; install elastimem[embed]")
            while not mem.drain(timeout=120):
                pass
            loaded.embed_seconds = time.perf_counter() - begin
            stats = mem.stats()
            if stats["embedded_chunks"] != stats["chunks"]:
                raise SystemExit(
                    f"only {stats['embedded_chunks']}/{stats['chunks']} chunks embedded"
                )
        loaded.chunk_dias = _map_chunks(mem, dia_of)
    return loaded


def open_store(loaded: Loaded, **kw: Any) -> elastimem.Elastimem:
    """The conversation's store: its SQLite file, or its user on the PostgreSQL server."""
    if loaded.url is None:
        return elastimem.open(str(loaded.path), **kw)
    return elastimem.open(loaded.url, user_id=loaded.user_id, **kw)


def _rows_of(mem: elastimem.Elastimem, tables: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``tables``, read through ``export`` (the same on both backends)."""
    buffer = io.BytesIO()
    mem.export(buffer)
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in tables}
    for line in buffer.getvalue().split(b"\n"):
        if line:
            obj = json.loads(line)
            if obj.get("table") in tables:
                out[obj["table"]].append(obj["row"])
    return out


def _map_chunks(
    mem: elastimem.Elastimem, dia_of: dict[tuple[int, int, str], str]
) -> dict[int, frozenset[str]]:
    """Which LoCoMo turns each chunk covers, from the store's messages and chunks."""
    rows = _rows_of(mem, {"messages", "chunks"})
    messages = {
        int(m["id"]): dia_of.get((int(m["session_id"]), int(m["turn"]), str(m["role"])))
        for m in rows["messages"]
    }
    out: dict[int, frozenset[str]] = {}
    for chunk in rows["chunks"]:
        first, last = int(chunk["first_msg_id"]), int(chunk["last_msg_id"])
        dias = {messages.get(m) for m in range(first, last + 1)}
        out[int(chunk["id"])] = frozenset(d for d in dias if d)
    return out


# -- evaluation -------------------------------------------------------------------------------


def questions_of(sample: dict[str, Any]) -> list[tuple[str, int, frozenset[str]]]:
    out = []
    for qa in sample["qa"]:
        category = int(qa.get("category", 0))
        if category not in (1, 2, 3, 4):
            continue
        evidence = set()
        for item in qa.get("evidence", []):
            for s, t in _DIA.findall(str(item)):
                evidence.add(f"D{int(s)}:{int(t)}")
        if evidence:
            out.append((str(qa["question"]), category, frozenset(evidence)))
    return out


def sessions_of_turns(dias: Iterable[str]) -> frozenset[int]:
    """The LoCoMo session numbers of dialog turn ids: {"D3:5", "D3:6", "D12:1"} -> {3, 12}."""
    return frozenset(int(s) for dia in dias for s, _t in _DIA.findall(dia))


def distinct_sessions(ranked: Iterable[Iterable[int]], k: int) -> list[int]:
    """The first ``k`` distinct sessions of a ranking of hits, best first.

    ``ranked`` gives, for each hit in rank order, the sessions its chunk covers (one for an
    exchange chunk; none when it covers no dialog turn, which is skipped; several, in
    ascending order, if a chunk ever spanned sessions). Each session is kept at its first
    occurrence. The list is shorter than ``k`` when the ranking holds fewer sessions.
    """
    out: list[int] = []
    seen: set[int] = set()
    for sessions in ranked:
        for session in sorted(sessions):
            if session not in seen:
                seen.add(session)
                out.append(session)
                if len(out) >= k:
                    return out
    return out


def session_recall(
    ranked: Iterable[Iterable[int]], evidence_sessions: Iterable[int], k: int
) -> float:
    """Share of the evidence sessions among the top ``k`` distinct sessions of ``ranked``."""
    wanted = set(evidence_sessions)
    if not wanted:
        raise ValueError("a question needs at least one evidence session")
    return len(wanted & set(distinct_sessions(ranked, k))) / len(wanted)


@dataclass
class SessionScores:
    """Session-level recall over questions (see ``distinct_sessions``)."""

    n: int = 0
    recall: dict[int, float] = field(default_factory=lambda: dict.fromkeys(SESSION_KS, 0.0))
    any_hit: dict[int, float] = field(default_factory=lambda: dict.fromkeys(SESSION_KS, 0.0))
    # questions whose deep ranking held fewer than k distinct sessions
    short: dict[int, int] = field(default_factory=lambda: dict.fromkeys(SESSION_KS, 0))

    def add(self, ranked: list[frozenset[int]], evidence: frozenset[int]) -> None:
        self.n += 1
        for k in SESSION_KS:
            top = distinct_sessions(ranked, k)
            found = evidence & set(top)
            self.recall[k] += len(found) / len(evidence)
            self.any_hit[k] += 1.0 if found else 0.0
            self.short[k] += 1 if len(top) < k else 0

    def merge(self, other: SessionScores) -> None:
        self.n += other.n
        for k in SESSION_KS:
            self.recall[k] += other.recall[k]
            self.any_hit[k] += other.any_hit[k]
            self.short[k] += other.short[k]

    def value(self, k: int, metric: str) -> float:
        table = self.recall if metric == "share" else self.any_hit
        return table[k] / max(1, self.n)


@dataclass
class Scores:
    n: int = 0
    recall: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    any_hit: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    mrr: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    sessions: SessionScores = field(default_factory=SessionScores)

    def add(self, ranked: list[frozenset[str]], evidence: frozenset[str]) -> None:
        self.n += 1
        for k in KS:
            found = set().union(*ranked[:k]) & evidence if ranked[:k] else set()
            self.recall[k] += len(found) / len(evidence)
            self.any_hit[k] += 1.0 if found else 0.0
        for rank, dias in enumerate(ranked, start=1):
            if dias & evidence:
                self.mrr += 1.0 / rank
                break

    def merge(self, other: Scores) -> None:
        self.n += other.n
        for k in KS:
            self.recall[k] += other.recall[k]
            self.any_hit[k] += other.any_hit[k]
        self.mrr += other.mrr
        self.latencies_ms.extend(other.latencies_ms)
        self.sessions.merge(other.sessions)

    def row(self, metric: str) -> list[str]:
        table = self.recall if metric == "share" else self.any_hit
        n = max(1, self.n)
        p50 = f"{statistics.median(self.latencies_ms):.1f}" if self.latencies_ms else "-"
        return [f"{table[k] / n:.3f}" for k in KS] + [f"{self.mrr / n:.3f}", p50]


def evaluate(
    loaded: Loaded,
    questions: Iterable[tuple[str, int, frozenset[str]]],
    *,
    hybrid: bool,
    store_kw: dict[str, Any],
    depth: int = max(KS),
    session_depth: int = SESSION_DEPTH,
) -> dict[int, Scores]:
    """Ask every question; returns scores per category (key 0 holds all of them).

    Each question is asked twice: with ``k=depth`` for the exchange-level figures (timed, as
    always) and with ``k=session_depth`` for the session-level ones, so that a ranking which
    depends on ``k`` cannot change the exchange-level figures. ``session_depth=0`` skips it.
    """
    kw = dict(store_kw)
    if not hybrid:
        kw["disable_builtin_embedder"] = True
    by_category: dict[int, Scores] = {0: Scores()}
    with open_store(loaded, **kw) as mem:
        if hybrid and not mem.warm_up(timeout=300):
            raise SystemExit("the built-in embedder did not load; install elastimem[embed]")
        for question, category, evidence in questions:
            begin = time.perf_counter()
            hits = mem.recall(question, k=depth, kinds=["chunk"])
            elapsed = (time.perf_counter() - begin) * 1000
            ranked = [loaded.chunk_dias.get(int(h.id or 0), frozenset()) for h in hits]
            deep: list[frozenset[int]] = []
            if session_depth:
                deep_hits = mem.recall(question, k=session_depth, kinds=["chunk"])
                deep = [
                    sessions_of_turns(loaded.chunk_dias.get(int(h.id or 0), frozenset()))
                    for h in deep_hits
                ]
            for key in (0, category):
                scores = by_category.setdefault(key, Scores())
                scores.add(ranked, evidence)
                if session_depth:
                    scores.sessions.add(deep, sessions_of_turns(evidence))
            by_category[0].latencies_ms.append(elapsed)
    return by_category


def print_table(title: str, rows: list[tuple[str, Scores]], metric: str) -> None:
    header = ["", "n"] + [f"R@{k}" for k in KS] + ["MRR", "p50 ms"]
    body = [[name, str(s.n), *s.row(metric)] for name, s in rows]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    print(title)
    for r in [header, *body]:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))
            )
        )
    print()


def print_category_table(mode: str, cats: dict[int, Scores], metric: str, depth: int) -> None:
    """One mode's exchange- and session-level R@5/R@10 by category."""
    header = ["category", "n", "exch R@5", "exch R@10"]
    if depth:
        header += ["sess R@5", "sess R@10", "<10 sess"]
    body = []
    for category in (1, 2, 3, 4, 0):
        s = cats.get(category, Scores())
        table = s.recall if metric == "share" else s.any_hit
        row = [f"{CATEGORY_NAMES[category]} ({category})" if category else "all", str(s.n)]
        row += [f"{table[k] / max(1, s.n):.3f}" for k in (5, 10)]
        if depth:
            row += [f"{s.sessions.value(k, metric):.3f}" for k in SESSION_KS]
            row.append(str(s.sessions.short[10]))
        if not s.n:  # no question of this category (a subset of the conversations)
            row[2:] = ["-"] * (len(row) - 2)
        body.append(row)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    print(
        f"{mode} by category, recall@k ({metric}): exch = top k chunks of recall(k=10); "
        f"sess = top k distinct sessions of recall(k={depth}); "
        f"<10 sess = questions whose {depth} hits hold fewer than 10 sessions"
        if depth
        else f"{mode} by category, exchange-level recall@k ({metric})"
    )
    for r in [header, *body]:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))
            )
        )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=Path(os.environ.get("LOCOMO_DEV", DEFAULT_DATA))
    )
    parser.add_argument("--convs", nargs="*", help="sample ids to use (default: all)")
    parser.add_argument("--mode", choices=("both", "keyword", "hybrid"), default="both")
    parser.add_argument(
        "--metric",
        choices=("share", "any"),
        default="share",
        help="recall@k: share of evidence turns found (default) or any found",
    )
    parser.add_argument(
        "--per-category",
        action="store_true",
        help="also the full exchange-level table (R@1..10, MRR) of each category",
    )
    parser.add_argument(
        "--session-depth",
        type=int,
        default=SESSION_DEPTH,
        metavar="K",
        help=f"hits asked for the session-level ranking (default {SESSION_DEPTH}; 0: skip it)",
    )
    parser.add_argument(
        "--speaker-names",
        action="store_true",
        help="prefix each turn with its speaker's name (off: the text as said)",
    )
    parser.add_argument(
        "--no-captions",
        action="store_true",
        help="leave out the image captions ('[image: ...]') shared in turns",
    )
    parser.add_argument(
        "--passage-context",
        type=int,
        default=None,
        metavar="CHARS",
        help="override vectors.PASSAGE_CONTEXT_CHARS (0: embed chunks alone)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep the stores here (reused when present) instead of a temp dir",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default=None,
        help="where the stores live (default sqlite; postgres without --db-url starts a "
        "private PostgreSQL 15 for the run, see tests/pg_server.py)",
    )
    parser.add_argument(
        "--db-url",
        default=None,
        metavar="URL",
        help="a postgresql:// address: each conversation is loaded into its own user there",
    )
    parser.add_argument(
        "--copy-sqlite",
        action="store_true",
        help="on PostgreSQL, fill each user by importing the export of the conversation's "
        "SQLite store in --workdir (built there when missing) instead of loading it again",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.session_depth < 0:
        parser.error("--session-depth must be 0 (skip) or a number of hits")
    if args.db_url is not None and args.backend == "sqlite":
        parser.error("--db-url names a PostgreSQL server; leave out --backend sqlite")
    postgres = args.backend == "postgres" or args.db_url is not None
    if args.copy_sqlite and not postgres:
        parser.error("--copy-sqlite fills PostgreSQL users; add --backend postgres or --db-url")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)

    if args.passage_context is not None:
        import elastimem.index.vector_writes

        elastimem.index.vector_writes.PASSAGE_CONTEXT_CHARS = args.passage_context
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.convs:
        samples = [s for s in samples if s["sample_id"] in set(args.convs)]
    embed = args.mode != "keyword"
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="elastimem-locomo-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    store_kw: dict[str, Any] = {}
    totals: dict[str, dict[int, Scores]] = {}
    server = None
    try:
        url = args.db_url
        if postgres and url is None:
            server, url = _private_server()
        for sample in samples:
            variant = "-".join(
                [
                    "names" if args.speaker_names else "plain",
                    "nocap" if args.no_captions else "cap",
                    f"ctx{args.passage_context}" if args.passage_context is not None else "ctx",
                ]
            )
            path = workdir / f"{sample['sample_id']}-{variant}.db"
            if path.exists() and args.workdir is None:
                path.unlink()
            if postgres:
                assert url is not None
                loaded = _load_into_user(sample, path, url, args, embed, store_kw)
            else:
                loaded = _load_or_reuse(sample, path, args, embed, store_kw)
            questions = questions_of(sample)
            print(
                f"{sample['sample_id']}: {loaded.exchanges} exchanges, "
                f"{len(loaded.chunk_dias)} chunks, {len(questions)} questions; "
                f"load {loaded.load_seconds:.1f} s, embed {loaded.embed_seconds:.1f} s",
                file=sys.stderr,
            )
            modes = {"both": ("keyword", "hybrid"), "keyword": ("keyword",), "hybrid": ("hybrid",)}[
                args.mode
            ]
            for mode in modes:
                result = evaluate(
                    loaded,
                    questions,
                    hybrid=mode == "hybrid",
                    store_kw=store_kw,
                    session_depth=args.session_depth,
                )
                into = totals.setdefault(mode, {})
                for category, scores in result.items():
                    into.setdefault(category, Scores()).merge(scores)
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            tmp.cleanup()
    rows = [(mode, cats[0]) for mode, cats in totals.items()]
    print_table(
        f"LoCoMo dev, categories 1-4, recall@k ({args.metric}), {len(samples)} convs",
        rows,
        args.metric,
    )
    for mode, cats in totals.items():
        print_category_table(mode, cats, args.metric, args.session_depth)
    if args.per_category:
        for mode, cats in totals.items():
            print_table(
                f"{mode} by category",
                [(f"cat {c}", s) for c, s in sorted(cats.items()) if c],
                args.metric,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            mode: {
                str(c): {
                    "n": s.n,
                    **{f"recall@{k}": s.recall[k] / max(1, s.n) for k in KS},
                    **{f"any@{k}": s.any_hit[k] / max(1, s.n) for k in KS},
                    "mrr": s.mrr / max(1, s.n),
                    "category": CATEGORY_NAMES.get(c, str(c)),
                    **(
                        {
                            **{
                                f"session_recall@{k}": s.sessions.value(k, "share")
                                for k in SESSION_KS
                            },
                            **{f"session_any@{k}": s.sessions.value(k, "any") for k in SESSION_KS},
                            **{
                                f"session_short@{k}": s.sessions.short[k] / max(1, s.n)
                                for k in SESSION_KS
                            },
                            "session_depth": args.session_depth,
                        }
                        if args.session_depth
                        else {}
                    ),
                }
                for c, s in cats.items()
            }
            for mode, cats in totals.items()
        }
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 0


def _load_or_reuse(
    sample: dict[str, Any],
    path: Path,
    args: argparse.Namespace,
    embed: bool,
    store_kw: dict[str, Any],
) -> Loaded:
    """Load the conversation, or reuse a store left in --workdir by an earlier run."""
    meta = path.with_suffix(".map.json")
    if args.workdir is not None and path.exists() and meta.exists():
        info = json.loads(meta.read_text(encoding="utf-8"))
        if not embed or info.get("embedded"):
            loaded = Loaded(sample["sample_id"], path, exchanges=info["exchanges"])
            loaded.chunk_dias = {int(k): frozenset(v) for k, v in info["chunk_dias"].items()}
            return loaded
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    loaded = load_conversation(
        sample,
        path,
        speaker_names=args.speaker_names,
        captions=not args.no_captions,
        embed=embed,
        store_kw=store_kw,
    )
    meta.write_text(
        json.dumps(
            {
                "exchanges": loaded.exchanges,
                "embedded": embed,
                "chunk_dias": {str(k): sorted(v) for k, v in loaded.chunk_dias.items()},
            }
        ),
        encoding="utf-8",
    )
    return loaded


def _private_server() -> tuple[Any, str]:
    """A private PostgreSQL 15 for this run (stopped at the end) and the address of a new
    database on it, as a non-superuser role, the way an application connects."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import psycopg
    from tests import pg_server

    from elastimem.storage.postgres import migrations

    try:
        server = pg_server.start()
    except pg_server.PgUnavailable as exc:
        raise SystemExit(f"no PostgreSQL server for --backend postgres: {exc}") from exc
    admin_url = server.create_database("elastimem_locomo")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        migrations.ensure_schema(conn, "the LoCoMo database")
    return server, server.app_url(admin_url)


def _load_into_user(
    sample: dict[str, Any],
    path: Path,
    url: str,
    args: argparse.Namespace,
    embed: bool,
    store_kw: dict[str, Any],
) -> Loaded:
    """The conversation as its own user of the PostgreSQL database at ``url``: loaded
    through the API (or, with --copy-sqlite, imported from its SQLite store's export); a
    user left by an earlier run on the same server is reused when --workdir has its map."""
    meta = path.with_name(path.stem + ".pg.map.json")
    if args.workdir is not None and args.db_url is not None and meta.exists():
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("url") == url and (not embed or info.get("embedded")):
            loaded = Loaded(
                sample["sample_id"], meta, url, info["user_id"], exchanges=info["exchanges"]
            )
            loaded.chunk_dias = {int(k): frozenset(v) for k, v in info["chunk_dias"].items()}
            return loaded
    # A new user each time: an earlier run's user (another server's map) is left alone.
    user_id = f"locomo-{path.stem}-{secrets.token_hex(4)}"
    if args.copy_sqlite:
        source = _load_or_reuse(sample, path, args, embed, store_kw)
        loaded = Loaded(sample["sample_id"], meta, url, user_id, exchanges=source.exchanges)
        begin = time.perf_counter()
        with open_store(source, disable_builtin_embedder=True) as mem:
            buffer = io.BytesIO()
            mem.export(buffer)
        buffer.seek(0)
        with open_store(loaded, disable_builtin_embedder=True) as mem:
            mem.import_(buffer)
        loaded.load_seconds = time.perf_counter() - begin
        loaded.chunk_dias = source.chunk_dias  # the same ids: the rows were copied
    else:
        loaded = load_conversation(
            sample,
            path,
            speaker_names=args.speaker_names,
            captions=not args.no_captions,
            embed=embed,
            store_kw=store_kw,
            url=url,
            user_id=user_id,
        )
    if args.workdir is not None:
        meta.write_text(
            json.dumps(
                {
                    "url": url,
                    "user_id": user_id,
                    "exchanges": loaded.exchanges,
                    "embedded": embed,
                    "chunk_dias": {str(k): sorted(v) for k, v in loaded.chunk_dias.items()},
                }
            ),
            encoding="utf-8",
        )
    return loaded


if __name__ == "__main__":
    sys.exit(main())
