"""cluster/: every YAML parses and has the fields its kind needs; the local scripts are sound and bind loopback;
the shipped entrypoints (the nightly RayJob's, the README's raw `ray job submit`) run on a real head.

Kubernetes cannot be applied here: those checks catch typos, missing fields and unsafe defaults. The autoscaler
config is validated against Ray's own schema (ray/autoscaler/ray-schema.json). The head is the one
`cluster/local/start-head.sh` starts (token authentication, loopback only), on free ports, one per module.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"
YAMLS = sorted(CLUSTER.rglob("*.yaml"))
SCRIPTS = sorted((CLUSTER / "local").glob("*.sh"))
BIN = Path(sys.executable).parent


# -- a real head, started by cluster/local/start-head.sh ----------------------------------------------------------
# Other people run Ray on this machine at the same time: every port is a free one, and only the processes of the
# head's own session are ever stopped (never `ray stop`, which stops every Ray of the user).

_RAY_CLIENT_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_API_SERVER_ADDRESS")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (a head started with start_new_session: all its Ray processes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _decode(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening_sockets(pids: list[int]) -> list[tuple[int, str, str, int]]:
    """(pid, process name, address, port) of every listening TCP socket of ``pids``: what `ss -ltnp` shows."""
    owner: dict[int, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    link = os.readlink(fd)
                except OSError:
                    continue
                if link.startswith("socket:["):
                    owner[int(link[8:-1])] = pid
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or int(fields[9]) not in owner:  # 0A: LISTEN
                continue
            pid = owner[int(fields[9])]
            host, port = fields[1].split(":")
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            found.append((pid, name, _decode(host), int(port, 16)))
    return sorted(set(found), key=lambda r: (r[3], r[2]))


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def routable_ip() -> str | None:
    """This host's address on its default route (no packet is sent), or None on a loopback-only machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if is_loopback(ip) else ip


def http(url: str, *, body: dict | None = None, token: str | None = None, timeout: float = 10) -> tuple[Any, str]:
    """(status code or exception name, text) of a GET, or a JSON POST when ``body`` is given."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return type(reason).__name__, str(reason)


@dataclass
class Head:
    proc: subprocess.Popen
    ports: dict[str, int]
    ray_dir: Path
    log: Path
    temp_dir: Path

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.ports['dashboard']}"

    @property
    def token(self) -> str:
        return (self.ray_dir / "auth_token").read_text().strip()

    def pids(self) -> list[int]:
        return session_pids(self.proc.pid)

    def client_env(self, **extra: str) -> dict[str, str]:
        """This environment plus what `. $EVALFARM_RAY_DIR/env` sets, as a user's shell would have it."""
        out = subprocess.run(
            ["bash", "-c", 'set -a; . "$0"; env -0', str(self.ray_dir / "env")],
            env=head_env(),
            capture_output=True,
            check=True,
        ).stdout
        env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
        return {**env, **extra}


def head_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _RAY_CLIENT_VARS}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # this venv's `ray` and `evalfarm`
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return {**env, **extra}


