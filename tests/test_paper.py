"""`evalfarm correlations --layout paper`: the EvalRank paper's rows and columns, rho x 100, its published cells
beside the measured ones, the tie policy, downstream variant and zoo composition with each table; on a small
warehouse of hand-written Parquet files whose correlations are known."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalfarm import api
from evalfarm.analysis.correlations import correlation_table
from evalfarm.analysis.paper import COLUMNS, PUBLISHED, SENTENCE_ROWS, WORD_ROWS, paper_table_from
from evalfarm.analysis.paper import table10_from as paper_table10_from
from evalfarm.cli import app
from evalfarm.warehouse import Warehouse, now
from tests.test_correlations import add_accuracy, add_metric, add_model

ACC = [0.60, 0.65, 0.70, 0.80, 0.90]  # downstream accuracies rank the five models 1..5


def add_evalrank_metrics(wh: Warehouse, model: str, values: dict[str, dict[str, float]]) -> None:
    """One EvalRank unit as the scorer writes it (``{ties: {metric: value}}``): mrr primary, hits@1 / hits@3
    beside it."""
    fp, created = f"er-{model}", now()  # one unit: one timestamp (the metrics view keeps a unit's newest)
    rows = [
        {"run_id": "hand", "model": model, "task": "evalrank-sentence", "scorer": "evalrank", "subset": "all",
         "variant": "cos", "ties": ties, "metric": metric, "value": value, "is_primary": metric == "mrr",
         "higher_is_better": True, "fingerprint": fp, "spec_hash": f"h-{model}", "created_at": created}
        for ties, metrics in values.items()
        for metric, value in metrics.items()
    ]  # fmt: skip
    wh.write("metrics", rows)


@pytest.fixture
def paper_wh(tmp_path: Path) -> Warehouse:
    """Four neural models and a bag of words. EvalRank MRR ranks them as MR does (rho 100), Hits@1 the other way
    round (-100), Hits@3 by 1, 3, 2, 4, 5 (90); STS12 (wmean) by 2, 1, 3, 4, 5 (90); the pessimistic MRR is
    reversed (-100); no STS13. MR and SCICITE have a logreg variant; MR also a second one with three models."""
    wh = Warehouse(tmp_path / "wh").init()
    for i in range(5):
        m = f"m{i + 1}"
        add_model(wh, m, "sentence", "bow" if i == 4 else "transformers")
        optimistic = {"mrr": 0.1 * (i + 1), "hits@1": 0.5 - 0.1 * i, "hits@3": [1, 3, 2, 4, 5][i]}
        add_evalrank_metrics(wh, m, {"optimistic": optimistic, "pessimistic": {"mrr": 1 - 0.1 * i}})
        add_metric(wh, m, "sts12", "sts", [2, 1, 3, 4, 5][i], metric="spearman", subset="wmean")
        add_metric(wh, m, "sts12", "sts", 5 - i, metric="spearman", subset="MSRpar")  # a subset, not the row
        add_accuracy(wh, m, "mr", ACC[i])
        add_accuracy(wh, m, "scicite", ACC[i])
        if i < 3:
            add_metric(wh, m, "mr", "downstream", ACC[2 - i], metric="accuracy", variant="full",
                       fingerprint=f"full-{m}")  # fmt: skip
    return wh


def test_the_paper_layout_has_its_rows_columns_and_known_cells(paper_wh):
    t = paper_table_from(paper_wh, level="sentence")
    assert t.rows == [r.label for r in SENTENCE_ROWS] and t.columns == [c for c, _ in COLUMNS["sentence"]]
    assert t.columns[:3] == ["SCICITE", "MR", "CR"] and "MRPC" not in t.columns
    assert t.downstream_variant == "logreg" and t.ties == "optimistic"  # the variant most cells have
    assert t.cells[("EvalRank MRR", "MR")] == (100.0, 5, 83.43)
    assert t.cells[("EvalRank Hits@1", "MR")] == (-100.0, 5, 85.39)
    assert t.cells[("EvalRank Hits@3", "SCICITE")] == (90.0, 5, 63.35)
    assert t.cells[("STS12", "MR")] == (90.0, 5, 38.62)  # the wmean subset, not MSRpar's (-100)
    assert t.cells[("STS13", "MR")] == (None, 0, 32.62)
    assert t.cells[("EvalRank MRR", "CR")] == (None, 0, 87.08)
    assert any("STS13" in n and "not measured" in n for n in t.notes)
    assert t.composition == {"neural": 4, "bag-of-words": 1}
    cap = t.caption()
    assert "ties optimistic" in cap and "downstream variant logreg" in cap and "4 neural, 1 bag-of-words" in cap
    pess = paper_table_from(paper_wh, level="sentence", ties="pessimistic")
    assert pess.cells[("EvalRank MRR", "MR")][0] == -100.0 and pess.cells[("STS12", "MR")][0] == 90.0
    full = paper_table_from(paper_wh, level="sentence", downstream_variant="full")
    assert full.cells[("EvalRank MRR", "MR")] == (-100.0, 3, 83.43) and full.downstream_variant == "full"
    assert full.cells[("EvalRank MRR", "SCICITE")][1] == 0


def test_table_11_and_the_word_level_take_their_own_published_cells(paper_wh):
    t11 = paper_table_from(paper_wh, level="sentence", exclude_postprocessed=True)
    assert t11.published_name == "Table 11" and t11.cells[("EvalRank Hits@3", "TREC")][2] == 86.51
    word = paper_table_from(paper_wh, level="word")
    assert word.published_name == "Table 3"
    assert word.rows[-3:] == ["EvalRank MRR", "EvalRank Hits@1", "EvalRank Hits@3"]
    assert word.cells[("RW-STANFORD", "SST2")] == (None, 0, 81.5)
    assert all(rho is None for rho, _, _ in word.cells.values()) and word.composition == {}
    assert paper_table_from(paper_wh, level="word", exclude_postprocessed=True).published_name is None


def test_published_cells_are_the_papers_tables_in_full():
    for (level, _), (name, cells) in PUBLISHED.items():
        rows = WORD_ROWS if level == "word" else SENTENCE_ROWS
        assert len(cells) == len(rows) * len(COLUMNS[level]), name
    assert PUBLISHED[("word", False)][1][("SIMVERB-3500", "SICK-E")] == 58.08
    assert PUBLISHED[("sentence", False)][1][("STR", "MPQA")] == -29.57
    assert PUBLISHED[("sentence", True)][1][("STS16", "SCICITE")] == 63.62


def test_the_default_layout_keeps_primary_metrics_only(paper_wh):
    table = correlation_table(paper_wh, level="sentence")
    assert not any(r["intrinsic_metric"] in ("hits@1", "hits@3") for r in table.records)
    assert [r for r in table.rows if r.startswith("evalrank-sentence")] == ["evalrank-sentence (cos)"]


def test_cli_prints_the_paper_layout_with_the_published_cells(paper_wh):
    res = CliRunner().invoke(
        app, ["correlations", "--warehouse", paper_wh.uri, "--layout", "paper", "--published", "--no-refresh"]
    )
    assert res.exit_code == 0, res.output
    assert "EvalRank Hits@1" in res.output and "-100.00 (85.39)" in res.output and "90.00 (38.62)" in res.output
    assert "ties optimistic" in res.output and "downstream variant logreg" in res.output
    assert "Table 6" in res.output and "Just Rank" in res.output
    csv = CliRunner().invoke(
        app, ["correlations", "--warehouse", paper_wh.uri, "--layout", "paper", "--published", "-f", "csv"]
    )
    assert csv.exit_code == 0 and "EvalRank MRR,MR,100.0,5,83.43" in csv.stdout
    bad = CliRunner().invoke(app, ["correlations", "--warehouse", paper_wh.uri, "--published"])
    assert bad.exit_code != 0 and "--layout paper" in bad.output


def test_the_report_shows_the_paper_comparison_and_the_zoo_composition(paper_wh, tmp_path):
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", "--warehouse", paper_wh.uri, "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "index.html").read_text()
    assert "In the paper&#x27;s layout" in html or "In the paper's layout" in html
    assert "100.00 (83.43)" in html and "Table 6" in html and "Just Rank" in html
    assert "(4 neural, 1 bag-of-words)" in html  # beside the table: its caption
    assert "downstream variant full, logreg" in html


def test_postprocessing_effect_is_the_share_of_originals_beating_their_twins(tmp_path):
    """Table 10 as a view: a sentence twin pair, and a word pair whose downstream numbers are their bags of words'."""
    wh = Warehouse(tmp_path / "wh").init()
    add_model(wh, "b", "sentence", "transformers")
    add_model(wh, "b-white", "sentence", "transformers", base="b", postprocess={"method": "whitening"})
    add_model(wh, "c", "sentence", "transformers")
    add_model(wh, "c-pcr1", "sentence", "transformers", base="c", postprocess={"method": "pcr", "d": 1})
    add_model(wh, "w", "word", "word-vectors")
    add_model(wh, "w-abtt3", "word", "word-vectors", base="w", postprocess={"method": "abtt", "d": 3})
    add_model(wh, "bow-w", "sentence", "bow", base="w")
    add_model(wh, "bow-w-abtt3", "sentence", "bow", base="w-abtt3")
    for m, sts, mr in (("b", 0.5, 0.8), ("b-white", 0.7, 0.7), ("c", 0.4, 0.6), ("c-pcr1", 0.6, 0.6)):
        add_metric(wh, m, "stsb", "sts", sts, metric="spearman", subset="test")
        add_accuracy(wh, m, "mr", mr)
    add_metric(wh, "w", "wordsim-rw", "word-similarity", 0.3, metric="spearman", variant="raw")
    add_metric(wh, "w-abtt3", "wordsim-rw", "word-similarity", 0.4, metric="spearman", variant="raw")
    add_accuracy(wh, "bow-w", "mr", 0.7)
    add_accuracy(wh, "bow-w-abtt3", "mr", 0.6)
    add_metric(wh, "bow-w", "stsb", "sts", 0.2, metric="spearman", subset="test")  # a bag's own STS: not word level
    add_metric(wh, "bow-w-abtt3", "stsb", "sts", 0.1, metric="spearman", subset="test")
    rows = {(r["level"], r["task"]): r for r in wh.query("SELECT * FROM postprocessing_effect").to_pylist()}
    assert set(rows) == {("sentence", "stsb"), ("sentence", "mr"), ("word", "wordsim-rw"), ("word", "mr")}
    sts, mr = rows[("sentence", "stsb")], rows[("sentence", "mr")]
    assert (sts["n_pairs"], sts["original_wins"], sts["twin_wins"], sts["ties"]) == (2, 0.0, 1.0, 0.0)
    assert (mr["n_pairs"], mr["original_wins"], mr["twin_wins"], mr["ties"]) == (2, 0.5, 0.0, 0.5)
    assert rows[("word", "wordsim-rw")]["twin_wins"] == 1.0
    assert rows[("word", "mr")]["original_wins"] == 1.0 and rows[("word", "mr")]["n_pairs"] == 1
    t10 = paper_table10_from(wh)
    assert t10.downstream_variant == "logreg"
    assert t10.cells[("MR", "sentence")] == (50.0, 2, 63.6) and t10.cells[("MR", "word")] == (100.0, 1, 42.1)
    assert t10.cells[("RW-STANFORD", "word")] == (0.0, 1, 47.4)
    assert t10.cells[("STS-Benchmark", "sentence")] == (0.0, 2, 0.0)
    assert t10.cells[("SST2", "sentence")] == (None, 0, 88.2)
    res = CliRunner().invoke(app, ["correlations", "--warehouse", wh.uri, "--layout", "paper", "--table", "10"])
    assert res.exit_code == 0 and "50.0 (n=2) (63.6)" in res.output and "Table 10" in res.output


