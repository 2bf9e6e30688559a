"""``evalfarm``: a thin typer shell over the Python API (runner, warehouse, catalog)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalfarm.api import DEFAULT_EXECUTOR

app = typer.Typer(
    help="Distributed batch evaluation of word and sentence embedding models (EvalRank and more).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
HELP = {"help_option_names": ["-h", "--help"]}  # -h works as --help on every command
catalog_app = typer.Typer(help="Inspect and check model catalogs.", no_args_is_help=True, context_settings=HELP)
app.add_typer(catalog_app, name="catalog")
config_app = typer.Typer(
    help="Show or set the settings the CLI remembers (data folder, warehouse, catalog) in .evalfarm.toml.",
    no_args_is_help=True,
    context_settings=HELP,
)
app.add_typer(config_app, name="config")
console = Console(stderr=True, soft_wrap=not sys.stderr.isatty())  # logs and pipes: never break a line


def _stdout_width() -> int:
    """The terminal's width; piped output: $COLUMNS if set, else 240 (files and pipes do not fold lines)."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    try:
        return max(20, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 240


out = Console(width=_stdout_width())


def _flags_read_as_flags() -> None:
    """typer's rich help prints a type after every flag (``--force <bool>``), which reads as if the flag took a
    value; a flag takes none, so it shows none (``--force``), as click's plain help does."""
    from typer import core

    base = getattr(core.TyperOption, "display_type_rich", None)
    if base is None or getattr(base, "_evalfarm", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        return base(self, ctx)

    display_type_rich._evalfarm = True  # type: ignore[attr-defined]
    core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_read_as_flags()


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
        print_table(columns, rows, title=title, width=out.width)


MIN_TEXT_WIDTH = 8
"""Narrowest a text column is cut to (with an ellipsis) before the table turns vertical."""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def print_table(columns: list[str], rows: list[dict[str, Any]], *, title: str | None, width: int) -> None:
    """A table that never folds a number: numbers keep their whole width; long text is cut with an ellipsis to fit
    ``width``; when even that does not fit (many columns in a narrow terminal), one ``column  value`` block per
    row (psql's ``\\x``), where nothing needs cutting."""
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    numeric = [
        any(_is_number(r.get(c)) for r in rows) and all(r.get(c) is None or _is_number(r.get(c)) for r in rows)
        for c in columns
    ]
    natural = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    frame = 2 * (len(columns) - 1)  # the table below: two spaces between columns, no outer border
    fixed = sum(w for w, num in zip(natural, numeric, strict=True) if num)
    texts = [i for i, num in enumerate(numeric) if not num]
    limits: dict[int, int] = {}
    if fixed + sum(natural[i] for i in texts) + frame > width:
        room = width - frame - fixed
        if room < sum(min(natural[i], MIN_TEXT_WIDTH) for i in texts):
            _print_vertical(columns, cells, title, width)
            return
        # water-filling: narrow columns keep their width, the wide ones share what is left equally
        left, open_cols = room, sorted(texts, key=lambda i: natural[i])
        while open_cols:
            share = left // len(open_cols)
            i = open_cols[0]
            if natural[i] <= share:
                limits[i] = natural[i]
                left -= natural[i]
                open_cols.pop(0)
            else:
                for j in open_cols:
                    limits[j] = max(1, share)
                break
    if title:  # its own line: a table's title would wrap to the table's width (a narrow table folds it)
        out.print(title, markup=False, highlight=False, style="italic")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i, c in enumerate(columns):
        if numeric[i]:
            t.add_column(c, justify="right", no_wrap=True, min_width=natural[i])
        else:
            t.add_column(c, no_wrap=True, overflow="ellipsis", max_width=limits.get(i))
    for row in cells:
        t.add_row(*row)
    out.print(t)


def _print_vertical(columns: list[str], cells: list[list[str]], title: str | None, width: int) -> None:
    """One ``column | value`` block per row; a value longer than the line goes on under its first line (cut at
    spaces where it has them), so no line is wider than ``width``."""
    import textwrap

    label = max(len(c) for c in columns)
    room = max(10, width - label - 3)
    lines = textwrap.wrap(title, width) if title else []
    for n, row in enumerate(cells, 1):
        lines.append(f"-[ row {n} ]" + "-" * max(0, min(width, 60) - len(f"-[ row {n} ]")))
        for c, v in zip(columns, row, strict=True):
            parts = [
                piece
                for line in (v.splitlines() or [""])
                for piece in (textwrap.wrap(line, room, break_on_hyphens=False) or [""])
            ]
            lines.append(f"{c.ljust(label)} | {parts[0]}")
            lines += [f"{'':{label}} | {p}" for p in parts[1:]]
    if lines:
        out.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e5 else f"{v:.4g}"
    return str(v)


def _fail(msg: str, code: int = 2) -> None:
    """``error: <msg>`` on stderr, unwrapped (one line per line of ``msg``, whatever the width), then exit."""
    console.print("[bold red]error:[/] ", end="")
    console.print(msg, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _again() -> str:
    """This very command line, to resume a run."""
    import shlex

    return shlex.join(["evalfarm", *sys.argv[1:]])


def _version_callback(value: bool) -> None:
    if value:
        from evalfarm import __version__

        sys.stdout.write(f"evalfarm {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="print evalfarm's version and exit"
        ),
    ] = False,
) -> None:
    """Distributed batch evaluation of word and sentence embedding models (EvalRank and more).

    Settings remembered in .evalfarm.toml (written by `make run`; see `evalfarm config --help`) supply the data
    folder and the default --warehouse and --catalog.
    """
    if ctx.invoked_subcommand == "config":  # `config set` must work even to repair a broken file
        return
    from evalfarm.config import ConfigError, apply_data_dir, load_config

    try:
        cfg = load_config()
    except ConfigError as exc:
        _fail(str(exc))
        return
    apply_data_dir(cfg)
    ctx.default_map = _config_defaults(cfg.values)


def _config_defaults(values: dict[str, str]) -> dict[str, Any]:
    """click's default_map from the config file: the remembered warehouse and catalog become option defaults."""
    wh = {"warehouse": values["warehouse"]} if "warehouse" in values else {}
    cat = {"catalog": values["catalog"]} if "catalog" in values else {}
    return {
        "run": {**wh, **cat},
        "sql": wh,
        "catalog": {"list": cat, "validate": cat},
    }


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
        typer.Option("--tasks", "-t", help="task ids (comma-separated or repeated; default: the catalog's)"),
    ] = None,
    pools: Annotated[list[str] | None, typer.Option("--pools", "-p", hidden=True)] = None,
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
    ] = Executor(DEFAULT_EXECUTOR),
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
    from evalfarm.device import DeviceUnavailable
    from evalfarm.outcomes import Status
    from evalfarm.runner import RunInterrupted, run_catalog
    from evalfarm.scorers.base import SIMILARITIES, RunOptions
    from evalfarm.taskdata.data import TaskDataError, data_dir
    from evalfarm.warehouse import WarehouseWriteError

    if pools:
        typer.echo("warning: --pools is the old name of --tasks and goes in evalfarm 0.3; use --tasks", err=True)
        tasks = [*(tasks or []), *pools]
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
            ready_once: set[str] = set()  # workers that were ready: a second worker-ready is a restarted one

            def on_progress(label: str, advance: int, total: int) -> None:  # local executor: embedding
                if label not in embed_bars:
                    embed_bars[label] = prog.add_task(f"  embed {label}", total=total)
                prog.advance(embed_bars[label], advance)

            def on_event(e: Any) -> None:
                if e.kind == "unit":
                    o = e.outcome
                    mark = {
                        Status.DONE: "[green]done",
                        Status.FAILED: "[red]FAILED",
                        Status.SKIPPED: "[dim]skipped",
                    }.get(o.status, f"[dim]{o.status}")
                    shown = ", ".join(f"{k} {v:.4g}" for k, v in list(o.summary.items())[:2]) if o.summary else ""
                    prog.console.print(
                        f"{mark}[/] {o.model} · {o.task} ({o.seconds:.1f}s)"
                        + (f" {shown}" if shown else "")
                        + (f" [red]{o.stage}: {escape(str(o.error))}" if o.error else "")
                        + (" [yellow]degenerate[/]" if getattr(o, "degenerate", None) else "")
                        + (f" [dim]({escape(o.detail)})" if o.status == Status.SKIPPED and o.detail else ""),
                        highlight=False,
                    )
                elif e.kind == "retry":
                    prog.console.print(
                        f"[yellow]retry[/] {e.job.label} (attempt {e.job.attempts + 1}): {escape(str(e.message))}"
                    )
                elif e.kind == "quarantined":
                    prog.console.print(f"[yellow]{escape(str(e.message))}[/]", highlight=False)
                elif e.kind == "worker-lost":
                    prog.console.print(f"[yellow]worker lost[/] {e.worker.name}: {escape(str(e.message))}")
                elif e.kind == "skipped":
                    prog.console.print(f"[dim]{e.message}[/]")
                elif e.kind == "warning":  # RunSummary.warnings among them: each is printed here, once
                    prog.console.print(f"[yellow]warning:[/] {escape(str(e.message))}", highlight=False)
                prog.update(line, description=e.progress.line())
                # without a live line (a log), the line is printed after each unit and whenever the workers change
                # after a loss: lost (alive / restarting), then back (restarted)
                revived = e.kind == "worker-ready" and e.worker.name in ready_once
                if e.kind == "worker-ready":
                    ready_once.add(e.worker.name)
                if not console.is_terminal and (e.kind in ("unit", "worker-lost") or revived):
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
    except (CatalogError, TaskDataError, ValueError, ConnectionError, DeviceUnavailable, NotADirectoryError) as exc:
        _fail(str(exc))
        return
    except RunInterrupted as exc:  # recorded as interrupted; the same command resumes
        for w in exc.summary.warnings:  # an interrupted run emits no warning events
            console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
        _fail(f"{exc}. To resume, run the same command again (finished units are skipped): {_again()}", code=3)
        return
    except KeyboardInterrupt:
        _fail(f"interrupted. To resume, run the same command again (finished units are skipped): {_again()}", 130)
        return
    except OSError as exc:  # an unwritable warehouse (WarehouseWriteError names the path), a vanished file
        _fail(str(exc) if isinstance(exc, WarehouseWriteError) else f"{type(exc).__name__}: {exc}")
        return
    c = summary.counts()
    where = f"{summary.executor}" + (f", {summary.workers} workers" if summary.executor == "ray" else "")
    extra = "".join(
        f", {n} {what}"
        for n, what in (
            (len(summary.degenerate), "degenerate"),
            (len(summary.quarantined), "files quarantined"),
            (len(summary.not_evaluated), "selected models not evaluated"),
        )
        if n
    )
    console.print(
        f"run {summary.run_id}: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed{extra} "
        f"in {summary.seconds:.1f}s ({where}) → {summary.warehouse}",
        highlight=False,
    )
    for q in summary.quarantined:
        console.print(f"[yellow]quarantined[/] {q.path}: {q.reason} → {q.moved_to}", highlight=False)
    if summary.not_evaluated:
        console.print(
            f"[yellow]not evaluated[/] (no selected task of their level): {', '.join(summary.not_evaluated)}",
            highlight=False,
        )
    if summary.degenerate:
        console.print(
            "[yellow]degenerate[/] (left off the leaderboard; `leaderboard_all` and the `quality` view show them):",
            highlight=False,
        )
        for o in summary.degenerate:
            console.print(f"  {o.model} · {o.task}: {o.degenerate}", highlight=False)
    if summary.failed:
        console.print("[bold red]failures:[/]")
        for o in summary.failed:
            console.print(f"  {o.model} · {o.task} [{o.stage}] {o.error}", markup=False, highlight=False)
        raise typer.Exit(1)


