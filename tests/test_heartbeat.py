"""A log of a long run says where it is (issue 24): a heartbeat at a steady interval while nothing else prints."""

from __future__ import annotations

from types import SimpleNamespace

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
