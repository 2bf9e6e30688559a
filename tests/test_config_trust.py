"""Issue 48, HIGH 3: another local user cannot run code as you, or widen what evalfarm reads, through a config file.

Settings came from the nearest ``.evalfarm.toml`` above the current folder, whoever owned it: a file another user
wrote in a shared parent (``/tmp``) gave its ``notify`` command (run through ``sh -c`` at the end of a run: it ran as
root), its ``model_paths = "/"`` and its warehouse to every user below it. Now a file is used as git uses a
repository after CVE-2022-24765: only when it and every folder above it up to where the search stops are the user's
(or root's) and writable by no one else; the search stops at the user's home and at a change of owner or
filesystem; a refused file is named in a warning and in ``evalfarm config show``. ``notify``, ``model_paths`` and
``data`` come only from the user's own file (not root's shared one), the environment or the command line.

The attacks run as a second uid (``nobody``, through ``setpriv``), as tests/test_other_users.py does: that needs
root, which CI and the test machines have; elsewhere they skip. The folder checks use ``chown`` (root too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalfarm.config import resolve_settings
from tests.support.trees import toy_catalog

pytestmark = pytest.mark.faults  # `make faults`

ATTACKER = 65534  # nobody
REPO = Path(__file__).resolve().parents[1]


def _root_only() -> None:
    if os.getuid() != 0:
        pytest.skip("the attack needs a second uid: run as root (CI does) so setpriv and chown can use nobody")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv (util-linux) to run the attack as a second uid")


def as_user(uid: int, *cmd: str, cwd: str = "/", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` run as ``uid`` (its own group, no other groups)."""
    prefix = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def _attacker_runs_evalfarm() -> None:
    """Skip when the other uid cannot import evalfarm at all: a checkout inside a folder only root may enter
    (``mktemp -d`` makes them 0700). What the test then checks would fail for that reason, not for the config."""
    probe = as_user(ATTACKER, sys.executable, "-c", "import evalfarm")
    if probe.returncode != 0:
        pytest.skip(f"uid {ATTACKER} cannot import evalfarm from {REPO}: {probe.stderr.strip()[-200:]}")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write, as ``/tmp`` is (mode 1777, root's), reachable by ``nobody``: pytest's own
    temp folders are private to root."""
    _root_only()
    folder = Path(tempfile.mkdtemp(prefix="evalfarm-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _plant(shared: Path, body: str) -> Path:
    """The attacker (uid nobody) writes ``.evalfarm.toml`` in the shared folder."""
    target = shared / ".evalfarm.toml"
    proc = as_user(ATTACKER, "sh", "-c", 'printf "%s" "$1" > "$2"', "sh", body, str(target))
    assert proc.returncode == 0, proc.stderr
    assert target.stat().st_uid == ATTACKER
    return target


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVALFARM_CONFIG", "EVALFARM_NOTIFY",
                                                            "EVALFARM_MODEL_PATHS", "EVALFARM_WAREHOUSE")}  # fmt: skip
    return {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PYTHONPATH": str(REPO),
            "COLUMNS": "250"}  # fmt: skip


def _evalfarm(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalfarm", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)  # fmt: skip


def test_another_users_config_in_a_shared_folder_is_refused_and_named(shared, tmp_path):
    """``nobody`` writes ``/tmp/…/.evalfarm.toml`` with a ``notify`` command, ``model_paths = "/"`` and a warehouse
    of theirs; root works in a folder of its own below it. On main ``config show`` took all three from the file."""
    planted = _plant(shared, f'notify = "touch {shared}/pwned"\nmodel_paths = "/"\nwarehouse = "{shared}/theirs"\n')
    work = shared / "work"
    work.mkdir()
    proc = _evalfarm("config", "show", "-f", "json", cwd=work, env=_env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stderr
    rows = {r["key"]: r for r in json.loads(proc.stdout)}
    assert rows["notify"]["value"] == "" and rows["model_paths"]["value"] != "/", rows
    assert rows["warehouse"]["value"] == "warehouse" and str(planted) not in {r["from"] for r in rows.values()}
    assert f"{planted} is owned by nobody (uid {ATTACKER})" in proc.stderr  # the warning names the file
    table = _evalfarm("config", "show", cwd=work, env=_env(tmp_path / "home"))
    assert f"refused: {planted} is owned by nobody" in table.stdout, table.stdout


@pytest.mark.slow
def test_another_users_notify_never_runs_as_you(shared, tmp_path, toy_glove):
    """The whole attack: root runs ``evalfarm run`` in its own folder under the shared one; the attacker's
    ``notify`` ran as root at the end of the run on main (its file appeared, owned by root)."""
    _plant(shared, f'notify = "touch {shared}/pwned"\n')
    work = shared / "work"
    work.mkdir()
    catalog = toy_catalog(work / "toy.yaml", toy_glove)
    proc = _evalfarm("run", "--catalog", str(catalog), "--executor", "local", "--warehouse", str(work / "wh"),
                     cwd=work, env=_env(tmp_path / "home"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (shared / "pwned").exists()
    assert "refused" in proc.stderr and str(shared / ".evalfarm.toml") in proc.stderr


def test_a_root_owned_shared_config_gives_no_command_and_no_folder_to_another_user(tmp_path):
    """A checkout's ``.evalfarm.toml`` that root wrote (a shared install): another user's commands take its
    warehouse and limits, never its ``notify``, ``model_paths`` or ``data`` (named as refused). On main they did."""
    _root_only()
    _attacker_runs_evalfarm()
    folder = Path(tempfile.mkdtemp(prefix="evalfarm-checkout-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        (folder / ".evalfarm.toml").write_text(
            f'notify = "touch {folder}/pwned"\nmodel_paths = "/"\ndata = "/root"\nwarehouse = "/srv/wh"\n'
            'sql_timeout = 60\n'
        )  # fmt: skip
        home = folder / "home"
        home.mkdir()
        os.chown(home, ATTACKER, ATTACKER)
        env = {**_env(home), "EVALFARM_DATA": ""}
        env.pop("EVALFARM_DATA")
        proc = as_user(ATTACKER, sys.executable, "-m", "evalfarm", "config", "show", "-f", "json", cwd=str(folder),
                       env=env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = {r["key"]: r for r in json.loads(proc.stdout)}
        assert rows["warehouse"]["value"] == "/srv/wh" and rows["sql_timeout"]["value"] == "60"
        assert rows["notify"]["value"] == "" and rows["model_paths"]["value"] == "" and rows["data"]["value"] == ""
        for key in ("notify", "model_paths", "data"):
            assert f"{key} in {folder / '.evalfarm.toml'}: refused, the file is not yours" in proc.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- the rules, one at a time (root chowns to nobody to build each case) ------------------------------------------
@pytest.fixture
def tree_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``<tmp>/home/proj/sub`` with HOME at ``<tmp>/home`` and no user-level file; the search starts in ``sub``."""
    _root_only()
    monkeypatch.delenv("EVALFARM_CONFIG")
    for var in ("EVALFARM_NOTIFY", "EVALFARM_MODEL_PATHS", "EVALFARM_WAREHOUSE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    (home / "proj" / "sub").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return home


def _settings(cwd: Path):
    return resolve_settings(cwd=cwd)


def test_your_own_file_below_your_home_is_used(tree_):
    cfg = tree_ / "proj" / ".evalfarm.toml"
    cfg.write_text('notify = "echo done"\nwarehouse = "wh"\n')
    s = _settings(tree_ / "proj" / "sub")
    assert s.config_file == cfg and s.notify == "echo done" and s.refused == ()


@pytest.mark.parametrize(
    "case",
    ["file-owned-by-another-user", "file-writable-by-all", "file-writable-by-anothers-group", "folder-writable-by-all",
     "folder-above-owned-by-another-user", "link-to-another-users-file"],
)  # fmt: skip
def test_a_file_another_user_could_have_written_is_refused_and_named(tree_, case):
    proj = tree_ / "proj"
    cfg = proj / ".evalfarm.toml"
    body = 'notify = "touch /tmp/pwned"\n'
    if case == "link-to-another-users-file":
        theirs = tree_.parent / "theirs.toml"
        theirs.write_text(body)
        os.chown(theirs, ATTACKER, ATTACKER)
        cfg.symlink_to(theirs)
    else:
        cfg.write_text(body)
    if case == "file-owned-by-another-user":
        os.chown(cfg, ATTACKER, ATTACKER)
    elif case == "file-writable-by-all":
        cfg.chmod(0o666)
    elif case == "file-writable-by-anothers-group":
        os.chown(cfg, 0, ATTACKER)
        cfg.chmod(0o664)
    elif case == "folder-writable-by-all":
        proj.chmod(0o777)
    elif case == "folder-above-owned-by-another-user":
        os.chown(proj, ATTACKER, ATTACKER)
        (proj / "sub").rename(tree_ / "sub-moved")
        (proj / "sub").mkdir()  # root's own folder inside nobody's: the search starts there
        os.chown(proj / "sub", 0, 0)
        cfg.rename(proj / "sub" / ".evalfarm.toml")
        cfg = proj / "sub" / ".evalfarm.toml"
    s = _settings(proj / "sub")
    assert s.notify == "" and s.config_file != cfg, (case, s)
    assert any(str(cfg) in line and "refused" in line for line in s.refused), s.refused


def test_a_sticky_shared_folder_above_your_own_file_is_fine(tree_, tmp_path):
    """``/tmp`` (world-writable, sticky): nobody else may rename what you own in it, so your file below it counts."""
    shared = tmp_path / "sticky"
    (shared / "mine").mkdir(parents=True)
    shared.chmod(0o1777)
    cfg = shared / "mine" / ".evalfarm.toml"
    cfg.write_text('warehouse = "wh"\n')
    assert _settings(shared / "mine").config_file == cfg


def test_the_search_stops_at_your_home_and_at_a_change_of_owner(tree_, tmp_path):
    above_home = tree_.parent / ".evalfarm.toml"  # above the user's home: never looked at, never warned about
    above_home.write_text('notify = "touch /tmp/pwned"\n')
    s = _settings(tree_ / "proj" / "sub")
    assert s.config_file is None and s.notify == "" and s.refused == ()
    above_home.unlink()
    theirs = tmp_path / "theirs"  # a folder of another user's, with a file of theirs, above a folder of yours
    (theirs / "mine").mkdir(parents=True)
    (theirs / ".evalfarm.toml").write_text('notify = "touch /tmp/pwned"\n')
    os.chown(theirs / ".evalfarm.toml", ATTACKER, ATTACKER)
    os.chown(theirs, ATTACKER, ATTACKER)
    s = _settings(theirs / "mine")
    assert s.config_file is None and s.notify == "" and s.refused == ()  # the owner changed: not looked at


def test_the_user_level_file_is_checked_the_same_way(tree_, tmp_path):
    user = tmp_path / "xdg" / "evalfarm" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('notify = "touch /tmp/pwned"\n')
    assert _settings(tree_ / "proj" / "sub").notify == "touch /tmp/pwned"
    os.chown(user, ATTACKER, ATTACKER)
    s = _settings(tree_ / "proj" / "sub")
    assert s.notify == "" and any(str(user) in line for line in s.refused)
