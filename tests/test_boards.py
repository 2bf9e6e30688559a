"""Boards never mix variants silently (issue 24): the `board` view and the report's boards rank each task under one
declared downstream variant (`full`, the sample only where a task has no full-data number, labelled) and realistic
ties; Figure 4 orders the models by the same variant; model pages plot the model against the zoo. A hand-written
warehouse: two downstream variants of MR (full for 3 models, the sample for 6), a sample-only CR, and a tie-heavy
word model that optimistic ties would put first."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfarm.analysis.report import build_report
from evalfarm.warehouse import Warehouse, now
from tests import test_report
from tests.test_report import _images, _open, _rows

browser = test_report.browser  # the report tests' headless Chromium (a module fixture, shared here)

TIES = ("optimistic", "pessimistic", "realistic")
SENTENCE = ["s1", "s2", "s3", "s4", "s5", "s6"]
FULL = {"s1": 0.70, "s2": 0.80, "s3": 0.75}  # MR on the full data: three models
SAMPLE = {m: 0.60 + i / 50 for i, m in enumerate(SENTENCE)}  # MR and CR on the 1,000-row sample: all six
# EvalRank word MRR per tie policy: `tied` collides (a pruned table) and leads only under optimistic ties
WORD = {"glove": {"optimistic": 0.095, "realistic": 0.093}, "tied": {"optimistic": 0.116, "realistic": 0.019},
        "small": {"optimistic": 0.050, "realistic": 0.048}}  # fmt: skip


def _row(model: str, task: str, scorer: str, variant: str, value: float, **kw) -> dict:
    return {
        "run_id": "hand", "model": model, "task": task, "scorer": scorer, "subset": "all", "variant": variant,
        "ties": kw.get("ties"), "metric": kw.get("metric", "accuracy"), "value": value, "is_primary": True,
        "higher_is_better": True, "fingerprint": f"{model}-{task}-{variant}", "spec_hash": "hand",
        "created_at": now(),
    }  # fmt: skip


def build_warehouse(root) -> Warehouse:
    """The hand-written warehouse described in the module docstring."""
    wh = Warehouse(root).init()
    created = now()
    models = [(m, "sentence") for m in SENTENCE] + [(m, "word") for m in WORD]
    for m, level in models:
        wh.write_model({"model": m, "level": level, "kind": "static", "dim": 2, "spec_hash": f"h-{m}", "spec": "[]",
                        "provenance": "{}", "run_id": "hand", "created_at": created})  # fmt: skip
    rows = [_row(m, "mr", "downstream", "full", v) for m, v in FULL.items()]
    rows += [_row(m, "mr", "downstream", "max_train=1000", v) for m, v in SAMPLE.items()]
    rows += [_row(m, "cr", "downstream", "max_train=1000", v - 0.1) for m, v in SAMPLE.items()]
    for i, m in enumerate(SENTENCE):  # a sentence EvalRank for the correlations and Figure 4
        rows += [_row(m, "er-sent", "evalrank", "cos", 0.3 + i / 40, ties=t, metric="mrr") for t in TIES]
    for m, by_ties in WORD.items():
        for ties, v in by_ties.items():
            rows.append(_row(m, "er-word", "evalrank", "cos", v, ties=ties, metric="mrr"))
            rows.append(_row(m, "er-word", "evalrank", "l2", v / 2, ties=ties, metric="mrr"))
    units: dict[str, list[dict]] = {}
    for r in rows:  # one file per unit: its tie policies share a fingerprint, as a scorer writes them
        units.setdefault(r["fingerprint"], []).append(r | {"created_at": created})
    for unit in units.values():
        wh.write("metrics", unit)
    return wh


@pytest.fixture(scope="module")
def boards_warehouse(tmp_path_factory) -> Warehouse:
    return build_warehouse(tmp_path_factory.mktemp("boards") / "wh")


def _board(wh: Warehouse, task: str) -> list[tuple]:
    sql = f"SELECT model, position, variant, ties, sample FROM board WHERE task = '{task}' ORDER BY position, model"
    return [tuple(r.values()) for r in wh.query(sql).to_pylist()]


def test_the_board_ranks_the_full_data_variant_and_leaves_the_sample_out(boards_warehouse):
    board = _board(boards_warehouse, "mr")
    assert [(m, p) for m, p, *_ in board] == [("s2", 1), ("s3", 2), ("s1", 3)]
    assert {(v, s) for _, _, v, _, s in board} == {("full", False)}


def test_a_task_with_only_the_sample_gets_a_board_labelled_a_sample(boards_warehouse):
    board = _board(boards_warehouse, "cr")
    assert [p for _, p, *_ in board] == [1, 2, 3, 4, 5, 6]
    assert {(v, s) for _, _, v, _, s in board} == {("max_train=1000", True)}


def test_the_word_board_ranks_under_realistic_ties_and_cosine(boards_warehouse):
    board = _board(boards_warehouse, "er-word")
    assert [m for m, *_ in board] == ["glove", "small", "tied"]
    assert {(v, t) for _, _, v, t, _ in board} == {("cos", "realistic")}


def test_board_variants_declares_the_choice_and_keeps_the_others(boards_warehouse):
    sql = "SELECT task, variant, sample, n_models, on_board FROM board_variants ORDER BY task, variant"
    rows = [tuple(r.values()) for r in boards_warehouse.query(sql).to_pylist()]
    assert rows == [
        ("cr", "max_train=1000", True, 6, True),
        ("er-sent", "cos", False, 6, True),
        ("er-word", "cos", False, 3, True),
        ("er-word", "l2", False, 3, False),
        ("mr", "full", False, 3, True),
        ("mr", "max_train=1000", True, 6, False),
    ]


@pytest.fixture(scope="module")
def boards_report(boards_warehouse, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("boards-report")
    build_report(boards_warehouse, out)
    return out


def _summaries(page) -> dict[str, str]:
    """Each leaderboard's summary line, by task."""
    texts = page.evaluate("[...document.querySelectorAll('#leaderboards ~ details > summary')].map(s => s.innerText)")
    return {t.split(" ", 1)[0]: t for t in texts}


