"""Stages, statuses and unit outcomes: the vocabulary the embed/score stages, the scheduler and the runner share.

``record_failure`` is the one place a ``failures`` row is written for a unit (the scheduler calls it once, after the
last attempt; the in-process path when it does not retry); ``record_quarantine`` the one place for a corrupt
warehouse file moved aside.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class Stage(StrEnum):
    """Where a unit's time went, or where it failed."""

    PLAN = "plan"  # skipped at planning: its results already exist
    TASK = "task"  # reading / verifying the task's data files
    LOAD = "load"  # loading the model
    PLACEMENT = "placement"  # no GPU of the cluster can hold the model: refused before it loads
    EMBED = "embed"
    EMBED_QUALITY = "embed-quality"  # NaN / inf vectors (failure), or all-zero vectors (informational row)
    SCORE = "score"
    QUARANTINE = "quarantine"  # a corrupt warehouse file moved aside (informational row; its unit is recomputed)


class Status(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"
    EMBEDDED = "embedded"  # the embed stage finished; scoring pending


@dataclass
class UnitOutcome:
    model: str
    task: str
    status: Status
    seconds: float = 0.0
    error: str | None = None
    stage: Stage | None = None
    summary: dict[str, float] = field(default_factory=dict)  # the scorer's primary metric(s), for the CLI
    metric: str | None = None  # the name of the summary's metric (the scorer's primary one), said before its numbers
    dim: int | None = None
    detail: str = ""
    started_at: datetime | None = None
    retryable: bool = True  # False: an error that cannot succeed on another attempt (missing file, bad data)
    degenerate: str | None = None  # done, but the vectors failed the degenerate-model check: why (evalfarm.quality)
    thin: str | None = None  # done, but too little data to rank (Scorer.thin): why
    threads: dict[str, int] | None = None  # the thread pools the unit was scored with (provenance.thread_counts)
    staged: list[Any] = field(default_factory=list)  # files the job staged (warehouse.StagedFile), for the driver


NOT_RETRYABLE = (
    "FileNotFoundError",
    "IsADirectoryError",
    "TaskDataError",
    "CatalogError",
    "NotSupportedYet",
    "ChecksumMismatch",
    "DeviceUnavailable",
    "UnicodeDecodeError",
    "WarehouseWriteError",  # a read-only or full warehouse: another attempt cannot write either
)
"""Exception classes (by name: no imports here) whose cause another attempt cannot change."""


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt could succeed. No: an exception that says so (``retryable = False``), one of
    :data:`NOT_RETRYABLE`, and a model that fails to load because of its files: a load error whose root cause is
    evalfarm's own check (a missing file, a parse error: no cause), bad values (ValueError: NaN, not UTF-8, a
    checksum) or a missing / unreadable path. Anything else (a download cut, a timeout, out of memory, an error
    inside a library) is retried."""
    flag = getattr(exc, "retryable", None)
    if isinstance(flag, bool):
        return flag
    names = {c.__name__ for c in type(exc).__mro__}
    if names & set(NOT_RETRYABLE):
        return False
    if "ModelLoadError" not in names:
        return True
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    in_files = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
    root_names = {c.__name__ for c in type(root).__mro__}
    return not (isinstance(root, in_files) or "ModelLoadError" in root_names or root_names & set(NOT_RETRYABLE))


def failed(
    model: str, task: str, stage: Stage, exc: BaseException, t0: float, started: datetime | None
) -> UnitOutcome:
    """A failed outcome for ``exc`` (message, traceback, whether another attempt could succeed)."""
    return UnitOutcome(
        model,
        task,
        Status.FAILED,
        time.perf_counter() - t0,
        f"{type(exc).__name__}: {exc}",
        stage,
        detail=traceback.format_exc(),
        started_at=started,
        retryable=is_retryable(exc),
    )


class FailureLog(Protocol):
    """Where a failure is recorded: a warehouse (:meth:`evalfarm.warehouse.Warehouse.write_failure`; this layer
    does not import the warehouse)."""

    def write_failure(
        self, run_id: str, model: str | None, task: str | None, stage: str, error: str, detail: str = ""
    ) -> object: ...


class MovedFile(Protocol):
    """A corrupt file moved aside (:class:`evalfarm.warehouse.Quarantined`)."""

    @property
    def path(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def moved_to(self) -> str | None: ...
    @property
    def unit(self) -> tuple[str | None, str | None]: ...


def record_failure(wh: FailureLog, run_id: str, outcome: UnitOutcome) -> None:
    """One ``failures`` row for a failed unit."""
    wh.write_failure(
        run_id, outcome.model, outcome.task, str(outcome.stage or "unknown"), outcome.error or "", outcome.detail
    )


def record_quarantine(wh: FailureLog, run_id: str, q: MovedFile, *, model: str | None = None) -> None:
    """One informational ``failures`` row (stage ``quarantine``) for a corrupt file moved aside
    (``warehouse.Quarantined``): its model and task are those its path names (``model``, when given, names it)."""
    named, task = q.unit
    wh.write_failure(run_id, model or named, task, str(Stage.QUARANTINE), f"{q.reason}; moved to {q.moved_to}", q.path)
