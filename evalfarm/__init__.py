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

__all__ = ["__version__"]
