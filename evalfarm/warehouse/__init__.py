"""The result warehouse: hive-style folders of Parquet files, and DuckDB views over them.

Four modules, one concern each: :mod:`~evalfarm.warehouse.schemas` (every table's schema: the core tables and each
task kind's detail tables), :mod:`~evalfarm.warehouse.store` (the :class:`Warehouse`: layout, atomic writes, the scan
for damaged files, quarantine) and :mod:`~evalfarm.warehouse.query` (the views, core ``sql/*.sql`` then each task
kind's, and the read-only DuckDB sandbox); :mod:`~evalfarm.warehouse.verify` checks result files against the
manifests (``evalfarm verify``). This package re-exports what callers use.

Layout (private; the SQL views are the public interface)::

    <root>/embeddings/model=<id>/store=<key>/<shard>.parquet             (a model's texts, each embedded once)
    <root>/tables/<table>/model=<id>/task=<task>/<fingerprint>.parquet   (metrics, quality, a kind's detail tables)
    <root>/tables/models/model=<id>/<spec_hash>.parquet
    <root>/tables/runs/<run_id>.<start|end>.parquet
    <root>/tables/failures/<run_id>/<uuid>.parquet
    <root>/tables/<table>/_schema.parquet                                 (empty, typed: views work on day one)

    <root>/tables/units/<run_id>/<uuid>.parquet                           (per-unit timings and attempts)
    <root>/tables/correlation_ci/<hash>.parquet                           (bootstrap intervals of correlations)
    <root>/tables/manifests/<run_id>/<uuid>.parquet                       (sha256 of each result file a run wrote)

The root is a local path or any pyarrow filesystem URI (``file://``, ``s3://``, ``gs://``): on a multi-node Ray
cluster it must be storage every node sees. Every file appears atomically: on a local (or NFS) filesystem it is
written to a temp name in the same folder and renamed; on an object store it is written straight to its final
key, because a PUT / completed multipart upload is visible whole or not at all while a "rename" there is a
copy + delete that is not atomic. Files are named by content fingerprint: recomputing a unit replaces its file
rather than adding a duplicate, so a retried or concurrently recomputed unit still has exactly one result.

A process killed between writing a temp file and renaming it (SIGKILL, OOM, a lost node) leaves the temp file
behind. It never looks like a result (a hidden ``.….tmp`` name that no view reads), and the next ``init`` of the
warehouse removes it: temp names carry the writer's pid and host, so a temp file of a dead process on this host
goes at once, and one from another host once it is a day old (its writer cannot still be at work).
"""

from __future__ import annotations

from evalfarm.warehouse.query import (
    ViewSource,
    check_read_only,
    create_views,
    lock_down,
    open_connection,
    sql_dir,
    view_sources,
)
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
    MANIFEST_TABLE,
    QUARANTINE_DIR,
    STALE_TEMP_SECONDS,
    VERIFIED_MANIFEST,
    Quarantined,
    Recorded,
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
from evalfarm.warehouse.verify import Finding, VerifyResult, verify_warehouse

__all__ = [
    "CORE_SCHEMAS",
    "MANIFEST_TABLE",
    "QUARANTINE_DIR",
    "SCHEMAS",
    "STALE_TEMP_SECONDS",
    "UNIT_COLUMNS",
    "UNIT_TABLES",
    "VERIFIED_MANIFEST",
    "Quarantined",
    "Recorded",
    "VerifyResult",
    "ViewSource",
    "Warehouse",
    "WarehouseWriteError",
    "Finding",
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
