"""Plan: the model × pool units of a run, each with content fingerprints.

A unit's fingerprint hashes everything that can change its numbers: the model spec and its bases, the pool's
data checksum, the evaluation code version and (for ranks) the rank policy. Same fingerprint → same result,
so the runner skips it unless ``--force``.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

from evalfarm.catalog.registry import Catalog
from evalfarm.catalog.specs import canonical_json
from evalfarm.pools.data import pool_checksum
from evalfarm.preprocess import PROTOCOL_VERSION
from evalfarm.rank import SIMILARITIES, RankPolicy

# Bump when a stage's output for the same inputs changes (a bug fix, a new column that matters).
CODE_VERSIONS = {"embed": "2", "rank": "3"}


def _h(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Unit:
    """One model on one pool: embed it, then rank it under every similarity."""

    model: str
    pool: str
    spec_hash: str
    pool_checksum: str
    embed_fingerprint: str
    rank_fingerprint: str


@dataclass
class ModelPlan:
    """All units of one model: a worker loads the model once and runs them in order."""

    model: str
    spec_hash: str
    level: str
    units: list[Unit] = field(default_factory=list)
    cost: float = 1.0  # relative size, for largest-first assignment


@dataclass(frozen=True)
class RunConfig:
    """Options that change ranks (fingerprinted) plus how to run (not fingerprinted)."""

    policy: RankPolicy = RankPolicy()
    similarities: tuple[str, ...] = SIMILARITIES
    device: str | None = None
    keep_ranks: bool = True

    def __post_init__(self) -> None:
        unknown = [s for s in self.similarities if s not in SIMILARITIES]
        if unknown or not self.similarities:
            raise ValueError(f"unknown similarity {unknown or '(none)'}: choose from {', '.join(SIMILARITIES)}")

    def rank_key(self) -> str:
        return canonical_json(
            {
                "policy": asdict(self.policy),
                "similarities": list(self.similarities),
                "code": CODE_VERSIONS["rank"],
                "protocol": PROTOCOL_VERSION,
            }
        )


# Relative cost of embedding one pool, per encoder kind, in units of one sentence-pool rank pass (cos + l2 over
# ~7k pairs x 25k background: ~9 s on one of 2 CPU cores). Measured on the local zoo's nightly run (README): MiniLM
# in torch or ONNX ~90 s a pool, spaCy's CNN ~20 s, the static model ~2 s, a bag of words or a word-vector lookup
# under 1 s. Only the order and the ETA depend on it: largest-first assignment keeps a big model from starting last
# and becoming the straggler that the whole run waits for.
KIND_COST = {
    "transformers": 10.0,
    "sentence-transformers": 10.0,
    "onnx": 10.0,
    "spacy-tok2vec": 2.0,
    "static": 0.25,
    "spacy": 0.1,
    "bow": 0.05,
    "word-vectors": 0.02,
}
RANK_COST = {"sentence": 1.0, "word": 0.5}  # the word pool: 5.5k pairs x 22k background
POSTPROCESS_COST = 0.15  # fitting ABTT / PC removal / whitening on a base's stored embeddings


def estimate_cost(kind: str, level: str, n_units: int, postprocessed: bool = False) -> float:
    """Relative cost of a model's units: embedding (by kind) + ranking. A post-processed sentence model reuses its
    base's stored embeddings (the scheduler runs the base first), so it costs the fit, not the encoder."""
    embed = POSTPROCESS_COST if postprocessed and level == "sentence" else KIND_COST.get(kind, 5.0)
    return n_units * (embed + RANK_COST.get(level, 1.0))


def embed_fingerprint(spec_hash: str, pool_sum: str) -> str:
    return _h("embed", spec_hash, pool_sum, CODE_VERSIONS["embed"])


def plan_run(
    catalog: Catalog,
    *,
    models: list[str] | None = None,
    pools: list[str] | None = None,
    config: RunConfig = RunConfig(),
) -> list[ModelPlan]:
    """Units for the selected models and pools (pools are matched to models by level)."""
    model_ids = list(models) if models else list(catalog.models)
    for m in model_ids:
        catalog.model(m)  # clear error for unknown ids
    pool_ids = list(pools) if pools else list(catalog.default_pools)
    pool_specs = [catalog.pool(p) for p in pool_ids]
    rank_key = config.rank_key()
    plans: list[ModelPlan] = []
    for m in model_ids:
        spec = catalog.model(m)
        sh = catalog.spec_hash(m)
        mp = ModelPlan(model=m, spec_hash=sh, level=spec.level)
        for ps in pool_specs:
            if ps.level != spec.level:
                continue
            ps_sum = pool_checksum(ps)
            ef = embed_fingerprint(sh, ps_sum)
            mp.units.append(
                Unit(
                    model=m,
                    pool=ps.id,
                    spec_hash=sh,
                    pool_checksum=ps_sum,
                    embed_fingerprint=ef,
                    rank_fingerprint=_h("rank", ef, spec.oov, rank_key),
                )
            )
        if mp.units:
            mp.cost = estimate_cost(
                catalog.kind(m), spec.level, len(mp.units), postprocessed=spec.postprocess is not None
            )
            plans.append(mp)
    # Bases first: a derived sentence model can then reuse its base's embeddings.
    depth = {m: len(catalog.lineage(m)) for m in model_ids}
    plans.sort(key=lambda p: depth[p.model])
    return plans
