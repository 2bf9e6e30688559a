"""The comparisons of a correlation table, in the warehouse: each evaluator against a compared row (by default
EvalRank's MRR) on each downstream column, by the paired bootstrap of :mod:`evalfarm.analysis.comparisons` (issue 41).

:func:`refresh_comparisons` computes the comparisons of one table (a level, with or without post-processed models,
one EvalRank tie policy: the rows and columns of :func:`evalfarm.analysis.correlations.shape_table`) whose stored row
is missing or stale, reading the numbers behind each cell through the ``correlation_cells`` view and writing rows of
the ``correlation_diff`` table; the view ``correlation_comparisons`` (``sql/13_comparisons.sql``) keeps the current
ones and adds Holm's correction across the table. Each comparison is tested twice: by the paired bootstrap over
models and by the one over model families (the catalog's lineage: :func:`model_families`), and a difference is
significant when both are after Holm. :func:`comparison_table` reads them back in the table's shape, with the power
line under it: how many models (and families) it would take to tell the compared row from the best similarity row of
each column at the level Holm's correction asks of the table (:func:`evalfarm.analysis.comparisons.models_needed`).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from evalfarm.analysis.comparisons import (
    ALPHA,
    REFINE_RESAMPLES,
    PowerResult,
    holm_first_level,
    models_needed,
    paired_difference,
    steiger_z,
    williams_t,
    zou_interval,
)
from evalfarm.analysis.correlations import (
    TIES,
    column_order,
    fetch_correlations,
    read_views,
    shape_table,
)
from evalfarm.analysis_defaults import BOOTSTRAP_SEED, COMPARISON_RESAMPLES, CONFIDENCE, DEFAULT_COMPARE
from evalfarm.ranking import PAPER_TIES
from evalfarm.warehouse import Warehouse, now

SIMILARITY_SCORERS = ("word-similarity", "sts", "similarity-bands")
"""The similarity benchmarks the paper sets EvalRank against: the candidates for "the best similarity row"."""
COMPARISON_METHOD = 2
"""The version of how a stored comparison (a ``correlation_diff`` row, its ``method``) was computed. 1 (issue 41;
rows without the column): the per-model bootstrap, and Steiger's and Williams' tests with Pearson's variance on the
rank correlations. 2 (issue 53): Spearman's variance in the normal-theory tests and the family bootstrap beside the
per-model one. The view ``correlation_comparisons`` shows rows of this method only (``sql/13_comparisons.sql`` names
the number; a test checks the two agree), so rows of an older one stay stored and readable in ``correlation_diffs``
but are recomputed, not mixed into a table's Holm correction."""


def _warehouse(warehouse: Warehouse | str | os.PathLike[str]) -> Warehouse:
    return warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)


_FAMILIES_SQL = """
SELECT model,
       coalesce(json_extract_string(spec, '$[#-1].source.ref'), json_extract_string(spec, '$[#-1].id'), model)
           AS family
FROM models
"""


