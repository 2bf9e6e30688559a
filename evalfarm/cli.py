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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
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


@app.command()
def run(
    catalog: Annotated[str, typer.Option(help="catalog name (file stem under catalog/) or path")] = "zoo-starter",
    models: Annotated[
        list[str] | None, typer.Option("--models", "-m", help="model ids (comma-separated or repeated)")
    ] = None,
    pools: Annotated[list[str] | None, typer.Option("--pools", "-p", help="pool ids (default: the catalog's)")] = None,
    warehouse: Annotated[Path, typer.Option(help="warehouse directory")] = Path("warehouse"),
    force: Annotated[bool, typer.Option(help="recompute units whose results already exist")] = False,
    similarity: Annotated[list[str] | None, typer.Option(help="cos and/or l2 (default both)")] = None,
    ties: Annotated[str, typer.Option(help="optimistic (count >) or pessimistic (count >=)")] = "optimistic",
    filter_other_positives: Annotated[bool, typer.Option(help="don't count x's other positives")] = False,
    center: Annotated[bool | None, typer.Option("--center/--no-center", help="override the pool's centering")] = None,
    device: Annotated[str | None, typer.Option(help="torch device for ranking (default: cuda if present)")] = None,
) -> None:
    """Evaluate a catalog's models on its pools into the warehouse."""
    from evalfarm.catalog.registry import CatalogError
    from evalfarm.plan import RunConfig
    from evalfarm.pools.data import PoolDataError, data_dir
    from evalfarm.rank import SIMILARITIES, RankPolicy
    from evalfarm.runner import run_catalog

    sims = tuple(_split(similarity) or SIMILARITIES)
    try:
        data_dir()
        config = RunConfig(
            policy=RankPolicy(
                ties=ties,
                filter_other_positives=filter_other_positives,  # type: ignore[arg-type]
                center=center,
            ),
            similarities=sims,
            device=device,
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        ) as prog:
            tasks: dict[str, Any] = {}
            overall = prog.add_task("units", total=None)

            def on_progress(label: str, advance: int, total: int) -> None:
                if label not in tasks:
                    tasks[label] = prog.add_task(f"  embed {label}", total=total)
                prog.advance(tasks[label], advance)

            def on_model_done(outs: list[Any]) -> None:
                prog.advance(overall, len(outs))
                for o in outs:
                    mark = {"done": "[green]done", "skipped": "[dim]skipped", "failed": "[red]FAILED"}[o.status]
                    prog.console.print(
                        f"{mark}[/] {o.model} · {o.pool} ({o.seconds:.1f}s)"
                        + (f" [red]{o.stage}: {o.error}" if o.error else "")
                    )

            from evalfarm.catalog.registry import load_catalog
            from evalfarm.plan import plan_run

            cat = load_catalog(catalog)
            n_units = sum(
                len(p.units) for p in plan_run(cat, models=_split(models), pools=_split(pools), config=config)
            )
            prog.update(overall, total=n_units)
            summary = run_catalog(
                cat,
                warehouse,
                models=_split(models),
                pools=_split(pools),
                config=config,
                force=force,
                progress=on_progress,
                on_model_done=on_model_done,
            )
    except (CatalogError, PoolDataError, ValueError) as exc:
        _fail(str(exc))
        return
    c = summary.counts()
    console.print(
        f"run {summary.run_id}: {c['done']} done, {c['skipped']} skipped, {c['failed']} failed "
        f"in {summary.seconds:.1f}s → {summary.warehouse}"
    )
    if summary.failed:
        console.print("[bold red]failures:[/]")
        for o in summary.failed:
            console.print(f"  {o.model} · {o.pool} [{o.stage}] {o.error}")
        raise typer.Exit(1)


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help="a SELECT over the views: metrics, leaderboard, ranks, models, runs, failures")
    ],
    warehouse: Annotated[Path, typer.Option(help="warehouse directory")] = Path("warehouse"),
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
                "pools": ",".join(p.id for p in cat.pools_for(m.id)),
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
            "pools": len(cat.pools),
            "status": "ok",
        }
    ]
    print_rows(list(rows[0]), rows, format)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
