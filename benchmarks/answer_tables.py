"""The EvalRank paper's claim, tested on a warehouse's zoo (issue 41): does EvalRank predict downstream accuracy
better than the similarity benchmarks?

For the paper's Tables 3 (word level), 6 (sentence level) and 11 (sentence level without post-processed models),
and the word level without post-processed models, each under optimistic (the paper's) and realistic ties, with the
downstream variant the table's cells mostly have:

1. the table in the paper's layout beside its published cells, each cell marked when it differs from EvalRank MRR
   by the paired bootstrap over models (Holm across the evalfarm table's comparisons: ``evalfarm correlations
   --layout paper --published --compare evalrank``);
2. per downstream column, EvalRank MRR against the best of the paper's similarity rows: the difference, its 95 %
   interval, p and Holm p by the paired bootstrap over models and by the one over model families (lineage roots),
   and a verdict: **supported** (EvalRank higher, Holm-significant by both), **contradicted** (a similarity set
   higher, likewise) or **undecidable**; how many of the paper's similarity rows EvalRank beats or loses to
   significantly; how many models (and families) a zoo like this one would need for 80 % power at the table's Holm
   level (0.05 / its comparisons);
3. leave-one-family-out: the same difference with each model family (lineage root) left out: does its sign hold?

and for each EvalRank pool the board's stability under a bootstrap over its pairs (how often #1 stays #1).

    python benchmarks/answer_tables.py --warehouse W --out benchmarks/results/answer/ [--json answer.json]
    python benchmarks/answer_tables.py --smoke --json /tmp/a.json     # a synthetic warehouse: CI only

It WRITES into the warehouse what ``evalfarm correlations`` writes (the ``correlation_ci`` intervals and the
``correlation_diff`` comparisons that are missing or stale): run it on a copy of a warehouse you must not write
(``cp -r W W2``). Seeded: the same warehouse gives the same files. Files under ``--out``: ``answer.md`` (the
verdicts), ``answer.json`` (the numbers behind them), ``table-<level>-<ties>[-no-pp].txt`` (the paper layout with
marks and power lines), ``comparisons-<...>.csv`` (every comparison of the evalfarm table), ``stability.txt``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from evalfarm.analysis.comparison_tables import comparison_table, power_text, refresh_comparisons  # noqa: E402
from evalfarm.analysis.comparisons import ALPHA, steiger_models_needed, steiger_over_unknown_r_ab  # noqa: E402
from evalfarm.analysis.correlations import connect, refresh_intervals  # noqa: E402
from evalfarm.analysis.paper import TABLES as PAPER_TABLES  # noqa: E402
from evalfarm.analysis.paper import mark_comparisons, paper_table_from, render_text  # noqa: E402
from evalfarm.analysis.robustness import leave_one_family_out, rank_stability  # noqa: E402
from evalfarm.warehouse import Warehouse  # noqa: E402

TABLES = (  # (name, level, without post-processed models)
    ("Table 3", "word", False),
    ("Table 3 without post-processed models", "word", True),
    ("Table 6", "sentence", False),
    ("Table 11", "sentence", True),
)
POLICIES = ("optimistic", "realistic")
COMPARED = "EvalRank MRR"


def verdict(cell: dict[str, Any] | None) -> str:
    """EvalRank against the column's best similarity row: supported / contradicted (Holm-significant either way by
    the bootstrap over models and by the one over families: the view's ``significant``), undecidable (not both), or
    no test (under 4 models; under 4 families: no family test, so no verdict either way)."""
    if cell is None or cell["holm_p"] is None:
        return "no test (under 4 models)"
    if cell["family_holm_p"] is None:
        return f"undecidable (no family test: {cell['n_families']} families)"
    if not cell["significant"]:
        return "undecidable"
    return "supported" if cell["difference"] > 0 else "contradicted"


ASSUMPTIONS_ZOO = (
    "the zoo's models (bootstrap over models) or its model families (bootstrap over lineage roots) are independent "
    "draws from the zoos it stands for; the verdict needs both; Holm controls the error over the evalfarm table's "
    "comparisons; the best similarity row is chosen on the zoo, so its p-value is that of one chosen comparison"
)
"""What a warehouse table's verdicts assume (printed beside them)."""
ASSUMPTIONS_CELLS = (
    "normal theory (Steiger's Z) on Spearman's rho with Bonett & Wright's (2000) variance, models taken as "
    "independent (a zoo's families are not known from its cells), r_AB unknown (every feasible value tried), "
    "Bonferroni over the table's columns, the best row chosen after the fact"
)
"""What the verdicts of a table known only by its cells assume."""


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def one_table(
    wh: Warehouse, con: duckdb.DuckDBPyConnection, name: str, level: str, excluded: bool, ties: str, seed: int
) -> dict[str, Any]:
    """One of the paper's tables under one tie policy: its comparisons (stored by :func:`answer` beforehand),
    verdicts, power and leave-one-out."""
    paper = paper_table_from(con, level=level, exclude_postprocessed=excluded, ties=ties)
    similarity = {k for (row, _), k in paper.keys.items() if not row.startswith("EvalRank")}
    found = comparison_table(
        wh, level=level, exclude_postprocessed=excluded, ties=ties, power_candidates=similarity, seed=seed, con=con
    )
    n_tests = max((int(c["n_tests"]) for c in found.cells.values()), default=None)
    mark_comparisons(paper, list(found.cells.values()), n_tests=n_tests)
    paper.power = [power_text(p) for p in found.power]
    by_key = {c["b_cell_key"]: c for c in found.cells.values()}
    power = found.power
    lofo = leave_one_family_out(
        con, level=level, exclude_postprocessed=excluded, ties=ties, similarity_keys=similarity
    )
    lofo_by_column = {x.column: x for x in lofo}
    columns = []
    for col in paper.columns:
        if (COMPARED, col) not in paper.keys:
            continue
        rows = [(row, k) for (row, c), k in paper.keys.items() if c == col and k in similarity and k in by_key]
        if not rows:
            continue
        cells = [by_key[k] | {"paper_row": row} for row, k in rows]
        best = max(cells, key=lambda c: (c["rho_b"] if c["rho_b"] is not None else -2.0, c["paper_row"]))
        column = best["downstream_task"] + (
            "" if best["downstream_variant"] == paper.downstream_variant else f" ({best['downstream_variant']})"
        )
        # power and leave-one-out ran over the paper's similarity rows, so only the paper's variant has them
        pw = next((p for p in power if p.column.split(" ", 1)[0] == best["downstream_task"]), None)
        lo = next((x for c, x in lofo_by_column.items() if c.split(" ", 1)[0] == best["downstream_task"]), None)
        columns.append(
            {
                "column": col,
                "n_models": best["n_models"],
                "evalrank_rho": _r(best["rho_a"]),
                "best_similarity_row": best["paper_row"],
                "best_similarity_rho": _r(best["rho_b"]),
                "difference": _r(best["difference"]),
                "ci": [_r(best["ci_low"]), _r(best["ci_high"])],
                "p": _r(best["p_value"], 5),
                "holm_p": _r(best["holm_p"], 5),
                "n_families": best["n_families"],
                "family_ci": [_r(best["family_ci_low"]), _r(best["family_ci_high"])],
                "family_p": _r(best["family_p_value"], 5),
                "family_holm_p": _r(best["family_holm_p"], 5),
                "steiger_p": _r(best["steiger_p"], 5),
                "verdict": verdict(best),
                "similarity_rows": len(cells),
                "evalrank_significantly_better_than": sum(c["significant"] and c["difference"] > 0 for c in cells),
                "evalrank_significantly_worse_than": sum(c["significant"] and c["difference"] < 0 for c in cells),
                "power_alpha": None if pw is None else pw.result.alpha,
                "models_for_80_power": None if pw is None else pw.result.n_needed,
                "families_for_80_power": None if pw is None or pw.by_family is None else pw.by_family.n_needed,
                "models_for_80_power_by_family": None if pw is None or pw.by_family is None else pw.by_family.models,
                "power_line": None if pw is None else power_text(pw),
                "leave_one_family_out": None
                if lo is None
                else {
                    "families": len(lo.drops),
                    "difference_min": _r(min((d.difference for d in lo.drops), default=math.nan)),
                    "difference_max": _r(max((d.difference for d in lo.drops), default=math.nan)),
                    "sign_flips_without": [d.family for d in lo.flips],
                    "summary": lo.summary(),
                },
                "column_label": column,
            }
        )
    return {
        "table": name,
        "level": level,
        "excludes_postprocessed": excluded,
        "ties": ties,
        "downstream_variant": paper.downstream_variant,
        "composition": paper.composition,
        "n_tests_holm": n_tests,
        "assumptions": ASSUMPTIONS_ZOO,
        "columns": columns,
        "text": render_text(paper, published=True),
        "comparisons": [
            {"row": r, "column": c, **{k: v for k, v in cell.items() if k != "created_at"}}
            for (r, c), cell in sorted(found.cells.items())
        ],
    }


