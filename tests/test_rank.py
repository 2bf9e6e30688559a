"""EvalRank semantics on hand-computed cases, and the blocked kernel against the per-pair definition."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evalfarm.preprocess import VocabStats
from evalfarm.ranking import rank_metrics
from evalfarm.scorers.base import RunOptions, TextVectors
from evalfarm.scorers.evalrank import EvalRankScorer, rank_pool
from evalfarm.scorers.rank_kernel import rank_pairs, rank_pairs_loop


def preprocess(emb: np.ndarray, similarity: str, *, center=None) -> np.ndarray:
    """L2-normalise for cos (zero rows stay zero), as the kernel expects its input."""
    x = np.asarray(emb, dtype=np.float32).copy()
    if similarity == "cos":
        n = np.linalg.norm(x, axis=1, keepdims=True)
        np.divide(x, n, out=x, where=n > 0)
    return x


def evaluate_rank_pool(emb, oov, meta, q, p, *, similarity, center=True, oov_policy="mean", level):
    """One similarity of the EvalRank scorer on a hand-made pool: ranks, scores, tied counts and metrics."""
    vocab = VocabStats.from_json(meta["vocab_stats"]) if "vocab_stats" in meta else None
    vectors = TextVectors(level, np.asarray(emb, np.float32), np.asarray(oov, bool), vocab, oov_policy)
    res = rank_pool(vectors, np.asarray(q), np.asarray(p), similarity=similarity, center=center)
    data = SimpleNamespace(items=[str(i) for i in range(len(emb))], queries=np.asarray(q), positives=np.asarray(p))
    params = EvalRankScorer().params(
        SimpleNamespace(level=level), RunOptions(similarities=(similarity,), center=center)
    )
    rows = EvalRankScorer().score(None, data, vectors, params).rows
    metrics = {r.metric: r.value for r in rows if r.ties in (None, "optimistic")}
    return SimpleNamespace(
        ranks=res.rank.astype(float), scores=res.score, tied=res.tied, pair_index=res.pair_index, metrics=metrics
    )


# Unit vectors in 2-D: cosines with X are exact decimals.
X, Y, CLOSER, ORTH, OPP = (1.0, 0.0), (0.6, 0.8), (0.8, 0.6), (0.0, 1.0), (-1.0, 0.0)


def _ranks(vectors, pairs, sim="cos", background=None, **kw):
    emb = np.asarray(vectors, dtype=np.float32)
    q = np.array([p[0] for p in pairs])
    p = np.array([p[1] for p in pairs])
    bg = np.arange(len(emb)) if background is None else np.asarray(background)
    ranks, scores = rank_pairs(preprocess(emb, sim, center=None), q, p, bg, sim, **kw)
    return ranks.tolist(), scores


def test_cos_rank_counts_strictly_better_background_and_excludes_x_and_y():
    # s(x,y)=0.6; CLOSER scores 0.8 (counts); x itself scores 1.0 but is excluded; ORTH 0, OPP -1 don't count.
    ranks, scores = _ranks([X, Y, CLOSER, ORTH, OPP], [(0, 1)])
    assert ranks == [2]
    assert scores[0] == pytest.approx(0.6)


def test_ties_optimistic_by_default_pessimistic_counts_equal_scores_realistic_is_their_mean():
    vecs = [X, Y, CLOSER, Y, ORTH]  # item 3 duplicates y: an exact tie
    assert _ranks(vecs, [(0, 1)])[0] == [2]
    assert _ranks(vecs, [(0, 1)], ties="pessimistic")[0] == [3]
    assert _ranks(vecs, [(0, 1)], ties="realistic")[0] == [2.5]
    vecs = [X, Y, Y, Y, Y, ORTH]  # three copies tie: 1 + 0 above + 3 / 2
    assert _ranks(vecs, [(0, 1)], ties="realistic")[0] == [2.5]
    assert _ranks(vecs, [(0, 1)], ties="pessimistic")[0] == [4]


def test_unknown_tie_policy_or_similarity_fails_when_configured():
    with pytest.raises(ValueError, match="unknown tie policy 'random'"):
        rank_pairs(np.eye(2, dtype=np.float32), np.array([0]), np.array([1]), np.arange(2), "cos", ties="random")
    with pytest.raises(ValueError, match="unknown similarity"):
        RunOptions(similarities=("cos", "dot"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hits@k"):
        RunOptions(hits=(0,))


def test_other_positives_counted_by_default_filtered_on_request():
    vecs = [X, Y, CLOSER, ORTH]
    pairs = [(0, 1), (0, 2)]  # x has two positives; CLOSER outranks Y
    assert _ranks(vecs, pairs)[0] == [2, 1]
    assert _ranks(vecs, pairs, filter_other_positives=True)[0] == [1, 1]


def test_self_pair_ranks_first_and_ties_with_duplicates_only_pessimistically():
    vecs = [X, X, Y]  # item 1 duplicates x
    assert _ranks(vecs, [(0, 0)])[0] == [1]
    assert _ranks(vecs, [(0, 0)], ties="pessimistic")[0] == [2]


def test_l2_similarity_is_one_over_one_plus_distance():
    # 1-D points: x=0, y=2 (d=2); b=1 (d=1) counts; b=-2 (d=2) ties; b=3 (d=3) doesn't.
    vecs = [[0.0], [2.0], [1.0], [-2.0], [3.0]]
    ranks, scores = _ranks(vecs, [(0, 1)], sim="l2")
    assert ranks == [2]
    assert scores[0] == pytest.approx(1 / 3)
    assert _ranks(vecs, [(0, 1)], sim="l2", ties="pessimistic")[0] == [3]


def test_positive_outside_background_is_scored_in_the_same_gemm_but_never_counted():
    vecs = [X, Y, CLOSER, ORTH]
    assert _ranks(vecs, [(0, 1)], background=[0, 2, 3])[0] == [2]


def test_zero_vector_has_cosine_zero():
    vecs = [X, [0.0, 0.0], ORTH, OPP]
    ranks, scores = _ranks(vecs, [(0, 1)])
    assert scores[0] == 0.0
    assert ranks == [1]  # ORTH ties at 0 (optimistic), OPP is below
    assert _ranks(vecs, [(0, 1)], ties="pessimistic")[0] == [2]


def test_metrics_by_hand():
    m = rank_metrics(np.array([1, 2, 4, 10, 20]), hits=(1, 3, 10))
    assert m["mr"] == pytest.approx(7.4)
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0.25 + 0.1 + 0.05) / 5)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (0.2, 0.4, 0.8)
    assert np.isnan(rank_metrics(np.array([], dtype=np.int64))["mr"])


@pytest.mark.parametrize("sim", ["cos", "l2"])
@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "realistic"])
@pytest.mark.parametrize("filt", [False, True])
def test_blocked_kernel_equals_per_pair_definition(sim, ties, filt):
    rng = np.random.default_rng(7)
    for _ in range(15):
        n, d = int(rng.integers(5, 80)), int(rng.integers(1, 6))
        # l2 on small integers: exact arithmetic, many ties. cos on continuous data.
        emb = rng.integers(-2, 3, (n, d)).astype(np.float32) if sim == "l2" else rng.normal(size=(n, d))
        emb = preprocess(np.asarray(emb, np.float32), sim, center=None)
        m = int(rng.integers(1, 50))
        q, p = rng.integers(0, n, m), rng.integers(0, n, m)
        bg = np.sort(rng.choice(n, int(rng.integers(1, n + 1)), replace=False))
        tiny_blocks = int(rng.integers(1, 4000))  # forces many blocks
        got, _ = rank_pairs(emb, q, p, bg, sim, ties=ties, filter_other_positives=filt, max_block_bytes=tiny_blocks)
        want = rank_pairs_loop(emb, q, p, bg, sim, ties=ties, filter_other_positives=filt)
        np.testing.assert_array_equal(got, want)


def _pool_case():
    emb = np.array([X, Y, CLOSER, ORTH, [0.0, 0.0]], dtype=np.float32)
    oov = np.array([False, False, False, False, True])
    q, p = np.array([0, 4, 1]), np.array([1, 0, 0])
    return emb, oov, q, p


def test_oov_skip_drops_pairs_and_background_items():
    emb, oov, q, p = _pool_case()
    res = evaluate_rank_pool(emb, oov, {}, q, p, similarity="cos", center=False, oov_policy="skip", level="sentence")
    assert res.pair_index.tolist() == [0, 2]
    assert res.metrics["n_pairs"] == 2
    assert res.metrics["oov_rate"] == pytest.approx(0.2)
    assert res.metrics["oov_pair_rate"] == pytest.approx(1 / 3)
    assert res.metrics["n_background"] == 4


def test_oov_mean_is_the_vocabulary_statistic_from_metadata_used_as_is():
    from evalfarm.preprocess import VocabStats

    emb, oov, q, p = _pool_case()
    # vocabulary mean 0 (centring changes nothing); the OOV vector is (0, 0.5), NOT renormalised to ORTH.
    stats = VocabStats(n=4, mean=np.zeros(2), mean_unit_centred=np.array([0.0, 0.5]), mean_unit=np.ones(2))
    meta = {"vocab_stats": stats.to_json()}
    res = evaluate_rank_pool(emb, oov, meta, q, p, similarity="cos", oov_policy="mean", level="word")
    # pair (4 -> 0): s = (0, .5)·X = 0; Y (.4), CLOSER (.3) and ORTH (.5) beat it.
    assert res.ranks.tolist()[1] == 4
    assert res.scores[1] == 0.0
    # pair (1 -> 0), Y's row: s(Y, X) = .6; CLOSER (.96) and ORTH (.8) beat it, the OOV item ((0, .5)·Y = .4)
    # does not: a renormalised OOV vector would be ORTH's twin (.8) and beat it too.
    assert res.ranks.tolist()[2] == 3
    zero = evaluate_rank_pool(emb, oov, meta, q, p, similarity="cos", oov_policy="zero", level="word")
    assert zero.scores[1] == 0.0


def test_centering_makes_ranks_invariant_to_a_common_offset():
    rng = np.random.default_rng(3)
    emb = rng.normal(size=(60, 8)).astype(np.float32)
    oov = np.zeros(60, bool)
    q, p = rng.integers(0, 60, 40), rng.integers(0, 60, 40)
    shifted = emb + 5.0
    kw = dict(similarity="cos", oov_policy="mean", level="sentence")
    a = evaluate_rank_pool(emb, oov, {}, q, p, center=True, **kw).ranks
    b = evaluate_rank_pool(shifted, oov, {}, q, p, center=True, **kw).ranks
    c = evaluate_rank_pool(shifted, oov, {}, q, p, center=False, **kw).ranks
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_tied_count_and_tie_rate_expose_policy_sensitive_pairs():
    vecs = np.array([X, Y, Y, Y, CLOSER], dtype=np.float32)  # two background copies of y tie with the positive
    tied = np.zeros(1, dtype=np.int64)
    ranks, _ = rank_pairs(
        preprocess(vecs, "cos", center=None), np.array([0]), np.array([1]), np.arange(5), "cos", tied_out=tied
    )
    assert ranks.tolist() == [2] and tied.tolist() == [2]
    oov = np.zeros(5, bool)
    res = evaluate_rank_pool(
        vecs,
        oov,
        {},
        np.array([0, 4]),
        np.array([1, 0]),
        similarity="cos",
        center=False,
        oov_policy="mean",
        level="sentence",
    )
    assert res.metrics["tie_rate"] == 0.5 and res.tied.tolist() == [2, 0]
