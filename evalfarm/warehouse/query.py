"""The DuckDB side of the warehouse: the views, the read-only sandbox, and the check that a query only reads.

Views come from two places, created in this order on every connection: evalfarm's core views (``sql/*.sql``: the
checkout's ``sql/`` folder, or the installed package's ``evalfarm._sql``), sorted by file name, then each task kind's
views (``Scorer.views``, e.g. EvalRank's ``ranks``, ``neighbours`` and ``hardest_pairs`` in
``evalfarm/scorers/evalrank.sql``), by task kind name. A kind's views may use the core views and its own; two sources
that define one view name are an error naming both. ``{root}`` in a view's SQL is the warehouse root.

A read-only connection is locked down (:func:`lock_down`) before any view exists, and a query is checked before it
runs (:func:`check_read_only`): the lock keeps a query inside the warehouse, the check keeps it from writing there.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from evalfarm.config import (
    DEFAULT_SQL_MAX_BYTES,
    DEFAULT_SQL_MAX_ROWS,
    DEFAULT_SQL_MEMORY_LIMIT,
    DEFAULT_SQL_TIMEOUT_S,
    ENV_VARS,
    check_value,
    parse_size,
)
from evalfarm.plugins import RegistryError, task_kinds


def sql_dir() -> Path:
    """The core views' ``*.sql`` files: the checkout's ``sql/``, or the installed package's ``evalfarm._sql``."""
    from evalfarm._resources import shipped_dir

    return shipped_dir("evalfarm._sql", "sql")


@dataclass(frozen=True)
class ViewSource:
    """One source of views: ``origin`` names it in messages (``sql/01_metrics.sql``, or a task kind and its
    scorer), ``sql`` is its text, ``views`` the names it creates, in order."""

    origin: str
    sql: str
    views: tuple[str, ...]


_CREATE_VIEW = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)", re.IGNORECASE
)


def _view_names(origin: str, sql: str, *, views_only: bool) -> tuple[str, ...]:
    """The view names ``sql`` creates; with ``views_only`` (a task kind's views) any other statement is an error.
    From the one parse of each source (:func:`_parse`: every connection lists the sources)."""
    names: list[str] = []
    for st in _parse(origin, sql):
        m = _CREATE_VIEW.match(st.text) if st.kind == "CREATE" else None
        if m is not None:
            names.append(m.group(1))
        elif views_only:
            raise RegistryError(f"{origin}: its views hold a {st.kind} statement; only CREATE VIEW is allowed")
    return tuple(dict.fromkeys(names))


GENERATED_ORIGIN = (
    "evalfarm (generated: evalfarm/ranking.py's tie policies, the scorers' declared roles, evalfarm/metrics.py's "
    "metric declarations)"
)
"""The origin of the views generated from Python, created before the core views (which read them)."""


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def roles_sql() -> str:
    """The SQL of the registered scorers' declarations that views join on instead of naming a scorer: the
    ``scorer_roles`` view and the macro ``scorer_role(scorer)``."""
    from evalfarm.plugins import DEFAULT_ROLE, role_of

    scorers = sorted(((kind, s) for kind, s in task_kinds.items()), key=lambda ks: ks[1].name)
    rows = [f"({_sql_text(s.name)}, {_sql_text(kind)}, {_sql_text(role_of(s))})" for kind, s in scorers]
    values = ",\n    ".join(rows) or "(NULL, NULL, NULL)"
    roles = " ".join(f"WHEN {_sql_text(s.name)} THEN {_sql_text(role_of(s))}" for _, s in scorers)
    roles = f"CASE scorer {roles} ELSE {_sql_text(DEFAULT_ROLE)} END" if roles else _sql_text(DEFAULT_ROLE)
    return f"""-- scorer_roles: every registered scorer (task kind) and its declared role (Scorer.role): intrinsic (an
-- evaluator of the space), downstream (a task the intrinsic evaluators should predict: the correlations' columns)
-- or diagnostic (shown on request). Which metrics the correlations carry beside a scorer's primary one is each
-- metric's declaration (metric_info.correlated).
-- Views read the role through scorer_role(scorer) ('{DEFAULT_ROLE}' for a scorer no longer registered).
CREATE OR REPLACE VIEW scorer_roles AS
SELECT * FROM (VALUES
    {values}
) AS t(scorer, task_kind, role)
WHERE scorer IS NOT NULL;

CREATE OR REPLACE MACRO scorer_role(scorer) AS {roles};
"""


