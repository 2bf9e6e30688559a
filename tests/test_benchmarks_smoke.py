"""Every benchmark script runs: each one's ``--smoke`` (tiny sizes, one repeat; a few seconds of CPU) in a subprocess,
as a user runs it, its JSON written to a temporary folder and checked for sane figures.

A benchmark is run by hand, rarely, so nothing else notices when a change breaks one: benchmarks/bench_rank.py once
failed at start for weeks (it asked for a catalog that had been renamed). What the smoke runs leave out, and why:
bench_toolkit.py's toolkit side (a download: offline here and in CI), bench_nightly.py's zoo build and Ray (a toy
GloVe catalog in process instead), faults.py's scenarios but one (read-only, or respec without mount namespaces;
tests/test_faults.py runs two more), bench_neighbours.py's transformer unit, bench_rank.py's other shapes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


def _check_classify(out: dict[str, Any], tmp: Path) -> None:
    assert [r["task"] for r in out["rows"]] == ["CR", "MRPC"]
    for row in out["rows"]:
        for backend in ("sklearn", "torch", "torch_mixed"):
            assert 0.5 < row[backend]["accuracy"] <= 1 and row[backend]["n_train"] == 200, row
        assert abs(row["accuracy_diff_points"]) <= 5, row  # the two solvers fit the same model
        assert abs(row["accuracy_diff_points_mixed"]) <= 5, row
    assert out["rows"][1]["torch"]["f1"] is not None  # MRPC reports F1


def _check_curvature_refresh(out: dict[str, Any], tmp: Path) -> None:
    assert out["task"] == "MRPC" and out["models"] == 2 * 5 and out["c"] == [1.0] * 5 + [10.0] * 5, out
    assert out["from_start"]["converged"] and out["from_start"]["calls"] > 0, out
    exact, kfac = out["refreshed"]
    assert (exact["refresh"], kfac["refresh"]) == ("exact", "kfac"), out
    for refreshed in (exact, kfac):
        assert refreshed["after"] == 5 and refreshed["converged"], out
        # restarting from a refreshed curvature reaches the same optimum (each model strongly convex)
        assert refreshed["objective"] == pytest.approx(out["from_start"]["objective"], rel=1e-5), out


def _check_sample_vs_full(out: dict[str, Any], tmp: Path) -> None:
    (row,) = out["models"].values()
    assert 0.5 < row["cr"]["full"] <= 1 and 0.5 < row["cr"]["sample"] <= 1, row
    assert out["spearman"] == {"cr": None}  # one model: no rank correlation


def _check_sample_vs_full_warehouse(out: dict[str, Any], tmp: Path) -> None:
    per_task = out["per_task"]
    assert per_task["agree"]["spearman_full_vs_sample"] == 1.0
    assert per_task["reverse"]["spearman_full_vs_sample"] == -1.0
    assert per_task["agree"]["mean_shift_points"] == pytest.approx(-12.5) and per_task["agree"]["n_models"] == 6
    table = out["tables"]["sentence"]
    assert table["cells"] == 2 and table["sign_changes_among_strong"] == 1 and table["max_abs_delta_rho"] == 2.0
    (worst, *_) = table["largest_deltas"]
    assert (worst["downstream"], worst["full"], worst["sample"]) == ("reverse", 1.0, -1.0)


def _check_neighbours(out: dict[str, Any], tmp: Path) -> None:
    (row,) = out["rows"]
    assert (row["model"], row["task"], row["neighbours"]) == ("glove-6b-50d", "evalrank-word", 10)
    assert row["score_with_s"] > 0 and row["score_without_s"] > 0 and row["of_unit"] is not None


def _check_nightly(out: dict[str, Any], tmp: Path) -> None:
    assert out["run"]["rc"] == 0 and out["noop_rerun"]["rc"] == 0, (tmp / "wh-logs" / "run.log").read_text()[-3000:]
    assert out["failures"] == [] and out["models"] == [{"level": "word", "n": 2}]
    assert {"stage": "score", "status": "done", "n": 4} in out["units"]  # 2 models x 2 tasks
    assert out["leaderboard_top"] and all(0 < r["mrr"] <= 1 for r in out["leaderboard_top"])
    assert set(out["correlations"]) == {"word", "word-no-postprocessed"}
    assert all("cells" in c for c in out["correlations"].values()), out["correlations"]  # the JSON parsed


def _check_noop(out: dict[str, Any], tmp: Path) -> None:
    assert (out["models"], out["units"]) == (3, 9) and out["parquet_files"] > 0  # 3 models x 3 tasks
    assert out["noop_s (shipped, median)"] > 0 and out["ratio"] > 0


def _check_quality(out: dict[str, Any], tmp: Path) -> None:
    assert [(u["model"], u["task"]) for u in out["units"]] == [("toy", "wordsim-mc-30"), ("toy", "wordsim-rg-65")]
    assert all(u["n_texts"] > 0 and u["dim"] == 50 and not u["degenerate"] for u in out["units"])
    assert set(out["worst"]) == {"max oov_rate", "max duplicate_rate", "min rank_ratio", "max assess ms"}


def _check_rank(out: dict[str, Any], tmp: Path) -> None:
    assert [(r["similarity"], r["n_pairs"], r["n_background"]) for r in out["results"]] == [
        ("cos", 200, 22207),
        ("l2", 200, 22207),
    ]
    for r in out["results"]:
        assert r["kernel_s"] >= 0 and r["floor_gemm_s"] >= 0 and len(r["sweep"]) == 7, r
        # the toolkit's loop ranks as the kernel does, or one place lower (its positive scored apart: an ulp)
        assert r["loop_rank_equal"] + r["loop_rank_higher_by_1"] >= 0.9, r


def _check_scale(out: dict[str, Any], tmp: Path) -> None:
    assert (out["setup"]["items"], out["setup"]["pairs"], out["setup"]["dim"]) == (5000, 300, 32)
    assert [r["similarity"] for r in out["results"]] == ["cos", "l2"]
    assert all(1 <= r["mean_rank"] <= 5000 for r in out["results"])


def _check_scheduler(out: dict[str, Any], tmp: Path) -> None:
    assert (out["units"], out["models"], out["noop_models"]) == (12, 12, 3)  # each model on the task of its level
    assert out["sequential_s"] > 0 and out["ray1_warm_s"] > 0 and "ray2_warm_s" not in out
    assert out["noop_cli_12_models_s"] > 0 and out["noop_cli_100_models_s"] > 0


def _check_toolkit(out: dict[str, Any], tmp: Path) -> None:
    assert "toolkit" not in out  # the toolkit side is a download: left out
    assert out["evalfarm"]["returncode"] == 0 and any("1 done" in line for line in out["evalfarm"]["tail"]), out


def _check_vectors(out: dict[str, Any], tmp: Path) -> None:
    cases = {r["case"]: r for r in out["results"]}
    assert len(cases) == 7 and all(r["rows"] == 2000 for r in cases.values()), cases
    assert all(r["looked_up"] == 100 for name, r in cases.items() if "lookup" in name)
    assert out["summary"]["rows"] == 2000 and out["summary"]["cache_bytes"] > 0


def _check_conformance(out: dict[str, Any], tmp: Path) -> None:
    confs = out["configurations"]
    assert [(c["model"], c["oov"], c["similarity"]) for c in confs] == [("toy", "mean", "cos"), ("toy", "mean", "l2")]
    for c in confs:  # what tests/test_protocol.py asserts of every configuration
        assert c["pairs"] == 5514 and c["differing"] <= 0.001 * c["pairs"] and abs(c["mrr_difference"]) < 1e-5, c
    (loop,) = out["toolkit_loop_cos"]
    assert 0 < loop["loop"]["mrr"] <= 1 and 0 < loop["clean"]["mrr"] <= 1


def _check_faults(out: list[dict[str, Any]], tmp: Path) -> None:
    (r,) = out
    assert r["fault"] in ("read-only warehouse", "same id, new spec"), r
    assert r["ok"] and (r["lost"], r["duplicated"]) == (0, 0), r


def _check_compare_warehouses(out: dict[str, Any], tmp: Path) -> None:
    assert out["rows_before"] == out["rows_after"] > 0 and (out["models"], out["tasks"]) == (1, 2), out
    assert not (out["only_before"] or out["only_after"] or out["value_differs"] or out["identity_differs"]), out
    assert out["ranks"] == {"pairs_before": 5514 * 2, "pairs_after": 5514 * 2, "identical": True}
    views = out["views"]  # every view and run_diff, compared as multisets of rows
    assert views["differs"] == [] and {"board", "metrics", "history", "ranks", "correlations"} <= set(views["views"])


def _check_gpu(out: dict[str, Any], tmp: Path) -> None:
    checks = out["checks"]
    assert set(checks) == {"encoders", "kernel", "faiss", "classifier"}
    if out["environment"].get("gpu") is None:  # CI: every check skipped, each with its reason
        assert all(c["status"] == "skip" and c["reason"] for c in checks.values()), checks
    else:
        assert all(c["status"] in ("pass", "skip") for c in checks.values()), checks


def _check_eta(out: dict[str, Any], tmp: Path) -> None:
    (wh,) = out["warehouses"]
    assert (wh["runs"], wh["models"], wh["units"]) == (1, 3, 6) and wh["recorded_s"] > 0
    assert set(wh["summary"]) == {"half", "kind"}  # one run: no leave-one-run-out
    for rows in wh["replays"].values():
        for r in rows:
            assert all(v > 0 for v in r["predicted_s"].values()) and sum(r["sources"].values()) == r["held_units"]
    assert {r["kind"] for r in wh["replays"]["kind"]} == {"word-vectors", "word-vectors+postprocess"}
    (run,) = out["live"]  # the smoke run itself, into an empty warehouse
    assert run["units"] == 6 and run["first_eta"]["sources"] == {"built-in": 6} and run["error"] is not None
    first = out["first"]  # the same catalog planned again into an empty warehouse: its first ETA, nothing run
    assert first["first_eta"]["sources"] == {"built-in": 6} and first["line"].startswith("first ETA ")


def _check_planning(out: dict[str, Any], tmp: Path) -> None:
    (case,) = out["cases"]
    assert case["floor_s"] > 0 and case["floor_cpu_s"] > 0 and set(case["runs"]) == {"cold", "warm"}
    for name in ("cold", "warm"):
        (run,) = case["runs"][name]
        assert 0 < run["first_line_s"] <= run["first_eta_s"] and run["line"].startswith("first ETA "), run
        assert 0 < run["first_eta_cpu_s"] <= run["first_eta_s"] * 2, run  # two cores at most


def _check_warehouse(out: dict[str, Any], tmp: Path) -> None:
    (case,) = out["cases"]
    assert (case["layout"], case["store"]) == (2, "local") and case["write"]["units_written"] > 0
    assert case["files"]["metrics"] > 0 and set(case["files"]["metrics_by_kind"]) == {"current", "superseded",
                                                                                       "pending"}  # fmt: skip
    queries = case["queries"]
    names = {"board", "leaderboard", "correlations", "history of one model", "diff of the last two runs"}
    assert names <= set(queries)
    for name, q in queries.items():
        assert "error" not in q["evalfarm"] and q["evalfarm"]["seconds"] > 0, (name, q)
        for floor in ("floor", "hand"):
            if floor in q:  # the same rows, read by plain DuckDB: the same answer
                assert "error" not in q[floor] and q[f"ratio_to_{floor}"] > 0, (name, q)
                if name != "diff of the last two runs":  # `evalfarm diff` leaves out moves below its tolerance
                    assert q[floor]["rows"] == q["evalfarm"]["rows"] > 0, (name, q)
    assert "hand" in queries["board"] and "hand" in queries["leaderboard"]
    assert queries["no-op rerun (warehouse part)"]["evalfarm"]["rows"] > 0
    status = case["status"]
    assert "error" not in status["evalfarm"] and status["evalfarm"]["rows"] == 20 <= status["unit_files"], status
    assert "error" not in status["floor"] and status["ratio_to_floor"] > 0


def _check_table_formats(out: dict[str, Any], tmp: Path) -> None:
    delta = out["formats"]["delta"]  # pyiceberg is no dependency: Iceberg is measured where it is installed
    assert delta["files"] == 10 and 0 < delta["commit_median_s"] and delta["plan_newest_cold_s"] > 0


def _check_answer_tables(out: dict[str, Any], tmp: Path) -> None:
    """The synthetic zoo: every sentence table under both policies has MR and SST2 columns, each with a verdict, a
    power figure and a leave-one-family-out over its four families; the board of its one EvalRank pool twice."""
    tables = {(t["table"], t["ties"]): t for t in out["tables"]}
    assert len(tables) == 8
    for name in ("Table 6", "Table 11"):
        for ties in ("optimistic", "realistic"):
            cols = tables[(name, ties)]["columns"]
            assert [c["column"] for c in cols] == ["MR", "SST2"]
            for c in cols:
                assert c["verdict"] in ("supported", "contradicted", "undecidable", "no test (under 4 models)")
                assert c["best_similarity_row"] in ("STS-Benchmark", "STR") and c["similarity_rows"] == 2
                assert c["leave_one_family_out"]["families"] == 4
                assert c["n_families"] == 4 and c["family_p"] is not None  # the family bootstrap ran
                n_tests = tables[(name, ties)]["n_tests_holm"]
                assert c["power_alpha"] == pytest.approx(0.05 / n_tests)  # power at the table's Holm level
    assert tables[("Table 3", "optimistic")]["columns"] == []  # no word model in the synthetic zoo
    assert [(s["task"], s["ties"]) for s in out["stability"]] == [
        ("evalrank-sentence", "realistic"),
        ("evalrank-sentence", "optimistic"),
    ]
    assert all(0 <= s["top_stays"] <= 1 and s["n_models"] == 12 and s["n_items"] == 10 for s in out["stability"])
    # the paper's own cells: Table 6's MR column (83.43 against STS-B's 46.03 over 67 models) decides at any r_AB
    (mr,) = [c for c in out["published"] if (c["table"], c["column"]) == ("Table 6", "MR")]
    assert (
        mr["reading"] == "EvalRank higher; significant whatever r_AB" and mr["best_similarity_row"] == "STS-Benchmark"
    )
    # with Spearman's variance SST5 is no longer significant whatever r_AB (issue 53)
    (sst5,) = [c for c in out["published"] if (c["table"], c["column"]) == ("Table 6", "SST5")]
    assert sst5["reading_pearson_variance"] == "EvalRank higher; significant whatever r_AB"
    assert sst5["reading"].startswith("EvalRank higher; significant only if r_AB >= -0.09")


def _check_spearman_null(out: dict[str, Any], tmp: Path) -> None:
    """Two scenarios, every test at the three levels, each rate over alpha a share of 300 zoos over alpha."""
    assert [(s["rho"], s["r_ab"], s["n"]) for s in out["scenarios"]] == [(0.8, 0.5, 34), (0.3, 0.0, 10)]
    for s in out["scenarios"]:
        assert set(s["rejections_over_alpha"]) == {"0.05", "0.00625", "0.005"}
        for rates in s["rejections_over_alpha"].values():
            tests = {f"{t}-{v}" for t in ("steiger", "williams", "zou") for v in ("pearson", "spearman")}
            assert set(rates) == tests | {"steiger-fhp"}
            assert all(0 <= r <= 1 / 0.005 for r in rates.values()), rates


def _check_diagnostics_versions(out: dict[str, Any], tmp: Path) -> None:
    """The synthetic warehouse's known rhos (version 1's synonym row reversed against MR, version 2's in its order;
    a constant row and a two-model DefSent: no rho), the others against SciPy on the numbers written."""
    from scipy.stats import spearmanr

    old, new = out["tables"]
    assert [s.split(":", 1)[1] for s in out["specs"]] == [
        "heros-goemotions-v1:defsent-wordnet-v1",
        "heros-goemotions:defsent-wordnet",
    ]
    assert set(old) == {"HEROS synonym", "DefSent MRR"}
    assert set(new) == {"HEROS synonym", "HEROS antonym", "HEROS typo", "DefSent MRR"}
    assert old["HEROS synonym"]["mr"] == [pytest.approx(-1.0), 6]  # version 1 reversed against MR
    assert new["HEROS synonym"]["mr"] == [pytest.approx(1.0), 6]  # version 2 in MR's order
    assert new["HEROS typo"]["mr"] == [None, 6] and old["DefSent MRR"]["mr"] == [None, 2]  # constant; 2 models
    assert new["HEROS synonym"]["cr"] == [None, 0]  # no CR accuracies
    written = out["written"]
    diag = {**written["diagnostics"]["heros-goemotions"], **written["diagnostics"]["defsent-wordnet"]}
    for excluded, tables in ((False, out["tables"]), (True, out["tables_excluding_postprocessed"])):
        for row in ("HEROS synonym", "HEROS antonym", "DefSent MRR"):
            for task in ("mr", "sst2"):
                models = sorted(m for m in diag[row] if not (excluded and m == "m5"))  # m5: post-processed
                acc = written["downstream"][task]
                expected = spearmanr([diag[row][m] for m in models], [acc[m] for m in models]).statistic
                assert tables[1][row][task] == [pytest.approx(expected), len(models)], (excluded, row, task)
    assert out["tables_excluding_postprocessed"][0]["HEROS synonym"]["mr"] == [pytest.approx(-1.0), 5]


def _check_e5_prefix(out: dict[str, Any], tmp: Path) -> None:
    """Both prefixes on every primary number of the STS13 slice, each a correlation, and the prefix changes them."""
    import math

    assert out["tasks"] == ["sts13-head"] and out["smoke"]["pairs_per_file"] * out["smoke"]["files"] == 36
    numbers = out["numbers"]
    assert list(numbers) == ["sts13-head spearman [wmean]"], numbers
    for key, by_prefix in numbers.items():
        assert set(by_prefix) == {"passage", "query"}, key
        assert all(math.isfinite(v) and -1 <= v <= 1 for v in by_prefix.values()), (key, by_prefix)
    assert any(v["passage"] != v["query"] for v in numbers.values()), numbers  # another prefix, other vectors


def _check_heros_audit_sample(out: dict[str, Any], tmp: Path) -> None:
    """The documented draw, redone here on each subset's filled rows: seeded per subset, listed in file order."""
    import numpy as np

    subsets = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")
    filled = out["filled_ids"]
    assert set(filled) == set(subsets) and len(filled["negation-main"]) == 6 and out["built"]["params"]["n"] == 6
    assert out["small_again_equal"] is True
    for rows, size in ((out["rows"], out["sample_size"]), (out["small"], out["small_size"])):
        assert {r[0] for r in rows} <= set(subsets) and all(r[2] and r[3] and r[2] != r[3] for r in rows), rows
        for k, subset in enumerate(subsets):
            have = filled[subset]
            picked = np.random.default_rng([43, k]).choice(len(have), size=min(size, len(have)), replace=False)
            assert [r[1] for r in rows if r[0] == subset] == [have[i] for i in sorted(picked)], (subset, size)
    assert len(out["small"]) < len(out["rows"])  # 3 a subset picks among more rows than it keeps


