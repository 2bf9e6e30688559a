"""The defaults of the analyses over the warehouse, each defined once (issue 54): the bootstrap's resample counts,
its seed and confidence level, and the row the comparisons compare with.

Light on purpose (no numpy, no DuckDB), like :mod:`evalfarm.ranking`: the API and the CLI take their defaults from
here without loading the analyses, and the analyses (:mod:`evalfarm.correlations`, :mod:`evalfarm.comparisons`,
:mod:`evalfarm.comparison_tables`, :mod:`evalfarm.robustness`) read theirs from here. ``tests/test_one_home.py``
fails when one of these values is spelled again as a literal default elsewhere.
"""

from __future__ import annotations

INTERVAL_RESAMPLES = 1000
"""Resamples of a correlation's bootstrap interval (``evalfarm correlations``, the ``correlations`` view)."""
COMPARISON_RESAMPLES = 2000
"""Resamples of a comparison's first pass (``correlations --compare``): enough for its interval and to see whether
its p-value is small (:data:`evalfarm.analysis.comparisons.REFINE_RESAMPLES` refines the small ones)."""
BOOTSTRAP_SEED = 0
"""The seed of every bootstrap over models, families or items (the classifiers' seed is another:
:data:`evalfarm.classify.DEFAULT_SEED`)."""
CONFIDENCE = 0.95
"""The level of the bootstrap intervals and of the comparisons' intervals."""
DEFAULT_COMPARE = "evalrank"
"""The row the comparisons compare with: the level's EvalRank MRR under cosine."""

__all__ = ["BOOTSTRAP_SEED", "COMPARISON_RESAMPLES", "CONFIDENCE", "DEFAULT_COMPARE", "INTERVAL_RESAMPLES"]
