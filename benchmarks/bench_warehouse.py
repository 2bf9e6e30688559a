"""Benchmark: the warehouse at 100, 1,000 and 10,000 models x the starter zoo's tasks x 30 nightly runs, before
(layout 1: one Parquet file per unit and table) and after (layout 2: a Delta table per table), on local disk and on
the loopback S3 server (its requests counted by operation).

The synthetic warehouse: every model is evaluated on every task of a profile taken from a real run
(``--profile``: a JSON of each task's metric rows and their value distributions, written by ``--write-profile
WAREHOUSE`` from a real warehouse; ``benchmarks/results/warehouse-profile.json`` comes from the starter zoo). Night 1
computes every unit; each later night recomputes ``--churn`` of the units (a spec or data change: a new fingerprint)
and adds ``--growth`` new models. Layout 2 is written as a run writes it: batches of ``BATCH_UNITS`` units committed
together (one staged file per table and batch here, where a run stages one per unit: the end-of-run compaction
leaves the same files either way), the run's end event with its snapshot, the end-of-run compaction past its
threshold and a checkpoint. Layout 1 is written as evalfarm wrote it: a file per unit and table, named by
fingerprint (a recomputed unit with a new fingerprint adds files).

Measured on the warehouse after the last night, each in a fresh process: ``seconds`` from opening the warehouse to the
answer (snapshots, views, the query; the process's imports, the same for any warehouse, come before it and are in
``process_seconds``) and the process's peak RSS. The
``board``, the ``leaderboard``, the ``correlations`` view, the ``history`` of one model and of everything,
``evalfarm diff`` of the last two nights (layout 2 only: layout 1 keeps no runs' states), and the warehouse's part
of a no-op nightly rerun of every unit (the done check over every unit, its skipped units' rows, the run's start
and end). On S3: the requests of each, by operation. And files per table.

    python benchmarks/bench_warehouse.py --models 100 1000 --layouts 1 2 --store local s3 \\
        --json benchmarks/results/warehouse.json
    python benchmarks/bench_warehouse.py --write-profile /path/to/starter-warehouse   # the profile, once
    python benchmarks/bench_warehouse.py --smoke     # 20 models x 3 nights, both layouts, local: seconds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalfarm.warehouse import Warehouse, empty_table, table_schemas  # noqa: E402
from evalfarm.warehouse.commits import BATCH_UNITS  # noqa: E402

PROFILE = ROOT / "benchmarks" / "results" / "warehouse-profile.json"
T0 = datetime(2026, 10, 1, 2, 0, tzinfo=UTC)
QUERIES = {
    "board": "SELECT * FROM board",
    "leaderboard": "SELECT * FROM leaderboard",
    "correlations": "SELECT * FROM correlations",
    "history, one model": "SELECT * FROM history WHERE model = 'm00001'",
    "history, count": "SELECT count(*) FROM history",
}


# -- the profile --------------------------------------------------------------------------------------------------
def write_profile(warehouse: str, out: Path) -> dict[str, Any]:
    """Each task's metric rows (scorer, subset, variant, ties, metric, primary, direction) with the mean and
    standard deviation of their values over the warehouse's models, and its detail tables' rows per unit."""
    wh = Warehouse(warehouse)
    rows = wh.query(
        "SELECT task, scorer, subset, variant, ties, metric, is_primary, higher_is_better, avg(value) AS mean, "
        "coalesce(stddev(value), 0) AS std, count(DISTINCT model) AS models FROM metrics "
        "GROUP BY ALL ORDER BY ALL"
    ).to_pylist()
    tasks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tasks.setdefault(r.pop("task"), []).append(r)
    profile = {"source": str(warehouse), "models": int(wh.query("SELECT count(*) FROM models").column(0)[0].as_py()),
               "tasks": tasks}  # fmt: skip
    out.write_text(json.dumps(profile, indent=1, default=str) + "\n")
    return profile


# -- the synthetic nights -------------------------------------------------------------------------------------------
def _model(i: int) -> str:
    return f"m{i:05d}"


def nights(n_models: int, n_nights: int, churn: float, growth: float, seed: int) -> Iterator[list[tuple[int, int]]]:
    """Per night, the (model, task index) units computed, with a new fingerprint version each recompute."""
    rng = np.random.default_rng(seed)
    models = n_models
    yield [(m, 0) for m in range(models)]
    for _ in range(1, n_nights):
        recompute = rng.choice(models, size=max(1, int(models * churn)), replace=False)
        new = list(range(models, models + int(n_models * growth)))
        models += len(new)
        yield [(int(m), 1) for m in recompute] + [(m, 0) for m in new]


class Synth:
    """Rows of a unit, drawn from the profile: values ~ Normal(mean, std) per (task, metric row), seeded."""

    def __init__(self, profile: dict[str, Any], seed: int) -> None:
        self.tasks = sorted(profile["tasks"])
        self.rows = profile["tasks"]
        self.rng = np.random.default_rng(seed)

    def metrics(self, run: str, at: datetime, units: list[tuple[str, str, str]]) -> pa.Table:
        cols: dict[str, list[Any]] = {k: [] for k in ("run_id", "model", "task", "scorer", "subset", "variant",
                                                      "ties", "metric", "value", "is_primary", "higher_is_better",
                                                      "fingerprint", "spec_hash", "task_checksum", "scorer_version",
                                                      "params", "created_at")}  # fmt: skip
        for model, task, fp in units:
            for r in self.rows[task]:
                cols["run_id"].append(run)
                cols["model"].append(model)
                cols["task"].append(task)
                for k in ("scorer", "subset", "variant", "ties", "metric"):
                    cols[k].append(r[k])
                cols["value"].append(float(self.rng.normal(r["mean"], r["std"])))
                cols["is_primary"].append(bool(r["is_primary"]))
                cols["higher_is_better"].append(r["higher_is_better"])
                cols["fingerprint"].append(fp)
                cols["spec_hash"].append(fp[:8])
                cols["task_checksum"].append("c")
                cols["scorer_version"].append("1")
                cols["params"].append("{}")
                cols["created_at"].append(at)
        return pa.table(cols)

    @staticmethod
    def quality(run: str, units: list[tuple[str, str, str]]) -> pa.Table:
        n = len(units)
        return pa.table({"run_id": [run] * n, "model": [u[0] for u in units], "task": [u[1] for u in units],
                         "n_texts": [1000] * n, "degenerate": [False] * n,
                         "fingerprint": [u[2] for u in units]})  # fmt: skip

    @staticmethod
    def units(run: str, at: datetime, units: list[tuple[str, str, str]]) -> pa.Table:
        n = len(units)
        return pa.table({"run_id": [run] * n, "model": [u[0] for u in units], "task": [u[1] for u in units],
                         "stage": ["score"] * n, "started_at": [at] * n, "seconds": [1.0] * n,
                         "status": ["done"] * n, "attempts": [1] * n,
                         "fingerprint": [u[2] for u in units]})  # fmt: skip


def _fp(model: str, task: str, version: int) -> str:
    return f"{abs(hash((model, task, version))) % 16**16:016x}"


def fill(root: str, layout: int, n_models: int, n_nights: int, profile: dict[str, Any], *, churn: float,
         growth: float, seed: int) -> dict[str, Any]:  # fmt: skip
    """Write the synthetic nights into ``root`` in ``layout``; returns what was written and how long it took."""
    synth = Synth(profile, seed)
    wh = Warehouse(root)
    if layout == 2:
        wh.init()
    else:
        _legacy_init(wh)
    t0 = time.perf_counter()
    written = 0
    versions: dict[tuple[str, str], int] = {}
    for night, computed in enumerate(nights(n_models, n_nights, churn, growth, seed)):
        run = f"2026100{night // 10}T{night % 10:02d}0000-{uuid.UUID(int=night).hex[:8]}"
        at = T0 + timedelta(days=night)
        units = []
        for m, bump in computed:
            for task in synth.tasks:
                v = versions[(_model(m), task)] = versions.get((_model(m), task), -1) + 1 if bump else 0
                units.append((_model(m), task, _fp(_model(m), task, v)))
        written += len(units)
        (_night_delta if layout == 2 else _night_legacy)(wh, run, at, units, synth, {_model(m) for m, _ in computed})
    return {"units_written": written, "seconds": round(time.perf_counter() - t0, 1)}


def _models_rows(run: str, at: datetime, models: set[str]) -> pa.Table:
    ms = sorted(models)
    return pa.table({"model": ms, "level": ["sentence"] * len(ms), "kind": ["transformers"] * len(ms),
                     "spec_hash": [m[:8] for m in ms], "spec": ["[]"] * len(ms), "run_id": [run] * len(ms),
                     "created_at": [at] * len(ms)})  # fmt: skip


def _night_delta(wh: Warehouse, run: str, at: datetime, units: list[tuple[str, str, str]], synth: Synth,
                 models: set[str]) -> None:  # fmt: skip
    from evalfarm.warehouse.maintenance import compact_if_needed

    wh.write_run_event(run, "start", status="running")
    for lo in range(0, len(units), BATCH_UNITS):
        part = units[lo : lo + BATCH_UNITS]
        staged = [wh.tables.stage(t, wh.typed(t, rows), run_id=run) for t, rows in (
            ("quality", synth.quality(run, part)), ("units", synth.units(run, at, part)),
            ("metrics", synth.metrics(run, at, part)))]  # fmt: skip
        wh.commit(staged, run_id=run, batch=lo // BATCH_UNITS + 1)
    wh.write("models", wh.typed("models", _models_rows(run, at, models)), run_id=run)
    versions = {t: wh.tables.snapshot(t).version for t in table_schemas() if t != "runs"}
    wh.write("runs", [{"run_id": run, "event": "end", "at": at + timedelta(hours=1), "status": "ok",
                       "n_units": len(units), "n_done": len(units), "snapshot": json.dumps(versions)}])  # fmt: skip
    compact_if_needed(wh, run_id=run)
    wh.checkpoint()


def _legacy_init(wh: Warehouse) -> None:
    for name, schema in table_schemas().items():
        path = f"{wh.base}/tables/{name}/_schema.parquet"
        if not wh.exists(path):
            _put(wh, path, empty_table(schema))


def _put(wh: Warehouse, path: str, table: pa.Table) -> None:
    if wh.local:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    else:
        with wh.fs.open_output_stream(path) as out:
            pq.write_table(table, out)


def _night_legacy(wh: Warehouse, run: str, at: datetime, units: list[tuple[str, str, str]], synth: Synth,
                  models: set[str]) -> None:  # fmt: skip
    """As layout 1 wrote a run: per unit a metrics and a quality file named by fingerprint, per run its events and
    units rows, per model and spec its row (replaced each run)."""
    _put(wh, f"{wh.base}/tables/runs/{run}.start.parquet",
         wh.typed("runs", [{"run_id": run, "event": "start", "at": at, "status": "running"}]))  # fmt: skip
    for u in units:
        folder = f"{wh.base}/tables/{{}}/model={u[0]}/task={u[1]}/{u[2]}.parquet"
        _put(wh, folder.format("metrics"), wh.typed("metrics", synth.metrics(run, at, [u])))
        _put(wh, folder.format("quality"), wh.typed("quality", synth.quality(run, [u])))
    _put(
        wh, f"{wh.base}/tables/units/{run}/{uuid.uuid4().hex}.parquet", wh.typed("units", synth.units(run, at, units))
    )
    for m in models:
        row = wh.typed("models", _models_rows(run, at, {m}))
        _put(wh, f"{wh.base}/tables/models/model={m}/{m[:8]}.parquet", row)
    end = [{"run_id": run, "event": "end", "at": at + timedelta(hours=1), "status": "ok"}]
    _put(wh, f"{wh.base}/tables/runs/{run}.end.parquet", wh.typed("runs", end))


# -- measuring ----------------------------------------------------------------------------------------------------
PROBE = r"""
import json, resource, sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from evalfarm.warehouse import Warehouse, table_schemas
import deltalake, duckdb
table_schemas()  # the kinds' registries: imports every scorer (a fixed cost of any reading process)
what, root, arg = sys.argv[2], sys.argv[3], sys.stdin.read()  # arg: a unit list past ARG_MAX
t0 = time.perf_counter()
wh = Warehouse(root)
if what == "sql":
    rows = wh.query(arg, timeout_s=0, memory_limit="8GB").num_rows
