"""Where the files that ship with evalfarm live: the catalogs (``catalog/``) and the SQL views (``sql/``).

In the repository they sit at the top, beside ``evalfarm/``; in a wheel they are the data packages
``evalfarm._catalogs`` and ``evalfarm._sql`` (pyproject.toml maps the folders). A source checkout (an editable
install, or ``PYTHONPATH=<checkout>``) reads its own folders, never those of another install that happens to be on
the path; an installed package reads its own with :mod:`importlib.resources`.
"""

from __future__ import annotations

import atexit
import functools
import importlib.resources
import shutil
import tempfile
from importlib.resources.abc import Traversable
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def source_checkout() -> Path | None:
    """The repository this evalfarm was imported from, or ``None`` for an installed package."""
    if (_SOURCE_ROOT / "pyproject.toml").is_file() and (_SOURCE_ROOT / "evalfarm" / "_resources.py").is_file():
        return _SOURCE_ROOT
    return None


@functools.cache
def shipped_dir(package: str, folder: str) -> Path:
    """The folder of shipped files: ``<checkout>/<folder>`` from a source tree, else the data package ``package``.

    A package imported from a zip file (a wheel on ``sys.path``) has no folder on disk: its files are copied once
    into a temporary folder that is removed at exit, because catalogs resolve includes relative to their path.
    """
    root = source_checkout()
    if root is not None and (root / folder).is_dir():
        return root / folder
    try:
        res = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise FileNotFoundError(
            f"evalfarm's data package {package} is not installed (a broken install?): reinstall evalfarm"
        ) from None
    if isinstance(res, Path):
        return res
    tmp = Path(tempfile.mkdtemp(prefix=f"evalfarm-{package.rsplit('.', 1)[-1].strip('_')}-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    _copy_tree(res, tmp)
    return tmp


def _copy_tree(src: Traversable, dst: Path) -> None:
    for item in src.iterdir():
        if item.is_dir():
            if item.name != "__pycache__":
                (dst / item.name).mkdir()
                _copy_tree(item, dst / item.name)
        else:
            (dst / item.name).write_bytes(item.read_bytes())