def model_families(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """model -> its family: the source of the root of its lineage (the catalog's ``base:`` chain, stored in the
    ``models`` view's ``spec``: the weights it derives from), else the root's id. MiniLM's poolings share a family
    with MiniLM; GloVe's ABTT twin and bag of words share GloVe's."""
    return {m: f for m, f in con.execute(_FAMILIES_SQL).fetchall()}


def families_hash(models: list[str], families: dict[str, str]) -> str:
    """What the family bootstrap of a comparison over ``models`` depends on besides the numbers: each model's
    family (a model unknown to ``models`` is its own)."""
    return hashlib.md5(";".join(f"{m}={families.get(m, m)}" for m in models).encode()).hexdigest()


# ---- which cells are compared -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """The comparisons of one table: per column, the compared cell and every other row's cell. ``records``: the
    table's rows of the ``correlations`` view (each with its ``row`` and ``column`` label and ``cell_key``)."""

    level: str
    exclude_postprocessed: bool
    ties: str
    compare: str  # the compared row's label
    records: list[dict[str, Any]]
    pairs: list[tuple[dict[str, Any], dict[str, Any]]]  # (A record, B record), one per other row and column
    columns: list[str]
    rows: list[str]  # the other rows, in the table's order


def compared_row(records: list[dict[str, Any]], compare: str, level: str) -> str:
    """The label of the row ``compare`` names among a shaped table's ``records``: ``evalrank`` (the level's EvalRank
    MRR under cosine), a row label exactly as the table prints it, or a task whose table has one row. ValueError
    naming the choices otherwise."""
    labels = list(dict.fromkeys(r["row"] for r in records))
    if compare == DEFAULT_COMPARE:
        for r in records:
            if (r["intrinsic_scorer"], r["intrinsic_task"], r["intrinsic_metric"], r["intrinsic_subset"],
                    r["variant"]) == ("evalrank", f"evalrank-{level}", "mrr", "all", "cos"):  # fmt: skip
                return str(r["row"])
        raise ValueError(f"no EvalRank MRR (cos) row at the {level} level: nothing to compare with")
    if compare in labels:
        return compare
    by_task = list(dict.fromkeys(r["row"] for r in records if r["intrinsic_task"] == compare))
    if len(by_task) == 1:
        return by_task[0]
    choices = by_task or labels
    raise ValueError(
        f"--compare {compare!r}: {'several rows have that task' if by_task else 'no such row'}; choose one of: "
        + "; ".join(choices)
    )


def table_family(
    rows: list[dict[str, Any]],
    *,
    level: str,
    exclude_postprocessed: bool,
    ties: str,
    compare: str = DEFAULT_COMPARE,
) -> Family:
    """The comparisons of the table :func:`~evalfarm.analysis.correlations.shape_table` makes of ``rows``
    (``correlations`` view rows): its compared row against each other row, column by column (diagnostic kinds and
    EvalRank's Hits@k are not rows of that table, so not compared)."""
    if ties not in TIES:
        raise ValueError(f"a comparison needs one tie policy ({', '.join(TIES)}), got {ties!r}")
    table = shape_table(rows, level=level, exclude_postprocessed=exclude_postprocessed, ties=ties)
    records = table.records
    label = compared_row(records, compare, level) if records else compare
    by_column: dict[str, dict[str, Any]] = {r["column"]: r for r in records if r["row"] == label}
    pairs = [(by_column[r["column"]], r) for r in records if r["row"] != label and r["column"] in by_column]
    return Family(
        level=level,
        exclude_postprocessed=exclude_postprocessed,
        ties=ties,
        compare=label,
        records=records,
        pairs=pairs,
        columns=[c for c in table.columns if c in by_column],
        rows=[r for r in table.rows if r != label],
    )


def comparison_key(ties: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    return hashlib.md5(f"{ties}|{a['cell_key']}|{b['cell_key']}".encode()).hexdigest()


def inputs_hash(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What the view recomputes from the two cells' current inputs (``md5(a || '|' || b)``)."""
    return hashlib.md5(f"{a['inputs_hash']}|{b['inputs_hash']}".encode()).hexdigest()


# ---- the numbers behind the cells ---------------------------------------------------------------------------------
_VALUES_SQL = """
SELECT cell_key, models, intrinsic_values, downstream_values
FROM correlation_cells
WHERE level = $level AND excludes_postprocessed = $exclude
"""


def cell_values(
    con: duckdb.DuckDBPyConnection, level: str, exclude: bool
) -> dict[str, dict[str, tuple[float, float]]]:
    """cell_key -> {model: (intrinsic value, downstream value)}: the numbers behind each cell of a level."""
    cur = con.execute(_VALUES_SQL, {"level": level, "exclude": exclude})
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for key, models, xs, ys in cur.fetchall():
        out[key] = {m: (float(x), float(y)) for m, x, y in zip(models, xs, ys, strict=True)}
    return out


def aligned(
    values: dict[str, dict[str, tuple[float, float]]], a_key: str, b_key: str
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The models both cells have (sorted), with A's, B's and the downstream numbers (the same downstream column,
    so the same D per model)."""
    va, vb = values.get(a_key, {}), values.get(b_key, {})
    models = sorted(va.keys() & vb.keys())
    a = np.array([va[m][0] for m in models], np.float64)
    b = np.array([vb[m][0] for m in models], np.float64)
    d = np.array([va[m][1] for m in models], np.float64)
    return models, a, b, d


def _finite(v: float) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _identity(ties: str, a_rec: dict[str, Any], b_rec: dict[str, Any]) -> dict[str, Any]:
    """The columns of a ``correlation_diff`` row that say which comparison it is: its key and inputs, its table, its
    column and both cells."""
    row: dict[str, Any] = {
        "comparison_key": comparison_key(ties, a_rec, b_rec),
        "inputs_hash": inputs_hash(a_rec, b_rec),
        "level": a_rec["level"],
        "excludes_postprocessed": a_rec["excludes_postprocessed"],
        "ties": ties,
        "downstream_task": a_rec["downstream_task"],
        "downstream_subset": a_rec["downstream_subset"],
        "downstream_variant": a_rec["downstream_variant"],
    }
    for side, rec in (("a", a_rec), ("b", b_rec)):
        row[f"{side}_cell_key"] = rec["cell_key"]
        for k in ("intrinsic_task", "intrinsic_scorer", "intrinsic_metric", "intrinsic_subset", "variant", "ties"):
            row[f"{side}_{k}"] = rec[k]
    return row


def compare_cells(
    a_rec: dict[str, Any],
    b_rec: dict[str, Any],
    values: dict[str, dict[str, tuple[float, float]]],
    *,
    ties: str,
    families: dict[str, str] | None = None,
    n_resamples: int = COMPARISON_RESAMPLES,
    refine_resamples: int = REFINE_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """One ``correlation_diff`` row: A against B in their column, over the models both have: the paired bootstrap
    over models, the one over ``families`` (model -> family; a model not in it is its own), and the normal-theory
    tests with Spearman's variance."""
    models, a, b, d = aligned(values, a_rec["cell_key"], b_rec["cell_key"])
    families = families or {}
    diff, by_family = (
        paired_difference(
            a, b, d, n_resamples=n_resamples, refine_resamples=refine_resamples, seed=seed, confidence=confidence,
            groups=groups,
        )
        for groups in (None, [families.get(m, m) for m in models])
    )  # fmt: skip
    n = diff.n_models
    z, zp = steiger_z(diff.rho_a, diff.rho_b, diff.r_ab, n, rank=True)
    t, tp = williams_t(diff.rho_a, diff.rho_b, diff.r_ab, n, rank=True)
    zl, zh = zou_interval(diff.rho_a, diff.rho_b, diff.r_ab, n, confidence=confidence, rank=True)
    return _identity(ties, a_rec, b_rec) | {
        "n_models": n,
        "rho_a": _finite(diff.rho_a),
        "rho_b": _finite(diff.rho_b),
        "difference": _finite(diff.difference),
        "ci_low": diff.ci_low,
        "ci_high": diff.ci_high,
        "p_value": diff.p_value,
        "r_ab": _finite(diff.r_ab),
        "steiger_z": _finite(z),
        "steiger_p": _finite(zp),
        "williams_t": _finite(t),
        "williams_p": _finite(tp),
        "zou_low": _finite(zl),
        "zou_high": _finite(zh),
        "confidence": confidence,
        "n_resamples": diff.n_resamples,
        "n_valid": diff.n_valid,
        "seed": seed,
        "method": COMPARISON_METHOD,
        "families_hash": families_hash(models, families),
        "n_families": by_family.n_families,
        "family_ci_low": by_family.ci_low,
        "family_ci_high": by_family.ci_high,
        "family_p_value": by_family.p_value,
        "family_n_resamples": by_family.n_resamples,
        "family_n_valid": by_family.n_valid,
    }


# ---- refresh and read ---------------------------------------------------------------------------------------------
_Inputs = tuple[Family | None, set[tuple[str, str, str]], dict[str, dict[str, tuple[float, float]]], dict[str, str]]


def _refresh_inputs(
    con: duckdb.DuckDBPyConnection, level: str, exclude_postprocessed: bool, ties: str, compare: str
) -> _Inputs:
    """What a refresh of one table reads: its comparisons (None: no compared row, and ``compare`` is the default),
    the stored comparisons of the current method (key, inputs, families), the numbers behind the cells and each
    model's family."""
    try:
        fam = table_family(
            fetch_correlations(con), level=level, exclude_postprocessed=exclude_postprocessed, ties=ties,
            compare=compare,
        )  # fmt: skip
    except ValueError:
        if compare != DEFAULT_COMPARE:
            raise
        return None, set(), {}, {}
    sql = "SELECT comparison_key, inputs_hash, families_hash FROM correlation_diffs WHERE method = $method"
    stored = {(k, i, f) for k, i, f in con.execute(sql, {"method": COMPARISON_METHOD}).fetchall()}
    return fam, stored, cell_values(con, level, exclude_postprocessed), model_families(con)


def refresh_comparisons(
    warehouse: Warehouse | str | os.PathLike[str],
    *,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: str = PAPER_TIES,
    compare: str = DEFAULT_COMPARE,
    n_resamples: int = COMPARISON_RESAMPLES,
    refine_resamples: int = REFINE_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    con: duckdb.DuckDBPyConnection | None = None,
) -> int:
    """Compute and store every comparison of one table (:func:`table_family`) whose stored row is missing or stale
    (either cell's models or numbers changed, a model's family changed, or the row is of an older
    :data:`COMPARISON_METHOD`); returns how many were computed (0: all current, nothing written).
    A table without its compared row (no EvalRank at this level yet) has nothing to compare: 0. ``con``: read
    through this open connection instead of a fresh one: opening the views reads every file's footer, which a
    caller of many tables pays once. Its views read the snapshot it was opened on: the rows written here are read
    through a connection opened afterwards."""
    wh = _warehouse(warehouse)

    def read(con: duckdb.DuckDBPyConnection) -> _Inputs:
        return _refresh_inputs(con, level, exclude_postprocessed, ties, compare)

    fam, stored, values, families = read(con) if con is not None else read_views(wh, read, "comparisons")
    if fam is None:
        return 0

    def current(a: dict[str, Any], b: dict[str, Any]) -> bool:
        models = aligned(values, a["cell_key"], b["cell_key"])[0]
        return (comparison_key(ties, a, b), inputs_hash(a, b), families_hash(models, families)) in stored

    todo = [(a, b) for a, b in fam.pairs if not current(a, b)]
    if not todo:
        return 0
    created = now()
    rows = [
        compare_cells(
            a, b, values, ties=ties, families=families, n_resamples=n_resamples, refine_resamples=refine_resamples,
            seed=seed, confidence=confidence,
        ) | {"created_at": created}
        for a, b in todo
    ]  # fmt: skip
    rows.sort(key=lambda r: r["comparison_key"])
    wh.write("correlation_diff", rows)  # two refreshes of one comparison: the view keeps the newest
    return len(rows)


@dataclass
class PowerLine:
    """Under a table: the compared row against the best similarity row of a column, and how many models would tell
    them apart at 80 % power at the level Holm's correction asks of the table (``result.alpha``:
    :func:`~evalfarm.analysis.comparisons.holm_first_level`; ``result.n_needed`` None: more than ``result.max_models``,
    or no difference), zoos growing model by model (``result``) and family by family (``by_family``)."""

    column: str
    a_row: str
    b_row: str
    rho_a: float
    rho_b: float
    result: PowerResult
    significant: bool
    by_family: PowerResult | None = None


@dataclass
class ComparisonTable:
    """A table's comparisons: ``cells[(row, column)]`` is the ``correlation_comparisons`` row of that other row
    against the compared row ``compare`` in that column; ``power`` the line under each column; ``notes``."""

    level: str
    exclude_postprocessed: bool
    ties: str
    compare: str
    rows: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    power: list[PowerLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def significant(self) -> list[tuple[str, str]]:
        return [k for k, c in self.cells.items() if c["significant"]]


_READ_SQL = """
SELECT * FROM correlation_comparisons
WHERE level = $level AND excludes_postprocessed = $exclude AND ties = $ties AND a_cell_key IN (SELECT unnest($keys))
"""


def best_similarity(fam: Family, column: str, candidates: set[str] | None = None) -> dict[str, Any] | None:
    """The similarity row (:data:`SIMILARITY_SCORERS`; ``candidates``: only those cell keys) with the highest rho in
    a column: what the power line compares the compared row with (chosen by its observed rho, so it is the hardest
    competitor on this zoo, and the choice itself is part of the chance)."""
    got = [
        b
        for a, b in fam.pairs
        if b["column"] == column
        and b["intrinsic_scorer"] in SIMILARITY_SCORERS
        and b["spearman"] is not None
        and (candidates is None or b["cell_key"] in candidates)
    ]
    return max(got, key=lambda r: (r["spearman"], r["row"]), default=None)


# long: reads the stored rows, then computes each column's power lines at the table's Holm level, then its notes
def read_comparisons(
    con: duckdb.DuckDBPyConnection,
    fam: Family,
    *,
    power: bool = True,
    power_candidates: set[str] | None = None,
    seed: int = BOOTSTRAP_SEED,
) -> ComparisonTable:
    """The stored comparisons of ``fam`` in its table's shape, and (``power``) the power line of each column
    against its best similarity row (``power_candidates``: only these cell keys may be it; a column with none of
    them has no power line)."""
    out = ComparisonTable(fam.level, fam.exclude_postprocessed, fam.ties, fam.compare, list(fam.rows), fam.columns)
    a_keys = sorted({a["cell_key"] for a, _ in fam.pairs})
    params = {"level": fam.level, "exclude": fam.exclude_postprocessed, "ties": fam.ties, "keys": a_keys}
    found = con.sql(_READ_SQL, params=params).to_arrow_table().to_pylist()
    stored = {r["comparison_key"]: r for r in found}
    missing = 0
    for a, b in fam.pairs:
        row = stored.get(comparison_key(fam.ties, a, b))
        if row is None:
            missing += 1
            continue
        out.cells[(b["row"], b["column"])] = row
    if missing:
        out.notes.append(
            f"{missing} comparisons are not computed for the current numbers: `evalfarm correlations --compare` "
            "computes them"
        )
    n_tests = max((int(c["n_tests"]) for c in out.cells.values()), default=0)
    level = holm_first_level(n_tests or len(fam.pairs))
    if power:
        values = cell_values(con, fam.level, fam.exclude_postprocessed)
        families = model_families(con)
        a_by_column = {a["column"]: a for a, _ in fam.pairs}
        for column in sorted(a_by_column, key=column_order):
            best = best_similarity(fam, column, power_candidates)
            if best is None:
                continue
            a = a_by_column[column]
            models, xa, xb, d = aligned(values, a["cell_key"], best["cell_key"])
            groups = [families.get(m, m) for m in models]
            found = out.cells.get((best["row"], column))
            out.power.append(
                PowerLine(
                    column,
                    fam.compare,
                    best["row"],
                    float(a["spearman"]) if a["spearman"] is not None else math.nan,
                    float(best["spearman"]),
                    models_needed(xa, xb, d, seed=seed, alpha=level),
                    bool(found and found["significant"]),
                    models_needed(xa, xb, d, seed=seed, alpha=level, groups=groups),
                )
            )
    resamples = sorted({int(c["n_resamples"]) for c in out.cells.values()})
    if out.cells:
        out.notes.append(
            f"difference = rho({fam.compare}) - rho(row): paired bootstrap over models "
            f"({'/'.join(map(str, resamples))} resamples; more where p < 0.05), percentile 95 % interval, "
            f"two-sided p; the same over model families (lineage roots: family p); Holm across the table's "
            f"{n_tests} comparisons (per downstream variant), each bootstrap on its own; significant (*): Holm p < "
            f"{ALPHA} by both; Steiger p with Spearman's variance (Bonett & Wright 2000)"
        )
    if out.power:
        out.notes.append(
            f"power: 80 % at Holm's first-step level {ALPHA}/{n_tests or len(fam.pairs)} = {level:.2g} (what a "
            "comparison of this table needs to be significant by itself), not 0.05 for one comparison"
        )
    return out


def comparison_table(
    warehouse: Warehouse | str | os.PathLike[str],
    *,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: str = PAPER_TIES,
    compare: str = DEFAULT_COMPARE,
    power: bool = True,
    power_candidates: set[str] | None = None,
    seed: int = BOOTSTRAP_SEED,
    con: duckdb.DuckDBPyConnection | None = None,
) -> ComparisonTable:
    """The comparisons of one table as stored (call :func:`refresh_comparisons` first), with the power lines
    (:func:`read_comparisons`); ``con``: through this open connection."""

    def read(con: duckdb.DuckDBPyConnection) -> ComparisonTable:
        fam = table_family(
            fetch_correlations(con), level=level, exclude_postprocessed=exclude_postprocessed, ties=ties,
            compare=compare,
        )  # fmt: skip
        return read_comparisons(con, fam, power=power, power_candidates=power_candidates, seed=seed)

    return read(con) if con is not None else read_views(_warehouse(warehouse), read, "comparisons")


def format_comparison(cell: dict[str, Any] | None) -> str:
    """``+0.12 [-0.05, 0.30] p=0.41 holm=1 family p=0.6 holm=1`` (``*`` when Holm-significant by both
    bootstraps), ``-`` without a test."""
    if cell is None:
        return ""
    if cell["difference"] is None:
        return "-"
    text = f"{cell['difference']:+.2f}"
    if cell["ci_low"] is not None:
        text += f" [{cell['ci_low']:+.2f}, {cell['ci_high']:+.2f}]"
    if cell["p_value"] is not None:
        text += f" p={cell['p_value']:.3g} holm={cell['holm_p']:.3g}"
    if cell.get("family_p_value") is not None:
        text += f" family p={cell['family_p_value']:.3g} holm={cell['family_holm_p']:.3g}"
    elif cell.get("n_families") is not None:
        text += f" ({cell['n_families']} families: no family test)"
    return text + ("*" if cell["significant"] else "")


def power_text(line: PowerLine) -> str:
    """One line under a table: what it would take to tell the compared row from the column's best similarity row,
    at the table's Holm level, in models and in families."""
    r = line.result
    head = (
        f"{line.column}: {line.a_row} {line.rho_a:.2f} vs best similarity row {line.b_row} {line.rho_b:.2f} "
        f"(difference {r.difference:+.2f}, {r.n_models} models): "
    )
    if r.n_models < 4:
        return head + "too few models for a test"
    if r.difference == 0 or not math.isfinite(r.difference):
        return head + "no difference to detect"
    text = head + f"at alpha {r.alpha:.2g}, " + _needed(r)
    if line.by_family is not None:
        text += "; " + _needed(line.by_family)
    return text + ("; significant here" if line.significant else "")


def _needed(r: PowerResult) -> str:
    """``~94 models for 80 % power (this zoo is too small)``, or in families (``~12 families, ~20 models``)."""
    if r.n_needed is None:
        return f"more than {r.max_models:,} {r.unit} for 80 % power (undecidable by adding {r.unit} like these)"
    have = r.n_models if r.unit == "models" else round(r.n_models / r.models_per_unit)
    verdict = "this zoo is large enough" if r.n_needed <= have else "this zoo is too small"
    if r.unit == "models":
        return f"~{r.n_needed:,} models for 80 % power ({verdict})"
    return f"~{r.n_needed:,} families (~{r.models:,} models) for 80 % power, drawn family by family ({verdict})"
