"""The commands that read the warehouse: ``evalfarm sql``, ``evalfarm correlations``, ``evalfarm report``; each a
client of :mod:`evalfarm.api`, which resolves the warehouse the same way for all three."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from evalfarm import api
from evalfarm.analysis_defaults import BOOTSTRAP_SEED, INTERVAL_RESAMPLES
from evalfarm.cli.app import app, fail
from evalfarm.cli.rendering import (
    Format,
    console,
    out,
    print_arrow,
    print_comparisons,
    print_correlations,
    print_rows,
    say,
)
from evalfarm.ranking import BOARD_TIES, PAPER_TIES, TIES, TiesOrAll, check_ties

WarehouseOpt = Annotated[
    str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…), as `run` takes it")
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f")]


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
        docs = api.view_docs()
    except OSError:  # pragma: no cover - an install without its SQL files
        docs = []
    width = max((len(n) for n, _ in docs), default=0)
    lines += [f"  {name.ljust(width)}  {_first_sentence(doc)}" for name, doc in docs]
    return "\n".join(lines)


# long: a typer command: its signature is its options (one annotated parameter with its help each)
@app.command(help=_sql_help())
def sql(
    query: Annotated[
        str, typer.Argument(help="one SELECT (or WITH / FROM / DESCRIBE / SHOW / SUMMARIZE) over the views")
    ],
    warehouse: WarehouseOpt = "warehouse",
    format: FormatOpt = Format.table,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="stop the query after this many seconds (0: no limit) [default: $EVALFARM_SQL_TIMEOUT, else the "
            "config file's sql_timeout, else 300]"
        ),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            help="DuckDB's memory cap, e.g. 16GB [default: $EVALFARM_SQL_MEMORY_LIMIT, else the config file's "
            "sql_memory_limit, else 4GB]"
        ),
    ] = None,
    max_rows: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="stop when the result passes this many rows (0: no limit) [default: $EVALFARM_SQL_MAX_ROWS, else "
            "the config file's sql_max_rows, else 1000000]",
        ),
    ] = None,
    max_bytes: Annotated[
        str | None,
        typer.Option(
            help="stop when the result passes this size, e.g. 4GB (0: no limit) [default: $EVALFARM_SQL_MAX_BYTES, "
            "else the config file's sql_max_bytes, else 1GB]"
        ),
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="read the warehouse as it was after a run (its id) or at a time (ISO 8601, e.g. 2026-11-28T03:00Z)",
        ),
    ] = None,
) -> None:
    try:
        wh = api.open_warehouse(warehouse)
        table = api.query(
            query,
            warehouse=wh,
            timeout_s=timeout,
            memory_limit=memory_limit,
            max_rows=max_rows,
            max_bytes=max_bytes,
            as_of=as_of,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError, TimeoutError, MemoryError, ValueError) as exc:
        fail(str(exc))
    except Exception as exc:
        fail(f"{type(exc).__name__}: {exc}")
    if wh.excluded:
        console.print(
            f"[yellow]warning:[/] {len(wh.excluded)} unreadable file(s) left out of the views (the next "
            "`evalfarm run` moves them to quarantine and recomputes their units):",
            highlight=False,
        )
        for q in wh.excluded:
            console.print(f"  {q.path}: {q.reason}", highlight=False, markup=False)
    print_arrow(table, format)  # a chunk of rows at a time: never the whole result as Python objects


class Level(StrEnum):
    sentence = "sentence"
    word = "word"


LevelOpt = Annotated[
    Level | None,
    typer.Option(
        help="which models: sentence, or word (downstream through their BoW); the paper's --table fixes its own",
        show_default="sentence",
    ),
]
CellsFormatOpt = Annotated[
    Format, typer.Option("--format", "-f", help="table: the paper's shape; csv / json: one row per cell")
]
ExcludeOpt = Annotated[
    bool, typer.Option("--exclude-postprocessed", help="leave out post-processed models and BoW over them (Table 11)")
]
# the choices are evalfarm.ranking's policies, plus all (mypy cannot read members built from a tuple)
TiesChoice = StrEnum("TiesChoice", [(t, t) for t in (*TIES, "all")])  # type: ignore[misc]
TiesOpt = Annotated[
    TiesChoice,
    typer.Option(help=f"EvalRank tie policy shown ({PAPER_TIES}: the paper's; {BOARD_TIES}: the boards'), or all"),
]
IntervalsOpt = Annotated[bool, typer.Option("--intervals", help="table: show the 95 % bootstrap interval")]
RefreshOpt = Annotated[
    bool,
    typer.Option(
        "--refresh/--no-refresh",
        help="recompute missing or stale bootstrap intervals (and --compare's comparisons) first, storing them in "
        "the warehouse; --no-refresh only reads",
    ),
]
ResamplesOpt = Annotated[
    int, typer.Option(min=100, help="bootstrap resamples per cell (for intervals computed now; current kept)")
]
SeedOpt = Annotated[int, typer.Option(help="bootstrap seed (for intervals computed now)")]
DiagnosticsOpt = Annotated[
    bool,
    typer.Option(
        "--diagnostics",
        help="also the diagnostics (geometry, AG2016, ...) against each downstream task, and against EvalRank",
    ),
]


class Layout(StrEnum):
    evalfarm = "evalfarm"
    paper = "paper"


LayoutOpt = Annotated[
    Layout,
    typer.Option(
        help="paper: the EvalRank paper's rows and columns in its order, rho x 100, EvalRank MRR / Hits@1 / Hits@3"
    ),
]
PublishedOpt = Annotated[
    bool, typer.Option("--published", help="paper layout: the paper's published cell beside each measured one")
]
PaperTableOpt = Annotated[
    str | None,
    typer.Option("--table", help="paper layout: one of the paper's tables, 3, 4, 6, 7, 10 (post-processing) or 11"),
]
CoverageOpt = Annotated[
    str | None,
    typer.Option(
        "--coverage",
        help="paper layout: Table 3 over the models of this coverage variant (evalfarm zoo coverage --name), "
        "protocol / coverage-controlled side by side",
    ),
]
CompareOpt = Annotated[
    str | None,
    typer.Option(
        "--compare",
        metavar="EVALUATOR",
        help="test each other row's difference from EVALUATOR per task (paired bootstrap over models and over model "
        "families, 95 % interval, p, Holm across the table) and print how many models would tell it from the best "
        "similarity row; EVALUATOR: evalrank (EvalRank MRR, cos: the usual choice), a row label as printed, or a "
        "task with one row. Paper layout: --compare evalrank marks the cells that differ from EvalRank MRR. WRITES "
        "to the warehouse: the comparisons it computes are stored (table correlation_diff) for the next reader, as "
        "the intervals are; with --no-refresh it only reads what is stored (run it on a copy of a warehouse you "
        "must not write)",
    ),
]
DownstreamVariantOpt = Annotated[
    str | None, typer.Option(help="paper layout: the downstream variant (default: the one most cells have)")
]


# long: a typer command: its signature is its options (one parameter each), the body a dispatch over them
@app.command()
def correlations(
    level: LevelOpt = None,
    warehouse: WarehouseOpt = "warehouse",
    format: CellsFormatOpt = Format.table,
    exclude_postprocessed: ExcludeOpt = False,
    ties: TiesOpt = TiesChoice(PAPER_TIES),
    intervals: IntervalsOpt = False,
    refresh: RefreshOpt = True,
    resamples: ResamplesOpt = INTERVAL_RESAMPLES,
    seed: SeedOpt = BOOTSTRAP_SEED,
    diagnostics: DiagnosticsOpt = False,
    layout: LayoutOpt = Layout.evalfarm,
    published: PublishedOpt = False,
    downstream_variant: DownstreamVariantOpt = None,
    paper_table: PaperTableOpt = None,
    coverage: CoverageOpt = None,
    compare: CompareOpt = None,
) -> None:
    """Spearman's rho of each intrinsic evaluator against each downstream task across the warehouse's models."""
    policy = check_ties(ties.value, allow_all=True)  # typer has checked it: this narrows its type
    # --level left out: the API's default (or, in the paper layout, the level of the paper's table)
    chosen: dict[str, Any] = {"level": level.value} if level is not None else {}
    if coverage is not None:
        if compare is not None:
            fail("--compare is for the evalfarm and paper layouts, not --coverage")
        _coverage_correlations(layout, warehouse, policy, coverage, downstream_variant)
        return
    if layout is Layout.paper:
        if compare not in (None, "evalrank"):
            fail("the paper layout compares with EvalRank MRR only: use --compare evalrank")
        request = dict(exclude_postprocessed=exclude_postprocessed, ties=policy, downstream_variant=downstream_variant,
                       compare=compare is not None, resamples=resamples, seed=seed, **chosen)  # fmt: skip
        _paper_correlations(warehouse, format, published, paper_table, request)
        return
    if published or paper_table:
        fail("--published and --table lay out the paper's cells: add --layout paper")
    try:
        comparisons = None
        if compare is not None:  # first: a request the API refuses fails before the intervals are computed
            comparisons = api.correlation_comparisons(
                warehouse=warehouse, exclude_postprocessed=exclude_postprocessed, ties=policy, compare=compare,
                refresh=refresh, seed=seed, **chosen,
            )  # fmt: skip
        table = api.correlation_table(
            warehouse=warehouse, exclude_postprocessed=exclude_postprocessed, ties=policy, refresh=refresh,
            resamples=resamples, seed=seed, diagnostics=diagnostics, **chosen,
        )  # fmt: skip
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        fail(str(exc))
    if comparisons is None:
        print_correlations(table, format, intervals=intervals)
        return
    if format is Format.table:
        print_correlations(table, format, intervals=intervals)
    print_comparisons(comparisons, format)


def _coverage_correlations(
    layout: Layout, warehouse: str, ties: TiesOrAll, name: str, downstream_variant: str | None
) -> None:
    """``correlations --layout paper --coverage NAME``: Table 3 both ways over the variant's compared models."""
    if layout is not Layout.paper:
        fail("--coverage lays out the paper's Table 3 both ways: add --layout paper")
    policies = list(TIES) if ties == "all" else [ties]
    try:
        for policy in policies:
            table = api.paper_coverage_table(
                warehouse=warehouse, name=name, ties=policy, downstream_variant=downstream_variant
            )
            out.print(table.render(), markup=False, highlight=False, soft_wrap=True)
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        fail(str(exc))


