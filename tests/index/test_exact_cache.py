"""The LRU of exact float32 vectors behind the vector index's re-score (exact_cache.py)."""

from __future__ import annotations

import numpy as np
import pytest

from elastimem.index import exact_cache
from elastimem.index.exact_cache import ExactVectorCache


def rows(values: list[int], dim: int = 4) -> np.ndarray:
    return np.array([[v] * dim for v in values], dtype=np.float32)


def test_split_returns_kept_rows_and_names_the_rest() -> None:
    cache = ExactVectorCache(4)
    cache.add(np.array([3, 7]), rows([3, 7]))
    kept_ids, kept, missing = cache.split(np.array([7, 9, 3, 11]))
    assert kept_ids.tolist() == [7, 3] and missing.tolist() == [9, 11]
    np.testing.assert_array_equal(kept, rows([7, 3]))
    assert kept.dtype == np.float32 and kept_ids.dtype == np.int64
    empty_ids, empty, missing = cache.split(np.array([1]))
    assert empty_ids.size == 0 and empty.shape == (0, 4) and missing.tolist() == [1]


def test_the_least_recently_used_row_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact_cache, "MAX_ROWS", 3)
    cache = ExactVectorCache(4)
    cache.add(np.array([1, 2, 3]), rows([1, 2, 3]))
    cache.split(np.array([1]))  # 1 is now the most recently used
    cache.add(np.array([4]), rows([4]))
    assert cache.split(np.array([1, 2, 3, 4]))[2].tolist() == [2]
    assert len(cache) == 3


def test_capacity_is_bounded_in_bytes_for_wide_vectors() -> None:
    wide = ExactVectorCache(4096)
    assert wide.capacity == exact_cache.MAX_BYTES // (4096 * 4)
    narrow = ExactVectorCache(16)
    assert narrow.capacity == exact_cache.MAX_ROWS
    ids = np.arange(narrow.capacity + 10)
    narrow.add(ids, np.ones((ids.size, 16), dtype=np.float32))
    assert len(narrow) == narrow.capacity and narrow.nbytes == narrow.capacity * 16 * 4


def test_kept_rows_are_private_copies() -> None:
    cache = ExactVectorCache(4)
    source = rows([5])
    cache.add(np.array([5]), source)
    source[:] = -1.0  # the caller's buffer changing does not change what is kept
    _ids, kept, _missing = cache.split(np.array([5]))
    np.testing.assert_array_equal(kept, rows([5]))
    kept[:] = 7.0  # nor does changing what split returned
    np.testing.assert_array_equal(cache.split(np.array([5]))[1], rows([5]))


def test_drop_forgets_replaced_rows() -> None:
    cache = ExactVectorCache(4)
    cache.add(np.array([1, 2]), rows([1, 2]))
    cache.drop(np.array([2, 99]))
    assert cache.split(np.array([1, 2]))[2].tolist() == [2]
