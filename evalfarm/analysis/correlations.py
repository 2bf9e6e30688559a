"""Intrinsic evaluators against downstream accuracy across a zoo: the EvalRank paper's Tables 3, 6 and 11.

Spearman's rho lives in SQL (``sql/08_correlations.sql``: the ``correlations`` view, always current). What SQL
cannot do cheaply is the bootstrap: :func:`refresh_intervals` resamples the models of every cell whose stored
interval is missing or stale (seeded, 1,000 resamples by default) and writes the intervals into the warehouse
(``tables/correlation_ci``), keyed by the cell and a hash of the numbers behind it, so the view shows an interval
only while it still belongs to those numbers. The runner calls it at the end of a run; ``evalfarm correlations``
calls it before printing. :func:`correlation_table` shapes the view as the paper does (intrinsic evaluators as rows,
downstream tasks as columns); the CLI and the report both render it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import duckdb
import numpy as np

from evalfarm.analysis_defaults import BOOTSTRAP_SEED, CONFIDENCE, INTERVAL_RESAMPLES
from evalfarm.ranking import PAPER_TIES, TIES, TiesOrAll, check_ties, is_ties
from evalfarm.warehouse import Warehouse, now
from evalfarm.warehouse.store import read_again_if_replaced

MIN_MODELS = 5
"""Below this many models a cell's rank correlation is mostly chance: the table says so."""
MIN_MODELS_FOR_INTERVAL = 4
"""With fewer models most resamples repeat one or two models and the interval is not worth computing."""
WIDE_INTERVAL = 1.0
"""A median interval this wide (half of [-1, 1]) means the zoo cannot tell the evaluators apart: the table says so."""
BEST_TOLERANCE = 1e-9
PAPER_DOWNSTREAM = ("mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite")
"""The paper's column order; other downstream tasks follow alphabetically."""
PAPER_EVALRANK_METRICS = ("hits@1", "hits@3")
"""The EvalRank rows of the paper's layout beside MRR (``evalfarm.analysis.paper``): what EvalRank declares
correlated (its ``declared_metrics``, :mod:`evalfarm.metrics`), so the view carries them; this module's table shows
primary metrics only."""
SCORER_ORDER = ("evalrank", "word-similarity", "sts", "similarity-bands")
KEY_COLUMNS = (
    "level",
    "intrinsic_task",
    "intrinsic_scorer",
    "intrinsic_metric",
    "intrinsic_subset",
    "variant",
    "ties",
    "downstream_task",
    "downstream_subset",
    "downstream_variant",
    "excludes_postprocessed",
)


T = TypeVar("T")


def _warehouse(warehouse: Warehouse | str | os.PathLike[str]) -> Warehouse:
    return warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)


