"""Benchmark: the warehouse's read path at 100, 1,000 and 10,000 models x the starter zoo's tasks x 30 nightly runs,
on local disk and on the loopback S3 server (its requests counted by operation), each operation beside a floor
measured in the same run (issue 51).

The synthetic warehouse: every model is evaluated on every task of a profile taken from a real run
(``--profile``: a JSON of each task's metric rows and their value distributions, written by ``--write-profile
WAREHOUSE`` from a real warehouse; ``benchmarks/results/warehouse-profile.json`` comes from the starter zoo). Night 1
computes every unit; each later night recomputes ``--churn`` of the units (a spec or data change: a new fingerprint)
and adds ``--growth`` new models. Layout 2 is written as a run writes it: batches of ``--batch-units`` units
committed together (one staged file per table and batch here, where a run stages one per unit: the end-of-run
maintenance leaves the same files either way), the run's end event with its snapshot, the end-of-run maintenance
(compaction past its threshold, the metrics table's current rows refreshed when worth it) and a checkpoint.
``--layouts 1`` writes layout 1 as evalfarm wrote it before the table format (a file per unit and table).

Measured on the warehouse after the last night, each in a fresh process: ``seconds`` from opening the warehouse to
the answer (snapshots, views, the query; the process's imports, the same for any warehouse, come before it and are
in ``process_seconds``), the process's peak RSS, and on S3 the requests by operation. The operations: ``board``,
``leaderboard``, ``correlations``, one model's history (``history_of``), ``evalfarm diff`` of the last two nights
(``diff_runs``), the warehouse's part of a no-op nightly rerun, and ``evalfarm status`` during a run whose
``--status-files`` unit files are not compacted yet (``run_status``; written last, as a running run leaves them).

Each beside its **floor**, measured in the same run and interleaved with it: the same rows exported to one Parquet
file per table (the metrics table's current rows, what ``metrics`` reads, as one more), read by plain DuckDB in a
fresh process: ``floor`` runs the same SQL (the views the query needs, as evalfarm creates them, over the one-file
tables: no Delta log, no binding, no sandbox), ``hand`` a query written by hand (board and leaderboard). The ratio to
the floor is what counts on a shared machine: the load average is recorded beside every timing.

    python benchmarks/bench_warehouse.py --models 100 1000 10000 --store local s3 \\
        --json benchmarks/results/warehouse-read-path.json        # S3 at up to 1,000 models (--s3-models)
    python benchmarks/bench_warehouse.py --write-profile /path/to/starter-warehouse   # the profile, once
    python benchmarks/bench_warehouse.py --smoke     # 20 models x 3 nights, local, one repeat: seconds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
         growth: float, seed: int, batch_units: int = BATCH_UNITS) -> dict[str, Any]:  # fmt: skip
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
        if layout == 2:
            _night_delta(wh, run, at, units, synth, {_model(m) for m, _ in computed}, batch_units)
        else:
            _night_legacy(wh, run, at, units, synth, {_model(m) for m, _ in computed})
    return {"units_written": written, "seconds": round(time.perf_counter() - t0, 1)}


def _models_rows(run: str, at: datetime, models: set[str]) -> pa.Table:
    ms = sorted(models)
    return pa.table({"model": ms, "level": ["sentence"] * len(ms), "kind": ["transformers"] * len(ms),
                     "spec_hash": [m[:8] for m in ms], "spec": ["[]"] * len(ms), "run_id": [run] * len(ms),
                     "created_at": [at] * len(ms)})  # fmt: skip


def _night_delta(wh: Warehouse, run: str, at: datetime, units: list[tuple[str, str, str]], synth: Synth,
                 models: set[str], batch_units: int = BATCH_UNITS) -> None:  # fmt: skip
    from evalfarm.warehouse.maintenance import compact_during_run, compact_if_needed

    wh.write_run_event(run, "start", status="running")
    for batch, lo in enumerate(range(0, len(units), batch_units), 1):
        part = units[lo : lo + batch_units]
        staged = [wh.tables.stage(t, wh.typed(t, rows), run_id=run) for t, rows in (
            ("quality", synth.quality(run, part)), ("units", synth.units(run, at, part)),
            ("metrics", synth.metrics(run, at, part)))]  # fmt: skip
        wh.commit(staged, run_id=run, batch=batch)
        if batch % 16 == 0:  # what a run's background compaction does after its batch commits
            compact_during_run(wh, run_id=run, tables=("metrics", "quality", "units", "manifests"))
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
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0 = cpu()
t0 = time.perf_counter()
wh = Warehouse(root)
if what == "sql":
    rows = wh.query(arg, timeout_s=0, memory_limit="4GB", max_rows=0, max_bytes=0).num_rows
elif what == "diff":
    from evalfarm.warehouse.history import diff_runs
    rows = len(diff_runs(wh).rows)
elif what == "status":
    from evalfarm.status import run_status
    st = run_status(wh, arg)
    rows = sum(int(w["units"] or 0) for w in st.per_worker)
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
print("PROBE " + json.dumps({"seconds": end - t0, "cpu_seconds": cpu() - c0, "process_seconds": end - start,
                             "rows": rows, "peak_rss_mb": hwm_mb()}))
"""

