"""Upgrading an old warehouse (``evalfarm warehouse migrate``): layout 1 -> the Delta layout, and a Delta warehouse of
an older schema version (:data:`~evalfarm.warehouse.store.SCHEMA_VERSION`) brought up to this one in place
(:func:`upgrade`: version 2's metrics table gets its current rows set apart; version 3's stored directions are
corrected, :func:`correct_directions`).

Layout 1 (evalfarm before the table format) kept one Parquet file per unit and table under
``tables/<table>/model=…/task=…/<fingerprint>.parquet`` (and per run for ``runs``, ``units``, ``failures``,
``manifests``), replaced whole on a rerun. :func:`legacy_connect` still reads it (the views over each table's files,
listed once), so SQL, reports and ``benchmarks/compare_warehouses.py`` work on it unchanged; runs refuse to write it.

:func:`migrate` copies every row of every table into the Delta layout — into a new folder, or in place — and then
checks that each table holds exactly the same rows (the same multiset of rows, column by column, after both sides
are read in the current schema). In place, the layout-1 files are moved to ``<root>/layout-1/`` once the check
passed (delete that folder when satisfied), and an interrupted migration is started over by running it again
(``<root>/migrating.json`` marks one in progress). Text stores (``embeddings/``) keep their layout: shards are
written once, named by their content, read by model and never by SQL; a Delta log per model would add a commit to
every embed step and nothing a reader uses. Leases and quarantine are not copied: they describe runs, not results.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute

from evalfarm.warehouse.base import MANIFEST_TABLE, LegacyWarehouse, WarehouseWriteError, move_inside
from evalfarm.warehouse.legacy import legacy_connect, legacy_files
from evalfarm.warehouse.rewrite import rewrite
from evalfarm.warehouse.schemas import table_schemas
from evalfarm.warehouse.store import FORMAT_FILE, SCHEMA_VERSION, Warehouse

MIGRATING_FILE = "migrating.json"
LEGACY_DIR = "layout-1"
ROWS_PER_FILE = 1_000_000


def _read(wh: Warehouse, table: str, paths: list[str]) -> pa.Table:
    """Every row of ``paths`` in ``table``'s current schema (columns an older file lacks: null)."""
    parts = [wh.typed(table, wh.read_table(p)) for p in paths]
    return pa.concat_tables(parts) if parts else wh.typed(table, [])


def _canonical(t: pa.Table) -> pa.Table:
    """``t`` sorted by every column (its rows as a multiset, for comparison)."""
    cols = [c for c in t.column_names if not pa.types.is_nested(t.schema.field(c).type)]
    return t.sort_by([(c, "ascending") for c in cols]) if t.num_rows else t


@dataclass
class MigrationResult:
    """What :func:`migrate` wrote: rows per table, and the tables whose rows differ afterwards (empty: identical)."""

    source: str
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    mismatched: dict[str, str] = field(default_factory=dict)
    moved_to: str | None = None
    upgraded_to: int | None = None
    """The schema version an in-place upgrade of a Delta warehouse declared (:func:`upgrade`); None for a layout-1
    migration."""
    directions: dict[str, int] = field(default_factory=dict)
    """Metrics rows whose stored direction was corrected (:func:`correct_directions`), by
    ``scorer/metric: old -> new``."""

    @property
    def identical(self) -> bool:
        return not self.mismatched


