"""The ``ray`` executor: long-lived worker actors, one per GPU (or per CPU slot) -- or, on a GPU cluster whose GPUs'
memory is known, one per *share* of a GPU sized to the model it runs (placement by memory: ``placement.Packing``) --
driven by ``core.Scheduler``.

Why actors (Ray Core) and not Ray Data: the expensive thing here is the *model* (import torch/transformers,
load weights), not the data (a job is at most tens of thousands of short strings). An actor pays the imports
once and then takes model after model; the scheduler needs per-model placement (largest-first), per-job retries
with a bounded attempt count, failure rows written once, and per-unit timings — Ray Data's streaming executor
would hide all four behind ``map_batches`` and re-partition tiny tasks for no gain.

Each actor runs two kinds of calls: ``embed(plan)`` (load one model, embed the texts its tasks need, drop it) and
``score(unit)`` (read one task's vectors from the model's text store, score on the actor's device — its GPU when
it has one — write details + metrics). Score calls are separate tasks so any free worker takes them, but they run
on the actors because the actors already hold every GPU / CPU slot: a separate ``num_gpus`` job would wait for them.

Faults: actors have ``max_restarts`` and ``max_task_retries=0``: Ray restarts a dead worker process, and the
*scheduler* resubmits the lost job (to another worker when there is one), counting attempts, so a model that
kills its worker every time is given up on after ``--max-attempts`` instead of looping.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from evalfarm.environment import WORKER_ENV, forwarded
from evalfarm.outcomes import Stage
from evalfarm.scheduler.core import ClusterLost, Job, WorkerInfo, WorkerLost
from evalfarm.scheduler.placement import Packing

if TYPE_CHECKING:
    from evalfarm.catalog.registry import Catalog
    from evalfarm.execute import ExecContext
    from evalfarm.options import RunOptions
    from evalfarm.outcomes import UnitOutcome
    from evalfarm.parts import PassState
    from evalfarm.plan import ModelPlan, Unit

log = logging.getLogger(__name__)


class _InitOptions(TypedDict):
    """What every ``ray.init`` of this module passes (typed: ``ray.init`` checks each keyword)."""

    include_dashboard: bool
    log_to_driver: bool
    logging_level: int


def small_kind(kind: str | None) -> bool:
    """A kind whose models load in seconds in little memory (``ModelKind.small``): a run of only such models needs
    no big workers. An unknown kind is not small."""
    from evalfarm.plugins import RegistryError, model_kind

    try:
        return kind is not None and model_kind(kind).small
    except RegistryError:
        return False


def gpu_kind(kind: str | None) -> bool:
    """A kind whose encoders run faster on a GPU (``ModelKind.gpu``): its embed jobs wait for GPU workers, and an
    autoscaled cluster asks for GPU workers for them. An unknown kind is treated as one (it may be big)."""
    from evalfarm.plugins import RegistryError, model_kind

    try:
        return kind is None or model_kind(kind).gpu
    except RegistryError:
        return True


# The head (GCS) is declared lost after this many seconds without an answer (EVALFARM_HEAD_TIMEOUT); each probe
# waits PROBE_TIMEOUT. Ray itself ends a driver whose GCS stays away for 60 s (gcs_rpc_server_reconnect_timeout_s).
HEAD_TIMEOUT = float(os.environ.get("EVALFARM_HEAD_TIMEOUT", "5"))
PROBE_TIMEOUT = 1.0
SHUTDOWN_TIMEOUT = 15.0
GPU_GRACE = 120.0  # seconds a CPU worker leaves encoders to GPU workers the autoscaler is asked for


class EvalWorker:
    """One Ray actor: a warm Python with torch imported and a task-data cache, reused across runs of one driver.

    ``begin`` hands it a run's context (catalog, warehouse, run id, options); ``embed`` / ``score`` then work in
    that run. A restarted actor (after a crash) gets ``begin`` again from the scheduler before new work.
    """

    def __init__(self, name: str, threads: int, gpu_share: float = 0.0) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        import evalfarm.execute  # noqa: F401 - pay the imports now, not in the first unit

        self.name = name
        self.gpu_share = gpu_share
        self.ctx: ExecContext | None = None
        self._tasks: dict[tuple[str, str, RunOptions], Any] = {}  # (task, checksum, options) -> its loaded data
        if 0 < gpu_share < 1 and torch.cuda.is_available():  # placement: a model past its share fails here, alone
            torch.cuda.set_per_process_memory_fraction(gpu_share)

    def info(self) -> WorkerInfo:
        import ray

        from evalfarm.provenance import process_device

        context = ray.get_runtime_context()
        return WorkerInfo(
            self.name,
            node=context.get_node_id(),
            host=platform.node(),
            pid=os.getpid(),
            device=process_device(),  # this node's CPU and GPUs (name, driver), not the driver's
            gpu_share=self.gpu_share,
            gpu_ids=tuple(str(g) for g in context.get_accelerator_ids().get("GPU", [])),
        )

    def begin(
        self,
        catalog: Catalog,
        warehouse: str,
        run_id: str,
        options: RunOptions,
        force: bool,
        board: Any = None,
        parts: Any = None,
    ) -> WorkerInfo:
        """A run's context; ``board``: the run's :class:`~evalfarm.scheduler.progress.TextBoard` actor, which this
        worker's embedding passes report their texts to (one post a second at most, never waited for); ``parts``:
        the run's :class:`~evalfarm.parts.PartBook` actor (a model's parts, shared with idle workers)."""
        from evalfarm.execute import ExecContext
        from evalfarm.scheduler.progress import TickSender
        from evalfarm.taskdata.data import task_checksum
        from evalfarm.warehouse import Warehouse

        wh = Warehouse(warehouse)
        wh.deferred = True  # staged files travel back with each job's outcomes; the driver commits them in batches
        self.ctx = ctx = ExecContext(
            catalog=catalog,
            warehouse=wh,
            run_id=run_id,
            options=options,
            force=force,
            record_failures=False,
            on_texts=TickSender(self.name, lambda worker, tick: board.put.remote(worker, tick)) if board else None,
            worker=self.name,
            parts=RayParts(parts) if parts is not None else None,
        )
        for tid, spec in catalog.tasks.items():  # job data already loaded by an earlier run, same content
            key = (tid, task_checksum(spec), options)  # a run option may change a task's texts (load_for)
            if key in self._tasks:
                ctx._tasks[tid] = self._tasks[key]
        return self.info()

    def _keep_tasks(self) -> None:
        from evalfarm.taskdata.data import task_checksum

        ctx = self._context()
        for tid, data in ctx._tasks.items():
            self._tasks[(tid, task_checksum(ctx.catalog.task(tid)), ctx.options)] = data

    def _context(self) -> ExecContext:
        if self.ctx is None:  # Ray restarted this actor after a crash; the scheduler re-sends begin() first
            raise RuntimeError(f"worker {self.name} restarted and has no run context yet")
        return self.ctx

    def embed(self, plan: ModelPlan, placement: dict[str, Any] | None = None) -> list[UnitOutcome]:
        """Embed a model's texts; ``placement``: where it runs (its GPU share and need), for its provenance."""
        from evalfarm.execute import embed_model

        ctx = self._context()
        ctx.placement = placement
        try:
            return embed_model(plan, ctx)
        finally:
            self._keep_tasks()
            self._give_back()

    def help_embed(self, plan: ModelPlan, pass_id: str, placement: dict[str, Any] | None = None) -> list[UnitOutcome]:
        """Help another worker's pass of a model with its parts (evalfarm.parts)."""
        from evalfarm.execute import help_embed

        ctx = self._context()
        ctx.placement = placement
        try:
            return help_embed(plan, pass_id, ctx)
        finally:
            self._keep_tasks()
            self._give_back()

    def _give_back(self) -> None:
        """A worker sharing a GPU returns the memory its model cached to the GPU (the next model, or a neighbour's,
        needs it); the encoder itself is gone with the job."""
        if 0 < self.gpu_share < 1:
            import gc

            import torch

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def score(self, plan: ModelPlan, unit: Unit) -> list[UnitOutcome]:
        from evalfarm.execute import score_unit

        ctx = self._context()
        try:
            return [score_unit(plan, unit, ctx)]
        finally:
            self._keep_tasks()


