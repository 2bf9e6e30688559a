"""A Ray cluster of two nodes on one machine, the warehouse on an object store (issue 25).

The head is ``cluster/local/start-head.sh`` (token authentication, every server on 127.0.0.1, 1 CPU); the second
node is ``ray start --address <head>`` with its own temp folder, ports and 1 CPU, joined with the head's token.
The run asks for two workers: one fits the head, the other waits until the second node joins mid-run and then
takes work. That node is then killed (``SIGKILL`` of its whole process session) while its worker runs a unit; the
run retries the unit on the head and completes. The warehouse and the task data are ``s3://…`` on the local S3
server (tests/support/s3_server.py), each node with a cache folder of its own: no worker reads or writes the
driver's disk (the word-vector file of the models is still a local path, as a model in an image would be).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks import compare_warehouses, faults
from evalfarm.warehouse import Warehouse
from tests.support import ray_heads
from tests.support.s3_server import INSTALL_HINT, moto_python, s3_server

REPO = Path(__file__).resolve().parents[1]
# a metrics row's identity is the view's whole key: (model, task, variant, metric) alone holds up to three rows of
# an EvalRank unit (its `ties` policies: optimistic, realistic, pessimistic), one of which a dict keeps at random
KEY = (*compare_warehouses.KEY, "fingerprint")
COLUMNS = ", ".join((*KEY, "value"))
HEAD_IP, NODE_IP = "127.0.0.2", "127.0.0.3"  # loopback addresses (127.0.0.0/8), in the namespace


@dataclass
class Node:
    """A Ray node joined to a head: ``ray start --block`` in its own process session."""

    proc: subprocess.Popen[bytes]
    temp_dir: Path
    log: Path

    def pids(self) -> list[int]:
        return ray_heads.session_pids(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL of every process of the node (raylet, object store, its workers): a machine that is gone."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextlib.contextmanager
def joined_node(gcs: str, tmp: Path, env: dict[str, str], *, num_cpus: int = 1) -> Iterator[Node]:
    """A second node on this machine: loopback only, the head's token, its own temp folder and free ports."""
    names = ("node_manager", "object_manager", "metrics", "agent_http", "agent_grpc", "runtime_env")
    ports = dict(zip(names, ray_heads.free_ports(len(names)), strict=True))
    # Ray's temp dir inside a private (0700) folder: Ray makes the temp dir itself 0777 (issue 40.2)
    private = Path(os.path.realpath(__import__("tempfile").mkdtemp(prefix="efnode-")))
    temp_dir = private / "ray"
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "node.log"
    cmd = [
        str(ray_heads.BIN / "ray"), "start", f"--address={gcs}", f"--node-ip-address={NODE_IP}",
        f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}", "--object-store-memory=100000000",
        f"--node-manager-port={ports['node_manager']}", f"--object-manager-port={ports['object_manager']}",
        f"--metrics-export-port={ports['metrics']}", f"--dashboard-agent-listen-port={ports['agent_http']}",
        f"--dashboard-agent-grpc-port={ports['agent_grpc']}", f"--runtime-env-agent-port={ports['runtime_env']}",
        "--min-worker-port=0", "--max-worker-port=0", "--disable-usage-stats", "--block",
    ]  # fmt: skip
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    node = Node(proc, temp_dir, log)
    try:
        yield node
    finally:
        node.kill()
        shutil.rmtree(private, ignore_errors=True)


def _busy_worker(node: Node, seen: list[str]) -> int | None:
    """The pid of a worker actor of ``node`` running a unit's stage, once it has finished one before (so the node
    has results in the warehouse when it is killed); ``seen``: the stages it was seen running so far."""
    for pid in node.pids():
        title = ray_heads.cmdline(pid).split(" ")[0]
        if title.startswith("ray::EvalWorker.") and title.rsplit(".", 1)[1] not in ("__init__", "begin"):
            if not seen or seen[-1] != f"{pid}:{title}":
                seen.append(f"{pid}:{title}")
            return pid if len(seen) >= 2 else None
    if seen and seen[-1] != "idle":
        seen.append("idle")
    return None


