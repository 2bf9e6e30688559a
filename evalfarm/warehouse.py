"""The result warehouse: hive-style folders of Parquet files, and DuckDB views over them (``sql/*.sql``).

Layout (private; the SQL views are the public interface)::

    <root>/embeddings/model=<id>/pool=<pool>/<fingerprint>.parquet
    <root>/tables/<table>/model=<id>/pool=<pool>/<fingerprint>.parquet   (metrics, ranks)
    <root>/tables/models/model=<id>/<spec_hash>.parquet
    <root>/tables/runs/<run_id>.<start|end>.parquet
    <root>/tables/failures/<run_id>/<uuid>.parquet
    <root>/tables/<table>/_schema.parquet                                 (empty, typed: views work on day one)

Every file appears atomically (written to a temp name in the same folder, then renamed), so a crash never
leaves a half file that later looks complete. Files are named by content fingerprint: recomputing a unit
replaces its file rather than adding a duplicate.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"

_TS = pa.timestamp("us", tz="UTC")
SCHEMAS: dict[str, pa.Schema] = {
    "metrics": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("pool", pa.string()),
            ("similarity", pa.string()),
            ("metric", pa.string()),
            ("value", pa.float64()),
            ("fingerprint", pa.string()),
            ("spec_hash", pa.string()),
            ("pool_checksum", pa.string()),
            ("code_version", pa.string()),
            ("policy", pa.string()),
            ("created_at", _TS),
        ]
    ),
    "ranks": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("pool", pa.string()),
            ("similarity", pa.string()),
            ("query_id", pa.int64()),
            ("positive_id", pa.int64()),
            ("query", pa.string()),
            ("positive", pa.string()),
            ("rank", pa.int64()),
            ("score", pa.float32()),
            ("oov", pa.bool_()),
            ("fingerprint", pa.string()),
        ]
    ),
    "models": pa.schema(
        [
            ("model", pa.string()),
            ("level", pa.string()),
            ("kind", pa.string()),
            ("dim", pa.int64()),
            ("spec_hash", pa.string()),
            ("base", pa.string()),
            ("pooling", pa.string()),
            ("postprocess", pa.string()),
            ("source", pa.string()),
            ("provenance", pa.string()),
            ("spec", pa.string()),
            ("run_id", pa.string()),
            ("created_at", _TS),
        ]
    ),
    "runs": pa.schema(
        [
            ("run_id", pa.string()),
            ("event", pa.string()),
            ("at", _TS),
            ("status", pa.string()),
            ("catalog", pa.string()),
            ("n_units", pa.int64()),
            ("n_failed", pa.int64()),
            ("n_skipped", pa.int64()),
            ("host", pa.string()),
            ("argv", pa.string()),
            ("code_version", pa.string()),
        ]
    ),
    "failures": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("pool", pa.string()),
            ("stage", pa.string()),
            ("error", pa.string()),
            ("detail", pa.string()),
            ("created_at", _TS),
        ]
    ),
}


def now() -> datetime:
    return datetime.now(UTC)


def new_run_id() -> str:
    """Sortable and unique across concurrent runs: UTC time plus random suffix."""
    return now().strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def atomic_write_table(table: pa.Table, path: Path, **kwargs: Any) -> Path:
    """Write Parquet to a temp file beside ``path``, fsync, then rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp, **kwargs)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class Warehouse:
    """A warehouse root on the local filesystem."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()

    # -- layout ---------------------------------------------------------------------------------------------
    def init(self) -> Warehouse:
        for name, schema in SCHEMAS.items():
            p = self.root / "tables" / name / "_schema.parquet"
            if not p.exists():
                atomic_write_table(schema.empty_table(), p)
        (self.root / "embeddings").mkdir(parents=True, exist_ok=True)
        return self

    def embeddings_path(self, model: str, pool: str, fingerprint: str) -> Path:
        return self.root / "embeddings" / f"model={model}" / f"pool={pool}" / f"{fingerprint}.parquet"

    def unit_path(self, table: str, model: str, pool: str, fingerprint: str) -> Path:
        return self.root / "tables" / table / f"model={model}" / f"pool={pool}" / f"{fingerprint}.parquet"

    # -- writes ---------------------------------------------------------------------------------------------
    def write(self, table: str, rows: pa.Table | list[dict[str, Any]], path: Path) -> Path:
        schema = SCHEMAS[table]
        t = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        return atomic_write_table(t.select(schema.names).cast(schema), path)

    def write_model(self, row: dict[str, Any]) -> Path:
        path = self.root / "tables" / "models" / f"model={row['model']}" / f"{row['spec_hash']}.parquet"
        return self.write("models", [row], path)

    def write_run_event(self, run_id: str, event: str, **fields: Any) -> Path:
        row = {"run_id": run_id, "event": event, "at": now(), **fields}
        return self.write("runs", [row], self.root / "tables" / "runs" / f"{run_id}.{event}.parquet")

    def write_failure(
        self, run_id: str, model: str | None, pool: str | None, stage: str, error: str, detail: str = ""
    ) -> Path:
        row = {
            "run_id": run_id,
            "model": model,
            "pool": pool,
            "stage": stage,
            "error": error,
            "detail": detail,
            "created_at": now(),
        }
        return self.write(
            "failures", [row], self.root / "tables" / "failures" / run_id / f"{uuid.uuid4().hex}.parquet"
        )

    # -- reads ----------------------------------------------------------------------------------------------
    def connect(self, *, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with the views of ``sql/`` over this warehouse.

        Read-only means: only files under the warehouse are visible, nothing can be written, and the
        configuration is locked so a query cannot lift those limits.
        """
        if not (self.root / "tables").exists():
            raise FileNotFoundError(f"no warehouse at {self.root} (run `evalfarm run --warehouse {self.root}` first)")
        con = duckdb.connect(":memory:")
        root_sql = "'" + str(self.root).replace("'", "''") + "'"
        for path in sorted(SQL_DIR.glob("*.sql")):
            con.execute(path.read_text(encoding="utf-8").replace("{root}", str(self.root).replace("'", "''")))
        if read_only:
            con.execute(f"SET allowed_directories=[{root_sql}]")
            con.execute("SET enable_external_access=false")
            con.execute("SET lock_configuration=true")
        return con

    def query(self, sql: str) -> pa.Table:
        """Run one read-only statement (SELECT / WITH / DESCRIBE / SHOW / EXPLAIN / SUMMARIZE) on the views."""
        check_read_only(sql)
        con = self.connect()
        try:
            return con.sql(sql).to_arrow_table()
        finally:
            con.close()

    def has_unit(self, table: str, model: str, pool: str, fingerprint: str) -> bool:
        return self.unit_path(table, model, pool, fingerprint).exists()


