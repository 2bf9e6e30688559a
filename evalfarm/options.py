"""What a user chooses for a run: :class:`RunOptions`.

A low module (it imports nothing of evalfarm): the CLI, the API, the planner, the executor and every scorer read
run options, so they live below all of them rather than in the scorer layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

Similarity = Literal["cos", "l2"]
SIMILARITIES: tuple[Similarity, ...] = ("cos", "l2")


@dataclass(frozen=True)
class RunOptions:
    """What a user may choose for a run that changes numbers (each scorer fingerprints the part it reads), plus how
    to run (device: not fingerprinted)."""

    similarities: tuple[Similarity, ...] = SIMILARITIES
    center: bool = True  # the EvalRank protocol's centring; False is a documented variant
    filter_other_positives: bool = False
    hits: tuple[int, ...] = (1, 3, 10)
    device: str | None = None
    keep_details: bool = True  # per-pair detail tables (ranks)
    # task files the driver verified for this run: (path, size, mtime_ns, sha256); workers trust them instead of
    # rehashing (evalfarm.taskdata.data.trust_verified). How to run, like device: no scorer reads it, no fingerprint.
    verified_files: tuple[tuple[str, int, int, str], ...] = ()
    # the quick profile: downstream tasks train on the catalog's seeded max_train sample (labelled a sample
    # everywhere); by default they train on every row, SentEval's protocol
    quick_downstream: bool = False

    def __post_init__(self) -> None:  # fail when the run is configured, not in every worker
        unknown = [s for s in self.similarities if s not in SIMILARITIES]
        if unknown or not self.similarities:
            raise ValueError(f"unknown similarity {unknown or '(none)'}: choose from {', '.join(SIMILARITIES)}")
        if not self.hits or any(int(k) != k or k < 1 for k in self.hits):
            raise ValueError(f"hits@k needs whole numbers k >= 1, got {self.hits}")


class RunOptionArgs(TypedDict, total=False):
    """The :class:`RunOptions` a caller may give as keywords (``evalfarm.run(..., center=False)``): sequences in
    place of the tuples, each left out taking its default. ``verified_files`` is the driver's to fill, not here."""

    similarities: Sequence[Similarity]
    center: bool
    filter_other_positives: bool
    hits: Sequence[int]
    device: str | None
    keep_details: bool
    quick_downstream: bool


__all__ = ["SIMILARITIES", "RunOptionArgs", "RunOptions", "Similarity"]
