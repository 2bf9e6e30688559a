"""The quick profile's 1,000-row sample against the full data, across a whole warehouse's zoo (issue 22): read-only.

A warehouse that holds both downstream variants of its models (a ``--quick-downstream`` nightly, then the default
full-data one) answers two questions without computing anything:

1. **Per downstream task**: over the models with both numbers, the mean shift sample − full (points) and Spearman's
   rho between the two accuracies: does the sample rank the models as the full data does?
2. **The correlation tables both ways** (the paper's Tables 3 and 6: every intrinsic metric against every downstream
   task, across the level's models): each cell's rho with the full-data accuracies and with the sample's, over the
   *same* models (those with both), the two tables compared cell for cell (Spearman between them, mean and largest
   |Δrho|, sign changes among cells where either |rho| >= 0.3) and, per downstream column, whether the intrinsic
   row that predicts it best is the same.

    python benchmarks/sample_vs_full_warehouse.py --warehouse /path/to/nightly-wh --json results/x.json
    python benchmarks/sample_vs_full_warehouse.py --smoke --json /tmp/s.json   # a synthetic warehouse: CI only

Reads the ``correlation_pairs`` and ``metrics`` views (tie policy ``optimistic`` or none, the paper's), through
:meth:`evalfarm.warehouse.Warehouse.query`; nothing is written to the warehouse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from evalfarm.warehouse import Warehouse  # noqa: E402

SAMPLE = "max_train=%"

PER_TASK_SQL = f"""
WITH d AS (
    SELECT m.model, mo.level, m.task, m.variant, m.value
    FROM metrics m JOIN models mo USING (model)
    WHERE m.scorer = 'downstream' AND m.is_primary AND isfinite(m.value) AND NOT m.degenerate AND NOT m.thin
)
SELECT f.model, f.task, f.value AS full_acc, s.value AS sample_acc, s.variant AS sample_variant
FROM d f JOIN d s ON f.model = s.model AND f.task = s.task
WHERE f.variant = 'full' AND s.variant LIKE '{SAMPLE}'
ORDER BY f.task, f.model
"""

CELLS_SQL = f"""
WITH p AS (
    SELECT level, intrinsic_task, intrinsic_scorer, intrinsic_metric, intrinsic_subset, variant,
           coalesce(ties, '') AS ties, downstream_task, downstream_subset, downstream_variant,
           excludes_postprocessed, model, intrinsic_value, downstream_value
    FROM correlation_pairs
    WHERE coalesce(ties, 'optimistic') = 'optimistic'
)
SELECT f.level, f.excludes_postprocessed, f.intrinsic_task, f.intrinsic_scorer, f.intrinsic_metric,
       f.intrinsic_subset, f.variant, f.downstream_task, f.downstream_subset,
       list(f.model ORDER BY f.model) AS models,
       list(f.intrinsic_value ORDER BY f.model) AS intrinsic,
       list(f.downstream_value ORDER BY f.model) AS full_acc,
       list(s.downstream_value ORDER BY f.model) AS sample_acc
FROM p f JOIN p s USING (level, excludes_postprocessed, intrinsic_task, intrinsic_scorer, intrinsic_metric,
                         intrinsic_subset, variant, ties, downstream_task, downstream_subset, model)
WHERE f.downstream_variant = 'full' AND s.downstream_variant LIKE '{SAMPLE}'
GROUP BY ALL
"""


def rho(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None under 3 values or when one side is constant."""
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)


