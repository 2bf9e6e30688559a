"""The ETA's error on recorded runs: the first estimate of the history model (``evalfarm.eta``) against the old
static cost model, replayed on a warehouse whose units were timed.

    python benchmarks/bench_eta.py --warehouse /tmp/wh-starter [--warehouse WH2 ...] [--history WH0] [--json out.json]
    python benchmarks/bench_eta.py --run-summary run.json   # `evalfarm run --format json > run.json`: a live run
    python benchmarks/bench_eta.py --first zoo-starter --wall 2190   # the first ETA into an empty warehouse, no run
    python benchmarks/bench_eta.py --smoke   # its own tiny warehouse (toy GloVe): does it still run?

A live run (``--run-summary``: the JSON lines ``evalfarm run --format json`` prints) gives its first ETA against its
wall time, and, from its ``progress`` events (one a heartbeat), the ETA as it went: elapsed + ETA against the final
wall time at each heartbeat (the largest and smallest of those ratios say whether it ever jumped), and the texts the
first heartbeat already counted. ``--first CATALOG`` (``--models``, ``--tasks``, ``--workers``) plans a run into an
empty warehouse and says the first ETA it would print, running nothing; ``--wall`` compares it with a wall time
recorded elsewhere (e.g. README's ``make run``).

Each warehouse is opened read-only (its ``units``, ``models``, ``quality`` and ``metrics`` views). Held-out
replays, each predicting the total seconds of the held-out units from what is left (as one worker runs them, the
in-process loop that recorded them):

- ``half``: a seeded random half of the models held out (``--splits`` times);
- ``kind``: every model of one kind held out (the history then knows the kind's tasks only through other kinds);
- ``run``: leave one run out, when the warehouse holds several runs that computed units;
- ``other``: every unit predicted from another warehouse's history (``--history``: an earlier run of the same zoo,
  on other code or another machine).

Predictions of the same held-out units, side by side:

- ``history``: :func:`evalfarm.eta.estimate` over the history that is left (its sources are counted);
- ``static (old first ETA)``: what the old progress line said after its first unit (it had no ETA before one):
  the scheduler runs the largest static cost first; that model's first unit carries its whole embed time, and the
  line extrapolated ``elapsed × remaining cost / finished cost``;
- ``static (calibrated)``: the static costs in seconds per cost unit fitted on the history that is left (what the
  static model could do at best with the same history).

The error of a prediction is ``predicted / recorded - 1``; the summary gives the median and the largest absolute
error over the replays of each scheme.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalfarm import eta  # noqa: E402

Rec = dict[str, Any]  # one (run, model, task) of eta.HISTORY_SQL, with its PastUnit and static cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", action="append", default=[], help="a warehouse with timed runs (repeatable)")
    ap.add_argument(
        "--history",
        action="append",
        default=[],
        help="another warehouse whose units are the history for predicting each --warehouse's (scheme `other`)",
    )
    ap.add_argument(
        "--run-summary",
        action="append",
        default=[],
        type=Path,
        help="the stdout of `evalfarm run --format json`: its first ETA against its seconds (a live run)",
    )
    ap.add_argument("--first", help="a catalog: the first ETA a run into an empty warehouse would print")
    ap.add_argument("--models", help="with --first: the models (comma-separated)")
    ap.add_argument("--tasks", help="with --first: the tasks (comma-separated)")
    ap.add_argument("--workers", type=int, help="with --first: the workers (default: one per CPU, as a local Ray)")
    ap.add_argument("--wall", type=float, help="with --first: the wall seconds of such a run, measured elsewhere")
    ap.add_argument("--splits", type=int, default=20, help="random halves of the models (scheme `half`)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    args = ap.parse_args()
    if not (args.warehouse or args.run_summary or args.first) and not args.smoke:
        ap.error("--warehouse (or --run-summary, or --first) is required")
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke and not args.warehouse:
            wh = smoke_warehouse(Path(tmp))
            args.warehouse, args.splits, args.run_summary = [wh], 2, [Path(tmp) / "summary.json"]
        others = {h: records(h) for h in args.history}
        out: dict[str, Any] = {"warehouses": [measure(w, args.splits, args.seed, others) for w in args.warehouse]}
        out["live"] = [live(p) for p in args.run_summary]
        if args.first or args.smoke:
            split = lambda v: v.split(",") if v else None  # noqa: E731
            catalog = args.first or str(Path(tmp) / "smoke.yaml")
            out["first"] = first_eta(
                catalog, split(args.models), split(args.tasks), args.workers, args.wall, Path(tmp)
            )
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


def smoke_warehouse(d: Path) -> str:
    """``--smoke``'s warehouse: the EvalRank toolkit's toy GloVe under two ids and a post-processed variant, on two
    word-similarity sets (local executor, a few seconds); its summary in ``summary.json``."""
    from evalfarm.runner import run_catalog

    toy = (
        "{level: word, kind: word-vectors, format: glove-text,"
        " source: {type: data, ref: evalrank/reference/toy_emb.txt}}"
    )
    catalog = d / "smoke.yaml"
    catalog.write_text(
        "include: [tasks]\ntasks: [wordsim-rg-65, wordsim-mc-30]\nmodels:\n"
        f"  - {{id: toy, {toy[1:]}\n  - {{id: toy-2, {toy[1:]}\n"
        "  - {id: toy-abtt1, level: word, base: toy, postprocess: {method: abtt, d: 1}}\n"
    )
    summary = run_catalog(catalog, d / "wh", executor="local")
    if not summary.ok:
        raise SystemExit(f"the smoke run failed: {[o.error for o in summary.failed]}")
    (d / "summary.json").write_text(json.dumps(summary.to_dict()) + "\n")  # as `run --format json` prints it
    return str(d / "wh")


def records(path: str) -> list[Rec]:
    """Every timed unit of the warehouse, read-only, with its :class:`~evalfarm.eta.PastUnit` (static cost in it)."""
    from evalfarm.warehouse import Warehouse

    raw = Warehouse(path).query(eta.HISTORY_SQL).to_pylist()
    past = eta.history_rows(raw, eta.record_cost)
    return [{**r, "past": p, "cost": p.cost} for r, p in zip(raw, past, strict=True)]


def newest(recs: Iterable[Rec]) -> list[Rec]:
    """One record per (model, task): its newest run's (records come oldest first)."""
    latest: dict[tuple[str, str], Rec] = {}
    for r in recs:
        latest[(r["model"], r["task"])] = r
    return list(latest.values())


