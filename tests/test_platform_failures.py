"""Failures of the platform under a run end as one evalfarm message: the cause and the next command, the traceback
only with ``-v`` (issue 52). A Ray that does not start, a warehouse without permission, a full disk; the lost head
is tests/test_faults.py's (the driver exits within seconds of its message)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm.warehouse import Warehouse

pytestmark = pytest.mark.slow  # `evalfarm run` in a subprocess, each

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--catalog", "zoo-starter", "--models", "glove-6b-50d", "--tasks", "wordsim-rg-65"]


def _run(wh: Path, *extra: str, prefix: list[str] | None = None, env: dict[str, str] | None = None):
    cmd = [*(prefix or []), sys.executable, "-m", "evalfarm", *extra, "run", *ARGS, "--warehouse", str(wh)]
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/", timeout=600)


def _errors(got: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in (got.stdout + got.stderr).splitlines() if ln.startswith("error:")]


def test_a_ray_that_does_not_start_is_one_message_naming_the_way_without_ray(tmp_path: Path) -> None:
    """A Ray head that failed to start printed Ray's own 70-line traceback and log dump. A temp folder whose path
    leaves Ray's sockets no room (AF_UNIX paths stop at 107 bytes) makes a real local Ray fail to start."""
    deep = tmp_path / ("x" * 110)
    deep.mkdir()
    got = _run(tmp_path / "wh", env={"TMPDIR": str(deep)})
    (line,) = _errors(got)
    assert got.returncode == 3 and "Traceback" not in got.stdout + got.stderr, got.stderr[-3000:]
    assert line.startswith("error: could not start a local Ray: OSError: ") and "107 bytes" in line
    assert line.endswith(" --executor local; or run the same command again once the machine is less busy "
                         "(finished units are skipped)")  # fmt: skip
    assert f"evalfarm run {' '.join(ARGS)} --warehouse {tmp_path / 'wh'} --executor local" in line
    (run,) = Warehouse(tmp_path / "wh").query("SELECT status, reason FROM runs").to_pylist()
    assert run["status"] == "interrupted" and "RayStartFailed" in run["reason"]
    verbose = _run(tmp_path / "wh2", "-v", env={"TMPDIR": str(deep)})
    assert verbose.returncode == 3 and "Traceback" in verbose.stderr and len(_errors(verbose)) == 1


def test_a_warehouse_without_write_permission_is_one_message(tmp_path: Path) -> None:
    """As root without the capability to override file permissions (what any other user meets)."""
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_DAC_OVERRIDE")
    wh = tmp_path / "wh"
    wh.mkdir(mode=0o555)
    got = _run(wh, prefix=["setpriv", "--bounding-set", "-dac_override,-dac_read_search"])
    (line,) = _errors(got)
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-3000:]
    assert line.startswith(f"error: cannot write {wh}/") and ": Permission denied; " in line
    assert (
        "Give this user write access to the warehouse folder (or give another --warehouse), then run the same "
        f"command again (finished units are skipped): evalfarm run {' '.join(ARGS)} --warehouse {wh}" in line
    )


def test_a_full_disk_is_one_message(tmp_path: Path) -> None:
    """The warehouse on a tmpfs that is already full (a private mount namespace)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-Urm", "true"]).returncode != 0:
        pytest.skip("needs a private mount namespace (unshare -Urm)")
    disk = tmp_path / "disk"
    disk.mkdir()
    fill = f"mount -t tmpfs -o size=64k tmpfs {disk} && mkdir {disk}/wh && (head -c 200000 /dev/zero > {disk}/f; true)"
    got = _run(disk / "wh", prefix=["unshare", "-Urm", "sh", "-c", f'{fill} && exec "$@"', "sh"])
    (line,) = _errors(got)
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-3000:]
    assert line.startswith(f"error: cannot write {disk}/wh") and ": No space left on device; " in line
    assert "Free space on that disk (or give another --warehouse), then run the same command again" in line
