"""Run a catalog (:class:`Run`): plan the units, skip the finished ones, schedule the rest, record the run, summarise.

The skip check runs on the driver before any executor starts: when every unit's metrics file already exists with the
same fingerprint, no Ray, no worker, no model is started and a nightly no-op rerun takes seconds (it needs no write
access: on a read-only warehouse it is simply not recorded). Executors:
``local`` (in-process, one worker: the baseline) and ``ray`` (worker actors on a local or remote Ray cluster: the
CLI's default). Both share ``scheduler.core.Scheduler``, so they produce identical warehouses. Progress (counts,
cost-weighted ETA) is tracked here and handed to ``on_event`` with every event, so front ends only render it.

From its first second, before it plans, a run has a heartbeat in the warehouse (its id, host, pid, the command,
its phase and planning step: ``evalfarm status`` follows it, never calls it dead while it plans), removed once its end
is recorded. The run's lifecycle in ``runs``: a ``start`` event (written once the plan is known; a failure to write
it is the one clear error of an unwritable warehouse), then an ``end`` event with the counts and a status: ``ok``,
``failed``, or ``interrupted`` (Ctrl-C, or the Ray cluster's head lost: then :class:`RunInterrupted` is raised
after the record, and running the same command again resumes, skipping every finished unit). Concurrent runs on one
warehouse split the work through leases (``evalfarm.leases``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalfarm.catalog.registry import Catalog, load_catalog
from evalfarm.options import RunOptions, RunRequest
from evalfarm.outcomes import Stage, Status, UnitOutcome, record_quarantine
from evalfarm.plan import (
    CODE_VERSIONS,
    SCORE_COST,
    ModelPlan,
    forward_pass_groups,
    plan_run,
    share_forward_passes,
    without_tasks,
)
from evalfarm.scheduler import EXECUTORS
from evalfarm.scheduler.progress import (
    PLANNING,
    RUNNING,
    STARTING,
    ProgressTracker,
    TextBoard,
    fmt_count,
    fmt_seconds,
)
from evalfarm.warehouse import (
    Quarantined,
    Warehouse,
    WarehouseWriteError,
    new_run_id,
    now,
    sweep_temp_files,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from evalfarm.execute import EmbedTick
    from evalfarm.leases import Leases
    from evalfarm.scheduler.core import Executor, Job, WorkerInfo


EXIT_CODES = {"ok": 0, "failed": 1, "interrupted": 3}
"""``evalfarm run``'s exit status by the run's end status (2: a usage or configuration error, before any run)."""

LOCAL_WORKER = "local-0"
"""The in-process executor's one worker (``LocalExecutor.name``)."""
TEXT_POLL_S = 1.0
"""How often the driver reads the Ray workers' embedding progress (one small actor call)."""


def first_eta_line(
    seconds: float,
    units: int,
    workers: int,
    texts: int,
    sources: Mapping[str, int],
    *,
    start_up: float = 0.0,
    where: str = "local",
) -> str:
    """The first ETA as a user reads it: how long, for how much work, and what it rests on, in words (the
    estimate's internal source names stay in ``-v`` and ``run --format json``)."""
    from evalfarm.eta import SOURCE_WORDS

    work = f"{units} unit{'s' if units != 1 else ''}" + (f" ({fmt_count(texts)} texts to embed)" if texts else "")
    basis = "; ".join(
        (f"{n} units from " if len(sources) > 1 else "") + SOURCE_WORDS.get(s, s) for s, n in sources.items()
    )
    start = f" after {fmt_seconds(start_up)} starting Ray" if start_up and where == "local-ray" else ""
    start = start or (f" after {fmt_seconds(start_up)} connecting to Ray" if start_up and where == "cluster" else "")
    return (
        f"first ETA {fmt_seconds(seconds)} for {work} on {workers} worker{'s' if workers != 1 else ''}{start}, from "
        f"{basis}; it follows the rates the workers measure"
    )


class RunInterrupted(RuntimeError):
    """The run could not go on (its Ray cluster's head was lost). What finished is recorded (``runs`` has the end
    event, status ``interrupted``); running the same command again resumes: finished units are skipped."""

    def __init__(self, summary: RunSummary, reason: str) -> None:
        self.summary = summary
        self.reason = reason
        c = summary.counts()
        left = summary.n_units - sum(c.values())
        super().__init__(
            f"run {summary.run_id} interrupted: {reason}. {c['done'] + c['skipped']} of {summary.n_units} units are "
            f"in the warehouse, {left} not computed" + (f", {c['failed']} failed" if c["failed"] else "")
        )


class RayStartFailed(RuntimeError):
    """Ray did not start (a local Ray under load, a temp folder it cannot use, a cluster whose workers never come
    up): no worker was ever ready. The run is recorded as interrupted; ``str()`` is the one line a user reads (the
    cause's type and first line); ``cause`` keeps the rest (``-v`` shows its traceback)."""

    def __init__(self, cause: BaseException, address: str | None = None) -> None:
        self.cause = cause
        lines = str(cause).strip().splitlines()
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        super().__init__(f"could not start {where}: {type(cause).__name__}: {lines[0] if lines else 'no message'}")


