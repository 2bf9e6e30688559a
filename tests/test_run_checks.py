"""Checks a run makes once, before work starts (issue 13.7, 13.8): the device exists, task files are hashed once per
run (workers trust the driver's checksums), errors that another attempt cannot fix are not retried, and a selected
model that no selected task is of the level of is said, not dropped silently."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from evalfarm.catalog.registry import load_catalog
from evalfarm.cli import app
from evalfarm.device import DeviceUnavailable, check_device
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.outcomes import is_retryable
from evalfarm.runner import run_catalog
from evalfarm.warehouse import Warehouse
from tests.support.task_files import data_folder

REPO = Path(__file__).resolve().parents[1]
BAD = Path(__file__).parent / "bad_inputs"
WORDS = [line.split()[0] for line in (BAD / "glove_clean.txt").read_text().splitlines()]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Iterator[Path]:
    """Two tiny word tasks (three files) and models that load, and that fail for reasons in their files."""
    d = tmp_path_factory.mktemp("checks")
    pairs = zip(WORDS[::2], WORDS[1::2], strict=True)
    (d / "pairs.txt").write_text("".join(f"{a}\t{b}\n{b}\t{a}\n" for a, b in pairs))
    (d / "background.txt").write_text("\n".join(WORDS) + "\n")
    (d / "sim.txt").write_text("".join(f"{WORDS[i]} {WORDS[-1 - i]} {i + 0.5}\n" for i in range(6)))

    def sha(name: str) -> str:
        return hashlib.sha256((d / name).read_bytes()).hexdigest()

    def model(mid: str, path: Path) -> str:
        source = f"{{type: path, ref: {path}}}"
        return f"  - {{id: {mid}, level: word, kind: word-vectors, format: glove-text, source: {source}}}\n"

    (d / "c.yaml").write_text(
        f"""
tasks:
  - {{id: t-rank, level: word, kind: evalrank, format: evalrank-word, version: "1", licence: test, source: test,
      files: {{pairs: pairs.txt, background: background.txt}},
      sha256: {{pairs: {sha("pairs.txt")}, background: {sha("background.txt")}}}}}
  - {{id: t-sim, level: word, kind: word-similarity, version: "1", licence: test, source: test,
      files: {{pairs: sim.txt}}, sha256: {{pairs: {sha("sim.txt")}}}}}
models:
"""
        + model("clean", BAD / "glove_clean.txt")
        + model("clean-2", BAD / "glove_clean.txt").replace("glove-text,", "glove-text, lowercase: false,")
        + model("missing", d / "nope.txt")
        + model("unparseable", BAD / "first_line_short.txt")
        + model("nan", BAD / "nan_outside_pool.txt")
    )
    with data_folder(d):  # the task files sit beside the catalog: the data folder, for this module's tests
        yield d / "c.yaml"


def test_device_names_are_checked_against_this_machine() -> None:
    import torch

    assert check_device(None) is None and check_device("cpu") == "cpu"  # the default needs no check (no torch)
    with pytest.raises(ValueError, match="not a torch device"):
        check_device("gpu-please")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(DeviceUnavailable, match=r"--device cuda:7: (no CUDA GPU|torch was built|this machine has)"):
        check_device("cuda:7" if n < 8 else "cuda:99")
    assert not is_retryable(DeviceUnavailable("x"))


@pytest.mark.slow
def test_a_missing_device_fails_the_run_before_anything_starts(catalog, tmp_path) -> None:
    wh = tmp_path / "wh"
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", "run", "--catalog", str(catalog), "--warehouse", str(wh),
         "--executor", "local", "--device", "cuda:7", "--models", "clean"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "EVALFARM_CONFIG": ""}, timeout=300,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "--device cuda:7" in lines[0], proc.stderr
    assert not wh.exists()  # no run record, no unit, no retry


def test_a_missing_device_in_a_worker_fails_its_units_once(catalog, tmp_path) -> None:
    """Where only the worker can tell (a remote cluster), the score stage's check fails the unit, not retryable."""
    from evalfarm.execute import ExecContext, embed_model, score_unit
    from evalfarm.plan import plan_run
    from evalfarm.scorers.base import RunOptions

    cat = load_catalog(catalog)
    (plan,) = plan_run(cat, models=["clean"])
    ctx = ExecContext(cat, Warehouse(tmp_path / "wh").init(), "r1", options=RunOptions(device="cuda:7"))
    assert all(o.status == "embedded" for o in embed_model(plan, ctx))
    out = score_unit(plan, plan.units[0], ctx)
    assert out.status == "failed" and out.stage == "score" and not out.retryable
    assert "DeviceUnavailable: --device cuda:7" in out.error


