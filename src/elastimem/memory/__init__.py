"""memory: the three kinds of memory as records (SPEC §5.1-§5.4, §5.15).

Owns: the transcript (sessions, messages, chunks; ``episodic``), versioned facts and their
quarantine (``semantic``), lessons (``procedural``) and the facts' vectors. The rules of
each kind live here; its rows are read and written through ``storage`` only.
May import: the base modules, policy, ``storage`` and ``index``.
"""