def migrate(source: str | os.PathLike[str], target: str | os.PathLike[str] | None = None) -> MigrationResult:
    """Convert the layout-1 warehouse at ``source`` into the Delta layout, at ``target`` (a new or empty folder) or
    in place (``target`` None or the same folder); every table's rows are compared afterwards. Raises when
    ``source`` is not a layout-1 warehouse or ``target`` already holds one."""
    old = Warehouse(source)
    in_place = target is None or Warehouse(target).uri == old.uri
    if old.layout() == "delta" and in_place and (old.schema_version() or 0) < SCHEMA_VERSION:
        return upgrade(old)
    new = old if in_place or target is None else Warehouse(target)  # (target None is in place)
    _check(old, new, in_place)
    marker = new._p(MIGRATING_FILE)
    if in_place:
        _clear_partial(new)
    new._put(marker, json.dumps({"from": old.uri, "to": new.uri}).encode())
    files = legacy_files(old)
    result = MigrationResult(old.uri, new.uri)
    for name, schema in table_schemas().items():
        new.tables.ensure(name, schema)
    for table, paths in files.items():
        rows = _read(old, table, paths)
        result.rows[table] = rows.num_rows
        chunks = [rows.slice(i, ROWS_PER_FILE) for i in range(0, rows.num_rows, ROWS_PER_FILE)]
        if chunks:
            rewrite(new, table, chunks, [], operation="migrate", data_change=True)
    if not in_place:
        _copy_tree(old, new, "embeddings")
    for table, paths in files.items():
        parts = [new.typed(table, new.read_table(f.path)) for f in new.tables.snapshot(table).files]
        got = pa.concat_tables(parts or [new.typed(table, [])])
        if table == MANIFEST_TABLE:  # less the rows the migration itself wrote (its own files' hashes)
            got = got.filter(pa.compute.invert(pa.compute.match_substring(got.column("path"), "/data/migrate/")))
        got = _canonical(got)
        want = _canonical(_read(old, table, paths))
        if not got.equals(want):
            result.mismatched[table] = f"{want.num_rows} rows before, {got.num_rows} after, or values differ"
    if result.mismatched:
        raise RuntimeError(
            f"migration of {old.uri} left tables whose rows differ: {result.mismatched}; the layout-1 files are "
            "untouched, run the migration again"
        )
    if in_place:
        result.moved_to = _park_legacy(new, files)
    result.directions = correct_directions(new)  # layout 1 stored the scorer's one direction on every row
    new._put(new._p(FORMAT_FILE), new._format_body())
    from evalfarm.warehouse.current import refresh_current

    refresh_current(new)  # the metrics table's current rows set apart (schema version 3): the same rows
    _remove(new, marker)
    _remove(new, new._p("verified-files.json"))
    return result


def upgrade(wh: Warehouse) -> MigrationResult:
    """A Delta warehouse of an older schema version brought up to :data:`~evalfarm.warehouse.store.SCHEMA_VERSION`
    in place, a version at a time. 2 -> 3: the metrics table's current rows set apart
    (:func:`~evalfarm.warehouse.current.refresh_current`: one commit of the same rows, which a run appending
    meanwhile never conflicts with), checked equal to the newest computations of the whole history
    (:func:`~evalfarm.warehouse.current.current_findings`). 3 -> 4: every metrics row's ``higher_is_better`` set to
    its metric's declared direction (:func:`correct_directions`, checked row for row). Each version is declared once
    its step is done."""
    from evalfarm.warehouse.current import CURRENT_ROWS_VERSION, current_findings, refresh_current

    result = MigrationResult(wh.uri, wh.uri)
    if (wh.schema_version() or 0) < CURRENT_ROWS_VERSION:
        got = refresh_current(wh)
        wh.declare_version(CURRENT_ROWS_VERSION)
        result.rows["metrics"] = got.current_rows if got is not None else 0
        wrong = current_findings(wh)
        if wrong:
            result.mismatched["metrics"] = "; ".join(wrong)
            raise RuntimeError(f"upgrade of {wh.uri}: the current rows differ from the history's newest: {wrong[0]}")
    result.directions = correct_directions(wh)
    wh.declare_version()
    result.upgraded_to = SCHEMA_VERSION
    return result


DIRECTIONS_OPERATION = "correct-directions"
"""The operation (and the folder under the metrics table's ``data/`` of its pending files) of
:func:`correct_directions`' commit."""


def declared_directions(scorer_metrics: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bool | None]:
    """The declared ``higher_is_better`` of each (scorer, metric) that something declares (:mod:`evalfarm.metrics`:
    the registered scorer's own declarations, then the shared ones); an undeclared one is left out (its rows keep
    what they store: a plug-in no longer installed)."""
    from evalfarm.metrics import declaration
    from evalfarm.plugins import task_kinds

    scoped = {s.name: getattr(s, "declared_metrics", None) for _, s in task_kinds.items()}
    out: dict[tuple[str, str], bool | None] = {}
    for scorer, metric in scorer_metrics:
        info = declaration(metric, scoped.get(scorer))
        if info is not None:
            out[(scorer, metric)] = info.higher_is_better
    return out


