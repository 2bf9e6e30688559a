"""Progress inside a unit (issue 44): the embed stage reports each pass's texts, in process and from Ray's workers, and
the driver's tracker counts texts done / to do, the rate and what each worker is on."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from evalfarm.execute import EmbedTick
from evalfarm.outcomes import Status
from evalfarm.scheduler.progress import ProgressTracker, TextBoard, TickSender, fmt_count

CATALOG = """\
name: progress
include: [tasks]
tasks: [wordsim-rg-65, stsb]
models:
  - id: toy
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/toy_emb.txt}
  - id: bow-toy
    level: sentence
    kind: bow
    base: toy
"""


def _tick(pass_id: str, model: str, done: int, total: int, phase: str = "embed", seconds: float = 10.0) -> EmbedTick:
    return EmbedTick(pass_id, model, f"{model} · {total} texts", done, total, phase, seconds)


def test_counts_read_at_a_glance() -> None:
    assert [fmt_count(n) for n in (0, 950, 1_900, 41_049, 412_000, 2_100_000)] == ["0", "950", "1.9k", "41k", "412k",
                                                                                   "2.1M"]  # fmt: skip


def test_a_worker_posts_each_pass_at_most_once_a_second_but_never_misses_its_start_or_end() -> None:
    posted: list[tuple[str, dict]] = []
    send = TickSender("w0", lambda worker, tick: posted.append((worker, tick)), every=3600.0)
    send(_tick("p", "m", 0, 100, phase="load"))
    for done in (10, 20, 30):
        send(_tick("p", "m", done, 100))
    send(_tick("p", "m", 100, 100))
    assert [(w, t["phase"], t["done"]) for w, t in posted] == [("w0", "load", 0), ("w0", "embed", 10),
                                                               ("w0", "embed", 100)]  # fmt: skip


def test_texts_count_each_pass_once_and_a_retried_pass_from_where_it_stopped() -> None:
    board = TextBoard()
    tracker = ProgressTracker(total=4, texts_planned={"a": 1000, "b": 500, "c": 300})
    board.put("w0", asdict(_tick("a1", "a", 400, 1000)))
    tracker.observe_texts(board.snapshot())
    assert tracker.texts() == (400, 1000 + 500 + 300)
    board.put("w1", asdict(_tick("a2", "a", 0, 600, phase="load")))  # the worker was lost: a retry, 600 left
    board.put("w0", asdict(_tick("b1", "b", 450, 450)))  # b needed fewer texts than planned: its exact count
    tracker.observe_texts(board.snapshot())
    assert tracker.texts() == (850, 400 + 600 + 450 + 300)
    tracker.job("w1", "embed", "a")
    tracker.job("w0", "score", "b", "stsb")  # b's embedding is over
    assert tracker.doing() == {"w0": "scoring b · stsb", "w1": "loading a (600 texts to embed)"}
    tracker.finish(Status.DONE, unit=("b", "stsb"), seconds=3.0)
    assert tracker.doing()["w0"] == "idle" and tracker.slowest == (3.0, "b", "stsb")


def test_a_post_processed_models_derived_texts_are_not_counted() -> None:
    tracker = ProgressTracker(total=1)
    tick = EmbedTick("d", "bow-abtt", "", 500, 500, "embed", 0.1, derived=True)
    tracker.observe_texts({"d": {**asdict(tick), "worker": "w0", "at": 1.0}})
    assert tracker.texts() == (0, 0) and tracker.text_rate() == 0.0


@pytest.mark.slow  # an in-process run of a toy word model and its bag of words on RG-65 and STS-B
def test_the_in_process_embed_stage_reports_every_pass(tmp_path: Path, data_dir: Path) -> None:
    from evalfarm.runner import RunEvent, run_catalog

    (tmp_path / "p.yaml").write_text(CATALOG, encoding="utf-8")
    events: list[RunEvent] = []
    summary = run_catalog(tmp_path / "p.yaml", tmp_path / "wh", executor="local", on_event=events.append)
    assert summary.ok
    tracker = events[-1].progress
    passes = {p["model"]: p for p in tracker.passes.values()}
    assert set(passes) == {"toy", "bow-toy"} and {p["worker"] for p in passes.values()} == {"local-0"}
    assert all(p["phase"] == "embed" and p["done"] == p["total"] > 0 for p in passes.values())
    done, total = tracker.texts()
    assert done == total == sum(p["total"] for p in passes.values())
    eta = next(e for e in events if e.kind == "eta")
    assert "texts to embed" in eta.message and "fallback" not in eta.message


@pytest.mark.slow  # a local Ray cluster: the workers post to the run's board actor, the driver reads it
def test_ray_workers_report_their_passes_to_the_driver(tmp_path: Path, data_dir: Path) -> None:
    from evalfarm.runner import RunEvent, run_catalog

    (tmp_path / "p.yaml").write_text(CATALOG, encoding="utf-8")
    events: list[RunEvent] = []
    summary = run_catalog(tmp_path / "p.yaml", tmp_path / "wh", executor="ray", workers=2, on_event=events.append)
    assert summary.ok
    tracker = events[-1].progress
    passes = list(tracker.passes.values())
    assert {p["model"] for p in passes} == {"toy", "bow-toy"}
    assert {p["worker"] for p in passes} <= {"w0", "w1"} and all(p["done"] == p["total"] > 0 for p in passes)
    assert tracker.texts()[0] == tracker.texts()[1] > 0
    dispatched = [e for e in events if e.kind == "dispatch"]
    assert dispatched and set(tracker.jobs) <= {"w0", "w1"}
