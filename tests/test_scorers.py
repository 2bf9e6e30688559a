"""The scorer layer: the registry, and each similarity scorer on tiny sets worked by hand (plus scipy checks)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from evalfarm.catalog.specs import TaskSpec
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
    spearman,
)


def test_registry_knows_every_scorer_and_refuses_duplicates():
    assert {"evalrank", "word-similarity", "sts", "similarity-bands"} <= set(scorers())
    assert scorer_for("wordsim").name == "word-similarity"

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
    res = scorer.score(None, data, vectors, scorer.params(None, RunOptions()))  # type: ignore[arg-type]
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
    res = scorer.score(None, data, vectors, scorer.params(None, RunOptions()))  # type: ignore[arg-type]
    m = {(r.subset, r.metric): r.value for r in res.rows}
    assert m[("A", "spearman")] == pytest.approx(1.0) and m[("B", "spearman")] == pytest.approx(-1.0)
    assert m[("mean", "spearman")] == pytest.approx(0.0)
    assert m[("wmean", "spearman")] == pytest.approx((3 * 1.0 + 5 * -1.0) / 8)  # SentEval's weighted mean
    assert m[("all", "n_pairs")] == 8
    assert [r.subset for r in res.rows if r.primary] == ["wmean"]


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


def test_adding_an_evaluator_is_one_task_kind_and_one_scorer(tmp_path):
    """The README's worked example: a toy evaluator that reports the mean vector norm of a task's texts."""

    class NormTask(TaskSpec):
        kind: Literal["mean-norm-test"] = "mean-norm-test"

    @register
    class MeanNorm(Scorer):
        name = "mean-norm-test"
        version = "1"
        task_spec = NormTask
        primary_metric = "mean_norm"

        def load(self, task):
            return PairData({"all": (["hello"], ["world"], np.array([1.0]))})

        def score(self, task, data, vectors, params, *, device=None):
            return ScoreResult(
                [MetricRow("mean_norm", float(np.linalg.norm(vectors.emb, axis=1).mean()), primary=True)]
            )

    entry = {"id": "norms", "level": "sentence", "kind": "mean-norm-test", "version": "1", "files": {},
             "sha256": {}, "licence": "test", "source": "tests"}  # fmt: skip
    assert isinstance(task_adapter().validate_python(entry), NormTask)
    assert scorer_for("mean-norm-test").name == "mean-norm-test"
