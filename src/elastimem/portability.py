"""Erase, export and import: the user's handles on their own memory (SPEC §5.16).

**Erase** deletes a fact key's whole history, or a session with everything derived from it
(messages, chunks, vectors, FTS rows, jobs, graph provenance and, on request, the facts learned
in it), in one transaction. Deleting rows is not enough for privacy: a database keeps deleted
bytes in free space, index segments and its log, so the erase runs inside the backend's
``secure_delete()`` and ends with its ``purge_erased()`` (``storage.admin.StoreUpkeep``; on
SQLite: zeroed freed pages, merged FTS segments, a rewritten file and a truncated WAL).

**Export** writes UTF-8 JSON Lines from one read snapshot: a header, one ``{"table","row"}``
line per row in foreign-key order (BLOBs as base64), and an ``{"table":"_end","rows":N}``
trailer. FTS tables, ``ann_index``, ``schema_migrations`` and ``events`` are derived or local,
so they are not exported.

**Import** restores such a file into an empty store, ids included, in one transaction with
deferred foreign keys. Every line is checked as it is inserted; any problem raises
``ImportFormatError`` naming the line, and the rollback leaves the target as it was.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

import numpy as np

from . import graph
from .clock import now_ts
from .errors import ConfigError, ImportFormatError, StoreError
from .index.keyword import ERASE_GEN_KEY
from .jobs.embed import queue_fact_embedding
from .memory import episodic, fact_vectors
from .runtime.services import Services
from .storage.admin import upkeep
from .storage.database import Database
from .storage.sqlite import files, migrations
from .storage.sqlite.cipher import CipherKey
from .storage.sqlite.sealed import SealedReader, SealedWriter, looks_sealed
from .storage.tx import Tx
from .text import normalize_key, sanitize
from .version import package_version

logger = logging.getLogger("elastimem")

EXPORT_FORMAT = "elastimem-export"
FORMAT_VERSION = 1
END_TABLE = "_end"
# Foreign-key order: every table comes after the tables it references (facts.invalidated_by
# points forward within facts, which is why import defers the foreign-key checks).
EXPORT_TABLES = (
    "meta",
    "sessions",
    "messages",
    "chunks",
    "facts",
    "fact_vectors",
    "fact_reviews",
    "lessons",
    "quarantine",
    "graph_nodes",
    "graph_edges",
    "graph_mentions",
    "graph_merge_reviews",
    "jobs",
)
# The rest of meta is local state (counters, FTS and embedder bookkeeping) rebuilt on import.
EXPORTED_META_KEYS = ("created_at", "created_by", "user_id")
# float32 rounding of a unit vector's length stays far inside this.
UNIT_NORM_TOLERANCE = 1e-3
# What erase reports, in this order.
ERASE_COUNT_KEYS = (
    "facts",
    "fact_keys",
    "sessions",
    "messages",
    "chunks",
    "vectors",
    "graph_edges",
    "graph_nodes",
    "graph_mentions",
    "quarantine",
    "jobs",
)
# Progress callbacks fire every this many imported rows (and once at the end).
PROGRESS_EVERY = 500
# Non-seekable import streams (stdin) are spooled to disk beyond this size.
SPOOL_BYTES = 16 * 1024 * 1024

Progress = Callable[[int, int], None]


# -- erase -------------------------------------------------------------------------------------


def erase(
    services: Services, *, key: str | None, session_id: int | None, include_facts: bool
) -> dict[str, int]:
    """Erase a fact key (already normalised) or a session, and purge the bytes (§5.16)."""
    database = services.db
    counts = dict.fromkeys(ERASE_COUNT_KEYS, 0)
    touched: set[str] = set()
    cleaner = upkeep(database)
    # Hold the write lock across the whole sequence so the secure-delete window, the erase,
    # the keyword index merge and the file rewrite are not interleaved with other writes of
    # this process.
    with database.lock, cleaner.secure_delete():
        with database.atomic() as tx:
            if key is not None:
                _erase_keys(tx, [key], counts)
            elif session_id is not None:
                _erase_session(tx, session_id, include_facts, counts)
            if counts["facts"]:
                touched.add("facts")
            if counts["chunks"]:
                touched.add("chunks")
            if any(counts.values()):
                tx.meta.bump("writes_since_consolidation")
            if counts["chunks"] or counts["facts"]:
                # Cached keyword postings must reload: see KeywordIndex._read_state.
                tx.meta.bump(ERASE_GEN_KEY)
            tx.meta.log_event("erase", **counts)
        if any(counts.values()):
            cleaner.purge_erased(touched)
    if any(counts.values()):
        # Cached query vectors are keyed by the query text, which may quote what was erased.
        services.embedding.query_cache.clear()
    return counts


def _erase_keys(tx: Tx, keys: list[str], counts: dict[str, int]) -> None:
    """Every version of each key, its merge reviews and its quarantine rows."""
    wanted = {k for k in keys if k}
    if not wanted:
        return
    quarantined = [
        quarantine_id
        for quarantine_id, name in tx.admin.quarantined_keys()
        if name in wanted or normalize_key(name) in wanted
    ]
    tx.admin.delete_quarantine(quarantined)
    counts["quarantine"] += len(quarantined)
    for key in sorted(wanted):
        versions, vectors = tx.admin.erase_fact_key(key)
        if not versions:
            continue
        counts["vectors"] += vectors
        counts["facts"] += versions
        counts["fact_keys"] += 1


def _erase_session(tx: Tx, session_id: int, include_facts: bool, counts: dict[str, int]) -> None:
    if not episodic.exists(tx, session_id):
        return
    episodic.close_session(tx, session_id)  # a no-op for an ended session
    if include_facts:
        _erase_keys(tx, tx.admin.keys_learned_in(session_id), counts)
    counts["messages"], counts["chunks"], vectors = tx.admin.session_sizes(session_id)
    counts["vectors"] += vectors
    # Nodes known only from this session's chunks (every one of their mentions is here).
    noted = tx.admin.nodes_only_in_session(session_id)
    edges, mentions = tx.admin.unlink_session_from_graph(session_id)
    counts["graph_edges"], counts["graph_mentions"] = edges, mentions
    for node_id in noted:
        named = tx.admin.unlinked_node(node_id)
        if named is None:
            continue  # still linked by an edge from another session: it stays
        graph.delete_nodes(tx, [node_id])
        # A merge verdict about a node that no longer exists would keep its name.
        tx.admin.delete_merge_reviews_naming(*named)
        counts["graph_nodes"] += 1
    if counts["graph_edges"] or counts["graph_mentions"] or counts["graph_nodes"]:
        tx.meta.bump("graph.gen")
    # Its messages and chunks (and their keyword rows) go with it.
    counts["sessions"], counts["jobs"] = tx.admin.delete_session(session_id)
    # The in-memory matrices drop their rows on the next query; the HNSW snapshot may hold
    # these vectors, so it goes too (it is a cache, rebuilt later).
    tx.meta.bump("vectors.gen")
    tx.admin.drop_ann_snapshot()


# -- export ------------------------------------------------------------------------------------


def export(services: Services, path_or_file: Any, *, encrypt: bool | None = None) -> dict[str, int]:
    """Write the store as JSON Lines to a path or a file object; returns rows per table.

    The export of an encrypted store is encrypted with its key (``storage.sqlite.sealed``)
    unless ``encrypt`` is False; ``encrypt=True`` on a plain store is a ``ConfigError``.
    """
    __version__ = package_version()
    key = _export_key(services.db, encrypt)
    if isinstance(path_or_file, (str, os.PathLike)):
        raw: object = os.fspath(path_or_file)
        if not isinstance(raw, str) or not raw:
            raise ConfigError(
                f"cannot export to {path_or_file!r}; pass a file path or a writable file object"
            )
        # A symlink names the file to write: the temp file goes beside that one and is
        # renamed over it (renamed over the link, it replaced the link, target unwritten).
        target = os.path.realpath(os.path.expanduser(raw))
        database = services.db
        suffix = None if database.is_memory else files.store_file_at(target, database.path)
        if suffix is not None:
            which = f" (its {suffix[1:]} file)" if suffix else ""
            raise ConfigError(
                f"cannot export to {raw}: it is the store itself{which}, and writing onto it "
                "would destroy the store; name another file"
            )
        if os.path.isdir(target):
            raise StoreError(f"cannot write the export to {target}: it is a folder; name a file")
        if os.path.exists(target) and not os.path.isfile(target):
            # A device or a FIFO (/dev/null, a pipe to a compressor): written into as it
            # is. Renaming a temp file over it replaced the device node with a file.
            try:
                with open(target, "wb") as handle:
                    return _export_into(services, handle, __version__, key)
            except OSError as exc:
                raise StoreError(f"cannot write the export to {target} ({exc.strerror})") from exc
        folder = os.path.dirname(os.path.abspath(target))
        # Write beside the target and rename at the end, so a failed export never leaves a
        # half-written file under the requested name.
        try:
            fd, temp = tempfile.mkstemp(prefix=".elastimem-export-", dir=folder)
        except OSError as exc:
            raise StoreError(f"cannot write the export to {target} ({exc.strerror})") from exc
        try:
            if key is None:
                with os.fdopen(fd, "wb") as handle:
                    counts = _export_to(services, _ByteSink(handle), __version__)
            else:
                os.close(fd)  # SQLCipher opens the empty temp file itself
                counts = _export_sealed(services, temp, key, __version__)
            try:
                os.replace(temp, target)
            except OSError as exc:  # e.g. a folder created under that name meanwhile
                raise StoreError(f"cannot write the export to {target} ({exc.strerror})") from exc
        except BaseException:
            with suppress(OSError):
                os.unlink(temp)
            raise
        return counts
    if not hasattr(path_or_file, "write"):
        raise ConfigError(
            f"cannot export to {path_or_file!r}; pass a file path or a writable file object"
        )
    return _export_into(services, path_or_file, __version__, key)


def _export_key(database: Database, encrypt: bool | None) -> CipherKey | None:
    if encrypt not in (None, True, False):
        raise ConfigError(f"encrypt={encrypt!r} is invalid; pass True, False or None")
    if encrypt and database.cipher is None:
        raise ConfigError(
            "encrypt=True needs an encrypted store (its key encrypts the export); open the "
            "store with key=, or export it plain"
        )
    return None if encrypt is False else database.cipher


def _export_sealed(services: Services, path: str, key: CipherKey, version: str) -> dict[str, int]:
    """The export as an encrypted file at ``path`` (an empty file or none)."""
    writer = SealedWriter(path, key)
    try:
        counts = _export_to(services, writer, version)  # type: ignore[arg-type]
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return counts


def _export_into(
    services: Services, handle: IO[Any], version: str, key: CipherKey | None
) -> dict[str, int]:
    """The export written into an open file object (a stream, a device)."""
    if key is None:
        return _export_to(services, _ByteSink(handle), version)
    if isinstance(handle, io.TextIOBase):
        raise ConfigError(
            "an encrypted export is binary: pass a binary file object, or encrypt=False"
        )
    # SQLCipher writes a file: it is built in a private temporary file (encrypted bytes
    # only), then copied into the stream.
    fd, temp = tempfile.mkstemp(prefix=".elastimem-export-")
    os.close(fd)
    try:
        counts = _export_sealed(services, temp, key, version)
        with open(temp, "rb") as source:
            shutil.copyfileobj(source, handle)
        flush = getattr(handle, "flush", None)
        if flush is not None:
            flush()
    except OSError as exc:
        raise StoreError(f"the export could not be written ({exc}); check the destination") from exc
    finally:
        with suppress(OSError):
            os.unlink(temp)
    return counts


class _ByteSink:
    """Writes UTF-8 lines to a binary or a text file object."""

    def __init__(self, handle: IO[Any]) -> None:
        self._handle = handle
        self._binary: bool | None = None
        if isinstance(handle, io.TextIOBase):
            self._binary = False
        elif isinstance(handle, (io.RawIOBase, io.BufferedIOBase)):
            self._binary = True

    def write(self, line: str) -> None:
        if self._binary is None:
            try:
                self._handle.write(line)
                self._binary = False
                return
            except TypeError:
                self._binary = True
        if self._binary:
            self._handle.write(line.encode("utf-8"))
        else:
            self._handle.write(line)

    def flush(self) -> None:
        flush = getattr(self._handle, "flush", None)
        if flush is not None:
            flush()


def _export_to(services: Services, sink: _ByteSink, version: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        with services.db.read() as conn:
            header = {
                "format": EXPORT_FORMAT,
                "format_version": FORMAT_VERSION,
                "schema_version": migrations.CURRENT_SCHEMA_VERSION,
                "exported_at": now_ts(),
                "library_version": version,
                # The label of the vectors in this file (the most common one), so the
                # importing side knows which embedder they belong to; None without vectors.
                "embedding_model": conn.admin.main_vector_label(),
            }
            sink.write(_dumps(header))
            total = 0
            for table in EXPORT_TABLES:
                described = conn.admin.columns(table)
                columns = [name for name, _ in described]
                blobs = {name for name, is_bytes in described if is_bytes}
                keys = EXPORTED_META_KEYS if table == "meta" else None
                n = 0
                for values in conn.admin.export_rows(table, columns, keys):
                    row = {
                        c: (_b64(v) if c in blobs and v is not None else v)
                        for c, v in zip(columns, values, strict=True)
                    }
                    sink.write(_dumps({"table": table, "row": row}))
                    n += 1
                counts[table] = n
                total += n
            sink.write(_dumps({"table": END_TABLE, "rows": total}))
        sink.flush()
    except OSError as exc:
        raise StoreError(f"the export could not be written ({exc}); check the destination") from exc
    return counts


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _b64(value: Any) -> str:
    return base64.b64encode(bytes(value)).decode("ascii")


# -- import ------------------------------------------------------------------------------------


def import_(
    services: Services, path_or_file: Any, *, progress: Progress | None = None
) -> dict[str, int]:
    """Load an export into this (empty) store, all or nothing; returns rows per table."""
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress={progress!r} is not callable; pass a function or None")
    with _open_input(path_or_file) as (handle, start):
        if looks_sealed(handle.read(16)):
            handle.seek(start)
            return _import_sealed(services, handle, progress)
        handle.seek(start)
        total = _count_data_lines(handle)
        handle.seek(start)
        return _import_lines(services, handle, total, progress)


def _import_sealed(
    services: Services, handle: IO[bytes], progress: Progress | None
) -> dict[str, int]:
    """Import an encrypted export, read with the importing store's own key."""
    key = services.db.cipher
    if key is None:
        raise ImportFormatError(
            "the export is encrypted (or is not an elastimem export); import it into a store "
            "opened with the key of the store it came from"
        )
    # SQLCipher reads a file: the encrypted bytes are copied to a private temporary one.
    fd, temp = tempfile.mkstemp(prefix=".elastimem-import-")
    try:
        with os.fdopen(fd, "wb") as copy:
            shutil.copyfileobj(handle, copy)
        reader = SealedReader(temp, key)
        try:
            total = max(0, reader.count - 2)
            return _import_lines(services, reader.lines(), total, progress)
        finally:
            reader.close()
    finally:
        with suppress(OSError):
            os.unlink(temp)


