"""Benchmark: Delta Lake (delta-rs) against Apache Iceberg (pyiceberg, SQL catalog on SQLite) for the warehouse's
write and read pattern, the measurement behind docs/design.md's choice of table format.

The pattern: a run commits batches of a few hundred metric rows (one commit per batch and table), readers plan a
scan of the newest snapshot (the file list DuckDB then reads) or of a past one, and maintenance merges small files.
Measured on local disk, one process, ``--commits`` appends of ``--rows`` rows each to one table:

- commit latency (median and 95th percentile over the appends, seconds);
- planning the newest snapshot's file list after the appends, cold (a new process's first read: the table opened
  from its metadata) and the bytes of metadata on disk;
- planning a past snapshot (version or snapshot id ``commits // 2``);
- compaction: whether the library merges files itself, and how long it takes here;
- what a commit needs besides the storage: a catalog database (Iceberg's SQL catalog) or nothing (Delta: the log
  is in the table's folder, and on S3 a conditional PUT arbitrates concurrent commits).

pyiceberg is not one of evalfarm's dependencies: run this in an environment that has it
(``pip install 'pyiceberg[sql-sqlite,pyarrow]' deltalake``); it skips a format whose library is missing.

    python benchmarks/bench_table_formats.py --commits 300 --rows 500 --json benchmarks/results/table-formats.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

COLD_DELTA = """
import sys, time
from deltalake import DeltaTable
t0 = time.perf_counter()
dt = DeltaTable(sys.argv[1]) if len(sys.argv) < 3 else DeltaTable(sys.argv[1], version=int(sys.argv[2]))
n = len(dt.file_uris())
print(time.perf_counter() - t0, n)
"""
COLD_ICEBERG = """
import sys, time
from pyiceberg.catalog.sql import SqlCatalog
t0 = time.perf_counter()
cat = SqlCatalog("bench", uri=f"sqlite:///{sys.argv[1]}/catalog.db", warehouse=f"file://{sys.argv[1]}")
table = cat.load_table("bench.metrics")
scan = table.scan() if len(sys.argv) < 3 else table.scan(snapshot_id=int(sys.argv[2]))
n = len(list(scan.plan_files()))
print(time.perf_counter() - t0, n)
"""


def batch(rows: int, i: int) -> pa.Table:
    rng = np.random.default_rng(i)
    return pa.table({
        "run_id": pa.array([f"r{i // 50}"] * rows),
        "model": pa.array([f"m{(i * rows + k) % 1000:04d}" for k in range(rows)]),
        "task": pa.array([f"t{k % 22}" for k in range(rows)]),
        "metric": pa.array(["mrr"] * rows),
        "value": pa.array(rng.random(rows)),
    })  # fmt: skip


def _cold(code: str, *args: str) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    seconds, n = out.stdout.split()
    return float(seconds), int(n)


def _dir_bytes(path: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file())


def delta(root: Path, commits: int, rows: int) -> dict[str, Any]:
    from deltalake import DeltaTable, write_deltalake

    uri = str(root / "metrics")
    times = []
    for i in range(commits):
        t0 = time.perf_counter()
        write_deltalake(uri, batch(rows, i), mode="append")
        times.append(time.perf_counter() - t0)
    cold, files = _cold(COLD_DELTA, uri)
    past, _ = _cold(COLD_DELTA, uri, str(commits // 2))
    t0 = time.perf_counter()
    DeltaTable(uri).optimize.compact()
    compact = time.perf_counter() - t0
    return {
        "commit_median_s": statistics.median(times),
        "commit_p95_s": float(np.percentile(times, 95)),
        "plan_newest_cold_s": cold,
        "plan_past_cold_s": past,
        "files": files,
        "metadata_bytes": _dir_bytes(root / "metrics" / "_delta_log", "*"),
        "compaction": "built in (optimize.compact)",
        "compact_s": compact,
        "needs": "nothing but the storage (S3: conditional PUT)",
    }


def iceberg(root: Path, commits: int, rows: int) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    cat.create_namespace("bench")
    table = cat.create_table("bench.metrics", schema=batch(1, 0).schema)
    times = []
    snapshots = []
    for i in range(commits):
        t0 = time.perf_counter()
        table.append(batch(rows, i))
        times.append(time.perf_counter() - t0)
        snapshots.append(table.current_snapshot().snapshot_id)  # type: ignore[union-attr]
    cold, files = _cold(COLD_ICEBERG, str(root))
    past, _ = _cold(COLD_ICEBERG, str(root), str(snapshots[commits // 2]))
    return {
        "commit_median_s": statistics.median(times),
        "commit_p95_s": float(np.percentile(times, 95)),
        "plan_newest_cold_s": cold,
        "plan_past_cold_s": past,
        "files": files,
        "metadata_bytes": _dir_bytes(root, "*.json") + _dir_bytes(root, "*.avro") + _dir_bytes(root, "*.db"),
        "compaction": "none in pyiceberg 0.12 (maintenance.expire_snapshots only; files rewritten by another engine)",
        "compact_s": None,
        "needs": "a catalog database (SQLite on one machine, PostgreSQL for a cluster)",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true", help="10 commits of 20 rows: the script runs")
    args = ap.parse_args()
    if args.smoke:
        args.commits, args.rows = 10, 20
    out: dict[str, Any] = {"host": platform.node(), "commits": args.commits, "rows": args.rows, "formats": {}}
    for name, fn, module in (("delta", delta, "deltalake"), ("iceberg", iceberg, "pyiceberg")):
        try:
            __import__(module)
        except ImportError:
            print(f"{name}: {module} is not installed, skipped")
            continue
        root = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        try:
            out["formats"][name] = got = fn(root, args.commits, args.rows)
            out["formats"][name]["version"] = __import__(module).__version__
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(name, json.dumps(got, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
