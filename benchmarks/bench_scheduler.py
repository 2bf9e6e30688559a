"""Scheduler benchmark: the same catalog run as a sequential in-process loop, on Ray with 1 and 2 warm workers,
and as a no-op rerun; plus the no-op rerun of a generated 100-model catalog through the CLI.

    python benchmarks/bench_scheduler.py --json benchmarks/results/scheduler.json
    python benchmarks/bench_scheduler.py --smoke   # 50-pair slices, one Ray worker, one timed run

Models: 12 cheap but real ones (toy GloVe and its ABTT / PC-removal / whitening / OOV-policy variants, bag of
words over it with post-processing, the static model) on slices of the real EvalRank pools (``--word-pairs``,
``--sent-pairs`` …), so a run takes tens of seconds on 2 cores. "Warm workers": each Ray configuration is run
once untimed (actors start, import torch, load the pools) and then timed with ``--force`` on the same actors.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _head(src: Path, n: int, dst: Path) -> Path:
    dst.write_text("\n".join(src.read_text().splitlines()[:n]) + "\n")
    return dst


def _pool(pid: str, level: str, files: dict[str, Path]) -> str:
    """A task entry over slices that sit beside the catalog (named relative to it: the run's data folder)."""
    fl = ", ".join(f"{r}: {p.name}" for r, p in files.items())
    sh = ", ".join(f"{r}: {hashlib.sha256(p.read_bytes()).hexdigest()}" for r, p in files.items())
    return (
        f"  - {{id: {pid}, level: {level}, kind: evalrank, format: evalrank-{level}, version: '1', licence: bench,"
        f" source: bench, files: {{{fl}}}, sha256: {{{sh}}}}}\n"
    )


def make_catalogs(d: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    data = Path(os.environ["EVALFARM_DATA"]) / "evalrank"
    w, s = data / "word_evalrank", data / "sent_evalrank"
    word = {
        "pairs": _head(w / "pos_pair_5514.txt", args.word_pairs, d / "wp.txt"),
        "background_basic": _head(w / "basic_vocab.txt", args.word_bg, d / "wb.txt"),
        "background_wiki": _head(w / "wiki_vocab.txt", args.word_bg, d / "ww.txt"),
    }
    sent = {
        "pairs": _head(s / "pos_pair.txt", args.sent_pairs, d / "sp.txt"),
        "background": _head(s / "background_sent.txt", args.sent_bg, d / "sb.txt"),
    }
    tiny = {
        "pairs": _head(w / "pos_pair_5514.txt", 100, d / "tp.txt"),
        "background_basic": _head(w / "basic_vocab.txt", 200, d / "tb.txt"),
    }
    (d / "tasks.yaml").write_text(
        "tasks:\n"
        + _pool("word-bench", "word", word)
        + _pool("sent-bench", "sentence", sent)
        + _pool("word-tiny", "word", tiny)
    )
    glove = data / "reference" / "toy_emb.txt"
    g = f"{{type: path, ref: {glove}}}"
    models = f"""
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {g}}}
  - {{id: toy-skip, level: word, kind: word-vectors, format: glove-text, oov: skip, source: {g}}}
  - {{id: toy-zero, level: word, kind: word-vectors, format: glove-text, oov: zero, source: {g}}}
  - {{id: toy-abtt1, level: word, base: toy, postprocess: {{method: abtt, d: 1}}}}
  - {{id: toy-abtt3, level: word, base: toy, postprocess: {{method: abtt, d: 3}}}}
  - {{id: toy-pcr1, level: word, base: toy, postprocess: {{method: pcr, d: 1}}}}
  - {{id: toy-white, level: word, base: toy, postprocess: {{method: whitening}}}}
  - {{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}}
  - {{id: bow-toy-abtt1, level: sentence, base: bow-toy, postprocess: {{method: abtt, d: 1, fit_on: sent-bench}}}}
  - {{id: static, level: sentence, kind: static,
      source: {{type: package, ref: tokenlearn-static-model, path: static_model/model}}}}
  - {{id: static-white, level: sentence, base: static, postprocess: {{method: whitening, fit_on: sent-bench}}}}
  - {{id: static-pcr1, level: sentence, base: static, postprocess: {{method: pcr, d: 1, fit_on: sent-bench}}}}
"""
    (d / "bench.yaml").write_text("include: [tasks.yaml]\ntasks: [word-bench, sent-bench]\nmodels:" + models)
    many = "".join(
        f"  - {{id: m{i:03d}, level: word, kind: word-vectors, format: glove-text, source: {g}}}\n"
        for i in range(args.noop_models)
    )
    (d / "hundred.yaml").write_text("include: [tasks.yaml]\ntasks: [word-tiny]\nmodels:\n" + many)
    return d / "bench.yaml", d / "hundred.yaml"


def sequential(catalog: Path, wh: Path, repeats: int) -> tuple[float, list[float], int]:
    """The baseline: a plain in-process loop over the models, ``execute_model`` each (no scheduler, no Ray).

    Run like the Ray configurations: a first (cold) pass pays the imports (gensim, the static model's package,
    tokenizers) and fills the page cache; the ``repeats`` warm passes after it are the baseline the warm workers
    are compared with. Returns (cold seconds, warm seconds of each pass, units).
    """
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.execute import ExecContext, execute_model
    from evalfarm.plan import plan_run
    from evalfarm.warehouse import Warehouse, new_run_id

    cat = load_catalog(catalog)
    plans = plan_run(cat)
    ctx = ExecContext(catalog=cat, warehouse=Warehouse(wh).init(), run_id=new_run_id(), force=True)
    for tid in {u.task for p in plans for u in p.units}:
        ctx.task_data(tid)  # task data loaded once, as the warm workers have it
    times = []
    for _ in range(1 + repeats):
        t0 = time.perf_counter()
        outs = [o for p in plans for o in execute_model(p, ctx)]
        times.append(time.perf_counter() - t0)
        assert all(o.status == "done" for o in outs), [o.error for o in outs if o.status != "done"]
    return times[0], times[1:], len(outs)


def ray_configuration(bench: Path, wh: Path, n: int, repeats: int, seq: float, n_units: int) -> dict[str, object]:
    """Ray with ``n`` workers: a cold run, ``repeats`` warm ``--force`` runs (and the time spent outside the units),
    then an in-process no-op rerun."""
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    res: dict[str, object] = {}
    t0 = time.perf_counter()
    run_catalog(bench, wh, executor="ray", workers=n)  # cold: actors start, import, load pools
    cold = time.perf_counter() - t0
    runs, gaps = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        s = run_catalog(bench, wh, executor="ray", workers=n, force=True)
        runs.append(time.perf_counter() - t0)
        assert s.ok and s.counts()["done"] == n_units, s.counts()
        # Scheduler overhead measured directly: wall time minus the work done inside the units (the
        # `units` view times each embed and rank call on its worker), per worker.
        busy = Warehouse(wh).query(f"SELECT sum(seconds) AS s FROM units WHERE run_id = '{s.run_id}'")
        gaps.append(runs[-1] - busy.to_pylist()[0]["s"] / n)
    warm, gap = statistics.median(runs), statistics.median(gaps)
    res[f"ray{n}_cold_s"], res[f"ray{n}_warm_s"] = round(cold, 2), round(warm, 2)
    res[f"ray{n}_runs_s"] = [round(t, 2) for t in runs]
    res[f"ray{n}_ratio"] = round(warm / seq, 3)
    res[f"ray{n}_overhead_per_unit_ms"] = round(gap / n_units * 1000, 1)
    res[f"ray{n}_overhead_share"] = round(gap / warm, 3)
    print(
        f"ray {n} worker(s): cold {cold:.2f}s, warm median {warm:.2f}s = {warm / seq:.2f}x sequential; "
        f"outside units {gap:.2f}s ({gap / warm:.1%})",
        flush=True,
    )
    t0 = time.perf_counter()
    s = run_catalog(bench, wh, executor="ray", workers=n)
    res[f"ray{n}_noop_inprocess_s"] = round(time.perf_counter() - t0, 3)
    assert s.counts()["skipped"] == n_units
    return res


def cli_noop_reruns(bench: Path, hundred: Path, d: Path, last: Path, n_noop: int) -> dict[str, object]:
    """No-op reruns through the CLI (whole process): the 12 models of the last Ray configuration's warehouse
    (``last``), and ``n_noop`` models."""
    from evalfarm.runner import run_catalog

    res: dict[str, object] = {}
    env = {**os.environ}
    cli = [sys.executable, "-m", "evalfarm.cli", "run", "--warehouse"]
    t0 = time.perf_counter()
    subprocess.run([*cli, str(last), "--catalog", str(bench)], check=True, env=env, capture_output=True)
    res["noop_cli_12_models_s"] = round(time.perf_counter() - t0, 2)
    # 100 models (the toy GloVe under 100 ids: 100 distinct spec hashes, 100 units) on a tiny word pool,
    # computed once with the local executor, then rerun through the CLI with the default (ray) executor.
    t0 = time.perf_counter()
    s = run_catalog(hundred, d / "wh-100", executor="local")
    assert s.ok and s.counts()["done"] == n_noop
    res["hundred_compute_local_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    p = subprocess.run([*cli, str(d / "wh-100"), "--catalog", str(hundred)], env=env, capture_output=True, text=True)
    res["noop_cli_100_models_s"], res["noop_models"] = round(time.perf_counter() - t0, 2), n_noop
    assert p.returncode == 0 and f"{n_noop} skipped" in p.stderr, p.stderr
    return res


def markdown_table(res: dict[str, object], seq: float, workers: list[int]) -> str:
    """The README's table of the results."""
    n_noop = res["noop_models"]
    return (
        "\n| configuration | wall (s, median) | ratio to sequential | outside units per unit | share of wall |\n"
        "|---|---:|---:|---:|---:|\n"
        f"| sequential in-process loop (warm) | {seq:.2f} | 1.00 | — | — |\n"
        + "".join(
            f"| Ray, {n} warm worker{'s' if n > 1 else ''} | {res[f'ray{n}_warm_s']} | {res[f'ray{n}_ratio']} "
            f"| {res[f'ray{n}_overhead_per_unit_ms']} ms | {res[f'ray{n}_overhead_share']:.1%} |\n"
            for n in workers
        )
        + f"| no-op rerun, 12 models (CLI, whole process) | {res['noop_cli_12_models_s']} | | | |\n"
        f"| no-op rerun, {n_noop} models (CLI, whole process) | {res['noop_cli_100_models_s']} | | | |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--word-pairs", type=int, default=2000)
    ap.add_argument("--word-bg", type=int, default=3000, help="lines of basic and of wiki vocabulary")
    ap.add_argument("--sent-pairs", type=int, default=1500)
    ap.add_argument("--sent-bg", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=5, help="timed warm runs per configuration (median reported)")
    ap.add_argument("--workers", default="1,2", help="Ray worker counts to time (comma-separated)")
    ap.add_argument("--noop-models", type=int, default=100, help="models of the no-op rerun's generated catalog")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(word_pairs=50, word_bg=200, sent_pairs=50, sent_bg=200, repeats=1, workers="1", noop_models=3)
    args = ap.parse_args()
    workers = [int(n) for n in args.workers.split(",")]

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    d = Path(tempfile.mkdtemp(prefix="bench-sched-"))
    bench, hundred = make_catalogs(d, args)
    os.environ["EVALFARM_DATA"] = str(d)  # the pools' slices: catalogs name task files inside the data folder
    res: dict[str, object] = {
        "machine": f"{platform.node()} {os.cpu_count()} CPUs",
        "args": vars(args) | {"json": None},
    }
    seq_cold, seq_runs, n_units = sequential(bench, d / "wh-seq", args.repeats)
    seq = statistics.median(seq_runs)
    res["units"], res["models"] = n_units, 12
    res["sequential_cold_s"], res["sequential_s"] = round(seq_cold, 2), round(seq, 2)
    res["sequential_runs_s"] = [round(t, 2) for t in seq_runs]
    print(f"sequential in-process loop: cold {seq_cold:.2f}s, warm median {seq:.2f}s ({n_units} units)", flush=True)

    # evalfarm's own local Ray (connect(None): token authentication, every server on loopback, checked)
    from tests.support.ray_heads import local_ray

    with local_ray(num_cpus=os.cpu_count() or 1):
        for n in workers:
            res.update(ray_configuration(bench, d / f"wh-ray{n}", n, args.repeats, seq, n_units))

    res.update(cli_noop_reruns(bench, hundred, d, d / f"wh-ray{workers[-1]}", args.noop_models))
    print(json.dumps(res, indent=2))
    print(markdown_table(res, seq, workers))
    shutil.rmtree(d, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
