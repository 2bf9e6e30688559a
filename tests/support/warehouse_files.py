"""Where a unit's rows live in a warehouse, for tests that damage, forge or inspect files: a table's snapshot files,
and the one that holds a given unit's rows (its manifest row names the unit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalfarm.warehouse.manifests import manifest_index


def table_files(wh: Any, table: str) -> list[Path]:
    """The data files of ``table``'s newest snapshot."""
    return [Path(f.path) for f in wh.tables.snapshot(table).files]


def unit_files(wh: Any, table: str, model: str, task: str | None = None) -> list[Path]:
    """The files of ``table``'s newest snapshot that hold rows of ``model`` (on ``task``), by their manifest rows."""
    index = manifest_index(wh)
    out = []
    for f in wh.tables.snapshot(table).files:
        row = index.get(wh.relative(f.path))
        if row is not None and any(u[0] == model and (task is None or u[1] == task) for u in row.units):
            out.append(Path(f.path))
    return out


def unit_file(wh: Any, table: str, model: str, task: str) -> Path:
    """The one file of ``table`` holding ``model``'s rows on ``task`` (each unit's rows arrive in a file of its
    own)."""
    (path,) = unit_files(wh, table, model, task)
    return path


def rewrite_files(wh: Any, table: str, transform: Any) -> None:
    """Replace each file of ``table``'s snapshot by ``transform(its rows)``, committed as a rewrite: how a test makes
    files an older evalfarm wrote (fewer columns) without editing a committed file in place."""
    import pyarrow.parquet as pq

    from evalfarm.warehouse.rewrite import rewrite

    for f in wh.tables.snapshot(table).files:
        rewrite(wh, table, [transform(pq.read_table(f.path))], [f], operation="test-rewrite", data_change=False)
