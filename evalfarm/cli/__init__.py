"""``evalfarm``: the command line, a client of the Python API (:mod:`evalfarm.api`).

- :mod:`evalfarm.cli.app`: the typer application, its command groups, the root callback (the settings, resolved
  once) and how a command fails;
- ``commands_evaluate`` (``run``, ``submit``), ``commands_results`` (``sql``, ``correlations``, ``report``),
  ``commands_setup`` (``catalog``, ``config``, ``zoo``), ``commands_interop`` (``export mteb``, ``import mteb``),
  ``commands_warehouse`` (``diff``, ``warehouse info | compact | vacuum | migrate``): the commands, each calling
  the API and rendering what it returns;
- :mod:`evalfarm.cli.rendering`: tables, CSV and JSON on stdout, messages on stderr;
- :mod:`evalfarm.cli.events`: a run's live output and summary.

The installed script is ``evalfarm = "evalfarm.cli:main"``; ``python -m evalfarm`` and ``python -m evalfarm.cli``
are the same command.
"""

from __future__ import annotations

from evalfarm.api import view_docs

# importing a command module registers its commands, in the order `evalfarm --help` lists them
from evalfarm.cli import (  # noqa: F401
    commands_evaluate,
    commands_interop,
    commands_results,
    commands_setup,
    commands_warehouse,
)
from evalfarm.cli.app import app
from evalfarm.cli.commands_evaluate import Executor, run


def main() -> None:  # pragma: no cover
    """The ``evalfarm`` command."""
    app(prog_name="evalfarm")


__all__ = ["Executor", "app", "main", "run", "view_docs"]
