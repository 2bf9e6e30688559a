"""``evalfarm``: a thin typer shell over the Python API (runner, warehouse, catalog)."""

from __future__ import annotations

import csv
import io
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    help="Distributed batch evaluation of word and sentence embedding models (EvalRank and more).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
catalog_app = typer.Typer(help="Inspect and check model catalogs.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 240)


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def print_rows(columns: list[str], rows: list[dict[str, Any]], fmt: Format, title: str | None = None) -> None:
    if fmt is Format.json:
        sys.stdout.write(json.dumps(rows, default=str, indent=2) + "\n")
    elif fmt is Format.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        sys.stdout.write(buf.getvalue())
    else:
        t = Table(title=title, show_lines=False)
        for c in columns:
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(*[_fmt(r.get(c)) for c in columns])
        out.print(t)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e5 else f"{v:.4g}"
    return str(v)


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {msg}")
    raise typer.Exit(code)


def _version_callback(value: bool) -> None:
    if value:
        from evalfarm import __version__

        sys.stdout.write(f"evalfarm {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="print evalfarm's version and exit"
        ),
    ] = False,
) -> None:
    """Distributed batch evaluation of word and sentence embedding models (EvalRank and more)."""


class Executor(StrEnum):
    ray = "ray"
    local = "local"


@app.command()
def run(
    catalog: Annotated[str, typer.Option(help="catalog name (file stem under catalog/) or path")] = "zoo-starter",
    models: Annotated[
        list[str] | None, typer.Option("--models", "-m", help="model ids (comma-separated or repeated)")
    ] = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option("--tasks", "--pools", "-t", "-p", help="task ids (default: the catalog's; --pools: old name)"),
    ] = None,
    warehouse: Annotated[
        str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…); shared by all nodes")
    ] = "warehouse",
    force: Annotated[bool, typer.Option("--force", help="recompute units whose results already exist")] = False,
    similarity: Annotated[list[str] | None, typer.Option(help="EvalRank: cos and/or l2 (default both)")] = None,
    ties: Annotated[str | None, typer.Option(hidden=True)] = None,
    filter_other_positives: Annotated[
        bool, typer.Option("--filter-other-positives", help="EvalRank: don't count x's other positives")
    ] = False,
    center: Annotated[
        bool,
        typer.Option(
            "--center/--no-center",
            help="EvalRank's protocol centres on the vocabulary mean (words) / the items' mean (sentences); "
            "--no-center is a documented variant",
        ),
    ] = True,
    full_downstream: Annotated[
        bool,
        typer.Option(
            "--full-downstream",
            help="downstream tasks train on every row (default: the catalog's seeded sample of the big training sets)",
        ),
    ] = False,
    device: Annotated[str | None, typer.Option(help="torch device for scoring (default: cuda if present)")] = None,
    executor: Annotated[
        Executor, typer.Option(help="ray: worker actors on a Ray cluster; local: the in-process loop")
    ] = Executor.ray,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster: auto, ray://host:10001 or host:port (default: $RAY_ADDRESS, else a local Ray)"
        ),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Ray worker actors (default: one per GPU, else one per CPU)")
    ] = None,
    max_attempts: Annotated[
        int, typer.Option(min=1, help="tries per unit (worker lost, load error, NaN) before it is recorded failed")
    ] = 2,
) -> None:
    """Evaluate a catalog's models on its tasks into the warehouse; finished units are skipped."""
    from evalfarm.catalog.registry import CatalogError
    from evalfarm.pools.data import PoolDataError, data_dir
    from evalfarm.runner import run_catalog
    from evalfarm.scorers.base import SIMILARITIES, RunOptions

    if ties is not None:
        _fail(
            "--ties is no longer a run option: every rank metric is stored under all three tie policies (optimistic, "
            "pessimistic, realistic) from one pass; pick one in SQL, e.g. "
            "`evalfarm sql \"SELECT * FROM leaderboard WHERE ties = 'realistic'\"`"
        )
    try:
        data_dir()
        options = RunOptions(
            similarities=tuple(_split(similarity) or SIMILARITIES),  # type: ignore[arg-type]
            center=center,
            filter_other_positives=filter_other_positives,
            full_downstream=full_downstream,
            device=device,
        )
        with Progress(
            TextColumn("{task.description}"),
            console=console,
            transient=True,
            refresh_per_second=4,
            disable=not console.is_terminal,
        ) as prog:
            line = prog.add_task("planning")
            embed_bars: dict[str, Any] = {}

            def on_progress(label: str, advance: int, total: int) -> None:  # local executor: embedding
                if label not in embed_bars:
                    embed_bars[label] = prog.add_task(f"  embed {label}", total=total)
                prog.advance(embed_bars[label], advance)

            def on_event(e: Any) -> None:
                if e.kind == "unit":
                    o = e.outcome
                    mark = {"done": "[green]done", "failed": "[red]FAILED"}.get(str(o.status), str(o.status))
                    shown = ", ".join(f"{k} {v:.4g}" for k, v in list(o.summary.items())[:2]) if o.summary else ""
                    prog.console.print(
                        f"{mark}[/] {o.model} · {o.task} ({o.seconds:.1f}s)"
                        + (f" {shown}" if shown else "")
                        + (f" [red]{o.stage}: {o.error}" if o.error else ""),
                        highlight=False,
                    )
                elif e.kind == "retry":
                    prog.console.print(f"[yellow]retry[/] {e.task.label} (attempt {e.task.attempts + 1}): {e.message}")
                elif e.kind == "worker-lost":
                    prog.console.print(f"[yellow]worker lost[/] {e.worker.name}: {e.message}")
                elif e.kind == "skipped":
                    prog.console.print(f"[dim]{e.message}[/]")
                prog.update(line, description=e.progress.line())
                if not console.is_terminal and e.kind == "unit":
                    console.print(e.progress.line(), highlight=False)

            summary = run_catalog(
                catalog,
                warehouse,
                models=_split(models),
                tasks=_split(tasks),
                options=options,
                force=force,
                progress=on_progress if executor is Executor.local else None,
                executor=executor.value,
                address=address,
                workers=workers,
                max_attempts=max_attempts,
                on_event=on_event,
            )
    except (CatalogError, PoolDataError, ValueError, ConnectionError) as exc:
        _fail(str(exc))
        return
    c = summary.counts()
    where = f"{summary.executor}" + (f", {summary.workers} workers" if summary.executor == "ray" else "")
    console.print(
        f"run {summary.run_id}: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed "
        f"in {summary.seconds:.1f}s ({where}) → {summary.warehouse}"
    )
    if summary.failed:
        console.print("[bold red]failures:[/]")
        for o in summary.failed:
            console.print(f"  {o.model} · {o.task} [{o.stage}] {o.error}")
        raise typer.Exit(1)


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help="a SELECT over the views: metrics, leaderboard, ranks, models, runs, failures")
    ],
    warehouse: Annotated[
        str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…), as `run` takes it")
    ] = "warehouse",
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    """Query the warehouse (read-only) and print the result."""
    from evalfarm.warehouse import Warehouse

    try:
        table = Warehouse(warehouse).query(query)
    except (FileNotFoundError, PermissionError) as exc:
        _fail(str(exc))
        return
    except Exception as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        return
    print_rows(table.column_names, table.to_pylist(), format)


