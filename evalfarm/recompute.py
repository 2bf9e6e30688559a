"""``evalfarm verify --deep``: recompute what the warehouse's own contents allow, and report every disagreement.

``evalfarm verify`` checks bytes against the manifests, which live in the same warehouse: a writer who rewrites a
result file *and* its manifest rows is believed. The numbers have signals of their own, which ``--deep`` checks, all
through the SQL views and the text store's reading API (never file names: the storage layout is not this module's):

1. consistency (:func:`evalfarm.warehouse.verify.consistency_findings`): every current number in its range, rank
   metrics that can hold together (an MRR of 0.99 beside a Hits@1 of 0.046 cannot: MRR <= (1 + Hits@1) / 2), the tie
   policies in order, and each unit's fingerprint the one its spec hash, task checksum, scorer version and params
   make (``inconsistent``);
2. the detail tables: EvalRank's MR, MRR, Hits@k (each tie policy), ``n_pairs`` and ``tie_rate`` recomputed from
   the ``ranks`` view's per-pair rows by the scorer's own code (``disagrees-with-ranks``);
3. a sample of units (those with a finding first, then a fixed pseudo-random choice) scored again by their scorer
   from the vectors in the model's text store (``disagrees-with-embeddings``), when the catalog still has the task
   with the same checksum and the scorer is the same version.

What it cannot catch: a forgery consistent in every table it reads (metrics, ranks and the stored vectors rewritten
together), a forged number of a unit outside the sample that breaks no relation, and anything in units it could not
recompute (their task or scorer changed since; the reasons are listed). See docs/operations.md, "Security".
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalfarm.catalog.prompts import NO_PROMPT, Prompt, Prompts
from evalfarm.catalog.registry import Catalog
from evalfarm.embed import TextStore, is_binary, store_key, task_vectors
from evalfarm.options import RunOptions
from evalfarm.plan import unit_fingerprint
from evalfarm.scorers import scorer_for
from evalfarm.scorers.base import Scorer
from evalfarm.scorers.evalrank import metrics_from_ranks
from evalfarm.warehouse import Warehouse
from evalfarm.warehouse.verify import DeepSummary, Finding, consistency_findings, current_numbers, deep_finding

DEFAULT_SAMPLE = 2
"""Units scored again from their stored embeddings by default (``evalfarm verify --deep --sample N``): each costs
what its scoring cost in the run (seconds for a word task, a minute or more for a large EvalRank pool on CPU)."""
REL_TOL = 1e-6
"""How close a recomputed number must be to the stored one. The scorers give the same bits on any executor and
thread count (tests/test_pipeline.py); the slack is for a BLAS that sums in another order."""


@dataclass
class _Unit:
    model: str
    task: str
    scorer: str
    fingerprint: str
    spec_hash: str | None
    task_checksum: str | None
    scorer_version: str | None
    params: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.model} · {self.task} ({self.fingerprint})"

    def stored(self) -> dict[tuple[str, str, str | None, str], float]:
        """(subset, variant, ties, metric) -> the stored value."""
        out = {}
        for r in self.rows:
            out[(r["subset"] or "all", r["variant"] or "", r["ties"], r["metric"])] = _value(r["value"])
        return out

    def as_row(self) -> dict[str, Any]:
        return {"model": self.model, "task": self.task, "fingerprint": self.fingerprint}


def _value(v: Any) -> float:
    return float(v) if v is not None else math.nan


def _units(rows: list[dict[str, Any]]) -> dict[str, _Unit]:
    units: dict[str, _Unit] = {}
    for r in rows:
        fp = r["fingerprint"]
        if fp not in units:
            units[fp] = _Unit(r["model"], r["task"], r["scorer"], fp, r["spec_hash"], r["task_checksum"],
                              r["scorer_version"], r["params"])  # fmt: skip
        units[fp].rows.append(r)
    return units


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def _where(scorer: str, subset: str, variant: str, ties: str | None, metric: str) -> str:
    return "/".join(x for x in (scorer, subset if subset != "all" else "", variant, ties or "", metric) if x)


def fingerprint_findings(units: dict[str, _Unit]) -> list[Finding]:
    """A unit whose fingerprint is not the one its stored spec hash, task checksum, scorer version and params make:
    its rows were edited (the params of a forged unit, say) or written under another unit's name."""
    out = []
    for u in units.values():
        if u.spec_hash is None or u.task_checksum is None or u.scorer_version is None or u.params is None:
            continue  # rows of a warehouse older than these columns
        made = unit_fingerprint(u.spec_hash, u.task_checksum, u.scorer, u.scorer_version, u.params)
        if made != u.fingerprint:
            why = (
                f"the fingerprint is not {made}, the one its spec hash, task checksum, scorer version and params make"
            )
            out.append(deep_finding("inconsistent", u.as_row(), u.scorer, why))
    return out


