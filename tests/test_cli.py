"""CLI conventions (issue 13.10) and the remembered settings (issue 13.9): -h everywhere, flags without values,
`sql --help` listing every view, tables that never fold a number in 80 columns, .evalfarm.toml."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import click
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from evalfarm import cli
from evalfarm.cli import rendering
from evalfarm.config import ConfigError, config_path, load_config, resolve_settings, write_config
from evalfarm.warehouse import Warehouse, view_sources

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch, tmp_path):
    """No config file from the developer's checkout or home leaks into these tests."""
    monkeypatch.setenv("EVALFARM_CONFIG", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def _commands(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, (*path, name))
    return out


COMMANDS = _commands(typer.main.get_command(cli.app))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "evalfarm")
def test_dash_h_is_help_everywhere_and_flags_take_no_value(path: tuple[str, ...]) -> None:
    short = runner.invoke(cli.app, [*path, "-h"], env={"COLUMNS": "200"})
    long = runner.invoke(cli.app, [*path, "--help"], env={"COLUMNS": "200"})
    assert short.exit_code == 0 and long.exit_code == 0, short.output
    assert short.output == long.output and "Usage:" in short.output
    assert "<bool>" not in short.output  # a flag reads as a flag: `--force`, not `--force <bool>`


def test_flags_are_flags() -> None:
    assert "--dry-run " in runner.invoke(cli.app, ["submit", "-h"], env={"COLUMNS": "200"}).output
    bad = runner.invoke(cli.app, ["run", "--force", "true", "--warehouse", "x"])
    assert bad.exit_code == 2 and "unexpected extra argument" in bad.output.lower()


def test_version() -> None:
    from evalfarm import __version__

    for flag in ("--version", "-V"):
        r = runner.invoke(cli.app, [flag])
        assert r.exit_code == 0 and r.output == f"evalfarm {__version__}\n"


def test_sql_help_lists_every_view_with_what_it_holds() -> None:
    views = [  # the core views of sql/ and each task kind's (evalrank's ranks, neighbours, ...)
        m.group(1) for source in view_sources() for m in re.finditer(r"CREATE OR REPLACE VIEW (\w+)", source.sql)
    ]
    assert {"metrics", "leaderboard", "leaderboard_all", "quality", "ranks", "runs", "failures", "units"} <= set(views)
    text = runner.invoke(cli.app, ["sql", "-h"], env={"COLUMNS": "200"}).output
    for v in views:
        line = next((ln for ln in text.splitlines() if re.match(rf"\s*{v}\s{{2,}}\S", ln)), None)
        assert line is not None, f"view {v} missing from `evalfarm sql --help`"
    assert dict(cli.view_docs()).keys() == set(views) and all(doc for _, doc in cli.view_docs())


# -- tables ------------------------------------------------------------------------------------------------------
def _render(columns, rows, width=80, title=None) -> str:
    buf = io.StringIO()
    old = rendering.out
    rendering.out = Console(file=buf, width=width, color_system=None)
    try:
        rendering.print_table(columns, rows, title=title, width=width)
    finally:
        rendering.out = old
    return buf.getvalue()


def _numbers(rows, columns) -> list[str]:
    return [rendering._fmt(r[c]) for r in rows for c in columns if isinstance(r[c], int | float)]


def test_a_wide_table_never_cuts_a_name_nor_folds_a_number() -> None:
    """Issue 24 cut long text to fit; issue 44: a model id or a task name is never cut (a reader searches for it
    whole), so a table that cannot hold one turns vertical."""
    rows = [
        {"task": "wordsim-simverb-3500", "scorer": "word-similarity", "model": "all-minilm-l6-v2-first-last-avg-" * 2,
         "position": 12, "value": 0.123456, "n_pairs": 5514, "mr": 123456.789}
        for _ in range(3)
    ]  # fmt: skip
    text = _render(list(rows[0]), rows)
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), text
    for number in _numbers(rows, list(rows[0])):  # each number whole, on one line
        assert any(number in ln for ln in lines), (number, text)
    assert "…" not in text and any(rows[0]["model"] in ln for ln in lines)
    assert "-[ row 3 ]" in text  # too wide with the name whole: one block per row


def test_a_table_that_fits_is_printed_whole() -> None:
    rows = [{"model": "glove-6b-50d", "mrr": 0.6012345, "n": 3}]
    text = _render(["model", "mrr", "n"], rows)
    assert "glove-6b-50d" in text and "0.6012" in text and "…" not in text


def test_too_many_columns_for_the_width_turn_the_table_vertical() -> None:
    columns = [f"column_{i}" for i in range(12)]
    rows = [{c: 1000.0 + i for i, c in enumerate(columns)}, {c: "some text" for c in columns}]
    text = _render(columns, rows)
    assert "-[ row 1 ]" in text and "-[ row 2 ]" in text
    assert "column_11 | 1011.0000" in text and "column_0  | some text" in text
    assert all(len(ln) <= 80 for ln in text.splitlines())


def test_a_narrow_tables_title_is_one_line_not_folded_to_its_width() -> None:
    """`catalog list` of a small catalog: a two-character column once folded its title into two-character lines."""
    text = _render(["id"], [{"id": "m"}], title="tiny-catalog: 1 models")
    assert text.splitlines()[0] == "tiny-catalog: 1 models" and "m" in text.splitlines()[-1]


