"""Tie policies and rank metrics have one home (evalfarm/ranking.py, issue 42): the formulas against hand-counted
ranks, the SQL definitions against the Python ones, no second copy of the policies in evalfarm/, and the one
policy a user sees first, the same in a toy run's unit line, the README's first query and the ``board`` view."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest

from evalfarm import ranking
from evalfarm.ranking import (
    BOARD_TIES,
    PAPER_TIES,
    TIE_WEIGHTS,
    TIES,
    TIES_BY_RANK,
    check_ties,
    rank_metrics,
    rank_metrics_by_ties,
    sql_definitions,
    tie_ranks,
    tie_step,
)

REPO = Path(__file__).resolve().parents[1]


def test_each_policy_places_the_positive_where_its_definition_says() -> None:
    rank = np.array([1, 1, 4, 7])  # optimistic ranks: 1 + above
    tied = np.array([0, 3, 2, 1])
    assert tie_ranks(rank, tied, "optimistic").tolist() == [1, 1, 4, 7]
    assert tie_ranks(rank, tied, "pessimistic").tolist() == [1, 4, 6, 8]
    assert tie_ranks(rank, tied, "realistic").tolist() == [1, 2.5, 5, 7.5]
    assert TIES_BY_RANK == ("optimistic", "realistic", "pessimistic")
    assert [tie_step(t) for t in TIES] == [1.0, 1.0, 0.5]


def test_mr_mrr_and_hits_at_k_of_hand_counted_ranks() -> None:
    m = rank_metrics(np.array([1, 2, 4, 10, 20]), hits=(1, 3, 10))
    assert m == pytest.approx({"mr": 7.4, "mrr": (1 + 1 / 2 + 1 / 4 + 1 / 10 + 1 / 20) / 5, "hits@1": 0.2,
                               "hits@3": 0.4, "hits@10": 0.8})  # fmt: skip
    assert list(m) == ["mr", "mrr", "hits@1", "hits@3", "hits@10"]  # the order rows are written in
    empty = rank_metrics(np.array([], dtype=np.int64))
    assert all(np.isnan(v) for v in empty.values()) and list(empty) == ["mr", "mrr", "hits@1", "hits@3", "hits@10"]
    by = rank_metrics_by_ties(np.array([1, 3]), np.array([2, 0]), hits=(1,))
    assert list(by) == list(TIES)
    assert by["optimistic"]["hits@1"] == 0.5 and by["pessimistic"]["hits@1"] == 0.0
    assert by["realistic"]["mr"] == pytest.approx((2 + 3) / 2)


def test_an_unknown_policy_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown tie policy 'random'.*optimistic, pessimistic, realistic"):
        check_ties("random")
    with pytest.raises(ValueError, match="or all"):
        check_ties("random", allow_all=True)
    assert check_ties("all", allow_all=True) == "all"
    with pytest.raises(ValueError):
        tie_ranks(np.array([1]), np.array([1]), "random")  # type: ignore[arg-type]


def test_the_sql_definitions_compute_what_the_python_computes() -> None:
    """tie_rank() over random counts equals tie_ranks() bit for bit and in type (DOUBLE), and the tie_policies view
    and the two default macros say what the module's constants say."""
    con = duckdb.connect()
    con.execute(sql_definitions())
    rng = np.random.default_rng(0)
    rank, tied = rng.integers(1, 10_000, 500), rng.integers(0, 5_000, 500)
    con.execute("CREATE TABLE c AS SELECT * FROM (SELECT unnest($1) AS rank, unnest($2) AS tied)", [rank, tied])
    for t in TIES:
        got = con.execute(f"SELECT tie_rank(rank, tied, '{t}'), typeof(tie_rank(rank, tied, '{t}')) FROM c").fetchall()
        assert [g[0] for g in got] == tie_ranks(rank, tied, t).tolist()
        assert {g[1] for g in got} == {"DOUBLE"}
    policies = con.execute("SELECT ties, tie_weight, board, paper FROM tie_policies").fetchall()
    assert policies == [(t, TIE_WEIGHTS[t], t == BOARD_TIES, t == PAPER_TIES) for t in TIES]
    assert con.execute("SELECT board_ties(), paper_ties()").fetchone() == (BOARD_TIES, PAPER_TIES)