def test_the_plan_carries_each_models_specs_to_the_executor(catalog) -> None:
    """The executor reads a model's spec and its bases' from the model's plan (issue 42): execute.py looks no model
    up in a catalog, and a plan, specs included, comes through Ray's pickling equal."""
    import inspect

    from ray import cloudpickle

    from evalfarm import execute
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.embed import store_key
    from evalfarm.plan import plan_run

    derived = ModelSpec(id="clean-abtt", level="word", base="clean", postprocess={"method": "abtt", "d": 1})
    cat = load_catalog(catalog).with_models([derived])
    plans = {p.model: p for p in plan_run(cat, models=["clean", "clean-abtt"], tasks=["t-sim"])}
    for mid, plan in plans.items():
        assert plan.lineage == tuple(cat.lineage(mid)) and plan.spec == cat.model(mid)
        assert plan.kind == cat.kind(mid) and plan.spec_hash == cat.spec_hash(mid)
        back = cloudpickle.loads(cloudpickle.dumps(plan))
        assert back == plan and back.spec == plan.spec
    assert plans["clean-abtt"].base_lineage == (cat.model("clean"),)
    assert plans["clean-abtt"].base_store == store_key(cat.spec_hash("clean")) == plans["clean"].store
    assert not re.findall(r"catalog\.(model|lineage|spec_hash|kind)\(", inspect.getsource(execute))


def test_errors_in_the_files_are_not_retried_and_recorded_once(catalog, tmp_path) -> None:
    events = []
    s = run_catalog(
        load_catalog(catalog), tmp_path / "wh", executor="local", max_attempts=3, on_event=events.append,
        models=["clean", "missing", "unparseable", "nan"],
    )  # fmt: skip
    assert s.counts() == {"done": 2, "skipped": 0, "failed": 6}
    assert [e for e in events if e.kind == "retry"] == []
    wh = Warehouse(tmp_path / "wh")
    att = wh.query("SELECT model, max(attempts) AS a, count(*) AS n FROM units WHERE status = 'failed' GROUP BY model")
    assert sorted(att.to_pylist(), key=lambda r: r["model"]) == [
        {"model": m, "a": 1, "n": 2} for m in ("missing", "nan", "unparseable")
    ]
    fails = wh.query("SELECT model, count(*) AS n FROM failures WHERE stage = 'load' GROUP BY model ORDER BY model")
    assert fails.to_pylist() == [{"model": m, "n": 2} for m in ("missing", "nan", "unparseable")]


def test_what_is_retried() -> None:
    cut = ModelLoadError("cannot download https://example.org/x.bin: timed out")
    cut.__cause__ = urllib.error.URLError("timed out")
    missing = ModelLoadError("word vectors file not found: /x")
    gone = ModelLoadError("cannot read /x")
    gone.__cause__ = FileNotFoundError("/x")
    assert is_retryable(cut) and not is_retryable(missing) and not is_retryable(gone)
    wrapped = ModelLoadError("model 'm': cannot download x")  # the loader wraps the source's error again
    wrapped.__cause__ = cut
    oom = ModelLoadError("model 'm': loading transformers model failed: OutOfMemoryError")
    oom.__cause__ = MemoryError()
    assert is_retryable(wrapped) and is_retryable(oom)  # another attempt, or another worker, may succeed
    parse = ModelLoadError("model 'm': x.txt:1: expected a word and 10 numbers")
    parse.__cause__ = ModelLoadError("x.txt:1: expected a word and 10 numbers")
    assert not is_retryable(parse)
    assert is_retryable(RuntimeError("CUDA out of memory"))
    assert not is_retryable(FileNotFoundError("x")) and not is_retryable(UnicodeDecodeError("utf-8", b"", 0, 1, "x"))