def test_vertical_rows_keep_long_values_within_the_width() -> None:
    columns = [f"column_{i}" for i in range(12)]
    long = "a model description that goes on " * 6 + "unbroken" * 15
    rows = [{**{c: 1000.0 + i for i, c in enumerate(columns)}, "column_3": long}]
    text = _render(columns, rows, title="a title " * 15)
    lines = text.splitlines()
    assert "-[ row 1 ]" in text and all(len(ln) <= 80 for ln in lines), text
    at = next(i for i, ln in enumerate(lines) if ln.startswith("column_3  | "))
    cont = [ln for ln in lines[at + 1 :] if ln.startswith(" " * 10 + "| ")]
    assert len(cont) >= 2  # continued under the value, the label column left blank
    joined = "".join(ln[12:] for ln in [lines[at], *cont])
    assert joined.replace(" ", "") == long.replace(" ", "")  # nothing lost
    assert "column_11 | 1011.0000" in text


# -- the config file ---------------------------------------------------------------------------------------------
def test_config_set_show_and_where_it_is_found(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("EVALFARM_CONFIG")
    monkeypatch.delenv("EVALFARM_DATA", raising=False)  # else `config show` says the environment wins
    project = tmp_path / "project"
    (project / "sub" / "dir").mkdir(parents=True)
    monkeypatch.chdir(project)
    r = runner.invoke(cli.app, ["config", "set", "data=../data", "warehouse=wh", "catalog=zoo-starter"])
    assert r.exit_code == 0, r.output
    text = (project / ".evalfarm.toml").read_text()
    assert f'data = "{tmp_path / "data"}"' in text and f'warehouse = "{project / "wh"}"' in text
    monkeypatch.chdir(project / "sub" / "dir")  # found from below, like pyproject.toml
    assert config_path() == project / ".evalfarm.toml"
    shown = json.loads(runner.invoke(cli.app, ["config", "show", "-f", "json"]).output)
    assert {r["key"]: r["value"] for r in shown if r["key"] != "model_paths"} == {  # model_paths: tests/conftest.py
        "data": str(tmp_path / "data"),
        "warehouse": str(project / "wh"),
        "catalog": "zoo-starter",
        "sql_timeout": "300",
        "sql_memory_limit": "4GB",
        "notify": "",
        "sql_max_rows": "1000000",
        "sql_max_bytes": "1GB",
        "archive_max_size": "20GB",
        "archive_max_ratio": "200",
        "archive_max_members": "100000",
    }
    # an update keeps the other keys; `data=` means "download into the cache"
    write_config(project / ".evalfarm.toml", {"data": ""})
    assert load_config().values == {"data": "", "warehouse": str(project / "wh"), "catalog": "zoo-starter"}
    monkeypatch.chdir(tmp_path)
    xdg = tmp_path / "xdg" / "evalfarm" / "config.toml"
    assert config_path() is None
    write_config(xdg, {"catalog": "zoo-local"})
    assert config_path() == xdg  # the user-level file when no project file is above


def test_config_defaults_apply_and_the_command_line_wins(tmp_path, monkeypatch) -> None:
    wh = tmp_path / "remembered"
    Warehouse(wh).init()
    cfg = tmp_path / "c.toml"
    write_config(cfg, {"warehouse": str(wh), "data": str(tmp_path)})
    monkeypatch.setenv("EVALFARM_CONFIG", str(cfg))
    r = runner.invoke(cli.app, ["sql", "-f", "csv", "SELECT count(*) AS n FROM metrics"])
    assert r.exit_code == 0 and r.output == "n\n0\n", r.output  # the remembered warehouse, no --warehouse
    r = runner.invoke(cli.app, ["sql", "--warehouse", str(tmp_path / "other"), "SELECT 1"])
    assert r.exit_code == 2 and "no warehouse at" in r.output and "other" in r.output  # the flag wins
    # click's help as wide as a 300-column terminal (CliRunner's own default is 80 columns, which folds the path)
    assert f"[default: {wh}]" in runner.invoke(cli.app, ["sql", "-h"], terminal_width=300).output


def test_config_data_is_exported_unless_the_environment_sets_it(tmp_path, monkeypatch) -> None:
    cfg = tmp_path / "c.toml"
    write_config(cfg, {"data": str(tmp_path)})
    monkeypatch.setenv("EVALFARM_DATA", "x")  # recorded: restored after the test, whatever the command set
    monkeypatch.delenv("EVALFARM_DATA")
    resolve_settings(config_file=cfg).export_data()  # what the CLI does before every command but `config`
    assert os.environ["EVALFARM_DATA"] == str(tmp_path)
    monkeypatch.setenv("EVALFARM_DATA", "/elsewhere")
    resolve_settings(config_file=cfg).export_data()
    assert os.environ["EVALFARM_DATA"] == "/elsewhere"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data = 3\n", "data must be a string"),
        ("data = [\n", "not valid TOML"),
        ("colour = 'x'\n", r"unknown key\(s\) colour"),
    ],
)
def test_bad_config_files_are_one_line_errors(tmp_path, monkeypatch, text, message) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(cfg)
    monkeypatch.setenv("EVALFARM_CONFIG", str(cfg))
    r = runner.invoke(cli.app, ["catalog", "list"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1
    assert runner.invoke(cli.app, ["config", "set", "catalog=x"]).exit_code == 2  # still names the bad file
    cfg.write_text("")
    assert runner.invoke(cli.app, ["config", "set", "catalog=x"]).exit_code == 0
