"""Robustness of the comparison and of the boards (issue 41): does the answer hang on one family of models, or on the
particular evaluation items?

- :func:`leave_one_family_out`: the difference between the compared row (EvalRank MRR) and each column's best
  similarity row, recomputed with each model family left out in turn. A family is every model whose lineage (the
  catalog's ``base:`` chain, stored in the ``models`` view's ``spec``) ends in the same root weights: a base
  model, its post-processed twins, its bags of words and their twins, and the other poolings of the same weights
  (:func:`evalfarm.analysis.comparison_tables.model_families`, which the family bootstrap also resamples by).
- :func:`rank_stability`: a board resampled over its evaluation items: the pairs of an EvalRank task's ``ranks``
  detail view, drawn with replacement once for every model (a paired bootstrap over items), each model's MRR
  recomputed. How often is the board's #1 still #1, which models take its place, how far the board moves.
  EvalRank is the only task kind with per-item detail in the warehouse; the others have a number per unit only.

Both read the warehouse through its views and write nothing.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import duckdb
import numpy as np

from evalfarm.analysis.comparison_tables import (
    aligned,
    best_similarity,
    cell_values,
    model_families,
    table_family,
)
from evalfarm.analysis.correlations import column_order, fetch_correlations, read_views, spearman
from evalfarm.analysis_defaults import BOOTSTRAP_SEED, DEFAULT_COMPARE
from evalfarm.ranking import BOARD_TIES, PAPER_TIES, Ties, check_ties, tie_ranks
from evalfarm.warehouse import Warehouse

ITEM_RESAMPLES = 1000


def _warehouse(warehouse: Warehouse | str | os.PathLike[str]) -> Warehouse:
    return warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)


# ---- leave one family out -----------------------------------------------------------------------------------------
@dataclass
class FamilyDrop:
    """One column with one family left out: what is left, both correlations, their difference."""

    family: str
    n_dropped: int
    n_models: int
    rho_a: float
    rho_b: float

    @property
    def difference(self) -> float:
        return self.rho_a - self.rho_b


@dataclass
class LeaveOneOut:
    """A column's difference between the compared row and its best similarity row over the whole zoo, and with each
    family left out (``drops``, largest swing first)."""

    column: str
    a_row: str
    b_row: str
    n_models: int
    difference: float
    drops: list[FamilyDrop] = field(default_factory=list)

    @property
    def flips(self) -> list[FamilyDrop]:
        """The drops that turn the difference to the other side of 0 (the other row predicts better)."""
        return [d for d in self.drops if d.difference * self.difference < 0]

    def summary(self) -> str:
        if not self.drops:
            return f"{self.column}: no family to leave out"
        lo = min(self.drops, key=lambda d: d.difference)
        hi = max(self.drops, key=lambda d: d.difference)
        flips = self.flips
        text = (
            f"{self.column}: {self.a_row} - {self.b_row} = {self.difference:+.2f} over {self.n_models} models; "
            f"with one of {len(self.drops)} families left out {lo.difference:+.2f} (without {lo.family}) to "
            f"{hi.difference:+.2f} (without {hi.family})"
        )
        if flips:
            text += "; the sign flips without " + ", ".join(d.family for d in flips)
        else:
            text += "; the sign holds"
        return text


def leave_one_family_out(
    warehouse: Warehouse | str | os.PathLike[str] | duckdb.DuckDBPyConnection,
    *,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: str = PAPER_TIES,
    compare: str = DEFAULT_COMPARE,
    similarity_keys: set[str] | None = None,
) -> list[LeaveOneOut]:
    """Per column of the table (:func:`evalfarm.analysis.comparison_tables.table_family`): the compared row against the
    column's best similarity row (chosen on the whole zoo, then kept: ``similarity_keys`` limits the candidates),
    over the models both have, then with each model family (:func:`model_families`) left out in turn. Families
    with no model in the column are skipped; a drop that leaves fewer than 4 models has NaN correlations."""
    if not isinstance(warehouse, duckdb.DuckDBPyConnection):
        return read_views(
            _warehouse(warehouse),
            lambda con: leave_one_family_out(
                con, level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, compare=compare,
                similarity_keys=similarity_keys,
            ),
            "leave-one-family-out",
        )  # fmt: skip
    con = warehouse
    fam = table_family(
        fetch_correlations(con), level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, compare=compare
    )
    values = cell_values(con, level, exclude_postprocessed)
    families = model_families(con)
    a_by_column = {a["column"]: a for a, _ in fam.pairs}
    out = []
    for column in sorted(a_by_column, key=column_order):
        best = best_similarity(fam, column, similarity_keys)
        if best is None:
            continue
        models, a, b, d = aligned(values, a_by_column[column]["cell_key"], best["cell_key"])
        of = np.array([families.get(m, m) for m in models])
        row = LeaveOneOut(column, fam.compare, best["row"], len(models), spearman(a, d) - spearman(b, d))
        for family in sorted(set(of)):
            keep = of != family
            if keep.sum() < 4:
                row.drops.append(FamilyDrop(family, int((~keep).sum()), int(keep.sum()), math.nan, math.nan))
                continue
            rho_a, rho_b = spearman(a[keep], d[keep]), spearman(b[keep], d[keep])
            row.drops.append(FamilyDrop(family, int((~keep).sum()), int(keep.sum()), rho_a, rho_b))
        row.drops.sort(key=lambda x: -abs(x.difference - row.difference) if math.isfinite(x.difference) else 0.0)
        out.append(row)
    return out


# ---- rank stability over items ------------------------------------------------------------------------------------
_RANKS_SQL = """
SELECT r.model, r.query_id, r.positive_id, r.rank, r.tied
FROM ranks r
SEMI JOIN metrics m
    ON m.model = r.model AND m.task = r.task AND m.variant = r.variant AND m.scorer = 'evalrank'
   AND m.metric = 'mrr' AND NOT m.degenerate AND NOT m.thin
