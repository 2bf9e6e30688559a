"""Issue 41: the robustness views (evalfarm/analysis/robustness.py): leave one model family out, and a board
resampled over its evaluation items, against values worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from evalfarm.analysis.correlations import spearman
from evalfarm.analysis.robustness import leave_one_family_out, model_families, rank_stability
from evalfarm.warehouse import Warehouse
from tests.test_correlations import add_accuracy, add_evalrank, add_metric, add_model


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh").init()


# ---- leave one family out -----------------------------------------------------------------------------------------
def test_leaving_a_family_out_recomputes_both_correlations_without_it(wh: Warehouse) -> None:
    """Six unrelated models where STS-B predicts MR perfectly and EvalRank does not, and a family of three (g, its
    ABTT twin, its whitened twin) that EvalRank orders right and STS-B wrong: over all nine EvalRank wins; without
    g's family STS-B does."""
    mr = {"a": 0.60, "b": 0.62, "c": 0.64, "d": 0.66, "e": 0.68, "f": 0.70, "g": 0.80, "g-abtt": 0.85, "g-w": 0.90}
    er = {"a": 0.3, "b": 0.1, "c": 0.2, "d": 0.5, "e": 0.4, "f": 0.6, "g": 0.7, "g-abtt": 0.8, "g-w": 0.9}
    sts = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4, "e": 0.5, "f": 0.6, "g": 0.9, "g-abtt": 0.05, "g-w": 0.01}
    for m in mr:
        base = "g" if m.startswith("g-") else None
        add_model(wh, m, "sentence", "static", base=base, postprocess={"method": "abtt"} if base else None)
        add_evalrank(wh, m, "evalrank-sentence", {"optimistic": er[m]})
        add_metric(wh, m, "stsb", "sts", sts[m], metric="spearman", subset="test")
        add_accuracy(wh, m, "mr", mr[m])
    con = wh.connect(read_only=False)
    try:
        fams = model_families(con)
    finally:
        con.close()
    assert fams == {m: ("g" if m.startswith("g") else m) for m in mr}

    (row,) = leave_one_family_out(wh, level="sentence")
    models = sorted(mr)
    x, y, d = (np.array([v[m] for m in models]) for v in (er, sts, mr))
    assert (row.column, row.a_row, row.b_row, row.n_models) == ("mr", "evalrank-sentence (cos)", "stsb test (cos)", 9)
    assert row.difference == pytest.approx(spearman(x, d) - spearman(y, d))
    assert row.difference > 0
    by = {drop.family: drop for drop in row.drops}
    assert set(by) == {"a", "b", "c", "d", "e", "f", "g"}
    g = by["g"]
    keep = np.array([not m.startswith("g") for m in models])
    assert (g.n_dropped, g.n_models) == (3, 6)
    assert (g.rho_a, g.rho_b) == (pytest.approx(spearman(x[keep], d[keep])), pytest.approx(1.0))
    assert g.difference < 0 and row.flips == [g] and row.drops[0] is g  # the largest swing first
    assert "the sign flips without g" in row.summary()


# ---- rank stability over items ------------------------------------------------------------------------------------
def _ranks(wh: Warehouse, model: str, task: str, ranks: list[tuple[int, int, int]], mrr: float) -> None:
    """An EvalRank unit with per-pair rows (pair id, optimistic rank, tied count) and its MRR metric."""
    add_model(wh, model, "sentence", "static")
    add_evalrank(wh, model, task, {"optimistic": mrr})
    fp = f"er-{model}-{task}"
    rows = [
        {"run_id": "hand", "model": model, "task": task, "variant": "cos", "query_id": pid, "positive_id": pid + 100,
         "query": f"q{pid}", "positive": f"p{pid}", "rank": r, "tied": t, "score": 0.5, "oov": False,
         "fingerprint": fp}
        for pid, r, t in ranks
    ]  # fmt: skip
    wh.write("ranks", rows, unit=(model, task, fp))


def test_the_board_over_resampled_pairs_against_the_exact_probability(wh: Warehouse) -> None:
    """Two pairs. x ranks them 1 and 10 (reciprocal 1, 0.1: MRR 0.55), y ranks both 2 (MRR 0.5). A resample of two
    pairs is (1, 1) with probability 1/4 (x first), (2, 2) with 1/4 (y first: 0.1 < 0.5) or one of each with 1/2
    (0.55 > 0.5, x first): x stays #1 with probability 3/4 exactly."""
    _ranks(wh, "x", "er", [(1, 1, 0), (2, 10, 0)], 0.55)
    _ranks(wh, "y", "er", [(1, 2, 0), (2, 2, 0)], 0.5)
    got = rank_stability(wh, task="er", ties="optimistic", n_resamples=4000, seed=3)
    assert got.mrr == [("x", pytest.approx(0.55)), ("y", pytest.approx(0.5))]
    assert (got.n_models, got.n_items) == (2, 2)
    assert got.top_stays == pytest.approx(0.75, abs=0.025)
    assert dict(got.winners)["y"] == pytest.approx(1 - got.top_stays)
    assert rank_stability(wh, task="er", ties="optimistic", n_resamples=4000, seed=3) == got  # seeded


def test_tie_policies_and_missing_pairs_are_the_boards(wh: Warehouse) -> None:
    """Tie policies from the stored (rank, tied): rank 1 with 2 tied is 1 / 3 / 2 (optimistic / pessimistic /
    realistic). A model without a pair (oov: skip) is averaged over its own pairs only."""
    _ranks(wh, "a", "er", [(1, 1, 2), (2, 1, 0)], 1.0)
    _ranks(wh, "b", "er", [(1, 2, 0)], 0.5)  # pair 2 dropped
    got = {t: dict(rank_stability(wh, task="er", ties=t, n_resamples=50).mrr) for t in ("optimistic", "pessimistic",
                                                                                    "realistic")}  # fmt: skip
    assert got["optimistic"] == {"a": pytest.approx(1.0), "b": pytest.approx(0.5)}
    assert got["pessimistic"] == {"a": pytest.approx((1 / 3 + 1) / 2), "b": pytest.approx(0.5)}
    assert got["realistic"] == {"a": pytest.approx((1 / 2 + 1) / 2), "b": pytest.approx(0.5)}
    a_always = rank_stability(wh, task="er", ties="optimistic", n_resamples=200)
    assert a_always.top_stays == 1.0  # a resample of pair 2 only leaves b without a number: a stays first
    assert math.isnan(a_always.board_rho)  # two models: no rank correlation of boards
    assert a_always.positions[0][:2] == ("a", 1)


def test_a_task_without_ranks_has_an_empty_board(wh: Warehouse) -> None:
    add_model(wh, "m", "sentence", "static")
    assert rank_stability(wh, task="nothing").mrr == []
