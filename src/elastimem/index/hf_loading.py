"""Loading a Hugging Face model with torch: offline, quietly, and on one thread.

Shared by the two built-in embedder paths that load the bundled MiniLM through
sentence-transformers: ``embedders`` (to embed with it) and ``onnx_embedder`` (to convert it
once to ONNX). Nothing here imports torch or the hub until a function runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

# The variables huggingface_hub reads (once, at its import) to refuse every HTTP request.
_HUB_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Keep huggingface_hub from any HTTP request for the duration of a load.

    Does nothing when the host set either offline variable itself. huggingface_hub reads
    the variables once, at its import, into ``constants.HF_HUB_OFFLINE``; so the flag is
    also set there while the block runs, and afterwards put back to what the host had,
    instead of leaving the whole process offline because our load imported the hub first.
    """
    if any(name in os.environ for name in _HUB_OFFLINE_ENV):
        yield
        return
    constants: Any = sys.modules.get("huggingface_hub.constants")
    previous = getattr(constants, "HF_HUB_OFFLINE", False)
    for name in _HUB_OFFLINE_ENV:
        os.environ[name] = "1"
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for name in _HUB_OFFLINE_ENV:
            os.environ.pop(name, None)
        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None:
            constants.HF_HUB_OFFLINE = previous


@contextlib.contextmanager
def quiet_transformers_progress() -> Iterator[None]:
    """Hide the "Loading weights" tqdm bar transformers writes to stderr, then restore."""
    try:
        from huggingface_hub import utils as hub_utils
        from transformers.utils import logging as hf_logging
    except Exception:  # an older or partial install: nothing to silence
        yield
        return
    transformers_bars = hf_logging.is_progress_bar_enabled()
    hub_bars_disabled = hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # also disables the hub's bars
    try:
        yield
    finally:
        if transformers_bars:
            hf_logging.enable_progress_bar()  # also re-enables the hub's bars
        if hub_bars_disabled and not hub_utils.are_progress_bars_disabled():
            hub_utils.disable_progress_bars()
        elif not hub_bars_disabled and hub_utils.are_progress_bars_disabled():
            hub_utils.enable_progress_bars()


def one_torch_thread() -> None:
    """Run torch's kernels on one thread, when elastimem is what brought torch in.

    The host's own model (llama.cpp, Ollama) keeps the cores busy, and torch's thread pool
    spins waiting for cores it cannot get: on the 2-core machine under load, one query took
    170 ms with torch's default of 2 threads against 34 ms with 1, and short texts embedded
    at 46 against 92 per second (benchmarks/embedder_throughput.py --torch-threads 1). A
    host that imported torch itself keeps its own setting; this is process-wide.
    """
    import torch

    torch.set_num_threads(1)
