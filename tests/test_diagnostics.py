"""The diagnostics scorers worked by hand: Avraham & Goldberg 2016 (ag2016) and embedding geometry (geometry)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm.scorers import scorer_for
from evalfarm.scorers.ag2016 import AG2016Task, AGData, ag_score, triplet_scores
from evalfarm.scorers.base import TextVectors
from evalfarm.scorers.geometry import (
    alignment,
    anisotropy,
    effective_rank,
    hubness,
    isotropy,
    k_occurrence,
    random_pairs,
    skewness,
    uniformity,
    unit_rows,
)
from evalfarm.taskdata.ag2016 import read_ag_file
from evalfarm.taskdata.data import TaskDataError

# A hand-made English set: two blocks (the second with no blank line before it, as inflected/vb_inf.txt has).
ENGLISH = (
    "cat\r\n"
    "dog,0.80,car,0.20\r\n"  # positive: s = ±0.6
    "tiger,0.50,dog,0.50\r\n"  # positive, a 50/50 split: s = 0
    "distractors\r\n"
    "dog,1.00,apple,0.00\r\n"  # distractor: s = ±1
    "randoms\r\n"
    "apple,0.30,car,0.70\r\n"  # random: s = ±0.4
    "\r\n"
    "car\r\n"
    "truck,0.90,apple,0.10\r\n"  # positive: s = ±0.8
    "bus\r\n"
    "randoms\r\n"
    "truck,1.00,tiger,0.00\r\n"  # random, target bus: s = ±1
)

# 2-d vectors, all norm 1 or scaled (cosine is what counts): angles chosen so each sim is plain to read.
VECS = {
    "cat": (1.0, 0.0),
    "dog": (0.8, 0.6),  # cos(cat, dog) = 0.8
    "car": (0.0, 1.0),  # cos(cat, car) = 0
    "tiger": (0.6, 0.8),  # cos(cat, tiger) = 0.6
    "apple": (0.0, 2.0),  # cos(cat, apple) = 0, ties with car; cos(car, apple) = 1
    "truck": (0.6, 0.8),  # cos(car, truck) = 0.8 < cos(car, apple) = 1
    "bus": (0.8, 0.6),  # cos(bus, truck) = 0.96, cos(bus, tiger) = 0.96: a tie
}


def _ag_task(tmp_path: Path, text: str = ENGLISH) -> tuple[AG2016Task, AGData]:
    path = tmp_path / "en.txt"
    path.write_bytes(text.encode())
    comparisons = read_ag_file(path, "en")
    data = AGData(comparisons, comparisons.words(), ["en"])
    task = AG2016Task(id="ag-en", level="word", version="1", files={}, sha256={}, licence="x", source="x")
    return task, data


def _vectors(texts: list[str], known: dict[str, tuple[float, float]]) -> TextVectors:
    emb = np.array([known.get(t, (0.0, 0.0)) for t in texts], dtype=np.float32)
    return TextVectors("word", emb, np.array([t not in known for t in texts]))


def _rows(result) -> dict[tuple[str, str], float]:
    return {(r.metric, r.subset): r.value for r in result.rows}


def test_the_reader_tags_types_and_blocks(tmp_path):
    _, data = _ag_task(tmp_path)
    c = data.comparisons
    assert c.target == ["cat", "cat", "cat", "cat", "car", "bus"]
    assert c.kind == ["positive", "positive", "distractor", "random", "positive", "random"]
    assert c.r1 == [0.8, 0.5, 1.0, 0.3, 0.9, 1.0]
    assert data.texts == ["cat", "dog", "car", "tiger", "apple", "truck", "bus"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("randoms\ncat\n", "marker before"),
        ("dog,0.5,car,0.5\n", "before its block's target"),
        ("cat\ndog,0.7,car,0.7\n", "R1 \\+ R2 must be 1"),
        ("cat\ndog,x,car,0.5\n", "must be numbers"),
        ("cat\ndog,0.5,car\n", "4 comma-separated"),
        ("cat\n\n", "no comparisons"),
    ],
)
def test_the_reader_refuses_malformed_files(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(TaskDataError, match=message):
        read_ag_file(path, "bad")


def test_ag_score_by_hand(tmp_path):
    task, data = _ag_task(tmp_path)
    result = scorer_for("ag2016").evaluate(task, data, _vectors(data.texts, VECS), {})
    rows = _rows(result)
    # cat: dog 0.8 > car 0      -> δ=+1, s=+0.6
    # cat: tiger 0.6 < dog 0.8  -> δ=-1, s=-1*(0)=0 (a 50/50 split weighs nothing)
    # cat: dog 0.8 > apple 0    -> δ=+1, s=+1
    # cat: apple 0 == car 0     -> tie, δ=-1, s=-1*(2*0.3-1)=+0.4 (the tie happens to side with the annotators)
    # car: truck 0.8 < apple 1  -> δ=-1, s=-0.8
    # bus: truck 0.96 == tiger  -> tie, δ=-1, s=-1
    assert rows[("ag_score", "all")] == pytest.approx((0.6 + 1 + 0.4) / (0.6 + 1 + 0.4 + 0.8 + 1))
    assert rows[("ag_score", "all:positive")] == pytest.approx(0.6 / (0.6 + 0.8))
    assert rows[("ag_score", "all:distractor")] == pytest.approx(1.0)
    assert rows[("ag_score", "all:random")] == pytest.approx(0.4 / 1.4)
    assert rows[("ag_score", "en")] == rows[("ag_score", "all")]
    assert rows[("n_ties", "all")] == 2 and rows[("n_ties", "all:random")] == 2
    assert rows[("n_comparisons", "all")] == 6 and rows[("coverage", "all")] == 1.0
    assert [r.subset for r in result.rows if r.primary] == ["all"]
    assert any("tie in similarity" in n for n in result.notes)


def test_oov_comparisons_are_skipped_and_an_all_oov_model_is_thin_with_nan(tmp_path):
    task, data = _ag_task(tmp_path)
    s = scorer_for("ag2016")
    without_apple = {w: v for w, v in VECS.items() if w != "apple"}
    rows = _rows(s.evaluate(task, data, _vectors(data.texts, without_apple), {}))
    assert rows[("n_comparisons", "all")] == 3  # the three comparisons naming apple are skipped
    assert rows[("coverage", "all")] == pytest.approx(0.5)
    assert rows[("ag_score", "all")] == pytest.approx(0.6 / (0.6 + 1))
    result = s.evaluate(task, data, _vectors(data.texts, {}), {})
    rows = _rows(result)
    assert math.isnan(rows[("ag_score", "all")]) and rows[("n_comparisons", "all")] == 0
    assert "coverage 0 < 0.5" in (s.thin(result.rows, task) or "")


def test_ag_score_of_nothing_is_nan():
    assert math.isnan(ag_score(np.array([])))
    assert math.isnan(ag_score(np.array([0.0, 0.0])))  # only 50/50 splits
    assert ag_score(np.array([0.5, -0.5, 1.0])) == pytest.approx(1.5 / 2.0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.sampled_from([0.0, 0.1, 0.3, 0.6, 0.9, 1.0])),
        min_size=1,
        max_size=30,
    )
)
def test_reversing_every_choice_turns_the_score_into_its_complement(triplets):
    sim1 = np.array([t[0] for t in triplets])
    sim2 = np.array([t[1] for t in triplets])
    r1 = np.array([t[2] for t in triplets])
    s, tie = triplet_scores(sim1, sim2, r1)
    score = ag_score(s)
    assert math.isnan(score) or 0.0 <= score <= 1.0
    untied = ~tie
    if not untied.any() or not np.abs(s[untied]).sum():
        return
    flipped, _ = triplet_scores(sim2[untied], sim1[untied], r1[untied])
    assert ag_score(s[untied]) + ag_score(flipped) == pytest.approx(1.0)


# ---- geometry -----------------------------------------------------------------------------------------------------
def test_alignment_uniformity_anisotropy_by_hand():
    u = unit_rows(np.array([[1.0, 0.0], [0.0, 3.0], [-2.0, 0.0]]))
    a, b = np.array([0, 0]), np.array([1, 2])
    # ‖e1 - e2‖² = 2, ‖e1 + e1‖² = 4
    assert alignment(u, a, b) == pytest.approx(3.0)
    assert uniformity(u, a, b) == pytest.approx(math.log((math.exp(-4) + math.exp(-8)) / 2))
    assert anisotropy(u, a, b) == pytest.approx((0.0 - 1.0) / 2)
    empty = np.array([], dtype=np.int64)
    assert all(math.isnan(f(u, empty, empty)) for f in (alignment, uniformity, anisotropy))


def test_isotropy_and_effective_rank_by_hand():
    cross = np.vstack([np.eye(3), -np.eye(3)])  # perfectly isotropic: every Z(c) equal
    assert isotropy(cross) == pytest.approx(1.0)
    cone = np.array([[1.0, 0.01], [1.0, -0.01], [1.0, 0.0]]) * 5
    # along ±e1: Z = 3e^5 vs 3e^-5 -> ratio e^-10
    assert isotropy(cone) == pytest.approx(math.exp(-10), rel=1e-3)
    assert effective_rank(np.eye(4)) == pytest.approx(4.0)
    assert effective_rank(np.outer(np.arange(1, 5), np.ones(3))) == pytest.approx(1.0)
    # singular values 3 and 1: p = (0.75, 0.25), exp(H)
    assert effective_rank(np.diag([3.0, 1.0])) == pytest.approx(
        math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    )
    assert effective_rank(np.zeros((0, 3))) == 0.0 and math.isnan(isotropy(np.zeros((0, 3))))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(3, 12),
    st.integers(2, 5),
    st.integers(0, 2**16),
    st.lists(st.floats(0.1, 10.0), min_size=12, max_size=12),
)
def test_geometry_bounds_and_scale_invariance(n, d, seed, scales):
    x = np.random.default_rng(seed).normal(size=(n, d))
    scaled = x * np.array(scales[:n])[:, None]  # rescaling rows changes no cosine
    a, b = random_pairs(n, 50, seed)
    u, us = unit_rows(x), unit_rows(scaled)
    for f in (alignment, uniformity, anisotropy):
        assert f(u, a, b) == pytest.approx(f(us, a, b), abs=1e-9)
    assert 0.0 <= alignment(u, a, b) <= 4.0 + 1e-9
    assert -8.0 - 1e-9 <= uniformity(u, a, b) <= 1e-9
    assert -1.0 - 1e-9 <= anisotropy(u, a, b) <= 1.0 + 1e-9
    assert 0.0 < isotropy(x) <= 1.0
    assert 1.0 - 1e-9 <= effective_rank(x) <= min(n, d) + 1e-9


def test_k_occurrence_skewness_by_hand():
    nb = np.array([[1, 2], [0, 2], [0, 1], [2, -1]])
    assert k_occurrence(nb, 4).tolist() == [2, 2, 3, 0]
    v = np.array([0.0, 0.0, 0.0, 3.0])  # mean 0.75, m2 = 6.75 / 4 = 1.6875, m3 = 10.125 / 4 = 2.53125
    assert skewness(v) == pytest.approx(2.53125 / 1.6875**1.5)  # = 2 / sqrt(3)
    assert math.isnan(skewness(np.ones(5))) and math.isnan(skewness(np.array([1.0, 2.0])))


def test_hubness_matches_a_brute_force_knn():
    rng = np.random.default_rng(1)
    u = unit_rows(rng.normal(size=(60, 5)))
    k = 4
    sims = u @ u.T
    np.fill_diagonal(sims, -np.inf)
    brute = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    assert hubness(u, k, device="cpu") == pytest.approx(skewness(k_occurrence(brute, 60)))
    assert math.isnan(hubness(u[:3], k, device="cpu"))
    # a CUDA device asked for where this FAISS has no GPU (the CPU test machine): the same exact search on the CPU
    assert hubness(u, k, device="cuda") == pytest.approx(hubness(u, k, device="cpu"))


def test_random_pairs_are_seeded_and_never_self_pairs():
    a, b = random_pairs(5, 1000, seed=3)
    assert (a != b).all() and set(a) | set(b) == set(range(5))
    a2, b2 = random_pairs(5, 1000, seed=3)
    assert (a == a2).all() and (b == b2).all()
    assert len(random_pairs(1, 10, 0)[0]) == 0


def test_geometry_leaves_oov_items_out_and_is_never_primary():
    from evalfarm.catalog.specs import TaskSpec
    from evalfarm.scorers.geometry import GeometryTask
    from evalfarm.taskdata.evalrank import build_rank_pool

    task = GeometryTask(id="g", level="word", version="1", files={}, sha256={}, licence="x", source="x", k=2)
    assert isinstance(task, TaskSpec)
    pool = build_rank_pool(task, [("a", "b"), ("b", "a"), ("a", "zz")], [["c", "d", "e", "f"]])
    emb = np.array([[1, 0], [0, 1], [0, 0], [1, 1], [-1, 0], [0, -1], [2, 2]], dtype=np.float32)
    # items: a b zz c d e f; zz and c are OOV
    oov = np.array([False, False, True, True, False, False, False])
    result = scorer_for("geometry").evaluate(task, pool, TextVectors("word", emb, oov), {}, device="cpu")
    rows = {r.metric: r.value for r in result.rows}
    assert rows["n_items"] == 5 and rows["n_pairs"] == 2  # (a, zz) has an OOV side
    assert rows["alignment"] == pytest.approx(2.0)  # a = e1, b = e2 both ways
    assert not any(r.primary for r in result.rows)


# ---- the diagnostics in the correlations -------------------------------------------------------------------------
def _add_descriptive(wh, model: str, task: str, metric: str, value: float) -> None:
    """A geometry row as the executor writes it: not primary, no direction (higher_is_better NULL)."""
    from evalfarm.warehouse import now

    fp = f"geo-{model}-{task}-{metric}"
    row = {
        "run_id": "hand", "model": model, "task": task, "scorer": "geometry", "subset": "all", "variant": "raw",
        "ties": None, "metric": metric, "value": value, "is_primary": False, "higher_is_better": None,
        "fingerprint": fp, "spec_hash": f"h-{model}", "created_at": now(),
    }  # fmt: skip
    wh.write("metrics", [row])


@pytest.fixture
def diagnostics_wh(tmp_path):
    """Five sentence models: MRR 0.1..0.5, MR accuracy ranks 1, 3, 2, 4, 5 (rho 0.9 with MRR), uniformity falling
    with MRR (rho -1 with EvalRank, -0.9 with MR), AG2016 scores in MRR's order."""
    from evalfarm.warehouse import Warehouse
    from tests.test_correlations import add_accuracy, add_metric, add_model

    wh = Warehouse(tmp_path / "wh").init()
    for i, (mrr, acc) in enumerate(zip([0.1, 0.2, 0.3, 0.4, 0.5], [0.60, 0.70, 0.65, 0.80, 0.90], strict=True)):
        m = f"s{i + 1}"
        add_model(wh, m, "sentence", "static")
        add_metric(wh, m, "evalrank-sentence", "evalrank", mrr, ties="optimistic")
        add_accuracy(wh, m, "mr", acc)
        add_metric(wh, m, "ag2016-sentence", "ag2016", 0.5 + mrr, metric="ag_score")
        _add_descriptive(wh, m, "geometry-sentence", "uniformity", -1.0 - i)
    return wh


