"""The warehouse's files: layout, atomic writes, the scan for damaged files, quarantine (the :class:`Warehouse`).

See :mod:`evalfarm.warehouse` for the layout. Schemas come from :mod:`evalfarm.warehouse.schemas` (core tables and
each task kind's detail tables); connections and views from :mod:`evalfarm.warehouse.query`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalfarm import atomic
from evalfarm.cache import with_endpoint
from evalfarm.warehouse.query import (
    QueryLimits,
    check_read_only,
    open_connection,
    private_schema_file,
    run_limited,
)
from evalfarm.warehouse.schemas import SCHEMAS, empty_table, table_schemas, unit_tables

log = logging.getLogger(__name__)


def now() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    """Sortable and unique across concurrent runs: UTC time plus random suffix."""
    return now().strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


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


class WarehouseWriteError(OSError):
    """A warehouse file could not be written (a read-only mount, a full disk, no permission).

    One line that names the path and the reason; the first ``OSError`` is the one reported (cleaning up the temp file
    on a read-only disk fails too, and must not replace it).
    """

    def __init__(self, path: str | os.PathLike[str], cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        self.path = os.fspath(path)
        self.cause = cause

    def __str__(self) -> str:
        why = os.strerror(self.errno) if self.errno else (self.strerror or str(self.cause))
        return f"cannot write {self.path}: {why}; evalfarm needs a writable warehouse with free space"

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (Ray workers) intact
        return (WarehouseWriteError, (self.path, self.cause))


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
a read that met a file replaced under it."""

_REPLACED_MARKS = ("No magic bytes found at end of file", "Failed to read")


def replaced_under_read(exc: BaseException) -> bool:
    """Whether DuckDB's error is what a file replaced between a connection's listing and its read gives. A
    connection lists the warehouse once (:class:`~evalfarm.warehouse.query._Listing`) and a run replaces some files
    whole (a model's row each run, a recomputed unit's metrics): the new file's bytes are then read at the old
    file's size, so its footer is not where the listing said. A fresh connection lists again and reads it whole."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and any(m in text for m in _REPLACED_MARKS)


def read_again_if_replaced(
    open_connection: Callable[[], duckdb.DuckDBPyConnection],
    work: Callable[[duckdb.DuckDBPyConnection], T],
    what: str = "warehouse read",
) -> T:
    """``work(con)`` on a fresh connection, again on a new one when its read met a file a run replaced meanwhile
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
            log.info("%s: a file was replaced while it was read (%s); reading again", what, exc)
        finally:
            if con is not None:
                con.close()
    raise AssertionError("unreachable")  # the loop returns or raises


