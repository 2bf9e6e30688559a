"""Stages, statuses and unit outcomes: the vocabulary the embed/score stages, the scheduler and the runner share.

``record_failure`` is the one place a ``failures`` row is written for a unit (the scheduler calls it once, after the
last attempt; the in-process path when it does not retry).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    """Where a unit's time went, or where it failed."""

    PLAN = "plan"  # skipped at planning: its results already exist
    TASK = "task"  # reading / verifying the task's data files
    LOAD = "load"  # loading the model
    EMBED = "embed"
    EMBED_QUALITY = "embed-quality"  # NaN / inf vectors (failure), or all-zero vectors (informational row)
    SCORE = "score"


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
    dim: int | None = None
    detail: str = ""
    started_at: datetime | None = None
    retryable: bool = True  # False: an error that cannot succeed on another attempt (missing file, bad data)


NOT_RETRYABLE = (
    "FileNotFoundError",
    "PoolDataError",
    "CatalogError",
    "NotSupportedYet",
    "ChecksumMismatch",
    "WarehouseWriteError",  # a read-only or full warehouse: another attempt cannot write either
)


def failed(
    model: str, task: str, stage: Stage, exc: BaseException, t0: float, started: datetime | None
) -> UnitOutcome:
    """A failed outcome for ``exc`` (message, traceback, whether another attempt could succeed)."""
    names = {c.__name__ for c in type(exc).__mro__}
    return UnitOutcome(
        model,
        task,
        Status.FAILED,
        time.perf_counter() - t0,
        f"{type(exc).__name__}: {exc}",
        stage,
        detail=traceback.format_exc(),
        started_at=started,
        retryable=not (names & set(NOT_RETRYABLE)),
    )


def record_failure(wh: Any, run_id: str, outcome: UnitOutcome) -> None:
    """One ``failures`` row for a failed unit."""
    wh.write_failure(
        run_id, outcome.model, outcome.task, str(outcome.stage or "unknown"), outcome.error or "", outcome.detail
    )
