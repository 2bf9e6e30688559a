"""Run a catalog: plan the units, execute them model by model, record the run, summarise.

This is the in-process runner (one machine, one worker). It is the baseline the distributed scheduler is
measured against, and it shares ``execute_model`` with it, so both produce identical warehouses.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evalfarm.catalog.registry import Catalog, load_catalog
from evalfarm.execute import ExecContext, UnitOutcome, execute_model
from evalfarm.plan import CODE_VERSIONS, RunConfig, plan_run
from evalfarm.pools import load_pool
from evalfarm.warehouse import Warehouse, new_run_id


@dataclass
class RunSummary:
    run_id: str
    warehouse: Path
    outcomes: list[UnitOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[UnitOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        c = {"done": 0, "skipped": 0, "failed": 0}
        for o in self.outcomes:
            c[o.status] += 1
        return c


def run_catalog(
    catalog: str | Path | Catalog,
    warehouse: str | Path,
    *,
    models: list[str] | None = None,
    pools: list[str] | None = None,
    config: RunConfig | None = None,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    on_model_done: Callable[[list[UnitOutcome]], None] | None = None,
) -> RunSummary:
    """Evaluate ``models`` (default: all) of ``catalog`` on ``pools`` (default: the catalog's) into ``warehouse``."""
    cat = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    config = config or RunConfig()
    plans = plan_run(cat, models=models, pools=pools, config=config)
    wh = Warehouse(warehouse).init()
    run_id = new_run_id()
    t0 = time.perf_counter()
    n_units = sum(len(p.units) for p in plans)
    wh.write_run_event(
        run_id,
        "start",
        status="running",
        catalog=str(cat.path),
        n_units=n_units,
        host=platform.node(),
        argv=json.dumps(sys.argv),
        code_version=json.dumps(CODE_VERSIONS),
    )
    summary = RunSummary(run_id=run_id, warehouse=wh.root)
    ctx = ExecContext(catalog=cat, warehouse=wh, run_id=run_id, config=config, force=force, progress=progress)
    # Check every pool once up front: a corrupt pool file fails its units with a message naming file and line.
    for pid in {u.pool for p in plans for u in p.units}:
        try:
            ctx._pools[pid] = load_pool(cat.pool(pid))
        except Exception:
            pass
    try:
        for plan in plans:
            outs = execute_model(plan, ctx)
            summary.outcomes.extend(outs)
            if on_model_done:
                on_model_done(outs)
    finally:
        summary.seconds = time.perf_counter() - t0
        c = summary.counts()
        status = "interrupted" if len(summary.outcomes) < n_units else ("ok" if c["failed"] == 0 else "failed")
        wh.write_run_event(
            run_id,
            "end",
            status=status,
            catalog=str(cat.path),
            n_units=n_units,
            n_failed=c["failed"],
            n_skipped=c["skipped"],
            host=platform.node(),
            argv=json.dumps(sys.argv),
            code_version=json.dumps(CODE_VERSIONS),
        )
    return summary
