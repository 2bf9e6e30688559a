"""Issue 41: the statistics that compare two evaluators' correlations with one downstream task over the same models
(evalfarm/analysis/comparisons.py), against hand-computed values, exact enumeration, published worked examples and
properties."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm.analysis.comparisons import (
    _counts,
    _deltas,
    bootstrap_p_value,
    holm,
    models_needed,
    models_needed_normal,
    paired_difference,
    resampled_spearman,
    steiger_z,
    williams_t,
    zou_interval,
)
from evalfarm.analysis.correlations import bootstrap_interval, spearman

# ---- hand-computed ------------------------------------------------------------------------------------------------


def test_the_difference_of_two_spearman_correlations_by_hand() -> None:
    """rho(A, D) = 1 (same order); B swaps two neighbours twice: sum of squared rank differences 4, so
    rho(B, D) = 1 - 6 * 4 / (5 * 24) = 0.8; A and B: the same 0.8. Difference 0.2."""
    d = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    b = np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    got = paired_difference(a, b, d, n_resamples=200)
    assert (got.rho_a, got.rho_b, got.r_ab) == pytest.approx((1.0, 0.8, 0.8))
    assert got.difference == pytest.approx(0.2)
    assert got.n_models == 5


def test_the_bootstrap_p_value_by_hand() -> None:
    # (1 + #<=0) / (B + 1) and (1 + #>=0) / (B + 1), twice the smaller, at most 1
    assert bootstrap_p_value(np.array([0.1, 0.2, 0.3])) == pytest.approx(2 * 1 / 4)
    assert bootstrap_p_value(np.array([-0.1, 0.0, 0.2, 0.3])) == 1.0  # 2 * min(3/5, 4/5) > 1
    assert bootstrap_p_value(np.array([-0.2, 0.1, 0.2, 0.3, 0.4])) == pytest.approx(2 * 2 / 6)
    assert bootstrap_p_value(np.zeros(7)) == 1.0


def test_holm_by_hand() -> None:
    """m = 4: sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> made non-decreasing:
    0.06; back in input order."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, None, 0.01]) == pytest.approx([0.2, None, 0.02])  # a missing test does not count in m
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


def test_resampled_spearman_is_spearman_of_each_resample_with_ties() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.integers(0, 5, size=11).astype(float)  # many ties, also with the copies of a resample
        y = rng.normal(size=11)
        idx = rng.integers(0, 11, size=(40, 11))
        counts = np.stack([np.bincount(row, minlength=11) for row in idx])
        got = resampled_spearman(x, y, counts)
        want = np.array([spearman(x[i], y[i]) for i in idx])
        assert np.array_equal(np.isnan(got), np.isnan(want))
        assert np.allclose(got[np.isfinite(got)], want[np.isfinite(want)], atol=1e-12)


def test_the_paired_bootstrap_against_its_exact_distribution_by_enumeration() -> None:
    """Four models: the bootstrap distribution is over all 4^4 = 256 equally likely draws. Enumerated exactly
    (resamples with an undefined correlation dropped), its tail shares and percentiles; the seeded Monte-Carlo
    bootstrap must agree within its sampling error."""
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = np.array([2.0, 1.0, 4.0, 3.0])
    d = np.array([1.0, 3.0, 2.0, 4.0])
    exact = []
    for idx in itertools.product(range(4), repeat=4):
        i = np.array(idx)
        delta = spearman(a[i], d[i]) - spearman(b[i], d[i])
        if np.isfinite(delta):
            exact.append(delta)
    exact_arr = np.array(exact)
    got = paired_difference(a, b, d, n_resamples=20_000, refine_resamples=0)
    assert got.n_valid / got.n_resamples == pytest.approx(len(exact_arr) / 256, abs=0.01)
    assert got.p_value == pytest.approx(bootstrap_p_value(exact_arr), abs=0.02)
    assert (got.ci_low, got.ci_high) == pytest.approx(tuple(np.percentile(exact_arr, [2.5, 97.5])), abs=0.05)


