"""storage: every SQL statement of elastimem, behind small interfaces (SPEC §4).

Owns: connections, transactions, the schema and its migrations, the open sequence, and one
interface per table family (transcript, facts, lessons, jobs, graph rows, meta, vectors on
file, keyword postings). ``storage.sqlite`` implements them on one SQLite file per user; a
second backend implements the same interfaces without touching the layers above.
Nothing above this package writes SQL or sees a driver's connection: code above the seam
receives a transaction handle (``Tx``) and calls its families' methods.
May import: the base modules only (errors, clock, text, config, values, enums).
"""