FLOOR = r"""
import json, resource, sys, time
start = time.perf_counter()
import duckdb
script, queries = json.loads(sys.stdin.read())
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0 = cpu()
t0 = time.perf_counter()
con = duckdb.connect()
con.execute("SET enable_progress_bar=false")  # as evalfarm's connections: no bar drawn on stdout
con.execute("SET memory_limit='4GB'")  # the cap the evalfarm side runs under
for statement in script:
    con.execute(statement)
rows = 0
for query in queries:  # each fetched whole, as Arrow (what evalfarm's query returns)
    rows = sum(b.num_rows for b in con.sql(query).to_arrow_reader(65536))
end = time.perf_counter()
def hwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
print("PROBE " + json.dumps({"seconds": end - t0, "cpu_seconds": cpu() - c0, "process_seconds": end - start,
                             "rows": rows, "peak_rss_mb": hwm_mb()}))
"""


def _run(code: list[str], stdin: str, env: dict[str, str]) -> dict[str, Any]:
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", *code], input=stdin, capture_output=True, text=True, env=env,
                          timeout=3600)  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("PROBE ")]  # the answer's own output aside
    if proc.returncode != 0 or len(lines) != 1:
        why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1][:300]
        return {"error": why, "load": round(load, 2)}
    return {**json.loads(lines[0].removeprefix("PROBE ")), "load": round(load, 2)}


def probe(what: str, root: str, arg: str, env: dict[str, str]) -> dict[str, Any]:
    """One evalfarm operation in a fresh process: its seconds, rows and peak RSS, and the load when it began."""
    return _run([PROBE, str(ROOT), what, root], arg, env)


def probe_floor(script: list[str], *queries: str) -> dict[str, Any]:
    """The floor of an operation in a fresh process: plain DuckDB runs ``script``, then ``queries`` (each fetched
    whole), over local files."""
    return _run([FLOOR], json.dumps([script, list(queries)]), {**os.environ, "PYTHONPATH": ""})


# -- the floor: the same rows, one Parquet file per table, plain DuckDB ---------------------------------------------
_TABLE_READ = re.compile(
    r"read_parquet\(\s*'\{root\}/tables/(\w+)/\*\*/\*\.parquet'\s*,\s*union_by_name\s*=\s*true\s*,"
    r"\s*hive_partitioning\s*=\s*false\s*\)",
    re.IGNORECASE,
)


def export_floor(root: str, folder: Path) -> dict[str, str]:
    """Every table's rows of the warehouse at ``root`` as one local Parquet file each (and the metrics table's
    current rows, what ``metrics`` reads, as ``metrics_current``): table -> file."""
    from evalfarm.warehouse.query import TABLES_SCHEMA

    folder.mkdir(parents=True, exist_ok=True)
    wh = Warehouse(root)
    con = wh.connect(read_only=False)  # every view and table bound; not locked: COPY writes the local files
    out: dict[str, str] = {}
    try:
        names = [r[0] for r in con.sql(
            f"SELECT view_name FROM duckdb_views() WHERE schema_name = '{TABLES_SCHEMA}'").fetchall()]  # fmt: skip
        for name in sorted(n for n in names if n in table_schemas() or n == "metrics_current"):
            path = folder / f"{name}.parquet"
            con.execute(f"COPY (SELECT * FROM {TABLES_SCHEMA}.{name}) TO '{path}' (FORMAT parquet)")
            out[name] = str(path)
    finally:
        con.close()
    return out