def test_each_correlations_resamples_are_the_cells_bootstrap_draws() -> None:
    """The comparison draws models exactly as the cell's own interval does (same seed, same draws), so rho*(A, D)
    over its resamples has the stored interval's percentiles."""
    rng = np.random.default_rng(5)
    a, d = rng.normal(size=30), rng.normal(size=30)
    low, high, _ = bootstrap_interval(a, d, n_resamples=1000, seed=7)
    rho_a = resampled_spearman(a, d, _counts(np.random.default_rng(7), 30, 1000))
    assert tuple(np.percentile(rho_a[np.isfinite(rho_a)], [2.5, 97.5])) == pytest.approx((low, high), abs=1e-12)


# ---- published worked examples ------------------------------------------------------------------------------------
# Found through the cocor R package's test suite (Diedenhofen & Musch 2015, PLoS ONE 10(4): e0121945;
# cran/cocor tests/testthat/tests.r), which quotes each value with its source; the values are the papers'.


def test_steiger_1980_case_a() -> None:
    """Steiger (1980), Psychological Bulletin 87, 245-251, p. 249, Case A: N = 103, r_jk = .4, r_jh = .5,
    r_kh = .1. Exact arithmetic gives Z = -0.8887 (the paper prints -.8913: it rounds the covariance to .0042)."""
    z, p = steiger_z(0.4, 0.5, 0.1, 103)
    assert z == pytest.approx(-0.8887185, abs=1e-7)
    assert p == pytest.approx(2 * (1 - 0.8129), abs=2e-3)  # Phi(0.8887) = 0.8129


def test_williams_and_steiger_against_depcor() -> None:
    """Silver, Hittner & May (2006), DEPCOR, Applied Psychological Measurement 30, 152-153: r_jk = .3, r_jh = .4,
    r_kh = .5, n = 100 -> Williams' t = -1.0767 (p = .2843), Steiger's Z = -1.0718 (p = .2838)."""
    t, p = williams_t(0.3, 0.4, 0.5, 100)
    assert round(t, 4) == -1.0767 and round(p, 4) == 0.2843
    z, p = steiger_z(0.3, 0.4, 0.5, 100)
    assert round(z, 4) == -1.0718 and round(p, 4) == 0.2838


def test_zou_2007_overlapping_example() -> None:
    """Zou (2007), Psychological Methods 12, 399-413, p. 409: r_12 = .396, r_13 = .179, r_23 = .088, n = 66 ->
    the 95 % interval of the difference is (-.093, .517)."""
    low, high = zou_interval(0.396, 0.179, 0.088, 66)
    assert (round(low, 3), round(high, 3)) == (-0.093, 0.517)


# ---- the classical tests: their own properties --------------------------------------------------------------------
@given(
    r1=st.floats(-0.95, 0.95),
    r2=st.floats(-0.95, 0.95),
    r12=st.floats(-0.95, 0.95),
    n=st.integers(10, 500),
)
@settings(max_examples=200, deadline=None)
def test_the_classical_tests_are_antisymmetric(r1: float, r2: float, r12: float, n: int) -> None:
    det = 1 - r1**2 - r2**2 - r12**2 + 2 * r1 * r2 * r12
    if det <= 1e-6:  # not a correlation matrix
        return
    for test in (williams_t, steiger_z):
        s, p = test(r1, r2, r12, n)
        s2, p2 = test(r2, r1, r12, n)
        assert s == pytest.approx(-s2, abs=1e-9) and p == pytest.approx(p2, abs=1e-9)
        assert 0 <= p <= 1
    low, high = zou_interval(r1, r2, r12, n)
    low2, high2 = zou_interval(r2, r1, r12, n)
    assert (low, high) == pytest.approx((-high2, -low2), abs=1e-9)
    assert low <= r1 - r2 <= high


