"""cluster/: every YAML parses and has the fields its kind needs; the local scripts are sound and bind loopback;
the shipped entrypoints (the nightly RayJob's; the raw `ray job submit` of cluster/README.md and docs/operations.md)
run on a real head.

Kubernetes cannot be applied here: those checks catch typos, missing fields and unsafe defaults. The autoscaler
config is validated against Ray's own schema (ray/autoscaler/ray-schema.json). The head is the one
`cluster/local/start-head.sh` starts (token authentication, loopback only), on free ports, one per module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.ray_heads import (
    RAY_WORKER_PORTS,
    Head,
    ephemeral_ports,
    free_ports,
    head_env,
    http,
    listening_sockets,
    pick_ports,
    session_pids,
    start_head,
    stop_head,
)

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"
YAMLS = sorted(CLUSTER.rglob("*.yaml"))
SCRIPTS = sorted((CLUSTER / "local").glob("*.sh"))
BIN = Path(sys.executable).parent


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


def test_the_harness_draws_head_ports_where_no_bind0_and_no_ray_worker_draws_and_each_xdist_worker_apart(monkeypatch):
    """A head's ports come from above Ray's worker range and below the kernel's ephemeral range (where a Ray beside
    the test draws its own with bind(0): one drawn twice left a head without its job API, CI's failure), and the
    slices of two pytest-xdist workers never meet; each port is free and none is given twice."""
    low = ephemeral_ports()[0]
    if low <= RAY_WORKER_PORTS[1] + 100:
        pytest.skip(f"the kernel's ephemeral range starts at {low}: no room below it (free_ports uses bind(0))")
    drawn = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        drawn[worker] = free_ports(11)
        assert len(set(drawn[worker])) == 11
        assert all(RAY_WORKER_PORTS[1] < p < low for p in drawn[worker]), drawn[worker]
    middle = RAY_WORKER_PORTS[1] + 1 + (low - RAY_WORKER_PORTS[1] - 1) // 2
    assert max(drawn["gw0"]) < middle <= min(drawn["gw1"])


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
    # what it runs, and that it runs, is tested on a real head started from the installed wheel:
    # test_nightly_rayjob_entrypoint_runs_on_a_real_head_from_the_installed_wheel


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
    assert cfg["docker"]["image"].startswith("ghcr.io/") and ":latest" not in cfg["docker"]["image"]
    assert "evalfarm --version" in " ".join(cfg["setup_commands"])  # the image's pinned evalfarm, checked
    head_start = " ".join(cfg["head_start_ray_commands"])
    assert "ray start --head" in head_start and "--dashboard-host=127.0.0.1" in head_start
    assert any("ray start --address" in c for c in cfg["worker_start_ray_commands"])
    # token authentication on every node, with the launching machine's token
    for cmds in (cfg["head_start_ray_commands"], cfg["worker_start_ray_commands"]):
        assert all("RAY_AUTH_MODE=token ray start" in c for c in cmds if "ray start" in c)
    assert any(dst.endswith("/.ray/auth_token") for dst in cfg["file_mounts"])


# -- KubeRay manifests: schemas, token authentication, network policy, Pod Security "restricted" --------------------

K8S_VERSIONS = ("1.29", "1.37")  # the oldest Kubernetes these manifests claim, and kubernetes-validate's newest
RAY_SCHEMA = REPO / "tests" / "fixtures" / "kuberay" / "ray-v1-schema.yaml"
TOKEN_SECRET = "evalfarm-ray-token"


def _k8s_type_validator(type_name: str, version: str) -> Any:
    """A strict validator for one Kubernetes type (e.g. podtemplatespec-v1) from kubernetes-validate's schemas."""
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{version}.0-local-strict"
    schema = schema_contents(f"{folder}/{type_name}.json", version)
    defs = schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _ray_validator(version: str) -> Any:
    """The fixture's Ray layer, with every `x-kubernetes-type` node validated strictly as that Kubernetes type."""
    import jsonschema

    cache: dict[str, Any] = {}

    def k8s_type(validator: Any, type_name: str, instance: Any, schema: Any) -> Iterator[Any]:
        if type_name not in cache:
            cache[type_name] = _k8s_type_validator(type_name, version)
        for err in cache[type_name].iter_errors(instance):
            yield jsonschema.ValidationError(f"{type_name}: {err.message} (at {'/'.join(map(str, err.path))})")

    cls = jsonschema.validators.extend(jsonschema.validators.Draft202012Validator, {"x-kubernetes-type": k8s_type})
    return cls(yaml.safe_load(RAY_SCHEMA.read_text()))


