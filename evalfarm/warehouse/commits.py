"""A run's commits: the files its workers staged, committed in batches by the driver.

Not one commit per unit (a 1,000-model nightly would write 30,000 commits to each table's log, and every reader
would replay them) and not one at the very end (a killed run would keep nothing): a batch commits when
:data:`BATCH_UNITS` units are waiting, or the oldest has waited :data:`BATCH_SECONDS`, and at the end of the run
whatever is left, interrupted or not. A unit's lease is released only once its rows are committed
(:meth:`CommitBatcher.after_commit`): a concurrent run waiting for the unit then finds it done instead of computing
it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from evalfarm.warehouse.like import WarehouseLike
from evalfarm.warehouse.tables import StagedFile

BATCH_UNITS = int(os.environ.get("EVALFARM_COMMIT_UNITS", "64"))
"""Units per batch (``EVALFARM_COMMIT_UNITS``)."""
BATCH_SECONDS = float(os.environ.get("EVALFARM_COMMIT_SECONDS", "30"))
"""The longest a finished unit waits for its commit (``EVALFARM_COMMIT_SECONDS``): what a killed run can lose."""


class CommitBatcher:
    """Collects staged files and the units they complete; commits them through ``warehouse.commit`` in batches.
    The warehouse's own pending files (the driver's ``units`` and ``failures`` rows, written deferred) go with
    each batch. ``clock``: monotonic seconds (a fake one in tests)."""

    def __init__(
        self,
        warehouse: WarehouseLike,
        run_id: str,
        *,
        max_units: int = BATCH_UNITS,
        max_seconds: float = BATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wh = warehouse
        self.run_id = run_id
        self.max_units = max(1, max_units)
        self.max_seconds = max_seconds
        self.clock = clock
        self.files: list[StagedFile] = []
        self.units = 0
        self.since: float | None = None
        self.batches = 0
        self.committed_units = 0
        self._after: list[Callable[[], None]] = []

    def add(self, files: Iterable[StagedFile], *, units: int = 0) -> None:
        """Files to commit with the next batch, and how many finished units they complete."""
        files = list(files)
        if files or units:
            self.files += files
            self.units += units
            if self.since is None:
                self.since = self.clock()

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the files added so far are committed (a lease release)."""
        self._after.append(action)

    def due(self) -> bool:
        return self.units >= self.max_units or (
            self.since is not None and self.clock() - self.since >= self.max_seconds
        )

    def maybe_flush(self) -> bool:
        """Commit when a batch is due; whether it committed."""
        if self.due():
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Commit everything waiting (the warehouse's pending files too), then run the after-commit actions. A
        failed commit raises, with the files kept for the next try (their units are not done until then)."""
        files = self.files + self.wh.take_pending()
        if files:
            self.files = files
            self.batches += 1
            self.wh.commit(files, run_id=self.run_id, batch=self.batches)
        self.committed_units += self.units
        self.files, self.units, self.since = [], 0, None
        after, self._after = self._after, []
        for action in after:
            action()


__all__ = ["BATCH_SECONDS", "BATCH_UNITS", "CommitBatcher"]