def test_table_4_lays_out_the_word_ablations_beside_the_published_cells(tmp_path):
    """Five word models (downstream through their bags of words): EvalRank cos agrees with MR, its l2 variant
    disagrees, the pool without the wiki background agrees on 1, 3, 2, 4, 5 (90)."""
    wh = Warehouse(tmp_path / "wh").init()
    for i in range(5):
        w = f"w{i + 1}"
        add_model(wh, w, "word", "word-vectors")
        add_model(wh, f"bow-{w}", "sentence", "bow", base=w)
        add_metric(wh, w, "evalrank-word", "evalrank", 0.1 * (i + 1), ties="optimistic")
        add_metric(wh, w, "evalrank-word", "evalrank", 1 - 0.1 * i, variant="l2", ties="optimistic")
        add_metric(wh, w, "evalrank-word-nowiki", "evalrank", [1, 3, 2, 4, 5][i], ties="optimistic")
        for task in ("mr", "sst2", "scicite"):
            add_accuracy(wh, f"bow-{w}", task, ACC[i])
    t4 = paper_table_from(wh, level="sentence", table="4")  # the table's level wins
    assert (t4.level, t4.published_name, t4.columns) == ("word", "Table 4", ["SCICITE", "MR", "SST2"])
    assert t4.rows == ["EvalRank (cos)", "w/o wiki vocabs", "w/ WN synonym pairs", "w/ l2 metric"]
    assert t4.cells[("EvalRank (cos)", "MR")] == (100.0, 5, 87.91)
    assert t4.cells[("w/o wiki vocabs", "SST2")] == (90.0, 5, 88.26)
    assert t4.cells[("w/ l2 metric", "SCICITE")] == (-100.0, 5, 77.47)
    assert t4.cells[("w/ WN synonym pairs", "MR")] == (None, 0, 86.56)
    assert any("w/ WN synonym pairs" in n for n in t4.notes)
    assert t4.composition == {"word-vectors": 5}
    res = CliRunner().invoke(app, ["correlations", "--warehouse", wh.uri, "--layout", "paper", "--table", "4"])
    assert res.exit_code == 0 and "w/o wiki vocabs" in res.output and "90.00" in res.output
    bad = CliRunner().invoke(app, ["correlations", "--warehouse", wh.uri, "--layout", "paper", "--table", "5"])
    assert bad.exit_code != 0 and "3, 4, 6, 7, 11, 10" in bad.output
    # the table fixes its models and level: options asking otherwise fail instead of being ignored
    args = ["correlations", "--warehouse", wh.uri, "--layout", "paper"]
    clash = CliRunner().invoke(app, [*args, "--table", "4", "--exclude-postprocessed"])
    assert clash.exit_code != 0 and "over all models" in clash.output
    clash = CliRunner().invoke(app, [*args, "--table", "11", "--level", "word"])
    assert clash.exit_code != 0 and "sentence-level table" in clash.output


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({"table": "11", "level": "word"}, "sentence-level table"),
        ({"table": "3", "level": "sentence"}, "word-level table"),
        ({"table": "4", "exclude_postprocessed": True}, "over all models"),
        ({"table": "6", "exclude_postprocessed": True}, "over all models"),
        ({"table": "5"}, "3, 4, 6, 7, 11, 10"),
        ({"table": "10"}, "paper_table10"),
        ({"ties": "all"}, "one tie policy"),
        ({"level": "phrase"}, "word or sentence"),
        ({"table": "4", "compare": True}, "Tables 3, 6 and 11"),
        ({"table": "7", "compare": True}, "Tables 3, 6 and 11"),
    ],
)  # fmt: skip
def test_the_api_refuses_a_paper_request_that_contradicts_itself(tmp_path, request_, says):
    """The rules of a paper-layout request are the API's (issue 54: the CLI had them, the API let the table's level
    win): a level or post-processing choice the paper's table does not have, Table 10, an unknown table, every tie
    policy at once, a comparison on a table that is not over the whole zoo. Refused before the warehouse is read
    (there is none here), so the CLI says the same."""
    with pytest.raises(ValueError, match=says):
        api.paper_correlation_table(warehouse=tmp_path / "none", **request_)