def view_docs() -> list[tuple[str, str]]:
    """(view, what it holds) for every view of ``sql/*.sql``, from the comment block that names it
    (``-- name: …``), else the comment right above its ``CREATE``."""
    import re

    from evalfarm.warehouse import sql_dir

    docs: list[tuple[str, str]] = []
    for path in sorted(sql_dir().glob("*.sql")):
        blocks: dict[str, str] = {}
        comment: list[str] = []
        last = ""
        for line in path.read_text(encoding="utf-8").splitlines():
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


def _first_sentence(text: str, limit: int = 72) -> str:
    """The first sentence of ``text``, cut at a word before ``limit`` characters (help lines stay on one line)."""
    cut = text.find(". ")
    text = text if cut < 0 else text[: cut + 1]
    if len(text) <= limit:
        return text
    return text[: text.rfind(" ", 0, limit - 1)].rstrip(",;:(") + " …"


def _sql_help() -> str:
    lines = [
        "Query the warehouse (read-only: one SELECT-like statement) and print the result.",
        "",
        "\b",
        "Views (sql/*.sql):",
    ]
    try:
        docs = view_docs()
    except OSError:  # pragma: no cover - an install without its SQL files
        docs = []
    width = max((len(n) for n, _ in docs), default=0)
    lines += [f"  {name.ljust(width)}  {_first_sentence(doc)}" for name, doc in docs]
    return "\n".join(lines)