_ALLOWED = {"SELECT", "EXPLAIN", "PRAGMA"}


def check_read_only(sql: str) -> None:
    """Refuse anything but queries: the warehouse is append-only and owned by runs."""
    statements = duckdb.extract_statements(sql)
    if not statements:
        raise ValueError("empty query")
    for st in statements:
        kind = st.type.name if hasattr(st.type, "name") else str(st.type)
        if kind not in _ALLOWED:
            raise PermissionError(f"`evalfarm sql` is read-only: {kind} statements are not allowed")


def embeddings_table(
    item_ids: np.ndarray, texts: list[str], emb: np.ndarray, oov: np.ndarray, metadata: dict[str, Any]
) -> pa.Table:
    """Embeddings as ``FixedSizeList<float32>[dim]``; OOV rows are null (the rank stage applies the policy)."""
    dim = emb.shape[1]
    flat = pa.array(np.ascontiguousarray(emb, dtype=np.float32).reshape(-1), type=pa.float32())
    mask = pa.array(oov.astype(bool))
    values = pa.FixedSizeListArray.from_arrays(flat, dim, mask=mask)
    table = pa.table(
        {
            "item_id": pa.array(item_ids, pa.int64()),
            "text": pa.array(texts, pa.string()),
            "embedding": values,
            "oov": pa.array(oov.astype(bool)),
        }
    )
    meta = {k.encode(): (v if isinstance(v, str) else json.dumps(v)).encode() for k, v in metadata.items()}
    return table.replace_schema_metadata(meta)


def read_embeddings(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """(item_ids, float32 matrix with OOV rows as zeros, oov mask, metadata)."""
    t = pq.read_table(path)
    col = t.column("embedding").combine_chunks()
    dim = col.type.list_size
    oov = np.asarray(t.column("oov").to_numpy(zero_copy_only=False), dtype=bool)
    flat = col.flatten().to_numpy(zero_copy_only=False)  # values of non-null rows only when nulls exist
    emb = np.zeros((len(t), dim), dtype=np.float32)
    valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    emb[valid] = flat.reshape(-1, dim)
    raw = t.schema.metadata or {}
    meta: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.decode()
        if key.startswith("ARROW") or key == "pandas":
            continue
        try:
            meta[key] = json.loads(v)
        except json.JSONDecodeError:
            meta[key] = v.decode()
    return t.column("item_id").to_numpy(), emb, oov, meta