def test_a_paper_table_without_a_level_lays_out_its_own(tmp_path):
    """``level`` left out: the table's (Table 4 is word level); given and the same, accepted; the CLI's --level
    without a value passes nothing, so `--table 4` alone works there too."""
    wh = Warehouse(tmp_path / "wh").init()
    for i in range(3):
        add_model(wh, f"w{i}", "word", "word-vectors")
        add_metric(wh, f"w{i}", "evalrank-word", "evalrank", 0.1 * (i + 1), ties="optimistic")
    for request_ in ({}, {"level": "word"}):
        t4 = api.paper_correlation_table(warehouse=str(wh.root), table="4", **request_)
        assert (t4.level, t4.published_name) == ("word", "Table 4")
    assert api.paper_correlation_table(warehouse=str(wh.root)).level == "sentence"  # no table: sentence


def test_the_ablation_catalog_runs_only_its_tasks_over_the_local_zoo():
    from evalfarm.catalog.registry import load_catalog

    cat = load_catalog("paper-ablations")
    assert cat.default_tasks == ["evalrank-word-nowiki", "evalrank-sentence-stsb", "evalrank-sentence-str"]
    nowiki, full = cat.task("evalrank-word-nowiki"), cat.task("evalrank-word")
    assert set(full.files) - set(nowiki.files) == {"background_wiki"}
    assert {k: full.files[k] for k in nowiki.files} == nowiki.files
    assert cat.composition()["sentence"]["neural"] >= 40  # the local zoo's models


