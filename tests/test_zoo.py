"""The three model-zoo catalogs and `evalfarm zoo build`: offline validation, counts, unsupported families,
real (tiny) training that is idempotent and loads through the normal path, and PPMI-SVD checked by hand."""

from __future__ import annotations

import math
import os
import pickle
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evalfarm.catalog.registry import load_catalog
from evalfarm.catalog.specs import ModelSpec, Source, spec_hash
from evalfarm.cli import app
from evalfarm.encoders.loader import load_encoder
from evalfarm.encoders.protocol import ModelLoadError, NotSupportedYet
from evalfarm.zoo import (
    build_zoo,
    packaged_models,
    plan_zoo,
    ppmi_matrix,
    quick_recipes,
    train_ppmi_svd,
    zoo_catalog,
)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EVALFARM_CACHE", str(cache))
    return cache


@pytest.mark.parametrize("name", ["evalrank-paper", "heros-encoders", "zoo-local", "modern-embedders"])
def test_catalogs_validate_offline_without_the_cache(name, empty_cache):
    res = CliRunner().invoke(app, ["catalog", "validate", "--catalog", name, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert '"status": "ok"' in res.stdout
    assert not empty_cache.exists()  # validation downloads / builds nothing


def test_paper_catalog_counts():
    cat = load_catalog("evalrank-paper")
    levels = Counter(m.level for m in cat.models.values())
    # Table 8: 19 word-vector files (toolkit scripts w_model_2..20) x without / with post-processing = 38.
    assert levels["word"] == 38
    # The issue says 67 sentence models; its own enumeration gives 68 (38 bow + 2 InferSent + 12 BERT/RoBERTa
    # poolings + 12 whitened + BERT-flow + SBERT + 2 SimCSE). The catalog header says why this could not be
    # reconciled with the paper's Table 9.
    assert levels["sentence"] == 68
    kinds = Counter(cat.kind(m) for m in cat.models)
    assert kinds["infersent"] == 2 and kinds["bert-flow"] == 1 and kinds["bow"] == 38
    # every download URL without a checksum says so explicitly
    for m in cat.models.values():
        if m.source is not None and m.source.type == "url":
            assert m.source.sha256 is None and m.source.verify is False


@pytest.mark.parametrize("model_id", ["infersent-v1", "infersent-v2", "bert-flow-bert-base-uncased"])
def test_unsupported_families_raise_not_supported_yet(model_id, empty_cache):
    cat = load_catalog("evalrank-paper")
    with pytest.raises(NotSupportedYet) as e:
        load_encoder(cat.lineage(model_id), base_dir=cat.path.parent)
    msg = str(e.value)
    assert model_id in msg and "not supported yet" in msg
    assert ("InferSent" in msg) if "infersent" in model_id else ("flow" in msg)
    assert not empty_cache.exists()  # refused before any download


def test_url_without_sha256_needs_explicit_verify_false():
    with pytest.raises(ValueError, match="verify: false"):
        Source(type="url", ref="https://example.org/x.zip")
    assert Source(type="url", ref="https://example.org/x.zip", verify=False).sha256 is None
    with pytest.raises(ValueError, match="contradictory"):
        Source(type="url", ref="https://example.org/x.zip", sha256="ab" * 32, verify=False)


def test_new_fields_keep_existing_hashes_and_provenance_counts():
    cat = load_catalog("zoo-starter")
    assert cat.spec_hash("glove-6b-50d") == "1be65e909ce158a7"  # hash from before `provenance` / `verify` existed
    assert cat.spec_hash("all-minilm-l6-v2") == "2ed21aa4a8ddb62f"
    spec = cat.model("glove-6b-50d")
    a = spec.model_copy(update={"provenance": {"corpus_sha256": "a" * 64}})
    b = spec.model_copy(update={"provenance": {"corpus_sha256": "b" * 64}})
    assert len({spec_hash(spec), spec_hash(a), spec_hash(b)}) == 3


def test_zoo_local_has_100_models_with_provenance(empty_cache):
    cat = load_catalog("zoo-local")
    assert len(cat.models) >= 100
    trained = [m for m in cat.models.values() if m.source is not None and m.source.type == "zoo"]
    assert len(trained) >= 40
    assert {m.provenance["algo"] for m in trained} == {"cbow", "sg", "fasttext", "ppmi-svd", "minilm-ctx"}
    starter = load_catalog("zoo-starter").models  # included, not repeated: its packages are pinned requirements
    for m in cat.models.values():
        if m.source is not None:  # every model with its own weights says where they came from
            if m.id in starter:
                assert starter[m.id] == m and m.source.requirement and "==" in m.source.requirement, m.id
            else:
                assert m.provenance and ("corpus_sha256" in m.provenance or "version" in m.provenance), m.id
    assert all(f"bow-{m.id}" in cat.models for m in trained)
    # before `zoo build`, loading a trained model says what to run
    with pytest.raises(ModelLoadError, match="evalfarm zoo build"):
        load_encoder(cat.lineage(trained[0].id))


NEAR_PALESTINIAN = {"israeli", "israel", "israelis", "arafat", "arafat's", "yasser", "palestinians", "gaza", "hamas"}


@pytest.mark.slow
def test_quick_build_trains_each_algorithm_once_and_models_load(empty_cache, tmp_path):
    out = tmp_path / "zoo-quick.yaml"
    first = build_zoo(quick=True, catalog_out=out)
    assert len(first.trained) == 4 and {b.recipe.algo for b in first.trained} == {"cbow", "sg", "fasttext", "ppmi-svd"}
    text = out.read_text()
    # idempotent, through the CLI: the second build trains nothing and rewrites the same catalog
    res = CliRunner().invoke(app, ["zoo", "build", "--quick", "--catalog-out", str(out)])
    assert res.exit_code == 0, res.output
    assert "0 trained, 4 already built" in res.output.replace("\n", " ")
    assert out.read_text() == text
    cat = load_catalog(out)
    assert len(cat.models) == 8
    for b in first.models:  # data only: a float32 .npy and a word list, never a pickle
        assert {p.name for p in (empty_cache / "zoo" / b.fingerprint).iterdir()} == {
            "model.npy",
            "vocab.txt",
            "recipe.json",
        }
        assert cat.model(b.recipe.model_id).format == "numpy-vocab"
    for r in quick_recipes():
        spec = cat.model(r.model_id)
        assert spec.provenance["corpus_sha256"] == first.models[0].corpus_sha256
        enc = load_encoder(cat.lineage(r.model_id), base_dir=cat.path.parent)
        kv = enc.to_keyed_vectors()
        near = {w for w, _ in kv.most_similar("palestinian", topn=10)}
        assert near & NEAR_PALESTINIAN, (r.model_id, near)
        vecs, oov = enc.lookup(["israeli", "palestinian", "zzzqqq"])
        assert oov.tolist() == [False, False, True] and np.isfinite(vecs).all()
        bow = load_encoder(cat.lineage(f"bow-{r.model_id}"), base_dir=cat.path.parent)
        assert bow.encode(["Israeli troops fired on Palestinian police", "the bushfire spread"]).shape == (2, r.dim)


HAND = [
    "the cat sat on the mat".split(),
    "the dog sat on the mat".split(),
    "a cat chased a mouse".split(),
    "a dog chased a mouse".split(),
    "we drive the car to town".split(),
    "we drive the truck to town".split(),
    "we park the car near town".split(),
    "we park the truck near town".split(),
]


def _ppmi_by_hand(sents, window, alpha):
    vocab = sorted({w for s in sents for w in s})
    C: Counter = Counter()
    for s in sents:
        for i, w in enumerate(s):
            for j in range(max(0, i - window), min(len(s), i + window + 1)):
                if j != i:
                    C[(w, s[j])] += (window - abs(i - j) + 1) / window
    row = Counter()
    col = Counter()
    for (w, c), n in C.items():
        row[w] += n
        col[c] += n
    z = sum(v**alpha for v in col.values())
    return {(w, c): max(0.0, math.log(n / row[w] / (col[c] ** alpha / z))) for (w, c), n in C.items()}, vocab


def test_ppmi_matrix_matches_a_by_hand_computation():
    vocab, M = ppmi_matrix(HAND, window=2, min_count=1, alpha=0.75)
    expected, words = _ppmi_by_hand(HAND, window=2, alpha=0.75)
    assert sorted(vocab) == words
    idx = {w: i for i, w in enumerate(vocab)}
    dense = M.toarray()
    for (w, c), v in expected.items():
        assert dense[idx[w], idx[c]] == pytest.approx(v, abs=1e-9), (w, c)
    assert np.count_nonzero(dense) == sum(1 for v in expected.values() if v > 0)


def test_ppmi_svd_puts_words_with_shared_contexts_together():
    kv = train_ppmi_svd(HAND * 3, dim=4, window=2, min_count=1)
    assert kv.vector_size == 4
    assert kv.similarity("cat", "dog") > kv.similarity("cat", "car")
    assert kv.similarity("car", "truck") > kv.similarity("car", "mouse")


def test_zoo_catalog_is_deterministic_and_valid(tmp_path, empty_cache):
    spec_ids = {ModelSpec.model_validate(m).id for m in packaged_models()}
    assert {"all-minilm-l6-v2-mean", "all-minilm-l6-v2-max", "spacy-md-tok2vec"} <= spec_ids
    assert zoo_catalog([], quick=False) == zoo_catalog([], quick=False)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_a_pickled_model_left_in_the_zoo_cache_is_rebuilt_never_loaded(empty_cache, tmp_path):
    """A zoo folder from before (model.kv, a pickle; here a malicious one) is retrained over, never unpickled."""
    recipe = next(r for r in quick_recipes() if r.algo == "ppmi-svd")
    (b,) = plan_zoo([recipe])
    folder = empty_cache / "zoo" / b.fingerprint
    folder.mkdir(parents=True)
    marker = tmp_path / "pwned"
    (folder / "model.kv").write_bytes(pickle.dumps(_Payload(marker)))
    (folder / "recipe.json").write_text("{}")
    report = build_zoo(recipes=[recipe], catalog_out=tmp_path / "zoo.yaml", quick=True)
    assert [x.trained for x in report.models] == [True] and not marker.exists()
    assert not (folder / "model.kv").exists() and (folder / "model.npy").is_file()
    cat = load_catalog(tmp_path / "zoo.yaml")
    enc = load_encoder(cat.lineage(recipe.model_id), base_dir=tmp_path)
    assert enc.vocab_size() > 100 and not marker.exists()
