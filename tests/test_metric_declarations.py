"""Every metric declared once (evalfarm/metrics.py): what a scorer can emit is declared, stored rows take their
direction from the declaration, the views order by it, and schema version 4 corrects what older versions stored.

The guard that every emittable metric is declared reads the scorers' source (each ``MetricRow(...)`` call's metric:
a literal, a loop over a dict literal, or one of the few names computed elsewhere, each listed with where its
names come from); a planted undeclared metric in a temporary module makes it fail. The real cases of every task
kind (tests/support/task_kind_contract.py) check the same of the rows a run writes, values within range.
"""

from __future__ import annotations

import ast
import json
import math
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
import pytest

from benchmarks import compare_warehouses
from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import HITS_PATTERN, METRICS, MetricInfo, UndeclaredMetric, declaration, lookup
from evalfarm.plugins import task_kinds
from evalfarm.ranking import rank_metrics
from evalfarm.scorers import metric_info, scorers
from evalfarm.scorers.base import MetricRow, Scorer, ScoreResult, TextVectors
from evalfarm.warehouse import SCHEMA_VERSION, Warehouse
from evalfarm.warehouse.current import CURRENT_ROWS_VERSION, check_split, current_findings, refresh_current
from evalfarm.warehouse.migrate import correct_directions, migrate
from evalfarm.warehouse.store import FORMAT_FILE

REPO = Path(__file__).resolve().parents[1]
SCORERS_DIR = REPO / "evalfarm" / "scorers"


