"""The vectors family's interface: the chunks' vectors on file (float32 BLOBs, quantized copies).

Code above ``storage`` calls these methods on ``tx.vectors``; each backend implements them
(``storage.sqlite.vectors.SqliteVectorRows``). Methods take and return plain values (ints,
strings, tuples, dataclasses from ``elastimem.values``), never a driver's rows or cursors.
"""

from __future__ import annotations

from typing import Protocol


class VectorRows(Protocol):
    """The chunks' vectors on file (float32 BLOBs, quantized copies)."""

    # -- for the command line ---------------------------------------------------------------

    def has_vectors_labelled(self, prefix: str) -> bool:
        """Whether a chunk has a vector whose model label starts with ``prefix``."""
        ...
