"""The warehouse's history and upkeep: ``evalfarm diff`` (what moved between two runs) and ``evalfarm warehouse``
(``info``, ``compact``, ``vacuum``, ``migrate``); each a client of :mod:`evalfarm.api`."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from evalfarm import api
from evalfarm.cli.app import _group, app, fail
from evalfarm.cli.rendering import Format, console, print_rows

warehouse_app = _group("Look after a warehouse: its layout and history, compaction, retention, migration.")
app.add_typer(warehouse_app, name="warehouse")

WarehouseOpt = Annotated[
    str, typer.Option(help="warehouse: a directory or a pyarrow URI (s3://…, gs://…), as `run` takes it")
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f")]
ERRORS = (FileNotFoundError, PermissionError, NotADirectoryError, ValueError, FileExistsError, OSError, RuntimeError)

DIFF_COLUMNS = ["reason", "model", "task", "scorer", "subset", "variant", "ties", "metric", "value_a", "value_b",
                "change", "fingerprint_a", "fingerprint_b"]  # fmt: skip


@app.command()
def diff(
    run_a: Annotated[str | None, typer.Argument(help="the earlier run's id [default: the second newest run]")] = None,
    run_b: Annotated[str | None, typer.Argument(help="the later run's id [default: the newest run]")] = None,
    warehouse: WarehouseOpt = "warehouse",
    tolerance: Annotated[
        float | None,
        typer.Option(
            help="relative change below which a value counts as unchanged (a sum in another order) [default: 1e-9]",
            show_default=False,
        ),
    ] = None,
    primary: Annotated[bool, typer.Option("--primary", help="only the primary metrics (the boards' numbers)")] = False,
    format: FormatOpt = Format.table,
) -> None:
    """What moved between two runs: every value new, gone or different, with the reason (new model, spec, data or
    scorer version changed, or nondeterminism: the same fingerprint gave another number). Exit 1 when a value moved
    under an unchanged fingerprint, 0 otherwise."""
    try:
        result = api.diff(run_a, run_b, warehouse=warehouse, tolerance=tolerance)
    except ERRORS as exc:
        fail(str(exc))
    rows = [r for r in result.rows if r["is_primary"] or not primary]
    if format is Format.json:
        body = {**result.to_dict(), "changes": rows}
        sys.stdout.write(json.dumps(body, default=str, indent=2) + "\n")
    elif rows or format is Format.csv:
        print_rows(DIFF_COLUMNS, [{c: r.get(c) for c in DIFF_COLUMNS} for r in rows], format)
    counts = ", ".join(f"{n} {reason}" for reason, n in result.counts().items())
    console.print(
        f"diff {result.run_a} -> {result.run_b}: " + (f"{len(result.rows)} value(s) moved ({counts})" if result.rows
                                                     else "nothing moved"),
        highlight=False, markup=False,
    )  # fmt: skip
    if result.nondeterministic:
        console.print(
            f"[bold red]{len(result.nondeterministic)} value(s) moved under an unchanged fingerprint[/]: the same "
            "inputs gave another number (nondeterminism; see the `changes` view)",
            highlight=False,
        )
        raise typer.Exit(1)


@warehouse_app.command("info")
def info(warehouse: WarehouseOpt = "warehouse", format: FormatOpt = Format.table) -> None:
    """The warehouse's layout and, per table, its version, files (and how many are small), rows and size."""
    try:
        found = api.warehouse_info(warehouse)
    except ERRORS as exc:
        fail(str(exc))
    console.print(f"warehouse {found.uri}: layout {found.layout} ({found.format})", highlight=False, markup=False)
    if found.hint is not None:
        console.print(found.hint, highlight=False, markup=False)
    print_rows(["table", "version", "files", "small_files", "bytes"], found.tables, format)


@warehouse_app.command("compact")
def compact(
    warehouse: WarehouseOpt = "warehouse",
    table: Annotated[list[str] | None, typer.Option("--table", "-t", help="only this table (repeatable)")] = None,
    min_files: Annotated[int, typer.Option(min=2, help="leave a table with fewer small files than this")] = 2,
) -> None:
    """Merge each table's small files (a file per unit and run) into files of up to 64 MB sorted by model: the same
    rows, fewer files to open. Safe while a run appends."""
    try:
        done = api.compact_warehouse(warehouse=warehouse, tables=table, min_files=min_files)
    except ERRORS as exc:
        fail(str(exc))
    for c in done:
        console.print(f"{c.table}: {c.files_before} -> {c.files_after} files ({c.merged} merged)", highlight=False)
    if not done:
        console.print("nothing to compact", highlight=False)


@warehouse_app.command("vacuum")
def vacuum(
    warehouse: WarehouseOpt = "warehouse",
    keep: Annotated[
        str, typer.Option(help="retention: snapshots younger than this stay (90d, 12h, 2w; >= 1h)")
    ] = "90d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="say what would be deleted, delete nothing")] = False,
) -> None:
    """Expire snapshots older than --keep: the data files only they need, files no commit names (a killed worker's),
    and their log entries. Never a snapshot a reader has pinned (sql --as-of, diff, report). A table holding a link,
    FIFO or device, or whose log is damaged, is left as it is and named (exit 1): vacuum follows no link."""
    try:
        done = api.vacuum_warehouse(warehouse=warehouse, keep=keep, dry_run=dry_run)
    except ERRORS as exc:
        fail(str(exc))
    verb = "would delete" if dry_run else "deleted"
    total = sum(len(v.files) for v in done)
    for v in done:
        if v.files:
            kept = f"; pinned versions kept: {v.pinned}" if v.pinned else ""
            console.print(f"{v.table}: {verb} {len(v.files)} file(s){kept}", highlight=False)
    console.print(f"vacuum (keep {keep}): {verb} {total} file(s)", highlight=False)
    refused = [v for v in done if v.refused]
    for v in refused:  # left exactly as they were: nothing deleted in them
        console.print(f"{v.table}: refused, nothing deleted: {v.refused}", highlight=False, markup=False)
    if refused:
        raise typer.Exit(1)


@warehouse_app.command("migrate")
def migrate(
    source: Annotated[
        str, typer.Argument(help="a warehouse in layout 1 (one Parquet file per unit) or of an older schema version")
    ],
    target: Annotated[str | None, typer.Argument(help="a new or empty folder [default: convert in place]")] = None,
) -> None:
    """Convert an older warehouse to the Delta layout (in place, or into TARGET) and check every table's rows are
    identical afterwards; in place, the old files are kept under layout-1/ until you delete them. A Delta warehouse
    of an older schema version is upgraded in place (version 4: each stored metrics row's higher_is_better
    corrected to its metric's declared direction, checked row for row)."""
    try:
        result = api.migrate_warehouse(source, target)
    except ERRORS as exc:
        fail(str(exc))
    rows = sum(result.rows.values())
    if result.upgraded_to is not None:
        changed = sum(result.directions.values())
        console.print(
            f"upgraded {result.target} to schema version {result.upgraded_to}: {changed} metrics rows' direction "
            "corrected (every other column of every row unchanged, checked row for row)",
            highlight=False,
            markup=False,
        )
    else:
        console.print(
            f"migrated {result.source} -> {result.target}: {rows} rows in {len(result.rows)} tables, identical after",
            highlight=False,
            markup=False,
        )
    if result.moved_to:
        console.print(f"the layout-1 files are in {result.moved_to} (delete it when satisfied)", highlight=False)
    for change, n in result.directions.items():
        console.print(f"direction corrected: {change} ({n} rows)", highlight=False, markup=False)
