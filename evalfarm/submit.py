"""Submit one new model to a Ray cluster as a Ray job: validate locally, show the plan, then run it remotely.

Everything is checked on the submitting machine first (a typo should cost seconds, not a cluster slot). The job
gets a self-contained catalog (the new models, their bases, the tasks' full definitions) in its ``working_dir``,
so nothing depends on the head node's ``catalog/`` folder or on the evalfarm version installed there having the
same zoo. The entrypoint is a plain ``evalfarm run`` command, so what the cluster runs is what a user could run
by hand (``ray job submit --working-dir DIR -- evalfarm run --catalog ... --models ...``).

What the job sees of the submitting machine is explicit and printed: the data folder this machine resolved (its
``EVALFARM_DATA``, else the config file's ``data``) is sent as the job's ``EVALFARM_DATA`` by default, since a job
without one cannot read its tasks (``--no-forward-data`` leaves the cluster's own; ``--env EVALFARM_DATA=...`` sends
another); the cache folder is never sent; ``--env KEY=VALUE`` passes what else the job should get, and
``--runtime-env FILE`` adds any Ray runtime_env (pip, uv, conda, a container image). Models that run remote code
(``trust_remote_code``) are submitted only with an explicit confirmation (``--trust-remote-code``).

Python API::

    plan = plan_submission("new-model.yaml", warehouse="/mnt/shared/warehouse", trust_remote_code=False)
    print(render_plan(plan))
    job_id = submit_plan(plan, "http://127.0.0.1:8265")
    status = follow_job("http://127.0.0.1:8265", job_id)
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from evalfarm.catalog.registry import Catalog, CatalogError, Lineage, lineage_of, load_catalog, with_derived
from evalfarm.catalog.specs import LINEAGE, ModelSpec, Source, TaskSpec, slug
from evalfarm.environment import SUBMIT_ENV, forwarded
from evalfarm.plugins import task_spec_adapter as _task_adapter

DATA_ENV = "EVALFARM_DATA"
FORWARDED_ENV = SUBMIT_ENV  # modes only, never a path (see evalfarm.environment)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
ADDRESS_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
"""Where the job API address comes from when none is given, in the order ``ray job submit`` reads them."""
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
SUBMIT_CATALOG_ENV = "EVALFARM_SUBMIT_CATALOG"
"""The job's catalog, inline, where the runtime_env cannot carry a working_dir (a container image)."""
_INLINE_LIMIT = 100_000  # bytes: one environment string may hold at most 128 KiB on Linux
_IMAGE_KEYS = ("image_uri", "container")  # runtime_env fields that Ray allows only with env_vars / config


def default_address() -> str:
    """The job API address to use when none is given: ``RAY_API_SERVER_ADDRESS``, ``RAY_ADDRESS``, else local."""
    return next((os.environ[k] for k in ADDRESS_ENV if os.environ.get(k)), DEFAULT_ADDRESS)


class SubmitError(ValueError):
    """A submission that cannot go ahead: the message names the file / entry and the fix."""


@dataclass
class SubmitPlan:
    """Everything a submission will do, computed locally before anything reaches the cluster."""

    spec_path: Path
    base_catalog: str
    model_ids: list[str]
    catalog: Catalog  # the merged catalog, loaded back from the file the job will read
    catalog_file: Path  # inside ``workdir``
    workdir: Path  # the job folder: the runtime_env's working_dir (unless the catalog travels inline)
    warehouse: str
    entrypoint: str
    runtime_env: dict[str, Any]
    submission_id: str
    metadata: dict[str, str]
    remote_code: list[str] = field(default_factory=list)  # model ids whose lineage sets trust_remote_code
    remote_code_confirmed: bool = False  # the submitter said --trust-remote-code
    unpinned: list[dict[str, str | None]] = field(default_factory=list)  # hub sources without a commit hash
    requirements: list[str] = field(default_factory=list)  # pip requirements named by the models' sources
    warnings: list[str] = field(default_factory=list)
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    inline_catalog: bool = False  # the catalog is in the env (SUBMIT_CATALOG_ENV), there is no working_dir
    forwarded_data: str | None = None  # this machine's data folder, sent as the job's EVALFARM_DATA (None: not sent)
    keep_workdir: bool = False  # the folder is the user's (--out): ``cleanup()`` leaves it

    def cleanup(self) -> None:
        """Remove the temporary job folder (never an ``--out`` folder)."""
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


# -- the spec file ------------------------------------------------------------------------------------------


def _entry_name(raw: Any, index: int, key: str = "models") -> str:
    ident = raw.get("id") if isinstance(raw, dict) else None
    return f"{key}[{index}]" + (f" (id {ident!r})" if ident else "")


