"""The diagnostics' Spearman rho with each downstream task, per HEROS subset and for DefSent, in one warehouse or
two: how the correlations moved from the diagnostics' version-1 data to version 2 (docs/results.md, issue 43).

    python benchmarks/diagnostics_versions.py OLD_WAREHOUSE:heros-goemotions:defsent-wordnet \\
        NEW_WAREHOUSE:heros-goemotions:defsent-wordnet [--exclude-postprocessed]

Each argument is ``warehouse:heros task:defsent task``; ``--downstream=WAREHOUSE`` takes every downstream accuracy
from that one warehouse. Reads only (``Warehouse.query``). rho is Pearson's r of the
average ranks over the sentence models that have both numbers (the `correlations` view's rule), NaN under 3 models.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

DOWNSTREAM = ("mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite")


def ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(len(v), dtype=float)
    for x in np.unique(v):  # ties share their mean rank
        r[v == x] = r[v == x].mean()
    return r


def spearman(a: list[float], b: list[float]) -> float:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(np.corrcoef(ranks(np.array(a)), ranks(np.array(b)))[0, 1])


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


def main(argv: list[str]) -> None:
    exclude = "--exclude-postprocessed" in argv
    downstream = next((a.split("=", 1)[1] for a in argv if a.startswith("--downstream=")), None)
    specs = [a for a in argv if not a.startswith("--")]
    tables = [table(s, exclude, downstream) for s in specs]
    print("row\t" + "\t".join(DOWNSTREAM) + "\tn")
    for row in sorted(set().union(*tables)):
        cells = []
        for task in DOWNSTREAM:
            got = [t.get(row, {}).get(task, (float("nan"), 0)) for t in tables]
            cells.append(" -> ".join(f"{v:+.2f}" for v, _ in got))
        n = "/".join(str(t.get(row, {}).get(DOWNSTREAM[0], (0, 0))[1]) for t in tables)
        print(f"{row}\t" + "\t".join(cells) + f"\t{n}")


if __name__ == "__main__":
    main(sys.argv[1:])
