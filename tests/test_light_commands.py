"""`evalfarm sql`, `correlations` and `report` on an existing warehouse import neither torch, transformers nor Ray
(issue 24): reading results must not pay for (or need) the model stack; `sql` not for SciPy's statistics either
(issue 51). Each command runs in its own process, as a user runs it; an exit hook reports which of the heavy modules
that process imported.
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
STATS = "scipy.stats"
"""Not the model stack, but 0.4-1 s of imports and ~40,000 long-lived objects that each full garbage collection of a
reading process walks again (issue 51: without them, and with one typed empty file a bound table, the board at 1,000
models went from 1.53-1.67x its floor to 1.22-1.23x). `evalfarm sql` reads the views only; `correlations` and
`report` run statistical tests, so they may import it."""
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
            loaded = sorted(m for m in {(*HEAVY, STATS)!r} if m in sys.modules)
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
    allowed = [] if command[0] == "sql" else [STATS]
    assert [m for m in got["loaded"] if m not in allowed] == [], f"`evalfarm {command[0]}` imported {got['loaded']}"
    if command[0] == "report":
        assert (tmp_path / "report" / "index.html").is_file()


@pytest.mark.slow  # an end-to-end run (in process, a toy model on two small tasks), then a no-op rerun
def test_run_format_json_prints_the_summary_on_stdout(tmp_path, data_dir) -> None:
    """`evalfarm run --format json` (issue 24): one JSON object on stdout, the human summary still on stderr."""
    from typer.testing import CliRunner

    from evalfarm.cli import app

    (tmp_path / "light.yaml").write_text(CATALOG, encoding="utf-8")
    args = ["run", "--catalog", str(tmp_path / "light.yaml"), "--warehouse", str(tmp_path / "wh"), "--executor"]
    args += ["local", "--format", "json"]
    runner = CliRunner()
    first = runner.invoke(app, args, env={"EVALFARM_DATA": str(data_dir)})
    assert first.exit_code == 0, first.output
    got = json.loads(first.stdout.strip().splitlines()[-1])
    assert got["status"] == "ok" and got["counts"] == {"done": 2, "skipped": 0, "failed": 0}
    assert {(u["model"], u["task"], u["status"]) for u in got["units"]} == {
        ("toy", "wordsim-rg-65", "done"),
        ("toy", "wordsim-mc-30", "done"),
    }
    assert all(u["summary"] and u["seconds"] >= 0 for u in got["units"]) and got["warehouse"] == str(tmp_path / "wh")
    assert "2 done, 0 skipped, 0 failed" in first.stderr
    assert got["first_eta"]["sources"] == {"built-in": 2} and got["first_eta"]["workers"] == 1  # an empty warehouse
    again = json.loads(runner.invoke(app, args, env={"EVALFARM_DATA": str(data_dir)}).stdout.strip().splitlines()[-1])
    assert again["counts"] == {"done": 0, "skipped": 2, "failed": 0} and again["run_id"] != got["run_id"]
    assert again["first_eta"] is None  # nothing to compute: no estimate
