"""Context plans: memory fitted into token budgets for the next model call (SPEC §5.8).

``build_context_plan`` fills five sections — user facts, related topics (graph), relevant past
moments, previous sessions, lessons — each within its budget from the governor. Every step runs
inside its own guard: a failing step leaves its section empty and a plan is always returned.
Lines are fitted one at a time; a line that does not fit is cut at a word boundary (when at
least 24 tokens remain) or skipped, and fitting *continues* with the next line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .clock import SECONDS_PER_DAY, epoch_seconds, utcnow
from .errors import ClosedError
from .governor import MemoryProfile
from .memory import procedural, semantic
from .retrieval import catch_up
from .retrieval import rank as retrieval
from .retrieval.legs import fact_vector_leg, graph_signal, vector_leg
from .retrieval.query import rank_query
from .retrieval.warm import keyword_index
from .text import one_line, query_terms

if TYPE_CHECKING:
    from .runtime.services import Services

__all__ = ["SECTION_HEADINGS", "ContextPlan", "build_context_plan", "fit_lines"]

logger = logging.getLogger("elastimem")

SECTION_HEADINGS = {
    "user_facts": "WHAT YOU KNOW ABOUT THE USER",
    "graph_context": "RELATED TOPICS",
    "relevant_past_moments": "RELEVANT PAST MOMENTS (from earlier conversations)",
    "previous_sessions": "PREVIOUS SESSIONS",
    "lessons": "LESSONS FROM PAST MISTAKES",
}
SECTION_ORDER = tuple(SECTION_HEADINGS)
MIN_TOKENS_TO_CUT = 24
PAST_MOMENT_CHARS = 240
PREVIOUS_SESSIONS = 5
# Past moments scoring below this are left out of the prompt: on a small store an off-topic
# question's best exchange would otherwise reach it. Chosen on the tuning part of
# benchmarks/data/small_stores.json (issue 26; figures in benchmarks/README.md): 0.15 drops
# 95.3% of the hits off-topic questions return and keeps 96.4% of the right answers (0.10:
# 90.4% / 97.8%); on LoCoMo's stores of ~300 exchanges it keeps 99.8% of the right hits in
# the top 5.
CONTEXT_MIN_SCORE = 0.15
FACT_CHARS = 500
# Lessons, summaries and graph lines are cut by fitting alone (at a word boundary, and only
# when they do not fit). Before fitting they are flattened up to this many characters per
# budget token: more than any tokenizer puts in a token, so nothing that could fit is lost,
# and fitting never measures a huge text.
CHARS_PER_TOKEN_BOUND = 8
ELLIPSIS = "…"


@dataclass(frozen=True)
class ContextPlan:
    """Prompt sections for one model call, plus how much history the host should keep."""

    sections: dict[str, str]
    rolling_summary: str
    keep_last_n_turns: int
    profile: MemoryProfile
    fact_ids: tuple[int, ...] = ()
    tokens: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        """Each non-empty section under its heading, separated by blank lines.

        The rolling summary is not rendered: it belongs with the host's recent turns.
        """
        blocks = [
            f"{SECTION_HEADINGS[name]}\n{text}"
            for name, text in self.sections.items()
            if text and name in SECTION_HEADINGS
        ]
        return "\n\n".join(blocks)


def fit_lines(lines: list[str], budget: int, est: Callable[[str], int]) -> str:
    """Add lines in order while the joined text fits ``budget`` tokens (see module doc)."""
    return fit_lines_indexed(lines, budget, est)[0]


def fit_lines_indexed(
    lines: list[str], budget: int, est: Callable[[str], int]
) -> tuple[str, list[int]]:
    """``fit_lines`` that also returns the indexes of the lines that made it in (cut or whole)."""
    kept: list[str] = []
    indexes: list[int] = []
    joined = ""
    used = 0
    for index, line in enumerate(lines):
        if used >= budget:
            break  # a full section takes nothing more, however short
        prefix = f"{joined}\n" if kept else ""
        candidate = prefix + line
        if est(candidate) <= budget:
            kept.append(line)
        elif budget - used >= MIN_TOKENS_TO_CUT and (cut := _cut_to_fit(kept, line, budget, est)):
            kept.append(cut)
            candidate = prefix + cut
        else:
            continue
        indexes.append(index)
        joined = candidate
        used = est(joined)
    return joined, indexes


def _cut_to_fit(kept: list[str], line: str, budget: int, est: Callable[[str], int]) -> str:
    """The longest word-boundary prefix of ``line`` + "…" that still fits after ``kept``."""
    words = line.split(" ")

    def fits(text: str) -> bool:
        return est("\n".join([*kept, text])) <= budget

    low, high = 0, len(words) - 1  # high: never the whole line (it did not fit)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(" ".join(words[:mid]) + ELLIPSIS):
            low = mid
        else:
            high = mid - 1
    if low > 0:
        return " ".join(words[:low]) + ELLIPSIS
    # Not even one word fits whole: cut the first word by characters.
    first = words[0]
    low, high = 0, len(first) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(first[:mid] + ELLIPSIS):
            low = mid
        else:
            high = mid - 1
    return first[:low] + ELLIPSIS if low > 0 else ""


def build_context_plan(services: Services, user_input: str, session_id: int | None) -> ContextPlan:
    """§5.8. Never raises: every step is guarded and the plan is always returned."""
    profile = services.profile()
    budgets = profile.budgets
    config = services.config()
    est = services.est
    sections = dict.fromkeys(SECTION_ORDER, "")
    fact_ids: list[int] = []
    state: dict[str, Any] = {"terms": [], "signal": None, "leg": None, "signal_read": False}

    def guarded(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except ClosedError:
            # close() ran on another thread meanwhile: the plan is what is left, not a fault.
            logger.debug("build_context: the %s step met a closed store", name)
        except Exception as exc:
            logger.error("build_context: the %s step failed: %s", name, exc)

    def prepare() -> None:
        if len(user_input.split()) >= config.min_retrieval_query_words:
            state["terms"] = query_terms(user_input)
        if state["terms"]:
            # What was written just before still waits for its vectors: embedded now,
            # before any read of the plan, so the legs find it by meaning.
            catch_up.embed_waiting(services, profile)
            # Started first: the query is embedded on a helper thread while the graph and
            # the past moments' keyword legs are read.
            state["leg"] = vector_leg(services, user_input, profile)
            state["fact_leg"] = fact_vector_leg(services, user_input, profile)

    def signal_in(conn: Any) -> Any:
        """The query's graph signal (None without terms), read once: inside the facts
        step's read when it gets that far (one transaction fewer), else in one of its own."""
        if state["terms"] and not state["signal_read"]:
            state["signal_read"] = True
            state["signal"] = graph_signal(services, user_input, conn)
        return state["signal"]

    def read_facts() -> None:
        state["facts"] = _read_facts(
            services, state["terms"], None, read_signal=signal_in, fact_leg=state.get("fact_leg")
        )

    def user_facts() -> None:
        if state.get("facts") is None:
            return
        lines, ids = state["facts"].lines()
        text, kept = fit_lines_indexed(lines, budgets.facts, est)
        sections["user_facts"] = text
        fact_ids.extend(ids[i] for i in kept)

    def graph_context() -> None:
        signal = signal_in(None)
        if not state["terms"] or profile.graph_hops <= 0 or signal is None:
            return
        budget = min(budgets.graph, budgets.episodic)
        lines = _graph_lines(signal, _longest_line(budget))
        sections["graph_context"] = fit_lines(lines, budget, est)

    def past_moments() -> None:
        if not state["terms"]:
            return
        graph_tokens = est(sections["graph_context"]) if sections["graph_context"] else 0
        budget = max(0, budgets.episodic - graph_tokens)
        signal = signal_in(None)
        hits = _past_hits(services, user_input, profile, session_id, signal, state["leg"])
        lines = [f"- [{h.date}] {one_line(h.text, PAST_MOMENT_CHARS)}" for h in hits]
        # A question asked twice is two chunks of one text: its line once, best rank first.
        lines = list(dict.fromkeys(lines))
        sections["relevant_past_moments"] = fit_lines(lines, budget, est)

    def previous_sessions() -> None:
        with services.db.read() as conn:
            rows = conn.transcript.ended_session_summaries(session_id, PREVIOUS_SESSIONS)
        longest = _longest_line(budgets.sessions)
        newest_first = [
            f"- [{str(r[0])[:10]}] {one_line(r[1] or r[2] or '', longest)}" for r in rows
        ]
        # Fitted newest first, so a tight budget gives up the oldest session rather than
        # last week's; shown oldest first (§5.8).
        fitted = fit_lines(newest_first, budgets.sessions, est)
        sections["previous_sessions"] = "\n".join(reversed(fitted.split("\n")))

    def lessons() -> None:
        if config.lessons_in_prompt <= 0:
            return
        with services.db.read() as conn:
            texts = procedural.top_lessons(conn, config.lessons_in_prompt)
        lines = [f"- {one_line(t, _longest_line(budgets.lessons))}" for t in texts]
        sections["lessons"] = fit_lines(lines, budgets.lessons, est)

    guarded("retrieval", prepare)
    guarded("user_facts", read_facts)
    guarded("graph_context", graph_context)
    guarded("relevant_past_moments", past_moments)
    # Ordered after the past moments, whose vector leg leaves the query vector in the
    # query cache for the facts' vector leg.
    guarded("user_facts", user_facts)
    guarded("previous_sessions", previous_sessions)
    guarded("lessons", lessons)

    def touch() -> None:
        if fact_ids and not services.db.read_only:
            with services.db.atomic() as conn:
                semantic.touch(conn, fact_ids)

    guarded("touch", touch)
    rolling = ""

    def digest() -> None:
        nonlocal rolling
        current_id, items = services.current_digest()
        if items:
            rolling = "\n".join(items)
        elif current_id is not None:
            with services.db.read() as conn:
                rolling = conn.transcript.rolling_summary(current_id) or ""

    guarded("rolling_summary", digest)
    tokens = {name: (est(text) if text else 0) for name, text in sections.items()}
    return ContextPlan(
        sections=sections,
        rolling_summary=rolling,
        keep_last_n_turns=profile.keep_last_n_turns,
        profile=profile,
        fact_ids=tuple(fact_ids),
        tokens=tokens,
    )