def _ray_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p, d in _all_docs() if d.get("apiVersion") == "ray.io/v1"]


def _schema_errors(doc: dict[str, Any], version: str) -> list[str]:
    return [e.message for e in _ray_validator(version).iter_errors(doc)]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_ray_manifests_match_kuberay_and_kubernetes_schemas(version):
    docs = _ray_docs()
    assert {d["kind"] for _, d in docs} == {"RayCluster", "RayJob"}
    for path, doc in docs:
        assert not _schema_errors(doc, version), f"{path.name}: {_schema_errors(doc, version)}"


def test_schema_check_refuses_what_kubectl_would():
    """The check is not a rubber stamp: each typo below must be reported."""
    import copy

    (rc,) = _of_kind("RayCluster")
    typos = {
        "unknown Ray field": lambda d: d["spec"]["headGroupSpec"].update(rayStartParam={"num-cpus": "0"}),
        "bad auth mode": lambda d: d["spec"]["authOptions"].update(mode="tokens"),
        "auth field misspelt": lambda d: d["spec"]["authOptions"].update(secretname=TOKEN_SECRET),
        "container field misspelt": lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            securityContex={}
        ),
        "wrong type in a pod": lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"][
            "securityContext"
        ].update(runAsNonRoot="yes"),
        "bad replica count": lambda d: d["spec"]["workerGroupSpecs"][0].update(maxReplicas="8"),
    }
    for name, mutate in typos.items():
        bad = copy.deepcopy(rc)
        mutate(bad)
        assert _schema_errors(bad, K8S_VERSIONS[-1]), f"{name}: not detected"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_manifests_match_kubernetes_schema(version):
    import kubernetes_validate

    docs = [(p, d) for p, d in _all_docs() if "kind" in d and d["kind"] != "Kustomization"]
    docs = [(p, d) for p, d in docs if d["apiVersion"] != "ray.io/v1"]
    assert {d["kind"] for _, d in docs} >= {"NetworkPolicy", "CronJob", "Role", "PersistentVolumeClaim"}
    for path, doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {doc['kind']} {doc['metadata'].get('name')}: {exc.message}")


def _ray_cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    (rc,) = _of_kind("RayCluster")
    (job,) = _of_kind("RayJob")
    return [("RayCluster", rc["spec"]), ("RayJob", job["spec"]["rayClusterSpec"])]


def _ray_pod_templates() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, spec in _ray_cluster_specs():
        out.append((f"{name} head", spec["headGroupSpec"]["template"]))
        out += [(f"{name} {g['groupName']} workers", g["template"]) for g in spec["workerGroupSpecs"]]
    return out