@catalog_app.command("list")
def catalog_list(
    catalog: Annotated[str, typer.Option(help="catalog name or path")] = "zoo-starter",
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    """List a catalog's models (and the pools each is evaluated on)."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    try:
        cat = load_catalog(catalog)
    except CatalogError as exc:
        _fail(str(exc))
        return
    rows = []
    for m in cat.models.values():
        src = next((s.source for s in cat.lineage(m.id) if s.source), None)
        rows.append(
            {
                "id": m.id,
                "level": m.level,
                "kind": cat.kind(m.id),
                "base": m.base or "",
                "pooling": m.pooling or "",
                "postprocess": m.postprocess.method if m.postprocess else "",
                "source": f"{src.type}:{src.ref}" if src else "",
                "spec_hash": cat.spec_hash(m.id),
                "tasks": ",".join(t.id for t in cat.tasks_for(m.id)),
            }
        )
    print_rows(list(rows[0]) if rows else ["id"], rows, format, title=f"{cat.name}: {len(rows)} models")


@catalog_app.command("validate")
def catalog_validate(
    catalog: Annotated[str, typer.Option(help="catalog name or path")] = "zoo-starter",
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    """Check a catalog offline: schema, references, pools; exit 1 with the file and entry on error."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    try:
        cat = load_catalog(catalog)
    except CatalogError as exc:
        _fail(str(exc), code=1)
        return
    rows = [
        {
            "catalog": cat.name,
            "path": str(cat.path),
            "models": len(cat.models),
            "tasks": len(cat.tasks),
            "status": "ok",
        }
    ]
    print_rows(list(rows[0]), rows, format)


@app.command()
def submit(
    model_spec: Annotated[
        Path, typer.Argument(help="YAML with one model entry, a list of them, or a small catalog with models:")
    ],
    warehouse: Annotated[
        str, typer.Option(help="warehouse directory that EVERY node of the cluster sees (shared storage)")
    ],
    address: Annotated[
        str | None,
        typer.Option(
            help="the Ray job API (dashboard) address (default: $RAY_API_SERVER_ADDRESS, else $RAY_ADDRESS, "
            "else http://127.0.0.1:8265)"
        ),
    ] = None,
    catalog: Annotated[str, typer.Option(help="base catalog that `base:` ids and pools refer to")] = "zoo-starter",
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            help="KEY=VALUE for the job (repeatable); local EVALFARM_DATA / EVALFARM_CACHE are NOT forwarded, "
            "pass them here to override the cluster's",
        ),
    ] = None,
    pip: Annotated[
        list[str] | None, typer.Option("--pip", help="pip requirement to install for the job (repeatable)")
    ] = None,
    runtime_env: Annotated[
        Path | None,
        typer.Option(
            "--runtime-env",
            help="YAML/JSON Ray runtime_env merged into the job's (pip, uv, conda, image_uri, env_vars, ...)",
        ),
    ] = None,
    entrypoint_num_cpus: Annotated[
        float | None, typer.Option(min=0, help="CPUs reserved for the job's driver (ray job submit's option)")
    ] = None,
    entrypoint_num_gpus: Annotated[
        float | None, typer.Option(min=0, help="GPUs reserved for the job's driver (ray job submit's option)")
    ] = None,
    trust_remote_code: Annotated[
        bool,
        typer.Option(
            "--trust-remote-code",
            help="confirm that models with trust_remote_code: true may run their downloaded code on the cluster",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="write the job folder (its catalog) here and keep it (default: a temporary folder)"),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job's logs until it ends")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would run; submit nothing")] = False,
    submission_id: Annotated[str | None, typer.Option(help="job id to use (default: generated)")] = None,
) -> None:
    """Validate a new model spec locally, then evaluate it on a Ray cluster as a Ray job (all its pools)."""
    from evalfarm.submit import (
        SubmitError,
        check_remote_code,
        default_address,
        follow_job,
        load_runtime_env,
        parse_env,
        plan_submission,
        raw_command,
        render_plan,
    )
    from evalfarm.submit import submit_plan as _submit_plan

    address = address or default_address()
    try:
        plan = plan_submission(
            model_spec,
            warehouse=warehouse,
            catalog=catalog,
            env=parse_env(env or []),
            pip=pip or None,
            runtime_env=load_runtime_env(runtime_env) if runtime_env is not None else None,
            runtime_env_source=f"--runtime-env {runtime_env}",
            submission_id=submission_id,
            trust_remote_code=trust_remote_code,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_num_gpus=entrypoint_num_gpus,
            out=out,
        )
    except SubmitError as exc:
        _fail(str(exc), code=2)
        return

    def say(text: str, style: str | None = None) -> None:
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    try:
        for line in render_plan(plan, address).splitlines():
            say(line, "bold red" if line.startswith("WARNING") else None)
        if dry_run:
            say(f"equivalent: {raw_command(plan, address)}")
            where = "--out folder" if plan.keep_workdir else "temporary folder, kept for the command above"
            say(f"job folder: {plan.workdir} ({where}; remove it when done)")
            say(f"--- {plan.catalog_file.name}: the job's catalog")
            sys.stdout.write(plan.catalog_file.read_text(encoding="utf-8"))
            try:
                check_remote_code(plan)
            except SubmitError as exc:
                say(f"this submission would be refused: {exc}", "bold red")
            console.print("dry run: nothing submitted")
            return
        job_id = _submit_plan(plan, address)
    except SubmitError as exc:
        plan.cleanup()
        _fail(str(exc), code=2)
        return
    except BaseException:
        plan.cleanup()
        raise
    sys.stdout.write(job_id + "\n")
    sys.stdout.flush()
    if not wait:
        console.print(f"submitted; follow with: ray job logs --address {address} --follow {job_id}", markup=False)
        return
    try:
        status = follow_job(address, job_id)
    except KeyboardInterrupt:
        console.print(f"\nstopped following; the job keeps running (ray job stop --address {address} {job_id})")
        raise typer.Exit(130) from None
    console.print(f"job {job_id}: {status}", style="green" if status == "SUCCEEDED" else "bold red")
    raise typer.Exit(0 if status == "SUCCEEDED" else 1)


