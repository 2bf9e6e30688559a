"""The scheduler against a real local Ray cluster: placement, retries, killed workers, killed drivers, concurrent
runs, the no-op fast path. Real models (toy GloVe, bag-of-words, a static model) on slices of the real pools."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evalfarm.runner import run_catalog
from evalfarm.scheduler.progress import ProgressTracker
from evalfarm.scheduler.ray_executor import autoscaled_workers, worker_resources
from evalfarm.warehouse import Warehouse
from tests.support.ray_heads import local_ray
from tests.support.task_files import data_folder

REPO = Path(__file__).resolve().parents[1]
WORD_MODELS = ["toy", "toy-abtt1", "toy-pcr1", "toy-skip"]
SENT_MODELS = ["bow-toy", "static"]


def _pool_entry(d: Path, pid: str, level: str, files: dict[str, Path]) -> str:
    sha = {role: hashlib.sha256(p.read_bytes()).hexdigest() for role, p in files.items()}
    fl = ", ".join(f"{r}: {p.relative_to(d)}" for r, p in files.items())
    sh = ", ".join(f"{r}: {s}" for r, s in sha.items())
    return (
        f"  - {{id: {pid}, level: {level}, kind: evalrank, format: evalrank-{level}, version: '1', licence: test,"
        f" source: tests, files: {{{fl}}}, sha256: {{{sh}}}}}\n"
    )


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, data_dir, toy_glove) -> Iterator[Path]:
    """Small word and sentence pools (slices of the real ones, in the catalog's folder: the module's data folder) and
    cheap real models."""
    d = tmp_path_factory.mktemp("sched")
    w, s = data_dir / "evalrank" / "word_evalrank", data_dir / "evalrank" / "sent_evalrank"

    def head(src: Path, n: int, name: str) -> Path:
        (d / name).write_text("\n".join(src.read_text().splitlines()[:n]) + "\n")
        return d / name

    pairs = head(w / "pos_pair_5514.txt", 400, "wpairs.txt")
    word = {"pairs": pairs, "background_basic": head(w / "basic_vocab.txt", 800, "basic.txt")}
    word["background_wiki"] = head(w / "wiki_vocab.txt", 800, "wiki.txt")
    sent = {
        "pairs": head(s / "pos_pair.txt", 300, "spairs.txt"),
        "background": head(s / "background_sent.txt", 1500, "bg.txt"),
    }
    # 40 pairs against the whole background four times over (each copy made distinct by a suffix word): ~100k
    # sentences, several seconds of embedding even for the static model, almost no ranking. A worker killed 1.5 s
    # after dispatch is then always mid-unit, however fast or loaded the machine.
    bg = (s / "background_sent.txt").read_text().splitlines()
    (d / "bigbg.txt").write_text("\n".join(bg + [f"{x} {w}" for w in ("indeed", "again", "today") for x in bg]) + "\n")
    big = {"pairs": head(s / "pos_pair.txt", 40, "bpairs.txt"), "background": d / "bigbg.txt"}
    first = pairs.read_text().split()[:2]
    nan = d / "nan.txt"
    nan.write_text("".join(f"{x} nan nan nan nan\n" for x in first) + "cat 1 0 0 0\n")
    g = f"{{type: path, ref: {toy_glove}}}"
    (d / "tasks.yaml").write_text(
        "tasks:\n"
        + _pool_entry(d, "word-small", "word", word)
        + _pool_entry(d, "sent-small", "sentence", sent)
        + _pool_entry(d, "sent-bigbg", "sentence", big)
    )
    (d / "cat.yaml").write_text(
        f"""include: [tasks.yaml]
tasks: [word-small, sent-small]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {g}}}
  - {{id: toy-abtt1, level: word, base: toy, postprocess: {{method: abtt, d: 1}}}}
  - {{id: toy-pcr1, level: word, base: toy, postprocess: {{method: pcr, d: 1}}}}
  - {{id: toy-skip, level: word, kind: word-vectors, format: glove-text, oov: skip, source: {g}}}
  - {{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}}
  - {{id: static, level: sentence, kind: static,
      source: {{type: package, ref: tokenlearn-static-model, path: static_model/model}}}}
  - {{id: missing-file, level: word, kind: word-vectors, format: glove-text,
      source: {{type: path, ref: {d}/does-not-exist.txt}}}}
  - {{id: nan-vectors, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {nan}}}}}