def _check_gpu_zoo(out: dict[str, Any], tmp: Path) -> None:
    """The rehearsal of the GPU proof on the CPU: the pipeline ran every model (bfloat16 runs float32 on the CPU, so
    it equals float32), every architecture was measured with its floor, the projection read the paper's zoo."""
    from tests.support.benchmark_scripts import load_benchmark

    pipe = out["pipeline"]
    assert pipe["exit"] == 0, pipe.get("stderr_tail")
    models = {"glove-6b-50d-top5k", "all-minilm-l6-v2", "all-minilm-l6-v2-bf16", "all-minilm-l6-v2-mean"}
    assert {k.split("|")[0] for k in pipe["metrics"]} == models
    assert {k.split("|")[1] for k in pipe["metrics"]} == {"evalrank-word", "evalrank-sentence", "stsb", "trec", "mr"}
    assert pipe["bf16_vs_fp32"]["pass"] and {r["metric"].split("|")[1] for r in pipe["bf16_vs_fp32"]["rows"]} == {
        "stsb",
        "evalrank-sentence",
    }
    rows = out["throughput"]["rows"]
    assert {r["arch"] for r in rows} == set(load_benchmark("gpu_zoo.py", "evalfarm_gpu_zoo").SMOKE_ARCHS)
    assert all(r["texts_per_s"] > 0 and r["encoder_vs_floor"] > 0 for r in rows), rows
    assert all(r["params"] == r["params_formula"] or abs(r["params"] - r["params_formula"]) < 0.001 * r["params"]
               for r in rows)  # fmt: skip
    for row in out["diagnosis"]["rows"]:
        assert all(row[k] > 0 for k in ("count_loop_0.1", "encoder", "floor_exact_widths", "tokenise_only")), row
    proj = out["projection"]
    assert proj["models"] == 106 and proj["forward_passes"] == 7 and proj["score_seconds_serial"] > 0
    # --smoke measures one architecture a family: the paper's BERT-base / -large and RoBERTa-large are not among them
    assert proj["unmeasured_architectures"] == ["BERT-base", "BERT-large", "RoBERTa-large"]
    assert proj["wall_serial_seconds"] == {"float32": None, "bfloat16": None}