PAPER_N = {"3": 38, "6": 67, "11": 34}
"""The paper's zoo behind each table (its section 5 and Table 11's caption)."""
PAPER_LINEAGES = {"3": 19, "6": 34, "11": 34}
"""The paper's zoo counted by lineage: Table 3's 38 word models are 19 sets of vectors and their ABTT twins, Table
6's 67 are Table 11's 34 and 33 post-processed twins (:data:`evalfarm.analysis.paper.PAPER_ZOO`). A twin moves with its
original (the same weights, post-processed), so the independent units are nearer 19 and 34 than 38 and 67: the
cells are tested at both n, the second a sensitivity check the cells alone cannot settle (bags of words over the
same vectors may be related too)."""


def _reading(er: float, rho: float, got: Any) -> str:
    higher = "EvalRank higher" if er > rho else "similarity row higher" if er < rho else "equal"
    if er == rho or got.r_ab_significant_from is None:
        return f"{higher}; not significant for any r_AB"
    if got.p_max < got.alpha:
        return f"{higher}; significant whatever r_AB"
    return f"{higher}; significant only if r_AB >= {got.r_ab_significant_from:.4f}"


def check_cells(
    name: str, n: int, cells: dict[tuple[str, str], float], columns: list[str], n_lineages: int | None = None
) -> list[dict[str, Any]]:
    """EvalRank MRR against the best similarity row of each column of a table known only by its cells (rho, not
    x 100), over n models: Steiger's Z with Spearman's variance for every possible r_AB
    (:func:`steiger_over_unknown_r_ab`), at alpha / the table's columns (Bonferroni), and the models 80 % power
    needs at that level. Normal theory on rank correlations, the models taken as independent, the best row chosen
    after the fact (:data:`ASSUMPTIONS_CELLS`): an approximation, and the most a table's cells can say. Beside it,
    for the record, the reading with Pearson's variance (what issue 41 printed) and the models at 0.05, and
    (``n_lineages``) the reading were the models only that many independent lineages (twins counted once)."""
    out = []
    alpha = ALPHA / len(columns)
    for col in columns:
        er = cells.get((COMPARED, col))
        sims = [(v, r) for (r, c), v in cells.items() if c == col and not r.startswith("EvalRank")]
        if er is None or not sims:
            continue
        rho, row = max(sims)
        got = steiger_over_unknown_r_ab(er, rho, n, alpha=alpha, rank=True)
        pearson = steiger_over_unknown_r_ab(er, rho, n, alpha=alpha)
        lineages = (
            None if n_lineages is None else steiger_over_unknown_r_ab(er, rho, n_lineages, alpha=alpha, rank=True)
        )
        out.append(
            {"table": name, "n_models": n, "column": col, "evalrank_rho": er, "best_similarity_row": row,
             "best_similarity_rho": rho, "alpha": round(alpha, 5), "p_worst": _r(got.p_max, 5),
             "p_best": _r(got.p_min, 8), "r_ab_range": [_r(v) for v in got.r_ab_range],
             "r_ab_significant_from": _r(got.r_ab_significant_from, 4), "reading": _reading(er, rho, got),
             "reading_pearson_variance": _reading(er, rho, pearson), "p_worst_pearson_variance": _r(pearson.p_max, 5),
             "models_for_80_power": {str(r_ab): _models(steiger_models_needed(er, rho, r_ab, alpha=alpha, rank=True))
                                     for r_ab in R_AB},
             "models_for_80_power_at_0.05": {str(r_ab): _models(steiger_models_needed(er, rho, r_ab, rank=True))
                                             for r_ab in R_AB},
             "n_lineages": n_lineages, "reading_lineages": None if lineages is None else _reading(er, rho, lineages),
             "p_worst_lineages": None if lineages is None else _r(lineages.p_max, 5),
             "assumptions": ASSUMPTIONS_CELLS}
        )  # fmt: skip
    return out