def _validation_messages(path: Path, where: str, exc: ValidationError) -> list[str]:
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msgs.append(f"{path}: {where}{'.' + loc if loc else ''}: {err['msg']}")
    return msgs


def load_spec_file(
    path: str | os.PathLike[str], base: Catalog | None = None
) -> tuple[list[ModelSpec], list[TaskSpec | str]]:
    """The models (and optional tasks) of a submit spec: one model mapping, a list of them, or ``models:``. With
    the ``base`` catalog, an entry deriving from one of its models may set options of that model's kind."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise SubmitError(f"model spec not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SubmitError(f"{path}: not valid YAML: {exc}") from exc
    entries, raw_tasks = _spec_entries(path, raw)
    if isinstance(raw, dict) and "models" in raw and raw.get("pools"):
        from evalfarm.catalog.registry import warn_pools_key

        warn_pools_key(path)  # here, so that the warning names the caller of load_spec_file
    if not entries:
        raise SubmitError(f"{path}: no model entries")
    errors: list[str] = []
    lineage = lineage_of(base.models.values() if base is not None else (), entries)
    models = _validate_models(path, entries, errors, lineage)
    tasks = _validate_tasks(path, raw_tasks, errors)
    if errors:
        raise SubmitError("\n".join(errors))
    ids = [m.id for m in models]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SubmitError(f"{path}: model id(s) {dupes} appear more than once")
    return models, tasks


def _spec_entries(path: Path, raw: Any) -> tuple[list[Any], list[Any]]:
    """(the model entries, the task entries) of a parsed spec file, whichever of its three shapes it has."""
    raw_tasks: list[Any] = []
    if isinstance(raw, dict) and "models" in raw:
        extra = set(raw) - {"name", "description", "models", "tasks", "pools"}
        if extra:
            raise SubmitError(
                f"{path}: unsupported key(s) {sorted(extra)} in a submit spec "
                "(allowed: name, description, models, tasks; choose the base catalog with --catalog)"
            )
        entries, raw_tasks = raw.get("models") or [], raw.get("tasks") or raw.get("pools") or []
    elif isinstance(raw, dict):
        entries = [raw]
    elif isinstance(raw, list):
        entries = raw
    else:
        raise SubmitError(f"{path}: expected a model mapping (id, level, kind, ...), a list of them, or 'models:'")
    return entries, raw_tasks


def _validate_models(path: Path, entries: list[Any], errors: list[str], lineage: Lineage) -> list[ModelSpec]:
    """The valid model entries; every invalid one adds its messages to ``errors`` (all are reported at once)."""
    models: list[ModelSpec] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append(f"{path}: models[{i}]: a model entry is a mapping, got {type(entry).__name__}")
            continue
        try:
            models.append(ModelSpec.model_validate(entry, context={LINEAGE: lineage}))
        except ValidationError as exc:
            errors.extend(_validation_messages(path, _entry_name(entry, i), exc))
    return models


def _validate_tasks(path: Path, raw_tasks: list[Any], errors: list[str]) -> list[TaskSpec | str]:
    """Task ids (of the base catalog) as given, task definitions validated; messages go to ``errors``."""
    tasks: list[TaskSpec | str] = []
    for i, entry in enumerate(raw_tasks):
        if isinstance(entry, str):
            tasks.append(entry)
            continue
        try:
            tasks.append(_task_adapter().validate_python(entry))
        except ValidationError as exc:
            errors.extend(_validation_messages(path, _entry_name(entry, i, "tasks"), exc))
    return tasks


# -- merging with the base catalog --------------------------------------------------------------------------


def _absolute_source(src: Source, base_dir: Path) -> Source:
    if src.type != "path" or Path(src.ref).expanduser().is_absolute():
        return src
    return src.model_copy(update={"ref": str((base_dir / src.ref).resolve())})


def _with_absolute_paths(spec: ModelSpec, base_dir: Path) -> ModelSpec:
    """Relative ``path`` sources (the model's and those its kind's options name) resolve against the file they came
    from, not the job's working_dir."""
    return spec.map_sources(lambda src: _absolute_source(src, base_dir))


def _dump(spec: ModelSpec | TaskSpec) -> dict[str, Any]:
    out = spec.model_dump(mode="json", exclude_defaults=True)
    if isinstance(spec, TaskSpec):  # a task's kind is its union tag: always written
        out = {"id": out.pop("id"), "kind": spec.kind, **out}
    return out


