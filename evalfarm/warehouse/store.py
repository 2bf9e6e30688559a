"""The warehouse: Delta tables of results, text stores of vectors, and the one object every reader and writer uses.

See :mod:`evalfarm.warehouse` for the layout and :mod:`evalfarm.warehouse.tables` for the Delta Lake layer. Schemas
come from :mod:`evalfarm.warehouse.schemas`; connections and views from :mod:`evalfarm.warehouse.query`; the SQL
sandbox (the lock, the read-only check, the limits) from :mod:`evalfarm.warehouse.sandbox`.

Writes are staged then committed. :meth:`Warehouse.write` stages one Parquet file (a unit's rows of one table, a
run's event, a batch of ``units`` rows) and commits it at once, unless the warehouse is ``deferred``: then the file
waits in :meth:`Warehouse.take_pending` for whoever commits the batch. A run's workers write deferred and hand their
staged files to the driver with each job's outcome; the driver commits them in batches
(:class:`~evalfarm.warehouse.commits.CommitBatcher`). A unit is done when its ``metrics`` rows are committed: the
one definition of "is this unit computed?" (:meth:`Warehouse.done`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalfarm import atomic
from evalfarm.cache import with_endpoint
from evalfarm.warehouse.base import (
    MANIFEST_TABLE,
    LegacyWarehouse,
    WarehouseWriteError,
    move_inside,
    new_run_id,
    now,
    open_folder_inside,
    relative_parts,
    safe_open,
    walk_inside,
    write_inside,
)
from evalfarm.warehouse.like import AsOfArg, UnitKey
from evalfarm.warehouse.manifests import manifest_index, manifest_rows
from evalfarm.warehouse.query import needed_statements, open_connection, private_schema_file, view_sources
from evalfarm.warehouse.sandbox import QueryLimits, check_read_only, run_limited
from evalfarm.warehouse.schemas import SCHEMAS, empty_table, table_schemas, unit_tables
from evalfarm.warehouse.tables import (
    DamagedTable,
    DeltaTables,
    FileEntry,
    Snapshot,
    StagedFile,
    TableError,
    group_by_table,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
"""The warehouse's layout version, in ``<root>/warehouse.json``, one line per version (``evalfarm warehouse migrate``
brings an older one up to this):

1. one Parquet file per unit and table under ``model=…/task=…`` folders (read-only now; migrate converts it);
2. a Delta table per table;
3. the metrics table keeps the newest computation of every key apart, in ``data/current/`` (and what older
   computations hold in ``data/superseded/``: :mod:`~evalfarm.warehouse.current`). The same tables and rows as 2:
   an evalfarm of version 2 reads a version-3 warehouse right, but must not rewrite its metrics table (its
   quarantine would hide an older computation that ought to become current again); this one reads a version-2
   warehouse right (nothing current yet: every metrics file pending), and its first refresh of the current rows
   (the end of a run, ``compact``, ``migrate``) declares 3;
4. every metrics row's ``higher_is_better`` is its metric's declared direction (:mod:`evalfarm.metrics`: EvalRank's
   ``mr``, ``tie_rate``, ``oov_rate`` and ``oov_pair_rate`` lower-is-better, counts such as ``n_pairs`` and
   ``n_background`` NULL), where versions before it stored the scorer's one direction on every row. The same tables,
   rows and values; ``evalfarm warehouse migrate`` rewrites the stored directions in place
   (:func:`~evalfarm.warehouse.migrate.correct_directions`, checked row for row) and declares 4. The views read
   directions from the declarations, so they are right on a version-3 warehouse too; a version-3 evalfarm refuses
   to write a version-4 warehouse (it would store the old directions again).

A warehouse of a newer version is refused for writes."""
FORMAT_FILE = "warehouse.json"
VERIFIED_MANIFEST = "verified-files.json"
"""``<root>/verified-files.json``: the files :meth:`Warehouse.scan` found whole, by (size, mtime in ns)."""
QUARANTINE_DIR = "quarantine"
_WARNED: set[str] = set()


def resolve_filesystem(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a pyarrow URI (``file://``, ``s3://``, ``gs://``)."""
    text = os.fspath(root)
    if "://" not in text:
        return pafs.LocalFileSystem(), str(Path(text).expanduser().resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(with_endpoint(text))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise ValueError(
            f"cannot open warehouse {text!r}: {exc}. Use a local path or a pyarrow filesystem URI "
            "(file:///abs/path, s3://bucket/prefix, gs://bucket/prefix) with credentials in the environment"
        ) from exc
    return fs, path.rstrip("/")


LOCAL_READ_ONLY_SCHEME = "local-ro"
"""The scheme a read-only connection reads a local warehouse through (:meth:`Warehouse._reader`)."""


def _is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


STALE_TEMP_SECONDS = atomic.STALE_TEMP_SECONDS
_temp_name = atomic.temp_name


def sweep_temp_files(root: str | os.PathLike[str], *, now: float | None = None) -> list[Path]:
    """Remove temp files that killed writers left under a local warehouse ``root``; returns what was removed.

    A temp file of this host whose writer pid is gone is removed at once; any other (another host's, or an
    unparseable name) once it is older than :data:`STALE_TEMP_SECONDS`. Live writers' files are never touched.
    """
    removed = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                if atomic.is_stale_temp(path, now=now):
                    path.unlink()
                    removed.append(path)
            except FileNotFoundError:  # renamed or removed by its writer meanwhile
                continue
            except OSError:  # a read-only warehouse: its debris stays (it is never read) until a writable run
                continue
    return removed


_UNWRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})
"""The errors of a warehouse that cannot be written (no permission, a read-only mount, a full disk)."""


def atomic_write_table(
    table: pa.Table, path: str | os.PathLike[str], *, filesystem: pafs.FileSystem | None = None, **kwargs: Any
) -> str | Path:
    """Write Parquet so that ``path`` is either absent, the old file, or the whole new file — never half.

    Local filesystem: :func:`evalfarm.atomic.write_file` (temp file beside ``path``, fsync, rename over it). Object
    store: a single write to the final key (the object only becomes visible when the upload completes; rename there
    is copy + delete). Raises :class:`WarehouseWriteError` (an ``OSError``) naming ``path`` when the write fails.
    """
    if filesystem is None or _is_local(filesystem):
        p = Path(path)
        try:
            atomic.write_file(p, lambda tmp: pq.write_table(table, tmp, **kwargs))
        except WarehouseWriteError:
            raise
        except OSError as exc:
            raise WarehouseWriteError(p if p.parent.exists() else p.parent, exc) from exc
        return path if isinstance(path, Path) else str(path)
    key = os.fspath(path)
    try:
        with filesystem.open_output_stream(key) as out:
            pq.write_table(table, out, **kwargs)
    except OSError as exc:
        raise WarehouseWriteError(key, exc) from exc
    return key


