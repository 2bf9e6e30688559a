"""Execute one model's units: load the model once, embed each pool it needs, rank, write results.

Two stages, so a scheduler can run them as separate tasks: ``embed_model`` (load once, embed every pool the
model needs, one embeddings Parquet per pool) and ``rank_unit`` (read one embeddings Parquet, rank, write ranks
and metrics). ``execute_model`` chains them in-process and keeps the original contract. Failures are isolated:
a model that fails to load fails its own units, a unit that fails leaves the others alone. A unit's metrics
file is written last, atomically, and is its completion marker: a killed worker leaves nothing that looks
complete. With ``record_failures=False`` the caller (the scheduler, which retries) writes the ``failures`` rows
itself, once, after the last attempt.
"""

from __future__ import annotations

import json
import platform
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from evalfarm.catalog.registry import Catalog
from evalfarm.embed import EmbeddingQualityError, embed_pool, load_embeddings
from evalfarm.plan import CODE_VERSIONS, ModelPlan, RunConfig, Unit, embed_fingerprint
from evalfarm.pools import RankPool, load_pool
from evalfarm.rank import evaluate_rank_pool
from evalfarm.warehouse import Warehouse, now


@dataclass
class UnitOutcome:
    model: str
    pool: str
    status: str  # done | skipped | failed | embedded (embed stage finished, rank pending)
    seconds: float = 0.0
    error: str | None = None
    stage: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    dim: int | None = None
    detail: str = ""
    started_at: datetime | None = None


@dataclass
class ExecContext:
    catalog: Catalog
    warehouse: Warehouse
    run_id: str
    config: RunConfig = field(default_factory=RunConfig)
    force: bool = False
    progress: Callable[[str, int, int], None] | None = None  # (label, advance, total)
    record_failures: bool = True
    _pools: dict[str, RankPool] = field(default_factory=dict)

    def pool(self, pool_id: str) -> RankPool:
        if pool_id not in self._pools:
            self._pools[pool_id] = load_pool(self.catalog.pool(pool_id))
        return self._pools[pool_id]

    @property
    def io_fs(self) -> Any:
        """The pyarrow filesystem for reads and writes (None: the local filesystem)."""
        return None if self.warehouse.local else self.warehouse.fs


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _fail(ctx: ExecContext, unit: Unit, stage: str, exc: BaseException, t0: float, started: datetime) -> UnitOutcome:
    o = UnitOutcome(
        unit.model, unit.pool, "failed", time.perf_counter() - t0, _short(exc), stage, detail=traceback.format_exc()
    )
    o.started_at = started
    if ctx.record_failures:
        record_failure(ctx.warehouse, ctx.run_id, o)
    return o


def record_failure(wh: Warehouse, run_id: str, outcome: UnitOutcome) -> None:
    """One ``failures`` row for a failed unit (the scheduler calls it once, after the last attempt)."""
    wh.write_failure(
        run_id, outcome.model, outcome.pool, outcome.stage or "unknown", outcome.error or "", outcome.detail
    )


def unit_done(ctx: ExecContext, unit: Unit) -> bool:
    return ctx.warehouse.has_unit("metrics", unit.model, unit.pool, unit.rank_fingerprint)


def _model_row(ctx: ExecContext, plan: ModelPlan, dim: int | None, provenance: dict[str, Any]) -> dict[str, Any]:
    spec = ctx.catalog.model(plan.model)
    chain = ctx.catalog.lineage(plan.model)
    return {
        "model": plan.model,
        "level": spec.level,
        "kind": ctx.catalog.kind(plan.model),
        "dim": dim,
        "spec_hash": plan.spec_hash,
        "base": spec.base,
        "pooling": spec.pooling,
        "postprocess": spec.postprocess.model_dump_json() if spec.postprocess else None,
        "source": next((s.source.model_dump_json() for s in chain if s.source), None),
        "provenance": json.dumps(provenance, default=str),
        "spec": json.dumps([s.model_dump(mode="json") for s in chain]),
        "run_id": ctx.run_id,
        "created_at": now(),
    }


def _base_embeddings(ctx: ExecContext, plan: ModelPlan, unit: Unit) -> np.ndarray | None:
    """A post-processed sentence model reuses its base's embeddings of the same pool when they exist."""
    spec = ctx.catalog.model(plan.model)
    if spec.base is None or spec.postprocess is None or spec.level != "sentence":
        return None
    path = ctx.warehouse.embeddings_path(
        spec.base, unit.pool, embed_fingerprint(ctx.catalog.spec_hash(spec.base), unit.pool_checksum)
    )
    if not ctx.warehouse.exists(path):
        return None
    emb, oov, _ = load_embeddings(path, filesystem=ctx.io_fs)
    return None if oov.any() else emb