def start_head(tmp: Path, *, num_cpus: int = 2) -> Head:
    """cluster/local/start-head.sh --block on free ports; returns once the job API answers the token."""
    names = ["gcs", "dashboard", "client", "node_manager", "object_manager", "agent_http", "agent_grpc"]
    names += ["runtime_env", "metrics", "autoscaler_metrics", "dashboard_metrics"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    ray_dir = tmp / "ray"
    env = head_env(
        EVALFARM_RAY_DIR=str(ray_dir),
        EVALFARM_GCS_PORT=str(ports["gcs"]),
        EVALFARM_DASHBOARD_PORT=str(ports["dashboard"]),
        EVALFARM_NUM_CPUS=str(num_cpus),
        EVALFARM_NUM_GPUS="0",
        AUTOSCALER_METRIC_PORT=str(ports["autoscaler_metrics"]),  # fixed 44217 / 44227 by default
        DASHBOARD_METRIC_PORT=str(ports["dashboard_metrics"]),
    )
    cmd = [
        "bash",
        str(CLUSTER / "local" / "start-head.sh"),
        "--block",
        f"--ray-client-server-port={ports['client']}",
        f"--node-manager-port={ports['node_manager']}",
        f"--object-manager-port={ports['object_manager']}",
        f"--dashboard-agent-listen-port={ports['agent_http']}",
        f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
        f"--runtime-env-agent-port={ports['runtime_env']}",
        f"--metrics-export-port={ports['metrics']}",
        "--object-store-memory=300000000",
        # its own temp dir: `ray start` records "the current cluster" under it, and the default (/tmp/ray) is
        # where other people's `ray.init()` on this machine would look (short: Ray's socket paths must fit)
        f"--temp-dir={tempfile.mkdtemp(prefix='efray-')}",
    ]
    log = tmp / "head.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    head = Head(proc, ports, ray_dir, log, Path(cmd[-1].split("=", 1)[1]))
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"start-head.sh exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        listening = {port for *_, port in listening_sockets(head.pids())}
        if {ports[k] for k in ("gcs", "dashboard", "agent_http", "node_manager", "runtime_env")} <= listening:
            code, _ = http(f"{head.dashboard}/api/jobs/", token=head.token, timeout=5)
            if code == 200:
                return head
        if time.monotonic() > deadline:
            stop_head(head)
            raise RuntimeError(f"the job API did not come up in 120 s:\n{log.read_text()[-4000:]}")
        time.sleep(1)


def stop_head(head: Head) -> None:
    """SIGTERM to the head's session (`ray start --block` then stops its processes); SIGKILL what is left."""
    try:
        os.killpg(head.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        head.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 20
    while session_pids(head.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in session_pids(head.proc.pid):  # stragglers of this head only
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(head.temp_dir, ignore_errors=True)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _all_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in YAMLS for d in _docs(p)]


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in _all_docs() if d.get("kind") == kind]


def _get(doc: dict[str, Any], dotted: str) -> Any:
    cur: Any = doc
    for key in dotted.split("."):
        assert isinstance(cur, dict) and key in cur, f"missing {dotted} ({key})"
        cur = cur[key]
    return cur


def test_the_expected_files_exist():
    names = {p.relative_to(CLUSTER).as_posix() for p in CLUSTER.rglob("*") if p.is_file()}
    assert {
        "README.md",
        "local/start-head.sh",
        "local/stop.sh",
        "autoscaler/aws-gpu.yaml",
        "kuberay/raycluster.yaml",
        "kuberay/rayjob-nightly.yaml",
        "kuberay/nightly-cronjob.yaml",
    } <= names


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_yaml_parses_and_k8s_docs_have_identity(path):
    docs = _docs(path)
    assert docs, f"{path} is empty"
    for d in docs:
        assert isinstance(d, dict)
        if "kind" in d and d["kind"] != "Kustomization":
            assert d.get("apiVersion"), f"{path}: {d['kind']} without apiVersion"
            meta = d.get("metadata") or {}
            assert meta.get("name") or meta.get("generateName"), f"{path}: {d['kind']} without a name"


def _pod_containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    containers = _get(template, "spec.containers")
    assert containers and all(c.get("image") and c.get("name") for c in containers)
    return containers


def _check_ray_cluster_spec(spec: dict[str, Any]) -> None:
    head = _pod_containers(_get(spec, "headGroupSpec.template"))
    assert "rayStartParams" in spec["headGroupSpec"]
    assert spec["headGroupSpec"].get("serviceType", "ClusterIP") == "ClusterIP"  # job API never exposed
    groups = _get(spec, "workerGroupSpecs")
    gpu_groups = []
    for g in groups:
        assert g["groupName"] and g["minReplicas"] <= g.get("replicas", 0) <= g["maxReplicas"]
        for c in _pod_containers(g["template"]):
            limits = c.get("resources", {}).get("limits", {})
            if int(limits.get("nvidia.com/gpu", 0)) >= 1:
                gpu_groups.append(g["groupName"])
                # extended resources: the request, if given, must equal the limit
                req = c["resources"].get("requests", {}).get("nvidia.com/gpu", limits["nvidia.com/gpu"])
                assert req == limits["nvidia.com/gpu"]
    assert gpu_groups, "no worker group with an nvidia.com/gpu limit"
    # the shared warehouse storage is mounted everywhere
    for c in head:
        assert any(m["mountPath"] == "/mnt/evalfarm" for m in c.get("volumeMounts", []))


def test_raycluster():
    (rc,) = _of_kind("RayCluster")
    assert rc["apiVersion"] == "ray.io/v1"
    _check_ray_cluster_spec(rc["spec"])


def test_rayjob_runs_evalfarm_and_cleans_up():
    (job,) = _of_kind("RayJob")
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert "evalfarm run" in spec["entrypoint"] and "--warehouse" in spec["entrypoint"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] >= 0
    assert "rayClusterSpec" in spec or "clusterSelector" in spec
    if "rayClusterSpec" in spec:
        _check_ray_cluster_spec(spec["rayClusterSpec"])
    # what it runs, and that it runs, is tested on a real head: test_nightly_rayjob_entrypoint_runs_on_a_real_head


def test_nightly_cronjob_creates_the_rayjob_with_least_privilege():
    (cron,) = _of_kind("CronJob")
    assert cron["apiVersion"] == "batch/v1"
    assert len(_get(cron, "spec.schedule").split()) == 5
    pod = _get(cron, "spec.jobTemplate.spec.template.spec")
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (container,) = pod["containers"]
    assert "kubectl" in " ".join(container["command"]) and "create" in container["command"]
    cm_name = next(v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v)
    (kust,) = _of_kind("Kustomization")
    gen = next(g for g in kust["configMapGenerator"] if g["name"] == cm_name)
    assert gen["files"] == ["rayjob.yaml=rayjob-nightly.yaml"]
    assert "/etc/evalfarm/rayjob.yaml" in container["command"]
    sa = pod["serviceAccountName"]
    assert any(d["metadata"]["name"] == sa for d in _of_kind("ServiceAccount"))
    (role,) = _of_kind("Role")
    (binding,) = _of_kind("RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"] and binding["subjects"][0]["name"] == sa
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["create", "get", "list"]}]
    for res in kust["resources"]:
        assert (CLUSTER / "kuberay" / res).is_file()


