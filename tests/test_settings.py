"""One resolution of the settings for the CLI and the API (issue 19): an option beats the environment, which beats
``.evalfarm.toml`` (found from the current folder upwards, its paths relative to its own folder), which beats the
defaults; every command and every API function reads the same warehouse, catalog and data folder, from any
subfolder, with nothing exported; and a run that could not evaluate something says so by raising."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import evalfarm
from evalfarm import cli
from evalfarm.config import ENV_VARS, OPTION, resolve_settings, write_config

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "catalog" / "tasks.yaml"
runner = CliRunner()


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No evalfarm setting in the environment (each one restored afterwards, even when a command exported it), no
    user-level config file: a fresh shell."""
    for var in (*ENV_VARS.values(), "EVALFARM_CONFIG"):
        monkeypatch.setenv(var, "x")  # recorded, so that teardown restores (or removes) whatever is set later
        monkeypatch.delenv(var)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def _project(root: Path, data: Path | str, model_source: Path) -> Path:
    """root/.evalfarm.toml naming a relative warehouse and catalog file, and the data folder; returns a subfolder."""
    (root / "cat.yaml").write_text(
        f"include: [{TASKS}]\ntasks: [wordsim-rg-65]\nmodels:\n"
        f"  - {{id: toy, level: word, kind: word-vectors, format: glove-text, "
        f"source: {{type: path, ref: {model_source}}}}}\n"
    )
    (root / ".evalfarm.toml").write_text(f'data = "{data}"\nwarehouse = "wh"\ncatalog = "cat.yaml"\n')
    sub = root / "sub" / "deeper"
    sub.mkdir(parents=True)
    return sub


def test_an_option_beats_the_environment_which_beats_the_file_which_beats_the_default(
    tmp_path, monkeypatch, bare_env
) -> None:
    sub = _project(tmp_path, tmp_path / "data", tmp_path / "vectors.txt")
    monkeypatch.chdir(sub)
    s = resolve_settings()  # the file, found two folders up; its relative paths against its own folder
    assert (s.data, s.warehouse, s.catalog) == (tmp_path / "data", str(tmp_path / "wh"), str(tmp_path / "cat.yaml"))
    assert {s.sources[k] for k in ("data", "warehouse", "catalog")} == {
        str(tmp_path / ".evalfarm.toml")
    } and s.config_file == tmp_path / ".evalfarm.toml"
    monkeypatch.setenv("EVALFARM_WAREHOUSE", "/env/wh")
    monkeypatch.setenv("EVALFARM_DATA", "")  # empty: download mode, and it still wins over the file
    s = resolve_settings()
    assert (s.data, s.warehouse, s.sources["warehouse"]) == (None, "/env/wh", "EVALFARM_WAREHOUSE")
    s = resolve_settings(warehouse="flag-wh", data="rel-data", catalog="zoo-local")
    assert (s.warehouse, s.catalog, s.data) == ("flag-wh", "zoo-local", sub / "rel-data")
    assert {s.sources[k] for k in ("data", "warehouse", "catalog")} == {OPTION}
    monkeypatch.delenv("EVALFARM_WAREHOUSE")
    monkeypatch.setenv("EVALFARM_CONFIG", "")  # no file at all: the defaults
    s = resolve_settings()
    assert (s.warehouse, s.catalog, s.config_file) == ("warehouse", "zoo-starter", None)


def test_the_data_folder_is_exported_for_the_call_only(tmp_path, bare_env) -> None:
    cfg = tmp_path / "c.toml"
    write_config(cfg, {"data": str(tmp_path)})
    s = resolve_settings(config_file=cfg)
    with s.data_exported():
        assert os.environ["EVALFARM_DATA"] == str(tmp_path)
    assert "EVALFARM_DATA" not in os.environ
    os.environ["EVALFARM_DATA"] = "/from/the/shell"
    with resolve_settings(config_file=cfg).data_exported():  # the environment wins over the file
        assert os.environ["EVALFARM_DATA"] == "/from/the/shell"
    with resolve_settings(config_file=cfg, data="").data_exported():  # an option wins over the environment
        assert os.environ["EVALFARM_DATA"] == ""
    assert os.environ["EVALFARM_DATA"] == "/from/the/shell"