def _paper_correlations(
    warehouse: str, format: Format, published: bool, paper_table: str | None, request: dict[str, Any]
) -> None:
    """``correlations --layout paper``: plain text (table), or one row per cell (csv / json); with ``--compare``,
    cells that differ significantly from EvalRank MRR marked, and the power lines. ``request``: the options
    :func:`evalfarm.api.paper_correlation_table` takes (whose rules refuse a contradictory one); ``--table 10``
    is :func:`evalfarm.api.paper_table10`'s."""
    try:
        if paper_table == "10":
            t10 = api.paper_table10(warehouse=warehouse, downstream_variant=request["downstream_variant"])
            out.print(t10.render(), markup=False, highlight=False, soft_wrap=True)
            return
        table = api.paper_correlation_table(warehouse=warehouse, table=paper_table, **request)
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        fail(str(exc))
    if format is Format.table:
        out.print(api.paper_text(table, published=published), markup=False, highlight=False, soft_wrap=True)
        return
    _print_paper_rows(table, format, published=published, compare=request["compare"])


def _print_paper_rows(table: api.PaperTable, format: Format, *, published: bool, compare: bool) -> None:
    """The paper layout as one row per cell (csv / json), its caption, notes and power lines on stderr."""
    rows = [
        {
            "row": r,
            "column": c,
            "rho_x100": rho,
            "n_models": n,
            **({"published": pub} if published else {}),
            **({"differs_from_compared": bool(table.marks.get((r, c)))} if compare else {}),
        }
        for (r, c), (rho, n, pub) in table.cells.items()
    ]
    print_rows(list(rows[0]), rows, format)
    say(f"note: {table.caption()}")
    for note in table.notes:
        say(f"note: {note}")
    for line in table.power:
        say(f"power: {line}")


