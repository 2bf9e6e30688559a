"""Issue 23.3: every correlation-style number (word-similarity and STS Spearman / Pearson) carries its 95 % confidence
interval, in closed form (Fisher's z), stored beside the value (``ci_low`` / ``ci_high`` / ``ci_method``) without
changing the value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr

from evalfarm.scorers.base import TextVectors
from evalfarm.scorers.similarity import (
    PairData,
    STSScorer,
    WordSimilarityScorer,
    correlation_interval,
    mean_interval,
    pearson,
    spearman,
)

pytestmark = pytest.mark.faults  # issue 23.3 (`make faults`)


def test_pearson_interval_is_scipys_fisher_interval() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = 0.6 * x + rng.normal(size=50)
    ci = correlation_interval(pearson(x, y), 50, rank=False)
    ref = pearsonr(x, y).confidence_interval(0.95)
    assert ci is not None and ci.method == "fisher-z 95%"
    assert ci.low == pytest.approx(ref.low, abs=1e-12) and ci.high == pytest.approx(ref.high, abs=1e-12)


def test_spearman_interval_covers_the_true_rho_about_95_percent_of_the_time() -> None:
    """Seeded simulation: bivariate normal with Pearson 0.6 (Spearman 6/pi asin(0.3) = 0.582), 30 pairs."""
    rng = np.random.default_rng(1)
    true_rho = 6 / math.pi * math.asin(0.3)
    cov = [[1.0, 0.6], [0.6, 1.0]]
    hits = 0
    trials = 400
    for _ in range(trials):
        xy = rng.multivariate_normal([0.0, 0.0], cov, size=30)
        ci = correlation_interval(spearman(xy[:, 0], xy[:, 1]), 30, rank=True)
        assert ci is not None
        hits += ci.low <= true_rho <= ci.high
    assert 0.92 <= hits / trials <= 0.985, hits / trials


def test_no_interval_without_a_correlation_or_under_four_pairs_and_a_point_at_one() -> None:
    assert correlation_interval(float("nan"), 100, rank=True) is None
    assert correlation_interval(1.0, 3, rank=True) is None  # a 5-word model's rho 1.0 from 3 pairs
    ci = correlation_interval(1.0, 4, rank=True)
    assert ci is not None and (ci.low, ci.high) == (1.0, 1.0)
    narrow, wide = correlation_interval(0.5, 1000, rank=True), correlation_interval(0.5, 10, rank=True)
    assert narrow is not None and wide is not None
    assert wide.low < narrow.low < 0.5 < narrow.high < wide.high


def test_mean_interval_keeps_the_mean_bit_for_bit() -> None:
    parts = [(0.71, 750), (0.55, 189), (0.62, 1500)]
    r, n = np.array([p[0] for p in parts]), np.array([p[1] for p in parts], dtype=np.float64)
    m, ci = mean_interval(parts, rank=True, weighted=False)
    w, wci = mean_interval(parts, rank=True, weighted=True)
    assert m == float(np.mean(r)) and w == float(np.average(r, weights=n))
    assert ci is not None and wci is not None and ci.low < m < ci.high and wci.low < w < wci.high
    assert ci.method == "delta fisher-z 95%"
    assert mean_interval([(0.5, 100), (float("nan"), 100)], rank=True, weighted=True)[1] is None


def _vectors(texts: list[str], seed: int, oov: frozenset[str] = frozenset()) -> TextVectors:
    emb = np.random.default_rng(seed).normal(size=(len(texts), 8)).astype(np.float32)
    mask = np.array([t in oov for t in texts])
    emb[mask] = 0
    return TextVectors("word", emb, mask)


def test_word_similarity_rows_carry_intervals_and_unchanged_values() -> None:
    words = [f"w{i}" for i in range(40)]
    rng = np.random.default_rng(2)
    w1, w2 = words[:20], words[20:]
    data = PairData({"all": (w1, w2, rng.uniform(0, 10, size=20))})
    scorer = WordSimilarityScorer()
    params = {"variants": ["raw"], "center": True}
    rows = scorer.score(None, data, _vectors(data.texts, 3, oov=frozenset({"w0", "w1"})), params).rows  # type: ignore[arg-type]
    by = {r.metric: r for r in rows}
    assert by["n_pairs"].value == 18.0 and by["coverage"].ci is None and by["n_pairs"].ci is None
    for metric, rank in (("spearman", True), ("pearson", False)):
        row = by[metric]
        assert row.ci == correlation_interval(row.value, 18, rank=rank)
        assert row.ci is not None and row.ci.low <= row.value <= row.ci.high


def test_sts_rows_carry_intervals_including_the_summaries() -> None:
    rng = np.random.default_rng(4)
    subsets = {}
    for name, n in (("a", 30), ("b", 12)):
        s1 = [f"{name}-x{i}" for i in range(n)]
        s2 = [f"{name}-y{i}" for i in range(n)]
        subsets[name] = (s1, s2, rng.uniform(0, 5, size=n))
    data = PairData(subsets, primary_subset="wmean")
    vec = _vectors(data.texts, 5)
    vec.level = "sentence"
    rows = STSScorer().score(None, data, vec, {}).rows  # type: ignore[arg-type]
    corr = [r for r in rows if r.metric in ("spearman", "pearson")]
    assert {r.subset for r in corr} == {"a", "b", "all", "mean", "wmean"}
    for r in corr:
        assert r.ci is not None and r.ci.low <= r.value <= r.ci.high, r
    sp = {r.subset: r for r in corr if r.metric == "spearman"}
    assert sp["wmean"].value == float(np.average([sp["a"].value, sp["b"].value], weights=[30.0, 12.0]))
    assert sp["wmean"].ci is not None and sp["wmean"].ci.method.startswith("delta")
    assert sp["all"].ci == correlation_interval(sp["all"].value, 42, rank=True)
