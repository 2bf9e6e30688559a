"""The nightly run, measured: build the local zoo, run its models on their tasks through the scheduler, report.

    python benchmarks/bench_nightly.py --warehouse /tmp/nightly --json benchmarks/results/nightly.json
    python benchmarks/bench_nightly.py --tasks evalrank-word,evalrank-sentence   # the EvalRank pools only
    python benchmarks/bench_nightly.py --smoke --warehouse /tmp/wh   # toy GloVe, in process: does every step run?

Steps, each a real ``evalfarm`` command in a subprocess (what a cron job would run):

1. ``evalfarm zoo build`` (trains the missing word models; a second build trains nothing) — timed;
2. ``evalfarm run --catalog zoo-local [--tasks …]`` on a fresh warehouse (Ray, one worker per CPU) — wall time, and the
   peak memory of the whole process tree (driver, Ray's own processes, worker actors) sampled every second:
   the sum of RSS (counts shared pages once per process: an upper bound) and the sum of PSS (shares them out);
3. the same command again: the no-op rerun of a nightly job with nothing new.

Then it reads the warehouse through DuckDB: models and units, time per model by kind (embed + score seconds of
every unit, from the ``units`` view), failures, and the top of each EvalRank board (realistic ties: the zoo's
small-corpus word models miss much of the word pool, and under ``l2`` two OOV words are one point); and, when the run
had downstream tasks, ``evalfarm correlations`` per level with and without post-processed models (the paper's
Tables 3 / 6 and 11), as printed and as JSON cells.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
EVALFARM = [sys.executable, "-m", "evalfarm.cli"]


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux /proc: Ray's raylet and workers are descendants of a local driver)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler(threading.Thread):
    """Peak summed RSS / PSS (MiB) and process count of a process tree, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_rss = self.peak_pss = 0.0
        self.peak_procs = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            pids = _children(self.pid)
            rss = sum(_kib(Path(f"/proc/{p}/status"), "VmRSS") for p in pids) / 1024
            pss = sum(_kib(Path(f"/proc/{p}/smaps_rollup"), "Pss") for p in pids) / 1024
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(pids))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def timed(cmd: list[str], log: Path, *, sample: bool = False) -> dict:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
        sampler = MemorySampler(proc.pid) if sample else None
        if sampler:
            sampler.start()
        rc = proc.wait()
        if sampler:
            sampler.stop()
    out = {"cmd": " ".join(cmd[2:]), "rc": rc, "seconds": round(time.perf_counter() - t0, 1), "log": str(log)}
    if sampler:
        out |= {
            "peak_rss_mib": round(sampler.peak_rss),
            "peak_pss_mib": round(sampler.peak_pss),
            "peak_processes": sampler.peak_procs,
        }
    return out


def warehouse_report(wh: Path, top: int) -> dict:
    from evalfarm.warehouse import Warehouse

    w = Warehouse(wh)

    def q(sql: str) -> list[dict]:
        return w.query(sql).to_pylist()

    per_model = """
        SELECT u.model, m.kind, m.level, sum(u.seconds) AS seconds
        FROM units u JOIN models m USING (model)
        WHERE u.status = 'done' AND u.stage IN ('embed', 'score')
        GROUP BY ALL
    """
    return {
        "models": q("SELECT level, count(*) AS n FROM models GROUP BY level ORDER BY level"),
        "units": q("SELECT stage, status, count(*) AS n FROM units GROUP BY ALL ORDER BY ALL"),
        "seconds_by_stage": q(
            "SELECT stage, round(sum(seconds), 1) AS seconds FROM units WHERE status = 'done' GROUP BY ALL ORDER BY 1"
        ),
        "per_model_by_kind": q(
            f"""SELECT kind, level, count(*) AS models, round(median(seconds), 1) AS median_s,
                       round(max(seconds), 1) AS max_s, round(sum(seconds), 1) AS total_s
                FROM ({per_model}) GROUP BY ALL ORDER BY total_s DESC"""
        ),
        "seconds_by_scorer": q(
            """SELECT coalesce(m.scorer, 'embed') AS what, round(sum(u.seconds), 1) AS seconds
               FROM units u LEFT JOIN (SELECT DISTINCT fingerprint, scorer FROM metrics) m USING (fingerprint)
               WHERE u.status = 'done' AND u.stage IN ('embed', 'score') GROUP BY ALL ORDER BY 2 DESC"""
        ),
        "failures": q("SELECT model, task, stage, error FROM failures ORDER BY ALL"),
        "leaderboard_top": q(
            f"""SELECT task, variant, position, model, round(mrr, 4) AS mrr, round(mr, 1) AS mr,
                       round("hits@1", 4) AS "hits@1", round("hits@10", 4) AS "hits@10", round(oov_rate, 3) AS oov
                FROM evalrank WHERE ties = 'realistic' AND position <= {int(top)} ORDER BY task, variant, position"""
        ),
    }