# -- the guard: every metric a scorer can emit is declared --------------------------------------------------------
def _dict_keys(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return [k.value for k in node.keys]  # type: ignore[union-attr]
    return None


def _loop_keys(loop: ast.AST, name: str, assigned: dict[str, list[str]]) -> tuple[bool, list[str] | None]:
    """Whether ``loop`` (a ``for`` or a comprehension) binds ``name`` first in its target, and if it iterates over a
    dict literal's ``.items()`` (inline, or a name bound to one in the function), its keys."""
    for g in [loop] if isinstance(loop, ast.For) else getattr(loop, "generators", []):
        target = g.target.elts[0] if isinstance(g.target, ast.Tuple) and g.target.elts else g.target
        if not (isinstance(target, ast.Name) and target.id == name):
            continue
        it = g.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items":
            base = it.func.value
            return True, _dict_keys(base) or (assigned.get(base.id) if isinstance(base, ast.Name) else None)
        return True, None
    return False, None


def _emitted(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """(line, function, metric) of every ``MetricRow(...)`` in ``tree``; metric None where the name is computed
    (bound by a loop over something other than a dict literal)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assigned = {
            t.id: keys
            for a in ast.walk(fn)
            if isinstance(a, ast.Assign) and (keys := _dict_keys(a.value))
            for t in a.targets
            if isinstance(t, ast.Name)
        }
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "MetricRow" and call.args):
                continue
            first = call.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield call.lineno, fn.name, first.value
                continue
            keys = None
            node: ast.AST | None = call
            while isinstance(first, ast.Name) and node is not None and node is not fn:
                binds, keys = _loop_keys(node, first.id, assigned)
                if binds:
                    break
                node = parents.get(node)
            if keys:
                for key in keys:
                    yield call.lineno, fn.name, key
            else:
                yield call.lineno, fn.name, None


def _rank_metric_names() -> list[str]:
    return list(rank_metrics(np.array([1.0, 2.0, 4.0]), hits=(1, 3, 10, 100)))


def _classification_metric_names() -> list[str]:
    """The names ``ClassificationResult.metrics()`` can return (its dict literal and the keys it sets)."""
    tree = ast.parse((REPO / "evalfarm" / "classify" / "protocol.py").read_text(encoding="utf-8"))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "metrics")
    names = [k for n in ast.walk(fn) for k in (_dict_keys(n) or [])]
    names += [
        n.slice.value for n in ast.walk(fn) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
    ]
    return names


COMPUTED: dict[tuple[str, str], object] = {
    # (module, function) of a MetricRow whose metric is computed elsewhere -> where its names come from
    ("evalrank.py", "tie_policy_rows"): _rank_metric_names,  # evalfarm.ranking.rank_metrics
    ("defsent.py", "score"): _rank_metric_names,
    ("downstream.py", "score"): _classification_metric_names,  # ClassificationResult.metrics()
}


def emitted_metrics(folder: Path) -> tuple[dict[str, set[str]], list[str]]:
    """Metric names each module of ``folder`` can emit, and the computed sites :data:`COMPUTED` does not list."""
    out: dict[str, set[str]] = {}
    unknown = []
    for path in sorted(folder.glob("*.py")):
        for line, fn, metric in _emitted(ast.parse(path.read_text(encoding="utf-8"))):
            names = out.setdefault(path.name, set())
            if metric is not None:
                names.add(metric)
            elif (source := COMPUTED.get((path.name, fn))) is not None:
                names.update(source())  # type: ignore[operator]
            else:
                unknown.append(f"{path.name}:{line} ({fn})")
    return out, unknown


def _scorer_of_module(module: str) -> list[Scorer]:
    return [s for s in scorers().values() if type(s).__module__ == f"evalfarm.scorers.{module.removesuffix('.py')}"]


def undeclared(folder: Path) -> list[str]:
    emitted, unknown = emitted_metrics(folder)
    missing = [f"a computed metric name at {site}: list where its names come from in COMPUTED" for site in unknown]
    for module, names in emitted.items():
        owners = _scorer_of_module(module)
        for name in sorted(names):
            scoped = [getattr(s, "declared_metrics", {}) for s in owners] or [{}]
            if all(declaration(name, table) is None for table in scoped):
                missing.append(f"{module}: {name!r}")
    return missing


def test_every_metric_a_scorer_can_emit_is_declared() -> None:
    emitted, _ = emitted_metrics(SCORERS_DIR)
    assert {"mr", "mrr", "hits@1", "tie_rate", "oov_pair_rate", "n_background", "f1", "uniformity"} <= set().union(
        *emitted.values()
    )  # the scan finds the computed and the looped names too
    assert undeclared(SCORERS_DIR) == []


def test_the_guard_fails_on_a_planted_undeclared_metric(tmp_path: Path) -> None:
    (tmp_path / "planted.py").write_text(
        "def score(values):\n"
        "    rows = [MetricRow('mrr', 1.0), MetricRow('made_up_rate', 0.5)]\n"
        "    rows += [MetricRow(m, v) for m, v in {'n_pairs': 1.0, 'also_made_up': 2.0}.items()]\n"
        "    rows += [MetricRow(m, v) for m, v in values.items()]\n"
        "    return rows\n",
        encoding="utf-8",
    )
    got = undeclared(tmp_path)
    assert "planted.py: 'made_up_rate'" in got and "planted.py: 'also_made_up'" in got
    assert any("computed metric name at planted.py:4" in g for g in got)
    assert not any("'mrr'" in g or "'n_pairs'" in g for g in got)


def test_evaluate_refuses_a_metric_nothing_declares() -> None:
    class T(TaskSpec):
        kind: Literal["undeclared-test"] = "undeclared-test"

    class Undeclared(Scorer):
        name, version, task_spec, primary_metric = "undeclared-test", "1", T, "spearman"

        def score(self, task, data, vectors, params, *, device=None):
            return ScoreResult([MetricRow("spearman", 0.5), MetricRow("wobble", 1.0)])

    vectors = TextVectors("sentence", np.zeros((1, 2), np.float32), np.zeros(1, bool), None)
    with pytest.raises(UndeclaredMetric, match="scorer 'undeclared-test' emits metric 'wobble'"):
        Undeclared().evaluate(None, None, vectors, {})
    Undeclared.declared_metrics = MappingProxyType({"wobble": MetricInfo(None, 0, 2, "statistic", "score", "w")})
    rows = Undeclared().evaluate(None, None, vectors, {}).rows
    assert [(r.metric, r.primary) for r in rows] == [("spearman", True), ("wobble", False)]


# -- the declarations themselves ---------------------------------------------------------------------------------
def test_evalranks_metrics_have_their_true_direction() -> None:
    """The issue's finding: mr, tie_rate, oov_rate, oov_pair_rate, n_pairs and n_background were stored as
    higher-is-better."""
    got = {
        m: metric_info("evalrank", m).higher_is_better
        for m in ("mrr", "hits@1", "hits@10", "mr", "tie_rate", "oov_rate", "oov_pair_rate", "n_pairs", "n_background")
    }
    assert got == {
        "mrr": True,
        "hits@1": True,
        "hits@10": True,
        "mr": False,
        "tie_rate": False,
        "oov_rate": False,
        "oov_pair_rate": False,
        "n_pairs": None,
        "n_background": None,
    }
    assert metric_info("evalrank", "hits@1").correlated and metric_info("evalrank", "hits@3").correlated
    assert not metric_info("evalrank", "hits@10").correlated and not metric_info("defsent", "hits@1").correlated
    assert metric_info("geometry", "uniformity").correlated and metric_info("geometry", "uniformity").direction is None


def test_every_primary_metric_but_geometrys_has_a_direction() -> None:
    for s in scorers().values():
        info = s.metric_info(s.primary_metric)
        assert (info.direction is None) == (s.name == "geometry"), s.name


def test_a_declaration_is_consistent() -> None:
    for name, info in METRICS.items():
        assert info.kind != "count" or (info.direction is None and info.aggregation == "sum"), name
        assert info.kind != "rate" or (0 <= info.low and info.high <= 1), name
        assert info.description, name
    with pytest.raises(ValueError, match="count has no direction"):
        MetricInfo("higher", 0, math.inf, "sum", "count", "pairs")
    with pytest.raises(ValueError, match="rate lies in"):
        MetricInfo("lower", 0, 2, "mean", "rate", "x")
    with pytest.raises(ValueError, match="direction"):
        MetricInfo("up", 0, 1, "mean", "score", "x")  # type: ignore[arg-type]
    assert declaration("hits@25") is METRICS[HITS_PATTERN] and declaration("hits@x") is None
    with pytest.raises(UndeclaredMetric, match="nothing declares"):
        lookup("wobble")


def test_the_views_read_the_same_declarations(tmp_path: Path) -> None:
    """metric_info and the macros give what the Python lookups give, for every declared name of every scorer; a
    metric nothing declares falls back to the row's stored direction."""
    con = Warehouse(tmp_path / "wh").init().connect()
    try:
        for s in scorers().values():
            names = [n if n != HITS_PATTERN else "hits@3" for n in [*METRICS, *s.declared_metrics]]
            for name in names:
                info = s.metric_info(name)
                got = con.sql(
                    f"SELECT metric_higher_is_better('{s.name}', '{name}', true) AS d, "
                    f"metric_correlated('{s.name}', '{name}', true) AS c"
                ).fetchall()
                assert got == [(info.higher_is_better, info.correlated)], (s.name, name)
        assert con.sql("SELECT metric_higher_is_better('retired', 'wobble', false)").fetchall() == [(False,)]
        assert con.sql("SELECT metric_correlated('retired', 'wobble', NULL)").fetchall() == [(True,)]
        rows = con.sql("SELECT scorer, metric, direction, kind FROM metric_info WHERE metric = 'mr'").fetchall()
        assert rows == [(None, "mr", "lower", "score")]
    finally:
        con.close()


# -- stored rows and the views -----------------------------------------------------------------------------------
class _LowerTask(TaskSpec):
    kind: Literal["lower-test"] = "lower-test"


class _Lower(Scorer):
    name, version, task_spec, primary_metric = "lower-test", "1", _LowerTask, "error"
    declared_metrics: ClassVar = MappingProxyType({"error": MetricInfo("lower", 0, math.inf, "mean", "score", "e")})


def _row(model: str, task: str, scorer: str, metric: str, value: float, hib: bool | None, **kw) -> dict:
    at = kw.pop("created_at", datetime(2026, 1, 1, tzinfo=UTC))
    return {
        "run_id": kw.pop("run_id", "r1"),
        "model": model,
        "task": task,
        "scorer": scorer,
        "subset": kw.pop("subset", "all"),
        "variant": kw.pop("variant", "cos"),
        "ties": kw.pop("ties", None),
        "metric": metric,
        "value": value,
        "is_primary": kw.pop("is_primary", False),
        "higher_is_better": hib,
        "fingerprint": kw.pop("fingerprint", f"{scorer}-{model}-{task}"),
        "spec_hash": f"h-{model}",
        "task_checksum": "c",
        "scorer_version": "1",
        "params": "{}",
        "created_at": at,
        "degenerate": False,
        "thin": False,
        **kw,
    }


def test_the_leaderboard_orders_by_the_declared_direction_not_the_stored_one(tmp_path: Path) -> None:
    """A lower-is-better primary metric stored as higher-is-better (what a version-3 warehouse holds): the board
    still puts the lowest first."""
    task_kinds.register(_Lower)  # the conftest fixture takes it out again
    wh = Warehouse(tmp_path / "wh").init()
    wh.write(
        "metrics",
        [
            _row(m, "t", "lower-test", "error", v, True, is_primary=True)
            for m, v in (("a", 0.3), ("b", 0.1), ("c", 0.2))
        ],
    )
    got = wh.query("SELECT model, position FROM leaderboard ORDER BY position").to_pylist()
    assert got == [{"model": "b", "position": 1}, {"model": "c", "position": 2}, {"model": "a", "position": 3}]


def test_a_written_unit_stores_each_metrics_declared_direction(tmp_path: Path) -> None:
    from evalfarm.execute import write_results
    from evalfarm.plan import Unit
    from evalfarm.scorers.evalrank import metrics_from_ranks

    s = task_kinds.get("evalrank")
    result = ScoreResult(metrics_from_ranks(np.array([1, 2, 5]), np.array([0, 1, 0]), (1, 3), "cos"))
    for r in result.rows:
        r.primary = r.metric == "mrr"
    wh = Warehouse(tmp_path / "wh").init()
    write_results(wh, "run", Unit("m", "evalrank-word", "evalrank", "word", "s", "c", "{}", "f" * 16), s, result)
    stored = {(r["metric"], r["higher_is_better"]) for r in wh.query("SELECT * FROM metrics").to_pylist()}
    assert stored == {
        ("mr", False),
        ("mrr", True),
        ("hits@1", True),
        ("hits@3", True),
        ("n_pairs", None),
        ("tie_rate", False),
    }


# -- schema version 4: the migration, row for row on a real Delta warehouse --------------------------------------
def _old_direction(scorer: str, metric: str) -> bool | None:
    """What a version-3 evalfarm stored: NULL for geometry's six descriptive metrics, else its scorer's one
    direction (True for every built-in scorer)."""
    return (
        None
        if scorer == "geometry"
        and metric in {"alignment", "uniformity", "anisotropy", "isotropy", "effective_rank", "hubness"}
        else True
    )


def _unit_rows(model: str, at: datetime, shift: float = 0.0) -> list[dict]:
    """One model's units as the scorers emit them (EvalRank's rank metrics under each tie policy and its counts,
    geometry, downstream, STS), stored with a version-3 evalfarm's directions."""
    from evalfarm.scorers.evalrank import metrics_from_ranks

    rows = []
    for r in metrics_from_ranks(np.array([1, 2, 7, 3]), np.array([0, 2, 0, 1]), (1, 3, 10), "cos"):
        rows.append(
            _row(
                model,
                "evalrank-word",
                "evalrank",
                r.metric,
                r.value + shift,
                _old_direction("evalrank", r.metric),
                ties=r.ties,
                is_primary=r.metric == "mrr",
                created_at=at,
            )
        )
    for metric, value in (("oov_rate", 0.1), ("oov_pair_rate", 0.2), ("n_background", 900.0)):
        rows.append(_row(model, "evalrank-word", "evalrank", metric, value, True, created_at=at))
    for metric, value in (("uniformity", -2.0), ("hubness", 1.5), ("n_items", 50.0), ("n_pairs", 40.0)):
        rows.append(
            _row(
                model,
                "geometry-word",
                "geometry",
                metric,
                value,
                _old_direction("geometry", metric),
                variant="raw",
                created_at=at,
            )
        )
    for metric, value in (("accuracy", 0.8), ("accuracy_std", 0.01), ("chosen_c", 1.0), ("n_test", 100.0)):
        rows.append(
            _row(
                model,
                "mr",
                "downstream",
                metric,
                value + shift,
                True,
                variant="full",
                is_primary=metric == "accuracy",
                created_at=at,
            )
        )
    rows.append(_row(model, "sts12", "sts", "spearman", 0.5 + shift, True, is_primary=True, created_at=at))
    rows.append(_row(model, "old-kind", "retired-plugin", "wobble", 3.0, False, created_at=at))  # nothing declares it
    return rows


def _all_rows(wh: Warehouse) -> pa.Table:
    parts = [wh.typed("metrics", wh.read_table(f.path)) for f in wh.tables.snapshot("metrics").files]
    return pa.concat_tables(parts)


def _by_row(t: pa.Table) -> list[tuple[tuple[str, ...], bool | None, str, str]]:
    """Each row: (every column but higher_is_better, higher_is_better, scorer, metric), in a canonical order."""
    cols = [c for c in t.column_names if c != "higher_is_better"]
    rows = t.to_pylist()
    keyed = [
        (tuple(json.dumps(r[c], default=str) for c in cols), r["higher_is_better"], r["scorer"], r["metric"])
        for r in rows
    ]
    return sorted(keyed, key=lambda k: k[0])


@pytest.fixture
def version3(tmp_path: Path) -> Warehouse:
    """A Delta warehouse as a version-3 evalfarm left it: current, superseded and pending files of the metrics
    table, every row with its scorer's one direction, version 3 declared."""
    wh = Warehouse(tmp_path / "wh").init()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i, model in enumerate(("glove", "fasttext", "bert")):
        wh.write("metrics", _unit_rows(model, t0 + timedelta(minutes=i)))
    wh.write("metrics", _unit_rows("glove", t0 + timedelta(hours=1), shift=0.01))  # a recomputation: supersedes
    refresh_current(wh)
    wh.write("metrics", _unit_rows("e5", t0 + timedelta(hours=2)))  # pending: committed since the refresh
    wh._put(wh._p(FORMAT_FILE), wh._format_body(CURRENT_ROWS_VERSION))
    assert wh.schema_version() == 3
    return wh


def test_migrating_version_3_corrects_every_stored_direction_row_for_row(version3: Warehouse) -> None:
    wh = version3
    before = _all_rows(wh)
    kinds_before = check_split(wh.tables.snapshot("metrics").files, wh.tables.folder("metrics"))
    assert kinds_before["current"] and kinds_before["superseded"] and kinds_before["pending"]
    board_before = wh.query("SELECT * FROM leaderboard").to_pylist()
    corr_before = wh.query("SELECT * FROM correlation_pairs ORDER BY ALL").to_pylist()
    copy = Path(wh.base).parent / "before"
    shutil.copytree(wh.base, copy)

    result = migrate(wh.uri)

    assert Warehouse(wh.uri).schema_version() == SCHEMA_VERSION == 4
    after = _all_rows(Warehouse(wh.uri))
    assert after.num_rows == before.num_rows
    old, new = _by_row(before), _by_row(after)
    assert [k[0] for k in old] == [k[0] for k in new]  # every other column of every row unchanged
    changed: Counter[str] = Counter()
    for (_, was, scorer, metric), (_, now, _, _) in zip(old, new, strict=True):
        info = declaration(
            metric, getattr(task_kinds.get(scorer), "declared_metrics", None) if scorer in task_kinds.names() else None
        )
        want = was if info is None else info.higher_is_better  # an undeclared metric keeps what it stored
        assert now is want, (scorer, metric, was, now)
        if was is not now:
            changed[f"{scorer}/{metric}: {was} -> {now}"] += 1
    assert result.directions == dict(sorted(changed.items()))
    n_models_rows = 5  # glove twice, fasttext, bert, e5
    assert result.directions["evalrank/mr: True -> False"] == 3 * n_models_rows  # one row per tie policy
    assert result.directions["evalrank/n_background: True -> None"] == n_models_rows
    assert result.directions["geometry/n_items: True -> None"] == n_models_rows
    assert not any(k.startswith(("evalrank/mrr", "sts/", "retired-plugin/", "downstream/accuracy:")) for k in changed)
    after_wh = Warehouse(wh.uri)
    assert check_split(after_wh.tables.snapshot("metrics").files, after_wh.tables.folder("metrics")) == kinds_before
    assert current_findings(after_wh) == []
    assert after_wh.query("SELECT * FROM leaderboard").to_pylist() == board_before
    assert after_wh.query("SELECT * FROM correlation_pairs ORDER BY ALL").to_pylist() == corr_before
    assert correct_directions(after_wh) == {}  # nothing left to correct
    # benchmarks/compare_warehouses.py (the check that every number and view is unchanged) accepts the corrected
    # directions, and nothing else
    compared = compare_warehouses.compare_metrics(str(copy), wh.uri)
    assert compared["identity_differs"] == {} and compared["value_differs"] == []
    # the metrics view's rows: the current computations (glove's older one is superseded)
    assert compared["directions_corrected"].keys() == result.directions.keys()
    assert compared["directions_corrected"]["evalrank/mr: True -> False"] == 3 * 4
    views = compare_warehouses.compare_views(
        compare_warehouses.view_rows(str(copy)), compare_warehouses.view_rows(wh.uri)
    )
    assert views["differs"] == [] and views["views"]["metrics"]["directions_corrected"] > 0
    with pytest.raises(ValueError, match="already in the Delta layout"):
        migrate(wh.uri)


def test_a_refresh_declares_version_3_only(version3: Warehouse) -> None:
    """The end of a run refreshes the current rows: that is version 3's work, not version 4's (the directions are
    the migration's)."""
    wh = version3
    wh.write("metrics", _unit_rows("late", datetime(2026, 2, 1, tzinfo=UTC)))
    assert refresh_current(wh) is not None
    assert wh.schema_version() == 3


def test_verify_deep_holds_each_number_to_its_declared_range() -> None:
    """``evalfarm verify --deep`` reads the ranges from the declarations (not from the metric's name): AG2016's
    score above 1 and a geometry isotropy above 1 are caught, a plug-in's declared range is honoured, and a metric
    nothing declares is checked for infinity only."""
    from evalfarm.warehouse.verify import consistency_findings

    task_kinds.register(_Lower)

    def row(scorer: str, metric: str, value: float) -> dict:
        return {"model": "m", "task": "t", "fingerprint": f"{scorer}-{metric}", "scorer": scorer, "subset": "all",
                "variant": "cos", "ties": None, "metric": metric, "value": value}  # fmt: skip

    rows = [row("ag2016", "ag_score", 1.2), row("geometry", "isotropy", 1.5), row("geometry", "hubness", -3.0),
            row("lower-test", "error", -0.5), row("lower-test", "error", 7.0), row("retired", "wobble", -9.0),
            row("retired", "wobble2", math.inf), row("evalrank", "mr", 0.5)]  # fmt: skip
    found = {(f.detail.split(": ", 1)[0], f.detail.split(": ", 1)[1]) for f in consistency_findings(rows)}
    assert found == {
        ("ag2016/cos", "ag_score 1.2 is outside [0, 1]"),
        ("geometry/cos", "isotropy 1.5 is outside [0, 1]"),
        ("lower-test/cos", "error -0.5 is outside [0, ∞]"),
        ("retired/cos", "wobble2 is inf"),
        ("evalrank/cos", "mr 0.5 is outside [1, ∞]"),
    }


@pytest.mark.parametrize("attribute", ["higher_is_better", "descriptive_metrics", "correlated_metrics"])
def test_a_scorer_declaring_a_direction_the_old_way_is_refused(attribute: str) -> None:
    """A plug-in written before the declarations (``higher_is_better = False`` on the scorer) would have its
    direction ignored in silence: it is refused, naming what to declare instead."""
    with pytest.raises(TypeError, match=f"declares {attribute}: a direction is declared per metric now"):
        type("OldStyle", (Scorer,), {attribute: False})


def test_warehouse_info_names_the_migration_of_a_version_3_warehouse(version3: Warehouse) -> None:
    from evalfarm.warehouse.migrate import layout_note

    assert "evalfarm warehouse migrate" in layout_note(version3)["hint"]
    migrate(version3.uri)
    assert "hint" not in layout_note(Warehouse(version3.uri))


def test_the_cli_upgrades_a_version_3_warehouse_and_says_what_it_corrected(version3: Warehouse) -> None:
    from typer.testing import CliRunner

    from evalfarm.cli import app

    out = CliRunner().invoke(app, ["warehouse", "migrate", version3.uri])
    assert out.exit_code == 0, out.output
    assert f"upgraded {version3.uri} to schema version 4" in out.output
    assert "direction corrected: evalrank/mr: True -> False (15 rows)" in out.output
