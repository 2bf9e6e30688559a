"""`evalfarm sql`, `correlations` and `report` on an existing warehouse import neither torch, transformers nor Ray
(issue 24): reading results must not pay for (or need) the model stack. Each command runs in its own process, as a
user runs it; an exit hook reports which of the heavy modules that process imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "ray", "sentence_transformers")
CATALOG = """\
name: light-commands
include: [tasks]
tasks: [wordsim-rg-65, wordsim-mc-30]
models:
  - id: toy
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/toy_emb.txt}
"""


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, data_dir) -> Path:
    import evalfarm

    d = tmp_path_factory.mktemp("light")
    (d / "light.yaml").write_text(CATALOG, encoding="utf-8")
    evalfarm.run(str(d / "light.yaml"), warehouse=d / "wh", data=data_dir, executor="local")
    return d / "wh"


def _run(args: list[str], cwd: Path) -> dict:
    code = textwrap.dedent(
        f"""
        import atexit, json, sys, time
        t0 = time.perf_counter()
        def report():
            loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
            sys.stderr.write("LIGHT " + json.dumps({{"loaded": loaded, "s": time.perf_counter() - t0}}) + "\\n")
        atexit.register(report)
        sys.argv = ["evalfarm", *{args!r}]
        from evalfarm.cli import main
        main()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("LIGHT "))
    return json.loads(line[len("LIGHT ") :])


@pytest.mark.slow  # three CLI processes (~2 s each on an idle machine)
@pytest.mark.parametrize(
    "command",
    [
        ["sql", "SELECT model, task, value FROM leaderboard"],
        ["correlations", "--level", "word"],
        ["report", "--out", "REPORT"],
    ],
    ids=["sql", "correlations", "report"],
)
def test_reading_commands_import_no_model_stack(warehouse, tmp_path, command) -> None:
    args = [a.replace("REPORT", str(tmp_path / "report")) for a in command] + ["--warehouse", str(warehouse)]
    got = _run(args, tmp_path)
    assert got["loaded"] == [], f"`evalfarm {command[0]}` imported {got['loaded']}"
    if command[0] == "report":
        assert (tmp_path / "report" / "index.html").is_file()