def merge_catalog(
    spec_path: Path, models: list[ModelSpec], tasks: list[TaskSpec | str], base: Catalog
) -> tuple[dict[str, Any], list[str]]:
    """A self-contained catalog document: the new models, their bases from ``base``, the tasks in full.

    The merge and its checks (bases exist, no cycles, levels) are the registry's (:meth:`Catalog.with_models`).
    """
    new = [_with_absolute_paths(m, spec_path.parent.resolve()) for m in models]
    for m in new:
        if m.id in base.models and _dump(_with_absolute_paths(base.models[m.id], base.path.parent)) != _dump(m):
            raise SubmitError(
                f"{spec_path}: model id {m.id!r} already exists in base catalog {base.name!r} with a different "
                "spec; give the new model its own id (ids key the warehouse's results)"
            )
    try:
        merged = base.with_models(new, source=spec_path)
    except CatalogError as exc:
        raise SubmitError(
            f"{exc}; fix the id (`evalfarm catalog list --catalog {base.name}` lists the base catalog's models) or "
            "pick another base catalog with --catalog"
        ) from None
    wanted: dict[str, ModelSpec] = {}
    for m in new:  # the new models and their lineages, bases first
        for spec in reversed(merged.lineage(m.id)):
            from_base = spec.id in base.models and spec.id not in {n.id for n in new}
            wanted.setdefault(spec.id, _with_absolute_paths(spec, base.path.parent) if from_base else spec)
    task_docs: list[dict[str, Any]] = []
    for p in tasks or list(base.default_tasks):
        if isinstance(p, TaskSpec):
            task_docs.append(_dump(p))
        elif p in base.tasks:
            task_docs.append(_dump(base.tasks[p]))
        else:
            raise SubmitError(
                f"{spec_path}: task {p!r} is not defined in base catalog {base.name!r} "
                f"(known: {', '.join(sorted(base.tasks))})"
            )
    first = models[0].id
    doc = {
        "name": f"submit-{first}",
        "description": f"Generated by `evalfarm submit {spec_path.name}` over base catalog {base.name!r}.",
        "tasks": task_docs,
        "models": [_dump(s) for s in wanted.values()],
    }
    # the models a new model's `dims` / `precisions` derive run with it (the job's catalog derives them again)
    return doc, [m.id for m in with_derived(spec_path, models)]


# -- the entrypoint and runtime_env -------------------------------------------------------------------------


def run_command_options() -> set[str]:
    """The ``evalfarm run`` options :func:`build_entrypoint` may use (this version's ``run`` has them all)."""
    return {"--catalog", "--models", "--warehouse", "--address"}


def build_entrypoint(catalog_file: str, model_ids: Iterable[str], warehouse: str, options: set[str]) -> str:
    args = ["evalfarm", "run", "--catalog", catalog_file, "--models", ",".join(model_ids), "--warehouse", warehouse]
    if "--address" in options:  # run the units as Ray tasks on the cluster the job lives on
        args += ["--address", "auto"]
    return shlex.join(args)


def inline_entrypoint(catalog_name: str, run_command: str) -> str:
    """A shell entrypoint that writes the catalog from :data:`SUBMIT_CATALOG_ENV` into a fresh folder and runs
    there: for runtime_envs without a working_dir (Ray allows none beside ``image_uri`` / ``container``)."""
    target = shlex.quote(catalog_name)
    return (
        f'd="$(mktemp -d)" && trap \'rm -rf "$d"\' EXIT && printf \'%s\' "${SUBMIT_CATALOG_ENV}" > "$d"/{target} '
        f'&& cd "$d" && {run_command}'
    )


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SubmitError(f"--env {pair!r}: expected KEY=VALUE (e.g. --env EVALFARM_DATA=/mnt/data)")
        out[key] = value
    return out


_PATH_KEYS = ("pip", "uv", "conda")  # a string here may name a requirements / environment file


def _is_uri(text: str) -> bool:
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text))