def _check_gpu_carry(out: dict[str, Any], tmp: Path) -> None:
    calls = out["calls"]
    assert set(calls) == {"call-a", "call-b", "call-c"}
    assert "call-b/data.tar.xz" in calls["call-b"]["files"] and "call-b/inputs/zoo.json" in calls["call-b"]["files"]
    assert calls["call-c"]["files"]["call-c/minilm/model.safetensors"] < 48_000_000  # float16: half of 90.9 MB
    assert calls["call-c"]["under_limit"] and out["tree_bytes"] > 0


def _check_type_counts(out: dict[str, Any], tmp: Path) -> None:
    total = out["total"]
    assert total["lines"] == sum(f["lines"] for f in out["files"].values()) > 10_000, total
    assert total["any"] == sum(f["any"] for f in out["files"].values()) and "evalfarm/api.py" in out["files"], total
    assert total["any_per_kloc"] == round(1000 * total["any"] / total["lines"], 2), total


SMOKE: dict[str, tuple[list[str], Callable[[Any, Path], None]]] = {
    "bench_warehouse.py": ([], _check_warehouse),
    "bench_table_formats.py": ([], _check_table_formats),
    "answer_tables.py": (["--out", "{tmp}/answer"], _check_answer_tables),
    "bench_classify.py": (["--dtype", "float64", "mixed"], _check_classify),
    "bench_eta.py": ([], _check_eta),
    "bench_planning.py": ([], _check_planning),
    "compare_warehouses.py": (["--ranks", "--views"], _check_compare_warehouses),
    "diag_curvature_refresh.py": ([], _check_curvature_refresh),
    "bench_neighbours.py": ([], _check_neighbours),
    "bench_nightly.py": (["--warehouse", "{tmp}/wh"], _check_nightly),
    "bench_noop.py": ([], _check_noop),
    "bench_quality.py": ([], _check_quality),
    "bench_rank.py": ([], _check_rank),
    "bench_sample_vs_full.py": ([], _check_sample_vs_full),
    "sample_vs_full_warehouse.py": ([], _check_sample_vs_full_warehouse),
    "bench_scale.py": ([], _check_scale),
    "bench_scheduler.py": ([], _check_scheduler),
    "bench_toolkit.py": ([], _check_toolkit),
    "bench_vectors.py": ([], _check_vectors),
    "conformance.py": ([], _check_conformance),
    "faults.py": ([], _check_faults),
    "gpu_check.py": ([], _check_gpu),
    "gpu_zoo.py": (["--device", "cpu", "--inputs", "{tmp}/carry"], _check_gpu_zoo),
    "gpu_carry.py": (["--out", "{tmp}/carry", "all"], _check_gpu_carry),
    "diagnostics_versions.py": ([], _check_diagnostics_versions),
    "e5_prefix.py": ([], _check_e5_prefix),
    "heros_audit_sample.py": ([], _check_heros_audit_sample),
    "spearman_null.py": ([], _check_spearman_null),
    "type_counts.py": ([], _check_type_counts),
}
"""Each script: its arguments after ``--smoke --json OUT`` (``{tmp}``: the test's folder) and what its JSON must
hold."""


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.slow
@pytest.mark.parametrize("script", SMOKE)
def test_benchmark_runs_with_tiny_settings(script: str, tmp_path: Path) -> None:
    extra, check = SMOKE[script]
    out = tmp_path / "out.json"
    before = _files(BENCH)
    cmd = [sys.executable, str(BENCH / script), "--smoke", "--json", str(out)]
    cmd += [a.format(tmp=tmp_path) for a in extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALFARM_CONFIG": ""}  # this checkout; no .evalfarm.toml
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    log = f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0, log
    assert out.is_file(), log
    check(json.loads(out.read_text()), tmp_path)
    # a smoke run writes nothing into the checkout: benchmarks/results/ holds measured figures only
    assert _files(BENCH) == before


def test_every_benchmark_script_has_a_smoke_run() -> None:
    """A new script in benchmarks/ fails here until it has a ``--smoke`` and an entry in SMOKE."""
    assert sorted(p.name for p in BENCH.glob("*.py")) == sorted(SMOKE)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_the_diagnostics_exact_hessian_is_the_engines_objectives(n_classes: int) -> None:
    """diag_curvature_refresh.py's exact Hessian (the multinomial one from its class pairs' Grams) against central
    differences of the engine's own gradient, model by model: a wrong parameter order, class pair or
    standardisation mapping fails it."""
    import numpy as np
    import torch

    from evalfarm import classify
    from tests.support.benchmark_scripts import load_benchmark

    diag = load_benchmark("diag_curvature_refresh.py", "diag_curvature_refresh")
    rng = np.random.default_rng(3)
    n, d = 90, 4
    X = torch.from_numpy(rng.standard_normal((n, d)) * [1.0, 2.0, 0.5, 3.0] + [0.0, 1.0, -2.0, 0.5])
    y = torch.from_numpy(rng.integers(0, n_classes, n))
    masks = [np.arange(0, 70), np.arange(20, 90)]
    mean = torch.stack([X[m].mean(0) for m in masks])
    inv = torch.stack([1 / X[m].std(0, unbiased=False) for m in masks])
    K = 1 if n_classes == 2 else n_classes
    problem = classify._Problem(X=X, y=y, K=K, mean=mean, inv=inv, masks=masks)
    sets = np.array([0, 1])
    Mn, lam = problem.row_weights(sets, [0.5, 2.0])
    fg = problem._objective(sets, Mn, lam, torch.float64)
    theta = torch.from_numpy(rng.standard_normal((2, (d + 1) * K)) * 0.7)
    every = torch.arange(2)
    h = 1e-5
    for b in range(2):
        H = diag.exact_hessian(problem, sets, Mn, lam, theta, b)
        cols = []
        for j in range((d + 1) * K):
            e = torch.zeros_like(theta)
            e[b, j] = h
            cols.append((fg(theta + e, every)[1][b] - fg(theta - e, every)[1][b]) / (2 * h))
        numeric = torch.stack(cols, dim=1)
        assert torch.allclose(H, numeric, rtol=1e-4, atol=2e-6), (b, (H - numeric).abs().max())


def test_compare_warehouses_subset_compares_only_the_units_after_holds(monkeypatch) -> None:
    from benchmarks import compare_warehouses as cw

    def row(model: str, task: str, value: float) -> dict[str, Any]:
        key = dict(zip(cw.KEY, (model, task, "sts", "all", "cos", None, "spearman"), strict=True))
        return {**key, "value": value, **dict.fromkeys(cw.IDENTITY, "same")}

    full = [row("a", "t1", 0.5), row("a", "t2", 0.25), row("b", "t1", 0.75)]
    fresh = [row("a", "t1", 0.5)]
    monkeypatch.setattr(cw, "_rows", lambda wh, sql: full if wh == "full" else fresh)
    whole = cw.compare_metrics("full", "fresh")
    assert len(whole["only_before"]) == 2
    part = cw.compare_metrics("full", "fresh", subset=True)
    assert part["only_before"] == [] and part["value_differs"] == [] and part["rows_before"] == 1
    fresh[0] = row("a", "t1", 0.5 + 1e-7)
    assert len(cw.compare_metrics("full", "fresh", subset=True)["value_differs"]) == 1
