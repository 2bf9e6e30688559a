"""Do the normal-theory tests of two dependent Spearman correlations hold their level? (issue 53)

Steiger's (1980) Z, Williams' (1959) t and Zou's (2007) interval were derived for Pearson's r. Applied to Spearman's
rho with Pearson's variance of Fisher's z, 1 / (n - 3), they under-state the variance (Spearman's rho varies more
than Pearson's r of the same data) and reject a true null too often. Under a true null (A and B correlate equally
with D), on trivariate normal samples of n models, each sample's three Spearman correlations are tested by
:mod:`evalfarm.analysis.comparisons` with Pearson's variance (``rank=False``) and with Bonett & Wright's (2000)
Spearman variance (``rank=True``, what the project uses), and Steiger's Z also with Fieller, Hartley & Pearson's (1957)
constant 1.06 (Pearson's Z / sqrt(1.06): arithmetic on the project's statistic, the alternative the issue names).
The figure is the rejection rate over alpha (1 = exact; above 1: too many rejections), at 0.05 and at the
published-cell tests' Bonferroni levels (0.05 / 8 for the paper's Table 6, 0.05 / 10 for Table 3).

    python benchmarks/spearman_null.py --json benchmarks/results/spearman-null.json
    python benchmarks/spearman_null.py --smoke --json /tmp/n.json

Seeded; CPU only (about 3 million test calls at the default size: several minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scipy.stats import norm  # noqa: E402

from evalfarm.analysis.comparisons import steiger_z, williams_t, zou_interval  # noqa: E402

ALPHAS = (0.05, 0.05 / 8, 0.05 / 10)
RHOS = (0.3, 0.6, 0.8, 0.9)
R_ABS = (0.0, 0.5, 0.9)
NS = (10, 34, 67, 188)
FHP = 1.06
"""Fieller, Hartley & Pearson's (1957) variance of Fisher's z of Spearman's rho, in units of 1 / (n - 3)."""


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (continuous data: no ties)."""
    rx = x.argsort(1).argsort(1).astype(float)
    ry = y.argsort(1).argsort(1).astype(float)
    rx -= rx.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    return np.asarray((rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1)))


def scenario(rho: float, r_ab: float, n: int, reps: int, seed: int) -> dict[str, Any]:
    """The rejection rates over alpha of each test at each of :data:`ALPHAS`, under rho(A, D) = rho(B, D) = ``rho``
    and rho(A, B) = ``r_ab`` (Pearson's, of the normal data)."""
    cov = np.array([[1, r_ab, rho], [r_ab, 1, rho], [rho, rho, 1]])
    x = np.random.default_rng(seed).standard_normal((reps, n, 3)) @ np.linalg.cholesky(cov).T
    r1, r2 = spearman_rows(x[..., 0], x[..., 2]), spearman_rows(x[..., 1], x[..., 2])
    r12 = spearman_rows(x[..., 0], x[..., 1])
    stats: dict[str, np.ndarray] = {}
    for name, test in (("steiger", steiger_z), ("williams", williams_t)):
        for rank in (False, True):
            stats[f"{name}-{'spearman' if rank else 'pearson'}"] = np.array(
                [test(a, b, c, n, rank=rank)[1] for a, b, c in zip(r1, r2, r12, strict=True)]
            )
    z_pearson = np.array([steiger_z(a, b, c, n)[0] for a, b, c in zip(r1, r2, r12, strict=True)])
    stats["steiger-fhp"] = 2 * norm.sf(np.abs(z_pearson) / math.sqrt(FHP))
    rates: dict[str, dict[str, float]] = {}
    for alpha in ALPHAS:
        row = {k: float(np.mean(p < alpha)) / alpha for k, p in stats.items()}
        for rank in (False, True):
            outside = [
                not (lo <= 0 <= hi)
                for lo, hi in (
                    zou_interval(a, b, c, n, confidence=1 - alpha, rank=rank)
                    for a, b, c in zip(r1, r2, r12, strict=True)
                )
            ]
            row[f"zou-{'spearman' if rank else 'pearson'}"] = float(np.mean(outside)) / alpha
        rates[f"{alpha:.5g}"] = {k: round(v, 3) for k, v in row.items()}
    return {"rho": rho, "r_ab": r_ab, "n": n, "reps": reps, "rejections_over_alpha": rates}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10_000, help="simulated zoos per scenario")
    ap.add_argument("--seed", type=int, default=53)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="two scenarios, 300 zoos each: CI only")
    args = ap.parse_args()
    grid = [(rho, r_ab, n) for rho in RHOS for r_ab in R_ABS for n in NS]
    if args.smoke:
        grid, args.reps = [(0.8, 0.5, 34), (0.3, 0.0, 10)], 300
    started = time.perf_counter()
    rows = []
    for i, (rho, r_ab, n) in enumerate(grid):
        if np.linalg.eigvalsh(np.array([[1, r_ab, rho], [r_ab, 1, rho], [rho, rho, 1]])).min() <= 0:
            continue  # not a correlation matrix
        row = scenario(rho, r_ab, n, args.reps, args.seed + i)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"alphas": list(ALPHAS), "reps": args.reps, "seed": args.seed, "scenarios": rows,
           "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
