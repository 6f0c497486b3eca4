"""ops: running elastimem in production, on top of the library.

- ``backup``: online backups, restores and checks of one user's store (SQLite file copies,
  PostgreSQL exports); ``schedule``: the periodic per-user snapshots of ``serve``.
- ``metrics``: an observer of ``elastimem.observe`` that keeps Prometheus metrics
  (prometheus-client, the ``server`` extra), imported only when metrics are asked for.
- ``tracing``: an observer that turns observations into OpenTelemetry spans following the
  GenAI memory conventions (the ``otel`` extra), imported only when tracing is enabled.

May import: the facade (``elastimem.open``), ``observe``, ``errors``, ``storage.addresses``
and the file-level backup and check of ``storage.sqlite.backup`` (a copy of a store file
cannot be had through an open store). Nothing in the library imports this package; ``cli_ops``
and ``server`` do.
"""
