"""The correlation views (sql/08_correlations.sql) and evalfarm/analysis/correlations.py on warehouses of real Parquet
files read by real DuckDB: Spearman's rho against hand-computed ranks, the word -> bag-of-words lineage, the
post-processed exclusion, the seeded bootstrap and its staleness, the paper-shaped table, the CLI, and the runner's
hook."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from evalfarm.analysis.correlations import (
    MIN_MODELS_FOR_INTERVAL,
    bootstrap_interval,
    correlation_table,
    refresh_intervals,
    spearman,
)
from evalfarm.cli import app
from evalfarm.warehouse import Warehouse, now

REPO = Path(__file__).resolve().parents[1]


# ---- writing a warehouse by hand (the same files a run writes) ----------------------------------------------------
_SPECS: dict[tuple[str, str], dict] = {}  # (warehouse, model) -> the spec entry add_model wrote


def add_model(
    wh: Warehouse, model: str, level: str, kind: str, *, base: str | None = None, postprocess: dict | None = None
) -> None:
    """A models row; its spec holds the lineage as a run writes it (the model, then its bases, nearest first)."""
    chain = [{"id": model, "kind": kind, "base": base, "postprocess": postprocess}]
    while chain[-1]["base"] is not None and (wh.uri, chain[-1]["base"]) in _SPECS:
        chain.append(_SPECS[(wh.uri, chain[-1]["base"])])
    _SPECS[(wh.uri, model)] = chain[0]
    wh.write_model(
        {
            "model": model,
            "level": level,
            "kind": kind,
            "dim": 4,
            "spec_hash": f"h-{model}",
            "base": base,
            "pooling": None,
            "postprocess": json.dumps(postprocess) if postprocess else None,
            "source": None,
            "provenance": "{}",
            "spec": json.dumps(chain),
            "run_id": "hand",
            "created_at": now(),
        }
    )


def add_metric(
    wh: Warehouse,
    model: str,
    task: str,
    scorer: str,
    value: float,
    *,
    metric: str = "mrr",
    subset: str = "all",
    variant: str = "cos",
    ties: str | None = None,
    higher_is_better: bool = True,
    fingerprint: str | None = None,
) -> None:
    fp = fingerprint or f"{scorer}-{model}-{task}-{subset}-{variant}-{ties}"
    row = {
        "run_id": "hand",
        "model": model,
        "task": task,
        "scorer": scorer,
        "subset": subset,
        "variant": variant,
        "ties": ties,
        "metric": metric,
        "value": value,
        "is_primary": True,
        "higher_is_better": higher_is_better,
        "fingerprint": fp,
        "spec_hash": f"h-{model}",
        "task_checksum": "c",
        "scorer_version": "1",
        "params": "{}",
        "created_at": now(),
    }
    wh.write("metrics", [row])


def add_evalrank(wh: Warehouse, model: str, task: str, mrr: dict[str, float]) -> None:
    """One EvalRank unit: its MRR under each tie policy given, in one metrics file (as the scorer writes them)."""
    fp, created = f"er-{model}-{task}", now()  # one unit: one timestamp (the metrics view keeps a unit's newest)
    rows = []
    for ties, value in mrr.items():
        rows.append(
            {"run_id": "hand", "model": model, "task": task, "scorer": "evalrank", "subset": "all", "variant": "cos",
             "ties": ties, "metric": "mrr", "value": value, "is_primary": True, "higher_is_better": True,
             "fingerprint": fp, "spec_hash": f"h-{model}", "created_at": created}
        )  # fmt: skip
    wh.write("metrics", rows)


def add_accuracy(wh: Warehouse, model: str, task: str, value: float, *, variant: str = "logreg") -> None:
    """A downstream row as the downstream scorer writes it: scorer downstream, metric accuracy (primary)."""
    add_metric(
        wh, model, task, "downstream", value, metric="accuracy", variant=variant, fingerprint=f"ds-{model}-{task}"
    )


def cells(wh: Warehouse, where: str) -> list[dict]:
    return wh.query(f"SELECT * FROM correlations WHERE {where}").to_pylist()


@pytest.fixture
def sentence_wh(tmp_path: Path) -> Warehouse:
    """Five sentence models; MRR 0.1..0.5 and MR accuracies whose ranks are 1, 3, 2, 4, 5 (rho = 0.9 by hand)."""
    wh = Warehouse(tmp_path / "wh").init()
    mrr = [0.1, 0.2, 0.3, 0.4, 0.5]
    acc = [0.60, 0.70, 0.65, 0.80, 0.90]
    tied = [0.1, 0.1, 0.3, 0.4, 0.5]
    for i in range(5):
        m = f"s{i + 1}"
        add_model(wh, m, "sentence", "static")
        add_metric(wh, m, "evalrank-sentence", "evalrank", mrr[i], ties="optimistic")
        add_metric(wh, m, "sts-tied", "sts", tied[i], metric="spearman", subset="test")
        # a lower-is-better primary metric is oriented before ranking: 5 - mrr orders the models as mrr does (a
        # metric nothing declares: its stored direction counts; tests/test_metric_declarations.py: declared ones)
        add_metric(wh, m, "lower-better", "sts", 5 - mrr[i], metric="distance", higher_is_better=False)
        add_accuracy(wh, m, "mr", acc[i])
    return wh


# ---- Spearman in SQL ----------------------------------------------------------------------------------------------
def test_spearman_in_sql_matches_hand_computed_ranks(sentence_wh):
    (c,) = cells(sentence_wh, "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed")
    # ranks 1..5 against 1, 3, 2, 4, 5: sum d^2 = 2, rho = 1 - 6 * 2 / (5 * 24) = 0.9
    assert c["spearman"] == pytest.approx(0.9, abs=1e-12)
    assert (c["n_models"], c["level"], c["downstream_task"], c["ties"], c["intrinsic_metric"]) == (
        5,
        "sentence",
        "mr",
        "optimistic",
        "mrr",
    )
    (t,) = cells(sentence_wh, "intrinsic_task = 'sts-tied' AND NOT excludes_postprocessed")
    # tied values share the mean rank: x = 1.5 1.5 3 4 5, y = 1 3 2 4 5 -> 8 / sqrt(9.5 * 10)
    assert t["spearman"] == pytest.approx(8 / math.sqrt(95), abs=1e-12)
    assert t["spearman"] == pytest.approx(spearmanr([0.1, 0.1, 0.3, 0.4, 0.5], [0.6, 0.7, 0.65, 0.8, 0.9])[0])
    assert t["intrinsic_subset"] == "test" and t["ties"] is None
    (low,) = cells(sentence_wh, "intrinsic_task = 'lower-better' AND NOT excludes_postprocessed")
    assert low["spearman"] == pytest.approx(0.9, abs=1e-12)  # not -0.9: positive means "agrees"
    assert spearman(np.array([0.1, 0.1, 0.3, 0.4, 0.5]), np.array([0.6, 0.7, 0.65, 0.8, 0.9])) == pytest.approx(
        t["spearman"]
    )


def test_models_without_both_numbers_and_non_finite_numbers_are_left_out(sentence_wh):
    add_model(sentence_wh, "no-downstream", "sentence", "static")
    add_metric(sentence_wh, "no-downstream", "evalrank-sentence", "evalrank", 0.99, ties="optimistic")
    add_model(sentence_wh, "nan-mrr", "sentence", "static")
    add_metric(sentence_wh, "nan-mrr", "evalrank-sentence", "evalrank", float("nan"), ties="optimistic")
    add_accuracy(sentence_wh, "nan-mrr", "mr", 0.99)
    add_model(sentence_wh, "only-downstream", "sentence", "static")
    add_accuracy(sentence_wh, "only-downstream", "mr", 0.5)
    (c,) = cells(sentence_wh, "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed")
    assert c["n_models"] == 5 and c["spearman"] == pytest.approx(0.9)


def test_too_few_models_or_a_constant_side_give_no_rho(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    for i, (v, a) in enumerate([(0.1, 0.5), (0.2, 0.6)]):
        add_model(wh, f"m{i}", "sentence", "static")
        add_metric(wh, f"m{i}", "er", "evalrank", v, ties="optimistic")
        add_metric(wh, f"m{i}", "flat", "sts", 0.3, metric="spearman")
        add_accuracy(wh, f"m{i}", "mr", a)
    assert {(c["intrinsic_task"], c["n_models"], c["spearman"]) for c in cells(wh, "NOT excludes_postprocessed")} == {
        ("er", 2, None),  # two models: rho is +-1 whatever they are
        ("flat", 2, None),
    }
    add_model(wh, "m2", "sentence", "static")
    add_metric(wh, "m2", "flat", "sts", 0.3, metric="spearman")
    add_accuracy(wh, "m2", "mr", 0.7)
    (flat,) = cells(wh, "intrinsic_task = 'flat' AND NOT excludes_postprocessed")
    assert flat["n_models"] == 3 and flat["spearman"] is None  # every model scores the same: undefined, not NaN


# ---- lineage: word models through their bag of words ------------------------------------------------------------
def test_word_models_take_the_downstream_numbers_of_their_bag_of_words(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    words = {"w1": 0.10, "w2": 0.20, "w3": 0.30, "w4": 0.40, "w5": 0.50}
    bow_acc = {"w1": 0.70, "w2": 0.60, "w3": 0.80, "w4": 0.90, "w5": 0.95}  # ranks 2 1 3 4 5: rho = 0.9
    for w, v in words.items():
        add_model(wh, w, "word", "word-vectors")
        add_metric(wh, w, "wordsim-x", "word-similarity", v, metric="spearman", variant="raw")
        add_model(wh, f"bow-{w}", "sentence", "bow", base=w)
        add_accuracy(wh, f"bow-{w}", "sst2", bow_acc[w])
    # a post-processed sentence model over bow-w1 is kind bow too, but never the link
    add_model(wh, "bow-w1-pcr1", "sentence", "bow", base="bow-w1", postprocess={"method": "pcr", "d": 1})
    add_accuracy(wh, "bow-w1-pcr1", "sst2", 0.01)
    # a second plain bag of words over w2: the alphabetically first id is the link
    add_model(wh, "bow-w2-cased", "sentence", "bow", base="w2")
    add_accuracy(wh, "bow-w2-cased", "sst2", 0.99)
    # a word model with no bag of words has no downstream number
    add_model(wh, "w6", "word", "word-vectors")
    add_metric(wh, "w6", "wordsim-x", "word-similarity", 0.9, metric="spearman", variant="raw")

    link = {r["word_model"]: r for r in wh.query("SELECT * FROM downstream_link").to_pylist()}
    assert {w: r["bow_model"] for w, r in link.items()} == {f"w{i}": f"bow-w{i}" for i in range(1, 6)}
    assert link["w2"]["n_candidates"] == 2 and link["w1"]["n_candidates"] == 1
    (c,) = cells(wh, "level = 'word' AND NOT excludes_postprocessed")
    assert (c["intrinsic_task"], c["variant"], c["downstream_task"], c["n_models"]) == ("wordsim-x", "raw", "sst2", 5)
    assert c["spearman"] == pytest.approx(0.9)
    pairs = wh.query("SELECT model, downstream_model FROM correlation_pairs WHERE level = 'word'").to_pylist()
    assert {(p["model"], p["downstream_model"]) for p in pairs} == {(w, f"bow-{w}") for w in words}


def test_postprocessed_models_by_lineage_and_their_exclusion(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    add_model(wh, "w", "word", "word-vectors")
    add_model(wh, "w-abtt", "word", "word-vectors", base="w", postprocess={"method": "abtt", "d": 1})
    add_model(wh, "bow-w", "sentence", "bow", base="w")
    add_model(wh, "bow-w-abtt", "sentence", "bow", base="w-abtt")  # plain bow over a post-processed word model
    add_model(wh, "st", "sentence", "sentence-transformers")
    add_model(wh, "st-white", "sentence", "sentence-transformers", base="st", postprocess={"method": "whitening"})
    add_model(wh, "st2", "sentence", "sentence-transformers")
    flags = {r["model"]: r["postprocessed"] for r in wh.query("SELECT model, postprocessed FROM models").to_pylist()}
    assert flags == {
        "w": False,
        "w-abtt": True,
        "bow-w": False,
        "bow-w-abtt": True,
        "st": False,
        "st-white": True,
        "st2": False,
    }
    for i, m in enumerate(["bow-w", "bow-w-abtt", "st", "st-white", "st2"]):
        add_metric(wh, m, "er", "evalrank", 0.1 * (i + 1), ties="optimistic")
        add_accuracy(wh, m, "mr", [0.5, 0.9, 0.6, 0.95, 0.7][i])
    both = {c["excludes_postprocessed"]: c for c in cells(wh, "level = 'sentence'")}
    assert both[False]["n_models"] == 5 and both[True]["n_models"] == 3
    # all five: ranks 1..5 vs 1 4 2 5 3 -> sum d^2 = 0+4+1+1+4 = 10, rho = 1 - 60/120 = 0.5
    assert both[False]["spearman"] == pytest.approx(0.5)
    # without the post-processed two: bow-w, st, st2 are ordered the same by both sides
    assert both[True]["spearman"] == pytest.approx(1.0)


# ---- the bootstrap ------------------------------------------------------------------------------------------------
def test_bootstrap_interval_is_the_percentiles_of_resampled_spearman():
    x = np.array([0.1, 0.4, 0.2, 0.8, 0.5, 0.9, 0.3, 0.7])
    y = np.array([0.2, 0.3, 0.1, 0.9, 0.6, 0.7, 0.5, 0.8])
    low, high, n_valid = bootstrap_interval(x, y, n_resamples=400, seed=7)
    idx = np.random.default_rng(7).integers(0, len(x), size=(400, len(x)))
    rhos = [spearmanr(x[i], y[i])[0] for i in idx]  # scipy, one resample at a time: an independent computation
    rhos = np.array([r for r in rhos if np.isfinite(r)])
    assert n_valid == len(rhos)
    assert (low, high) == pytest.approx(tuple(np.percentile(rhos, [2.5, 97.5])), abs=1e-12)
    assert low <= spearman(x, y) <= high
    assert bootstrap_interval(x, y, n_resamples=400, seed=7) == (low, high, n_valid)  # seeded
    assert bootstrap_interval(x[: MIN_MODELS_FOR_INTERVAL - 1], y[: MIN_MODELS_FOR_INTERVAL - 1]) == (None, None, 0)
    # perfectly monotone data: every resample agrees (a model drawn twice ties on both sides)
    assert bootstrap_interval(x, 2 * x + 1, n_resamples=200)[:2] == pytest.approx((1.0, 1.0))


@pytest.mark.slow
def test_intervals_are_stored_current_then_stale_when_models_change(sentence_wh):
    where = "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed"
    (before,) = cells(sentence_wh, where)
    assert before["ci_status"] == "missing" and before["ci_low"] is None
    n = refresh_intervals(sentence_wh, n_resamples=300, seed=1)
    assert n == len(cells(sentence_wh, "true"))  # every cell computed once
    (c,) = cells(sentence_wh, where)
    assert c["ci_status"] == "current" and c["ci_low"] <= c["spearman"] <= c["ci_high"]
    x, y = np.array([0.1, 0.2, 0.3, 0.4, 0.5]), np.array([0.60, 0.70, 0.65, 0.80, 0.90])
    assert (c["ci_low"], c["ci_high"]) == pytest.approx(bootstrap_interval(x, y, n_resamples=300, seed=1)[:2])
    files = sorted((sentence_wh.root / "tables" / "correlation_ci").glob("*.parquet"))
    assert refresh_intervals(sentence_wh, n_resamples=300, seed=1) == 0  # all current: nothing computed or written
    assert sorted((sentence_wh.root / "tables" / "correlation_ci").glob("*.parquet")) == files

    # a new model changes the numbers behind the cell: its stored interval no longer shows
    add_model(sentence_wh, "s6", "sentence", "static")
    add_metric(sentence_wh, "s6", "evalrank-sentence", "evalrank", 0.6, ties="optimistic")
    add_accuracy(sentence_wh, "s6", "mr", 0.95)
    (stale,) = cells(sentence_wh, where)
    assert stale["ci_status"] == "stale" and stale["ci_low"] is None and stale["n_models"] == 6
    # a cell the new model has no number in keeps its interval
    (other,) = cells(sentence_wh, "intrinsic_task = 'sts-tied' AND NOT excludes_postprocessed")
    assert other["ci_status"] == "current" and other["n_models"] == 5
    assert refresh_intervals(sentence_wh, n_resamples=300, seed=1) > 0
    (fresh,) = cells(sentence_wh, where)
    assert fresh["ci_status"] == "current" and fresh["ci_low"] is not None
    # ... and so does a recomputed number of a model already in it (a newer unit of s2 replaces its MRR)
    add_metric(sentence_wh, "s2", "evalrank-sentence", "evalrank", 0.25, ties="optimistic", fingerprint="recomputed")
    (changed,) = cells(sentence_wh, where)
    assert changed["ci_status"] == "stale" and changed["n_models"] == 6


# ---- the paper's tables -------------------------------------------------------------------------------------------
def test_the_papers_table_is_one_select_on_the_view(sentence_wh):
    for m, acc in zip(["s1", "s2", "s3", "s4", "s5"], [0.5, 0.4, 0.3, 0.2, 0.1], strict=True):
        add_accuracy(sentence_wh, m, "cr", acc)
    # what docs/user-guide.md shows: one read-only statement (evalfarm sql's check refuses anything else)
    rows = sentence_wh.query(
        "SELECT * FROM (SELECT intrinsic_task, variant, downstream_task, round(spearman, 3) AS rho FROM correlations "
        "WHERE level = 'sentence' AND NOT excludes_postprocessed AND coalesce(ties, 'optimistic') = 'optimistic') "
        "PIVOT (first(rho) FOR downstream_task IN ('mr', 'cr')) ORDER BY intrinsic_task"
    ).to_pylist()
    assert rows == [
        {"intrinsic_task": "evalrank-sentence", "variant": "cos", "mr": 0.9, "cr": -1.0},
        {"intrinsic_task": "lower-better", "variant": "cos", "mr": 0.9, "cr": -1.0},
        {"intrinsic_task": "sts-tied", "variant": "cos", "mr": round(8 / math.sqrt(95), 3), "cr": -0.975},
    ]


@pytest.mark.slow
def test_correlation_table_has_the_papers_shape_best_marks_and_notes(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    n = 8
    for i in range(n):
        m = f"m{i}"
        add_model(wh, m, "sentence", "static")
        # optimistic MRR orders the models as mr does; realistic ties give another order
        add_evalrank(wh, m, "evalrank-sentence", {"optimistic": i / 10, "realistic": (i * 7 % n) / 10})
        add_metric(wh, m, "stsb", "sts", ((i * 3) % n) / 10, metric="spearman", subset="test")
        add_accuracy(wh, m, "mr", 0.5 + i / 100)
        add_accuracy(wh, m, "trec", 0.9 - i / 100)
        add_accuracy(wh, m, "cr", 0.5 + ((i * 3) % n) / 100)
    refresh_intervals(wh, n_resamples=200)
    table = correlation_table(wh, level="sentence")
    assert table.columns == ["mr", "cr", "trec"]  # the paper's column order, not the alphabet
    assert table.rows == ["evalrank-sentence (cos)", "stsb test (cos)"]  # optimistic ties only by default
    assert table.cells[("evalrank-sentence (cos)", "mr")].spearman == pytest.approx(1.0)
    assert table.cells[("evalrank-sentence (cos)", "mr")].best
    assert table.cells[("stsb test (cos)", "cr")].best and not table.cells[("evalrank-sentence (cos)", "cr")].best
    assert table.cells[("evalrank-sentence (cos)", "trec")].spearman == pytest.approx(-1.0)
    assert table.n_models == (n, n) and table.row_n("stsb test (cos)") == str(n)
    assert table.meaningful, table.notes  # 8 models, tight intervals on the mr column
    every = correlation_table(wh, level="sentence", ties="all")
    assert every.rows == [
        "evalrank-sentence (cos, optimistic)",
        "evalrank-sentence (cos, realistic)",
        "stsb test (cos)",
    ]
    assert correlation_table(wh, level="word").notes[0].startswith("no correlations for level word")
    with pytest.raises(ValueError, match="ties must be one of"):
        correlation_table(wh, level="sentence", ties="random")


@pytest.mark.parametrize(
    ("mrr", "accuracy", "why"),
    [
        ([0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], "at most 4 models have both numbers (fewer than 5)"),
        # six models, no relation: every interval spans most of [-1, 1]
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.7, 0.5, 0.9, 0.6, 0.8, 0.4], "the median 95 % bootstrap interval is"),
    ],
)
def test_too_few_models_or_too_wide_intervals_make_the_table_say_it_is_meaningless(tmp_path, mrr, accuracy, why):
    wh = Warehouse(tmp_path / "wh").init()
    for i, (v, a) in enumerate(zip(mrr, accuracy, strict=True)):
        add_model(wh, f"m{i}", "sentence", "static")
        add_evalrank(wh, f"m{i}", "er", {"optimistic": v})
        add_accuracy(wh, f"m{i}", "mr", a)
    refresh_intervals(wh, n_resamples=300)
    table = correlation_table(wh, level="sentence")
    assert not table.meaningful
    (note,) = [n for n in table.notes if n.startswith("meaningless")]
    assert why in note, table.notes


# ---- the CLI ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_prints_the_paper_table_and_machine_readable_rows(sentence_wh):
    runner = CliRunner()
    res = runner.invoke(app, ["correlations", "--warehouse", str(sentence_wh.root), "--level", "sentence"])
    assert res.exit_code == 0, res.output
    assert "evalrank-sentence (cos)" in res.stdout and "0.90*" in res.stdout and " mr " in res.stdout
    assert "n = 5 models per cell" in res.stdout
    assert "meaningless: at most 5" not in res.stdout  # 5 models is the threshold, not below it
    res = runner.invoke(app, ["correlations", "--warehouse", str(sentence_wh.root), "-f", "json", "--no-refresh"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    by_task = {r["intrinsic_task"]: r for r in rows}
    assert by_task["evalrank-sentence"]["spearman"] == pytest.approx(0.9) and by_task["evalrank-sentence"]["best"]
    assert by_task["evalrank-sentence"]["ci_status"] == "current"  # the table run above stored the intervals
    assert {r["excludes_postprocessed"] for r in rows} == {False}
    res = runner.invoke(app, ["correlations", "--warehouse", str(sentence_wh.root), "-f", "csv", "--ties", "all"])
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith("row,column,best,level,intrinsic_task")
    res = runner.invoke(app, ["correlations", "--warehouse", str(sentence_wh.root), "--level", "word"])
    assert res.exit_code == 0 and "no correlations for level word" in res.stdout
    res = runner.invoke(app, ["correlations", "--warehouse", str(sentence_wh.root / "nope")])
    assert res.exit_code == 2


# ---- the runner's hook --------------------------------------------------------------------------------------------
@pytest.fixture
def tiny_catalog(tmp_path, toy_glove) -> Path:
    cat = tmp_path / "cat.yaml"
    cat.write_text(f"""
