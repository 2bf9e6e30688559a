"""The Python API: run a catalog, evaluate an encoder object, query a warehouse — what the CLI does, from a notebook.

Every function here is stable; everything it calls (runner, scheduler, warehouse layout) is not. Options come after
the main argument, keyword-only.

Evaluate any object with an ``encode(texts) -> (n, dim) array`` method (the MTEB-style protocol), no catalog file:

>>> import zlib
>>> import numpy as np
>>> import evalfarm
>>> class HashEncoder:  # a stand-in for your model: 16 random dimensions per text, seeded by the text
...     def encode(self, texts):
...         return np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=16) for t in texts])
>>> result = evalfarm.evaluate(HashEncoder(), name="hash-16", tasks=["stsb"])
>>> sorted(result.column("subset").unique().to_pylist())
['all', 'dev', 'mean', 'test', 'train', 'wmean']
>>> test = [r for r in result.to_pylist() if r["subset"] == "test" and r["metric"] == "spearman"][0]
>>> abs(test["value"]) < 0.1  # random vectors do not order STS pairs
True
>>> set(result.column("degenerate").to_pylist())  # vectors that all tie would be flagged, with degenerate_reason
{False}

Run catalog models into a warehouse and query it (into Arrow, or pandas with ``.to_pandas()``):

>>> import tempfile, pathlib
>>> wh = pathlib.Path(tempfile.mkdtemp()) / "wh"
>>> summary = evalfarm.run("zoo-starter", warehouse=wh, models=["glove-6b-50d"], tasks=["wordsim-rg-65"],
...                        executor="local")
>>> summary.counts()
{'done': 1, 'skipped': 0, 'failed': 0}
>>> board = evalfarm.query("SELECT model, variant, round(value, 2) AS rho FROM leaderboard ORDER BY variant",
...                        warehouse=wh)
>>> [(r["model"], r["variant"], r["rho"]) for r in board.to_pylist()]
[('glove-6b-50d', 'evalrank-word', 0.59), ('glove-6b-50d', 'raw', 0.6)]
>>> df = board.to_pandas()  # pandas: the `pandas` extra (`pip install 'evalfarm[pandas]'`)
>>> df.set_index("variant")["rho"].to_dict()
{'evalrank-word': 0.59, 'raw': 0.6}
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_EXECUTOR = "ray"
"""The executor of :func:`run` and of ``evalfarm run``: worker actors on a local (or the given) Ray cluster."""


def run(
    catalog: str | os.PathLike[str] = "zoo-starter",
    *,
    warehouse: str | os.PathLike[str] = "warehouse",
    models: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    executor: str = DEFAULT_EXECUTOR,
    address: str | None = None,
    workers: int | None = None,
    force: bool = False,
    max_attempts: int = 2,
    **options: Any,
) -> Any:
    """Evaluate ``models`` (default: all) of ``catalog`` (a name or a path) on ``tasks`` (default: the catalog's)
    into ``warehouse``; finished units are skipped. ``options`` are :class:`~evalfarm.scorers.base.RunOptions`
    fields (``similarities``, ``center``, ``filter_other_positives``, ``device``, ...). Returns the run summary
    (``counts()``, ``failed``, ``run_id``)."""
    from evalfarm.runner import run_catalog
    from evalfarm.scorers.base import RunOptions

    return run_catalog(
        catalog,
        warehouse,
        models=list(models) if models else None,
        tasks=list(tasks) if tasks else None,
        options=RunOptions(**options),
        force=force,
        executor=executor,
        address=address,
        workers=workers,
        max_attempts=max_attempts,
    )


def open_warehouse(warehouse: str | os.PathLike[str] = "warehouse") -> Any:
    """The warehouse at a path or URI: ``.query(sql)`` (read-only, one statement), ``.connect()`` (DuckDB)."""
    from evalfarm.warehouse import Warehouse

    return Warehouse(warehouse)


def query(sql: str, *, warehouse: str | os.PathLike[str] = "warehouse") -> Any:
    """Run one read-only SQL statement on the warehouse's views; a ``pyarrow.Table`` (``.to_pandas()`` for pandas)."""
    return open_warehouse(warehouse).query(sql)


def evaluate(
    encoder: Any,
    *,
    name: str,
    level: str = "sentence",
    tasks: Sequence[str] | None = None,
    catalog: str | os.PathLike[str] = "tasks",
    warehouse: str | os.PathLike[str] | None = None,
    version: str = "",
    force: bool = False,
    **options: Any,
) -> Any:
    """Evaluate an in-memory encoder object (``encode(texts) -> (n, dim)`` array) on ``tasks`` (default: every task
    of its ``level`` in ``catalog``) without writing a catalog file; returns its current metrics (a
    ``pyarrow.Table``), each row with ``degenerate`` / ``degenerate_reason``: a unit whose vectors are degenerate
    (nearly all OOV, identical or of rank ~1: every comparison ties) has numbers that mean nothing, flagged there.
    Runs in this process. Without ``warehouse`` the run goes to a temporary folder, removed before returning (only
    the returned metrics remain); with one, the results stay there, keyed by ``name`` and ``version`` (an object
    cannot be hashed, so bump ``version`` when the model changes, or pass ``force=True``). Word-level encoders must
    be word-vector models (``lookup``, ``vectors``)."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.runner import run_catalog
    from evalfarm.scorers.base import RunOptions
    from evalfarm.warehouse import Warehouse

    if not callable(getattr(encoder, "encode", None)):
        raise TypeError(f"{type(encoder).__name__} has no encode(texts) method: it cannot be evaluated")
    if level == "word" and not hasattr(encoder, "lookup"):
        raise TypeError("a word-level encoder must be a word-vector model (lookup, vectors, words)")
    spec = ModelSpec(id=name, level=level, kind="python", revision=version or None)  # type: ignore[arg-type]
    cat = load_catalog(catalog).with_models([spec])
    with contextlib.ExitStack() as stack:
        if warehouse is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evalfarm-evaluate-"))) / "wh"
        else:
            root = Path(warehouse)
        summary = run_catalog(
            cat,
            root,
            models=[name],
            tasks=list(tasks) if tasks else None,
            options=RunOptions(**options),
            force=force,
            executor="local",
            encoders={name: encoder},
        )
        if summary.failed:
            first = summary.failed[0]
            raise RuntimeError(f"evaluating {name!r} failed on {first.task} ({first.stage}): {first.error}")
        name_sql = name.replace("'", "''")
        # an in-memory table: it outlives the temporary warehouse
        return Warehouse(root).query(
            "SELECT task, scorer, subset, variant, ties, metric, value, degenerate, degenerate_reason FROM metrics "
            f"WHERE model = '{name_sql}' ORDER BY task, scorer, subset, variant, ties, metric"
        )


__all__ = ["DEFAULT_EXECUTOR", "evaluate", "open_warehouse", "query", "run"]
