"""Run a catalog: plan the units, skip the finished ones, schedule the rest, record the run, summarise.

The skip check runs on the driver before any executor starts: when every unit's metrics file already exists with the
same fingerprint, no Ray, no worker, no model is started and a nightly no-op rerun takes seconds. Executors:
``local`` (in-process, one worker: the baseline) and ``ray`` (worker actors on a local or remote Ray cluster: the
CLI's default). Both share ``scheduler.core.Scheduler``, so they produce identical warehouses. Progress (counts,
cost-weighted ETA) is tracked here and handed to ``on_event`` with every event, so front ends only render it.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfarm.catalog.registry import Catalog, load_catalog
from evalfarm.outcomes import Stage, Status
from evalfarm.plan import CODE_VERSIONS, ModelPlan, plan_run
from evalfarm.scheduler import EXECUTORS
from evalfarm.scheduler.progress import ProgressTracker
from evalfarm.scorers.base import RunOptions
from evalfarm.warehouse import Warehouse, new_run_id, now


@dataclass
class RunSummary:
    run_id: str
    warehouse: Path | str
    outcomes: list[Any] = field(default_factory=list)  # UnitOutcome (or a skipped stand-in), one per unit
    seconds: float = 0.0
    executor: str = "local"
    workers: int = 0
    n_units: int = 0
    quarantined: list[Any] = field(default_factory=list)  # warehouse.Quarantined: corrupt files moved aside

    @property
    def degenerate(self) -> list[Any]:
        return [o for o in self.outcomes if getattr(o, "degenerate", None)]

    @property
    def failed(self) -> list[Any]:
        return [o for o in self.outcomes if o.status == Status.FAILED]

    @property
    def ok(self) -> bool:
        return not self.failed and len(self.outcomes) == self.n_units

    def counts(self) -> dict[str, int]:
        c = {"done": 0, "skipped": 0, "failed": 0}
        for o in self.outcomes:
            c[str(o.status)] += 1
        return c


@dataclass
class Skipped:
    """A unit whose results exist (a light stand-in for UnitOutcome: the no-op path imports nothing heavy)."""

    model: str
    task: str
    status: Status = Status.SKIPPED
    seconds: float = 0.0
    error: str | None = None
    stage: Stage | None = None


@dataclass
class RunEvent:
    """What ``run_catalog`` reports: ``quarantined`` (a corrupt file moved aside), ``planned``, ``skipped`` (units
    already done), then the scheduler's events
    (``dispatch``, ``unit``, ``retry``, ``worker-lost``, ``worker-ready``, ``tick``). ``progress`` is current."""

    kind: str
    progress: ProgressTracker
    outcome: Any = None
    task: Any = None
    worker: Any = None
    message: str = ""


def split_done(plans: list[ModelPlan], wh: Warehouse, force: bool) -> tuple[list[ModelPlan], list[Skipped]]:
    """(plans of the units still to compute, the units already computed with the same fingerprint)."""
    if force:
        return plans, []
    marker = {id(u): wh.unit_path("metrics", u.model, u.task, u.fingerprint) for p in plans for u in p.units}
    present = wh.existing(list(marker.values()))
    pending, skipped = [], []
    for p in plans:
        todo = [u for u in p.units if marker[id(u)] not in present]
        skipped += [Skipped(u.model, u.task) for u in p.units if marker[id(u)] in present]
        if todo:
            pending.append(ModelPlan(p.model, p.spec_hash, p.level, p.store, todo, p.cost * len(todo) / len(p.units)))
    return pending, skipped


def quarantine_corrupt_files(
    wh: Warehouse, run_id: str, emit: Callable[[RunEvent], None], tracker: ProgressTracker
) -> list[Any]:
    """Move the warehouse's unreadable files aside before anything is skipped (``Warehouse.scan``): a unit whose
    metrics file was truncated is recomputed, a text-store shard re-embedded. Each is a ``failures`` row (stage
    ``quarantine``) and a ``quarantined`` event."""
    moved = wh.scan(run_id=run_id)
    for q in moved:
        model, task = q.unit
        wh.write_failure(run_id, model, task, str(Stage.QUARANTINE), f"{q.reason}; moved to {q.moved_to}", q.path)
        emit(RunEvent("quarantined", tracker, message=f"quarantined {q.path}: {q.reason} (now {q.moved_to})"))
    return moved


def _check_device(options: RunOptions, executor: str, address: str | None) -> None:
    """A missing ``--device`` fails the run here, before anything starts, when the workers run on this machine (a
    remote cluster's workers check their own, and never retry that failure)."""
    import os

    if options.device is not None and (executor == "local" or not (address or os.environ.get("RAY_ADDRESS"))):
        from evalfarm.device import check_device

        check_device(options.device)


def _verify_task_files(cat: Catalog, pending: list[ModelPlan], options: RunOptions) -> RunOptions:
    """Hash the pending tasks' files once, on the driver (downloading what is missing): the workers trust these
    checksums instead of hashing every file again per model and attempt (``RunOptions.verified_files``)."""
    import dataclasses

    from evalfarm.pools.data import verify_task_files

    tasks = sorted({u.task for p in pending for u in p.units})
    return dataclasses.replace(options, verified_files=verify_task_files([cat.task(t) for t in tasks]))


def run_catalog(
    catalog: str | Path | Catalog,
    warehouse: str | Path,
    *,
    models: list[str] | None = None,
    tasks: list[str] | None = None,
    options: RunOptions | None = None,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    executor: str = "local",
    address: str | None = None,
    workers: int | None = None,
    max_attempts: int = 2,
    on_event: Callable[[RunEvent], None] | None = None,
    encoders: dict[str, Any] | None = None,
) -> RunSummary:
    """Evaluate ``models`` (default: all) of ``catalog`` on ``tasks`` (default: the catalog's) into ``warehouse``.

    ``progress(label, advance, total)`` reports embedding progress (in-process executor); ``on_event`` receives a
    :class:`RunEvent` for everything else. ``encoders`` maps model ids of kind ``python`` to in-memory encoder
    objects (in-process executor only).
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    if encoders and executor != "local":
        raise ValueError("in-memory encoder objects run in this process: use executor='local'")
    cat = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    options = options or RunOptions()
    plans = plan_run(cat, models=models, tasks=tasks, options=options)
    _check_device(options, executor, address)
    wh = Warehouse(warehouse).init()
    run_id = new_run_id()
    t0 = time.perf_counter()
    n_units = sum(len(p.units) for p in plans)
    tracker = ProgressTracker(total=n_units, cost_total=sum(p.cost for p in plans))
    unit_cost = {p.model: p.cost / len(p.units) for p in plans}
    emit = on_event or (lambda e: None)
    common = {
        "catalog": str(cat.path),
        "n_units": n_units,
        "host": platform.node(),
        "argv": json.dumps(sys.argv),
        "code_version": json.dumps(CODE_VERSIONS),
    }
    from evalfarm.provenance import run_provenance

    provenance = run_provenance(
        catalog if not isinstance(catalog, Catalog) else cat.path, loaded=cat, models=models, device=options.device
    )
    wh.write_run_event(run_id, "start", status="running", provenance=json.dumps(provenance, default=str), **common)
    summary = RunSummary(run_id=run_id, warehouse=wh.root, executor=executor, n_units=n_units)
    summary.quarantined = quarantine_corrupt_files(wh, run_id, emit, tracker)
    pending, skipped = split_done(plans, wh, force)
    options = _verify_task_files(cat, pending, options) if pending else options
    emit(RunEvent("planned", tracker, message=f"{len(plans)} models, {n_units} units"))
    from evalfarm.provenance import unpinned_revisions

    for u in unpinned_revisions(cat, models):  # also recorded in the run's provenance
        emit(RunEvent("warning", tracker, message=str(u["message"])))
    summary.outcomes.extend(skipped)
    if skipped:
        at = now()
        wh.write_units(
            run_id,
            [
                {"model": s.model, "task": s.task, "stage": str(Stage.PLAN), "worker": "driver",
                 "node": platform.node(), "started_at": at, "seconds": 0.0, "status": str(Status.SKIPPED),
                 "attempts": 0, "error": None, "fingerprint": None}
                for s in skipped
            ],
        )  # fmt: skip
        for s in skipped:
            tracker.finish(Status.SKIPPED, unit_cost.get(s.model, 1.0))
        emit(RunEvent("skipped", tracker, message=f"{len(skipped)} units already done"))

    def event(e: Any) -> None:
        if e.kind == "unit":
            tracker.finish(e.outcome.status, unit_cost.get(e.outcome.model, 1.0))
        elif e.kind == "retry":
            tracker.retries += 1
        elif e.kind == "worker-ready":
            tracker.workers += 1
        elif e.kind == "worker-lost":
            tracker.workers = max(0, tracker.workers - 1)
        emit(RunEvent(e.kind, tracker, outcome=e.outcome, task=e.task, worker=e.worker, message=e.message))

    backend = None
    try:
        if pending:
            from evalfarm.scheduler.core import Scheduler

            backend = _backend(
                executor, cat, wh, run_id, options, force, progress, pending, address, workers, encoders or {}
            )
            sched = Scheduler(
                pending,
                backend,
                warehouse=wh,
                run_id=run_id,
                base_of=_bases(cat, pending),
                max_attempts=max_attempts,
                on_event=event,
            )
            try:
                sched.run()
            finally:
                summary.outcomes.extend(sched.outcomes)
                summary.workers = len(sched.workers)
    finally:
        if backend is not None:
            backend.close()
        summary.seconds = time.perf_counter() - t0
        c = summary.counts()
        status = "interrupted" if len(summary.outcomes) < n_units else ("ok" if c["failed"] == 0 else "failed")
        wh.write_run_event(run_id, "end", status=status, n_failed=c["failed"], n_skipped=c["skipped"], **common)
    if summary.counts()["done"]:
        refresh_correlations(wh)
    return summary


def refresh_correlations(wh: Warehouse) -> None:
    """Bring the stored bootstrap intervals of the ``correlations`` view up to date after a run that computed
    something. Never fails the run: the view's correlations are always current, only their intervals would wait for
    ``evalfarm correlations``."""
    try:
        from evalfarm.correlations import refresh_intervals

        refresh_intervals(wh)
    except Exception as exc:
        logging.getLogger(__name__).warning(
            "correlation intervals not refreshed (%s: %s); `evalfarm correlations` recomputes them",
            type(exc).__name__,
            exc,
        )


def _bases(cat: Catalog, plans: list[ModelPlan]) -> dict[str, str | None]:
    """Derived sentence models whose base is in this run wait for it: they reuse its embeddings."""
    out: dict[str, str | None] = {}
    for p in plans:
        spec = cat.model(p.model)
        out[p.model] = spec.base if (spec.base and spec.postprocess and spec.level == "sentence") else None
    return out


def _backend(
    executor: str,
    cat: Catalog,
    wh: Warehouse,
    run_id: str,
    options: RunOptions,
    force: bool,
    progress: Callable[[str, int, int], None] | None,
    pending: list[ModelPlan],
    address: str | None,
    workers: int | None,
    encoders: dict[str, Any],
) -> Any:
    if executor == "local":
        from evalfarm.execute import ExecContext
        from evalfarm.scheduler.local import LocalBackend

        ctx = ExecContext(
            catalog=cat, warehouse=wh, run_id=run_id, options=options, force=force, progress=progress,
            record_failures=False, encoders=encoders,
        )  # fmt: skip
        return LocalBackend(ctx)
    from evalfarm.scheduler.ray_runner import SMALL_KINDS, RayBackend

    small = all(cat.kind(p.model) in SMALL_KINDS for p in pending)
    return RayBackend(
        catalog=cat,
        warehouse=wh.uri,
        run_id=run_id,
        options=options,
        force=force,
        address=address,
        workers=workers,
        small_models=small,
    )
