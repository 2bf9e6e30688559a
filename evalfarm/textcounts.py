"""How many texts each task gives a model to embed, counted once per task content and kept in the cache.

The first ETA needs each planned task's text count (and how many distinct texts the tasks of a level share: a pool
that holds another task's sentences embeds them once). Counting means loading the task as a worker loads it, which
for a generated task means building it (WordNet, spaCy: minutes on a loaded machine), and on every run. So a count
is computed once per *key* — the task's checksum (its files' sha256 and every field that changes its data,
:func:`~evalfarm.taskdata.data.task_checksum`), its scorer, the scorer's version and the unit's params (a training
sample, ``max_train``) — and kept in the cache beside the task's builds: ``<cache>/textcounts/<key>.npy``, the
sorted 64-bit hashes of the task's distinct texts (blake2b), whose length is the count and whose union over a level's
tasks is the level's distinct texts. A worker that loads a task for its own work stores the count it can take from
it (:func:`remember`), so the planner of the next run finds it; the planner itself never builds a generated task's
file to count it (:func:`counts`): until a worker has built it, that task has no count and its estimate falls back.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm import atomic
from evalfarm.cache import cache_dir
from evalfarm.catalog.specs import TaskSpec

log = logging.getLogger(__name__)

COUNTS_VERSION = "1"
"""Bumped when what a count file holds changes (its key includes it: older files are simply not found)."""


@dataclass(frozen=True)
class CountKey:
    """What a task's texts depend on: its content (``checksum``), the scorer that reads them and its params."""

    task: str
    checksum: str
    scorer: str
    version: str
    params: str

    @property
    def digest(self) -> str:
        raw = "\n".join((COUNTS_VERSION, self.checksum, self.scorer, self.version, self.params))
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


def count_path(key: CountKey) -> Path:
    return cache_dir() / "textcounts" / f"{key.digest}.npy"


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """The sorted distinct 64-bit hashes of ``texts`` (blake2b: the same on every machine and process)."""
    digests = {int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little") for t in texts}
    return np.array(sorted(digests), dtype=np.uint64)


def cached(key: CountKey) -> np.ndarray | None:
    """The stored hashes of ``key``'s texts, or None (not counted yet, or an unreadable file: counted again)."""
    path = count_path(key)
    try:
        got = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return got if got.dtype == np.uint64 and got.ndim == 1 else None


def remember(key: CountKey, texts: Iterable[str]) -> np.ndarray:
    """Store ``key``'s texts' hashes (once: an existing file is kept); a cache that cannot be written only costs
    the next planner a count."""
    hashes = text_hashes(texts)
    path = count_path(key)
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic.replacing(path, "wb", fsync=False) as fh:
                np.save(fh, hashes, allow_pickle=False)
        except OSError as exc:
            log.debug("text count of %s not stored (%s)", key.task, exc)
    return hashes


def needs_build(spec: TaskSpec) -> bool:
    """A generated task whose file is not built yet: loading it would build it (WordNet, spaCy: minutes)."""
    ref = getattr(spec, "build", None)
    if ref is None:
        return False
    from evalfarm.taskdata.build import is_built

    try:
        return not is_built(ref)
    except Exception:  # an unknown recipe or version: its unit says why; the planner does not count it
        return True


def counts(
    keys: Mapping[str, CountKey],
    specs: Mapping[str, TaskSpec],
    load: Callable[[str], list[str]],
    *,
    on_task: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Text counts by task id for ``keys`` (task id -> its key), each level's counts scaled by its share of
    distinct texts (words two word-similarity sets share are embedded once). A count comes from the cache, else
    from ``load(task)`` (the texts as a worker reads them), then stored; a task that does not load, or whose
    generated file is not built yet, is left out (its unit says why, or builds it). ``on_task(done, total)`` after
    each task: the planner's heartbeat."""
    hashes: dict[str, np.ndarray] = {}
    for i, (task, key) in enumerate(sorted(keys.items())):
        got = cached(key)
        if got is None and not needs_build(specs[task]):
            try:
                got = remember(key, load(task))
            except Exception as exc:  # reported by the unit itself
                log.debug("ETA: could not count %s texts (%s)", task, exc)
        if got is not None:
            hashes[task] = got
        if on_task is not None:
            on_task(i + 1, len(keys))
    out: dict[str, int] = {}
    for level in {specs[t].level for t in hashes}:
        of_level = [t for t in hashes if specs[t].level == level]
        total = sum(len(hashes[t]) for t in of_level)
        distinct = len(np.unique(np.concatenate([hashes[t] for t in of_level]))) if of_level else 0
        for t in of_level:
            out[t] = round(len(hashes[t]) * distinct / total) if total else 0
    return out


def key_of(task: str, unit: Any) -> CountKey:
    """The count key of a planned :class:`~evalfarm.plan.Unit` (its checksum, scorer, version and params)."""
    from evalfarm.scorers import scorers

    version = getattr(scorers().get(unit.scorer), "version", "")
    return CountKey(task, unit.task_checksum, unit.scorer, str(version), unit.params)