def test_diagnostics_enter_the_correlations_only_when_asked(diagnostics_wh):
    from evalfarm.analysis.correlations import correlation_table

    plain = correlation_table(diagnostics_wh, level="sentence")
    assert plain.rows == ["evalrank-sentence (cos)"] and not plain.evalrank_links
    leaderboard = diagnostics_wh.query("SELECT DISTINCT task FROM leaderboard").to_pylist()
    assert {"task": "geometry-sentence"} not in leaderboard  # descriptive: never on a board
    table = correlation_table(diagnostics_wh, level="sentence", diagnostics=True)
    uniformity = table.cells[("geometry-sentence uniformity (raw)", "mr")]
    assert uniformity.spearman == pytest.approx(-0.9)  # as measured: no sign flip for a number without direction
    assert table.cells[("ag2016-sentence ag_score (cos)", "mr")].spearman == pytest.approx(0.9)
    links = {(r["diagnostic_task"], r["diagnostic_metric"]): r for r in table.evalrank_links}
    assert links[("geometry-sentence", "uniformity")]["spearman"] == pytest.approx(-1.0)
    assert links[("ag2016-sentence", "ag_score")]["spearman"] == pytest.approx(1.0)
    assert links[("geometry-sentence", "uniformity")]["n_models"] == 5
    assert links[("geometry-sentence", "uniformity")]["ci_low"] == pytest.approx(-1.0)