def _corrected(t: pa.Table, want: dict[tuple[str, str], bool | None]) -> tuple[pa.Table, dict[str, int]]:
    """``t`` with each row's ``higher_is_better`` its declared direction, and the rows changed by
    ``scorer/metric: old -> new``."""
    have = t.column("higher_is_better").to_pylist()
    keys = list(zip(t.column("scorer").to_pylist(), t.column("metric").to_pylist(), strict=True))
    new = [want[k] if k in want else h for k, h in zip(keys, have, strict=True)]
    changed: dict[str, int] = {}
    for (scorer, metric), a, b in zip(keys, have, new, strict=True):
        if a is not b:
            label = f"{scorer}/{metric}: {a} -> {b}"
            changed[label] = changed.get(label, 0) + 1
    if not changed:
        return t, changed
    i = t.schema.get_field_index("higher_is_better")
    return t.set_column(i, t.schema.field(i), pa.array(new, pa.bool_())), changed


def correct_directions(wh: Warehouse, *, attempts: int = 5) -> dict[str, int]:
    """Set every metrics row's ``higher_is_better`` to its metric's declared direction (schema version 4): each file
    holding a row that stores another is rewritten with the same rows in the same order, that one column
    corrected, in its own kind's folder (current, superseded; pending files under ``data/correct-directions/``), all
    in one commit; each rewritten file is read back and checked row for row against what it replaces (every other
    column equal, the direction the declared one). Rows of a metric nothing declares keep theirs. Returns the rows
    changed by ``scorer/metric: old -> new`` ({} when every row was right). Started over when another writer
    rewrote one of the files first (a refresh, a compaction), up to ``attempts`` times."""
    from evalfarm.warehouse.current import TABLE, kind_of
    from evalfarm.warehouse.rewrite import commit_rewrite, stage
    from evalfarm.warehouse.tables import RewriteConflict

    if not wh.tables.exists(TABLE):
        return {}
    for attempt in range(attempts):
        snap = wh.tables.snapshot(TABLE)
        folder = wh.tables.folder(TABLE)
        staged, removes = [], []
        changed: dict[str, int] = {}
        for f in snap.files:
            old = wh.typed(TABLE, wh.read_table(f.path))
            pairs = set(zip(old.column("scorer").to_pylist(), old.column("metric").to_pylist(), strict=True))
            new, diff = _corrected(old, declared_directions(pairs))
            if not diff:
                continue
            kind = kind_of(folder, f.path)
            staged.append(stage(wh, TABLE, new, kind if kind != "pending" else DIRECTIONS_OPERATION))
            _check_rewritten(wh, old, wh._p(staged[-1][0].path), declared_directions(pairs))
            removes.append(f)
            for label, n in diff.items():
                changed[label] = changed.get(label, 0) + n
        if not staged:
            return {}
        try:
            commit_rewrite(wh, TABLE, staged, removes, operation=DIRECTIONS_OPERATION, data_change=True)
        except RewriteConflict:
            if attempt + 1 == attempts:
                raise
            continue
        return dict(sorted(changed.items()))
    return {}


def _check_rewritten(wh: Warehouse, old: pa.Table, path: str, want: dict[tuple[str, str], bool | None]) -> None:
    """The staged file at ``path`` holds ``old``'s rows in order, every column but ``higher_is_better`` equal and
    that one the declared direction (an undeclared metric's as stored); raises before anything is committed."""
    got = wh.typed("metrics", wh.read_table(path))
    if got.num_rows != old.num_rows or got.column_names != old.column_names:
        raise RuntimeError(f"correcting directions: {path} holds {got.num_rows} rows, not {old.num_rows}")
    rest = [c for c in old.column_names if c != "higher_is_better"]
    if not got.select(rest).equals(old.select(rest)):
        raise RuntimeError(f"correcting directions: {path} differs from the file it replaces beyond higher_is_better")
    keys = zip(old.column("scorer").to_pylist(), old.column("metric").to_pylist(), strict=True)
    stored = old.column("higher_is_better").to_pylist()
    expected = [want[k] if k in want else h for k, h in zip(keys, stored, strict=True)]
    if got.column("higher_is_better").to_pylist() != expected:
        raise RuntimeError(f"correcting directions: {path} does not store the declared directions")


