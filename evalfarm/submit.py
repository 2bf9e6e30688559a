"""Submit one new model to a Ray cluster as a Ray job: validate locally, show the plan, then run it remotely.

Everything is checked on the submitting machine first (a typo should cost seconds, not a cluster slot). The job
gets a self-contained catalog (the new models, their bases, the pools' full definitions) in its ``working_dir``,
so nothing depends on the head node's ``catalog/`` folder or on the evalfarm version installed there having the
same zoo. The entrypoint is a plain ``evalfarm run`` command, so what the cluster runs is what a user could run
by hand (``ray job submit --working-dir DIR -- evalfarm run --catalog ... --models ...``).

Python API::

    plan = plan_submission("new-model.yaml", warehouse="/mnt/shared/warehouse")
    print(render_plan(plan))
    job_id = submit_plan(plan, "http://127.0.0.1:8265")
    status = follow_job("http://127.0.0.1:8265", job_id)
"""

from __future__ import annotations

import asyncio
import getpass
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

from evalfarm.catalog.registry import Catalog, CatalogError, load_catalog
from evalfarm.catalog.specs import ModelSpec, PoolSpec, Source, slug

FORWARDED_ENV = ("EVALFARM_DATA", "HF_HUB_OFFLINE", "EVALFARM_CACHE")
"""Variables passed to the job when they are set here: where data, hub mode and cache live on the cluster."""

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


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
    workdir: Path  # the job's runtime_env working_dir (a temp dir; ``cleanup()`` removes it)
    warehouse: str
    entrypoint: str
    runtime_env: dict[str, Any]
    submission_id: str
    metadata: dict[str, str]
    remote_code: list[str] = field(default_factory=list)  # model ids whose lineage sets trust_remote_code
    requirements: list[str] = field(default_factory=list)  # pip requirements named by the models' sources
    warnings: list[str] = field(default_factory=list)

    def cleanup(self) -> None:
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


def load_spec_file(path: str | os.PathLike[str]) -> tuple[list[ModelSpec], list[PoolSpec | str]]:
    """The models (and optional pools) of a submit spec: one model mapping, a list of them, or ``models:``."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise SubmitError(f"model spec not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SubmitError(f"{path}: not valid YAML: {exc}") from exc
    raw_pools: list[Any] = []
    if isinstance(raw, dict) and "models" in raw:
        extra = set(raw) - {"name", "description", "models", "pools"}
        if extra:
            raise SubmitError(
                f"{path}: unsupported key(s) {sorted(extra)} in a submit spec "
                "(allowed: name, description, models, pools; choose the base catalog with --catalog)"
            )
        entries, raw_pools = raw.get("models") or [], raw.get("pools") or []
    elif isinstance(raw, dict):
        entries = [raw]
    elif isinstance(raw, list):
        entries = raw
    else:
        raise SubmitError(f"{path}: expected a model mapping (id, level, kind, ...), a list of them, or 'models:'")
    if not entries:
        raise SubmitError(f"{path}: no model entries")
    models: list[ModelSpec] = []
    errors: list[str] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append(f"{path}: models[{i}]: a model entry is a mapping, got {type(entry).__name__}")
            continue
        try:
            models.append(ModelSpec.model_validate(entry))
        except ValidationError as exc:
            errors.extend(_validation_messages(path, _entry_name(entry, i), exc))
    pools: list[PoolSpec | str] = []
    for i, entry in enumerate(raw_pools):
        if isinstance(entry, str):
            pools.append(entry)
            continue
        try:
            pools.append(PoolSpec.model_validate(entry))
        except ValidationError as exc:
            errors.extend(_validation_messages(path, _entry_name(entry, i, "pools"), exc))
    if errors:
        raise SubmitError("\n".join(errors))
    ids = [m.id for m in models]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SubmitError(f"{path}: model id(s) {dupes} appear more than once")
    return models, pools


# -- merging with the base catalog --------------------------------------------------------------------------


def _absolute_source(src: Source | None, base_dir: Path) -> Source | None:
    if src is None or src.type != "path" or Path(src.ref).expanduser().is_absolute():
        return src
    return src.model_copy(update={"ref": str((base_dir / src.ref).resolve())})


def _with_absolute_paths(spec: ModelSpec, base_dir: Path) -> ModelSpec:
    """Relative ``path`` sources resolve against the file they came from, not the job's working_dir."""
    update = {
        k: v
        for k, v in (
            ("source", _absolute_source(spec.source, base_dir)),
            ("tokenizer", _absolute_source(spec.tokenizer, base_dir)),
        )
        if v is not getattr(spec, k)
    }
    return spec.model_copy(update=update) if update else spec