def test_cli_correlations_diagnostics_flag(diagnostics_wh):
    import json

    from typer.testing import CliRunner

    from evalfarm.cli import app

    runner = CliRunner()
    args = ["correlations", "--warehouse", str(diagnostics_wh.root)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "uniformity" not in res.stdout and "Diagnostics against EvalRank" not in res.stdout
    res = runner.invoke(app, [*args, "--diagnostics", "--intervals"])
    assert res.exit_code == 0, res.output
    assert "geometry-sentence uniformity (raw)" in res.stdout and "Diagnostics against EvalRank" in res.stdout
    res = runner.invoke(app, [*args, "--diagnostics", "-f", "json", "--no-refresh"])
    rows = json.loads(res.stdout)
    link = [r for r in rows if r["ci_status"] == "computed now"]
    assert [(r["intrinsic_metric"], r["downstream_task"]) for r in link] == [
        ("ag_score", "evalrank-sentence"),
        ("uniformity", "evalrank-sentence"),
    ]


def test_the_report_shows_each_models_diagnostics_and_a_zoo_wide_heatmap(diagnostics_wh, tmp_path):
    from evalfarm.analysis.report import build_report
    from tests.test_correlations import add_metric

    add_metric(diagnostics_wh, "s1", "ag2016-sentence", "ag2016", 0.7, metric="ag_score", subset="all:positive")
    add_metric(diagnostics_wh, "s1", "ag2016-sentence", "ag2016", 0.2, metric="ag_score", subset="basic-nn")
    index = build_report(diagnostics_wh, tmp_path / "report", hardest=0)
    assert "id='diagnostics'" in index.read_text() and (tmp_path / "report/img/diagnostics-sentence.png").is_file()
    page = (tmp_path / "report/models/s1.html").read_text()
    section = page[page.index("<h2>Diagnostics</h2>") : page.index("<h2>Primary metrics")]
    assert "all:positive" in section and "uniformity" in section
    assert "basic-nn" not in section  # AG2016's per-file numbers stay in the full metrics table
