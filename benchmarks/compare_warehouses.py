"""Compare two warehouses number for number, and view for view: the check that a refactoring changed no result.

Reads each warehouse's ``metrics`` view (the public interface) through evalfarm's read-only query path and joins
them on (model, task, scorer, subset, variant, ties, metric). Reported: rows only in one, rows whose value differs
(NaN equals NaN; exact equality unless ``--tolerance``), and rows whose fingerprint, spec hash, primary flag,
direction or parameters differ (the same number computed under another identity would make the next run
recompute it). A direction that differs where the after warehouse's is its metric's declaration (evalfarm/metrics.py)
is the schema-4 correction of what older versions stored (EvalRank's ``mr`` as higher-is-better): listed apart,
``directions_corrected``, not a difference. With ``--ranks`` the per-pair EvalRank ranks are compared too.

With ``--views``, every view of the warehouse (each core view, each task kind's, and ``run_diff`` of the last two
runs that ended) is compared as a multiset of rows: the same columns, the same rows (floating-point numbers within
``--float-tolerance`` relative, where an aggregate sums in another order). ``--dump DIR`` writes every view's rows of
one warehouse to ``DIR/<view>.parquet`` instead, and ``--dumps A B`` compares two such folders: how the views of
one evalfarm (``PYTHONPATH=/path/to/old/checkout``) are compared with another's over the same warehouse, before
and after a migration.

    python benchmarks/compare_warehouses.py WAREHOUSE_BEFORE WAREHOUSE_AFTER [--views] [--json out.json]
    PYTHONPATH=../main python benchmarks/compare_warehouses.py --dump before-views WAREHOUSE_BEFORE
    python benchmarks/compare_warehouses.py --dump after-views WAREHOUSE_AFTER
    python benchmarks/compare_warehouses.py --dumps before-views after-views [--json out.json]
    python benchmarks/compare_warehouses.py FULL_BEFORE SUBSET_AFTER --subset   # a fresh run of some units
    python benchmarks/compare_warehouses.py --smoke --ranks --views  # two runs of a toy catalog: identical

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


def _corrections(a: dict[Any, Any], b: dict[Any, Any], keys: list[Any]) -> dict[str, int]:
    """Rows whose stored direction the after warehouse corrected to the declared one, by ``scorer/metric: old ->
    new``."""
    out: dict[str, int] = {}
    for k in keys:
        label = f"{k[2]}/{k[6]}: {a[k]['higher_is_better']} -> {b[k]['higher_is_better']}"
        out[label] = out.get(label, 0) + 1
    return dict(sorted(out.items()))


def compare_metrics(before: str, after: str, *, tolerance: float = 0.0, subset: bool = False) -> dict[str, Any]:
    """What differs between the two warehouses' ``metrics`` views (``subset``: only the units, (model, task), that
    ``after`` holds: a fresh warehouse of a few units against a full one)."""
    sql = f"SELECT {', '.join(KEY)}, value, {', '.join(IDENTITY)} FROM metrics"
    declared = "metric_higher_is_better(scorer, metric, higher_is_better) AS declared_direction"
    b = {tuple(r[k] for k in KEY): r for r in _rows(after, sql.replace(" FROM metrics", f", {declared} FROM metrics"))}
    units = {k[:2] for k in b}
    a = {tuple(r[k] for k in KEY): r for r in _rows(before, sql)}
    if subset:
        a = {k: r for k, r in a.items() if k[:2] in units}
    value = [k for k in a.keys() & b.keys() if not _same(a[k]["value"], b[k]["value"], tolerance)]
    both = a.keys() & b.keys()
    corrected = [k for k in both if a[k]["higher_is_better"] != b[k]["higher_is_better"]
                 and b[k]["higher_is_better"] == b[k]["declared_direction"]]  # fmt: skip
    fixed = set(corrected)
    identity = {
        col: _ordered(k for k in both if a[k][col] != b[k][col] and (col != "higher_is_better" or k not in fixed))
        for col in IDENTITY
    }
    return {
        "rows_before": len(a),
        "rows_after": len(b),
        "only_before": [list(k) for k in _ordered(a.keys() - b.keys())],
        "only_after": [list(k) for k in _ordered(b.keys() - a.keys())],
        "value_differs": [{"key": list(k), "before": a[k]["value"], "after": b[k]["value"]} for k in _ordered(value)],
        "identity_differs": {col: [list(k) for k in ks] for col, ks in identity.items() if ks},
        "directions_corrected": _corrections(a, b, corrected),
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


RUN_DIFF = "run_diff (last two runs)"
"""The name ``--views`` gives the ``run_diff`` macro of the warehouse's two newest runs that ended."""


def view_names() -> list[str]:
    """Every view this evalfarm creates, in creation order."""
    from evalfarm.warehouse import view_sources

    return [name for source in view_sources() for name in source.views]


