"""Ray heads for tests and benchmarks, closed the way evalfarm closes its own (issue 11, item 6).

Every Ray cluster a test or a benchmark starts is one of two:

- ``start_head``: ``cluster/local/start-head.sh`` itself (token authentication with a fresh 0600 token, Ray's
  single-node mode: every server on 127.0.0.1), on free ports, in its own process session; ``stop_head`` stops that
  session only (never ``ray stop``, which stops every Ray of the user: other people run Ray on this machine too).
- ``local_ray``: ``evalfarm.scheduler.ray_executor.connect(None)``, the local Ray ``evalfarm run`` starts in-process
  (the same two locks).

Both check, once the head is up, that every listening socket of its processes is on loopback
(``assert_loopback_only``). Used by tests/test_cluster.py, test_security.py, test_submit.py, test_scheduler.py,
test_faults.py and test_autoscale.py (through benchmarks/faults.py) and by benchmarks/bench_scheduler.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
BIN = Path(sys.executable).parent

RAY_CLIENT_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_API_SERVER_ADDRESS")
"""What tells a Ray client where and how to connect: never inherited from the shell running the tests."""
_AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


def _script_default(name: str) -> int:
    """The default start-head.sh gives ``EVALFARM_<name>`` (its ``NAME="${EVALFARM_NAME:-default}"`` line)."""
    text = (CLUSTER / "local" / "start-head.sh").read_text()
    found = re.search(rf'^{name}="\$\{{EVALFARM_{name}:-(\d+)\}}"$', text, re.M)
    if found is None:
        raise RuntimeError(f"cluster/local/start-head.sh gives EVALFARM_{name} no default: the harness needs one")
    return int(found.group(1))


RAY_WORKER_PORTS = (_script_default("MIN_WORKER_PORT"), _script_default("MAX_WORKER_PORT"))
"""start-head.sh's default range for Ray's workers: read from the script, its one home."""


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for bind(0) and outgoing connections (/proc/sys/net/ipv4/ip_local_port_range)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return low, high


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on loopback now, drawn where nothing else on this machine draws its ports: above
    Ray's worker range and below the kernel's ephemeral range, in the slice of it that is this pytest-xdist worker's
    own. A port from bind(0), what this did before, is one every bind(0) of a Ray running beside the test (the other
    xdist worker's) draws from too. One taken between the pick and the head's start leaves Ray's dashboard agent up
    without its HTTP server (it retries six times, logs, and carries on: the job API submits through that server),
    and :func:`start_head`, which waits for every server, times out: reproduced by holding the agent's port, that is
    what CI's one failure of test_security's head showed (every process alive, 120 s), and :func:`start_head` now
    says which port was missing and who held it. Falls back to bind(0) where the kernel's range leaves no room below
    it."""
    low, high = RAY_WORKER_PORTS[1] + 1, ephemeral_ports()[0] - 1
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    me = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    size = (high - low + 1) // workers
    start, candidates = low + me * size, []
    if size >= 4 * n:
        offset = random.randrange(size)  # from a random place in the slice: the ports of the last head may linger
        candidates = [start + (offset + k) % size for k in range(size)]
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        for port in candidates:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # in use (or in TIME_WAIT: no SO_REUSEADDR here, so that counts as taken too)
                s.close()
                continue
            socks.append(s)  # held until all are picked: no port twice
            ports.append(port)
            if len(ports) == n:
                return ports
        while len(ports) < n:  # no room outside the ephemeral range: the kernel's choice
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
        return ports
    finally:
        for s in socks:
            s.close()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm) ": state ppid pgrp session …; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _live_pids() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] != "Z":
                yield int(entry.name), fields