elif what == "diff":
    from evalfarm.warehouse.history import diff_runs
    rows = len(diff_runs(wh).rows)
elif what == "noop":
    from evalfarm.plan import Unit
    units = json.loads(arg)
    if wh.layout() == "delta":
        done = wh.done([Unit(m, t, "s", "sentence", "h", "c", "{}", f) for m, t, f in units])
    else:  # layout 1's check: the unit's metrics file exists (a stat each; one listing per table on a store)
        import pyarrow.fs as pafs
        paths = {f"{wh.base}/tables/metrics/model={m}/task={t}/{f}.parquet" for m, t, f in units}
        if wh.local:
            import os
            done = [os.path.exists(p) for p in paths]
        else:
            sel = pafs.FileSelector(f"{wh.base}/tables/metrics", recursive=True)
            listed = {i.path for i in wh.fs.get_file_info(sel)}
            done = [p in listed for p in paths]
    assert all(done), "a unit of the last night is not done"
    rows = len(done)
    if wh.layout() == "delta":
        wh.write_run_event("noop", "start", status="running")
        wh.write_units("noop", [{"model": m, "task": t, "stage": "plan", "status": "skipped"} for m, t, _ in units])
        wh.write_run_event("noop", "end", status="ok")
end = time.perf_counter()
def hwm_mb():
    # this process's own peak: VmHWM starts again at exec, where ru_maxrss keeps the forking parent's (the benchmark
    # driver's ~1 GB would floor every reading)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("PROBE " + json.dumps({"seconds": end - t0, "process_seconds": end - start, "rows": rows,
                  "peak_rss_mb": hwm_mb()}))
