"""What a user chooses for a run: :class:`RunRequest` (which models, which tasks, how to run) and within it
:class:`RunOptions` (what changes numbers).

A low module (it imports only evalfarm.ranking, for the default k of Hits@k): the CLI, the API, the runner, the
planner, the executor and every scorer read them, so they live below all of them rather than in the scorer layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from evalfarm.ranking import DEFAULT_HITS

Similarity = Literal["cos", "l2"]
SIMILARITIES: tuple[Similarity, ...] = ("cos", "l2")


@dataclass(frozen=True)
class RunOptions:
    """What a user may choose for a run that changes numbers (each scorer fingerprints the part it reads), plus how
    to run (device: not fingerprinted)."""

    similarities: tuple[Similarity, ...] = SIMILARITIES
    center: bool = True  # the EvalRank protocol's centring; False is a documented variant
    filter_other_positives: bool = False
    hits: tuple[int, ...] = DEFAULT_HITS
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


DEFAULT_EXECUTOR = "ray"
"""Where a run's jobs run unless told: ``ray`` (``evalfarm run``, :func:`evalfarm.run`, ``run_catalog`` alike)."""


@dataclass(frozen=True)
class RunRequest:
    """One run as a caller asks for it, its fields declared here only: the CLI builds one, :func:`evalfarm.run`
    builds one from its keywords, ``run_catalog`` from its own, and the runner (``evalfarm.runner.Run``) reads it.
    Where the run reads and writes (catalog, warehouse) and the hooks it reports to are the runner's arguments.

    ``models`` / ``tasks``: ids (any sequence; kept as a tuple; empty or None: the catalog's models, its default
    tasks); ``options``: what changes numbers; ``force``: recompute finished units; ``executor``: ``ray`` or
    ``local``; ``address``: a Ray cluster's; ``workers``: how many (None: the executor's choice);
    ``max_attempts``: tries per job before a unit fails."""

    models: Sequence[str] | None = None
    tasks: Sequence[str] | None = None
    options: RunOptions = field(default_factory=RunOptions)
    force: bool = False
    executor: str = DEFAULT_EXECUTOR
    address: str | None = None
    workers: int | None = None
    max_attempts: int = 2

    def __post_init__(self) -> None:  # the same selection however it was spelt: a tuple, or None for all
        object.__setattr__(self, "models", tuple(self.models) if self.models else None)
        object.__setattr__(self, "tasks", tuple(self.tasks) if self.tasks else None)
        if self.options is None:  # run_catalog(..., options=None): the defaults
            object.__setattr__(self, "options", RunOptions())

    @property
    def model_ids(self) -> list[str] | None:
        """``models`` as the planner takes them (None: every model of the catalog)."""
        return list(self.models) if self.models else None

    @property
    def task_ids(self) -> list[str] | None:
        """``tasks`` as the planner takes them (None: the catalog's default tasks)."""
        return list(self.tasks) if self.tasks else None


__all__ = ["DEFAULT_EXECUTOR", "SIMILARITIES", "RunOptionArgs", "RunOptions", "RunRequest", "Similarity"]