def test_table_7_sets_the_pair_sources_beside_the_default_pool(paper_wh):
    for i in range(5):  # STS-B only agrees with MR as the default MRR does; STR only the other way round
        m = f"m{i + 1}"
        add_metric(paper_wh, m, "evalrank-sentence-stsb", "evalrank", 0.1 * (i + 1), ties="optimistic")
        add_metric(paper_wh, m, "evalrank-sentence-str", "evalrank", 0.5 - 0.1 * i, ties="optimistic")
    t7 = paper_table_from(paper_wh, level="word", table="7")
    assert (t7.level, t7.published_name, t7.columns) == ("sentence", "Table 7", ["SCICITE", "MR", "SST2"])
    assert t7.rows[:4] == ["STS-B + STR MRR", "STS-B + STR Hits@1", "STS-B + STR Hits@3", "STS-B only MRR"]
    assert t7.cells[("STS-B + STR Hits@1", "MR")] == (-100.0, 5, 85.39)
    assert t7.cells[("STS-B only MRR", "MR")] == (100.0, 5, 75.85)
    assert t7.cells[("STR only MRR", "SCICITE")] == (-100.0, 5, 63.51)
    assert t7.cells[("STR only Hits@3", "MR")] == (None, 0, 82.55)


def test_pairs_from_keeps_the_pairs_of_one_source_and_the_whole_background(tmp_path, monkeypatch):
    """A pool of three pairs: one from STS-B (tokenized differently), one from STR, one from neither."""
    from evalfarm.scorers.evalrank import EvalRankTask
    from evalfarm.taskdata.data import task_checksum
    from evalfarm.taskdata.evalrank import load_evalrank_pool

    d = tmp_path / "data"
    d.mkdir()
    (d / "pairs.txt").write_text("a plane is taking off .\tan air plane is taking off .\nit 's fine .\tall good .\n"
                                 "x y .\tz w .\n")  # fmt: skip
    (d / "bg.txt").write_text("a plane is taking off .\nan air plane is taking off .\nit 's fine .\nall good .\n"
                              "x y .\nz w .\nother .\n")  # fmt: skip
    (d / "stsb.csv").write_text("main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\t"
                                "An air plane is taking off.\n")  # fmt: skip
    (d / "str.csv").write_text(
        'Index,SourceID,SubsetID,PairID,Text,Score\n0,S,S_pp,S_1,"All good!\nIt\'s fine.",0.9\n'
    )
    monkeypatch.setenv("EVALFARM_DATA", str(d))
    import hashlib

    def sha(name: str) -> str:
        return hashlib.sha256((d / name).read_bytes()).hexdigest()

    def task(source: str | None, extra: dict[str, str]) -> EvalRankTask:
        files = {"pairs": "pairs.txt", "background": "bg.txt", **extra}
        return EvalRankTask(id=f"t-{source}", level="sentence", version="1", format="evalrank-sentence",
                            pairs_from=source, files=files, sha256={r: sha(f) for r, f in files.items()},
                            urls={}, licence="x", source="x")  # fmt: skip

    full = load_evalrank_pool(task(None, {}))
    stsb = load_evalrank_pool(task("stsb", {"from.train": "stsb.csv"}))
    strp = load_evalrank_pool(task("str", {"from.data": "str.csv"}))
    assert (full.n_pairs, stsb.n_pairs, strp.n_pairs) == (3, 1, 1)
    assert stsb.items[stsb.queries[0]] == "a plane is taking off ." and strp.items[strp.queries[0]] == "it 's fine ."
    assert len(stsb.items) == len(full.items) == 7  # the background is unchanged
    assert task_checksum(task(None, {})) != task_checksum(task("stsb", {}))
    from evalfarm.catalog.registry import load_catalog

    # a field added later counts only when set: the default pool keeps the checksum it had before pairs_from
    assert task_checksum(load_catalog("tasks").task("evalrank-sentence")) == "39beb2e8af5af714"


