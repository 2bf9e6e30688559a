"""docs/reference.md's tables are the registries' (evalfarm/reference.py): a stale reference fails CI."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from evalfarm import reference
from evalfarm.catalog.specs import TaskSpec
from evalfarm.plugins import task_kinds
from evalfarm.scorers.base import Scorer

pytestmark = pytest.mark.docs
REPO = Path(__file__).resolve().parents[1]


def test_docs_reference_md_is_what_the_registries_generate(capsys) -> None:
    code = reference.main(["--check", "--path", str(REPO / "docs" / "reference.md")])
    diff = capsys.readouterr().out
    assert code == 0, f"docs/reference.md is stale: run `make docs`\n{diff[-6000:]}"


def test_check_fails_with_a_diff_on_a_stale_reference_and_write_fixes_it(tmp_path, capsys) -> None:
    doc = tmp_path / "reference.md"
    current = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    doc.write_text(current.replace("`evalrank-word` | `evalrank`", "`evalrank-word` | `wordsim`"), encoding="utf-8")
    assert reference.main(["--check", "--path", str(doc)]) == 1
    out = capsys.readouterr()
    assert "-| `evalrank-word` | `wordsim`" in out.out and "+| `evalrank-word` | `evalrank`" in out.out
    assert "make docs" in out.err
    assert reference.main(["--write", "--path", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == current
    assert reference.main(["--check", "--path", str(doc)]) == 0


def test_a_reference_without_markers_is_an_error(tmp_path, capsys) -> None:
    doc = tmp_path / "reference.md"
    doc.write_text("# Reference\n\nhand-written\n", encoding="utf-8")
    assert reference.main(["--write", "--path", str(doc)]) == 2
    assert "markers" in capsys.readouterr().err
    assert doc.read_text(encoding="utf-8") == "# Reference\n\nhand-written\n"


class _SquaresTask(TaskSpec):
    kind: Literal["reference-test"] = "reference-test"
    level: Literal["word"] = "word"
    squares: int = 3


class _Squares(Scorer):
    name, version = "reference-squares", "7"
    task_spec = _SquaresTask
    primary_metric = "mean_square"
    higher_is_better = False
    description = "a kind registered by tests/test_reference_docs.py"
    detail_schemas = {"squares": {"query": "string", "square": "double"}}


def test_a_registered_task_kind_appears_with_what_it_declares() -> None:
    task_kinds.register(_Squares)  # the conftest fixture takes it out again
    row = next(ln for ln in reference.task_kinds_section().splitlines() if ln.startswith("| `reference-test`"))
    assert row == (
        "| `reference-test` | `reference-squares` | 7 | `mean_square` | lower is better | `squares` | `squares` | "
        "a kind registered by tests/test_reference_docs.py |"
    )
    assert "- `squares` (task kind `reference-test`): `query` string, `square` double" in reference.render()


def test_a_plug_in_packages_kind_is_left_to_its_own_docs() -> None:
    task_kinds.register(_Squares, origin="entry point 'reference-test' of reference-test-plugin")
    assert "reference-test" in task_kinds.names()
    assert "reference-test" not in reference.task_kinds_section()
