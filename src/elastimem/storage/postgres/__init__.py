"""storage.postgres: the PostgreSQL implementation of the storage interfaces (issue #18).

Owns: one schema for every user of a database (``user_id`` in every key, row-level security
on every table), its ledger and creation, the shared connection pool, transactions scoped to
one user, and the families on psycopg 3. Nothing here is imported unless a ``postgresql://``
address is opened, so the driver stays an optional extra (``elastimem[postgres]``).
May import: the base modules and ``storage``'s interfaces.
"""
