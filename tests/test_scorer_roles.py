"""A scorer declares its role (intrinsic, downstream, diagnostic: ``Scorer.role``, issue 42), and the views, the
correlations and the report read the role instead of naming a scorer: a second downstream benchmark (the toy
plug-in's ``length-classes``) becomes a column of the correlations and a labelled sample on its board by declaring
``role = "downstream"``, with no SQL edited."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from evalfarm.analysis.correlations import correlation_table
from evalfarm.plugins import ROLES, RegistryError, scorer_roles, task_kinds
from evalfarm.warehouse import Warehouse
from tests.test_correlations import add_evalrank, add_metric, add_model

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "plugins" / "evalfarm_toy_plugin"
MODELS = ["s1", "s2", "s3", "s4", "s5"]
MRR = [0.30, 0.40, 0.35, 0.50, 0.60]
MR = [0.60, 0.65, 0.70, 0.80, 0.90]  # the built-in downstream task: MRR's order but s2 / s3 (rho 0.9)
LENGTH = [0.50, 0.55, 0.75, 0.70, 0.95]  # the plug-in's benchmark: ranks 1 2 4 3 5 against 1 3 2 4 5 (rho 0.7)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch):
    """The toy plug-in's module, imported from its source folder (forgotten after the test)."""
    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setitem(sys.modules, "evalfarm_toy_plugin", None)
    del sys.modules["evalfarm_toy_plugin"]
    import evalfarm_toy_plugin

    return evalfarm_toy_plugin


def _warehouse(root: Path) -> Warehouse:
    """Five sentence models: EvalRank MRR, MR accuracy (the built-in downstream scorer) and the plug-in benchmark's
    accuracy, on the full data and on a sample (``max_train=``), as their scorers would write them."""
    wh = Warehouse(root).init()
    for i, m in enumerate(MODELS):
        add_model(wh, m, "sentence", "static")
        add_evalrank(wh, m, "evalrank-sentence", {"optimistic": MRR[i], "realistic": MRR[i]})
        add_metric(wh, m, "mr", "downstream", MR[i], metric="accuracy", variant="full")
        add_metric(wh, m, "toy-length-classes", "length-classes", LENGTH[i], metric="accuracy", variant="full")
        add_metric(wh, m, "toy-length-sample", "length-classes", LENGTH[i], metric="accuracy",
                   variant="max_train=8")  # fmt: skip
    return wh


def _columns(wh: Warehouse) -> dict[str, float]:
    rows = wh.query(
        "SELECT downstream_task, spearman FROM correlations WHERE intrinsic_task = 'evalrank-sentence' "
        "AND NOT excludes_postprocessed AND ties = 'optimistic'"
    ).to_pylist()
    return {r["downstream_task"]: r["spearman"] for r in rows}


def test_every_built_in_scorer_declares_a_role() -> None:
    roles = scorer_roles()
    assert set(roles.values()) <= set(ROLES)
    assert roles["downstream"] == "downstream" and roles["evalrank"] == "intrinsic"
    assert {s for s, r in roles.items() if r == "diagnostic"} == {"ag2016", "defsent", "geometry", "heros"}


def test_a_second_downstream_benchmark_joins_the_correlations_by_its_role(tmp_path, toy) -> None:
    task_kinds.register(toy.LengthClasses)
    wh = _warehouse(tmp_path / "wh")
    assert wh.query("SELECT role FROM scorer_roles WHERE scorer = 'length-classes'").to_pylist() == [
        {"role": "downstream"}
    ]
    columns = _columns(wh)
    assert columns["mr"] == pytest.approx(0.9)
    assert columns["toy-length-classes"] == pytest.approx(0.7)  # squared rank differences 6: 1 - 6 * 6 / 120
    intrinsic = wh.query("SELECT DISTINCT intrinsic_scorer FROM correlations").to_pylist()
    assert intrinsic == [{"intrinsic_scorer": "evalrank"}]  # the benchmark is a column, never a row
    table = correlation_table(wh, level="sentence")
    assert table.columns == ["mr (full)", "toy-length-classes (full)", "toy-length-sample (max_train=8) [sample]"]
    sample = wh.query("SELECT task, sample FROM board_variants WHERE scorer = 'length-classes' ORDER BY task")
    assert sample.to_pylist() == [
        {"task": "toy-length-classes", "sample": False},
        {"task": "toy-length-sample", "sample": True},  # a max_train= variant of a downstream task: labelled
    ]


def test_without_its_role_the_same_numbers_would_be_an_intrinsic_evaluator(tmp_path, toy) -> None:
    """The control: the plug-in's scorer registered without the declaration (the default role) is an intrinsic
    row of the correlations, not a column: the role, not a scorer name in SQL, decides."""

    class Undeclared(toy.LengthClasses):
        role = "intrinsic"

    task_kinds.register(Undeclared)
    wh = _warehouse(tmp_path / "wh")
    assert "toy-length-classes" not in _columns(wh)
    rows = wh.query("SELECT DISTINCT intrinsic_scorer FROM correlations ORDER BY 1").to_pylist()
    assert rows == [{"intrinsic_scorer": "evalrank"}, {"intrinsic_scorer": "length-classes"}]


def test_a_role_outside_the_three_is_refused(toy) -> None:
    class Misdeclared(toy.LengthClasses):
        role = "benchmark"

    with pytest.raises(RegistryError, match="role 'benchmark'.*intrinsic, downstream, diagnostic"):
        task_kinds.register(Misdeclared)


def test_no_core_view_or_report_names_a_scorer_to_know_its_role() -> None:
    """The core views and the report ask ``scorer_role(...)``: a literal ``scorer = 'downstream'`` (or ``<>``) is
    a second place that knows which scorer is downstream. EvalRank's own board lives with its kind
    (evalfarm/scorers/evalrank.sql), not in sql/."""
    literal = re.compile(r"scorer\s*(=|<>|!=|==)\s*['\"](downstream|evalrank)['\"]")
    found = [
        f"{p.relative_to(REPO)}:{n}"
        for p in [*sorted((REPO / "sql").glob("*.sql")), REPO / "evalfarm" / "analysis" / "report.py"]
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []
    assert literal.search("WHERE scorer = 'downstream'")  # the check bites


def test_role_of_a_scorer_no_longer_registered_is_intrinsic(tmp_path) -> None:
    """Numbers of a scorer that is no longer installed keep the role they had before roles existed: intrinsic."""
    wh = Warehouse(tmp_path / "wh").init()
    add_metric(wh, "s1", "gone", "gone-scorer", 0.5, metric="accuracy")
    assert wh.query("SELECT scorer_role('gone-scorer') AS r").to_pylist() == [{"r": "intrinsic"}]