def test_equal_correlations_have_no_difference_in_every_test() -> None:
    assert williams_t(0.6, 0.6, 1.0, 30) == (0.0, 1.0)
    assert steiger_z(0.6, 0.6, 0.3, 30) == (0.0, 1.0)


def test_the_classical_tests_agree_with_the_bootstrap_on_normal_data() -> None:
    """On trivariate normal data (what the classical tests assume) Zou's interval on the rank correlations and
    the paired bootstrap's agree to within a few hundredths."""
    rng = np.random.default_rng(11)
    cov = np.array([[1.0, 0.5, 0.7], [0.5, 1.0, 0.4], [0.7, 0.4, 1.0]])
    a, b, d = rng.multivariate_normal(np.zeros(3), cov, size=200).T
    got = paired_difference(a, b, d, refine_resamples=0)
    low, high = zou_interval(got.rho_a, got.rho_b, got.r_ab, 200, rank=True)
    assert got.ci_low == pytest.approx(low, abs=0.04) and got.ci_high == pytest.approx(high, abs=0.04)


# ---- the paired bootstrap: properties -----------------------------------------------------------------------------
_values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=4, max_size=25)


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_correlation_compared_with_itself_differs_by_zero_with_p_one(data: st.DataObject) -> None:
    a = np.array(data.draw(_values))
    d = np.array(data.draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=len(a), max_size=len(a))))
    got = paired_difference(a, a, d, n_resamples=300, seed=data.draw(st.integers(0, 2**31)))
    if got.p_value is None:  # a constant side: no correlation, nothing to test
        assert not (np.isfinite(got.rho_a) and got.n_valid >= got.n_resamples / 2)
        return
    assert got.difference == 0.0 and got.p_value == 1.0
    assert got.ci_low == 0.0 and got.ci_high == 0.0
    assert got.n_resamples == 300  # p = 1: nothing to refine


