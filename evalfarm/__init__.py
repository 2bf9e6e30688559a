"""evalfarm: distributed batch evaluation of word and sentence embedding zoos (EvalRank, a Parquet warehouse, SQL).

Importing the package is cheap: heavy libraries (torch, Ray, DuckDB) load only when a module that needs them is
used.
"""

from __future__ import annotations

import importlib.metadata


def _version() -> str:
    try:
        return importlib.metadata.version("evalfarm")
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "0+unknown"


__version__ = _version()

_API = ("run", "evaluate", "query", "open_warehouse")


def __getattr__(name: str):  # the Python API, loaded on first use (see evalfarm.api)
    if name in _API:
        from evalfarm import api

        return getattr(api, name)
    raise AttributeError(f"module 'evalfarm' has no attribute {name!r}")


__all__ = ["__version__", "evaluate", "open_warehouse", "query", "run"]