@app.command(help=_sql_help())
def sql(
    query: Annotated[
        str, typer.Argument(help="one SELECT (or WITH / FROM / DESCRIBE / SHOW / SUMMARIZE) over the views")
    ],
    warehouse: Annotated[
        str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…), as `run` takes it")
    ] = "warehouse",
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    from evalfarm.warehouse import Warehouse

    try:
        wh = Warehouse(warehouse)
        table = wh.query(query)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        _fail(str(exc))
        return
    except Exception as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        return
    if wh.excluded:
        console.print(
            f"[yellow]warning:[/] {len(wh.excluded)} unreadable file(s) left out of the views (the next "
            "`evalfarm run` moves them to quarantine and recomputes their units):",
            highlight=False,
        )
        for q in wh.excluded:
            console.print(f"  {q.path}: {q.reason}", highlight=False, markup=False)
    print_rows(table.column_names, table.to_pylist(), format)


class Level(StrEnum):
    sentence = "sentence"
    word = "word"


class TiesChoice(StrEnum):
    optimistic = "optimistic"
    pessimistic = "pessimistic"
    realistic = "realistic"
    all = "all"


@app.command()
def correlations(
    level: Annotated[Level, typer.Option(help="which models: sentence, or word (downstream through their BoW)")] = (
        Level.sentence
    ),
    warehouse: Annotated[str, typer.Option(help="warehouse: a directory or a pyarrow URI, as `run` takes it")] = (
        "warehouse"
    ),
    format: Annotated[
        Format, typer.Option("--format", "-f", help="table: the paper's shape; csv / json: one row per cell")
    ] = Format.table,
    exclude_postprocessed: Annotated[
        bool,
        typer.Option("--exclude-postprocessed", help="leave out post-processed models and BoW over them (Table 11)"),
    ] = False,
    ties: Annotated[
        TiesChoice, typer.Option(help="EvalRank tie policy shown (optimistic: the paper's), or all")
    ] = TiesChoice.optimistic,
    intervals: Annotated[bool, typer.Option("--intervals", help="table: show the 95 % bootstrap interval")] = False,
    refresh: Annotated[
        bool, typer.Option("--refresh/--no-refresh", help="recompute missing or stale bootstrap intervals first")
    ] = True,
    resamples: Annotated[
        int, typer.Option(min=100, help="bootstrap resamples per cell (for intervals computed now; current kept)")
    ] = 1000,
    seed: Annotated[int, typer.Option(help="bootstrap seed (for intervals computed now)")] = 0,
) -> None:
    """Spearman's rho of each intrinsic evaluator against each downstream task across the warehouse's models."""
    from evalfarm.correlations import caption, correlation_table, format_cell, refresh_intervals

    try:
        if refresh:
            try:
                refresh_intervals(warehouse, n_resamples=resamples, seed=seed)
            except (FileNotFoundError, NotADirectoryError):
                raise
            except OSError as exc:  # a read-only warehouse: the view still answers, without new intervals
                console.print(f"[yellow]intervals not refreshed[/] ({exc}); showing the stored ones", markup=True)
        table = correlation_table(
            warehouse, level=level.value, exclude_postprocessed=exclude_postprocessed, ties=ties.value
        )
    except (FileNotFoundError, NotADirectoryError) as exc:
        _fail(str(exc))
        return
    if format is not Format.table:
        first = table.records[0] if table.records else {}
        columns = ["row", "column", "best", *[c for c in first if c not in ("row", "column", "best")]]
        print_rows(columns, table.records, format)
        for note in table.notes:
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        return
    t = Table(show_lines=False)
    t.add_column("intrinsic evaluator")
    for c in table.columns:
        t.add_column(c, justify="right")
    t.add_column("n", justify="right")
    for row in table.rows:
        cells = [table.cells.get((row, c)) for c in table.columns]
        texts = [format_cell(cell, intervals=intervals) for cell in cells]
        styled = [f"[bold]{x}[/]" if c is not None and c.best else x for x, c in zip(texts, cells, strict=True)]
        t.add_row(row, *styled, table.row_n(row))
    if table.rows:
        out.print(caption(table), markup=False, highlight=False, soft_wrap=True)
        out.print(t)
    for note in table.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(
    out_dir: Annotated[Path, typer.Option("--out", help="folder to write the report into (index.html + files)")],
    warehouse: Annotated[str, typer.Option(help="warehouse: a directory or a pyarrow URI, as `run` takes it")] = (
        "warehouse"
    ),
    figure_task: Annotated[
        str | None, typer.Option(help="downstream task that orders the models in the Figure-4 plots (default: sst2)")
    ] = None,
    hardest: Annotated[
        int, typer.Option(min=0, help="hardest EvalRank pairs listed per model, task and variant")
    ] = 10,
) -> None:
    """Write a static HTML report (no server, no network): leaderboards, correlations, per-model pages, provenance."""
    from evalfarm.report import build_report

    try:
        index = build_report(warehouse, out_dir, figure_task=figure_task, hardest=hardest)
    except (FileNotFoundError, NotADirectoryError) as exc:
        _fail(str(exc))
        return
    console.print(f"report: {index}")