include: [{REPO / "catalog" / "tasks.yaml"}]
tasks: [wordsim-mc-30]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
""")
    return cat


def test_a_run_refreshes_the_intervals_and_a_failing_refresh_never_fails_the_run(
    tiny_catalog, tmp_path, monkeypatch, caplog
):
    from evalfarm.analysis import correlations
    from evalfarm.runner import run_catalog

    wh = Warehouse(tmp_path / "wh").init()
    for i in range(5):  # four hand-written word models + the real one, each with a bag of words and an accuracy
        add_model(wh, f"bow-w{i}", "sentence", "bow", base=f"w{i}" if i else "toy")
        add_accuracy(wh, f"bow-w{i}", "mr", 0.6 + i / 100)
        if i:
            add_model(wh, f"w{i}", "word", "word-vectors")
            add_metric(wh, f"w{i}", "wordsim-mc-30", "word-similarity", i / 10, metric="spearman", variant="raw")
    summary = run_catalog(tiny_catalog, wh.root, executor="local")
    assert summary.ok
    (c,) = cells(wh, "level = 'word' AND variant = 'raw' AND NOT excludes_postprocessed")
    assert c["n_models"] == 5 and c["ci_status"] == "current"  # the run's last step stored the interval

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(correlations, "refresh_intervals", broken)
    with caplog.at_level(logging.WARNING, logger="evalfarm.runner"):
        summary = run_catalog(tiny_catalog, wh.root, executor="local", force=True)
    assert summary.ok
    assert "correlation intervals not refreshed (RuntimeError: disk on fire)" in caplog.text


def test_a_warehouse_from_before_the_interval_table_gets_it_on_refresh(sentence_wh):
    import shutil

    table = sentence_wh.root / "tables" / "correlation_ci"
    shutil.rmtree(table, ignore_errors=True)  # a warehouse made before the table existed (or never refreshed)
    assert not table.exists()
    assert sentence_wh.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]  # the views open around the gap
    assert refresh_intervals(Warehouse(sentence_wh.root), n_resamples=100) > 0  # its first write creates the table
    assert (table / "_delta_log").is_dir() and cells(sentence_wh, "ci_status <> 'current'") == []


def test_sampled_downstream_columns_are_labelled_and_never_pooled_with_full_data(sentence_wh):
    """The quick profile's accuracies (variant ``max_train=N``) are a column of their own, labelled a sample,
    and their correlation is computed over sampled numbers only."""
    sampled = [0.9, 0.8, 0.7, 0.6, 0.5]  # the reverse order of the full-data column's models
    for i in range(5):
        for variant, value in (("max_train=1000", sampled[i]), ("full", [0.60, 0.70, 0.65, 0.80, 0.90][i])):
            m = f"s{i + 1}"  # one unit (fingerprint) per variant, as the scorer's params differ
            add_metric(sentence_wh, m, "cr", "downstream", value, metric="accuracy", variant=variant,
                       fingerprint=f"ds-{m}-cr-{variant}")  # fmt: skip
    got = {
        (c["downstream_task"], c["downstream_variant"]): (c["n_models"], c["spearman"])
        for c in cells(sentence_wh, "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed")
    }
    assert got[("cr", "max_train=1000")] == (5, pytest.approx(-1.0))
    assert got[("cr", "full")] == (5, pytest.approx(0.9))
    table = correlation_table(sentence_wh, level="sentence")
    assert "cr (max_train=1000) [sample]" in table.columns and "cr (full)" in table.columns


def test_each_downstream_subset_and_variant_is_a_column_of_its_own(sentence_wh):
    """A downstream scorer that marks several subsets (or variants) primary never puts a model twice in a cell."""
    dev, test = [0.1, 0.2, 0.3, 0.4, 0.5], [0.5, 0.4, 0.3, 0.2, 0.1]
    for i in range(5):
        m, created = f"s{i + 1}", now()
        rows = [
            {"run_id": "hand", "model": m, "task": "cr", "scorer": "downstream", "subset": subset, "variant": variant,
             "ties": None, "metric": "accuracy", "value": value, "is_primary": True, "higher_is_better": True,
             "fingerprint": f"cr-{m}", "created_at": created}
            for subset, variant, value in [("dev", "logreg", dev[i]), ("test", "logreg", test[i]),
                                           ("test", "mlp", dev[i])]
        ]  # fmt: skip
        sentence_wh.write("metrics", rows)
    got = {
        (c["downstream_subset"], c["downstream_variant"]): (c["n_models"], c["spearman"])
        for c in cells(sentence_wh, "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed")
    }
    assert got == {
        ("all", "logreg"): (5, pytest.approx(0.9)),
        ("dev", "logreg"): (5, pytest.approx(1.0)),
        ("test", "logreg"): (5, pytest.approx(-1.0)),
        ("test", "mlp"): (5, pytest.approx(1.0)),
    }
    table = correlation_table(sentence_wh, level="sentence")
    assert table.columns == ["mr all (logreg)", "cr dev (logreg)", "cr test (logreg)", "cr test (mlp)"]


def _row_spearman(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """scipy.stats.bootstrap's vectorised statistic: Spearman's rho of each resample (last axis)."""
    from scipy.stats import rankdata

    a = rankdata(x, axis=-1).reshape(-1, x.shape[-1])
    b = rankdata(y, axis=-1).reshape(-1, y.shape[-1])
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return rho.reshape(x.shape[:-1])


def test_bootstrap_interval_is_scipys_percentile_bootstrap_and_drops_degenerate_resamples():
    """The kept hand-written bootstrap (correlations.bootstrap_interval says why): scipy.stats.bootstrap with the
    same seed draws the same resamples, so without a degenerate resample both give the same interval; with one,
    scipy's is NaN and ours drops it (n_valid counts what is left)."""
    import warnings

    from scipy.stats import bootstrap

    rng = np.random.default_rng(11)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    low, high, n_valid = bootstrap_interval(x, y, n_resamples=500, seed=3)
    ref = bootstrap((x, y), _row_spearman, paired=True, vectorized=True, method="percentile", n_resamples=500, rng=3)
    assert n_valid == 500
    assert (low, high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12)
    x_ties = np.array([1.0, 1.0, 1.0, 2.0, 3.0])
    low, high, n_valid = bootstrap_interval(x_ties, np.arange(5.0), n_resamples=500, seed=0)
    assert 250 <= n_valid < 500 and low is not None and np.isfinite(low)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = bootstrap((x_ties, np.arange(5.0)), _row_spearman, paired=True, vectorized=True, method="percentile")
    assert np.isnan(ref.confidence_interval.low)


