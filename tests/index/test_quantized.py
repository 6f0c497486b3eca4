"""The int8 codes of the resident vectors and the bounds that keep search exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from elastimem.index import quantized


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows.astype(np.float64), axis=1, keepdims=True)
    return (rows / norms).astype(np.float32)


# Rows a sentence embedder never gives but a host embedder may: one-hot, one huge
# component among tiny ones, exact and 1-ulp duplicates, denormal-sized entries.
_component = st.one_of(
    st.floats(-1.0, 1.0, width=32),
    st.sampled_from([0.0, 1e-30, -1e-30, 1e-8, 1.0, -1.0, 3.4e38, -3.4e38]),
)


@st.composite
def unit_matrices(draw: st.DrawFn) -> np.ndarray:
    dim = draw(st.integers(1, 40))
    count = draw(st.integers(1, 30))
    raw = draw(hnp.arrays(np.float64, (count, dim), elements=_component))
    raw[np.all(raw == 0, axis=1), 0] = 1.0  # stored vectors are never zero
    rows = _unit(raw / np.abs(raw).max(axis=1, keepdims=True))
    if count > 1 and draw(st.booleans()):
        rows[1] = np.nextafter(rows[0], np.float32(2))  # a near-tie
    return rows


@settings(max_examples=300, deadline=None)
@given(matrix=unit_matrices(), query_seed=st.integers(0, 2**32 - 1), own=st.booleans())
def test_both_bounds_hold_for_every_row(matrix: np.ndarray, query_seed: int, own: bool) -> None:
    rng = np.random.default_rng(query_seed)
    query = matrix[0] if own else _unit(rng.standard_normal((1, matrix.shape[1])))[0]
    codes = quantized.encode(matrix)
    coded = quantized.encode_query(query)
    exact = matrix.astype(np.float64) @ query.astype(np.float64)

    coarse = quantized.coarse_scores(codes.coarse, codes.coarse_scale, coded) * coded.scale
    for row in range(matrix.shape[0]):
        # Half the margin is the bound of one row with the largest coarse error.
        bound = quantized.coarse_margin(float(codes.coarse_error[row]), coded) / 2 * coded.scale
        assert abs(exact[row] - coarse[row]) <= bound

    rows = np.arange(matrix.shape[0])
    fine = quantized.fine_scores(codes, rows, coded)
    for row in rows:
        bound = quantized.fine_margin(float(codes.fine_error[row]), coded) / 2
        assert abs(exact[row] - fine[row]) <= bound


def test_the_fine_level_is_far_tighter_than_the_coarse_one() -> None:
    rng = np.random.default_rng(0)
    matrix = _unit(rng.standard_normal((500, 384)))
    codes = quantized.encode(matrix)
    assert float(codes.coarse_error.max()) < 0.02  # ~s1·sqrt(dim/12)
    assert float(codes.fine_error.max()) < float(codes.coarse_error.min()) / 50


@pytest.mark.parametrize("dim", [1, 7, 384, 1100])
def test_integer_dots_are_exact_with_and_without_numkong(
    dim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(dim)
    codes = rng.integers(-127, 128, (5000, dim), dtype=np.int8)
    codes[0] = 127  # the largest sums
    query = np.full((1, dim), -127, dtype=np.int8)
    expected = codes.astype(np.int64) @ query[0].astype(np.int64)
    assert np.array_equal(quantized.integer_dots(codes, query), expected)
    monkeypatch.setattr(quantized, "_numkong", None)
    assert np.array_equal(quantized.integer_dots(codes, query), expected)


def test_codes_take_half_the_bytes_of_float32() -> None:
    matrix = _unit(np.random.default_rng(1).standard_normal((1000, 384)))
    held = sum(array.nbytes for array in quantized.encode(matrix))
    assert held <= 0.52 * matrix.nbytes  # two int8 codes and four floats a row