def _fact_lines(
    services: Services,
    terms: list[str],
    signal: Any,
    *,
    read_signal: Callable[[Any], Any] | None = None,
    fact_leg: retrieval.FactVectorLeg | None = None,
) -> tuple[list[str], list[int]]:
    """Profile facts in ``facts()`` order, then notes by their fact total (§5.8 step 2),
    relevance fused from the keyword leg and ``fact_leg`` (the facts' vector leg) as in
    recall.

    ``read_signal``: gives the graph signal, read through this step's connection (it then
    stands for ``signal``)."""
    return _read_facts(services, terms, signal, read_signal=read_signal, fact_leg=fact_leg).lines()


@dataclass
class _FactsRead:
    """What the facts step read in its snapshot; ``lines`` finishes the facts' vector leg
    (build_context calls it after the past moments, whose vector leg leaves the query
    vector in the query cache) and orders the notes."""

    live: list[tuple[int, str, str, str, float, str]]
    keyword: dict[int, float]
    finish: retrieval.FactVectorFinish | None
    signal: Any
    half_life: float

    def lines(self) -> tuple[list[str], list[int]]:
        weights = retrieval.DEFAULT_WEIGHTS
        found = retrieval.finish_fact_vector_leg(self.finish)
        relevance, _vector = retrieval.fuse_fact_legs(self.keyword, found, weights)
        live = self.live
        profile_facts = [row for row in live if row[3] == "profile"]
        notes = [row for row in live if row[3] != "profile"]
        order = _note_order(notes, relevance, self.signal, self.half_life, weights)
        ordered = [(row[0], row[1], row[2]) for row in profile_facts]
        ordered += [(notes[i][0], notes[i][1], notes[i][2]) for i in order]
        lines = [_fact_line(key, value) for _, key, value in ordered]
        return lines, [fact_id for fact_id, _, _ in ordered]