@dataclass
class RunSummary:
    run_id: str
    warehouse: Path | str
    outcomes: list[UnitOutcome | Skipped] = field(default_factory=list)  # one per unit
    seconds: float = 0.0
    executor: str = "local"
    workers: int = 0
    n_units: int = 0
    status: str = "running"  # ok | failed | interrupted, once the run ended
    warnings: list[str] = field(default_factory=list)  # spec conflicts, an unrecorded read-only no-op run
    recorded: bool = True  # False: the warehouse was not writable and there was nothing to compute
    quarantined: list[Quarantined] = field(default_factory=list)  # corrupt files moved aside
    not_evaluated: list[str] = field(default_factory=list)  # selected models with no selected task of their level
    worker_info: list[dict[str, Any]] = field(default_factory=list)  # each worker as it started: host, node, device
    first_eta: dict[str, Any] | None = None  # the first ETA: seconds, workers, sources (None: nothing to compute)
    report: dict[str, Any] | None = None  # the end summary (end_report): in `runs.summary`, for --notify
    notified: Any = None  # what the --notify hook did (evalfarm.notify.Notified), when there was one

    @property
    def degenerate(self) -> list[UnitOutcome]:
        return [o for o in self.outcomes if isinstance(o, UnitOutcome) and o.degenerate]  # Skipped: never

    @property
    def thin(self) -> list[UnitOutcome]:
        """Units computed here whose numbers are too thin to rank (``Scorer.thin``), left off the leaderboards."""
        return [o for o in self.outcomes if isinstance(o, UnitOutcome) and o.thin]

    @property
    def failed(self) -> list[UnitOutcome | Skipped]:
        return [o for o in self.outcomes if o.status == Status.FAILED]

    @property
    def ok(self) -> bool:
        return not self.failed and len(self.outcomes) == self.n_units

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain JSON-able data (``evalfarm run --format json``): the run, its counts, each unit
        (model, task, status, seconds, stage, error, primary numbers, degenerate / thin reasons), what needs a look,
        and the first ETA (``seconds`` over ``workers``, how many estimates came from each source; against
        ``seconds``, the run's own: the ETA's error on this run)."""
        units = [
            {
                "model": o.model,
                "task": o.task,
                "status": str(o.status),
                "seconds": round(o.seconds, 3),
                "stage": None if o.stage is None else str(o.stage),
                "error": o.error,
                "summary": dict(getattr(o, "summary", {}) or {}),
                "degenerate": getattr(o, "degenerate", None),
                "thin": getattr(o, "thin", None),
            }
            for o in self.outcomes
        ]
        return {
            "run_id": self.run_id,
            "warehouse": str(self.warehouse),
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "executor": self.executor,
            "workers": self.workers,
            "counts": self.counts(),
            "units": units,
            "warnings": list(self.warnings),
            "not_evaluated": list(self.not_evaluated),
            "quarantined": len(self.quarantined),
            "recorded": self.recorded,
            "first_eta": self.first_eta,
            "report": self.report,
        }

    @property
    def exit_code(self) -> int:
        """What ``evalfarm run`` exits with for this run: 0 every unit done or skipped, 1 a unit failed, 3 the run
        was interrupted (2, a usage or configuration error, never gets as far as a run)."""
        return EXIT_CODES.get(self.status, 1)

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
    """What ``run_catalog`` reports: ``begin`` (its first second: the run id, before it plans), ``planning`` at each
    planning step (the step in ``message``), ``quarantined`` (a corrupt file moved aside), ``planned``, a
    ``warning`` per selected model left out for want of a task of its level and per unpinned revision, ``skipped``
    (units already done), ``eta`` (the first ETA, from the warehouse's history; when there is work), ``starting``
    (Ray's workers start), then the scheduler's events (``dispatch``, ``unit``, ``retry``, ``worker-lost``,
    ``worker-ready``, ``waiting``, ``tick``), then a ``warning`` per later entry of ``RunSummary.warnings``.
    ``progress`` is current."""

    kind: str
    progress: ProgressTracker
    outcome: UnitOutcome | None = None  # a unit's final outcome (`unit`)
    job: Job | None = None  # the job of a scheduler event
    worker: WorkerInfo | None = None
    message: str = ""


def split_done(plans: list[ModelPlan], wh: Warehouse, force: bool) -> tuple[list[ModelPlan], list[Skipped]]:
    """(plans of the units still to compute, the units already computed with the same fingerprint)."""
    if force:
        return plans, []
    units = [u for p in plans for u in p.units]
    done = {id(u) for u, d in zip(units, wh.done(units), strict=True) if d}
    pending, skipped = [], []
    for p in plans:
        todo = [u for u in p.units if id(u) not in done]
        skipped += [Skipped(u.model, u.task) for u in p.units if id(u) in done]
        if todo:
            share = len(todo) / len(p.units)
            pending.append(dataclasses.replace(p, units=todo, cost=p.cost * share))
    return pending, skipped


def quarantine_corrupt_files(
    wh: Warehouse, run_id: str, emit: Callable[[RunEvent], None], tracker: ProgressTracker
) -> list[Quarantined]:
    """Move the warehouse's unreadable files aside before anything is skipped (``Warehouse.scan``): a unit whose
    metrics file was truncated is recomputed, a text-store shard re-embedded. Each is a ``failures`` row (stage
    ``quarantine``) and a ``quarantined`` event."""
    moved = wh.scan(run_id=run_id)
    for q in moved:
        record_quarantine(wh, run_id, q)
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

    from evalfarm.taskdata.data import verify_task_files

    tasks = sorted({u.task for p in pending for u in p.units})
    return dataclasses.replace(options, verified_files=verify_task_files([cat.task(t) for t in tasks]))


def run_catalog(
    catalog: str | Path | Catalog,
    warehouse: str | Path,
    request: RunRequest | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    encoders: dict[str, Any] | None = None,
    **fields: Any,
) -> RunSummary:
    """Evaluate ``request``'s models (default: all) of ``catalog`` on its tasks (default: the catalog's) into
    ``warehouse``. ``fields`` are :class:`~evalfarm.options.RunRequest` fields given as keywords (``models=[...]``,
    ``executor="local"``), over ``request`` or the defaults: the one place a run's keywords become its request.

    ``executor``: ``ray`` (the default of ``evalfarm run`` and :func:`evalfarm.run` too) or ``local``, the
    in-process loop.

    ``progress(label, advance, total)`` reports embedding progress (in-process executor); ``on_event`` receives a
    :class:`RunEvent` for everything else. ``encoders`` maps model ids of kind ``python`` to in-memory encoder
    objects (in-process executor only).
    """
    request = dataclasses.replace(request or RunRequest(), **fields)
    return Run(catalog, warehouse, request, progress=progress, on_event=on_event, encoders=encoders).execute()


class Run:
    """One call of :func:`run_catalog`, in four phases that :meth:`execute` calls in order:

    - :meth:`plan`: the units and their costs, the run's id, provenance and summary; then the ``start`` event, the
      run's first write (an unwritable warehouse is only an error once there is something to compute);
    - :meth:`skip`: move corrupt files aside, split off the units already computed (their ``units`` rows, the
      ``skipped`` event), hash the pending tasks' files once;
    - :meth:`schedule`: leases, the executor, the :class:`~evalfarm.scheduler.core.Scheduler` over the pending units;
      whatever happens there, :meth:`record` runs;
    - :meth:`record`: release the leases, the ``end`` event (with the spec conflicts found), close the executor;
      :meth:`finish` then raises :class:`RunInterrupted`, or refreshes the correlations and returns the summary.

    Each phase leaves its state in attributes the next reads, so the record step sees exactly what was started."""

    def __init__(
        self,
        catalog: str | Path | Catalog,
        warehouse: str | Path,
        request: RunRequest | None = None,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        on_event: Callable[[RunEvent], None] | None = None,
        encoders: dict[str, Any] | None = None,
    ) -> None:
        request = request or RunRequest()
        if request.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {request.executor!r}: use one of {', '.join(EXECUTORS)}")
        if encoders and request.executor != "local":
            raise ValueError("in-memory encoder objects run in this process: use executor='local'")
        self.request = request
        self.source = catalog  # as given: the provenance records a path, not only the loaded catalog
        self.cat: Catalog = catalog if isinstance(catalog, Catalog) else None  # type: ignore[assignment]  # plan()
        self.warehouse = warehouse
        self.models, self.tasks = request.model_ids, request.task_ids
        self.options = request.options  # skip() adds the verified task files: the options the workers get
        self.force, self.executor = request.force, request.executor
        self.address, self.workers, self.max_attempts = request.address, request.workers, request.max_attempts
        self.progress = progress
        self.emit: Callable[[RunEvent], None] = on_event or (lambda e: None)
        self.encoders = encoders or {}
        # set by schedule(), read by record(): what to release and close, whatever failed in between
        self.leases: Leases | None = None
        self.executor_obj: Executor | None = None
        self.reason: str | None = None  # why the run was interrupted (Ctrl-C, a lost cluster)
        self.connected: tuple[bool, bool] | None = None  # (shared, owns Ray) when plan() connected to a cluster
        self.board = TextBoard()  # the in-process executor's embedding passes (Ray's workers post to an actor)
        self._next_text_poll = 0.0
        self.dashboard: str | None = None  # the Ray dashboard's address, when the cluster has one
        self.start_up: dict[str, Any] = {}  # where the workers started (start_up_where) and how long it took
        self._created_root = False  # begin() made the warehouse's folder (for the heartbeat): a refused run removes it
        self._starting = 0.0  # perf_counter() when the workers began to start

    def execute(self) -> RunSummary:
        self.begin()
        try:
            self.plan()
            try:
                self.skip()
            except Exception as exc:  # e.g. no data folder and no network: the run ends before it starts, recorded
                if self.summary.recorded:
                    self.record(exc)
                raise
        except BaseException:
            self._abandon()
            raise
        self.schedule()
        return self.finish()

    # -- begin --------------------------------------------------------------------------------------------------

    def begin(self) -> None:
        """The run's first second, before it plans: its id, its progress (phase ``planning``) and its heartbeat
        (``<warehouse>/leases/runs/<run_id>.json``: run id, host, pid, the command, what the planner does now), so
        ``evalfarm status`` follows it from the start and never calls it dead while it plans. A warehouse that
        cannot be written gets no heartbeat (an error only once there turns out to be work: :meth:`skip`); a new
        warehouse's folder, made for the heartbeat, goes again with it if the run is refused (:meth:`_abandon`).
        The line naming the run (:meth:`_announce`) waits for the plan: a run refused before it (a bad catalog, a
        missing device) says so in one line."""
        from evalfarm.environment import quiet_third_party_bars

        quiet_third_party_bars()  # before any worker starts: a local Ray's workers inherit this environment
        self.wh = Warehouse(self.warehouse)
        self.run_id = new_run_id()
        self.t0 = time.perf_counter()
        self.tracker = ProgressTracker(total=0, run_id=self.run_id, phase=PLANNING, step="loading the catalog")
        self._connect_first()
        from evalfarm.leases import Leases

        self._created_root = self.wh.local and not os.path.exists(self.wh.root)  # a refused run leaves no folder
        try:
            self.leases = Leases(self.wh, self.run_id, publish=self.published).start()
        except OSError as exc:
            logging.getLogger(__name__).info("no heartbeat for run %s (%s)", self.run_id, exc)
        self._step("loading the catalog")  # a terminal's live line says so from the first second; a log prints nothing

    def _announce(self) -> None:
        """The run's first printed line (its id, and the command that follows it), once its plan stands."""
        self.emit(RunEvent("begin", self.tracker, message=f"run {self.run_id} on {platform.node()}: planning; "
                           f"`evalfarm status {self.run_id}` follows it from another shell"))  # fmt: skip

    def _step(self, step: str) -> None:
        """The planner moved on: the heartbeat (rewritten now) and the progress line say so (``planning · <step>``)."""
        self.tracker.step = step
        if self.leases is not None:
            with contextlib.suppress(OSError):
                self.leases.beat()
        self.emit(RunEvent("planning", self.tracker, message=step))

    def _abandon(self) -> None:
        """The run stops before its schedule (a bad catalog, a failed plan, Ctrl-C): its heartbeat goes (its start,
        when it was recorded, has its end through :meth:`record`), and a cluster connected for it is left."""
        if self.leases is not None:
            with contextlib.suppress(OSError):
                self.leases.stop()
        if self._created_root:
            _remove_empty_folders(self.wh.root)
        if self.connected is not None and self.connected[1] and self.executor_obj is None:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
            self.connected = None

    # -- plan ---------------------------------------------------------------------------------------------------

    def plan(self) -> None:
        """Load the catalog and plan the units (nothing computed, nothing read from the warehouse), then record the
        start."""
        if self.cat is None:
            self.cat = load_catalog(self.source)
        self._step("planning units")
        self.plans = plan_run(self.cat, models=self.models, tasks=self.tasks, options=self.options)
        _check_device(self.options, self.executor, self.address)
        self._announce()
        n_units = sum(len(p.units) for p in self.plans)
        self.tracker.total, self.tracker.cost_total = n_units, sum(p.cost for p in self.plans)
        self.unit_cost = {p.model: p.cost / len(p.units) for p in self.plans}
        self.common = {
            "catalog": str(self.cat.path),
            "n_units": n_units,
            "host": platform.node(),
            "argv": json.dumps(sys.argv),
            "code_version": json.dumps(CODE_VERSIONS),
        }
        from evalfarm.provenance import run_provenance

        source = self.source if not isinstance(self.source, Catalog) else self.cat.path
        self.provenance = run_provenance(source, loaded=self.cat, models=self.models, device=self.options.device)
        self.summary = RunSummary(run_id=self.run_id, warehouse=self.wh.root, executor=self.executor, n_units=n_units)
        left_out = without_tasks(self.cat, models=self.models, tasks=self.tasks)  # said when planned, and counted
        self.summary.not_evaluated, self.summary.warnings = list(left_out), list(left_out.values())
        self.planned_warnings = len(self.summary.warnings)  # the later ones are said after the run
        self._step("recording the start")
        self.unwritable = self._record_start()

    def _connect_first(self) -> None:
        """A run on a remote Ray cluster (``--address``, ``RAY_ADDRESS``) into a warehouse that does not exist yet
        connects before the start event creates it: a wrong address then fails in seconds and leaves no folder.
        (Into an existing warehouse the connection waits for work: a no-op rerun needs no cluster.)"""
        import os

        if self.executor != "ray" or not (self.address or os.environ.get("RAY_ADDRESS")):
            return
        from evalfarm.scheduler.ray_executor import check_address_env

        check_address_env(self.address)  # a recorded head without its token: say so now, not after minutes
        if self.wh.exists(self.wh.base):
            return
        import ray

        from evalfarm.scheduler.ray_executor import connect

        shared = not ray.is_initialized()
        self.connected = (shared, connect(self.address))

    def _record_start(self) -> OSError | None:
        """The ``start`` event; the error of a read-only warehouse, kept for when there turns out to be work."""
        try:
            self.wh.init()
            prov = json.dumps(self.provenance, default=str)
            self.wh.write_run_event(self.run_id, "start", status="running", provenance=prov, **self.common)
        except OSError as exc:  # a read-only warehouse: fine when there is nothing to compute
            self.summary.recorded = False
            if isinstance(exc, WarehouseWriteError):
                return exc
            return WarehouseWriteError(exc.filename or str(self.wh.root), exc)  # one line: the path and the cause
        return None

    # -- skip ---------------------------------------------------------------------------------------------------

    def skip(self) -> None:
        """Quarantine corrupt files, then split the plan into what is pending and what is already computed."""
        summary = self.summary
        self._step("checking the warehouse's units")
        if summary.recorded:
            summary.quarantined = quarantine_corrupt_files(self.wh, self.run_id, self.emit, self.tracker)
        self.pending, skipped = split_done(self.plans, self.wh, self.force)  # reads only: may be read-only
        if not summary.recorded:
            if self.pending and self.unwritable is not None:
                raise self.unwritable  # WarehouseWriteError: one line naming the path
            summary.warnings.append(
                f"every unit was already computed; this run is not recorded in runs ({self.unwritable})"
            )
        if self.pending:
            self._step("verifying the task files")
            self.options = _verify_task_files(self.cat, self.pending, self.options)
        self._announce_plan()
        summary.outcomes.extend(skipped)
        if skipped:
            self._record_skipped(skipped)
        if self.pending:
            self._forecast()
        else:  # nothing to schedule: the plan was the run
            self.tracker.phase, self.tracker.step = RUNNING, ""

    def _forecast(self) -> None:
        """The first ETA, from the warehouse's history of unit times, loads and start-ups (``evalfarm.eta``): an
        ``eta`` event, and the progress line's ETA from then on."""
        from evalfarm import eta

        stored = {} if self.force else self.wh.stored_texts({p.model for p in self.pending})  # --force embeds anew
        siblings = {s.model for _, *rest in forward_pass_groups(self.cat, self.pending) for s in rest}
        variants = {(u.scorer, u.params): eta.cost_variant(u.scorer, u.params) for p in self.pending for u in p.units}
        texts = self._text_counts()  # the progress line's texts to embed, and the ETA's counts where it lacks them
        self._step("reading the warehouse's timings")
        views = _OneConnection(self.wh)  # the three reads below on one connection
        history = eta.History(eta.load_history(views), eta.load_loads(views))
        every_task = {p.model: [u.task for u in p.units] for p in self.plans}  # done units' texts are stored too
        shares = {p.model: _stored_share(p, every_task[p.model], stored, texts) for p in self.pending}
        derived = {p.model for p in self.pending if p.spec.postprocess is not None and p.spec.level == "sentence"}
        self.tracker.texts_planned = {
            p.model: round(sum(texts.get(u.task, 0) for u in p.units) * (1.0 - shares[p.model]))
            for p in self.pending
            if p.model not in siblings and p.model not in derived
        }
        sizes = {p.model: _source_bytes(self.cat, p) for p in self.pending}
        units = [
            eta.PlannedUnit(
                u.model, self._eta_key(p), u.task, p.cost / len(p.units),
                shares[p.model],
                embed_cost=0.0 if p.model in siblings else p.embed_cost,  # a sibling's texts: its leader's pass
                variant=variants[(u.scorer, u.params)],
                score_cost=SCORE_COST.get((u.scorer, p.level), 0.05),
                load_bytes=sizes[p.model],
            )
            for p in self.pending
            for u in p.units
        ]  # fmt: skip
        workers = _planned_workers(self.executor, self.address, self.workers)
        where = eta.start_up_where(self.executor, self.address)
        start_up, _ = (0.0, "warm") if _ray_running(self.executor) else eta.start_up_seconds(views, where)
        views.close()
        self.start_up = {"where": where, "predicted_s": round(start_up, 1)}
        fc = eta.forecast(units, history, workers=workers, texts=texts, start_up=start_up)
        self.tracker.forecast, self.tracker.planned_workers = fc, workers
        counts = eta.sources(fc.estimates.values())
        _, n_texts = self.tracker.texts()
        first = {
            "seconds": round(fc.total, 1),
            "workers": workers,
            "sources": counts,
            "texts": n_texts,
            "start_up_s": round(start_up, 1),
            "load_s": round(sum(e.load for e in fc.estimates.values()), 1),
        }
        self.summary.first_eta = first
        line = first_eta_line(fc.total, len(units), workers, n_texts, counts, start_up=start_up, where=where)
        self.emit(RunEvent("eta", self.tracker, message=line))

    def _text_counts(self) -> dict[str, int]:
        """The planned tasks' text counts under this run's options, for a first ETA whose history has not seen some
        of its task labels (a new warehouse, a new task, the first full-data run after quick ones: the embedding
        estimate scales with them) or whose models have stored texts (:func:`_stored_share`): each task's count
        from the cache (:mod:`evalfarm.textcounts`: computed once per task content), else the task loaded on the
        driver as a worker loads it (through the workers' own :class:`~evalfarm.execute.ExecContext`, which trusts
        the checksums the driver verified this run); a generated task not built yet is not built here. Each level's
        counts are scaled by its share of distinct texts. A task that does not load is left out: its unit fails on
        the worker, with the reason."""
        from evalfarm import textcounts
        from evalfarm.execute import ExecContext

        ctx = ExecContext(catalog=self.cat, warehouse=self.wh, run_id=self.run_id, options=self.options)
        first_unit = {u.task: u for p in reversed(self.plans) for u in p.units}
        keys = {t: textcounts.key_of(t, u) for t, u in first_unit.items()}
        specs = {t: self.cat.task(t) for t in keys}

        def counted(done: int, total: int) -> None:
            if done == total or time.monotonic() >= self._next_text_poll:  # a step a second at most
                self._next_text_poll = time.monotonic() + 1.0
                self._step(f"tasks {done}/{total} counted")

        self._step(f"tasks 0/{len(keys)} counted")
        out = textcounts.counts(keys, specs, ctx.texts, on_task=counted)
        self._next_text_poll = 0.0
        return out

    def _eta_key(self, plan: ModelPlan) -> str:
        from evalfarm.eta import kind_key

        return kind_key(plan.kind, plan.spec.postprocess is not None)

    def _announce_plan(self) -> None:
        from evalfarm.provenance import unpinned_revisions

        self.emit(RunEvent("planned", self.tracker, message=f"{len(self.plans)} models, {self.summary.n_units} units"))
        for w in self.summary.warnings[: self.planned_warnings]:
            self.emit(RunEvent("warning", self.tracker, message=w))
        for u in unpinned_revisions(self.cat, self.models):  # also recorded in the run's provenance
            self.emit(RunEvent("warning", self.tracker, message=str(u["message"])))

    def _record_skipped(self, skipped: list[Skipped]) -> None:
        """A ``units`` row per unit already done (stage ``plan``, worker ``driver``), and the ``skipped`` event."""
        at = now()
        rows = [
            {"model": s.model, "task": s.task, "stage": str(Stage.PLAN), "worker": "driver", "node": platform.node(),
             "started_at": at, "seconds": 0.0, "status": str(Status.SKIPPED), "attempts": 0, "error": None,
             "fingerprint": None}
            for s in skipped
        ]  # fmt: skip
        if self.summary.recorded:
            self.wh.write_units(self.run_id, rows)
        for s in skipped:
            self.tracker.finish(Status.SKIPPED, self.unit_cost.get(s.model, 1.0))
        self.emit(RunEvent("skipped", self.tracker, message=f"{len(skipped)} units already done"))

    # -- schedule -----------------------------------------------------------------------------------------------

    def schedule(self) -> None:
        """Compute the pending units. Ctrl-C and a lost cluster make the run ``interrupted`` (:meth:`finish` raises
        :class:`RunInterrupted` for a lost cluster; Ctrl-C propagates); the run is recorded either way."""
        error: BaseException | None = None
        try:
            if self.pending:
                self.reason = self._run_scheduler()
        except BaseException as exc:
            error = exc
            if isinstance(exc, KeyboardInterrupt):
                self.reason = "stopped (Ctrl-C)"
            raise
        finally:
            self.record(error)

    def _run_scheduler(self) -> str | None:
        """Leases, the executor and the Scheduler; the reason when the cluster was lost, else None."""
        from evalfarm.leases import Leases
        from evalfarm.scheduler.core import ClusterLost, Scheduler

        base_of = _bases(self.cat, self.pending)  # sets each forward-pass leader's siblings before any plan is sent
        if self.leases is None:  # begin() could not write the heartbeat then; it can now (the start is recorded)
            self.leases = Leases(self.wh, self.run_id, publish=self.published).start()
        self._start_workers()
        self.executor_obj = _executor(
            self.executor, self.cat, self.wh, self.run_id, self.options, self.force, self.progress, self.pending,
            self.address, self.workers, self.encoders, self.connected, self._on_texts,
        )  # fmt: skip
        sched = Scheduler(
            self.pending,
            self.executor_obj,
            warehouse=self.wh,
            run_id=self.run_id,
            base_of=base_of,
            max_attempts=self.max_attempts,
            on_event=self._on_scheduler_event,
            leases=self.leases,
            force=self.force,
        )
        try:
            sched.run()
        except ClusterLost as exc:
            return str(exc)
        except Exception as exc:
            if self.tracker.phase == STARTING and not isinstance(exc, ConnectionError):  # no worker was ever ready
                raise RayStartFailed(exc, self.address) from exc
            raise
        finally:
            self.summary.outcomes.extend(sched.outcomes)
            self.summary.workers = len(sched.workers)
        return None

    def _start_workers(self) -> None:
        """The workers begin to start: the phase says ``starting Ray`` (a Ray this run starts, or a cluster it
        connects to) until the first worker is ready (:meth:`_workers_ready`); the in-process loop runs at once."""
        self._starting = time.perf_counter()
        if self.executor == "local":
            self.tracker.phase, self.tracker.step = RUNNING, ""
            return
        self.tracker.phase = STARTING
        self.tracker.step = "connecting to the cluster" if self.start_up.get("where") == "cluster" else ""
        self.emit(RunEvent("starting", self.tracker, message="starting Ray"))

    def _workers_ready(self) -> None:
        """The first worker is ready: the start-up is over (its seconds go into the end summary: the next run's
        ETA prices its own start-up by them)."""
        if self.tracker.phase != STARTING:
            return
        self.tracker.phase, self.tracker.step = RUNNING, ""
        self.start_up["seconds"] = round(time.perf_counter() - self._starting, 1)
        if self.tracker.forecast is not None:
            self.tracker.forecast.ready()

    def _on_texts(self, tick: EmbedTick) -> None:
        """An in-process embedding pass moved (the local executor runs it in this thread): the tracker's texts."""
        self.board.put(LOCAL_WORKER, dataclasses.asdict(tick))
        if self.tracker.jobs.get(LOCAL_WORKER, ("", "", ""))[:2] != ("embed", tick.model):
            self.tracker.job(LOCAL_WORKER, "embed", tick.model)  # in process, the dispatch event comes after the job
        self.tracker.observe_texts(self.board.snapshot())

    def _poll_texts(self) -> None:
        """The Ray workers' passes, read from their board at most once a second (on the scheduler's ticks)."""
        now = time.monotonic()
        if now < self._next_text_poll:
            return
        self._next_text_poll = now + TEXT_POLL_S
        read = getattr(self.executor_obj, "text_passes", None)
        passes = read() if read is not None else None
        if passes is not None:
            self.tracker.observe_texts(passes)

    def published(self) -> dict[str, Any]:
        """What the run's heartbeat file carries besides its liveness (``evalfarm status`` reads it from outside):
        the tracker's snapshot, the first ETA, where the run is and how to follow it. Called from the heartbeat's
        thread: it only reads, and reads again when the run's thread changed a dict under it."""
        for _ in range(3):
            try:
                progress = self.tracker.snapshot()
                break
            except RuntimeError:  # "changed size during iteration": the scheduler's thread moved on; look again
                continue
        else:
            progress = {}
        summary = getattr(self, "summary", None)  # None while it plans
        body: dict[str, Any] = {"progress": progress, "first_eta": None if summary is None else summary.first_eta}
        catalog = getattr(self, "common", {}).get("catalog") or str(getattr(self.source, "path", self.source))
        body |= {"catalog": catalog, "executor": self.executor, "argv": sys.argv, "phase": self.tracker.phase}
        if self.dashboard:
            body["dashboard"] = self.dashboard
        return body

    def _find_dashboard(self) -> None:
        """Say where the Ray dashboard is, once, when the cluster has one (a local Ray evalfarm starts has none)."""
        url = getattr(self.executor_obj, "dashboard_url", None)
        if url:
            self.dashboard = url
            self.emit(RunEvent("dashboard", self.tracker, message=f"Ray dashboard: {url}"))

    def _on_scheduler_event(self, e: Any) -> None:
        """Progress from a scheduler event, then the same event as a :class:`RunEvent`."""
        tracker = self.tracker
        if e.kind == "tick":
            self._poll_texts()
        elif e.kind == "dispatch" and e.job is not None and e.worker is not None:
            task = e.job.unit.task if e.job.unit is not None else ""
            tracker.job(e.worker.name, str(e.job.stage), e.job.plan.model, task)
        elif e.kind == "worker-ready":
            self._workers_ready()
            if not self.dashboard:
                self._find_dashboard()
        if e.kind == "unit":
            o = e.outcome
            self._poll_texts()  # the pass's last texts before the count moves on
            tracker.finish(o.status, self.unit_cost.get(o.model, 1.0), unit=(o.model, o.task), seconds=o.seconds)
        elif e.kind == "retry":
            tracker.retries += 1
        elif e.kind == "worker-ready" and e.worker is not None:  # a restarted worker counts again (maybe elsewhere)
            info = dataclasses.asdict(e.worker)
            if info not in self.summary.worker_info:
                self.summary.worker_info.append(info)
        tracker.workers, tracker.reviving = e.alive, e.reviving  # exact: the scheduler's own counts
        self.emit(RunEvent(e.kind, tracker, outcome=e.outcome, job=e.job, worker=e.worker, message=e.message))

    # -- record -------------------------------------------------------------------------------------------------

    def record(self, error: BaseException | None) -> None:
        """Release the leases, record the end event, then close the executor (after a lost head, closing Ray may
        take seconds: the record comes first). While another error propagates (an unwritable warehouse, a crash), a
        failure here must not replace it: it becomes a warning.

        The end event's provenance is the start's plus ``workers``: each worker's name, node, host, pid and device
        (CPU, GPUs and driver of the machine it ran on; on a cluster the driver's own ``device`` is the head's)."""
        summary, reason = self.summary, self.reason

        def attempt(step: Callable[[], Any], what: str) -> None:
            try:
                step()
            except Exception as exc:
                if error is None and reason is None:
                    raise
                summary.warnings.append(f"{what}: {type(exc).__name__}: {exc}")

        if self.leases is not None:
            attempt(self.leases.release_all, "releasing leases")  # the heartbeat goes on until the end is recorded
        summary.seconds = time.perf_counter() - self.t0
        c = summary.counts()
        if reason is not None or error is not None or len(summary.outcomes) < summary.n_units:
            summary.status = "interrupted"
        else:
            summary.status = "ok" if c["failed"] == 0 else "failed"
        from evalfarm.warehouse import TableError

        try:
            summary.warnings += spec_conflicts(self.wh, self.plans)
        except (OSError, TableError):  # an unreadable `models` table: no warning, the run's own error stands
            pass
        why = reason or (f"{type(error).__name__}: {error}" if error else None)
        summary.report = self.end_report(why)
        if summary.recorded:
            attempt(
                lambda: self.wh.write_run_event(
                    summary.run_id, "end", status=summary.status, n_failed=c["failed"], n_skipped=c["skipped"],
                    n_done=c["done"], reason=why,
                    provenance=json.dumps({**self.provenance, "workers": summary.worker_info}, default=str),
                    summary=json.dumps(summary.report, default=str),
                    snapshot=json.dumps(self._snapshot_versions()), **self.common,
                ),
                "recording the end of the run",
            )  # fmt: skip
        if self.leases is not None:  # the end is recorded: `evalfarm status` reads it from the runs view now
            attempt(self.leases.stop, "removing the run's heartbeat")
        if summary.recorded and c["done"]:  # merge the small files the run added past the threshold (the same
            attempt(self._compact, "compacting the warehouse")  # rows: a new version), checkpoint the tables' logs
        if self.executor_obj is not None:
            attempt(self.executor_obj.close, "closing the executor")
        elif self.connected is not None and self.connected[1]:  # connected first, then failed before the executor
            import ray

            attempt(ray.shutdown, "disconnecting from Ray")

    def _snapshot_versions(self) -> dict[str, int | None]:
        """The version of every table now that the run's last batch is committed: its snapshot (the ``runs`` table
        itself is read at the end event's commit, :func:`~evalfarm.warehouse.history.resolve_as_of`)."""
        from evalfarm.warehouse import DamagedTable, table_schemas

        def version(table: str) -> int | None:
            try:
                return self.wh.tables.snapshot(table).version
            except DamagedTable:  # its log cannot be trusted: no version of it is this run's
                return None

        return {t: version(t) for t in table_schemas() if t != "runs"}

    def _compact(self) -> None:
        from evalfarm.warehouse.maintenance import compact_if_needed

        done = compact_if_needed(self.wh, run_id=self.run_id)
        self.wh.checkpoint()  # readers replay a checkpoint and a few commits, not the whole night's batches
        if done:
            logging.getLogger(__name__).info(
                "compacted %s", ", ".join(f"{c.table} ({c.files_before} -> {c.files_after} files)" for c in done)
            )

    def end_report(self, reason: str | None) -> dict[str, Any]:
        """The run's end summary, what a nightly tells its owner: counts, failures (first line of each), degenerate
        and thin units, wall time, the slowest unit, what moved since the previous run (``moved``:
        :func:`_moved_since_previous`). Written as the end event's ``summary`` (the ``runs`` view), printed, and
        what ``--notify`` receives on stdin."""
        s = self.summary
        c = s.counts()
        started = datetime.fromtimestamp(time.time() - s.seconds, UTC)
        slowest = self.tracker.slowest

        def first_line(text: Any) -> str:
            lines = str(text or "").strip().splitlines()
            return lines[0] if lines else ""

        return {
            "run_id": s.run_id,
            "status": s.status,
            "exit_code": s.exit_code,
            "reason": reason,
            "catalog": str(self.cat.path),
            "warehouse": str(s.warehouse),
            "host": platform.node(),
            "started_at": started.isoformat(timespec="seconds"),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "wall_s": round(s.seconds, 1),
            "counts": {"units": s.n_units, **c, "not_computed": max(0, s.n_units - sum(c.values()))},
            "failures": [
                {
                    "model": o.model,
                    "task": o.task,
                    "stage": None if o.stage is None else str(o.stage),
                    "error": first_line(o.error),
                }
                for o in s.failed
            ],  # fmt: skip
            "degenerate": [{"model": o.model, "task": o.task, "reason": o.degenerate} for o in s.degenerate],
            "thin": [{"model": o.model, "task": o.task, "reason": o.thin} for o in s.thin],
            "quarantined": len(s.quarantined),
            "not_evaluated": list(s.not_evaluated),
            "warnings": list(s.warnings),
            "texts_embedded": self.tracker.texts()[0],
            "slowest": None
            if slowest is None
            else {"model": slowest[1], "task": slowest[2], "seconds": round(slowest[0], 1)},  # fmt: skip
            "first_eta_s": None if s.first_eta is None else s.first_eta["seconds"],
            "executor": s.executor,
            "start_up": dict(self.start_up) or None,
            "moved": _moved_since_previous(self.wh, s.run_id),
        }

    def finish(self) -> RunSummary:
        """After the record: raise for an interrupted run, else refresh the correlations and say the late warnings
        (spec conflicts, what could not be released or closed). A worker killed mid-write left its temp file behind:
        the dead writers' ones go now, not at the next run's start (live writers' files, a concurrent run's, stay)."""
        if self.wh.local:
            sweep_temp_files(self.wh.base)
        if self.reason is not None:
            raise RunInterrupted(self.summary, self.reason)
        if self.summary.counts()["done"]:
            refresh_correlations(self.wh)
        for w in self.summary.warnings[self.planned_warnings :]:
            self.emit(RunEvent("warning", self.tracker, message=w))
        return self.summary


MOVED_LISTED = 20
"""Changes a run's end summary lists one by one (all are counted; ``evalfarm diff`` lists every one)."""


def _moved_since_previous(wh: Warehouse, run_id: str) -> dict[str, Any] | None:
    """What moved since the previous run that ended (of the same catalog when there is one): the ``moved`` key of
    the run's end summary, what a nightly reports and ``--notify`` receives — the previous run's id, the changes
    counted by reason (:func:`evalfarm.warehouse.history.diff_runs`), how many moved under an unchanged fingerprint
    (nondeterminism), and the first :data:`MOVED_LISTED`. None when there is no previous run, or the diff cannot be
    read (never a failed run: the summary says so in the log)."""
    from evalfarm.warehouse.history import diff_runs, runs

    try:
        every = runs(wh)
        mine = next((r for r in every if r["run_id"] == run_id), None)
        ended = [r for r in every if r["finished_at"] is not None and r["run_id"] != run_id]
        same = [r for r in ended if mine is not None and r.get("catalog") == mine.get("catalog")]
        previous = (same or ended)[-1]["run_id"] if (same or ended) else None
        if previous is None:
            return None
        d = diff_runs(wh, previous, run_id)
    except Exception as exc:
        logging.getLogger(__name__).warning("what moved since the previous run was not read (%s: %s)",
                                            type(exc).__name__, exc)  # fmt: skip
        return None
    keys = ("model", "task", "scorer", "subset", "variant", "ties", "metric", "value_a", "value_b", "reason")
    return {
        "since": previous,
        "counts": d.counts(),
        "nondeterministic": len(d.nondeterministic),
        "changes": [{k: r.get(k) for k in keys} for r in d.rows[:MOVED_LISTED]],
    }


def refresh_correlations(wh: Warehouse) -> None:
    """Bring the stored bootstrap intervals of the ``correlations`` view up to date after a run that computed
    something. Never fails the run: the view's correlations are always current, only their intervals would wait for
    ``evalfarm correlations``."""
    try:
        from evalfarm.analysis.correlations import refresh_intervals

        refresh_intervals(wh)
    except Exception as exc:
        logging.getLogger(__name__).warning(
            "correlation intervals not refreshed (%s: %s); `evalfarm correlations` recomputes them",
            type(exc).__name__,
            exc,
        )


def spec_conflicts(wh: Warehouse, plans: list[ModelPlan]) -> list[str]:
    """A warning per model of this run that the warehouse also holds under another spec: the same id evaluated
    with different settings. ``metrics`` shows the newest unit per task whichever spec it came from; the
    ``conflicts`` view lists every spec of such ids with when each was computed."""
    ours = {p.model: p.spec_hash for p in plans}
    seen: dict[str, set[str]] = {}
    if wh.layout() != "delta":
        return []
    for f in wh.tables.snapshot("models").files:
        t = wh.read_columns(f.path, ["model", "spec_hash"])
        for model, spec_hash in zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True):
            if model in ours and spec_hash:
                seen.setdefault(model, set()).add(spec_hash)
    out = []
    for model, hashes in sorted(seen.items()):
        others = sorted(hashes - {ours[model]})
        if others:
            out.append(
                f"model {model!r}: this catalog's spec ({ours[model]}) differs from {len(others)} other spec(s) "
                f"evaluated under the same id ({', '.join(others)}); `metrics` shows each task's newest result, "
                "whichever spec it came from — see the `conflicts` view, or give the new spec its own id"
            )
    return out