def _dump(spec: ModelSpec | PoolSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", exclude_defaults=True)


def merge_catalog(
    spec_path: Path, models: list[ModelSpec], pools: list[PoolSpec | str], base: Catalog
) -> tuple[dict[str, Any], list[str]]:
    """A self-contained catalog document: the new models, their bases from ``base``, the pools in full."""
    new = {m.id: _with_absolute_paths(m, spec_path.parent.resolve()) for m in models}
    for m in new.values():
        if m.id in base.models and _dump(_with_absolute_paths(base.models[m.id], base.path.parent)) != _dump(m):
            raise SubmitError(
                f"{spec_path}: model id {m.id!r} already exists in base catalog {base.name!r} with a different "
                "spec; give the new model its own id (ids key the warehouse's results)"
            )
    # lineage: new models may build on each other or on base models
    wanted: dict[str, ModelSpec] = {}
    for m in new.values():
        cur: ModelSpec | None = m
        seen: set[str] = set()
        while cur is not None:
            if cur.id in seen:
                raise SubmitError(f"{spec_path}: model {m.id!r}: base cycle through {cur.id!r}")
            seen.add(cur.id)
            wanted.setdefault(cur.id, cur)
            if cur.base is None:
                break
            if cur.base in new:
                cur = new[cur.base]
            elif cur.base in base.models:
                cur = _with_absolute_paths(base.models[cur.base], base.path.parent)
            else:
                raise SubmitError(
                    f"{spec_path}: model {cur.id!r}: base {cur.base!r} is neither in this file nor in the base "
                    f"catalog {base.name!r} ({base.path}); fix the id (`evalfarm catalog list --catalog "
                    f"{base.name}` lists them) or pick another base catalog with --catalog"
                )
    pool_docs: list[dict[str, Any]] = []
    pool_ids = pools or list(base.default_pools)
    for p in pool_ids:
        if isinstance(p, PoolSpec):
            pool_docs.append(_dump(p))
        elif p in base.pools:
            pool_docs.append(_dump(base.pools[p]))
        else:
            raise SubmitError(
                f"{spec_path}: pool {p!r} is not defined in base catalog {base.name!r} "
                f"(known: {', '.join(sorted(base.pools))})"
            )
    # bases first, so the file reads top-down
    ordered = sorted(wanted.values(), key=lambda s: _depth(s, wanted))
    first = models[0].id
    doc = {
        "name": f"submit-{first}",
        "description": f"Generated by `evalfarm submit {spec_path.name}` over base catalog {base.name!r}.",
        "pools": pool_docs,
        "models": [_dump(s) for s in ordered],
    }
    return doc, [m.id for m in models]


def _depth(spec: ModelSpec, known: dict[str, ModelSpec]) -> int:
    d = 0
    while spec.base is not None and spec.base in known:
        spec, d = known[spec.base], d + 1
    return d


# -- the entrypoint and runtime_env -------------------------------------------------------------------------


def run_command_options() -> set[str]:
    """The option names ``evalfarm run`` accepts in this install (so new options are used only once they exist)."""
    import typer.main

    from evalfarm.cli import app

    group = typer.main.get_command(app)
    cmd = group.commands["run"]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in getattr(p, "opts", [])}