def _catalog(d: Path, data_dir: Path) -> Path:
    """60 units: 20 word models on the word EvalRank pool (a second or two a unit) and two small wordsim sets.

    ABTT removing 6 or more of the 50 toy dimensions is left out: the more it removes, the more ties (see the
    value check below)."""
    toy = data_dir / "evalrank" / "reference" / "toy_emb.txt"
    g = f"{{type: path, ref: {toy}}}"
    (d / "cat.yaml").write_text(
        f"include: [{REPO / 'catalog' / 'tasks.yaml'}]\n"
        "tasks: [evalrank-word, wordsim-mc-30, wordsim-rg-65]\nmodels:\n"
        f"  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {g}}}\n"
        "  - {id: toy-abtt1, level: word, base: toy, postprocess: {method: abtt, d: 1}}\n"
        + "".join(
            f"  - {{id: toy-{m}{d}, level: word, base: toy, postprocess: {{method: {m}, d: {d}}}}}\n"
            for m, ds in (("pcr", range(2, 16)), ("abtt", range(2, 6)))  # abtt d >= 6 of a 50-d toy: see below
            for d in ds
        )
    )
    return d / "cat.yaml"


def _rows(uri: str, sql: str) -> list[dict]:
    return Warehouse(uri).query(sql).to_pylist()


def _upload_task_data(cat: Path, data_dir: Path) -> str:
    """Every task file of the catalog, from the local data folder to ``s3://cluster/data``; returns that URI."""
    import pyarrow.fs as pafs

    from evalfarm.cache import with_endpoint
    from evalfarm.catalog.registry import load_catalog

    catalog = load_catalog(cat)
    fs = pafs.FileSystem.from_uri(with_endpoint("s3://cluster/data"))[0]
    for task in (catalog.tasks[t] for t in catalog.default_tasks):
        for rel in task.files.values():
            with fs.open_output_stream(f"cluster/data/{rel}") as out:
                out.write((data_dir / rel).read_bytes())
    return "s3://cluster/data"


