"""Plan: a run's units — one per (model, task) — each with a content fingerprint, and per model its text store.

A unit's fingerprint hashes everything that can change its numbers: the model spec and its bases (spec hash),
the task's data (version and file checksums), the scorer's name, version and parameters (the preprocessing protocol
among them). Same fingerprint, same numbers: the runner skips it unless ``--force``. A scorer's version bump
recomputes that scorer's units only; a new ``--ties`` needs no recomputation at all (every tie policy comes from one
stored pass). A model's embeddings live in one text store (keyed by spec hash and embed version), shared by all of
its units.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from evalfarm.catalog.prompts import NO_PROMPT, Prompt, Prompts, lineage_prompts
from evalfarm.catalog.registry import Catalog, CatalogError
from evalfarm.catalog.specs import ModelSpec, canonical_json, spec_hash
from evalfarm.embed import EMBED_VERSION, store_key
from evalfarm.options import RunOptions
from evalfarm.scorers import scorer_for
from evalfarm.taskdata.data import task_checksum

CODE_VERSIONS = {"embed": EMBED_VERSION}
"""Stage versions recorded with every run (scorer versions live on each scorer)."""


def _h(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Unit:
    """One model on one task, scored by the task kind's scorer."""

    model: str
    task: str
    scorer: str
    level: str
    spec_hash: str
    task_checksum: str
    params: str  # canonical JSON of the scorer's parameters
    fingerprint: str


@dataclass
class ModelPlan:
    """All units of one model: a worker loads the model once, embeds the texts its units need, then scores them.

    ``lineage`` is the model's spec and its bases', nearest first (``Catalog.lineage``), as planned: the executor
    loads, derives and describes the model from it, and never looks the model up in a catalog again."""

    model: str
    spec_hash: str
    level: str
    store: str
    units: list[Unit] = field(default_factory=list)
    cost: float = 1.0  # relative size, for largest-first assignment
    embed_cost: float = 0.0  # the embedding's share of ``cost`` (0 for a pooling sibling: the leader embeds)
    siblings: list[ModelPlan] = field(default_factory=list)  # pooling siblings this model's forward pass embeds too
    lineage: tuple[ModelSpec, ...] = ()

    @property
    def spec(self) -> ModelSpec:
        """The model's own spec (``lineage[0]``)."""
        if not self.lineage:
            raise ValueError(f"the plan of {self.model!r} carries no spec (plan it with plan_run)")
        return self.lineage[0]

    @property
    def kind(self) -> str:
        """The model family: its own ``kind`` or, for a derived model, its nearest base's (``Catalog.kind``)."""
        return next(s.kind for s in self.lineage if s.kind is not None)

    @property
    def base_lineage(self) -> tuple[ModelSpec, ...]:
        """The base's own lineage (empty for a model with no base)."""
        return self.lineage[1:]

    @property
    def base_store(self) -> str:
        """The base's text store key (a derived model that reuses its base's vectors reads them there)."""
        return self.base_store_for(NO_PROMPT)

    def base_store_for(self, prompt: Prompt) -> str:
        """The base's text store of the texts it embeds under ``prompt``."""
        base = self.base_lineage
        if not base:
            raise ValueError(f"model {self.model!r} has no base")
        return store_key(spec_hash(base[0], *base[1:]), prompt.key)

    def store_for(self, prompt: Prompt) -> str:
        """The model's text store of the texts it embeds under ``prompt`` (``store`` for no prompt)."""
        return store_key(self.spec_hash, prompt.key)

    @property
    def prompts(self) -> Prompts | None:
        """The prompts the model embeds with (its own or its nearest base's: ``lineage_prompts``)."""
        return lineage_prompts(self.lineage)


def unit_fingerprint(spec_hash: str, checksum: str, scorer: str, version: str, params: str) -> str:
    return _h("unit", spec_hash, checksum, scorer, version, params)


