"""Vector scans over the resident rows, on more than one core.

A scan over every resident row is bound by memory bandwidth (one core here reads about
9 GB/s), so :class:`RowScorer` cuts the rows into slices, one per core, scores each and
picks its candidates on a helper thread, and does the last slice on the calling thread.
What a slice is scored with is the caller's: the vector index passes the int8 kernel of
``quantized.py``; the LITE stream scores float32 blocks with :func:`row_scores`.
:meth:`RowScorer.candidates` ``beside`` hands a scan that would leave a core idle to helpers
and returns at once, so recall runs its keyword legs on the spare core meanwhile.

Why not BLAS: ``matrix @ query`` runs OpenBLAS's own threads, which keep spinning after
each call and take cores from the host's model while it generates; numpy's ``einsum``
loop and numkong's kernels are single-threaded and release the GIL, so plain threads split
them. The helpers block on a queue between calls (no spinning) and end after
``IDLE_SECONDS`` unused.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable

import numpy as np

# Below this many rows one core scans alone. The int8 scan costs ~0.05 ms per 1,000 rows,
# so at 10k the handoff (~50 µs) and the rows the fine pass then gathers from the other
# core's cache cost more than the split saves: measured in VectorIndex.search over the
# 10k benchmark store, 1.80 ms on one thread against 2.13 ms on two; from 20k on, two
# threads win (20k 0.99 -> 0.80 ms, 50k 2.73 -> 1.76 ms for the scan alone).
PARALLEL_MIN_ROWS = 16_384
MAX_THREADS = 4
IDLE_SECONDS = 30.0


def row_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """float32 dot product of every row with ``query`` on this thread.

    ``einsum`` runs numpy's own single-threaded SIMD loop rather than BLAS (see the
    module doc). Measured on the 2-core machine (384 dims, busy): 10k rows 2.0 ms vs
    5.7 ms for ``matrix @ query``; 100k rows 18.7 vs 29.8 ms.
    """
    return np.einsum("ij,j->i", matrix, query)


def candidates(scores: np.ndarray, mask: np.ndarray | None, n: int, margin: float) -> np.ndarray:
    """Row positions that surely include the exact top ``n`` among ``mask``: every row
    within ``margin`` (the float32 rounding bound) of the ``n``-th best coarse score."""
    if mask is None:
        valid_count = scores.shape[0]
    else:
        valid_count = int(np.count_nonzero(mask))
        scores = np.where(mask, scores, -np.inf)
    if valid_count == 0 or n <= 0:
        return np.zeros(0, dtype=np.int64)
    if valid_count <= n:
        return np.flatnonzero(mask) if mask is not None else np.arange(scores.shape[0])
    cut = scores.shape[0] - n
    nth = scores[np.argpartition(scores, cut)[cut]]
    return np.flatnonzero(scores >= nth - margin)


class _Task:
    """One slice's work handed to a helper, and its outcome."""

    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], np.ndarray]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # handed to the scanning thread
            self.error = exc
        finally:
            self.done.set()