def test_figure_4_orders_by_mr_and_sst2_with_evalrank_stsb_and_str_first(paper_wh, tmp_path):
    for i in range(5):
        m = f"m{i + 1}"
        add_accuracy(paper_wh, m, "sst2", ACC[i])
        add_metric(paper_wh, m, "stsb", "sts", 0.1 * i, metric="spearman", subset="test")
        add_metric(paper_wh, m, "str", "sts", 0.2 * i, metric="spearman", subset="test")
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", "--warehouse", paper_wh.uri, "--out", str(out)])
    assert res.exit_code == 0, res.output
    figures = sorted(p.name for p in (out / "img").glob("figure4-*.png"))
    assert figures == ["figure4-sentence-mr.png", "figure4-sentence-sst2.png"]

    from evalfarm.analysis.correlations import correlation_table
    from evalfarm.analysis.report import _figure_rows

    table = correlation_table(paper_wh, level="sentence")
    column = next(c for c in table.columns if c.startswith("mr"))  # "mr (logreg)": two variants here
    rows = _figure_rows(table, column)
    assert rows[:3] == ["evalrank-sentence (cos)", "str test (cos)", "stsb test (cos)"]


def _evalrank_unit(wh: Warehouse, model: str, task: str, mrr: dict[str, float], *, n_pairs: int) -> None:
    """One EvalRank unit as the scorer writes it: the MRR per tie policy (primary) and the pool's pair count."""
    fp, created = f"er-{model}-{task}", now()
    rows = [
        {"run_id": "hand", "model": model, "task": task, "scorer": "evalrank", "subset": "all", "variant": "cos",
         "ties": ties, "metric": metric, "value": value, "is_primary": metric == "mrr", "higher_is_better": True,
         "fingerprint": fp, "spec_hash": f"h-{model}", "created_at": created}
        for ties, metric, value in [*((t, "mrr", v) for t, v in mrr.items()), (None, "n_pairs", n_pairs)]
    ]  # fmt: skip
    wh.write("metrics", rows)