@contextmanager
def _open_input(path_or_file: Any) -> Iterator[tuple[IO[bytes], int]]:
    """A seekable binary handle on the export and the offset where it starts.

    A path is opened; a seekable binary file object is read from its current position; a
    text stream or a stream that cannot seek (stdin, a pipe) is copied to a spool once.
    """
    if isinstance(path_or_file, (str, os.PathLike)):
        target = os.path.expanduser(os.fspath(path_or_file))
        try:
            handle = open(target, "rb")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise ImportFormatError(f"cannot read the export {target} ({exc.strerror})") from exc
        with handle:
            yield handle, 0
        return
    if not hasattr(path_or_file, "read"):
        raise ImportFormatError(
            f"cannot import from {path_or_file!r}; pass a file path or a readable file object"
        )
    if not isinstance(path_or_file, io.TextIOBase):
        try:
            seekable = bool(path_or_file.seekable())
        except (AttributeError, OSError, ValueError):
            seekable = False
        if seekable:
            yield path_or_file, path_or_file.tell()
            return
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        while True:
            block = path_or_file.read(1 << 16)
            if not block:
                break
            spool.write(block.encode("utf-8") if isinstance(block, str) else bytes(block))
        spool.seek(0)
        yield spool, 0


def _count_data_lines(handle: IO[bytes]) -> int:
    """Rows to import, for progress: every line but the header and the trailer."""
    lines = 0
    last = b""
    while True:
        block = handle.read(1 << 20)
        if not block:
            break
        lines += block.count(b"\n")
        last = block[-1:]
    if last and last != b"\n":
        lines += 1
    return max(0, lines - 2)


