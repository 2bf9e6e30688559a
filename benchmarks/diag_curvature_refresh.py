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
objectives reached. ``--refresh exact`` on a multinomial model (TREC, SICK-E, SST5) builds its ``(d + 1) K``-square
Hessian from the ``K (K + 1) / 2`` class pairs' weighted Grams ``[X, 1]ᵀ diag(p_k (δ_kl - p_l)) [X, 1]``, one float32
product for all pairs of a model (the engine's ``mixed`` products), ~27 GFLOP for a 384-d six-class model.
``--refresh kfac``: any task, the Kronecker form of the engine's own preconditioner rebuilt at that
point, ``Ā ⊗ Σ_w + lam I`` with ``Ā`` the mean of the rows' logit curvatures ``diag(p) - p pᵀ`` and ``Σ_w`` the
second moment of the standardised rows weighted by each row's curvature trace (for a binary model: the exact
Hessian's weight block), one ``d × d`` eigendecomposition per model. Not an engine path: it measures what a
refresh could save.

    python benchmarks/diag_curvature_refresh.py --refresh kfac --model minilm --cache /tmp/w8/minilm --task TREC
    python benchmarks/diag_curvature_refresh.py --refresh exact --model minilm --task TREC --min-c 10 \
        --cache-tasks MRPC SICK-E TREC --after 30 60 90 --json benchmarks/results/curvature-refresh-trec.json
    python benchmarks/diag_curvature_refresh.py --refresh kfac --task MPQA --warehouse /work/nightly-wh2 \
        --stored-model all-mpnet-base-v2-cls-l8   # a zoo model's stored vectors; a CV task's C >= --min-c round
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


def selection_problem(data: dict, task, min_c: float = 0.0) -> tuple[classify._Problem, np.ndarray, list[float]]:
    """The ``_Problem`` of the task's first selection solve with a model of ``C >= min_c`` (a CV task solves its C
    path in rounds, one C each), its training-set indices and C values."""
    seen: dict = {}
    original = classify._Problem.solve

    def grab(self, sets, cs, theta0, **kw):
        if max(cs) < min_c:
            return original(self, sets, cs, theta0, **kw)
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

    L = torch.stack([torch.linalg.cholesky(exact_hessian(problem, sets, Mn, lam, theta, b)) for b in range(len(sets))])
    return lambda q, rows: torch.cholesky_solve(q[:, :, None], L[rows])[:, :, 0]


def exact_hessian(problem, sets: np.ndarray, Mn, lam, theta, b: int):
    """Model ``b``'s Hessian at ``theta[b]`` in the engine's parameters (its standardised weights, feature-major and
    class-minor, then its intercepts), the penalty included; a multinomial model's classes' common shift of the
    intercepts (no gradient, no curvature) gets 1e-6, so that it factors."""
    import torch

    d, K = problem.X.shape[1], problem.K
    Xa = problem.augmented()  # a binary model's rows signed by the label: Xa @ v is the margin
    s = int(sets[b])
    T = torch.zeros(d + 1, d + 1, dtype=torch.float64)  # standardised weights and intercept -> Xa's
    T[:d, :d] = torch.diag(problem.inv[s])
    T[d, :d] = -problem.mean[s] * problem.inv[s]
    T[d, d] = 1.0
    if K == 1:
        p = torch.sigmoid(Xa @ (T @ theta[b]))
        H = T.T @ (Xa.T @ (Xa * (p * (1 - p) * Mn[:, b])[:, None])) @ T
        H[:d, :d] += lam[b] * torch.eye(d, dtype=torch.float64)
        H[d, d] += 1e-12
        return H
    H = multinomial_hessian(Xa, Mn[:, b], T, theta[b].view(d + 1, K))
    H[: d * K, : d * K] += lam[b] * torch.eye(d * K, dtype=torch.float64)
    H[d * K :, d * K :] += 1e-6 * torch.eye(K, dtype=torch.float64)
    return H


def multinomial_hessian(Xa, weights, T, W):
    """The data term of one multinomial model's Hessian in its standardised coordinates, ``((d + 1) K)²`` in the
    engine's parameter order (``W`` (d + 1, K) row-major: feature-major, class-minor): the class pairs' Grams
    ``Xaᵀ diag(w p_k (δ_kl - p_l)) Xa`` of its rows (``weights`` ``1 / n_b``, 0 off its set), one float32 product
    for all pairs, then ``Tᵀ G T`` for each."""
    import torch

    rows = weights.nonzero().squeeze(1)
    Xr, w = Xa[rows], weights[rows]
    p = torch.softmax(Xr @ (T @ W), dim=1)
    K, D = W.shape[1], Xa.shape[1]
    pairs = [(k, j) for k in range(K) for j in range(k, K)]
    coef = torch.stack([w * p[:, k] * (float(k == j) - p[:, j]) for k, j in pairs], dim=1).float()
    X32 = Xr.float()
    G = (X32.T @ (X32[:, None, :] * coef[:, :, None]).reshape(len(Xr), -1)).view(D, len(pairs), D).double()
    H = torch.zeros(D, K, D, K, dtype=torch.float64)
    for i, (k, j) in enumerate(pairs):
        block = T.T @ G[:, i] @ T
        H[:, k, :, j] = block
        H[:, j, :, k] = block.T
    return H.reshape(D * K, D * K)


def kfac_preconditioner(problem, sets: np.ndarray, lam, theta):
    """``q -> M q`` per model, ``M = (Ā ⊗ Σ_w + lam I)⁻¹`` on the weights and ``Ā⁺`` on the intercepts, built at
    ``theta`` (see the module docstring): the engine's preconditioner form with the curvature of the current
    logits instead of the class priors."""
    import torch

    d, K = problem.X.shape[1], problem.K
    parts = []
    for b, s in enumerate(sets):
        rows = torch.from_numpy(problem.masks[s])
        Xs = (problem.X[rows] - problem.mean[s]) * problem.inv[s]
        Z = Xs @ theta[b, : d * K].view(d, K) + theta[b, d * K :]
        if K == 1:  # the engine's binary logit is class 1's
            p = torch.sigmoid(Z[:, 0])
            w = p * (1 - p)
            alpha, V = w.mean().reshape(1), torch.ones(1, 1, dtype=torch.float64)
        else:
            P = torch.softmax(Z, dim=1)
            w = (P * (1 - P)).sum(1)
            alpha, V = torch.linalg.eigh(torch.diag(P.mean(0)) - P.T @ P / len(P))
        E, U = torch.linalg.eigh((Xs * w[:, None]).T @ Xs / w.sum())
        alpha = alpha.clamp(min=0)
        parts.append((E.clamp(min=0), U, alpha, V, torch.where(alpha > 1e-9, 1 / alpha.clamp(min=1e-9), 0.0)))

    def apply(q, rows):
        out = torch.empty_like(q)
        for j, b in enumerate(rows.tolist()):
            E, U, alpha, V, inv_alpha = parts[b]
            C = U.T @ q[j, : d * K].view(d, K) @ V
            out[j, : d * K] = (U @ (C / (E[:, None] * alpha[None, :] + lam[b])) @ V.T).reshape(-1)
            out[j, d * K :] = V @ ((V.T @ q[j, d * K :]) * inv_alpha)
        return out

    return apply


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="MRPC", choices=list(DOWNSTREAM_TASKS))
    ap.add_argument("--model", default="glove", choices=["glove", "minilm"])
    ap.add_argument("--cache", type=Path, default=Path("/tmp/evalfarm-bench/minilm"), help="MiniLM vectors")
    ap.add_argument("--cache-tasks", nargs="*", default=list(DOWNSTREAM_TASKS), help="the tasks the cache holds")
    ap.add_argument("--max-train", type=int, default=None)
    ap.add_argument("--min-c", type=float, default=1.0, help="the weak penalties: models with C >= this")
    ap.add_argument("--after", type=int, nargs="+", default=[20, 60], help="iterations before the refresh")
    ap.add_argument(
        "--refresh", nargs="+", default=["exact"], choices=["exact", "kfac"], help="the refreshed curvature(s)"
    )
    ap.add_argument("--warehouse", type=Path, default=None, help="with --stored-model: read its vectors there")
    ap.add_argument("--stored-model", default=None, help="a model id whose text store in --warehouse has the texts")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny run for CI: checks the script works")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(task="MRPC", model="glove", max_train=300, after=[5], refresh=["exact", "kfac"])
    return ap.parse_args()