def _policy_literals(tree: ast.AST) -> list[int]:
    """Lines of a tuple, list, set or dict that spells out two tie policies (a second copy of the list or weights)."""
    found = []
    for node in ast.walk(tree):
        elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) and elts:
            names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in TIES}
            if len(names) >= 2:
                found.append(node.lineno)
    return found


def test_no_module_but_ranking_spells_out_the_policies() -> None:
    """The policies, their weights and their order are written once: any other tuple, list, set or dict of two or
    more policy names in evalfarm/ is a copy that can drift (the planted one below shows the check bites)."""
    assert _policy_literals(ast.parse("ORDER = ('optimistic', 'realistic')")) == [1]
    copies = {}
    for path in sorted((REPO / "evalfarm").rglob("*.py")):
        if path.name == "ranking.py":
            continue
        lines = _policy_literals(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            copies[str(path.relative_to(REPO))] = lines
    assert copies == {}
    sql = [p for p in (REPO / "sql").glob("*.sql")] + list((REPO / "evalfarm").rglob("*.sql"))
    weights = [str(p.relative_to(REPO)) for p in sql if re.search(r"tied\s*/\s*2|tied\s*\*\s*0?\.5", p.read_text())]
    assert weights == [], "a tie weight written in SQL: use tie_rank(rank, tied, ties)"


def test_the_module_is_what_its_docstring_says() -> None:
    assert ranking.__doc__ is not None
    for t in TIES:
        assert re.search(rf"^{t}\s", ranking.__doc__, re.MULTILINE), f"{t} missing from the policies' table"
    assert f"BOARD_TIES` ({BOARD_TIES})" in ranking.__doc__ and f"PAPER_TIES` ({PAPER_TIES})" in ranking.__doc__


# -- one default a user sees first ---------------------------------------------------------------------------------
def readme_first_query() -> str:
    """The SQL of the README's first ``evalfarm sql "..."`` command: the first number a new user queries."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r'^evalfarm sql "([^"]+)"', readme, re.MULTILINE)
    assert m, 'README.md has no `evalfarm sql "..."` command'
    return m.group(1)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, toy_glove):
    """A bag of words over the toolkit's toy GloVe on the sentence pool: the README's first query's task."""
    from evalfarm.api import run

    d = tmp_path_factory.mktemp("first-numbers")
    catalog = d / "toy.yaml"
    catalog.write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [evalrank-sentence]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,\n"
        f"     source: {{type: path, ref: {toy_glove}}}}}\n"
        "  - {id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}\n"
    )
    summary = run(catalog, warehouse=d / "wh", executor="local", models=["bow-toy"])
    return summary, d / "wh"


@pytest.mark.slow
def test_the_unit_line_the_readme_query_and_the_board_show_one_mrr(toy_run) -> None:
    """A new user's first numbers: the line a run prints for the unit, the README's first query and the board (what
    the report's boards show) give one MRR, under one tie policy, BOARD_TIES."""
    from evalfarm.api import query
    from evalfarm.cli.events import unit_line

    summary, wh = toy_run
    (outcome,) = [o for o in summary.outcomes if o.task == "evalrank-sentence"]
    printed = outcome.summary["cos/" + BOARD_TIES]
    assert list(outcome.summary) == [f"cos/{BOARD_TIES}", f"l2/{BOARD_TIES}"]
    assert f"cos/{BOARD_TIES} {printed:.4g}" in unit_line(outcome)
    first = query(readme_first_query(), warehouse=wh).to_pylist()
    assert [(r["model"], r["ties"]) for r in first] == [("bow-toy", BOARD_TIES)]
    board = query(
        "SELECT ties, value FROM board WHERE task = 'evalrank-sentence' AND model = 'bow-toy' AND metric = 'mrr'",
        warehouse=wh,
    ).to_pylist()
    assert board == [{"ties": BOARD_TIES, "value": first[0]["mrr"]}]
    assert printed == first[0]["mrr"]
    other = query(
        "SELECT value FROM metrics WHERE task = 'evalrank-sentence' AND variant = 'cos' AND metric = 'mrr' "
        f"AND ties = '{PAPER_TIES}'",
        warehouse=wh,
    ).to_pylist()
    assert other and other[0]["value"] != printed, "the toy run must tell the policies apart, or this proves nothing"
