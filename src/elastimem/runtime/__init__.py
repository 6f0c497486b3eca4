"""runtime: what runs an open store (SPEC §5.11).

Owns: the wiring of one instance (``services.Services``, with the embedder's loading and
vector gate), the LLM gate and its watchdog (``gate``), the durable job queue's rules
(``queue``), the background worker thread (``worker``), ``stats()`` (``stats``) and the
token estimate (``tokens``). The facade's session state and lifecycle sit above ``jobs``
(``elastimem.session``, ``elastimem.lifecycle``), since they queue jobs.
May import: every layer below it (base, policy, ``storage`` through its interfaces,
``index``, ``memory``, ``graph``). Never its two siblings above it — ``jobs`` (the job
handlers, handed to the worker by ``jobs.dispatch.make_worker``) and ``retrieval`` (the
query path) — nor the facade or the front ends.
"""
