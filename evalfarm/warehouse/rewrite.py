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
from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.tables import FileEntry, RewriteConflict, StagedFile, TableError

ROW_GROUP_ROWS = 128 * 1024
"""Rows per row group in rewritten files: with rows sorted by model, a filter on one model reads few groups."""


def _unit_keys(t: pa.Table) -> list[tuple[Any, ...]]:
    """The (model, task, fingerprint, run id) of every unit whose rows ``t`` holds (grouped by Arrow: a refresh's
    file holds a million rows)."""
    cols = [c for c in ("model", "task", "fingerprint", "run_id") if c in t.column_names]
    if len(cols) < 3 or not t.num_rows:
        return []
    groups = t.select(cols).group_by(cols, use_threads=False).aggregate([])
    data = [groups.column(c).to_pylist() for c in cols]
    if len(cols) == 3:
        data.append([None] * groups.num_rows)
    return sorted(set(zip(*data, strict=True)), key=lambda u: tuple(str(x) for x in u))


def stage(
    wh: WarehouseLike, table: str, t: pa.Table, folder: str, run_id: str | None = None
) -> tuple[StagedFile, list[Any]]:
    """``t``'s rows staged as one file of ``table`` under ``data/<folder>/`` (rewritten rows: row groups of
    :data:`ROW_GROUP_ROWS`), and the units it holds (for its manifest row)."""
    f = wh.tables.stage(table, t, folder=folder, run_id=run_id, row_group_size=ROW_GROUP_ROWS)
    return f, _unit_keys(t)


def rewrite(
    wh: WarehouseLike,
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
    staged = [
        stage(wh, table, t, folders[i] if folders is not None else operation, run_id)
        for i, t in enumerate(tables)
        if t.num_rows
    ]
    return commit_rewrite(wh, table, staged, removes, operation=operation, data_change=data_change, run_id=run_id)


def commit_rewrite(
    wh: WarehouseLike,
    table: str,
    staged: Sequence[tuple[StagedFile, list[Any]]],
    removes: Sequence[FileEntry],
    *,
    operation: str,
    data_change: bool,
    run_id: str | None = None,
) -> list[StagedFile]:
    """The commit of :func:`rewrite`, of files staged already (:func:`stage`: a rewrite too large to hold in memory
    at once stages its files one by one)."""
    try:
        if staged:
            rows = [
                {"run_id": run_id, "path": f.path, "sha256": f.sha256, "size": f.size, "table": table,
                 "created_at": now(), "units": json.dumps(units) if units else None, "rows": f.rows}
                for f, units in staged
            ]  # fmt: skip
            manifest = wh.tables.stage(MANIFEST_TABLE, wh.typed(MANIFEST_TABLE, rows), folder=operation)
            wh.tables.commit(MANIFEST_TABLE, [manifest], metadata=_meta(operation, run_id))
        files = [f for f, _ in staged]
        wh.tables.commit(table, files, removes=removes, data_change=data_change, metadata=_meta(operation, run_id))
    except RewriteConflict:
        raise
    except TableError as exc:
        raise WarehouseWriteError(wh.tables.folder(table), OSError(5, str(exc))) from exc
    return files


def _meta(operation: str, run_id: str | None) -> dict[str, Any]:
    return {"evalfarm.operation": operation, "evalfarm.run_id": run_id, "evalfarm.commit": uuid.uuid4().hex}


__all__ = ["ROW_GROUP_ROWS", "commit_rewrite", "rewrite", "stage"]