# The relative cost of embedding a model's texts is its kind's (ModelKind.cost, declared in the kind's module), in
# units of one EvalRank sentence-pool rank pass (cos + l2 over the sentence pool), from the local zoo's nightly run
# (the times are in benchmarks/README.md). Only the order and the ETA depend on it: largest-first assignment keeps a
# big model from starting last and becoming the straggler the whole run waits for.
UNKNOWN_KIND_COST = 5.0  # a kind no registry entry declares a cost for (one that does not load)
SCORE_COST = {("evalrank", "sentence"): 1.0, ("evalrank", "word"): 0.5}  # others: cheap correlations
POSTPROCESS_COST = 0.15  # fitting ABTT / PC removal / whitening on a base's stored embeddings


def kind_cost(kind: str | None) -> float:
    """The declared embedding cost of a model kind (``ModelKind.cost``); :data:`UNKNOWN_KIND_COST` for a kind that
    is not registered or does not load (it fails at load; the plan still orders it)."""
    from evalfarm.plugins import RegistryError, model_kind

    try:
        return model_kind(kind).cost if kind is not None else UNKNOWN_KIND_COST
    except RegistryError:
        return UNKNOWN_KIND_COST


def embed_cost(kind: str | None, level: str, postprocessed: bool = False) -> float:
    """The relative cost of embedding a model's texts: its kind's, or fitting a post-processing on its base's."""
    return POSTPROCESS_COST if postprocessed and level == "sentence" else kind_cost(kind)


def estimate_cost(kind: str, level: str, units: list[Unit], postprocessed: bool = False) -> float:
    """Relative cost of a model's units: embedding its texts (by kind) + scoring. A post-processed sentence model
    reuses its base's stored embeddings (the scheduler runs the base first), so it costs the fit, not the encoder."""
    return embed_cost(kind, level, postprocessed) + sum(SCORE_COST.get((u.scorer, level), 0.05) for u in units)


def _nothing_to_run(
    catalog: Catalog, model_ids: list[str], task_ids: list[str], task_specs: list[Any]
) -> CatalogError:
    """The error of a selection whose tasks are of no selected model's level."""
    levels = sorted({catalog.model(m).level for m in model_ids})
    have = sorted({t.level for t in task_specs})
    return CatalogError(
        f"nothing to run: the selected models are {'/'.join(levels)}-level but the selected tasks "
        f"({', '.join(task_ids) or 'none'}) are {'/'.join(have) or 'none'}-level; pick tasks of the models' level "
        "(`evalfarm catalog list` shows each model's tasks)"
    )


def plan_run(
    catalog: Catalog,
    *,
    models: list[str] | None = None,
    tasks: list[str] | None = None,
    options: RunOptions | None = None,
) -> list[ModelPlan]:
    """Units for the selected models and tasks (tasks are matched to models by level). Raises CatalogError when
    nothing matches (an empty catalog, or tasks of another level than every selected model)."""
    options = options or RunOptions()
    model_ids = list(models) if models else list(catalog.models)
    if not model_ids:
        raise CatalogError(f"catalog {catalog.path} has no models: nothing to run")
    for m in model_ids:
        catalog.model(m)  # clear error for unknown ids
    task_ids = list(tasks) if tasks else list(catalog.default_tasks)
    task_specs = [catalog.task(t) for t in task_ids]
    keyed: dict[str, tuple[str, str, str]] = {}
    for t in task_specs:
        scorer = scorer_for(t.kind)
        params = canonical_json(scorer.params(t, options))
        keyed[t.id] = (scorer.name, scorer.version, params)
    plans: list[ModelPlan] = []
    for m in model_ids:
        chain = tuple(catalog.lineage(m))
        spec = chain[0]
        sh = catalog.spec_hash(m)
        mp = ModelPlan(model=m, spec_hash=sh, level=spec.level, store=store_key(sh), lineage=chain)
        for t in task_specs:
            if t.level != spec.level:
                continue
            name, version, params = keyed[t.id]
            checksum = task_checksum(t)
            mp.units.append(
                Unit(
                    model=m,
                    task=t.id,
                    scorer=name,
                    level=t.level,
                    spec_hash=sh,
                    task_checksum=checksum,
                    params=params,
                    fingerprint=unit_fingerprint(sh, checksum, name, version, params),
                )
            )
        if mp.units:
            post = spec.postprocess is not None
            mp.cost = estimate_cost(catalog.kind(m), spec.level, mp.units, postprocessed=post)
            mp.embed_cost = embed_cost(catalog.kind(m), spec.level, postprocessed=post)
            plans.append(mp)
    if not plans:
        raise _nothing_to_run(catalog, model_ids, task_ids, task_specs)
    # Bases first: a derived sentence model can then reuse its base's embeddings.
    depth = {m: len(catalog.lineage(m)) for m in model_ids}
    plans.sort(key=lambda p: depth[p.model])
    return plans