"""
    )
    with data_folder(d):  # set before the module's Ray starts (ray_cluster): its workers read the slices too
        yield d / "cat.yaml"


@pytest.fixture(scope="module")
def ray_cluster(catalog):
    """evalfarm's own local Ray (``connect(None)``: a cluster of our own, token-authenticated, every server on
    loopback; tests/support/ray_heads.py checks its sockets), kept for the module; started after ``catalog`` set
    the data folder, which its workers inherit."""
    with local_ray(num_cpus=2) as ray:
        yield ray


def _q(wh: Path, sql: str) -> list[dict]:
    return Warehouse(wh).query(sql).to_pylist()


def _no_duplicates(wh: Path) -> None:
    dup = _q(wh, "SELECT model, task, variant, ties, metric, count(*) AS n FROM metrics GROUP BY ALL HAVING n > 1")
    assert dup == []
    dup = _q(
        wh,
        "SELECT model, task, variant, ties, metric, fingerprint, count(*) n FROM metrics_history"
        " GROUP BY ALL HAVING n > 1",
    )
    assert dup == []
    dup = _q(wh, "SELECT model, variant, query_id, positive_id, count(*) n FROM ranks GROUP BY ALL HAVING n > 1")
    assert dup == []
    assert not list(Path(wh).rglob("*.tmp"))


@pytest.fixture(scope="module")
def ray_run(ray_cluster, catalog, tmp_path_factory):
    wh = tmp_path_factory.mktemp("ray") / "wh"
    events = []
    summary = run_catalog(catalog, wh, executor="ray", workers=2, max_attempts=2, on_event=events.append)
    return wh, summary, events


@pytest.mark.slow
def test_ray_run_equals_local_run_and_isolates_failures(ray_run, catalog, tmp_path):
    wh, summary, events = ray_run
    assert summary.counts() == {"done": 6, "skipped": 0, "failed": 2} and summary.workers == 2
    assert sorted(o.model for o in summary.failed) == ["missing-file", "nan-vectors"]
    run_catalog(catalog, tmp_path / "local", executor="local")
    sql = "SELECT model, task, variant, ties, metric, value FROM metrics ORDER BY ALL"
    assert _q(wh, sql) == _q(tmp_path / "local", sql)  # same numbers, whichever executor
    assert len({r["model"] for r in _q(wh, sql)}) == 6
    _no_duplicates(wh)
    # a missing file and a NaN in the file: errors another attempt cannot fix, so tried once (issue 13.7), and
    # exactly one failures row each (a worker that dies is retried: test_worker_killed_mid_unit_...)
    fails = _q(wh, "SELECT model, stage, error FROM failures WHERE stage != 'embed-quality' OR model = 'nan-vectors'")
    assert sorted((r["model"], r["stage"]) for r in fails) == [
        ("missing-file", "load"),
        ("nan-vectors", "load"),  # a NaN anywhere in a vector file fails the model at load (issue 13.3)
    ]
    assert "NaN" in next(r["error"] for r in fails if r["model"] == "nan-vectors")
    att = _q(wh, "SELECT model, attempts, status FROM units WHERE status = 'failed' ORDER BY model")
    assert att == [
        {"model": "missing-file", "attempts": 1, "status": "failed"},
        {"model": "nan-vectors", "attempts": 1, "status": "failed"},
    ]
    assert sum(e.kind == "retry" for e in events) == 0
    assert _q(wh, "SELECT status, n_failed, n_units FROM runs") == [{"status": "failed", "n_failed": 2, "n_units": 8}]


@pytest.mark.slow
def test_units_view_records_where_and_how_long(ray_run):
    wh, summary, events = ray_run
    rows = _q(wh, "SELECT * FROM units WHERE status = 'done'")
    assert {(r["model"], r["stage"]) for r in rows} == {
        (m, s) for m in WORD_MODELS + SENT_MODELS for s in ("embed", "score")
    }
    assert {r["worker"] for r in rows} == {"w0", "w1"}  # both workers took work
    assert all(r["node"] and r["seconds"] >= 0 and r["started_at"] and r["attempts"] == 1 for r in rows)
    # largest first: the sentence models (costlier kinds) were handed out before any word model
    order = [e.job.plan.model for e in events if e.kind == "dispatch" and e.job.stage == "embed"]
    assert set(order[:2]) == {"bow-toy", "static"}


@pytest.mark.slow
def test_worker_killed_mid_unit_is_retried_on_another_worker(ray_cluster, catalog, tmp_path):
    """``kill -9`` of the worker embedding the static model: the unit is retried on the other worker, and the killed
    one, restarted by Ray, takes work again.

    That it takes work is made certain, not left to timing: the other worker is paused (SIGSTOP) at its first task,
    so it holds at most one; of the two independent word models (toy, toy-skip) one is then still queued when the
    killed worker comes back. The other worker is resumed at the first event after that comeback (or when the
    scheduler gives up on the killed one): the run never waits on the pause.
    """
    wh = tmp_path / "wh"
    state: dict[str, object] = {}

    def resume_other() -> None:
        if state.get("paused") and not state.get("resumed"):
            state["resumed"] = True
            os.kill(state["paused"], signal.SIGCONT)

    def on_event(e) -> None:
        killed = state.get("worker")
        if state.get("back") and not state.get("resumed"):  # the first event after the killed worker came back
            state["first after comeback"] = (e.kind, getattr(e.worker, "name", None))
            resume_other()
        if e.kind == "dispatch" and e.job.stage == "embed" and e.job.plan.model == "static" and not killed:
            state["worker"], state["pid"] = e.worker.name, e.worker.pid
            # 1.5 s in: the worker is loading the model or embedding ~100k sentences (several seconds)
            threading.Timer(
                1.5, lambda: (state.setdefault("t_kill", time.time()), os.kill(e.worker.pid, signal.SIGKILL))
            ).start()
        elif e.kind == "dispatch" and e.worker.name != state.get("worker") and "paused" not in state:
            state["paused"] = e.worker.pid  # the other worker, at its first task
            os.kill(e.worker.pid, signal.SIGSTOP)
        elif e.kind == "dispatch" and e.worker.name == killed and "t_kill" in state:
            state.setdefault("after the kill", []).append(e.job.label)
        if e.kind == "worker-lost" and e.worker.name == killed:
            state["lost"] = e.message
            if "gave up" in str(e.message):
                resume_other()
        if e.kind == "worker-ready" and e.worker.name == killed and "t_kill" in state:
            state["back"] = True

    try:
        summary = run_catalog(
            catalog, wh, models=["static", "toy", "toy-skip", "toy-abtt1"], tasks=["sent-bigbg", "word-small"],
            executor="ray", workers=2, max_attempts=2, on_event=on_event,
        )  # fmt: skip
    finally:
        resume_other()
    assert "lost" in state, "the worker was not killed while it worked"
    assert summary.ok and summary.counts() == {"done": 4, "skipped": 0, "failed": 0}
    row = _q(wh, "SELECT worker, attempts FROM units WHERE model = 'static' AND stage = 'embed'")
    assert len(row) == 1 and row[0]["attempts"] == 2 and row[0]["worker"] != state["worker"]
    # the killed worker was restarted and took a later task: dispatched to it, and recorded as run by it
    assert state["back"] and state["first after comeback"][0] == "dispatch", state
    assert state["after the kill"], state
    later = _q(wh, f"SELECT model, stage FROM units WHERE worker = '{state['worker']}' AND status = 'done'"
                   f" AND epoch(started_at) > {state['t_kill']}")  # fmt: skip
    assert later, _q(wh, "SELECT model, stage, worker, started_at FROM units")
    _no_duplicates(wh)
    # the killed attempt's finished parts were kept and the retry embedded only the rest: each text stored once
    shards = (wh / "embeddings" / "model=static").rglob("*.parquet")
    stored = [t for p in shards for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]
    assert len(stored) == len(set(stored)) > 50_000
    assert _q(wh, "SELECT count(*) n FROM failures") == [{"n": 0}]


def _committed(wh: Path) -> bool:
    """Whether the warehouse has a committed metrics row yet (its table exists and its snapshot has a file)."""
    if not (wh / "tables" / "metrics" / "_delta_log").is_dir():
        return False
    try:
        return bool(Warehouse(wh).tables.snapshot("metrics").files)
    except Exception:  # the table being created right now
        return False


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "evalfarm.cli", "run", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the local Ray it starts can be cleaned up with it
        **kw,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.mark.slow
def test_driver_killed_mid_run_then_rerun_resumes(catalog, tmp_path):
    wh = tmp_path / "wh"
    models = ",".join(WORD_MODELS + SENT_MODELS)
    env = {**os.environ, "EVALFARM_COMMIT_UNITS": "1"}  # a batch per unit: a killed run keeps what it committed
    proc = _cli("--catalog", str(catalog), "--warehouse", str(wh), "--models", models, "--workers", "1", env=env)
    try:
        deadline = time.monotonic() + 240
        while not _committed(wh):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "no unit finished in time"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # the driver, mid-run
        proc.wait(timeout=30)
    finally:
        _kill_group(proc)  # what it started (the local Ray) goes too
    units = "SELECT DISTINCT model, task, run_id FROM metrics"
    finished = {(r["model"], r["task"]): r["run_id"] for r in _q(wh, units)}
    assert 1 <= len(finished)
    assert _q(wh, "SELECT status FROM runs") == [{"status": "running"}]  # no end event: it was killed
    summary = run_catalog(catalog, wh, models=WORD_MODELS + SENT_MODELS, executor="local")
    c = summary.counts()
    assert c["skipped"] == len(finished) and c["done"] == 6 - len(finished) and c["failed"] == 0
    now = {(r["model"], r["task"]): r["run_id"] for r in _q(wh, units)}
    assert all(now[u] == run for u, run in finished.items())  # finished units were not recomputed
    _no_duplicates(wh)
    assert len(_q(wh, "SELECT DISTINCT model, task FROM metrics")) == 6


@pytest.mark.slow
def test_two_concurrent_runs_on_one_warehouse(catalog, tmp_path):
    wh = tmp_path / "wh"
    models = ",".join(["toy", "toy-skip", "bow-toy", "static"])
    a = _cli("--catalog", str(catalog), "--warehouse", str(wh), "--models", models, "--workers", "1")
    b = _cli("--catalog", str(catalog), "--warehouse", str(wh), "--models", models, "--executor", "local")
    try:
        out_a, _ = a.communicate(timeout=300)
        out_b, _ = b.communicate(timeout=300)
    finally:
        _kill_group(a)
        _kill_group(b)
    assert a.returncode == 0, out_a
    assert b.returncode == 0, out_b
    runs = _q(wh, "SELECT run_id, status FROM runs")
    assert len({r["run_id"] for r in runs}) == 2 and {r["status"] for r in runs} == {"ok"}
    _no_duplicates(wh)
    # leases: no unit computed by both runs (a unit the other run held was waited for and taken as skipped)
    twice = "SELECT fingerprint, count(*) n FROM units WHERE stage = 'score' AND status = 'done' GROUP BY ALL"
    assert [r for r in _q(wh, twice) if r["n"] > 1] == []
    assert not list((wh / "leases").rglob("*.json"))  # both runs released theirs and removed their heartbeats
    assert len(_q(wh, "SELECT DISTINCT model, task FROM metrics")) == 4


@pytest.mark.slow
def test_noop_rerun_starts_no_ray_and_loads_nothing(ray_run, catalog):
    wh, _, _ = ray_run
    code = f"""
