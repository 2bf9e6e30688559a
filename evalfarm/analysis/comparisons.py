"""Which evaluator predicts downstream accuracy better: a test of the difference of two dependent correlations.

Two cells of a correlation table in the same column, rho(A, D) and rho(B, D), share the downstream task D and the
models: they are dependent, so their two bootstrap intervals overlapping (or not) says nothing about their
difference. This module tests the difference itself (issue 41):

- :func:`paired_difference`: a paired bootstrap over models of rho(A, D) - rho(B, D) (each resample draws the
  models once, for both correlations), its percentile interval and the p-value that inverts it; seeded.
  With ``groups`` (each model's family: the catalog's lineage) it resamples whole families instead, for a zoo
  whose models come in families (a base, its poolings, its post-processed twins) and are not independent.
- :func:`williams_t`, :func:`steiger_z`, :func:`zou_interval`: the classical normal-theory tests of two
  overlapping dependent correlations (Williams 1959, Steiger 1980, Zou 2007), the cross-check; ``rank=True`` gives
  them the variance of Spearman's rho (Bonett & Wright 2000: :func:`z_variance_factor`) instead of Pearson's r's.
- :func:`holm`: Holm's (1979) step-down correction across a table's comparisons; :func:`holm_first_level`, the
  level its strictest step tests at.
- :func:`models_needed`: how many models (or families) a zoo like this one would need for the paired test to tell A
  from B at 80 % power, by simulation from the bootstrap (zoos of n models, or n families, drawn from this one).

Everything here is arithmetic on arrays; :mod:`evalfarm.analysis.comparison_tables` reads and writes the warehouse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalfarm.analysis_defaults import BOOTSTRAP_SEED, COMPARISON_RESAMPLES, CONFIDENCE


def _norm() -> Any:
    """SciPy's standard normal, imported on first use: this module is imported by every process that reads the
    warehouse (the similarity scorer's intervals need :func:`z_variance_factor`), and ``scipy.stats`` costs such a
    process 0.4-1 s of imports and ~40,000 long-lived objects that each full garbage collection walks again."""
    from scipy.stats import norm

    return norm


def _student_t() -> Any:
    """SciPy's Student t, imported on first use (as :func:`_norm`)."""
    from scipy.stats import t

    return t


REFINE_RESAMPLES = 20_000
"""Resamples of a comparison whose first-pass p-value is below :data:`REFINE_BELOW`: a bootstrap p-value cannot
go below 2 / (resamples + 1), and Holm multiplies the smallest by the number of comparisons in the table (270 at the
word level): with 2,000 resamples no comparison could pass it, with 20,000 one can in a table of up to 500."""
REFINE_BELOW = 0.05
ALPHA = 0.05
POWER = 0.8
POWER_SIMULATIONS = 2000
POWER_STEP = 1.25
"""The simulated zoo sizes grow by this factor: the number of models needed is reported to within 25 %."""
MIN_SIMULATED = 5
"""The smallest simulated zoo (a smaller one than the zoo itself: the zoo may already be big enough)."""
MAX_MODELS = 100_000
"""Past this many models the power search stops: a difference that needs more is undecidable in practice."""
MIN_FAMILIES = 4
"""The fewest families a family bootstrap resamples (as the per-model bootstrap needs 4 models)."""
_BLOCK = 4_000_000
"""Resamples are drawn in blocks of about this many (resample, model) cells, to bound memory."""


def z_variance_factor(r: Any, *, rank: bool) -> Any:
    """The variance of Fisher's z of a correlation ``r`` over n observations, in units of Pearson's ``1 / (n - 3)``
    (bivariate normal data): 1 for Pearson's r, and for Spearman's rho (``rank``) Bonett & Wright's (2000)
    ``1 + r^2 / 2``. Spearman's rho varies more than Pearson's r of the same data (its asymptotic variance is larger
    by about that factor, 1.06 near r = 0 as in Fieller, Hartley & Pearson 1957, 1.32 at r = 0.8), so a test that
    gives rank correlations Pearson's variance rejects too often under a true null: 1.2-1.8x its alpha at 0.05 and
    up to 2.6x at 0.05 / 8 once r >= 0.6 and n >= 34 (``benchmarks/spearman_null.py``). Fieller's constant fits
    small r only (still 1.1-1.6x at 0.05 there); Bonett & Wright's factor follows r, and the correlations compared
    here are mostly 0.6-0.9. Works elementwise on arrays."""
    return 1.0 + r * r / 2 if rank else 1.0


# ---- Spearman's rho of resamples given as counts -----------------------------------------------------------------
def _counts(rng: np.random.Generator, n_models: int, n_resamples: int) -> np.ndarray:
    """(n_resamples, n_models) draw counts of a bootstrap over models: the same draws as ``rng.integers(0, n,
    (n_resamples, n))`` (what :func:`evalfarm.analysis.correlations.bootstrap_interval` draws), counted per model."""
    idx = rng.integers(0, n_models, size=(n_resamples, n_models))
    flat = idx + n_models * np.arange(n_resamples)[:, None]
    return np.bincount(flat.ravel(), minlength=n_resamples * n_models).reshape(n_resamples, n_models)


def family_index(groups: Any) -> tuple[np.ndarray, int]:
    """Each model's family as 0 .. G - 1, numbered in order of first appearance, and G. Models that are each their
    own family, in model order, are numbered 0 .. n - 1: their family bootstrap draws what the per-model one does."""
    _, first, inverse = np.unique(np.asarray(groups, dtype=object).astype(str), return_index=True,
                                  return_inverse=True)  # fmt: skip
    order = np.argsort(first, kind="stable")
    number = np.empty_like(order)
    number[order] = np.arange(len(order))
    return number[inverse.ravel()], len(order)


def _family_counts(rng: np.random.Generator, family_of: np.ndarray, n_families: int, n_resamples: int) -> np.ndarray:
    """(n_resamples, n_models) copies of each model in a bootstrap over whole families: each resample draws
    ``n_families`` families with replacement (the draws :func:`_counts` makes over families), and a family drawn k
    times brings k copies of each of its models. A resample's size varies with the families drawn."""
    return _counts(rng, n_families, n_resamples)[:, family_of]


def _resampled_ranks(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each model's average rank within each resample (the rank all its copies share), from the draw counts:
    ``(resamples, models)``. A model drawn k times ties with itself; models with equal values tie with each other.
    Costs O(resamples x models) whatever the resample size, so a simulated zoo of 10,000 models drawn from 300
    costs what one of 300 does."""
    order = np.argsort(x, kind="stable")
    new_value = np.r_[True, x[order][1:] != x[order][:-1]]
    starts = np.flatnonzero(new_value)  # the first sorted model of each distinct value
    group = np.cumsum(new_value) - 1  # the distinct value of each sorted model
    per_value = np.add.reduceat(counts[:, order], starts, axis=1)  # copies drawn of each distinct value
    below = np.cumsum(per_value, axis=1) - per_value
    out = np.empty_like(counts, dtype=np.float64)
    out[:, order] = (below + (per_value + 1.0) / 2.0)[:, group]
    return out


def resampled_spearman(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Spearman's rho of every resample given by ``counts`` (``counts[b, k]``: copies of model k in resample b):
    Pearson's r of the resample's average ranks, each copy one observation; NaN where a side is constant. Equal to
    :func:`evalfarm.analysis.correlations.spearman` of ``x[idx], y[idx]`` for the resample's model indices ``idx``."""
    counts = np.asarray(counts, np.float64)
    rx, ry = _resampled_ranks(np.asarray(x, np.float64), counts), _resampled_ranks(np.asarray(y, np.float64), counts)
    return _ranked_spearman(rx, ry, counts)


def _ranked_spearman(rx: np.ndarray, ry: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pearson's r of two resampled rank matrices, each model weighted by its copies (see
    :func:`resampled_spearman`)."""
    mid = (counts.sum(axis=1, keepdims=True) + 1.0) / 2.0  # the mean of average ranks is (n + 1) / 2
    dx, dy = rx - mid, ry - mid
    sxy = (counts * dx * dy).sum(axis=1)
    den = np.sqrt((counts * dx * dx).sum(axis=1) * (counts * dy * dy).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, sxy / np.where(den > 0, den, 1.0), np.nan)


def _resampled_difference(a: np.ndarray, b: np.ndarray, d: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """rho*(A, D) - rho*(B, D) of each resample (D ranked once for both)."""
    counts = np.asarray(counts, np.float64)
    rd = _resampled_ranks(d, counts)
    return _ranked_spearman(_resampled_ranks(a, counts), rd, counts) - _ranked_spearman(
        _resampled_ranks(b, counts), rd, counts
    )


def _rank_spearman(x: np.ndarray, y: np.ndarray) -> float:
    return float(resampled_spearman(x, y, np.ones((1, len(x))))[0])


# ---- the paired bootstrap -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Difference:
    """rho(A, D) - rho(B, D) over the same ``n_models`` models, with its paired-bootstrap percentile interval
    (``ci_low``, ``ci_high``) and two-sided p-value; ``n_valid`` of ``n_resamples`` resamples had both
    correlations defined; ``r_ab``: Spearman's rho between A and B themselves (what makes the two dependent);
    ``n_families``: the families a family bootstrap resampled."""

    rho_a: float
    rho_b: float
    difference: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_models: int
    n_resamples: int
    n_valid: int
    r_ab: float
    n_families: int | None = None
    """The families resampled (a family bootstrap), None for the per-model bootstrap."""

    def significant(self, alpha: float = ALPHA) -> bool:
        return self.p_value is not None and self.p_value < alpha


def bootstrap_p_value(deltas: np.ndarray) -> float:
    """The two-sided p-value of "no difference" that inverts the percentile interval: twice the smaller share of
    resampled differences on either side of 0 (0 itself counts on both sides), each share ``(1 + count) / (1 + B)``
    so that it is never 0; at most 1. A difference of a correlation with itself (every resample 0) has p = 1."""
    b = len(deltas)
    below = (1 + int(np.count_nonzero(deltas <= 0))) / (b + 1)
    above = (1 + int(np.count_nonzero(deltas >= 0))) / (b + 1)
    return min(1.0, 2.0 * min(below, above))


def _deltas(
    a: np.ndarray, b: np.ndarray, d: np.ndarray, n_resamples: int, seed: int, groups: Any = None
) -> np.ndarray:
    """The resampled differences rho*(A, D) - rho*(B, D), one draw of the models (``groups``: of whole families)
    for both; NaN where either is undefined. Seeded: block by block from one generator, so the draws do not depend
    on the block size."""
    rng = np.random.default_rng(seed)
    n = len(a)
    family_of, n_families = family_index(groups) if groups is not None else (None, 0)
    block = max(1, _BLOCK // max(n, 1))
    out = []
    for start in range(0, n_resamples, block):
        k = min(block, n_resamples - start)
        counts = _counts(rng, n, k) if family_of is None else _family_counts(rng, family_of, n_families, k)
        out.append(_resampled_difference(a, b, d, counts))
    return np.concatenate(out) if out else np.zeros(0)


def paired_difference(
    a: np.ndarray,
    b: np.ndarray,
    d: np.ndarray,
    *,
    n_resamples: int = COMPARISON_RESAMPLES,
    refine_resamples: int = REFINE_RESAMPLES,
    refine_below: float = REFINE_BELOW,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    groups: Any = None,
) -> Difference:
    """The paired bootstrap over models of Spearman's rho(A, D) - rho(B, D): ``a``, ``b``, ``d`` hold each model's
    two intrinsic numbers and its downstream accuracy, in the same model order.

    ``groups`` (each model's family, in the same order): a family (cluster) bootstrap instead, each resample
    drawing the G families with replacement and taking every model of each drawn family (Davison & Hinkley 1997,
    section 3.8; Field & Welsh 2007): models of one family (a base, its poolings, its post-processed twins) move
    together, so the spread of the difference counts the zoo's families, not its models, as the independent units.
    It assumes the families themselves independent and alike; with few of them (the starter zoo's 6) its interval is
    coarse and a little narrow (the bootstrap variance of a mean of G clusters is (G - 1) / G of the true one).
    Under :data:`MIN_FAMILIES` families there is no test. Models that are each their own family give exactly the
    per-model bootstrap.

    Each resample draws n models with replacement once and computes both correlations from it, so the resampled
    difference carries the dependence between them (shared models, shared D, A correlated with B). Resamples where
    either correlation is undefined (a constant side) are dropped (``n_valid``); with fewer than half valid, or
    under 4 models, there is no interval and no p-value. The interval is the percentile interval; the p-value
    (:func:`bootstrap_p_value`) is below 1 - ``confidence`` exactly when 0 is outside it, up to the quantile's
    interpolation. When that p-value is under ``refine_below`` the comparison is redone with ``refine_resamples``
    (same seed) so that a small p-value is resolved finely enough for a multiple-comparison correction.
    """
    a, b, d = (np.asarray(v, np.float64) for v in (a, b, d))
    if not (len(a) == len(b) == len(d)):
        raise ValueError(f"a, b and d must hold the same models: lengths {len(a)}, {len(b)}, {len(d)}")
    n = len(a)
    if groups is not None and len(groups) != n:
        raise ValueError(f"groups must name the family of each of the {n} models, got {len(groups)}")
    n_families = family_index(groups)[1] if groups is not None else None
    rho_a, rho_b = (_rank_spearman(v, d) if n >= 3 else math.nan for v in (a, b))
    r_ab = _rank_spearman(a, b) if n >= 3 else math.nan
    empty = Difference(rho_a, rho_b, rho_a - rho_b, None, None, None, n, 0, 0, r_ab, n_families)
    too_few = n < 4 or (n_families is not None and n_families < MIN_FAMILIES)
    if too_few or not (math.isfinite(rho_a) and math.isfinite(rho_b)):
        return empty
    used = n_resamples
    deltas = _deltas(a, b, d, used, seed, groups)
    valid = deltas[np.isfinite(deltas)]
    if len(valid) >= used / 2 and bootstrap_p_value(valid) < refine_below and refine_resamples > used:
        used = refine_resamples
        deltas = _deltas(a, b, d, used, seed, groups)
        valid = deltas[np.isfinite(deltas)]
    if len(valid) < used / 2:
        return Difference(rho_a, rho_b, rho_a - rho_b, None, None, None, n, used, len(valid), r_ab, n_families)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(valid, [tail, 100 - tail])
    p = bootstrap_p_value(valid)
    return Difference(rho_a, rho_b, rho_a - rho_b, float(low), float(high), p, n, used, len(valid), r_ab, n_families)


# ---- the classical tests of two overlapping dependent correlations -------------------------------------------------
def _same(r_ad: float, r_bd: float) -> bool:
    return r_ad == r_bd


def williams_t(r_ad: float, r_bd: float, r_ab: float, n: int, *, rank: bool = False) -> tuple[float, float]:
    """Williams' (1959) t for H0: rho(A, D) = rho(B, D), from the three correlations and n, df = n - 3 (Steiger
    1980, eq. 7; "standard Williams' t" of Hittner, May & Silver 2003): ``(t, two-sided p)``. Assumes trivariate
    normal data (Pearson's r); ``rank``: the three are Spearman's rho, and the difference's variance is larger by
    :func:`z_variance_factor` at their mean (as :func:`steiger_z`'s). NaN with n < 4 or a correlation of +-1
    (unless the two are equal: t = 0, p = 1)."""
    if _same(r_ad, r_bd):
        return 0.0, 1.0
    if n < 4 or max(abs(r_ad), abs(r_bd), abs(r_ab)) >= 1:
        return math.nan, math.nan
    det = 1 - r_ad**2 - r_bd**2 - r_ab**2 + 2 * r_ad * r_bd * r_ab
    mean = (r_ad + r_bd) / 2
    t = (r_ad - r_bd) * math.sqrt((n - 1) * (1 + r_ab) / (2 * (n - 1) / (n - 3) * det + mean**2 * (1 - r_ab) ** 3))
    t /= math.sqrt(z_variance_factor(mean, rank=rank))
    return t, float(2 * _student_t().sf(abs(t), n - 3))


def _steiger_covariance(r_ad: float, r_bd: float, r_ab: float) -> tuple[float, float]:
    """The correlation c of z_AD and z_BD under H0 from the pooled mean correlation (Steiger 1980, eq. 10), and
    that mean squared."""
    m2 = ((r_ad + r_bd) / 2) ** 2
    return (r_ab * (1 - 2 * m2) - 0.5 * m2 * (1 - 2 * m2 - r_ab**2)) / (1 - m2) ** 2, m2


def steiger_z(r_ad: float, r_bd: float, r_ab: float, n: int, *, rank: bool = False) -> tuple[float, float]:
    """Steiger's (1980, eq. 14) Z for H0: rho(A, D) = rho(B, D): Dunn & Clark's Fisher-z test with the covariance
    of the two z's estimated from the pooled mean correlation r (Steiger's eq. 10): ``(z, two-sided p)``, the
    variance of z_AD - z_BD being (2 - 2c) / (n - 3). Assumes trivariate normal data (Pearson's r). ``rank``: the
    three are Spearman's rho; each z's variance is then Bonett & Wright's (2000) (1 + r^2 / 2) / (n - 3)
    (:func:`z_variance_factor`) at the pooled r, and their covariance is taken larger by the same factor (the
    correlation c of the two z's as for Pearson's r), so the difference's variance is (1 + r^2 / 2)(2 - 2c) / (n - 3).
    Under a true null on normal data this holds its level where Pearson's variance does not
    (``benchmarks/spearman_null.py``; ``tests/test_comparisons.py`` checks it by simulation). NaN with n < 4 or a
    correlation of +-1 (unless the two are equal: z = 0, p = 1)."""
    if _same(r_ad, r_bd):
        return 0.0, 1.0
    if n < 4 or max(abs(r_ad), abs(r_bd), abs(r_ab)) >= 1:
        return math.nan, math.nan
    c, m2 = _steiger_covariance(r_ad, r_bd, r_ab)
    var = (2 - 2 * c) * z_variance_factor(math.sqrt(m2), rank=rank)
    z = (math.atanh(r_ad) - math.atanh(r_bd)) * math.sqrt(n - 3) / math.sqrt(var)
    return z, float(2 * _norm().sf(abs(z)))


def zou_interval(
    r_ad: float, r_bd: float, r_ab: float, n: int, *, confidence: float = CONFIDENCE, rank: bool = False
) -> tuple[float, float]:
    """Zou's (2007, p. 409) confidence interval of rho(A, D) - rho(B, D) for overlapping dependent correlations:
    the two correlations' own Fisher-z intervals combined with their correlation (Zou's eq. for c). ``rank``: the
    own intervals use Bonett & Wright's (2000) Spearman standard error ``sqrt((1 + r^2/2) / (n - 3))``
    (:func:`z_variance_factor`) instead of ``1 / sqrt(n - 3)`` (as
    :func:`evalfarm.scorers.similarity.correlation_interval` does). NaN with n < 4 or a correlation of +-1."""
    if n < 4 or max(abs(r_ad), abs(r_bd), abs(r_ab)) >= 1:
        return math.nan, math.nan
    q = float(_norm().ppf(0.5 + confidence / 2))

    def own(r: float) -> tuple[float, float]:
        se = math.sqrt(z_variance_factor(r, rank=rank) / (n - 3))
        return math.tanh(math.atanh(r) - q * se), math.tanh(math.atanh(r) + q * se)

    (l1, u1), (l2, u2) = own(r_ad), own(r_bd)
    c = ((r_ab - 0.5 * r_ad * r_bd) * (1 - r_ad**2 - r_bd**2 - r_ab**2) + r_ab**3) / ((1 - r_ad**2) * (1 - r_bd**2))
    diff = r_ad - r_bd
    low = diff - math.sqrt(max(0.0, (r_ad - l1) ** 2 + (u2 - r_bd) ** 2 - 2 * c * (r_ad - l1) * (u2 - r_bd)))
    high = diff + math.sqrt(max(0.0, (u1 - r_ad) ** 2 + (r_bd - l2) ** 2 - 2 * c * (u1 - r_ad) * (r_bd - l2)))
    return low, high


@dataclass(frozen=True)
class PublishedCheck:
    """Steiger's test of two published correlations with D over n models when rho(A, B) is not published: its
    p-value over every r_ab that makes the three a correlation matrix (``r_ab_range``): the largest (worst case)
    and the smallest, and the smallest r_ab from which on the test is significant at ``alpha`` (None: nowhere);
    ``rank``: with Spearman's variance (:func:`steiger_z`)."""

    r_ad: float
    r_bd: float
    n: int
    r_ab_range: tuple[float, float]
    p_max: float
    p_min: float
    alpha: float
    r_ab_significant_from: float | None
    rank: bool = False


def steiger_over_unknown_r_ab(
    r_ad: float, r_bd: float, n: int, *, alpha: float = ALPHA, grid: int = 801, rank: bool = False
) -> PublishedCheck:
    """:func:`steiger_z` (``rank``: for Spearman's rho) for every feasible correlation between the two evaluators
    (the determinant of the 3 x 3 correlation matrix >= 0: r_ab within ``r_ad r_bd +- sqrt((1 - r_ad^2)(1 -
    r_bd^2))``), on a grid: what a paper's published cells alone can say about a difference between them. The
    p-value is not monotone in r_ab everywhere, hence the grid rather than the interval's ends."""
    half = math.sqrt(max(0.0, (1 - r_ad**2) * (1 - r_bd**2)))
    low, high = max(-0.999999, r_ad * r_bd - half), min(0.999999, r_ad * r_bd + half)
    r_ab = np.linspace(low, high, grid)
    p = np.array([steiger_z(r_ad, r_bd, float(r), n, rank=rank)[1] for r in r_ab])
    ok = p < alpha
    from_here = None
    if ok[-1]:
        last_bad = np.flatnonzero(~ok)
        from_here = float(r_ab[last_bad[-1] + 1]) if len(last_bad) else float(r_ab[0])
    return PublishedCheck(r_ad, r_bd, n, (float(low), float(high)), float(np.nanmax(p)), float(np.nanmin(p)), alpha,
                          from_here, rank)  # fmt: skip


def steiger_models_needed(
    r_ad: float, r_bd: float, r_ab: float, *, power: float = POWER, alpha: float = ALPHA, rank: bool = False
) -> float:
    """The models Steiger's test needs to find rho(A, D) != rho(B, D) with ``power`` at level ``alpha`` (two-sided),
    were the three correlations the population's: from the variance of z_AD - z_BD, f (2 - 2c) / (n - 3) (Steiger
    1980, eq. 10 and 14; f = 1 for Pearson's r, Bonett & Wright's 1 + r^2 / 2 at the pooled r for Spearman's rho,
    ``rank``: :func:`steiger_z`), n = 3 + f (2 - 2c) ((z_(1 - alpha/2) + z_power) / |z_AD - z_BD|)^2. Infinite for
    equal correlations. For a table known by its cells only, where no bootstrap is possible; ``alpha`` is the level
    the table's verdicts use (:func:`holm_first_level`), not 0.05 for one comparison."""
    dz = abs(math.atanh(r_ad) - math.atanh(r_bd))
    if dz == 0:
        return math.inf
    c, m2 = _steiger_covariance(r_ad, r_bd, r_ab)
    f = z_variance_factor(math.sqrt(m2), rank=rank)
    return 3 + f * (2 - 2 * c) * ((_norm().ppf(1 - alpha / 2) + _norm().ppf(power)) / dz) ** 2


# ---- Holm ---------------------------------------------------------------------------------------------------------
def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's (1979) step-down adjusted p-values, in the input order: the i-th smallest of m p-values times
    (m - i + 1), made non-decreasing along the sorted order, at most 1. A None (no test) stays None and does not
    count in m. Reject at level alpha exactly where the adjusted p-value is below alpha; controls the
    family-wise error rate under any dependence between the tests."""
    present = [(p, i) for i, p in enumerate(p_values) if p is not None and math.isfinite(p)]
    present.sort()
    m = len(present)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for j, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def holm_first_level(n_tests: int, alpha: float = ALPHA) -> float:
    """The level Holm's first, strictest step tests at: ``alpha / n_tests`` (Bonferroni's). A comparison whose p is
    below it is significant after Holm whatever the table's other p-values; one above it may still be, once the
    smaller p-values have been rejected. So power at this level is what a zoo needs to decide a comparison of the
    table by itself, and the level the power figures use (not 0.05 for one comparison: at 130 comparisons, 0.05 /
    130 needs (3.55 + 0.84)^2 / (1.96 + 0.84)^2 = 2.5 times the models)."""
    return alpha / max(1, n_tests)


# ---- power --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerResult:
    """How many models the paired bootstrap would need to tell A from B at ``power`` and level ``alpha``:
    ``n_needed`` (None: not within ``max_models``, or no difference at all), the simulated power at each zoo size
    tried (``curve``), the observed difference and the zoo's size. ``unit``: what ``n_needed`` and ``curve`` count:
    ``models``, or ``families`` when the simulated zoos are drawn family by family (:func:`models_needed` with
    ``groups``), each family bringing ``models_per_unit`` models on average."""

    n_needed: int | None
    difference: float
    n_models: int
    power: float
    curve: tuple[tuple[int, float], ...]
    max_models: int
    alpha: float = ALPHA
    unit: str = "models"
    models_per_unit: float = 1.0

    @property
    def models(self) -> int | None:
        """``n_needed`` in models (families times their mean size)."""
        return None if self.n_needed is None else math.ceil(self.n_needed * self.models_per_unit)


def simulated_power(
    a: np.ndarray,
    b: np.ndarray,
    d: np.ndarray,
    n: int,
    *,
    alpha: float,
    n_sim: int,
    rng: np.random.Generator,
    groups: Any = None,
) -> float:
    """The share of simulated zoos of ``n`` models, drawn with replacement from these models (``groups``: of ``n``
    families drawn from these families, each with all its models), in which the paired bootstrap would call
    rho(A, D) - rho(B, D) significant: ``|delta_n| > z_(1 - alpha/2) * sd(delta_n)``, with sd(delta_n) the spread
    of the difference over zoos of that size (what the bootstrap inside one zoo of n models estimates)."""
    if groups is None:
        counts = rng.multinomial(n, np.full(len(a), 1.0 / len(a)), size=n_sim)
    else:
        family_of, n_families = family_index(groups)
        counts = rng.multinomial(n, np.full(n_families, 1.0 / n_families), size=n_sim)[:, family_of]
    deltas = _resampled_difference(a, b, d, counts)
    deltas = deltas[np.isfinite(deltas)]
    if len(deltas) < n_sim / 2:
        return 0.0
    sd = float(np.std(deltas, ddof=1))
    if sd == 0.0:
        return 1.0 if float(np.abs(deltas).min()) > 0 else 0.0
    return float(np.mean(np.abs(deltas) > _norm().ppf(1 - alpha / 2) * sd))


def models_needed(
    a: np.ndarray,
    b: np.ndarray,
    d: np.ndarray,
    *,
    power: float = POWER,
    alpha: float = ALPHA,
    n_sim: int = POWER_SIMULATIONS,
    seed: int = BOOTSTRAP_SEED,
    step: float = POWER_STEP,
    max_models: int = MAX_MODELS,
    groups: Any = None,
) -> PowerResult:
    """The smallest zoo size, on a grid growing by ``step`` from :data:`MIN_SIMULATED` models, at which the paired
    bootstrap test of rho(A, D) - rho(B, D) reaches ``power`` at level ``alpha`` (two-sided), by simulation from the
    bootstrap (:func:`simulated_power`): the zoo's models are taken as the population and its observed difference
    as the truth. ``alpha`` is the level the verdict uses: for a comparison in a table of m, Holm's
    :func:`holm_first_level` (0.05 / m), not 0.05. ``groups``: the zoo grows by whole families drawn from its
    own (its models are not independent), and the size is counted in families (``unit``; ``max_models`` then
    bounds the families). None when even ``max_models`` do not reach it (or A and B rank the models alike: no
    difference to find). Seeded."""
    a, b, d = (np.asarray(v, np.float64) for v in (a, b, d))
    n0 = len(a)
    unit, per_unit = ("models", 1.0) if groups is None else ("families", n0 / max(1, family_index(groups)[1]))
    diff = _rank_spearman(a, d) - _rank_spearman(b, d) if n0 >= 3 else math.nan
    curve: list[tuple[int, float]] = []

    def result(n_needed: int | None) -> PowerResult:
        return PowerResult(n_needed, diff, n0, power, tuple(curve), max_models, alpha, unit, per_unit)

    if n0 < 4 or not math.isfinite(diff) or diff == 0.0:
        return result(None)
    rng = np.random.default_rng(seed)
    n = MIN_SIMULATED
    while n <= max_models:
        got = simulated_power(a, b, d, n, alpha=alpha, n_sim=n_sim, rng=rng, groups=groups)
        curve.append((n, got))
        if got >= power:
            return result(n)
        n = max(n + 1, math.ceil(n * step))
    return result(None)


def models_needed_normal(
    difference: float, sd: float, n_models: int, *, power: float = POWER, alpha: float = ALPHA
) -> float:
    """The closed-form counterpart of :func:`models_needed` (a check, not what the tables print): with the
    difference's bootstrap standard deviation ``sd`` at ``n_models`` models shrinking as 1/sqrt(n),
    ``n = n_models * ((z_(1 - alpha/2) + z_power) * sd / |difference|)^2``."""
    return n_models * ((_norm().ppf(1 - alpha / 2) + _norm().ppf(power)) * sd / abs(difference)) ** 2
