"""Issue 23.3: numbers that rest on too little data (a 5-word model's rho from 3 pairs) are flagged ``thin`` by their
scorer's declared bounds and kept off the leaderboards and out of the correlations; the values themselves are not
touched, and warehouses written before the flag existed still open (every row reads as not thin)."""

from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.runner import run_catalog
from evalfarm.scorers import scorer_for, scorers
from evalfarm.scorers.base import MetricRow, ThinRule
from evalfarm.warehouse import Warehouse
from tests.support.warehouse_files import rewrite_files

pytestmark = pytest.mark.faults  # issue 23.3 (`make faults`)

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "catalog" / "tasks.yaml"
RUN_TASKS = ["wordsim-rg-65", "evalrank-word"]
THIN = {(m, t) for m in ("five-words", "cut12") for t in RUN_TASKS}


# -- the rule itself ---------------------------------------------------------------------------------------------
def test_a_rule_names_the_bound_a_row_breaks_and_ignores_nan_and_other_metrics() -> None:
    rule = ThinRule("coverage", at_least=0.5)
    assert rule.broken_by(MetricRow("coverage", 0.046, variant="raw")) == "coverage 0.046 < 0.5 (raw)"
    assert rule.broken_by(MetricRow("coverage", 0.5)) is None
    assert rule.broken_by(MetricRow("coverage", math.nan)) is None
    assert rule.broken_by(MetricRow("spearman", 0.0)) is None
    assert (
        ThinRule("tie_rate", at_most=0.99).broken_by(MetricRow("tie_rate", 1.0, subset="s")) == "tie_rate 1 > 0.99 (s)"
    )


def test_each_scorer_declares_its_bounds_and_joins_the_reasons_once() -> None:
    by_name = scorers()
    ws = by_name["word-similarity"]
    rows = [MetricRow("coverage", 0.046, variant=v) for v in ("evalrank-word", "raw")] + [
        MetricRow("n_pairs", 3.0, variant=v) for v in ("evalrank-word", "raw")
    ]
    assert ws.thin(rows + rows, None) == (
        "coverage 0.046 < 0.05 (evalrank-word); coverage 0.046 < 0.05 (raw); "
        "n_pairs 3 < 5 (evalrank-word); n_pairs 3 < 5 (raw)"
    )
    assert ws.thin([MetricRow("coverage", 0.876), MetricRow("n_pairs", 30.0)], None) is None  # RW, MC-30 for GloVe
    assert ws.thin([MetricRow("coverage", 0.0923), MetricRow("n_pairs", 6.0)], None) is None  # toy GloVe on RG-65
    er = by_name["evalrank"]
    assert er.thin([MetricRow("oov_pair_rate", 0.92, variant="l2")], None) == "oov_pair_rate 0.92 > 0.8 (l2)"
    assert er.thin([MetricRow("oov_pair_rate", 0.7515)], None) is None  # toy GloVe
    assert er.thin([MetricRow("tie_rate", 0.9654), MetricRow("n_pairs", 5514.0)], None) is None  # spaCy md
    assert by_name["downstream"].thin([MetricRow("oov_rate", 0.6)], None) == "oov_rate 0.6 > 0.5"
    assert by_name["sts"].thin([MetricRow("n_pairs", 189.0, subset="FNWN")], None) is None
    assert by_name["similarity-bands"].thin([MetricRow("n_pairs", 4.0)], None) == "n_pairs 4 < 5"


# -- a real run --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def thin_run(tmp_path_factory, toy_glove: Path) -> Path:
    """toy GloVe, a 5-word cut of it (words of RG-65's first pairs that toy knows) and a cut to 12 % of EvalRank-word's
    pool (seeded), on RG-65 and EvalRank-word."""
    d = tmp_path_factory.mktemp("thin")
    catalog = load_catalog(TASKS)
    from evalfarm.taskdata.data import task_file
    from evalfarm.taskdata.wordsim import read_wordsim

    vectors = {line.split(" ", 1)[0]: line for line in toy_glove.read_text(encoding="utf-8").splitlines()}
    ws = read_wordsim(task_file(catalog.task("wordsim-rg-65"), "pairs"), "wordsim-rg-65")
    words: list[str] = []
    for a, b in zip(ws.word1, ws.word2, strict=True):
        new = [w for w in dict.fromkeys((a, b)) if w in vectors and w not in words]
        if a in vectors and b in vectors and len(words) + len(new) <= 5:
            words += new
    assert 2 <= len(words) <= 5, words
    cut = d / "five.txt"
    cut.write_text("".join(vectors[w] + "\n" for w in words), encoding="utf-8")
    pool_task = catalog.task("evalrank-word")
    pool = sorted(set(scorer_for(pool_task.kind).load(pool_task).texts))
    known = [w for w in pool if w in vectors]
    keep = random.Random(0).sample(known, int(0.12 * len(pool)))
    (d / "cut12.txt").write_text("".join(vectors[w] + "\n" for w in keep), encoding="utf-8")
    (d / "thin.yaml").write_text(
        f"""
include: [{TASKS}]
tasks: [{", ".join(RUN_TASKS)}]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
  - {{id: five-words, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {cut}}}}}
  - {{id: cut12, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {d / "cut12.txt"}}}}}
""",
        encoding="utf-8",
    )
    wh = d / "wh"
    summary = run_catalog(d / "thin.yaml", wh, executor="local")
    assert summary.ok, summary.failed
    assert {(o.model, o.task) for o in summary.outcomes if o.thin} == THIN
    return wh