R_AB = (0.9, 0.95)
"""The correlations between EvalRank and the best similarity row at which a table known by its cells states the
models a decision would need (the nightly zoo's rows correlate that strongly)."""


def _models(n: float) -> int | None:
    return None if not math.isfinite(n) else math.ceil(n)


def published_checks() -> list[dict[str, Any]]:
    """:func:`check_cells` on the paper's own Tables 3, 6 and 11 (its n: 38, 67, 34 models)."""
    out = []
    for number, n in PAPER_N.items():
        tdef = PAPER_TABLES[number]
        cells = {k: v / 100 for k, v in tdef.published().items()}
        out += check_cells(tdef.name, n, cells, [c for c, _ in tdef.columns], PAPER_LINEAGES[number])
    return out


def parse_layout(text: str) -> tuple[int, dict[tuple[str, str], float], list[str]]:
    """A table as ``evalfarm correlations --layout paper [--published]`` printed it (a committed measurement): the
    models in its caption's ``this zoo:`` composition, each cell's rho (the measured number, not the bracketed
    published one) and the columns."""
    lines = text.splitlines()
    zoo = lines[0].split("this zoo:", 1)[1]
    n = sum(int(part.split()[0]) for part in zoo.split(","))
    columns = lines[1].split()[1:]
    cells: dict[tuple[str, str], float] = {}
    for line in lines[2:]:
        if line.startswith(("(", "note:")) or not line.strip():
            continue
        values = re.findall(r"(-?\d+\.\d+|-)(?: \((?:-?\d+\.\d+|-)\))?", line)
        label = re.split(r"\s{2,}", line.strip())[0]
        for col, v in zip(columns, values[-len(columns) :], strict=True):
            if v != "-":
                cells[(label, col)] = float(v) / 100
    return n, cells, columns