ReportOutOpt = Annotated[Path, typer.Option("--out", help="folder to write the report into (index.html + files)")]
FigureTaskOpt = Annotated[
    str | None,
    typer.Option(help="downstream task that orders the models in the Figure-4 plots (default: mr and sst2)"),
]
HardestOpt = Annotated[int, typer.Option(min=0, help="hardest EvalRank pairs listed per model, task and variant")]


@app.command()
def report(
    out_dir: ReportOutOpt,
    warehouse: WarehouseOpt = "warehouse",
    figure_task: FigureTaskOpt = None,
    hardest: HardestOpt = 10,
) -> None:
    """Write a static HTML report (no server, no network): leaderboards, correlations, per-model pages, provenance."""
    try:
        index = api.build_report(out_dir, warehouse=warehouse, figure_task=figure_task, hardest=hardest)
    except (FileNotFoundError, NotADirectoryError) as exc:
        fail(str(exc))
    console.print(f"report: {index}")


RunIdArg = Annotated[
    str | None, typer.Argument(help="the run (default: the newest running one, else the newest)", show_default=False)
]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="show it again every --every seconds until the run ends")
]
EveryOpt = Annotated[float, typer.Option(min=0.5, help="seconds between two looks with --watch")]


@app.command()
def status(
    run_id: RunIdArg = None,
    warehouse: WarehouseOpt = "warehouse",
    format: FormatOpt = Format.table,
    watch: WatchOpt = False,
    every: EveryOpt = 5.0,
) -> None:
    """What a run is doing now, read from the warehouse (its heartbeat, units and failures), so it works for a run
    in another shell, on another machine or in a Ray job: units and texts done, each worker, the slowest unit,
    failures, the ETA. --format json: one JSON object (a line each look with --watch)."""
    import json
    import sys

    def show(st: Any) -> None:
        if format is Format.json:
            sys.stdout.write(json.dumps(st.to_dict(), default=str) + "\n")
            sys.stdout.flush()
            return
        if watch and out.is_terminal:
            out.clear()
        elif watch:
            out.print("")
        for line in st.lines():
            out.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        wh = api.open_warehouse(warehouse)
        if watch:
            api.watch_run(show, run_id, warehouse=wh, every=every)
        else:
            show(api.run_status(run_id, warehouse=wh))
    except (FileNotFoundError, NotADirectoryError, api.NoRun) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


