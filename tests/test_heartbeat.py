"""A log of a long run says where it is (issue 24): a heartbeat at a steady interval while nothing else prints."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from evalfarm.cli.events import RunPrinter
from evalfarm.scheduler.progress import ProgressTracker


def _tracker() -> ProgressTracker:
    """Two workers: w0 embeds all-minilm-l6-v2 (41k of 176k texts in 20 s), w1 scores glove on RG-65."""
    t = ProgressTracker(total=3, texts_planned={"all-minilm-l6-v2": 176_000, "glove-6b-50d": 400})
    t.workers = 2
    t.job("w0", "embed", "all-minilm-l6-v2")
    t.job("w1", "score", "glove-6b-50d", "wordsim-rg-65")
    t.observe_texts(
        {"p1": {"pass_id": "p1", "model": "all-minilm-l6-v2", "label": "", "done": 41_000, "total": 176_000,
                "phase": "embed", "seconds": 20.0, "derived": False, "worker": "w0", "at": 1.0},
         "p2": {"pass_id": "p2", "model": "glove-6b-50d", "label": "", "done": 49, "total": 49, "phase": "embed",
                "seconds": 0.5, "derived": False, "worker": "w1", "at": 0.5}}
    )  # fmt: skip
    return t


def _event(kind: str, tracker: ProgressTracker) -> SimpleNamespace:
    return SimpleNamespace(kind=kind, progress=tracker)


def test_the_progress_line_counts_units_texts_and_their_rate() -> None:
    line = _tracker().line()
    assert line.startswith("units 0/3 · 0 done · 3 remaining · ETA ? · elapsed 0s · texts 41k/176k · 2.0k texts/s")
    assert line.endswith(" · 2 workers alive")
    snap = _tracker().snapshot()
    assert snap["texts"] == {"done": 41_049, "total": 176_049, "per_second": 2050.0}
    assert snap["workers"]["doing"] == {
        "w0": "embedding all-minilm-l6-v2 41k/176k texts", "w1": "scoring glove-6b-50d · wordsim-rg-65",
    }  # fmt: skip


def test_embedding_and_waiting_print_a_heartbeat_once_the_interval_passed(capsys) -> None:
    printer = RunPrinter(heartbeat=0.0)
    tracker = _tracker()
    printer.on_event(_event("planned", tracker))
    printer.on_progress("all-minilm-l6-v2 · 176000 texts", 64, 176_000)  # the in-process executor's bars
    printer.on_event(_event("tick", tracker))
    err = capsys.readouterr().err
    beats = [ln for ln in err.splitlines() if ln.startswith("heartbeat")]
    assert len(beats) == 2 and beats[0] == beats[1]
    assert beats[0].startswith("heartbeat · units 0/3 · 0 done · 3 remaining · ETA ? · elapsed 0s · texts 41k/176k")
    assert beats[0].endswith(
        " · w0: embedding all-minilm-l6-v2 41k/176k texts · w1: scoring glove-6b-50d · wordsim-rg-65"
    )


def test_no_heartbeat_before_the_interval(capsys) -> None:
    printer = RunPrinter(heartbeat=3600.0)
    printer.on_progress("glove · evalrank-word", 10, 100)
    printer.on_event(_event("tick", _tracker()))
    assert "heartbeat" not in capsys.readouterr().err


def test_json_events_carry_the_same_counts(capsys) -> None:
    import io
    import json

    stream = io.StringIO()
    printer = RunPrinter(heartbeat=0.0, json_out=stream)
    printer.on_event(_event("tick", _tracker()))
    (event,) = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    assert event["event"] == "progress" and event["texts"]["done"] == 41_049 and event["units"]["total"] == 3
    assert event["workers"]["doing"]["w0"] == "embedding all-minilm-l6-v2 41k/176k texts"


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


def test_the_end_summary_counts_what_moved_and_gives_the_diff_command(capsys) -> None:
    """The end of a run printed "moved since the previous run" as one line of raw JSON with every changed value
    (4.6 KB for 4 units); it counts them by reason and names the command that lists each one."""
    from evalfarm.cli.events import moved_line, print_summary
    from evalfarm.runner import RunSummary

    changes = [
        {"model": "m", "task": f"t{i}", "value_a": 0.1, "value_b": 0.2, "reason": "spec changed"} for i in range(20)
    ]
    moved = {"since": "r1", "counts": {"new model": 3, "spec changed": 40}, "nondeterministic": 1, "changes": changes}
    line = moved_line(moved, "r2", "wh")
    assert line == (
        "moved since run r1: 43 values (40 spec changed, 3 new model); 1 under an unchanged fingerprint "
        "(nondeterminism); every one: evalfarm diff r1 r2 --warehouse wh"
    )
    assert moved_line({**moved, "counts": {}, "nondeterministic": 0}, "r2", "wh") == (
        "nothing moved since run r1 (evalfarm diff r1 r2 --warehouse wh)"
    )
    assert moved_line(None, "r2", "wh") is None
    summary = RunSummary(run_id="r2", warehouse="wh", n_units=1, report={"moved": moved})
    print_summary(summary)
    err = capsys.readouterr().err
    assert "every one: evalfarm diff r1 r2 --warehouse wh" in err and "{" not in err and "value_a" not in err


@pytest.mark.slow  # loads a real transformer (all-MiniLM-L6-v2's weights) in a fresh process
def test_third_party_progress_bars_stay_out_of_the_log(tmp_path) -> None:
    """transformers' own `Loading weights` tqdm bar leaked into run logs, carriage returns and all."""
    import subprocess
    import sys

    code = (
        "from evalfarm.catalog.registry import load_catalog\n"
        "from evalfarm.encoders.loader import load_encoder\n"
        "cat = load_catalog('zoo-starter')\n"
        "load_encoder(cat.lineage('all-minilm-l6-v2-cls'), base_dir=cat.path.parent).encode(['a sentence'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")}
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert got.returncode == 0, got.stderr[-2000:]
    assert "Loading weights" not in got.stderr and "\r" not in got.stderr and "it/s" not in got.stderr, got.stderr