def scenario(tmp_path: Path, data_dir: Path) -> dict[str, Any]:
    """The whole cluster's life; runs inside a network namespace of its own (see the test), prints its findings."""
    start = time.monotonic()
    seconds: dict[str, float] = {}  # when each phase ended, from the start: printed by the test
    cat = _catalog(tmp_path, data_dir)
    with s3_server() as s3, contextlib.ExitStack() as stack:
        s3.make_bucket("cluster")
        os.environ.update(s3.env)  # this process reads the results back (a process of its own: nothing to restore)
        uri = "s3://cluster/wh"
        # every node's processes (raylet, workers) inherit the store's endpoint and credentials, as a node's
        # environment on a real cluster would hold them; 127.0.0.2 (not .1): Ray's single-node mode, which
        # start-head.sh picks for 127.0.0.1, refuses a second node
        data = _upload_task_data(cat, data_dir)  # the task data on the bucket too: no shared disk for it
        node_env = {**s3.env, "EVALFARM_DATA": data, "PYTHONPATH": str(REPO), "EVALFARM_NODE_IP": HEAD_IP}
        os.environ.pop("EVALFARM_CACHE", None)  # each node's own (a driver's would be forwarded to every worker)
        head_env = {**node_env, "EVALFARM_CACHE": str(tmp_path / "cache-head")}
        head = ray_heads.start_head(tmp_path / "head", num_cpus=1, env=head_env, object_store_memory=150_000_000,
                                    own_network=True)  # fmt: skip
        stack.callback(ray_heads.stop_head, head)
        gcs = f"{HEAD_IP}:{head.ports['gcs']}"
        # EVALFARM_AUTOSCALE=1: nodes join by hand here (no autoscaler), so the run asks for the worker that does
        # not fit yet as a pending actor, which Ray places when a node with a free CPU joins
        client = head.client_env(**node_env, EVALFARM_AUTOSCALE="1", HOME=str(tmp_path / "driver-home"))
        cli = faults.Cli(["--catalog", str(cat), "--warehouse", uri, "--address", gcs, "--workers", "2",
                          "--max-attempts", "3"], tmp_path / "run.log", env=client).start()  # fmt: skip
        assert cli.proc is not None
        stack.callback(faults.kill_session, cli.proc.pid)
        faults._wait_for(lambda: "\ndone " in "\n" + cli.output, "a first unit done on the head", 240, cli)
        seconds["first unit done"] = time.monotonic() - start
        # the node's shell: the head's client settings (its token), not a client's address
        node_shell = {k: v for k, v in client.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
        node_shell["EVALFARM_CACHE"] = str(tmp_path / "cache-node")  # its own disk
        node = stack.enter_context(joined_node(gcs, tmp_path / "node", node_shell))  # joins mid-run
        seen: list[str] = []
        victim = faults._wait_for(lambda: _busy_worker(node, seen), "units on the joined node", 240, cli)
        seconds["node busy"] = time.monotonic() - start
        node.kill()  # mid-unit: the node and every process of it, gone at once
        seconds["killed"] = time.monotonic() - start
        # the same catalog in-process (local executor, one node) is the reference. It runs while the head finishes
        # the run alone (the head's one CPU busy, this machine's other one idle), not after it: run after it, it was
        # a third of the test's time. Its numbers cannot depend on when it runs (its own warehouse, its own cache),
        # and it starts once the node is gone, so it cannot change how the node joined or what it was running
        ref_err = stack.enter_context(open(tmp_path / "reference.err", "w+"))
        proc = subprocess.Popen(
            [str(ray_heads.BIN / "python"), "-m", "evalfarm.cli", "run", "--catalog", str(cat), "--warehouse",
             "s3://cluster/reference", "--executor", "local"],
            env={**os.environ, **node_env, "EVALFARM_CACHE": str(tmp_path / "cache-reference")},
            stdout=subprocess.DEVNULL, stderr=ref_err, text=True, cwd=REPO, start_new_session=True,
        )  # fmt: skip
        stack.callback(faults.kill_session, proc.pid)
        rc = cli.wait(timeout=400)
        seconds["run done"] = time.monotonic() - start
        units = _rows(uri, "SELECT model, task, stage, status, node, attempts FROM units WHERE status = 'done'")
        metrics = _rows(uri, f"SELECT {COLUMNS} FROM metrics")
        proc.wait(timeout=300)
        seconds["reference done"] = time.monotonic() - start
        ref_err.seek(0)
        reference = _rows("s3://cluster/reference", f"SELECT {COLUMNS} FROM metrics")
        # every number of the two runs, bit for bit, and every per-pair EvalRank rank
        same = compare_warehouses.compare_metrics(uri, "s3://cluster/reference")
        same["ranks"] = compare_warehouses.compare_ranks(uri, "s3://cluster/reference")
        seconds["compared"] = time.monotonic() - start
        copied = sorted(p.name for p in (tmp_path / "cache-node" / "data").rglob("*") if p.is_file())
        return {"rc": rc, "out": cli.output[-6000:], "victim_alive": victim in node.pids(), "units": units,
                "node_copied": copied,
                "metrics": metrics, "reference": reference, "same": same, "reference_rc": proc.returncode,
                "reference_err": ref_err.read()[-2000:],
                "seconds": {k: round(v, 1) for k, v in seconds.items()}}  # fmt: skip


@pytest.mark.slow
def test_two_nodes_share_the_units_and_the_run_survives_losing_one(tmp_path, data_dir):
    if moto_python() is None:
        pytest.skip(f"no local S3 server: needs {INSTALL_HINT}")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2) for a network namespace of its own")
    # A multi-node Ray binds 0.0.0.0 (only its single-node mode binds loopback, and that mode refuses a second
    # node): the whole cluster, S3 server and driver run in a network namespace whose only interface is loopback
    script = f"ip link set lo up && exec {sys.executable} -m tests.test_multinode {tmp_path} {data_dir}"
    proc = subprocess.run(["unshare", "--net", "--map-root-user", "sh", "-c", script],
                          capture_output=True, text=True, timeout=900, cwd=REPO)  # fmt: skip
    if proc.returncode != 0 and "unshare" in proc.stderr and "Operation not permitted" in proc.stderr:
        pytest.skip(f"no network namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    print("seconds from the start:", got["seconds"])  # shown with -s
    out, units, metrics, reference = got["out"], got["units"], got["metrics"], got["reference"]
    assert got["rc"] == 0, out[-4000:]
    assert got["reference_rc"] == 0, got["reference_err"]
    assert not got["victim_alive"]
    assert got["node_copied"], "the joined node read no task file from the bucket"
    nodes = {u["node"] for u in units}
    assert len(nodes) == 2, units  # the head's and the node that joined mid-run: both took units
    assert any(u["attempts"] > 1 for u in units), units  # the unit the lost node was running, retried on the head
    key = lambda r: tuple(r[k] for k in KEY)  # noqa: E731
    assert len(set(map(key, reference))) == len(reference)  # the key is the whole key: one row each
    assert Counter(map(key, metrics)) == Counter(map(key, reference))  # no row lost, none duplicated
    # values: every one, bit for bit (EvalRank's too: a comparison keyed without `ties` once matched an optimistic
    # number with a pessimistic one and read 0.42 vs 0.064 as a difference between the executors)
    same = got["same"]
    assert not same["value_differs"] and not same["identity_differs"], same
    assert same["ranks"]["identical"] and same["ranks"]["pairs_after"] > 0, same["ranks"]
    assert len({(r["model"], r["task"]) for r in metrics}) == 60


if __name__ == "__main__":  # the scenario, inside the namespace the test made
    print(json.dumps(scenario(Path(sys.argv[1]), Path(sys.argv[2])), default=str))