def session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (a head started with start_new_session: all its Ray processes)."""
    return [pid for pid, fields in _live_pids() if int(fields[3]) == sid]


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (an in-process ``ray.init``: its GCS, raylet, agents, workers)."""
    children: dict[int, list[int]] = {}
    for p, fields in _live_pids():
        children.setdefault(int(fields[1]), []).append(p)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _decode(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening_sockets(pids: Sequence[int]) -> list[tuple[int, str, str, int]]:
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


def assert_loopback_only(pids: Sequence[int], what: str, *, ports: Sequence[int] = ()) -> list[tuple]:
    """Every listening socket of ``pids`` is on loopback, and ``ports`` (the head's known servers) are among them:
    a head that listens on the host's routable address (Ray's default for --node-ip-address=127.0.0.1 outside its
    single-node mode) fails here, whatever the test goes on to do with it. Returns the sockets."""
    sockets = listening_sockets(pids)
    listing = "\n".join(f"{pid:>7} {name:<16} {addr}:{port}" for pid, name, addr, port in sockets)
    exposed = [s for s in sockets if not is_loopback(s[2])]
    if exposed:
        raise AssertionError(f"{what} listens beyond loopback: {exposed}\n{listing}")
    missing = set(ports) - {port for *_, port in sockets}
    if not sockets or missing:
        raise AssertionError(f"{what}: expected servers not listening (ports {sorted(missing)}):\n{listing}")
    return sockets


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


def reset_ray_auth() -> None:
    """Make this process's Ray read its authentication settings (RAY_AUTH_*) again: Ray caches its config and the
    token per process (what ``connect`` does before its ``ray.init``)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")  # the config first: a draining gRPC thread must not reload a token it no longer needs
    AuthenticationTokenLoader.instance().reset_cache()


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
    def gcs(self) -> str:
        return f"127.0.0.1:{self.ports['gcs']}"

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

    @contextlib.contextmanager
    def in_process(self) -> Iterator[None]:
        """This process as the head's client (Ray's job client, ``list_actors``…): the settings of the head's env
        file in ``os.environ`` while the block runs, then the earlier ones back."""
        env = self.client_env()
        saved = {k: os.environ.get(k) for k in (*_AUTH_VARS, "RAY_API_SERVER_ADDRESS")}
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update({k: env[k] for k in saved if k in env})
        reset_ray_auth()
        try:
            yield
        finally:
            restore_env(saved)


def restore_env(saved: dict[str, str | None]) -> None:
    """Put this process's variables back as ``saved`` had them (None: unset), then Ray's auth settings with them."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    reset_ray_auth()


def head_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this environment) without a Ray client's settings, with this venv's ``ray`` and
    ``evalfarm`` on PATH, or the ones already first on ``base``'s PATH."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in RAY_CLIENT_VARS}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.pop("RAY_JOB_CONFIG_JSON_ENV_VAR", None)
    if base is None:
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # this venv's `ray` and `evalfarm`
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return {**env, **extra}


HEAD_PORTS = ("gcs", "dashboard", "client", "node_manager", "object_manager", "agent_http", "agent_grpc")
HEAD_PORTS += ("runtime_env", "metrics", "autoscaler_metrics", "dashboard_metrics")


def pick_ports() -> dict[str, int]:
    """A free port for every server of a head (``start_head``'s default)."""
    return dict(zip(HEAD_PORTS, free_ports(len(HEAD_PORTS)), strict=True))


def _why_not_up(head: Head, missing: dict[str, int], code: int | None) -> str:
    """What a head that never answered lacked: the servers not listening (and who else holds their ports), the job
    API's last answer, and Ray's own lines about a server it could not start — read before the head's temp folder
    is removed with it."""
    if missing:
        everyone = listening_sockets([pid for pid, _ in _live_pids()])
        holders = {port: pid for pid, _, _, port in everyone if port in missing.values()}
        held = {k: f" (held by pid {holders[p]})" if p in holders else "" for k, p in missing.items()}
        parts = ["not listening: " + ", ".join(f"{k} {p}{held[k]}" for k, p in missing.items())]
    else:
        parts = [f"every server listening; the job API answered {code}"]
    marks = ("Failed to", "already in use", "Address in use")
    for f in sorted(head.temp_dir.glob("**/logs/*")):
        with contextlib.suppress(OSError):
            lines = f.read_text(errors="replace").splitlines()
            parts += [f"{f.name}: {line.strip()}" for line in lines if any(m in line for m in marks)][:3]
    return "; ".join(parts)