@pytest.mark.faults  # the head's token and loopback (`make faults`)
def test_every_ray_cluster_requires_the_token_from_a_secret():
    for name, spec in _ray_cluster_specs():
        assert spec["authOptions"] == {"mode": "token", "secretName": TOKEN_SECRET}, name
        assert spec["headGroupSpec"]["serviceType"] == "ClusterIP" and not spec["headGroupSpec"].get("enableIngress")
    (rc,) = _of_kind("RayCluster")
    assert rc["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"  # port-forward only
    # the nightly's submitter authenticates with the same Secret
    (job,) = _of_kind("RayJob")
    (submitter,) = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    env = {e["name"]: e for e in submitter["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": TOKEN_SECRET, "key": "auth_token"}}
    # no token is ever committed: no Secret with data, no literal token in any manifest
    assert not [d for _, d in _all_docs() if d.get("kind") == "Secret"]
    for path in YAMLS:
        assert not re.search(r"RAY_AUTH_TOKEN\b.*value:", path.read_text()), path


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # matchExpressions would need an evaluator
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_network_policies_admit_only_own_pods_and_the_submitter():
    policies = _of_kind("NetworkPolicy")
    (kust,) = _of_kind("Kustomization")
    assert "network-policy.yaml" in kust["resources"]
    (job,) = _of_kind("RayJob")
    submitter = job["spec"]["submitterPodTemplate"]["metadata"]["labels"]
    operator = {"app.kubernetes.io/name": "kuberay-operator"}
    stranger = {"app.kubernetes.io/name": "something-else"}
    for name, template in _ray_pod_templates():
        labels = template["metadata"]["labels"]
        (policy,) = [p for p in policies if _labels_match(p["spec"]["podSelector"], labels)]  # exactly one
        assert "Ingress" in policy["spec"]["policyTypes"], name
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), f"{name}: an ingress rule without `from` admits everyone"
            ports = {p["port"] for p in rule.get("ports", [])}
            for peer in rule["from"]:
                assert "ipBlock" not in peer and "podSelector" in peer, f"{name}: {peer}"
                if "namespaceSelector" in peer:  # other namespaces: the operator only, on the job API only
                    assert _labels_match(peer["podSelector"], operator) and ports == {8265}, f"{name}: {peer}"
                elif not _labels_match(peer["podSelector"], labels):  # not its own cluster: the submitter
                    assert _labels_match(peer["podSelector"], submitter) and ports == {8265}, f"{name}: {peer}"
                assert not _labels_match(peer["podSelector"], stranger), f"{name}: {peer} admits any pod"
        other = "adhoc" if labels["evalfarm.io/ray-cluster"] == "nightly" else "nightly"
        assert not any(
            _labels_match(peer["podSelector"], {**labels, "evalfarm.io/ray-cluster": other})
            for rule in policy["spec"]["ingress"]
            for peer in rule["from"]
            if "namespaceSelector" not in peer
        ), f"{name}: the other cluster's pods are admitted"
    nightly = next(p for p in policies if p["metadata"]["name"] == "evalfarm-ray-nightly")
    assert any(_labels_match(peer["podSelector"], submitter) for r in nightly["spec"]["ingress"] for peer in r["from"])


# Pod Security Standards, "restricted" (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
# the baseline controls plus the restricted ones, for the fields these manifests can set.
_RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip


def restricted_violations(pod: dict[str, Any], extra_containers: list[dict[str, Any]] = ()) -> list[str]:
    """What keeps ``pod`` (a PodSpec) from passing the "restricted" profile; empty when it passes."""
    bad = []
    psc = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            bad.append(key)
    for vol in pod.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            bad.append(f"volume {vol['name']}: {kinds}")
    if psc.get("runAsUser") == 0:
        bad.append("pod runAsUser 0")
    containers = pod.get("initContainers", []) + pod["containers"] + list(extra_containers)
    for c in containers:
        bad += _container_violations(c, psc)
    return bad


def _container_violations(c: dict[str, Any], psc: dict[str, Any]) -> list[str]:
    """The "restricted" controls of one container (``psc``: its pod's securityContext, which it inherits)."""
    bad = []
    sc = c.get("securityContext", {})
    name = c.get("name", "?")
    if sc.get("privileged"):
        bad.append(f"{name}: privileged")
    if sc.get("allowPrivilegeEscalation") is not False:
        bad.append(f"{name}: allowPrivilegeEscalation must be false")
    caps = sc.get("capabilities", {})
    if "ALL" not in caps.get("drop", []):
        bad.append(f"{name}: capabilities must drop ALL")
    if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
        bad.append(f"{name}: adds capabilities {caps['add']}")
    if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
        bad.append(f"{name}: runAsNonRoot must be true")
    if sc.get("runAsUser", psc.get("runAsUser")) == 0:
        bad.append(f"{name}: runAsUser 0")
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        bad.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
    if sc.get("procMount", "Default") != "Default":
        bad.append(f"{name}: procMount")
    if any(p.get("hostPort") for p in c.get("ports", [])):
        bad.append(f"{name}: hostPort")
    return bad


