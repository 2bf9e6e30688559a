"""Rank metrics and their tie policies: the one home of both (PyKEEN's ``typing.py`` and ``metrics/ranking.py``).

A ranking scorer (EvalRank, DefSent) counts, for each positive pair, ``above``: the candidates scoring strictly
above the positive, and ``tied``: those scoring exactly the same. It stores the optimistic rank ``1 + above`` and
``tied`` once; a tie policy says where the positive sits among its ties, and every policy derives from that pass:

============  ========================  ============  ==========================================================
policy        rank                      tied weight   reading
============  ========================  ============  ==========================================================
optimistic    1 + above                 0             before every tie: the EvalRank toolkit's (the paper's)
pessimistic   1 + above + tied          1             after every tie
realistic     1 + above + tied / 2      1/2           the expected rank when ties are broken at random
============  ========================  ============  ==========================================================

MR is the mean rank, MRR the mean of 1 / rank, Hits@k the share of ranks at most k (:func:`rank_metrics`).

Which policy a reader is shown, each defined once here:

- :data:`BOARD_TIES` (realistic): what a user sees first and wherever models are ranked: each finished unit's line
  and the run's summary, the ``board`` view, the report's boards and Figure 4, the README's first query. Optimistic
  ties rank a model whose vectors collide (a pruned word table, OOV words under l2) above better ones
  (docs/results.md); the realistic rank is what random tie-breaking would give.
- :data:`PAPER_TIES` (optimistic): the paper's toolkit's, for comparisons with published numbers: the correlation
  tables shaped like the paper's (``evalfarm correlations``, the report's correlation section), the paper's layout
  and its coverage table, the ``postprocessing_effect`` view (Table 10).

The SQL views read the same definitions: :func:`sql_definitions` is created before the core views
(:func:`evalfarm.warehouse.view_sources`): the ``tie_policies`` view and the macros ``tie_rank(rank, tied, ties)``,
``board_ties()`` and ``paper_ties()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeGuard, cast, get_args

if TYPE_CHECKING:  # numpy loads when ranks are computed: the API and the CLI import the policies cheaply
    import numpy as np

Ties = Literal["optimistic", "pessimistic", "realistic"]
"""A tie policy of a rank metric (the ``ties`` column of ``metrics``)."""
TiesOrAll = Literal["optimistic", "pessimistic", "realistic", "all"]
"""A tie policy, or ``all`` where a table may show every policy (the correlation tables)."""
TIES: tuple[Ties, ...] = get_args(Ties)
"""Every tie policy, in the order rows are written (optimistic, pessimistic, realistic)."""
TIE_WEIGHTS: Mapping[Ties, float] = MappingProxyType({"optimistic": 0.0, "pessimistic": 1.0, "realistic": 0.5})
"""How much of ``tied`` each policy adds to the optimistic rank ``1 + above``."""
TIES_BY_RANK: tuple[Ties, ...] = tuple(sorted(TIES, key=TIE_WEIGHTS.__getitem__))
"""The policies from the smallest ranks to the largest (optimistic, realistic, pessimistic): MRR and Hits@k fall
along this order, MR rises."""

BOARD_TIES: Ties = "realistic"
"""The policy a user sees first and every board ranks by (module docstring)."""
PAPER_TIES: Ties = "optimistic"
"""The EvalRank toolkit's policy: comparisons with the paper's published numbers (module docstring)."""

DEFAULT_HITS: tuple[int, ...] = (1, 3, 10)
"""The k of Hits@k where nothing else is asked for (the default of EvalRank's run option ``hits``:
:class:`evalfarm.options.RunOptions` reads it from here)."""


def is_ties(value: object) -> TypeGuard[Ties]:
    """Whether ``value`` names a tie policy."""
    return value in TIES


def check_ties(value: str, *, allow_all: bool = False) -> TiesOrAll:
    """``value`` as a tie policy (or ``all`` with ``allow_all``); ``ValueError`` naming the choices otherwise."""
    if is_ties(value) or (allow_all and value == "all"):
        return cast(TiesOrAll, value)
    choices = ", ".join(TIES) + (" or all" if allow_all else "")
    raise ValueError(f"unknown tie policy {value!r}: ties must be one of {choices}")


def tie_ranks(rank: np.ndarray, tied: np.ndarray, ties: Ties) -> np.ndarray:
    """float64 ranks under ``ties`` from the optimistic ranks ``rank`` (``1 + above``) and the ``tied`` counts."""
    import numpy as np

    check_ties(ties)
    return np.asarray(rank, dtype=np.float64) + TIE_WEIGHTS[ties] * np.asarray(tied, dtype=np.float64)


def tie_step(ties: Ties) -> float:
    """The smallest step between two ranks under ``ties``: 1 for whole ranks, 1/2 for realistic ones."""
    return 1.0 / Fraction(TIE_WEIGHTS[ties]).limit_denominator().denominator


def rank_metrics(ranks: np.ndarray, hits: Sequence[int] = DEFAULT_HITS) -> dict[str, float]:
    """MR, MRR and Hits@k of a vector of ranks (each >= 1), in that order; NaN for each when it is empty."""
    import numpy as np

    if len(ranks) == 0:
        return {"mr": float("nan"), "mrr": float("nan")} | {f"hits@{k}": float("nan") for k in hits}
    r = np.asarray(ranks, dtype=np.float64)
    hits_at = {f"hits@{k}": float((r <= k).mean()) for k in hits}
    return {"mr": float(r.mean()), "mrr": float((1.0 / r).mean())} | hits_at


def rank_metrics_by_ties(
    rank: np.ndarray, tied: np.ndarray, hits: Sequence[int] = DEFAULT_HITS
) -> dict[Ties, dict[str, float]]:
    """:func:`rank_metrics` under every policy (:data:`TIES` order), from one pass's optimistic ranks and tied
    counts."""
    return {ties: rank_metrics(tie_ranks(rank, tied, ties), hits) for ties in TIES}


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def sql_definitions() -> str:
    """The SQL of the tie policies (created before the core views, so every view reads them from here)."""
    rows = ",\n    ".join(
        f"({_sql_string(t)}, CAST({TIE_WEIGHTS[t]!r} AS DOUBLE), {str(t == BOARD_TIES).lower()}, "
        f"{str(t == PAPER_TIES).lower()})"
        for t in TIES
    )
    cases = " ".join(f"WHEN {_sql_string(t)} THEN CAST({TIE_WEIGHTS[t]!r} AS DOUBLE)" for t in TIES)
    return f"""-- tie_policies: the tie policies of rank metrics (evalfarm/ranking.py): the weight of the tied count
-- added to the optimistic rank 1 + above (`tie_rank(rank, tied, ties)`), the policy the boards rank by (`board`:
-- {BOARD_TIES}; also `board_ties()`) and the one the paper's toolkit reports (`paper`: {PAPER_TIES}; also
-- `paper_ties()`).
CREATE OR REPLACE VIEW tie_policies AS
SELECT * FROM (VALUES
    {rows}
) AS t(ties, tie_weight, board, paper);

CREATE OR REPLACE MACRO tie_rank(rank, tied, ties) AS rank + tied * (CASE ties {cases} END);
CREATE OR REPLACE MACRO board_ties() AS {_sql_string(BOARD_TIES)};
CREATE OR REPLACE MACRO paper_ties() AS {_sql_string(PAPER_TIES)};
"""


__all__ = [
    "BOARD_TIES",
    "DEFAULT_HITS",
    "PAPER_TIES",
    "TIES",
    "TIES_BY_RANK",
    "TIE_WEIGHTS",
    "Ties",
    "TiesOrAll",
    "check_ties",
    "is_ties",
    "rank_metrics",
    "rank_metrics_by_ties",
    "sql_definitions",
    "tie_ranks",
    "tie_step",
]
