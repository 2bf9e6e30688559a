"""The commands around a run: ``evalfarm catalog list|validate``, ``evalfarm config show|set``, ``evalfarm zoo
build``; each a client of :mod:`evalfarm.api`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from evalfarm import api
from evalfarm.cli.app import catalog_app, config_app, data_app, fail, zoo_app
from evalfarm.cli.events import ZooPrinter
from evalfarm.cli.rendering import Format, console, out, print_rows, say
from evalfarm.config import KEYS, write_target

CatalogOpt = Annotated[str, typer.Option(help="catalog name or path")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f")]


# -- catalog -----------------------------------------------------------------------------------------------------
@catalog_app.command("list")
def catalog_list(catalog: CatalogOpt = "zoo-starter", format: FormatOpt = Format.table) -> None:
    """List a catalog's models (and the tasks each is evaluated on)."""
    try:
        cat = api.validate_catalog(catalog)
    except api.CatalogError as exc:
        fail(str(exc))
    rows = api.list_models(cat)
    print_rows(list(rows[0]) if rows else ["id"], rows, format, title=f"{cat.name}: {len(rows)} models")
    line = f"{cat.name} composition: {api.describe_composition(cat.composition())}"
    if format is Format.table:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    else:  # stdout stays one CSV / JSON document
        say(line)


ModelArg = Annotated[str, typer.Argument(help="the model's id")]


@catalog_app.command("show")
def catalog_show(model: ModelArg, catalog: CatalogOpt = "zoo-starter", format: FormatOpt = Format.table) -> None:
    """Show one model as the run embeds it: kind, source, options, spec hash, and the prompt it puts before each
    task's texts (query and document prompts where a task embeds its sides apart)."""
    try:
        rows = api.show_model(model, catalog)
    except api.CatalogError as exc:
        fail(str(exc), code=1)
    print_rows(["field", "value"], rows, format, title=f"{model}")


@catalog_app.command("validate")
def catalog_validate(catalog: CatalogOpt = "zoo-starter", format: FormatOpt = Format.table) -> None:
    """Check a catalog offline: schema, references, tasks; exit 1 with the file and entry on error."""
    try:
        cat = api.validate_catalog(catalog)
    except api.CatalogError as exc:
        fail(str(exc), code=1)
    row = {"catalog": cat.name, "path": str(cat.path), "models": len(cat.models), "tasks": len(cat.tasks)}
    print_rows([*row, "status"], [{**row, "status": "ok"}], format)


# -- config: remembered settings ---------------------------------------------------------------------------------
@config_app.command("show")
def config_show(format: FormatOpt = Format.table) -> None:
    """Print each setting (data folder, warehouse, catalog, the SQL limits), its value and where it comes from: the
    environment (EVALFARM_DATA, EVALFARM_WAREHOUSE, EVALFARM_CATALOG, EVALFARM_SQL_TIMEOUT, EVALFARM_SQL_MEMORY_LIMIT),
    the config file that applies here, or the default; and each config file refused (owned or writable by another
    user: its settings are not used)."""
    try:
        settings = api.settings()
    except api.ConfigError as exc:
        fail(str(exc))
    title = f"config: {settings.config_file or '(no file)'}"
    print_rows(["key", "value", "from"], settings.rows(), format, title=title)
    if format is Format.table:
        for line in settings.refused:  # a file (or its settings) another user could have written: not used
            out.print(f"refused: {line}", markup=False, highlight=False, soft_wrap=True)


SettingsArg = Annotated[
    list[str],
    typer.Argument(
        help="KEY=VALUE pairs: data=DIR (or data= to download), warehouse=DIR, catalog=NAME, sql_timeout=SECONDS "
        "(0: no limit), sql_memory_limit=SIZE (e.g. 16GB), notify=CMD-or-URL"
    ),
]
FileOpt = Annotated[
    Path | None, typer.Option("--file", help="the file to write (default: $EVALFARM_CONFIG, else ./.evalfarm.toml)")
]
UserOpt = Annotated[
    bool,
    typer.Option(
        "--user", help="write the user-level file instead (every folder: ~/.config/evalfarm/config.toml on Linux)"
    ),
]


@config_app.command("set")
def config_set(settings: SettingsArg, file: FileOpt = None, user: UserOpt = False) -> None:
    """Remember settings for later commands in this folder (and below), or with --user in every folder that has no
    .evalfarm.toml of its own; paths are stored absolute."""
    updates = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"expected KEY=VALUE, got {item!r} (keys: {', '.join(KEYS)})")
        updates[key.strip()] = value.strip()
    try:
        cfg = api.set_config(updates, file=file, user=user)
    except api.ConfigError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {write_target(file, user=user)}: {exc.strerror or exc}")
    console.print(
        f"{cfg.path}: " + ", ".join(f"{k} = {v!r}" for k, v in cfg.values.items() if k in updates), highlight=False
    )