RANKS_SQL = """
WITH runs AS (
    SELECT c.model, c.task, c.variant, c.fingerprint,
           coalesce(max(h.run_id) FILTER (WHERE h.run_id IS NOT DISTINCT FROM c.run_id), max(h.run_id)) AS run_id
    FROM current_evalrank c
    JOIN (SELECT DISTINCT model, task, variant, fingerprint, run_id FROM ranks_history) h
      USING (model, task, variant, fingerprint)
    {where}
    GROUP BY ALL
)
SELECT r.model, r.task, r.variant, r.rank, r.tied
FROM ranks_history r
JOIN runs p ON r.model = p.model AND r.task = p.task AND r.variant = p.variant AND r.fingerprint = p.fingerprint
           AND r.run_id IS NOT DISTINCT FROM p.run_id
ORDER BY r.model, r.task, r.variant, r.query_id, r.positive_id
"""
"""Each current EvalRank number's per-pair rows: those of its fingerprint written by the run that wrote the number,
else by the latest run that computed the same fingerprint (the same computation: a forger who writes only the
metrics under a run of their own is compared with the ranks the fingerprint's honest run wrote)."""


def _rank_groups(wh: Warehouse, model: str | None) -> Iterator[tuple[tuple[str, str, str], np.ndarray, np.ndarray]]:
    """((model, task, variant), optimistic ranks, tied counts) of every current EvalRank unit's ``ranks`` rows,
    streamed from the view in batches (a zoo's ranks are millions of rows)."""
    con = wh.connect()
    try:
        where = " WHERE c.model = '" + model.replace("'", "''") + "'" if model is not None else ""
        reader = con.sql(RANKS_SQL.format(where=where)).to_arrow_reader(1 << 16)
        key: tuple[str, str, str] | None = None
        ranks: list[np.ndarray] = []
        tied: list[np.ndarray] = []
        for batch in reader:
            keys = list(zip(*(batch.column(c).to_pylist() for c in ("model", "task", "variant")), strict=True))
            r = batch.column("rank").to_numpy(zero_copy_only=False)
            t = batch.column("tied").to_numpy(zero_copy_only=False)
            start = 0
            for i in range(1, len(keys) + 1):
                if i < len(keys) and keys[i] == keys[i - 1]:
                    continue
                if key is not None and keys[start] != key:  # the rows so far are a whole group
                    yield key, np.concatenate(ranks), np.concatenate(tied)
                    ranks, tied = [], []
                key = keys[start]
                ranks.append(r[start:i])
                tied.append(t[start:i])
                start = i
        if key is not None:
            yield key, np.concatenate(ranks), np.concatenate(tied)
    finally:
        con.close()


def ranks_findings(wh: Warehouse, units: dict[str, _Unit], model: str | None = None) -> tuple[list[Finding], int]:
    """``disagrees-with-ranks`` findings: each current EvalRank number against the scorer's computation over the
    unit's ``ranks`` rows; and how many numbers were recomputed."""
    by_unit = {(u.model, u.task): u for u in units.values() if u.scorer == "evalrank"}
    out: list[Finding] = []
    n = 0
    seen: set[tuple[str, str, str]] = set()
    for (m, t, variant), rank, tied in _rank_groups(wh, model):
        unit = by_unit.get((m, t))
        if unit is None:
            continue
        seen.add((m, t, variant))
        stored = unit.stored()
        hits = tuple(sorted({int(k[3].split("@")[1]) for k in stored if re.fullmatch(r"hits@\d+", k[3])}))
        for row in metrics_from_ranks(rank, tied, hits, variant):
            key = ("all", variant, row.ties, row.metric)
            if key not in stored:
                continue
            n += 1
            if not _same(stored[key], row.value):
                where = _where(unit.scorer, "all", variant, row.ties, row.metric)
                why = f"stored {stored[key]:.6g}, its {len(rank)} ranks rows give {row.value:.6g}"
                out.append(deep_finding("disagrees-with-ranks", unit.as_row(), where, why))
    for unit in by_unit.values():
        if json.loads(unit.params or "{}").get("keep_details", True) is False:
            continue  # computed without per-pair rows: nothing to compare with
        for variant in sorted({v for (_, v, ties, _) in unit.stored() if ties is not None} - {""}):
            if (unit.model, unit.task, variant) not in seen:
                why = "no ranks rows under its fingerprint, though its params keep them"
                out.append(deep_finding("disagrees-with-ranks", unit.as_row(), f"{unit.scorer}/{variant}", why))
    return out, n


def _sample(units: dict[str, _Unit], first: set[str | None], n: int) -> list[_Unit]:
    """``n`` units to score again: those with a finding first, then a fixed pseudo-random order (by a hash of the
    fingerprint: the same units on every run of the same warehouse, spread over models and tasks)."""

    def key(u: _Unit) -> tuple[bool, str]:
        return u.fingerprint not in first, hashlib.sha256(u.fingerprint.encode()).hexdigest()

    return sorted(units.values(), key=key)[: max(n, 0)]


