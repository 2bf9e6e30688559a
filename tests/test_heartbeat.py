"""A log of a long run says where it is (issue 24): a heartbeat at a steady interval while nothing else prints."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalfarm.cli.events import RunPrinter

LINE = "units 1/3 · 1 done · 0 skipped · 0 failed · 2 remaining · elapsed 5s · ETA 10s"


def _event(kind: str) -> SimpleNamespace:
    return SimpleNamespace(kind=kind, progress=SimpleNamespace(line=lambda: LINE))


def test_embedding_and_waiting_print_a_heartbeat_once_the_interval_passed(capsys) -> None:
    printer = RunPrinter(heartbeat=0.0)
    printer.on_event(_event("planned"))
    printer.on_progress("all-minilm-l6-v2 · stsb", 64, 1000)
    printer.on_progress("all-minilm-l6-v2 · stsb", 64, 1000)
    printer.on_event(_event("tick"))
    err = capsys.readouterr().err
    beats = [ln for ln in err.splitlines() if ln.startswith("heartbeat")]
    assert beats[0].startswith("heartbeat · embedding all-minilm-l6-v2 · stsb: 64/1000 texts, ")
    assert beats[1].startswith("heartbeat · embedding all-minilm-l6-v2 · stsb: 128/1000 texts, ")
    assert all(" texts/s · " + LINE in b for b in beats[:2])
    assert beats[2] == "heartbeat · " + LINE and len(beats) == 3


def test_no_heartbeat_before_the_interval(capsys) -> None:
    printer = RunPrinter(heartbeat=3600.0)
    printer.on_progress("glove · evalrank-word", 10, 100)
    printer.on_event(_event("tick"))
    assert "heartbeat" not in capsys.readouterr().err


@pytest.fixture(autouse=True)
def output_restored(monkeypatch) -> None:
    """--quiet / --verbose change process-wide state (the output flag, the evalfarm logger): put it back after."""
    import logging

    from evalfarm.cli.rendering import Output

    logger = logging.getLogger("evalfarm")
    monkeypatch.setattr(Output, "quiet", False)
    monkeypatch.setattr(logger, "level", logger.level)
    monkeypatch.setattr(logger, "handlers", list(logger.handlers))


def test_quiet_and_verbose_set_the_output_and_the_logging_level() -> None:
    import logging

    from evalfarm.cli.rendering import Output, configure_output

    logger = logging.getLogger("evalfarm")
    before = logger.level
    configure_output()
    assert (logger.level, Output.quiet) == (before, False)  # no option: logging left as it was
    for kwargs, level, quiet in (
        ({"quiet": True}, logging.ERROR, True),
        ({"verbose": 1}, logging.INFO, False),
        ({"verbose": 2}, logging.DEBUG, False),
    ):
        configure_output(**kwargs)
        assert (logger.level, Output.quiet) == (level, quiet)
    handlers = [h for h in logger.handlers if type(h).__name__ == "_StderrHandler"]
    assert len(handlers) == 1  # one handler however often


@pytest.mark.slow  # two in-process runs of a toy model on two small tasks
def test_quiet_run_prints_the_summary_but_no_unit_lines(tmp_path, data_dir) -> None:
    from typer.testing import CliRunner

    from evalfarm.cli import app
    from tests.test_light_commands import CATALOG

    (tmp_path / "light.yaml").write_text(CATALOG, encoding="utf-8")
    args = ["run", "--catalog", str(tmp_path / "light.yaml"), "--executor", "local"]
    runner = CliRunner()
    env = {"EVALFARM_DATA": str(data_dir)}
    loud = runner.invoke(app, [*args, "--warehouse", str(tmp_path / "a")], env=env)
    quiet = runner.invoke(app, ["-q", *args, "--warehouse", str(tmp_path / "b")], env=env)
    assert loud.exit_code == quiet.exit_code == 0, quiet.output
    assert "done toy · wordsim-rg-65" in loud.stderr and "units 2/2" in loud.stderr
    assert "done toy · wordsim-rg-65" not in quiet.stderr and "units 2/2" not in quiet.stderr
    assert "2 done, 0 skipped, 0 failed" in quiet.stderr
