"""docs/operations.md's tables of issue 23's, 40's and 48's attacks name tests that exist and `make faults` runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def _table_rows() -> list[str]:
    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("### The fault-and-attack suite (`make faults`)", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if re.match(r"\| (40\.|48\.)?\d+ \|", line)]


def _named(cell: str) -> list[tuple[str, str]]:
    """(file, test name or glob) pairs of a table cell, in order: `file.py::name`, or `file.py` followed by the names
    in it (`name`, `name`), or `file.py` alone (every test in it)."""
    out: list[tuple[str, str]] = []
    current: str | None = None
    named_since = True
    for m in re.finditer(r"(test_\w+\.py)(?:::([\w*]+))?|\b(test_[\w*]+)\b(?!\.py)", cell):
        file, inline, name = m.groups()
        if file:
            if current is not None and not named_since:
                out.append((current, "*"))
            current, named_since = file, inline is not None
            if inline:
                out.append((file, inline))
        else:
            assert current is not None, cell
            out.append((current, name))
            named_since = True
    if current is not None and not named_since:
        out.append((current, "*"))
    return out


def _faults_marked(source: str, name: str) -> bool:
    if re.search(r"^pytestmark = .*pytest\.mark\.faults", source, re.M):
        return True
    head = source[: re.search(rf"^def {name}\(", source, re.M).start()]  # type: ignore[union-attr]
    decorators = re.search(r"(?:^(?:@|\s|\)|\]).*\n)*\Z", head, re.M)
    return decorators is not None and "@pytest.mark.faults" in decorators.group(0)


@pytest.mark.docs
def test_every_numbered_item_names_tests_that_exist_and_are_marked_faults() -> None:
    rows = _table_rows()
    items = [r.split("|")[1].strip() for r in rows]
    assert items == [str(i) for i in range(1, 8)] + [f"40.{i}" for i in range(1, 8)] + [f"48.{i}" for i in range(1, 8)]
    for row in rows:
        for file, pattern in _named(row.split("|")[3]):
            source = (TESTS / file).read_text(encoding="utf-8")
            defined = re.findall(r"^def (test_\w+)\(", source, re.M)
            matching = [n for n in defined if re.fullmatch(pattern.replace("*", r"\w*"), n)]
            assert matching, f"{file}: no test {pattern}"
            for name in matching:
                assert _faults_marked(source, name), f"{file}::{name} is not marked faults"
