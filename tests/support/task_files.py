"""Task files a test writes for itself: a catalog names them relative to a data folder (evalfarm refuses absolute
paths, ``..`` and ``~`` in ``files:``), so the test points ``EVALFARM_DATA`` at the folder that holds them.

``data_folder(d)`` sets ``EVALFARM_DATA=d`` for a block (and restores it), for fixtures whose scope is wider than a
test (``monkeypatch`` is per test); ``copy_task_files(catalog, ids, d)`` copies the real files of shipped tasks
into ``d`` under their catalog paths, for a catalog that mixes its own slices with shipped tasks.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def data_folder(d: Path) -> Iterator[Path]:
    """``EVALFARM_DATA=d`` inside the block (this process and the processes it starts)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVALFARM_DATA", str(d))
        yield d


def copy_task_files(real: Path, catalog: str, ids: list[str], d: Path) -> None:
    """Copy the files of tasks ``ids`` of ``catalog`` from the data folder ``real`` into ``d`` (same paths)."""
    from evalfarm.catalog.registry import load_catalog

    cat = load_catalog(catalog)
    for tid in ids:
        for rel in cat.task(tid).files.values():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real / rel, d / rel)


def sentence_pool_entry(d: Path, data_dir: Path, name: str, pairs: int, background: int) -> str:
    """A catalog ``tasks:`` line for an EvalRank sentence pool of the real pool's first ``pairs`` pairs and first
    ``background`` background sentences, its two files written into ``d`` (the data folder the test sets) and
    checksummed."""
    import hashlib

    s = data_dir / "evalrank" / "sent_evalrank"
    files = {}
    for role, src, n in (("pairs", "pos_pair.txt", pairs), ("background", "background_sent.txt", background)):
        files[role] = d / f"{name}-{role}.txt"
        files[role].write_text("\n".join((s / src).read_text().splitlines()[:n]) + "\n")
    sha = ", ".join(f"{r}: {hashlib.sha256(p.read_bytes()).hexdigest()}" for r, p in files.items())
    fl = ", ".join(f"{r}: {p.name}" for r, p in files.items())
    return (
        f"  - {{id: {name}, level: sentence, kind: evalrank, format: evalrank-sentence, version: '1', licence: test,"
        f" source: tests, files: {{{fl}}}, sha256: {{{sha}}}}}\n"
    )