def _models(wh: Warehouse) -> dict[str, dict[str, Any]]:
    con = wh.connect()
    try:
        rows = con.execute("SELECT model, level, spec_hash, spec FROM models").fetchall()
    finally:
        con.close()
    return {m: {"level": level, "spec_hash": sh, "spec": spec} for m, level, sh, spec in rows}


def _stored_vectors(
    wh: Warehouse, unit: _Unit, info: dict[str, Any], scorer: Scorer, task: Any
) -> tuple[Any, Any] | str:
    """(the task's data, the unit's stored vectors as its scorer takes them), or why they cannot be read: each text
    from the store of the prompt it was embedded under (the model's prompts, from its stored spec)."""
    lineage = (json.loads(info["spec"]) or [{}]) if info["spec"] else [{}]
    spec = lineage[0]
    try:
        prompts = next((Prompts.model_validate(s["prompts"]) for s in lineage if s.get("prompts")), None)
    except ValueError as exc:
        return f"its stored spec's prompts do not validate ({exc})"

    def store(prompt: Prompt) -> TextStore:
        return TextStore(wh, unit.model, store_key(str(unit.spec_hash), prompt.key))

    # a model with prompts reads one store per prompt: a missing or damaged one fails its vectors below
    shards = store(NO_PROMPT).shards() if prompts is None else []
    if prompts is None and (not shards or any(wh.file_problem(p) for p in shards)):
        return "its model's text store is missing or damaged"
    try:
        data = scorer.load_for(task, RunOptions())
        vectors = task_vectors(
            store, scorer, task, data, prompts, level=info["level"], oov_policy=spec.get("oov") or "mean",
            binary=is_binary(spec),
        )  # fmt: skip
    except Exception as exc:  # the task's data gone, texts never stored: nothing to recompute from
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return data, vectors


def recompute_unit(
    wh: Warehouse, unit: _Unit, catalog: Catalog | None, models: dict[str, dict[str, Any]]
) -> tuple[list[Finding] | None, str]:
    """Score ``unit`` again from its model's stored vectors, through its scorer: (``disagrees-with-embeddings``
    findings, what was compared), or (None, why it could not be recomputed)."""
    from evalfarm.taskdata.data import task_checksum

    if catalog is None:
        return None, "no catalog to find its task in"
    if unit.task not in catalog.tasks:
        return None, f"task {unit.task!r} is not in catalog {catalog.path}"
    task = catalog.task(unit.task)
    if task_checksum(task) != unit.task_checksum:
        return None, "its task's files or fields changed since (another checksum)"
    scorer: Scorer = scorer_for(task.kind)
    if scorer.name != unit.scorer or scorer.version != unit.scorer_version:
        return None, f"scorer {unit.scorer} {unit.scorer_version} is now {scorer.name} {scorer.version}"
    if type(scorer).load_for is not Scorer.load_for:
        return None, f"scorer {scorer.name}'s data depends on the run's options"
    info = models.get(unit.model)
    if info is None or info["spec_hash"] != unit.spec_hash:
        return None, "the models table no longer holds the spec it was computed with"
    got = _stored_vectors(wh, unit, info, scorer, task)
    if isinstance(got, str):
        return None, got
    data, vectors = got
    result = scorer.evaluate(task, data, vectors, json.loads(unit.params or "{}"), device=None)
    stored = unit.stored()
    out = []
    compared = 0
    for row in result.rows:
        key = (row.subset, row.variant, row.ties, row.metric)
        if key not in stored:
            continue
        compared += 1
        if not _same(stored[key], float(row.value)):
            why = f"stored {stored[key]:.6g}, the scorer gives {float(row.value):.6g} from the stored embeddings"
            out.append(deep_finding("disagrees-with-embeddings", unit.as_row(), _where(unit.scorer, *key), why))
    return out, f"{compared} number(s) compared"


def deep_verify(
    wh: Warehouse, *, model: str | None = None, sample: int = DEFAULT_SAMPLE, catalog: Catalog | None = None
) -> tuple[list[Finding], DeepSummary]:
    """Every ``--deep`` check (see the module docstring) of ``wh`` (of ``model`` only, if given); reads, never
    writes. ``sample``: units to score again from their stored embeddings (0: none), with ``catalog``'s tasks."""
    rows = current_numbers(wh, model)
    units = _units(rows)
    findings = consistency_findings(rows) + fingerprint_findings(units)
    from_ranks, n_ranks = ranks_findings(wh, units, model)
    findings += from_ranks
    models = _models(wh) if sample > 0 else {}
    recomputed: list[str] = []
    skipped: list[str] = []
    for unit in _sample(units, {f.fingerprint for f in findings}, sample):
        found, what = recompute_unit(wh, unit, catalog, models)
        if found is None:
            skipped.append(f"{unit.label}: {what}")
        else:
            findings += found
            recomputed.append(f"{unit.label}: {what}")
    summary = DeepSummary(len(rows), n_ranks, tuple(recomputed), tuple(skipped))
    return findings, summary


__all__ = ["DEFAULT_SAMPLE", "deep_verify", "fingerprint_findings", "ranks_findings", "recompute_unit"]