def test_autoscaler_config_matches_rays_schema_and_has_a_gpu_group():
    import jsonschema
    import ray

    (path,) = [p for p in YAMLS if p.parent.name == "autoscaler"]
    (cfg,) = _docs(path)
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(cfg, schema)
    assert cfg["cluster_name"] and cfg["provider"]["type"] in ("aws", "gcp", "azure")
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] in types
    gpu = [n for n, t in types.items() if t.get("resources", {}).get("GPU", 0) >= 1]
    assert gpu and all(types[n]["max_workers"] >= types[n].get("min_workers", 0) for n in gpu)
    setup = " ".join(cfg["setup_commands"])
    assert "evalfarm[gpu" in setup and "torch" in setup
    head_start = " ".join(cfg["head_start_ray_commands"])
    assert "ray start --head" in head_start and "--dashboard-host=127.0.0.1" in head_start
    assert any("ray start --address" in c for c in cfg["worker_start_ray_commands"])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_executable_and_parse(script):
    assert os.access(script, os.X_OK), f"{script} is not executable (chmod +x)"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


def test_start_head_binds_loopback_by_default():
    text = (CLUSTER / "local" / "start-head.sh").read_text()
    assert 'DASHBOARD_HOST="${EVALFARM_DASHBOARD_HOST:-127.0.0.1}"' in text
    assert 'NODE_IP="${EVALFARM_NODE_IP:-127.0.0.1}"' in text
    assert '--dashboard-host="$DASHBOARD_HOST"' in text and '--node-ip-address="$NODE_IP"' in text
    assert "RAY_USAGE_STATS_ENABLED=0" in text
    assert re.search(r"WARNING: binding the Ray dashboard", text)  # overriding the host warns
    assert "0.0.0.0" not in text
    # token authentication, always; Ray's single-node mode for a loopback node (the sockets: test_security.py)
    assert "export RAY_AUTH_MODE=token" in text and 'RAY_AUTH_TOKEN_PATH="$RAY_DIR/auth_token"' in text
    assert "export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in text and "umask 077" in text


