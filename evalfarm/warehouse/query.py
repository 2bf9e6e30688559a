"""The DuckDB side of the warehouse: the views, and the connections that hold them.

Views come from two places, created in this order on every connection: evalfarm's core views (``sql/*.sql``: the
checkout's ``sql/`` folder, or the installed package's ``evalfarm._sql``), sorted by file name, then each task kind's
views (``Scorer.views``, e.g. EvalRank's ``ranks``, ``neighbours`` and ``hardest_pairs`` in
``evalfarm/scorers/evalrank.sql``), by task kind name. A kind's views may use the core views and its own; two sources
that define one view name are an error naming both. ``{root}`` in a view's SQL is the warehouse root.

A read-only connection is locked down (:func:`~evalfarm.warehouse.sandbox.lock_down`) before any view exists, and a
query is checked before it runs (:func:`~evalfarm.warehouse.sandbox.check_read_only`): the lock keeps a query inside
the warehouse, the check keeps it from writing there. Both, and the limits a query runs under, are the SQL sandbox,
:mod:`evalfarm.warehouse.sandbox`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from evalfarm.plugins import RegistryError, task_kinds
from evalfarm.warehouse.sandbox import glob_escape, lock_down, prefix_filesystem, refuse_long, sql_string


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
    refuse_long(sql)
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


# long: a third of it is the contract of its nine arguments; the body is one loop sharing the set of bound tables
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
        as_list = "[" + ", ".join(sql_string(glob_escape(f)) for f in listed) + "]"
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
            as_list = "[" + ", ".join(sql_string(glob_escape(f)) for f in rest) + "]"
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
            text = text.replace(glob, "[" + ", ".join(sql_string(glob_escape(f)) for f in listed) + "]")
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
                con.execute(f"SET memory_limit={sql_string(memory_limit)}")
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


__all__ = [
    "CURRENT_METRICS",
    "READ_ONCE_BYTES",
    "READ_ONCE_FILES",
    "TABLES_SCHEMA",
    "ViewSource",
    "create_views",
    "needed_statements",
    "open_connection",
    "private_schema_file",
    "rows_of",
    "sql_dir",
    "view_sources",
]
