"""The downstream scorer: hand-made tasks (features built by hand), the seeded training sample (the same sentences
every time, the others never embedded), the catalog's ten entries, torch vs scikit-learn through the scorer, and a
real end-to-end run of the static model on TREC and MRPC through ``run_catalog`` and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.classify import evaluate, pair_features
from evalfarm.scorers import scorer_for
from evalfarm.scorers.base import RunOptions, TextVectors
from evalfarm.scorers.downstream import (
    DownstreamData,
    DownstreamTaskSpec,
    load_task_data,
    resolve_backend,
    variant_name,
)
from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.downstream import DownstreamTask, LabelledSet, stratified_subsample

REPO = Path(__file__).resolve().parents[1]
STARTER = REPO / "catalog" / "zoo-starter.yaml"
DOWNSTREAM = ["mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite"]
SCORER = scorer_for("downstream")
FAST = {"k": 4, "inner_k": 3, "c_grid": [0.01, 1.0]}  # a short protocol for the hand-made sets


def toy_spec(dataset: str = "MR", **kw) -> DownstreamTaskSpec:
    """A task entry for hand-made data (score never reads its files)."""
    return DownstreamTaskSpec(
        id="toy", dataset=dataset, version="1", files={}, sha256={}, licence="-", source="-", **kw
    )  # type: ignore[arg-type]


def score(data: DownstreamData, emb: np.ndarray, *, spec=None, device=None, **params):
    spec = spec or toy_spec()
    p = {**SCORER.params(spec, RunOptions()), **FAST, **params}
    vectors = TextVectors(level="sentence", emb=emb.astype(np.float32), oov=~emb.any(axis=1))
    res = SCORER.evaluate(spec, data, vectors, p, device=device)
    return {r.metric: r.value for r in res.rows}, res


def hand_data(task: DownstreamTask) -> DownstreamData:
    n = len(task.parts()["cv" if task.cv is not None else "train"])
    return DownstreamData(task, None, n, task.texts())


# ---- the scorer on hand-made tasks ---------------------------------------------------------------------------
def test_separable_cv_task_scores_one():
    # class 1 sentences sit at +3 on the first axis, class 0 at -3: any linear model separates them
    rng = np.random.default_rng(0)
    texts = [f"s{i}" for i in range(80)]
    labels = np.array([i % 2 for i in range(80)], dtype=np.int64)
    task = DownstreamTask("toy", ("neg", "pos"), cv=LabelledSet(texts, labels))
    data = hand_data(task)
    vec = {t: np.array([6.0 * y - 3.0, *rng.normal(size=3)]) for t, y in zip(texts, labels, strict=True)}
    m, res = score(data, np.stack([vec[t] for t in data.texts]))
    assert m["accuracy"] == 1.0 and m["accuracy_std"] == 0.0
    assert m["n_train"] == m["n_test"] == 80 and m["n_models"] == 4 * (3 * 2 + 1) and m["backend_torch"] == 1.0
    assert m["n_unconverged"] == 0.0
    assert "f1" not in m and m["oov_rate"] == 0.0
    primary = [r for r in res.rows if r.primary]
    assert [(r.metric, r.variant, r.subset) for r in primary] == [("accuracy", "full", "all")]


def _pair_task(rng: np.random.Generator, n_train: int, n_test: int) -> tuple[DownstreamTask, dict[str, np.ndarray]]:
    """Paraphrase-like pairs: label 1 when the second sentence is a near copy of the first (|u - v| small), else 0
    (a random other vector). Noisy on purpose (overlapping cases), so a wrong text-to-row mapping shows."""
    vec: dict[str, np.ndarray] = {}

    def part(prefix: str, n: int) -> LabelledSet:
        t1, t2, y = [], [], []
        for i in range(n):
            a, b, lab = f"{prefix}a{i}", f"{prefix}b{i}", int(i % 2)
            vec[a] = rng.normal(size=4)
            vec[b] = vec[a] + rng.normal(scale=0.3 if lab else 1.2, size=4)
            t1.append(a)
            t2.append(b)
            y.append(lab)
        return LabelledSet(t1, np.array(y, dtype=np.int64), t2)

    splits = {"train": part("tr", n_train), "test": part("te", n_test)}
    return DownstreamTask("toy-pairs", ("no", "yes"), splits=splits, f1_label=1), vec


def test_pair_task_uses_pair_features_built_by_hand():
    task, vec = _pair_task(np.random.default_rng(1), 120, 60)
    data = hand_data(task)
    assert len(data.texts) == 2 * (120 + 60)
    rng = np.random.default_rng(2)
    order = rng.permutation(len(data.texts))  # the store's rows follow data.texts, whatever order that is
    data = DownstreamData(task, None, 120, [data.texts[i] for i in order])
    m, _ = score(data, np.stack([vec[t] for t in data.texts]), spec=toy_spec("MRPC"))
    # the same protocol on features built here, row by row, from [u, v, |u - v|, u * v]
    feats = {}
    for role, p in task.splits.items():
        u = np.stack([vec[t] for t in p.text1]).astype(np.float32)
        v = np.stack([vec[t] for t in p.text2]).astype(np.float32)
        by_hand = np.hstack([u, v, np.abs(u - v), u * v])
        np.testing.assert_array_equal(by_hand, pair_features(u, v))
        feats[role] = (by_hand, p.labels)
    ref = evaluate(feats, f1_label=1, n_classes=2, seed=1111, k=4, inner_k=3, c_grid=(0.01, 1.0), threads=1)
    assert m["accuracy"] == ref.accuracy and m["f1"] == ref.f1 and m["chosen_c"] == ref.chosen_c[0]
    assert m["accuracy"] > 0.8  # |u - v| carries the label
    assert "accuracy_std" not in m and m["n_train"] == 120 and m["n_test"] == 60
    # the sentence features alone ([u, v]) cannot see |u - v|: the pair features are what makes it learnable
    raw = {r: (X[:, :8], y) for r, (X, y) in feats.items()}
    raw_acc = evaluate(raw, f1_label=1, n_classes=2, k=4, inner_k=3, c_grid=(0.01, 1.0), threads=1).accuracy
    assert raw_acc < 0.7


def test_separable_split_task_with_dev_scores_one():
    texts = {r: [f"{r}{i}" for i in range(n)] for r, n in (("train", 60), ("dev", 20), ("test", 30))}
    labels = {r: np.arange(len(t), dtype=np.int64) % 3 for r, t in texts.items()}
    task = DownstreamTask("toy3", ("a", "b", "c"), splits={r: LabelledSet(texts[r], labels[r]) for r in texts})
    data = hand_data(task)
    centre = np.eye(3) * 10
    vec = {t: centre[y] for r in texts for t, y in zip(texts[r], labels[r], strict=True)}
    m, _ = score(data, np.stack([vec[t] for t in data.texts]), spec=toy_spec("SST5"))
    assert m["accuracy"] == 1.0 and m["dev_accuracy"] == 1.0 and m["n_models"] == 2
    assert m["chosen_c"] == 0.01  # ties on dev keep the first (strongest penalty)


def test_same_inputs_same_numbers_and_fingerprint_params():
    task, vec = _pair_task(np.random.default_rng(3), 80, 40)
    data = hand_data(task)
    emb = np.stack([vec[t] for t in data.texts])
    first, _ = score(data, emb, spec=toy_spec("MRPC"))
    again, _ = score(data, emb.copy(), spec=toy_spec("MRPC"))
    assert first == again
    spec = toy_spec(max_train=500)
    sampled, full = SCORER.params(spec, RunOptions(quick_downstream=True)), SCORER.params(spec, RunOptions())
    assert sampled["max_train"] == 500 and full["max_train"] is None
    assert {k for k in sampled if sampled[k] != full[k]} == {"max_train"}
    assert {"c_grid", "k", "inner_k", "seed", "backend", "tol", "max_train"} <= set(sampled)


def test_score_refuses_data_loaded_for_other_options():
    task = DownstreamTask("toy", ("neg", "pos"), cv=LabelledSet([f"s{i}" for i in range(40)], np.arange(40) % 2))
    data = DownstreamData(task.subsample_train(20), 20, 40, task.subsample_train(20).texts())
    with pytest.raises(ValueError, match="loaded with max_train=20 but scored with max_train=None"):
        score(data, np.ones((20, 2)), max_train=None)
    with pytest.raises(ValueError, match="3 vectors for 20 texts"):
        score(data, np.ones((3, 2)), max_train=20)


def test_backend_resolution():
    assert resolve_backend("auto", "cpu") == ("torch", "cpu")
    assert resolve_backend("auto", "cuda:1") == ("torch", "cuda:1")
    assert resolve_backend("torch", "cpu") == ("torch", "cpu")
    assert resolve_backend("sklearn", "cuda") == ("sklearn", "cuda")
    import torch

    assert resolve_backend("auto", None) == ("torch", "cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown classifier backend 'gpu'"):
        resolve_backend("gpu", None)
    assert variant_name(None) == "full" and variant_name(2000) == "max_train=2000"


# ---- the catalog's entries -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def starter():
    return load_catalog(STARTER)


FULL_COUNTS = {  # rows per part, and distinct texts (every row embedded once)
    "mr": ({"cv": 10662}, 10662),
    "cr": ({"cv": 3771}, 3765),
    "subj": ({"cv": 10000}, 10000),
    "mpqa": ({"cv": 10603}, 8240),
    "sst2": ({"train": 67349, "dev": 872, "test": 1821}, 69669),
    "sst5": ({"train": 8544, "dev": 1101, "test": 2210}, 11841),
    "trec": ({"train": 5452, "test": 500}, 5870),
    "mrpc": ({"train": 4076, "test": 1725}, 10944),
    "sick-e": ({"train": 4500, "dev": 500, "test": 4927}, 6077),
    "scicite": ({"train": 7320, "dev": 916, "test": 1861}, 9980),
}


@pytest.mark.slow
@pytest.mark.parametrize("tid", DOWNSTREAM)
def test_catalog_entries_load_with_their_counts(starter, tid):
    spec = starter.task(tid)
    assert spec.kind == "downstream" and spec.level == "sentence" and spec.max_train == 1000
    full = SCORER.load_for(spec, RunOptions())
    parts, n_texts = FULL_COUNTS[tid]
    assert {k: len(v) for k, v in full.task.parts().items()} == parts and len(full.texts) == n_texts
    assert full.max_train is None and set(spec.urls) == set(spec.files)
    assert all(u.startswith("https://raw.githubusercontent.com/BinWang28/") for u in spec.urls.values())
    sampled = SCORER.load_for(
        spec, RunOptions(quick_downstream=True)
    )  # the quick profile: 1000 training rows, dev and test whole
    train = "cv" if "cv" in parts else "train"
    got = {k: len(v) for k, v in sampled.task.parts().items()}
    assert got == {**parts, train: 1000} and sampled.max_train == 1000
    assert set(sampled.texts) <= set(full.texts)
    assert (
        SCORER.load_for(spec, RunOptions(quick_downstream=True)).texts == sampled.texts
    )  # the same sentences every time


def test_scicite_entry_uses_evalrank_text(starter):
    data = SCORER.load_for(starter.task("scicite"), RunOptions())
    assert all(set(t) <= set("abcdefghijklmnopqrstuvwxyz ") for t in data.texts)


def test_sample_is_the_seeded_stratified_draw(starter):
    full = SCORER.load_for(starter.task("sst2"), RunOptions()).task.splits["train"]
    sampled = SCORER.load_for(starter.task("sst2"), RunOptions(quick_downstream=True)).task.splits["train"]
    idx = stratified_subsample(full.labels, 1000, 1111)
    assert sampled.text1 == [full.text1[i] for i in idx]
    assert np.bincount(sampled.labels).tolist() == np.round(np.bincount(full.labels) * 1000 / len(full)).tolist()


def test_entry_must_verify_exactly_the_files_the_reader_reads(starter, tmp_path):
    trec = starter.task("trec")
    only_train = {"files": {"train": trec.files["train"]}, "sha256": {"train": trec.sha256["train"]}}
    partial = trec.model_copy(update=only_train)
    with pytest.raises(TaskDataError, match=r"reads \['TREC_10.label', 'train_5500.label'\].*verifies"):
        load_task_data(partial, None)
    swapped = trec.model_copy(update={"sha256": {"train": trec.sha256["test"], "test": trec.sha256["train"]}})
    with pytest.raises(TaskDataError, match="sha256"):
        load_task_data(swapped, None)


def test_bow_models_of_the_starter_zoo_get_downstream_units(starter):
    from evalfarm.plan import plan_run

    plans = plan_run(starter, tasks=DOWNSTREAM)
    with_units = {p.model for p in plans if {u.task for u in p.units} == set(DOWNSTREAM)}
    assert {"bow-glove-6b-50d", "bow-glove-6b-50d-pcr1", "bow-spacy-md-300d"} <= with_units
    assert all(starter.model(m).level == "sentence" for m in with_units)
    assert {m for m, s in starter.models.items() if s.level == "sentence"} == with_units
    full = plan_run(starter, tasks=["trec"])  # the default: SentEval's protocol, every training row
    fp = {
        p.model: p.units[0].fingerprint
        for p in plan_run(starter, tasks=["trec"], options=RunOptions(quick_downstream=True))
    }
    assert all(p.units[0].fingerprint != fp[p.model] for p in full)


# ---- real model, real run ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_torch_backend_agrees_with_sklearn_through_the_scorer(starter):
    from evalfarm.encoders.loader import load_encoder

    spec = starter.task("trec")
    data = SCORER.load(spec)
    emb = load_encoder(starter.lineage("static-10k-64d")).encode(data.texts)
    params = SCORER.params(spec, RunOptions())
    vectors = TextVectors(level="sentence", emb=np.asarray(emb, dtype=np.float32), oov=np.zeros(len(emb), bool))
    got = {}
    for backend in ("sklearn", "torch"):
        rows = SCORER.score(spec, data, vectors, {**params, "backend": backend}, device="cpu").rows
        got[backend] = {r.metric: r.value for r in rows}
    assert got["torch"]["backend_torch"] == 1.0 and got["sklearn"]["backend_torch"] == 0.0
    assert abs(got["torch"]["accuracy"] - got["sklearn"]["accuracy"]) <= 0.001
    assert got["sklearn"]["accuracy"] > 0.6  # six classes: chance is under 0.25


@pytest.mark.slow
def test_static_model_end_to_end_on_trec_and_mrpc(starter, tmp_path):
    from evalfarm.embed import TextStore, store_key
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    wh = tmp_path / "wh"
    model = "static-10k-64d"
    quick = RunOptions(quick_downstream=True)
    summary = run_catalog(starter, wh, models=[model], tasks=["trec", "mrpc"], executor="local", options=quick)
    assert summary.ok and summary.counts()["done"] == 2
    w = Warehouse(wh)
    rows = w.query(
        "SELECT task, variant, metric, value, params FROM metrics WHERE model = 'static-10k-64d' ORDER BY task, metric"
    ).to_pylist()
    m = {(r["task"], r["metric"]): r["value"] for r in rows}
    assert {r["variant"] for r in rows} == {"max_train=1000"}
    assert m[("trec", "n_train")] == m[("mrpc", "n_train")] == 1000.0
    assert m[("trec", "n_test")] == 500.0 and m[("mrpc", "n_test")] == 1725.0
    assert 0.6 < m[("trec", "accuracy")] <= 1.0 and 0.6 < m[("mrpc", "accuracy")] <= 1.0
    assert 0.0 < m[("mrpc", "f1")] <= 1.0 and ("trec", "f1") not in m
    assert json.loads(rows[0]["params"])["max_train"] == 1000
    board = w.query("SELECT task, metric FROM leaderboard WHERE scorer = 'downstream'").to_pylist()
    assert sorted((b["task"], b["metric"]) for b in board) == [("mrpc", "accuracy"), ("trec", "accuracy")]
    # the sentences left out of the sample were never embedded; the sampled ones all were
    store = TextStore(w, model, store_key(starter.spec_hash(model)))
    for tid in ("trec", "mrpc"):
        used = SCORER.load_for(starter.task(tid), quick).texts
        every = SCORER.load_for(starter.task(tid), RunOptions()).texts
        left_out = sorted(set(every) - set(used))
        assert left_out and store.missing(left_out) == left_out and store.missing(used) == []
    # same fingerprints: nothing to do; the numbers stay those of the first run
    again = run_catalog(starter, wh, models=[model], tasks=["trec", "mrpc"], executor="local", options=quick)
    assert again.counts()["skipped"] == 2
    # the full set (the default) under its own variant and fingerprint
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", "run", "--catalog", str(STARTER), "--models", model,
         "--tasks", "mrpc", "--executor", "local", "--warehouse", str(wh)],
        capture_output=True, text=True, env=dict(os.environ), cwd=REPO, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    full = w.query("SELECT variant, metric, value FROM leaderboard WHERE task = 'mrpc' ORDER BY variant").to_pylist()
    assert [r["variant"] for r in full] == ["full", "max_train=1000"]
    n_train = w.query(
        "SELECT value FROM metrics WHERE task = 'mrpc' AND variant = 'full' AND metric = 'n_train'"
    ).to_pylist()
    assert n_train == [{"value": 4076.0}]
    assert store.missing(SCORER.load_for(starter.task("mrpc"), RunOptions()).texts) == []
