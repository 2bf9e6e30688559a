"""``evalfarm run`` (a catalog into the warehouse, here or on a Ray cluster) and ``evalfarm submit`` (a new model
as a Ray job): each a client of :mod:`evalfarm.api`."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from evalfarm import api
from evalfarm.cli.app import again, app, fail, fail_from, split
from evalfarm.cli.events import RunPrinter, print_notified, print_summary, print_warnings
from evalfarm.cli.rendering import console, say
from evalfarm.ranking import BOARD_TIES, TIES


class Executor(StrEnum):
    ray = "ray"
    local = "local"


# -- run's options -----------------------------------------------------------------------------------------------
CatalogOpt = Annotated[str, typer.Option(help="catalog name (file stem under catalog/) or path")]
ModelsOpt = Annotated[list[str] | None, typer.Option("--models", "-m", help="model ids (comma-separated or repeated)")]
TasksOpt = Annotated[
    list[str] | None,
    typer.Option("--tasks", "-t", help="task ids (comma-separated or repeated; default: the catalog's)"),
]
PoolsOpt = Annotated[list[str] | None, typer.Option("--pools", "-p", hidden=True)]  # deprecated: --tasks
WarehouseOpt = Annotated[
    str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…); shared by all nodes")
]
ForceOpt = Annotated[bool, typer.Option("--force", help="recompute units whose results already exist")]
SimilarityOpt = Annotated[list[str] | None, typer.Option(help="EvalRank: cos and/or l2 (default both)")]
TiesOpt = Annotated[str | None, typer.Option(hidden=True)]  # retired: every tie policy is stored
FilterOpt = Annotated[bool, typer.Option("--filter-other-positives", help="EvalRank: don't count x's other positives")]
CenterOpt = Annotated[
    bool,
    typer.Option(
        "--center/--no-center",
        help="EvalRank's protocol centres on the vocabulary mean (words) / the items' mean (sentences); "
        "--no-center is a documented variant",
    ),
]
QuickDownstreamOpt = Annotated[
    bool,
    typer.Option(
        "--quick-downstream",
        help="quick profile: downstream tasks train on the catalog's seeded sample of the big training sets "
        "(labelled a sample; default: every row, SentEval's protocol)",
    ),
]
FullDownstreamOpt = Annotated[
    bool, typer.Option("--full-downstream", hidden=True, help="the default now; accepted for old scripts")
]
DeviceOpt = Annotated[
    str | None, typer.Option(help="torch device of the encoders and the scorers (default: a worker's GPU if present)")
]
ExecutorOpt = Annotated[Executor, typer.Option(help="ray: worker actors on a Ray cluster; local: the in-process loop")]
AddressOpt = Annotated[
    str | None,
    typer.Option(help="Ray cluster: auto, ray://host:10001 or host:port (default: $RAY_ADDRESS, else a local Ray)"),
]
WorkersOpt = Annotated[
    int | None, typer.Option(min=1, help="Ray worker actors (default: one per GPU, else one per CPU)")
]


class RunFormat(StrEnum):
    text = "text"
    json = "json"


RunFormatOpt = Annotated[
    RunFormat,
    typer.Option(
        "--format",
        help="text: the summary on stderr only; json: also the summary as one JSON object on stdout (for scripts)",
    ),
]
NotifyOpt = Annotated[
    str | None,
    typer.Option(
        "--notify",
        metavar="CMD",
        help="a shell command run at the end with the run's summary as JSON on stdin (counts, failures, degenerate "
        "and thin units, wall time), also when units failed or the run was interrupted [default: "
        "$EVALFARM_NOTIFY, else the config file's notify]",
    ),
]
AttemptsOpt = Annotated[
    int, typer.Option(min=1, help="tries per unit (worker lost, load error, NaN) before it is recorded failed")
]

TIES_RETIRED = (
    f"--ties is no longer a run option: every rank metric is stored under all three tie policies ({', '.join(TIES)}) "
    "from one pass; pick one in SQL, e.g. "
    f"`evalfarm sql \"SELECT * FROM leaderboard WHERE ties = '{BOARD_TIES}'\"` (the boards' policy)"
)


@app.command()
def run(
    catalog: CatalogOpt = "zoo-starter",
    models: ModelsOpt = None,
    tasks: TasksOpt = None,
    pools: PoolsOpt = None,
    warehouse: WarehouseOpt = "warehouse",
    force: ForceOpt = False,
    similarity: SimilarityOpt = None,
    ties: TiesOpt = None,
    filter_other_positives: FilterOpt = False,
    center: CenterOpt = True,
    quick_downstream: QuickDownstreamOpt = False,
    full_downstream: FullDownstreamOpt = False,
    device: DeviceOpt = None,
    executor: ExecutorOpt = Executor(api.DEFAULT_EXECUTOR),
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    max_attempts: AttemptsOpt = 2,
    output_format: RunFormatOpt = RunFormat.text,
    notify: NotifyOpt = None,
) -> None:
    """Evaluate a catalog's models on its tasks into the warehouse; finished units are skipped.

    Exit status: 0 every unit done or skipped, 1 some units failed (the rest ran and is recorded), 2 a usage or
    configuration error (nothing ran), 3 interrupted (its Ray head lost: the same command resumes)."""
    if pools:
        typer.echo("warning: --pools is the old name of --tasks and goes in evalfarm 0.3; use --tasks", err=True)
        tasks = [*(tasks or []), *pools]
    if ties is not None:
        fail(TIES_RETIRED)
    if full_downstream:
        if quick_downstream:
            fail("--full-downstream and --quick-downstream contradict each other")
        typer.echo("note: --full-downstream is the default now (every training row); it will go", err=True)
    chosen: dict[str, Any] = {"similarities": tuple(sims)} if (sims := split(similarity)) else {}
    try:  # a bad --similarity is a usage error (2), said before anything runs
        options = api.RunOptions(
            center=center,
            filter_other_positives=filter_other_positives,
            quick_downstream=quick_downstream,
            device=device,
            **chosen,
        )
    except ValueError as exc:
        fail(str(exc))
    request = api.RunRequest(
        models=split(models), tasks=split(tasks), options=options, force=force, executor=executor.value,
        address=address, workers=workers, max_attempts=max_attempts,
    )  # fmt: skip
    as_json = output_format is RunFormat.json
    summary = _evaluate(
        catalog, warehouse, request, notify=notify, in_process=executor is Executor.local, json_out=as_json
    )
    print_summary(summary)
    if as_json:
        sys.stdout.write(json.dumps({"event": "summary", **summary.to_dict()}, default=str) + "\n")
    raise typer.Exit(summary.exit_code if summary.status in ("ok", "failed") else int(bool(summary.failed)))


def _evaluate(
    catalog: str,
    warehouse: str,
    request: api.RunRequest,
    *,
    notify: str | None,
    in_process: bool,
    json_out: bool = False,
) -> api.RunSummary:
    """:func:`evalfarm.api.run_request` with the live output; its errors as the CLI's exit codes: 2 for what stops a
    run before it starts, 3 for an interrupted run (which the same command resumes), 130 for Ctrl-C. A run with
    failed units returns its summary (the caller prints the failures and exits 1)."""
    resume = f"To resume, run the same command again (finished units are skipped): {again()}"
    try:
        with RunPrinter(json_out=sys.stdout if json_out else None) as printer:
            progress = printer.on_progress if in_process else None
            return api.run_request(
                request, catalog, warehouse=warehouse, notify=notify, on_event=printer.on_event, progress=progress
            )
    except api.EvaluationFailed as exc:
        return exc.summary
    except (api.TaskDataError, ValueError, ConnectionError, api.DeviceUnavailable, NotADirectoryError,
            api.LegacyWarehouse) as exc:  # fmt: skip
        fail(str(exc))  # CatalogError and ConfigError are ValueErrors; LegacyWarehouse names `warehouse migrate`
    except api.DamagedTable as exc:  # a table whose log cannot be trusted: nothing it names was touched
        fail(f"warehouse {warehouse}: {exc}. Nothing the table names was read, moved or deleted; `evalfarm verify` "
             "names it, docs/operations.md (\"A damaged table\") says how to repair it")  # fmt: skip
    except api.RunInterrupted as exc:  # recorded as interrupted; the same command resumes
        print_warnings(exc.summary.warnings)  # an interrupted run emits no warning events
        print_notified(exc.summary)
        _exit_promptly(f"{exc}. {resume}", code=3)
    except api.RayStartFailed as exc:
        local = again() if "--executor" in sys.argv else f"{again()} --executor local"
        fail_from(exc, f"{exc}. Run it without Ray: {local}; or run the same command again once the machine is "
                  f"less busy (finished units are skipped)", code=3)  # fmt: skip
    except KeyboardInterrupt:
        fail(f"interrupted. {resume}", 130)
    except api.WarehouseWriteError as exc:  # a full disk, no permission, a read-only mount: the path and the cause
        fail_from(exc, f"{exc}. {_write_hint(exc)}, then run the same command again (finished units are skipped): "
                  f"{again()}")  # fmt: skip
    except OSError as exc:  # a vanished file, a network file system gone
        fail_from(exc, f"{type(exc).__name__}: {exc}. {resume}")


def _write_hint(exc: OSError) -> str:
    """What to do about a warehouse that cannot be written, by the error's cause."""
    import errno

    if exc.errno == errno.ENOSPC:
        return "Free space on that disk (or give another --warehouse)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "Give this user write access to the warehouse folder (or give another --warehouse)"
    if exc.errno == errno.EROFS:
        return "Mount it writable (or give another --warehouse)"
    return "Make the warehouse writable (or give another --warehouse)"


