"""Compare two warehouses number for number: the check that a refactoring changed no result.

Reads each warehouse's ``metrics`` view (the public interface) through evalfarm's read-only query path and joins
them on (model, task, scorer, subset, variant, ties, metric). Reported: rows only in one, rows whose value differs
(NaN equals NaN; exact equality unless ``--tolerance``), and rows whose fingerprint, spec hash, primary flag,
direction or parameters differ (the same number computed under another identity would make the next run
recompute it). With ``--ranks`` the per-pair EvalRank ranks are compared too.

    python benchmarks/compare_warehouses.py WAREHOUSE_BEFORE WAREHOUSE_AFTER [--json out.json]
    python benchmarks/compare_warehouses.py FULL_BEFORE SUBSET_AFTER --subset   # a fresh run of some units
    python benchmarks/compare_warehouses.py --smoke --ranks   # two runs of a toy catalog: identical

Exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

KEY = ("model", "task", "scorer", "subset", "variant", "ties", "metric")
IDENTITY = ("is_primary", "higher_is_better", "fingerprint", "spec_hash", "scorer_version", "params", "degenerate")


def _rows(warehouse: str, sql: str) -> list[dict[str, Any]]:
    from evalfarm.api import query

    return query(sql, warehouse=warehouse).to_pylist()


def _same(a: Any, b: Any, tolerance: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= tolerance
    return a == b


def _ordered(keys: Any) -> list[tuple[Any, ...]]:
    """Metric keys in a stable order; a key's ``ties`` is NULL for every metric but the rank ones, so None sorts
    first instead of failing the comparison with a str."""
    return sorted(keys, key=lambda k: tuple((x is not None, "" if x is None else str(x)) for x in k))


def compare_metrics(before: str, after: str, *, tolerance: float = 0.0, subset: bool = False) -> dict[str, Any]:
    """What differs between the two warehouses' ``metrics`` views (``subset``: only the units, (model, task), that
    ``after`` holds: a fresh warehouse of a few units against a full one)."""
    sql = f"SELECT {', '.join(KEY)}, value, {', '.join(IDENTITY)} FROM metrics"
    b = {tuple(r[k] for k in KEY): r for r in _rows(after, sql)}
    units = {k[:2] for k in b}
    a = {tuple(r[k] for k in KEY): r for r in _rows(before, sql)}
    if subset:
        a = {k: r for k, r in a.items() if k[:2] in units}
    value = [k for k in a.keys() & b.keys() if not _same(a[k]["value"], b[k]["value"], tolerance)]
    identity = {col: _ordered(k for k in a.keys() & b.keys() if a[k][col] != b[k][col]) for col in IDENTITY}
    return {
        "rows_before": len(a),
        "rows_after": len(b),
        "only_before": [list(k) for k in _ordered(a.keys() - b.keys())],
        "only_after": [list(k) for k in _ordered(b.keys() - a.keys())],
        "value_differs": [{"key": list(k), "before": a[k]["value"], "after": b[k]["value"]} for k in _ordered(value)],
        "identity_differs": {col: [list(k) for k in ks] for col, ks in identity.items() if ks},
        "models": len({k[0] for k in a}),
        "tasks": len({k[1] for k in a}),
    }


def compare_ranks(before: str, after: str, *, subset: bool = False) -> dict[str, Any]:
    """Per-pair EvalRank ranks (the ``ranks`` view): pairs whose stored ranks differ (``subset``: of ``after``'s
    units only)."""
    sql = "SELECT model, task, variant, query_id, positive_id, rank, tied, score, oov FROM ranks ORDER BY ALL"
    b = _rows(after, sql)
    units = {(r["model"], r["task"]) for r in b}
    a = [r for r in _rows(before, sql) if not subset or (r["model"], r["task"]) in units]
    return {"pairs_before": len(a), "pairs_after": len(b), "identical": a == b}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--tolerance", type=float, default=0.0, help="largest absolute difference that counts as equal")
    ap.add_argument("--ranks", action="store_true", help="compare the per-pair EvalRank ranks too")
    ap.add_argument("--json", type=Path, help="write the full comparison here")
    ap.add_argument(
        "--subset",
        action="store_true",
        help="compare only the units (model, task) AFTER holds: a fresh warehouse of a few units against a full one",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): without BEFORE and AFTER, two warehouses of one "
        "toy catalog, which must compare identical",
    )
    args = ap.parse_args(argv)
    if args.after is None and not args.smoke:
        ap.error("BEFORE and AFTER are required")
    with tempfile.TemporaryDirectory() as tmp:
        if args.after is None:
            args.before, args.after = (smoke_warehouse(Path(tmp), name) for name in ("before", "after"))
        return report(args)


def smoke_warehouse(d: Path, name: str) -> str:
    """``--smoke``'s warehouse ``d/name``: the EvalRank toolkit's toy GloVe on the word pool and one similarity set."""
    from evalfarm.api import run

    catalog = d / "smoke.yaml"
    catalog.write_text(
        "include: [tasks]\ntasks: [evalrank-word, wordsim-rg-65]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,"
        " source: {type: data, ref: evalrank/reference/toy_emb.txt}}\n"
    )
    run(catalog, warehouse=d / name, executor="local")
    return str(d / name)


def report(args: argparse.Namespace) -> int:
    """Compare, print the summary line, write the JSON; 1 when anything differs."""
    out = compare_metrics(args.before, args.after, tolerance=args.tolerance, subset=args.subset)
    if args.ranks:
        out["ranks"] = compare_ranks(args.before, args.after, subset=args.subset)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
    differs = out["only_before"] or out["only_after"] or out["value_differs"] or out["identity_differs"]
    differs = differs or (args.ranks and not out["ranks"]["identical"])
    print(
        f"metrics rows: {out['rows_before']} before, {out['rows_after']} after ({out['models']} models, "
        f"{out['tasks']} tasks); only before {len(out['only_before'])}, only after {len(out['only_after'])}, "
        f"values differing {len(out['value_differs'])}, identity differing "
        f"{ {c: len(v) for c, v in out['identity_differs'].items()} or 0 }"
        + (
            f"; ranks identical: {out['ranks']['identical']} ({out['ranks']['pairs_after']} pairs)"
            if args.ranks
            else ""
        )
    )
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