def connect(warehouse: Warehouse | str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """A connection with the views, for evalfarm's own fixed queries (no user SQL runs on it, so it needs not be
    locked down), without DuckDB's progress bar: a refresh at the end of a run must not draw over the run's output."""
    con = _warehouse(warehouse).connect(read_only=False)
    con.execute("SET enable_progress_bar = false")
    return con


def read_views(
    warehouse: Warehouse | str | os.PathLike[str],
    work: Callable[[duckdb.DuckDBPyConnection], T],
    what: str = "correlations",
) -> T:
    """``work`` on a :func:`connect` connection, read again on a fresh one when a run replaced a file under it
    (:func:`~evalfarm.warehouse.store.read_again_if_replaced`): a refresh, a table or the report during a run does
    not fail. ``work`` must only read (it may run more than once)."""
    wh = _warehouse(warehouse)
    return read_again_if_replaced(lambda: connect(wh), work, what)


# ---- the bootstrap ------------------------------------------------------------------------------------------------
def _average_ranks(a: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(a, method="average", axis=-1)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (Pearson's r of average ranks), NaN with fewer than 3 values or a constant side: what the
    view computes, in numpy (the bootstrap's statistic)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 3:
        return float("nan")
    return float(_row_pearson(_average_ranks(x)[None], _average_ranks(y)[None])[0])


def _row_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair of two (resamples, n) matrices; NaN where a row is constant."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def bootstrap_interval(
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_resamples: int = INTERVAL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float | None, float | None, int]:
    """Percentile bootstrap interval of Spearman's rho over models: ``(low, high, n_valid)``.

    Each resample draws n models with replacement (a model drawn twice ties with itself) and recomputes rho from
    its own ranks. Resamples where one side is constant have no rho and are dropped; ``n_valid`` counts the rest.
    With fewer than :data:`MIN_MODELS_FOR_INTERVAL` models, or fewer than half the resamples valid, there is no
    interval (None, None). Seeded: the same numbers give the same interval.

    Why not ``scipy.stats.bootstrap(method='percentile')`` (issue 24): it keeps the degenerate resamples, so a cell
    with ties among few models gets a NaN interval (and a warning) where this one drops them and stores ``n_valid``.
    Where no resample degenerates, scipy with ``rng=seed``, ``paired=True`` and this vectorised statistic draws the
    same resamples and returns the same interval to 1e-16 (tests/test_correlations.py checks it; bitwise in 136 of
    199 random cells), so stored intervals would move in the last bits for nothing. Time: 4.9 ms (8 models, 1,000
    resamples) here against 6.5 ms for scipy's vectorised call and 695 ms for scipy with ``spearmanr`` per resample.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = len(x)
    if n < MIN_MODELS_FOR_INTERVAL:
        return None, None, 0
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    rho = _row_pearson(_average_ranks(x[idx]), _average_ranks(y[idx]))
    valid = rho[np.isfinite(rho)]
    if len(valid) < n_resamples / 2:
        return None, None, int(len(valid))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(valid, [tail, 100 - tail])
    return float(low), float(high), int(len(valid))


def refresh_intervals(
    warehouse: Warehouse | str | os.PathLike[str],
    *,
    n_resamples: int = INTERVAL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    con: duckdb.DuckDBPyConnection | None = None,
) -> int:
    """Compute and store the bootstrap interval of every cell of ``correlations`` whose interval is missing or stale
    (its models or numbers changed); returns how many cells were computed (0: all current, nothing written).
    ``con``: read through this open connection (a caller doing many reads pays for the views once) instead of a
    fresh one; its views read the snapshot it was opened on, so the intervals written here are read through a
    connection opened afterwards.

    The cells and their models' numbers are read through the view, so an interval is always of exactly the pairs
    Spearman's rho is computed from, and it is stored with the cell's ``inputs_hash``: when a model is added or
    recomputed the hash changes and the view shows the interval as stale (null) until the next refresh.
    """
    wh = _warehouse(warehouse)

    # one pass over the metrics: the cells without a current interval, with the numbers behind them (no warehouse
    # there: FileNotFoundError, and nothing is created)
    def read(c: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
        return (
            c.sql(
                "SELECT c.* FROM correlation_cells c ANTI JOIN correlation_intervals s "
                "ON s.cell_key = c.cell_key AND s.inputs_hash = c.inputs_hash"
            )
            .to_arrow_table()
            .to_pylist()
        )

    cells = read(con) if con is not None else read_views(wh, read)
    if not cells:
        return 0
    created = now()
    rows = []
    for cell in cells:
        x, y = np.array(cell["intrinsic_values"], np.float64), np.array(cell["downstream_values"], np.float64)
        low, high, n_valid = bootstrap_interval(x, y, n_resamples=n_resamples, seed=seed, confidence=confidence)
        rho = spearman(x, y)
        rows.append(
            {
                **{k: cell[k] for k in ("cell_key", "inputs_hash", *KEY_COLUMNS, "n_models")},
                "spearman": rho if np.isfinite(rho) else None,
                "ci_low": low,
                "ci_high": high,
                "confidence": confidence,
                "n_resamples": n_resamples,
                "n_valid": n_valid,
                "seed": seed,
                "created_at": created,
            }
        )
    rows.sort(key=lambda r: r["cell_key"])
    wh.write("correlation_ci", rows)  # two refreshes of one cell: the view keeps the newest
    return len(rows)


# ---- the paper-shaped table ---------------------------------------------------------------------------------------
@dataclass
class Cell:
    spearman: float | None
    n_models: int
    ci_low: float | None
    ci_high: float | None
    ci_status: str
    best: bool = False


@dataclass
class CorrelationTable:
    """The correlations of one level in the paper's shape: ``rows`` (intrinsic evaluators) x ``columns`` (downstream
    tasks); ``cells[(row, column)]``; ``records``: the view's rows behind it, each with its row / column label and
    ``best``; ``notes``: what a reader must know (too few models, wide intervals, no data)."""

    level: str
    exclude_postprocessed: bool
    ties: TiesOrAll
    rows: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_stats: list[dict[str, Any]] = field(default_factory=list)
    """Word level: per model, what decides ranks besides quality (:func:`word_model_stats`)."""
    diagnostics: bool = False
    evalrank_links: list[dict[str, Any]] = field(default_factory=list)
    """With diagnostics: each diagnostic number's rho with EvalRank's primary MRR (:func:`diagnostics_vs_evalrank`)."""
    composition: dict[str, int] = field(default_factory=dict)  # the models behind it by family

    @property
    def n_models(self) -> tuple[int, int]:
        """(fewest, most) models behind a cell; (0, 0) for an empty table."""
        ns = [c.n_models for c in self.cells.values()]
        return (min(ns), max(ns)) if ns else (0, 0)

    @property
    def meaningful(self) -> bool:
        return bool(self.cells) and not any(n.startswith("meaningless") for n in self.notes)

    def row_n(self, row: str) -> str:
        ns = sorted({c.n_models for (r, _), c in self.cells.items() if r == row})
        return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}" if ns else ""


def column_order(name: str) -> tuple[int, str]:
    task = name.split(" ", 1)[0]
    return (PAPER_DOWNSTREAM.index(task) if task in PAPER_DOWNSTREAM else len(PAPER_DOWNSTREAM), name)


def _row_order(r: dict[str, Any]) -> tuple:
    scorer = r["intrinsic_scorer"]
    return (
        SCORER_ORDER.index(scorer) if scorer in SCORER_ORDER else len(SCORER_ORDER),
        scorer,
        r["intrinsic_task"],
        r["intrinsic_subset"],
        r["variant"],
        TIES.index(r["ties"]) if is_ties(r["ties"]) else -1,
    )


def fetch_correlations(warehouse: Warehouse | str | os.PathLike[str] | duckdb.DuckDBPyConnection) -> list[dict]:
    """Every row of the ``correlations`` view (one pass over the metrics), for :func:`shape_table`."""
    if isinstance(warehouse, duckdb.DuckDBPyConnection):
        return warehouse.sql("SELECT * FROM correlations").to_arrow_table().to_pylist()
    return read_views(warehouse, fetch_correlations)


_COMPOSITION_SQL = """
SELECT CASE WHEN mo.postprocessed THEN 'post-processed' WHEN mo.kind = 'bow' THEN 'bag-of-words'
            WHEN mo.level = 'word' THEN 'word-vectors' ELSE 'neural' END AS family,
       count(DISTINCT p.model) AS n
FROM correlation_pairs p JOIN models mo USING (model)
WHERE p.level = ? AND p.excludes_postprocessed = ?
GROUP BY family
"""


def warehouse_composition(con: duckdb.DuckDBPyConnection, level: str, exclude_postprocessed: bool) -> dict[str, int]:
    """How many of the models behind a level's cells are neural, word vectors, bag-of-words or post-processed (the
    families of :meth:`evalfarm.catalog.registry.Catalog.family`), in that order: stated beside every table."""
    from evalfarm.catalog.registry import FAMILIES

    got = dict(con.execute(_COMPOSITION_SQL, [level, exclude_postprocessed]).fetchall())
    return {f: int(got[f]) for f in FAMILIES if f in got}


def correlation_table(
    warehouse: Warehouse | str | os.PathLike[str],
    *,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: TiesOrAll = PAPER_TIES,
    diagnostics: bool = False,
    n_resamples: int = INTERVAL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> CorrelationTable:
    """The ``correlations`` view of ``level`` shaped like the paper's tables. ``ties``: the EvalRank tie policy shown
    (default :data:`~evalfarm.ranking.PAPER_TIES`: optimistic, the paper's; ``pessimistic``, ``realistic``) or
    ``all`` (one row per policy); rows of scorers
    without ties are always shown. ``diagnostics``: also the diagnostic kinds' rows (:func:`diagnostic_scorers`)
    and their rho with EvalRank itself (``evalrank_links``, bootstrapped now with ``n_resamples`` and ``seed``).
    Reads only: call :func:`refresh_intervals` first for current intervals."""
    _check(level, ties)

    def read(con: duckdb.DuckDBPyConnection) -> CorrelationTable:
        table = shape_table(
            fetch_correlations(con),
            level=level,
            exclude_postprocessed=exclude_postprocessed,
            ties=ties,
            diagnostics=diagnostics,
        )
        table.composition = warehouse_composition(con, level, exclude_postprocessed)
        if level == "word":
            table.model_stats = word_model_stats(con)
        if diagnostics:
            table.evalrank_links = diagnostics_vs_evalrank(
                con,
                level=level,
                exclude_postprocessed=exclude_postprocessed,
                ties=ties,
                n_resamples=n_resamples,
                seed=seed,
            )
        return table

    return read_views(warehouse, read)


WORD_STATS_SQL = """
SELECT m.model, m.task, m.scorer,
       max(m.value) FILTER (WHERE m.metric = 'oov_rate') AS oov_rate,
       max(m.value) FILTER (WHERE m.metric = 'oov_pair_rate') AS oov_pair_rate,
       max(m.value) FILTER (WHERE m.metric = 'tie_rate') AS tie_rate,
       max(m.value) FILTER (WHERE m.metric = 'n_pairs') AS n_pairs,
       max(m.value) FILTER (WHERE m.metric = 'coverage') AS coverage
FROM metrics m JOIN models mo USING (model)
WHERE mo.level = 'word'
  AND ((m.scorer = 'evalrank' AND m.variant = 'cos') OR (m.scorer = 'word-similarity' AND m.variant = 'evalrank-word'))
GROUP BY m.model, m.task, m.scorer
"""


def word_model_stats(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per word model: for each EvalRank word task (cos), the OOV rate of its pool, the share of pairs with an OOV
    word and the share of pairs whose positive ties with a background item (their rank is the tie policy's, not the
    model's), and the pairs scored; over the word-similarity sets, the mean share of pairs scored (coverage).
    OOV handling and ties, not vector quality, can decide a word-level table: it is printed beside every one."""
    rows = con.sql(WORD_STATS_SQL).to_arrow_table().to_pylist()
    out: dict[str, dict[str, Any]] = {}
    cover: dict[str, list[float]] = {}
    for r in rows:
        m = out.setdefault(r["model"], {"model": r["model"]})
        if r["scorer"] == "evalrank":
            for k in ("oov_rate", "oov_pair_rate", "tie_rate", "n_pairs"):
                m[f"{r['task']} {k}"] = r[k]
        elif r["coverage"] is not None:
            cover.setdefault(r["model"], []).append(float(r["coverage"]))
    for model, values in cover.items():
        out[model]["word-similarity coverage"] = float(np.mean(values))
        out[model]["word-similarity sets"] = len(values)
    return [out[k] for k in sorted(out)]


def variant_label(scorer: str, variant: str) -> str:
    """``variant`` of ``scorer`` as a person reads it beside a task (``Scorer.variant_label``: word-similarity's
    ``evalrank-word`` is the EvalRank word protocol, not the EvalRank task)."""
    from evalfarm.plugins import task_kinds

    for _, s in task_kinds.items():
        if getattr(s, "name", None) == scorer and hasattr(s, "variant_label"):
            return str(s.variant_label(variant))
    return variant


def diagnostic_scorers() -> frozenset[str]:
    """Names of the scorers whose declared role is diagnostic (``Scorer.role``: geometry, AG2016, HEROS, DefSent)."""
    from evalfarm.plugins import scorer_roles

    return frozenset(name for name, role in scorer_roles().items() if role == "diagnostic")


def _beside_primary(rows: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(scorer, metric) of ``rows``' metrics that the correlation views carry beside a scorer's primary one as
    numbers with a direction (declared correlated, :mod:`evalfarm.metrics`: EvalRank's hits@1 / hits@3, for the
    paper's layout); a space's geometry, correlated with no direction, is a diagnostic's own row."""
    from evalfarm.metrics import declaration
    from evalfarm.plugins import task_kinds

    scorers = {s.name: s for _, s in task_kinds.items()}
    out = set()
    for scorer, metric in {(r["intrinsic_scorer"], r["intrinsic_metric"]) for r in rows}:
        s = scorers.get(scorer)
        if s is None or metric == s.primary_metric:
            continue
        info = declaration(metric, getattr(s, "declared_metrics", None))
        if info is not None and info.correlated and info.direction is not None:
            out.add((scorer, metric))
    return out


_EVALRANK_LINKS = """
SELECT d.task AS diagnostic_task, d.scorer AS diagnostic_scorer, d.metric AS diagnostic_metric,
       d.subset AS diagnostic_subset, d.variant AS diagnostic_variant, e.task AS evalrank_task,
       e.variant AS evalrank_variant, e.ties AS evalrank_ties, model,
       CASE WHEN metric_higher_is_better(d.scorer, d.metric, d.higher_is_better) = false THEN -d.value
            ELSE d.value END AS diagnostic_value,
       e.value AS evalrank_value
FROM metrics d
JOIN metrics e USING (model)
JOIN models mo USING (model)
WHERE mo.level = $level AND NOT ($exclude AND mo.postprocessed)
  AND e.scorer = 'evalrank' AND e.is_primary AND NOT e.degenerate AND NOT e.thin AND isfinite(e.value)
  AND d.scorer IN (SELECT unnest($scorers::VARCHAR[]))
  AND (d.is_primary OR (metric_correlated(d.scorer, d.metric, d.higher_is_better)
                       AND metric_higher_is_better(d.scorer, d.metric, d.higher_is_better) IS NULL))
  AND NOT d.degenerate AND NOT d.thin AND isfinite(d.value)
ORDER BY ALL
"""


def diagnostics_vs_evalrank(
    warehouse: Warehouse | str | os.PathLike[str] | duckdb.DuckDBPyConnection,
    *,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: TiesOrAll = PAPER_TIES,
    n_resamples: int = INTERVAL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> list[dict[str, Any]]:
    """Each diagnostic number (a descriptive one, or a diagnostic kind's primary) against EvalRank's primary number
    across the models of ``level`` that have both: Spearman's rho, n_models and the bootstrap 95 % interval — the
    EvalRank paper's §4.4 / C.2 argument (alignment and uniformity explain what EvalRank measures), tested on the
    zoo. Values as measured (a descriptive number has no direction); computed at query time, nothing stored."""
    _check(level, ties)
    if not isinstance(warehouse, duckdb.DuckDBPyConnection):
        return read_views(
            warehouse,
            lambda con: diagnostics_vs_evalrank(
                con,
                level=level,
                exclude_postprocessed=exclude_postprocessed,
                ties=ties,
                n_resamples=n_resamples,
                seed=seed,
            ),
        )
    params = {"level": level, "exclude": exclude_postprocessed, "scorers": sorted(diagnostic_scorers())}
    cursor = warehouse.execute(_EVALRANK_LINKS, params)
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if ties != "all" and r["evalrank_ties"] not in (None, ties):
            continue
        key = tuple(r[k] for k in _LINK_KEY)
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in groups.items():
        x = np.array([m["diagnostic_value"] for m in members], np.float64)
        y = np.array([m["evalrank_value"] for m in members], np.float64)
        rho = spearman(x, y)
        low, high, _ = bootstrap_interval(x, y, n_resamples=n_resamples, seed=seed)
        out.append(
            dict(zip(_LINK_KEY, key, strict=True))
            | {"spearman": rho if np.isfinite(rho) else None, "n_models": len(members), "ci_low": low, "ci_high": high}
        )
    return out


_LINK_KEY = (
    "diagnostic_task",
    "diagnostic_scorer",
    "diagnostic_metric",
    "diagnostic_subset",
    "diagnostic_variant",
    "evalrank_task",
    "evalrank_variant",
    "evalrank_ties",
)


def _check(level: str, ties: str) -> None:
    if level not in ("word", "sentence"):
        raise ValueError(f"level must be word or sentence, got {level!r}")
    check_ties(ties, allow_all=True)


def _sampled(r: dict[str, Any]) -> bool:
    """A downstream column trained on the quick profile's seeded sample (``max_train=N``), not SentEval's full
    data: labelled as a sample in every table (issue 22)."""
    return str(r["downstream_variant"]).startswith("max_train=")


def _no_correlations_note(level: str) -> str:
    """What an empty table of ``level`` needs, and the command that computes it."""
    run = f"evalfarm run --tasks {','.join(PAPER_DOWNSTREAM)}" + (
        "" if level == "sentence" else " --models <the bag-of-words models over your word models>"
    )
    return (
        f"no correlations for level {level}: they need downstream accuracies (scorer `downstream`) and "
        "intrinsic metrics of the same models (a word model's downstream numbers are its bag-of-words model's). "
        f"Compute the downstream units with `{run}` (add --quick-downstream for a 1,000-row training sample), "
        "then `evalfarm correlations` again"
    )


def _mark_best(table: CorrelationTable) -> None:
    """Mark each column's best cells (highest Spearman)."""
    for column in table.columns:
        scored = [(c, c.spearman) for (_, col), c in table.cells.items() if col == column and c.spearman is not None]
        top = max((rho for _, rho in scored), default=None)
        for c, rho in scored:  # ties for best within float noise (corr of ranks: 1 - 2e-16) are all marked
            c.best = top is not None and rho >= top - BEST_TOLERANCE


def shape_table(
    rows: list[dict[str, Any]],
    *,
    level: str,
    exclude_postprocessed: bool = False,
    ties: TiesOrAll = PAPER_TIES,
    diagnostics: bool = False,
) -> CorrelationTable:
    """The paper-shaped table of one level from rows of the ``correlations`` view (see :func:`correlation_table`);
    a diagnostic kind's rows only with ``diagnostics`` (labelled with their metric: one task has several)."""
    _check(level, ties)
    hidden = frozenset() if diagnostics else diagnostic_scorers()
    shown = diagnostic_scorers() if diagnostics else frozenset()
    beside = _beside_primary(rows)
    records = [
        dict(r)
        for r in rows
        if (r["intrinsic_scorer"], r["intrinsic_metric"]) not in beside
        and r["level"] == level
        and r["excludes_postprocessed"] == exclude_postprocessed
        and (r["ties"] is None or ties == "all" or r["ties"] == ties)
        and r["intrinsic_scorer"] not in hidden
    ]
    table = CorrelationTable(
        level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, diagnostics=diagnostics
    )
    if not records:
        table.notes.append(_no_correlations_note(level))
        return table
    many_dsubsets = len({r["downstream_subset"] for r in records}) > 1
    many_dvariants = len({r["downstream_variant"] for r in records}) > 1
    for r in sorted(records, key=_row_order):
        label = r["intrinsic_task"]
        if r["intrinsic_scorer"] in shown:
            label += f" {r['intrinsic_metric']}"
        if r["intrinsic_subset"] != "all":
            label += f" {r['intrinsic_subset']}"
        variant = variant_label(r["intrinsic_scorer"], r["variant"])
        label += f" ({variant}" + (f", {r['ties']}" if ties == "all" and r["ties"] else "") + ")"
        column = (
            r["downstream_task"]
            + (f" {r['downstream_subset']}" if many_dsubsets else "")
            + (f" ({r['downstream_variant']})" if many_dvariants or _sampled(r) else "")
            + (" [sample]" if _sampled(r) else "")
        )
        r["row"], r["column"], r["best"] = label, column, False
        if label not in table.rows:
            table.rows.append(label)
        table.cells[(label, column)] = Cell(r["spearman"], r["n_models"], r["ci_low"], r["ci_high"], r["ci_status"])
    table.columns = sorted({r["column"] for r in records}, key=column_order)
    _mark_best(table)
    for r in records:
        r["best"] = table.cells[(r["row"], r["column"])].best
    table.records = records
    _add_notes(table)
    return table


def _add_notes(table: CorrelationTable) -> None:
    low, high = table.n_models
    widths = [c.ci_high - c.ci_low for c in table.cells.values() if c.ci_low is not None and c.ci_high is not None]
    median_width = float(np.median(widths)) if widths else None
    if high < MIN_MODELS:
        table.notes.append(
            f"meaningless: at most {high} models have both numbers (fewer than {MIN_MODELS}); a rank correlation "
            "over so few models is mostly chance. Evaluate more models of this level on the downstream tasks"
        )
    elif median_width is not None and median_width >= WIDE_INTERVAL:
        table.notes.append(
            f"meaningless: the median 95 % bootstrap interval is {median_width:.2f} wide (of the 2 from -1 to 1): "
            f"{high} models cannot tell these evaluators apart. Evaluate more models"
        )
    elif low < MIN_MODELS:
        table.notes.append(f"some cells rest on fewer than {MIN_MODELS} models (n = {low}): read those with care")
    if median_width is not None and not any(n.startswith("meaningless: the median") for n in table.notes):
        table.notes.append(f"median width of the 95 % bootstrap intervals: {median_width:.2f}")
    pending = sum(c.ci_status != "current" for c in table.cells.values())
    if pending:
        table.notes.append(
            f"{pending} cells have no current interval (models changed since): `evalfarm correlations` recomputes them"
        )


def format_cell(cell: Cell | None, *, intervals: bool = False) -> str:
    """A cell as the table prints it: rho to 2 decimals, ``*`` on the best of its column, ``-`` when undefined."""
    if cell is None:
        return ""
    text = "-" if cell.spearman is None else f"{cell.spearman:.2f}"
    if cell.best:
        text += "*"
    if intervals and cell.ci_low is not None and cell.ci_high is not None:
        text += f" [{cell.ci_low:.2f}, {cell.ci_high:.2f}]"
    return text


def caption(table: CorrelationTable) -> str:
    """One line that says what the table is."""
    low, high = table.n_models
    n = f"{low}" if low == high else f"{low}-{high}"
    which = "excluding post-processed models" if table.exclude_postprocessed else "all models"
    ties = "" if table.ties == "all" else f", EvalRank ties {table.ties}"
    variants = sorted({r["downstream_variant"] for r in table.records})
    downstream = f"; downstream variant {', '.join(variants)}" if variants else ""
    zoo = ", ".join(f"{k} {fam}" for fam, k in table.composition.items())
    return (
        f"Spearman's rho between intrinsic evaluators (rows) and downstream accuracy (columns), {table.level} "
        f"level, {which}{ties}{downstream}; n = {n} models per cell" + (f" ({zoo})" if zoo else "") + "; * = best "
        "of its column"
    )
