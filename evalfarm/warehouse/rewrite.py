"""Rewriting a table's files: new files (with their manifest rows, the units each holds) replace old ones in one
commit. What compaction, migration and the quarantine's removal of a unit's rows have in common."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from evalfarm.warehouse.base import MANIFEST_TABLE, WarehouseWriteError, now
from evalfarm.warehouse.tables import FileEntry, StagedFile, TableError

ROW_GROUP_ROWS = 128 * 1024
"""Rows per row group in rewritten files: with rows sorted by model, a filter on one model reads few groups."""


def _unit_keys(t: pa.Table) -> list[tuple[Any, ...]]:
    cols = [c for c in ("model", "task", "fingerprint", "run_id") if c in t.column_names]
    if len(cols) < 3:
        return []
    data = [t.column(c).to_pylist() for c in cols]
    if len(cols) == 3:
        data.append([None] * t.num_rows)
    return sorted(set(zip(*data, strict=True)), key=lambda u: tuple(str(x) for x in u))


def rewrite(
    wh: Any,
    table: str,
    tables: Sequence[pa.Table],
    removes: Sequence[FileEntry],
    *,
    operation: str,
    data_change: bool,
    run_id: str | None = None,
) -> list[StagedFile]:
    """Replace ``removes`` (files of ``table``'s newest snapshot) with files of ``tables``' rows in one commit: the
    new files' manifest rows first (with the units each holds), then the table's add and remove actions."""
    staged: list[StagedFile] = []
    units: dict[str, list[tuple[Any, ...]]] = {}
    for t in tables:
        if t.num_rows == 0:
            continue
        f = wh.tables.stage(table, t, folder=operation, run_id=run_id, row_group_size=ROW_GROUP_ROWS)
        staged.append(f)
        units[f.path] = _unit_keys(t)
    try:
        if staged:
            rows = [
                {"run_id": run_id, "path": f.path, "sha256": f.sha256, "size": f.size, "table": table,
                 "created_at": now(), "units": json.dumps(units[f.path]) if units[f.path] else None, "rows": f.rows}
                for f in staged
            ]  # fmt: skip
            manifest = wh.tables.stage(MANIFEST_TABLE, wh.typed(MANIFEST_TABLE, rows), folder=operation)
            wh.tables.commit(MANIFEST_TABLE, [manifest], metadata=_meta(operation, run_id))
        wh.tables.commit(table, staged, removes=removes, data_change=data_change, metadata=_meta(operation, run_id))
    except TableError as exc:
        raise WarehouseWriteError(wh.tables.folder(table), OSError(5, str(exc))) from exc
    return staged


def _meta(operation: str, run_id: str | None) -> dict[str, Any]:
    return {"evalfarm.operation": operation, "evalfarm.run_id": run_id, "evalfarm.commit": uuid.uuid4().hex}


def drop_units(wh: Any, units: set[tuple[str, str, str]], *, run_id: str | None = None) -> int:
    """Remove every ``metrics`` row of ``units`` ((model, task, fingerprint)): each file holding some is rewritten
    without them, in one commit. Returns the rows removed. The units are then not done: the next run recomputes
    them."""
    if not units:
        return 0
    removes: list[FileEntry] = []
    kept: list[pa.Table] = []
    dropped = 0
    for f in wh.tables.snapshot("metrics").files:
        t = wh.read_table(f.path)
        keys = zip(t.column("model").to_pylist(), t.column("task").to_pylist(), t.column("fingerprint").to_pylist(),
                   strict=True)  # fmt: skip
        mask = pa.array([k in units for k in keys], pa.bool_())
        n = int(pc.sum(mask).as_py() or 0)
        if n:
            dropped += n
            removes.append(f)
            kept.append(wh.typed("metrics", t.filter(pc.invert(mask))))
    if removes:
        rewrite(wh, "metrics", kept, removes, operation="drop-units", data_change=True, run_id=run_id)
    return dropped


__all__ = ["ROW_GROUP_ROWS", "drop_units", "rewrite"]
