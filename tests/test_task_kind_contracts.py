"""Every registered task kind keeps the contract of tests/support/task_kind_contract.py, and a task kind is one module.

The template runs over ``task_kinds.names()`` (built-in kinds and installed plug-ins alike); each kind also needs a
concrete case in ``task_kind_contract.CASES`` (a small real task of catalog/tasks.yaml), which the meta-test checks.
The rest shows what the framework does with a kind's declarations: a toy kind with its own detail table and view,
declared in one class, lands in the warehouse; clashes and undeclared things are refused with both names.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pytest
from pydantic import create_model

from evalfarm.catalog.specs import TaskSpec
from evalfarm.execute import write_results
from evalfarm.metrics import MetricInfo
from evalfarm.plan import Unit
from evalfarm.plugins import TASK_KIND_MEMBERS, RegistryError, TaskKind, protocol_members, task_kinds
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, Scorer, ScoreResult, TextVectors
from evalfarm.warehouse import SCHEMAS, Warehouse, unit_tables
from tests.support import task_kind_contract as contract
from tests.support.warehouse_files import unit_file

KINDS = task_kinds.names()


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_kind_declares_what_the_framework_reads(kind):
    contract.check_declarations(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_detail_tables_are_per_unit_tables(kind):
    contract.check_detail_schemas(kind)
    assert set(contract.scorer(kind).detail_schemas) <= set(unit_tables()) <= set(SCHEMAS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_views_of_a_kind_work_on_an_empty_warehouse(kind, tmp_path):
    contract.check_views_on_an_empty_warehouse(kind, tmp_path / "wh")


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(k, marks=[pytest.mark.slow] if contract.CASES[k].slow else [])
        for k in KINDS
        if k in contract.CASES
    ],
)
def test_a_real_task_of_the_kind_scores_into_the_warehouse(kind, tmp_path):
    contract.run_case(kind, tmp_path / "wh")


def test_every_registered_task_kind_has_a_concrete_case():
    missing = sorted(set(task_kinds.names()) - set(contract.CASES))
    assert not missing, f"add a case for task kind(s) {missing} to tests/support/task_kind_contract.py CASES"
    assert set(contract.CASES) <= set(task_kinds.names()), "a case for a kind that is not registered"


def test_the_evalrank_views_come_from_its_scorer():
    assert contract.kind_views("evalrank") == (
        "ranks_history",
        "current_evalrank",
        "ranks",
        "neighbours",
        "hardest_pairs",
        "evalrank",  # the EvalRank board: the kind's own view, beside its detail views (issue 42)
    )
    assert set(contract.scorer("evalrank").detail_schemas) == {"ranks", "neighbours"}


# -- a kind with a detail table, in one class ---------------------------------------------------------------------
NORMS = pa.schema(
    [
        ("run_id", pa.string()),
        ("model", pa.string()),
        ("task", pa.string()),
        ("text", pa.string()),
        ("norm", pa.float64()),
        ("fingerprint", pa.string()),
    ]
)
NORMS_VIEW = """
-- toy_norms: each text's vector norm, of every unit written
CREATE OR REPLACE VIEW toy_norms AS
SELECT model, task, text, norm
FROM read_parquet('{root}/tables/toy_norms/**/*.parquet', union_by_name = true, hive_partitioning = false)
WHERE task IS NOT NULL;
"""


def _toy_kind(
    kind: str = "toy-norms",
    *,
    schemas: dict[str, pa.Schema] | None = None,
    views: str = NORMS_VIEW,
    primary: Any = None,
) -> type[Scorer]:
    toy_task = create_model("ToyTask", __base__=TaskSpec, kind=(Literal[kind], kind))  # type: ignore[valid-type]

    class ToyNorms(Scorer):
        name = kind
        version = "1"
        task_spec = toy_task
        primary_metric = "mean_norm"
        declared_metrics: ClassVar = {
            "mean_norm": MetricInfo("higher", 0.0, float("inf"), "mean", "score", "mean vector norm"),
            "max_norm": MetricInfo(None, 0.0, float("inf"), "statistic", "score", "largest vector norm"),
        }
        description = "a toy: the mean vector norm, and each text's norm in a detail table"
        detail_schemas: ClassVar = {"toy_norms": NORMS} if schemas is None else schemas

        def load(self, task):
            return None

        def score(self, task, data, vectors, params, *, device=None):
            norms = np.linalg.norm(vectors.emb, axis=1)
            rows = [MetricRow("mean_norm", float(norms.mean())), MetricRow("max_norm", float(norms.max()))]
            details = {"toy_norms": pa.table({"text": ["a", "b"], "norm": norms.astype(np.float64)})}
            return ScoreResult(rows, details)

        if primary is not None:
            is_primary = primary

    ToyNorms.views = views
    return register(ToyNorms)


def _write_toy_unit(wh: Warehouse, scorer: Scorer) -> ScoreResult:
    vectors = TextVectors("sentence", np.array([[3.0, 4.0], [0.0, 1.0]], np.float32), np.zeros(2, bool))
    result = scorer.evaluate(None, None, vectors, {})
    write_results(wh, "run", Unit("m", "norms", scorer.name, "sentence", "s", "c", "{}", "f" * 16), scorer, result)
    return result


def test_a_scorer_with_a_detail_table_and_its_view_is_one_module(tmp_path):
    _toy_kind()
    assert "toy_norms" in unit_tables() and SCHEMAS["toy_norms"] == NORMS
    wh = Warehouse(tmp_path / "wh").init()
    assert wh.query("SELECT count(*) AS n FROM toy_norms").to_pylist() == [{"n": 0}]  # its view, before any row
    _write_toy_unit(wh, task_kinds.get("toy-norms"))
    assert wh.tables.schema("toy_norms").names == NORMS.names  # its table, created by its first write
    assert wh.query("SELECT text, norm FROM toy_norms ORDER BY text").to_pylist() == [
        {"text": "a", "norm": 5.0},
        {"text": "b", "norm": 1.0},
    ]
    assert wh.query("SELECT metric, value FROM leaderboard").to_pylist() == [{"metric": "mean_norm", "value": 3.0}]
    # its table is part of the unit: a damaged file of it is quarantined and the unit's metrics rows go with it,
    # so the next run computes the unit again
    unit = Unit("m", "norms", "toy-norms", "sentence", "s", "c", "{}", "f" * 16)
    assert wh.done([unit]) == [True]
    detail = unit_file(wh, "toy_norms", "m", "norms")
    detail.write_bytes(b"PAR1 cut short")
    moved = [q.path.split("/tables/")[1].split("/")[0] for q in wh.scan()]
    assert moved == ["toy_norms"] and wh.done([unit]) == [False]
    assert wh.query("SELECT count(*) AS n FROM metrics").to_pylist() == [{"n": 0}]


def test_the_primary_flag_comes_from_the_declaration(tmp_path):
    _toy_kind(primary=lambda self, row, task, data: True)  # an is_primary that accepts every row
    result = _write_toy_unit(Warehouse(tmp_path / "wh").init(), task_kinds.get("toy-norms"))
    assert [(r.metric, r.primary) for r in result.rows] == [("mean_norm", True), ("max_norm", False)]
    with pytest.raises(TypeError):
        MetricRow("mean_norm", 1.0, primary=True)  # type: ignore[call-arg]  # not the scorer's to set


def test_a_view_defined_twice_is_an_error_naming_both(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    _toy_kind(views="CREATE OR REPLACE VIEW leaderboard AS SELECT 1 AS x;")
    with pytest.raises(RegistryError, match=r"view 'leaderboard' is defined by sql/06_leaderboard\.sql and by task "
                       r"kind 'toy-norms' \(.*ToyNorms\)"):  # fmt: skip
        wh.connect()


def test_two_kinds_cannot_define_one_view(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    _toy_kind(schemas={})
    _toy_kind("toy-other", schemas={})
    with pytest.raises(RegistryError, match="view 'toy_norms' is defined by task kind 'toy-norms' .* and by task kind "
                       "'toy-other'"):  # fmt: skip
        wh.connect()


def test_a_kinds_views_are_create_view_statements_only(tmp_path):
    wh = Warehouse(tmp_path / "wh").init()
    _toy_kind(views=NORMS_VIEW + f"\nCOPY (SELECT 1) TO '{tmp_path}/out.csv';")
    with pytest.raises(RegistryError, match="toy-norms.*a COPY statement; only CREATE VIEW is allowed"):
        wh.connect()
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    ("schemas", "message"),
    [
        ({"metrics": NORMS}, "declares detail table 'metrics', a core warehouse table"),
        ({"toy_norms": NORMS.remove(NORMS.get_field_index("fingerprint"))}, "lacks column.s. fingerprint"),
    ],
)
def test_a_detail_table_must_be_new_and_per_unit(tmp_path, schemas, message):
    _toy_kind(schemas=schemas)
    with pytest.raises(RegistryError, match=f"task kind 'toy-norms' .*{message}"):
        Warehouse(tmp_path / "wh").init()


def test_two_kinds_cannot_declare_one_detail_table():
    _toy_kind()
    _toy_kind("toy-other", views="")
    with pytest.raises(RegistryError, match="two task kinds declare detail table 'toy_norms': task kind 'toy-norms'"):
        unit_tables()


def test_a_detail_table_a_scorer_does_not_declare_is_not_written(tmp_path):
    _toy_kind(schemas={})
    wh = Warehouse(tmp_path / "wh").init()
    with pytest.raises(ValueError, match="detail table 'toy_norms', which it does not declare"):
        _write_toy_unit(wh, task_kinds.get("toy-norms"))
    assert wh.done([Unit("m", "norms", "toy-norms", "sentence", "s", "c", "{}", "f" * 16)]) == [False]  # not done
    with pytest.raises(RegistryError, match="a view reads '{root}/tables/toy_norms/.*not a warehouse table"):
        wh.connect()  # its views read a table it does not declare: said, not an empty table read in silence


# -- one contract: the TaskKind Protocol is what registration checks (issue 54) -------------------------------------
def test_registration_checks_the_members_of_the_protocol() -> None:
    """The members registration requires are read from the Protocol itself, not from a second hand-written list:
    everything the framework reads below the scorer layer, ``score`` and the detail tables and views included."""
    assert TASK_KIND_MEMBERS == protocol_members(TaskKind)
    assert {"score", "texts", "views", "detail_schemas", "variant_label", "role", "task_kind"} <= set(
        TASK_KIND_MEMBERS
    )
    declared = {m for m in TASK_KIND_MEMBERS if hasattr(Scorer, m) or m in Scorer.__annotations__}
    assert declared == set(TASK_KIND_MEMBERS), "Scorer declares the whole contract (a subclass sets name, version ...)"
    for kind in KINDS:
        assert all(hasattr(contract.scorer(kind), m) for m in TASK_KIND_MEMBERS), kind


def _duck(kind: str, *, without: str | None = None) -> type:
    """A duck-typed scorer (no Scorer base): every TaskKind member copied from a toy Scorer, but ``without``."""
    saved = task_kinds.snapshot()
    toy = _toy_kind(kind)
    task_kinds.restore(saved)  # the toy only lends its members: the duck registers under its kind
    members = {m: inspect.getattr_static(toy, m) for m in TASK_KIND_MEMBERS if m != without}
    return type("Duck", (), members)


@pytest.mark.parametrize("member", TASK_KIND_MEMBERS)
def test_a_scorer_lacking_a_member_of_the_protocol_is_refused_naming_it(member: str) -> None:
    duck = _duck(f"toy-duck-{member.replace('_', '-')}", without=member)
    with pytest.raises(RegistryError, match=rf"lacks ([a-z_]+, )*{member}\b.* of the TaskKind contract"):
        task_kinds.register(duck)


def test_a_duck_typed_scorer_with_the_whole_protocol_registers() -> None:
    duck = _duck("toy-duck")
    assert task_kinds.register(duck) is duck
    assert task_kinds.get("toy-duck").primary_metric == "mean_norm"