"""


def probe(what: str, root: str, arg: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), what, root], input=arg, capture_output=True,
                          text=True, env=env, timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:300]}
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("PROBE ")]  # the answer's own output aside
    return dict(json.loads(line.removeprefix("PROBE ")))


def files_per_table(root: str) -> dict[str, int]:
    wh = Warehouse(root)
    if wh.layout() == "delta":
        return {t: len(wh.tables.snapshot(t).files) for t in ("metrics", "quality", "units", "models", "runs")}
    from evalfarm.warehouse.legacy import legacy_files

    files = legacy_files(wh)
    return {t: len(files[t]) for t in ("metrics", "quality", "units", "models", "runs")}


def last_units(root: str, profile: dict[str, Any], n: int) -> list[list[str]]:
    """(model, task, fingerprint) of every current unit, from the warehouse itself (what the rerun's plan holds)."""
    rows = Warehouse(root).query("SELECT DISTINCT model, task, fingerprint FROM metrics", timeout_s=0)
    return [[r["model"], r["task"], r["fingerprint"]] for r in rows.to_pylist()][:n]


def measure(root: str, layout: int, env: dict[str, str], s3: Any, profile: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    jobs: list[tuple[str, str, str]] = [(name, "sql", q) for name, q in QUERIES.items()]
    if layout == 2:
        jobs.append(("diff", "diff", ""))
    jobs.append(("no-op rerun (warehouse part)", "noop", json.dumps(last_units(root, profile, 10**9))))
    for name, what, arg in jobs:
        if s3 is not None:
            s3.reset()
        got = probe(what, root, arg, env)
        if s3 is not None:
            got["requests"] = s3.counts()
            got["requests_total"] = sum(got["requests"].values())
        out[name] = got
        print(f"    {name}: {got}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--layouts", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--store", nargs="+", default=["local"], choices=["local", "s3"])
    ap.add_argument("--churn", type=float, default=0.02, help="share of units recomputed each later night")
    ap.add_argument("--growth", type=float, default=0.01, help="new models each later night, as a share of --models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--write-profile", metavar="WAREHOUSE")
    ap.add_argument("--keep", type=Path, help="write the warehouses here and keep them (default: a temp folder)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.write_profile:
        p = write_profile(args.write_profile, args.profile)
        print(f"profile of {len(p['tasks'])} tasks -> {args.profile}")
        return
    if args.smoke:
        args.models, args.nights, args.store = [20], 3, ["local"]
    profile = json.loads(args.profile.read_text())
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-warehouse-"))
    results: dict[str, Any] = {"host": platform.node(), "cpus": os.cpu_count(),
                               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "nights": args.nights,
                               "churn": args.churn, "growth": args.growth, "tasks": len(profile["tasks"]),
                               "profile": profile.get("source"), "cases": []}  # fmt: skip
    try:
        for store in args.store:
            ctx = _s3() if store == "s3" else None
            s3 = ctx.__enter__() if ctx is not None else None
            try:
                for n in args.models:
                    for layout in args.layouts:
                        results["cases"].append(_case(base, store, s3, n, layout, args, profile))
                        if args.json:
                            args.json.write_text(json.dumps(results, indent=1) + "\n")
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def _s3() -> Any:
    from tests.support.s3_server import s3_server

    return s3_server()


def _case(base: Path, store: str, s3: Any, n: int, layout: int, args: Any, profile: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    if s3 is not None:
        env.update(s3.env)
        os.environ.update(s3.env)
        root = f"{s3.make_bucket('bench-warehouse')}/l{layout}-m{n}"
    else:
        root = str(base / f"l{layout}-m{n}")
    print(f"{store}, layout {layout}, {n} models x {len(profile['tasks'])} tasks x {args.nights} nights", flush=True)
    if s3 is not None:
        s3.reset()
    wrote = fill(root, layout, n, args.nights, profile, churn=args.churn, growth=args.growth, seed=args.seed)
    if s3 is not None:
        wrote["requests"] = s3.counts()
    print(f"  written: {wrote}", flush=True)
    case = {"store": store, "layout": layout, "models": n, "write": wrote, "files": files_per_table(root)}
    case["queries"] = measure(root, layout, env, s3, profile)
    return case


if __name__ == "__main__":
    main()