def view_rows(warehouse: str) -> dict[str, Any]:
    """Every view's rows (a ``pyarrow.Table``; a view that fails: its error's text), and ``run_diff`` of the last two
    runs that ended."""
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.history import last_two_runs

    wh = Warehouse(warehouse)
    out: dict[str, Any] = {}
    sqls = {name: f'SELECT * FROM "{name}"' for name in view_names()}
    try:
        a, b = last_two_runs(wh)
        sqls[RUN_DIFF] = f"SELECT * FROM run_diff('{a}', '{b}')"
    except ValueError:
        pass
    for name, sql in sqls.items():
        try:
            out[name] = wh.query(sql, timeout_s=0, max_rows=0, max_bytes=0)
        except Exception as exc:  # a view that fails on one side and not the other is a difference
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


def _canonical(t: Any) -> Any:
    """``t``'s columns by name, its rows sorted by every column that sorts (a multiset of rows, made comparable)."""
    import pyarrow as pa

    t = t.select(sorted(t.column_names))
    keys = [c for c in t.column_names if not pa.types.is_nested(t.schema.field(c).type)]
    return t.sort_by([(c, "ascending") for c in keys]) if keys and t.num_rows else t


def _column_differs(a: Any, b: Any, tolerance: float) -> int:
    """Rows whose values differ between two columns of the same length (floats within ``tolerance`` relative)."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_floating(a.type) and pa.types.is_floating(b.type):
        x = np.asarray(a.to_numpy(zero_copy_only=False), dtype=float)
        y = np.asarray(b.to_numpy(zero_copy_only=False), dtype=float)
        same = np.isclose(x, y, rtol=tolerance, atol=tolerance, equal_nan=True) | (np.isnan(x) & np.isnan(y))
        return int((~same).sum())
    return sum(1 for u, v in zip(a.to_pylist(), b.to_pylist(), strict=True) if u != v)


def compare_tables(a: Any, b: Any, *, tolerance: float = 1e-12) -> dict[str, Any]:
    """Two views' rows (tables, or error texts) compared: identical, or what differs."""
    if isinstance(a, str) or isinstance(b, str):
        return {"identical": a == b, "before": a if isinstance(a, str) else a.num_rows,
                "after": b if isinstance(b, str) else b.num_rows}  # fmt: skip
    out: dict[str, Any] = {"rows_before": a.num_rows, "rows_after": b.num_rows}
    if set(a.column_names) != set(b.column_names):
        out["columns_only_before"] = sorted(set(a.column_names) - set(b.column_names))
        out["columns_only_after"] = sorted(set(b.column_names) - set(a.column_names))
        return {**out, "identical": False}
    if a.num_rows != b.num_rows:
        return {**out, "identical": False}
    if {"higher_is_better", "scorer", "metric"} <= set(a.column_names):
        corrected = _directions_corrected(a, b, tolerance)
        if corrected is not None:
            return {**out, "values_differ": {}, "directions_corrected": corrected, "identical": True}
    a, b = _canonical(a), _canonical(b)
    differs = {c: n for c in a.column_names if (n := _column_differs(a.column(c), b.column(c), tolerance))}
    return {**out, "values_differ": differs, "identical": not differs}


def _directions_corrected(a: Any, b: Any, tolerance: float) -> int | None:
    """Rows of a view of metrics rows (``metrics``, ``history`` ...) whose ``higher_is_better`` the after warehouse
    corrected to the metric's declaration (schema version 4), when that is all that differs; None otherwise."""
    import pyarrow as pa

    from evalfarm.scorers import metric_declaration

    rest = sorted(c for c in a.column_names if c != "higher_is_better")
    keys = [(c, "ascending") for c in rest if not pa.types.is_nested(a.schema.field(c).type)]
    ca, cb = (t.select([*rest, "higher_is_better"]).sort_by(keys) for t in (a, b))
    if any(_column_differs(ca.column(c), cb.column(c), tolerance) for c in rest):
        return None
    n = 0
    rows = zip(
        *(x.to_pylist() for x in (cb["scorer"], cb["metric"], ca["higher_is_better"], cb["higher_is_better"])),
        strict=True,
    )
    for scorer, metric, was, now in rows:
        info = metric_declaration(scorer, metric)
        if was is not now and (info is None or info.higher_is_better is not now):
            return None
        n += was is not now
    return n


def compare_views(before: dict[str, Any], after: dict[str, Any], *, tolerance: float = 1e-12) -> dict[str, Any]:
    """Every view's rows of two warehouses (or dumps) compared; ``differs``: the names of those that are not
    identical."""
    names = list(dict.fromkeys([*before, *after]))
    views = {n: compare_tables(before.get(n, "missing"), after.get(n, "missing"), tolerance=tolerance)
             for n in names}  # fmt: skip
    return {"views": views, "differs": [n for n, v in views.items() if not v["identical"]]}


