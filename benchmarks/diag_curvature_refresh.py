"""Diagnostic: would a curvature refreshed at the current weights shorten the weak penalties' tail?

    python benchmarks/diag_curvature_refresh.py --model minilm --cache /tmp/w8/minilm --task MRPC \\
        --json benchmarks/results/curvature-refresh-mrpc.json
    python benchmarks/diag_curvature_refresh.py --smoke   # GloVe MRPC, 300 training rows

The engine's L-BFGS starts from each model's Hessian at ``W = 0``; at weak penalties (C = 1, 10) the curvature
moves as the logits saturate and the few slow models need 150–540 batched calls (``benchmarks/README.md``). This
takes the task's selection solve as ``evaluate`` builds it, keeps its models with ``C >= --min-c``, and compares
(1) the engine's solve of them from zero with (2) ``k`` iterations of it, then L-BFGS restarted with each model's
**exact** Hessian at that point as its initial inverse (``[X, 1]ᵀ D [X, 1]`` mapped to the model's standardised
coordinates, plus the penalty; Cholesky): batched calls, CPU seconds (the Hessians' build separately) and the
objectives reached. Binary tasks only (the exact Hessian of a multinomial model is ``(dK)²``). Not an engine
path: it measures what a cheap approximation of that refresh could save at best.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

import evalfarm.classify as classify  # noqa: E402
from evalfarm.taskdata.downstream import DOWNSTREAM_TASKS, load_downstream_task  # noqa: E402

FTOL = 64 * float(np.finfo(np.float64).eps)


class _Captured(Exception):
    """Raised by the patched solve once it has the task's selection problem."""


def selection_problem(data: dict, task) -> tuple[classify._Problem, np.ndarray, list[float]]:
    """The ``_Problem`` of the task's first (selection) solve, its training-set indices and C values."""
    seen: dict = {}
    original = classify._Problem.solve

    def grab(self, sets, cs, theta0, **kw):
        seen.update(problem=self, sets=np.asarray(sets), cs=list(cs))
        raise _Captured

    classify._Problem.solve = grab  # type: ignore[method-assign]
    try:
        classify.evaluate(data, backend="torch", f1_label=task.f1_label, n_classes=task.n_classes, threads=1)
    except _Captured:
        pass
    finally:
        classify._Problem.solve = original  # type: ignore[method-assign]
    return seen["problem"], seen["sets"], seen["cs"]


def weak_models(problem, sets: np.ndarray, cs: list[float], min_c: float):
    """The selection models with ``C >= min_c``: their sets, Cs, row weights ``1 / n_b`` and penalties."""
    pick = [i for i, c in enumerate(cs) if c >= min_c]
    sets, cs = sets[pick], [cs[i] for i in pick]
    return (sets, cs, *problem.row_weights(sets, cs))


def exact_preconditioner(problem, sets: np.ndarray, Mn, lam, theta):
    """``q -> H⁻¹ q`` per model, ``H`` its exact Hessian at ``theta`` in its standardised coordinates."""
    import torch

    d = problem.X.shape[1]
    Xa = problem.augmented()  # rows signed by the label: Xa @ v is the margin
    idx = torch.from_numpy(sets)
    inv, mi = problem.inv[idx], (problem.mean * problem.inv)[idx]
    factors = []
    for b in range(len(sets)):
        T = torch.zeros(d + 1, d + 1, dtype=torch.float64)  # standardised weights and intercept -> Xa's
        T[:d, :d] = torch.diag(inv[b])
        T[d, :d] = -mi[b]
        T[d, d] = 1.0
        s = torch.sigmoid(Xa @ (T @ theta[b]))
        H = T.T @ (Xa.T @ (Xa * (s * (1 - s) * Mn[:, b])[:, None])) @ T
        H[:d, :d] += lam[b] * torch.eye(d, dtype=torch.float64)
        H[d, d] += 1e-12
        factors.append(torch.linalg.cholesky(H))
    L = torch.stack(factors)
    return lambda q, rows: torch.cholesky_solve(q[:, :, None], L[rows])[:, :, 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="MRPC", choices=list(DOWNSTREAM_TASKS))
    ap.add_argument("--model", default="glove", choices=["glove", "minilm"])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/evalfarm-bench/minilm"), help="MiniLM vectors")
    ap.add_argument("--cache-tasks", nargs="*", default=list(DOWNSTREAM_TASKS), help="the tasks the cache holds")
    ap.add_argument("--max-train", type=int, default=None)
    ap.add_argument("--min-c", type=float, default=1.0, help="the weak penalties: models with C >= this")
    ap.add_argument("--after", type=int, nargs="+", default=[20, 60], help="iterations before the refresh")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny run for CI: checks the script works")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(task="MRPC", model="glove", max_train=300, after=[5])
    args = ap.parse_args()

    import torch
    from bench_classify import glove_bow, minilm

    torch.set_num_threads(1)
    root = Path(os.environ["EVALFARM_DATA"]) / "downstream"
    task = load_downstream_task(args.task, root / args.task).subsample_train(args.max_train)
    if task.n_classes != 2:
        raise SystemExit(f"{args.task}: binary tasks only (the exact multinomial Hessian is (dK)²)")
    embed = glove_bow() if args.model == "glove" else minilm(args.cache, args.cache_tasks)
    problem, sets, cs = selection_problem(classify.task_features(task, embed), task)
    sets, cs, Mn, lam = weak_models(problem, sets, cs, args.min_c)
    n, d = problem.X.shape
    fg = problem._objective(sets, Mn, lam, torch.float64)
    calls: list[int] = []

    def counted(theta, rows):
        calls.append(len(rows))
        return fg(theta, rows)

    start = problem.preconditioner(sets, lam)
    zero = torch.zeros(len(sets), d + 1, dtype=torch.float64)
    every = torch.arange(len(sets))
    t0 = time.process_time()
    theta, converged, _ = classify.batched_lbfgs(
        counted, zero.clone(), tol=1e-6, max_iter=2000, ftol=FTOL, precondition=start
    )
    out = {
        "task": args.task, "model": args.model, "models": len(sets), "c": cs, "d": d, "n": n,
        "from_start": {"calls": len(calls), "cpu_seconds": round(time.process_time() - t0, 2),
                       "objective": fg(theta, every)[0].tolist(), "converged": bool(converged.all())},
        "refreshed": [],
    }  # fmt: skip
    for k in args.after:
        calls.clear()
        t0 = time.process_time()
        mid, _, _ = classify.batched_lbfgs(counted, zero.clone(), tol=1e-6, max_iter=k, ftol=FTOL, precondition=start)
        before = len(calls)
        t1 = time.process_time()
        exact = exact_preconditioner(problem, sets, Mn, lam, mid)
        build = time.process_time() - t1
        theta, converged, _ = classify.batched_lbfgs(
            counted, mid, tol=1e-6, max_iter=2000, ftol=FTOL, precondition=exact
        )
        out["refreshed"].append({
            "after": k, "calls_before": before, "calls_after": len(calls) - before,
            "build_cpu_seconds": round(build, 2), "cpu_seconds": round(time.process_time() - t0, 2),
            "objective": fg(theta, every)[0].tolist(), "converged": bool(converged.all()),
        })  # fmt: skip
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
