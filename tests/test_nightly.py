"""A nightly that reports (issue 44): the run's end summary in the warehouse (``runs.summary``) and printed, handed
to a ``--notify`` command as JSON on stdin, and the exit status: 0 all done, 1 some units failed, 2 usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm.notify import notify
from evalfarm.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
REPORT = {"run_id": "r1", "status": "failed", "exit_code": 1, "counts": {"units": 2, "done": 1, "failed": 1}}
CATALOG = """\
name: nightly
include: [tasks]
tasks: [wordsim-rg-65, wordsim-mc-30]
models:
  - id: toy
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/toy_emb.txt}
"""
BROKEN = """\
  - id: gone
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/no-such-file.txt}
"""
# a real command, as a team would write one: read the JSON from stdin, keep it with what the environment says
KEEP = (
    f'{sys.executable} -c "import json, os, sys; d = json.load(sys.stdin); '
    "d['env'] = {k: os.environ[k] for k in ('EVALFARM_RUN_ID', 'EVALFARM_RUN_STATUS', 'EVALFARM_EXIT_CODE')}; "
    "open(os.environ['KEEP_TO'], 'w').write(json.dumps(d))\""
)


def test_the_hook_gets_the_summary_on_stdin_and_the_run_in_its_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KEEP_TO", str(tmp_path / "got.json"))
    done = notify(KEEP, REPORT)
    assert done.ok, done.output
    got = json.loads((tmp_path / "got.json").read_text())
    assert got.pop("env") == {"EVALFARM_RUN_ID": "r1", "EVALFARM_RUN_STATUS": "failed", "EVALFARM_EXIT_CODE": "1"}
    assert got == REPORT


def test_a_hook_that_fails_or_hangs_is_reported_not_raised() -> None:
    failed = notify("echo 'webhook said 500' >&2; exit 22", REPORT)
    assert (failed.ok, failed.returncode) == (False, 22)
    assert failed.describe().endswith(": exit 22 after " + f"{failed.seconds:.1f}s: webhook said 500")
    hung = notify("sleep 30", REPORT, timeout=0.5)
    assert hung.returncode is None and "timed out" in hung.describe()


def _evalfarm(args: list[str], cwd: Path, data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), "EVALFARM_DATA": str(data_dir), "EVALFARM_CONFIG": "", **env}
    return subprocess.run([sys.executable, "-m", "evalfarm", *args], cwd=cwd, env=full, capture_output=True, text=True)


@pytest.mark.slow  # three `evalfarm run`s in process (a toy model, and one whose file is missing), each a subprocess
def test_a_nightly_reports_its_end_and_exits_by_what_happened(tmp_path: Path, data_dir: Path) -> None:
    (tmp_path / "ok.yaml").write_text(CATALOG, encoding="utf-8")
    (tmp_path / "broken.yaml").write_text(CATALOG + BROKEN, encoding="utf-8")
    base = ["run", "--executor", "local", "--warehouse", str(tmp_path / "wh"), "--notify", KEEP]

    ok = _evalfarm([*base, "--catalog", "ok.yaml"], tmp_path, data_dir, KEEP_TO=str(tmp_path / "ok.json"))
    assert ok.returncode == 0, ok.stderr
    report = json.loads((tmp_path / "ok.json").read_text())
    assert report["status"] == "ok" and report["exit_code"] == 0 and report["env"]["EVALFARM_RUN_STATUS"] == "ok"
    assert report["counts"] == {"units": 2, "done": 2, "skipped": 0, "failed": 0, "not_computed": 0}
    assert report["failures"] == [] and report["wall_s"] > 0 and "moved" in report and report["moved"] is None
    assert "notify hook" in ok.stderr and "exit 0" in ok.stderr

    bad = _evalfarm([*base, "--catalog", "broken.yaml"], tmp_path, data_dir, KEEP_TO=str(tmp_path / "bad.json"))
    assert bad.returncode == 1, bad.stderr
    report = json.loads((tmp_path / "bad.json").read_text())
    assert report["status"] == "failed" and report["env"]["EVALFARM_EXIT_CODE"] == "1"
    assert report["counts"]["failed"] == 2 and report["counts"]["skipped"] == 2  # toy's units: done by the first run
    failed = {(f["model"], f["task"]) for f in report["failures"]}
    assert failed == {("gone", "wordsim-rg-65"), ("gone", "wordsim-mc-30")}
    assert all("\n" not in f["error"] and "no-such-file" in f["error"] for f in report["failures"])

    stored = Warehouse(tmp_path / "wh").query("SELECT run_id, status, summary FROM runs ORDER BY started_at")
    rows = stored.to_pylist()
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert json.loads(rows[1]["summary"])["failures"] == report["failures"]

    usage = _evalfarm([*base, "--catalog", "ok.yaml", "--models", "nope"], tmp_path, data_dir)
    assert usage.returncode == 2 and "nope" in usage.stderr
    assert _evalfarm(["run", "--no-such-option"], tmp_path, data_dir).returncode == 2


def test_a_url_gets_the_summary_posted_with_a_headline(tmp_path: Path) -> None:
    import http.server
    import threading

    got: list[dict] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204 if len(got) == 1 else 500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        report = {**REPORT, "host": "vm", "wall_s": 2232.0}
        assert notify(url, report).ok
        assert got[0]["text"] == "evalfarm run r1 on vm: failed · 1 done, 0 skipped, 1 failed in 37m12s"
        assert {k: got[0][k] for k in report} == report
        refused = notify(url, report)
        assert refused.returncode == 500 and "HTTP 500" in refused.describe()
    finally:
        server.shutdown()
