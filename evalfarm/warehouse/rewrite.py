"""Rewriting a table's files: new files (with their manifest rows, the units each holds) replace old ones in one
commit. What compaction, the metrics table's refresh of its current rows, migration and the quarantine's removal of
a unit's rows (:func:`~evalfarm.warehouse.current.drop_units`) have in common."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from evalfarm.warehouse.base import MANIFEST_TABLE, WarehouseWriteError, now
from evalfarm.warehouse.tables import FileEntry, RewriteConflict, StagedFile, TableError

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
    folders: Sequence[str] | None = None,
) -> list[StagedFile]:
    """Replace ``removes`` (files of ``table``'s newest snapshot) with files of ``tables``' rows in one commit: the
    new files' manifest rows first (with the units each holds), then the table's add and remove actions. Each new
    file is staged under ``data/<operation>/``, or ``data/<folders[i]>/`` for ``tables[i]`` (the metrics table's
    current and superseded rows, :mod:`~evalfarm.warehouse.current`). :class:`RewriteConflict` when another writer
    removed one of ``removes`` first (nothing is committed to the table then)."""
    staged: list[StagedFile] = []
    units: dict[str, list[tuple[Any, ...]]] = {}
    for i, t in enumerate(tables):
        if t.num_rows == 0:
            continue
        folder = folders[i] if folders is not None else operation
        f = wh.tables.stage(table, t, folder=folder, run_id=run_id, row_group_size=ROW_GROUP_ROWS)
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
    except RewriteConflict:
        raise
    except TableError as exc:
        raise WarehouseWriteError(wh.tables.folder(table), OSError(5, str(exc))) from exc
    return staged


def _meta(operation: str, run_id: str | None) -> dict[str, Any]:
    return {"evalfarm.operation": operation, "evalfarm.run_id": run_id, "evalfarm.commit": uuid.uuid4().hex}


__all__ = ["ROW_GROUP_ROWS", "rewrite"]
