"""runtime: what runs an open store (SPEC §5.11).

Owns: the wiring of one instance (``Services``), the LLM gate and its watchdog, the durable
job queue's rules, the background worker thread, and the session state of the facade.
May import: every layer below it (base, policy, ``storage``, ``index``, ``memory``,
``graph``). Never ``retrieval``'s callers, the facade or the front ends.
"""
