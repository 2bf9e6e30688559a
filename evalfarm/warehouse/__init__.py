"""The result warehouse: a Delta Lake table per table, text stores of vectors, and DuckDB views over them.

Modules, one concern each: :mod:`~evalfarm.warehouse.schemas` (every table's schema: the core tables and each task
kind's detail tables), :mod:`~evalfarm.warehouse.tables` (the Delta Lake layer: staging, commits, snapshots),
:mod:`~evalfarm.warehouse.store` (the :class:`Warehouse`: writes, completion, reads, the scan for damaged files,
quarantine), :mod:`~evalfarm.warehouse.like` (:class:`WarehouseLike`: what the modules below the store need of a
warehouse), :mod:`~evalfarm.warehouse.commits` (a run's batched commits), :mod:`~evalfarm.warehouse.query` (the
views, core ``sql/*.sql`` then each task kind's, and the connections), :mod:`~evalfarm.warehouse.sandbox` (the SQL
sandbox: the lock, the read-only check, the query limits),
:mod:`~evalfarm.warehouse.history` (snapshots of the past, what moved between runs),
:mod:`~evalfarm.warehouse.current` (the metrics table's current rows, which ``metrics`` reads),
:mod:`~evalfarm.warehouse.maintenance` (compaction, retention, reader pins), :mod:`~evalfarm.warehouse.migrate`
(layout 1 -> 2, schema 2 -> 3) and :mod:`~evalfarm.warehouse.verify` (``evalfarm verify``). This package re-exports
what callers use.

Layout (private; the SQL views are the public interface)::

    <root>/warehouse.json                                   {"schema_version": 4, "format": "delta", ...}
    <root>/tables/<table>/_delta_log/                       each table's Delta log: which files make each version
    <root>/tables/<table>/data/<run_id>/<uuid>.parquet      a unit's (or a batch's) rows, staged then committed
    <root>/tables/<table>/data/compact/<uuid>.parquet       merged small files (evalfarm warehouse compact)
    <root>/tables/metrics/data/current|superseded/…         the newest computations set apart, and the older ones
    <root>/embeddings/model=<id>/store=<key>/<shard>.parquet   (a model's texts, each embedded once; not a table)
    <root>/leases/…  <root>/_readers/…  <root>/quarantine/…      (claims of runs, pins of readers, damaged files)

Tables: ``metrics``, ``quality``, ``models``, ``runs``, ``failures``, ``units``, ``correlation_ci``, ``manifests`` and
each task kind's detail tables (EvalRank's ``ranks`` and ``neighbours``). The root is a local path or any pyarrow
filesystem URI (``file://``, ``s3://``, ``gs://``): on a multi-node Ray cluster it must be storage every node sees.
Every data file appears atomically (a temp name and a rename on a local disk, one PUT on an object store) and
becomes part of its table only when a commit names it; a commit is atomic and Delta's optimistic concurrency
(an exclusive create of the next log entry; a conditional PUT on S3) lets any number of runs and workers append.
"""

from __future__ import annotations

from evalfarm.warehouse.commits import BATCH_SECONDS, BATCH_UNITS, CommitBatcher
from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.query import ViewSource, create_views, open_connection, sql_dir, view_sources
from evalfarm.warehouse.sandbox import check_read_only, lock_down
from evalfarm.warehouse.schemas import (
    CORE_SCHEMAS,
    SCHEMAS,
    UNIT_COLUMNS,
    UNIT_TABLES,
    detail_schema,
    empty_table,
    kind_schemas,
    table_schemas,
    unit_tables,
)
from evalfarm.warehouse.store import (
    FORMAT_FILE,
    MANIFEST_TABLE,
    QUARANTINE_DIR,
    SCHEMA_VERSION,
    STALE_TEMP_SECONDS,
    VERIFIED_MANIFEST,
    LegacyWarehouse,
    Quarantined,
    Warehouse,
    WarehouseWriteError,
    _temp_name,
    atomic_write_table,
    embeddings_table,
    new_run_id,
    now,
    read_embeddings,
    resolve_filesystem,
    sweep_temp_files,
)
from evalfarm.warehouse.tables import DamagedTable, FileEntry, Snapshot, StagedFile, TableError
from evalfarm.warehouse.verify import Finding, VerifyResult, verify_warehouse

__all__ = [
    "BATCH_SECONDS",
    "BATCH_UNITS",
    "CORE_SCHEMAS",
    "FORMAT_FILE",
    "MANIFEST_TABLE",
    "QUARANTINE_DIR",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "STALE_TEMP_SECONDS",
    "UNIT_COLUMNS",
    "UNIT_TABLES",
    "VERIFIED_MANIFEST",
    "CommitBatcher",
    "DamagedTable",
    "FileEntry",
    "Finding",
    "LegacyWarehouse",
    "Quarantined",
    "Snapshot",
    "StagedFile",
    "TableError",
    "VerifyResult",
    "ViewSource",
    "Warehouse",
    "WarehouseLike",
    "WarehouseWriteError",
    "_temp_name",
    "atomic_write_table",
    "check_read_only",
    "create_views",
    "detail_schema",
    "embeddings_table",
    "empty_table",
    "kind_schemas",
    "lock_down",
    "new_run_id",
    "now",
    "open_connection",
    "read_embeddings",
    "resolve_filesystem",
    "sql_dir",
    "sweep_temp_files",
    "table_schemas",
    "unit_tables",
    "verify_warehouse",
    "view_sources",
]
