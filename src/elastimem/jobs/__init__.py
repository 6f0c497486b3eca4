"""jobs: the background job handlers, one module per job (SPEC §5.9-§5.14).

Owns: what each durable job does when the worker claims it — ``turns`` (the jobs queued
at each turn, the idle sweep), ``embed`` (chunk and fact embedding, ``reindex``),
``extract``, ``link``, ``summaries`` (rolling digest, session summaries), ``consolidate``
— and ``dispatch.make_worker``, which gives the runtime's worker a handler per kind.
Handlers receive a ``runtime.services.Services`` and never touch the facade; every LLM
call goes through the gate, every write through ``atomic()`` (never while an LLM or
embedder call is in flight).
May import: every layer below it (base, policy, ``storage`` through its interfaces,
``index``, ``memory``, ``graph``, ``runtime``). Never ``retrieval`` (its sibling: the query
path), the facade or the front ends. The runtime does not import ``jobs`` back: it is
handed the handlers.
"""
