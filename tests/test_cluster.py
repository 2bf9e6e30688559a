"""cluster/: every YAML parses and has the fields its kind needs; the local scripts are sound and bind loopback.

Nothing here can be applied (no cloud, no Kubernetes): these checks catch typos, missing fields and unsafe
defaults. The autoscaler config is validated against Ray's own schema (ray/autoscaler/ray-schema.json).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

CLUSTER = Path(__file__).resolve().parents[1] / "cluster"
YAMLS = sorted(CLUSTER.rglob("*.yaml"))
SCRIPTS = sorted((CLUSTER / "local").glob("*.sh"))


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
    assert yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]["EVALFARM_DATA"]


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


def test_readme_explains_storage_and_loopback():
    text = " ".join((CLUSTER / "README.md").read_text().split())
    for needle in ("127.0.0.1", "arbitrary code", "shared", "evalfarm submit", "ray job submit", "RAY_AUTH_MODE"):
        assert needle in text, needle