def old_first_eta(held: list[Rec]) -> float:
    """The old progress line's total after the first unit (one worker): the largest static cost first, its unit
    that carried the embed time first, then ``elapsed × remaining cost / finished cost`` added to the elapsed."""
    by_model: dict[str, list[Rec]] = defaultdict(list)
    for r in held:
        by_model[r["model"]].append(r)
    first_model = max(by_model, key=lambda m: (sum(r["cost"] for r in by_model[m]), m))
    group = by_model[first_model]
    first = max(group, key=lambda r: r["embed_s"])
    elapsed = sum(r["embed_s"] for r in group) + float(first["score_s"])
    total_cost = sum(r["cost"] for r in held)
    return elapsed + elapsed * (total_cost - first["cost"]) / first["cost"]


def replay(history: list[Rec], held: list[Rec]) -> dict[str, Any]:
    """The three predictions of ``held``'s total seconds from ``history``, and their errors."""
    held = newest(held)
    recorded = sum(r["past"].seconds for r in held)
    hist = eta.History(r["past"] for r in history)
    units = [eta.PlannedUnit(r["model"], r["past"].key, r["task"], r["cost"]) for r in held]
    ests = eta.estimate(units, hist)
    per_cost = hist.per_cost or 0.0  # the static costs in seconds, fitted on the history that is left
    pred = {
        "history": sum(e.seconds for e in ests),
        "static (old first ETA)": old_first_eta(held),
        "static (calibrated)": sum(r["cost"] for r in held) * per_cost,
    }
    return {
        "held_models": len({r["model"] for r in held}),
        "held_units": len(held),
        "recorded_s": round(recorded, 2),
        "predicted_s": {k: round(v, 2) for k, v in pred.items()},
        "error": {k: round(v / recorded - 1, 4) if recorded > 0 else None for k, v in pred.items()},
        "sources": eta.sources(ests),
    }


