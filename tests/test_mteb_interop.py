"""MTEB interop: a warehouse's STS numbers in MTEB's results layout and back, and hand-written MTEB results files
(tests/fixtures/mteb, MTEB's ``TaskResult`` schema, one pre-1.11 file) imported beside evalfarm's own numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from evalfarm import api
from evalfarm.analysis.mteb_results import NO_TWIN, TWINS, read_task_result
from evalfarm.cli import app
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse, now

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "mteb" / "results"
TASKS = ["sts12", "stsb", "sick-r"]


@pytest.fixture(scope="module")
def toy_warehouse(tmp_path_factory, toy_glove) -> Path:
    """A real warehouse: a bag of words over the toy GloVe vectors on three STS tasks (in process, a few seconds)."""
    d = tmp_path_factory.mktemp("mteb")
    cat = d / "cat.yaml"
    cat.write_text(f"""
include: [{REPO / "catalog" / "tasks.yaml"}]
tasks: [{", ".join(TASKS)}]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
  - {{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}}
""")
    assert run_catalog(cat, d / "wh", executor="local").ok
    return d / "wh"


def _own(wh: Path) -> list[dict]:
    return (
        Warehouse(wh)
        .query(
            "SELECT model, task, scorer, subset, variant, metric, value, fingerprint, spec_hash FROM metrics "
            "WHERE variant <> 'mteb' ORDER BY ALL"
        )
        .to_pylist()
    )


def test_export_writes_mtebs_schema_and_import_gives_the_same_numbers_back(toy_warehouse, tmp_path):
    out = tmp_path / "results"
    res = api.export_mteb(out, warehouse=toy_warehouse, models=["bow-toy", "nobody"])
    names = sorted(p.relative_to(out).as_posix() for p in res.files)
    files = ("SICK-R", "STS12", "STSBenchmark", "model_meta")
    assert names == [f"bow-toy/no_revision_available/{n}.json" for n in files]
    assert any(s.startswith("nobody:") for s in res.skipped)
    data = json.loads((out / "bow-toy" / "no_revision_available" / "STS12.json").read_text())
    assert {"dataset_revision", "task_name", "mteb_version", "scores", "evaluation_time"} <= set(data)
    assert data["task_name"] == "STS12" and data["dataset_revision"] == TWINS[0].dataset_revision
    (entry,) = data["scores"]["test"]
    assert entry["hf_subset"] == "default" and entry["languages"] == ["eng-Latn"]
    assert entry["main_score"] == entry["cosine_spearman"]
    own = {(r["task"], r["subset"], r["metric"]): r["value"] for r in _own(toy_warehouse)}
    # MTEB's STS12 test split is every pair of the year: evalfarm's pooled `all`, 0-1 scale (not x100)
    assert entry["cosine_spearman"] == round(own[("sts12", "all", "spearman")], 6)
    assert entry["cosine_pearson"] == round(own[("sts12", "all", "pearson")], 6)
    sick = json.loads((out / "bow-toy" / "no_revision_available" / "SICK-R.json").read_text())
    assert sick["scores"]["test"][0]["main_score"] == round(own[("sick-r", "all", "spearman")], 6)
    stsb = json.loads((out / "bow-toy" / "no_revision_available" / "STSBenchmark.json").read_text())
    assert stsb["scores"]["test"][0]["main_score"] == round(own[("stsb", "test", "spearman")], 6)

    fresh = tmp_path / "wh2"
    imp = api.import_mteb(out, warehouse=fresh)
    assert imp.imported == {"bow-toy": ["sick-r", "sts12", "stsb"]} and not imp.skipped
    back = (
        Warehouse(fresh)
        .query("SELECT task, subset, scorer, metric, value, is_primary, params FROM metrics WHERE variant = 'mteb'")
        .to_pylist()
    )
    got = {(r["task"], r["subset"], r["metric"]): r["value"] for r in back}
    assert got[("sts12", "all", "spearman")] == pytest.approx(own[("sts12", "all", "spearman")], abs=1e-6)
    assert got[("stsb", "test", "pearson")] == pytest.approx(own[("stsb", "test", "pearson")], abs=1e-6)
    assert {r["scorer"] for r in back} == {"sts"}
    assert all(r["is_primary"] == (r["metric"] == "spearman") for r in back)
    assert all(json.loads(r["params"])["source"] == "mteb" for r in back)
    assert api.verify(warehouse=fresh, strict=True).ok
    model = Warehouse(fresh).query("SELECT level, kind FROM models WHERE model = 'bow-toy'").to_pylist()
    assert model == [{"level": "sentence", "kind": "mteb"}]


def test_import_beside_evalfarms_own_numbers_changes_none_of_them(toy_warehouse, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(toy_warehouse, wh)
    before = _own(wh)
    spec = Warehouse(wh).query("SELECT model, spec_hash, kind FROM models ORDER BY model").to_pylist()
    out = tmp_path / "results"
    api.export_mteb(out, warehouse=wh)
    for _ in range(2):  # importing the same files again replaces their rows
        api.import_mteb(out, warehouse=wh)
    assert _own(wh) == before
    assert Warehouse(wh).query("SELECT model, spec_hash, kind FROM models ORDER BY model").to_pylist() == spec
    q = Warehouse(wh).query
    assert q("SELECT count(*) AS n FROM metrics WHERE variant = 'mteb'").to_pylist() == [{"n": 6}]  # 3 tasks x 2
    # each import is a computation of its own (history keeps both), under the same fingerprint, with the same values
    assert q("SELECT count(*) AS n FROM metrics_history WHERE variant = 'mteb'").to_pylist() == [{"n": 12}]
    assert q("SELECT count(*) AS n FROM changes WHERE reason = 'nondeterminism'").to_pylist() == [{"n": 0}]
    assert Warehouse(wh).query("SELECT count(*) AS n FROM conflicts").to_pylist() == [{"n": 0}]


def test_hand_written_mteb_files_join_the_correlations_as_their_own_variant(tmp_path):
    wh = tmp_path / "wh"
    res = api.import_mteb(FIXTURES, warehouse=wh, rename={"org-b/model-large": "large"})
    assert sorted(res.imported) == ["large", "legacy-model", "org-a__model-base", "org-a__model-small"]
    assert sorted(res.imported["org-a__model-base"]) == [
        "mteb-Banking77Classification",
        "mteb-MassiveIntentClassification",
        "sts12",
        "stsb",
    ]
    skipped = "\n".join(res.skipped)
    assert "SciFact" in skipped and "not English" in skipped and "STS13.json" in skipped  # retrieval, de, no langs
    q = Warehouse(wh).query
    rows = q("SELECT model, task, scorer, subset, variant, metric, value FROM metrics ORDER BY ALL").to_pylist()
    assert {r["variant"] for r in rows} == {"mteb"}
    legacy = {(r["task"], r["metric"]): r["value"] for r in rows if r["model"] == "legacy-model"}
    assert legacy == {  # pre-1.11 files: STS under cos_sim (test split: STS15's pooled all), flat classification
        ("sts15", "spearman"): 0.8619,
        ("sts15", "pearson"): 0.8512,
        ("mteb-Banking77Classification", "accuracy"): 0.7321,
        ("mteb-Banking77Classification", "f1"): 0.7275,
    }
    massive = {(r["subset"], r["metric"]): r["value"] for r in rows if r["task"] == "mteb-MassiveIntentClassification"}
    assert massive[("en/test", "accuracy")] == 0.68 and massive[("en/validation", "accuracy")] == 0.69
    assert not any(k[0].startswith("de/") for k in massive)
    bank = [r for r in rows if r["task"] == "mteb-Banking77Classification"]
    assert {r["scorer"] for r in bank} == {"downstream"} and {r["subset"] for r in bank} == {"test"}
    meta = q("SELECT params FROM metrics WHERE model = 'large' AND task = 'sts12' LIMIT 1").to_pylist()[0]
    assert json.loads(meta["params"])["revision"] == "3" * 40  # from model_meta.json
    cell = q(
        "SELECT n_models, spearman FROM correlations WHERE intrinsic_task = 'sts12' AND variant = 'mteb' "
        "AND downstream_task = 'mteb-Banking77Classification' AND downstream_subset = 'test' "
        "AND NOT excludes_postprocessed"
    ).to_pylist()
    # STS12 0.61 < 0.70 < 0.75, Banking77 0.70 < 0.80 > 0.76: ranks (1, 2, 3) against (1, 3, 2), rho = 0.5
    assert cell == [{"n_models": 3, "spearman": pytest.approx(0.5)}]


def test_reader_rejects_what_is_not_a_task_result(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"task_name": "STS12", "scores": {"test": [{"main_score": 0.5}]}}))
    with pytest.raises(ValueError, match="hf_subset"):
        read_task_result(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not an MTEB TaskResult"):
        read_task_result(bad)
    name, version, _, entries = read_task_result(next(FIXTURES.rglob("STSBenchmark.json")))
    assert (name, version, entries[0].split, entries[0].scores["main_score"]) == (
        "STSBenchmark",
        "1.14.12",
        "test",
        0.81,
    )


def test_twins_hold_mtebs_pairs_and_senteval_classification_has_none():
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.taskdata import load_task

    cat = load_catalog(REPO / "catalog" / "tasks.yaml")
    assert set(NO_TWIN) <= set(cat.tasks)
    for twin in TWINS:  # the subset exported as MTEB's split scores exactly as many pairs as MTEB's split has
        subsets = load_task(cat.task(twin.task)).subsets  # name -> (sentences 1, sentences 2, gold)
        n = sum(len(s[2]) for s in subsets.values()) if twin.subset == "all" else len(subsets[twin.subset][2])
        assert n == twin.n_pairs, twin


def test_export_leaves_out_units_of_other_data(toy_warehouse, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(toy_warehouse, wh)
    w = Warehouse(wh)  # bow-toy's stsb computed again on other data: 1000 pairs
    t = w.query("SELECT * FROM metrics_history WHERE model = 'bow-toy' AND task = 'stsb'")
    cut = pc.if_else(pc.equal(t["metric"], "n_pairs"), pa.scalar(1000.0), t["value"])
    t = t.set_column(t.schema.get_field_index("value"), "value", cut)
    later = pa.array([now()] * len(t), t.schema.field("created_at").type)
    w.write("metrics", t.set_column(t.schema.get_field_index("created_at"), "created_at", later))
    res = api.export_mteb(tmp_path / "out", warehouse=wh)
    assert [p.name for p in res.files] == ["SICK-R.json", "STS12.json", "model_meta.json"]
    assert res.skipped == ["bow-toy / stsb: 1000 pairs scored, MTEB's STSBenchmark has 1379 (not the same data)"]


def test_cli_export_and_import(toy_warehouse, tmp_path):
    runner = CliRunner()
    out = tmp_path / "results"
    r = runner.invoke(app, ["export", "mteb", "--warehouse", str(toy_warehouse), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "STS12.json" in r.stdout
    r = runner.invoke(app, ["import", "mteb", str(out), "--warehouse", str(tmp_path / "wh"), "--as", "bow-toy=b"])
    assert r.exit_code == 0, r.output
    assert Warehouse(tmp_path / "wh").query("SELECT DISTINCT model FROM metrics").to_pylist() == [{"model": "b"}]
    r = runner.invoke(app, ["import", "mteb", str(out), "--warehouse", str(tmp_path / "wh"), "--as", "nothing"])
    assert r.exit_code == 2 and "MTEB_MODEL=EVALFARM_ID" in r.output
    r = runner.invoke(app, ["export", "mteb", "--warehouse", str(tmp_path / "none"), "--out", str(out)])
    assert r.exit_code == 2 and not (tmp_path / "none").exists()


def _as_mteb_reads_it(cache: Path) -> dict[tuple[str, str], list[str]]:
    """What mteb's ``ResultCache(cache_path=cache).load_results()`` (mteb 2.x, its default require_model_meta=True)
    takes from ``cache/results``: every ``*.json`` but ``model_meta.json`` that has a ``model_meta.json`` beside it,
    filed under that file's ``name`` and ``revision``; a result without one is dropped. (Its reading in mteb/cache.py,
    ``get_cache_paths`` and ``_get_model_name_and_revision_from_path``: mteb itself is not installed here; the test
    below runs mteb's own loader where it is.)"""
    got: dict[tuple[str, str], list[str]] = {}
    for p in sorted((cache / "results").glob("**/*.json")):
        if p.name == "model_meta.json" or not (p.parent / "model_meta.json").exists():
            continue
        meta = json.loads((p.parent / "model_meta.json").read_text())
        got.setdefault((meta["name"], meta["revision"]), []).append(json.loads(p.read_text())["task_name"])
    return got


