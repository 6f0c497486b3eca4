"""Two-level int8 codes of the resident vectors, and the bounds that keep search exact.

The exact scan over a float32 matrix is bound by memory bandwidth: 384-dim rows are 1.5 kB
each, so 100k rows cost ~10 ms a query on both cores of the 2-core machine. The vector
index therefore holds each unit vector ``v`` as two int8 codes instead (half the bytes of
float32 in total, a quarter for the scan):

* ``coarse = round(v / s1)`` with ``s1 = max|v| / 127``, and
* ``fine = round(e1 / s2)``, the code of the remainder ``e1 = v - s1 · coarse``, with
  ``s2 = max|e1| / 127``,

together with the length of what each level leaves out (``r1 = |e1|``, ``r2 = |v - s1 ·
coarse - s2 · fine|``), rounded up. A query ``x`` is coded like a coarse row (``x = u · q +
ex``). Then for every row, by Cauchy–Schwarz:

    |v·x - s1·u·(coarse·q)| <= (1 + r1)·|ex| + r1·|x|         (the coarse bound)
    |v·x - (s1·coarse + s2·fine)·x| <= r2·|x|                  (the fine bound)

``coarse·q`` is an exact integer dot product (numkong's int8 kernel; 10k rows ~0.3 ms,
100k ~3.4 ms on both cores, against ~0.8 / ~10 ms for float32). Search keeps every row the
coarse bound cannot rule out of the top n, narrows those with the fine bound (a few
hundred rows, in float64), and re-scores the few left exactly from the float32 BLOBs in
SQLite, the source of truth (or the copies exact_cache.py keeps of them). Rows sure to be
out are never re-scored, and no row that could be in is dropped, so the answer is the
exact top n of the stored vectors.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np

logger = logging.getLogger("elastimem")

_numkong: Any
try:  # numkong ships wheels for every common platform; without it numpy gives the same sums
    import numkong as _numkong
except Exception:  # pragma: no cover - exercised by forcing _numkong to None in a test
    _numkong = None

# Relative slack added to every computed error length and to |x|: covers the float64
# rounding of the bounds themselves (~1e-16 relative) many times over.
_SLACK = 1e-6
# float32 sums of int8 products stay exact while every partial sum is below 2**24; a
# 384-dim row reaches at most 384 · 127² ≈ 6.2M. Wider rows take the float64 path.
_FLOAT32_EXACT_DIM = (1 << 24) // (127 * 127)
_FALLBACK_BLOCK_ROWS = 4096


class Codes(NamedTuple):
    """The two-level codes of a block of rows (see the module doc)."""

    coarse: np.ndarray  # int8 (rows, dim)
    fine: np.ndarray  # int8 (rows, dim)
    coarse_scale: np.ndarray  # float32 (rows,)
    fine_scale: np.ndarray  # float32 (rows,)
    coarse_error: np.ndarray  # float32 (rows,): |v - s1·coarse|, rounded up
    fine_error: np.ndarray  # float32 (rows,): |v - s1·coarse - s2·fine|, rounded up


class QueryCode(NamedTuple):
    """A query coded like a coarse row, with what the code leaves out."""

    codes: np.ndarray  # int8 (1, dim)
    scale: float
    error: float  # |x - u·q|, rounded up
    norm: float  # |x|, rounded up
    vector: np.ndarray  # the float64 query, for the fine pass


def _code(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 codes, float32 scales and the float64 remainder of each row of ``values``."""
    peak = np.abs(values).max(axis=1) if values.shape[1] else np.zeros(values.shape[0])
    scale = (peak / 127.0).astype(np.float32)
    scale[scale == 0] = 1.0  # an all-zero row (a zero remainder): codes 0, remainder 0
    codes = np.clip(np.rint(values / scale[:, None].astype(np.float64)), -127, 127).astype(np.int8)
    remainder = values - scale[:, None].astype(np.float64) * codes
    return codes, scale, remainder


def _round_up(lengths: np.ndarray) -> np.ndarray:
    """float64 lengths as float32 values no smaller than them."""
    return np.nextafter((lengths * (1 + _SLACK)).astype(np.float32), np.float32(np.inf))


def encode(matrix: np.ndarray) -> Codes:
    """The codes of unit float32 rows."""
    values = np.asarray(matrix, dtype=np.float64)
    coarse, coarse_scale, first = _code(values)
    fine, fine_scale, second = _code(first)
    return Codes(
        coarse,
        fine,
        coarse_scale,
        fine_scale,
        _round_up(np.linalg.norm(first, axis=1)),
        _round_up(np.linalg.norm(second, axis=1)),
    )


