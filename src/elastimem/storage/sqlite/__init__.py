"""storage.sqlite: the SQLite implementation of the storage interfaces (SPEC §4.1-§4.5).

Owns: the one-file-per-user store, its pragmas, WAL, ``BEGIN IMMEDIATE`` transactions,
FTS5 tables, migrations and the privacy of the files on disk. SQLite idioms (FTS5 MATCH,
``bm25()``, PRAGMA, ``sqlite_master``, rowid tricks) never leave this package.
The core: ``database`` (the ``Database``, its transactions, ``open_store``), ``connection``
(connections, pragmas, error translation), ``opening`` (the open sequence's steps), ``fts``
(the FTS5 tables), ``migrations`` (the schema); then one ``Sqlite<Family>Rows`` per family.
May import: the base modules and ``storage``'s interfaces.
"""