def _exit_promptly(msg: str, code: int) -> NoReturn:
    """The message, then exit now: after a lost Ray head, Ray's own exit handler waits on the head that is gone
    (a driver once sat 6 minutes in interpreter shutdown). The run is recorded and its executor closed; what the
    exit handlers would remove (this run's Ray processes and token folder) the watchdog removes when this process
    ends. Without Ray in this process, an ordinary exit."""
    import os

    if "ray" not in sys.modules:
        fail(msg, code)
    try:
        fail(msg, code)
    except typer.Exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# -- submit ------------------------------------------------------------------------------------------------------
SpecArg = Annotated[
    Path, typer.Argument(help="YAML with one model entry, a list of them, or a small catalog with models:")
]
SharedWarehouseOpt = Annotated[
    str, typer.Option(help="warehouse directory that EVERY node of the cluster sees (shared storage)")
]
JobAddressOpt = Annotated[
    str | None,
    typer.Option(
        help="the Ray job API (dashboard) address (default: $RAY_API_SERVER_ADDRESS, else $RAY_ADDRESS, "
        "else http://127.0.0.1:8265)"
    ),
]
BaseCatalogOpt = Annotated[str, typer.Option(help="base catalog that `base:` ids and tasks refer to")]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="KEY=VALUE for the job (repeatable; EVALFARM_DATA=... sends another data folder than this machine's)",
    ),
]
ForwardDataOpt = Annotated[
    bool,
    typer.Option(
        "--forward-data/--no-forward-data",
        help="send this machine's data folder (EVALFARM_DATA, else the config file's data: `evalfarm config show`) "
        "as the job's EVALFARM_DATA; --no-forward-data: the job uses the cluster's own",
    ),
]
PipOpt = Annotated[list[str] | None, typer.Option("--pip", help="pip requirement to install for the job (repeatable)")]
RuntimeEnvOpt = Annotated[
    Path | None,
    typer.Option(
        "--runtime-env",
        help="YAML/JSON Ray runtime_env merged into the job's (pip, uv, conda, image_uri, env_vars, ...)",
    ),
]
CpusOpt = Annotated[
    float | None, typer.Option(min=0, help="CPUs reserved for the job's driver (ray job submit's option)")
]
GpusOpt = Annotated[
    float | None, typer.Option(min=0, help="GPUs reserved for the job's driver (ray job submit's option)")
]
TrustOpt = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="confirm that models with trust_remote_code: true may run their downloaded code on the cluster",
    ),
]
JobFolderOpt = Annotated[
    Path | None, typer.Option(help="write the job folder (its catalog) here and keep it (default: a temporary folder)")
]
WaitOpt = Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job's logs until it ends")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="show what would run; submit nothing")]
SubmissionIdOpt = Annotated[str | None, typer.Option(help="job id to use (default: generated)")]


