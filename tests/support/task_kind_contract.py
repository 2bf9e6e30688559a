"""The contract every task kind keeps, as checks that take a kind's name (PyKEEN's MetaTestCase idea).

``tests/test_task_kind_contracts.py`` runs each check over every kind in ``task_kinds.names()``, so a kind added as a
module (or installed as a plug-in) is checked without a line of test code, except its concrete case: a small real
task of ``catalog/tasks.yaml`` in :data:`CASES`. A registered kind without one fails the meta-test.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from evalfarm.catalog.registry import load_catalog
from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import MetricInfo
from evalfarm.options import RunOptions
from evalfarm.plugins import task_kinds
from evalfarm.scorers.base import Scorer, ScoreResult, TextVectors
from evalfarm.warehouse import SCHEMAS, UNIT_COLUMNS, Warehouse, view_sources


@dataclass(frozen=True)
class Case:
    """A concrete case of a task kind: a task id of catalog/tasks.yaml (its real files under EVALFARM_DATA), scored
    on toy vectors under ``options``; ``slow``: over ~1 s on 2 shared cores (left out of the fast tier)."""

    task: str
    options: RunOptions = field(default_factory=RunOptions)
    slow: bool = False


CASES: dict[str, Case] = {
    # the real word pool (22,207 items, 5,514 pairs): ranks and neighbours of the cos pass (~4 s)
    "evalrank": Case("evalrank-word", RunOptions(similarities=("cos",)), slow=True),
    "word-similarity": Case("wordsim-mc-30"),
    "sts": Case("sts12"),  # five subsets: the primary number is the weighted mean's Spearman only
    "similarity-bands": Case("sts-bands"),
    "downstream": Case("sick-e"),  # pair features, a dev split: its seeded 1,000-row training sample
    "ag2016": Case("ag2016-word"),  # the 11 Hebrew triplet files, 5,723 comparisons
    # the real word pool's 22,207 items: a FAISS k-NN over all of them, an eigendecomposition, an SVD (~2 s)
    "geometry": Case("geometry-word", slow=True),
    # generated data (evalfarm data build): built into the cache on first use (HEROS ~1 min: spaCy parses)
    "heros": Case("heros-goemotions", slow=True),
    "defsent": Case("defsent-wordnet", slow=True),
}


def scorer(kind: str) -> Scorer:
    return task_kinds.get(kind)


def kind_views(kind: str) -> tuple[str, ...]:
    """The views task kind ``kind`` adds (its ``Scorer.views``)."""
    origin = f"task kind {kind!r} ("
    return next((s.views for s in view_sources() if s.origin.startswith(origin)), ())


# -- declarations ------------------------------------------------------------------------------------------------
def check_declarations(kind: str) -> None:
    """Name, version, spec model (``kind: Literal[<kind>]`` defaulting to the registry key), primary metric,
    direction and description: declared, and of the right types."""
    s = scorer(kind)
    assert isinstance(s, Scorer), f"{kind}: {type(s)} is not a Scorer"
    for attr in ("name", "version", "primary_metric", "description"):
        value = getattr(s, attr, None)
        assert isinstance(value, str) and value.strip(), f"{kind}: {attr} must be a non-empty string, got {value!r}"
    s.metric_info(s.primary_metric)  # declared (evalfarm/metrics.py or the scorer's declared_metrics)
    for name, info in s.declared_metrics.items():
        assert isinstance(info, MetricInfo), f"{kind}: declared_metrics[{name!r}] is not a MetricInfo"
    spec = s.task_spec
    assert isinstance(spec, type) and issubclass(spec, TaskSpec), f"{kind}: task_spec must subclass TaskSpec"
    field_ = spec.model_fields.get("kind")
    assert field_ is not None, f"{kind}: {spec.__name__} has no `kind` field"
    assert typing.get_origin(field_.annotation) is typing.Literal, f"{kind}: `kind` must be a Literal"
    assert typing.get_args(field_.annotation) == (kind,), (
        f"{kind}: `kind` is {field_.annotation}, not Literal[{kind!r}]"
    )
    assert field_.default == kind == s.task_kind, f"{kind}: `kind` defaults to {field_.default!r}"


def check_detail_schemas(kind: str) -> None:
    """Each detail table is a pyarrow schema with the per-unit columns the executor fills and the scan checks."""
    for table, schema in scorer(kind).detail_schemas.items():
        assert isinstance(schema, pa.Schema), f"{kind}: detail table {table!r} is not a pyarrow.Schema"
        missing = [c for c in UNIT_COLUMNS if c not in schema.names]
        assert not missing, f"{kind}: detail table {table!r} lacks {missing}"
        for column in UNIT_COLUMNS:
            assert schema.field(column).type == pa.string(), f"{kind}: {table}.{column} must be a string"


def check_views_on_an_empty_warehouse(kind: str, root: Path) -> None:
    """The kind's views exist on a new warehouse (its tables not written yet read as empty) and each one answers."""
    wh = Warehouse(root).init()
    for table, schema in scorer(kind).detail_schemas.items():  # what its first write creates the table with
        assert SCHEMAS[table] == schema, f"{kind}: the warehouse does not know table {table} as declared"
    con = wh.connect()
    try:
        for view in kind_views(kind):
            assert con.sql(f"SELECT count(*) FROM {view}").fetchall() == [(0,)], f"{kind}: view {view} not empty"
    finally:
        con.close()