def execute_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    """Run every unit of one model in-process; never raises for a model or unit failure (they are recorded)."""
    todo = [u for u in plan.units if ctx.force or not unit_done(ctx, u)]
    outcomes = [UnitOutcome(u.model, u.pool, "skipped") for u in plan.units if u not in todo]
    if not todo:
        return outcomes
    by_pool = {u.pool: u for u in todo}
    for o in embed_model(ModelPlan(plan.model, plan.spec_hash, plan.level, todo, plan.cost), ctx):
        if o.status == "embedded":
            r = rank_unit(by_pool[o.pool], ctx)
            r.seconds += o.seconds
            outcomes.append(r)
        else:
            outcomes.append(o)
    return outcomes


def embed_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    """Embed stage of every unit in ``plan``: load the model once (only if some pool lacks embeddings), write
    one embeddings Parquet per pool. Outcome per unit: ``embedded`` (its embeddings file exists) or ``failed``.
    The model load time is counted in the first embedded unit's seconds."""
    wh = ctx.warehouse
    todo = list(plan.units)
    need_encoder = [
        u for u in todo if ctx.force or not wh.exists(wh.embeddings_path(u.model, u.pool, u.embed_fingerprint))
    ]
    encoder = None
    provenance: dict[str, Any] = {"host": platform.node(), "code_versions": CODE_VERSIONS}
    load_seconds = 0.0
    started = now()
    if need_encoder:
        t0 = time.perf_counter()
        try:
            from evalfarm.encoders.loader import load_encoder

            encoder = load_encoder(ctx.catalog.lineage(plan.model), base_dir=ctx.catalog.path.parent)
            provenance.update(getattr(encoder, "provenance", {}) or {})
            load_seconds = time.perf_counter() - t0
            provenance["load_seconds"] = round(load_seconds, 3)
        except Exception as exc:
            detail = traceback.format_exc()
            outs = [
                UnitOutcome(
                    u.model,
                    u.pool,
                    "failed",
                    time.perf_counter() - t0,
                    _short(exc),
                    "load",
                    detail=detail,
                    started_at=started,
                )
                for u in todo
            ]
            if ctx.record_failures:
                for o in outs:
                    record_failure(wh, ctx.run_id, o)
            return outs
    outcomes: list[UnitOutcome] = []
    dim = None
    for unit in todo:
        o = _embed_unit(ctx, plan, unit, encoder, force=unit in need_encoder)
        o.seconds += load_seconds
        load_seconds = 0.0
        dim = o.dim or dim
        outcomes.append(o)
    if any(o.status == "embedded" for o in outcomes) and (
        encoder is not None or not wh.exists(wh.model_path(plan.model, plan.spec_hash))
    ):
        wh.write_model(_model_row(ctx, plan, dim, provenance))
    return outcomes


def _embed_unit(ctx: ExecContext, plan: ModelPlan, unit: Unit, encoder: Any, *, force: bool) -> UnitOutcome:
    t0 = time.perf_counter()
    started = now()
    try:
        pool = ctx.pool(unit.pool)
    except Exception as exc:
        return _fail(ctx, unit, "pool", exc, t0, started)
    spec = ctx.catalog.model(unit.model)
    emb_path = ctx.warehouse.embeddings_path(unit.model, unit.pool, unit.embed_fingerprint)
    dim = None
    if force:
        try:
            label = f"{unit.model} · {unit.pool}"
            progress = ctx.progress
            prog = (lambda n: progress(label, n, len(pool.items))) if progress else None
            meta = {
                "model": unit.model,
                "spec_hash": unit.spec_hash,
                "fingerprint": unit.embed_fingerprint,
                "pool_checksum": unit.pool_checksum,
                "run_id": ctx.run_id,
                "provenance": getattr(encoder, "provenance", {}),
            }
            res = embed_pool(
                encoder,
                pool,
                emb_path,
                metadata=meta,
                progress=prog,
                base_embeddings=_base_embeddings(ctx, plan, unit),
                filesystem=ctx.io_fs,
            )
            dim = res.dim
            if res.zero_count:
                # Informational (the unit still ranks): written at once, it cannot repeat on a retry because
                # the embeddings file now exists.
                ctx.warehouse.write_failure(
                    ctx.run_id,
                    unit.model,
                    unit.pool,
                    "embed-quality",
                    f"{res.zero_count} all-zero vectors (handled as OOV under policy {spec.oov!r})",
                )
        except EmbeddingQualityError as exc:
            return _fail(ctx, unit, "embed-quality", exc, t0, started)
        except Exception as exc:
            return _fail(ctx, unit, "embed", exc, t0, started)
    return UnitOutcome(unit.model, unit.pool, "embedded", time.perf_counter() - t0, dim=dim, started_at=started)


