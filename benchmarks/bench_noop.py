"""What verifying the warehouse costs a no-op rerun: `evalfarm run` on a finished 140-model catalog, with the file
scan (`Warehouse.scan`: footers, row counts, fingerprint columns, remembered in verified-files.json) and without it.

    python benchmarks/bench_noop.py [--models 140] [--repeats 5] [--json benchmarks/results/noop.json] [--smoke]

The catalog: the toy GloVe under N ids (N spec hashes), each on three tiny word tasks (a 40-pair EvalRank slice, which
writes ranks, and two word-similarity sets), computed once with the local executor. Then, each a whole CLI process:
the first no-op rerun (every file read once: the manifest is empty), then `--repeats` interleaved pairs of the no-op
rerun as shipped and the same process with `Warehouse.scan` replaced by a no-op (the baseline: what a run cost before
the scan existed); medians and their ratio. Last, the scan alone in this process: with no manifest (every file read)
and with it (a stat per file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))
# its runs get a folder of task slices as their data folder; the toy vectors stay in the real one, named as a folder
# `path` model sources may read (issue 40.3: a catalog never names where its files may be)
os.environ.setdefault("EVALFARM_MODEL_PATHS", os.environ["EVALFARM_DATA"])
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ["EVALFARM_CONFIG"] = ""

CLI = "import sys; from evalfarm.cli import main; sys.argv = ['evalfarm', *sys.argv[1:]]; main()"
NO_SCAN = "from evalfarm.warehouse import Warehouse; Warehouse.scan = lambda self, **kw: []; " + CLI


def make_catalog(d: Path, n: int) -> Path:
    data = Path(os.environ["EVALFARM_DATA"])
    toy = data / "evalrank" / "reference" / "toy_emb.txt"
    w = data / "evalrank" / "word_evalrank"
    pairs = d / "pairs.txt"
    pairs.write_text("\n".join((w / "pos_pair_5514.txt").read_text().splitlines()[:40]) + "\n")
    bg = d / "bg.txt"
    bg.write_text("\n".join((w / "basic_vocab.txt").read_text().splitlines()[:300]) + "\n")

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    models = "".join(
        f"  - {{id: m{i:03d}, level: word, kind: word-vectors, format: glove-text, "
        f"source: {{type: path, ref: {toy}}}, description: copy {i}}}\n"
        for i in range(n)
    )
    (d / "noop.yaml").write_text(
        f"""include: [tasks]
tasks:
  - {{id: tiny-rank, level: word, kind: evalrank, format: evalrank-word, version: "1", licence: bench, source: bench,
      files: {{pairs: {pairs.name}, background: {bg.name}}}, sha256: {{pairs: {sha(pairs)}, background: {sha(bg)}}}}}
  - wordsim-rg-65
  - wordsim-mc-30
models:
{models}"""
    )
    # d is the run's data folder (catalogs name task files inside it): the slices and the shipped tasks' files
    from evalfarm.catalog.registry import load_catalog

    shipped = load_catalog("tasks")
    for tid in ("wordsim-rg-65", "wordsim-mc-30"):
        for rel in shipped.task(tid).files.values():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data / rel, d / rel)
    return d / "noop.yaml"


def cli(code: str, wh: Path, catalog: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", code, "run", "--warehouse", str(wh), "--catalog", str(catalog)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    took = time.perf_counter() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    return took, p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=140)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(models=3, repeats=1)
    args = ap.parse_args()

    from evalfarm.catalog.registry import load_catalog
    from evalfarm.runner import run_catalog

    d = Path(tempfile.mkdtemp(prefix="bench-noop-"))
    catalog = make_catalog(d, args.models)
    os.environ["EVALFARM_DATA"] = str(d)  # this run and the CLI runs it starts
    wh = d / "wh"
    t0 = time.perf_counter()
    s = run_catalog(load_catalog(catalog), wh, executor="local")
    compute = time.perf_counter() - t0
    assert s.ok, [o.error for o in s.failed][:3]
    n_units = s.n_units
    n_files = sum(1 for _ in wh.rglob("*.parquet"))
    first, err = cli(CLI, wh, catalog)
    assert f"{n_units} skipped" in err, err
    shipped, baseline = [], []
    for _ in range(args.repeats):
        shipped.append(cli(CLI, wh, catalog)[0])
        baseline.append(cli(NO_SCAN, wh, catalog)[0])
    # the scan itself, in process: every file read (no manifest), then the manifest's stat-only pass
    from evalfarm.warehouse import VERIFIED_MANIFEST, Warehouse

    cold, warm = [], []
    for _ in range(args.repeats):
        (wh / VERIFIED_MANIFEST).unlink()
        t0 = time.perf_counter()
        assert Warehouse(wh).scan() == []
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        Warehouse(wh).scan()
        warm.append(time.perf_counter() - t0)
    res = {
        "models": args.models,
        "units": n_units,
        "parquet_files": n_files,
        "compute_local_s": round(compute, 1),
        "first_noop_s (every file read)": round(first, 2),
        "noop_s (shipped, median)": round(statistics.median(shipped), 2),
        "noop_without_scan_s (median)": round(statistics.median(baseline), 2),
        "ratio": round(statistics.median(shipped) / statistics.median(baseline), 3),
        "scan_every_file_read_s (median)": round(statistics.median(cold), 3),
        "scan_with_manifest_s (median)": round(statistics.median(warm), 4),
        "runs_s": {"shipped": [round(x, 2) for x in shipped], "without_scan": [round(x, 2) for x in baseline]},
        "load_average": os.getloadavg(),
    }
    print(json.dumps(res, indent=2))
    shutil.rmtree(d, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
