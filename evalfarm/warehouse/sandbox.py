"""The SQL sandbox of the warehouse: what keeps a read-only query inside the warehouse, keeps it from writing there,
and bounds what it costs. Used by :mod:`evalfarm.warehouse.query` (the views, the connections) and
:class:`~evalfarm.warehouse.store.Warehouse` (``query``, ``session``, ``queries``).

- **Confinement**: :func:`lock_down` (DuckDB's own file sandbox: one allowed prefix, no external access, no
  extension installs, the configuration locked) and :func:`prefix_filesystem` (the filesystem DuckDB reads an
  object-store or a read-only local warehouse through: no path outside the prefix, no ``.``/``..`` segment, no
  write, no link out, no FIFO);
- **the check**: :func:`check_read_only` lets exactly one query through (SELECT, WITH, FROM, PIVOT, UNPIVOT,
  DESCRIBE, SHOW, SUMMARIZE, or EXPLAIN of one without ANALYZE), and returns the text the caller must execute;
- **limits**: :class:`QueryLimits` (time, DuckDB's memory cap, result rows and bytes; :func:`result_limits` for a
  caller above the warehouse) and :func:`run_limited`, which enforces them (:class:`ResultTooLarge`).

tests/test_security.py attacks each of them.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, NoReturn, TypedDict

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs

if TYPE_CHECKING:
    from fsspec.implementations.arrow import ArrowFSWrapper

from evalfarm.config import (
    DEFAULT_SQL_MAX_BYTES,
    DEFAULT_SQL_MAX_ROWS,
    DEFAULT_SQL_MEMORY_LIMIT,
    DEFAULT_SQL_TIMEOUT_S,
    ENV_VARS,
    check_value,
    parse_size,
)


def glob_escape(path: str) -> str:
    """``path`` as a DuckDB glob that matches exactly it: each ``[``, ``*`` and ``?`` as a one-character class
    (a warehouse at ``wh[1]`` is a path, not the pattern ``wh1``). Every path DuckDB reads is globbed, a listed
    file's too."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in path)


class Entry(TypedDict):
    """One path as fsspec describes it (``ls(detail=True)``, ``info``): what DuckDB's listing reads."""

    name: str
    size: int
    type: str
    mtime: datetime | None


# long: its docstring is the confinement argument; the body builds one class from closures over its arguments
def prefix_filesystem(
    fs: pafs.FileSystem,
    scheme: str,
    prefix: str,
    *,
    read_only: bool = True,
    known: Mapping[str, tuple[int, int]] | None = None,
    local_root: str | None = None,
) -> ArrowFSWrapper:
    """An fsspec filesystem for DuckDB (``register_filesystem``) that serves ``scheme://`` paths from ``fs`` (the
    warehouse's own pyarrow filesystem: the same endpoint and credentials as the run that wrote it, and no DuckDB
    extension to install) and only under ``prefix`` (``bucket/path``).

    DuckDB's own sandbox (:func:`lock_down`) compares a path's text with the allowed prefix and leaves ``..`` to the
    filesystem, which an object store resolves: ``s3://bucket/wh/../other/x`` passes the check and reads
    ``bucket/other/x``. So this filesystem refuses any path with a ``.`` or ``..`` segment, or outside ``prefix``
    (``PermissionError``): the confinement holds even for a path the lock lets through. ``read_only``: it opens
    files for reading only and removes, moves or creates nothing (DuckDB's lock allows writes inside the allowed
    prefix: a library user's ``COPY … TO`` on a read-only connection would otherwise land in the warehouse).

    ``known``: path -> (size, mtime in ms) of every file DuckDB may read (a Delta snapshot's): the listing is built
    from it, with no request to the store. ``local_root``: the warehouse is this local folder, and a file is opened
    only when it is a regular file inside it (:func:`evalfarm.warehouse.base.safe_open`: no link out, no FIFO to
    hang on)."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    root = prefix.strip("/")

    def strip(cls: type, path: object) -> object:  # a path, or a list of them (fsspec)
        if isinstance(path, list):
            return [strip(cls, p) for p in path]
        return _inside(scheme, root, str(path))

    listing = _Listing(fs, root, known)

    def ls(self: ArrowFSWrapper, path: str, detail: bool = False, **kwargs: object) -> list[Entry] | list[str]:
        entries = listing.ls(self._strip_protocol(path))
        return entries if detail else [e["name"] for e in entries]

    def info(self: ArrowFSWrapper, path: str, **kwargs: object) -> Entry:
        return listing.info(self._strip_protocol(path))

    def modified(self: ArrowFSWrapper, path: str) -> datetime | None:
        return listing.info(self._strip_protocol(path))["mtime"]

    def refuse(self: ArrowFSWrapper, path: str, *args: object, **kwargs: object) -> NoReturn:
        raise PermissionError(f"{scheme}://{root} is open read-only")

    def open_read(self: ArrowFSWrapper, path: str, mode: str = "rb", *args: object, **kwargs: object) -> object:
        if read_only and any(c in mode for c in "wax+"):
            refuse(self, path)
        if mode == "rb":
            return _reader(self.fs, str(path), local_root, listing.known_size(str(path)))
        return ArrowFSWrapper._open(self, path, mode, *args, **kwargs)

    def glob(self: ArrowFSWrapper, path: str, **kwargs: object) -> list[str]:
        return listing.glob(str(path).removeprefix(f"{scheme}://"))

    members: dict[str, object] = {"protocol": scheme, "root_marker": "", "cachable": False}
    members.update(_strip_protocol=classmethod(strip), _open=open_read, ls=ls, info=info, modified=modified)
    members.update(glob=glob)
    if read_only:
        members.update({name: refuse for name in ("mkdir", "makedirs", "rm", "rm_file", "rmdir", "mv", "cp_file")})
    return type("WarehouseFileSystem", (ArrowFSWrapper,), members)(fs)


def _reader(fs: pafs.FileSystem, path: str, local_root: str | None, size: int | None = None) -> _SharedReader:
    """A file opened for DuckDB: a local warehouse's only as a regular file inside it, else through ``fs``. With its
    ``size`` known (a snapshot's file) it is opened on its first read: DuckDB opens a file each time a view that
    reads it is bound (a few dozen times a connection) and, with its Parquet metadata cache, reads it once."""
    if size is not None:
        return _LazyReader(fs, path, local_root, size)
    if local_root is not None:
        from evalfarm.warehouse.base import safe_open

        return _LocalReader(safe_open("/" + path.lstrip("/"), local_root))
    return _SharedReader(fs.open_input_file(path))


class _SharedReader:
    """A file open for reading whose position is each thread's own. DuckDB reads one file from several threads
    through one handle, each read a ``seek`` then a ``read`` (two calls, the GIL released between them): with one
    shared position a thread read where another had just sought ("Failed to read 24054 bytes … only 2640 bytes
    returned", or a corrupt page) on a 150-file warehouse. Each read here is ``read_at`` (Arrow's positional read,
    safe across threads) at the calling thread's position."""

    def __init__(self, f: pa.NativeFile) -> None:
        self._f = f
        self._size = f.size()
        self._local = threading.local()

    def _pos(self) -> int:
        return int(getattr(self._local, "pos", 0))

    def seek(self, offset: int, whence: int = 0) -> int:
        self._local.pos = offset + (0, self._pos(), self._size)[whence]
        return self._pos()

    def tell(self) -> int:
        return self._pos()

    def read(self, n: int | None = -1) -> bytes:
        pos = self._pos()
        if n is None or n < 0:
            n = self._size - pos
        data = self._f.read_at(max(0, min(n, self._size - pos)), pos) if pos < self._size else b""
        self._local.pos = pos + len(data)
        return bytes(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return bool(self._f.closed)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> _SharedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LocalReader(_SharedReader):
    """A local file opened by :func:`~evalfarm.warehouse.store.safe_open`, read with ``os.pread`` at each thread's
    own position (positional reads are safe across threads, as :class:`_SharedReader`'s are)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._local = threading.local()
        self._closed = False

    def read(self, n: int | None = -1) -> bytes:
        pos = self._pos()
        if n is None or n < 0:
            n = self._size - pos
        data = os.pread(self._fd, max(0, min(n, self._size - pos)), pos) if pos < self._size else b""
        self._local.pos = pos + len(data)
        return data

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def __del__(self) -> None:  # DuckDB drops its handles without closing them: the descriptor goes with the object
        self.close()


class _LazyReader(_SharedReader):
    """A file of known size, opened (:func:`_reader`'s way) on its first read: an open that is never read costs
    nothing, not a descriptor on a local disk nor a request on an object store."""

    def __init__(self, fs: pafs.FileSystem, path: str, local_root: str | None, size: int) -> None:
        self._fs, self._path, self._root = fs, path, local_root
        self._size = size
        self._local = threading.local()
        self._inner: _SharedReader | None = None
        self._closed = False
        self._lock = threading.Lock()

    def _file(self) -> _SharedReader:
        with self._lock:
            if self._inner is None:
                if self._root is not None:
                    self._inner = _reader(self._fs, self._path, self._root)
                else:
                    self._inner = _SharedReader(self._fs.open_input_file(self._path))
            return self._inner

    def read(self, n: int | None = -1) -> bytes:
        pos = self._pos()
        if n is None or n < 0:
            n = self._size - pos
        inner = self._file()
        inner.seek(pos)
        data = inner.read(n)
        self._local.pos = pos + len(data)
        return data

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        if self._inner is not None:
            self._inner.close()


def _inside(scheme: str, root: str, path: str) -> str:
    """``path`` without ``scheme://``, when it is ``root`` or under it with no ``.`` or ``..`` segment."""
    text = path.removeprefix(f"{scheme}://").rstrip("/")
    if any(part in (".", "..") for part in text.split("/")) or not (text == root or text.startswith(root + "/")):
        raise PermissionError(f"{scheme}://{text} is outside the warehouse {scheme}://{root}")
    return text


class _Listing:
    """Every file and folder DuckDB's globs and stats see through :func:`prefix_filesystem`: the files of the
    snapshot the connection reads (``known``: no request to the store at all), or — for a layout-1 warehouse, whose
    views glob folders — one recursive listing made on first use (46 globs, each a listing per folder and a stat per
    file, were ~700 requests and 4 s against a local server). Either way a connection sees the warehouse as it was
    when it first looked."""

    def __init__(self, fs: pafs.FileSystem, root: str, known: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.fs, self.root = fs, root
        self.known = known
        self._entries: dict[str, Entry] | None = None
        self._children: dict[str, list[str]] = {}

    def _files(self) -> Iterator[tuple[str, str, int | None, datetime | None]]:
        """(path, kind, size, mtime) of everything under the root: the known files, else one recursive listing."""
        if self.known is not None:
            from datetime import UTC

            for path, (size, mtime_ms) in self.known.items():  # as DuckDB names it: no leading slash
                yield path.lstrip("/"), "file", size, datetime.fromtimestamp(mtime_ms / 1000, UTC)
            return
        selector = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        for i in self.fs.get_file_info(selector):
            yield i.path, "file" if i.type == pafs.FileType.File else "directory", i.size, i.mtime

    def _load(self) -> dict[str, Entry]:
        if self._entries is None:
            entries: dict[str, Entry] = {self.root: _entry(self.root, "directory")}
            children: dict[str, set[str]] = {}
            for path, kind, size, mtime in self._files():
                if not path.startswith(self.root + "/"):
                    continue
                entries[path] = _entry(path, kind, size, mtime)
                child = path
                while child != self.root and "/" in child:  # every folder on the way (S3 has no folder objects)
                    parent = child.rsplit("/", 1)[0]
                    children.setdefault(parent, set()).add(child)
                    entries.setdefault(parent, _entry(parent, "directory"))
                    child = parent
            self._children = {k: sorted(v) for k, v in children.items()}
            self._entries = entries
        return self._entries

    def info(self, path: str) -> Entry:
        try:
            return self._load()[path]
        except KeyError:
            raise FileNotFoundError(path) from None

    def known_size(self, path: str) -> int | None:
        """The size of a snapshot's file (None for anything else, or without a snapshot)."""
        if self.known is None:
            return None
        entry = self._load().get(path.removeprefix("/") if path.startswith("/") else path)
        return int(entry["size"]) if entry is not None and entry["type"] == "file" else None

    def ls(self, path: str) -> list[Entry]:
        entry = self.info(path)
        if entry["type"] == "file":
            return [entry]
        return [self._load()[c] for c in self._children.get(path, [])]

    def glob(self, pattern: str) -> list[str]:
        """The paths under the root that ``pattern`` matches, as DuckDB spells a pattern (:func:`create_views`):
        the root literally or :func:`glob_escape`-d, then a glob of the rest (``**`` any folders). fsspec's own glob
        would read the escaped root's ``[[]`` as a pattern and list the folder above the root."""
        from fsspec.utils import glob_translate

        text = pattern.rstrip("/")
        rest = next(
            (text[len(p) :] for p in (self.root, glob_escape(self.root)) if text == p or text.startswith(p + "/")),
            None,
        )
        if rest is None or any(part in (".", "..") for part in rest.split("/")):
            raise PermissionError(f"{pattern} is outside the warehouse {self.root}")
        if not any(c in rest for c in "*?["):
            return [self.root + rest] if self.root + rest in self._load() else []
        match = re.compile(glob_translate(rest)).match
        return sorted(p for p in self._load() if p.startswith(self.root + "/") and match(p[len(self.root) :]))


def _entry(path: str, kind: str, size: int | None = 0, mtime: datetime | None = None) -> Entry:
    return {"name": path, "size": size or 0, "type": kind, "mtime": mtime}


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


DEFAULT_TIMEOUT_S = DEFAULT_SQL_TIMEOUT_S
"""How long one read-only query may run (``evalfarm sql --timeout``, ``EVALFARM_SQL_TIMEOUT``, the config file's
``sql_timeout``; 0: no limit)."""
DEFAULT_MEMORY_LIMIT = DEFAULT_SQL_MEMORY_LIMIT
"""DuckDB's memory cap for a read-only query (``evalfarm sql --memory-limit``, ``EVALFARM_SQL_MEMORY_LIMIT``, the
config file's ``sql_memory_limit``)."""
TIMEOUT_ENV = ENV_VARS["sql_timeout"]
MEMORY_LIMIT_ENV = ENV_VARS["sql_memory_limit"]
MAX_ROWS_ENV = ENV_VARS["sql_max_rows"]
MAX_BYTES_ENV = ENV_VARS["sql_max_bytes"]
DEFAULT_MAX_ROWS = DEFAULT_SQL_MAX_ROWS
"""The most rows a read-only query returns (``evalfarm sql --max-rows``, ``EVALFARM_SQL_MAX_ROWS``, the config
file's ``sql_max_rows``; 0: no limit)."""
DEFAULT_MAX_BYTES = parse_size(DEFAULT_SQL_MAX_BYTES)
"""The most Arrow bytes a read-only query returns (``--max-bytes``, ``EVALFARM_SQL_MAX_BYTES``, ``sql_max_bytes``)."""
BATCH_ROWS = 65_536
"""Rows per batch of a result fetched from DuckDB: the row and byte limits are checked after each batch, so a
result overshoots them by one batch at most."""
MAX_QUERY_CHARS = 100_000
"""The longest statement :func:`check_read_only` parses. DuckDB's parser takes time and memory in proportion to a
query's terms (an ``OR`` of 100,000 terms: 2 s and 0.9 GB here) before any timeout or memory cap applies; a
query longer than this is generated, and its list belongs in a table or a view."""


def refuse_long(sql: str) -> None:
    """A query longer than :data:`MAX_QUERY_CHARS` is refused before DuckDB's parser sees it (a user's query and a
    view source alike)."""
    if len(sql) > MAX_QUERY_CHARS:  # before the parser, whose time and memory grow with the query's terms
        raise ValueError(
            f"refused: the query is {len(sql):,} characters long, and at most {MAX_QUERY_CHARS:,} are parsed (a "
            "query this long is generated: put its list in a table or a view)"
        )


class ResultTooLarge(MemoryError):
    """A read-only query whose result passed its row or byte limit (stopped at the batch that passed it)."""


_RESULT_LIMITS: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "evalfarm_sql_result_limits", default=(None, None)
)


@contextlib.contextmanager
def result_limits(max_rows: int | None = None, max_bytes: int | None = None) -> Iterator[None]:
    """The row and byte limits of the queries run in this block (each None: its environment variable, else the
    default), for a caller above :meth:`Warehouse.query <evalfarm.warehouse.Warehouse.query>`, which takes only the
    timeout and the memory cap (:func:`evalfarm.api.query` passes the resolved settings this way)."""
    token = _RESULT_LIMITS.set((max_rows, max_bytes))
    try:
        yield
    finally:
        _RESULT_LIMITS.reset(token)


def _env_limit(key: str, default: int) -> int:
    raw = os.environ.get(ENV_VARS[key], "").strip()
    if not raw:
        return default
    if why := check_value(key, raw):
        raise ValueError(f"{ENV_VARS[key]}: {why}")
    return int(raw) if key == "sql_max_rows" else parse_size(raw)


@dataclass(frozen=True)
class QueryLimits:
    """The limits of one read-only query: ``timeout_s`` (None: none), DuckDB's ``memory_limit``, and the most rows
    and Arrow bytes its result may hold (``max_rows``, ``max_bytes``; None: none).

    A query over the views is user text: without a limit a cross join runs for hours and holds the memory DuckDB
    allows itself (80 % of the machine's); and its result lives outside DuckDB's cap (a ``range(N)`` passed a
    100 MB cap at 900 MB, then grew again as the CLI's rows)."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    max_rows: int | None = DEFAULT_MAX_ROWS
    max_bytes: int | None = DEFAULT_MAX_BYTES

    @classmethod
    def resolve(
        cls,
        timeout_s: float | None = None,
        memory_limit: str | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> QueryLimits:
        """Each limit given here (not None) wins, then (rows and bytes) the :func:`result_limits` block around the
        call, then its environment variable, then the default; 0 (or less) means no limit. (The config file's
        ``sql_*`` keys are read above the warehouse: :func:`evalfarm.api.query` and ``evalfarm sql`` pass them in,
        resolved.)"""
        if timeout_s is None:
            raw = os.environ.get(TIMEOUT_ENV, "").strip()
            try:
                timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
            except ValueError:
                raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
        if memory_limit is None:
            memory_limit = os.environ.get(MEMORY_LIMIT_ENV, "").strip() or DEFAULT_MEMORY_LIMIT
        block_rows, block_bytes = _RESULT_LIMITS.get()
        rows = next((v for v in (max_rows, block_rows) if v is not None), None)
        size = next((v for v in (max_bytes, block_bytes) if v is not None), None)
        rows = _env_limit("sql_max_rows", DEFAULT_MAX_ROWS) if rows is None else rows
        size = _env_limit("sql_max_bytes", DEFAULT_MAX_BYTES) if size is None else size
        return cls(
            timeout_s if timeout_s > 0 else None,
            memory_limit,
            rows if rows > 0 else None,
            size if size > 0 else None,
        )


def _fetch(con: duckdb.DuckDBPyConnection, statement: str, limits: QueryLimits) -> pa.Table:
    """The statement's rows, fetched from DuckDB in batches of :data:`BATCH_ROWS` (a stream, never one whole Arrow
    table first), stopped at the batch that passes ``limits.max_rows`` or ``limits.max_bytes``."""
    rel = con.sql(statement)
    if rel is None:  # check_read_only lets only queries through; a statement without rows gives an empty table
        return pa.table({})
    reader = rel.to_arrow_reader(BATCH_ROWS)
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        for batch in reader:
            rows += batch.num_rows
            size += batch.nbytes
            if limits.max_rows is not None and rows > limits.max_rows:
                raise ResultTooLarge(
                    f"the query's result passed its limit of {limits.max_rows:,} rows and was stopped (raise it "
                    f"with --max-rows, or {MAX_ROWS_ENV}, or sql_max_rows in .evalfarm.toml; 0 means no limit)"
                )
            if limits.max_bytes is not None and size > limits.max_bytes:
                raise ResultTooLarge(
                    f"the query's result passed its limit of {limits.max_bytes:,} bytes and was stopped (raise it "
                    f"with --max-bytes, or {MAX_BYTES_ENV}, or sql_max_bytes in .evalfarm.toml, e.g. 4GB; 0 means "
                    "no limit)"
                )
            batches.append(batch)
    finally:
        reader.close()
    return pa.Table.from_batches(batches, schema=reader.schema)


def run_limited(con: duckdb.DuckDBPyConnection, statement: str, timeout_s: float | QueryLimits | None) -> pa.Table:
    """Run ``statement`` on ``con`` and return its rows, stopping it (``con.interrupt()``) after ``timeout_s``
    (``TimeoutError``), at Ctrl-C (``KeyboardInterrupt``, within a second), or past its result's row or byte
    limit (:class:`ResultTooLarge`, a ``MemoryError``). ``timeout_s``: the seconds, the row and byte limits then
    coming from :meth:`QueryLimits.resolve`; or the whole :class:`QueryLimits`.

    DuckDB executes in C and checks Python's signals rarely (a cross join took 111 s to notice a SIGINT): the
    query runs in a worker thread, and the main thread, which Python's signals interrupt at once, waits for it and
    interrupts the connection when the time is up or a signal arrives. The result is fetched in that thread too,
    batch by batch (:func:`_fetch`): the timeout covers the fetch, and the limits stop it."""
    if isinstance(timeout_s, QueryLimits):
        limits = timeout_s
    else:
        limits = QueryLimits.resolve(timeout_s if timeout_s is not None else 0.0)
    timeout_s = limits.timeout_s
    result: list[pa.Table] = []
    error: list[BaseException] = []

    ended = threading.Event()  # not worker.is_alive(): an interrupted join() marks a running thread stopped

    def work() -> None:
        try:
            result.append(_fetch(con, statement, limits))
        except BaseException as exc:  # handed to the waiting thread
            error.append(exc)
        finally:
            ended.set()

    threading.Thread(target=work, name="evalfarm-sql", daemon=True).start()
    try:
        ended.wait(timeout_s)
    except BaseException:  # KeyboardInterrupt (or any signal handler's exception): stop the query, then re-raise
        _stop(con, ended)
        raise
    if not ended.is_set():
        _stop(con, ended)
        raise TimeoutError(
            f"the query ran past its {timeout_s:g} s limit and was stopped (raise it with --timeout, "
            f"or {TIMEOUT_ENV}; 0 means no limit)"
        )
    if error:
        exc = error[0]
        if isinstance(exc, ResultTooLarge):
            raise ResultTooLarge(str(exc)) from None
        if isinstance(exc, duckdb.OutOfMemoryException):
            raise MemoryError(f"{exc} (raise the cap with --memory-limit, or {MEMORY_LIMIT_ENV}, e.g. 16GB)") from exc
        raise exc
    return result[0]


def _stop(con: duckdb.DuckDBPyConnection, ended: threading.Event) -> None:
    """Interrupt ``con`` until its query's thread has ``ended``. One ``interrupt()`` is not enough: DuckDB drops an
    interrupt that arrives before the statement has started (a Ctrl-C in the moment between the thread's start and
    its ``con.sql``), and the query then ran on while the process exited (CI saw it outlive its 30 s). Nor is the
    thread's ``join()``: on Python 3.11 a ``join()`` that a Ctrl-C interrupted marks the running thread stopped, so
    a second ``join()`` returns at once. A second Ctrl-C while this waits leaves at once."""
    while not ended.wait(0.05):
        con.interrupt()


def lock_down(con: duckdb.DuckDBPyConnection, root: str, *, also: Sequence[str] = ()) -> None:
    """Confine ``con`` to files under ``root`` (a directory, or an ``s3://`` / ``gs://`` prefix), for good;
    ``also``: more directories it may read (evalfarm's private stand-in schema files, nothing a user chose).

    External access off with one allowed prefix is DuckDB's own file sandbox; it applies to every file system
    (local, httpfs, fsspec), so an object-store warehouse gets the same lock as a local one (the check is on the
    path's text: ``s3://b/wh/../x`` passes it, and :func:`prefix_filesystem` refuses it). The trailing slash
    matters: DuckDB matches allowed directories as prefixes, and ``/data/wh`` would also admit
    ``/data/wh-other/…``. Extensions can be neither installed nor auto-loaded, and the configuration is locked
    last so no statement can undo any of it. Spilling to disk is off: DuckDB's default temp directory,
    ``<cwd>/.tmp/``, is implicitly readable under the lock, which would open the current folder's ``.tmp/`` to a
    query (a query that needs more than the memory cap fails instead; raise the cap).
    """
    # DuckDB checks a glob's text against the prefixes before expanding it: a root with glob characters is
    # allowed as the views spell it too (glob_escape), a pattern that expands to the root and nothing else
    prefixes = list(dict.fromkeys(d.rstrip("/") + "/" for d in (root, glob_escape(root), *also)))
    con.execute("SET temp_directory=''")
    con.execute(f"SET allowed_directories=[{', '.join(sql_string(p) for p in prefixes)}]")
    con.execute("SET enable_external_access=false")
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    con.execute("SET lock_configuration=true")


_READ_ONLY_HELP = (
    "`evalfarm sql` runs exactly one read-only statement: SELECT, WITH … SELECT, FROM …, PIVOT, UNPIVOT, "
    "DESCRIBE, SHOW, SUMMARIZE, or EXPLAIN of one of those"
)


def check_read_only(sql: str) -> str:
    """Refuse anything but a single query, and return that statement's text (what the caller must execute).

    The warehouse is append-only and owned by runs: a query that could write (COPY, EXPORT, ATTACH, INSTALL,
    SET, PRAGMA — IMPORT DATABASE parses as one —, CREATE …) could forge a result file under
    ``tables/metrics/`` that the views would then rank. DuckDB's own parser splits and classifies the text;
    EXPLAIN is allowed only without ANALYZE (``EXPLAIN ANALYZE`` *executes* the statement it explains) and
    only over a SELECT.
    """
    refuse_long(sql)
    try:
        statements = duckdb.extract_statements(sql)
    except Exception as exc:  # duckdb.ParserException, or ValueError for statement types the binding lacks
        raise ValueError(f"cannot parse the query: {exc}") from exc
    if not statements:
        raise ValueError("empty query")
    if len(statements) > 1:
        raise PermissionError(f"refused: {len(statements)} statements. {_READ_ONLY_HELP}")
    (st,) = statements
    kind = st.type.name
    if kind == "EXPLAIN":
        _check_explain(st.query)
    elif kind == "MULTI":
        _check_pivot(st.query)
    elif kind != "SELECT":
        raise PermissionError(f"refused: a {kind} statement. {_READ_ONLY_HELP}")
    return st.query


def _check_pivot(text: str) -> None:
    """Allow a MULTI statement only when it is a query: DuckDB parses a PIVOT without an ``IN`` list into one
    (an enum type of each pivot column's values, then the SELECT), but also ``COPY (PIVOT …) TO``,
    ``CREATE TABLE … AS PIVOT …`` and ``INSERT … PIVOT …``. Only a query parses as a subquery: the statement
    must parse, as one SELECT (or MULTI), inside ``SELECT * FROM ( … )``."""
    body = text.rstrip().rstrip(";")
    try:
        wrapped = duckdb.extract_statements(f"SELECT * FROM (\n{body}\n)")
    except Exception:  # as in check_read_only: it is not a query
        wrapped = []
    if len(wrapped) != 1 or wrapped[0].type.name not in ("SELECT", "MULTI"):
        raise PermissionError(f"refused: a statement that is not a query. {_READ_ONLY_HELP}")


def _check_explain(text: str) -> None:
    """EXPLAIN [ (options) ] SELECT …, with no ANALYZE anywhere in its keywords (it would run the statement)."""
    kinds = duckdb.token_type
    tokens = duckdb.tokenize(text)
    ends = [pos for pos, _ in tokens[1:]] + [len(text)]
    words = [
        (pos, kind, text[pos:end].strip().lower())
        for (pos, kind), end in zip(tokens, ends, strict=True)
        if kind != kinds.comment
    ]
    if any(kind == kinds.keyword and word in ("analyze", "analyse") for _, kind, word in words):
        raise PermissionError(f"refused: EXPLAIN ANALYZE runs the statement it explains. {_READ_ONLY_HELP}")
    body = 1  # the token after EXPLAIN, or after its parenthesised options
    if len(words) > 1 and words[1][2] == "(":
        close = next((i for i, w in enumerate(words) if w[2] == ")"), None)
        if close is None:
            raise ValueError(f"cannot parse the EXPLAIN options of {text!r}")
        body = close + 1
    if body >= len(words):
        raise ValueError("EXPLAIN of nothing")
    try:
        inner = duckdb.extract_statements(text[words[body][0] :])
    except Exception as exc:  # as in check_read_only
        raise ValueError(f"cannot parse the statement EXPLAIN explains: {exc}") from exc
    if len(inner) != 1 or inner[0].type.name != "SELECT":
        got = ", ".join(s.type.name for s in inner) or "nothing"
        raise PermissionError(f"refused: EXPLAIN of {got}. {_READ_ONLY_HELP}")


__all__ = [
    "BATCH_ROWS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "MAX_BYTES_ENV",
    "MAX_QUERY_CHARS",
    "MAX_ROWS_ENV",
    "MEMORY_LIMIT_ENV",
    "TIMEOUT_ENV",
    "QueryLimits",
    "ResultTooLarge",
    "check_read_only",
    "glob_escape",
    "lock_down",
    "prefix_filesystem",
    "refuse_long",
    "result_limits",
    "run_limited",
    "sql_string",
]