def _stored_share(
    p: ModelPlan, every_task: Sequence[str], stored: Mapping[tuple[str, str], int], texts: Mapping[str, int] | None
) -> float:
    """The share of ``p``'s pending texts its text store holds already, for the first ETA. The store holds texts of
    its model's done units too (and a quick run's samples of the pending ones), so what is left to embed is the texts
    of all its planned tasks (``every_task``, the pending ones among them) less the stored rows, taken as a share of
    its pending tasks' texts (counts as this run takes them, :meth:`Run._text_counts`): 0 when nothing is stored, 1
    when the store has as many texts as the plan needs. An estimate: a store with texts of tasks outside this run
    counts them as needed."""
    rows = stored.get((p.model, p.store), 0)
    if rows == 0:
        return 0.0
    counts = texts or {}
    pending = sum(counts.get(u.task, 0) for u in p.units)
    if not pending:
        return 1.0
    left = max(0, sum(counts.get(t, 0) for t in every_task) - rows)
    return 1.0 - min(1.0, left / pending)


class _OneConnection:
    """The warehouse's views on one DuckDB connection, opened at the first read (each ``Warehouse.query`` opens one
    of its own: about a second each on a loaded 2-core machine, three of them in a run's planning). For the
    planner's own statements only: they are constants of :mod:`evalfarm.eta`, not a user's SQL."""

    def __init__(self, wh: Warehouse) -> None:
        self.wh = wh
        self.con: duckdb.DuckDBPyConnection | None = None

    def query(self, sql: str) -> pa.Table:
        if self.con is None:
            self.con = self.wh.connect()
        return self.con.sql(sql).to_arrow_table()

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def _source_bytes(cat: Catalog, plan: ModelPlan) -> int | None:
    """The size of the files ``plan``'s model loads (:func:`evalfarm.encoders.sources.source_bytes`): what its load
    is priced by."""
    from evalfarm.encoders.sources import source_bytes

    return source_bytes(plan.lineage)