def _read_facts(
    services: Services,
    terms: list[str],
    signal: Any,
    *,
    read_signal: Callable[[Any], Any] | None = None,
    fact_leg: retrieval.FactVectorLeg | None = None,
) -> _FactsRead:
    """The live facts, their keyword relevance and the started facts' vector leg, in one
    read (with the graph signal, through ``read_signal``)."""
    half_life = services.config().fact_recency_half_life_days
    keyword: dict[int, float] = {}
    finish: retrieval.FactVectorFinish | None = None
    with services.db.read() as conn:
        live = services.live_facts.rows(conn)
        if terms:
            indexes = keyword_index(services, services.profile())
            keyword = retrieval.fact_keyword_leg(
                conn,
                terms,
                retrieval.Filters(),
                services.db.fts_enabled,
                index=indexes.facts if indexes is not None else None,
                live_ids=[row[0] for row in live],
            )
            finish = retrieval.start_fact_vector_leg(conn, retrieval.Filters(), fact_leg)
        if read_signal is not None:
            signal = read_signal(conn)
    return _FactsRead(live, keyword, finish, signal, half_life)


def _note_order(
    notes: list[tuple[int, str, str, str, float, str]],
    relevance: dict[int, float],
    signal: Any,
    half_life: float,
    weights: retrieval.Weights,
) -> list[int]:
    """Positions of ``notes`` by descending fact total (§5.6), ties in live order; the
    totals computed with numpy, since every live fact is scored on every turn."""
    if not notes:
        return []
    count = len(notes)
    now_seconds = utcnow().timestamp()
    importance = np.fromiter((row[4] for row in notes), dtype=np.float64, count=count)
    born = np.fromiter(
        (_epoch_or(row[5], now_seconds) for row in notes), dtype=np.float64, count=count
    )
    age_days = np.maximum(0.0, (now_seconds - born) / SECONDS_PER_DAY)
    totals = (
        np.fromiter((relevance.get(row[0], 0.0) for row in notes), dtype=np.float64, count=count)
        + weights.imp * (importance - 0.5)
        + weights.rec * np.power(0.5, age_days / half_life)
    )
    if signal is not None:
        totals += weights.graph * np.fromiter(
            (_graph_score(signal, row[1], row[2]) for row in notes), dtype=np.float64, count=count
        )
    return np.lexsort((np.arange(count), -totals)).tolist()