def floor_script(files: dict[str, str], query: str) -> list[str]:
    """The statements plain DuckDB runs before ``query``: one relation per table over its one file, then the
    statements of evalfarm's views and macros that the query needs, as evalfarm creates them."""
    from evalfarm.warehouse.query import TABLES_SCHEMA, needed_statements, view_sources

    script = [f"CREATE SCHEMA {TABLES_SCHEMA}"]
    for name, path in files.items():
        script.append(f"CREATE VIEW {TABLES_SCHEMA}.{name} AS SELECT * FROM read_parquet('{path}')")
    for st in needed_statements(view_sources(), [query]):
        text = _TABLE_READ.sub(lambda m: f"{TABLES_SCHEMA}.{m.group(1)}", st.text)
        script.append(text)
    return script


def _roles() -> str:
    from evalfarm.plugins import role_of, task_kinds

    names = sorted(s.name for _, s in task_kinds.items() if role_of(s) == "downstream")
    return ", ".join(f"'{n}'" for n in names) or "NULL"


def hand_queries(files: dict[str, str]) -> dict[str, str]:
    """Board and leaderboard written by hand over the current rows' one file: what the views' shape costs."""
    cur = files["metrics_current"]
    ranked = (
        "SELECT task, scorer, subset, variant, ties, rank() OVER (PARTITION BY task, scorer, subset, variant, ties "
        "ORDER BY CASE WHEN higher_is_better THEN value ELSE -value END DESC NULLS LAST) AS position, model, metric, "
        f"value, ci_low, ci_high FROM read_parquet('{cur}') WHERE task IS NOT NULL AND is_primary "
        "AND NOT coalesce(degenerate, false) AND NOT coalesce(thin, false)"
    )
    board = (
        f"WITH lb AS ({ranked}), present AS (SELECT task, scorer, variant FROM lb GROUP BY ALL), "
        f"chosen AS (SELECT task, scorer, variant, scorer IN ({_roles()}) AND variant LIKE 'max_train=%' AS sample, "
        "row_number() OVER (PARTITION BY task, scorer ORDER BY CASE WHEN variant IN ('full', 'cos') THEN 0 "
        "WHEN variant LIKE 'max_train=%' THEN 2 ELSE 1 END, variant) AS choice FROM present) "
        "SELECT l.task, l.scorer, l.subset, l.variant, l.ties, l.position, l.model, l.metric, l.value, l.ci_low, "
        "l.ci_high, c.sample FROM lb l JOIN chosen c USING (task, scorer, variant) "
        "WHERE c.choice = 1 AND (l.ties IS NULL OR l.ties = 'realistic') "
        "ORDER BY l.task, l.subset, l.position, l.model"
    )
    return {"board": board, "leaderboard": f"{ranked} ORDER BY task, scorer, subset, variant, ties, position, model"}


# -- the operations -------------------------------------------------------------------------------------------------
def files_per_table(root: str) -> dict[str, Any]:
    wh = Warehouse(root)
    if wh.layout() == "delta":
        from evalfarm.warehouse.current import check_split

        out: dict[str, Any] = {t: len(wh.tables.snapshot(t).files) for t in ("metrics", "quality", "units", "models",
                                                                            "runs")}  # fmt: skip
        out["metrics_by_kind"] = check_split(wh.tables.snapshot("metrics").files, wh.tables.folder("metrics"))
        return out
    from evalfarm.warehouse.legacy import legacy_files

    files = legacy_files(wh)
    return {t: len(files[t]) for t in ("metrics", "quality", "units", "models", "runs")}


def last_units(root: str) -> list[list[str]]:
    """(model, task, fingerprint) of every current unit, from the warehouse itself (what the rerun's plan holds)."""
    rows = Warehouse(root).query("SELECT DISTINCT model, task, fingerprint FROM metrics", timeout_s=0, max_rows=0)
    return [[r["model"], r["task"], r["fingerprint"]] for r in rows.to_pylist()]


