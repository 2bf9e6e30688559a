"""The ``ray`` executor: one long-lived worker actor per GPU (or per CPU slot), driven by ``core.Scheduler``.

Why actors (Ray Core) and not Ray Data: the expensive thing here is the *model* (import torch/transformers,
load weights), not the data (a task is at most tens of thousands of short strings). An actor pays the imports
once and then takes model after model; the scheduler needs per-model placement (largest-first), per-task retries
with a bounded attempt count, failure rows written once, and per-unit timings — Ray Data's streaming executor
would hide all four behind ``map_batches`` and re-partition tiny tasks for no gain.

Each actor runs two kinds of calls: ``embed(plan)`` (load one model, embed the texts its tasks need, drop it) and
``score(unit)`` (read one task's vectors from the model's text store, score on the actor's device — its GPU when
it has one — write details + metrics). Score calls are separate tasks so any free worker takes them, but they run
on the actors because the actors already hold every GPU / CPU slot: a separate ``num_gpus`` task would wait for them.

Faults: actors have ``max_restarts`` and ``max_task_retries=0``: Ray restarts a dead worker process, and the
*scheduler* resubmits the lost task (to another worker when there is one), counting attempts, so a model that
kills its worker every time is given up on after ``--max-attempts`` instead of looping.
"""

from __future__ import annotations

import math
import os
import platform
from typing import Any

from evalfarm.scheduler.core import Task, WorkerInfo, WorkerLost

# Environment the workers need on a remote cluster (a local one inherits the driver's environment).
_FORWARD_ENV = ("EVALFARM_DATA", "EVALFARM_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")
SMALL_KINDS = {"word-vectors", "bow", "static", "spacy"}


class EvalWorker:
    """One Ray actor: a warm Python with torch imported and a task-data cache, reused across runs of one driver.

    ``begin`` hands it a run's context (catalog, warehouse, run id, options); ``embed`` / ``score`` then work in
    that run. A restarted actor (after a crash) gets ``begin`` again from the scheduler before new work.
    """

    def __init__(self, name: str, threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        import evalfarm.execute  # noqa: F401 - pay the imports now, not in the first unit

        self.name = name
        self.ctx: Any = None
        self._tasks: dict[tuple[str, str, Any], Any] = {}

    def info(self) -> WorkerInfo:
        import ray

        return WorkerInfo(
            self.name, node=ray.get_runtime_context().get_node_id(), host=platform.node(), pid=os.getpid()
        )

    def begin(self, catalog: Any, warehouse: str, run_id: str, options: Any, force: bool) -> WorkerInfo:
        from evalfarm.execute import ExecContext
        from evalfarm.pools.data import task_checksum
        from evalfarm.warehouse import Warehouse

        self.ctx = ExecContext(
            catalog=catalog,
            warehouse=Warehouse(warehouse),
            run_id=run_id,
            options=options,
            force=force,
            record_failures=False,
        )
        for tid, spec in catalog.tasks.items():  # task data already loaded by an earlier run, same content
            key = (tid, task_checksum(spec), options)  # a run option may change a task's texts (load_for)
            if key in self._tasks:
                self.ctx._tasks[tid] = self._tasks[key]
        return self.info()

    def _keep_tasks(self) -> None:
        from evalfarm.pools.data import task_checksum

        for tid, data in self.ctx._tasks.items():
            self._tasks[(tid, task_checksum(self.ctx.catalog.task(tid)), self.ctx.options)] = data

    def _context(self) -> Any:
        if self.ctx is None:  # Ray restarted this actor after a crash; the scheduler re-sends begin() first
            raise RuntimeError(f"worker {self.name} restarted and has no run context yet")
        return self.ctx

    def embed(self, plan: Any) -> list[Any]:
        from evalfarm.execute import embed_model

        self._context()
        try:
            return embed_model(plan, self.ctx)
        finally:
            self._keep_tasks()

    def score(self, unit: Any) -> list[Any]:
        from evalfarm.execute import score_unit

        self._context()
        try:
            return [score_unit(unit, self.ctx)]
        finally:
            self._keep_tasks()


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


def connect(address: str | None, *, num_cpus: int | None = None) -> bool:
    """Connect to ``address`` (``auto``, ``ray://…``, host:port), else ``RAY_ADDRESS``, else start a local Ray.

    Returns True when this call started or connected Ray (and the caller should shut it down). An already
    initialised Ray (a notebook, a test fixture) is used as is.

    A local Ray started here is closed to everyone else: token authentication (``RAY_AUTH_MODE=token``) with a
    token generated for this head, kept in a 0600 file in a private temporary folder (removed at exit), and
    every Ray server bound to 127.0.0.1. Ray binds loopback only in its single-node mode
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read once when Ray is imported); otherwise it rewrites 127.0.0.1
    to the host's routable address and its GCS, raylet and agents (whose job API runs shell commands) listen
    there. Setting the mode explicitly also keeps Ray from warning about token authentication on every run.

    On a cluster, the variables the workers need (``_FORWARD_ENV``) are forwarded through the job's runtime_env,
    except those the enclosing Ray job already sets: a driver started by ``ray job submit`` / a RayJob inherits
    the job's runtime_env, every task of the job gets it, and Ray refuses a ``ray.init`` runtime_env that sets
    the same keys again ("Failed to merge the Job's runtime env").
    """
    import json

    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "warning"}
    if address is None:
        import atexit
        import secrets
        import shutil
        import tempfile

        from ray._private import ray_constants
        from ray._raylet import AuthenticationTokenLoader, Config

        folder = tempfile.mkdtemp(prefix="evalfarm-ray-auth-")  # 0700
        atexit.register(shutil.rmtree, folder, True)  # registered before ray.init: runs after Ray's own shutdown
        token = os.path.join(folder, "auth_token")
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
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
                object_store_memory=256 * 1024 * 1024,
                **common,
            )
        finally:  # the servers are bound now; later connections of this process resolve addresses as before
            ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
            if was is None:
                os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
            else:
                os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = was
    else:
        env = {k: os.environ[k] for k in _FORWARD_ENV if os.environ.get(k)}
        job = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")  # set by Ray for the driver of a submitted job
        if job:
            in_job = (json.loads(job).get("runtime_env") or {}).get("env_vars") or {}
            env = {k: v for k, v in env.items() if k not in in_job}
        try:
            ray.init(address=address, runtime_env={"env_vars": env} if env else None, **common)
        except ConnectionError as exc:
            raise ConnectionError(
                f"cannot reach the Ray cluster at {address!r}: {exc}. Start one (`ray start --head`), pass "
                "--address auto / ray://host:10001, or leave --address out to run on a local Ray"
            ) from exc
    return True