def dump_views(warehouse: str, folder: Path) -> dict[str, Any]:
    """Write every view's rows of ``warehouse`` to ``folder/<name>.parquet`` (a view that fails: ``<name>.error``)."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rows = view_rows(warehouse)
    for name, t in rows.items():
        if isinstance(t, str):
            (folder / f"{name}.error").write_text(t + "\n")
        else:
            pq.write_table(t, folder / f"{name}.parquet")
    return {n: (t if isinstance(t, str) else t.num_rows) for n, t in rows.items()}


def read_dump(folder: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    out: dict[str, Any] = {p.stem: pq.read_table(p) for p in sorted(folder.glob("*.parquet"))}
    out.update({p.stem: p.read_text().strip() for p in sorted(folder.glob("*.error"))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--tolerance", type=float, default=0.0, help="largest absolute difference that counts as equal")
    ap.add_argument("--ranks", action="store_true", help="compare the per-pair EvalRank ranks too")
    ap.add_argument("--json", type=Path, help="write the full comparison here")
    ap.add_argument("--views", action="store_true", help="compare every view's rows too")
    ap.add_argument(
        "--float-tolerance",
        type=float,
        default=1e-12,
        help="relative difference of two floating-point numbers that counts as equal in --views",
    )
    ap.add_argument(
        "--dump", type=Path, metavar="DIR", help="write every view's rows of BEFORE into DIR, nothing else"
    )
    ap.add_argument("--dumps", type=Path, nargs=2, metavar=("A", "B"), help="compare two --dump folders")
    ap.add_argument(
        "--subset",
        action="store_true",
        help="compare only the units (model, task) AFTER holds: a fresh warehouse of a few units against a full one",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): without BEFORE and AFTER, two warehouses of one "
        "toy catalog, which must compare identical (and --views: the first and a rewritten copy of it)",
    )
    args = ap.parse_args(argv)
    if args.dump is not None:
        if args.before is None:
            ap.error("--dump DIR needs the warehouse")
        print(json.dumps(dump_views(args.before, args.dump)))
        return 0
    if args.dumps is not None:
        out = compare_views(read_dump(args.dumps[0]), read_dump(args.dumps[1]), tolerance=args.float_tolerance)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
        print(f"views: {len(out['views'])} compared, differing: {out['differs'] or 'none'}")
        return 1 if out["differs"] else 0
    if args.after is None and not args.smoke:
        ap.error("BEFORE and AFTER are required")
    with tempfile.TemporaryDirectory() as tmp:
        args.views_of = None
        if args.after is None:
            args.before, args.after = (smoke_warehouse(Path(tmp), name) for name in ("before", "after"))
            # two runs' views differ in their run ids and times: the views are compared between the first
            # warehouse and a copy of it rewritten (every table compacted, the current rows set apart anew)
            args.views_of = (args.before, rewritten_copy(args.before, Path(tmp) / "rewritten"))
        return report(args)


def rewritten_copy(warehouse: str, dest: Path) -> str:
    """A copy of ``warehouse`` with every table's files rewritten: what a migration or a compaction does."""
    import shutil

    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.current import refresh_current
    from evalfarm.warehouse.maintenance import compact

    shutil.copytree(warehouse, dest)
    wh = Warehouse(dest)
    refresh_current(wh, min_pending=0)
    compact(wh)
    return str(dest)


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
    if args.views:
        before, after = getattr(args, "views_of", None) or (args.before, args.after)
        out["views"] = compare_views(view_rows(before), view_rows(after), tolerance=args.float_tolerance)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")
    differs = out["only_before"] or out["only_after"] or out["value_differs"] or out["identity_differs"]
    differs = differs or (args.ranks and not out["ranks"]["identical"]) or (args.views and out["views"]["differs"])
    print(
        f"metrics rows: {out['rows_before']} before, {out['rows_after']} after ({out['models']} models, "
        f"{out['tasks']} tasks); only before {len(out['only_before'])}, only after {len(out['only_after'])}, "
        f"values differing {len(out['value_differs'])}, identity differing "
        f"{ {c: len(v) for c, v in out['identity_differs'].items()} or 0 }"
        + (
            f"; directions corrected to the declared ones: {sum(out['directions_corrected'].values())} rows"
            if out["directions_corrected"]
            else ""
        )  # fmt: skip
        + (
            f"; ranks identical: {out['ranks']['identical']} ({out['ranks']['pairs_after']} pairs)"
            if args.ranks
            else ""
        )
        + (
            f"; views: {len(out['views']['views'])} compared, differing: {out['views']['differs'] or 'none'}"
            if args.views
            else ""
        )
    )
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