@app.command()
def submit(
    model_spec: SpecArg,
    warehouse: SharedWarehouseOpt,
    address: JobAddressOpt = None,
    catalog: BaseCatalogOpt = "zoo-starter",
    env: EnvOpt = None,
    pip: PipOpt = None,
    runtime_env: RuntimeEnvOpt = None,
    entrypoint_num_cpus: CpusOpt = None,
    entrypoint_num_gpus: GpusOpt = None,
    trust_remote_code: TrustOpt = False,
    out: JobFolderOpt = None,
    wait: WaitOpt = True,
    dry_run: DryRunOpt = False,
    submission_id: SubmissionIdOpt = None,
    forward_data: ForwardDataOpt = True,
    tasks: TasksOpt = None,
) -> None:
    """Validate a new model spec locally, then evaluate it on a Ray cluster as a Ray job (every task of its level,
    or --tasks). The plan it prints says what the job gets (the data folder sent, every env var)."""
    address = api.job_address(address)
    try:
        plan = api.plan_submission(
            model_spec,
            warehouse=warehouse,
            catalog=catalog,
            env=env or [],
            pip=pip,
            runtime_env=runtime_env,
            submission_id=submission_id,
            trust_remote_code=trust_remote_code,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_num_gpus=entrypoint_num_gpus,
            out=out,
            forward_data=forward_data,
            tasks=split(tasks),
        )
    except api.SubmitError as exc:
        fail(str(exc))
    try:
        _show_plan(plan, address, dry_run=dry_run)
        if dry_run:
            plan.cleanup()  # a temporary job folder goes; an --out folder stays
            return
        job_id = api.submit_plan(plan, address=address)
    except api.SubmitError as exc:
        plan.cleanup()
        fail(str(exc))
    except BaseException:
        plan.cleanup()
        raise
    _follow(job_id, address, wait=wait)


