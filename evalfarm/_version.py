"""evalfarm's version, in a module of its own at the bottom of the layers: any module may read it without
importing the package's API facade (``evalfarm/__init__.py`` sits above every layer)."""

from __future__ import annotations

import importlib.metadata


def _version() -> str:
    try:
        return importlib.metadata.version("evalfarm")
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "0+unknown"


__version__ = _version()
