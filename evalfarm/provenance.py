"""Provenance of a run: which evalfarm, which libraries, which machine, which Ray job, which catalog as given.

A metric is only as trustworthy as what can be said about how it was produced, so every run records this next to
its results (the ``runs`` table). Collecting it must never fail a run: every probe (git, nvidia-smi, package
metadata, Ray's job context) degrades to ``None`` when its tool or file is missing.

torch is never imported here unless the run already imported it or asked for a GPU device: importing it costs
seconds and hundreds of MB in a run that evaluates only word vectors. GPUs are listed with ``nvidia-smi`` (no
import) when it is on the PATH.

Python API::

    from evalfarm.provenance import run_provenance
    prov = run_provenance("zoo-starter", loaded=catalog, models=["glove-6b-50d"], device=None)
    json.dumps(prov)  # plain JSON types only
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

PACKAGES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "tokenizers",
    "ray",
    "duckdb",
    "numpy",
    "pyarrow",
    "scipy",
    "onnxruntime",
    "onnxruntime-gpu",
    "faiss-cpu",
    "faiss-gpu-cu12",
    "faiss-gpu",
    "gensim",
    "spacy",
)
"""Distributions whose versions change the numbers or the speed of a run (absent ones are left out)."""

CATALOG_AS_GIVEN_ENV = "EVALFARM_CATALOG_AS_GIVEN"
"""``<catalog file name>=<catalog as the user gave it>``: set by ``evalfarm submit`` on its job, whose catalog is a
generated file in a temporary ``runtime_resources`` folder; a run whose ``--catalog`` has that file name records
the user's catalog instead. Any other run ignores it."""

RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""What Ray's job supervisor hands a job's entrypoint: JSON with the job's runtime_env and metadata, whose
``job_submission_id`` is the id ``ray job submit`` / ``evalfarm submit`` printed."""

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_TIMEOUT_S = 5.0
_SMI_TIMEOUT_S = 10.0


# -- evalfarm itself ------------------------------------------------------------------------------------------


def evalfarm_info() -> dict[str, Any]:
    """Version, and the git commit when known: from the checkout evalfarm runs from, else from the install's
    PEP 610 record (``pip install git+https://…@<rev>`` stores the commit it installed)."""
    from evalfarm._resources import source_checkout
    from evalfarm._version import __version__

    info: dict[str, Any] = {"version": __version__, "commit": None, "dirty": None, "installed_from": None}
    root = source_checkout()
    if root is not None:
        info["installed_from"] = str(root)
        commit = _git(root, "rev-parse", "HEAD")
        if commit and _COMMIT.match(commit):
            info["commit"] = commit
            status = _git(root, "status", "--porcelain", "--untracked-files=no")
            info["dirty"] = None if status is None else bool(status)
        return info
    direct = _direct_url()
    if direct:
        info["installed_from"] = direct.get("url")
        commit = (direct.get("vcs_info") or {}).get("commit_id")
        if isinstance(commit, str) and _COMMIT.match(commit):
            info["commit"] = commit
    return info


def _git(root: Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        proc = subprocess.run(
            [git, "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # a read must not take the index lock
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _direct_url() -> dict[str, Any] | None:
    try:
        text = importlib.metadata.distribution("evalfarm").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        data = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


_SKIP = object()


def package_versions(names: Iterable[str] = PACKAGES, *, missing: Any = _SKIP) -> dict[str, Any]:
    """Installed versions of the named distributions, from their metadata (nothing is imported): the one place
    evalfarm reads library versions (run provenance, encoder provenance, the zoo's training fingerprints).
    A distribution that is not installed is left out, or mapped to ``missing`` when given."""
    out: dict[str, Any] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if missing is not _SKIP:
                out[name] = missing
    return out


# -- the machine ----------------------------------------------------------------------------------------------


def thread_counts() -> dict[str, int]:
    """The thread pools this process scores with, by library API (``blas``, ``openmp``; ``torch`` once torch is
    loaded): a threaded reduction's float rounding can depend on them (issue 23.5), so each unit's ``units`` row
    records them. A kernel that pins its own count says so (EvalRank's rank kernel: one BLAS thread for its GEMM;
    post-processing's fit and apply: one BLAS thread; downstream's classifier: ``evalfarm.classify``'s per-worker
    limit)."""
    from threadpoolctl import threadpool_info

    out: dict[str, int] = {}
    for pool in threadpool_info():
        api = str(pool.get("user_api") or pool.get("internal_api") or "other")
        out[api] = max(out.get(api, 0), int(pool.get("num_threads") or 0))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        out["torch"] = int(torch.get_num_threads())
    return dict(sorted(out.items()))


def cpu_model() -> str | None:
    """The CPU's marketing name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        index, name, driver, memory = parts
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "driver": driver,
                "memory_mib": int(float(memory)) if re.fullmatch(r"[0-9.]+", memory) else None,
            }
        )
    return gpus


def nvidia_gpus() -> list[dict[str, Any]] | None:
    """The GPUs ``nvidia-smi`` lists (name, driver, memory); ``None`` where it is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else None


def device_info(device: str | None = None) -> dict[str, Any]:
    """CPU model and count; GPUs from nvidia-smi; torch's CUDA view only where torch is already loaded or a
    ``cuda`` device was asked for (``device``), so a CPU-only run does not pay for importing torch."""
    info: dict[str, Any] = {
        "requested": device,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": nvidia_gpus(),
    }
    wants_gpu = device is not None and device.startswith("cuda")
    if "torch" in sys.modules or wants_gpu:
        info["torch_cuda"] = _torch_cuda()
    return info


def process_device(device: str | None = None) -> dict[str, Any]:
    """:func:`device_info` of this process, probed once (per requested device, and once more after torch is
    loaded): what a worker records for the models it embeds and the run it serves (``nvidia-smi`` is not rerun
    for every model)."""
    return _process_device(device, "torch" in sys.modules)


@functools.cache
def _process_device(device: str | None, torch_loaded: bool) -> dict[str, Any]:
    return device_info(device)


def _torch_cuda() -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    try:
        available = bool(torch.cuda.is_available())
        out: dict[str, Any] = {"available": available, "cuda": torch.version.cuda, "devices": []}
        if available:
            out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return out
    except Exception as exc:  # a broken driver must not fail the run: record what went wrong
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "executable": sys.executable,
    }


# -- Ray ------------------------------------------------------------------------------------------------------


def ray_job_info() -> dict[str, Any] | None:
    """The Ray job this process runs in: the submission id (when started by the job API, from the config Ray's
    supervisor hands the entrypoint), the submitter's ``evalfarm.*`` metadata, and the driver's job id when Ray
    is already initialised here. ``None`` outside Ray."""
    out: dict[str, Any] = {}
    raw = os.environ.get(RAY_JOB_CONFIG_ENV)
    if raw:
        try:
            config = json.loads(raw)
        except json.JSONDecodeError:
            config = {}
        metadata = config.get("metadata") if isinstance(config, dict) else None
        if isinstance(metadata, dict):
            if metadata.get("job_submission_id"):
                out["submission_id"] = str(metadata["job_submission_id"])
            ours = {k: str(v) for k, v in metadata.items() if str(k).startswith("evalfarm.")}
            if ours:
                out["metadata"] = ours
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                ctx = ray.get_runtime_context()
                out["job_id"] = ctx.get_job_id()
                out["node_id"] = ctx.get_node_id()
        except Exception:  # a runtime context that is shutting down: the submission id above still stands
            pass
    return out or None


# -- the catalog ----------------------------------------------------------------------------------------------


def catalog_as_given(catalog: str | os.PathLike[str] | None) -> str | None:
    """The catalog as the user named it: ``catalog`` itself, or what ``evalfarm submit`` recorded for the
    generated file a submitted job reads (:data:`CATALOG_AS_GIVEN_ENV`)."""
    if catalog is None:
        return None
    given = os.fspath(catalog)
    name, sep, original = os.environ.get(CATALOG_AS_GIVEN_ENV, "").partition("=")
    if sep and name and original and Path(given).name == name:
        return original
    return given


class _SourceRef(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def ref(self) -> str: ...


class _LineageSpec(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def source(self) -> _SourceRef | None: ...
    def sources(self) -> Sequence[tuple[str, _SourceRef]]: ...
    @property
    def revision(self) -> str | None: ...


class CatalogLike(Protocol):
    """What provenance reads of a loaded catalog (:class:`evalfarm.catalog.registry.Catalog` is one): a Protocol, so
    this low layer needs no import of the catalog layer above it, not even for its annotations."""

    @property
    def path(self) -> Path: ...
    @property
    def models(self) -> Mapping[str, Any]: ...
    def lineage(self, model_id: str) -> Sequence[_LineageSpec]: ...


def unpinned_revisions(catalog: CatalogLike, models: Iterable[str] | None = None) -> list[dict[str, str | None]]:
    """Hugging Face hub sources in the models' lineages without a pinned revision (a 40-hex commit hash).

    A hub id without one loads whatever the repository's default branch holds that day, so the same spec can
    give other numbers tomorrow (and run other remote code, with ``trust_remote_code``). One entry per model and
    source: ``model`` (the model evaluated), ``spec`` (the lineage entry holding the source), ``ref``,
    ``revision`` and ``message``.
    """
    ids = list(catalog.models) if models is None else list(models)
    out: list[dict[str, str | None]] = []
    for model in ids:
        for spec in catalog.lineage(model):
            for role, src in spec.sources():
                if src.type != "hf":
                    continue
                rev = spec.revision
                if rev is not None and _COMMIT.match(rev):
                    continue
                if rev is None:
                    why = "has no pinned revision"
                else:
                    why = f"is at revision {rev!r}, a branch, tag or short hash that can move"
                where = f"its base {spec.id!r}" if spec.id != model else "it"
                out.append(
                    {
                        "model": model,
                        "spec": spec.id,
                        "role": role,
                        "ref": src.ref,
                        "revision": rev,
                        "message": (
                            f"model {model!r}: {where} loads hf:{src.ref} ({role}), which {why}: the weights (and "
                            "any remote code) can change under the same spec; set `revision:` to a 40-character "
                            "commit hash"
                        ),
                    }
                )
    return out


# -- all of it ------------------------------------------------------------------------------------------------


def run_provenance(
    catalog: str | os.PathLike[str] | None = None,
    *,
    loaded: CatalogLike | None = None,
    models: Iterable[str] | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Everything worth recording about a run, as plain JSON types.

    ``catalog``: the ``--catalog`` argument as passed; ``loaded``: the catalog it loaded (adds its resolved path
    and the unpinned hub revisions of ``models``, all its models when ``None``); ``device``: the requested torch
    device (``cuda…`` lets torch be imported to name the GPU).
    """
    prov: dict[str, Any] = {
        "evalfarm": evalfarm_info(),
        "packages": package_versions(),
        "host": host_info(),
        "device": device_info(device),
        "ray_job": ray_job_info(),
        "catalog": {
            "given": catalog_as_given(catalog),
            "path": str(loaded.path) if loaded is not None else None,
        },
    }
    prov["unpinned_revisions"] = (
        [{k: v for k, v in u.items() if k != "message"} for u in unpinned_revisions(loaded, models)]
        if loaded is not None
        else []
    )
    return prov