def build_entrypoint(catalog_file: str, model_ids: Iterable[str], warehouse: str, options: set[str]) -> str:
    args = ["evalfarm", "run", "--catalog", catalog_file, "--models", ",".join(model_ids), "--warehouse", warehouse]
    if "--address" in options:  # run the units as Ray tasks on the cluster the job lives on
        args += ["--address", "auto"]
    return shlex.join(args)


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SubmitError(f"--env {pair!r}: expected KEY=VALUE (e.g. --env EVALFARM_DATA=/mnt/data)")
        out[key] = value
    return out


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


def plan_submission(
    spec: str | os.PathLike[str],
    *,
    warehouse: str,
    catalog: str = "zoo-starter",
    env: dict[str, str] | None = None,
    pip: list[str] | None = None,
    submission_id: str | None = None,
    run_options: set[str] | None = None,
) -> SubmitPlan:
    """Validate the spec against the base catalog and compute the job: entrypoint, runtime_env, metadata."""
    spec_path = Path(spec).expanduser().resolve()
    models, pools = load_spec_file(spec_path)
    try:
        base = load_catalog(catalog)
    except CatalogError as exc:
        raise SubmitError(f"base catalog: {exc}") from None
    doc, model_ids = merge_catalog(spec_path, models, pools, base)

    workdir = Path(tempfile.mkdtemp(prefix="evalfarm-submit-"))
    try:
        catalog_file = workdir / f"{doc['name']}.yaml"
        header = "# Generated by `evalfarm submit`: self-contained (pools in full), run with --catalog <this file>.\n"
        catalog_file.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=118), encoding="utf-8")
        try:  # the same checks the job will do: schema, references, levels
            merged = load_catalog(catalog_file)
        except CatalogError as exc:
            raise SubmitError(f"{spec_path}: the merged catalog is invalid:\n{exc}") from None

        warnings: list[str] = []
        remote_code = [m for m in model_ids if any(s.trust_remote_code for s in merged.lineage(m))]
        for m in remote_code:
            warnings.append(
                f"model {m!r} sets trust_remote_code: true — the cluster will EXECUTE PYTHON CODE downloaded "
                "with the model; submit only if you trust its source and revision"
            )
        requirements: list[str] = []
        for m in model_ids:
            for s in merged.lineage(m):
                for src in (s.source, s.tokenizer):
                    if src is None:
                        continue
                    if src.type == "package" and src.requirement and src.requirement not in requirements:
                        requirements.append(src.requirement)
                    if src.type == "path":
                        msg = f"model {s.id!r} reads {src.ref}: that path must exist on every node of the cluster"
                        if msg not in warnings:
                            warnings.append(msg)
        if any(s.source and s.source.type == "data" for m in model_ids for s in merged.lineage(m)) and not (
            (env and "EVALFARM_DATA" in env) or os.environ.get("EVALFARM_DATA")
        ):
            warnings.append("a model reads a 'data' source but EVALFARM_DATA is neither set here nor in --env")

        wh = _warehouse_arg(warehouse, warnings)
        env_vars = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
        options = run_command_options() if run_options is None else run_options
        entrypoint = build_entrypoint(catalog_file.name, model_ids, wh, options)
        if "--address" in options:
            # `evalfarm run --address auto` calls ray.init(runtime_env={"env_vars": ...}) with the same keys as
            # the job's; Ray refuses such a merge inside a job unless told the driver's values may win.
            env_vars["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"
        env_vars.update(env or {})
        runtime_env: dict[str, Any] = {"working_dir": str(workdir)}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        if pip:
            runtime_env["pip"] = list(pip)
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        sub_id = submission_id or f"evalfarm-{slug(model_ids[0])[:48]}-{stamp}-{secrets.token_hex(3)}"
        metadata = {
            "evalfarm.models": ",".join(model_ids),
            "evalfarm.spec_hashes": ",".join(f"{m}={merged.spec_hash(m)}" for m in model_ids),
            "evalfarm.spec_file": str(spec_path),
            "evalfarm.base_catalog": str(base.path),
            "evalfarm.warehouse": wh,
            "evalfarm.trust_remote_code": ",".join(remote_code) or "none",
            "evalfarm.submitted_by": _user(),
        }
    except BaseException:
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
        runtime_env=runtime_env,
        submission_id=sub_id,
        metadata=metadata,
        remote_code=remote_code,
        requirements=requirements,
        warnings=warnings,
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def render_plan(plan: SubmitPlan, address: str | None = None) -> str:
    """What will run, in words: models, sources, remote code, pools, warehouse, the exact command and env."""
    cat = plan.catalog
    lines = [f"evalfarm submit {plan.spec_path} (base catalog {plan.base_catalog})"]
    if address:
        lines.append(f"  cluster      {address}")
    lines.append(f"  submission   {plan.submission_id}")
    for m in plan.model_ids:
        spec = cat.model(m)
        src = next((s.source for s in cat.lineage(m) if s.source), None)
        chain = " <- ".join(s.id for s in cat.lineage(m))
        trc = "ON (remote code will run)" if m in plan.remote_code else "off"
        lines += [
            f"  model        {m}  [{spec.level}, kind {cat.kind(m)}, spec {cat.spec_hash(m)}]",
            f"    lineage    {chain}",
            f"    source     {f'{src.type}:{src.ref}' + (f' ({src.path})' if src.path else '') if src else '-'}",
            f"    trust_remote_code  {trc}",
            f"    pools      {', '.join(p.id for p in cat.pools_for(m)) or '(none at this level!)'}",
        ]
    lines += [
        f"  warehouse    {plan.warehouse}",
        f"  entrypoint   {plan.entrypoint}",
        f"  working_dir  {plan.workdir} ({plan.catalog_file.name}, uploaded with the job)",
    ]
    for k, v in plan.runtime_env.get("env_vars", {}).items():
        lines.append(f"  env          {k}={v}")
    if plan.runtime_env.get("pip"):
        lines.append(f"  pip          {' '.join(plan.runtime_env['pip'])}")
    if plan.requirements:
        lines.append(
            f"  needs        {' '.join(plan.requirements)} (installed on the cluster, or add them with --pip)"
        )
    lines += [f"WARNING: {w}" for w in plan.warnings]
    return "\n".join(lines)


def raw_command(plan: SubmitPlan, address: str) -> str:
    """The equivalent ``ray job submit`` command line (for docs, and for users without evalfarm locally)."""
    args = ["ray", "job", "submit", "--address", address, "--submission-id", plan.submission_id]
    args += ["--working-dir", str(plan.workdir)]
    rest = {k: v for k, v in plan.runtime_env.items() if k != "working_dir"}
    if rest:
        import json

        args += ["--runtime-env-json", json.dumps(rest)]
    return shlex.join(args) + " -- " + plan.entrypoint


# -- talking to the cluster ---------------------------------------------------------------------------------


def _client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:
        raise SubmitError(
            f"cannot reach the Ray job API at {address}: {exc} (is the head running? `ray status`; the "
            "dashboard listens on 127.0.0.1 by default, so from another machine use an SSH tunnel or "
            "`kubectl port-forward svc/HEAD-svc 8265`)"
        ) from None


def submit_plan(plan: SubmitPlan, address: str = DEFAULT_ADDRESS, *, client: Any = None) -> str:
    """Submit the planned job; returns the submission id. The working_dir is uploaded here, then removed."""
    client = client or _client(address)
    try:
        return client.submit_job(
            entrypoint=plan.entrypoint,
            runtime_env=plan.runtime_env,
            submission_id=plan.submission_id,
            metadata=plan.metadata,
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
    address: str = DEFAULT_ADDRESS,
    warehouse: str,
    wait: bool = True,
    on_plan: Callable[[SubmitPlan], None] | None = None,
    **plan_kwargs: Any,
) -> tuple[str, str | None]:
    """Plan, submit and (optionally) follow: returns ``(job_id, final status or None)``."""
    plan = plan_submission(spec, warehouse=warehouse, **plan_kwargs)
    if on_plan:
        on_plan(plan)
    client = _client(address)
    job_id = submit_plan(plan, address, client=client)
    return job_id, (follow_job(address, job_id, client=client) if wait else None)
