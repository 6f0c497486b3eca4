"""Chunks said within the time a question names join the candidates (SPEC §5.6, see ``rank``).

A question naming a time ("What did Nate share in November 2022?") boosts the candidates
said then (``temporal.DATE_BONUS``), but only those a leg found: an exchange of that month
whose words and vector are not among the store's best 50 for the whole question never
competes, though among the few said then it may be the best match. So the vector leg runs a
second time, restricted to the span (with ``temporal.DATE_SLACK_DAYS`` around it, and the
caller's own filters), for its best ``SPAN_POOL_N``; those no leg found join with a vector
score of ``SPAN_POOL_SHARE`` times their min-max score among them (floored at the N+1th,
as the vector leg is over the store), and then gain the date bonus like any candidate said
then. Questions that name no time, and rankings without a vector leg, are unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar, Protocol, TypeVar

from ..storage.tx import Tx
from . import temporal


class _Filters(Protocol):
    """What the span narrows (``rank.Filters``, a frozen dataclass)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def since(self) -> str | None: ...

    @property
    def until(self) -> str | None: ...


Filters = TypeVar("Filters", bound=_Filters)
# rank.VectorLeg, for any filters type: (conn, filters, n) -> its finisher.
VectorLeg = Callable[[Tx, Filters, int], Callable[[], list[tuple[int, float]] | None]]

logger = logging.getLogger("elastimem")

# Tuned 2026-12-02 on the LoCoMo dev split only, through the API (benchmarks/locomo.py,
# hybrid, exchange level R@5 / R@10 overall, then cat 1 multi-hop, 2 temporal, 3 open-domain,
# 4 single-hop; 760 questions, 96 evidence turns of questions naming a time, 10 of them in
# no leg's candidates before, 8 of those said within the span):
#
#   hybrid                  all              cat1       cat2       cat3       cat4
#   none (main)             0.7640 / 0.8304  .405/.520  .880/.925  .415/.462  .880/.939
#   N 5, share 0.5          0.7640 / 0.8304  (no change)
#   N 10, share 0.75        0.7646 / 0.8310  .405/.520  .883/.921  .415/.462  .880/.942
#   N 10, share 1.0         0.7646 / 0.8323  .405/.520  .883/.928  .415/.462  .880/.942
#   N 20, share 1.0         0.7646 / 0.8330  .405/.520  .883/.931  .415/.462  .880/.942 <-
#   N 30, share 1.0         0.7646 / 0.8330  (the same as N 20)
# Keyword only: unchanged (no vector leg). A small gain (about two questions' evidence), but
# no category lower and only questions naming a time are touched. Share 1.0: the span's best
# counts as much as the store's best vector match (it competes through the date bonus).
# Session level (top distinct sessions of recall(k=50)): 0.879 / 0.945 -> 0.881 / 0.946.
# Cost, questions naming a time only (in-process, interleaved per query, 200 queries x 3,
# the 10k store of benchmarks/latency.py, " in March 2024" appended, load ~5-7): running the
# leg again cost +3.4 to +4.2 ms of p50 (a second scan of every row; N 5 cost the same as
# N 20), the span's decoded codes (VectorHits.within, the same LoCoMo figures) +1.1 ms
# (15.98 -> 17.10; the span held a large share of that store). Questions naming no time:
# 12.08 / 11.79 and 15.03 / 14.66 ms without / with.
SPAN_POOL_N = 20
SPAN_POOL_SHARE = 1.0
# Days around the span searched: as far as temporal.closeness gives a bonus.
_SLACK = timedelta(days=temporal.DATE_SLACK_DAYS)


def span_filters(filters: Filters, scope: temporal.TimeScope) -> Filters:
    """``filters`` narrowed to the span and its slack (``until`` is exclusive)."""
    since = (scope.start - _SLACK + timedelta(days=1)).isoformat()
    until = (scope.end + _SLACK).isoformat()
    if filters.since is not None and filters.since > since:
        since = filters.since
    if filters.until is not None and filters.until < until:
        until = filters.until
    return replace(filters, since=since, until=until)


def span_candidates(
    conn: Tx,
    filters: Filters,
    leg: VectorLeg[Filters] | None,
    scope: temporal.TimeScope | None,
    found: list[tuple[int, float]] | None = None,
) -> dict[int, float]:
    """The vector scores of the best ``SPAN_POOL_N`` chunks said within ``scope`` (see the
    module docstring); empty without a scope or a vector leg, or when the search fails.
    ``found``, the vector leg's answer: when it can search the span itself
    (``VectorHits.within``: the decoded codes of the span's rows), the leg is not run again
    (a second scan of every row, ~3.5 ms at 10k exchanges)."""
    if scope is None or leg is None or SPAN_POOL_N <= 0:
        return {}
    narrowed = span_filters(filters, scope)
    if (
        narrowed.since is not None
        and narrowed.until is not None
        and narrowed.since >= narrowed.until
    ):
        return {}  # the caller's own filters leave nothing of the span
    within = getattr(found, "within", None)  # VectorHits: the span's resident rows alone
    try:
        if within is not None:
            found = within(narrowed, SPAN_POOL_N + 1)
        else:
            with conn.guarded():
                found = leg(conn, narrowed, SPAN_POOL_N + 1)()
    except Exception as exc:  # the extra search failing costs only its candidates
        logger.warning("the date-span vector search failed; ranking without it: %s", exc)
        return {}
    if not found:
        return {}
    best = found[0][1]
    floor = found[SPAN_POOL_N][1] if len(found) > SPAN_POOL_N else min(0.0, found[-1][1])
    top = found[:SPAN_POOL_N]
    if best <= floor:
        return {cid: SPAN_POOL_SHARE for cid, _cosine in top}
    return {cid: SPAN_POOL_SHARE * (c - floor) / (best - floor) for cid, c in top}