def worker_resources(
    cluster: dict[str, float], workers: int | None, *, small_models: bool, gpus_per_worker: float | None = None
) -> tuple[int, float, float]:
    """(workers, CPUs per worker, GPUs per worker) for a cluster's resources.

    Default: one worker per GPU — two per GPU (0.5 each) when every model is a small lookup model, where one
    model alone would leave the GPU idle — else one per CPU slot. CPUs are split evenly so that torch in each
    worker gets its share of threads (1 worker on 2 CPUs scores with 2 threads, like the in-process loop).
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
    cpw = max(0.01, math.floor(cpus / n * 100) / 100)  # floor: n workers must fit
    return n, cpw, gpw


class RayBackend:
    """Creates the worker actors and runs scheduler tasks on them."""

    def __init__(
        self,
        *,
        catalog: Any,
        warehouse: str,
        run_id: str,
        options: Any,
        force: bool,
        address: str | None = None,
        workers: int | None = None,
        small_models: bool = False,
        max_restarts: int = 4,
    ) -> None:
        self.args = (catalog, warehouse, run_id, options, force)
        self.address = address
        self.n_workers = workers
        self.small_models = small_models
        self.max_restarts = max_restarts
        self.actors: dict[str, Any] = {}
        self.owns_ray = False
        self.resources: tuple[int, float, float] = (0, 0.0, 0.0)

    def start(self) -> list[tuple[str, Any]]:
        import ray

        self.owns_ray = connect(self.address)
        n, cpw, gpw = worker_resources(ray.cluster_resources(), self.n_workers, small_models=self.small_models)
        self.resources = (n, cpw, gpw)
        key = (ray.get_runtime_context().get_job_id(), n, cpw, gpw)
        if key not in _WARM:
            if not self.owns_ray:
                shutdown_workers()  # other shapes: free their CPUs/GPUs for this run's workers
            cls = ray.remote(EvalWorker).options(
                num_cpus=cpw,
                num_gpus=gpw,
                max_restarts=self.max_restarts,
                max_task_retries=0,
            )
            _WARM[key] = {f"w{i}": cls.remote(f"w{i}", max(1, int(cpw))) for i in range(n)}
        self.actors = _WARM[key]
        return [(name, actor.begin.remote(*self.args)) for name, actor in self.actors.items()]

    def submit(self, worker: str, task: Task) -> Any:
        actor = self.actors[worker]
        if task.stage == "embed":
            return actor.embed.remote(task.plan)
        return actor.score.remote(task.unit)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        import ray

        ready, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def result(self, handle: Any) -> Any:
        import ray
        from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

        try:
            return ray.get(handle)
        except (RayActorError, WorkerCrashedError) as exc:
            raise WorkerLost(type(exc).__name__ + ": " + str(exc).strip().splitlines()[0][:300]) from exc
        except RayTaskError as exc:
            # A bug in our task code (embed_model/score_unit never raise for model failures): fail the attempt.
            raise WorkerLost(f"task raised {type(exc.cause).__name__}: {exc.cause}") from exc

    def revive(self, worker: str) -> Any | None:
        """A handle that resolves once Ray has restarted the worker and it has this run's context again."""
        return self.actors[worker].begin.remote(*self.args)

    def close(self) -> None:
        """Keep the warm actors for the next run of this driver, unless this run started Ray itself."""
        import ray

        if self.owns_ray and ray.is_initialized():
            shutdown_workers()
            ray.shutdown()