@given(seed=st.integers(0, 2**31), n=st.integers(40, 80))
@settings(max_examples=8, deadline=None)
def test_a_planted_large_difference_is_found(seed: int, n: int) -> None:
    """A tracks D closely (rho about 0.95), B is unrelated to D: the difference is found, its interval excludes 0
    and holds the planted difference's sign."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=n)
    a = d + 0.3 * rng.normal(size=n)
    b = rng.normal(size=n)
    got = paired_difference(a, b, d, seed=seed)
    assert got.difference > 0.5
    assert got.p_value is not None and got.p_value < 0.001
    assert got.ci_low is not None and got.ci_low > 0
    assert got.n_resamples == 20_000  # refined: a small p-value is resolved finely


@given(seed=st.integers(0, 2**31))
@settings(max_examples=8, deadline=None)
def test_the_bootstrap_is_seeded_and_reproducible(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b, d = rng.normal(size=(3, 15))
    one = paired_difference(a, b, d, n_resamples=500, seed=seed)
    assert paired_difference(a, b, d, n_resamples=500, seed=seed) == one
    # the block size does not change the draws: the same resamples whatever the memory bound
    import evalfarm.analysis.comparisons as cmp

    small = cmp._BLOCK
    try:
        cmp._BLOCK = 15 * 7
        assert paired_difference(a, b, d, n_resamples=500, seed=seed) == one
    finally:
        cmp._BLOCK = small


@given(seed=st.integers(0, 2**31))
@settings(max_examples=20, deadline=None)
def test_swapping_the_evaluators_negates_the_difference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b, d = rng.normal(size=(3, 12))
    ab = paired_difference(a, b, d, n_resamples=400, seed=1)
    ba = paired_difference(b, a, d, n_resamples=400, seed=1)
    assert ab.difference == pytest.approx(-ba.difference)
    assert ab.p_value == ba.p_value
    assert (ab.ci_low, ab.ci_high) == pytest.approx((-ba.ci_high, -ba.ci_low))  # type: ignore[operator]


def test_a_monotone_transform_of_an_evaluator_changes_nothing() -> None:
    rng = np.random.default_rng(2)
    a, b, d = rng.normal(size=(3, 20))
    assert paired_difference(np.exp(a), b, d**3) == paired_difference(a, b, d)


def test_under_four_models_there_is_no_test() -> None:
    got = paired_difference(np.array([1.0, 2, 3]), np.array([3.0, 1, 2]), np.array([1.0, 2, 3]))
    assert got.p_value is None and got.ci_low is None and got.n_resamples == 0


def test_holm_properties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = list(rng.uniform(0, 0.2, size=rng.integers(1, 30)))
        adj = holm(p)
        assert all(a is not None and q <= a <= 1 for q, a in zip(p, adj, strict=True))
        order = np.argsort(p, kind="stable")
        sorted_adj = [adj[i] for i in order]
        assert sorted_adj == sorted(sorted_adj)  # type: ignore[type-var]
    assert holm([0.03]) == [0.03]


# ---- power --------------------------------------------------------------------------------------------------------
def test_power_simulation_matches_the_closed_form_within_the_grid() -> None:
    """The simulated zoo size against n0 * ((z_.975 + z_.8) sd / |delta|)^2 from the bootstrap sd at the zoo's
    size: the same to within the grid's step (x 1.25) and simulation noise."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        a = rng.normal(size=40)
        d = a + 1.5 * rng.normal(size=40)
        b = a + 1.1 * rng.normal(size=40)
        got = models_needed(a, b, d, seed=seed)
        deltas = _deltas(a, b, d, 4000, seed)
        want = models_needed_normal(got.difference, float(np.nanstd(deltas, ddof=1)), 40)
        assert got.n_needed is not None
        assert 1 / 1.5 <= got.n_needed / want <= 1.5, (got.n_needed, want)
        assert got.curve[-1] == (got.n_needed, pytest.approx(got.curve[-1][1])) and got.curve[-1][1] >= 0.8
        assert all(p < 0.8 for _, p in got.curve[:-1])


def test_power_needs_fewer_models_for_a_larger_difference_and_none_for_no_difference() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(size=50)
    a = d + 0.5 * rng.normal(size=50)
    near = a + 0.6 * rng.normal(size=50)
    far = rng.normal(size=50)
    n_near = models_needed(a, near, d).n_needed
    n_far = models_needed(a, far, d).n_needed
    assert n_near is not None and n_far is not None and n_far < n_near
    same = models_needed(a, a, d)
    assert same.n_needed is None and same.difference == 0.0 and same.curve == ()
    assert models_needed(a, near, d, seed=3) == models_needed(a, near, d, seed=3)
    capped = models_needed(a, near, d, max_models=10)
    assert capped.n_needed is None and all(n <= 10 for n, _ in capped.curve)
    assert math.isfinite(capped.difference)


def test_steiger_over_an_unknown_correlation_between_the_evaluators() -> None:
    """r_AD = .6, r_BD = .8: the three are a correlation matrix for r_AB in .48 +- sqrt(.64 x .36) = [0, .96]; the
    p-values over that range bracket Steiger's at any r_AB in it; equal correlations never differ."""
    from evalfarm.analysis.comparisons import steiger_over_unknown_r_ab

    got = steiger_over_unknown_r_ab(0.6, 0.8, 30)
    assert got.r_ab_range == pytest.approx((0.0, 0.96))
    for r_ab in (0.0, 0.3, 0.6, 0.9):
        assert got.p_min - 1e-12 <= steiger_z(0.6, 0.8, r_ab, 30)[1] <= got.p_max + 1e-12
    assert got.p_max == pytest.approx(steiger_z(0.6, 0.8, 0.0, 30)[1], rel=1e-6)
    assert got.r_ab_significant_from is not None and steiger_z(0.6, 0.8, got.r_ab_significant_from, 30)[1] < 0.05
    assert steiger_z(0.6, 0.8, got.r_ab_significant_from - 0.01, 30)[1] >= 0.05
    same = steiger_over_unknown_r_ab(0.5, 0.5, 60)
    assert (same.p_max, same.p_min, same.r_ab_significant_from) == (1.0, 1.0, None)
    everywhere = steiger_over_unknown_r_ab(0.9, 0.1, 200)
    assert everywhere.p_max < 0.05 and everywhere.r_ab_significant_from == pytest.approx(everywhere.r_ab_range[0])