class Warehouse:
    """A warehouse root: a local directory or a pyarrow filesystem URI (``s3://…``, ``gs://…``, ``file://…``).

    Paths handed out (``embeddings_path``, ``unit_path``) are strings inside ``self.fs``; all I/O goes through
    the methods here so the same code runs on a laptop and against shared storage on a cluster.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.fs, self.base = resolve_filesystem(root)
        self.local = _is_local(self.fs)
        # `root`: a Path on the local filesystem (what users and tests see), else the URI.
        self.root: Path | str = Path(self.base) if self.local else os.fspath(root).rstrip("/")
        self.uri = str(self.root)  # the root as a string: a local path, else the URI itself
        self.check_root()

    def _p(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    # -- layout ---------------------------------------------------------------------------------------------
    def init(self) -> Warehouse:
        """Create the layout; a table's typed empty ``_schema.parquet`` is (re)written when missing or when this
        version of evalfarm added columns, so the views see every column even before a row has one."""
        self._write_schemas()
        if self.local:
            try:
                Path(self._p("embeddings")).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WarehouseWriteError(self._p("embeddings"), exc) from exc
            sweep_temp_files(self.base)
        return self

    def _schema_current(self, path: str, schema: pa.Schema) -> bool:
        try:
            return pq.read_schema(path, filesystem=None if self.local else self.fs).equals(schema)
        except (OSError, pa.ArrowInvalid):  # unreadable: rewrite it
            return False

    def store_dir(self, model: str, store_key: str) -> str:
        """A model's text store: one Parquet shard per batch of newly embedded texts."""
        return self._p("embeddings", f"model={model}", f"store={store_key}")

    def stored_texts(self, models: Collection[str] | None = None) -> dict[tuple[str, str], int]:
        """(model, store key) -> texts stored, of every text store with vectors (one listing of ``embeddings/``,
        then each part's Parquet footer; ``models``: only theirs). A complete store embeds nothing on a rerun, a
        partial one (a run stopped mid-model: the parts of ``execute.EMBED_SHARD_TEXTS``) only the rest: the first
        ETA's question."""
        sel = pafs.FileSelector(self._p("embeddings"), recursive=True, allow_not_found=True)
        out: dict[tuple[str, str], int] = {}
        for info in self.fs.get_file_info(sel):
            parts = info.path.split("/")
            hidden = info.base_name.startswith((".", "_"))  # a temp file of a writer, never vectors
            if not info.path.endswith(".parquet") or hidden or len(parts) < 3 or not parts[-3].startswith("model="):
                continue
            key = (parts[-3].removeprefix("model="), parts[-2].removeprefix("store="))
            if models is not None and key[0] not in models:
                continue
            try:
                rows = pq.read_metadata(info.path, filesystem=self.fs).num_rows
            except (OSError, pa.ArrowException):  # unreadable: `verify` quarantines it; here it counts nothing
                rows = 0
            out[key] = out.get(key, 0) + rows
        return out

    def unit_path(self, table: str, model: str, task: str, fingerprint: str) -> str:
        return self._p("tables", table, f"model={model}", f"task={task}", f"{fingerprint}.parquet")

    # -- completion -----------------------------------------------------------------------------------------
    def done_marker(self, unit: Any) -> str:
        """A unit's completion marker: its metrics file, written last and atomically (``execute.write_results``), so
        a killed worker leaves nothing that looks complete. The one definition of "is this unit computed?"."""
        return self.unit_path("metrics", unit.model, unit.task, unit.fingerprint)

    def is_done(self, unit: Any, *, since: float | None = None) -> bool:
        """Whether ``unit`` is computed: its marker exists (with ``since``: and was written at or after that wall
        clock time, for a ``--force`` run asking whether another run recomputed it meanwhile)."""
        path = self.done_marker(unit)
        if since is None:
            return self.exists(path)
        mtime = self.mtime(path)
        return mtime is not None and mtime >= since

    def done(self, units: list[Any]) -> list[bool]:
        """:meth:`is_done` of each of ``units``, in one batch (one listing per table on an object store)."""
        markers = [self.done_marker(u) for u in units]
        present = self.existing(markers)
        return [m in present for m in markers]

    def list_files(self, folder: str, suffix: str = ".parquet") -> list[str]:
        """Visible files (no hidden temp files) directly in ``folder``, sorted; [] when it does not exist."""
        if self.local:
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                return []
            return sorted(f"{folder}/{n}" for n in names if n.endswith(suffix) and not n.startswith("."))
        sel = pafs.FileSelector(folder, recursive=False, allow_not_found=True)
        return sorted(
            i.path for i in self.fs.get_file_info(sel) if i.path.endswith(suffix) and not i.base_name.startswith(".")
        )

    # -- file I/O -------------------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def existing(self, paths: list[str]) -> set[str]:
        """Which of ``paths`` exist: one stat each locally, one listing per table on an object store."""
        if self.local:
            return {p for p in paths if os.path.exists(p)}
        found: set[str] = set()
        for top in {"/".join(p[len(self.base) + 1 :].split("/")[:2]) for p in paths}:
            sel = pafs.FileSelector(self._p(top), recursive=True, allow_not_found=True)
            found.update(i.path for i in self.fs.get_file_info(sel))
        return found & set(paths)

    def mtime(self, path: str) -> float | None:
        info = self.fs.get_file_info(path)
        return None if info.type == pafs.FileType.NotFound or info.mtime is None else info.mtime.timestamp()

    def write_table(self, table: pa.Table, path: str, **kwargs: Any) -> str:
        return os.fspath(atomic_write_table(table, path, filesystem=self.fs, **kwargs))

    def read_table(self, path: str) -> pa.Table:
        return pq.read_table(path, filesystem=None if self.local else self.fs)

    def write_recorded(self, table: pa.Table, path: str) -> Recorded:
        """Write a unit's result file as :meth:`write_table` does (the same bytes), and return the sha256 and size of
        exactly the bytes written, for the run's manifest (:meth:`write_manifest`). The file is serialised in
        memory first: hashing what is published, not a reread that another writer may have replaced meanwhile."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        body = sink.getvalue().to_pybytes()
        if self.local:
            p = Path(path)
            try:
                atomic.write_bytes(p, body)
            except OSError as exc:
                raise WarehouseWriteError(p if p.parent.exists() else p.parent, exc) from exc
        else:
            try:
                with self.fs.open_output_stream(path) as out:
                    out.write(body)
            except OSError as exc:
                raise WarehouseWriteError(path, exc) from exc
        return Recorded(self.relative(path), hashlib.sha256(body).hexdigest(), len(body))

    def relative(self, path: str) -> str:
        """``path`` (inside ``self.fs``) relative to the root: what a manifest records (a moved root still checks)."""
        return path[len(self.base) + 1 :] if path.startswith(self.base + "/") else path

    def write_manifest(self, run_id: str, rows: list[dict[str, Any]]) -> str | None:
        """Record result files a run wrote (``tables/manifests/<run_id>/<uuid>.parquet``): :data:`MANIFEST_TABLE`
        rows (path, sha256, size, table, model, task, fingerprint); ``created_at`` is filled in here."""
        if not rows:
            return None
        at = now()
        rows = [{"run_id": run_id, "created_at": at, **r} for r in rows]
        return self.write(
            MANIFEST_TABLE, rows, self._p("tables", MANIFEST_TABLE, run_id, f"{uuid.uuid4().hex}.parquet")
        )

    # -- writes ---------------------------------------------------------------------------------------------
    def typed(self, table: str, rows: pa.Table | list[dict[str, Any]]) -> pa.Table:
        """``rows`` as ``table``'s schema (its columns, in order, cast)."""
        schema = SCHEMAS[table]
        t = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        return t.select(schema.names).cast(schema)

    def write(self, table: str, rows: pa.Table | list[dict[str, Any]], path: str) -> str:
        return self.write_table(self.typed(table, rows), path)

    def model_path(self, model: str, spec_hash: str) -> str:
        return self._p("tables", "models", f"model={model}", f"{spec_hash}.parquet")

    def write_model(self, row: dict[str, Any]) -> str:
        return self.write("models", [row], self.model_path(row["model"], row["spec_hash"]))

    def write_run_event(self, run_id: str, event: str, **fields: Any) -> str:
        row = {"run_id": run_id, "event": event, "at": now(), **fields}
        return self.write("runs", [row], self._p("tables", "runs", f"{run_id}.{event}.parquet"))

    def write_units(self, run_id: str, rows: list[dict[str, Any]]) -> str | None:
        """Per-unit timing rows (one file per batch; the scheduler writes them as units finish)."""
        if not rows:
            return None
        rows = [{"run_id": run_id, **r} for r in rows]
        return self.write("units", rows, self._p("tables", "units", run_id, f"{uuid.uuid4().hex}.parquet"))

    def write_failure(
        self, run_id: str, model: str | None, task: str | None, stage: str, error: str, detail: str = ""
    ) -> str:
        row = {
            "run_id": run_id,
            "model": model,
            "task": task,
            "stage": stage,
            "error": error,
            "detail": detail,
            "created_at": now(),
        }
        return self.write("failures", [row], self._p("tables", "failures", run_id, f"{uuid.uuid4().hex}.parquet"))

    # -- reads ----------------------------------------------------------------------------------------------
    def connect(self, *, read_only: bool = True, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the views of ``sql/`` over this warehouse.

        Read-only (the default, and what ``evalfarm sql`` uses) locks the connection down before any view
        exists: only files under the warehouse root (a local directory, or the ``s3://`` / ``gs://`` prefix)
        can be opened, external access and extension installs are off, and the configuration is locked so a
        query cannot lift those limits. A local warehouse is then read through a read-only filesystem
        (``local-ro://``, :meth:`_reader`), so even a statement run on the connection directly cannot write into
        it. Statements are checked separately (``check_read_only``): the lock keeps a query inside the warehouse,
        the check keeps it from writing there. An object-store warehouse is read
        through this warehouse's own pyarrow filesystem, registered with DuckDB and confined to the prefix
        (``prefix_filesystem``: no extension to install), with credentials and endpoint from the usual AWS_* / GCS
        environment variables (``AWS_ENDPOINT_URL`` for a store that is not AWS). ``memory_limit``: DuckDB's
        memory cap (``"4GB"``; None: DuckDB's default).
        """
        if not self.exists(self._p("tables")) and not self.exists(self._p("tables", "runs", "_schema.parquet")):
            raise FileNotFoundError(f"no warehouse at {self.uri} (run `evalfarm run --warehouse {self.uri}` first)")
        stand_ins: dict[str, str] = {}
        if read_only:  # never write: a missing or outdated _schema.parquet gets a private stand-in instead
            stand_ins = self._stand_in_schemas()
        else:  # a warehouse written before a table gained a column: its views need the column to exist
            try:
                self._write_schemas()
            except OSError:  # read-only storage: the views of the new columns fail until a run updates it
                pass
        try:
            return self._connect(read_only, {}, memory_limit, stand_ins)
        except duckdb.Error:  # one unreadable file breaks every view over its folder: leave such files out
            self.excluded = tuple(self.scan(quarantine=False))
            if not self.excluded:
                raise
        return self._connect(read_only, self._good_files({q.path for q in self.excluded}), memory_limit, stand_ins)

    def _connect(
        self,
        read_only: bool,
        files: dict[str, list[str]],
        memory_limit: str | None = None,
        stand_ins: dict[str, str] | None = None,
    ) -> duckdb.DuckDBPyConnection:
        """The connection of :meth:`connect`; ``files``: table -> the files its views read instead of the glob;
        ``stand_ins``: table -> a private schema file its views read too (:meth:`_stand_in_schemas`)."""
        listed = dict(files)
        for table in stand_ins or {}:
            if table not in listed:
                listed[table] = sorted(p for p, _, _ in self._walk(self._p("tables", table)))
        root, remote, duck_path = self._reader(read_only)
        return open_connection(
            root,
            read_only=read_only,
            remote=remote,
            files=listed,
            duck_path=duck_path,
            memory_limit=memory_limit,
            schema_files=stand_ins,
        )

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

    def _stand_in_schemas(self) -> dict[str, str]:
        """Table -> a typed empty Parquet file in this process's private temp folder, for each table whose
        ``_schema.parquet`` is missing or outdated: a read-only open sees every column and writes nothing."""
        out: dict[str, str] = {}
        for name, schema in table_schemas().items():
            p = self._p("tables", name, "_schema.parquet")
            if not self.exists(p) or not self._schema_current(p, schema):
                out[name] = private_schema_file(name, schema)
        return out

    def query(self, sql: str, *, timeout_s: float | None = None, memory_limit: str | None = None) -> pa.Table:
        """Run one read-only statement (SELECT / WITH / FROM / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN) on the views.

        The statement is checked before anything is opened (:func:`check_read_only`), and runs on a locked-down
        connection (:meth:`connect`); exactly the statement that was checked is executed. It stops after
        ``timeout_s`` (``TimeoutError``), at Ctrl-C (within a second), and past ``memory_limit`` (``MemoryError``);
        each left None takes its environment variable, else the default (:class:`QueryLimits`). A read that met a
        file a run replaced meanwhile runs again on a fresh connection (:func:`replaced_under_read`), up to
        :data:`QUERY_ATTEMPTS` times: a query during a run sees a consistent warehouse instead of failing.
        """
        statement = check_read_only(sql)
        limits = QueryLimits.resolve(timeout_s, memory_limit)
        return read_again_if_replaced(
            lambda: self.connect(memory_limit=limits.memory_limit),
            lambda con: run_limited(con, statement, limits.timeout_s),
            "warehouse query",
        )

    # -- verification and quarantine (issue #13.6) ----------------------------------------------------------
    # A truncated Parquet file (a full disk, a copy cut short, a crash outside the atomic write) has no footer:
    # DuckDB then fails every view over its folder, and a unit whose metrics file merely exists would be skipped.
    # `scan` checks every file once (footer, row count, a unit file's fingerprint column against its name) and
    # remembers what it checked in VERIFIED_MANIFEST by (size, mtime): a no-op rerun stats files, it does not
    # reread them. A bad file is moved to <root>/quarantine/<run>/<its path> with a .why.txt beside it; a unit
    # that lost a file loses its metrics file too (so it is recomputed, not skipped). Views skip unreadable files.
    excluded: tuple[Quarantined, ...] = ()
    """Files :meth:`connect` left out of the views because they could not be read (not moved: it is read-only)."""

    def check_root(self) -> None:
        """A one-line error for a warehouse path that is an existing file (``mkdir`` would fail with a traceback)."""
        if self.local and os.path.exists(self.base) and not os.path.isdir(self.base):
            raise NotADirectoryError(
                f"warehouse {self.base} is a file, not a directory: pass --warehouse a folder (a new one, or one "
                "that `evalfarm run` filled)"
            )

    def _write_schemas(self) -> None:
        """Each table's empty, typed ``_schema.parquet`` (the views' columns exist before any result does), rewritten
        when the table gained columns since the warehouse was made (its views name the new columns)."""
        for name, schema in table_schemas().items():
            p = self._p("tables", name, "_schema.parquet")
            if not self.exists(p) or not self._schema_current(p, schema):
                self.write_table(empty_table(schema), p)

    @property
    def duckdb_root(self) -> str:
        """The root as DuckDB reads it, and the one prefix a read-only connection may open (``lock_down``): the
        local directory, or ``scheme://bucket/prefix`` without pyarrow's ``?options``."""
        return self._duck_path(self.base)

    def _duck_path(self, path: str) -> str:
        """``path`` (inside ``self.fs``) as DuckDB opens it."""
        return path if self.local else f"{str(self.root).split('://', 1)[0]}://{path}"

    def _walk(self, folder: str) -> list[tuple[str, int, int | None]]:
        """(path, size, mtime in ns) of every visible Parquet file under ``folder`` (hidden temp files excluded)."""
        out: list[tuple[str, int, int | None]] = []
        if self.local:
            stack = [folder]
            while stack:
                try:
                    entries = list(os.scandir(stack.pop()))
                except (FileNotFoundError, NotADirectoryError):
                    continue
                for e in entries:
                    if e.name.startswith("."):
                        continue
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.name.endswith(".parquet"):
                        st = e.stat()
                        out.append((e.path, st.st_size, st.st_mtime_ns))
            return out
        sel = pafs.FileSelector(folder, recursive=True, allow_not_found=True)
        for i in self.fs.get_file_info(sel):
            if i.type == pafs.FileType.File and i.path.endswith(".parquet") and "/." not in i.path[len(folder) :]:
                out.append((i.path, int(i.size or 0), i.mtime_ns))
        return out

    def file_problem(self, path: str) -> str | None:
        """Why ``path`` is not a whole warehouse file, or None. Every file: a Parquet footer that parses and a row
        count its columns agree with. A unit's file (``tables/<table>/model=…/task=…/<fingerprint>.parquet``): a
        ``fingerprint`` column equal to its name, and at least one row for a metrics file. A text-store shard: rows
        and the ``text`` / ``embedding`` columns."""
        rel = path[len(self.base) + 1 :].split("/")
        try:
            f = pq.ParquetFile(path, filesystem=None if self.local else self.fs)
            meta = f.metadata
            names = set(f.schema_arrow.names)
            if len(rel) == 5 and rel[0] == "tables" and rel[2].startswith("model=") and rel[3].startswith("task="):
                fingerprint = rel[4][: -len(".parquet")]
                if rel[1] == "metrics" and meta.num_rows == 0:
                    return "a metrics file with no rows"
                if "fingerprint" not in names:
                    return "no fingerprint column"
                col = f.read(columns=["fingerprint"]).column(0)
                if len(col) != meta.num_rows:
                    return f"the footer says {meta.num_rows} rows, the fingerprint column has {len(col)}"
                found = set(col.unique().to_pylist())
                if found and found != {fingerprint}:
                    return f"fingerprint column {sorted(map(str, found))[:3]} is not the file's unit {fingerprint}"
            elif rel[0] == "embeddings" and rel[-1] != "_schema.parquet":
                if meta.num_rows == 0 or not {"text", "embedding", "oov"} <= names:
                    return "a text-store shard without rows or without text / embedding / oov columns"
                if len(f.read(columns=["text"]).column(0)) != meta.num_rows:
                    return "the footer's row count differs from the text column's"
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"unreadable Parquet ({first})"
        return None

    def _manifest(self) -> dict[str, list[int]]:
        try:
            if self.local:
                with open(self._p(VERIFIED_MANIFEST), encoding="utf-8") as fh:
                    data = json.load(fh)
            else:
                with self.fs.open_input_stream(self._p(VERIFIED_MANIFEST)) as fh:
                    data = json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError):
            return {}
        files = data.get("files") if isinstance(data, dict) and data.get("version") == 1 else None
        return files if isinstance(files, dict) else {}

    def _save_manifest(self, files: dict[str, list[int]]) -> None:
        """Best effort (it is a cache: a lost update costs a reread next time, never a wrong answer)."""
        body = json.dumps({"version": 1, "files": files}, separators=(",", ":")).encode()
        path = self._p(VERIFIED_MANIFEST)
        try:
            if self.local:
                atomic.write_bytes(Path(path), body, fsync=False)
            else:
                with self.fs.open_output_stream(path) as out:
                    out.write(body)
        except OSError:
            pass

    def scan(self, *, quarantine: bool = True, run_id: str | None = None) -> list[Quarantined]:
        """Check every file under ``tables/`` and ``embeddings/`` not checked before in its current state (see
        :meth:`file_problem`); move bad ones to quarantine (``quarantine=True``), with the metrics file of any unit
        that lost a file, and return them (``moved_to`` is None when not moved)."""
        known = self._manifest()
        per_unit = set(unit_tables())
        seen: dict[str, list[int]] = {}
        bad: dict[str, str] = {}
        for top in ("tables", "embeddings"):
            for path, size, mtime in self._walk(self._p(top)):
                rel = path[len(self.base) + 1 :]
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
        for path, why in list(bad.items()):  # a unit without one of its files is not done: recompute it
            parts = path[len(self.base) + 1 :].split("/")
            if len(parts) == 5 and parts[0] == "tables" and parts[1] in per_unit:
                marker = self._p("tables", "metrics", *parts[2:])
                if marker not in bad and self.exists(marker):
                    bad[marker] = f"its unit's {parts[1]} file was unreadable ({why}); the unit is recomputed"
                    seen.pop(marker[len(self.base) + 1 :], None)
        if not quarantine:
            return [Quarantined(p, None, why) for p, why in sorted(bad.items())]
        moved = [self.quarantine(p, why, run_id) for p, why in sorted(bad.items())]
        if seen != known:
            self._save_manifest(seen)
        return moved

    def quarantine(self, path: str, why: str, run_id: str | None = None) -> Quarantined:
        """Move ``path`` to ``<root>/quarantine/<run_id or time>/<its path>`` with ``<name>.why.txt`` beside it."""
        rel = path[len(self.base) + 1 :]
        dest = self._p(QUARANTINE_DIR, run_id or new_run_id(), rel)
        note = f"{rel}: {why}\n".encode()
        try:
            if self.local:
                Path(dest).parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, dest)
                Path(dest + ".why.txt").write_bytes(note)
            else:
                self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
                self.fs.move(path, dest)
                with self.fs.open_output_stream(dest + ".why.txt") as out:
                    out.write(note)
        except FileNotFoundError:  # another process moved it first
            return Quarantined(path, None, why)
        return Quarantined(path, dest, why)

    def _good_files(self, bad: set[str]) -> dict[str, list[str]]:
        """For each table with a file in ``bad``: its other files (what its views read instead of the glob)."""
        out: dict[str, list[str]] = {}
        for table in sorted({p[len(self.base) + 1 :].split("/")[1] for p in bad if "/tables/" in p}):
            out[table] = sorted(p for p, _, _ in self._walk(self._p("tables", table)) if p not in bad)
        return out


MANIFEST_TABLE = "manifests"
"""The table of result files' content hashes (:meth:`Warehouse.write_manifest`; ``evalfarm verify`` reads it)."""


@dataclass(frozen=True)
class Recorded:
    """A result file as written: its path relative to the root, the sha256 (hex) and size of its bytes."""

    path: str
    sha256: str
    size: int


VERIFIED_MANIFEST = "verified-files.json"
"""``<root>/verified-files.json``: the files :meth:`Warehouse.scan` found whole, by (size, mtime in ns)."""
QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True)
class Quarantined:
    """A file that failed :meth:`Warehouse.file_problem`: where it was, where it went (None: left in place), why."""

    path: str
    moved_to: str | None
    reason: str

    @property
    def unit(self) -> tuple[str | None, str | None]:
        """(model, task) named by the file's hive folders (None where it has none)."""
        parts = dict(p.split("=", 1) for p in self.path.split("/") if "=" in p)
        return parts.get("model"), parts.get("task")


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