class _Importer:
    """Validates and inserts one export line at a time, inside the caller's transaction."""

    def __init__(self, conn: Tx) -> None:
        self.conn = conn
        described = {t: conn.admin.columns(t) for t in EXPORT_TABLES}
        self.columns = {t: frozenset(name for name, _ in c) for t, c in described.items()}
        self.blobs = {
            t: frozenset(n for n, is_bytes in c if is_bytes) for t, c in described.items()
        }
        self.counts = dict.fromkeys(EXPORT_TABLES, 0)
        self.meta: dict[str, str] = {}
        self.rows = 0
        self.max_embed_seq = 0

    def header(self, line_no: int, obj: Any) -> None:
        if not isinstance(obj, dict) or obj.get("format") != EXPORT_FORMAT:
            raise _bad(line_no, "is not an elastimem export header; export the store with "
                                "`elastimem export` and import that file")  # fmt: skip
        version = obj.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise _bad(line_no, f"has an unreadable format_version {version!r}")
        if version > FORMAT_VERSION:
            raise _bad(line_no, f"was written by a newer elastimem (format_version {version}, "
                                f"this one reads {FORMAT_VERSION}); upgrade elastimem to "
                                "import it")  # fmt: skip
        schema = obj.get("schema_version")
        if isinstance(schema, bool) or not isinstance(schema, int):
            raise _bad(line_no, f"has an unreadable schema_version {schema!r}")
        if schema > migrations.CURRENT_SCHEMA_VERSION:
            current = migrations.CURRENT_SCHEMA_VERSION
            raise _bad(line_no, f"holds schema version {schema}, newer than this elastimem's "
                                f"{current}; upgrade elastimem to import it")  # fmt: skip

    def row(self, line_no: int, obj: Any) -> None:
        if not isinstance(obj, dict) or set(obj) != {"table", "row"}:
            raise _bad(line_no, 'is not a {"table", "row"} object')
        table, row = obj["table"], obj["row"]
        if table not in self.columns:
            raise _bad(line_no, f"names an unknown table {table!r}")
        if not isinstance(row, dict) or not row:
            raise _bad(line_no, f"has no row object for table {table!r}")
        allowed = self.columns[table]
        blobs = self.blobs[table]
        names: list[str] = []
        values: list[Any] = []
        for name, value in row.items():
            if name not in allowed:
                raise _bad(line_no, f"names an unknown column {name!r} of table {table!r}")
            names.append(name)
            values.append(_import_value(line_no, table, name, value, name in blobs))
        if table == "meta":
            self._meta(line_no, dict(zip(names, values, strict=True)))
        else:
            refused = self.conn.admin.insert_row(table, names, values)
            if refused is not None:
                raise _bad(line_no, f"cannot be stored in {table} ({refused})")
            if table in ("chunks", "fact_vectors"):
                self._check_vector(line_no, table, row, values[names.index("embedding")]
                                   if "embedding" in names else None)  # fmt: skip
                seq = row.get("embed_seq")
                if isinstance(seq, int) and not isinstance(seq, bool):
                    self.max_embed_seq = max(self.max_embed_seq, seq)
        self.counts[table] += 1
        self.rows += 1

    def _check_vector(
        self, line_no: int, table: str, row: dict[str, Any], blob: bytes | None
    ) -> None:
        # A vector whose length disagrees with its dimension would break every vector search
        # of its label later; refuse it here, where the line number is known.
        if blob is None:
            return
        what = "a fact vector" if table == "fact_vectors" else "a chunk vector"
        dim = row.get("embedding_dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or len(blob) != 4 * dim:
            raise _bad(line_no, f"has {what} of {len(blob)} bytes that does not match "
                                f"embedding_dim {dim!r} (4 bytes per dimension)")  # fmt: skip
        # Every stored vector is a finite unit vector (§4.4): one NaN or a stray scale
        # skewed every search of its label (HNSW scored every chunk 0 with a NaN row).
        norm = float(np.linalg.norm(np.frombuffer(blob, dtype="<f4").astype(np.float64)))
        if not math.isfinite(norm) or abs(norm - 1.0) > UNIT_NORM_TOLERANCE:
            raise _bad(line_no, f"has {what} of length {norm:.6g}, not a finite unit "
                                "vector as elastimem writes them")  # fmt: skip

    def _meta(self, line_no: int, row: dict[str, Any]) -> None:
        key, value = row.get("key"), row.get("value")
        if key not in EXPORTED_META_KEYS:
            raise _bad(line_no, f"names a meta key {key!r} that exports never carry")
        if value is None:
            raise _bad(line_no, f"has no value for meta key {key!r}")
        self.meta[str(key)] = str(value)

    def trailer(self, line_no: int, obj: Any) -> None:
        declared = obj.get("rows") if isinstance(obj, dict) else None
        if isinstance(declared, bool) or not isinstance(declared, int):
            raise _bad(line_no, "is an _end trailer without a row count")
        if declared != self.rows:
            raise _bad(line_no, f"says the file has {declared} rows but {self.rows} were read; "
                                "the file is incomplete or was edited")  # fmt: skip


# SQLite INTEGER is a signed 64-bit value; a larger int would raise OverflowError on insert.
SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1


def _import_value(line_no: int, table: str, column: str, value: Any, blob: bool) -> Any:
    if blob:
        if value is None:
            return None
        if not isinstance(value, str):
            raise _bad(line_no, f"has a non-base64 value in {table}.{column}")
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise _bad(line_no, f"has invalid base64 in {table}.{column}") from exc
    if isinstance(value, int) and not isinstance(value, bool):
        if not SQLITE_INT_MIN <= value <= SQLITE_INT_MAX:
            raise _bad(line_no, f"has an integer in {table}.{column} that SQLite cannot hold")
        return value
    if value is None or isinstance(value, float):
        return value
    if isinstance(value, str):
        return sanitize(value)
    raise _bad(line_no, f"has a {type(value).__name__} in {table}.{column}, which holds only "
                        "text, numbers or null")  # fmt: skip


def _bad(line_no: int, what: str) -> ImportFormatError:
    return ImportFormatError(f"line {line_no} of the export {what}")


def _lines(handle: Iterable[bytes]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for each line; malformed or truncated lines raise."""
    for line_no, raw in enumerate(handle, start=1):
        text_bytes = raw.rstrip(b"\n").rstrip(b"\r")
        if not text_bytes.strip():
            raise _bad(line_no, "is empty; the file is damaged")
        try:
            text = text_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad(line_no, "is not valid UTF-8") from exc
        try:
            parsed = json.loads(text)
        except RecursionError as exc:  # not a ValueError: nesting deeper than json can decode
            raise _bad(line_no, "is nested too deeply to be an export line") from exc
        except ValueError as exc:
            cut = "" if raw.endswith(b"\n") else " (the file looks truncated)"
            raise _bad(line_no, f"is not valid JSON{cut}: {exc}") from exc
        yield line_no, parsed


def _import_lines(
    services: Services, handle: Iterable[bytes], total: int, progress: Progress | None
) -> dict[str, int]:
    database = services.db
    with database.atomic() as conn:
        _require_empty(conn)
        # The exported self node replaces ours (keeping its id); derived caches go too.
        conn.admin.prepare_import()
        importer = _Importer(conn)
        lines = _lines(handle)
        ended = False
        last_line = 0
        for line_no, obj in lines:
            last_line = line_no
            if line_no == 1:
                importer.header(line_no, obj)
                continue
            if ended:
                raise _bad(line_no, "comes after the _end trailer; the file was edited")
            if isinstance(obj, dict) and obj.get("table") == END_TABLE:
                importer.trailer(line_no, obj)
                ended = True
                continue
            importer.row(line_no, obj)
            if progress is not None and importer.rows % PROGRESS_EVERY == 0:
                progress(importer.rows, max(total, importer.rows))
        if last_line == 0:
            raise ImportFormatError("the export is empty; it has no header line")
        if not ended:
            raise _bad(last_line, "is the last one, but the _end trailer is missing; the file "
                                  "is truncated")  # fmt: skip
        _finish_import(conn, database, importer)
        if fact_vectors.any_without_vector(conn):
            # Facts of an export without their vectors (an older one, or made before they
            # were embedded) are embedded by the worker. Only then: a queued job would be
            # exported again, and export -> import -> export must stay identical.
            queue_fact_embedding(conn, services)
    if progress is not None:
        progress(importer.rows, importer.rows)
    return {t: n for t, n in importer.counts.items()}


def _require_empty(conn: Tx) -> None:
    table = conn.admin.occupied_table()
    if table is not None:
        raise ImportFormatError(
            f"the target store already holds {table.replace('_', ' ')}; import into a new, "
            "empty store file"
        )
    if conn.admin.has_running_job():
        raise ImportFormatError(
            "the target store is still running a background job; wait for it (drain) and retry"
        )


def _finish_import(conn: Tx, database: Database, importer: _Importer) -> None:
    broken = conn.admin.broken_reference()
    if broken is not None:
        table, rowid, parent = broken
        raise ImportFormatError(
            f"the export's {table} row {rowid} refers to a missing {parent} row; the file is "
            "incomplete or was edited"
        )
    conn.admin.ensure_self_node()
    for key in ("created_at", "created_by"):
        if key in importer.meta:
            conn.meta.set(key, importer.meta[key])
    imported_user = importer.meta.get("user_id")
    if imported_user is not None:
        recorded = conn.meta.get("user_id")
        if recorded is not None and recorded != imported_user:
            raise ImportFormatError(
                f"the export belongs to user {imported_user!r} but this store records user "
                f"{recorded!r}; import it into that user's store"
            )
        conn.meta.set("user_id", imported_user)
    if database.fts_enabled:
        conn.admin.rebuild_keyword_tables()
    if importer.max_embed_seq > conn.meta.get_int("vectors.seq"):
        conn.meta.set("vectors.seq", importer.max_embed_seq)
    _record_vector_dims(conn)
    conn.meta.bump("vectors.gen")
    conn.meta.bump("graph.gen")
    conn.meta.bump("writes_since_consolidation")
    conn.meta.log_event("import", rows=importer.rows, **importer.counts)


def _record_vector_dims(conn: Tx) -> None:
    """Record each imported model's dimension (``embedder.<label>.dim``, local meta the
    export leaves out) as the one most of its vectors have, as its first embedding would
    have: ``stats()`` counts embedded chunks against it, and a query vector of another
    size is refused."""
    for label, dim in conn.admin.vector_dims():
        key = f"embedder.{label}.dim"
        if conn.meta.get(key) is None:
            conn.meta.set(key, int(dim))


__all__ = ["erase", "export", "import_"]