import sys, time
from evalfarm.runner import run_catalog
t = time.perf_counter()
s = run_catalog({str(catalog)!r}, {str(wh)!r}, models={WORD_MODELS + SENT_MODELS!r}, executor="ray")
print(s.counts(), "ray" in sys.modules, "torch" in sys.modules, round(time.perf_counter() - t, 2))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    counts, ray_loaded, torch_loaded, seconds = proc.stdout.strip().rsplit(" ", 3)
    assert counts.endswith("'skipped': 6, 'failed': 0}") and "'done': 0" in counts
    assert (ray_loaded, torch_loaded) == ("False", "False")
    assert float(seconds) < 10


def test_a_word_model_run_never_imports_torch_or_sklearn(catalog, tmp_path):
    """Issue #14: one word model end to end is work, not imports (torch and scikit-learn cost ~3 s to import)."""
    code = f"""
import sys
from evalfarm.runner import run_catalog
s = run_catalog({str(catalog)!r}, {str(tmp_path / "wh")!r}, models=["toy"], executor="local")
print(s.counts()["done"], sorted(m for m in ("torch", "sklearn", "ray") if m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == "1 []"


def test_warehouse_as_file_uri(catalog, tmp_path):
    uri = (tmp_path / "wh").as_uri()
    summary = run_catalog(catalog, uri, models=["toy"], executor="local")
    assert summary.ok
    wh = Warehouse(uri)
    assert wh.local and wh.query("SELECT count(DISTINCT variant) AS n FROM metrics").to_pylist() == [{"n": 2}]
    assert run_catalog(catalog, uri, models=["toy"], executor="local").counts()["skipped"] == 1


def test_worker_resources_and_fractional_gpus():
    assert worker_resources({"CPU": 2}, None, small_models=False) == (2, 1.0, 0.0)
    assert worker_resources({"CPU": 2}, 1, small_models=False) == (1, 2.0, 0.0)
    assert worker_resources({"CPU": 16, "GPU": 2}, None, small_models=False) == (2, 8.0, 1.0)
    assert worker_resources({"CPU": 16, "GPU": 2}, None, small_models=True) == (4, 4.0, 0.5)  # two per GPU
    n, cpw, _ = worker_resources({"CPU": 2}, 3, small_models=False)
    assert n == 3 and cpw * 3 <= 2
    # a cluster given by --address (others may use it): --workers N is N whole CPUs, not N slices of the cluster
    assert worker_resources({"CPU": 64}, 8, small_models=False, shared=True) == (8, 1.0, 0.0)
    assert worker_resources({"CPU": 64}, None, small_models=False, shared=True) == (64, 1.0, 0.0)


@pytest.mark.slow
def test_autoscaled_workers_ask_for_what_pending_encoders_need():
    # a head with 0 CPUs (the AWS config): nothing fits; two encoders -> two GPU workers, and one CPU worker
    s = autoscaled_workers({"CPU": 0}, [], heavy=2, workers=None, small_models=False)
    assert (s.now, s.gpu_workers, s.cpu_workers) == (0, 2, 1)
    assert s.bundles() == [{"GPU": 1.0, "CPU": 1.0}] * 2 + [{"CPU": 1.0}]
    # GPU nodes of 8 CPUs per GPU have joined: the workers that fit run now, the GPU shape follows the nodes
    nodes = [{"CPU": 8, "GPU": 1}] * 2
    s = autoscaled_workers({"CPU": 16, "GPU": 2}, nodes, heavy=3, workers=None, small_models=False)
    assert (s.now, s.cpus, s.gpus, s.gpu_workers, s.gpu_shape) == (2, 8.0, 1.0, 1, {"GPU": 1.0, "CPU": 8.0})
    assert s.bundles() == [{"CPU": 8.0, "GPU": 1.0}] * 2 + [{"GPU": 1.0, "CPU": 8.0}]
    # --workers 8 on one 2-CPU node, lookup models only: 2 whole-CPU workers now and 6 asked for, not 8 slices
    s = autoscaled_workers({"CPU": 2}, [], heavy=0, workers=8, small_models=True)
    assert (s.now, s.cpus, s.cpu_workers, s.gpu_workers) == (2, 1.0, 6, 0)
    # --workers caps what is asked for
    s = autoscaled_workers({"CPU": 2}, [], heavy=5, workers=3, small_models=False)
    assert (s.now, s.gpu_workers, s.cpu_workers) == (2, 1, 0)


def test_progress_line_counts_and_eta():
    """The ETA extrapolates from the cost finished in this run: 10 s for 1 of the 3 cost units left after a skip
    (which costs nothing) leaves 20 s for the other 2."""
    t = ProgressTracker(total=4, cost_total=4.0, started=time.perf_counter() - 10.0)
    assert " · ETA ? · " in t.line()  # nothing finished yet: no rate to extrapolate from
    t.finish("skipped")  # costs nothing: its share leaves the total
    assert t.cost_total == 3.0
    t.finish("done", 1.0)
    line = t.line()
    assert "units 2/4" in line and "1 done" in line and "2 remaining" in line, line
    assert 20 <= int(re.search(r"ETA (\d+)s · ", line).group(1)) <= 21, line  # 20 s, plus this test's own time
    t.finish("done", 1.0)
    t.finish("failed", 1.0)
    assert "units 4/4" in t.line() and "1 failed" in t.line() and " · ETA 0s · " in t.line()