def schemes(recs: list[Rec], splits: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    models = sorted({r["model"] for r in recs})
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {"half": [], "kind": [], "run": []}
    for _ in range(splits if len(models) > 1 else 0):
        held = set(rng.sample(models, len(models) // 2))
        out["half"].append(
            replay([r for r in recs if r["model"] not in held], [r for r in recs if r["model"] in held])
        )
    kinds = sorted({r["past"].key for r in recs})
    for k in kinds if len(kinds) > 1 else []:
        row = replay([r for r in recs if r["past"].key != k], [r for r in recs if r["past"].key == k])
        out["kind"].append({"kind": k, **row})
    runs = sorted({r["run_id"] for r in recs})
    for run in runs if len(runs) > 1 else []:
        row = replay([r for r in recs if r["run_id"] != run], [r for r in recs if r["run_id"] == run])
        out["run"].append({"run_id": run, **row})
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per prediction: the median and the largest |error| over the replays, and the median signed error."""
    out: dict[str, Any] = {}
    for name in ("history", "static (old first ETA)", "static (calibrated)"):
        errs = [r["error"][name] for r in rows if r["error"][name] is not None]
        if errs:
            out[name] = {
                "median_abs_error": round(statistics.median(abs(e) for e in errs), 4),
                "max_abs_error": round(max(abs(e) for e in errs), 4),
                "median_error": round(statistics.median(errs), 4),
            }
    return out


def live(path: Path) -> dict[str, Any]:
    """A live run's first ETA (``evalfarm run --format json``: its last line is the summary) against the run's own
    seconds; from its progress events (a heartbeat each), elapsed + ETA against the final seconds as the run went,
    and the texts its first heartbeat counted."""
    lines = [json.loads(ln) for ln in path.read_text().strip().splitlines() if ln.startswith("{")]
    summary = lines[-1]
    first = summary.get("first_eta") or {}
    seconds = float(summary["seconds"])
    progress = [e for e in lines[:-1] if e.get("event") == "progress" and e.get("eta_s") is not None]
    ratios = [round((e["elapsed_s"] + e["eta_s"]) / seconds, 3) for e in progress if seconds > 0]
    return {
        "summary": str(path),
        "run_id": summary["run_id"],
        "units": sum(summary["counts"].values()),
        "seconds": seconds,
        "first_eta": first,
        "error": round(first["seconds"] / seconds - 1, 4) if first and seconds > 0 else None,
        "heartbeats": len(progress),
        "elapsed_plus_eta_over_wall": {"min": min(ratios), "max": max(ratios)} if ratios else None,
        "first_heartbeat": None if not progress else {
            "elapsed_s": progress[0]["elapsed_s"], "texts": progress[0]["texts"], "units": progress[0]["units"]
        },
    }  # fmt: skip


def first_eta(
    catalog: str, models: list[str] | None, tasks: list[str] | None, workers: int | None, wall: float | None, tmp: Path
) -> dict[str, Any]:
    """The first ETA a run of ``catalog`` into an empty warehouse prints (evalfarm.runner.Run's plan and skip
    steps: the tasks' texts counted, nothing embedded or scored), against ``wall`` seconds measured elsewhere."""
    from evalfarm.options import RunRequest
    from evalfarm.runner import Run

    events: list[Any] = []
    request = RunRequest(models=models, tasks=tasks, workers=workers)
    run = Run(catalog, tmp / "first-eta-wh", request, on_event=events.append)
    run.begin()
    try:
        run.plan()
        run.skip()
    finally:
        run._abandon()  # its heartbeat goes: nothing is scheduled
    first = run.summary.first_eta or {}
    line = next((e.message for e in events if e.kind == "eta"), None)
    return {
        "catalog": catalog,
        "models": models,
        "tasks": tasks,
        "first_eta": first,
        "line": line,
        "wall_s": wall,
        "error": round(first["seconds"] / wall - 1, 4) if first and wall else None,
    }


def measure(path: str, splits: int, seed: int, others: dict[str, list[Rec]] | None = None) -> dict[str, Any]:
    recs = records(path)
    by_scheme = schemes(recs, splits, seed)
    by_scheme["other"] = [{"history": h, **replay(hist, recs)} for h, hist in (others or {}).items() if h != path]
    return {
        "warehouse": path,
        "runs": len({r["run_id"] for r in recs}),
        "models": len({r["model"] for r in recs}),
        "units": len(newest(recs)),
        "recorded_s": round(sum(r["past"].seconds for r in newest(recs)), 1),
        "kinds": sorted({r["past"].key for r in recs}),
        "summary": {k: summarise(v) for k, v in by_scheme.items() if v},
        "replays": by_scheme,
    }


if __name__ == "__main__":
    main()