def _all_pods() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(name, PodSpec, containers KubeRay adds to it) for every pod these manifests make."""
    pods = []
    for name, spec in _ray_cluster_specs():
        autoscaler = {"name": "autoscaler", "securityContext": spec["autoscalerOptions"]["securityContext"]}
        pods.append((f"{name} head", spec["headGroupSpec"]["template"]["spec"], [autoscaler]))
        pods += [(f"{name} {g['groupName']} workers", g["template"]["spec"], []) for g in spec["workerGroupSpecs"]]
    (job,) = _of_kind("RayJob")
    pods.append(("RayJob submitter", job["spec"]["submitterPodTemplate"]["spec"], []))
    (cron,) = _of_kind("CronJob")
    pods.append(("CronJob", _get(cron, "spec.jobTemplate.spec.template.spec"), []))
    return pods


def test_every_pod_meets_the_restricted_pod_security_profile():
    pods = _all_pods()
    assert len(pods) == 6
    for name, pod, extra in pods:
        assert not restricted_violations(pod, extra), f"{name}: {restricted_violations(pod, extra)}"
        for c in pod["containers"] + extra:  # read-only root: Ray writes to its emptyDirs only
            assert c["securityContext"].get("readOnlyRootFilesystem") is True, f"{name}: {c['name']}"
        mounts = {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        assert "/tmp" in mounts, f"{name}: nowhere to write with a read-only root"
        if name.startswith("Ray") and "submitter" not in name:
            assert "/dev/shm" in mounts, f"{name}: Ray's object store needs /dev/shm"


def test_the_restricted_check_refuses_what_the_profile_refuses():
    import copy

    (name, pod, extra) = _all_pods()[0]

    def unset(p: dict[str, Any], key: str) -> None:  # at pod and container level
        p["securityContext"].pop(key)
        p["containers"][0]["securityContext"].pop(key)

    for mutate in (
        lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda p: p["containers"][0]["securityContext"].update(capabilities={"drop": ["NET_RAW"]}),
        lambda p: p["containers"][0]["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
        lambda p: (
            p["securityContext"].pop("runAsNonRoot") and p["containers"][0]["securityContext"].pop("runAsNonRoot")
        ),
        lambda p: p["securityContext"].update(runAsUser=0),
        lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        lambda p: p.update(hostNetwork=True),
        lambda p: (
            p["securityContext"].pop("seccompProfile") and p["containers"][0]["securityContext"].pop("seccompProfile")
        ),
    ):
        bad = copy.deepcopy(pod)
        mutate(bad)
        assert restricted_violations(bad, extra), f"{name}: a violation went unnoticed"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_executable_and_parse(script):
    assert os.access(script, os.X_OK), f"{script} is not executable (chmod +x)"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout


@pytest.mark.faults  # the head's token and loopback (`make faults`)
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


# -- stop.sh stops the head start-head.sh started, and no other Ray (issue 23, item 4) ------------------------------


def _fake_ray(tmp: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `ray` only notes that it ran (in the returned file): what the scripts must not call."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    called = tmp / "ray-was-called"
    (bin_dir / "ray").write_text(f'#!/usr/bin/env bash\necho "$*" >>{shlex.quote(str(called))}\n')
    (bin_dir / "ray").chmod(0o755)
    env = head_env(EVALFARM_RAY_DIR=str(tmp / "state"))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env, called


@pytest.mark.faults  # issue 23.4 (`make faults`)
def test_stop_refuses_without_a_record_and_never_runs_ray_stop(tmp_path):
    env, called = _fake_ray(tmp_path)
    proc = subprocess.run(["bash", str(CLUSTER / "local" / "stop.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "no record" in proc.stderr and "nothing stopped" in proc.stderr
    assert not called.exists(), called.read_text()  # `ray stop` would stop every Ray of the user


@pytest.mark.faults  # issue 23.4 (`make faults`)
def test_stop_refuses_a_record_of_another_user(tmp_path):
    env, called = _fake_ray(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "head").write_text(f"session_id=1\nuid={os.getuid() + 1}\ntemp_dir=/tmp/evalfarm-head-x\npids=1:1\n")
    proc = subprocess.run(["bash", str(CLUSTER / "local" / "stop.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "nothing stopped" in proc.stderr, proc.stderr
    assert (state / "head").exists() and not called.exists()


@pytest.mark.faults  # issue 23.4 (`make faults`)
@pytest.mark.parametrize("arg", ["--port=7000", "--ray-client-server-port=7001", "--temp-dir=/tmp/x"])
def test_start_head_takes_ports_only_through_its_variables(tmp_path, arg):
    """A port or temp dir passed to `ray start` behind the script's back would make its record (what stop.sh stops,
    which ports it opened) wrong: refused before anything starts."""
    env, called = _fake_ray(tmp_path)
    proc = subprocess.run(
        ["bash", str(CLUSTER / "local" / "start-head.sh"), arg], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "EVALFARM_" in proc.stderr, proc.stderr
    assert not called.exists() and not (tmp_path / "state").exists()


@pytest.mark.faults  # issue 23.4 (`make faults`)
def test_start_head_refuses_while_a_head_is_recorded(tmp_path):
    env, called = _fake_ray(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "head").write_text("session_id=1\n")
    proc = subprocess.run(["bash", str(CLUSTER / "local" / "start-head.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "stop.sh" in proc.stderr, proc.stderr
    assert not called.exists() and not (tmp_path / "state" / "auth_token").exists()


@pytest.mark.faults  # issue 23.4 (`make faults`)
def test_start_head_refuses_when_it_cannot_pick_its_ports(tmp_path):
    """A worker range over every port leaves bind(0) nothing start-head.sh may take: it says so and starts no Ray
    rather than handing Ray a port twice."""
    env, called = _fake_ray(tmp_path)
    env.update(EVALFARM_MIN_WORKER_PORT="1", EVALFARM_MAX_WORKER_PORT="65535")
    proc = subprocess.run(["bash", str(CLUSTER / "local" / "start-head.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "could not pick 9 free ports on 127.0.0.1" in proc.stderr, proc.stderr
    assert "no free ports" in proc.stderr and not called.exists()


@pytest.mark.faults  # issue 23.4 (`make faults`)
def test_start_head_sets_every_port_ray_start_has():
    """Every port option of this venv's `ray start` is set by start-head.sh (but --worker-port-list, the alternative
    to the min/max range), so no server of the head falls back to a fixed default another head may hold."""
    help_text = subprocess.run(
        [str(BIN / "ray"), "start", "--help"], env=head_env(), capture_output=True, text=True, check=True
    ).stdout
    options = set(re.findall(r"--[a-z-]*port[a-z-]*", help_text)) - {"--worker-port-list"}
    assert len(options) >= 11, options
    text = (CLUSTER / "local" / "start-head.sh").read_text()
    assert {o for o in options if f'  {o}="$' not in text} == set()
    for variable in ("AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT"):  # read by Ray from the environment
        assert f'export {variable}="$' in text


def _plain_ray_head(tmp: Path) -> tuple[subprocess.Popen, dict[str, int], str]:
    """Someone else's Ray on this machine: a plain `ray start --head --block` on 127.0.0.1, its own temp dir and
    ports, in its own session (no evalfarm record anywhere)."""
    ports = pick_ports()
    temp_dir = tempfile.mkdtemp(prefix="efother-")
    env = head_env(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        AUTOSCALER_METRIC_PORT=str(ports["autoscaler_metrics"]),
        DASHBOARD_METRIC_PORT=str(ports["dashboard_metrics"]),
        HOME=str(tmp),
    )
    cmd = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={ports['gcs']}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={ports['dashboard']}",
        "--include-dashboard=true",
        f"--ray-client-server-port={ports['client']}",
        f"--node-manager-port={ports['node_manager']}",
        f"--object-manager-port={ports['object_manager']}",
        f"--dashboard-agent-listen-port={ports['agent_http']}",
        f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
        f"--runtime-env-agent-port={ports['runtime_env']}",
        f"--metrics-export-port={ports['metrics']}",
        f"--temp-dir={temp_dir}",
        "--num-cpus=1",
        "--object-store-memory=100000000",
        "--disable-usage-stats",
    ]
    with open(tmp / "other.log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, ports, temp_dir


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(1)


def _record(state: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (state / "head").read_text().splitlines() if "=" in line)


def _kill_session(sid: int) -> None:
    for pid in session_pids(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.faults  # issue 23.4 (`make faults`)
@pytest.mark.slow
def test_stop_stops_our_head_and_not_another_ray(tmp_path):
    """start-head.sh as a user runs it (no --block: the head outlives the script, in a session of its own), beside
    another Ray head on this machine; every port our head listens on is one the script chose (GCS and job API
    pinned, the rest picked by it), and stop.sh stops exactly our head: the other one still answers."""
    other, other_ports, other_temp_dir = _plain_ray_head(tmp_path)
    state = tmp_path / "state"
    gcs, dashboard = free_ports(2)
    env = head_env(
        EVALFARM_RAY_DIR=str(state),
        EVALFARM_GCS_PORT=str(gcs),
        EVALFARM_DASHBOARD_PORT=str(dashboard),
        EVALFARM_NUM_CPUS="1",
        EVALFARM_NUM_GPUS="0",
    )
    ours: list[int] = []
    try:
        start = subprocess.run(
            ["bash", str(CLUSTER / "local" / "start-head.sh"), "--object-store-memory=100000000"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert start.returncode == 0, (start.stdout + start.stderr)[-4000:]
        record = _record(state)
        assert record["gcs_address"] == f"127.0.0.1:{gcs}" and record["session_dir"].startswith(record["temp_dir"])
        # Ray's temp dir (which Ray makes 0777) inside a folder only this user can enter (issue 40.2)
        private = Path(record["private_dir"])
        assert Path(record["temp_dir"]).parent == private and private.stat().st_mode & 0o777 == 0o700
        token = (state / "auth_token").read_text().strip()
        _wait_for(lambda: http(f"http://127.0.0.1:{dashboard}/api/jobs/", token=token, timeout=5)[0] == 200, "job API")
        other_url = f"http://127.0.0.1:{other_ports['dashboard']}/api/version"
        _wait_for(lambda: http(other_url, timeout=5)[0] == 200, "the other head")

        sid = int(record["session_id"])
        ours = session_pids(sid)
        recorded = {int(p.split(":")[0]) for p in record["pids"].split()}
        assert ours and recorded and {p for p in recorded if _alive(p)} <= set(ours)
        chosen = {int(p) for p in record["ports"].split()}
        assert len(chosen) == 11 and {gcs, dashboard} <= chosen
        low, high = (int(p) for p in record["worker_ports"].split("-"))
        sockets = listening_sockets(ours)
        assert sockets and all(addr in ("127.0.0.1", "::ffff:127.0.0.1") for _, _, addr, _ in sockets), sockets
        assert [s for s in sockets if s[3] not in chosen and not low <= s[3] <= high] == [], sockets
        assert not set(ours) & set(session_pids(other.pid))
        other_before = set(session_pids(other.pid))

        stop = subprocess.run(
            ["bash", str(CLUSTER / "local" / "stop.sh"), "--grace", "5"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stop.returncode == 0, stop.stderr
        assert session_pids(sid) == [] and [p for p in ours if _alive(p)] == []
        assert http(f"http://127.0.0.1:{dashboard}/api/version", timeout=5)[0] != 200
        assert not (state / "head").exists() and not (state / "auth_token").exists()
        assert not Path(record["temp_dir"]).exists() and not private.exists()
        # the other head: every process still there, and it answers
        assert other.poll() is None and other_before <= set(session_pids(other.pid))
        assert http(other_url, timeout=5)[0] == 200
    finally:
        if (state / "head").exists():
            _kill_session(int(_record(state)["session_id"]))
        _kill_session(other.pid)
        other.wait(timeout=60)
        shutil.rmtree(other_temp_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.docs
def test_readme_explains_storage_and_loopback():
    text = " ".join((CLUSTER / "README.md").read_text().split())
    for needle in ("127.0.0.1", "arbitrary code", "shared", "evalfarm submit", "ray job submit", "RAY_AUTH_MODE"):
        assert needle in text, needle


# -- the shipped entrypoints, as written, on a real head ------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[Head]:
    """start-head.sh on free ports (tests/support/ray_heads.py); start_head checks that it listens on loopback only."""
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

    rows = Warehouse(warehouse).query("SELECT DISTINCT model, task FROM metrics").to_pylist()
    return {(r["model"], r["task"]) for r in rows}


@pytest.mark.slow
def test_nightly_rayjob_entrypoint_runs_on_a_real_head_from_the_installed_wheel(wheel, tmp_path):
    """The RayJob's entrypoint and runtimeEnvYAML, submitted the way KubeRay's submitter does (`ray job submit
    --runtime-env-json … -- ENTRYPOINT`), to a head started by start-head.sh from a venv where evalfarm is the
    wheel, installed non-editably as cluster/Dockerfile installs it (tests/support/wheel_venv.py): the job's `evalfarm
    run`, its default (Ray) executor's workers and the shipped zoo-starter catalog all come from the wheel. It used to
    fail at start: the job's env_vars and evalfarm's own ray.init runtime_env set the same keys ("Failed to merge
    the Job's runtime env")."""
    from tests.support import wheel_venv

    (job,) = _of_kind("RayJob")
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["env_vars"], "the nightly's env_vars are what broke it: keep them under test"
    venv = wheel_venv.install(wheel, tmp_path / "venv")
    (tmp_path / "head").mkdir()
    head = start_head(tmp_path / "head", base_env=venv.env)
    try:
        entrypoint = _on_this_machine(job["spec"]["entrypoint"], tmp_path, head)
        runtime_env = json.loads(_on_this_machine(json.dumps(runtime_env), tmp_path, head))
        # one starter model instead of the whole zoo: what failed was the start, and a night's length is not tested
        entrypoint += " --models glove-6b-50d --tasks evalrank-word"
        proc = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", head.dashboard]
            + ["--runtime-env-json", json.dumps(runtime_env), "--", *shlex.split(entrypoint)],
            env=head.client_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        stop_head(head)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Failed to merge" not in out, out[-4000:]
    assert "1 done, 0 skipped, 0 failed" in out and "(ray" in out, out[-4000:]
    assert _metrics(tmp_path / "warehouse") == {("glove-6b-50d", "evalrank-word")}
    from evalfarm.warehouse import Warehouse

    (run,) = Warehouse(tmp_path / "warehouse").query("SELECT catalog, provenance FROM runs").to_pylist()
    prov = json.loads(run["provenance"])
    assert Path(run["catalog"]).is_relative_to(venv.site / "evalfarm" / "_catalogs")  # the wheel's catalog
    assert prov["evalfarm"]["commit"] is None and prov["evalfarm"]["installed_from"].endswith(wheel.name)
    assert prov["ray_job"]["submission_id"] and prov["workers"]


RAW_MODEL = """\
id: glove-6b-50d-abtt5  # the documents' id; the EvalRank toolkit's toy GloVe (5k words) stands in: cheap and real
level: word
kind: word-vectors
format: glove-text
source: {type: data, ref: evalrank/reference/toy_emb.txt}
"""


def _readme_block(containing: str, readme: Path = CLUSTER / "README.md") -> str:
    text = readme.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if containing in b]
    return block


@pytest.mark.slow
@pytest.mark.docs
@pytest.mark.parametrize(
    "readme", [CLUSTER / "README.md", REPO / "docs" / "operations.md"], ids=["cluster-readme", "docs-operations"]
)
def test_readme_raw_ray_job_submit_runs_as_written(ray_head, tmp_path, readme):
    """The raw `ray job submit` block of cluster/README.md and of docs/operations.md (the job folder made by `evalfarm
    submit --dry-run`, then the job), run by bash in a shell that sourced the head's settings."""
    block = _readme_block("ray job submit --address http://HEAD:8265", readme)
    assert "mkdir job" in block  # self-contained: the block makes the folder it uploads
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
    # EvalRank pool + 13 wordsim sets + the AG2016 and geometry diagnostics
    assert re.search(r"\b16 done, 0 skipped, 0 failed", out), out[-4000:]
    assert ("glove-6b-50d-abtt5", "evalrank-word") in _metrics(tmp_path / "warehouse")


@pytest.mark.faults  # the head's token and loopback (`make faults`)
@pytest.mark.slow
def test_evalfarm_submit_needs_the_heads_token(ray_head, tmp_path):
    """cluster/README.md's workstation flow on a token head: with the settings start-head.sh writes, `evalfarm submit`
    runs the model; without them the job API turns it away and nothing runs."""
    spec = tmp_path / "my-model.yaml"
    spec.write_text(RAW_MODEL)
    args = [str(BIN / "evalfarm"), "submit", str(spec), "--address", ray_head.dashboard]
    refused = subprocess.run(
        [*args, "--warehouse", str(tmp_path / "refused")],
        env=head_env(HOME=str(tmp_path)),  # no token anywhere (not even ~/.ray/auth_token)
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = refused.stdout + refused.stderr  # the refusal names the token, not an unreachable cluster (issue 23.7)
    assert refused.returncode != 0 and "refused this token (missing or wrong)" in said, said
    assert not (tmp_path / "refused").exists()
    proc = subprocess.run(
        [*args, "--warehouse", str(tmp_path / "warehouse")],
        env=ray_head.client_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    got = _metrics(tmp_path / "warehouse")  # every word task of the base catalog: the EvalRank pool, 13 wordsim sets
    # the pool, 13 wordsim sets, AG2016 and geometry
    assert ("glove-6b-50d-abtt5", "evalrank-word") in got and len(got) == 16