def operations(root: str, layout: int) -> list[tuple[str, str, str, str | None]]:
    """(name, evalfarm probe, its argument, the floor's query: None for none) of each operation measured."""
    from evalfarm.warehouse.history import last_two_runs

    ops: list[tuple[str, str, str, str | None]] = [
        ("board", "sql", "SELECT * FROM board", "SELECT * FROM board"),
        ("leaderboard", "sql", "SELECT * FROM leaderboard", "SELECT * FROM leaderboard"),
        ("correlations", "sql", "SELECT * FROM correlations", "SELECT * FROM correlations"),
        ("history of one model", "sql", f"SELECT * FROM history_of(models := ['{_model(1)}'])",
         f"SELECT * FROM history_of(models := ['{_model(1)}'])"),
    ]  # fmt: skip
    if layout == 2:
        a, b = last_two_runs(Warehouse(root))
        ops.append(("diff of the last two runs", "diff", "", f"SELECT * FROM run_diff('{a}', '{b}')"))
    return ops


def _timed(jobs: list[tuple[str, Any]], repeats: int) -> dict[str, Any]:
    """Each job ``repeats`` times, the jobs interleaved (each repeat runs them all in turn): every measurement, and
    the fastest of each."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in jobs}
    for _ in range(repeats):
        for name, job in jobs:
            runs[name].append(job())
    out: dict[str, Any] = {}
    for name, got in runs.items():
        ok = [g for g in got if "error" not in g]
        best = min(ok, key=lambda g: g["seconds"]) if ok else got[-1]
        out[name] = {**best, "all_seconds": [round(g.get("seconds", -1), 3) for g in got],
                     "loads": [g.get("load") for g in got]}  # fmt: skip
    return out


def measure(
    root: str,
    layout: int,
    env: dict[str, str],
    s3: Any,
    floor: dict[str, str],
    repeats: int,
    only: list[str] | None = None,
) -> Any:
    """Every operation (or those named by ``only``; and their floors) on the warehouse at ``root``."""
    out: dict[str, Any] = {}
    hand = hand_queries(floor)
    ops = operations(root, layout)
    unknown = set(only or ()) - {name for name, *_ in ops} - {"status"}
    if unknown:  # a misspelt name would measure nothing and say nothing
        raise SystemExit(f"--only: no operation {sorted(unknown)} at layout {layout}; known: {[o[0] for o in ops]}")
    for name, what, arg, query in ops:
        if only and name not in only:
            continue

        def ours(what: str = what, arg: str = arg) -> dict[str, Any]:
            if s3 is not None:
                s3.reset()
            got = probe(what, root, arg, env)
            if s3 is not None:
                got["requests"] = s3.counts()
                got["requests_total"] = sum(got["requests"].values())
            return got

        jobs: list[tuple[str, Any]] = [("evalfarm", ours)]
        if query is not None:
            script = floor_script(floor, query)
            jobs.append(("floor", lambda script=script, query=query: probe_floor(script, query)))
        if name in hand:
            jobs.append(("hand", lambda q=hand[name]: probe_floor([], q)))
        got = _timed(jobs, repeats)
        _ratios(got)
        out[name] = got
        print(f"    {name}: {_line(got)}", flush=True)
    return out


def _ratios(got: dict[str, Any]) -> None:
    """``ratio_to_<floor>`` (seconds, each side's fastest) and ``cpu_ratio_to_<floor>`` (CPU seconds: what a loaded
    machine distorts least) of evalfarm to each floor measured beside it."""
    ours = got["evalfarm"]
    for f in ("floor", "hand"):
        if f in got and "error" not in got[f] and "error" not in ours:
            got[f"ratio_to_{f}"] = round(ours["seconds"] / max(got[f]["seconds"], 1e-9), 2)
            got[f"cpu_ratio_to_{f}"] = round(ours["cpu_seconds"] / max(got[f]["cpu_seconds"], 1e-9), 2)


def _line(got: dict[str, Any]) -> str:
    parts = []
    for k in ("evalfarm", "floor", "hand"):
        if k in got:
            g = got[k]
            text = (f"{k} {g.get('seconds', float('nan')):.3f} s, {g.get('cpu_seconds', float('nan')):.2f} CPU-s"
                    if "error" not in g else f"{k} ERROR {g['error']}")  # fmt: skip
            if "requests_total" in g:
                text += f" ({g['requests_total']} requests)"
            parts.append(text + f" [{g.get('rows')} rows, {g.get('peak_rss_mb', 0):.0f} MB, load {g.get('load')}]")
    ratios = [f"{k} {v}x" for k, v in got.items() if k.startswith("ratio")]
    return "; ".join(parts + ratios)


def running_run(root: str, n_files: int) -> str:
    """A run still going whose ``n_files`` unit files are not compacted yet (one commit each, as a batch commits
    them): what ``evalfarm status`` reads during a nightly before the run compacts. Returns its id. The units table is
    compacted first (a warehouse measured again holds the files of the last measurement's run)."""
    from evalfarm.warehouse.maintenance import compact

    wh = Warehouse(root)
    compact(wh, tables=["units"])
    run_id = f"bench-running-{uuid.uuid4().hex[:8]}"
    wh.write_run_event(run_id, "start", status="running")
    for i in range(n_files):
        wh.write_units(run_id, [{"model": _model(i), "task": "t", "stage": "score", "status": "done",
                                 "seconds": 1.0, "worker": f"w{i % 4}", "node": "n"}])  # fmt: skip
    return run_id


def measure_status(root: str, env: dict[str, str], s3: Any, n_files: int, repeats: int, base: Path) -> Any:
    """``evalfarm status`` of a run with ``n_files`` uncompacted unit files, beside the same queries' floor."""
    from evalfarm.status import STATUS_QUERIES

    t0 = time.perf_counter()
    run = running_run(root, n_files)
    wrote = round(time.perf_counter() - t0, 1)
    floor = export_floor(root, base / "floor-status")
    script = floor_script(floor, " ".join(STATUS_QUERIES))

    def ours() -> dict[str, Any]:
        if s3 is not None:
            s3.reset()
        got = probe("status", root, run, env)
        if s3 is not None:
            got["requests"] = s3.counts()
            got["requests_total"] = sum(got["requests"].values())
        return got

    queries = [q.replace("''", f"'{run}'") for q in STATUS_QUERIES]
    got = _timed([("evalfarm", ours), ("floor", lambda: probe_floor(script, *queries))], repeats)
    _ratios(got)
    got["unit_files"] = len(Warehouse(root).tables.snapshot("units").files)
    got["writing_s"] = wrote
    print(f"    status with {n_files} uncompacted unit files: {_line(got)}", flush=True)
    return got


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--layouts", type=int, nargs="+", default=[2])
    ap.add_argument("--store", nargs="+", default=["local"], choices=["local", "s3"])
    ap.add_argument("--s3-models", type=int, default=1000, help="the largest --models measured on S3")
    ap.add_argument("--churn", type=float, default=0.02, help="share of units recomputed each later night")
    ap.add_argument("--growth", type=float, default=0.01, help="new models each later night, as a share of --models")
    ap.add_argument("--batch-units", type=int, default=BATCH_UNITS, help="units a batch commit writes (the fill)")
    ap.add_argument("--status-files", type=int, default=500, help="uncompacted unit files of the running run")
    ap.add_argument("--repeats", type=int, default=2, help="measurements of each operation and floor, interleaved")
    ap.add_argument("--noop", action="store_true", help="also the warehouse's part of a no-op nightly rerun")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--write-profile", metavar="WAREHOUSE")
    ap.add_argument("--keep", type=Path, help="write the warehouses here and keep them (default: a temp folder)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="measure the warehouses --keep holds from an earlier run instead of writing them again",
    )
    ap.add_argument("--fill-only", action="store_true", help="write the warehouses (into --keep), measure nothing")
    ap.add_argument(
        "--s3-from-local",
        action="store_true",
        help="an S3 case uploads the local warehouse of its size (written first) instead of writing its "
        "nights through S3: the same tables, the reads measured alike, the writes' requests not",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        help="measure only these operations ('board', 'leaderboard', 'correlations', 'history of one model', "
        "'diff of the last two runs', 'status')",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true")
    return ap.parse_args()


def main() -> None:
    args = _args()
    if args.write_profile:
        p = write_profile(args.write_profile, args.profile)
        print(f"profile of {len(p['tasks'])} tasks -> {args.profile}")
        return
    if args.smoke:
        args.models, args.nights, args.store, args.repeats, args.status_files = [20], 3, ["local"], 1, 20
        args.noop = True
    profile = json.loads(args.profile.read_text())
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-warehouse-"))
    results: dict[str, Any] = {"host": platform.node(), "cpus": os.cpu_count(), "uptime_start": _uptime(),
                               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "nights": args.nights,
                               "churn": args.churn, "growth": args.growth, "tasks": len(profile["tasks"]),
                               "batch_units": args.batch_units, "profile": profile.get("source"),
                               "command": " ".join(sys.argv), "cases": []}  # fmt: skip
    try:
        for store in args.store:
            ctx = _s3() if store == "s3" else None
            s3 = ctx.__enter__() if ctx is not None else None
            try:
                for n in args.models:
                    if store == "s3" and n > args.s3_models:
                        continue
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
    results["uptime_end"] = _uptime()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def upload(local: str, root: str) -> dict[str, Any]:
    """Copy the warehouse at ``local`` to ``root`` (an object store): the format file, every table's log, and the data
    files of each table's newest snapshot (files only older versions name are left behind, as after a vacuum)."""
    t0 = time.perf_counter()
    src, dest = Warehouse(local), Warehouse(root)
    paths = [f"{src.base}/warehouse.json"]
    for table in table_schemas():
        if src.tables.exists(table):
            log = f"{src.tables.folder(table)}/_delta_log"
            paths += [f"{log}/{name}" for name in os.listdir(log) if os.path.isfile(f"{log}/{name}")]
            paths += [f.path for f in src.tables.snapshot(table).files]
    size = 0
    for path in paths:
        body = Path(path).read_bytes()
        size += len(body)
        with dest.fs.open_output_stream(f"{dest.base}/{src.relative(path)}") as out:
            out.write(body)
    return {"files": len(paths), "bytes": size, "seconds": round(time.perf_counter() - t0, 1)}


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


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
    print(f"{store}, layout {layout}, {n} models x {len(profile['tasks'])} tasks x {args.nights} nights; "
          f"{_uptime()}", flush=True)  # fmt: skip
    if s3 is not None:
        s3.reset()
    done = base / f"{store}-l{layout}-m{n}.written.json"
    local = base / f"l{layout}-m{n}"
    if args.reuse and s3 is None and done.exists():
        wrote = {**json.loads(done.read_text()), "reused": True}
    elif s3 is not None and args.s3_from_local and local.is_dir():
        wrote = {"uploaded_from": str(local), **upload(str(local), root)}
    else:
        wrote = fill(root, layout, n, args.nights, profile, churn=args.churn, growth=args.growth, seed=args.seed,
                     batch_units=args.batch_units)  # fmt: skip
        done.write_text(json.dumps(wrote) + "\n")
    if s3 is not None:
        wrote["requests"] = s3.counts()
    print(f"  written: {wrote}", flush=True)
    if args.fill_only:
        return {"store": store, "layout": layout, "models": n, "write": wrote, "files": files_per_table(root)}
    case: dict[str, Any] = {"store": store, "layout": layout, "models": n, "write": wrote,
                            "files": files_per_table(root), "uptime": _uptime()}  # fmt: skip
    t0 = time.perf_counter()
    floor = export_floor(root, base / f"floor-{store}-l{layout}-m{n}")
    case["floor_export_s"] = round(time.perf_counter() - t0, 1)
    case["floor_bytes"] = {k: os.path.getsize(v) for k, v in floor.items()}
    case["queries"] = measure(root, layout, env, s3, floor, args.repeats, args.only)
    if args.noop:
        unit_list = json.dumps(last_units(root))
        case["queries"]["no-op rerun (warehouse part)"] = _timed([("evalfarm", lambda: probe("noop", root, unit_list,
                                                                                             env))], 1)  # fmt: skip
    if layout == 2 and (not args.only or "status" in args.only):
        case["status"] = measure_status(root, env, s3, args.status_files, args.repeats, base / f"{store}-m{n}")
    return case


if __name__ == "__main__":
    main()
