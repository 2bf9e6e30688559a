"""The scorer layer: the registry, and each similarity scorer on tiny sets worked by hand (plus scipy checks)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pytest

from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import MetricInfo
from evalfarm.preprocess import VocabStats
from evalfarm.scorers import RegistryError, register, scorer_for, scorers, task_adapter
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors
from evalfarm.scorers.similarity import (
    PairData,
    STSBandsScorer,
    STSScorer,
    WordSimilarityScorer,
    band_samples,
    pearson,
    rank_cosines,
    spearman,
)


def test_registry_knows_every_scorer_and_refuses_duplicates():
    assert {"evalrank", "word-similarity", "sts", "similarity-bands"} <= set(scorers())
    assert scorer_for("word-similarity").name == "word-similarity"

    class Clone(WordSimilarityScorer):  # same name, same task kind
        pass

    with pytest.raises(RegistryError, match="two scorers are named 'word-similarity'"):
        register(Clone)
    with pytest.raises(RegistryError, match="no scorer for task kind 'nope'"):
        scorer_for("nope")


def test_correlations_by_hand_and_against_scipy():
    # perfectly monotone but not linear: Spearman 1, Pearson below 1
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 4.0, 9.0, 100.0])
    assert spearman(x, y) == pytest.approx(1.0)
    assert pearson(x, y) < 0.95
    # ranks (1, 2, 3) vs (3, 1, 2): d = (-2, 1, 1), rho = 1 - 6 * 6 / (3 * 8) = -0.5
    assert spearman(np.array([0.1, 0.2, 0.3]), np.array([9.0, 1.0, 5.0])) == pytest.approx(-0.5)
    assert np.isnan(spearman(x[:2], y[:2])) and np.isnan(pearson(x, np.ones(4)))
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(0)
    a = rng.normal(size=200)
    b = a + rng.normal(size=200)
    b[:20] = b[0]  # ties: both average them
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)
    assert pearson(a, b) == pytest.approx(pearsonr(a, b).statistic, abs=1e-12)


def _word_vectors(texts: list[str], rows: dict[str, tuple[float, float]]) -> TextVectors:
    emb = np.array([rows.get(t, (0.0, 0.0)) for t in texts], dtype=np.float32)
    oov = np.array([t not in rows for t in texts])
    stats = VocabStats(n=4, mean=np.array([1.0, 0.0]), mean_unit_centred=np.zeros(2), mean_unit=np.zeros(2))
    return TextVectors("word", emb, oov, stats)


def test_word_similarity_by_hand():
    # pairs (a,b) gold 3, (a,c) gold 2, (a,d) gold 1, (a,zz) gold 0 -- zz is OOV: skipped, coverage 3/4.
    data = PairData({"all": (["a", "a", "a", "a"], ["b", "c", "d", "zz"], np.array([3.0, 2.0, 1.0, 0.0]))})
    rows = {"a": (2.0, 1.0), "b": (2.0, 2.0), "c": (2.0, -1.0), "d": (0.0, 1.0)}
    vectors = _word_vectors(data.texts, rows)
    scorer = WordSimilarityScorer()
    res = scorer.evaluate(None, data, vectors, scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.variant, r.metric): r.value for r in res.rows}
    # raw cosines with a = (2,1)/sqrt5: b (2,2) .949, c (2,-1) .6, d (0,1) .447 -> same order as gold: rho 1
    assert m[("raw", "spearman")] == pytest.approx(1.0)
    # centred on the vocabulary mean (1, 0): a' = (1,1), b' = (1,2), c' = (1,-1), d' = (-1,1): cos(a',b') = .949,
    # cos(a',c') = 0, cos(a',d') = 0: ties at the bottom -> ranks (3, 1.5, 1.5) vs gold (3, 2, 1): rho = .866
    assert m[("evalrank-word", "spearman")] == pytest.approx(np.sqrt(3) / 2)
    assert m[("raw", "coverage")] == 0.75 and m[("raw", "n_pairs")] == 3
    assert [r for r in res.rows if r.primary] and all(r.metric == "spearman" for r in res.rows if r.primary)


def test_sts_subsets_pooled_and_weighted_means_by_hand():
    # two subsets with known correlations: A (3 pairs) perfectly ordered, B (5 pairs) perfectly reversed
    vec = {f"s{i}": (1.0, float(i)) for i in range(10)}
    x0 = "s0"
    a = ([x0] * 3, ["s1", "s2", "s3"], np.array([3.0, 2.0, 1.0]))  # cos falls with i: gold falls too
    b = ([x0] * 5, ["s4", "s5", "s6", "s7", "s8"], np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    data = PairData({"A": a, "B": b}, primary_subset="wmean")
    emb = np.array([vec[t] for t in data.texts], dtype=np.float32)
    vectors = TextVectors("sentence", emb, np.zeros(len(emb), bool))
    scorer = STSScorer()
    res = scorer.evaluate(None, data, vectors, scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.subset, r.metric): r.value for r in res.rows}
    assert m[("A", "spearman")] == pytest.approx(1.0) and m[("B", "spearman")] == pytest.approx(-1.0)
    assert m[("mean", "spearman")] == pytest.approx(0.0)
    assert m[("wmean", "spearman")] == pytest.approx((3 * 1.0 + 5 * -1.0) / 8)  # SentEval's weighted mean
    assert m[("all", "n_pairs")] == 8
    assert [r.subset for r in res.rows if r.primary] == ["wmean"]


def test_near_tied_cosines_rank_as_ties_whatever_the_rounding():
    """Pairs whose two texts embed identically (identical token bags) have cos = 1 up to rounding; differences of
    ~1e-8 (another summation order, float32 vs float64) must not reorder them: they tie (COS_DECIMALS)."""
    rng = np.random.default_rng(4)
    same = rng.normal(size=(4, 8))
    texts = {f"a{i}": same[i] for i in range(4)} | {f"b{i}": same[i] for i in range(4)}
    texts |= {f"c{i}": rng.normal(size=8) for i in range(6)}
    s1 = [f"a{i}" for i in range(4)] + [f"c{i}" for i in range(0, 6, 2)]
    s2 = [f"b{i}" for i in range(4)] + [f"c{i}" for i in range(1, 6, 2)]
    data = PairData({"A": (s1, s2, np.array([5.0, 4.8, 4.6, 4.4, 1.0, 2.0, 0.5]))})
    scorer = STSScorer()
    params = scorer.params(None, RunOptions())  # type: ignore[arg-type]
    got = set()
    for k in range(4):
        emb = np.array([texts[t] for t in data.texts], dtype=np.float64)
        # b_i = a_i nudged along one axis: cos(a_i, b_i) = 1 - O(1e-8), in an order that changes with k
        emb[[data.texts.index(f"b{i}") for i in range(4)], 0] += 1e-4 * np.roll(np.arange(1, 5), k)
        rows = scorer.evaluate(None, data, TextVectors("sentence", emb.astype(np.float32), np.zeros(len(emb), bool)),
                               params).rows  # type: ignore[arg-type]  # fmt: skip
        got.add(next(r.value for r in rows if (r.subset, r.metric) == ("A", "spearman")))
    assert len(got) == 1
    assert rank_cosines(np.array([1.0, 1 - 4e-8, 0.9999996])).tolist() == [1.0, 1.0, 1.0]


def test_similarity_bands_are_equal_size_seeded_samples():
    gold = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.0])
    bands = ((3.0, 5.0), (2.0, 4.0), (1.0, 3.0), (0.0, 2.0))
    picks = band_samples(gold, bands, None, seed=0)
    # members: [3,5]: 6 pairs; [2,4]: 5; [1,3]: 5; [0,2]: 5 -> every band samples 5
    assert list(picks) == ["3-5", "2-4", "1-3", "0-2"] and {len(v) for v in picks.values()} == {5}
    for (lo, hi), idx in zip(bands, picks.values(), strict=True):
        assert ((gold[idx] >= lo) & (gold[idx] <= hi)).all()
    again = band_samples(gold, bands, None, 0).values()
    assert all(np.array_equal(a, b) for a, b in zip(picks.values(), again, strict=True))
    with pytest.raises(ValueError, match="fewer than the sample size"):
        band_samples(gold, bands, 6, 0)
    assert STSBandsScorer.primary_metric == "spearman"


def _sentence_vectors(data: PairData, rows: dict[str, tuple[float, ...]]) -> TextVectors:
    emb = np.array([rows[t] for t in data.texts], dtype=np.float32)
    return TextVectors("sentence", emb, np.zeros(len(emb), bool))


def test_similarity_bands_spearman_per_band_by_hand():
    # s0 = (1, 0), s_i = (1, i): cos(s0, s_i) = 1 / sqrt(1 + i^2) falls as i grows
    rows = {f"s{i}": (1.0, float(i)) for i in range(7)}
    high = (["s0"] * 3, ["s1", "s2", "s3"], np.array([5.0, 4.0, 3.0]))  # cos and gold fall together: rho 1
    # cos ranks (3, 2, 1) vs gold (0, 2, 1) ranks (1, 3, 2): d = (2, -1, -1), rho = 1 - 6 * 6 / (3 * 8) = -0.5
    low = (["s0"] * 3, ["s4", "s5", "s6"], np.array([0.0, 2.0, 1.0]))
    data = PairData({"3-5": high, "0-2": low})
    scorer = STSBandsScorer()
    res = scorer.evaluate(None, data, _sentence_vectors(data, rows), scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.subset, r.metric): r.value for r in res.rows}
    assert m[("3-5", "spearman")] == pytest.approx(1.0) and m[("0-2", "spearman")] == pytest.approx(-0.5)
    assert m[("3-5", "n_pairs")] == 3 and m[("0-2", "n_pairs")] == 3
    assert sorted((r.subset, r.metric) for r in res.rows if r.primary) == [("0-2", "spearman"), ("3-5", "spearman")]
    assert {r.variant for r in res.rows} == {"cos"}


def test_word_similarity_without_centring_is_its_own_variant():
    data = PairData({"all": (["a", "a", "a"], ["b", "c", "d"], np.array([3.0, 2.0, 1.0]))})
    vectors = _word_vectors(data.texts, {"a": (2.0, 1.0), "b": (2.0, 2.0), "c": (2.0, -1.0), "d": (0.0, 1.0)})
    scorer = WordSimilarityScorer()
    res = scorer.score(None, data, vectors, scorer.params(None, RunOptions(center=False)))  # type: ignore[arg-type]
    m = {(r.variant, r.metric): r.value for r in res.rows}
    assert {r.variant for r in res.rows} == {"evalrank-word/no-center", "raw"}  # docs/evaluators.md's variant names
    assert m[("evalrank-word/no-center", "spearman")] == pytest.approx(1.0)  # uncentred: the raw cosines' order


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.spatial.distance import cosine

    return 1.0 - cosine(a.astype(np.float64), b.astype(np.float64))


def test_each_similarity_scorer_against_scipy():
    """Every scorer's score() against scipy.stats on random vectors (gold with ties), not only the helpers."""
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(7)

    # word similarity: 60 pairs of 25 words, two of them OOV; vocabulary mean away from zero
    words = [f"w{i}" for i in range(25)]
    pick = [(a, b) for a, b in rng.integers(0, 25, size=(70, 2)) if a != b][:60]
    gold = rng.integers(0, 6, len(pick)).astype(np.float64)  # many ties
    data = PairData({"all": ([words[a] for a, _ in pick], [words[b] for _, b in pick], gold)})
    emb = rng.normal(size=(len(data.texts), 6)).astype(np.float32)
    oov = np.isin(data.texts, ["w3", "w11"])
    emb[oov] = 0.0
    mean = rng.normal(size=6)
    stats = VocabStats(n=1000, mean=mean, mean_unit_centred=np.zeros(6), mean_unit=np.zeros(6))
    scorer = WordSimilarityScorer()
    res = scorer.score(None, data, TextVectors("word", emb, oov, stats), scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.variant, r.metric): r.value for r in res.rows}
    row = {t: i for i, t in enumerate(data.texts)}
    known = [k for k, (a, b) in enumerate(pick) if not (oov[row[words[a]]] or oov[row[words[b]]])]
    assert 0 < len(known) < len(pick) and m[("raw", "coverage")] == pytest.approx(len(known) / len(pick))
    for variant, shift in (("raw", 0.0), ("evalrank-word", mean)):
        cos = [_cos(emb[row[words[pick[k][0]]]] - shift, emb[row[words[pick[k][1]]]] - shift) for k in known]
        assert m[(variant, "spearman")] == pytest.approx(spearmanr(cos, gold[known]).statistic, abs=1e-6)
        assert m[(variant, "pearson")] == pytest.approx(pearsonr(cos, gold[known]).statistic, abs=1e-6)

    # STS: two subsets (15 and 25 pairs), gold rounded to halves (ties); pooled and pair-weighted mean
    sents = {f"s{i}": tuple(rng.normal(size=5)) for i in range(30)}
    names = list(sents)

    def subset(n: int) -> tuple[list[str], list[str], np.ndarray]:
        idx = [(a, b) for a, b in rng.integers(0, 30, size=(n + 10, 2)) if a != b][:n]
        return [names[a] for a, _ in idx], [names[b] for _, b in idx], np.round(rng.uniform(0, 5, n) * 2) / 2

    data = PairData({"A": subset(15), "B": subset(25)}, primary_subset="wmean")
    vectors = _sentence_vectors(data, sents)
    scorer = STSScorer()
    res = scorer.score(None, data, vectors, scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.subset, r.metric): r.value for r in res.rows}
    expect = {}
    for name, (s1, s2, g) in data.subsets.items():
        cos = [_cos(np.array(sents[a]), np.array(sents[b])) for a, b in zip(s1, s2, strict=True)]
        expect[name] = (cos, g, spearmanr(cos, g).statistic, pearsonr(cos, g).statistic)
        assert m[(name, "spearman")] == pytest.approx(expect[name][2], abs=1e-6)
        assert m[(name, "pearson")] == pytest.approx(expect[name][3], abs=1e-6)
    pooled_cos = expect["A"][0] + expect["B"][0]
    pooled_gold = np.concatenate([expect["A"][1], expect["B"][1]])
    assert m[("all", "spearman")] == pytest.approx(spearmanr(pooled_cos, pooled_gold).statistic, abs=1e-6)
    wmean = (15 * expect["A"][2] + 25 * expect["B"][2]) / 40
    assert m[("wmean", "spearman")] == pytest.approx(wmean, abs=1e-6)

    # similarity bands: Spearman per band
    data = PairData({"3-5": subset(12), "0-2": subset(12)})
    scorer = STSBandsScorer()
    res = scorer.score(None, data, _sentence_vectors(data, sents), scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.subset, r.metric): r.value for r in res.rows}
    for name, (s1, s2, g) in data.subsets.items():
        cos = [_cos(np.array(sents[a]), np.array(sents[b])) for a, b in zip(s1, s2, strict=True)]
        assert m[(name, "spearman")] == pytest.approx(spearmanr(cos, g).statistic, abs=1e-6)


