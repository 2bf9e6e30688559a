"""Provenance: what a run records about itself, and that collecting it never fails or imports torch uninvited.

The in-job half (the Ray submission id, the catalog as given through `evalfarm submit`) runs on a real head in
tests/test_submit.py; the installed-wheel half (no checkout, no commit) in tests/test_packaging.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm.catalog.registry import load_catalog
from evalfarm.provenance import (
    CATALOG_AS_GIVEN_ENV,
    RAY_JOB_CONFIG_ENV,
    catalog_as_given,
    cpu_model,
    evalfarm_info,
    package_versions,
    parse_nvidia_smi,
    ray_job_info,
    run_provenance,
    unpinned_revisions,
)

REPO = Path(__file__).resolve().parents[1]


def _py(code: str, **env: str) -> dict:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not shutil.which("git") or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_commit_of_the_checkout():
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    info = evalfarm_info()
    assert info["commit"] == head.strip() and isinstance(info["dirty"], bool)
    assert info["installed_from"] == str(REPO)
    import evalfarm

    assert info["version"] == evalfarm.__version__ != ""


def test_never_fails_without_git(tmp_path):
    got = _py(
        "import json; from evalfarm.provenance import run_provenance; print(json.dumps(run_provenance('x')))",
        PATH=str(tmp_path),  # no git, no nvidia-smi on this PATH
    )
    assert got["evalfarm"]["commit"] is None and got["evalfarm"]["dirty"] is None and got["evalfarm"]["version"]
    assert got["device"]["gpus"] is None and got["catalog"] == {"given": "x", "path": None}


@pytest.mark.slow
def test_torch_is_imported_only_when_loaded_or_a_gpu_is_asked_for():
    code = (
        "import json, sys; from evalfarm.provenance import run_provenance; p = run_provenance(device={dev!r}); "
        "print(json.dumps([p['device'], 'torch' in sys.modules]))"
    )
    device, imported = _py(code.format(dev=None))
    assert not imported and "torch_cuda" not in device and device["requested"] is None
    device, imported = _py(code.format(dev="cuda:0"))
    assert imported and device["requested"] == "cuda:0"
    import torch

    cuda = device["torch_cuda"]
    assert cuda["available"] == torch.cuda.is_available() and cuda["cuda"] == torch.version.cuda
    assert len(cuda["devices"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    # already imported by the run: recorded without being asked
    device, _ = _py("import torch\n" + code.format(dev=None))
    assert "torch_cuda" in device


def test_cpu_model_is_the_one_proc_cpuinfo_names():
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    if names:
        assert cpu_model() == names[0]
    else:  # not Linux, or an architecture without "model name": whatever platform knows, never empty
        assert cpu_model()


def test_parse_nvidia_smi_rows():
    text = "0, NVIDIA H100 80GB HBM3, 550.54.15, 81559\n1, NVIDIA A10G, 535.104.05, [N/A]\n\nNo devices were found\n"
    assert parse_nvidia_smi(text) == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "memory_mib": 81559},
        {"index": 1, "name": "NVIDIA A10G", "driver": "535.104.05", "memory_mib": None},
    ]
    assert parse_nvidia_smi("") == []


def test_package_versions_come_from_metadata():
    got = package_versions()
    for name in ("torch", "ray", "duckdb", "numpy", "pyarrow", "transformers", "sentence-transformers"):
        assert got[name] == importlib.metadata.version(name)
    assert any(k.startswith("faiss") for k in got)  # the installed FAISS build, whichever it is
    assert "no-such-distribution" not in package_versions(["no-such-distribution"])


def test_catalog_as_given_only_for_the_submitted_file(monkeypatch):
    monkeypatch.delenv(CATALOG_AS_GIVEN_ENV, raising=False)
    assert catalog_as_given("zoo-starter") == "zoo-starter" and catalog_as_given(None) is None
    monkeypatch.setenv(CATALOG_AS_GIVEN_ENV, "submit-m.yaml=/home/me/m.yaml (submitted over zoo-starter)")
    runtime = "/tmp/ray/session_x/runtime_resources/working_dir_files/_ray_pkg_ab/submit-m.yaml"
    assert catalog_as_given(runtime) == "/home/me/m.yaml (submitted over zoo-starter)"
    assert catalog_as_given("submit-m.yaml") == "/home/me/m.yaml (submitted over zoo-starter)"
    assert catalog_as_given("zoo-starter") == "zoo-starter"  # another catalog in the same environment: itself


def test_ray_job_info_reads_the_job_config_ray_hands_the_entrypoint(monkeypatch):
    monkeypatch.delenv(RAY_JOB_CONFIG_ENV, raising=False)
    if "ray" not in sys.modules:
        assert ray_job_info() is None
    config = {"runtime_env": {}, "metadata": {"job_submission_id": "raysubmit_1", "evalfarm.version": "0.1.0", "x": 1}}
    monkeypatch.setenv(RAY_JOB_CONFIG_ENV, json.dumps(config))
    got = ray_job_info()
    assert got["submission_id"] == "raysubmit_1" and got["metadata"] == {"evalfarm.version": "0.1.0"}
    monkeypatch.setenv(RAY_JOB_CONFIG_ENV, "{not json")
    assert ray_job_info() is None or "submission_id" not in ray_job_info()


def test_unpinned_hub_revisions(tmp_path):
    (tmp_path / "c.yaml").write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\n"
        "models:\n"
        "  - {id: loose, level: sentence, kind: sentence-transformers, source: {type: hf, ref: org/loose}}\n"
        "  - {id: branch, level: sentence, kind: sentence-transformers, source: {type: hf, ref: org/b},"
        " revision: main}\n"
        f"  - {{id: pinned, level: sentence, kind: sentence-transformers, source: {{type: hf, ref: org/p}},"
        f" revision: {'0a' * 20}}}\n"
        "  - {id: loose-white, level: sentence, base: loose, postprocess: {method: whitening}}\n"
        "  - {id: local, level: sentence, kind: onnx, source: {type: path, ref: /m.onnx}}\n"
    )
    cat = load_catalog(tmp_path / "c.yaml")
    got = {(u["model"], u["spec"], u["revision"]) for u in unpinned_revisions(cat)}
    assert got == {("loose", "loose", None), ("branch", "branch", "main"), ("loose-white", "loose", None)}
    (derived,) = unpinned_revisions(cat, ["loose-white"])
    assert derived["message"].startswith("model 'loose-white': its base 'loose' loads hf:org/loose (source)")
    assert unpinned_revisions(cat, ["pinned", "local"]) == []

    prov = run_provenance(str(tmp_path / "c.yaml"), loaded=cat, models=["branch", "pinned"])
    assert prov["unpinned_revisions"] == [
        {"model": "branch", "spec": "branch", "role": "source", "ref": "org/b", "revision": "main"}
    ]
    assert prov["catalog"] == {"given": str(tmp_path / "c.yaml"), "path": str(tmp_path / "c.yaml")}
    json.dumps(prov)  # plain JSON types only: it goes into the runs table
    assert {"evalfarm", "packages", "host", "device", "ray_job", "catalog"} <= set(prov)


@pytest.mark.slow
def test_a_run_records_the_device_of_each_worker_and_of_the_process_that_embedded(tmp_path):
    """A real `evalfarm run`: the end event's provenance (the `runs` view) lists its workers with their devices, and
    the models row says on which machine and device the vectors were made. On a cluster those are the GPU nodes,
    not the CPU head that drives the run (the Ray executor, from the installed wheel: tests/test_packaging.py)."""
    from evalfarm.provenance import device_info
    from evalfarm.warehouse import Warehouse

    wh = tmp_path / "wh"
    proc = subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", "run", "--catalog", "zoo-starter", "--models", "glove-6b-50d"]
        + ["--tasks", "wordsim-rg-65", "--executor", "local", "--warehouse", str(wh)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (run,) = Warehouse(wh).query("SELECT status, provenance FROM runs").to_pylist()
    prov = json.loads(run["provenance"])
    assert run["status"] == "ok" and prov["evalfarm"]["version"] and prov["device"]["cpu"] == cpu_model()
    (worker,) = prov["workers"]
    here = device_info()
    assert worker["name"] == "local-0" and worker["pid"] > 0 and worker["host"]
    assert {k: worker["device"][k] for k in ("cpu", "cpu_count", "gpus")} == {
        k: here[k] for k in ("cpu", "cpu_count", "gpus")
    }
    (model,) = Warehouse(wh).query("SELECT provenance FROM models").to_pylist()
    made = json.loads(model["provenance"])
    assert made["host"] == worker["host"] and made["device"] == worker["device"]


def test_thread_counts_follow_the_limits_the_process_runs_under():
    from threadpoolctl import threadpool_limits

    from evalfarm.provenance import thread_counts

    with threadpool_limits(limits=1, user_api="blas"):
        assert thread_counts()["blas"] == 1
    assert thread_counts()["blas"] >= 1


@pytest.mark.faults  # issue 23.5 (`make faults`)
def test_each_scored_unit_records_the_thread_pools_it_was_scored_with(tmp_path, toy_glove):
    """Issue 23.5: the same unit scored under other thread counts may round differently; its `units` row says which
    it had (a skipped unit's plan row and an embed row have none)."""
    from evalfarm.provenance import thread_counts
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    (tmp_path / "c.yaml").write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\ntasks: [wordsim-rg-65]\nmodels:\n"
        "  - {id: toy, level: word, kind: word-vectors, format: glove-text, source: {type: path, ref: "
        f"{toy_glove}}}}}\n"
    )
    wh = tmp_path / "wh"
    assert run_catalog(tmp_path / "c.yaml", wh, executor="local").ok
    assert run_catalog(tmp_path / "c.yaml", wh, executor="local").ok  # all skipped
    rows = Warehouse(wh).query("SELECT stage, threads FROM units ORDER BY stage").to_pylist()
    assert {r["stage"] for r in rows} == {"embed", "score", "plan"}
    for r in rows:
        if r["stage"] == "score":
            assert json.loads(r["threads"]) == thread_counts()  # in-process: this process's pools
        else:
            assert r["threads"] is None
