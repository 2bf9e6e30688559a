"""Issue 41: a table's comparisons in the warehouse (evalfarm/analysis/comparison_tables.py, sql/13_comparisons.sql):
stored through the ``correlation_diff`` table, current only while both cells' numbers are, Holm across the table in SQL
equal to Holm in Python, and the same numbers as the statistics computed by hand on the same models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalfarm import api
from evalfarm.analysis.comparison_tables import (
    COMPARISON_METHOD,
    comparison_table,
    format_comparison,
    power_text,
    refresh_comparisons,
)
from evalfarm.analysis.comparisons import holm, paired_difference, steiger_z, williams_t
from evalfarm.warehouse import Warehouse, now
from tests.test_correlations import add_accuracy, add_evalrank, add_metric, add_model


def _zoo(wh: Warehouse, n: int = 16, *, seed: int = 0, skip: str | None = None) -> dict[str, np.ndarray]:
    """n sentence models: EvalRank tracks MR closely, `sts-twin` scores exactly as EvalRank (its difference is 0),
    `sts-noise` is unrelated to MR, `sts-near` is EvalRank plus noise. The numbers, by name, in model order."""
    rng = np.random.default_rng(seed)
    mr = rng.uniform(0.6, 0.9, size=n)
    er = mr + rng.normal(0, 0.02, size=n)
    vals = {
        "mr": mr,
        "sst2": mr + rng.normal(0, 0.05, size=n),
        "evalrank": er,
        "sts-twin": er.copy(),
        "sts-noise": rng.uniform(0, 1, size=n),
        "sts-near": er + rng.normal(0, 0.05, size=n),
    }
    with wh.deferring():  # one commit per table, not one per row (the rows are the same)
        _add_zoo(wh, vals, n, skip)
    return vals


def _add_zoo(wh: Warehouse, vals: dict[str, np.ndarray], n: int, skip: str | None) -> None:
    er, mr = vals["evalrank"], vals["mr"]
    for i in range(n):
        m = f"m{i:02d}"
        add_model(wh, m, "sentence", "static")
        add_evalrank(wh, m, "evalrank-sentence", {"optimistic": float(er[i]), "realistic": float(er[i] - 0.01)})
        for task in ("sts-twin", "sts-noise", "sts-near"):
            if skip == task and i == 0:
                continue  # one model without this number: the comparison is over the models both cells have
            add_metric(wh, m, task, "sts", float(vals[task][i]), metric="spearman", subset="test")
        add_accuracy(wh, m, "mr", float(mr[i]))
        add_accuracy(wh, m, "sst2", float(vals["sst2"][i]))


def _rows(wh: Warehouse, ties: str = "optimistic") -> list[dict]:
    return wh.query(f"SELECT * FROM correlation_comparisons WHERE ties = '{ties}' ORDER BY comparison_key").to_pylist()


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "wh").init()


def test_comparisons_are_stored_current_and_equal_to_the_statistics_by_hand(wh: Warehouse) -> None:
    vals = _zoo(wh, skip="sts-near")
    assert refresh_comparisons(wh, level="sentence", ties="optimistic") == 6  # 3 rows x 2 columns
    assert refresh_comparisons(wh, level="sentence", ties="optimistic") == 0  # all current: nothing written
    rows = {(r["b_intrinsic_task"], r["downstream_task"]): r for r in _rows(wh)}
    assert set(rows) == {(t, c) for t in ("sts-twin", "sts-noise", "sts-near") for c in ("mr", "sst2")}

    twin = rows[("sts-twin", "mr")]
    assert (twin["difference"], twin["p_value"], twin["holm_p"], twin["significant"]) == (0.0, 1.0, 1.0, False)
    assert (twin["ci_low"], twin["ci_high"], twin["r_ab"]) == (0.0, 0.0, pytest.approx(1.0))

    noise = rows[("sts-noise", "mr")]
    want = paired_difference(vals["evalrank"], vals["sts-noise"], vals["mr"], seed=0)
    assert noise["difference"] == pytest.approx(want.difference, abs=1e-12)
    assert (noise["ci_low"], noise["ci_high"], noise["p_value"]) == (want.ci_low, want.ci_high, want.p_value)
    assert noise["n_resamples"] == 20_000 and noise["significant"]  # refined, then Holm-significant
    z, p = steiger_z(want.rho_a, want.rho_b, want.r_ab, 16, rank=True)  # Spearman's variance (issue 53)
    assert (noise["steiger_z"], noise["steiger_p"]) == (pytest.approx(z), pytest.approx(p))
    t, tp = williams_t(want.rho_a, want.rho_b, want.r_ab, 16, rank=True)
    assert (noise["williams_t"], noise["williams_p"]) == (pytest.approx(t), pytest.approx(tp))
    # every model its own family: the family bootstrap draws exactly what the per-model one does
    assert (noise["n_families"], noise["family_p_value"], noise["family_ci_low"], noise["family_ci_high"]) == (
        16, want.p_value, want.ci_low, want.ci_high)  # fmt: skip
    assert noise["family_holm_p"] == noise["holm_p"] and noise["method"] == COMPARISON_METHOD

    near = rows[("sts-near", "mr")]  # m00 has no sts-near number: 15 models
    assert near["n_models"] == 15
    want = paired_difference(vals["evalrank"][1:], vals["sts-near"][1:], vals["mr"][1:], seed=0)
    assert near["difference"] == pytest.approx(want.difference, abs=1e-12) and near["p_value"] == want.p_value

    # Holm in SQL is Holm in Python over the table's six p-values
    ordered = sorted(rows.values(), key=lambda r: r["comparison_key"])
    adjusted = holm([r["p_value"] for r in ordered])
    assert [r["holm_p"] for r in ordered] == pytest.approx(adjusted, abs=1e-15)
    assert {r["n_tests"] for r in ordered} == {6}


def test_a_new_model_makes_the_comparisons_stale_until_recomputed(wh: Warehouse) -> None:
    _zoo(wh)
    refresh_comparisons(wh, level="sentence")
    assert len(_rows(wh)) == 6
    add_model(wh, "late", "sentence", "static")
    add_metric(wh, "late", "sts-noise", "sts", 0.5, metric="spearman", subset="test")
    add_accuracy(wh, "late", "mr", 0.75)
    add_evalrank(wh, "late", "evalrank-sentence", {"optimistic": 0.75, "realistic": 0.74})
    # the late model changes EvalRank's and sts-noise's mr cells: every comparison with EvalRank on mr is stale
    current = {(r["b_intrinsic_task"], r["downstream_task"]) for r in _rows(wh)}
    assert current == {(t, "sst2") for t in ("sts-twin", "sts-noise", "sts-near")}
    assert refresh_comparisons(wh, level="sentence") == 3
    assert len(_rows(wh)) == 6
    assert len(wh.query("SELECT * FROM correlation_diffs").to_pylist()) == 9  # history is kept


def test_each_tie_policy_is_its_own_table(wh: Warehouse) -> None:
    _zoo(wh)
    refresh_comparisons(wh, level="sentence", ties="optimistic")
    assert _rows(wh, "realistic") == []
    assert refresh_comparisons(wh, level="sentence", ties="realistic") == 6
    assert {r["a_ties"] for r in _rows(wh, "realistic")} == {"realistic"}
    assert {r["b_ties"] for r in _rows(wh, "realistic")} == {None}


def test_the_table_shape_power_lines_and_another_compared_row(wh: Warehouse) -> None:
    _zoo(wh)
    refresh_comparisons(wh, level="sentence")
    table = comparison_table(wh, level="sentence")
    assert table.compare == "evalrank-sentence (cos)"
    assert table.columns == ["mr", "sst2"]
    assert set(table.rows) == {"sts-twin test (cos)", "sts-noise test (cos)", "sts-near test (cos)"}
    assert ("sts-noise test (cos)", "mr") in table.significant()
    twin = format_comparison(table.cells[("sts-twin test (cos)", "mr")])
    assert twin == "+0.00 [+0.00, +0.00] p=1 holm=1 family p=1 holm=1"
    # the best similarity row of each column is the twin (rho equal to EvalRank's): no difference to detect
    assert [(p.column, p.b_row) for p in table.power] == [(c, "sts-twin test (cos)") for c in ("mr", "sst2")]
    assert all(p.result.n_needed is None and "no difference" in power_text(p) for p in table.power)
    assert {p.result.alpha for p in table.power} == {0.05 / 6}  # Holm's first step over the table's six tests

    assert refresh_comparisons(wh, level="sentence", compare="sts-near") == 6
    other = comparison_table(wh, level="sentence", compare="sts-near")
    assert other.compare == "sts-near test (cos)" and "evalrank-sentence (cos)" in other.rows
    with pytest.raises(ValueError, match="no such row"):
        refresh_comparisons(wh, level="sentence", compare="nope")


def test_no_evalrank_row_means_nothing_to_compare(wh: Warehouse) -> None:
    for i in range(5):
        add_model(wh, f"m{i}", "sentence", "static")
        add_metric(wh, f"m{i}", "sts-a", "sts", 0.1 * i, metric="spearman")
        add_accuracy(wh, f"m{i}", "mr", 0.5 + 0.01 * i)
    assert refresh_comparisons(wh, level="sentence") == 0
    assert _rows(wh) == []


# ---- issue 53: families, the method version ------------------------------------------------------------------------
def _family_zoo(wh: Warehouse, n_families: int = 6, seed: int = 1) -> dict[str, dict[str, float]]:
    """``n_families`` families of three (a base and two derived twins whose numbers sit close to the base's):
    EvalRank tracks MR, STS-B is noise. The numbers by model."""
    rng = np.random.default_rng(seed)
    vals: dict[str, dict[str, float]] = {"mr": {}, "evalrank": {}, "stsb": {}}
    with wh.deferring():
        for f in range(n_families):
            mr, sts = rng.uniform(0.6, 0.9), rng.uniform(0, 1)
            for j, suffix in enumerate(("", "-a", "-b")):
                m = f"f{f}{suffix}"
                add_model(wh, m, "sentence", "static", base=None if j == 0 else f"f{f}")
                vals["mr"][m] = mr + rng.normal(0, 0.01)
                vals["evalrank"][m] = vals["mr"][m] + rng.normal(0, 0.01)
                vals["stsb"][m] = sts + rng.normal(0, 0.01)
                add_evalrank(wh, m, "evalrank-sentence", {"optimistic": vals["evalrank"][m]})
                add_metric(wh, m, "stsb", "sts", vals["stsb"][m], metric="spearman", subset="test")
                add_accuracy(wh, m, "mr", vals["mr"][m])
    return vals


def test_the_family_bootstrap_resamples_whole_lineages_and_a_verdict_needs_both(wh: Warehouse) -> None:
    """Eighteen models in six families: the stored family columns are the family bootstrap over the lineage roots
    (each model's family from its ``base:`` chain), Holm runs over each bootstrap's p-values on its own, and
    `significant` is both Holm-significant."""
    vals = _family_zoo(wh)
    assert refresh_comparisons(wh, level="sentence") == 1
    (row,) = _rows(wh)
    models = sorted(vals["mr"])
    a, b, d = (np.array([vals[k][m] for m in models]) for k in ("evalrank", "stsb", "mr"))
    groups = [m.split("-")[0] for m in models]
    want = paired_difference(a, b, d, groups=groups, seed=0)
    per_model = paired_difference(a, b, d, seed=0)
    assert (row["n_models"], row["n_families"]) == (18, 6)
    assert (row["family_p_value"], row["family_ci_low"], row["family_ci_high"]) == (
        want.p_value, want.ci_low, want.ci_high)  # fmt: skip
    assert (row["p_value"], row["ci_low"]) == (per_model.p_value, per_model.ci_low)
    # the families, not the models, are the independent units: the family interval is the wider one here
    assert row["family_ci_high"] - row["family_ci_low"] > row["ci_high"] - row["ci_low"]
    assert row["family_holm_p"] == pytest.approx(want.p_value) and row["n_family_tests"] == 1
    assert row["significant"] == (row["model_significant"] and row["family_significant"])
    assert row["model_significant"] == (per_model.p_value < 0.05)
    assert row["family_significant"] == (want.p_value < 0.05)


def test_a_table_under_four_families_has_no_family_test_and_nothing_significant(wh: Warehouse) -> None:
    _family_zoo(wh, n_families=3)
    refresh_comparisons(wh, level="sentence")
    (row,) = _rows(wh)
    assert row["n_families"] == 3 and row["family_p_value"] is None and row["family_holm_p"] is None
    assert row["p_value"] is not None and not row["significant"]
    table = comparison_table(wh, level="sentence")
    assert "(3 families: no family test)" in format_comparison(table.cells[("stsb test (cos)", "mr")])


def test_a_changed_lineage_makes_the_family_bootstrap_stale(wh: Warehouse) -> None:
    _family_zoo(wh)
    refresh_comparisons(wh, level="sentence")
    assert refresh_comparisons(wh, level="sentence") == 0
    add_model(wh, "f1-a", "sentence", "static")  # f1-a's catalog entry loses its base: a family of its own
    assert refresh_comparisons(wh, level="sentence") == 1
    (row,) = _rows(wh)
    assert row["n_families"] == 7
    assert len(wh.query("SELECT * FROM correlation_diffs").to_pylist()) == 2


def test_rows_of_an_older_method_stay_stored_but_are_recomputed(wh: Warehouse) -> None:
    """A warehouse compared by issue 41's code holds rows without ``method`` (Pearson's variance, no family
    bootstrap): the view shows none of them, a refresh recomputes every comparison, and both stay readable."""
    from evalfarm.analysis.comparison_tables import cell_values, compare_cells, table_family
    from evalfarm.analysis.correlations import fetch_correlations

    _zoo(wh)
    con = wh.connect(read_only=True)
    try:
        fam = table_family(fetch_correlations(con), level="sentence", exclude_postprocessed=False, ties="optimistic")
        values = cell_values(con, "sentence", False)
    finally:
        con.close()
    new = ("method", "families_hash", "n_families", "family_ci_low", "family_ci_high", "family_p_value",
           "family_n_resamples", "family_n_valid")  # fmt: skip
    old = [{k: v for k, v in compare_cells(a, b, values, ties="optimistic", n_resamples=200).items() if k not in new}
           | {"created_at": now()} for a, b in fam.pairs]  # fmt: skip
    wh.write("correlation_diff", old)
    assert _rows(wh) == []
    assert refresh_comparisons(wh, level="sentence") == 6
    assert len(_rows(wh)) == 6 and {r["method"] for r in _rows(wh)} == {COMPARISON_METHOD}
    methods = [r["method"] for r in wh.query("SELECT method FROM correlation_diffs").to_pylist()]
    assert sorted(methods, key=lambda m: m or 0) == [None] * 6 + [COMPARISON_METHOD] * 6


def test_the_view_names_the_current_method() -> None:
    """The method number has its home in comparison_tables; the view's filter must name the same one."""
    sql = (Path(__file__).resolve().parents[1] / "sql" / "13_comparisons.sql").read_text(encoding="utf-8")
    assert f"WHERE method = {COMPARISON_METHOD}\n" in sql
    assert sql.count("WHERE method = ") == 1


def test_power_lines_use_the_tables_holm_level_in_models_and_in_families(wh: Warehouse) -> None:
    _family_zoo(wh)
    refresh_comparisons(wh, level="sentence")
    table = comparison_table(wh, level="sentence")
    (line,) = table.power
    assert line.result.alpha == 0.05 and line.result.unit == "models"  # one comparison in this table: 0.05 / 1
    assert line.by_family is not None and line.by_family.unit == "families" and line.by_family.models_per_unit == 3
    text = power_text(line)
    assert "at alpha 0.05," in text and "families (~" in text


# ---- where the comparisons are shown: the CLI, the paper layout, the report ----------------------------------------
def _paper_zoo(wh: Warehouse, n: int = 14) -> None:
    """Rows the paper layout knows: EvalRank (tracks MR), STS-B's test set (unrelated to MR), STR's test set
    (EvalRank's twin); downstream MR and SST2."""
    rng = np.random.default_rng(1)
    mr = rng.uniform(0.6, 0.9, size=n)
    er = mr + rng.normal(0, 0.01, size=n)
    noise = rng.uniform(0, 1, size=n)
    with wh.deferring():  # one commit per table
        for i in range(n):
            m = f"p{i:02d}"
            add_model(wh, m, "sentence", "static")
            add_evalrank(wh, m, "evalrank-sentence", {"optimistic": float(er[i])})
            add_metric(wh, m, "stsb", "sts", float(noise[i]), metric="spearman", subset="test")
            add_metric(wh, m, "str", "sts", float(er[i]), metric="spearman", subset="test")
            add_accuracy(wh, m, "mr", float(mr[i]))
            add_accuracy(wh, m, "sst2", float(mr[i] + rng.normal(0, 0.01)))


def test_the_cli_prints_the_comparisons_and_refuses_all_ties(wh: Warehouse) -> None:
    from typer.testing import CliRunner

    from evalfarm.cli import app

    _paper_zoo(wh)
    runner = CliRunner()
    got = runner.invoke(app, ["correlations", "--warehouse", str(wh.root), "--compare", "evalrank"])
    assert got.exit_code == 0, got.output
    assert "against each other evaluator" in got.output and "holm=" in got.output
    assert "Models needed to tell the compared row" in got.output
    got = runner.invoke(app, ["correlations", "--warehouse", str(wh.root), "--compare", "evalrank", "-f", "json"])
    assert got.exit_code == 0, got.output
    import json

    rows = json.loads(got.stdout)
    assert {(r["row"], r["column"]) for r in rows} == {
        (row, col) for row in ("stsb test (cos)", "str test (cos)") for col in ("mr", "sst2")
    }
    assert all(r["a_intrinsic_task"] == "evalrank-sentence" for r in rows)
    assert {r["significant"] for r in rows if r["b_intrinsic_task"] == "stsb"} == {True}
    bad = runner.invoke(app, ["correlations", "--warehouse", str(wh.root), "--compare", "evalrank", "--ties", "all"])
    assert bad.exit_code != 0 and "one tie policy" in bad.output
    with pytest.raises(ValueError, match="one tie policy"):  # the API's rule, refused before anything is computed
        api.correlation_comparisons(warehouse=str(wh.root) + "-none", ties="all")
    bad = runner.invoke(app, ["correlations", "--warehouse", str(wh.root), "--compare", "nope"])
    assert bad.exit_code != 0 and "no such row" in bad.output


def test_the_help_says_compare_writes_into_the_warehouse() -> None:
    """Issue 53: `--compare` stores what it computes; its help (and --refresh's) must say so, and how not to."""
    from typer.testing import CliRunner

    from evalfarm.cli import app

    got = CliRunner().invoke(app, ["correlations", "--help"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert got.exit_code == 0
    text = " ".join(got.output.replace("│", " ").split())
    assert "WRITES to the warehouse" in text and "correlation_diff" in text and "--no-refresh" in text
    assert "storing them in the warehouse" in text


def test_the_paper_layout_marks_the_cells_that_differ(wh: Warehouse) -> None:
    from evalfarm import api
    from evalfarm.analysis.paper import MARK, render_text

    _paper_zoo(wh)
    table = api.paper_correlation_table(warehouse=str(wh.root), level="sentence", compare=True)
    assert table.compared == "EvalRank MRR"
    assert table.marks == {("STS-Benchmark", "MR"): MARK, ("STS-Benchmark", "SST2"): MARK}
    text = render_text(table)
    assert "EvalRank MRR (compared)" in text and f"{MARK}: differs from EvalRank MRR" in text
    assert "2 of the 4 compared cells differ" in text
    # the power lines compare EvalRank with the best of the paper's similarity rows: STR (EvalRank's twin)
    assert len(table.power) == 2 and all("str test (cos)" in p and "no difference" in p for p in table.power)
    plain = api.paper_correlation_table(warehouse=str(wh.root), level="sentence")
    assert plain.marks == {} and plain.power == [] and plain.compared is None


def test_the_report_shows_the_comparisons_and_marks_the_heatmap(
    wh: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.axes import Axes

    from evalfarm.analysis.report import build_report

    _paper_zoo(wh)
    drawn: list[str] = []
    text = Axes.text
    monkeypatch.setattr(Axes, "text", lambda self, x, y, s, *a, **k: drawn.append(s) or text(self, x, y, s, *a, **k))
    index = build_report(wh, tmp_path / "report", hardest=0)
    html = index.read_text(encoding="utf-8")
    assert "Which evaluator predicts better: evalrank-sentence (cos) minus each other row" in html
    assert "(2 of 4 differences significant after Holm)" in html
    assert "Models needed to tell evalrank-sentence (cos)" in html
    marked = [s for s in drawn if s.endswith("†")]
    assert len(marked) == 2  # STS-B's two cells (no post-processed model: the table without them is not repeated)
    assert len(wh.query("SELECT * FROM correlation_comparisons").to_pylist()) == 8  # both tables were computed


def test_three_models_give_rows_without_a_test(wh: Warehouse) -> None:
    """What the documents' reduced zoo has: too few models for any test, and the command still answers."""
    from typer.testing import CliRunner

    from evalfarm.cli import app

    _paper_zoo(wh, n=3)
    got = CliRunner().invoke(app, ["correlations", "--warehouse", str(wh.root), "--compare", "evalrank"])
    assert got.exit_code == 0, got.output
    rows = _rows(wh)
    assert len(rows) == 4 and all(r["p_value"] is None and r["holm_p"] is None for r in rows)
    assert not any(r["significant"] for r in rows)
    assert "too few models for a test" in got.output
