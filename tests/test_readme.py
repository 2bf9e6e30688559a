"""The newcomer's path (issue 13.9, 24): the README's Quick start, in order.

What the test expects of the README: a ``## Quick start`` section whose ```` ```bash ```` blocks hold the commands, one
per line (comments after ``#`` are fine); the first is ``make install``, and a subset ``evalfarm run --models ...``
comes before ``make run`` (it works on what ``make install`` wrote: ``.evalfarm.toml``). The blocks themselves run as
written, in a fresh shell, with every other document's: tests/test_doc_blocks.py (the doc runner).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs
REPO = Path(__file__).resolve().parents[1]


def quick_start_commands(readme: str) -> list[str]:
    """The command lines of the bash blocks of the README's ``## Quick start`` section, in order."""
    m = re.search(r"^## Quick start\s*$(.*?)(?=^## )", readme, re.MULTILINE | re.DOTALL)
    assert m, "README.md has no '## Quick start' section"
    blocks = re.findall(r"^```bash\n(.*?)^```", m.group(1), re.MULTILINE | re.DOTALL)
    assert blocks, "the Quick start section has no ```bash blocks"
    return [line for block in blocks for line in block.splitlines() if line.strip()]


@pytest.mark.docs
def test_the_quick_start_parser_reads_the_readme() -> None:
    commands = quick_start_commands((REPO / "README.md").read_text(encoding="utf-8"))
    bare = [c.split("#")[0].strip() for c in commands]
    assert bare[0] == "make install"
    subset = next(i for i, c in enumerate(bare) if c.startswith("evalfarm run --models"))
    assert subset < bare.index("make run"), "the subset run comes first: it works before the full run"


@pytest.mark.docs
def test_the_reliability_table_is_what_make_faults_measured() -> None:
    """docs/operations.md's Reliability table is `make faults`'s table (benchmarks/faults.py's ``markdown``) of the
    results it stored in benchmarks/results/faults.json, row for row: every scenario, each as expected, no row lost or
    duplicated. Re-run `make faults` and paste its table when a scenario changes."""
    import json

    from tests.support.faults_harness import faults

    results = [faults.Result(**r) for r in json.loads((REPO / "benchmarks/results/faults.json").read_text())]
    assert len(results) == len(faults.SCENARIOS)
    assert [(r.fault, r.ok, r.lost, r.duplicated) for r in results] == [(r.fault, True, 0, 0) for r in results]
    doc = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    m = re.search(r"^## Reliability\s*$(.*?)(?=^## )", doc, re.MULTILINE | re.DOTALL)
    assert m, "docs/operations.md has no '## Reliability' section"
    table = [line for line in m.group(1).splitlines() if line.startswith("|")]
    assert table == faults.markdown(results).splitlines()