def test_readme_explains_storage_and_loopback():
    text = " ".join((CLUSTER / "README.md").read_text().split())
    for needle in ("127.0.0.1", "arbitrary code", "shared", "evalfarm submit", "ray job submit", "RAY_AUTH_MODE"):
        assert needle in text, needle


# -- the shipped entrypoints, as written, on a real head ------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[Head]:
    head = start_head(tmp_path_factory.mktemp("head"))
    try:
        yield head
    finally:
        stop_head(head)


def _on_this_machine(text: str, tmp: Path, head: Head) -> str:
    """A shipped command with the cluster's places replaced by this machine's: the only edit the tests make."""
    for cluster_path, here in {
        "/mnt/evalfarm/warehouse": str(tmp / "warehouse"),
        "/mnt/evalfarm/data": os.environ["EVALFARM_DATA"],
        "/mnt/evalfarm/cache": os.environ.get("EVALFARM_CACHE") or str(tmp / "cache"),
        "http://HEAD:8265": head.dashboard,
    }.items():
        text = text.replace(cluster_path, here)
    return text


def _metrics(warehouse: Path) -> set[tuple[str, str]]:
    from evalfarm.warehouse import Warehouse

    rows = Warehouse(warehouse).query("SELECT DISTINCT model, pool FROM metrics").to_pylist()
    return {(r["model"], r["pool"]) for r in rows}


@pytest.mark.slow
def test_nightly_rayjob_entrypoint_runs_on_a_real_head(ray_head, tmp_path):
    """The RayJob's entrypoint and runtimeEnvYAML, submitted the way KubeRay's submitter does (`ray job submit
    --runtime-env-json … -- ENTRYPOINT`). It used to fail at start: the job's env_vars and evalfarm's own
    ray.init runtime_env set the same keys ("Failed to merge the Job's runtime env")."""
    (job,) = _of_kind("RayJob")
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["env_vars"], "the nightly's env_vars are what broke it: keep them under test"
    entrypoint = _on_this_machine(job["spec"]["entrypoint"], tmp_path, ray_head)
    runtime_env = json.loads(_on_this_machine(json.dumps(runtime_env), tmp_path, ray_head))
    # one starter model instead of the whole zoo: what failed was the start, and a night's length is not tested
    entrypoint += " --models glove-6b-50d"
    proc = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", ray_head.dashboard]
        + ["--runtime-env-json", json.dumps(runtime_env), "--", *shlex.split(entrypoint)],
        env=ray_head.client_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Failed to merge" not in out, out[-4000:]
    assert "1 done, 0 skipped, 0 failed" in out and "(ray" in out, out[-4000:]
    assert _metrics(tmp_path / "warehouse") == {("glove-6b-50d", "evalrank-word")}


RAW_MODEL = """\
id: my-model            # the EvalRank toolkit's toy GloVe (5k words): cheap and real
level: word
kind: word-vectors
format: glove-text
source: {type: data, ref: evalrank/reference/toy_emb.txt}
"""


def _readme_block(containing: str) -> str:
    text = (CLUSTER / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if containing in b]
    return block


@pytest.mark.slow
def test_readme_raw_ray_job_submit_runs_as_written(ray_head, tmp_path):
    """The README's raw `ray job submit` block, run by bash in a shell that sourced the head's settings."""
    block = _readme_block("ray job submit --address http://HEAD:8265")
    (tmp_path / "my-model.yaml").write_text(RAW_MODEL)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _on_this_machine(block, tmp_path, ray_head)],
        cwd=tmp_path,
        env=ray_head.client_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Failed to merge" not in out, out[-4000:]
    assert "1 done, 0 skipped, 0 failed" in out, out[-4000:]
    assert _metrics(tmp_path / "warehouse") == {("my-model", "evalrank-word")}
