"""Every documented path works from where a user stands (issue 44): settings from any folder, a clear and fast error
when there is no data folder and no network, `--address auto` without the head's settings, `submit --tasks`, global
flags after the command."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from evalfarm import api
from evalfarm.cli import app
from evalfarm.config import ENV_VARS, resolve_settings, user_config_path

runner = CliRunner()


@pytest.fixture
def fresh_shell(tmp_path: Path, monkeypatch) -> Path:
    """No evalfarm setting in the environment, a user config folder of its own, a working folder far from any
    checkout's .evalfarm.toml."""
    for var in (*ENV_VARS.values(), "EVALFARM_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    elsewhere = tmp_path / "elsewhere" / "deep"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    return elsewhere


def test_a_user_level_config_is_found_from_any_folder(fresh_shell: Path, tmp_path: Path) -> None:
    assert user_config_path() == tmp_path / "xdg" / "evalfarm" / "config.toml"
    got = runner.invoke(app, ["config", "set", "--user", f"data={tmp_path / 'data'}"])
    assert got.exit_code == 0, got.output
    s = resolve_settings()
    assert s.data == tmp_path / "data" and s.sources["data"] == str(user_config_path())
    (fresh_shell / ".evalfarm.toml").write_text(f'data = "{tmp_path / "project-data"}"\n')  # the project's wins
    assert resolve_settings().data == tmp_path / "project-data"
    bad = runner.invoke(app, ["config", "set", "--user", "--file", "x.toml", "data=y"])
    assert bad.exit_code == 2 and "two different files" in bad.output
    with pytest.raises(api.ConfigError, match="two different files"):  # the API's rule (issue 54), nothing written
        api.set_config({"data": "y"}, file=fresh_shell / "x.toml", user=True)
    assert not (fresh_shell / "x.toml").exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_data_folder_and_no_network_fails_fast_saying_where_it_looked(
    fresh_shell: Path, tmp_path: Path, monkeypatch
) -> None:
    """The README's Python API snippet, from another folder offline: it tried every task's download (three tries
    each, then again in the worker) and failed every unit ~28 s later. Now the run stops at the first unreachable
    file, before anything starts, and says where it looked for a data folder and how to set one."""
    monkeypatch.setenv("EVALFARM_ALLOW_HTTP", "1")
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    from evalfarm.catalog.registry import load_catalog

    cat = load_catalog("tasks")
    port = _closed_port()
    docs = []
    for tid in ("wordsim-rg-65", "wordsim-mc-30"):
        spec = cat.task(tid).model_dump(mode="json", exclude_none=True)
        spec["urls"] = {role: f"http://127.0.0.1:{port}/{tid}.txt" for role in spec["files"]}
        docs.append(spec)
    model = {"id": "toy", "level": "word", "kind": "word-vectors", "format": "glove-text",
             "source": {"type": "path", "ref": str(tmp_path / "toy.txt")}}  # fmt: skip
    (tmp_path / "toy.txt").write_text("the 0.1 0.2\n")
    (tmp_path / "offline.yaml").write_text(yaml.safe_dump({"name": "offline", "tasks": docs, "models": [model]}))
    t0 = time.monotonic()
    with pytest.raises(Exception) as got:
        api.run(str(tmp_path / "offline.yaml"), warehouse=tmp_path / "wh", executor="local")
    took = time.monotonic() - t0
    assert type(got.value).__name__ == "DataUnreachable", got.value
    text = str(got.value)
    assert f"http://127.0.0.1:{port}/" in text and "No data folder is set" in text
    assert "EVALFARM_DATA is not set" in text and ".evalfarm.toml" in text and str(user_config_path()) in text
    assert "`evalfarm config set --user data=DIR`" in text
    assert took < 20, took  # one file's tries (1 s, then 2 s apart), not every file's in the driver and the worker


def test_address_auto_without_the_heads_settings_fails_at_once(fresh_shell: Path, tmp_path: Path, monkeypatch) -> None:
    """`evalfarm run --address auto` in a shell that did not source start-head.sh's env file retried "Failed to
    connect to GCS" for minutes (Ray dialled the routable address of a loopback head, without its token)."""
    for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    ray_dir = tmp_path / "ray"
    monkeypatch.setenv("EVALFARM_RAY_DIR", str(ray_dir))
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        gcs = f"127.0.0.1:{head.getsockname()[1]}"
        ray_dir.mkdir()
        (ray_dir / "head").write_text(f"uid=0\ngcs_address={gcs}\n")
        t0 = time.monotonic()
        args = ["run", "--address", "auto", "--warehouse", str(tmp_path / "wh"), "-m", "glove-6b-50d"]
        got = runner.invoke(app, [*args, "-t", "wordsim-rg-65"])
        took = time.monotonic() - t0
    assert got.exit_code == 2, got.output
    assert f"`. {ray_dir / 'env'}`" in got.output and "token" in got.output and "single-node mode" in got.output
    assert took < 10 and not (tmp_path / "wh").exists()


def test_global_flags_are_taken_after_the_command_too() -> None:
    got = runner.invoke(app, ["run", "-q", "--models", "nope"])
    assert got.exit_code == 2 and "No such option" not in got.output and "unknown model id 'nope'" in got.output
    listed = runner.invoke(app, ["catalog", "list", "--catalog", "zoo-starter", "-f", "csv", "-v"])
    assert listed.exit_code == 0 and listed.stdout.startswith("id,level,kind")


def test_submit_runs_only_the_tasks_asked_for(tmp_path: Path) -> None:
    spec = tmp_path / "my-model.yaml"
    spec.write_text("id: glove-6b-50d-abtt5\nlevel: word\nbase: glove-6b-50d\npostprocess: {method: abtt, d: 5}\n")
    plan = api.plan_submission(spec, warehouse=str(tmp_path / "wh"), tasks=["evalrank-word", "wordsim-rg-65"])
    try:
        assert [t.id for t in plan.catalog.tasks_for("glove-6b-50d-abtt5")] == ["evalrank-word", "wordsim-rg-65"]
    finally:
        plan.cleanup()
    args = ["submit", str(spec), "--warehouse", str(tmp_path / "wh"), "--dry-run"]
    got = runner.invoke(app, [*args, "--tasks", "stsb"])
    assert got.exit_code == 2 and "no task of the submission is of the level" in got.output
    helped = runner.invoke(app, ["submit", "--help"])
    assert (
        "--tasks" in helped.output
        and "--data," not in helped.output
        and "--data" not in helped.output.replace("--forward-data", "").replace("--no-forward-data", "")
    )
