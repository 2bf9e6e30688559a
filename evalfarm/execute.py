"""Execute one model's units: load the model once, embed each pool it needs, rank, write results.

This is the unit of work a scheduler hands to a worker (in-process today, a Ray actor later). Failures are
isolated: a model that fails to load fails its own units, a unit that fails leaves the others alone, and every
failure becomes a row in the ``failures`` table. A unit's metrics file is written last, atomically, and is its
completion marker: a killed worker leaves nothing that looks complete.
"""

from __future__ import annotations

import json
import platform
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
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
    status: str  # done | skipped | failed
    seconds: float = 0.0
    error: str | None = None
    stage: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    dim: int | None = None


@dataclass
class ExecContext:
    catalog: Catalog
    warehouse: Warehouse
    run_id: str
    config: RunConfig = field(default_factory=RunConfig)
    force: bool = False
    progress: Callable[[str, int, int], None] | None = None  # (label, advance, total)
    _pools: dict[str, RankPool] = field(default_factory=dict)

    def pool(self, pool_id: str) -> RankPool:
        if pool_id not in self._pools:
            self._pools[pool_id] = load_pool(self.catalog.pool(pool_id))
        return self._pools[pool_id]


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _fail(ctx: ExecContext, unit: Unit, stage: str, exc: BaseException, t0: float) -> UnitOutcome:
    ctx.warehouse.write_failure(ctx.run_id, unit.model, unit.pool, stage, _short(exc), traceback.format_exc())
    return UnitOutcome(unit.model, unit.pool, "failed", time.perf_counter() - t0, _short(exc), stage)


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
    if not path.exists():
        return None
    emb, oov, _ = load_embeddings(path)
    return None if oov.any() else emb


def execute_model(plan: ModelPlan, ctx: ExecContext) -> list[UnitOutcome]:
    """Run every unit of one model; never raises for a model or unit failure (they are recorded)."""
    todo = [u for u in plan.units if ctx.force or not unit_done(ctx, u)]
    outcomes = [UnitOutcome(u.model, u.pool, "skipped") for u in plan.units if u not in todo]
    if not todo:
        return outcomes
    need_encoder = [
        u
        for u in todo
        if ctx.force or not ctx.warehouse.embeddings_path(u.model, u.pool, u.embed_fingerprint).exists()
    ]
    encoder = None
    provenance: dict[str, Any] = {"host": platform.node(), "code_versions": CODE_VERSIONS}
    if need_encoder:
        t0 = time.perf_counter()
        try:
            from evalfarm.encoders.loader import load_encoder

            encoder = load_encoder(ctx.catalog.lineage(plan.model), base_dir=ctx.catalog.path.parent)
            provenance.update(getattr(encoder, "provenance", {}) or {})
            provenance["load_seconds"] = round(time.perf_counter() - t0, 3)
        except Exception as exc:
            detail = traceback.format_exc()
            for u in todo:
                ctx.warehouse.write_failure(ctx.run_id, u.model, u.pool, "load", _short(exc), detail)
            return outcomes + [
                UnitOutcome(u.model, u.pool, "failed", time.perf_counter() - t0, _short(exc), "load") for u in todo
            ]
    dim = None
    for unit in todo:
        outcome = _execute_unit(ctx, plan, unit, encoder)
        dim = outcome.dim or dim
        outcomes.append(outcome)
    if any(o.status == "done" for o in outcomes):
        ctx.warehouse.write_model(_model_row(ctx, plan, dim, provenance))
    return outcomes


def _execute_unit(ctx: ExecContext, plan: ModelPlan, unit: Unit, encoder: Any) -> UnitOutcome:
    t0 = time.perf_counter()
    try:
        pool = ctx.pool(unit.pool)
    except Exception as exc:
        return _fail(ctx, unit, "pool", exc, t0)
    spec = ctx.catalog.model(unit.model)
    emb_path = ctx.warehouse.embeddings_path(unit.model, unit.pool, unit.embed_fingerprint)
    if ctx.force or not emb_path.exists():
        try:
            label = f"{unit.model} · {unit.pool}"
            prog = (lambda n: ctx.progress(label, n, len(pool.items))) if ctx.progress else None
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
            )
            if res.zero_count:
                ctx.warehouse.write_failure(
                    ctx.run_id,
                    unit.model,
                    unit.pool,
                    "embed-quality",
                    f"{res.zero_count} all-zero vectors (handled as OOV under policy {spec.oov!r})",
                )
        except EmbeddingQualityError as exc:
            return _fail(ctx, unit, "embed-quality", exc, t0)
        except Exception as exc:
            return _fail(ctx, unit, "embed", exc, t0)
    try:
        emb, oov, meta = load_embeddings(emb_path)
        return _rank_unit(ctx, unit, pool, emb, oov, meta, t0)
    except Exception as exc:
        return _fail(ctx, unit, "rank", exc, t0)


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
            pool_center=pool.spec.center,
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
