"""``kind: python``: an encoder object that lives in the caller's process, handed to ``evalfarm.evaluate()``.

Its spec records the model's identity (id, level, version); the object itself never goes through a catalog or a
worker, so loading such a spec from a catalog is an error that says how to evaluate it instead.
"""

from __future__ import annotations

from typing import NoReturn

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.protocol import ModelLoadError
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


def load_model(spec: ModelSpec, ctx: LoadContext) -> NoReturn:
    """Nothing to load: the object exists only in the process that holds it."""
    raise ModelLoadError(
        f"model {spec.id!r}: kind 'python' is an in-memory encoder object: evaluate it with "
        "evalfarm.evaluate(encoder, name=...) in the process that holds it"
    )


KIND = ModelKind(
    name="python",
    description="An in-memory encoder object handed to evalfarm.evaluate() (any object with level, dim and encode).",
    levels=("word", "sentence"),
    load=load_model,
    needs_source=False,
    fields=("revision",),
)
model_kinds.register(KIND)

__all__ = ["KIND", "load_model"]
