"""index: the in-memory search structures over what storage holds (SPEC §5.6, §5.13).

Owns: exact BM25 from cached keyword postings, the vector index family (float32 on file,
quantized copy, exact scan, HNSW, exact-vector cache) and the embedders (the built-in ONNX
model and its loading). Reads and writes rows only through ``storage``.
May import: the base modules, policy and ``storage``.
"""
