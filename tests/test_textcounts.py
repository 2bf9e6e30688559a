"""Text counts for the first ETA (issue 52): counted once per task content and kept in the cache, so a run plans in
seconds; a generated task is never built on the driver just to count it; a worker that loads a task keeps its count
for the next planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfarm import textcounts
from evalfarm.catalog.registry import load_catalog
from evalfarm.execute import ExecContext
from evalfarm.options import RunOptions
from evalfarm.plan import plan_run
from evalfarm.warehouse import Warehouse

TASKS = ["wordsim-ws353-all", "wordsim-ws353-rel"]  # the relatedness subset repeats the full set's words


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _planned(tasks: list[str], options: RunOptions | None = None, model: str = "glove-6b-50d"):
    cat = load_catalog("zoo-starter")
    plans = plan_run(cat, models=[model], tasks=tasks, options=options or RunOptions())
    units = {u.task: u for p in plans for u in p.units}
    return cat, {t: textcounts.key_of(t, u) for t, u in units.items()}, {t: cat.task(t) for t in units}


def test_a_count_is_computed_once_per_task_content_then_read_from_the_cache(cache: Path, tmp_path: Path) -> None:
    cat, keys, specs = _planned(TASKS)
    ctx = ExecContext(catalog=cat, warehouse=Warehouse(tmp_path / "wh"), run_id="r")
    loaded: list[str] = []

    def load(task: str) -> list[str]:
        loaded.append(task)
        return ctx.texts(task)

    first = textcounts.counts(keys, specs, load)
    words = {t: set(ctx.texts(t)) for t in TASKS}
    union, total = len(words[TASKS[0]] | words[TASKS[1]]), sum(len(w) for w in words.values())
    assert union < total  # the sets share words: each level's counts are scaled to its distinct texts
    assert first == {t: round(len(words[t]) * union / total) for t in TASKS}
    assert sorted(loaded) == TASKS and len(list((cache / "textcounts").glob("*.npy"))) == 2
    steps: list[tuple[int, int]] = []
    again = textcounts.counts(
        keys, specs, lambda t: pytest.fail(f"{t} loaded again"), on_task=lambda *a: steps.append(a)
    )
    assert again == first and steps == [(1, 2), (2, 2)]


def test_the_key_is_the_tasks_content_and_the_scorers_params(cache: Path) -> None:
    _, keys, _ = _planned(["mr"], model="bow-glove-6b-50d")
    _, quick, _ = _planned(["mr"], RunOptions(quick_downstream=True), model="bow-glove-6b-50d")  # a sample
    assert keys["mr"].digest != quick["mr"].digest
    assert keys["mr"].checksum == quick["mr"].checksum and keys["mr"].params != quick["mr"].params


def test_a_generated_task_not_built_yet_is_not_built_to_count_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DefSent's definitions come from WordNet and HEROS's pairs from spaCy: building them on the driver to count
    their texts took minutes of a run's silent planning. Until a worker has built one, it has no count."""
    monkeypatch.setenv("EVALFARM_BUILDS", str(cache / "no-builds-here"))
    cat = load_catalog("zoo-starter")
    plans = plan_run(cat, models=["bow-glove-6b-50d"], tasks=["defsent-wordnet", "stsb"], options=RunOptions())
    units = {u.task: u for p in plans for u in p.units}
    keys = {t: textcounts.key_of(t, u) for t, u in units.items()}
    assert textcounts.needs_build(cat.task("defsent-wordnet")) and not textcounts.needs_build(cat.task("stsb"))
    loaded: list[str] = []
    got = textcounts.counts(keys, {t: cat.task(t) for t in keys}, lambda t: loaded.append(t) or ["a b", "c d"])
    assert loaded == ["stsb"] and set(got) == {"stsb"}


def test_a_worker_that_loads_a_task_keeps_its_count_for_the_next_planner(cache: Path, tmp_path: Path) -> None:
    cat, keys, specs = _planned(TASKS[:1])
    plans = plan_run(cat, models=["glove-6b-50d"], tasks=TASKS[:1], options=RunOptions())
    ctx = ExecContext(catalog=cat, warehouse=Warehouse(tmp_path / "wh"), run_id="r")
    ctx.remember_count(plans[0].units[0])  # what the embed stage does with each task it reads
    got = textcounts.counts(keys, specs, lambda t: pytest.fail("counted again"))
    assert got == {TASKS[0]: len(set(ctx.texts(TASKS[0])))}


def test_an_unreadable_count_file_is_counted_again(cache: Path, tmp_path: Path) -> None:
    cat, keys, specs = _planned(TASKS[:1])
    path = textcounts.count_path(keys[TASKS[0]])
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a numpy file")
    ctx = ExecContext(catalog=cat, warehouse=Warehouse(tmp_path / "wh"), run_id="r")
    assert textcounts.counts(keys, specs, ctx.texts) == {TASKS[0]: len(set(ctx.texts(TASKS[0])))}
