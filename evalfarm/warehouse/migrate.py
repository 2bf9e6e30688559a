"""Layout 1 -> layout 2: reading an old warehouse as it is, and converting it (``evalfarm warehouse migrate``).

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
    new._put(new._p(FORMAT_FILE), new._format_body())
    from evalfarm.warehouse.current import refresh_current

    refresh_current(new)  # the metrics table's current rows set apart (schema version 3): the same rows
    _remove(new, marker)
    _remove(new, new._p("verified-files.json"))
    return result


def upgrade(wh: Warehouse) -> MigrationResult:
    """A warehouse of schema version 2 brought up to :data:`~evalfarm.warehouse.store.SCHEMA_VERSION` in place: the
    metrics table's current rows set apart (:func:`~evalfarm.warehouse.current.refresh_current`: one commit of the
    same rows, which a run appending meanwhile never conflicts with), checked equal to the newest computations of
    the whole history (:func:`~evalfarm.warehouse.current.current_findings`), and the version declared."""
    from evalfarm.warehouse.current import current_findings, refresh_current

    result = MigrationResult(wh.uri, wh.uri)
    got = refresh_current(wh)
    wh.declare_version()
    result.rows["metrics"] = got.current_rows if got is not None else 0
    wrong = current_findings(wh)
    if wrong:
        result.mismatched["metrics"] = "; ".join(wrong)
        raise RuntimeError(f"upgrade of {wh.uri}: the current rows differ from the history's newest: {wrong[0]}")
    return result


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
    return {"layout": wh.schema_version(), "format": "delta" if layout == "delta" else None}


__all__ = [
    "LEGACY_DIR",
    "MIGRATING_FILE",
    "MigrationResult",
    "layout_note",
    "legacy_connect",
    "legacy_files",
    "migrate",
    "upgrade",
]