def _ray_running(executor: str) -> bool:
    """This process is connected to Ray already (a notebook's second run, a test's cluster): no start-up."""
    ray = sys.modules.get("ray")
    return executor == "ray" and ray is not None and bool(ray.is_initialized())


def _planned_workers(executor: str, address: str | None, workers: int | None) -> int:
    """The workers the first ETA divides the work over: the in-process loop's one; ``--workers``; a local Ray's
    one per CPU (``ray_executor.worker_resources``); on a cluster one until its workers report (the progress line
    then uses the live count)."""
    import os

    if executor == "local":
        return 1
    if workers:
        return workers
    if address or os.environ.get("RAY_ADDRESS"):
        return 1
    return os.cpu_count() or 1


def _bases(cat: Catalog, plans: list[ModelPlan]) -> dict[str, str | None]:
    """Who waits for whom: derived sentence models for their base (they reuse its embeddings), pooling siblings for
    the transformer whose forward pass embeds them too (``plan.share_forward_passes``, which sets the siblings)."""
    out: dict[str, str | None] = {}
    for p in plans:
        spec = p.spec
        out[p.model] = spec.base if (spec.base and spec.postprocess and spec.level == "sentence") else None
    for sibling, leader in share_forward_passes(cat, plans).items():
        out[sibling] = leader
    return out


