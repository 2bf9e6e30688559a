"""The degenerate-model check's figures on real models: what ``evalfarm.quality.assess`` measures per unit.

    python benchmarks/bench_quality.py --warehouse /tmp/wh-starter [--catalog zoo-starter] [--json out.json]
    python benchmarks/bench_quality.py --smoke   # its own tiny warehouse (toy GloVe): does it still run?

Reads every unit of the warehouse's current ``metrics`` (model, task), loads the task's texts and the model's stored
vectors exactly as the score stage does, and prints OOV rate, duplicate rate, numerical rank / rank ratio and the
time ``assess`` took; then, per figure, the worst value over all units next to its threshold. Run it on a warehouse
that ``evalfarm run`` filled with real models (the thresholds in ``evalfarm/quality.py`` come from it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", help="a warehouse `evalfarm run` filled (required, except with --smoke)")
    ap.add_argument("--catalog", default="zoo-starter")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    args = ap.parse_args()
    if args.warehouse is None and not args.smoke:
        ap.error("--warehouse is required")
    with tempfile.TemporaryDirectory() as tmp:
        if args.warehouse is None:  # --smoke: a warehouse of its own, filled in process
            args.catalog, args.warehouse = smoke_warehouse(Path(tmp))
        report(args)


def smoke_warehouse(d: Path) -> tuple[str, str]:
    """``--smoke``'s warehouse: the EvalRank toolkit's toy GloVe on two word-similarity sets (local executor)."""
    from evalfarm.runner import run_catalog

    catalog = d / "smoke.yaml"
    catalog.write_text(
        "include: [tasks]\ntasks: [wordsim-rg-65, wordsim-mc-30]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,"
        " source: {type: data, ref: evalrank/reference/toy_emb.txt}}\n"
    )
    summary = run_catalog(catalog, d / "wh", executor="local")
    if not summary.ok:
        raise SystemExit(f"the smoke run failed: {[o.error for o in summary.failed]}")
    return str(catalog), str(d / "wh")


def report(args: argparse.Namespace) -> None:
    """Every unit's quality figures, then the worst of each against its threshold."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.embed import TextStore, store_key
    from evalfarm.quality import THRESHOLDS, assess
    from evalfarm.scorers import scorer_for
    from evalfarm.warehouse import Warehouse

    cat = load_catalog(args.catalog)
    wh = Warehouse(args.warehouse)
    units = wh.query("SELECT DISTINCT model, task FROM metrics ORDER BY model, task").to_pylist()
    rows = []
    data: dict[str, object] = {}
    for u in units:
        spec = cat.task(u["task"])
        scorer = scorer_for(spec.kind)
        if u["task"] not in data:
            data[u["task"]] = scorer.load(spec)
        texts = list(scorer.texts(data[u["task"]]))
        emb, oov, _ = TextStore(wh, u["model"], store_key(cat.spec_hash(u["model"]))).vectors(texts)
        t0 = time.perf_counter()
        q = assess(emb, oov)
        ms = (time.perf_counter() - t0) * 1000
        rows.append(
            {**u, "n_texts": q.n_texts, "dim": q.dim, "oov_rate": round(q.oov_rate, 4),
             "duplicate_rate": round(q.duplicate_rate, 4), "rank": q.numerical_rank,
             "rank_ratio": round(q.rank_ratio, 4), "degenerate": q.degenerate, "ms": round(ms, 1)}
        )  # fmt: skip
        r = rows[-1]
        print(
            f"{r['model']:<28} {r['task']:<22} n={r['n_texts']:>6} dim={r['dim']:>4} oov={r['oov_rate']:.4f} "
            f"dup={r['duplicate_rate']:.4f} rank={r['rank']:>4} ratio={r['rank_ratio']:.3f} {ms:7.1f} ms"
            + ("  DEGENERATE" if r["degenerate"] else ""),
            flush=True,
        )
    worst = {
        "max oov_rate": (max(r["oov_rate"] for r in rows), THRESHOLDS.max_oov_rate),
        "max duplicate_rate": (max(r["duplicate_rate"] for r in rows), THRESHOLDS.max_duplicate_rate),
        "min rank_ratio": (min(r["rank_ratio"] for r in rows), THRESHOLDS.min_rank_ratio),
        "max assess ms": (max(r["ms"] for r in rows), None),
    }
    for k, (v, t) in worst.items():
        print(f"{k}: {v}" + (f" (threshold {t})" if t is not None else ""))
    if args.json:
        args.json.write_text(json.dumps({"units": rows, "worst": worst}, indent=2) + "\n")


if __name__ == "__main__":
    main()
