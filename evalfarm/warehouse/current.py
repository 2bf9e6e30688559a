"""The metrics table's current rows: the newest computation of every (model, task, scorer, subset, variant), kept
apart inside the table itself, so that ``metrics`` (and ``board``, ``leaderboard``, everything built on it) reads them
without a window over the history.

The metrics table holds every computation ever made (``metrics_history``). Its data files are of three kinds, by the
folder under ``data/`` that the log names them in:

- ``current/``: rows of the newest computation of their key, as of the commit that wrote the file;
- ``superseded/``: rows that an older computation of their key holds (and rows of the first wave's layout, which
  have no task and are in no view);
- any other folder (a run's batches, a compaction's merged files): **pending**, rows committed since.

:func:`refresh_current` rewrites the current and pending files into new current and superseded files in one commit
(``dataChange: false``: the same rows, so a run appending meanwhile never conflicts with it, and the history loses and
gains nothing). It runs at the end of a run, during a run once the pending files pass
:data:`~evalfarm.warehouse.maintenance.COMPACT_AT`, in ``evalfarm warehouse compact`` and in the migration of a
schema-2 warehouse. A reader binds ``metrics`` to the current files when nothing is pending (a quiet warehouse: no
window at all), else to the newest computations among the current and pending files' rows
(:func:`~evalfarm.warehouse.query.create_views`). The rule that picks the newest is one SQL macro,
``ranked_computations`` (``sql/01_metrics.sql``), which both the view and the refresh apply.

What readers rely on, and :func:`current_findings` (``evalfarm verify``) checks: **every row of a superseded file has
a newer computation of its key in a current or pending file**. Then the newest computation among the current and
pending rows is the newest among all rows. A refresh keeps it (it moves a row to a superseded file only beside the
newer computation it read); so does the quarantine's removal of a unit's rows (:func:`drop_units`: the older
computations of a key whose current rows go are moved back to a pending file). Two refreshes of the same files cannot
both land: the second finds its files removed and stops (:class:`~evalfarm.warehouse.tables.RewriteConflict`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.query import TABLES_SCHEMA, open_connection, private_schema_file
from evalfarm.warehouse.rewrite import commit_rewrite, rewrite, stage
from evalfarm.warehouse.schemas import SCHEMAS
from evalfarm.warehouse.tables import DATA_DIR, FileEntry, RewriteConflict, Snapshot

log = logging.getLogger(__name__)

TABLE = "metrics"
CURRENT = "current"
"""The folder (under the metrics table's ``data/``) of the current rows' files."""
SUPERSEDED = "superseded"
"""The folder of the rows an older computation holds."""
KEY = ("model", "task", "scorer", "subset", "variant")
"""What a computation is the newest of (``ranked_computations``' partition)."""
CURRENT_ROWS_VERSION = 3
"""The schema version a refresh of the current rows declares (:data:`~evalfarm.warehouse.store.SCHEMA_VERSION`):
what it wrote, and no more (version 4's directions are the migration's, :func:`~evalfarm.warehouse.migrate.
correct_directions`)."""
CURRENT_ROWS_PER_FILE = 1_000_000
"""Rows per current file: a refresh writes the current rows sorted by model and task in files of this many rows."""


@dataclass(frozen=True)
class MetricsFiles:
    """The files of one version of the metrics table, by kind."""

    current: tuple[FileEntry, ...] = ()
    superseded: tuple[FileEntry, ...] = ()
    pending: tuple[FileEntry, ...] = ()

    @property
    def candidates(self) -> tuple[FileEntry, ...]:
        """The files whose rows may be current: the current ones and the pending ones."""
        return self.current + self.pending


def kind_of(folder: str, path: str) -> str:
    """``current``, ``superseded`` or ``pending``: the kind of the metrics table's data file ``path`` (a path inside
    the warehouse's filesystem), by the folder under ``<folder>/data/`` it lies in."""
    rel = path.removeprefix(f"{folder}/{DATA_DIR}/")
    top = rel.split("/", 1)[0] if "/" in rel else ""
    return top if top in (CURRENT, SUPERSEDED) else "pending"


def split_files(snapshot: Snapshot, folder: str) -> MetricsFiles:
    """The metrics table's ``snapshot`` (its table folder ``folder``), its files by kind."""
    kinds: dict[str, list[FileEntry]] = {CURRENT: [], SUPERSEDED: [], "pending": []}
    for f in snapshot.files:
        kinds[kind_of(folder, f.path)].append(f)
    return MetricsFiles(tuple(kinds[CURRENT]), tuple(kinds[SUPERSEDED]), tuple(kinds["pending"]))


def _connection(wh: WarehouseLike, files: Sequence[FileEntry], **kwargs: Any) -> duckdb.DuckDBPyConnection:
    """A read-only connection with the metrics table bound to ``files`` (and the macros, the views ``needs`` name)."""
    root, remote, duck_path = wh._reader(read_only=True)
    return open_connection(
        root, remote=remote, files={TABLE: [f.path for f in files]}, duck_path=duck_path,
        schema_files={TABLE: private_schema_file(TABLE, SCHEMAS[TABLE])},
        known={f.path: (f.size, f.modified_ms) for f in files} if remote is not None else None,
        local_root=wh.base if wh.local else None, **kwargs,
    )  # fmt: skip


def read_ranked(
    wh: WarehouseLike, files: Sequence[FileEntry], *, rows_per_part: int = CURRENT_ROWS_PER_FILE
) -> Iterator[pa.Table]:
    """Every row of ``files`` (metrics files) in the table's schema, with ``computation_age`` (1: its key's newest
    computation among these rows; null: a row without a task, in no view): ``ranked_computations`` of
    ``sql/01_metrics.sql`` over them, on a connection of their own. Yields one table per range of models of about
    ``rows_per_part`` rows, in model order (a key's computations are all in one range: memory stays that of a part,
    whatever the warehouse's size)."""
    con = _connection(wh, files, needs=["ranked_computations", "metrics_history"])
    rel = f"{TABLES_SCHEMA}.{TABLE}"
    try:
        counts = con.sql(f"SELECT model, count(*) AS n FROM {rel} GROUP BY model ORDER BY model NULLS LAST").fetchall()
        bounds: list[tuple[Any, Any]] = []
        size, lo = 0, None
        for i, (model, n) in enumerate(counts):
            lo = model if size == 0 else lo
            size += n
            if size >= rows_per_part or i == len(counts) - 1:
                bounds.append((lo, model))
                size = 0
        for lo, hi in bounds:
            where = "model IS NULL" if lo is None else f"model BETWEEN {_sql(lo)} AND {_sql(hi)}"
            if hi is None and lo is not None:
                where = f"(model >= {_sql(lo)} OR model IS NULL)"
            con.execute(f"CREATE OR REPLACE VIEW {TABLES_SCHEMA}.metrics_part AS SELECT * FROM {rel} WHERE {where}")
            ranked = _arrow(con.sql(
                f"SELECT * FROM ranked_computations('{TABLES_SCHEMA}.metrics_part') UNION ALL BY NAME "
                f"SELECT *, NULL::BIGINT AS computation_age FROM {TABLES_SCHEMA}.metrics_part WHERE task IS NULL"
            ))  # fmt: skip
            age = ranked.column("computation_age")
            yield wh.typed(TABLE, ranked).append_column("computation_age", age)
    finally:
        con.close()


def _sql(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    got = rel.arrow()
    return got if isinstance(got, pa.Table) else got.read_all()  # a RecordBatchReader in some DuckDB versions


@dataclass(frozen=True)
class Refreshed:
    """What :func:`refresh_current` did: files it read and removed (current and pending), rows now current, rows
    it set apart as superseded."""

    files_read: int
    current_rows: int
    superseded_rows: int


def refresh_current(wh: WarehouseLike, *, run_id: str | None = None, min_pending: int = 1) -> Refreshed | None:
    """Rewrite the metrics table's current and pending files (:func:`split_files`) as current and superseded files,
    in one commit; None when fewer than ``min_pending`` files are pending (0: rewrite the current files anyway), or
    when another writer rewrote some of them first (its commit did the same work). The new files are written a range
    of models at a time (:func:`read_ranked`), sorted by model and task: a reader of one model opens one file."""
    if not wh.tables.exists(TABLE):
        return None
    files = split_files(wh.tables.snapshot(TABLE), wh.tables.folder(TABLE))
    if len(files.pending) < min_pending or not files.candidates:
        return None
    staged = []
    n_current = n_superseded = 0
    for ranked in read_ranked(wh, files.candidates):
        keep = pc.fill_null(pc.equal(ranked.column("computation_age"), 1), False)
        now = ranked.filter(keep).drop_columns(["computation_age"])
        now = now.sort_by([(c, "ascending") for c in ("model", "task", "scorer", "subset", "variant", "ties",
                                                      "metric")])  # fmt: skip
        older = ranked.filter(pc.invert(keep)).drop_columns(["computation_age"])
        del ranked
        staged += [stage(wh, TABLE, t, folder, run_id) for t, folder in ((now, CURRENT), (older, SUPERSEDED))
                   if t.num_rows]  # fmt: skip
        n_current, n_superseded = n_current + now.num_rows, n_superseded + older.num_rows
    try:
        commit_rewrite(wh, TABLE, staged, files.candidates, operation="refresh-current", data_change=False,
                       run_id=run_id)  # fmt: skip
    except RewriteConflict as exc:
        log.info("the current rows were refreshed by another writer meanwhile (%s)", exc)
        return None
    wh.declare_version(CURRENT_ROWS_VERSION)  # the metrics table now keeps current rows apart: schema version 3
    return Refreshed(len(files.candidates), n_current, n_superseded)


def _keys(t: pa.Table) -> list[tuple[Any, ...]]:
    return list(zip(*(t.column(c).to_pylist() for c in KEY), strict=True)) if t.num_rows else []


def drop_units(wh: WarehouseLike, units: set[tuple[str, str, str]], *, run_id: str | None = None) -> int:
    """Remove every metrics row of ``units`` ((model, task, fingerprint)) in one commit, keeping the invariant of the
    current rows: each file holding some is rewritten without them (in its own kind's folder), and where a unit's
    rows were current, the older computations of its keys are moved from the superseded files to a pending one
    (the view then picks the newest of what is left, as it did over the whole history). Returns the rows removed."""
    if not units:
        return 0
    folder = wh.tables.folder(TABLE)
    snap = wh.tables.snapshot(TABLE)
    removes: list[FileEntry] = []
    tables: list[pa.Table] = []
    folders: list[str] = []
    dropped = 0
    lost_current: set[tuple[Any, ...]] = set()
    for f in snap.files:
        t = wh.read_table(f.path)
        mask = _unit_mask(t, units)
        n = int(pc.sum(mask).as_py() or 0)
        if not n:
            continue
        dropped += n
        kind = kind_of(folder, f.path)
        if kind == CURRENT:
            lost_current |= set(_keys(t.filter(mask)))
        removes.append(f)
        tables.append(wh.typed(TABLE, t.filter(pc.invert(mask))))
        folders.append(kind if kind != "pending" else "drop-units")
    if lost_current:
        _release_superseded(wh, snap, {f.path for f in removes}, lost_current, removes, tables, folders)
    if removes:
        rewrite(wh, TABLE, tables, removes, operation="drop-units", data_change=True, run_id=run_id, folders=folders)
    return dropped


def _unit_mask(t: pa.Table, units: set[tuple[str, str, str]]) -> pa.Array:
    keys = zip(t.column("model").to_pylist(), t.column("task").to_pylist(), t.column("fingerprint").to_pylist(),
               strict=True)  # fmt: skip
    return pa.array([k in units for k in keys], pa.bool_())


def _release_superseded(
    wh: WarehouseLike,
    snap: Snapshot,
    rewritten: set[str],
    keys: set[tuple[Any, ...]],
    removes: list[FileEntry],
    tables: list[pa.Table],
    folders: list[str],
) -> None:
    """Move the rows of ``keys`` out of the superseded files into pending ones (appended to ``removes``, ``tables``
    and ``folders``); files already being rewritten (``rewritten``) are split the same way in place."""
    folder = wh.tables.folder(TABLE)
    for i in range(len(removes)):
        if folders[i] == SUPERSEDED:
            t = tables[i]
            back = pa.array([k in keys for k in _keys(t)], pa.bool_())
            if t.num_rows and pc.any(back).as_py():
                tables[i] = t.filter(pc.invert(back))
                tables.append(t.filter(back))
                folders.append("drop-units")
    for f in snap.files:
        if f.path in rewritten or kind_of(folder, f.path) != SUPERSEDED:
            continue
        t = wh.typed(TABLE, wh.read_table(f.path))
        back = pa.array([k in keys for k in _keys(t)], pa.bool_())
        if not t.num_rows or not pc.any(back).as_py():
            continue
        removes.append(f)
        tables += [t.filter(pc.invert(back)), t.filter(back)]
        folders += [SUPERSEDED, "drop-units"]


def current_findings(wh: WarehouseLike) -> list[str]:
    """Where the rows ``metrics`` reads (the metrics table's current files, and the newest among them and the pending
    ones) differ from the newest computations of the table's whole history (``ranked_computations`` over every
    file: what ``metrics`` was before the current rows were kept): one line per way they differ, [] when they are
    the same rows. What ``evalfarm verify`` checks; a warehouse with no current files has nothing to check."""
    if not wh.tables.exists(TABLE):
        return []
    snap = wh.tables.snapshot(TABLE)
    files = split_files(snap, wh.tables.folder(TABLE))
    if not files.current:
        return []
    con = _connection(
        wh, snap.files, current=current_split(snap, wh.tables.folder(TABLE)), needs=["metrics", "metrics_history"]
    )  # the current rows, and every file as one relation (what metrics_history reads)
    cols = ", ".join(f'"{c}"' for c in SCHEMAS[TABLE].names)
    truth = f"SELECT {cols} FROM ranked_computations('{TABLES_SCHEMA}.{TABLE}') WHERE computation_age = 1"
    fast = f"SELECT {cols} FROM {TABLES_SCHEMA}.metrics_current"
    try:
        ((missing, extra),) = con.sql(
            f"SELECT (SELECT count(*) FROM ({truth} EXCEPT ALL {fast})), (SELECT count(*) FROM ({fast} EXCEPT ALL "
            f"{truth}))"
        ).fetchall()
    finally:
        con.close()
    out = []
    if missing:
        out.append(f"{missing} row(s) of the newest computations are not among the current rows")
    if extra:
        out.append(f"{extra} current row(s) are not the newest computation of their key")
    return out


def pending_files(wh: WarehouseLike, snapshot: Snapshot | None = None) -> list[FileEntry]:
    """The metrics table's pending files (of ``snapshot``, default the newest)."""
    snap = snapshot if snapshot is not None else wh.tables.snapshot(TABLE)
    return list(split_files(snap, wh.tables.folder(TABLE)).pending)


def current_split(snapshot: Snapshot, folder: str) -> tuple[list[str], list[str]]:
    """(current files, pending files) of the metrics table's ``snapshot``, as :func:`create_views` takes them."""
    files = split_files(snapshot, folder)
    return [f.path for f in files.current], [f.path for f in files.pending]


def check_split(files: Iterable[FileEntry], folder: str) -> dict[str, int]:
    """Files per kind (what ``evalfarm warehouse info`` and the benchmark report)."""
    out = {CURRENT: 0, SUPERSEDED: 0, "pending": 0}
    for f in files:
        out[kind_of(folder, f.path)] += 1
    return out


__all__ = [
    "CURRENT",
    "CURRENT_ROWS_PER_FILE",
    "CURRENT_ROWS_VERSION",
    "KEY",
    "SUPERSEDED",
    "MetricsFiles",
    "Refreshed",
    "check_split",
    "current_findings",
    "current_split",
    "drop_units",
    "kind_of",
    "pending_files",
    "read_ranked",
    "refresh_current",
    "split_files",
]