def _check(old: Warehouse, new: Warehouse, in_place: bool) -> None:
    if old.exists(old._p(MIGRATING_FILE)) and in_place:
        return  # an interrupted in-place migration: started over
    layout = old.layout()
    if layout == "delta":
        raise ValueError(f"{old.uri} is already in the Delta layout (schema version {old.schema_version()})")
    if layout == "empty":
        raise FileNotFoundError(f"no warehouse at {old.uri}")
    if not in_place and new.layout() != "empty":
        raise FileExistsError(f"{new.uri} already holds a warehouse: migrate into a new or empty folder")


def _clear_partial(wh: Warehouse) -> None:
    """Remove what an interrupted in-place migration wrote (each table's log and migrated files)."""
    if not wh.exists(wh._p(MIGRATING_FILE)):
        return
    for table in table_schemas():
        for sub in ("_delta_log", "data"):
            path = wh._p("tables", table, sub)
            if wh.local:
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    wh.fs.delete_dir(path)
                except OSError:
                    pass
    _remove(wh, wh._p(FORMAT_FILE))


def _park_legacy(wh: Warehouse, files: dict[str, list[str]]) -> str:
    """Move the layout-1 files (and the typed ``_schema.parquet`` files) under ``<root>/layout-1/``."""
    dest_root = wh._p(LEGACY_DIR)
    for table, paths in files.items():
        for path in [*paths, wh._p("tables", table, "_schema.parquet")]:
            if not wh.exists(path):
                continue
            dest = f"{dest_root}/{wh.relative(path)}"
            try:
                if wh.local:  # a regular file inside the warehouse, to a folder inside it, no link followed
                    move_inside(wh.base, wh.relative(path), wh.relative(dest))
                else:
                    wh.fs.move(path, dest)
            except OSError as exc:
                raise WarehouseWriteError(path, exc) from exc
        if wh.local:  # the emptied model=…/task=… folders
            for folder, _, _ in sorted(os.walk(wh._p("tables", table)), key=lambda w: -len(w[0])):
                if folder != wh._p("tables", table) and "_delta_log" not in folder and not os.listdir(folder):
                    os.rmdir(folder)
    return dest_root


def _copy_tree(old: Warehouse, new: Warehouse, top: str) -> None:
    for path, _, _ in old._walk(old._p(top)):
        dest = new._p(old.relative(path))
        if new.local:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
        with old.fs.open_input_stream(path) as src:
            new._put(dest, bytes(src.read()))


def _remove(wh: Warehouse, path: str) -> None:
    try:
        if wh.local:
            os.unlink(path)
        else:
            wh.fs.delete_file(path)
    except OSError:
        pass


def layout_note(wh: Warehouse) -> dict[str, Any]:
    """What ``evalfarm warehouse info`` says of a warehouse's layout."""
    layout = wh.layout()
    if layout == "legacy":
        return {"layout": 1, "format": "parquet files per unit", "hint": str(LegacyWarehouse(wh.uri))}
    version = wh.schema_version()
    note: dict[str, Any] = {"layout": version, "format": "delta" if layout == "delta" else None}
    if layout == "delta" and (version or 0) < SCHEMA_VERSION:
        note["hint"] = (
            f"schema version {version} (this evalfarm writes {SCHEMA_VERSION}): the views read it right; "
            f"`evalfarm warehouse migrate {wh.uri}` brings it up to date in place (version 4 corrects the stored "
            "higher_is_better of metrics such as EvalRank's mr, tie_rate and n_pairs)"
        )
    return note


__all__ = [
    "DIRECTIONS_OPERATION",
    "LEGACY_DIR",
    "MIGRATING_FILE",
    "MigrationResult",
    "layout_note",
    "legacy_connect",
    "legacy_files",
    "correct_directions",
    "declared_directions",
    "migrate",
    "upgrade",
]