class RayParts:
    """The embed stage's view of the run's :class:`~evalfarm.parts.PartBook` actor (``evalfarm.parts.PartClaims``):
    each call waits for the actor's answer (a few milliseconds, once per part)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def _get(self, ref: Any) -> Any:
        import ray

        return ray.get(ref)

    def open(self, pass_id: str, model: str, parts: list[Any], owner: str, load_seconds: float) -> None:
        self._get(self.actor.open.remote(pass_id, model, parts, owner, load_seconds))

    def join(self, pass_id: str, worker: str) -> bool:
        return bool(self._get(self.actor.join.remote(pass_id, worker)))

    def claim(self, pass_id: str, worker: str) -> tuple[int, Any] | None:
        got: tuple[int, Any] | None = self._get(self.actor.claim.remote(pass_id, worker))
        return got

    def done(self, pass_id: str, part: int, worker: str, seconds: float) -> None:
        self._get(self.actor.done.remote(pass_id, part, worker, seconds))

    def status(self, pass_id: str) -> tuple[int, int, list[int]]:
        got: tuple[int, int, list[int]] = self._get(self.actor.status.remote(pass_id))
        return got

    def close(self, pass_id: str) -> dict[str, int]:
        got: dict[str, int] = self._get(self.actor.close.remote(pass_id))
        return got

    def release(self, worker: str) -> None:
        self._get(self.actor.release.remote(worker))


# Warm actors of this driver, reused by the next run while Ray stays connected (a notebook, a benchmark, tests).
_WARM: dict[tuple[Any, ...], dict[str, Any]] = {}


def shutdown_workers() -> None:
    """Kill the warm worker actors this process keeps between runs."""
    import ray

    for actors in _WARM.values():
        for actor in actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
    _WARM.clear()


TOKEN_FOLDER_PREFIX = "evalfarm-ray-auth-"
"""The private temp folder of a local Ray's token: ``<TMPDIR>/evalfarm-ray-auth-<driver pid>-<random>``."""


