"""The newcomer's path (issue 13.9): the README's Quick start, run as written, in order, in one fresh shell.

What the test expects of the README: a ``## Quick start`` section whose ```` ```bash ```` blocks hold the commands, one
per line (comments after ``#`` are fine); the first two are ``make install`` and ``make run``; later ones may
``. .venv/bin/activate`` and call ``evalfarm``. Every line runs as written, in a fresh ``bash -e`` without
``EVALFARM_DATA`` or any evalfarm setting in the environment (``make run`` must leave what the next commands need:
``.evalfarm.toml``), except ``make test`` and ``make test-fast`` (that is this suite).

What the test changes, to run in a minute instead of the starter zoo's five: it runs in a copy of the checkout
whose ``.venv`` is the installed environment (``make install`` is up to date), with ``../shared/data`` beside it
(the real data, plus small slices), and ``make run`` gets ``CATALOG=quickstart-test`` (three of the starter zoo's
models -- glove-6b-50d, bow-glove-6b-50d, all-minilm-l6-v2 -- on wordsim-rg-65 and on slices of evalrank-sentence
(60 pairs, 150 background sentences) and stsb (30 pairs per split), under those ids) and
``RUN_ARGS=--executor local``, both Makefile variables. CPU time ~20 s; wall time follows the machine's load.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.docs
REPO = Path(__file__).resolve().parents[1]
SKIP = {"make test": "the test suite itself", "make test-fast": "the suite's fast tier"}


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
    assert [c.split("#")[0].strip() for c in commands[:2]] == ["make install", "make run"]
    assert any(c.startswith("evalfarm ") for c in commands)


def _slice(src: Path, dst: Path, n: int) -> str:
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)[:n]
    dst.write_text("".join(lines), encoding="utf-8")
    return hashlib.sha256(dst.read_bytes()).hexdigest()


def _sandbox(root: Path, data_dir: Path) -> Path:
    """A copy of the checkout at root/repo, its .venv the running environment, root/shared/data the data."""
    repo = root / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    data = root / "shared" / "data"
    # a copy, not symlinks: evalfarm refuses a task file that resolves outside the data folder
    shutil.copytree(data_dir, data)
    q = data / "quickstart"
    tasks = yaml.safe_load((REPO / "catalog" / "tasks.yaml").read_text(encoding="utf-8"))["tasks"]
    by_id = {t["id"]: t for t in tasks}
    sent = by_id["evalrank-sentence"]
    sent["files"] = {"pairs": "quickstart/pos_pair.txt", "background": "quickstart/background_sent.txt"}
    sent["sha256"] = {
        "pairs": _slice(data_dir / "evalrank/sent_evalrank/pos_pair.txt", q / "pos_pair.txt", 60),
        "background": _slice(data_dir / "evalrank/sent_evalrank/background_sent.txt", q / "background_sent.txt", 150),
    }
    stsb = by_id["stsb"]
    for role, rel in list(stsb["files"].items()):
        stsb["files"][role] = f"quickstart/{Path(rel).name}"
        stsb["sha256"][role] = _slice(data_dir / rel, q / Path(rel).name, 30)
    for t in (sent, stsb):
        t.pop("urls", None)
        t["version"] += "-quickstart-slice"
    starter = yaml.safe_load((REPO / "catalog" / "zoo-starter.yaml").read_text(encoding="utf-8"))
    models = [m for m in starter["models"] if m["id"] in ("glove-6b-50d", "bow-glove-6b-50d", "all-minilm-l6-v2")]
    quick = {
        "name": "quickstart-test",
        "description": "tests/test_readme.py: three starter-zoo models on small slices",
        "tasks": [by_id["wordsim-rg-65"], sent, stsb],
        "models": models,
    }
    (repo / "catalog" / "quickstart-test.yaml").write_text(yaml.safe_dump(quick, sort_keys=False), encoding="utf-8")
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    path = f'PYTHONPATH="{repo}${{PYTHONPATH:+:$PYTHONPATH}}"'
    for name, body in {
        "python": f'{path} exec "{sys.executable}" "$@"',
        "evalfarm": f'{path} exec "{sys.executable}" -m evalfarm.cli "$@"',
    }.items():
        (venv / name).write_text(f"#!/bin/sh\n{body}\n")
        (venv / name).chmod(0o755)
    (venv / "activate").write_text(f'VIRTUAL_ENV="{repo / ".venv"}"\nexport VIRTUAL_ENV\nPATH="{venv}:$PATH"\n')
    (repo / ".venv" / ".installed").touch()  # `make install` is up to date: this environment is installed
    return repo


@pytest.mark.slow
@pytest.mark.docs
def test_readme_quick_start_runs_as_written_in_a_fresh_shell(tmp_path, data_dir) -> None:
    if shutil.which("make") is None:
        pytest.fail("make is needed: the Quick start starts with `make run`")
    repo = _sandbox(tmp_path, data_dir)
    commands = [
        c
        for c in quick_start_commands((REPO / "README.md").read_text(encoding="utf-8"))
        if c.split("#")[0].strip() not in SKIP
    ]
    script = "set -e -o pipefail\n" + "".join(f"echo '+ {c.replace(chr(39), '')}' >&2\n{c}\n" for c in commands)
    keep = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RAY_USAGE_STATS_ENABLED", "TOKENIZERS_PARALLELISM", "LANG")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env |= {
        "HOME": str(tmp_path / "home"),  # no user config, an empty cache
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "CATALOG": "quickstart-test",  # Makefile variables: the small configuration (see the module docstring)
        "RUN_ARGS": "--executor local",
        "COLUMNS": "120",
    }
    proc = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout[-4000:] + "\n--- stderr ---\n" + proc.stderr[-6000:]
    assert proc.returncode == 0, log
    assert "Traceback" not in proc.stderr, log
    assert "not evaluated" not in proc.stderr, log  # every model a README command names is evaluated
    config = (repo / ".evalfarm.toml").read_text()
    assert f'data = "{tmp_path / "shared" / "data"}"' in config and f'warehouse = "{repo / "warehouse"}"' in config
    assert "EVALFARM_DATA" not in env
    # the README's commands after `make run` used the warehouse make filled, not a new one elsewhere
    assert not (repo / "warehouse" / "quarantine").exists()
    assert list((repo / "warehouse" / "tables" / "metrics").glob("model=all-minilm-l6-v2/task=*"))


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