def _board_rows(page, task: str) -> list[list[str]]:
    """The ranked rows of one task's board (the first table of its details block)."""
    board = page.locator("details", has=page.locator(f"summary > b:text-is('{task}')")).locator("table.leaderboard")
    return _rows(board.first)


@pytest.mark.slow
def test_the_report_ranks_one_variant_per_board_and_labels_the_sample(browser, boards_report):
    page, problems = _open(browser, boards_report / "index.html")
    summaries = _summaries(page)
    assert "full" in summaries["mr"] and "[sample]" not in summaries["mr"], summaries["mr"]
    assert "max_train=1000" in summaries["cr"] and "[sample]" in summaries["cr"], summaries["cr"]
    assert "realistic ties" in summaries["er-word"], summaries["er-word"]
    # every model on a board has a position: the full-data board ranks its three, the sample is not mixed in
    assert [(r[0], r[1]) for r in _board_rows(page, "mr")] == [("1", "s2"), ("2", "s3"), ("3", "s1")]
    assert [r[1] for r in _board_rows(page, "er-word")] == ["glove", "small", "tied"]  # not tied first
    folded = [t.text_content() or "" for t in page.locator("table.other-variants").all()]  # folded: not rendered
    assert any("max_train=1000 [sample]" in t for t in folded), folded
    # Figure 4 orders the models by the board's variant, and its image loads
    heading = page.locator("#figure4 ~ h3").first.inner_text()
    assert heading == "sentence level, ordered by mr (full)", heading
    assert all(i["ok"] for i in _images(page)), _images(page)
    assert not problems, problems
    page.close()


@pytest.mark.slow
def test_a_model_page_plots_the_model_against_the_zoo(browser, boards_report):
    page, problems = _open(browser, boards_report / "models" / "tied.html")
    svg = page.locator("svg.strips")
    assert svg.count() == 1 and svg.bounding_box()["height"] > 10
    assert page.locator("svg.strips circle.this-model").count() == 1
    assert page.locator("svg.strips circle").count() == 3  # the word board's three models
    text = svg.text_content() or ""
    assert "#3 of 3" in text and "er-word · cos · realistic" in text, text
    assert not problems, problems
    page.close()
