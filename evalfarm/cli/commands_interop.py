"""``evalfarm export mteb`` and ``evalfarm import mteb``: a warehouse's results in MTEB's results layout, and an MTEB
results folder into a warehouse (:mod:`evalfarm.analysis.mteb_results` holds the mapping; these commands call the
API)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from evalfarm import api
from evalfarm.cli.app import _group, again, app, fail, split
from evalfarm.cli.rendering import say

export_app = _group("Write a warehouse's results in another tool's format (MTEB).")
import_app = _group("Read another tool's results (MTEB) into a warehouse, kept apart from evalfarm's own numbers.")
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")

WarehouseOpt = Annotated[
    str | None,
    typer.Option(
        help="warehouse: a directory or a pyarrow URI (s3://…, gs://…), as `run` takes it [default: the settings' "
        "warehouse: $EVALFARM_WAREHOUSE, else .evalfarm.toml's, else ./warehouse]"
    ),
]


@export_app.command("mteb")
def export_mteb(
    out_dir: Annotated[
        Path, typer.Option("--out", help="the results folder to write: <model>/<revision>/<Task>.json")
    ],
    warehouse: WarehouseOpt = None,
    models: Annotated[
        list[str] | None, typer.Option("--models", help="only these models (repeat or comma-separate)")
    ] = None,
    names: Annotated[
        list[str] | None,
        typer.Option(
            "--as",
            help="MODEL[@REVISION]: the MTEB model name (and hub revision) to file the results under, for one "
            "exported model; with several, EVALFARM_ID=MODEL[@REVISION] (repeatable)",
        ),
    ] = None,
) -> None:
    """Write the warehouse's STS12-16, STSBenchmark and SICK-R numbers as MTEB results files (cosine Spearman as
    main_score, on MTEB's 0-1 scale) with a model_meta.json per model, as mteb's ResultCache reads them (export
    into <cache>/results). SentEval's classification tasks have no MTEB twin and are not written."""
    chosen = split(models)
    mapping: dict[str, str] = {}
    for item in names or []:
        model, sep, target = item.rpartition("=")
        if not sep:
            if not chosen or len(chosen) != 1:
                fail("--as MODEL[@REVISION] names one exported model: add --models ID, or write --as ID=MODEL")
            model, target = chosen[0], item
        mapping[model] = target
    try:  # the API checks each MTEB name (MtebFormatError: a ValueError) before it writes anything
        result = api.export_mteb(out_dir, warehouse=warehouse, models=chosen, names=mapping)
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError) as exc:
        fail(str(exc))
    for note in result.skipped:
        say(f"skipped: {note}", style="yellow")
    for path in result.files:
        sys.stdout.write(f"{path}\n")
    n = sum(1 for p in result.files if p.name != "model_meta.json")
    say(f"wrote {n} MTEB result file(s) and their model_meta.json under {out_dir}")


@import_app.command("mteb")
def import_mteb(
    folder: Annotated[Path, typer.Argument(help="an MTEB results folder: <model>/<revision>/<Task>.json")],
    warehouse: WarehouseOpt = None,
    rename: Annotated[
        list[str] | None,
        typer.Option("--as", help="MTEB_MODEL=EVALFARM_ID: store an MTEB model under this id (repeatable)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON on stdout")] = False,
) -> None:
    """Store an MTEB results folder as metrics rows of variant `mteb` (STS twins under evalfarm's task ids, MTEB
    classification tasks as downstream tasks mteb-<Task>), so models evaluated elsewhere join the correlations."""
    mapping: dict[str, str] = {}
    for item in split(rename) or []:
        name, sep, model = item.partition("=")
        if not sep or not name or not model:
            fail(f"--as takes MTEB_MODEL=EVALFARM_ID, not {item!r}")
        mapping[name] = model
    try:
        result = api.import_mteb(folder, warehouse=warehouse, rename=mapping, argv=again())
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        fail(str(exc))
    for note in result.skipped:
        say(f"skipped: {note}", style="yellow")
    if as_json:
        sys.stdout.write(
            json.dumps({"run_id": result.run_id, "imported": result.imported, "skipped": result.skipped}) + "\n"
        )
    for model, tasks in sorted(result.imported.items()):
        say(f"{model}: {', '.join(sorted(tasks))}")
    say(f"imported {result.n_rows} MTEB result file(s) as run {result.run_id} (variant 'mteb')")
