"""``evalfarm status`` (issue 44): what a run is doing now, read from the warehouse alone (its heartbeat, ``runs``,
``units``, ``failures``), the same numbers as the run's own progress line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from evalfarm.leases import Leases, heartbeats
from evalfarm.scheduler.progress import ProgressTracker
from evalfarm.status import NoRun, run_status
from evalfarm.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]


def test_a_running_runs_heartbeat_carries_its_progress_and_status_reads_it(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "wh").init()
    tracker = ProgressTracker(total=5, run_id="r1", texts_planned={"m": 1000})
    tracker.workers = 1
    tracker.job("w0", "embed", "m")
    tick = {"pass_id": "p", "model": "m", "label": "", "done": 400, "total": 1000, "phase": "embed", "seconds": 8.0}
    tracker.observe_texts({"p": {**tick, "derived": False, "worker": "w0", "at": 1.0}})
    leases = Leases(wh, "r1", publish=lambda: {"progress": tracker.snapshot(), "dashboard": "http://127.0.0.1:8265"})
    leases.beat()
    st = run_status(wh)  # no runs row yet: the heartbeat alone
    snap = tracker.snapshot()
    assert (st.run_id, st.state, st.units, st.texts) == ("r1", "running", snap["units"], snap["texts"])
    assert st.workers["doing"] == {"w0": "embedding m 400/1k texts"} and st.dashboard == "http://127.0.0.1:8265"
    text = "\n".join(st.lines())
    assert "units 0/5 · 0 done · 5 remaining · ETA ? · elapsed 0s · texts 400/1k · 50 texts/s · 1 worker alive" in text
    assert "  w0: embedding m 400/1k texts" in text and "Ray dashboard: http://127.0.0.1:8265" in text
    assert set(heartbeats(wh)) == {"r1"}


def test_a_run_whose_driver_died_says_so(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "wh").init()
    wh.write_run_event("r0", "start", status="running", n_units=3, host="elsewhere")
    st = run_status(wh, "r0")
    assert st.state == "died" and any("run the same command again" in ln for ln in st.lines())
    with pytest.raises(NoRun, match="no run 'nope'"):
        run_status(wh, "nope")
    with pytest.raises(NoRun, match="no run recorded"):
        run_status(Warehouse(tmp_path / "empty").init())


class SlowEncoder:
    """A sentence encoder that takes ~1 ms a text: a run long enough to look at from outside."""

    def encode(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.001 * len(texts))
        rng = np.random.default_rng(len(texts))
        return rng.standard_normal((len(texts), 8)).astype(np.float32)


@pytest.mark.slow  # an in-process run of ~15k texts at ~1 ms each, looked at from another process while it runs
def test_status_in_a_second_shell_shows_the_numbers_the_run_publishes(tmp_path: Path, data_dir: Path,
                                                                      monkeypatch) -> None:  # fmt: skip
    import evalfarm.leases as leases_module
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.runner import run_catalog

    published: list[dict] = []

    class FastBeat(Leases):  # a beat every 0.2 s, each body kept to compare with what status reads
        def __init__(self, *args, publish=None, **kwargs) -> None:
            def keep() -> dict:
                body = publish() if publish is not None else {}
                published.append(json.loads(json.dumps(body, default=str)))
                return body

            super().__init__(*args, heartbeat=0.2, publish=keep, **kwargs)

    monkeypatch.setattr(leases_module, "Leases", FastBeat)
    cat = load_catalog("tasks").with_models([ModelSpec(id="slow", level="sentence", kind="python")])
    wh = tmp_path / "wh"
    done: list = []
    runner = threading.Thread(
        target=lambda: done.append(
            run_catalog(cat, wh, models=["slow"], tasks=["stsb"], executor="local", encoders={"slow": SlowEncoder()})
        ),  # fmt: skip
        daemon=True,
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALFARM_DATA": str(data_dir)}
    runner.start()
    seen = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and runner.is_alive():
        got = subprocess.run([sys.executable, "-m", "evalfarm", "status", "--warehouse", str(wh), "--format", "json"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
        if got.returncode == 0:
            st = json.loads(got.stdout)
            if st["state"] == "running" and st["texts"] and 0 < st["texts"]["done"] < st["texts"]["total"]:
                seen = st
                break
        time.sleep(0.5)
    runner.join(timeout=300)
    assert seen is not None, "the run never showed texts moving from outside"
    bodies = [b["progress"] for b in published if "progress" in b]
    assert any(seen["texts"] == b["texts"] and seen["units"] == b["units"] for b in bodies)
    assert seen["workers"]["doing"] == {"local-0": seen["workers"]["doing"]["local-0"]}
    assert seen["workers"]["doing"]["local-0"].startswith("embedding slow ")
    (summary,) = done
    after = run_status(Warehouse(wh), seen["run_id"])
    assert after.state == "ok" and after.units["done"] == summary.counts()["done"] == 1
    assert after.slowest is not None and after.slowest["model"] == "slow"


def test_watch_looks_until_the_run_is_no_longer_running(tmp_path: Path) -> None:
    from evalfarm.status import watch

    wh = Warehouse(tmp_path / "wh").init()
    leases = Leases(wh, "r2", publish=lambda: {"progress": ProgressTracker(total=1, run_id="r2").snapshot()})
    leases.beat()
    wh.write_run_event("r2", "start", status="running", n_units=1)
    shown: list[str] = []

    def show(st) -> None:
        shown.append(st.state)
        if len(shown) == 2:  # the run ends between two looks
            leases.stop()
            wh.write_run_event("r2", "end", status="ok", n_units=1, n_done=1, n_skipped=0, n_failed=0)

    last = watch(wh, None, 0.01, show)
    assert shown == ["running", "running", "ok"] and last.state == "ok" and last.units["done"] == 1


def test_a_heartbeat_from_another_host_is_live_until_it_is_older_than_the_stated_bound(tmp_path: Path) -> None:
    from evalfarm.status import DEAD_AFTER_S

    wh = Warehouse(tmp_path / "wh").init()
    beat = tmp_path / "wh" / "leases" / "runs" / "r3.json"
    beat.parent.mkdir(parents=True)
    progress = {**ProgressTracker(total=0, run_id="r3", phase="planning", step="tasks 3/40 counted").snapshot()}
    beat.write_text(json.dumps({"run_id": "r3", "host": "elsewhere", "pid": 1, "progress": progress}))
    wh.write_run_event("r3", "start", status="running", n_units=0, host="elsewhere")
    st = run_status(wh, "r3")
    assert (st.state, st.phase, st.step) == ("running", "planning", "tasks 3/40 counted")
    assert st.lines()[0].startswith("run r3 · planning on elsewhere") and st.lines()[1].startswith(
        "planning · tasks 3/40"
    )
    old = time.time() - DEAD_AFTER_S + 10
    os.utime(beat, (old, old))
    assert run_status(wh, "r3").state == "running"  # late, not dead: a loaded driver misses some beats
    old = time.time() - DEAD_AFTER_S - 10
    os.utime(beat, (old, old))
    st = run_status(wh, "r3")
    assert st.state == "died" and "from elsewhere was last written" in st.why and "without one" in st.why


def _catalog(tmp_path: Path, toy_glove: Path) -> Path:
    cat = tmp_path / "cat.yaml"
    cat.write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [wordsim-rg-65, wordsim-mc-30]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text,\n"
        f"     source: {{type: path, ref: {toy_glove}}}}}\n"
    )
    return cat


def _status(wh: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "evalfarm", "status", "--warehouse", str(wh), *args],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip


@pytest.mark.slow  # an in-process run held in its planning while `evalfarm status` and `status --watch` look at it
def test_a_run_that_plans_slowly_is_planning_never_dead_and_watch_follows_it(tmp_path: Path, toy_glove: Path) -> None:
    """The issue: until its first heartbeat, a planning run read `died … the driver was killed; run the same command
    again`, and `status --watch` printed that once and exited. A run now writes its heartbeat before it plans."""
    from evalfarm.runner import run_catalog

    wh = tmp_path / "wh"
    held, release = threading.Event(), threading.Event()

    def on_event(e) -> None:  # the planner stops at its text counts until the test has looked
        if e.kind == "planning" and e.message.startswith("tasks 0/"):
            held.set()
            release.wait(240)

    done: list = []
    runner = threading.Thread(
        target=lambda: done.append(
            run_catalog(_catalog(tmp_path, toy_glove), wh, executor="local", on_event=on_event)
        ),
        daemon=True,
    )
    runner.start()
    assert held.wait(120), "the run never reached its text counts"
    got = _status(wh, "--format", "json")
    st = json.loads(got.stdout)
    assert (st["state"], st["phase"], st["step"], st["pid"]) == (
        "running",
        "planning",
        "tasks 0/2 counted",
        os.getpid(),
    )
    text = _status(wh).stdout
    assert f"· planning on {st['host']} (pid {os.getpid()})" in text and "planning · tasks 0/2 counted" in text
    assert "died" not in text and "killed" not in text
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["status", "--warehouse", str(wh), "--watch", "--every", "0.5", "--format", "json"]
    watch = subprocess.Popen([sys.executable, "-m", "evalfarm", *args], stdout=subprocess.PIPE, text=True, env=env)
    time.sleep(8)
    assert watch.poll() is None, "status --watch stopped while the run planned"
    release.set()
    runner.join(timeout=300)
    out, _ = watch.communicate(timeout=120)
    states = [(s["state"], s["phase"]) for s in map(json.loads, out.splitlines())]
    assert watch.returncode == 0 and states[0] == ("running", "planning") and states[-1][0] == "ok", states
    (summary,) = done
    assert summary.ok and run_status(Warehouse(wh), summary.run_id).state == "ok"


@pytest.mark.slow  # `evalfarm run` in a subprocess, killed with SIGKILL; then `evalfarm status`
def test_a_killed_run_is_dead_because_its_process_is_gone(tmp_path: Path, toy_glove: Path) -> None:
    import signal

    wh = tmp_path / "wh"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["run", "--catalog", str(_catalog(tmp_path, toy_glove)), "--warehouse", str(wh), "--executor", "local"]
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm", *args], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    seen = None
    while time.monotonic() < deadline and seen is None:  # its heartbeat: from its first second, before it plans
        beats = heartbeats(Warehouse(wh)) if (wh / "leases").is_dir() else {}
        seen = next(iter(beats.values()), None)
        time.sleep(0.2)
    assert seen is not None and seen["pid"] == proc.pid
    assert run_status(Warehouse(wh)).state == "running"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    st = run_status(Warehouse(wh), seen["run_id"])
    assert st.state == "died" and st.why == f"no end recorded and process {proc.pid} is gone on {seen['host']}"
    text = "\n".join(st.lines())
    assert f"· died on {seen['host']} (pid {proc.pid})" in text and "run the same command again to resume" in text