def test_task_files_are_hashed_once_per_run_and_workers_trust_the_driver(catalog, tmp_path, monkeypatch) -> None:
    from evalfarm.taskdata import data

    hashed: list[str] = []
    real = data.sha256_file

    def counting(path):
        hashed.append(str(path))
        return real(path)

    monkeypatch.setattr(data, "sha256_file", counting)
    monkeypatch.setattr(data, "_VERIFIED", {})
    s = run_catalog(load_catalog(catalog), tmp_path / "wh", executor="local", models=["clean", "clean-2"])
    assert s.ok and sorted(hashed) == sorted({*hashed}) and len(hashed) == 3  # 3 files, 2 models x 2 units
    verified = {"pairs.txt", "background.txt", "sim.txt"}
    assert {Path(h).name for h in hashed} == verified

    # a worker process (empty cache) given the driver's verified files hashes nothing
    from evalfarm.execute import ExecContext
    from evalfarm.scorers.base import RunOptions
    from evalfarm.taskdata.data import verify_task_files

    cat = load_catalog(catalog)
    files = verify_task_files([cat.task("t-rank"), cat.task("t-sim")])
    assert {Path(f[0]).name for f in files} == verified
    monkeypatch.setattr(data, "_VERIFIED", {})
    hashed.clear()
    ctx = ExecContext(cat, Warehouse(tmp_path / "wh"), "r2", options=RunOptions(verified_files=files))
    assert len(ctx.texts("t-rank")) == len(WORDS) and ctx.texts("t-sim")
    assert hashed == []
    # a file that changed since (another mtime) is hashed again, and a changed content is refused
    sim = Path(next(f[0] for f in files if f[0].endswith("sim.txt")))
    original = sim.read_text()
    try:
        sim.write_text(original + f"{WORDS[0]} {WORDS[1]} 9.0\n")
        monkeypatch.setattr(data, "_VERIFIED", {})
        ctx = ExecContext(cat, Warehouse(tmp_path / "wh"), "r3", options=RunOptions(verified_files=files))
        with pytest.raises(data.TaskDataError, match="sha256"):
            ctx.task_data("t-sim")
        assert [Path(h).name for h in hashed] == ["sim.txt"]
    finally:
        sim.write_text(original)


def test_a_selected_model_without_a_task_of_its_level_is_said_not_dropped(catalog, tmp_path) -> None:
    """Mixed models with --tasks of one level: the other level's models are not evaluated, and the run says so (one
    line per model: its id, its level, the tasks' levels); when no model has a task, the run is an error."""
    from evalfarm.plan import without_tasks

    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(catalog.read_text() + "  - {id: bow-clean, level: sentence, kind: bow, base: clean}\n")
    cat = load_catalog(mixed)
    assert without_tasks(cat, models=["clean", "bow-clean"], tasks=["t-rank", "t-sim"]) == {
        "bow-clean": "model 'bow-clean' is sentence-level, but the selected tasks are word-level: it is not evaluated "
        "(add a sentence-level task to --tasks, or leave it out of --models)"
    }
    events = []
    s = run_catalog(cat, tmp_path / "wh", executor="local", models=["clean", "bow-clean"], tasks=["t-sim"],
                    on_event=events.append)  # fmt: skip
    assert s.counts() == {"done": 1, "skipped": 0, "failed": 0} and s.not_evaluated == ["bow-clean"]
    said = [e.message for e in events if e.kind == "warning"]
    assert len(said) == 1 and said == s.warnings and "'bow-clean' is sentence-level" in said[0]
    assert [e.kind for e in events].index("warning") < [e.kind for e in events].index("unit")  # before the work

    def cli(*args: str) -> Result:
        """`evalfarm run` as typed, in this process (CliRunner: the same command and its stderr, without the ~2 s
        of a new interpreter importing evalfarm, twice, in the fast tier)."""
        cmd = ["run", "--catalog", str(mixed), "--warehouse", str(tmp_path / "w2"), "--executor", "local", *args]
        return CliRunner().invoke(app, cmd, env={"EVALFARM_CONFIG": ""})

    proc = cli("--models", "clean,bow-clean", "--tasks", "t-sim")
    assert proc.exit_code == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "bow-clean" in ln]
    assert len(warned) == 2, proc.stderr  # said once when planned, and again after the run's summary line
    assert warned[0].startswith("warning: model 'bow-clean' is sentence-level, but the selected tasks are word-level")
    assert warned[1] == "not evaluated (no selected task of their level): bow-clean"
    assert re.search(r"^run \S+: 1 done, 0 skipped, 0 failed, 1 selected models not evaluated in", proc.stderr, re.M)
    proc = cli("--models", "bow-clean", "--tasks", "t-sim")  # no model has a task: an error, nothing runs
    assert proc.exit_code == 2 and "nothing to run: the selected models are sentence-level" in proc.stderr


@pytest.mark.docs
def test_the_readme_subset_example_evaluates_every_model_it_names() -> None:
    from evalfarm.plan import plan_run, without_tasks

    starter = load_catalog("zoo-starter")
    line = next(ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith("evalfarm run --models"))
    models = re.search(r"--models (\S+)", line).group(1).split(",")
    tasks = re.search(r"--tasks (\S+)", line).group(1).split(",")
    assert without_tasks(starter, models=models, tasks=tasks) == {}
    assert {p.model for p in plan_run(starter, models=models, tasks=tasks)} == set(models)
