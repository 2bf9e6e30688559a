"""Model kinds a catalog may name (the paper evaluates them) but this project cannot run yet.

Each says what is missing (``ModelKind.unsupported``): loading one of their models raises ``NotSupportedYet`` naming
it, before its source is resolved (nothing is downloaded for nothing). Their catalog entries keep results comparable
with the paper's tables.
"""

from __future__ import annotations

from evalfarm.catalog.specs import ModelSpec, kind_options
from evalfarm.encoders.pooled import PooledOptions
from evalfarm.plugins import ModelKind, model_kinds


def check_bert_flow(spec: ModelSpec) -> None:
    """BERT-flow flows a BERT encoder's pooled states; last-token pooling reads a decoder embedder's last state."""
    if kind_options(spec, PooledOptions).pooling == "last-token":
        raise ValueError(
            f"model {spec.id!r}: bert-flow pools a BERT encoder's token states (cls, mean, max, first-last-avg, "
            "last-2-avg); last-token is a decoder embedder's pooling (kind transformers)"
        )


INFERSENT: ModelKind[ModelSpec] = ModelKind(
    name="infersent",
    description="InferSent (Conneau et al. 2017): a BiLSTM-max sentence encoder trained on NLI, over word vectors.",
    levels=("sentence",),
    unsupported="the InferSent BiLSTM-max encoder (facebookresearch/InferSent models.py) and its word-vector file",
    fields=("source",),
)
BERT_FLOW: ModelKind[ModelSpec] = ModelKind(
    name="bert-flow",
    description="BERT-flow (Li et al. 2020): BERT sentence vectors mapped to a Gaussian by a normalizing flow.",
    levels=("sentence",),
    unsupported="the BERT-flow normalizing flow (Li et al. 2020), which must be trained on the target sentences",
    fields=("source",),
    options=PooledOptions,
    check=check_bert_flow,
)

model_kinds.register(INFERSENT)
model_kinds.register(BERT_FLOW)