def _show_plan(plan: api.SubmitPlan, address: str, *, dry_run: bool) -> None:
    """What the submission will do; for a dry run also the equivalent command, the job's catalog and whether it
    would be refused."""
    for line in api.render_plan(plan, address).splitlines():
        say(line, "bold red" if line.startswith("WARNING") else None)
    if not dry_run:
        return
    say(f"equivalent: {api.raw_command(plan, address)}")
    where = "--out folder" if plan.keep_workdir else "temporary folder, removed after this dry run: --out DIR keeps it"
    say(f"job folder: {plan.workdir} ({where})")
    say(f"--- {plan.catalog_file.name}: the job's catalog")
    sys.stdout.write(plan.catalog_file.read_text(encoding="utf-8"))
    try:
        api.check_submission(plan)
    except api.SubmitError as exc:
        say(f"this submission would be refused: {exc}", "bold red")
    console.print("dry run: nothing submitted")


def _follow(job_id: str, address: str, *, wait: bool) -> None:
    """Print the job id (stdout: scripts read it); then follow its logs to the end (exit 0 if it succeeded)."""
    sys.stdout.write(job_id + "\n")
    sys.stdout.flush()
    if not wait:
        console.print(f"submitted; follow with: ray job logs --address {address} --follow {job_id}", markup=False)
        return
    try:
        status = api.follow_job(job_id, address=address)
    except KeyboardInterrupt:
        console.print(f"\nstopped following; the job keeps running (ray job stop --address {address} {job_id})")
        raise typer.Exit(130) from None
    console.print(f"job {job_id}: {status}", style="green" if status == "SUCCEEDED" else "bold red")
    raise typer.Exit(0 if status == "SUCCEEDED" else 1)