def main() -> None:
    args = _args()

    import torch
    from bench_classify import glove_bow, minilm, stored_model

    torch.set_num_threads(1)
    root = Path(os.environ["EVALFARM_DATA"]) / "downstream"
    task = load_downstream_task(args.task, root / args.task).subsample_train(args.max_train)
    if args.stored_model is not None:
        embed = stored_model(args.warehouse, args.stored_model)
    else:
        embed = glove_bow() if args.model == "glove" else minilm(args.cache, args.cache_tasks)
    problem, sets, cs = selection_problem(classify.task_features(task, embed), task, args.min_c)
    sets, cs, Mn, lam = weak_models(problem, sets, cs, args.min_c)
    n, d = problem.X.shape
    K = problem.K
    fg = problem._objective(sets, Mn, lam, torch.float64)
    calls: list[int] = []

    def counted(theta, rows):
        calls.append(len(rows))
        return fg(theta, rows)

    start = problem.preconditioner(sets, lam)
    zero = torch.zeros(len(sets), d * K + K, dtype=torch.float64)
    every = torch.arange(len(sets))
    t0 = time.process_time()
    theta, converged, _ = classify.batched_lbfgs(
        counted, zero.clone(), tol=1e-6, max_iter=2000, ftol=FTOL, precondition=start
    )
    out = {
        "task": args.task, "models": len(sets), "c": cs, "d": d, "n": n,
        "model": args.stored_model or args.model, "refresh": args.refresh,
        "from_start": {"calls": len(calls), "model_calls": sum(calls),
                       "cpu_seconds": round(time.process_time() - t0, 2),
                       "objective": fg(theta, every)[0].tolist(), "converged": bool(converged.all())},
        "refreshed": [],
    }  # fmt: skip
    for kind in args.refresh:
        for k in args.after:
            calls.clear()
            t0 = time.process_time()
            mid, _, _ = classify.batched_lbfgs(
                counted, zero.clone(), tol=1e-6, max_iter=k, ftol=FTOL, precondition=start
            )
            before = len(calls)
            t1 = time.process_time()
            if kind == "exact":
                refreshed = exact_preconditioner(problem, sets, Mn, lam, mid)
            else:
                refreshed = kfac_preconditioner(problem, sets, lam, mid)
            build = time.process_time() - t1
            theta, converged, _ = classify.batched_lbfgs(
                counted, mid, tol=1e-6, max_iter=2000, ftol=FTOL, precondition=refreshed
            )
            out["refreshed"].append({
                "refresh": kind, "after": k, "calls_before": before, "calls_after": len(calls) - before,
                "model_calls": sum(calls), "build_cpu_seconds": round(build, 2),
                "cpu_seconds": round(time.process_time() - t0, 2),
                "objective": fg(theta, every)[0].tolist(), "converged": bool(converged.all()),
            })  # fmt: skip
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