def without_tasks(
    catalog: Catalog, *, models: list[str] | None = None, tasks: list[str] | None = None
) -> dict[str, str]:
    """{model: a one-line warning} for each selected model that no selected task is of the level of (``plan_run``
    plans nothing for it): with mixed models, ``--tasks`` of one level leaves the other level's models out."""
    model_ids = list(models) if models else list(catalog.models)
    task_specs = [catalog.task(t) for t in (list(tasks) if tasks else list(catalog.default_tasks))]
    have = sorted({t.level for t in task_specs})
    out = {}
    for m in model_ids:
        level = catalog.model(m).level
        if level not in have:
            out[m] = (
                f"model {m!r} is {level}-level, but the selected tasks are {'/'.join(have) or 'none'}-level: "
                f"it is not evaluated (add a {level}-level task to --tasks, or leave it out of --models)"
            )
    return out


def forward_key(catalog: Catalog, model: str) -> str | None:
    """What a model's forward pass depends on, as its kind declares it (``ModelKind.forward_key``; transformers: the
    checkpoint, revision, truncation, batching, dtype, remote code): models of one kind with the same key differ only
    in pooling, so one pass can embed them all. None for other models (a post-processed or derived one, a kind that
    declares no key)."""
    from evalfarm.plugins import RegistryError, model_kind

    chain = catalog.lineage(model)
    spec = chain[0]
    if len(chain) != 1 or spec.kind is None or spec.source is None or spec.postprocess is not None:
        return None
    try:
        kind = model_kind(spec.kind)
    except RegistryError:
        return None
    key = kind.forward_key(spec) if kind.forward_key is not None else None
    return canonical_json(key) if key is not None else None


def forward_pass_groups(catalog: Catalog, plans: list[ModelPlan]) -> list[list[ModelPlan]]:
    """The pending transformers that differ only in pooling, grouped (each group's first plan is its leader);
    reads only."""
    groups: dict[tuple[str, str], list[ModelPlan]] = {}
    for p in plans:
        key = forward_key(catalog, p.model)
        if key is not None:
            groups.setdefault((catalog.kind(p.model), key), []).append(p)
    return list(groups.values())


def share_forward_passes(catalog: Catalog, plans: list[ModelPlan]) -> dict[str, str]:
    """Group pending transformers that differ only in pooling (the paper's zoo has each checkpoint with cls, mean and
    first-last-avg pooling): the group's first plan (its leader) gets the others as ``siblings`` and embeds their
    texts in the same forward pass; each sibling waits for its leader (returned ``{sibling: leader}``), then finds its
    store complete and loads nothing. When the leader fails, the siblings embed on their own."""
    waits: dict[str, str] = {}
    for leader, *rest in forward_pass_groups(catalog, plans):
        leader.siblings = list(rest)
        for sib in rest:
            waits[sib.model] = leader.model
            sib.cost = max(0.05, sib.cost - kind_cost(catalog.kind(sib.model)))  # its encoder pass is the leader's
            sib.embed_cost = 0.0
    return waits


def describe(plans: list[ModelPlan]) -> dict[str, Any]:
    """Counts for a summary line: models, units, tasks."""
    return {
        "models": len(plans),
        "units": sum(len(p.units) for p in plans),
        "tasks": sorted({u.task for p in plans for u in p.units}),
    }