def _with_models(cat: Any) -> Any:
    """``cat``, or a CatalogError naming its file when it has no models: a catalog with nothing to evaluate is not
    "ok" (``run`` refuses it too)."""
    from evalfarm.catalog.registry import CatalogError

    if not cat.models:
        raise CatalogError(
            f"{cat.path}: no models ({len(cat.tasks)} tasks): nothing to evaluate; add `models:` entries (a file of "
            "tasks only is for other catalogs to `include:`)"
        )
    return cat


@catalog_app.command("list")
def catalog_list(
    catalog: Annotated[str, typer.Option(help="catalog name or path")] = "zoo-starter",
    format: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    """List a catalog's models (and the pools each is evaluated on)."""
    from evalfarm.catalog.registry import CatalogError, load_catalog

    try:
        cat = _with_models(load_catalog(catalog))
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
        cat = _with_models(load_catalog(catalog))
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


# ---- config: remembered settings ----------------------------------------------------------------------------
@config_app.command("show")
def config_show(format: Annotated[Format, typer.Option("--format", "-f")] = Format.table) -> None:
    """Print the config file that applies here and what it sets (and EVALFARM_DATA, which wins over it)."""
    from evalfarm.config import KEYS, ConfigError, config_path, load_config

    path = config_path()
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        _fail(str(exc))
        return
    rows = [
        {"key": k, "value": cfg.values.get(k, ""), "from": str(path) if k in cfg.values else "(not set)"} for k in KEYS
    ]
    if "EVALFARM_DATA" in os.environ:
        rows[0] = {"key": "data", "value": os.environ["EVALFARM_DATA"], "from": "EVALFARM_DATA (wins over the file)"}
    print_rows(["key", "value", "from"], rows, format, title=f"config: {path or '(no file)'}")


@config_app.command("set")
def config_set(
    settings: Annotated[
        list[str], typer.Argument(help="KEY=VALUE pairs: data=DIR (or data= to download), warehouse=DIR, catalog=NAME")
    ],
    file: Annotated[
        Path | None,
        typer.Option("--file", help="the file to write (default: $EVALFARM_CONFIG, else ./.evalfarm.toml)"),
    ] = None,
) -> None:
    """Remember settings for later commands in this folder (and below); paths are stored absolute."""
    from evalfarm.config import ENV, FILE_NAME, ConfigError, write_config

    updates = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            _fail(f"expected KEY=VALUE, got {item!r} (keys: data, warehouse, catalog)")
        updates[key.strip()] = value.strip()
    target = file or (Path(os.environ[ENV]) if os.environ.get(ENV) else Path(FILE_NAME))
    try:
        cfg = write_config(target.expanduser(), updates)
    except ConfigError as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"cannot write {target}: {exc.strerror or exc}")
        return
    console.print(
        f"{cfg.path}: " + ", ".join(f"{k} = {v!r}" for k, v in cfg.values.items() if k in updates), highlight=False
    )


