"""Row scoring split over helper threads (scan.RowScorer), with real threads."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from elastimem.index import scan
from elastimem.index.scan import PARALLEL_MIN_ROWS, RowScorer, candidates, row_scores
from tests.conftest import wait_until


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "elastimem-scan"]


@pytest.mark.parametrize("rows", [0, 1, PARALLEL_MIN_ROWS - 1, PARALLEL_MIN_ROWS, 25_001])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_scores_equal_one_thread_scores(rows: int, threads: int) -> None:
    rng = np.random.default_rng(rows + threads)
    matrix = rng.standard_normal((rows, 48)).astype(np.float32)
    query = rng.standard_normal(48).astype(np.float32)
    scorer = RowScorer(threads)
    try:
        got = scorer.scores(matrix, query)
        # Every row is scored exactly once, by the same kernel (values agree to rounding).
        np.testing.assert_allclose(got, row_scores(matrix, query), rtol=1e-6, atol=1e-6)
        assert got.shape == (rows,) and got.dtype == np.float32
    finally:
        scorer.close()


def test_large_scans_use_helper_threads_and_reuse_them() -> None:
    matrix = np.ones((3 * PARALLEL_MIN_ROWS, 8), dtype=np.float32)
    # A scorer closed by an earlier test ends its helper a moment later: let it go first, or
    # it is counted here and then missing.
    wait_until(lambda: not _helpers())
    scorer = RowScorer(2)
    before = len(_helpers())
    try:
        for _ in range(20):
            assert float(scorer.scores(matrix, np.ones(8, dtype=np.float32)).sum()) == 8.0 * len(
                matrix
            )
        assert len(_helpers()) == before + 1
    finally:
        scorer.close()
    assert wait_until(lambda: len(_helpers()) == before)
    # After close, scans still work, on the calling thread.
    assert scorer.scores(matrix, np.ones(8, dtype=np.float32)).shape == (len(matrix),)
    assert len(_helpers()) == before


def test_a_helper_error_reaches_the_caller() -> None:
    scorer = RowScorer(2)
    matrix = np.ones((2 * PARALLEL_MIN_ROWS, 4), dtype=np.float32)
    try:
        with pytest.raises(ValueError):
            scorer.scores(matrix, np.ones(5, dtype=np.float32))  # wrong width
        assert scorer.scores(matrix, np.ones(4, dtype=np.float32))[0] == 4.0
    finally:
        scorer.close()


def test_idle_helpers_retire_and_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "IDLE_SECONDS", 0.05)
    matrix = np.ones((2 * PARALLEL_MIN_ROWS, 4), dtype=np.float32)
    query = np.ones(4, dtype=np.float32)
    scorer = RowScorer(2)
    before = len(_helpers())
    try:
        scorer.scores(matrix, query)
        assert wait_until(lambda: len(_helpers()) == before)
        for _ in range(50):  # scans racing a retiring helper never hang
            assert scorer.scores(matrix, query)[-1] == 4.0
            time.sleep(0.001)
    finally:
        scorer.close()


@pytest.mark.parametrize("rows", [10, PARALLEL_MIN_ROWS, 30_001])
@pytest.mark.parametrize("masked", [False, True])
def test_split_candidates_hold_the_exact_top_n(rows: int, masked: bool) -> None:
    rng = np.random.default_rng(rows)
    matrix = rng.standard_normal((rows, 32)).astype(np.float32)
    # Exact duplicates make ties at the cut, the case the margin is there for.
    matrix[rows // 2 :: 7] = matrix[0]
    query = rng.standard_normal(32).astype(np.float32)
    mask = rng.random(rows) < 0.6 if masked else None
    exact = matrix.astype(np.float64) @ query.astype(np.float64)
    if mask is not None:
        exact[~mask] = -np.inf
    n = 50
    top = set(np.argsort(-exact, kind="stable")[: min(n, rows)].tolist())
    if mask is not None:
        top = {i for i in top if mask[i]}
    margin = 1e-4
    scorer = RowScorer(3)
    try:
        split = scorer.candidates(
            rows, lambda start, end: row_scores(matrix[start:end], query), mask, n, margin
        )()
    finally:
        scorer.close()
    whole = candidates(row_scores(matrix, query), mask, n, margin)
    assert top <= set(split.tolist())
    assert set(whole.tolist()) <= set(split.tolist())  # each slice keeps a superset
    assert len(set(split.tolist())) == len(split)
    if mask is not None:
        assert mask[split].all()
    assert len(split) <= 3 * n + rows // 7 + 3  # a few per slice, plus the tied copies


@pytest.mark.parametrize(
    ("rows", "threads", "overlapped"),
    [
        (1_000, 2, True),  # one slice: a helper scans while the caller works
        (PARALLEL_MIN_ROWS + 1_000, 3, True),  # two slices, three cores: still one spare
        (PARALLEL_MIN_ROWS + 1_000, 2, False),  # a slice per core: nothing left to overlap
        (1_000, 1, False),  # one core
    ],
)
def test_a_started_scan_runs_beside_the_caller_only_when_a_core_is_spare(
    rows: int, threads: int, overlapped: bool
) -> None:
    rng = np.random.default_rng(rows)
    matrix = rng.standard_normal((rows, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)
    scanned_on: set[str] = set()
    released = threading.Event()

    def score(start: int, end: int) -> np.ndarray:
        scanned_on.add(threading.current_thread().name)
        if overlapped:
            assert released.wait(10)  # still scanning after start_candidates returned
        return row_scores(matrix[start:end], query)

    scorer = RowScorer(threads)
    try:
        wait = scorer.candidates(rows, score, None, 10, 1e-4, beside=True)
        released.set()
        got = wait()
    finally:
        scorer.close()
    whole = candidates(row_scores(matrix, query), None, 10, 1e-4)
    assert set(whole.tolist()) <= set(got.tolist())
    if overlapped:
        assert scanned_on == {"elastimem-scan"}
    else:
        assert threading.main_thread().name in scanned_on


def test_a_started_scan_raises_its_helper_error_when_waited_for() -> None:
    scorer = RowScorer(2)

    def broken(start: int, end: int) -> np.ndarray:
        raise ValueError("bad slice")

    try:
        wait = scorer.candidates(100, broken, None, 5, 0.0, beside=True)
        with pytest.raises(ValueError, match="bad slice"):
            wait()
    finally:
        scorer.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_scans_with_threads_of_its_own() -> None:
    """The child of a fork inherits the helper list but not the threads: handing them work
    would wait forever. It starts its own instead (a real fork, a real child process)."""
    matrix = np.ones((2 * PARALLEL_MIN_ROWS, 4), dtype=np.float32)
    query = np.ones(4, dtype=np.float32)
    scorer = RowScorer(2)
    try:
        scorer.scores(matrix, query)  # the parent's helper exists now
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if the scan finishes
            signal.alarm(10)
            ok = float(scorer.scores(matrix, query).sum()) == 4.0 * len(matrix)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        scorer.close()