def test_adding_an_evaluator_is_one_task_kind_and_one_scorer(tmp_path):
    """A task kind is one spec and one scorer: a toy evaluator of the mean vector norm (docs/design.md's worked
    example is run end to end by tests/test_docs_examples.py)."""

    class NormTask(TaskSpec):
        kind: Literal["mean-norm-test"] = "mean-norm-test"

    @register
    class MeanNorm(Scorer):
        name = "mean-norm-test"
        version = "1"
        task_spec = NormTask
        primary_metric = "mean_norm"
        declared_metrics: ClassVar = {"mean_norm": MetricInfo("higher", 0.0, float("inf"), "mean", "score", "norm")}

        def load(self, task):
            return PairData({"all": (["hello"], ["world"], np.array([1.0]))})

        def score(self, task, data, vectors, params, *, device=None):
            return ScoreResult([MetricRow("mean_norm", float(np.linalg.norm(vectors.emb, axis=1).mean()))])

    entry = {"id": "norms", "level": "sentence", "kind": "mean-norm-test", "version": "1", "files": {},
             "sha256": {}, "licence": "test", "source": "tests"}  # fmt: skip
    assert isinstance(task_adapter().validate_python(entry), NormTask)
    assert scorer_for("mean-norm-test").name == "mean-norm-test"


def test_a_scorer_a_test_registers_is_gone_in_the_next_test():
    assert "mean-norm-test" not in task_adapter().__repr__() and "mean-norm-test" not in scorers()