def rank_unit(unit: Unit, ctx: ExecContext) -> UnitOutcome:
    """Rank stage of one unit: read its embeddings Parquet, rank under every similarity, write ranks, then
    metrics (the completion marker). Runs anywhere the warehouse is visible: a GPU worker, a CPU task."""
    t0 = time.perf_counter()
    started = now()
    try:
        pool = ctx.pool(unit.pool)
    except Exception as exc:
        return _fail(ctx, unit, "pool", exc, t0, started)
    try:
        path = ctx.warehouse.embeddings_path(unit.model, unit.pool, unit.embed_fingerprint)
        emb, oov, meta = load_embeddings(path, filesystem=ctx.io_fs)
        out = _rank_unit(ctx, unit, pool, emb, oov, meta, t0)
    except Exception as exc:
        return _fail(ctx, unit, "rank", exc, t0, started)
    out.started_at = started
    return out


def _rank_unit(
    ctx: ExecContext, unit: Unit, pool: RankPool, emb: np.ndarray, oov: np.ndarray, meta: dict[str, Any], t0: float
) -> UnitOutcome:
    spec = ctx.catalog.model(unit.model)
    cfg = ctx.config
    created = now()
    policy_json = json.dumps({"oov": spec.oov, **json.loads(cfg.rank_key())})
    metric_rows: list[dict[str, Any]] = []
    rank_tables = []
    per_sim: dict[str, dict[str, float]] = {}
    for sim in cfg.similarities:
        res = evaluate_rank_pool(
            emb,
            oov,
            meta,
            pool.queries,
            pool.positives,
            similarity=sim,
            policy=cfg.policy,
            oov_policy=spec.oov,
            level=pool.level,
            device=cfg.device,
        )
        per_sim[sim] = res.metrics
        for name, value in res.metrics.items():
            metric_rows.append(
                {
                    "run_id": ctx.run_id,
                    "model": unit.model,
                    "pool": unit.pool,
                    "similarity": sim,
                    "metric": name,
                    "value": value,
                    "fingerprint": unit.rank_fingerprint,
                    "spec_hash": unit.spec_hash,
                    "pool_checksum": unit.pool_checksum,
                    "code_version": CODE_VERSIONS["rank"],
                    "policy": policy_json,
                    "created_at": created,
                }
            )
        if cfg.keep_ranks:
            q = pool.queries[res.pair_index]
            p = pool.positives[res.pair_index]
            items = np.asarray(pool.items, dtype=object)
            rank_tables.append(
                {
                    "run_id": [ctx.run_id] * len(q),
                    "model": [unit.model] * len(q),
                    "pool": [unit.pool] * len(q),
                    "similarity": [sim] * len(q),
                    "query_id": q,
                    "positive_id": p,
                    "query": items[q].tolist(),
                    "positive": items[p].tolist(),
                    "rank": res.ranks,
                    "score": res.scores,
                    "tied": res.tied,
                    "oov": res.pair_oov,
                    "fingerprint": [unit.rank_fingerprint] * len(q),
                }
            )
    wh = ctx.warehouse
    if rank_tables:
        import pyarrow as pa

        from evalfarm.warehouse import SCHEMAS

        table = pa.concat_tables(
            [pa.table(t).select(SCHEMAS["ranks"].names).cast(SCHEMAS["ranks"]) for t in rank_tables]
        )
        wh.write("ranks", table, wh.unit_path("ranks", unit.model, unit.pool, unit.rank_fingerprint))
    # Metrics last: their file is the unit's completion marker.
    wh.write("metrics", metric_rows, wh.unit_path("metrics", unit.model, unit.pool, unit.rank_fingerprint))
    return UnitOutcome(unit.model, unit.pool, "done", time.perf_counter() - t0, metrics=per_sim, dim=int(emb.shape[1]))
