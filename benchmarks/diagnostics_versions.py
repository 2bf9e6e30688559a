"""The diagnostics' Spearman rho with each downstream task, per HEROS subset and for DefSent, in one warehouse or
two: how the correlations moved from the diagnostics' version-1 data to version 2 (docs/results.md, issue 43).

    python benchmarks/diagnostics_versions.py OLD_WAREHOUSE:heros-goemotions:defsent-wordnet \\
        NEW_WAREHOUSE:heros-goemotions:defsent-wordnet [--exclude-postprocessed] [--json out.json]
    python benchmarks/diagnostics_versions.py --smoke --json /tmp/d.json   # a synthetic warehouse: CI only

Each argument is ``warehouse:heros task:defsent task``; ``--downstream=WAREHOUSE`` takes every downstream accuracy
from that one warehouse. Reads only (``Warehouse.query``). rho is ``scipy.stats.spearmanr`` (average ranks for ties)
over the sentence models that have both numbers (the `correlations` view's rule), NaN under 3 models or when either
side is constant. ``--json`` writes the tables (row -> task -> [rho, n], NaN as null).

``--smoke`` builds a six-model warehouse in a temporary folder whose rhos are known (a version-2 HEROS row ordered
as MR's accuracy: +1, its version-1 row reversed: -1, a constant row and a two-model DefSent: NaN) and reads it as the
two specs ``WH:heros-goemotions-v1:defsent-wordnet-v1`` and ``WH:heros-goemotions:defsent-wordnet``; its JSON also
holds the numbers written, so tests/test_benchmarks_smoke.py checks the other rhos against SciPy.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

DOWNSTREAM = ("mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite")


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rho of the paired values; NaN under 3 pairs or when either side is constant."""
    from scipy.stats import spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def read(
    spec: str, exclude_postprocessed: bool, downstream: str | None = None
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """``(diagnostics {row: {model: value}}, downstream {task: {model: accuracy}})`` of one warehouse (the
    downstream accuracies from ``downstream`` when given)."""
    from evalfarm.warehouse import Warehouse

    path, heros, defsent = spec.split(":")
    wh = Warehouse(path)
    post = {r["model"] for r in wh.query("SELECT model, postprocessed FROM models").to_pylist() if r["postprocessed"]}
    keep = (lambda m: m not in post) if exclude_postprocessed else (lambda m: True)
    diag: dict[str, dict[str, float]] = defaultdict(dict)
    rows = wh.query(f"SELECT model, subset, normalized_similarity FROM heros WHERE task = '{heros}'").to_pylist()
    for model, subset, value in (tuple(r.values()) for r in rows):
        if keep(model) and value is not None:
            diag[f"HEROS {subset}"][model] = value
    rows = wh.query(f"SELECT model, mrr FROM defsent WHERE task = '{defsent}' AND ties = 'realistic'").to_pylist()
    for model, value in (tuple(r.values()) for r in rows):
        if keep(model) and value is not None:
            diag["DefSent MRR"][model] = value
    down: dict[str, dict[str, float]] = defaultdict(dict)
    rows = (
        Warehouse(downstream or path)
        .query(
            "SELECT model, task, value FROM metrics WHERE scorer = 'downstream' AND metric = 'accuracy' "
            "AND variant = 'full'"
        )
        .to_pylist()
    )
    for model, task, value in (tuple(r.values()) for r in rows):
        if keep(model):
            down[task][model] = value
    return diag, down


def table(
    spec: str, exclude_postprocessed: bool, downstream: str | None = None
) -> dict[str, dict[str, tuple[float, int]]]:
    diag, down = read(spec, exclude_postprocessed, downstream)
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for row, values in sorted(diag.items()):
        out[row] = {}
        for task in DOWNSTREAM:
            common = sorted(set(values) & set(down.get(task, {})))
            out[row][task] = (spearman([values[m] for m in common], [down[task][m] for m in common]), len(common))
    return out


def show(tables: list[dict[str, dict[str, tuple[float, int]]]]) -> None:
    """The tables side by side, one row per diagnostic: each cell ``rho -> rho`` across the specs."""
    print("row\t" + "\t".join(DOWNSTREAM) + "\tn")
    for row in sorted(set().union(*tables)):
        cells = []
        for task in DOWNSTREAM:
            got = [t.get(row, {}).get(task, (float("nan"), 0)) for t in tables]
            cells.append(" -> ".join(f"{v:+.2f}" for v, _ in got))
        n = "/".join(str(t.get(row, {}).get(DOWNSTREAM[0], (0, 0))[1]) for t in tables)
        print(f"{row}\t" + "\t".join(cells) + f"\t{n}")


def as_json(t: dict[str, dict[str, tuple[float, int]]]) -> dict[str, dict[str, list[float | int | None]]]:
    """A table with NaN as null (strict JSON)."""
    return {
        row: {task: [None if math.isnan(rho) else rho, n] for task, (rho, n) in cells.items()}
        for row, cells in t.items()
    }


def smoke_warehouse(root: Path) -> dict[str, Any]:
    """Six sentence models (``m5`` post-processed) with HEROS and DefSent numbers under both versions' task ids and
    MR and SST-2 accuracies; rows the script must pass over too (another variant, another tie policy, the raw
    cosine). Returns the numbers that count: ``{"downstream": {task: {model: accuracy}}, "diagnostics": {task:
    {row: {model: value}}}}``."""
    from evalfarm.warehouse import Warehouse, now

    models = [f"m{i}" for i in range(6)]
    down = {
        "mr": {m: 0.70 + 0.02 * i for i, m in enumerate(models)},
        "sst2": dict(zip(models, [0.81, 0.84, 0.80, 0.86, 0.83, 0.85], strict=True)),
    }
    diag: dict[str, dict[str, dict[str, float]]] = {
        "heros-goemotions-v1": {"HEROS synonym": {m: 0.9 - 0.1 * i for i, m in enumerate(models)}},
        "heros-goemotions": {
            "HEROS synonym": {m: 0.05 + 0.1 * i for i, m in enumerate(models)},
            "HEROS antonym": dict(zip(models, [0.3, 0.1, 0.3, 0.5, 0.2, 0.4], strict=True)),
            "HEROS typo": dict.fromkeys(models, 0.5),
        },
        "defsent-wordnet-v1": {"DefSent MRR": {"m0": 0.2, "m1": 0.1}},
        "defsent-wordnet": {"DefSent MRR": dict(zip(models[:4], [0.12, 0.31, 0.25, 0.4], strict=True))},
    }
    wh = Warehouse(root)
    wh.init()
    at = now()

    def row(model: str, task: str, scorer: str, subset: str, variant: str, ties: str | None, metric: str,
            value: float) -> dict[str, Any]:  # fmt: skip
        return {
            "run_id": "smoke", "model": model, "task": task, "scorer": scorer, "subset": subset, "variant": variant,
            "ties": ties, "metric": metric, "value": value, "is_primary": False, "higher_is_better": True,
            "fingerprint": f"{task}-{model}", "spec_hash": f"h-{model}", "created_at": at,
        }  # fmt: skip

    units: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for i, m in enumerate(models):
        post = {"postprocess": "abtt", "base": "m4"} if m == "m5" else {}
        wh.write_model({"model": m, "level": "sentence", "kind": "bow", "spec_hash": f"h-{m}", "created_at": at,
                        **post})  # fmt: skip
        for task, acc in down.items():
            units[(m, task)].append(row(m, task, "downstream", "all", "full", None, "accuracy", acc[m]))
            # the sample variant, reversed: read it and MR's rho moves away from +-1
            units[(m, task)].append(row(m, task, "downstream", "all", "max_train=1000", None, "accuracy", 1 - acc[m]))
        for task, by_row in diag.items():
            unit = units[(m, task)]
            for name, values in by_row.items():
                if m not in values:
                    continue
                if task.startswith("heros"):  # the raw cosine beside: not what the rho is of
                    subset = name.removeprefix("HEROS ")
                    unit.append(row(m, task, "heros", subset, "", None, "normalized_similarity", values[m]))
                    unit.append(row(m, task, "heros", subset, "", None, "cosine", 0.5 + 0.01 * i))
                else:  # the optimistic tie policy, reversed: read it and the rho moves
                    unit.append(row(m, task, "defsent", "all", "", "realistic", "mrr", values[m]))
                    unit.append(row(m, task, "defsent", "all", "", "optimistic", "mrr", 1 - values[m]))
    for (m, task), rows in units.items():
        if rows:
            wh.write("metrics", rows, unit=(m, task, f"{task}-{m}"))
    return {"downstream": down, "diagnostics": diag}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*", metavar="WAREHOUSE:HEROS_TASK:DEFSENT_TASK")
    ap.add_argument("--exclude-postprocessed", action="store_true", help="leave out post-processed models")
    ap.add_argument("--downstream", metavar="WAREHOUSE", help="every downstream accuracy from this warehouse")
    ap.add_argument("--json", type=Path, help="write the tables here (row -> task -> [rho, n])")
    ap.add_argument("--smoke", action="store_true", help="a synthetic six-model warehouse: CI only")
    args = ap.parse_args(argv)
    if not args.specs and not args.smoke:
        ap.error("give at least one WAREHOUSE:HEROS_TASK:DEFSENT_TASK (or --smoke)")
    with tempfile.TemporaryDirectory(prefix="diagnostics-versions-") as tmp:
        out: dict[str, Any] = {}
        if args.smoke:
            wh = Path(tmp) / "wh"
            out["written"] = smoke_warehouse(wh)
            args.specs = [f"{wh}:heros-goemotions-v1:defsent-wordnet-v1", f"{wh}:heros-goemotions:defsent-wordnet"]
        tables = [table(s, args.exclude_postprocessed, args.downstream) for s in args.specs]
        out |= {"specs": args.specs, "exclude_postprocessed": args.exclude_postprocessed}
        out["tables"] = [as_json(t) for t in tables]
        if args.smoke:  # the other policy too: m5 left out
            out["tables_excluding_postprocessed"] = [as_json(table(s, True, args.downstream)) for s in args.specs]
    show(tables)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