def test_refresh_and_tables_read_again_when_a_run_replaces_a_file_under_them(sentence_wh, monkeypatch):
    """The end-of-run refresh and the tables read the views over one connection. Where that connection reads
    through a listing taken once (an object-store warehouse: :func:`~evalfarm.warehouse.sandbox.prefix_filesystem`),
    a run replacing a file whole meanwhile fails the read with "No magic bytes found" (the race itself is
    reproduced on a read-only connection in ``test_warehouse.py``). They read again on a fresh connection; any
    other error is raised at once."""
    import duckdb

    from evalfarm.warehouse import store

    connect, calls = Warehouse.connect, []

    def replaced_on_the_first_read(self, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise duckdb.InvalidInputException("Invalid Input Error: No magic bytes found at end of file 'm.parquet'")
        return connect(self, **kw)

    monkeypatch.setattr(Warehouse, "connect", replaced_on_the_first_read)
    assert refresh_intervals(sentence_wh, n_resamples=200, seed=1) > 0 and len(calls) == 2
    calls.clear()
    table = correlation_table(sentence_wh, level="sentence")
    assert len(calls) == 2 and table.rows
    calls.clear()
    monkeypatch.setattr(store, "QUERY_ATTEMPTS", 1)  # no second try: the error reaches the caller
    with pytest.raises(duckdb.Error, match="magic bytes"):
        correlation_table(sentence_wh, level="sentence")

    def broken(self, **kw):
        calls.append(1)
        raise duckdb.IOException("IO Error: disk on fire")

    calls.clear()
    monkeypatch.setattr(store, "QUERY_ATTEMPTS", 3)
    monkeypatch.setattr(Warehouse, "connect", broken)
    with pytest.raises(duckdb.IOException, match="disk on fire"):
        refresh_intervals(sentence_wh, n_resamples=200, seed=1)
    assert len(calls) == 1