def test_config_show_says_where_each_setting_comes_from(tmp_path, monkeypatch, bare_env) -> None:
    monkeypatch.chdir(_project(tmp_path, tmp_path, tmp_path / "v.txt"))
    monkeypatch.setenv("EVALFARM_CATALOG", "zoo-local")
    rows = json.loads(runner.invoke(cli.app, ["config", "show", "-f", "json"]).output)
    found = {r["key"]: (r["value"], r["from"]) for r in rows}
    assert found == {
        "data": (str(tmp_path), str(tmp_path / ".evalfarm.toml")),
        "warehouse": (str(tmp_path / "wh"), str(tmp_path / ".evalfarm.toml")),
        "catalog": ("zoo-local", "EVALFARM_CATALOG (wins over the file)"),
        "sql_timeout": ("300", "(default)"),
        "sql_memory_limit": ("4GB", "(default)"),
        "notify": ("", "(default)"),
        "sql_max_rows": ("1000000", "(default)"),
        "sql_max_bytes": ("1GB", "(default)"),
        "model_paths": ("", "(default)"),
        "archive_max_size": ("20GB", "(default)"),
        "archive_max_ratio": ("200", "(default)"),
        "archive_max_members": ("100000", "(default)"),
    }


@pytest.mark.slow
def test_the_api_and_every_command_use_the_configured_warehouse_from_a_subfolder(
    tmp_path, monkeypatch, bare_env, data_dir, toy_glove
) -> None:
    """The user's report: after `make run`, `evalfarm.run()` went to download mode and `evalfarm correlations` /
    `evalfarm report` missed the warehouse from a subfolder, while `evalfarm sql` found it."""
    sub = _project(tmp_path, data_dir, toy_glove)
    monkeypatch.chdir(sub)
    summary = evalfarm.run(executor="local")  # catalog, warehouse and data: all from the file
    assert summary.counts() == {"done": 1, "skipped": 0, "failed": 0}
    assert Path(summary.warehouse) == tmp_path / "wh" and "EVALFARM_DATA" not in os.environ
    rows = evalfarm.query("SELECT model, task, count(*) AS n FROM metrics GROUP BY ALL").to_pylist()
    assert rows == [{"model": "toy", "task": "wordsim-rg-65", "n": 8}]
    assert evalfarm.list_models()[0]["id"] == "toy"
    assert not list(sub.iterdir())  # nothing was written here: no stray ./warehouse
    r = runner.invoke(cli.app, ["sql", "-f", "csv", "SELECT count(*) AS n FROM metrics"])
    assert r.exit_code == 0 and r.output == "n\n8\n", r.output
    r = runner.invoke(cli.app, ["correlations", "-f", "json"])
    assert r.exit_code == 0 and "no warehouse" not in r.output, r.output
    r = runner.invoke(cli.app, ["report", "--out", str(tmp_path / "report")])
    assert r.exit_code == 0 and (tmp_path / "report" / "index.html").is_file(), r.output
    r = runner.invoke(cli.app, ["run", "--executor", "local"])
    assert r.exit_code == 0 and "0 done, 1 skipped, 0 failed" in r.output, r.output
    # a real process started there, with no evalfarm variable at all: `python -m evalfarm` is the command
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALFARM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm", "sql", "-f", "csv", "SELECT count(*) AS n FROM metrics"],
        cwd=sub, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "n\n8\n", proc.stderr