def per_task(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    out = {}
    for task, rs in sorted(by_task.items()):
        full = [r["full_acc"] for r in rs]
        sample = [r["sample_acc"] for r in rs]
        shift = 100 * (np.asarray(sample) - np.asarray(full))
        out[task] = {
            "n_models": len(rs),
            "sample_variant": rs[0]["sample_variant"],
            "spearman_full_vs_sample": rho(full, sample),
            "mean_shift_points": round(float(shift.mean()), 2),
            "min_shift_points": round(float(shift.min()), 2),
            "max_shift_points": round(float(shift.max()), 2),
            "full_range_points": round(100 * (max(full) - min(full)), 2),
        }
    return out


def compare_tables(cells: list[dict[str, Any]], *, strong: float = 0.3) -> dict[str, Any]:
    """Per (level, excludes_postprocessed): both tables' cells over the same models, compared."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        key = c["level"] + ("-no-postprocessed" if c["excludes_postprocessed"] else "")
        r_full, r_sample = rho(c["intrinsic"], c["full_acc"]), rho(c["intrinsic"], c["sample_acc"])
        if r_full is None or r_sample is None:
            continue
        parts = (c["intrinsic_task"], c["intrinsic_metric"], c["intrinsic_subset"], c["variant"])
        row = "/".join(x for x in parts if x)
        groups[key].append(
            {"row": row, "downstream": c["downstream_task"], "n": len(c["models"]), "full": r_full, "sample": r_sample}
        )
    out = {}
    for key, rs in sorted(groups.items()):
        full = np.asarray([r["full"] for r in rs])
        sample = np.asarray([r["sample"] for r in rs])
        delta = np.abs(full - sample)
        either_strong = (np.abs(full) >= strong) | (np.abs(sample) >= strong)
        flips = either_strong & (np.sign(full) != np.sign(sample))
        best: dict[str, dict[str, Any]] = {}
        for task in sorted({r["downstream"] for r in rs}):
            col = [r for r in rs if r["downstream"] == task]
            bf = max(col, key=lambda r: r["full"])
            bs = max(col, key=lambda r: r["sample"])
            best[task] = {
                "best_row_full": bf["row"],
                "best_row_sample": bs["row"],
                "same": bf["row"] == bs["row"],
                "full_rho_of_sample_choice": round(next(r["full"] for r in col if r["row"] == bs["row"]), 3),
                "best_full_rho": round(bf["full"], 3),
                "rows_compared": len(col),
                "spearman_of_column": rho([r["full"] for r in col], [r["sample"] for r in col]),
            }
        worst = sorted(rs, key=lambda r: -abs(r["full"] - r["sample"]))[:5]
        out[key] = {
            "cells": len(rs),
            "models_per_cell": [int(min(r["n"] for r in rs)), int(max(r["n"] for r in rs))],
            "spearman_between_tables": rho(list(full), list(sample)),
            "mean_abs_delta_rho": round(float(delta.mean()), 3),
            "median_abs_delta_rho": round(float(np.median(delta)), 3),
            "max_abs_delta_rho": round(float(delta.max()), 3),
            "share_delta_over_0.1": round(float((delta > 0.1).mean()), 3),
            "strong_cells": int(either_strong.sum()),
            "sign_changes_among_strong": int(flips.sum()),
            "best_row_per_downstream_task": best,
            "largest_deltas": [{**r, "full": round(r["full"], 3), "sample": round(r["sample"], 3)} for r in worst],
        }
    return out


def smoke_warehouse(root: Path) -> Path:
    """Six bag-of-words sentence models, one intrinsic task (STS-B-like) and two downstream tasks with both variants:
    on ``agree`` the sample keeps the full data's order, on ``reverse`` it reverses it."""
    at = datetime(2026, 11, 26, tzinfo=UTC)
    wh = Warehouse(root)
    wh.init()
    for i in range(6):
        m = f"m{i}"
        fp = f"{i:02d}"
        wh.write_model({"model": m, "level": "sentence", "kind": "bow", "spec_hash": f"h{i}", "created_at": at})
        rows = [
            {"run_id": "r", "model": m, "task": "sts", "scorer": "sts", "subset": "all", "variant": "",
             "metric": "spearman", "value": 0.1 * i, "is_primary": True, "higher_is_better": True,
             "fingerprint": f"sts{fp}", "created_at": at},
        ]  # fmt: skip
        for task, sample in (("agree", 0.6 + 0.01 * i), ("reverse", 0.7 - 0.01 * i)):
            for variant, value, f in (("full", 0.7 + 0.02 * i, "f"), ("max_train=1000", sample, "s")):
                rows.append(
                    {"run_id": "r", "model": m, "task": task, "scorer": "downstream", "subset": "all",
                     "variant": variant, "metric": "accuracy", "value": value, "is_primary": True,
                     "higher_is_better": True, "fingerprint": f"{task}{f}{fp}", "created_at": at}
                )  # fmt: skip
        for r in rows:
            wh.write("metrics", [r])
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="a synthetic six-model warehouse: CI only")
    args = ap.parse_args()
    if args.smoke:
        args.warehouse = smoke_warehouse(Path(tempfile.mkdtemp()) / "wh")
    if args.warehouse is None:
        ap.error("--warehouse is required (or --smoke)")
    wh = Warehouse(args.warehouse)
    out = {
        "warehouse": str(args.warehouse),
        "per_task": per_task(wh.query(PER_TASK_SQL).to_pylist()),
        "tables": compare_tables(wh.query(CELLS_SQL).to_pylist()),
    }
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
