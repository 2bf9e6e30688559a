"""The typer application: the command groups, the root callback that resolves the settings once for every command,
and how a command fails (``error: <message>`` on stderr, an exit code).

Help is click's plain help (``rich_markup_mode=None``), not typer's Rich panels: the panels print a type after
every flag (``--force <bool>``), which reads as if the flag took a value; click's help shows a flag as a flag.
"""

from __future__ import annotations

import shlex
import sys
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from evalfarm import api
from evalfarm.cli.rendering import configure_output, console
from evalfarm.config import DEFAULT, Settings

HELP: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],  # -h works as --help on every command
    "max_content_width": 1000,  # help as wide as the terminal (click's default stops at 80 columns)
}


def _group(help: str) -> typer.Typer:
    return typer.Typer(help=help, no_args_is_help=True, context_settings=HELP, rich_markup_mode=None)


GLOBAL_FLAGS = frozenset({"-q", "--quiet", "-v", "-vv", "-vvv", "--verbose"})
"""The root's flags that may also come after the command (``evalfarm run -q``): they take no value."""


class _Root(TyperGroup):
    """The root command: ``-q`` / ``-v`` written after the command (``evalfarm run -q …``) are moved before it, as
    click reads them; everything after ``--`` is left alone."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # ctx: typer's own click's Context
        cut = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[1:cut] if a in GLOBAL_FLAGS]
        if flags and args and args[0] not in GLOBAL_FLAGS and not args[0].startswith("-"):
            rest = [a for i, a in enumerate(args) if not (0 < i < cut and a in GLOBAL_FLAGS)]
            args = [*flags, *rest]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_Root,
    help="Distributed batch evaluation of word and sentence embedding models (EvalRank and more).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP,
    rich_markup_mode=None,
)
catalog_app = _group("Inspect and check model catalogs.")
config_app = _group("Show or set the settings the CLI remembers (data folder, warehouse, catalog) in .evalfarm.toml.")
zoo_app = _group("Build the local model zoo (word vectors trained here + packaged models).")
app.add_typer(catalog_app, name="catalog")
app.add_typer(config_app, name="config")
app.add_typer(zoo_app, name="zoo")
data_app = _group("Build generated task data (HEROS-style minimal pairs, WordNet definitions): seeded, checksummed.")
app.add_typer(data_app, name="data")


def fail(msg: str, code: int = 2) -> NoReturn:
    """``error: <msg>`` on stderr, unwrapped (one line per line of ``msg``, whatever the width), then exit."""
    console.print("[bold red]error:[/] ", end="")
    console.print(msg, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_from(exc: BaseException, msg: str, code: int = 2) -> NoReturn:
    """:func:`fail` for an exception: its traceback first with ``-v`` (only then), then the one-line message."""
    from evalfarm.cli.rendering import Output

    if Output.verbose:
        import traceback

        cause = getattr(exc, "cause", None)
        shown = cause if isinstance(cause, BaseException) else exc
        sys.stderr.write("".join(traceback.format_exception(shown)))
    fail(msg, code)


def split(values: list[str] | None) -> list[str] | None:
    """Repeated and comma-separated values as one list (None when none)."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def again() -> str:
    """This very command line, to resume a run."""
    return shlex.join(["evalfarm", *sys.argv[1:]])


def _version_callback(value: bool) -> None:
    if value:
        from evalfarm._version import __version__

        sys.stdout.write(f"evalfarm {__version__}\n")
        raise typer.Exit()


def option_defaults(settings: Settings) -> dict[str, Any]:
    """click's default_map from the settings: a warehouse or catalog set in the environment or the config file
    becomes the default of every command's ``--warehouse`` / ``--catalog`` (and shows as such in ``--help``)."""
    wh = {"warehouse": settings.warehouse} if settings.sources.get("warehouse") != DEFAULT else {}
    cat = {"catalog": settings.catalog} if settings.sources.get("catalog") != DEFAULT else {}
    return {
        "run": {**wh, **cat},
        "sql": wh,
        "report": wh,
        "correlations": wh,
        "verify": wh,
        "status": wh,
        "catalog": {"list": cat, "validate": cat},
    }


@app.callback()
def _main(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="print evalfarm's version and exit"
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="print only warnings, errors and a run's summary (no unit lines)")
    ] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="log evalfarm's steps (logging INFO; -vv: DEBUG)")
    ] = 0,
) -> None:
    """Distributed batch evaluation of word and sentence embedding models (EvalRank and more).

    Settings remembered in .evalfarm.toml (written by `make run`; see `evalfarm config --help`), or set in
    EVALFARM_DATA, EVALFARM_WAREHOUSE, EVALFARM_CATALOG, supply the data folder and the default --warehouse and
    --catalog.
    """
    configure_output(quiet=quiet, verbose=verbose)
    if ctx.invoked_subcommand == "config":  # `config set` must work even to repair a broken file
        return
    try:
        settings = api.settings()
    except api.ConfigError as exc:
        fail(str(exc))
    settings.export_data()  # for the whole command: task readers and Ray workers read EVALFARM_DATA
    ctx.default_map = option_defaults(settings)