ModelFilterOpt = Annotated[str | None, typer.Option("--model", "-m", help="check only this model's result files")]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="files no manifest names (written before manifests existed) fail too")
]


DeepOpt = Annotated[
    bool,
    typer.Option(
        "--deep",
        help="also check the numbers: each against the others of its unit, EvalRank's against its ranks table, "
        "and --sample units scored again from their stored embeddings",
    ),
]
SampleOpt = Annotated[
    int | None, typer.Option(min=0, help="--deep: units scored again from their stored embeddings [default: 2]")
]
VerifyCatalogOpt = Annotated[
    str | None, typer.Option(help="--deep: the catalog whose tasks the sample is scored on [default: the settings']")
]


@app.command()
def verify(
    warehouse: WarehouseOpt = "warehouse",
    model: ModelFilterOpt = None,
    strict: StrictOpt = False,
    format: FormatOpt = Format.table,
    deep: DeepOpt = False,
    sample: SampleOpt = None,
    catalog: VerifyCatalogOpt = None,
) -> None:
    """Check every result file against the content hashes its run recorded and its fingerprint; exit 1 on a mismatch.

    Reports files modified after their run wrote them, deleted, or damaged; files written before manifests existed
    are "unrecorded" (an error with --strict). --deep checks what the numbers say too: a writer who rewrote a result
    file and its manifest is found when the number contradicts its unit's others, its detail table or its stored
    embeddings (docs/operations.md says what it cannot catch). Rerun the units it names with `evalfarm run --force`.
    """
    try:
        result = api.verify(warehouse=warehouse, model=model, strict=strict, deep=deep, sample=sample, catalog=catalog)
    except (FileNotFoundError, PermissionError, NotADirectoryError, TimeoutError, MemoryError) as exc:
        fail(str(exc))
    columns = ["problem", "path", "model", "task", "detail"]
    if format is not Format.table:  # machine-readable: everything a finding holds
        columns += ["table", "fingerprint"]
    rows = [{c: getattr(f, c) for c in columns} for f in result.findings]
    if rows or format is not Format.table:
        print_rows(columns, rows, format)
    counts = ", ".join(f"{n} {p}" for p, n in sorted(result.counts().items()))
    verdict = "ok" if result.ok else "FAILED"
    console.print(
        f"verify {verdict}: {result.verified} of {result.checked} result file(s) match their manifests"
        + (f"; {counts}" if counts else ""),
        highlight=False,
        markup=False,
    )
    if result.deep is not None:
        d = result.deep
        console.print(
            f"deep: {d.numbers} current number(s) checked against each other, {d.from_ranks} recomputed from the "
            f"ranks table, {len(d.recomputed_units)} unit(s) scored again from their stored embeddings",
            highlight=False,
            markup=False,
        )
        for line in d.recomputed_units:
            console.print(f"  recomputed {line}", highlight=False, markup=False)
        for line in d.skipped_units:
            console.print(f"  not recomputed {line}", highlight=False, markup=False)
    if not result.ok:
        units = sorted(result.untrusted_units())
        if units:
            models = ",".join(sorted({m for m, _, _ in units}))
            tasks = ",".join(sorted({t for _, t, _ in units}))
            console.print(
                f"recompute them: evalfarm run --force --models {models} --tasks {tasks}",
                highlight=False,
                markup=False,
            )
        raise typer.Exit(1)
