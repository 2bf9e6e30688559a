"""evalfarm: distributed batch evaluation of word and sentence embedding zoos (EvalRank, a Parquet warehouse, SQL).

Importing the package is cheap: heavy libraries (torch, Ray, DuckDB) load only when a module that needs them is
used. The Python API (:mod:`evalfarm.api`) is here too: ``evalfarm.run(...)``, ``evalfarm.query(...)``, ...
"""

from __future__ import annotations

import importlib.metadata
from typing import Any


def _version() -> str:
    try:
        return importlib.metadata.version("evalfarm")
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "0+unknown"


__version__ = _version()

_API = (
    "ConfigError",
    "EvaluationFailed",
    "Settings",
    "ZooBuild",
    "build_report",
    "build_zoo",
    "check_submission",
    "correlation_table",
    "evaluate",
    "follow_job",
    "job_address",
    "list_models",
    "open_warehouse",
    "plan_submission",
    "query",
    "run",
    "set_config",
    "settings",
    "submit_plan",
    "validate_catalog",
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