WHERE r.task = $task AND r.variant = $variant
  AND ($excluded = false OR r.model NOT IN (SELECT model FROM models WHERE postprocessed))
"""


@dataclass
class Stability:
    """A board of one EvalRank task (MRR under ``ties``) resampled over its pairs: the observed board (``mrr``, best
    first), how often its #1 stays #1 (``top_stays``), the share of resamples each model is #1 (``winners``), the
    median Spearman's rho between a resampled board and the observed one, and each of the first models' 95 %
    interval of its position."""

    task: str
    variant: str
    ties: str
    n_models: int
    n_items: int
    n_resamples: int
    mrr: list[tuple[str, float]]
    top_stays: float
    winners: list[tuple[str, float]]
    board_rho: float
    positions: list[tuple[str, int, int, int]]  # model, observed position, 2.5 % and 97.5 % positions

    def summary(self) -> str:
        if not self.mrr:
            return f"{self.task} ({self.variant}, {self.ties} ties): no per-pair ranks"
        top, value = self.mrr[0]
        others = ", ".join(f"{m} {100 * s:.1f} %" for m, s in self.winners if m != top)[:300]
        return (
            f"{self.task} ({self.variant}, {self.ties} ties; {self.n_models} models, {self.n_items} pairs, "
            f"{self.n_resamples} resamples of the pairs): #1 {top} (MRR {value:.4f}) stays #1 in "
            f"{100 * self.top_stays:.1f} % of resamples" + (f"; otherwise #1: {others}" if others else "")
            + f"; median rho between a resampled board and the observed one {self.board_rho:.3f}"
        )  # fmt: skip


def _reciprocal(rank: np.ndarray, tied: np.ndarray, ties: str) -> np.ndarray:
    """1 / rank under ``ties`` (:func:`evalfarm.ranking.tie_ranks`: the one home of the policies' weights)."""
    return 1.0 / tie_ranks(rank, tied, cast(Ties, check_ties(ties)))


def _reciprocal_ranks(t: Any, models_col: np.ndarray, ties: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The models (sorted ids), each model's reciprocal rank of each pair (models x pairs) and whether it has the
    pair, from the ``ranks`` rows ``t``."""
    models, mi = np.unique(models_col, return_inverse=True)
    pair_ids = np.stack([t.column("query_id").to_numpy(), t.column("positive_id").to_numpy()], axis=1)
    _, pi = np.unique(pair_ids, axis=0, return_inverse=True)
    pi = pi.ravel()
    n_models, n_items = len(models), int(pi.max()) + 1
    rr = np.zeros((n_models, n_items))
    present = np.zeros((n_models, n_items))
    rr[mi, pi] = _reciprocal(t.column("rank").to_numpy(), t.column("tied").to_numpy(), ties)
    present[mi, pi] = 1.0
    return models, rr, present


def _resampled_positions(rr: np.ndarray, present: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Each model's board position (1 = best) in each of ``n_resamples`` paired bootstrap resamples of the pairs
    (resamples x models), drawn in blocks from one seeded generator."""
    n_models, n_items = rr.shape
    rng = np.random.default_rng(seed)
    block = max(1, 2_000_000 // n_items)
    positions = []
    for start in range(0, n_resamples, block):
        k = min(block, n_resamples - start)
        counts = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=k).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mrr = (counts @ rr.T) / (counts @ present.T)  # (k, models)
        mrr = np.where(np.isfinite(mrr), mrr, -np.inf)
        # position of each model in each resample (1 = best)
        ranked = np.argsort(-mrr, axis=1, kind="stable")  # equal MRRs: by model id
        pos = np.empty_like(ranked)
        np.put_along_axis(pos, ranked, np.broadcast_to(np.arange(1, n_models + 1), ranked.shape), axis=1)
        positions.append(pos)
    return np.concatenate(positions)


def rank_stability(
    warehouse: Warehouse | str | os.PathLike[str] | duckdb.DuckDBPyConnection,
    *,
    task: str,
    variant: str = "cos",
    ties: str = BOARD_TIES,
    exclude_postprocessed: bool = False,
    n_resamples: int = ITEM_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    top: int = 5,
) -> Stability:
    """The board of EvalRank task ``task`` (``variant``, MRR under ``ties``: the boards' realistic by default)
    under a paired bootstrap over its pairs: each resample draws the task's pairs with replacement, once for every
    model, and recomputes each model's MRR over the drawn pairs it has (a pair a model dropped, under ``oov:
    skip``, does not count for it). Reads the ``ranks`` view; models of degenerate or thin units are left out, as
    on the board. Seeded."""
    if not isinstance(warehouse, duckdb.DuckDBPyConnection):
        return read_views(
            _warehouse(warehouse),
            lambda con: rank_stability(
                con, task=task, variant=variant, ties=ties, exclude_postprocessed=exclude_postprocessed,
                n_resamples=n_resamples, seed=seed, top=top,
            ),
            "rank stability",
        )  # fmt: skip
    params = {"task": task, "variant": variant, "excluded": exclude_postprocessed}
    t = warehouse.sql(_RANKS_SQL, params=params).to_arrow_table()
    models_col = np.array(t.column("model").to_pylist(), dtype=object)
    if len(models_col) == 0:
        return Stability(task, variant, ties, 0, 0, n_resamples, [], math.nan, [], math.nan, [])
    models, rr, present = _reciprocal_ranks(t, models_col, ties)
    n_models, n_items = rr.shape
    observed = rr.sum(axis=1) / present.sum(axis=1)
    order = np.lexsort((models, -observed))  # best first; ties by id
    position = np.empty(n_models, dtype=int)
    position[order] = np.arange(1, n_models + 1)

    pos_all = _resampled_positions(rr, present, n_resamples, seed)
    first = order[0]
    winners = Counter(models[np.argmin(pos_all, axis=1)])
    rhos = [spearman(p.astype(np.float64), position.astype(np.float64)) for p in pos_all] if n_models >= 3 else []
    shown = order[:top]
    return Stability(
        task=task,
        variant=variant,
        ties=ties,
        n_models=n_models,
        n_items=n_items,
        n_resamples=n_resamples,
        mrr=[(str(models[i]), float(observed[i])) for i in order],
        top_stays=float(np.mean(pos_all[:, first] == 1)),
        winners=[(str(m), c / len(pos_all)) for m, c in winners.most_common()],
        board_rho=float(np.median(rhos)) if rhos else math.nan,
        positions=[_interval(str(models[i]), int(position[i]), pos_all[:, i]) for i in shown],
    )


def _interval(model: str, observed: int, positions: np.ndarray) -> tuple[str, int, int, int]:
    low, high = np.percentile(positions, [2.5, 97.5])
    return model, observed, int(round(low)), int(round(high))


def stability_rows(s: Stability) -> list[dict[str, Any]]:
    """The first models of a stability result as rows (for CSV / JSON)."""
    share = dict(s.winners)
    return [
        {"task": s.task, "variant": s.variant, "ties": s.ties, "model": m, "position": p, "position_low": lo,
         "position_high": hi, "share_first": share.get(m, 0.0), "mrr": dict(s.mrr)[m]}
        for m, p, lo, hi in s.positions
    ]  # fmt: skip