# ---- zoo: the local model zoo ----------------------------------------------------------------------------------
zoo_app = typer.Typer(
    help="Build the local model zoo (word vectors trained here + packaged models).", no_args_is_help=True
)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("build")
def zoo_build(
    out: Annotated[
        Path | None, typer.Option(help="cache folder to train into (default: EVALFARM_CACHE or ~/.cache/evalfarm)")
    ] = None,
    catalog_out: Annotated[
        Path | None,
        typer.Option(help="catalog to write (default: catalog/zoo-local.yaml; with --quick: <out>/zoo-quick.yaml)"),
    ] = None,
    quick: Annotated[bool, typer.Option(help="one tiny model per algorithm on a corpus slice (seconds)")] = False,
    catalog_only: Annotated[
        bool, typer.Option(help="write the catalog without training (models load after a build)")
    ] = False,
) -> None:
    """Train the zoo's missing word models (each once, cached by fingerprint) and write its catalog."""
    import os

    from evalfarm.cache import cache_dir
    from evalfarm.catalog.registry import catalog_dir
    from evalfarm.zoo import build_zoo, full_recipes, quick_recipes

    root = out.expanduser() if out is not None else cache_dir()
    if catalog_out is None:
        catalog_out = root / "zoo-quick.yaml" if quick else catalog_dir() / "zoo-local.yaml"
    recipes = quick_recipes() if quick else full_recipes()
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as prog:
            task = prog.add_task("zoo build", total=len(recipes))

            def on_progress(model_id: str, built: Any) -> None:
                if built is None:
                    prog.update(task, description=f"training {model_id}")
                    return
                prog.advance(task)
                mark = f"[green]trained[/] ({built.seconds:.1f}s)" if built.trained else "[dim]cached[/]"
                prog.console.print(f"{mark} {model_id} · {built.fingerprint}")

            report = build_zoo(
                cache=root,
                recipes=recipes,
                catalog_out=catalog_out,
                quick=quick,
                progress=on_progress,
                train=not catalog_only,
            )
            prog.update(task, description="zoo build")
    except (FileNotFoundError, KeyError, ValueError) as exc:
        _fail(str(exc))
        return
    console.print(
        f"zoo: {len(report.trained)} trained, {len(report.skipped)} already built, in {report.seconds:.1f}s "
        f"→ {root / 'zoo'}; catalog {report.catalog}"
    )
    if out is not None and os.environ.get("EVALFARM_CACHE") != str(root):
        console.print(f"load these models with EVALFARM_CACHE={root} (zoo sources resolve inside the cache)")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