def _q(wh: Path, sql: str) -> list[dict]:
    return Warehouse(wh).query(sql).to_pylist()


def _nan_free(rows: list[dict]) -> list[dict]:
    return [{k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def test_a_five_word_model_is_flagged_thin_and_kept_off_the_boards(thin_run: Path) -> None:
    rows = _q(thin_run, "SELECT model, task, thin, thin_reason FROM metrics")
    assert {(r["model"], r["task"]) for r in rows if r["thin"]} == THIN
    why = {(r["model"], r["task"]): r["thin_reason"] for r in rows if r["thin"]}
    assert why["five-words", "wordsim-rg-65"].startswith("coverage "), why
    assert why["cut12", "evalrank-word"].startswith("oov_pair_rate "), why
    assert all(r["thin_reason"] is None for r in rows if not r["thin"])
    assert {r["model"] for r in _q(thin_run, "SELECT DISTINCT model FROM leaderboard")} == {"toy"}
    assert {r["model"] for r in _q(thin_run, "SELECT DISTINCT model FROM evalrank")} == {"toy"}
    board_all = _q(thin_run, "SELECT model, task, thin FROM leaderboard_all WHERE model <> 'toy'")
    assert {(r["model"], r["task"]) for r in board_all} == THIN and all(r["thin"] for r in board_all)


def test_a_cut_to_12_percent_of_the_pool_would_top_the_evalrank_board(thin_run: Path) -> None:
    """The issue's second case: OOV items tie, so under l2 / optimistic the cut's MRR beats the whole model's; its
    vectors pass the degenerate check (item OOV 0.88, under 0.9). Only the thin flag keeps it off."""
    where = "task = 'evalrank-word' AND variant = 'l2' AND ties = 'optimistic'"
    rows = {
        r["model"]: r
        for r in _q(thin_run, f"SELECT model, value, degenerate, thin FROM leaderboard_all WHERE {where}")
    }
    assert rows["cut12"]["value"] > rows["toy"]["value"] and not rows["cut12"]["degenerate"] and rows["cut12"]["thin"]
    assert _q(thin_run, f"SELECT model FROM leaderboard WHERE {where}") == [{"model": "toy"}]


def test_on_rg65_only_the_thin_flag_keeps_the_five_word_model_off(thin_run: Path) -> None:
    """Its vectors pass the degenerate-model check (under 90 % of RG-65's words are OOV), and its rho from a handful
    of pairs beats the whole model's: the issue's case."""
    where = "task = 'wordsim-rg-65' AND variant = 'raw'"
    top = _q(thin_run, f"SELECT model, value, degenerate, thin FROM leaderboard_all WHERE {where} ORDER BY position")
    five = next(r for r in top if r["model"] == "five-words")
    toy = next(r for r in top if r["model"] == "toy")
    assert not five["degenerate"] and five["thin"] and not toy["thin"]
    assert five["value"] > toy["value"]
    assert _q(thin_run, f"SELECT model FROM leaderboard WHERE {where}") == [{"model": "toy"}]


def test_the_model_page_says_why_its_numbers_are_thin(thin_run: Path, tmp_path: Path) -> None:
    from evalfarm.analysis.report import build_report

    index = build_report(thin_run, tmp_path / "report", refresh=False)
    pages = {str(p.relative_to(index.parent)): p.read_text(encoding="utf-8") for p in index.parent.rglob("*.html")}
    five = [text for name, text in pages.items() if "five-words" in name]
    toy = [text for name, text in pages.items() if "toy" in name]
    assert len(five) == 1 and len(toy) == 1, sorted(pages)
    assert "Too thin to rank on 2 task(s)" in five[0] and "thin: coverage " in five[0]
    assert "Too thin" not in toy[0] and "thin: " not in toy[0]


def test_the_flag_is_a_column_beside_the_values_and_old_files_read_as_not_thin(thin_run: Path, tmp_path: Path) -> None:
    wh = tmp_path / "old"
    shutil.copytree(thin_run, wh)
    before = _q(wh, "SELECT model, task, metric, subset, variant, ties, value, fingerprint FROM metrics ORDER BY ALL")
    rewrite_files(Warehouse(wh), "metrics", lambda t: t.drop_columns(["thin", "thin_reason"]))  # files before the flag
    after = _q(wh, "SELECT model, task, metric, subset, variant, ties, value, fingerprint FROM metrics ORDER BY ALL")
    assert _nan_free(after) == _nan_free(before)
    assert not any(r["thin"] for r in _q(wh, "SELECT thin FROM metrics"))
    assert "five-words" in {r["model"] for r in _q(wh, "SELECT model FROM leaderboard")}


def test_thin_units_are_left_out_of_the_correlations(tmp_path: Path) -> None:
    """Five models (rho 0.9 by hand, as in test_correlations); a sixth and a seventh whose MRR, or whose downstream
    accuracy, is thin do not enter the cell."""
    from evalfarm.warehouse import now
    from tests.test_correlations import add_accuracy, add_metric, add_model, cells

    sentence_wh = Warehouse(tmp_path / "wh").init()
    for i, (mrr, acc) in enumerate(zip([0.1, 0.2, 0.3, 0.4, 0.5], [0.60, 0.70, 0.65, 0.80, 0.90], strict=True)):
        add_model(sentence_wh, f"s{i}", "sentence", "static")
        add_metric(sentence_wh, f"s{i}", "evalrank-sentence", "evalrank", mrr, ties="optimistic")
        add_accuracy(sentence_wh, f"s{i}", "mr", acc)

    def thin_row(model: str, task: str, scorer: str, metric: str, value: float, ties: str | None) -> None:
        fp = f"thin-{model}-{task}"
        row = {
            "run_id": "hand", "model": model, "task": task, "scorer": scorer, "subset": "all", "variant": "cos",
            "ties": ties, "metric": metric, "value": value, "is_primary": True, "higher_is_better": True,
            "fingerprint": fp, "spec_hash": f"h-{model}", "created_at": now(), "thin": True,
            "thin_reason": "n_pairs 3 < 5",
        }  # fmt: skip
        sentence_wh.write("metrics", [row])

    add_model(sentence_wh, "thin-mrr", "sentence", "static")
    thin_row("thin-mrr", "evalrank-sentence", "evalrank", "mrr", 0.99, "optimistic")
    add_accuracy(sentence_wh, "thin-mrr", "mr", 0.10)
    add_model(sentence_wh, "thin-acc", "sentence", "static")
    add_metric(sentence_wh, "thin-acc", "evalrank-sentence", "evalrank", 0.99, ties="optimistic")
    thin_row("thin-acc", "mr", "downstream", "accuracy", 0.10, None)
    (c,) = cells(sentence_wh, "intrinsic_task = 'evalrank-sentence' AND NOT excludes_postprocessed")
    assert c["n_models"] == 5 and c["spearman"] == pytest.approx(0.9)


def test_correlations_carry_their_interval_and_thin_ones_have_none(thin_run: Path) -> None:
    """Issue 23.3's last clause: every correlation-style number carries its confidence interval (beside the value,
    in ci_low / ci_high / ci_method); a rho from 3 pairs has none, rank metrics never do."""
    rows = _q(
        thin_run,
        "SELECT model, task, metric, value, ci_low, ci_high, ci_method FROM metrics WHERE task = 'wordsim-rg-65' "
        "AND metric IN ('spearman', 'pearson')",
    )
    toy = [r for r in rows if r["model"] == "toy"]
    assert len(toy) == 4 and all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in toy)
    assert {r["ci_method"] for r in toy} == {"fisher-z 95%"}
    assert all(r["ci_low"] is None and r["ci_method"] is None for r in rows if r["model"] == "five-words")
    assert not _q(thin_run, "SELECT 1 FROM metrics WHERE task = 'evalrank-word' AND ci_low IS NOT NULL")
    board = _q(thin_run, "SELECT value, ci_low, ci_high FROM leaderboard WHERE task = 'wordsim-rg-65'")
    assert board and all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in board)


def test_old_files_without_intervals_read_as_null_with_unchanged_values(thin_run: Path, tmp_path: Path) -> None:
    wh = tmp_path / "old"
    shutil.copytree(thin_run, wh)
    cols = "model, task, metric, subset, variant, ties, value, fingerprint, thin"
    before = _q(wh, f"SELECT {cols} FROM metrics ORDER BY ALL")
    rewrite_files(Warehouse(wh), "metrics", lambda t: t.drop_columns(["ci_low", "ci_high", "ci_method"]))  # before
    assert _nan_free(_q(wh, f"SELECT {cols} FROM metrics ORDER BY ALL")) == _nan_free(before)
    assert not _q(wh, "SELECT 1 FROM metrics WHERE ci_low IS NOT NULL OR ci_method IS NOT NULL")
