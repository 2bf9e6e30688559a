"""evalfarm: distributed batch evaluation of word and sentence embedding zoos (EvalRank, a Parquet warehouse, SQL).

Importing the package is cheap: heavy libraries (torch, Ray, DuckDB) load only when a module that needs them is
used. The Python API (:mod:`evalfarm.api`) is here too: ``evalfarm.run(...)``, ``evalfarm.query(...)``, ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see of the lazy names below (at run time, __getattr__ imports them)
    from evalfarm.api import ConfigError as ConfigError
    from evalfarm.api import EvaluationFailed as EvaluationFailed
    from evalfarm.api import RunOptionArgs as RunOptionArgs
    from evalfarm.api import RunRequest as RunRequest
    from evalfarm.api import Settings as Settings
    from evalfarm.api import TextEncoder as TextEncoder
    from evalfarm.api import ZooBuild as ZooBuild
    from evalfarm.api import build_report as build_report
    from evalfarm.api import build_zoo as build_zoo
    from evalfarm.api import check_submission as check_submission
    from evalfarm.api import compact_warehouse as compact_warehouse
    from evalfarm.api import correlation_comparisons as correlation_comparisons
    from evalfarm.api import correlation_table as correlation_table
    from evalfarm.api import diff as diff
    from evalfarm.api import evaluate as evaluate
    from evalfarm.api import follow_job as follow_job
    from evalfarm.api import job_address as job_address
    from evalfarm.api import list_models as list_models
    from evalfarm.api import migrate_warehouse as migrate_warehouse
    from evalfarm.api import open_warehouse as open_warehouse
    from evalfarm.api import plan_submission as plan_submission
    from evalfarm.api import query as query
    from evalfarm.api import run as run
    from evalfarm.api import run_request as run_request
    from evalfarm.api import run_status as run_status
    from evalfarm.api import set_config as set_config
    from evalfarm.api import settings as settings
    from evalfarm.api import show_model as show_model
    from evalfarm.api import submit_plan as submit_plan
    from evalfarm.api import vacuum_warehouse as vacuum_warehouse
    from evalfarm.api import validate_catalog as validate_catalog
    from evalfarm.api import verify as verify
    from evalfarm.api import view_docs as view_docs
    from evalfarm.api import zoo_recipes as zoo_recipes


from evalfarm._version import __version__ as __version__

_API = (
    "ConfigError",
    "EvaluationFailed",
    "RunOptionArgs",
    "RunRequest",
    "Settings",
    "TextEncoder",
    "ZooBuild",
    "build_report",
    "build_zoo",
    "check_submission",
    "compact_warehouse",
    "correlation_comparisons",
    "correlation_table",
    "diff",
    "evaluate",
    "follow_job",
    "job_address",
    "list_models",
    "migrate_warehouse",
    "open_warehouse",
    "plan_submission",
    "query",
    "run",
    "run_request",
    "run_status",
    "set_config",
    "settings",
    "show_model",
    "submit_plan",
    "vacuum_warehouse",
    "validate_catalog",
    "verify",
    "view_docs",
    "zoo_recipes",
)
"""The names of :mod:`evalfarm.api` the package exports (none is also the name of a submodule)."""


def __getattr__(name: str) -> Any:  # the Python API, loaded on first use (see evalfarm.api)
    if name in _API:
        from evalfarm import api

        return getattr(api, name)
    raise AttributeError(f"module 'evalfarm' has no attribute {name!r}")


__all__ = ["__version__", *_API]
