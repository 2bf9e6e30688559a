"""Reading a layout-1 warehouse as it is: each table's files listed once, read as a snapshot is (the views over
them, a private typed empty file beside each table so every column exists). SQL, reports and comparisons work on it
unchanged; runs refuse to write it (:class:`~evalfarm.warehouse.base.LegacyAny`)."""

from __future__ import annotations

import duckdb

from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.query import open_connection, private_schema_file
from evalfarm.warehouse.schemas import table_schemas


def legacy_files(wh: WarehouseLike) -> dict[str, list[str]]:
    """Table -> its layout-1 data files (every visible Parquet file under ``tables/<table>/`` but the empty typed
    ``_schema.parquet``)."""
    out: dict[str, list[str]] = {}
    for table in table_schemas():
        files = [p for p, _, _ in wh._walk(wh._p("tables", table)) if not p.endswith("/_schema.parquet")]
        out[table] = sorted(p for p in files if "/_delta_log/" not in p)
    return out


def legacy_connect(
    wh: WarehouseLike, *, read_only: bool = True, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection with the views over a layout-1 warehouse: each table's files listed once (a private typed empty
    file beside them, so every column exists), read as :meth:`Warehouse.connect` reads a snapshot."""
    files = legacy_files(wh)
    stand_ins = {name: private_schema_file(name, schema) for name, schema in table_schemas().items()}
    known: dict[str, tuple[int, int]] = {}
    for table in files:
        for path, size, mtime in wh._walk(wh._p("tables", table)):
            known[path] = (size, (mtime or 0) // 1_000_000)
    root, remote, duck_path = wh._reader(read_only)
    return open_connection(
        root, read_only=read_only, remote=remote, files=files, duck_path=duck_path, memory_limit=memory_limit,
        schema_files=stand_ins, known=known if remote is not None else None,
        local_root=wh.base if wh.local else None,
    )  # fmt: skip


__all__ = ["legacy_connect", "legacy_files"]
