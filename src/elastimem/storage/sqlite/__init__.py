"""storage.sqlite: the SQLite implementation of the storage interfaces (SPEC §4.1-§4.5).

Owns: the one-file-per-user store, its pragmas, WAL, ``BEGIN IMMEDIATE`` transactions,
FTS5 tables, migrations and the privacy of the files on disk. SQLite idioms (FTS5 MATCH,
``bm25()``, PRAGMA, ``sqlite_master``, rowid tricks) never leave this package.
May import: the base modules and ``storage``'s interfaces.
"""