def _results(tasks: list[_Task]) -> list[np.ndarray]:
    """Each task's result once it is done, in order; a task's exception is raised here."""
    results: list[np.ndarray] = []
    for task in tasks:
        task.done.wait()
        if task.error is not None:
            raise task.error
        assert task.result is not None
        results.append(task.result)
    return results


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class RowScorer:
    """Coarse scores and candidates split over up to ``threads`` cores; one scan at a time
    per scorer (the vector index calls it under its own lock)."""

    def __init__(self, threads: int | None = None) -> None:
        if threads is None:
            threads = min(MAX_THREADS, os.cpu_count() or 1)
        self.threads = max(1, threads)
        self._guard = threading.Lock()
        self._inboxes: list[queue.SimpleQueue[_Task | None]] = []
        self._closed = False
        self._pid = os.getpid()

    def scores(self, matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
        """:func:`row_scores` of every row, the slices scored in parallel."""
        bounds = self._bounds(matrix.shape[0])
        parts = self._run(
            [
                functools.partial(row_scores, matrix[start:end], query)
                for start, end in zip(bounds[:-1], bounds[1:])
            ]
        )
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def candidates(
        self,
        rows: int,
        score: Callable[[int, int], np.ndarray],
        mask: np.ndarray | None,
        n: int,
        margin: float,
        *,
        beside: bool = False,
    ) -> Callable[[], np.ndarray]:
        """:func:`candidates` over rows ``0..rows``, each slice choosing its own; the
        returned callable gives them (waiting for the helpers if need be).

        ``score(start, end)`` gives the scores of rows ``start..end``. A slice's ``n``-th
        best is never above the whole set's, so each slice keeps a superset of its share of
        the rows the whole set would keep: the union still holds the exact top ``n`` (the
        caller re-scores it exactly).

        With ``beside``, a scan that would leave a core idle is handed to helpers whole and
        this returns at once, so the caller works meanwhile (recall runs the keyword legs
        while the vectors are scanned). When the scan takes every core anyway (one core, or
        rows enough for a slice per core) it runs here and now: handing all of it to
        helpers while the caller works made a 100k-row recall slower (12.6 against 11.4 ms
        p50, A/B in one process), and a 10k-row one faster (4.9 against 5.7 ms).
        """
        work = self._slices(rows, score, mask, n, margin)
        if not beside or self._closed or len(work) >= self.threads:
            return functools.partial(_joined, self._run(work))
        tasks = [_Task(fn) for fn in work]
        self._hand_out(tasks)
        return lambda: _joined(_results(tasks))

    def _slices(
        self,
        rows: int,
        score: Callable[[int, int], np.ndarray],
        mask: np.ndarray | None,
        n: int,
        margin: float,
    ) -> list[Callable[[], np.ndarray]]:
        def slice_candidates(start: int, end: int) -> np.ndarray:
            part_mask = None if mask is None else mask[start:end]
            return candidates(score(start, end), part_mask, n, margin) + start

        bounds = self._bounds(rows)
        return [
            functools.partial(slice_candidates, start, end)
            for start, end in zip(bounds[:-1], bounds[1:])
        ]

    def close(self) -> None:
        """End the helper threads; later scans run on the calling thread alone."""
        with self._guard:
            self._closed = True
            inboxes, self._inboxes = self._inboxes, []
        for inbox in inboxes:
            inbox.put(None)

    def _bounds(self, rows: int) -> list[int]:
        parts = min(self.threads, rows // (PARALLEL_MIN_ROWS // 2))
        if parts <= 1 or self._closed:
            return [0, rows]
        return [rows * i // parts for i in range(parts + 1)]

    def _run(self, work: list[Callable[[], np.ndarray]]) -> list[np.ndarray]:
        """Every callable's result, in order: all but the last on helpers, the last here."""
        handed = [_Task(fn) for fn in work[:-1]]
        self._hand_out(handed)
        last = work[-1]()
        return [*_results(handed), last]

    def _hand_out(self, tasks: list[_Task]) -> None:
        """One task to each helper, starting helpers as needed. Under the guard, so a
        helper cannot retire (see _serve) between being picked and getting its task."""
        if not tasks:
            return
        with self._guard:
            if self._pid != os.getpid():
                # A forked child inherits the list but not the threads: start its own.
                self._inboxes, self._pid = [], os.getpid()
            while len(self._inboxes) < len(tasks):
                inbox: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
                threading.Thread(
                    target=self._serve, args=(inbox,), name="elastimem-scan", daemon=True
                ).start()
                self._inboxes.append(inbox)
            for inbox, task in zip(self._inboxes, tasks):
                inbox.put(task)

    def _serve(self, inbox: queue.SimpleQueue[_Task | None]) -> None:
        while True:
            try:
                task = inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._guard:
                    if inbox.empty() and inbox in self._inboxes:
                        self._inboxes.remove(inbox)
                        return
                continue
            if task is None:
                return
            task.run()