def sweep_stale_token_folders(tmp: str | None = None) -> list[str]:
    """Remove the token folders (in ``tmp``, default the temp folder) of drivers that are gone, and return them.

    A driver removes its folder at exit; a SIGKILLed one cannot, and its (dead) head's token stayed in TMPDIR.
    Only this user's folders whose driver pid no longer exists are removed: a live driver's, another user's, or
    a folder without a pid in its name (before this sweep existed) is left alone."""
    import shutil
    import stat
    import tempfile

    folder = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        pid_text = name[len(TOKEN_FOLDER_PREFIX) :].split("-", 1)[0]
        if not name.startswith(TOKEN_FOLDER_PREFIX) or not pid_text.isdigit():
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or _alive(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


RAY_TEMP_PARENT = "evalfarm-ray-{uid}"
"""The private folder (0700, this user's) in the temp folder that holds the Ray temp dir (``ray``) of every local
Ray that ``evalfarm run`` starts: its sessions, logs and cached ``working_dir`` packages."""


def private_ray_temp_dir(tmp: str | None = None) -> str:
    """The Ray temp dir of a local Ray this driver starts: ``<TMPDIR>/evalfarm-ray-<uid>/ray``.

    Ray makes its temp dir and every session dir in it mode 0777 (for other users of a shared /tmp/ray): another
    local user could read every log and replace a cached ``working_dir`` package, which the next job with that
    working dir runs. Inside a parent only this user can enter, none of that is reachable. The parent is this
    user's own real folder, made 0700 (a folder of that name that is another user's, or a link, is not used: a
    fresh private one is made instead). Short, as Ray's socket paths under it must fit in 107 bytes."""
    import stat
    import tempfile

    base = tmp or tempfile.gettempdir()
    parent = os.path.join(base, RAY_TEMP_PARENT.format(uid=os.getuid()))
    with contextlib.suppress(FileExistsError):
        os.mkdir(parent, 0o700)
    st = os.lstat(parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        log.warning("%s is not this user's own folder: using a fresh private one for Ray's temp dir", parent)
        parent = tempfile.mkdtemp(prefix="evalfarm-ray-", dir=base)
    elif stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(parent, 0o700)
    return os.path.join(parent, "ray")


def start_watchdog(folder: str, token: str) -> subprocess.Popen[bytes]:
    """Start :mod:`evalfarm.scheduler.watchdog` for this driver's local Ray: when this process ends, however it
    ends, the watchdog kills what the Ray left (the processes that carry ``token`` in their environment) and
    removes ``folder``. It gets a pipe whose only write end this process holds (never inherited: PEP 446), and a
    session of its own (a Ctrl-C or a kill of this process group does not reach it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalfarm.scheduler.watchdog", folder, token],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN_PATH"},
    )
    _WATCHDOGS.append(proc)  # held: its pipe closes when this process exits
    return proc


_WATCHDOGS: list[subprocess.Popen[bytes]] = []


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts: signalling it is merely not permitted)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


HEAD_DIR_ENV = "EVALFARM_RAY_DIR"
"""The folder where cluster/local/start-head.sh records its head (``head``), token and client settings."""


def head_record_path() -> Path:
    """The record cluster/local/start-head.sh writes: ``$EVALFARM_RAY_DIR/head``, else under ``XDG_STATE_HOME``
    (``~/.local/state``) ``/evalfarm/ray/head``, as the script computes it."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(os.environ.get(HEAD_DIR_ENV) or os.path.join(state, "evalfarm", "ray")) / "head"


def _answers(address: str, timeout: float = 2.0) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` within ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


REACH_TIMEOUT_S = 3.0
"""How long a remote address may take to accept a TCP connection before ``connect`` gives up (Ray's own client
retries for about 30 s, and a GCS address for longer, before saying anything)."""
RAY_CLIENT_PORT = 10001


def tcp_target(address: str) -> str | None:
    """The ``host:port`` a remote Ray address connects to: ``ray://host[:port]`` (Ray Client, port 10001 by
    default) or ``host:port`` (a GCS); None for anything else (``local``, other schemes), which is not checked."""
    rest = address.removeprefix("ray://")
    if not rest or "://" in rest or "/" in rest:
        return None
    host, sep, port = rest.rpartition(":")
    if not sep:
        return f"{rest}:{RAY_CLIENT_PORT}" if address.startswith("ray://") else None
    return rest if host and port.isdigit() else None


def _driver_env() -> dict[str, str]:
    """The worker variables a driver forwards to a cluster (see :func:`connect`): all of ``WORKER_ENV`` that is set,
    less those the enclosing Ray job's runtime_env sets already."""
    import json

    env = forwarded(WORKER_ENV)
    job = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")  # set by Ray for the driver of a submitted job
    if job:
        in_job = (json.loads(job).get("runtime_env") or {}).get("env_vars") or {}
        env = {k: v for k, v in env.items() if k not in in_job}
    return env


def check_reachable(address: str) -> None:
    """Raise ConnectionError, within :data:`REACH_TIMEOUT_S`, when nothing answers at a remote address's host and
    port (:func:`tcp_target`); an address that is not host:port is left to ``ray.init``."""
    target = tcp_target(address)
    if target is not None and not _answers(target, REACH_TIMEOUT_S):
        raise ConnectionError(
            f"cannot reach the Ray cluster at {address!r}: nothing accepted a connection at {target} within "
            f"{REACH_TIMEOUT_S:.0f} s. Start one (`ray start --head`), check the host and port, pass --address "
            "auto, or leave --address out to run on a local Ray"
        )


def resolve_auto_address() -> str:
    """What ``--address auto`` connects to: ``RAY_ADDRESS`` when it names one (a submitted job's driver has it);
    else the head evalfarm's own cluster/local/start-head.sh recorded, which must answer (a recorded head that does
    not is an error, never a reason to take another cluster); else, with no record, the single Ray cluster whose GCS
    Ray's process scan finds and that answers. Anything else is a ``ConnectionError`` at once, naming what was
    found -- Ray's own "auto" picks one of several, possibly another user's, and can wait minutes on it."""
    env = os.environ.get("RAY_ADDRESS")
    if env and env != "auto":
        return env
    from ray._private.services import find_gcs_addresses

    record = head_record_path()
    scanned = sorted(find_gcs_addresses())
    live = [a for a in scanned if _answers(a)]
    found = f"Ray's process scan finds {len(scanned)} GCS server(s)" + (f": {', '.join(scanned)}" if scanned else "")
    if scanned:
        found += f", {len(live)} of them answering"
    if record.is_file():
        fields = dict(ln.split("=", 1) for ln in record.read_text(encoding="utf-8").splitlines() if "=" in ln)
        gcs = fields.get("gcs_address", "")
        if gcs and _answers(gcs):
            return gcs
        raise ConnectionError(
            f"--address auto: {record} records the head {gcs or '(no gcs_address)'}, which does not answer "
            f"(stopped? cluster/local/stop.sh clears the record); {found}. Start the head again, or pass "
            "--address HOST:PORT"
        )
    if len(live) == 1:
        return live[0]
    raise ConnectionError(
        f"--address auto: no head recorded at {record} (cluster/local/start-head.sh writes it); {found}. Pass "
        "--address HOST:PORT (or ray://HOST:10001), or start a head with cluster/local/start-head.sh"
    )


def check_recorded_head_env(address: str) -> None:
    """Raise ``ConnectionError`` at once when ``address`` is the head cluster/local/start-head.sh recorded and this
    process lacks what its env file sets: the token (every such head is token-authenticated), and, for a loopback
    head, Ray's single-node mode (without it Ray dials the host's routable address, where the head does not listen,
    and retries "Failed to connect to GCS" for minutes). ``evalfarm submit`` says the same of the job API."""
    record = head_record_path()
    try:
        text = record.read_text(encoding="utf-8")
    except OSError:
        return
    fields = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    if fields.get("gcs_address") != address:
        return
    missing = []
    if os.environ.get("RAY_AUTH_MODE") != "token" or not (
        os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    ):
        missing.append("its token (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH)")
    host = address.rpartition(":")[0]
    if host in ("127.0.0.1", "localhost") and os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0":
        missing.append("Ray's single-node mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), without which Ray dials this "
                       "host's routable address, where a loopback head does not listen")  # fmt: skip
    if missing:
        raise ConnectionError(
            f"the Ray head at {address} (recorded in {record} by cluster/local/start-head.sh) needs "
            f"{' and '.join(missing)}, which this shell does not have: run `. {record.parent / 'env'}` first"
        )


def check_address_env(address: str | None) -> None:
    """Before anything is planned: the settings a recorded head needs (:func:`check_recorded_head_env`), for
    ``address`` as given (``auto``: the recorded head, the one it takes first). Reads one small file; no Ray."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "auto":
        try:
            text = head_record_path().read_text(encoding="utf-8")
        except OSError:
            return
        fields = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
        address = fields.get("gcs_address") or None
    if address is not None:
        check_recorded_head_env(address)


def _target_address(address: str | None) -> str | None:
    """``address``, else ``RAY_ADDRESS``; ``auto`` resolved here (None: start a local Ray); the recorded head
    checked for its settings first (:func:`check_recorded_head_env`)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "auto":
        address = resolve_auto_address()
    if address is not None:
        check_recorded_head_env(address)
    return address


# long: docstring: the local head's security; token/loopback steps must wrap ray.init in order
def connect(address: str | None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> bool:
    """Connect to ``address`` (``auto``, ``ray://…``, host:port), else ``RAY_ADDRESS``, else start a local Ray.
    ``auto`` is :func:`resolve_auto_address`'s choice (evalfarm's recorded head first; fails fast when unsure).

    Returns True when this call started or connected Ray (and the caller should shut it down). An already
    initialised Ray (a notebook, a test fixture) is used as is. ``num_cpus`` / ``num_gpus``: the resources a local
    Ray declares (default: what the machine has; the tests declare GPUs on a machine without any).

    A local Ray started here is closed to everyone else: token authentication (``RAY_AUTH_MODE=token``) with a
    token generated for this head, kept in a 0600 file in a private temporary folder (removed at exit), and
    every Ray server bound to 127.0.0.1. Ray binds loopback only in its single-node mode
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read once when Ray is imported); otherwise it rewrites 127.0.0.1
    to the host's routable address and its GCS, raylet and agents (whose job API runs shell commands) listen
    there. Setting the mode explicitly also keeps Ray from warning about token authentication on every run.

    On a cluster, the variables the workers need (``evalfarm.environment.WORKER_ENV``) are forwarded through the
    job's runtime_env,
    except those the enclosing Ray job already sets: a driver started by ``ray job submit`` / a RayJob inherits
    the job's runtime_env, every job of the job gets it, and Ray refuses a ``ray.init`` runtime_env that sets
    the same keys again ("Failed to merge the Job's runtime env").
    """

    import ray

    if ray.is_initialized():
        return False
    address = _target_address(address)
    common: _InitOptions = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        import atexit
        import secrets
        import shutil
        import tempfile

        from ray._private import ray_constants

        # Ray's _raylet.pyi stub lists only the id classes; the compiled module has both of these.
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        sweep_stale_token_folders()
        folder = tempfile.mkdtemp(prefix=f"{TOKEN_FOLDER_PREFIX}{os.getpid()}-")  # 0700
        atexit.register(shutil.rmtree, folder, True)  # registered before ray.init: runs after Ray's own shutdown
        token = os.path.join(folder, "auth_token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        start_watchdog(folder, token)  # a SIGKILLed driver runs no atexit: its agents and folder go all the same
        os.environ.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token)
        Config.initialize("")  # Ray caches its config (and the auth mode) per process: re-read the environment
        AuthenticationTokenLoader.instance().reset_cache()
        cluster_mode, was = ray_constants.ENABLE_RAY_CLUSTER, os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # for the processes ray.init starts
        ray_constants.ENABLE_RAY_CLUSTER = False  # for this one, which imported Ray before we could say so
        try:
            # "local" and not None: ray.init(None) would attach to whatever `ray start` cluster ran last here.
            ray.init(
                address="local",
                num_cpus=num_cpus or os.cpu_count() or 1,
                num_gpus=num_gpus,
                object_store_memory=256 * 1024 * 1024,
                _temp_dir=private_ray_temp_dir(),
                **common,
            )
        finally:  # the servers are bound now; later connections of this process resolve addresses as before
            ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
            if was is None:
                os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
            else:
                os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = was
    else:
        env = _driver_env()
        check_reachable(address)
        try:
            ray.init(address=address, runtime_env={"env_vars": env} if env else None, **common)
        except (ConnectionError, RuntimeError) as exc:
            if is_auth_failure(exc):
                raise ConnectionError(
                    f"the Ray cluster at {address!r} refused this driver's token (missing or wrong): set "
                    "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to the head's token file (or RAY_AUTH_TOKEN to "
                    "the token; cluster/local/start-head.sh prints both)"
                ) from exc
            if not isinstance(exc, ConnectionError):
                raise
            raise ConnectionError(
                f"cannot reach the Ray cluster at {address!r}: {exc}. Start one (`ray start --head`), pass "
                "--address auto / ray://host:10001, or leave --address out to run on a local Ray"
            ) from exc
    return True


_AUTH_FAILURE = re.compile(r"Unauthenticated|InvalidAuthToken|authentication token", re.IGNORECASE)


def is_auth_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is Ray refusing a missing or wrong token rather than an unreachable
    head: ``ray.init`` wraps the GCS's ``Unauthenticated`` / ``InvalidAuthToken`` in "Failed to connect to Ray
    cluster", and the job API raises ``ray.exceptions.AuthenticationError``."""
    from ray.exceptions import AuthenticationError

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, AuthenticationError) or _AUTH_FAILURE.search(str(cur)):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def worker_resources(
    cluster: dict[str, float],
    workers: int | None,
    *,
    small_models: bool,
    gpus_per_worker: float | None = None,
    shared: bool = False,
) -> tuple[int, float, float]:
    """(workers, CPUs per worker, GPUs per worker) for a cluster's resources.

    Default: one worker per GPU — two per GPU (0.5 each) when every model is a small lookup model, where one
    model alone would leave the GPU idle — else one per CPU slot. CPUs are split evenly so that torch in each
    worker gets its share of threads (1 worker on 2 CPUs scores with 2 threads, like the in-process loop).
    ``shared`` (a cluster given by ``--address`` / ``RAY_ADDRESS``, which other runs may use too): ``--workers N``
    CPU workers get one whole CPU each instead of N slices of the whole cluster.
    """
    gpus = float(cluster.get("GPU", 0.0))
    cpus = float(cluster.get("CPU", 1.0))
    if gpus >= 1:
        gpw = gpus_per_worker or (0.5 if small_models else 1.0)
        n = workers or max(1, int(gpus / gpw))
        gpw = min(gpw, gpus / n) if workers else gpw
    else:
        gpw = 0.0
        n = workers or max(1, int(cpus))
        if shared and workers:
            return n, 1.0, 0.0
    cpw = max(0.01, math.floor(cpus / n * 100) / 100)  # floor: n workers must fit
    return n, cpw, gpw


@dataclass
class Scaling:
    """What a run on an autoscaling cluster starts now and asks the autoscaler for.

    ``now``: workers that fit the cluster as it is, each with whole resources (``cpus`` / ``gpus`` per worker);
    ``gpu_workers``: GPU workers to ask for (``gpu_shape`` each); ``cpu_workers``: CPU workers (1 CPU each) to ask
    for.
    """

    now: int
    cpus: float
    gpus: float
    gpu_workers: int
    gpu_shape: dict[str, float]
    cpu_workers: int

    def bundles(self) -> list[dict[str, float]]:
        """The request: every worker of the run (the autoscaler counts what runs already against it)."""
        started = {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {})}
        return [started] * self.now + [dict(self.gpu_shape)] * self.gpu_workers + [{"CPU": 1.0}] * self.cpu_workers


def autoscaled_workers(
    cluster: dict[str, float],
    gpu_nodes: list[dict[str, float]],
    *,
    heavy: int,
    workers: int | None,
    small_models: bool,
) -> Scaling:
    """Workers for a run on an autoscaling cluster (docs/operations.md, "Autoscaling").

    1. Workers that fit now start at once, with whole resources: one GPU each (half when every model is a small
       lookup model), else one CPU each — never a slice of a CPU, so ``--workers 8`` on a one-node cluster does not
       squeeze 8 actors onto it but asks for the nodes they need.
    2. Each pending model that wants a GPU (``heavy``: its kind declares ``gpu``) asks for a GPU worker,
       ``{"GPU": 1, "CPU": c}`` with ``c`` the CPUs per GPU of the cluster's GPU nodes (1 before any has joined),
       up to ``workers`` in all.
    3. ``workers`` on a cluster without GPUs asks for the CPU workers beyond those that fit.
    4. When no worker fits now (a head with 0 CPUs), one CPU worker is asked for too: a cluster that cannot
       provide GPUs still runs the catalog.
    """
    gpus, cpus = float(cluster.get("GPU", 0.0)), float(cluster.get("CPU", 0.0))
    cap = workers if workers else None
    if gpus >= 1:
        gpw = 0.5 if small_models else 1.0
        fit = int(gpus / gpw)
        per_node = [n.get("CPU", 0.0) / n["GPU"] * gpw for n in gpu_nodes if n.get("GPU", 0.0) >= gpw]
        cpw = max(0.01, math.floor(min(per_node or [cpus / fit]) * 100) / 100)
    else:
        gpw, cpw = 0.0, 1.0
        fit = int(cpus)
    now = min(fit, cap) if cap else fit
    per_gpu = [n.get("CPU", 0.0) / n["GPU"] for n in gpu_nodes if n.get("GPU", 0.0) >= 1]
    shape = {"GPU": 1.0, "CPU": max(1.0, math.floor(min(per_gpu))) if per_gpu else 1.0}
    room = (cap - now) if cap else None
    gpu_workers = max(0, heavy - (now if gpw else 0))
    if room is not None:
        gpu_workers = min(gpu_workers, room)
        room -= gpu_workers
    cpu_workers = room if (room and not gpw and not heavy) else 0
    if now == 0 and cpu_workers == 0:
        cpu_workers = 1
    return Scaling(now, cpw, gpw, gpu_workers, shape, cpu_workers)


def is_autoscaling() -> bool:
    """Does this cluster have an autoscaler that can add nodes? ``EVALFARM_AUTOSCALE=1/0`` decides when set.

    Autoscaler v2 (KubeRay): yes. v1: its monitor publishes a status report; a plain ``ray start`` / ``ray.init``
    head runs the same monitor with a read-only provider, whose node types are the anonymous ``node_<id>``.
    """
    forced = os.environ.get("EVALFARM_AUTOSCALE")
    if forced is not None:
        return forced.strip().lower() in ("1", "true", "yes", "on")
    import json

    try:
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        if is_autoscaler_v2(fetch_from_server=True):
            return True
        from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
        from ray.autoscaler._private.util import format_readonly_node_type
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
        report = (json.loads(raw) if raw else {}).get("autoscaler_report") or {}
        mapping = report.get("node_type_mapping") or {}
        if mapping:
            return any(t != format_readonly_node_type(n) for n, t in mapping.items())
        return any(not t.startswith("node_") for t in report.get("active_nodes") or {})
    except Exception:  # an older Ray, Ray Client mode: no autoscaler we can see
        return False


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process (Linux /proc; {} elsewhere)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(name)] = (int(fields[1]), fields[19])
    return table


def _descendants(roots: set[int]) -> dict[int, str]:
    """``roots`` and every process below them: pid -> start time (to tell a reused pid apart)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out[pid] = table[pid][1]
        todo += children.get(pid, [])
    return out


def _kill_leftovers(procs: dict[int, str]) -> None:
    """SIGKILL the processes of ``procs`` still alive (same pid and start time: the very processes)."""
    import signal

    table = _proc_table()
    for pid, started in procs.items():
        if pid != os.getpid() and table.get(pid, (0, None))[1] == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class RayExecutor:
    """Creates the worker actors and runs scheduler tasks on them."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        warehouse: str,
        run_id: str,
        options: RunOptions,
        force: bool,
        address: str | None = None,
        workers: int | None = None,
        small_models: bool = False,
        max_restarts: int = 4,
        plans: list[ModelPlan] | None = None,
        kinds: dict[str, str] | None = None,
        autoscale: bool | None = None,
        head_timeout: float | None = None,
        connected: tuple[bool, bool] | None = None,
    ) -> None:
        self.args: tuple[Any, ...] = (catalog, warehouse, run_id, options, force)
        self.board: Any = None  # the run's TextBoard actor: the workers' embedding progress
        self.dashboard_url: str | None = None  # the cluster's Ray dashboard, when it has one
        self.connected = connected  # (shared, owns_ray) of a connect() the caller made already (see start)
        self.address = address
        self.n_workers = workers
        self.small_models = small_models
        self.max_restarts = max_restarts
        self.plans = plans or []
        self.kinds = kinds or {}
        self.autoscale = autoscale
        self.head_timeout = head_timeout if head_timeout is not None else HEAD_TIMEOUT
        self.actors: dict[str, Any] = {}
        self.grown: dict[str, Any] = {}  # actors asked for from the autoscaler (not kept warm between runs)
        self.owns_ray = False
        self.head_lost = False
        self.gcs_address = ""
        self.resources: tuple[int, float, float] = (0, 0.0, 0.0)
        self.scaling: Scaling | None = None
        self._cluster0: dict[str, float] = {}  # the cluster when the run started (autoscaling)
        self.requested: list[list[dict[str, float]]] = []  # every request_resources call of this run
        self._gpu_actors = 0
        self._gpu_names: set[str] = set()  # GPU-shaped workers of this run
        self._started = 0.0
        self._next_probe = 0.0
        self._next_scale = 0.0
        self._unreachable_since: float | None = None
        self.packing: Packing | None = None  # placement by memory (scheduler/placement.py), on a fixed GPU cluster
        self.parts_book: Any = None  # the run's PartBook actor (evalfarm.parts): tails shared with idle workers
        self._retired: list[str] = []
        self._by_handle: dict[Any, str] = {}  # a job's handle -> its worker (packing's busy / ready)
        self._shares = 0  # packed workers started so far (their names: p0, p1, ...)

    def _cls(self, cpus: float, gpus: float) -> Any:
        import ray

        return ray.remote(EvalWorker).options(
            num_cpus=cpus, num_gpus=gpus, max_restarts=self.max_restarts, max_task_retries=0
        )

    def start(self) -> list[tuple[str, Any]]:
        import ray

        if self.connected is not None:  # the runner connected first (before creating a new warehouse)
            shared, self.owns_ray = self.connected
        else:
            shared = bool(self.address or os.environ.get("RAY_ADDRESS")) and not ray.is_initialized()
            self.owns_ray = connect(self.address)
        try:
            self.gcs_address = ray.get_runtime_context().gcs_address
        except Exception:  # Ray Client
            self.gcs_address = self.address or ""
        self.dashboard_url = dashboard_url()
        self.board = _board()
        self.parts_book = _parts_book()
        self.args = (*self.args[:5], self.board, self.parts_book)
        cluster = ray.cluster_resources()
        if self.autoscale is None:
            self.autoscale = is_autoscaling()
        if not self.autoscale and not self.n_workers and cluster.get("GPU", 0.0) >= 1:
            self.packing = self._plan_packing(cluster)
        if self.packing is not None:
            return self._start_packed()
        if self.autoscale:
            self._cluster0 = cluster
            self.scaling = self._scaling(self.plans)
            n, cpw, gpw = self.scaling.now, self.scaling.cpus, self.scaling.gpus
            self._gpu_actors = n if gpw else 0
        else:
            n, cpw, gpw = worker_resources(cluster, self.n_workers, small_models=self.small_models, shared=shared)
        self.resources = (n, cpw, gpw)
        key = (ray.get_runtime_context().get_job_id(), n, cpw, gpw)
        if key not in _WARM:
            if not self.owns_ray:
                shutdown_workers()  # other shapes: free their CPUs/GPUs for this run's workers
            cls = self._cls(cpw, gpw)
            _WARM[key] = {f"w{i}": cls.remote(f"w{i}", max(1, int(cpw))) for i in range(n)}
        self.actors = dict(_WARM[key])
        self._started = time.monotonic()
        if gpw:
            self._gpu_names.update(self.actors)
        handles = [(name, actor.begin.remote(*self.args)) for name, actor in self.actors.items()]
        if self.scaling is not None:
            for _ in range(self.scaling.cpu_workers):
                handles.append(self._grow({"CPU": 1.0}))
            handles += self._scale(self.plans)
        return handles

    # -- placement by memory -----------------------------------------------------------------------------------
    def _plan_packing(self, cluster: dict[str, float]) -> Packing | None:
        import ray

        catalog = self.args[0]
        base_dir = catalog.path.parent if getattr(catalog, "path", None) is not None else None
        return Packing.plan(
            self.plans, gpu_kind=lambda m: gpu_kind(self.kinds.get(m)), base_dir=base_dir, cluster=cluster,
            nodes=ray.nodes(),
        )  # fmt: skip

    def _start_packed(self) -> list[tuple[str, Any]]:
        """The run's first workers, each with its share of a GPU (not kept warm: the next run's shares differ)."""
        assert self.packing is not None
        if not self.owns_ray:
            shutdown_workers()  # warm whole-GPU workers of an earlier run: their GPUs are this run's to share
        self._started = time.monotonic()
        n, share0 = len(self.packing.pool.gpus), self.packing.pool.smallest
        self.resources = (n, self.packing.cpus(share0), share0)
        return [self._start_share(f) for f in self.packing.initial(self.plans)]

    def _start_share(self, share: float) -> tuple[str, Any]:
        assert self.packing is not None
        name = f"p{self._shares}"
        self._shares += 1
        cpus = self.packing.cpus(share)
        actor = self._cls(cpus, share).remote(name, max(1, int(cpus)), share)
        self.grown[name] = self.actors[name] = actor  # killed when the run ends
        self.packing.pool.shares[name] = share
        self._gpu_names.add(name)
        return name, actor.begin.remote(*self.args)

    def _reshape(self, pending: list[ModelPlan]) -> list[tuple[str, Any]]:
        """Start the shares the queue needs now, after stopping the idle workers that make room for them."""
        import ray

        assert self.packing is not None
        start, stop = self.packing.reshape(pending)
        for worker in stop:
            try:
                ray.kill(self.actors.pop(worker), no_restart=True)
            except Exception:  # already gone
                pass
            self.grown.pop(worker, None)
            self.packing.pool.forget(worker)
            self.packing.ready.discard(worker)
            self._gpu_names.discard(worker)
            self._retired.append(worker)
        return [self._start_share(f) for f in start]

    def refusals(self) -> dict[str, str]:
        """Models no GPU of the cluster can hold (placement by memory): failed before anything loads."""
        return dict(self.packing.refused) if self.packing is not None else {}

    def retired(self) -> list[str]:
        out, self._retired = self._retired, []
        return out

    def tails(self) -> list[PassState]:
        """The open passes of the run's part book (within a second, else none: sharing is an optimisation)."""
        import ray

        if self.parts_book is None:
            return []
        try:
            got: list[PassState] = ray.get(self.parts_book.snapshot.remote(), timeout=1.0)
        except Exception:
            return []
        return got

    def text_passes(self) -> dict[str, dict[str, Any]] | None:
        """The workers' embedding passes as they last reported them (``TextBoard.snapshot``); None when the board
        does not answer within a second (progress is a report: the run goes on without it)."""
        import ray

        if self.board is None:
            return None
        try:
            passes: dict[str, dict[str, Any]] = ray.get(self.board.snapshot.remote(), timeout=1.0)
        except Exception:
            return None
        return passes

    # -- autoscaling ------------------------------------------------------------------------------------------
    def _heavy(self, plans: list[ModelPlan]) -> int:
        """Pending models that want a GPU (encoders; lookup models run anywhere)."""
        return sum(1 for p in plans if gpu_kind(self.kinds.get(p.model)))

    def _grow(self, shape: dict[str, float]) -> tuple[str, Any]:
        name = f"g{len(self.grown)}"
        cpus, gpus = shape.get("CPU", 1.0), shape.get("GPU", 0.0)
        actor = self._cls(cpus, gpus).remote(name, max(1, int(cpus)))
        self.grown[name] = self.actors[name] = actor
        if gpus:
            self._gpu_actors += 1
            self._gpu_names.add(name)
        return name, actor.begin.remote(*self.args)

    def _scaling(self, pending: list[ModelPlan]) -> Scaling:
        import ray

        gpu_nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU")]
        return autoscaled_workers(
            self._cluster0, gpu_nodes, heavy=self._heavy(pending), workers=self.n_workers,
            small_models=self.small_models,
        )  # fmt: skip

    def _scale(self, pending: list[ModelPlan]) -> list[tuple[str, Any]]:
        """Ask for a GPU worker per pending model that wants one — pending actors with real resource requests,
        which the autoscaler sees as demand, and ``request_resources`` so it scales at once — and lower the request
        as that work runs out (it is cleared at the end)."""
        assert self.scaling is not None
        self.scaling = self._scaling(pending)  # the GPU shape follows the GPU nodes that joined
        started_gpu = self.scaling.now if self.scaling.gpus else 0
        new = []
        while self._gpu_actors < started_gpu + self.scaling.gpu_workers:
            new.append(self._grow(self.scaling.gpu_shape))
        bundles = self.scaling.bundles()
        if not self.requested or bundles != self.requested[-1]:
            from ray.autoscaler.sdk import request_resources

            request_resources(bundles=bundles)
            self.requested.append(bundles)
        return new

    def suits(self, worker: str, job: Job, alive: set[str]) -> bool:
        if self.packing is not None:  # a GPU model's embed job needs a worker whose share holds it
            return job.stage != Stage.EMBED or self.packing.suits(worker, job.plan.model)
        return self._suits_whole(worker, job, alive)

    def _suits_whole(self, worker: str, job: Job, alive: set[str]) -> bool:
        """Encoders go to GPU workers when the run has any: a CPU worker leaves a GPU model's embed job alone
        while a GPU worker is alive, or while one is being asked for (for GPU_GRACE seconds: a cluster that cannot
        provide GPUs still runs it on CPU then)."""
        if job.stage != Stage.EMBED or worker in self._gpu_names or not self._gpu_names:
            return True
        if not gpu_kind(self.kinds.get(job.plan.model)):
            return True
        if self._gpu_names & alive:
            return False
        return time.monotonic() - self._started > GPU_GRACE

    # -- the head's health ------------------------------------------------------------------------------------
    def reachable(self) -> bool:
        """One GCS round trip (a key-value read) within PROBE_TIMEOUT seconds."""
        import ray

        worker = ray._private.worker.global_worker
        gcs = getattr(worker, "gcs_client", None)
        if gcs is None:  # Ray Client: the client connection reports a lost head itself
            return True
        try:
            gcs.internal_kv_get(b"evalfarm-probe", b"evalfarm", timeout=PROBE_TIMEOUT)
        except Exception:
            return False
        return True

    def poll(self, pending: list[ModelPlan]) -> list[tuple[str, Any]]:
        """Probe the head (once a second; ``ClusterLost`` once it has not answered for ``head_timeout`` seconds —
        long before Ray's own 60 s reconnect timeout ends the process) and keep the autoscaling request in step."""
        now = time.monotonic()
        if now >= self._next_probe:
            self._next_probe = now + 1.0
            if self.reachable():
                self._unreachable_since = None
            elif self._unreachable_since is None:
                self._unreachable_since = now
            elif now - self._unreachable_since >= self.head_timeout:
                self.head_lost = True
                raise ClusterLost(
                    f"the Ray head (GCS at {self.gcs_address}) has not answered for "
                    f"{now - self._unreachable_since:.0f} s"
                )
        if self.scaling is not None and now >= self._next_scale:
            self._next_scale = now + 5.0
            return self._scale(pending)
        if self.packing is not None:
            return self._reshape(pending)
        return []

    # -- tasks ------------------------------------------------------------------------------------------------
    def submit(self, worker: str, job: Job) -> Any:
        actor = self.actors[worker]
        placement = None
        if self.packing is not None:
            self.packing.busy[worker] = job.plan.model
            placement = self.packing.record(worker, job.plan.model)
        if job.helper is not None:
            handle = actor.help_embed.remote(job.plan, job.helper, placement)
        elif job.stage == Stage.EMBED:
            handle = actor.embed.remote(job.plan, placement)
        else:
            handle = actor.score.remote(job.plan, job.unit)
        self._by_handle[handle] = worker
        return handle

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        import ray

        if not handles:
            time.sleep(timeout)
            return []
        ready, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def result(self, handle: Any) -> Any:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError, WorkerCrashedError

        worker = self._by_handle.pop(handle, None)
        if self.packing is not None and worker is not None:
            self.packing.busy.pop(worker, None)
        try:
            got = ray.get(handle)
        except (RayActorError, WorkerCrashedError) as exc:
            self._lost(worker)
            # Unavailable: Ray is restarting the actor (or cannot reach it for a moment): ask again later.
            restarting = isinstance(exc, ActorUnavailableError)
            raise WorkerLost(
                type(exc).__name__ + ": " + str(exc).strip().splitlines()[0][:300], restarting=restarting
            ) from exc
        except RayTaskError as exc:
            self._lost(worker)
            # A bug in our job code (embed_model/score_unit never raise for model failures): fail the attempt.
            raise WorkerLost(f"task raised {type(exc.cause).__name__}: {exc.cause}") from exc
        if isinstance(got, WorkerInfo) and self.packing is not None:
            self.packing.ready.add(got.name)
            if got.gpu_ids:
                self.packing.pool.placed[got.name] = (got.node, got.gpu_ids[0])
        return got

    def _lost(self, worker: str | None) -> None:
        """A worker died mid-job: it is not ready (placement), and the parts it held go back (evalfarm.parts)."""
        if worker is None:
            return
        if self.packing is not None:
            self.packing.ready.discard(worker)
        if self.parts_book is not None:
            try:
                self.parts_book.release.remote(worker)
            except Exception:  # the book's actor is gone too: nothing holds the parts
                pass

    def revive(self, worker: str) -> Any | None:
        """A handle that resolves once Ray has restarted the worker and it has this run's context again."""
        handle = self.actors[worker].begin.remote(*self.args)
        self._by_handle[handle] = worker
        return handle

    def close(self) -> None:
        """Keep the warm actors for the next run of this driver, unless this run started Ray itself; give back
        what was asked of the autoscaler. After a lost head, kill every process of a Ray this run started (its
        agents outlive a raylet that cannot reach the GCS)."""
        import ray

        if not ray.is_initialized():
            return
        if not self.head_lost:
            _kill_helpers(self.board, self.parts_book)
        if self.head_lost:
            _WARM.clear()
        else:
            for actor in self.grown.values():
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # already gone
                    pass
            if self.requested and self.requested[-1]:
                from ray.autoscaler.sdk import request_resources

                try:
                    request_resources(bundles=[])
                    self.requested.append([])
                except Exception:
                    pass
        if self.owns_ray:
            node = ray._private.worker._global_node
            running: dict[str, list[Any]] = node.all_processes if node else {}  # process type -> ProcessInfos
            roots = {p.process.pid for ps in running.values() for p in ps}
            procs = _descendants(roots)
            if self.head_lost:  # nothing to shut down gracefully: the GCS is gone
                _kill_leftovers(procs)
            else:
                shutdown_workers()
            _shutdown(bounded=self.head_lost)
            _kill_leftovers(procs)
        elif self.head_lost:
            _shutdown(bounded=True)  # disconnect: this driver can do nothing more on that cluster


def dashboard_url() -> str | None:
    """The Ray dashboard's address (``http://host:port``) of the connected cluster, None when it runs none (the
    local Ray ``evalfarm run`` starts has no dashboard) or it cannot be told (Ray Client)."""
    try:
        from ray._private.worker import get_dashboard_url

        url = get_dashboard_url()
    except Exception:
        return None
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def _board() -> Any:
    """A run's :class:`~evalfarm.scheduler.progress.TextBoard` as an actor that takes no CPU (None when Ray cannot
    start one: the run then goes on without texts)."""
    import ray

    from evalfarm.scheduler.progress import TextBoard

    try:
        return ray.remote(TextBoard).options(num_cpus=0, max_restarts=0).remote()
    except Exception as exc:
        logging.getLogger(__name__).info("no progress board (%s: %s)", type(exc).__name__, exc)
        return None


def _kill_helpers(*actors: Any) -> None:
    """Kill a run's own helper actors (its progress board, its part book)."""
    import ray

    for actor in actors:
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass


def _parts_book() -> Any:
    """A run's :class:`~evalfarm.parts.PartBook` as an actor that takes no CPU (None when Ray cannot start one: the
    run then goes on without sharing tails)."""
    import ray

    from evalfarm.parts import PartBook

    try:
        return ray.remote(PartBook).options(num_cpus=0, max_restarts=0).remote()
    except Exception as exc:
        logging.getLogger(__name__).info("no part book (%s: %s)", type(exc).__name__, exc)
        return None


def _shutdown(*, bounded: bool) -> None:
    """``ray.shutdown()``; without a head it takes seconds and can wait on a GCS call that never returns, so then
    it gets SHUTDOWN_TIMEOUT seconds in a thread of its own (the run is already recorded)."""
    import threading

    import ray

    if not bounded:
        ray.shutdown()
        return
    t = threading.Thread(target=ray.shutdown, name="evalfarm-ray-shutdown", daemon=True)
    t.start()
    t.join(SHUTDOWN_TIMEOUT)