def _few(names: list[str], of: int, shown: int = 3) -> str:
    """At most ``shown`` names, then how many more (of how many)."""
    if not names:
        return "none"
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "") + f" (of {of})"


def _power(c: dict[str, Any]) -> str:
    if c["n_models"] < 4:
        return "-"
    if c["models_for_80_power"] is None:
        return "no difference" if not c["difference"] else "> 100,000"
    text = f"{c['models_for_80_power']:,}"
    if c.get("families_for_80_power") is not None:
        text += f"; {c['families_for_80_power']:,} families (~{c['models_for_80_power_by_family']:,} models)"
    elif c.get("n_families") is not None:
        text += "; > 100,000 families"
    return text


def _f(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _ci(pair: list[float | None]) -> str:
    return "" if pair[0] is None else f"[{pair[0]:+.2f}, {pair[1]:+.2f}]"


def higher_count(columns: list[dict[str, Any]]) -> str:
    """On how many of a table's tested columns the best similarity row is higher than EvalRank, lower, equal."""
    diffs = [c["difference"] for c in columns if c["difference"] is not None]
    below, above = sum(d < 0 for d in diffs), sum(d > 0 for d in diffs)
    return (
        f"best similarity row higher than EvalRank on {below} of {len(diffs)} columns, lower on {above}, "
        f"equal on {len(diffs) - below - above}"
    )


# long: one markdown document, section by section, each a table whose columns are the JSON's fields
def markdown(out: dict[str, Any]) -> str:
    """The verdicts, one block per table and tie policy, each with its assumptions."""
    lines = [
        f"# Does EvalRank predict downstream accuracy better than the similarity sets? ({out['warehouse']})",
        "",
        f"Written by `benchmarks/answer_tables.py` at {out['created']}. Per column: EvalRank MRR against the best of "
        "the paper's similarity rows (by its rho on this zoo); difference = rho(EvalRank) - rho(best); 95 % "
        "intervals of the paired bootstrap over models and over model families (lineage roots); Holm p by each, "
        "over the evalfarm table's comparisons; verdict: supported / contradicted when both Holm p < 0.05, else "
        "undecidable; `beats/loses`: the paper's similarity rows EvalRank is significantly better / worse than "
        "(both tests); power: models a zoo like this would need for 80 % power at the table's Holm level "
        "(0.05 / its comparisons), growing model by model, and family by family; LOFO: the difference's range with "
        "one model family left out, and the families whose removal flips its sign.",
    ]
    for t in out["tables"]:
        comp = ", ".join(f"{n} {f}" for f, n in t["composition"].items())
        lines += [
            "",
            f"## {t['table']}, {t['ties']} ties ({comp}; downstream {t['downstream_variant']}; "
            f"Holm over {t['n_tests_holm']})",
            "",
            f"Assumptions: {t['assumptions']}.",
            "",
            "| column | n (families) | EvalRank | best similarity row | difference | 95 % CI, models; families "
            "| Holm p, models; families | verdict | beats / loses | power at Holm level: models; families "
            "| LOFO range; flips |",
            "|---|---:|---:|---|---:|---|---|---|---|---:|---|",
        ]
        for c in t["columns"]:
            lo = c["leave_one_family_out"]
            lofo = "" if lo is None else (
                f"{_f(lo['difference_min'], '+.2f')}…{_f(lo['difference_max'], '+.2f')}; "
                + _few(lo["sign_flips_without"], lo["families"])
            )  # fmt: skip
            lines.append(
                f"| {c['column']} | {c['n_models']} ({_f(c['n_families'], 'd')}) | {_f(c['evalrank_rho'])} | "
                f"{c['best_similarity_row']} {_f(c['best_similarity_rho'])} | {_f(c['difference'], '+.2f')} | "
                f"{_ci(c['ci'])}; {_ci(c['family_ci'])} | {_f(c['holm_p'], '.3g')}; {_f(c['family_holm_p'], '.3g')} | "
                f"{c['verdict']} | {c['evalrank_significantly_better_than']} / "
                f"{c['evalrank_significantly_worse_than']} of {c['similarity_rows']} | {_power(c)} | {lofo} |"
            )
        counts = {
            v: sum(c["verdict"] == v for c in t["columns"]) for v in ("supported", "contradicted", "undecidable")
        }
        untested = sum(c["verdict"].startswith("no test") for c in t["columns"])
        no_family = sum(c["verdict"].startswith("undecidable (") for c in t["columns"])
        lines += [
            "",
            "Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items())
            + (f", {no_family} undecidable for want of families" if no_family else "")
            + f", {untested} without a test; {higher_count(t['columns'])}"
            + (f"; power at alpha {t['columns'][0]['power_alpha']:.2g}" if t["columns"] and t["columns"][0].get(
                "power_alpha") else ""),
        ]  # fmt: skip
    lines += [
        "",
        "## Tables known by their cells only: the paper's, and committed measurements",
        "",
        "EvalRank MRR against the best similarity row of each column, Steiger's Z with Spearman's variance (Bonett & "
        "Wright 2000) over the table's models for every possible correlation r_AB between the two (not published), "
        "at 0.05 / columns (Bonferroni); beside it the reading with Pearson's variance (issue 41's, which rejects "
        "too often on rank correlations), and for the paper's tables the reading were each post-processed twin one "
        "model with its original (Table 3: 19 lineages of 38 models; Table 6: 34 of 67). Power: models for 80 % at "
        "that level (and at 0.05 for one comparison).",
        "",
        f"Assumptions: {ASSUMPTIONS_CELLS}.",
        "",
        "| table (n) | column | EvalRank | best similarity row | p, worst r_AB | reading | with Pearson's variance "
        "| twins counted once (n) | models for 80 % power at r_AB = 0.9 / 0.95 | the same at 0.05 |",
        "|---|---|---:|---|---:|---|---|---|---:|---:|",
    ]
    for c in out["published"] + out.get("measured", []):
        need = " / ".join("-" if v is None else f"{v:,}" for v in c["models_for_80_power"].values())
        one = " / ".join("-" if v is None else f"{v:,}" for v in c["models_for_80_power_at_0.05"].values())
        lines.append(
            f"| {c['table']} ({c['n_models']}) | {c['column']} | {c['evalrank_rho']:.2f} | "
            f"{c['best_similarity_row']} {c['best_similarity_rho']:.2f} | {c['p_worst']:.3g} | {c['reading']} | "
            f"{c['reading_pearson_variance']} | "
            + ("-" if c.get("n_lineages") is None else f"{c['reading_lineages']} ({c['n_lineages']})")
            + f" | {need} | {one} |"
        )
    lines += ["", "## Boards resampled over their pairs", ""]
    lines += [f"- {s}" for s in out["stability_text"]]
    return "\n".join(lines) + "\n"


FROZEN = ("metrics", "models")
"""The views every table reads again and again (through ``correlations``, ``correlation_cells``, ...)."""


def freeze(con: duckdb.DuckDBPyConnection) -> None:
    """Snapshot :data:`FROZEN` in this connection: each query over a view of Parquet files binds it again, reading
    the footer of every file (minutes on a loaded machine for a few thousand unit files), and this script asks a
    hundred questions of the same numbers. The views that build on them (``correlations`` and the rest) then read
    the snapshot; the comparisons written meanwhile are read from their own files as usual. Only for a warehouse
    that no run writes meanwhile (the copy this script is for)."""
    for view in FROZEN:
        con.execute(f"CREATE TEMP TABLE _frozen_{view} AS SELECT * FROM {view}")
        con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM _frozen_{view}")


def answer(wh: Warehouse, out_dir: Path | None, *, seed: int = 0, resamples: int = 1000) -> dict[str, Any]:
    started = time.perf_counter()
    # Compute and store first: a connection's views read the snapshot it opened on (a table format's files of that
    # version), so what this one writes is read through the next.
    con = connect(wh)
    try:
        freeze(con)
        refresh_intervals(wh, seed=seed, con=con)
        for _, lvl, ex in TABLES:
            for ties in POLICIES:
                refresh_comparisons(wh, level=lvl, exclude_postprocessed=ex, ties=ties, seed=seed, con=con)
    finally:
        con.close()
    con = connect(wh)  # one set of views for every question: opening them reads every file's footer
    try:
        freeze(con)
        tables = [one_table(wh, con, n, lvl, ex, ties, seed) for n, lvl, ex in TABLES for ties in POLICIES]
        stability = []
        for task in ("evalrank-word", "evalrank-sentence"):
            for ties in ("realistic", "optimistic"):
                s = rank_stability(con, task=task, ties=ties, n_resamples=resamples, seed=seed)
                if s.mrr:
                    stability.append(s)
    finally:
        con.close()
    out: dict[str, Any] = {
        "warehouse": str(wh.uri),
        "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seed": seed,
        "tables": tables,
        "stability": [
            {
                "task": s.task,
                "variant": s.variant,
                "ties": s.ties,
                "n_models": s.n_models,
                "n_items": s.n_items,
                "top": s.mrr[0][0],
                "top_mrr": _r(s.mrr[0][1], 5),
                "top_stays": _r(s.top_stays),
                "winners": [(m, _r(v)) for m, v in s.winners[:5]],
                "board_rho": _r(s.board_rho),
                "positions": s.positions,
            }
            for s in stability
        ],  # fmt: skip
        "stability_text": [s.summary() for s in stability],
        "published": published_checks(),
    }
    out["seconds"] = round(time.perf_counter() - started, 1)
    write(out, out_dir)
    return out


def brief(out: dict[str, Any]) -> dict[str, Any]:
    """The answer without each table's text and comparisons (their own files hold them)."""
    tables = [{k: v for k, v in t.items() if k not in ("text", "comparisons")} for t in out["tables"]]
    return {k: v for k, v in out.items() if k != "tables"} | {"tables": tables}


def write(out: dict[str, Any], out_dir: Path | None) -> None:
    """The files of an answer under ``out_dir`` (none when None)."""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for t in out["tables"]:
            stem = f"{t['level']}-{t['ties']}{'-no-pp' if t['excludes_postprocessed'] else ''}"
            (out_dir / f"table-{stem}.txt").write_text(t["text"] + "\n", encoding="utf-8")
            if t["comparisons"]:
                with open(out_dir / f"comparisons-{stem}.csv", "w", newline="", encoding="utf-8") as fh:
                    w = csv.DictWriter(fh, fieldnames=list(t["comparisons"][0]))
                    w.writeheader()
                    w.writerows(t["comparisons"])
        (out_dir / "stability.txt").write_text("\n".join(out["stability_text"]) + "\n", encoding="utf-8")
        (out_dir / "answer.md").write_text(markdown(out), encoding="utf-8")
        (out_dir / "answer.json").write_text(json.dumps(brief(out), indent=1, default=str) + "\n", encoding="utf-8")


# ---- a synthetic warehouse for the smoke run ------------------------------------------------------------------------
def smoke_warehouse(root: Path) -> Path:
    """Twelve sentence models in four families (each a base and two derived models, one post-processed) with
    EvalRank (tracks MR), STS-B (noise) and STR (EvalRank plus noise), MR and SST2, and EvalRank's per-pair ranks
    over ten pairs."""
    at = datetime(2026, 11, 29, tzinfo=UTC)
    wh = Warehouse(root).init()
    rng = np.random.default_rng(0)
    for f in range(4):
        for j, suffix in enumerate(("", "-b", "-w")):
            m = f"f{f}{suffix}"
            base = None if j == 0 else f"f{f}"
            post = json.dumps({"method": "whitening"}) if suffix == "-w" else None
            chain = [{"id": m, "base": base, "postprocess": post and {"method": "whitening"}}]
            if base:
                chain.append({"id": base, "base": None, "postprocess": None})
            wh.write_model({"model": m, "level": "sentence", "kind": "static", "spec_hash": f"h-{m}", "base": base,
                            "postprocess": post, "spec": json.dumps(chain), "created_at": at})  # fmt: skip
            mr = 0.6 + 0.02 * f + 0.01 * j + rng.normal(0, 0.005)
            er = mr + rng.normal(0, 0.005)
            ranks = rng.integers(1, 4 + 3 * (3 - f), size=10)
            fp = f"er-{m}"
            rows = [
                {"run_id": "r", "model": m, "task": "evalrank-sentence", "scorer": "evalrank", "subset": "all",
                 "variant": "cos", "ties": t, "metric": "mrr", "value": er, "is_primary": True,
                 "higher_is_better": True, "fingerprint": fp, "created_at": at}
                for t in POLICIES
            ]  # fmt: skip
            wh.write("metrics", rows, unit=(m, "evalrank-sentence", fp))
            pairs = [
                {"run_id": "r", "model": m, "task": "evalrank-sentence", "variant": "cos", "query_id": i,
                 "positive_id": 100 + i, "query": f"q{i}", "positive": f"p{i}", "rank": int(r), "tied": 0,
                 "score": 0.5, "oov": False, "fingerprint": fp}
                for i, r in enumerate(ranks)
            ]  # fmt: skip
            wh.write("ranks", pairs, unit=(m, "evalrank-sentence", fp))
            for task, scorer, metric, subset, value in (
                ("stsb", "sts", "spearman", "test", float(rng.uniform())),
                ("str", "sts", "spearman", "test", er + rng.normal(0, 0.01)),
                ("mr", "downstream", "accuracy", "all", mr),
                ("sst2", "downstream", "accuracy", "all", mr + rng.normal(0, 0.005)),
            ):
                fp2 = f"{task}-{m}"
                row = {"run_id": "r", "model": m, "task": task, "scorer": scorer, "subset": subset,
                       "variant": "full" if scorer == "downstream" else "cos", "ties": None, "metric": metric,
                       "value": value, "is_primary": True, "higher_is_better": True, "fingerprint": fp2,
                       "created_at": at}  # fmt: skip
                wh.write("metrics", [row], unit=(m, task, fp2))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", type=Path, default=None, help="a warehouse it may write into (see above)")
    ap.add_argument("--out", type=Path, default=None, help="folder for answer.md, answer.json and the tables")
    ap.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--item-resamples", type=int, default=1000, help="bootstrap resamples of a board's pairs")
    ap.add_argument("--smoke", action="store_true", help="a synthetic twelve-model warehouse: CI only")
    ap.add_argument(
        "--measured-tables",
        type=Path,
        nargs="*",
        default=[],
        help="also test tables printed by `correlations --layout paper` (committed measurements) from their cells",
    )
    args = ap.parse_args()
    if args.smoke:
        args.warehouse = smoke_warehouse(Path(tempfile.mkdtemp()) / "wh")
        args.item_resamples = 200
    if args.warehouse is None and not args.measured_tables:
        ap.error("--warehouse is required (or --smoke, or only --measured-tables)")
    measured = []
    for path in args.measured_tables:
        n, cells, columns = parse_layout(path.read_text(encoding="utf-8"))
        measured += check_cells(path.name, n, cells, columns)
    if args.warehouse is None:  # only tables known by their cells
        out = {"warehouse": "(none)", "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "seed": args.seed,
               "tables": [], "stability": [], "stability_text": [], "published": published_checks()}  # fmt: skip
    else:
        out = answer(Warehouse(args.warehouse), None, seed=args.seed, resamples=args.item_resamples)
    out["measured"] = measured
    write(out, args.out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(brief(out), indent=1, default=str) + "\n")
    print(markdown(out))


if __name__ == "__main__":
    main()
