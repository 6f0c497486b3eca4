"""index: the in-memory search structures over what storage holds (SPEC §5.6, §5.13).

Owns: exact BM25 from cached keyword postings (``keyword``), the vector index family
(``vectors``: the index; ``vector_hits``: what every search shares; ``quantized`` codes, the
``scan``, the HNSW graph ``ann``, the ``exact_cache`` of float32 rows, and ``in_database``: the
search PostgreSQL runs with pgvector), what the embed job embeds and writes (``vector_writes``),
the chunks' own-text vectors a small store's queries keep in memory (``own_text``)
and the embedders (``embedding_source``: the active one; ``embedders``, ``onnx_embedder``,
``bert_onnx``, ``hf_loading``: the built-in model, its ONNX graph and its loading). Reads
and writes rows only through ``storage``'s families (``tx.postings``, ``tx.vectors``,
``tx.meta``); no SQL here.
May import: the base modules, policy and ``storage``.
"""