def _epoch_or(ts: str, default: float) -> float:
    """A timestamp's epoch seconds; ``default`` (age 0) when missing or unreadable."""
    seconds = epoch_seconds(ts) if ts else None
    return default if seconds is None else seconds


def _graph_score(signal: Any, key: str, value: str) -> float:
    try:
        return float(signal.fact_score(key, value)[0])
    except Exception:
        return 0.0


@functools.lru_cache(maxsize=4096)
def _fact_line(key: str, value: str) -> str:
    """One rendered fact; cached, since the same facts are rendered turn after turn."""
    return f"- {key}: {one_line(value, FACT_CHARS)}"


def _longest_line(budget: int) -> int:
    """Characters kept before fitting a line into ``budget`` (see CHARS_PER_TOKEN_BOUND)."""
    return CHARS_PER_TOKEN_BOUND * (max(budget, 0) + 1)


def _graph_lines(signal: Any, longest: int) -> list[str]:
    """``- <label>: <names>`` per cluster label, then one line of unlabelled names."""
    by_label: dict[str, set[str]] = {}
    unlabelled: set[str] = set()
    for name, label in signal.context_nodes():
        if label:
            by_label.setdefault(label, set()).add(name)
        else:
            unlabelled.add(name)
    lines = [
        one_line(f"- {label}: {', '.join(sorted(names))}", longest)
        for label, names in sorted(by_label.items())
    ]
    if unlabelled:
        lines.append(one_line("- " + ", ".join(sorted(unlabelled)), longest))
    return lines


def _past_hits(
    services: Services,
    text: str,
    profile: MemoryProfile,
    session_id: int | None,
    signal: Any,
    leg: Any,
) -> list[Any]:
    """The past moments: the one query path over chunks outside the current session, with
    the vector leg started and the graph signal read earlier in the plan."""
    ranking, _signal = rank_query(
        services,
        text,
        k=profile.episodic_top_k,
        kinds=frozenset({"chunk"}),
        filters=retrieval.Filters(exclude_session=session_id),
        profile=profile,
        signal=signal,
        vector_leg=leg,
    )
    hits = ranking.hits if ranking is not None else []
    return [hit for hit in hits if hit.score >= CONTEXT_MIN_SCORE]
