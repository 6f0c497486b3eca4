"""The exceptions elastimem raises.

Every error derives from :class:`ElastimemError`; the tree is::

    ElastimemError(Exception)
    ├── ConfigError(ElastimemError, TypeError, ValueError)  bad option / argument / user id / `at`
    ├── StoreError(ElastimemError)                          storage failure (cause attached)
    │   ├── StoreLockedError(StoreError)                    busy/locked past the busy timeout
    │   ├── EncryptionKeyError(StoreError)                  encrypted store: no key or wrong key
    │   └── SchemaTooNewError(StoreError, RuntimeError)     file from a newer elastimem
    ├── ClosedError(ElastimemError, RuntimeError)           any call after close()
    │   └── StoreClosedError(ClosedError, StoreError)       a read or write racing close()
    ├── ImportFormatError(ElastimemError, ValueError)       bad export file or non-empty target
    ├── LLMError(ElastimemError)                            elastimem.llms adapters
    └── EmbedderError(ElastimemError)                       reindex

``ConfigError`` subclasses both ``TypeError`` and ``ValueError`` so callers that already
catch either keep working. Messages are one sentence naming the option, path or value and
the fix.
"""

from __future__ import annotations


class ElastimemError(Exception):
    """Base class of every elastimem error."""


class ConfigError(ElastimemError, TypeError, ValueError):
    """A bad option, argument, user id or timestamp."""


class StoreError(ElastimemError):
    """An unrecoverable storage failure; the SQLite error is attached as ``__cause__``."""


class StoreLockedError(StoreError):
    """The store stayed busy or locked past the busy timeout."""


class EncryptionKeyError(StoreError):
    """The store is encrypted and was opened without its key or with a wrong one, or a key
    was given for a store that is not encrypted; the file was left exactly as it was."""


class SchemaTooNewError(StoreError, RuntimeError):
    """The file was written by a newer elastimem than this one."""


class ClosedError(ElastimemError, RuntimeError):
    """A method was called after ``close()``."""


class StoreClosedError(ClosedError, StoreError):
    """The store's file was closed under a call that was already running (a call racing
    ``close()`` on another thread); both a ``ClosedError`` and a ``StoreError``."""


class ImportFormatError(ElastimemError, ValueError):
    """An export file is malformed, or the import target is not empty."""


class LLMError(ElastimemError):
    """An LLM adapter in ``elastimem.llms`` failed (HTTP error, timeout, bad JSON)."""


class EmbedderError(ElastimemError):
    """The embedder raised during ``reindex``."""
