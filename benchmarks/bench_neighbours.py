"""The top-10 neighbours' share of a real EvalRank unit: the score stage with and without them.

    python benchmarks/bench_neighbours.py [--repeats 5] [--models M,...] [--no-faiss]
        [--json benchmarks/results/neighbours.json]

Issue #14 asks that the ``neighbours`` table (each query's top-10 background items, taken from the cos pass's own
score blocks) cost under 10 % of the unit. ``bench_rank.py`` measures the extra per kernel call; this measures it
against the whole unit as a run executes it. Models of the starter zoo are first embedded into a temporary warehouse
(``evalfarm.runner.run_catalog``, local executor): GloVe 6B 50d on the word pool, its bag of words and
all-MiniLM-L6-v2 on the sentence pool. Then each unit's score stage (``evalfarm.execute.score_unit``: read the stored
vectors, the degenerate check, preprocessing, both similarities' kernels, the detail tables and metrics written) runs
with the scorer's parameters as planned (neighbours = 10) and with neighbours = 0, interleaved, ``--repeats`` times,
one thread; the unit's embed stage (loading the model, embedding the pool, from the first run's ``units`` view) is
reported beside it, since a unit as the scheduler sees it is embed + score. ``--no-faiss`` blocks ``import faiss``
(as in a base install without the ``cpu`` extra): the neighbours then come from the numpy fallback (issue 24).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

UNITS = [
    ("glove-6b-50d", "evalrank-word"),
    ("bow-glove-6b-50d", "evalrank-sentence"),
    ("all-minilm-l6-v2", "evalrank-sentence"),
]


def _args() -> tuple[argparse.Namespace, list[tuple[str, str]]]:
    """The options and the chosen (model, task) units; ``--no-faiss`` takes effect here, before evalfarm loads."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--models", default=",".join(m for m, _ in UNITS), help="comma-separated models of the units")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    ap.add_argument("--no-faiss", action="store_true", help="block `import faiss`: measure the numpy fallback")
    if ap.parse_known_args()[0].smoke:  # the GloVe unit only: no transformer to embed a pool with
        ap.set_defaults(repeats=1, models="glove-6b-50d")
    args = ap.parse_args()
    if args.no_faiss:
        sys.modules["faiss"] = None  # `import faiss` raises ImportError
    chosen = [(m, t) for m, t in UNITS if m in args.models.split(",")]
    if not chosen:
        ap.error(f"--models: none of {', '.join(m for m, _ in UNITS)}")
    return args, chosen


def main() -> None:
    args, chosen = _args()
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.execute import ExecContext, score_unit
    from evalfarm.plan import plan_run
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    catalog = load_catalog("zoo-starter")
    models = sorted({m for m, _ in chosen})
    tasks = sorted({t for _, t in chosen})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wh_path = Path(tmp) / "wh"
        summary = run_catalog(catalog, wh_path, models=models, tasks=tasks, executor="local")
        if not summary.ok:
            raise SystemExit(f"the setup run failed: {[o.error for o in summary.failed]}")
        wh = Warehouse(wh_path)
        embed_s = {
            (r["model"], r["task"]): r["seconds"]
            for r in wh.query("SELECT model, task, seconds FROM units WHERE stage = 'embed'").to_pylist()
        }
        plans = plan_run(catalog, models=models, tasks=tasks)
        units = {(u.model, u.task): u for p in plans for u in p.units}
        plan_of = {p.model: p for p in plans}
        ctx = ExecContext(catalog, wh, run_id="bench-neighbours")
        for key in chosen:
            unit = units[key]
            params = json.loads(unit.params)
            without = dataclasses.replace(unit, params=json.dumps({**params, "neighbours": 0}))
            times: dict[str, list[float]] = {"with": [], "without": []}
            plan = plan_of[unit.model]
            score_unit(plan, unit, ctx)  # warm: task data read, work buffers allocated, FAISS imported
            for _ in range(args.repeats):
                for label, u in (("with", unit), ("without", without)):
                    t0 = time.process_time()
                    out = score_unit(plan, u, ctx)
                    times[label].append(time.process_time() - t0)
                    if out.status.value != "done":
                        raise SystemExit(f"{key}: {out.error}")
            w, wo = statistics.median(times["with"]), statistics.median(times["without"])
            emb = embed_s.get(key)
            row = {
                "model": key[0],
                "task": key[1],
                "neighbours": params.get("neighbours"),
                "score_with_s": round(w, 3),
                "score_without_s": round(wo, 3),
                "neighbours_s": round(w - wo, 3),
                "of_score_stage": round((w - wo) / w, 3),
                "embed_stage_s (first run, wall)": None if emb is None else round(emb, 3),
                "of_unit": None if emb is None else round((w - wo) / (w + emb), 3),
                "runs_s": times,
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs_s"}), flush=True)
    report = {"threads": os.environ.get("OMP_NUM_THREADS"), "repeats": args.repeats, "rows": rows,
              "faiss": not args.no_faiss, "load_average": os.getloadavg()}  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