def test_a_run_that_evaluates_nothing_raises_with_the_summary_and_the_first_errors(
    tmp_path, monkeypatch, bare_env, data_dir
) -> None:
    """Download mode offline gave {'done': 0, 'failed': 1}, silently; a unit that fails now raises."""
    monkeypatch.chdir(_project(tmp_path, data_dir, tmp_path / "no-such-vectors.txt"))  # its one unit fails
    with pytest.raises(evalfarm.EvaluationFailed, match=r"1 of 1 units failed .*toy · wordsim-rg-65 \[load\]") as e:
        evalfarm.run(executor="local")
    assert e.value.summary.counts() == {"done": 0, "skipped": 0, "failed": 1}
    assert "no-such-vectors.txt" in e.value.errors[0]
    summary = evalfarm.run(executor="local", check=False)  # asked for: the summary, its failures listed
    assert [o.model for o in summary.failed] == ["toy"] and not summary.ok
    r = runner.invoke(cli.app, ["run", "--executor", "local"])
    assert r.exit_code == 1 and "failures:" in r.output and "no-such-vectors.txt" in r.output


@pytest.mark.slow
def test_python_dash_m_evalfarm_is_the_command() -> None:
    for module in ("evalfarm", "evalfarm.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith("Usage: evalfarm ") and " run " in proc.stdout


@pytest.mark.faults  # issue 23.7 (`make faults`)
def test_the_sql_limits_are_settings_of_the_config_file(tmp_path, monkeypatch, bare_env) -> None:
    """Issue 23.7: the query limits are `.evalfarm.toml` keys (sql_timeout, sql_memory_limit) under the environment
    and the options, and `evalfarm.query` / `evalfarm sql` apply them."""
    from evalfarm.config import ConfigError, load_config

    cfg = tmp_path / ".evalfarm.toml"
    cfg.write_text('sql_timeout = 600\nsql_memory_limit = "1GB"\n', encoding="utf-8")
    s = resolve_settings(config_file=cfg)
    assert s.sql_limits() == (600.0, "1GB") and s.sources["sql_timeout"] == str(cfg)
    monkeypatch.setenv("EVALFARM_SQL_TIMEOUT", "7")  # the environment wins over the file, an option over both
    assert resolve_settings(config_file=cfg).sql_limits() == (7.0, "1GB")
    assert resolve_settings(config_file=cfg, sql_timeout=0, sql_memory_limit="2GB").sql_limits() == (0.0, "2GB")
    monkeypatch.setenv("EVALFARM_SQL_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="EVALFARM_SQL_TIMEOUT: sql_timeout must be a number"):
        resolve_settings(config_file=cfg).sql_limits()
    monkeypatch.delenv("EVALFARM_SQL_TIMEOUT")
    assert resolve_settings(config_file=tmp_path / "none.toml").sql_limits() == (300.0, "4GB")
    for bad, why in (("sql_timeout = -1", "sql_timeout must be"), ('sql_memory_limit = "lots"', "a size such as")):
        cfg.write_text(bad + "\n", encoding="utf-8")
        with pytest.raises(ConfigError, match=why):
            load_config(cfg)
    cfg.unlink()
    with pytest.raises(ConfigError, match="sql_memory_limit must be"):
        write_config(cfg, {"sql_memory_limit": "4 gigs please"})
    write_config(cfg, {"sql_timeout": "0.5", "sql_memory_limit": "64MB"})
    assert load_config(cfg).values == {"sql_timeout": "0.5", "sql_memory_limit": "64MB"}


@pytest.mark.faults  # issue 23.7 (`make faults`)
def test_evalfarm_query_applies_the_files_limits(tmp_path, monkeypatch, bare_env) -> None:
    from evalfarm import api
    from evalfarm.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh").init()
    seen: list[tuple] = []
    monkeypatch.setattr(Warehouse, "query", lambda self, sql, **kw: seen.append((kw["timeout_s"], kw["memory_limit"])))
    cfg = tmp_path / ".evalfarm.toml"
    cfg.write_text('sql_timeout = 12\nsql_memory_limit = "256MB"\n', encoding="utf-8")
    monkeypatch.setenv("EVALFARM_CONFIG", str(cfg))
    api.query("SELECT 1", warehouse=wh)
    api.query("SELECT 1", warehouse=wh, timeout_s=0)
    assert seen == [(12.0, "256MB"), (0.0, "256MB")]