def start_head(
    tmp: Path,
    *,
    num_cpus: int = 2,
    ports: dict[str, int] | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    object_store_memory: int = 300_000_000,
    base_env: dict[str, str] | None = None,
    own_network: bool = False,
) -> Head:
    """cluster/local/start-head.sh --block on free ports; returns once the job API answers the token and every
    listening socket of the head is on loopback (else it stops the head and raises).

    ``extra_args`` go to `ray start` (e.g. ``--autoscaling-config=…``), ``env`` to the script's environment.
    ``own_network``: the caller runs in a network namespace whose only interface is loopback (a multi-node head,
    which Ray binds to 0.0.0.0, tests/test_multinode.py), so the loopback check is the namespace's.
    ``base_env``: the environment to start it from (another venv's ``bin`` first on PATH: its ``ray`` starts the
    head, whose workers and jobs then run that venv's Python and ``evalfarm``).
    """
    ports = ports or pick_ports()
    ray_dir = tmp / "ray"
    script_env = head_env(
        base_env,
        EVALFARM_RAY_DIR=str(ray_dir),
        EVALFARM_GCS_PORT=str(ports["gcs"]),
        EVALFARM_DASHBOARD_PORT=str(ports["dashboard"]),
        EVALFARM_NUM_CPUS=str(num_cpus),
        EVALFARM_NUM_GPUS="0",
        EVALFARM_CLIENT_PORT=str(ports["client"]),
        EVALFARM_NODE_MANAGER_PORT=str(ports["node_manager"]),
        EVALFARM_OBJECT_MANAGER_PORT=str(ports["object_manager"]),
        EVALFARM_AGENT_HTTP_PORT=str(ports["agent_http"]),
        EVALFARM_AGENT_GRPC_PORT=str(ports["agent_grpc"]),
        EVALFARM_RUNTIME_ENV_PORT=str(ports["runtime_env"]),
        EVALFARM_METRICS_PORT=str(ports["metrics"]),
        EVALFARM_AUTOSCALER_METRICS_PORT=str(ports["autoscaler_metrics"]),
        EVALFARM_DASHBOARD_METRICS_PORT=str(ports["dashboard_metrics"]),
        **(env or {}),
    )
    # its own temp dir (start-head.sh would make one; this one the fixture removes even if the script fails early):
    # `ray start` records "the current cluster" under it, and the default (/tmp/ray) is where other people's
    # `ray.init()` on this machine would look (short: Ray's socket paths must fit in 108 bytes)
    temp_dir = Path(tempfile.mkdtemp(prefix="efray-"))
    script_env["EVALFARM_RAY_TEMP_DIR"] = str(temp_dir)
    cmd = [
        "bash",
        str(CLUSTER / "local" / "start-head.sh"),
        "--block",
        f"--object-store-memory={object_store_memory}",
        *extra_args,
    ]
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "head.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=script_env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    head = Head(proc, ports, ray_dir, log, temp_dir)
    servers = [ports[k] for k in ("gcs", "dashboard", "agent_http", "node_manager", "runtime_env")]
    deadline = time.monotonic() + 120
    code: int | None = None
    while True:
        if proc.poll() is not None:
            stop_head(head)
            raise RuntimeError(f"start-head.sh exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        missing = set(servers) - {port for *_, port in listening_sockets(head.pids())}
        if not missing:
            code, _ = http(f"{head.dashboard}/api/jobs/", token=head.token, timeout=5)
            if code == 200:
                break
        if time.monotonic() > deadline:
            why = _why_not_up(head, {k: p for k, p in ports.items() if p in missing}, code)
            stop_head(head)
            raise RuntimeError(f"the job API did not come up in 120 s: {why}\n{log.read_text()[-4000:]}")
        time.sleep(1)
    try:
        if not own_network:  # in a network namespace of its own (loopback only) a head may bind 0.0.0.0
            assert_loopback_only(head.pids(), f"the head of {tmp}", ports=servers)
    except AssertionError:
        stop_head(head)
        raise
    return head


STOP_GRACE_S = 1.0
"""How long ``stop_head`` lets a head's processes leave on SIGTERM before it kills them. Ray's take up to a minute
(34 s measured on a busy 2-core machine): a longer grace (it was 5 s) is only a wait before the same SIGKILL, at every
head a test stops."""


def stop_head(head: Head) -> None:
    """What cluster/local/stop.sh does, faster: SIGTERM to the head's session (its own processes only), SIGKILL
    to what is left after ``STOP_GRACE_S``, and to any process started in the head's own temp dir (the autoscaler's
    fake nodes, which leave its session).

    Ray's processes take up to a minute to leave on SIGTERM alone; a test head has nothing worth waiting for.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while session_pids(head.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.25)
    marker = str(head.temp_dir)
    for pid in session_pids(head.proc.pid) + [p for p, _ in _live_pids() if marker in cmdline(p)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    head.proc.wait(timeout=30)
    shutil.rmtree(head.temp_dir, ignore_errors=True)
    (head.ray_dir / "head").unlink(missing_ok=True)  # start-head.sh's record: a next head in this folder may start


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, num_gpus: int | None = None) -> Iterator[Any]:
    """``evalfarm.scheduler.ray_executor.connect(None)`` in this process: evalfarm's own local Ray (a fresh token in a
    0600 file, every server on loopback), checked like a head; yields ``ray``. At the end the warm workers and Ray
    are shut down and this process's Ray settings put back as they were."""
    import ray

    from evalfarm.scheduler.ray_executor import connect, shutdown_workers

    saved = {k: os.environ.get(k) for k in _AUTH_VARS}
    assert connect(None, num_cpus=num_cpus, num_gpus=num_gpus), "Ray was already initialised in this process"
    try:
        node = ray._private.worker._global_node
        gcs = int(node.gcs_address.rsplit(":", 1)[1])
        token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        assert os.environ["RAY_AUTH_MODE"] == "token" and token.stat().st_mode & 0o777 == 0o600
        assert_loopback_only(descendants(os.getpid()), "evalfarm's local Ray", ports=[gcs, node.node_manager_port])
        yield ray
    finally:
        shutdown_workers()
        ray.shutdown()
        restore_env(saved)