# ---- zoo: the local model zoo ----------------------------------------------------------------------------------
zoo_app = typer.Typer(
    help="Build the local model zoo (word vectors trained here + packaged models).",
    no_args_is_help=True,
    context_settings=HELP,
)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("build")
def zoo_build(
    out: Annotated[
        Path | None, typer.Option(help="cache folder to train into (default: EVALFARM_CACHE or ~/.cache/evalfarm)")
    ] = None,
    catalog_out: Annotated[
        Path | None,
        typer.Option(
            help="catalog to write (default: catalog/zoo-local.yaml in a source checkout; for an installed package "
            "the first EVALFARM_CATALOG_PATH folder, else <cache>/catalogs; with --quick: <out>/zoo-quick.yaml)"
        ),
    ] = None,
    quick: Annotated[bool, typer.Option(help="one tiny model per algorithm on a corpus slice (seconds)")] = False,
    catalog_only: Annotated[
        bool, typer.Option(help="write the catalog without training (models load after a build)")
    ] = False,
) -> None:
    """Train the zoo's missing word models (each once, cached by fingerprint) and write its catalog."""
    import os

    from evalfarm.cache import cache_dir
    from evalfarm.catalog.registry import generated_catalog_target
    from evalfarm.zoo import build_zoo, full_recipes, quick_recipes

    root = out.expanduser() if out is not None else cache_dir()
    target = None
    if catalog_out is None:
        if quick:
            catalog_out = root / "zoo-quick.yaml"
        else:
            target = generated_catalog_target("zoo-local.yaml")
            catalog_out = target.path
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
    if target is not None:
        console.print(f"catalog written to {target.path} ({target.why})", highlight=False)
        if not target.on_search_path:
            console.print(
                f"run it with --catalog {target.path}, or add {target.path.parent} to EVALFARM_CATALOG_PATH "
                "(then --catalog zoo-local finds it)",
                highlight=False,
            )
    if out is not None and os.environ.get("EVALFARM_CACHE") != str(root):
        console.print(f"load these models with EVALFARM_CACHE={root} (zoo sources resolve inside the cache)")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