# -- zoo: the local model zoo ------------------------------------------------------------------------------------
CacheOpt = Annotated[
    Path | None, typer.Option(help="cache folder to train into (default: EVALFARM_CACHE or ~/.cache/evalfarm)")
]
CatalogOutOpt = Annotated[
    Path | None,
    typer.Option(
        help="catalog to write (default: catalog/zoo-local.yaml in a source checkout; for an installed package "
        "the first EVALFARM_CATALOG_PATH folder, else <cache>/catalogs; with --quick: <out>/zoo-quick.yaml)"
    ),
]
QuickOpt = Annotated[bool, typer.Option(help="one tiny model per algorithm on a corpus slice (seconds)")]
CatalogOnlyOpt = Annotated[bool, typer.Option(help="write the catalog without training (models load after a build)")]


@zoo_app.command("build")
def zoo_build(
    out: CacheOpt = None,
    catalog_out: CatalogOutOpt = None,
    quick: QuickOpt = False,
    catalog_only: CatalogOnlyOpt = False,
) -> None:
    """Train the zoo's missing word models (each once, cached by fingerprint) and write its catalog."""
    recipes = api.zoo_recipes(quick=quick)
    try:
        with ZooPrinter(len(recipes)) as printer:
            built = api.build_zoo(
                cache=out,
                catalog_out=catalog_out,
                quick=quick,
                train=not catalog_only,
                recipes=recipes,
                progress=printer.on_progress,
            )
    except (FileNotFoundError, KeyError, ValueError) as exc:
        fail(str(exc))
    report, root, target = built.report, built.cache, built.target
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


CoverageCatalogOpt = Annotated[str, typer.Option("--catalog", help="catalog holding the models and word tasks")]
CoverageModelsOpt = Annotated[str, typer.Option("--models", help="comma-separated word model ids: the compared set")]
CoverageNameOpt = Annotated[str, typer.Option(help="variant name: task ids <task>-<name>, data coverage/<name>/")]
CoverageOutOpt = Annotated[Path, typer.Option("--out", help="catalog of the coverage-controlled tasks to write")]


@zoo_app.command("coverage")
def zoo_coverage(
    models: CoverageModelsOpt,
    out: CoverageOutOpt,
    catalog: CoverageCatalogOpt = "zoo-local",
    name: CoverageNameOpt = "common",
) -> None:
    """Coverage-controlled word tasks: the EvalRank word pool and word-similarity sets restricted to the words every
    model of --models knows (written under EVALFARM_DATA), as a catalog that includes --catalog."""
    ids = [m.strip() for m in models.split(",") if m.strip()]
    try:
        cov = api.coverage_catalog(
            ids, out, catalog=catalog, name=name, progress=lambda m: console.print(f"loading {m}")
        )
    except (FileNotFoundError, KeyError, ValueError) as exc:
        fail(str(exc))
    console.print(
        f"{cov.n_words:,} of {cov.n_candidates:,} task words known to all {len(ids)} models → {cov.vocab_path}",
        highlight=False,
    )
    print_rows(["model", "words known"], [{"model": m, "words known": n} for m, n in cov.known.items()], Format.table)
    print_rows(
        ["task", "pairs kept", "pairs"],
        [{"task": t, "pairs kept": k, "pairs": n} for t, (k, n) in cov.tasks.items()],
        Format.table,
    )
    console.print(f"catalog written to {out}: run it with --catalog {out}", highlight=False)


# -- data --------------------------------------------------------------------------------------------------------
ParamOpt = Annotated[
    list[str] | None, typer.Option("--param", "-p", help="a recipe parameter, NAME=VALUE (repeatable): n, seed")
]
OutOpt = Annotated[Path | None, typer.Option(help="folder for the file (default: <EVALFARM_CACHE>/builds/...)")]
ForceOpt = Annotated[bool, typer.Option(help="rebuild even when the file is there")]


VersionOpt = Annotated[
    str | None, typer.Option("--version", help="an earlier version of the recipe (default: the current one)")
]


@data_app.command("build")
def data_build(
    name: str, param: ParamOpt = None, out: OutOpt = None, force: ForceOpt = False, version: VersionOpt = None
) -> None:
    """Build the generated data file NAME (heros, defsent) and print its path, sha256 and the task's build entry."""
    import json

    overrides = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--param {item!r}: give NAME=VALUE")
        overrides[key.strip()] = value.strip()
    try:
        got, version = api.build_data(name, overrides, out=out, force=force, version=version)
    except api.BuildError as exc:
        fail(str(exc))
    console.print(f"{'built' if got.rebuilt else 'already built'}: {got.path}", highlight=False)
    console.print(f"sha256: {got.sha256}", highlight=False)
    entry = {"name": name, "version": version, "params": got.params, "sha256": got.sha256}
    console.print(f"task entry: build: {json.dumps(entry)}", highlight=False, soft_wrap=True)


@data_app.command("list")
def data_list() -> None:
    """The recipes `evalfarm data build` knows, every version (the current one last), with default parameters."""
    for b in api.data_recipes():
        console.print(f"{b.name} {b.version} {dict(b.defaults)}: {b.description}", highlight=False, soft_wrap=True)