def test_steiger_models_needed_by_hand_and_against_its_own_test() -> None:
    """r = .5 and .3 with r_AB = .5: mean .4, m^2 = .16, c = (.5 (1 - .32) - .5 x .16 (1 - .32 - .25)) / .84^2
    = (.34 - .0344) / .7056 = .43311; dz = atanh .5 - atanh .3 = .23975; n = 3 + 1.13379 (2.80159 / .23975)^2
    = 157.8. At that n, Steiger's Z at the same correlations is z_.975 + z_.8 = 2.80 (power 80 %)."""
    from evalfarm.analysis.comparisons import steiger_models_needed

    n = steiger_models_needed(0.5, 0.3, 0.5)
    assert n == pytest.approx(157.8, abs=0.2)
    assert steiger_z(0.5, 0.3, 0.5, round(n))[0] == pytest.approx(2.8016, abs=0.01)
    assert steiger_models_needed(0.5, 0.3, 0.9) < n < steiger_models_needed(0.5, 0.3, 0.1)
    assert steiger_models_needed(0.4, 0.4, 0.5) == math.inf


# ---- issue 53: Spearman's variance, families, power at the table's level -------------------------------------------
def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (continuous data: no ties)."""
    rx = x.argsort(1).argsort(1).astype(float)
    ry = y.argsort(1).argsort(1).astype(float)
    rx -= rx.mean(1, keepdims=True)
    ry -= ry.mean(1, keepdims=True)
    return (rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))


def _null_rejections(rho: float, r_ab: float, n: int, alpha: float, reps: int, seed: int) -> dict[str, float]:
    """Under a true null (A and B correlate equally with D; trivariate normal, Spearman's rho of each sample): how
    often Steiger's and Williams' tests reject at ``alpha`` with Pearson's variance and with Spearman's."""
    cov = np.array([[1, r_ab, rho], [r_ab, 1, rho], [rho, rho, 1]])
    x = np.random.default_rng(seed).standard_normal((reps, n, 3)) @ np.linalg.cholesky(cov).T
    r1, r2, r12 = _spearman_rows(x[..., 0], x[..., 2]), _spearman_rows(x[..., 1], x[..., 2]), _spearman_rows(
        x[..., 0], x[..., 1])  # fmt: skip
    out = {}
    for name, test in (("steiger", steiger_z), ("williams", williams_t)):
        for rank in (False, True):
            p = np.array([test(a, b, c, n, rank=rank)[1] for a, b, c in zip(r1, r2, r12, strict=True)])
            out[f"{name}{'-spearman' if rank else ''}"] = float(np.mean(p < alpha))
    return out


@pytest.mark.parametrize(("rho", "r_ab", "n", "alpha"), [(0.8, 0.5, 67, 0.05), (0.9, 0.9, 109, 0.00625)])
def test_the_spearman_variance_holds_the_level_under_a_true_null_and_pearsons_does_not(
    rho: float, r_ab: float, n: int, alpha: float
) -> None:
    """Issue 53: Steiger's and Williams' tests of two Spearman correlations with Pearson's variance reject a true
    null 1.4-2.5x as often as alpha (the published-cell tests' levels: 0.05 / 8 columns for the paper's Table 6,
    0.05 / 10 for Table 3); with Bonett & Wright's variance they hold it. Seeded simulation: the bound is alpha
    plus three binomial standard errors, which the old variance exceeds by a wide margin."""
    reps = 8_000 if alpha >= 0.01 else 20_000
    got = _null_rejections(rho, r_ab, n, alpha, reps, seed=53)
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert got["steiger-spearman"] <= bound and got["williams-spearman"] <= bound, got
    assert (
        got["steiger"] > 1.3 * alpha and got["williams"] > 1.3 * alpha and min(got["steiger"], got["williams"]) > bound
    ), got


def test_spearman_variance_by_hand() -> None:
    """r = .6 and .4 (mean .5, Bonett-Wright factor 1 + .25 / 2 = 1.125): Spearman's Z is Pearson's / sqrt(1.125),
    Williams' t likewise; Zou's interval already used the factor per correlation."""
    from evalfarm.analysis.comparisons import z_variance_factor

    assert z_variance_factor(0.5, rank=True) == 1.125 and z_variance_factor(0.5, rank=False) == 1.0
    for test in (steiger_z, williams_t):
        pearson, spearman_ = test(0.6, 0.4, 0.3, 50)[0], test(0.6, 0.4, 0.3, 50, rank=True)[0]
        assert spearman_ == pytest.approx(pearson / math.sqrt(1.125))
    assert steiger_z(0.5, 0.5, 0.3, 50, rank=True) == (0.0, 1.0)


def test_steiger_over_unknown_r_ab_with_spearmans_variance_is_stricter() -> None:
    """The paper's Table 6 SST5 cells (EvalRank MRR .7416 against STS-B .3675, 67 models, alpha .05 / 8):
    significant for every feasible r_AB (from -0.35) with Pearson's variance, only from r_AB = -0.098 with
    Spearman's (issue 53; its reviewer's -0.08 comes from giving each correlation its own factor, unpooled)."""
    from evalfarm.analysis.comparisons import steiger_over_unknown_r_ab

    pearson = steiger_over_unknown_r_ab(0.7416, 0.3675, 67, alpha=0.05 / 8)
    spearman_ = steiger_over_unknown_r_ab(0.7416, 0.3675, 67, alpha=0.05 / 8, rank=True)
    assert pearson.p_max < 0.05 / 8 < spearman_.p_max
    assert pearson.r_ab_significant_from == pytest.approx(pearson.r_ab_range[0]) == pytest.approx(-0.351, abs=1e-3)
    assert spearman_.rank and spearman_.r_ab_significant_from == pytest.approx(-0.098, abs=0.002)
    assert steiger_z(0.7416, 0.3675, spearman_.r_ab_significant_from, 67, rank=True)[1] < 0.05 / 8
    assert steiger_z(0.7416, 0.3675, spearman_.r_ab_significant_from - 0.01, 67, rank=True)[1] >= 0.05 / 8


def test_the_family_bootstrap_draws_whole_families() -> None:
    """Each resample's copies of a model are its family's draw count: members of one family always come together,
    a resample holds G family draws, and models that are each their own family give the per-model bootstrap."""
    from evalfarm.analysis.comparisons import _family_counts, family_index

    groups = ["g", "g", "h", "k", "h", "g", "m"]
    family_of, n_families = family_index(groups)
    assert list(family_of) == [0, 0, 1, 2, 1, 0, 3] and n_families == 4
    counts = _family_counts(np.random.default_rng(0), family_of, n_families, 500)
    assert (counts[:, 0] == counts[:, 1]).all() and (counts[:, 0] == counts[:, 5]).all()
    assert (counts[:, 2] == counts[:, 4]).all()
    assert (counts[:, [0, 2, 3, 6]].sum(axis=1) == 4).all()  # G family draws per resample
    rng = np.random.default_rng(8)
    a, b, d = rng.normal(size=(3, 12))
    alone = paired_difference(a, b, d, groups=[f"m{i}" for i in range(12)], seed=4)
    assert alone == dataclasses.replace(paired_difference(a, b, d, seed=4), n_families=12)


def test_the_family_bootstrap_against_its_exact_distribution_by_enumeration() -> None:
    """Four families of two models (8 models): all 4^4 = 256 equally likely family draws enumerated, each taking
    both members of every drawn family; the seeded bootstrap agrees within its sampling error."""
    a = np.array([1.0, 1.5, 2.0, 2.2, 3.0, 3.1, 4.0, 4.5])
    b = np.array([2.0, 2.5, 1.0, 1.1, 4.0, 4.2, 3.0, 3.3])
    d = np.array([1.0, 1.2, 3.0, 3.3, 2.0, 2.1, 4.0, 4.4])
    groups = ["w", "w", "x", "x", "y", "y", "z", "z"]
    members = [[0, 1], [2, 3], [4, 5], [6, 7]]
    exact = []
    for draw in itertools.product(range(4), repeat=4):
        i = np.array([m for f in draw for m in members[f]])
        delta = spearman(a[i], d[i]) - spearman(b[i], d[i])
        if np.isfinite(delta):
            exact.append(delta)
    exact_arr = np.array(exact)
    got = paired_difference(a, b, d, groups=groups, n_resamples=20_000, refine_resamples=0)
    assert got.n_families == 4
    assert got.n_valid / got.n_resamples == pytest.approx(len(exact_arr) / 256, abs=0.01)
    assert got.p_value == pytest.approx(bootstrap_p_value(exact_arr), abs=0.02)
    assert (got.ci_low, got.ci_high) == pytest.approx(tuple(np.percentile(exact_arr, [2.5, 97.5])), abs=0.05)


def test_under_four_families_there_is_no_family_test() -> None:
    rng = np.random.default_rng(2)
    a, b, d = rng.normal(size=(3, 9))
    got = paired_difference(a, b, d, groups=list("aaabbbccc"))
    assert got.n_families == 3 and got.p_value is None and got.ci_low is None and math.isfinite(got.difference)
    with pytest.raises(ValueError, match="family of each of the 9 models"):
        paired_difference(a, b, d, groups=list("ab"))


def test_power_at_holms_level_needs_more_models_and_families_count_as_units() -> None:
    """At 0.05 / 130 (the starter's Table 6) a zoo needs (z_(1-.05/260) + z_.8)^2 / (z_.975 + z_.8)^2 = 2.46x the
    models it needs at 0.05, within the grid's 25 % and simulation noise; a zoo of twins (each model twice, one
    family per pair) needs as many families as the zoo without twins needs models."""
    from scipy.stats import norm

    from evalfarm.analysis.comparisons import holm_first_level

    rng = np.random.default_rng(4)
    d = rng.normal(size=50)
    a = d + 0.5 * rng.normal(size=50)
    b = a + 0.6 * rng.normal(size=50)
    one = models_needed(a, b, d)
    table = models_needed(a, b, d, alpha=holm_first_level(130))
    ratio = (norm.ppf(1 - 0.05 / 260) + norm.ppf(0.8)) ** 2 / (norm.ppf(0.975) + norm.ppf(0.8)) ** 2
    assert ratio == pytest.approx(2.46, abs=0.01) and table.alpha == 0.05 / 130
    assert one.n_needed is not None and table.n_needed is not None
    assert ratio / 1.4 <= table.n_needed / one.n_needed <= ratio * 1.4
    twins = models_needed(np.repeat(a, 2), np.repeat(b, 2), np.repeat(d, 2), groups=np.repeat(np.arange(50), 2))
    assert twins.unit == "families" and twins.models_per_unit == 2.0
    assert twins.n_needed is not None and 1 / 1.4 <= twins.n_needed / one.n_needed <= 1.4
    assert twins.models == 2 * twins.n_needed