def metrics_sql() -> str:
    """The SQL of the metrics' declarations (:func:`evalfarm.metrics.sql_definitions`: the shared ones and the
    registered scorers' own): the ``metric_info`` view, the macros ``metric_higher_is_better`` and
    ``metric_correlated``."""
    from evalfarm.metrics import sql_definitions

    scoped = {s.name: dict(t) for _, s in task_kinds.items() if (t := getattr(s, "declared_metrics", None))}
    return sql_definitions(scoped)


def view_sources() -> list[ViewSource]:
    """Every source of views in creation order: the generated definitions (the tie policies of
    :func:`evalfarm.ranking.sql_definitions`, the scorers' roles of :func:`roles_sql`, the metrics' declarations of
    :func:`metrics_sql`), the core ``sql/*.sql`` files
    by name, then each task kind's views by kind name. Raises ``RegistryError`` naming both sources when two define
    one view."""
    from evalfarm.ranking import sql_definitions

    generated = sql_definitions() + "\n" + roles_sql() + "\n" + metrics_sql()
    sources = [ViewSource(GENERATED_ORIGIN, generated, _view_names(GENERATED_ORIGIN, generated, views_only=False))]
    for path in sorted(sql_dir().glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        origin = f"sql/{path.name}"
        sources.append(ViewSource(origin, text, _view_names(origin, text, views_only=False)))
    for kind, scorer in task_kinds.items():
        text = getattr(scorer, "views", "") or ""
        if text.strip():
            origin = f"task kind {kind!r} ({task_kinds.origin(kind)})"
            sources.append(ViewSource(origin, text, _view_names(origin, text, views_only=True)))
    owner: dict[str, str] = {}
    for source in sources:
        for name in source.views:
            if name in owner:
                raise RegistryError(f"view {name!r} is defined by {owner[name]} and by {source.origin}; rename one")
            owner[name] = source.origin
    return sources


TABLES_SCHEMA = "_tables"
"""The schema that holds one relation per warehouse table a connection binds (``_tables.metrics``: the files of the
table's snapshot, read once by name): the views read those, not the files. Not listed by ``SHOW TABLES``."""
CURRENT_METRICS = f"{TABLES_SCHEMA}.metrics_current"
"""The relation a view reads the newest computations of the metrics table from (the ``metrics`` view): the table's
current files when nothing was committed since they were written, else ``ranked_computations`` over them and the
files committed since (:mod:`evalfarm.warehouse.current`). Bound by the connection, before the first statement that
names it."""
_TABLE_READ = re.compile(
    r"read_parquet\(\s*'\{root\}/tables/(\w+)/\*\*/\*\.parquet'\s*,\s*union_by_name\s*=\s*true\s*,"
    r"\s*hive_partitioning\s*=\s*false\s*\)",
    re.IGNORECASE,
)
_TABLE_GLOB = re.compile(r"\{root\}/tables/(\w+)/")
_CREATE_NAME = re.compile(
    r"\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(?:VIEW|MACRO|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class _Statement:
    """One statement of a view source: the view or macro it creates (None: another statement, always run), the
    names it mentions (what it may depend on), and the warehouse tables it reads."""

    origin: str
    text: str
    name: str | None
    words: frozenset[str]
    tables: frozenset[str]
    reads_current: bool = False
    kind: str = "CREATE"

    @property
    def reads(self) -> frozenset[str]:
        """The warehouse tables whose files the statement reads: those it globs, and the metrics table for its
        current rows."""
        return self.tables | ({"metrics"} if self.reads_current else set())


_PARSED: dict[tuple[str, str], tuple[_Statement, ...]] = {}


def _parse(origin: str, sql: str) -> tuple[_Statement, ...]:
    """The statements of a view source's ``sql``, parsed once per process and text (DuckDB's parser: 50 ms of CPU for
    the core views, which every reading process pays once)."""
    key = (origin, sql)
    if key in _PARSED:
        return _PARSED[key]
    if len(sql) > MAX_QUERY_CHARS:  # before the parser, whose time and memory grow with the query's terms
        raise ValueError(
            f"refused: the query is {len(sql):,} characters long, and at most {MAX_QUERY_CHARS:,} are parsed (a "
            "query this long is generated: put its list in a table or a view)"
        )
    try:
        parsed = duckdb.extract_statements(sql)
    except Exception as exc:  # duckdb.ParserException, or ValueError for statement types the binding lacks
        raise RegistryError(f"{origin}: its views do not parse: {exc}") from exc
    out = []
    for st in parsed:
        code = _without_comments(st.query)
        m = _CREATE_NAME.match(code)
        words = frozenset(w.lower() for w in _WORD.findall(code))
        current = CURRENT_METRICS in code
        if current:
            words |= {"ranked_computations"}
        name = m.group(1).lower() if m else None
        tables = frozenset(_TABLE_GLOB.findall(code))
        out.append(_Statement(origin, st.query, name, words, tables, current, st.type.name))
    _PARSED[key] = tuple(out)
    return _PARSED[key]


def _statements(source: ViewSource) -> tuple[_Statement, ...]:
    """``source``'s statements (:func:`_parse`)."""
    return _parse(source.origin, source.sql)


def _without_comments(text: str) -> str:
    """``text`` less its comments (a statement's text carries the comments around it: they name views too)."""
    tokens = duckdb.tokenize(text)
    ends = [pos for pos, _ in tokens[1:]] + [len(text)]
    return "".join(
        text[pos:end] for (pos, kind), end in zip(tokens, ends, strict=True) if kind != duckdb.token_type.comment
    )


def needed_statements(sources: Sequence[ViewSource], needs: Sequence[str] | None) -> list[_Statement]:
    """The statements of ``sources`` a connection for the queries ``needs`` must run, in creation order: those that
    create a view or macro a query names, and what those name in turn. ``needs`` None, or queries that name no view
    or macro at all (``SHOW TABLES``, ``SELECT 1``): every statement."""
    every = [st for source in sources for st in _statements(source)]
    if needs is None:
        return every
    known = {st.name: st for st in every if st.name is not None}
    words = {w.lower() for text in needs for w in _WORD.findall(text)}
    todo = [name for name in known if name in words]
    if not todo:
        return every
    wanted: set[str] = set()
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        todo += [w for w in known[name].words if w in known and w not in wanted]
    return [st for st in every if st.name is None or st.name in wanted]


def create_views(
    con: duckdb.DuckDBPyConnection,
    root: str,
    files: Mapping[str, list[str]] | None = None,
    *,
    duck_path: Callable[[str], str] = lambda p: p,
    schema_files: Mapping[str, str] | None = None,
    snapshot_only: bool = False,
    current: tuple[list[str], list[str]] | None = None,
    needs: Sequence[str] | None = None,
    sizes: Mapping[str, int] | None = None,
    read_small: Callable[[Sequence[str]], pa.Table] | None = None,
) -> None:
    """Create the views (:func:`view_sources`) on ``con`` over the warehouse at ``root`` (as DuckDB reads it): every
    one, or (``needs``: the queries the connection is for) only those the queries name and what they read
    (:func:`needed_statements`).

    ``files``: table -> the files its views read instead of the table's glob (a Delta snapshot's files, less any
    unreadable one); ``duck_path`` turns such a file's path into what DuckDB opens. Each such table a created view
    reads is bound once, as the relation ``_tables.<table>`` (:data:`TABLES_SCHEMA`), which the views read.
    ``schema_files``: table -> a local typed empty Parquet file read along with the table's ``files`` (so every
    column exists; such a table must be in ``files``). ``current``: the metrics table's current files and the files
    committed since (:mod:`evalfarm.warehouse.current`), of ``files["metrics"]``; None: none are current, every file
    is a candidate. ``snapshot_only``: every table's files are given, and a view that still globs a folder under
    ``tables/`` is an error (it would read files no snapshot names: staged, removed, or planted). ``sizes``: the
    files' sizes (of ``files``' paths), and ``read_small``: their rows read by the caller (files -> one table), which
    let a relation over many small files be read once (:func:`_relation`).
    """
    lists: dict[str, list[str]] = {t: [duck_path(f) for f in listed] for t, listed in (files or {}).items()}
    extra = {t: [f] for t, f in (schema_files or {}).items()}
    raw = {duck_path(f): (f, n) for f, n in (sizes or {}).items()}
    bound: set[str] = set()
    quoted_root = glob_escape(root).replace("'", "''")

    def relation(name: str, listed: list[str]) -> None:
        _relation(con, name, listed, raw, read_small)

    def bind(table: str) -> None:
        if table in bound or table not in lists or not (lists[table] or extra.get(table)):
            return
        if not bound:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {TABLES_SCHEMA}")
        bound.add(table)
        relation(table, lists[table] + extra.get(table, []))

    for st in needed_statements(view_sources(), needs):
        for table in sorted(st.tables):
            bind(table)
        text = _bound_text(st, bound, {t: lists[t] + extra.get(t, []) for t in st.tables & lists.keys()})
        if st.reads_current and "metrics_current" not in bound:  # after ranked_computations, first in its file
            if "metrics" not in lists:
                raise RegistryError(f"{st.origin}: {CURRENT_METRICS} needs the metrics table's files")
            if not bound:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {TABLES_SCHEMA}")
            bound.add("metrics_current")
            _bind_current(con, lists["metrics"], extra.get("metrics", []), current, duck_path, relation)
        if snapshot_only and "{root}/tables/" in text:
            raise RegistryError(
                f"{st.origin}: a view reads {text[text.index('{root}/tables/') :].split(chr(39))[0]!r}, which is "
                "not a warehouse table's glob ('{root}/tables/<table>/**/*.parquet' of a table evalfarm declares)"
            )
        con.execute(text.replace("{root}", quoted_root))


READ_ONCE_FILES = 32
"""A relation over more files than this (a table mid-run, before its compaction: a batch commits a file per table)
whose files hold at most :data:`READ_ONCE_BYTES` is read once per connection into memory: DuckDB binds a view's
files again each time a view or query over it is bound (their footers cached, the calls through the warehouse's
filesystem not), which for 500 files cost a status refresh more than its queries (measured)."""
READ_ONCE_BYTES = 32 * 2**20
"""The most bytes of Parquet a relation read once per connection may hold (the memory it takes is a few times this)."""


def _relation(
    con: duckdb.DuckDBPyConnection,
    name: str,
    listed: list[str],
    raw: Mapping[str, tuple[str, int]],
    read_small: Callable[[Sequence[str]], pa.Table] | None,
) -> None:
    """``_tables.<name>``: the rows of ``listed`` (DuckDB paths; ``raw``: each one's path in the warehouse and size,
    where known) as a view; or, when the files are many and small (:data:`READ_ONCE_FILES`), as a table read once,
    by ``read_small`` (their rows in one Arrow table, columns united by name as DuckDB's ``union_by_name``) along with
    the rest of ``listed`` (a stand-in schema file) by DuckDB."""
    known = [raw[f] for f in listed if f in raw]
    rows = None
    if read_small is not None and len(known) > READ_ONCE_FILES and sum(n for _, n in known) <= READ_ONCE_BYTES:
        try:
            rows = read_small([p for p, _ in known])
        except (OSError, pa.ArrowException):  # a file that is not whole or not a regular file: DuckDB meets it as a
            rows = None  # view's file, and the connection leaves it out (Warehouse.connect)
    if rows is None:
        as_list = "[" + ", ".join(_sql_string(glob_escape(f)) for f in listed) + "]"
        con.execute(
            f"CREATE OR REPLACE VIEW {TABLES_SCHEMA}.{name} AS SELECT * FROM read_parquet({as_list}, "
            "union_by_name = true, hive_partitioning = false)"
        )
        return
    rest = [f for f in listed if f not in raw]
    con.register("_evalfarm_read_once", rows)
    try:
        body = "SELECT * FROM _evalfarm_read_once"
        if rest:
            as_list = "[" + ", ".join(_sql_string(glob_escape(f)) for f in rest) + "]"
            body += f" UNION ALL BY NAME SELECT * FROM read_parquet({as_list}, union_by_name = true)"
        con.execute(f"CREATE OR REPLACE TABLE {TABLES_SCHEMA}.{name} AS {body}")
    finally:
        con.unregister("_evalfarm_read_once")


def _bound_text(st: _Statement, bound: set[str], lists: Mapping[str, list[str]]) -> str:
    """``st``'s text reading the relations of the ``bound`` tables (the standard ``read_parquet`` call of a table's
    glob), and any other read of a table's glob with its files (``lists``) inline."""
    text = _TABLE_READ.sub(lambda m: f"{TABLES_SCHEMA}.{m.group(1)}" if m.group(1) in bound else m.group(0), st.text)
    for table, listed in sorted(lists.items()):
        glob = f"'{{root}}/tables/{table}/**/*.parquet'"
        if glob in text:
            text = text.replace(glob, "[" + ", ".join(_sql_string(glob_escape(f)) for f in listed) + "]")
    return text


def _bind_current(
    con: duckdb.DuckDBPyConnection,
    every: list[str],
    stand_in: list[str],
    current: tuple[list[str], list[str]] | None,
    duck_path: Callable[[str], str],
    relation: Callable[[str, list[str]], None],
) -> None:
    """``_tables.metrics_current`` (:data:`CURRENT_METRICS`): the current files themselves when nothing is pending;
    else their rows of the keys nothing pending touches, and for the keys pending rows touch the newest computations
    (``ranked_computations``, created before any view that reads this) among those keys' current and pending rows.
    The window runs over what was committed since the current rows were written, not over the history; with no
    current files (a warehouse not refreshed yet) every file is pending."""
    s = TABLES_SCHEMA
    if current is not None and not current[1]:
        relation("metrics_current", [duck_path(f) for f in current[0]] + stand_in)
        return
    if current is None:
        now, pending = [], every
    else:
        now, pending = [duck_path(f) for f in current[0]], [duck_path(f) for f in current[1]]
    relation("metrics_current_files", now + stand_in)
    relation("metrics_pending", pending + stand_in)
    keys = ("model", "task", "scorer", "subset", "variant")
    same_key = " AND ".join(f"c.{k} IS NOT DISTINCT FROM t.{k}" for k in keys)
    con.execute(
        f"CREATE OR REPLACE VIEW {s}.metrics_touched AS SELECT DISTINCT model, task, scorer, subset, variant "
        f"FROM {s}.metrics_pending WHERE task IS NOT NULL"
    )
    con.execute(
        f"CREATE OR REPLACE VIEW {s}.metrics_candidates AS SELECT c.* FROM {s}.metrics_current_files c "
        f"SEMI JOIN {s}.metrics_touched t ON {same_key} UNION ALL BY NAME SELECT * FROM {s}.metrics_pending"
    )
    con.execute(
        f"CREATE OR REPLACE VIEW {s}.metrics_current AS SELECT c.* FROM {s}.metrics_current_files c "
        f"ANTI JOIN {s}.metrics_touched t ON {same_key} WHERE c.task IS NOT NULL UNION ALL BY NAME "
        f"SELECT * EXCLUDE (computation_age) FROM main.ranked_computations('{s}.metrics_candidates') "
        "WHERE computation_age = 1"
    )


def glob_escape(path: str) -> str:
    """``path`` as a DuckDB glob that matches exactly it: each ``[``, ``*`` and ``?`` as a one-character class
    (a warehouse at ``wh[1]`` is a path, not the pattern ``wh1``). Every path DuckDB reads is globbed, a listed
    file's too."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in path)


# long: its docstring is the confinement argument; the body builds one class from closures over its arguments
def prefix_filesystem(
    fs: pafs.FileSystem,
    scheme: str,
    prefix: str,
    *,
    read_only: bool = True,
    known: Mapping[str, tuple[int, int]] | None = None,
    local_root: str | None = None,
) -> Any:
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
    from fsspec.implementations.arrow import ArrowFSWrapper  # type: ignore[import-untyped]

    root = prefix.strip("/")

    def strip(cls: type, path: Any) -> Any:
        if isinstance(path, list):
            return [strip(cls, p) for p in path]
        return _inside(scheme, root, str(path))

    listing = _Listing(fs, root, known)

    def ls(self: Any, path: Any, detail: bool = False, **kwargs: Any) -> list[Any]:
        entries = listing.ls(self._strip_protocol(path))
        return entries if detail else [e["name"] for e in entries]

    def info(self: Any, path: Any, **kwargs: Any) -> dict[str, Any]:
        return listing.info(self._strip_protocol(path))

    def modified(self: Any, path: Any) -> Any:
        return listing.info(self._strip_protocol(path))["mtime"]

    def refuse(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{scheme}://{root} is open read-only")

    def open_read(self: Any, path: Any, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if read_only and any(c in mode for c in "wax+"):
            refuse(self, path)
        if mode == "rb":
            return _reader(self.fs, str(path), local_root, listing.known_size(str(path)))
        return ArrowFSWrapper._open(self, path, mode, *args, **kwargs)

    def glob(self: Any, path: Any, **kwargs: Any) -> list[str]:
        return listing.glob(str(path).removeprefix(f"{scheme}://"))

    members: dict[str, Any] = {"protocol": scheme, "root_marker": "", "cachable": False}
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
        self._entries: dict[str, dict[str, Any]] | None = None
        self._children: dict[str, list[str]] = {}

    def _files(self) -> Iterator[tuple[str, str, int | None, Any]]:
        """(path, kind, size, mtime) of everything under the root: the known files, else one recursive listing."""
        if self.known is not None:
            from datetime import UTC, datetime

            for path, (size, mtime_ms) in self.known.items():  # as DuckDB names it: no leading slash
                yield path.lstrip("/"), "file", size, datetime.fromtimestamp(mtime_ms / 1000, UTC)
            return
        selector = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        for i in self.fs.get_file_info(selector):
            yield i.path, "file" if i.type == pafs.FileType.File else "directory", i.size, i.mtime

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            entries: dict[str, dict[str, Any]] = {self.root: _entry(self.root, "directory")}
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

    def info(self, path: str) -> dict[str, Any]:
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

    def ls(self, path: str) -> list[dict[str, Any]]:
        entry = self.info(path)
        if entry["type"] == "file":
            return [entry]
        return [self._load()[c] for c in self._children.get(path, [])]

    def glob(self, pattern: str) -> list[str]:
        """The paths under the root that ``pattern`` matches, as DuckDB spells a pattern (:func:`create_views`):
        the root literally or :func:`glob_escape`-d, then a glob of the rest (``**`` any folders). fsspec's own glob
        would read the escaped root's ``[[]`` as a pattern and list the folder above the root."""
        from fsspec.utils import glob_translate  # type: ignore[import-untyped]

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


def _entry(path: str, kind: str, size: int | None = 0, mtime: Any = None) -> dict[str, Any]:
    return {"name": path, "size": size or 0, "type": kind, "mtime": mtime}


def open_connection(
    root: str,
    *,
    read_only: bool = True,
    remote: pafs.FileSystem | None = None,
    files: Mapping[str, list[str]] | None = None,
    duck_path: Callable[[str], str] = lambda p: p,
    memory_limit: str | None = None,
    schema_files: Mapping[str, str] | None = None,
    known: Mapping[str, tuple[int, int]] | None = None,
    local_root: str | None = None,
    current: tuple[list[str], list[str]] | None = None,
    needs: Sequence[str] | None = None,
    read_small: Callable[[Sequence[str]], pa.Table] | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the views over the warehouse at ``root`` (as DuckDB reads it), locked down to it
    first when ``read_only``. ``remote``: an object-store warehouse's pyarrow filesystem, which DuckDB reads
    ``root`` (``scheme://bucket/prefix``) through (:func:`prefix_filesystem`; no extension needed); ``files``,
    ``duck_path``, ``current``, ``needs``, ``read_small``: see :func:`create_views` (the folders of ``schema_files``
    are opened to the lock too); ``memory_limit``: DuckDB's ``memory_limit`` (``"4GB"``; None: DuckDB's default)."""
    con = duckdb.connect(":memory:")
    try:
        if memory_limit is not None:
            try:
                con.execute(f"SET memory_limit={_sql_string(memory_limit)}")
            except duckdb.Error as exc:
                raise ValueError(f"memory limit {memory_limit!r}: {exc}") from exc
        # DuckDB binds a view's read_parquet each time a view over it is created (the models table a dozen times a
        # connection): its Parquet metadata cache reads each file's footer once (files are immutable once committed)
        con.execute("SET parquet_metadata_cache=true")
        # DuckDB draws a progress bar on stdout for a query past 2 s, pipe or not: it would land inside the rows of
        # `evalfarm sql --format csv > file` and a program's own output
        con.execute("SET enable_progress_bar=false")
        if remote is not None:  # before the lock, which would refuse a new filesystem
            scheme, _, prefix = root.partition("://")
            con.register_filesystem(
                prefix_filesystem(remote, scheme, prefix, read_only=read_only, known=known, local_root=local_root)
            )
        if read_only:
            lock_down(con, root, also=sorted({os.path.dirname(f) for f in (schema_files or {}).values()}))
        create_views(
            con, root, files, duck_path=duck_path, schema_files=schema_files, snapshot_only=known is not None,
            current=current, needs=needs, sizes={p: v[0] for p, v in (known or {}).items()}, read_small=read_small,
        )  # fmt: skip
    except BaseException:
        con.close()
        raise
    return con


def _sql_string(text: str) -> str:
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


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``, with timestamps as ``datetime`` (UTC-aware where the column has a zone) built here:
    pyarrow's own conversion of a timestamp imports pandas (0.4 CPU-s, 1-6 s on a loaded machine: more than a status
    refresh's queries), which a reading command need not load."""
    names = table.column_names
    cols: list[list[Any]] = []
    for name in names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            zone = UTC if col.type.tz else None
            micros = pc.cast(pc.cast(col, pa.timestamp("us", tz=col.type.tz)), pa.int64()).to_pylist()
            base = _EPOCH_UTC if zone else _EPOCH_UTC.replace(tzinfo=None)
            cols.append([None if v is None else base + timedelta(microseconds=v) for v in micros])
        else:
            cols.append(col.to_pylist())
    return [dict(zip(names, values, strict=True)) for values in zip(*cols, strict=True)] if names else []


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


_PRIVATE_DIR: list[str] = []


def private_schema_file(table: str, schema: pa.Schema) -> str:
    """A typed empty Parquet file of ``schema`` in this process's private temp folder (mode 0700, removed at exit),
    for a read-only open that must not write a missing ``_schema.parquet`` into the warehouse."""
    import atexit
    import hashlib
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    if not _PRIVATE_DIR:
        folder = tempfile.mkdtemp(prefix="evalfarm-schemas-")
        atexit.register(shutil.rmtree, folder, True)
        _PRIVATE_DIR.append(folder)
    digest = hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()[:16]
    path = os.path.join(_PRIVATE_DIR[0], f"{table}-{digest}.parquet")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        pq.write_table(pa.Table.from_batches([], schema=schema), tmp)
        os.replace(tmp, path)
    return path


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
    con.execute(f"SET allowed_directories=[{', '.join(_sql_string(p) for p in prefixes)}]")
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
    if len(sql) > MAX_QUERY_CHARS:  # before the parser, whose time and memory grow with the query's terms
        raise ValueError(
            f"refused: the query is {len(sql):,} characters long, and at most {MAX_QUERY_CHARS:,} are parsed (a "
            "query this long is generated: put its list in a table or a view)"
        )
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
    "CURRENT_METRICS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "MAX_BYTES_ENV",
    "MAX_QUERY_CHARS",
    "MAX_ROWS_ENV",
    "READ_ONCE_BYTES",
    "READ_ONCE_FILES",
    "MEMORY_LIMIT_ENV",
    "TABLES_SCHEMA",
    "TIMEOUT_ENV",
    "QueryLimits",
    "ResultTooLarge",
    "ViewSource",
    "check_read_only",
    "create_views",
    "glob_escape",
    "lock_down",
    "needed_statements",
    "open_connection",
    "prefix_filesystem",
    "private_schema_file",
    "result_limits",
    "rows_of",
    "run_limited",
    "sql_dir",
    "view_sources",
]
