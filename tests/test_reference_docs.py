"""docs/reference.md's tables are the registries' (evalfarm/reference.py): a stale reference fails CI."""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import pytest

from evalfarm import reference
from evalfarm.catalog.specs import TaskSpec
from evalfarm.metrics import MetricInfo
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
    name, version = "reference-test", "7"
    task_spec = _SquaresTask
    primary_metric = "mean_square"
    declared_metrics = MappingProxyType(
        {"mean_square": MetricInfo("lower", 0.0, float("inf"), "mean", "score", "mean square")}
    )
    description = "a kind registered by tests/test_reference_docs.py"
    detail_schemas = {"squares": {"query": "string", "square": "double"}}


def test_a_registered_task_kind_appears_with_what_it_declares() -> None:
    task_kinds.register(_Squares)  # the conftest fixture takes it out again
    row = next(ln for ln in reference.task_kinds_section().splitlines() if ln.startswith("| `reference-test`"))
    assert row == (
        "| `reference-test` | 7 | `mean_square` | lower is better | `squares` | `squares` | "
        "a kind registered by tests/test_reference_docs.py |"
    )
    assert "- `squares` (task kind `reference-test`): `query` string, `square` double" in reference.render()


def test_a_plug_in_packages_kind_is_left_to_its_own_docs() -> None:
    task_kinds.register(_Squares, origin="entry point 'reference-test' of reference-test-plugin")
    assert "reference-test" in task_kinds.names()
    assert "reference-test" not in reference.task_kinds_section()


def test_every_view_the_user_guide_names_exists() -> None:
    """The user guide's views table (a guide to the main views; the full list is generated) names real views."""
    from evalfarm.cli import view_docs

    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    tables = re.findall(r"^\| view \| rows \|\n\|---\|---\|\n((?:\|.*\n)+)", guide, re.MULTILINE)
    assert len(tables) == 2, "the user guide's two views tables (results, correlations)"
    first_cells = [row.split(" | ")[0] for table in tables for row in table.splitlines()]
    named = {m.split(".")[0] for cell in first_cells for m in re.findall(r"`([\w.]+)", cell)}
    assert {"metrics", "leaderboard", "evalrank", "ranks", "runs", "failures", "units", "correlations"} <= named
    assert named <= {name for name, _ in view_docs()}


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower-cased, punctuation but ``-`` and ``_`` dropped, spaces to ``-``; a repeated
    heading gets ``-1``, ``-2`` …"""
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_link_between_the_readme_and_the_docs_resolves() -> None:
    """A section moved or renamed in one document breaks no link to it from another."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "cluster" / "README.md"]
    pages += [REPO / "benchmarks" / "README.md", REPO / "benchmarks" / "results" / "HISTORY.md"]
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such section)")
    assert not broken, "\n".join(broken)


MACHINE_PATH = re.compile(r"(?<![\w.~$<>-])/(?:work|tmp|check|root|home)/[^\s`'\")\]|,;]*")
"""An absolute path of the machine a figure was measured on, not a path inside the repository (``shared/data``)."""
MACHINE_PATHS_ALLOWED = {
    ("docs/operations.md", "/tmp/ray"): "Ray's own default temp dir on every machine, named to explain its mode 0777",
    ("docs/operations.md", "/tmp/evalfarm-head-XXXXXX"): "the mktemp pattern start-head.sh uses, on any machine",
}


def test_the_results_documents_name_no_path_of_the_machine_they_were_measured_on() -> None:
    """Issue 42: a reader elsewhere cannot open /work/nightly-wh2; a document names a warehouse by a relative or
    generic name (``nightly-wh2``, ``a copy of the warehouse``), in its commands too."""
    pages = [*sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
    pages.append(REPO / "benchmarks" / "results" / "HISTORY.md")
    found, used = [], set()
    for page in pages:
        rel = str(page.relative_to(REPO))
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for m in MACHINE_PATH.finditer(line):
                if (rel, m.group(0)) in MACHINE_PATHS_ALLOWED:
                    used.add((rel, m.group(0)))
                else:
                    found.append(f"{rel}:{n}: {m.group(0)}")
    assert not found, "absolute paths of a machine:\n" + "\n".join(found)
    assert used == set(MACHINE_PATHS_ALLOWED), f"allowed but no longer there: {set(MACHINE_PATHS_ALLOWED) - used}"


@pytest.mark.parametrize(
    "text",
    ["--warehouse /work/nightly-wh2 --json", "(`/tmp/w13/wh`)", "cp -r /root/wh x", "in /home/me/wh", "/check/x"],
)
def test_the_machine_path_pattern_finds_each_kind(text: str) -> None:
    assert MACHINE_PATH.search(text)


@pytest.mark.parametrize(
    "text", ["shared/data/evalrank", "../shared/MODELS.md", "`wh-copy/`", "benchmarks/results/tmp/x", "$TMPDIR/ray"]
)
def test_the_machine_path_pattern_leaves_relative_paths_alone(text: str) -> None:
    assert not MACHINE_PATH.search(text)
