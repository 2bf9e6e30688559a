"""Boards never mix variants silently (issue 24): the `board` view and the report's boards rank each task under one
declared downstream variant (`full`, the sample only where a task has no full-data number, labelled) and realistic
ties; Figure 4 orders the models by the same variant; model pages plot the model against the zoo. A hand-written
warehouse: two downstream variants of MR (full for 3 models, the sample for 6), a sample-only CR, and a tie-heavy
word model that optimistic ties would put first."""

from __future__ import annotations

import pytest

from evalfarm.warehouse import Warehouse, now

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
        "higher_is_better": True, "fingerprint": f"{model}-{task}-{variant}-{kw.get('ties')}", "spec_hash": "hand",
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
    for m, by_ties in WORD.items():
        for ties, v in by_ties.items():
            rows.append(_row(m, "er-word", "evalrank", "cos", v, ties=ties, metric="mrr"))
            rows.append(_row(m, "er-word", "evalrank", "l2", v / 2, ties=ties, metric="mrr"))
    for r in rows:
        wh.write("metrics", [r], wh.unit_path("metrics", r["model"], r["task"], r["fingerprint"]))
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
        ("er-word", "cos", False, 3, True),
        ("er-word", "l2", False, 3, False),
        ("mr", "full", False, 3, True),
        ("mr", "max_train=1000", True, 6, False),
    ]