def encode_query(query: np.ndarray) -> QueryCode:
    """The query's coarse code (one row of :func:`encode`'s first level, done inline: it
    runs on every search)."""
    vector = np.asarray(query, dtype=np.float64).reshape(-1)
    scale = np.float32(float(np.abs(vector).max(initial=0.0)) / 127.0)
    if scale == 0:
        scale = np.float32(1.0)
    codes = np.clip(np.rint(vector / float(scale)), -127, 127)
    remainder = vector - float(scale) * codes
    return QueryCode(
        codes.astype(np.int8).reshape(1, -1),
        float(scale),
        _round_up_one(float(np.sqrt(np.einsum("i,i", remainder, remainder)))),
        _round_up_one(float(np.sqrt(np.einsum("i,i", vector, vector)))),
        vector,
    )


def _round_up_one(length: float) -> float:
    return float(np.nextafter(length * (1 + _SLACK), np.inf))


def coarse_scores(coarse: np.ndarray, coarse_scale: np.ndarray, query: QueryCode) -> np.ndarray:
    """``s1 · (coarse · q)`` of every row, float64 (the query scale ``u`` is left out: it
    is the same for every row, see :func:`coarse_margin`)."""
    return integer_dots(coarse, query.codes) * coarse_scale


def coarse_margin(largest_coarse_error: float, query: QueryCode) -> float:
    """How far below the n-th best :func:`coarse_scores` a row of the top n can score.

    With ``B`` the largest coarse bound, a top-n row scores at least ``n-th best - 2B``
    (in units of ``u``, like the scores)."""
    bound = (1 + _SLACK + largest_coarse_error) * query.error + largest_coarse_error * query.norm
    return 2.0 * bound * (1 + _SLACK) / query.scale + 1e-12


def fine_scores(codes: Codes, rows: np.ndarray, query: QueryCode) -> np.ndarray:
    """``(s1·coarse + s2·fine) · x`` of the given rows, float64 (as ``s1·(coarse·x) +
    s2·(fine·x)``: two small products instead of scaling every element). ``einsum``, not
    ``@``: BLAS would wake its spinning threads (see scan.py)."""
    coarse = np.einsum("ij,j->i", codes.coarse[rows].astype(np.float64), query.vector)
    fine = np.einsum("ij,j->i", codes.fine[rows].astype(np.float64), query.vector)
    return coarse * codes.coarse_scale[rows] + fine * codes.fine_scale[rows]


def fine_margin(largest_fine_error: float, query: QueryCode) -> float:
    """How far below the n-th best :func:`fine_scores` a row of the top n can score."""
    return 2.0 * largest_fine_error * query.norm * (1 + _SLACK) + 1e-10


def integer_dots(codes: np.ndarray, query_codes: np.ndarray) -> np.ndarray:
    """The exact integer dot product of every int8 row with the int8 query, as float64."""
    if codes.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    if _numkong is not None:
        out: Any = _numkong.cdist(query_codes, codes, metric="dot")
        return np.asarray(out, dtype=np.float64).reshape(-1)
    return _numpy_dots(codes, query_codes[0])


def _numpy_dots(codes: np.ndarray, query_codes: np.ndarray) -> np.ndarray:
    """Slower numpy path with the same exact sums (block by block, in float32 while every
    partial sum stays an exactly representable integer)."""
    wide = codes.shape[1] > _FLOAT32_EXACT_DIM
    dtype = np.float64 if wide else np.float32
    query = query_codes.astype(dtype)
    out = np.empty(codes.shape[0], dtype=np.float64)
    for start in range(0, codes.shape[0], _FALLBACK_BLOCK_ROWS):
        block = codes[start : start + _FALLBACK_BLOCK_ROWS].astype(dtype)
        out[start : start + block.shape[0]] = np.einsum("ij,j->i", block, query)
    return out


def decode_coarse(codes: Codes, rows: np.ndarray) -> np.ndarray:
    """The given rows as float32 vectors from their coarse codes, ``s1·coarse``: within
    ``coarse_error`` (~0.01) of the stored ones, close enough for the feedback term of
    retrieval.py (the fine level left LoCoMo's figures as they were and cost another ~30%)."""
    return codes.coarse[rows] * codes.coarse_scale[rows][:, None]  # float32


def empty_codes(dim: int) -> Codes:
    return Codes(
        np.zeros((0, dim), dtype=np.int8),
        np.zeros((0, dim), dtype=np.int8),
        np.zeros(0, dtype=np.float32),
        np.zeros(0, dtype=np.float32),
        np.zeros(0, dtype=np.float32),
        np.zeros(0, dtype=np.float32),
    )