T = TypeVar("T")

QUERY_ATTEMPTS = 3
"""How often :func:`read_again_if_replaced` (:meth:`Warehouse.query`, the correlations' and the report's reads) runs
a read that met a file replaced or removed under it."""

_REPLACED_MARKS = ("No magic bytes found at end of file", "Failed to read", "No such file", "not found")


def replaced_under_read(exc: BaseException) -> bool:
    """Whether DuckDB's error is what a file changed between a connection's snapshot and its read gives: a file of
    the snapshot removed meanwhile (vacuumed after a compaction), or — in a layout-1 warehouse, whose runs replaced
    files whole — a file's new bytes read at the old file's size. A fresh connection reads the newest snapshot."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(m in text for m in _REPLACED_MARKS)


def read_again_if_replaced(
    open_connection: Callable[[], duckdb.DuckDBPyConnection],
    work: Callable[[duckdb.DuckDBPyConnection], T],
    what: str = "warehouse read",
) -> T:
    """``work(con)`` on a fresh connection, again on a new one when its read met a file changed meanwhile
    (:func:`replaced_under_read`), up to :data:`QUERY_ATTEMPTS` times; any other error is raised at once. The
    connection is closed after each try. ``work`` must only read: it may run more than once."""
    for attempt in range(1, QUERY_ATTEMPTS + 1):
        con = None
        try:  # the views read each table's schema when they are created: connecting reads files too
            con = open_connection()
            return work(con)
        except duckdb.Error as exc:
            if attempt == QUERY_ATTEMPTS or not replaced_under_read(exc):
                raise
            log.info("%s: a file changed while it was read (%s); reading again", what, exc)
        finally:
            if con is not None:
                con.close()
    raise AssertionError("unreachable")  # the loop returns or raises


class ReadSession:
    """One read-only connection that :meth:`Warehouse.session` hands out: :meth:`query` runs a checked statement
    on it (under the session's limits); a read that met a file replaced meanwhile reconnects and runs again, as
    :func:`read_again_if_replaced` does. The connection is opened by the first query."""

    def __init__(self, connect: Callable[[], duckdb.DuckDBPyConnection], limits: QueryLimits) -> None:
        self._connect, self.limits = connect, limits
        self._con: duckdb.DuckDBPyConnection | None = None
        self.connections = 0

    def query(self, sql: str) -> pa.Table:
        statement = check_read_only(sql)
        for attempt in range(1, QUERY_ATTEMPTS + 1):
            if self._con is None:
                self._con = self._connect()
                self.connections += 1
            try:
                return run_limited(self._con, statement, self.limits)
            except duckdb.Error as exc:
                if attempt == QUERY_ATTEMPTS or not replaced_under_read(exc):
                    raise
                log.info("status read: a file changed while it was read (%s); reading again", exc)
                self.close()
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


@dataclass(frozen=True)
class Quarantined:
    """A file that failed :meth:`Warehouse.file_problem`: where it was, where it went (None: left in place), why."""

    path: str
    moved_to: str | None
    reason: str
    units: tuple[tuple[str, str], ...] = ()  # (model, task) of the units whose rows it held, when known

    @property
    def unit(self) -> tuple[str | None, str | None]:
        """(model, task) of the unit it held (from its manifest row, or a text store's ``model=`` folder): None where
        it held none or many."""
        if len(self.units) == 1:
            return self.units[0]
        parts = dict(p.split("=", 1) for p in self.path.split("/") if "=" in p)
        return parts.get("model"), parts.get("task")


class _DoneIndex:
    """The units whose metrics are committed, (model, task, fingerprint) -> newest ``created_at`` (epoch seconds),
    read from the ``metrics`` table's current snapshot and refreshed incrementally: only files added since the last
    read are read, three columns each; a removal (compaction, quarantine) reads the snapshot again."""

    def __init__(self, wh: Warehouse) -> None:
        self.wh = wh
        self.version: int | None = None
        self.files: set[str] = set()
        self.units: dict[tuple[str, str, str], float] = {}
        self.checked = 0.0

    def refresh(self, max_age: float = 0.0) -> dict[tuple[str, str, str], float]:
        if time.monotonic() - self.checked < max_age and self.version is not None:
            return self.units
        snap = self.wh.tables.snapshot("metrics")
        self.checked = time.monotonic()
        if snap.version == self.version:
            return self.units
        paths = {f.path for f in snap.files}
        if not self.files <= paths:  # something was removed: read the whole snapshot again
            self.files, self.units = set(), {}
        for path in sorted(paths - self.files):
            t = self.wh.read_columns(path, ["model", "task", "fingerprint", "created_at"])
            at = t.column("created_at").to_pylist()
            for m, k, f, c in zip(t.column("model").to_pylist(), t.column("task").to_pylist(),
                                  t.column("fingerprint").to_pylist(), at, strict=True):  # fmt: skip
                if m is None or k is None or f is None:
                    continue
                stamp = c.timestamp() if isinstance(c, datetime) else 0.0
                if stamp >= self.units.get((m, k, f), -1.0):
                    self.units[(m, k, f)] = stamp
        self.files, self.version = paths, snap.version
        return self.units


class Warehouse:
    """A warehouse root: a local directory or a pyarrow filesystem URI (``s3://…``, ``gs://…``, ``file://…``).

    Paths handed out (``store_dir``, a snapshot's files) are strings inside ``self.fs``; all I/O goes through the
    methods here so the same code runs on a laptop and against shared storage on a cluster.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        from evalfarm.warehouse.tables import storage_options

        self.fs, self.base = resolve_filesystem(root)
        self.local = _is_local(self.fs)
        # `root`: a Path on the local filesystem (what users and tests see), else the URI.
        self.root: Path | str = Path(self.base) if self.local else os.fspath(root).rstrip("/")
        self.uri = str(self.root)  # the root as a string: a local path, else the URI itself
        scheme = None if self.local else self.uri.split("://", 1)[0]
        self.tables = DeltaTables(self.fs, self.base, scheme=scheme, options=storage_options(os.fspath(root)))
        self.deferred = False
        """When True, :meth:`write` stages files without committing them (:meth:`take_pending` hands them out)."""
        self._pending: list[StagedFile] = []
        self._done = _DoneIndex(self)
        self._layout: str | None = None
        self.check_root()

    def _p(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    # -- layout ---------------------------------------------------------------------------------------------
    def layout(self) -> str:
        """``delta`` (layout 2), ``legacy`` (layout 1: per-unit files, read-only until migrated), ``migrating`` (an
        in-place migration started and not finished: run it again) or ``empty``."""
        if self._layout == "delta":  # once a Delta warehouse, always (only a migration turns one into it)
            return "delta"
        if self.exists(self._p("migrating.json")):
            return "migrating"
        if self.exists(self._p(FORMAT_FILE)) or self.tables.exists("runs") or self.tables.exists("metrics"):
            self._layout = "delta"
            return "delta"
        if self.exists(self._p("tables", "runs", "_schema.parquet")) or self.exists(
            self._p("tables", "metrics", "_schema.parquet")
        ):
            return "legacy"
        return "empty"

    def init(self) -> Warehouse:
        """Create the layout: the format file, the text stores' folder, and the columns this version of evalfarm added
        to a table that exists; sweep the temp files of dead writers. A table is created by its first write (a
        missing table reads as empty: every view exists on a new warehouse). A layout-1 warehouse is refused with
        the command that migrates it (:class:`LegacyWarehouse`)."""
        layout = self.layout()
        if layout in ("legacy", "migrating"):
            raise LegacyWarehouse(self.uri, migrating=layout == "migrating")
        declared = self.schema_version() if layout == "delta" else None
        if declared is not None and declared > SCHEMA_VERSION:
            raise PermissionError(
                f"warehouse {self.uri} is of schema version {declared}, written by a newer evalfarm (this one writes "
                f"version {SCHEMA_VERSION}): upgrade evalfarm to run into it (reading it works)"
            )
        try:
            for name, schema in table_schemas().items():
                if self.tables.exists(name):
                    self.tables.ensure(name, schema)
            if not self.exists(self._p(FORMAT_FILE)):
                self._put(self._p(FORMAT_FILE), self._format_body())
        except TableError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) or "Permission denied" in str(exc) or "Read-only" in str(exc):
                raise WarehouseWriteError(self._p("tables"), OSError(13, str(exc))) from exc
            raise
        if self.local:
            try:
                Path(self._p("embeddings")).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WarehouseWriteError(self._p("embeddings"), exc) from exc
            sweep_temp_files(self.base)
        return self

    @staticmethod
    def _format_body(version: int = SCHEMA_VERSION) -> bytes:
        from evalfarm._version import __version__

        body = {"schema_version": version, "format": "delta", "created_by": f"evalfarm {__version__}"}
        return (json.dumps(body, indent=2) + "\n").encode()

    def declare_version(self, version: int = SCHEMA_VERSION) -> None:
        """Write the format file of schema ``version`` (default this evalfarm's :data:`SCHEMA_VERSION`) when the
        warehouse declares an older one (what a writer does once it wrote what that version means)."""
        if self.layout() == "delta" and (self.schema_version() or 0) < version:
            self._put(self._p(FORMAT_FILE), self._format_body(version))

    def schema_version(self) -> int | None:
        """The layout version the warehouse declares (None: no warehouse; 1: a layout-1 one, which declares none)."""
        layout = self.layout()
        if layout != "delta":
            return 1 if layout == "legacy" else None
        try:
            return int(json.loads(self._get(self._p(FORMAT_FILE)))["schema_version"])
        except (OSError, ValueError, KeyError, TypeError):
            return SCHEMA_VERSION

    def _get(self, path: str) -> bytes:
        if self.local:
            return Path(path).read_bytes()
        with self.fs.open_input_stream(path) as fh:
            return bytes(fh.read())

    def _put(self, path: str, body: bytes, *, fsync: bool = True) -> None:
        """A small file of the warehouse, published whole; on a local disk through no link (:func:`write_inside`)."""
        if self.local:
            try:
                write_inside(self.base, self.relative(path), lambda f: f.write(body), fsync=fsync)
            except OSError as exc:  # written through a folder's descriptor: the error names the bare temp name
                if isinstance(exc, WarehouseWriteError) or exc.errno not in _UNWRITABLE:
                    raise
                raise WarehouseWriteError(path, exc) from exc
        else:
            with self.fs.open_output_stream(path) as out:
                out.write(body)

    def store_dir(self, model: str, store_key: str) -> str:
        """A model's text store: one Parquet shard per batch of newly embedded texts."""
        return self._p("embeddings", f"model={model}", f"store={store_key}")

    def stored_texts(self, models: Collection[str] | None = None) -> dict[tuple[str, str], int]:
        """(model, store key) -> texts stored, of every text store with vectors (one listing of ``embeddings/``,
        then each part's Parquet footer; ``models``: only theirs). A complete store embeds nothing on a rerun, a
        partial one (a run stopped mid-model: the parts of ``execute.EMBED_SHARD_TEXTS``) only the rest: the first
        ETA's question."""
        out: dict[tuple[str, str], int] = {}
        for path, _, _ in self._walk(self._p("embeddings")):
            parts = path.split("/")
            if len(parts) < 3 or not parts[-3].startswith("model=") or parts[-1].startswith("_"):
                continue
            key = (parts[-3].removeprefix("model="), parts[-2].removeprefix("store="))
            if models is not None and key[0] not in models:
                continue
            try:
                rows = pq.read_metadata(path, filesystem=self.fs).num_rows
            except (OSError, pa.ArrowException):  # unreadable: `verify` quarantines it; here it counts nothing
                rows = 0
            out[key] = out.get(key, 0) + rows
        return out

    # -- writes ---------------------------------------------------------------------------------------------
    def typed(self, table: str, rows: pa.Table | list[dict[str, Any]]) -> pa.Table:
        """``rows`` as ``table``'s schema (its columns, in order, cast)."""
        schema = SCHEMAS[table]
        t = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        missing = [f for f in schema if f.name not in t.column_names]
        for f in missing:  # a column its writer does not know (rows of an older shape): null
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
        return t.select(schema.names).cast(schema)

    def write(
        self,
        table: str,
        rows: pa.Table | list[dict[str, Any]],
        *,
        run_id: str | None = None,
        unit: tuple[str, str, str] | None = None,
    ) -> StagedFile:
        """Stage ``rows`` of ``table`` as one file and commit it (or keep it pending when :attr:`deferred`).
        ``unit``: (model, task, fingerprint) when the rows are one unit's (its manifest row names it); ``run_id``
        names the folder the file is staged in (default: the rows' own ``run_id``)."""
        typed = self.typed(table, rows)
        if run_id is None and "run_id" in typed.column_names and typed.num_rows:
            run_id = typed.column("run_id")[0].as_py()
        try:
            self.tables.ensure(table, SCHEMAS[table])
            staged = self.tables.stage(table, typed, run_id=run_id, unit=unit)
        except DamagedTable:  # its own one line: the log, not the disk, is the trouble
            raise
        except TableError as exc:
            raise WarehouseWriteError(self._p("tables", table), OSError(13, str(exc))) from exc
        except OSError as exc:
            if isinstance(exc, WarehouseWriteError):
                raise
            raise WarehouseWriteError(self._p("tables", table), exc) from exc
        if self.deferred:
            self._pending.append(staged)
        else:
            self.commit([staged], run_id=run_id)
        return staged

    def pending_mark(self) -> int:
        """Where the pending list stands (for :meth:`discard_pending`)."""
        return len(self._pending)

    def discard_pending(self, mark: int) -> None:
        """Forget the files staged since ``mark`` (a unit written in part: never committed, left to vacuum)."""
        del self._pending[mark:]

    def take_pending(self) -> list[StagedFile]:
        """The files staged while :attr:`deferred`, not yet committed (handed over: the list is emptied)."""
        out, self._pending = self._pending, []
        return out

    @contextmanager
    def deferring(self) -> Iterator[Warehouse]:
        """Stage every write inside the block, then commit them all as one batch (or none, if the block raised)."""
        if self.deferred:  # already deferred: the files go with whoever commits the outer batch
            yield self
            return
        self.deferred = True
        try:
            yield self
            self.deferred = False
            self.commit(self.take_pending())
        finally:
            self.deferred = False
            self._pending = []

    def commit(
        self,
        files: Iterable[StagedFile],
        *,
        run_id: str | None = None,
        batch: int | None = None,
        operation: str = "write",
    ) -> None:
        """Commit staged ``files``: first the manifest rows of all of them (their sha256), then each table's files
        as one transaction per table, ``metrics`` last — a unit's rows in every other table are committed before the
        rows that make it done, so a batch interrupted half-way leaves units to recompute, never a done unit without
        its detail rows. Each commit's info names the run, the batch and a commit id (a retried commit that had in
        fact landed is recognised, never committed twice)."""
        files = list(files)
        if not files:
            return
        by_table = group_by_table(files)
        recorded = [f for f in files if f.table != MANIFEST_TABLE]
        try:
            if recorded:
                rows = self.typed(MANIFEST_TABLE, manifest_rows(recorded, run_id))
                self.tables.ensure(MANIFEST_TABLE, SCHEMAS[MANIFEST_TABLE])
                by_table.setdefault(MANIFEST_TABLE, []).insert(
                    0, self.tables.stage(MANIFEST_TABLE, rows, run_id=run_id)
                )
            for table in sorted(by_table, key=lambda t: (t != MANIFEST_TABLE, t == "metrics", t)):
                meta = {"evalfarm.run_id": run_id, "evalfarm.batch": batch, "evalfarm.operation": operation,
                        "evalfarm.commit": uuid.uuid4().hex}  # fmt: skip
                self.tables.ensure(table, SCHEMAS[table]) if table in SCHEMAS else None
                self.tables.commit(table, by_table[table], metadata=meta)
        except DamagedTable:
            raise
        except TableError as exc:
            raise WarehouseWriteError(self._p("tables"), OSError(5, str(exc))) from exc

    def checkpoint(self, tables: Iterable[str] | None = None, *, every: int = 10) -> list[str]:
        """Write a Delta checkpoint of each table (or of ``tables``) whose log has ``every`` or more commits past its
        last one: a reader then reads one Parquet file and a few commits instead of every commit since (on an object
        store, a request each). Returns the tables checkpointed; a table that cannot be (a concurrent checkpoint)
        is left for the next time."""
        done = []
        for table in tables if tables is not None else table_schemas():
            try:
                if not self.tables.exists(table):
                    continue
                dt = self.tables.open(table)
                if int(dt.version()) - self.tables.last_checkpoint(table) >= every:
                    self.tables.snapshot(table)  # every path validated first: a checkpoint copies what the log says
                    dt.create_checkpoint()
                    done.append(table)
            except Exception as exc:  # a best-effort speed-up, never a run's failure
                log.info("no checkpoint of %s (%s)", table, exc)
        return done

    def write_model(self, row: dict[str, Any]) -> StagedFile:
        return self.write("models", [row])

    def write_run_event(self, run_id: str, event: str, **fields: Any) -> StagedFile:
        row = {"run_id": run_id, "event": event, "at": now(), **fields}
        return self.write("runs", [row], run_id=run_id)

    def write_units(self, run_id: str, rows: list[dict[str, Any]]) -> StagedFile | None:
        """Per-unit timing rows (one file per batch; the scheduler writes them as units finish)."""
        if not rows:
            return None
        return self.write("units", [{"run_id": run_id, **r} for r in rows], run_id=run_id)

    def write_failure(
        self, run_id: str, model: str | None, task: str | None, stage: str, error: str, detail: str = ""
    ) -> StagedFile:
        row = {
            "run_id": run_id,
            "model": model,
            "task": task,
            "stage": stage,
            "error": error,
            "detail": detail,
            "created_at": now(),
        }
        return self.write("failures", [row], run_id=run_id)

    # -- completion -----------------------------------------------------------------------------------------
    def done(self, units: Sequence[UnitKey], *, max_age: float = 0.0) -> list[bool]:
        """Whether each of ``units`` is computed: its (model, task, fingerprint) has committed ``metrics`` rows (one
        read of the table's newest snapshot, incremental after the first; ``max_age``: reuse a read that young)."""
        if not units or self.layout() != "delta":
            return [False] * len(units)
        index = self._done.refresh(max_age)
        return [(u.model, u.task, u.fingerprint) in index for u in units]

    def is_done(self, unit: UnitKey, *, since: float | None = None, max_age: float = 0.0) -> bool:
        """Whether ``unit`` is computed (with ``since``: and was computed at or after that wall clock time, for a
        ``--force`` run asking whether another run recomputed it meanwhile)."""
        if self.layout() != "delta":
            return False
        stamp = self._done.refresh(max_age).get((unit.model, unit.task, unit.fingerprint))
        return stamp is not None and (since is None or stamp >= since)

    # -- file I/O -------------------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def mtime(self, path: str) -> float | None:
        info = self.fs.get_file_info(path)
        return None if info.type == pafs.FileType.NotFound or info.mtime is None else info.mtime.timestamp()

    def list_files(self, folder: str, suffix: str = ".parquet") -> list[str]:
        """Visible regular files (no hidden temp files, no links) directly in ``folder``, sorted; [] when none."""
        if self.local:
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                return []
            return sorted(
                f"{folder}/{e.name}" for e in entries
                if e.name.endswith(suffix) and not e.name.startswith(".") and e.is_file(follow_symlinks=False)
            )  # fmt: skip
        sel = pafs.FileSelector(folder, recursive=False, allow_not_found=True)
        return sorted(
            i.path for i in self.fs.get_file_info(sel) if i.path.endswith(suffix) and not i.base_name.startswith(".")
        )

    def write_table(self, table: pa.Table, path: str, **kwargs: Any) -> str:
        """A plain Parquet file at ``path``, published atomically (text-store shards: outside the Delta tables); on a
        local disk through no link (:func:`write_inside`)."""
        if self.local and path.startswith(self.base + "/"):
            try:
                write_inside(self.base, self.relative(path), lambda f: pq.write_table(table, f, **kwargs))
            except OSError as exc:
                raise WarehouseWriteError(path, exc) from exc
            return path
        return os.fspath(atomic_write_table(table, path, filesystem=self.fs, **kwargs))

    def read_table(self, path: str) -> pa.Table:
        with self.open_input(path) as src:
            return pq.read_table(src)

    def read_columns(self, path: str, columns: list[str]) -> pa.Table:
        """``columns`` of one data file (a column the file lacks: null)."""
        with self.open_input(path) as src:
            f = pq.ParquetFile(src)
            have = [c for c in columns if c in f.schema_arrow.names]
            t = f.read(columns=have)
        for c in columns:
            if c not in have:
                t = t.append_column(c, pa.nulls(t.num_rows))
        return t.select(columns)

    def open_input(self, path: str) -> pa.NativeFile:
        """A file of the warehouse opened for reading: on a local disk only a regular file inside the root, opened
        without following a final symlink and without blocking (a FIFO planted in the warehouse is refused, not
        waited on); on an object store the object itself."""
        if not self.local:
            return self.fs.open_input_file(path)
        return pa.PythonFile(open(safe_open(path, self.base), "rb", closefd=True), mode="r")

    def relative(self, path: str) -> str:
        """``path`` (inside ``self.fs``) relative to the root: what a manifest records (a moved root still checks)."""
        return path[len(self.base) + 1 :] if path.startswith(self.base + "/") else path

    # -- snapshots and reads --------------------------------------------------------------------------------
    def snapshot(
        self, as_of: AsOfArg = None, *, tables: Iterable[str] | None = None, leave_out_damaged: bool = False
    ) -> dict[str, Snapshot]:
        """Every table's snapshot (or ``tables``'): the newest (``as_of`` None), a run's (its id: the versions its
        end event recorded, or for a run that never ended the state at its last commit) or the state at a time (a
        ``datetime``, or an ISO 8601 text). Tables that did not exist then are empty snapshots. A table whose log
        cannot be trusted raises :class:`DamagedTable`, or with ``leave_out_damaged`` (readers) is an empty snapshot,
        with its error in :attr:`damaged` and a warning naming it: the other tables stay readable."""
        from concurrent.futures import ThreadPoolExecutor

        from evalfarm.warehouse.history import resolve_as_of

        point = resolve_as_of(self, as_of) if as_of is not None else None

        def one(name: str) -> Snapshot | DamagedTable:
            try:
                if point is None:
                    return self.tables.snapshot(name)
                if point.versions is not None and name in point.versions:
                    version = point.versions[name]
                    return self.tables.snapshot(name, version) if version is not None else Snapshot(name, None)
                return self.tables.snapshot(name, as_of=point.at)
            except DamagedTable as exc:
                if not leave_out_damaged:
                    raise
                return exc

        names = list(table_schemas()) if tables is None else [t for t in table_schemas() if t in set(tables)]
        if len(names) <= 1:
            got = {n: one(n) for n in names}
        else:
            with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:  # each a log read: on a store, latency
                got = dict(zip(names, pool.map(one, names), strict=True))
        damaged = tuple(v for v in got.values() if isinstance(v, DamagedTable))
        if leave_out_damaged:
            self.damaged = damaged
        for exc in damaged:
            if str(exc) not in _WARNED:  # once a process: a command connects many times
                _WARNED.add(str(exc))
                log.warning("%s: left out of the views (the other tables are read)", exc)
        return {n: Snapshot(n, None) if isinstance(v, DamagedTable) else v for n, v in got.items()}

    def connect(
        self,
        *,
        read_only: bool = True,
        memory_limit: str | None = None,
        as_of: AsOfArg = None,
        needs: Sequence[str] | None = None,
    ) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the views of ``sql/`` over this warehouse's snapshot (the newest, or ``as_of``:
        see :meth:`snapshot`): every view, or (``needs``: the queries the connection is for) only the views and
        macros those name and what they read in turn, with only the snapshots of the tables those read
        (:func:`~evalfarm.warehouse.query.needed_statements`: ``board`` reads one table's log, not eleven).

        Each table a view reads is bound once, as one relation over exactly the Parquet files its Delta snapshot
        names (no folder is listed), plus a private typed empty file so every column exists; ``metrics`` reads the
        metrics table's current rows (:mod:`~evalfarm.warehouse.current`). Read-only (the default, and what
        ``evalfarm sql`` uses) locks the connection down before any view exists: only files under the warehouse root
        can be opened,
        external access and extension installs are off, and the configuration is locked so a query cannot lift
        those limits. A local warehouse is then read through a read-only filesystem (``local-ro://``,
        :meth:`_reader`) that opens regular files only, so even a statement run on the connection directly cannot
        write into it, nor follow a link out of it. An object-store warehouse is read through this warehouse's own
        pyarrow filesystem, registered with DuckDB and confined to the prefix (``prefix_filesystem``: no extension
        to install), with credentials and endpoint from the usual AWS_* / GCS environment variables.
        ``memory_limit``: DuckDB's memory cap (``"4GB"``; None: DuckDB's default). A layout-1 warehouse is read as
        it was written (folders globbed), without history.
        """
        layout = self.layout()
        if layout == "empty":
            raise FileNotFoundError(f"no warehouse at {self.uri} (run `evalfarm run --warehouse {self.uri}` first)")
        if layout == "migrating":
            raise LegacyWarehouse(self.uri, migrating=True)
        if layout == "legacy":
            if as_of is not None:
                raise ValueError(
                    f"{LegacyWarehouse(self.uri)} (a layout-1 warehouse keeps no snapshots to go back to)"
                )
            from evalfarm.warehouse.legacy import legacy_connect

            return legacy_connect(self, read_only=read_only, memory_limit=memory_limit)
        tables = None if needs is None else sorted(set().union(*(st.reads for st in needed_statements(
            view_sources(), needs))))  # fmt: skip
        snaps = self.snapshot(as_of, tables=tables, leave_out_damaged=True)
        files = {t: [f.path for f in s.files] for t, s in snaps.items()}
        try:
            return self._connect(read_only, files, snaps, memory_limit, needs)
        except duckdb.Error:  # one unreadable file breaks every view over its table: leave such files out
            self.excluded = tuple(self.scan(quarantine=False, snapshots=snaps))
            if not self.excluded:
                raise
        bad = {q.path for q in self.excluded}
        return self._connect(read_only, {t: [p for p in fs if p not in bad] for t, fs in files.items()}, snaps,
                             memory_limit, needs)  # fmt: skip

    def _connect(
        self,
        read_only: bool,
        files: dict[str, list[str]],
        snaps: dict[str, Snapshot],
        memory_limit: str | None,
        needs: Sequence[str] | None = None,
    ) -> duckdb.DuckDBPyConnection:
        from evalfarm.warehouse.current import current_split

        # a typed empty file for the tables the connection binds only: a board binds one (each written once a process)
        stand_ins = {
            name: private_schema_file(name, schema) for name, schema in table_schemas().items() if name in files
        }
        known = {f.path: (f.size, f.modified_ms) for s in snaps.values() for f in s.files}
        root, remote, duck_path = self._reader(read_only)
        split = None
        if "metrics" in snaps:
            listed = set(files.get("metrics", ()))
            now, pending = current_split(snaps["metrics"], self.tables.folder("metrics"))
            split = ([p for p in now if p in listed], [p for p in pending if p in listed])
        return open_connection(
            root,
            read_only=read_only,
            remote=remote,
            files=files,
            duck_path=duck_path,
            memory_limit=memory_limit,
            schema_files=stand_ins,
            known=known,
            local_root=self.base if self.local else None,
            current=split,
            needs=needs,
            read_small=self.read_files if read_only else None,
        )

    def read_files(self, paths: Sequence[str]) -> pa.Table:
        """Every row of the data files ``paths`` (many small ones: a table mid-run) as one table, the columns of
        files of older shapes united by name (a column a file lacks: null). A local file is read only as a regular
        file inside the warehouse, through its folder reached without following a link (one folder descriptor for
        the files it holds: :func:`~evalfarm.warehouse.base.open_folder_inside`); an object store's through its
        filesystem. Each file's bytes are read at once and decoded without a thread pool (``pq.read_table`` built a
        dataset and threads for each: 1.3 ms a file, measured)."""
        parts = [pq.ParquetFile(pa.BufferReader(body)).read(use_threads=False) for body in self._bodies(paths)]
        return pa.concat_tables(parts, promote_options="permissive") if parts else pa.Table.from_pydict({})

    def _bodies(self, paths: Sequence[str]) -> Iterator[bytes]:
        if not self.local:
            for path in paths:
                with self.fs.open_input_file(path) as src:
                    yield bytes(src.read())
            return
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        folders: dict[str, int] = {}
        try:
            for path in paths:
                rel = self.relative(path)
                if rel == path:
                    raise PermissionError(f"{path} is outside the warehouse {self.base}")
                folder, _, name = rel.rpartition("/")
                if folder not in folders:
                    folders[folder] = open_folder_inside(self.base, folder)
                yield _read_regular(name, folders[folder], flags, path)
        finally:
            for fd in folders.values():
                os.close(fd)

    def _reader(self, read_only: bool) -> tuple[str, pafs.FileSystem | None, Callable[[str], str]]:
        """(root, filesystem, path mapper) DuckDB reads this warehouse through (see :func:`open_connection`).

        A read-only connection to a local warehouse reads it as an object-store warehouse is read: through a
        read-only filesystem of its own (``local-ro://…``, :func:`prefix_filesystem` over the local disk), with
        DuckDB's own local filesystem closed by the lock. DuckDB's lock allows writes inside the allowed directory,
        so a library user's ``COPY … TO`` / ``EXPORT DATABASE`` / ``write_parquet`` on ``connect()`` would
        otherwise have landed in the warehouse (``query`` and ``evalfarm sql`` check statements as well)."""
        if not self.local:
            return self.duckdb_root, self.fs, self._duck_path
        if not read_only:
            return self.base, None, lambda path: path

        def read_only_path(path: str) -> str:
            return f"{LOCAL_READ_ONLY_SCHEME}://{path.lstrip('/')}"

        return read_only_path(self.base), pafs.SubTreeFileSystem("/", pafs.LocalFileSystem()), read_only_path

    def query(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
        as_of: AsOfArg = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> pa.Table:
        """Run one read-only statement (SELECT / WITH / FROM / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN) on the views
        (of the newest snapshot, or ``as_of``: a run id or a time, see :meth:`snapshot`).

        The statement is checked before anything is opened (:func:`check_read_only`), and runs on a locked-down
        connection (:meth:`connect`); exactly the statement that was checked is executed. It stops after
        ``timeout_s`` (``TimeoutError``), at Ctrl-C (within a second), past ``memory_limit`` (``MemoryError``), and
        past ``max_rows`` or ``max_bytes`` of result (``ResultTooLarge``); each left None takes its environment
        variable, else the default (:class:`QueryLimits`). A read that met a
        file removed meanwhile (a compaction vacuumed) runs again on a fresh connection, up to
        :data:`QUERY_ATTEMPTS` times. A query ``as_of`` a snapshot pins it while it runs
        (:func:`~evalfarm.warehouse.maintenance.pinned`): a vacuum then keeps its files.
        """
        (table,) = self.queries([sql], timeout_s=timeout_s, memory_limit=memory_limit, as_of=as_of,
                                max_rows=max_rows, max_bytes=max_bytes)  # fmt: skip
        return table

    @contextmanager
    def session(
        self,
        needs: Sequence[str],
        *,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> Iterator[ReadSession]:
        """A read-only connection for several queries asked one after the other, each depending on the one before
        (``evalfarm status``: which run, then its workers, then its failures): one connection (one snapshot, the
        views and tables of ``needs``, the queries it may run, bound once), closed at the block's end. Each
        query is checked and limited as :meth:`query`'s."""
        for sql in needs:
            check_read_only(sql)
        limits = QueryLimits.resolve(timeout_s, memory_limit, max_rows, max_bytes)
        session = ReadSession(lambda: self.connect(memory_limit=limits.memory_limit, needs=needs), limits)
        try:
            yield session
        finally:
            session.close()

    def queries(
        self,
        sqls: Sequence[str],
        *,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
        as_of: AsOfArg = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> list[pa.Table]:
        """Run several read-only statements (each as :meth:`query` runs one, under the same limits each) on one
        connection to one snapshot, with the views and tables they need bound once: what a reader that asks several
        questions at a time (``evalfarm status``, each refresh of ``--watch``) uses. Every statement is checked
        before anything is opened."""
        statements = [check_read_only(sql) for sql in sqls]
        limits = QueryLimits.resolve(timeout_s, memory_limit, max_rows, max_bytes)

        def run() -> list[pa.Table]:
            return read_again_if_replaced(
                lambda: self.connect(memory_limit=limits.memory_limit, as_of=as_of, needs=statements),
                lambda con: [run_limited(con, statement, limits) for statement in statements],
                "warehouse query",
            )

        if as_of is None:
            return run()
        from evalfarm.warehouse.pins import pinned

        with pinned(self, as_of):
            return run()

    # -- verification and quarantine ------------------------------------------------------------------------
    # A truncated Parquet file (a full disk, a copy cut short, a crash outside the atomic write) has no footer:
    # DuckDB then fails every view over its table, and a unit whose metrics rows merely exist would be skipped.
    # `scan` checks every data file of every table's snapshot and every text-store shard once (footer, row count),
    # remembering what it checked in VERIFIED_MANIFEST by (size, mtime): a no-op rerun stats files, it does not
    # reread them. A bad data file is removed from its table (a commit) and moved to <root>/quarantine/<run>/<its
    # path> with a .why.txt beside it; the units whose rows it held lose their metrics rows too (so they are
    # recomputed, not skipped). Views skip unreadable files.
    excluded: tuple[Quarantined, ...] = ()
    """Files :meth:`connect` left out of the views because they could not be read (not moved: it is read-only)."""
    damaged: tuple[DamagedTable, ...] = ()
    """Tables :meth:`connect` left out of the views because their logs cannot be trusted (:class:`DamagedTable`)."""

    def check_root(self) -> None:
        """A one-line error for a warehouse path that is an existing file (``mkdir`` would fail with a traceback)."""
        if self.local and os.path.exists(self.base) and not os.path.isdir(self.base):
            raise NotADirectoryError(
                f"warehouse {self.base} is a file, not a directory: pass --warehouse a folder (a new one, or one "
                "that `evalfarm run` filled)"
            )

    @property
    def duckdb_root(self) -> str:
        """The root as DuckDB reads it, and the one prefix a read-only connection may open (``lock_down``): the
        local directory, or ``scheme://bucket/prefix`` without pyarrow's ``?options``."""
        return self._duck_path(self.base)

    def _duck_path(self, path: str) -> str:
        """``path`` (inside ``self.fs``) as DuckDB opens it."""
        return path if self.local else f"{str(self.root).split('://', 1)[0]}://{path}"

    def _walk(self, folder: str, *, files: bool = False) -> list[tuple[str, int, int | None]]:
        """(path, size, mtime in ns) of every visible Parquet file under ``folder`` (hidden temp files and anything
        that is not a regular file or a folder — links, FIFOs — left out; with ``files``, those are listed with
        size -1 so a caller that expects a file there can tell it is not one)."""
        out: list[tuple[str, int, int | None]] = []
        if self.local:
            rel = self.relative(folder)
            try:  # from the root, no link followed: a folder replaced by a link is not walked into
                entries = walk_inside(self.base, rel, skip=lambda name: name.startswith(".") or name == "_delta_log")
            except (PermissionError, NotADirectoryError):
                return out
            for e in entries:
                if not e.path.endswith(".parquet"):
                    continue
                if e.kind == "file":
                    out.append((f"{folder}/{e.path}", e.size, e.mtime_ns))
                elif files:
                    out.append((f"{folder}/{e.path}", -1, None))
            return out
        sel = pafs.FileSelector(folder, recursive=True, allow_not_found=True)
        for i in self.fs.get_file_info(sel):
            if i.type == pafs.FileType.File and i.path.endswith(".parquet") and "/." not in i.path[len(folder) :]:
                out.append((i.path, int(i.size or 0), i.mtime_ns))
        return out

    def file_problem(self, path: str) -> str | None:
        """Why ``path`` is not a whole warehouse file, or None: a Parquet footer that parses and a row count its
        columns agree with; a text-store shard also needs rows and its ``text`` / ``embedding`` / ``oov`` columns."""
        rel = self.relative(path).split("/")
        try:
            with self.open_input(path) as src:
                f = pq.ParquetFile(src)
                meta = f.metadata
                names = set(f.schema_arrow.names)
                first = f.schema_arrow.names[0] if names else None
                if rel[0] == "embeddings":
                    if meta.num_rows == 0 or not {"text", "embedding", "oov"} <= names:
                        return "a text-store shard without rows or without text / embedding / oov columns"
                    first = "text"
                if first is not None and len(f.read(columns=[first]).column(0)) != meta.num_rows:
                    return "the footer's row count differs from the data's"
        except (pa.ArrowException, OSError, ValueError) as exc:
            text = str(exc).strip()
            return f"unreadable Parquet ({text.splitlines()[0] if text else type(exc).__name__})"
        return None

    def _verified(self) -> dict[str, list[int]]:
        try:
            data = json.loads(self._get(self._p(VERIFIED_MANIFEST)))
        except (OSError, ValueError):
            return {}
        files = data.get("files") if isinstance(data, dict) and data.get("version") == 1 else None
        return files if isinstance(files, dict) else {}

    def _save_verified(self, files: dict[str, list[int]]) -> None:
        """Best effort (it is a cache: a lost update costs a reread next time, never a wrong answer)."""
        body = json.dumps({"version": 1, "files": files}, separators=(",", ":")).encode()
        try:
            self._put(self._p(VERIFIED_MANIFEST), body, fsync=False)
        except OSError:
            pass

    def scan(
        self, *, quarantine: bool = True, run_id: str | None = None, snapshots: dict[str, Snapshot] | None = None
    ) -> list[Quarantined]:
        """Check every data file of every table (``snapshots``, default the newest) and every text-store shard not
        checked before in its current state (see :meth:`file_problem`); with ``quarantine`` remove bad data files
        from their tables (with the metrics rows of every unit that lost rows) and move bad files aside; return them
        (``moved_to`` is None when not moved)."""
        if self.layout() != "delta":
            return []
        known = self._verified()
        seen: dict[str, list[int]] = {}
        bad: dict[str, str] = {}
        snaps = snapshots if snapshots is not None else {n: self.tables.snapshot(n) for n in table_schemas()}
        on_disk = {p: (size, mtime) for t in snaps for p, size, mtime in self._walk(self.tables.folder(t), files=True)}
        candidates: list[tuple[str, int, int | None]] = []
        for s in snaps.values():
            for f in s.files:
                size, mtime = on_disk.get(f.path, (-1, None))
                if size != f.size:  # gone, edited, cut short, or not a regular file: not what the log recorded
                    bad[f.path] = _size_problem(f.size, size)
                else:
                    candidates.append((f.path, size, mtime))
        candidates += self._walk(self._p("embeddings"))
        for path, size, mtime in candidates:
            rel = self.relative(path)
            stamp = [size, mtime] if mtime is not None else None
            if stamp is not None and known.get(rel) == stamp:
                seen[rel] = stamp
                continue
            why = self.file_problem(path)
            if why is None:
                if stamp is not None:
                    seen[rel] = stamp
            else:
                bad[path] = why
        units = self._units_of(bad) if bad else {}
        if not quarantine:
            return [Quarantined(p, None, why, units.get(p, ())) for p, why in sorted(bad.items())]
        moved = self._quarantine_data(bad, units, snaps, run_id)
        if seen != known:
            self._save_verified(seen)
        return moved

    def _units_of(self, paths: Iterable[str]) -> dict[str, tuple[tuple[str, str], ...]]:
        """(model, task) of the units whose rows each data file holds, from its manifest row."""
        index = manifest_index(self)
        out: dict[str, tuple[tuple[str, str], ...]] = {}
        for p in paths:
            row = index.get(self.relative(p))
            if row is not None:
                out[p] = tuple(sorted({(u[0], u[1]) for u in row.units}))
        return out

    def _quarantine_data(
        self,
        bad: dict[str, str],
        units: dict[str, tuple[tuple[str, str], ...]],
        snaps: dict[str, Snapshot],
        run_id: str | None,
    ) -> list[Quarantined]:
        """Remove the bad data files from their tables, drop the metrics rows of the units that lost rows, move the
        files aside."""
        entries = {f.path: (name, f) for name, s in snaps.items() for f in s.files}
        by_table: dict[str, list[FileEntry]] = {}
        for path in bad:
            if path in entries:
                by_table.setdefault(entries[path][0], []).append(entries[path][1])
        index = manifest_index(self) if by_table else {}
        lost: set[tuple[str, str, str]] = set()
        for table, fs in by_table.items():
            for f in fs if table != "metrics" else ():  # a metrics file's units go with it
                row = index.get(self.relative(f.path))
                lost |= {(u[0], u[1], u[2]) for u in (row.units if row is not None else ())}
        for table, fs in by_table.items():
            self.tables.commit(table, [], removes=fs, metadata={"evalfarm.operation": "quarantine",
                                                               "evalfarm.run_id": run_id})  # fmt: skip
        if lost:
            from evalfarm.warehouse.current import drop_units

            drop_units(self, lost, run_id=run_id)
        return [self.quarantine(p, why, run_id, units=units.get(p, ())) for p, why in sorted(bad.items())]

    def quarantine(
        self, path: str, why: str, run_id: str | None = None, *, units: tuple[tuple[str, str], ...] = ()
    ) -> Quarantined:
        """Move ``path`` to ``<root>/quarantine/<run_id or time>/<its path>`` with ``<name>.why.txt`` beside it.

        Only a regular file inside the warehouse moves, to a destination inside it: on a local disk the move walks
        both folders from the root without following a link and renames between their descriptors
        (:func:`~evalfarm.warehouse.base.move_inside`), so a folder replaced by a link (``tables/metrics/data ->
        /home/you``) moves nothing of what it leads to. Anything else stays where it is (``moved_to`` None, the
        reason saying why)."""
        rel = self.relative(path)
        dest_rel = f"{QUARANTINE_DIR}/{run_id or new_run_id()}/{rel}"
        dest = self._p(dest_rel)
        note = f"{rel}: {why}\n".encode()
        try:
            if rel == path:
                raise PermissionError(f"{path} is not inside the warehouse {self.base}")
            if self.local:
                move_inside(self.base, rel, dest_rel, note=note)
            else:
                relative_parts(rel), relative_parts(dest_rel)  # no "..": an object store resolves it
                self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
                self.fs.move(path, dest)
                with self.fs.open_output_stream(dest + ".why.txt") as out:
                    out.write(note)
        except FileNotFoundError:  # another process moved it first
            return Quarantined(path, None, why, units)
        except PermissionError as exc:  # a link, a FIFO, a folder, or a link on the way: never followed, never moved
            return Quarantined(path, None, f"{why}; not moved: {exc}", units)
        return Quarantined(path, dest, why, units)


def _read_regular(name: str, folder_fd: int, flags: int, shown: str) -> bytes:
    """The bytes of ``name`` in the folder ``folder_fd``, when it is a regular file (opened without following a link
    and without waiting on a FIFO, as :func:`~evalfarm.warehouse.base.safe_open` opens a file)."""
    try:
        fd = os.open(name, flags, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PermissionError(f"{shown} is a symbolic link; warehouse readers open regular files only") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{shown} is not a regular file; warehouse readers open regular files only")
        chunks, offset = [], 0
        while offset < st.st_size:
            chunk = os.pread(fd, st.st_size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _size_problem(logged: int, actual: int) -> str:
    if actual < 0:
        return "missing, or not a regular file (a link, a FIFO): the table's log names a data file here"
    return f"{actual} bytes where the table's log recorded {logged}: edited or cut short after its commit"


def embeddings_table(
    text_ids: list[str], texts: list[str], emb: np.ndarray, oov: np.ndarray, metadata: dict[str, Any]
) -> pa.Table:
    """A text-store shard: ``FixedSizeList<float32>[dim]`` vectors; OOV rows are null (a scorer's preprocessing
    protocol decides what they become). ``metadata`` holds no run id or time: a shard's bytes depend on its content
    only, so two runs that embed the same texts write the same file."""
    dim = emb.shape[1]
    flat = pa.array(np.ascontiguousarray(emb, dtype=np.float32).reshape(-1), type=pa.float32())
    mask = pa.array(oov.astype(bool))
    values = pa.FixedSizeListArray.from_arrays(flat, dim, mask=mask)
    table = pa.table(
        {
            "text_id": pa.array(text_ids, pa.string()),
            "text": pa.array(texts, pa.string()),
            "embedding": values,
            "oov": pa.array(oov.astype(bool)),
        }
    )
    meta = {
        k.encode(): (v if isinstance(v, str) else json.dumps(v, sort_keys=True)).encode() for k, v in metadata.items()
    }
    return table.replace_schema_metadata(meta)


def read_embeddings(
    path: str | os.PathLike[str], *, filesystem: pafs.FileSystem | None = None
) -> tuple[list[str], np.ndarray, np.ndarray, dict[str, Any]]:
    """(texts, float32 matrix with OOV rows as zeros, oov mask, metadata) of a text-store shard."""
    t = pq.read_table(path, filesystem=filesystem)
    col = t.column("embedding").combine_chunks()
    dim = col.type.list_size
    oov = np.asarray(t.column("oov").to_numpy(zero_copy_only=False), dtype=bool)
    flat = col.flatten().to_numpy(zero_copy_only=False)  # values of non-null rows only when nulls exist
    emb = np.zeros((len(t), dim), dtype=np.float32)
    valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    emb[valid] = flat.reshape(-1, dim)
    raw = t.schema.metadata or {}
    meta: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.decode()
        if key.startswith("ARROW") or key == "pandas":
            continue
        try:
            meta[key] = json.loads(v)
        except json.JSONDecodeError:
            meta[key] = v.decode()
    return t.column("text").to_pylist(), emb, oov, meta


__all__ = [
    "FORMAT_FILE",
    "MANIFEST_TABLE",
    "QUARANTINE_DIR",
    "SCHEMA_VERSION",
    "STALE_TEMP_SECONDS",
    "VERIFIED_MANIFEST",
    "LegacyWarehouse",
    "Quarantined",
    "ReadSession",
    "Warehouse",
    "WarehouseWriteError",
    "atomic_write_table",
    "embeddings_table",
    "empty_table",
    "manifest_rows",
    "new_run_id",
    "now",
    "read_again_if_replaced",
    "read_embeddings",
    "replaced_under_read",
    "resolve_filesystem",
    "safe_open",
    "sweep_temp_files",
    "unit_tables",
]