def _executor(
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
    connected: tuple[bool, bool] | None = None,
    on_texts: Callable[[EmbedTick], None] | None = None,
) -> Executor:
    if executor == "local":
        from evalfarm.execute import ExecContext
        from evalfarm.scheduler.local_executor import LocalExecutor

        ctx = ExecContext(
            catalog=cat, warehouse=wh, run_id=run_id, options=options, force=force, progress=progress,
            on_texts=on_texts, record_failures=False, encoders=encoders,
        )  # fmt: skip
        return LocalExecutor(ctx)
    from evalfarm.scheduler.ray_executor import RayExecutor, small_kind

    kinds = {p.model: p.kind for p in pending}
    small = all(small_kind(k) for k in kinds.values())
    return RayExecutor(
        catalog=cat,
        warehouse=wh.uri,
        run_id=run_id,
        options=options,
        force=force,
        address=address,
        workers=workers,
        small_models=small,
        plans=pending,
        kinds=kinds,
        connected=connected,
    )


def _remove_empty_folders(root: str | os.PathLike[str]) -> None:
    """Remove ``root`` and the folders under it that are empty (a refused run's heartbeat folders), deepest first; a
    folder that holds a file stays, as does the file (``rmdir`` removes nothing else), and no link is followed."""
    for folder, _, _ in sorted(os.walk(root, followlinks=False), key=lambda w: -w[0].count(os.sep)):
        with contextlib.suppress(OSError):
            os.rmdir(folder)