def load_runtime_env(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A Ray runtime_env from a YAML or JSON file; relative file paths in it resolve against the file's folder."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise SubmitError(f"--runtime-env: file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SubmitError(f"{path}: not valid YAML / JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SubmitError(f"{path}: a runtime_env is a mapping (pip, uv, conda, image_uri, env_vars, ...)")
    if "working_dir" in raw:
        raise SubmitError(
            f"{path}: working_dir is evalfarm submit's (it carries the job's catalog); ship your code with "
            "py_modules, pip or an image instead"
        )
    base = path.parent.resolve()
    env = dict(raw)
    for key in _PATH_KEYS:
        val = env.get(key)
        if isinstance(val, str) and val.endswith((".txt", ".yml", ".yaml")) and not Path(val).is_absolute():
            if (base / val).is_file():
                env[key] = str(base / val)
    if isinstance(env.get("py_modules"), list):
        env["py_modules"] = [
            str(base / m) if isinstance(m, str) and not _is_uri(m) and (base / m).exists() else m
            for m in env["py_modules"]
        ]
    return env


def merge_runtime_env(
    built: dict[str, Any], user: dict[str, Any] | None, pip: list[str] | None, env: dict[str, str] | None
) -> dict[str, Any]:
    """What the job runs with: ``built`` (working_dir, forwarded env) < the ``--runtime-env`` file < ``--pip`` /
    ``--env``. ``env_vars`` merge key by key; ``--pip`` extends the file's pip list."""
    out = dict(built)
    user = dict(user or {})
    env_vars = {**built.get("env_vars", {}), **(user.pop("env_vars", None) or {}), **(env or {})}
    out.update(user)
    if pip:
        have = out.get("pip")
        if have is None:
            out["pip"] = list(pip)
        elif isinstance(have, list):
            out["pip"] = [*have, *pip]
        elif isinstance(have, dict) and isinstance(have.get("packages"), list):
            out["pip"] = {**have, "packages": [*have["packages"], *pip]}
        else:
            raise SubmitError(
                f"--pip {' '.join(pip)}: the --runtime-env file's pip is {have!r}; list the packages in one place"
            )
    if env_vars:
        out["env_vars"] = env_vars
    else:
        out.pop("env_vars", None)
    return out


def validate_runtime_env(runtime_env: dict[str, Any], source: str) -> None:
    """Ray's own checks (conflicting fields, types), run here so a bad runtime_env fails before submission."""
    from ray.runtime_env import RuntimeEnv

    try:
        RuntimeEnv(**runtime_env)
    except (TypeError, ValueError) as exc:
        raise SubmitError(f"{source}: Ray refuses this runtime_env: {exc}") from None


def _warehouse_arg(warehouse: str, warnings: list[str]) -> str:
    """URIs (``s3://``, ``gs://``) pass through; local paths become absolute (the job runs in a temp dir)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", warehouse):
        if not warehouse.startswith("file://"):
            warnings.append(
                f"warehouse {warehouse!r}: every node needs credentials for it (instance role, IRSA, env vars)"
            )
        return warehouse
    p = Path(warehouse).expanduser()
    if not p.is_absolute():
        p = p.resolve()
        warnings.append(
            f"warehouse {warehouse!r} is relative: using {p}; the job runs in a temporary working_dir, so the "
            "warehouse must be an absolute path that every node sees (shared storage)"
        )
    return str(p)


def _prepare_out(out: Path) -> Path:
    """An ``--out`` folder: new, empty, or holding only an earlier submit's catalog (the whole folder is uploaded)."""
    out = out.expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise SubmitError(f"--out {out}: exists and is not a folder")
    if out.is_dir():
        other = [p.name for p in out.iterdir() if not (p.is_file() and re.fullmatch(r"submit-.*\.yaml", p.name))]
        if other:
            raise SubmitError(
                f"--out {out}: the folder holds {sorted(other)[:5]}; it becomes the job's working_dir and is "
                "uploaded whole, so give an empty or new folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    return out


def _load_submission(
    spec_path: Path, catalog: str, tasks: list[str] | None
) -> tuple[Catalog, dict[str, Any], list[str]]:
    """The base catalog, the merged catalog document and the submitted model ids of the spec at ``spec_path``;
    ``tasks`` (--tasks): ids of the base catalog (or of the spec's own tasks), instead of the spec's / the
    catalog's."""
    try:
        base = load_catalog(catalog)
    except CatalogError as exc:
        raise SubmitError(f"base catalog: {exc}") from None
    models, spec_tasks = load_spec_file(spec_path, base)
    if tasks:
        own = {t.id: t for t in spec_tasks if isinstance(t, TaskSpec)}
        spec_tasks = [own.get(t, t) for t in tasks]
    doc, model_ids = merge_catalog(spec_path, models, spec_tasks, base)
    return base, doc, model_ids


def _check_every_model_has_tasks(merged: Catalog, model_ids: list[str], spec_path: Path, base_name: str) -> None:
    """Refuse a submission with a model no task of which is of its level: the job would compute nothing for it."""
    idle = [f"{m} ({merged.model(m).level})" for m in model_ids if not merged.tasks_for(m)]
    if idle:
        raise SubmitError(
            f"{spec_path}: no task of the submission is of the level of {', '.join(idle)}: the job would "
            f"compute nothing; pick tasks of that level (--tasks; `evalfarm catalog list --catalog {base_name}` "
            "shows each model's tasks)"
        )


# long: its signature is the submission's options; its result a 21-field SubmitPlan
def plan_submission(
    spec: str | os.PathLike[str],
    *,
    warehouse: str,
    catalog: str = "zoo-starter",
    env: dict[str, str] | None = None,
    pip: list[str] | None = None,
    runtime_env: dict[str, Any] | None = None,
    runtime_env_source: str = "--runtime-env",
    submission_id: str | None = None,
    run_options: set[str] | None = None,
    trust_remote_code: bool = False,
    entrypoint_num_cpus: float | None = None,
    entrypoint_num_gpus: float | None = None,
    out: str | os.PathLike[str] | None = None,
    inline_catalog: bool | None = None,
    data: str | None = None,
    tasks: list[str] | None = None,
) -> SubmitPlan:
    """Validate the spec against the base catalog and compute the job: entrypoint, runtime_env, metadata.

    ``data``: this machine's data folder, sent as the job's ``EVALFARM_DATA`` unless ``env`` or the runtime_env
    sets one (None or empty: nothing sent; the job uses the cluster's). The plan records what it sent.

    ``runtime_env``: a Ray runtime_env merged into the job's (see :func:`merge_runtime_env`); ``trust_remote_code``:
    the submitter's confirmation that remote code may run (:func:`submit_plan` refuses models that need it
    otherwise); ``out``: write the job folder there and keep it (else a temporary folder); ``inline_catalog``:
    carry the catalog in the environment instead of a working_dir (default: when the runtime_env names a
    container image, where Ray allows no working_dir).
    """
    spec_path = Path(spec).expanduser().resolve()
    base, doc, model_ids = _load_submission(spec_path, catalog, tasks)
    user_env = dict(runtime_env or {})
    inline = any(k in user_env for k in _IMAGE_KEYS) if inline_catalog is None else inline_catalog

    workdir = _prepare_out(Path(out)) if out is not None else Path(tempfile.mkdtemp(prefix="evalfarm-submit-"))
    try:
        catalog_file, catalog_text, merged = _write_job_catalog(workdir, doc, spec_path)
        _check_every_model_has_tasks(merged, model_ids, spec_path, base.name)
        review = _review_models(merged, model_ids, trust_remote_code)
        wh = _warehouse_arg(warehouse, review.warnings)
        options = run_command_options() if run_options is None else run_options
        run_cmd = build_entrypoint(catalog_file.name, model_ids, wh, options)
        entrypoint = inline_entrypoint(catalog_file.name, run_cmd) if inline else run_cmd
        job_env = _job_runtime_env(
            workdir if not inline else None,
            catalog_file.name,
            catalog_text,
            spec_path,
            catalog,
            user_env,
            pip,
            env,
            data or None,
        )
        validate_runtime_env(job_env, runtime_env_source)
        review.warnings += _data_source_warnings(merged, model_ids, job_env)
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        sub_id = submission_id or f"evalfarm-{slug(model_ids[0])[:48]}-{stamp}-{secrets.token_hex(3)}"
        metadata = _job_metadata(merged, model_ids, spec_path, base, catalog, wh, review)
    except BaseException:
        if out is None:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    return SubmitPlan(
        spec_path=spec_path,
        base_catalog=base.name,
        model_ids=model_ids,
        catalog=merged,
        catalog_file=catalog_file,
        workdir=workdir,
        warehouse=wh,
        entrypoint=entrypoint,
        runtime_env=job_env,
        submission_id=sub_id,
        metadata=metadata,
        remote_code=review.remote_code,
        remote_code_confirmed=trust_remote_code,
        unpinned=review.unpinned,
        requirements=review.requirements,
        warnings=review.warnings,
        entrypoint_num_cpus=entrypoint_num_cpus,
        entrypoint_num_gpus=entrypoint_num_gpus,
        inline_catalog=inline,
        forwarded_data=data if data and job_env["env_vars"].get(DATA_ENV) == data else None,
        keep_workdir=out is not None,
    )


def _write_job_catalog(workdir: Path, doc: dict[str, Any], spec_path: Path) -> tuple[Path, str, Catalog]:
    """Write the job's catalog into ``workdir`` and load it back: the same checks the job will do (schema,
    references, levels) fail here, on the submitting machine."""
    catalog_file = workdir / f"{doc['name']}.yaml"
    header = "# Generated by `evalfarm submit`: self-contained (tasks in full), run with --catalog <this file>.\n"
    catalog_text = header + yaml.safe_dump(doc, sort_keys=False, width=118)
    catalog_file.write_text(catalog_text, encoding="utf-8")
    try:
        merged = load_catalog(catalog_file)
    except CatalogError as exc:
        raise SubmitError(f"{spec_path}: the merged catalog is invalid:\n{exc}") from None
    return catalog_file, catalog_text, merged


@dataclass
class _Review:
    """What the submitter must see about the models before they run remotely (see :class:`SubmitPlan`)."""

    remote_code: list[str]
    unpinned: list[dict[str, str | None]]
    requirements: list[str]
    warnings: list[str]


def _review_models(merged: Catalog, model_ids: list[str], trust_remote_code: bool) -> _Review:
    """Remote code, unpinned revisions, the packages the cluster needs, and local paths that every node must see
    (each warning once, in this order)."""
    from evalfarm.provenance import unpinned_revisions

    warnings: list[str] = []
    remote_code = [m for m in model_ids if any(s.trust_remote_code for s in merged.lineage(m))]
    for m in remote_code:
        warnings.append(
            f"model {m!r} sets trust_remote_code: true — the cluster will EXECUTE PYTHON CODE downloaded "
            "with the model; submit only if you trust its source and revision"
            + ("" if trust_remote_code else " (refused without --trust-remote-code)")
        )
    unpinned = unpinned_revisions(merged, model_ids)
    warnings += [str(u["message"]) for u in unpinned]
    requirements: list[str] = []
    for src, model in ((src, s.id) for m in model_ids for s in merged.lineage(m) for _, src in s.sources()):
        if src.type == "package" and src.requirement and src.requirement not in requirements:
            requirements.append(src.requirement)
        if src.type == "path":
            msg = f"model {model!r} reads {src.ref}: that path must exist on every node of the cluster"
            if msg not in warnings:
                warnings.append(msg)
    return _Review(remote_code, unpinned, requirements, warnings)


def _job_runtime_env(
    workdir: Path | None,
    catalog_name: str,
    catalog_text: str,
    spec_path: Path,
    catalog: str,
    user_env: dict[str, Any],
    pip: list[str] | None,
    env: dict[str, str] | None,
    data: str | None = None,
) -> dict[str, Any]:
    """The job's runtime_env: the working_dir (``None``: the catalog travels inline, in :data:`SUBMIT_CATALOG_ENV`),
    the forwarded modes and data folder, the user's runtime_env / ``--pip`` / ``--env`` (which win), then evalfarm's
    own plumbing variables."""
    from evalfarm.provenance import CATALOG_AS_GIVEN_ENV

    built_env = forwarded(SUBMIT_ENV) | ({DATA_ENV: data} if data else {})
    built: dict[str, Any] = {} if workdir is None else {"working_dir": str(workdir)}
    if built_env:
        built["env_vars"] = built_env
    job_env = merge_runtime_env(built, user_env, pip, env)
    plumbing = {CATALOG_AS_GIVEN_ENV: f"{catalog_name}={spec_path} (submitted over {catalog})"}
    if workdir is None:
        if len(catalog_text.encode()) > _INLINE_LIMIT:
            raise SubmitError(
                f"{spec_path}: the job's catalog is {len(catalog_text.encode())} bytes, too large to pass in "
                "the environment beside a container image; submit fewer models at once"
            )
        plumbing[SUBMIT_CATALOG_ENV] = catalog_text
    job_env["env_vars"] = {**job_env.get("env_vars", {}), **plumbing}
    return job_env


def _data_source_warnings(merged: Catalog, model_ids: list[str], job_env: dict[str, Any]) -> list[str]:
    """A model reading a ``data`` source uses the cluster's EVALFARM_DATA unless the job is given one."""
    data_models = [s.id for m in model_ids for s in merged.lineage(m) if s.source and s.source.type == "data"]
    if data_models and "EVALFARM_DATA" not in job_env["env_vars"]:
        return [
            f"model {data_models[0]!r} reads a 'data' source: the job uses the cluster's EVALFARM_DATA (set on "
            "its nodes); pass --env EVALFARM_DATA=/shared/data to choose another"
        ]
    return []


def _job_metadata(
    merged: Catalog, model_ids: list[str], spec_path: Path, base: Catalog, catalog: str, wh: str, review: _Review
) -> dict[str, str]:
    """The Ray job's metadata: what was submitted, over which catalog, into which warehouse, by whom."""
    from evalfarm._version import __version__

    tasks_used = sorted({t.id for m in model_ids for t in merged.tasks_for(m)})
    return {
        "evalfarm.version": __version__,
        "evalfarm.models": ",".join(model_ids),
        "evalfarm.spec_hashes": ",".join(f"{m}={merged.spec_hash(m)}" for m in model_ids),
        "evalfarm.tasks": ",".join(f"{p}@{merged.tasks[p].version}" for p in tasks_used),
        "evalfarm.spec_file": str(spec_path),
        "evalfarm.base_catalog": str(base.path),
        "evalfarm.catalog": catalog,
        "evalfarm.warehouse": wh,
        "evalfarm.trust_remote_code": ",".join(review.remote_code) or "none",
        "evalfarm.unpinned_revisions": ",".join(sorted({str(u["model"]) for u in review.unpinned})) or "none",
        "evalfarm.submitted_by": _user(),
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def _shown_env(plan: SubmitPlan) -> dict[str, str]:
    """The job's env_vars as shown to people: the inline catalog is printed separately, not as one huge line."""
    env = dict(plan.runtime_env.get("env_vars", {}))
    if SUBMIT_CATALOG_ENV in env:
        env[SUBMIT_CATALOG_ENV] = f"<{plan.catalog_file.name}, {len(env[SUBMIT_CATALOG_ENV])} characters>"
    return env


def render_plan(plan: SubmitPlan, address: str | None = None) -> str:
    """What will run, in words: models, sources, remote code, tasks, warehouse, the exact command and env."""
    cat = plan.catalog
    lines = [f"evalfarm submit {plan.spec_path} (base catalog {plan.base_catalog})"]
    if address:
        lines.append(f"  cluster      {address}")
    lines.append(f"  submission   {plan.submission_id}")
    for m in plan.model_ids:
        spec = cat.model(m)
        src = next((s.source for s in cat.lineage(m) if s.source), None)
        rev = next((s.revision for s in cat.lineage(m) if s.source), None)
        chain = " <- ".join(s.id for s in cat.lineage(m))
        trc = "off"
        if m in plan.remote_code:
            trc = "ON (remote code will run)" if plan.remote_code_confirmed else "ON: needs --trust-remote-code"
        where = f"{src.type}:{src.ref}" + (f" ({src.path})" if src.path else "") if src else "-"
        if src is not None and src.type == "hf":
            where += f" @ {rev}" if rev else " (revision not pinned)"
        lines += [
            f"  model        {m}  [{spec.level}, kind {cat.kind(m)}, spec {cat.spec_hash(m)}]",
            f"    lineage    {chain}",
            f"    source     {where}",
            f"    trust_remote_code  {trc}",
            f"    tasks      {', '.join(t.id for t in cat.tasks_for(m)) or '(none at this level!)'}",
        ]
    lines += [
        f"  warehouse    {plan.warehouse}",
        f"  entrypoint   {plan.entrypoint}",
    ]
    if plan.inline_catalog:
        lines.append(
            f"  catalog      {plan.catalog_file.name}, passed inline in {SUBMIT_CATALOG_ENV} (no working_dir)"
        )
    else:
        lines.append(f"  working_dir  {plan.workdir} ({plan.catalog_file.name}, uploaded with the job)")
    for k, v in _shown_env(plan).items():
        sent = k == DATA_ENV and plan.forwarded_data is not None
        why = "  (this machine's data folder; --no-forward-data: the cluster's own)" if sent else ""
        lines.append(f"  env          {k}={v}{why}")
    for k, v in plan.runtime_env.items():
        if k not in ("working_dir", "env_vars"):
            lines.append(f"  {k:<12} {json.dumps(v) if not isinstance(v, str) else v}")
    for what, n in (("CPUs", plan.entrypoint_num_cpus), ("GPUs", plan.entrypoint_num_gpus)):
        if n is not None:
            lines.append(f"  entrypoint   reserves {n:g} {what}")
    if plan.requirements:
        lines.append(
            f"  needs        {' '.join(plan.requirements)} (installed on the cluster, or add them with --pip)"
        )
    lines += [f"WARNING: {w}" for w in plan.warnings]
    return "\n".join(lines)


def raw_command(plan: SubmitPlan, address: str) -> str:
    """The equivalent ``ray job submit`` command line (for docs, and for users without evalfarm locally).

    It names the plan's job folder: run it while that folder exists (``--out DIR`` keeps one)."""
    args = ["ray", "job", "submit", "--address", address, "--submission-id", plan.submission_id]
    if "working_dir" in plan.runtime_env:
        args += ["--working-dir", str(plan.runtime_env["working_dir"])]
    rest = {k: v for k, v in plan.runtime_env.items() if k != "working_dir"}
    if rest:
        args += ["--runtime-env-json", json.dumps(rest)]
    if plan.entrypoint_num_cpus is not None:
        args += ["--entrypoint-num-cpus", f"{plan.entrypoint_num_cpus:g}"]
    if plan.entrypoint_num_gpus is not None:
        args += ["--entrypoint-num-gpus", f"{plan.entrypoint_num_gpus:g}"]
    args += ["--metadata-json", json.dumps(plan.metadata)]
    return shlex.join(args) + " -- " + plan.entrypoint


# -- talking to the cluster ---------------------------------------------------------------------------------


def _client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:
        from evalfarm.scheduler.ray_executor import is_auth_failure

        if is_auth_failure(exc):
            raise SubmitError(
                f"the Ray job API at {address} refused this token (missing or wrong): set RAY_AUTH_MODE=token and "
                "RAY_AUTH_TOKEN_PATH to the head's token file (or RAY_AUTH_TOKEN to the token; "
                "cluster/local/start-head.sh prints both)"
            ) from None
        raise SubmitError(
            f"cannot reach the Ray job API at {address}: {exc} (is the head running? `ray status`; the "
            "dashboard listens on 127.0.0.1 by default, so from another machine use an SSH tunnel or "
            "`kubectl port-forward svc/HEAD-svc 8265`)"
        ) from None


def check_remote_code(plan: SubmitPlan) -> None:
    """Refuse a plan whose models run remote code unless the submitter confirmed it (``--trust-remote-code``)."""
    if plan.remote_code and not plan.remote_code_confirmed:
        unpinned = {str(u["model"]) for u in plan.unpinned}
        details = []
        for m in plan.remote_code:
            src = next((s.source for s in plan.catalog.lineage(m) if s.source), None)
            where = f"{src.type}:{src.ref}" if src else "?"
            details.append(f"{m} ({where}{', revision NOT pinned' if m in unpinned else ''})")
        raise SubmitError(
            f"{plan.spec_path}: refusing to submit: {', '.join(details)} set trust_remote_code: true, so the "
            "cluster would execute Python code downloaded with the model. Review that code (at a pinned "
            "revision), then confirm with --trust-remote-code"
        )


def submit_plan(plan: SubmitPlan, address: str | None = None, *, client: Any = None) -> str:
    """Submit the planned job; returns the submission id. The working_dir is uploaded here, then removed
    (unless it is an ``--out`` folder). Refuses unconfirmed remote code (:func:`check_remote_code`)."""
    try:
        check_remote_code(plan)
        client = client or _client(address or default_address())
        resources = {
            k: v
            for k, v in (
                ("entrypoint_num_cpus", plan.entrypoint_num_cpus),
                ("entrypoint_num_gpus", plan.entrypoint_num_gpus),
            )
            if v is not None
        }
        return client.submit_job(
            entrypoint=plan.entrypoint,
            runtime_env=plan.runtime_env,
            submission_id=plan.submission_id,
            metadata=plan.metadata,
            **resources,
        )
    finally:
        plan.cleanup()


def follow_job(
    address: str,
    job_id: str,
    *,
    out: TextIO | None = None,
    client: Any = None,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
) -> str:
    """Stream the job's logs to ``out`` until it ends; returns its final status (``SUCCEEDED``, ``FAILED``, ...)."""
    client = client or _client(address)
    out = out or sys.stdout

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            out.write(chunk)
            out.flush()

    try:
        asyncio.run(asyncio.wait_for(tail(), timeout_s) if timeout_s else tail())
    except Exception as exc:  # the log stream is a convenience: fall back to polling the status
        out.write(f"[evalfarm submit] log stream ended ({type(exc).__name__}: {exc}); polling status\n")
    return wait_for_job(client, job_id, poll_s=poll_s, timeout_s=timeout_s)


def wait_for_job(client: Any, job_id: str, *, poll_s: float = 1.0, timeout_s: float | None = None) -> str:
    """Poll until the job is terminal; returns the status name."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        raw = client.get_job_status(job_id)
        status = str(getattr(raw, "value", raw))
        if status in TERMINAL:
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s}s")
        time.sleep(poll_s)


def submit(
    spec: str | os.PathLike[str],
    *,
    address: str | None = None,
    warehouse: str,
    wait: bool = True,
    on_plan: Callable[[SubmitPlan], None] | None = None,
    **plan_kwargs: Any,
) -> tuple[str, str | None]:
    """Plan, submit and (optionally) follow: returns ``(job_id, final status or None)``. ``address``: the job
    API (default: :func:`default_address`)."""
    address = address or default_address()
    plan = plan_submission(spec, warehouse=warehouse, **plan_kwargs)
    if on_plan:
        on_plan(plan)
    try:
        client = _client(address)
    except SubmitError:
        plan.cleanup()
        raise
    job_id = submit_plan(plan, address, client=client)
    return job_id, (follow_job(address, job_id, client=client) if wait else None)