# -- a concrete case ---------------------------------------------------------------------------------------------
def toy_vectors(level: str, texts: list[str], seed: int = 0) -> TextVectors:
    """Seeded Gaussian vectors (d = 8) for every text, none out of vocabulary; a word model's statistics."""
    from evalfarm.preprocess import vocab_stats

    emb = np.random.default_rng(seed).normal(size=(len(texts), 8)).astype(np.float32)
    oov = np.zeros(len(texts), dtype=bool)
    return TextVectors(level, emb, oov, vocab_stats(emb) if level == "word" else None)  # type: ignore[arg-type]


def run_case(kind: str, root: Path) -> ScoreResult:
    """Load the case's real task, score it on toy vectors as the executor does, write the unit into a warehouse at
    ``root`` and check what a unit of the kind must give: rows, exactly the primary metric marked primary, finite
    values, declared detail tables only, and its numbers and detail rows visible through the views."""
    from evalfarm.execute import write_results
    from evalfarm.plan import Unit
    from evalfarm.quality import assess

    case = CASES[kind]
    task = load_catalog("tasks").task(case.task)
    assert task.kind == kind, f"case {case.task} is a {task.kind} task, not {kind}"
    s = scorer(kind)
    data = s.load_for(task, case.options)
    texts = list(s.texts(data))
    assert texts and all(isinstance(t, str) for t in texts), f"{kind}: texts() must list the task's strings"
    params = s.params(task, case.options)
    vectors = toy_vectors(task.level, texts)
    result = s.evaluate(task, data, vectors, json.loads(json.dumps(params)), device="cpu")
    check_rows(kind, result)
    assert set(result.details) <= set(s.detail_schemas), f"{kind}: undeclared detail tables {set(result.details)}"
    unit = Unit("toy", task.id, s.name, task.level, "spec", "checksum", json.dumps(params), "f" * 16)
    quality = assess(vectors.emb, vectors.oov)
    result.details["quality"] = quality.table()
    wh = Warehouse(root).init()
    write_results(wh, "run", unit, s, result, quality=quality)
    check_in_warehouse(kind, wh, result)
    return result


def check_rows(kind: str, result: ScoreResult) -> None:
    s = scorer(kind)
    assert result.rows, f"{kind}: no metric rows"
    primary = {r.metric for r in result.rows if r.primary}
    expected = _board_metrics(s)
    assert primary == expected, f"{kind}: primary rows are {primary}, not {expected}"
    bad = [(r.metric, r.subset, r.variant, r.value) for r in result.rows if not np.isfinite(r.value)]
    assert not bad, f"{kind}: non-finite values {bad[:5]}"
    outside = [(r.metric, r.subset, r.value) for r in result.rows if not s.metric_info(r.metric).within(r.value)]
    assert not outside, f"{kind}: values outside their metric's declared range {outside[:5]}"


def _board_metrics(s: Scorer) -> set[str]:
    """The metrics a unit of ``s`` puts on the leaderboard: its primary metric, unless that has no direction
    (geometry: nothing on the board)."""
    return set() if s.metric_info(s.primary_metric).direction is None else {s.primary_metric}


def check_in_warehouse(kind: str, wh: Warehouse, result: ScoreResult) -> None:
    s = scorer(kind)
    stored = wh.query("SELECT metric, is_primary, higher_is_better FROM metrics").to_pylist()
    assert len(stored) == len(result.rows)
    assert sum(r["is_primary"] for r in stored) == sum(r.primary for r in result.rows)
    for r in stored:  # each row's direction is its metric's declared one (NULL: none)
        want = s.metric_info(r["metric"]).higher_is_better
        assert r["higher_is_better"] is want, f"{kind}: {r['metric']} stored higher_is_better {r['higher_is_better']}"
    board = wh.query("SELECT DISTINCT metric FROM leaderboard").to_pylist()
    assert board == [{"metric": m} for m in _board_metrics(s)], f"{kind}: the leaderboard shows {board}"
    shown = {v: wh.query(f"SELECT count(*) AS n FROM {v}").to_pylist()[0]["n"] for v in kind_views(kind)}
    if any(t.num_rows for name, t in result.details.items() if name in s.detail_schemas):
        assert any(shown.values()), f"{kind}: the unit's detail rows are in none of its views {shown}"