def test_export_as_an_mteb_model_and_revision_is_what_mtebs_loader_reads(toy_warehouse, tmp_path):
    cache = tmp_path / "mteb-cache"
    runner = CliRunner()
    args = [
        "export",
        "mteb",
        "--warehouse",
        str(toy_warehouse),
        "--out",
        str(cache / "results"),
        "--models",
        "bow-toy",
    ]
    r = runner.invoke(app, [*args, "--as", "sentence-transformers/average_word_embeddings_toy@0123abc"])
    assert r.exit_code == 0, r.output
    folder = cache / "results" / "sentence-transformers__average_word_embeddings_toy" / "0123abc"
    assert sorted(p.name for p in folder.iterdir()) == ["SICK-R.json", "STS12.json", "STSBenchmark.json",
                                                        "model_meta.json"]  # fmt: skip
    meta = json.loads((folder / "model_meta.json").read_text())
    assert (meta["name"], meta["revision"], meta["evalfarm"]["model"]) == (
        "sentence-transformers/average_word_embeddings_toy", "0123abc", "bow-toy"
    )  # fmt: skip
    assert _as_mteb_reads_it(cache) == {
        ("sentence-transformers/average_word_embeddings_toy", "0123abc"): ["SICK-R", "STS12", "STSBenchmark"]
    }
    back = api.import_mteb(cache / "results", warehouse=tmp_path / "wh2")  # and evalfarm reads its revision back
    params = Warehouse(tmp_path / "wh2").query("SELECT DISTINCT params FROM metrics").to_pylist()
    assert back.imported and {json.loads(p["params"])["revision"] for p in params} == {"0123abc"}
    r = runner.invoke(app, [*args[:-2], "--as", "org/name"])  # which of several models? say ID=MODEL
    assert r.exit_code == 2 and "--as ID=MODEL" in r.output
    r = runner.invoke(app, [*args, "--as", "org/name@"])
    assert r.exit_code == 2 and "MODEL[@REVISION]" in r.output


def test_the_api_checks_every_mteb_name_before_it_writes(toy_warehouse, tmp_path):
    """A bad ``MODEL[@REVISION]`` is the API's refusal (the CLI's --as only says which model it is for): nothing is
    written, whichever model it names."""
    from evalfarm.analysis.mteb_results import MtebFormatError

    out = tmp_path / "results"
    for bad in ("org/name@", "org name", ""):
        with pytest.raises(MtebFormatError, match="MODEL"):
            api.export_mteb(out, warehouse=toy_warehouse, names={"not-in-the-warehouse": bad})
    assert not out.exists()


def test_mtebs_own_loader_takes_the_export(toy_warehouse, tmp_path):
    mteb = pytest.importorskip("mteb", reason="mteb is not installed (not an evalfarm dependency)")
    cache = tmp_path / "mteb-cache"
    api.export_mteb(cache / "results", warehouse=toy_warehouse, names={"bow-toy": "org/toy@0123abc"})
    results = mteb.ResultCache(cache_path=cache).load_results(include_remote=False)
    (model,) = results.model_results
    assert (model.model_name, model.model_revision) == ("org/toy", "0123abc")
    assert sorted(t.task_name for t in model.task_results) == ["SICK-R", "STS12", "STSBenchmark"]
