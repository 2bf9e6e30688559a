"""Issue 40, item 2: another local user cannot get into a Ray that evalfarm starts, even without needing its token.

Ray makes its temp dir and each session dir mode 0777 (for a /tmp/ray shared by every user). Another user of the
machine could then read every log and plant files in a session, and replace a cached ``working_dir`` package: the
next job with that working dir (``evalfarm submit`` of the same spec) runs their code as the head's user. Every Ray
temp dir evalfarm creates or uses now sits in a folder only its user can enter (0700). The attacks run as a second
uid (``nobody``, through ``setpriv``): that needs root, which CI and the test machines have; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ray_heads

pytestmark = [pytest.mark.faults, pytest.mark.slow]  # issue 40 (`make faults`); real Ray heads

ATTACKER = 65534  # nobody
REPO = Path(__file__).resolve().parents[1]

ATTACK = r"""
import json, os, sys
session, out = sys.argv[1], {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as exc:
        out[name] = type(exc).__name__

def read_a_log():
    logs = os.path.join(session, "logs")
    with open(os.path.join(logs, sorted(os.listdir(logs))[0]), "rb") as fh:
        fh.read(100)

def plant_a_file():
    with open(os.path.join(session, "planted.py"), "w") as fh:
        fh.write("print('pwned')\n")

def replace_the_package():
    root = os.path.join(session, "runtime_resources", "working_dir_files")
    packages = [n for n in os.listdir(root) if not n.endswith(".old")]
    if not packages:
        raise FileNotFoundError("no cached working_dir package")
    for name in packages:
        pkg = os.path.join(root, name)
        os.rename(pkg, pkg + ".old")
        os.mkdir(pkg, 0o755)
        with open(os.path.join(pkg, "job.txt"), "w") as fh:
            fh.write("EVIL")

attempt("list the session", lambda: os.listdir(session))
attempt("read a log", read_a_log)
attempt("plant a file", plant_a_file)
if len(sys.argv) > 2:
    attempt("replace a cached working_dir package", replace_the_package)
print(json.dumps(out))
"""


def as_another_user(*args: str) -> dict[str, str]:
    """Run the attack as uid ``nobody``; its outcome per attempt ("done", or the error that stopped it)."""
    if os.getuid() != 0:
        pytest.skip("the attack needs a second uid: run as root (CI does) so setpriv can switch to nobody")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("no setpriv (util-linux) to run the attack as a second uid")
    cmd = [setpriv, f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups", sys.executable, "-I", "-c"]
    proc = subprocess.run([*cmd, ATTACK, *args], capture_output=True, text=True, cwd="/", timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


JOB = """
import sys, ray
ray.init(address=sys.argv[1], runtime_env={"working_dir": sys.argv[2]}, log_to_driver=False)

@ray.remote
def read():
    return open("job.txt").read()

print(ray.get(read.remote(), timeout=120), flush=True)
"""


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> Iterator[ray_heads.Head]:
    h = ray_heads.start_head(tmp_path_factory.mktemp("head"), num_cpus=1)
    try:
        yield h
    finally:
        ray_heads.stop_head(h)


def _job(head: ray_heads.Head, working_dir: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", JOB, head.gcs, str(working_dir)],
        env=head.client_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_another_user_cannot_read_plant_or_replace_a_package_in_a_heads_session(head, tmp_path) -> None:
    """start-head.sh's head, after a job with a working_dir: the attacker reads no log, plants nothing, and cannot
    swap the cached package the next job with that working dir would run."""
    wd = tmp_path / "job"
    wd.mkdir()
    (wd / "job.txt").write_text("honest")
    assert _job(head, wd) == "honest"
    record = dict(line.split("=", 1) for line in (head.ray_dir / "head").read_text().splitlines() if "=" in line)
    session = record.get("session_dir") or str(Path(record["temp_dir"]) / "session_latest")
    outcome = as_another_user(session, "package")
    next_job = _job(head, wd)  # what the next job with that working dir runs
    print(outcome, next_job)
    assert all(v != "done" for v in outcome.values()), outcome
    assert next_job == "honest"  # the user's package, not the attacker's
    private = Path(record["private_dir"])
    assert private.stat().st_mode & 0o777 == 0o700 and private.stat().st_uid == os.getuid()
    assert Path(record["temp_dir"]).parent == private


OWN_RAY = """
import sys, ray
from evalfarm.scheduler.ray_executor import connect
assert connect(None, num_cpus=1)
print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
sys.stdin.readline()
"""


def test_another_user_cannot_read_or_plant_in_evalfarm_runs_own_ray(tmp_path) -> None:
    """`evalfarm run`'s own local Ray (connect(None)): its session is out of the attacker's reach too."""
    proc = subprocess.Popen(
        [sys.executable, "-c", OWN_RAY], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        session = proc.stdout.readline().strip()
        assert session, proc.stderr.read()[-3000:] if proc.poll() is not None else "no session dir"
        outcome = as_another_user(session)
        print(outcome)
        assert all(v != "done" for v in outcome.values()), outcome
        parent = Path(session).parent.parent  # <tmp>/evalfarm-ray-<uid>/ray/session_…
        assert parent.name == f"evalfarm-ray-{os.getuid()}" and parent.stat().st_mode & 0o777 == 0o700
    finally:
        try:
            proc.communicate("\n", timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_the_private_parent_is_never_another_users_folder(tmp_path, monkeypatch) -> None:
    """A folder of that name planted by someone else (or a link) is not used: a fresh private one is."""
    from evalfarm.scheduler.ray_executor import private_ray_temp_dir

    planted = tmp_path / f"evalfarm-ray-{os.getuid()}"
    planted.symlink_to(tmp_path)
    got = Path(private_ray_temp_dir(str(tmp_path)))
    assert got.name == "ray" and got.parent != planted and got.parent.stat().st_mode & 0o777 == 0o700
    planted.unlink()
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    assert Path(private_ray_temp_dir(str(tmp_path))) == planted / "ray"  # this user's own: made private
    assert planted.stat().st_mode & 0o777 == 0o700
