"""One name per task kind (issue 42): a catalog's ``kind:`` is the warehouse's ``scorer``, the name every view,
report and correlation joins on. ``wordsim`` and ``sts-bands`` were the catalog's names of the kinds whose numbers
the warehouse stores as ``word-similarity`` and ``similarity-bands``; they are now those names, the old ones still
read (with a warning naming the file), and no task's checksum moved, so nothing is recomputed."""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from evalfarm.catalog.registry import CatalogError, load_catalog
from evalfarm.plugins import RegistryError, task_kinds
from evalfarm.scorers import scorer_for
from evalfarm.taskdata.data import task_checksum

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "plugins" / "evalfarm_toy_plugin"
CHECKSUMS = REPO / "tests" / "fixtures" / "task_checksums.json"

_ENTRY = """\
tasks:
  - id: mc
    level: word
    kind: {kind}
    version: "2021-03-26"
    files: {{pairs: wordsim/EN-MC-30.txt}}
    sha256: {{pairs: {sha}}}
    licence: MIT
    source: test
"""


def _catalog(tmp_path: Path, name: str, kind: str) -> Path:
    sha = load_catalog("tasks").task("wordsim-mc-30").sha256["pairs"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(_ENTRY.format(kind=kind, sha=sha), encoding="utf-8")
    return path


def test_every_scorer_is_named_as_its_kind() -> None:
    for kind, scorer in task_kinds.items():
        assert scorer.name == kind == scorer.task_spec.model_fields["kind"].default


def test_a_former_kind_name_still_loads_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    old = _catalog(tmp_path, "old", "wordsim")
    new = _catalog(tmp_path, "new", "word-similarity")
    with pytest.warns(FutureWarning, match=re.escape(str(old)) + r".*'wordsim' is now called 'word-similarity'"):
        old_task = load_catalog(old).task("mc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current name: no warning
        new_task = load_catalog(new).task("mc")
    assert old_task.kind == new_task.kind == "word-similarity"
    assert scorer_for(old_task.kind).name == "word-similarity"
    assert task_checksum(old_task) == task_checksum(new_task)


def test_an_unknown_kind_is_still_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"unknown task kind 'wordsims'.*word-similarity"):
        load_catalog(_catalog(tmp_path, "typo", "wordsims"))


def test_shipped_task_checksums_are_unchanged() -> None:
    """Every shipped task's checksum (which enters every unit's fingerprint) is the one the code had before the
    kinds were renamed: a rename must recompute nothing. Regenerate only for a deliberate change of a task's
    content: ``EVALFARM_REGEN_GOLDEN=1``."""
    import os

    current = {
        path.name: {t: task_checksum(cat.task(t)) for t in cat.tasks}
        for path in sorted((REPO / "catalog").glob("*.yaml"))
        for cat in [load_catalog(path)]
    }
    if os.environ.get("EVALFARM_REGEN_GOLDEN") == "1":
        CHECKSUMS.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = json.loads(CHECKSUMS.read_text())
    assert sorted(current) == sorted(golden)
    for name, rows in golden.items():
        changed = sorted(t for t, v in rows.items() if current[name].get(t) != v)
        assert not changed, f"{name}: task checksum changed for {changed[:10]}"
    kinds = {load_catalog("tasks").task(t).kind for t in golden["tasks.yaml"]}
    assert {"word-similarity", "similarity-bands"} <= kinds  # the renamed kinds are in what the golden covers


def test_a_scorer_named_otherwise_than_its_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setitem(sys.modules, "evalfarm_toy_plugin", None)
    del sys.modules["evalfarm_toy_plugin"]
    import evalfarm_toy_plugin

    class SecondName(evalfarm_toy_plugin.LengthClasses):
        name = "length-classifier"

    with pytest.raises(RegistryError, match="'length-classifier' scores task kind 'length-classes'"):
        task_kinds.register(SecondName)


def test_every_scorer_name_in_sql_is_a_kind() -> None:
    """A literal ``scorer = '...'`` in a view, a report or a correlation names a registered kind: no second name
    for a kind in SQL (``word-similarity`` once stood beside the catalog's ``wordsim``)."""
    literal = re.compile(r"scorer\s*(?:=|<>|!=)\s*'([a-z0-9-]+)'")
    files = [*sorted((REPO / "sql").glob("*.sql")), *sorted((REPO / "evalfarm").rglob("*.sql"))]
    files += sorted((REPO / "evalfarm").rglob("*.py"))
    named = {m.group(1) for p in files for m in literal.finditer(p.read_text(encoding="utf-8"))}
    assert "word-similarity" in named  # the check reads the files that name one
    assert named - set(task_kinds.names()) == set()