def test_table_3_both_ways_over_the_coverage_variants_compared_models(tmp_path):
    """Six word models, five of them in the coverage variant 'common': the protocol's EvalRank disagrees with MR
    (its OOV ties put w5 first: 5, 1, 2, 3, 4 -> rho 0 over the five), the coverage-controlled one agrees (100);
    SimLex (raw) is the same both ways on 1, 3, 2, 4, 5 (90). w6 has no variant: it is left out of both columns,
    and its protocol number would otherwise change the protocol cell."""
    wh = Warehouse(tmp_path / "wh").init()
    for i in range(6):
        w = f"w{i + 1}"
        add_model(wh, w, "word", "word-vectors")
        add_model(wh, f"bow-{w}", "sentence", "bow", base=w)
        mrr = {"optimistic": [2, 3, 4, 5, 1, 0][i], "realistic": [2, 3, 4, 5, 6, 0][i]}
        _evalrank_unit(wh, w, "evalrank-word", mrr, n_pairs=5514)
        add_metric(wh, w, "wordsim-simlex-999", "word-similarity", [1, 3, 2, 4, 5, 9][i], variant="raw",
                   metric="spearman")  # fmt: skip
        if i < 5:
            _evalrank_unit(wh, w, "evalrank-word-common", {"optimistic": 0.1 * (i + 1)}, n_pairs=1874)
            add_metric(wh, w, "wordsim-simlex-999-common", "word-similarity", [1, 3, 2, 4, 5][i], variant="raw",
                       metric="spearman")  # fmt: skip
        add_accuracy(wh, f"bow-{w}", "mr", ACC[i] if i < 5 else 0.1)
    from evalfarm.analysis.paper import coverage_table_from

    t = coverage_table_from(wh, name="common", ties="optimistic", downstream_variant="logreg")
    assert t.models == ["w1", "w2", "w3", "w4", "w5"]
    assert t.cells[("EvalRank MRR", "MR")] == (0.0, 100.0, 87.91)
    assert t.cells[("SIMLEX-999", "MR")] == (90.0, 90.0, 48.02)
    assert t.cells[("WS-353-All", "MR")] == (None, None, 43.68)
    assert t.pairs["evalrank-word"] == (5514, 1874)
    realistic = coverage_table_from(wh, name="common", ties="realistic", downstream_variant="logreg")
    assert realistic.cells[("EvalRank MRR", "MR")][0] == 100.0  # the realistic protocol row: 2..6, in MR's order
    res = CliRunner().invoke(
        app, ["correlations", "--warehouse", wh.uri, "--layout", "paper", "--coverage", "common", "--ties", "all"]
    )
    assert res.exit_code == 0, res.output
    assert "0.00 / 100.00 (87.91)" in res.output and "evalrank-word 1874/5514" in res.output
    assert res.output.count("EvalRank ties") == 3
    bad = CliRunner().invoke(app, ["correlations", "--warehouse", wh.uri, "--layout", "paper", "--coverage", "x"])
    assert bad.exit_code != 0 and "evalrank-word-x" in bad.output
    plain = CliRunner().invoke(app, ["correlations", "--warehouse", wh.uri, "--coverage", "common"])
    assert plain.exit_code != 0 and "--layout paper" in plain.output