def correlation_tables(wh: Path, logs: Path, levels: list[str]) -> dict:
    """`evalfarm correlations` as a user runs it, per level, with and without post-processed models (the paper's
    Tables 3 / 6 and 11): the printed tables (kept in the logs folder) and the cells as JSON."""
    out: dict = {}
    for level in levels:
        for excluded in (False, True):
            key = f"{level}{'-no-postprocessed' if excluded else ''}"
            base = [*EVALFARM, "correlations", "--level", level, "--warehouse", str(wh), "--intervals"]
            if excluded:
                base.append("--exclude-postprocessed")
            env = {**os.environ, "COLUMNS": "200"}
            table = subprocess.run(base, cwd=REPO, capture_output=True, text=True, env=env)
            (logs / f"correlations-{key}.txt").write_text(table.stdout + table.stderr)
            cells = subprocess.run([*base, "--format", "json"], cwd=REPO, capture_output=True, text=True, env=env)
            try:
                out[key] = {"table": table.stdout, "cells": json.loads(cells.stdout)}
            except json.JSONDecodeError:
                out[key] = {"table": table.stdout, "error": (cells.stdout + cells.stderr)[-2000:]}
    return out


def smoke_catalog(path: Path) -> Path:
    """The catalog of ``--smoke``: the EvalRank toolkit's toy GloVe and an ABTT variant of it on the EvalRank word
    pool and one word-similarity set."""
    path.write_text(
        "include: [tasks]\ntasks: [evalrank-word, wordsim-rg-65]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,"
        " source: {type: data, ref: evalrank/reference/toy_emb.txt}}\n"
        "  - {id: toy-abtt1, level: word, base: toy, postprocess: {method: abtt, d: 1}}\n"
    )
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", default="zoo-local")
    ap.add_argument("--warehouse", type=Path, default=Path("/tmp/evalfarm-nightly"))
    ap.add_argument("--keep", action="store_true", help="reuse an existing warehouse (default: start empty)")
    ap.add_argument("--skip-build", action="store_true", help="don't run `evalfarm zoo build` first")
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: the catalog's)")
    ap.add_argument("--top", type=int, default=5, help="leaderboard rows per (pool, similarity)")
    ap.add_argument("--executor", choices=["ray", "local"], help="evalfarm run's executor (default: the CLI's)")
    ap.add_argument(
        "--quick-downstream",
        action="store_true",
        help="evalfarm run's quick profile: downstream on a 1,000-row training sample (labelled a sample everywhere)",
    )
    ap.add_argument("--levels", default="word,sentence", help="levels of the correlation tables")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:  # toy GloVe and a post-processed variant of it, in process: no zoo, no Ray
        ap.set_defaults(skip_build=True, catalog=None, executor="local", levels="word")
    args = ap.parse_args()
    if args.warehouse.exists() and not args.keep:
        shutil.rmtree(args.warehouse)
    logs = args.warehouse.parent / (args.warehouse.name + "-logs")
    logs.mkdir(parents=True, exist_ok=True)
    if args.catalog is None:
        args.catalog = str(smoke_catalog(logs / "smoke.yaml"))
    result: dict = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "catalog": args.catalog,
        "tasks": args.tasks or "all",
    }
    if not args.skip_build:
        result["zoo_build"] = timed([*EVALFARM, "zoo", "build"], logs / "zoo-build.log")
        print(json.dumps({"zoo_build": result["zoo_build"]}), flush=True)
    run = [*EVALFARM, "run", "--catalog", args.catalog, "--warehouse", str(args.warehouse)]
    if args.tasks:
        run += ["--tasks", args.tasks]
    if args.executor:
        run += ["--executor", args.executor]
    if args.quick_downstream:
        run += ["--quick-downstream"]
        result["downstream"] = "quick profile (max_train=1000 sample)"
    result["run"] = timed(run, logs / "run.log", sample=True)
    print(json.dumps({"run": result["run"]}), flush=True)
    result["noop_rerun"] = timed(run, logs / "rerun.log")
    print(json.dumps({"noop_rerun": result["noop_rerun"]}), flush=True)
    result |= warehouse_report(args.warehouse, args.top)
    result["correlations"] = correlation_tables(args.warehouse, logs, args.levels.split(","))
    for key in (
        "models",
        "units",
        "seconds_by_stage",
        "seconds_by_scorer",
        "per_model_by_kind",
        "failures",
        "leaderboard_top",
    ):
        print(json.dumps({key: result[key]}, default=str), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
