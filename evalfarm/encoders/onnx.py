"""onnxruntime encoder for exported transformer graphs.

Graph inputs are read from the session: ``input_ids``, ``attention_mask`` and, when present, ``token_type_ids``
(fed as zeros, single-segment input). The output is the ``onnx_output`` option (index, default 0): a 3-D output is
token states and is pooled with the attention mask as the ``pooling`` option says (``mean``, the default; ``cls``: the
first token; ``max``: element-wise over tokens; ``last-token``: each text's last real token, batches padded right);
a 2-D output is already a sentence vector. Prompts (``prompts:``) are prepended to the texts.

The tokenizer comes from the ``tokenizer`` option (a source: a ``tokenizer.json`` file, or a folder with one, or a
folder that ``transformers.AutoTokenizer`` loads), else from a ``tokenizer.json`` next to the ``.onnx`` file.
Padding and truncation settings stored in a ``tokenizer.json`` are replaced: truncation to ``max_length``, padding per
batch to the longest sequence (texts are sorted by length first).

The packaged paraphrase-MiniLM-L3-v2 graph ships no tokenizer. It uses the uncased BERT WordPiece vocabulary of
all-MiniLM-L6-v2 (both derive from Microsoft's MiniLM-H384-uncased checkpoints), which was checked here: its
word-embedding ``Gather`` accepts ids up to 30521 and rejects 30522, the exact size of that vocabulary; and with
that tokenizer its sentence similarities agree closely with the L6 model's (see ``tests/test_encoders.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.prompts import literal_prompts_only
from evalfarm.catalog.specs import ModelSpec, Source, kind_options
from evalfarm.encoders.pooled import PooledOptions, last_token_states
from evalfarm.encoders.protocol import ModelLoadError, NotSupportedYet
from evalfarm.plugins import LoadContext, ModelKind, model_kinds

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_FEEDS = ("input_ids", "attention_mask", "token_type_ids")
_POOLINGS = ("mean", "cls", "max", "last-token")


class _Tok:
    """``encode(texts) -> list of id lists`` over a ``tokenizers`` or ``transformers`` tokenizer."""

    def __init__(self, path: Path, max_length: int) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        self.pad_id = 0
        self._fast: Tokenizer | None = None  # a tokenizer.json, else
        self._hf: Any = None  # a transformers tokenizer folder
        if file.is_file():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(file))
            if tok.padding:
                self.pad_id = int(tok.padding.get("pad_id", 0))
            elif (pad := tok.token_to_id("[PAD]")) is not None:
                self.pad_id = int(pad)
            tok.no_padding()
            tok.enable_truncation(max_length)
            self._fast = tok
        elif path.is_dir():
            from transformers import AutoTokenizer

            # explicit: left unset, transformers *asks* on a folder with custom code, and `echo y |` runs it
            self._hf = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
            self.pad_id = int(self._hf.pad_token_id or 0)
        else:
            raise FileNotFoundError(f"tokenizer not found: {path} (a tokenizer.json file or a tokenizer folder)")
        self.max_length = max_length

    def encode(self, texts: list[str]) -> list[list[int]]:
        if self._fast is not None:
            return [e.ids for e in self._fast.encode_batch(texts)]
        return self._hf(texts, truncation=True, max_length=self.max_length, padding=False)["input_ids"]


class OnnxEncoder:
    level: Literal["sentence"] = "sentence"

    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path | None,
        *,
        output: int | None = None,
        pooling: str = "mean",
        max_length: int = 128,
        batch_size: int = 64,
    ) -> None:
        import onnxruntime as ort

        model_path = Path(model_path)
        if tokenizer_path is None:
            tokenizer_path = model_path.parent / "tokenizer.json"
            if not tokenizer_path.is_file():
                raise ValueError(f"{model_path}: no tokenizer.json next to the model; set the spec's 'tokenizer'")
        self.tokenizer = _Tok(Path(tokenizer_path), max_length)
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self.session = ort.InferenceSession(str(model_path), providers=providers)
        self.providers = self.session.get_providers()
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        unknown = set(self.inputs) - set(_FEEDS)
        if unknown or "input_ids" not in self.inputs:
            raise ValueError(
                f"{model_path}: graph inputs {sorted(self.inputs)} are not a transformer's "
                f"(expected input_ids, attention_mask[, token_type_ids])"
            )
        outputs = self.session.get_outputs()
        self.output_index = 0 if output is None else output
        if not 0 <= self.output_index < len(outputs):
            raise ValueError(
                f"{model_path}: onnx_output {self.output_index} out of range "
                f"({len(outputs)} outputs: {[o.name for o in outputs]})"
            )
        self.output_name = outputs[self.output_index].name
        if pooling not in _POOLINGS:
            raise ValueError(f"onnx pooling {pooling!r}: token states pool by {', '.join(_POOLINGS)}")
        self.pooling = pooling
        self.batch_size = batch_size
        self.dim = int(self.encode(["a"]).shape[1])
        self.spec_id = ""
        self.provenance: dict = {}

    def __repr__(self) -> str:
        return f"OnnxEncoder(output={self.output_name!r}, dim={getattr(self, 'dim', '?')}, {self.providers[0]})"

    def _dtype(self, name: str) -> type:
        return np.int32 if "int32" in self.inputs[name].type else np.int64

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        ids = self.tokenizer.encode([str(t) for t in texts])
        order = np.argsort([-len(x) for x in ids], kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(1, max(len(ids[i]) for i in idx))
            input_ids = np.full((len(idx), width), self.tokenizer.pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for j, i in enumerate(idx):
                input_ids[j, : len(ids[i])] = ids[i]
                mask[j, : len(ids[i])] = 1
            feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
            feed = {k: v.astype(self._dtype(k), copy=False) for k, v in feed.items() if k in self.inputs}
            (res,) = self.session.run([self.output_name], feed)
            if not np.issubdtype(res.dtype, np.floating):
                raise ValueError(
                    f"onnx output {self.output_name!r} (index {self.output_index}) holds {res.dtype}, "
                    "not embeddings; pick another onnx_output"
                )
            if res.ndim == 3:
                res = _pool(res, mask, self.pooling)
            elif res.ndim != 2:
                raise ValueError(
                    f"onnx output {self.output_name!r} has shape {res.shape}; expected token states "
                    "(batch, seq, dim) or sentence vectors (batch, dim)"
                )
            if out is None:
                out = np.zeros((len(texts), res.shape[1]), dtype=np.float32)
            out[idx] = res
        if out is None:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        return out


def _pool(states: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """Token states ``(batch, seq, dim)`` to sentence vectors, padding masked out (right padding: token 0 first)."""
    if pooling == "cls":
        return states[:, 0]
    if pooling == "last-token":
        return np.asarray(last_token_states(states, mask), dtype=np.float32)
    m = mask[..., None].astype(np.float32)
    if pooling == "max":
        return np.where(m > 0, states, -np.inf).max(axis=1)
    return (states * m).sum(axis=1) / np.clip(m.sum(axis=1), 1.0, None)


# -- the model kind -------------------------------------------------------------------------------------------------
class OnnxOptions(PooledOptions):
    """An onnx model's own options (top-level keys of its catalog entry): ``pooling`` (cls, mean, max), the graph's
    output, its tokenizer."""

    onnx_output: int | None = Field(
        default=None, ge=0, description="the graph output read (index; default 0); token states are pooled"
    )
    tokenizer: Source | None = Field(
        default=None, description="the tokenizer's source (default: a tokenizer.json next to the graph)"
    )


def check_spec(spec: ModelSpec) -> None:
    """An ONNX graph's token states pool by cls, mean, max or last-token; the graph has no hidden states to choose
    from, and no prompts of its own."""
    if (pooling := kind_options(spec, OnnxOptions).pooling) is not None and pooling not in _POOLINGS:
        raise ValueError(f"model {spec.id!r}: an onnx model's token states pool by {', '.join(_POOLINGS)}")
    literal_prompts_only(spec.prompts, model=spec.id, kind="onnx")


def load_model(spec: ModelSpec, ctx: LoadContext) -> tuple[OnnxEncoder, dict[str, Any]]:
    """A local ONNX graph (a file, or a folder with one) and its tokenizer (the spec's, or one next to the graph)."""
    from evalfarm.encoders.sources import source_provenance

    if ctx.is_hub:
        raise NotSupportedYet(
            f"model {spec.id!r}: ONNX graphs from the hub are not supported yet; use a path/package/url source"
        )
    model_path = _single_onnx(ctx.local_path)
    tok_path = None
    prov: dict[str, Any] = {}
    opts = kind_options(spec, OnnxOptions)
    if opts.tokenizer is not None:
        assert ctx.resolve is not None
        tok_loc = ctx.resolve(opts.tokenizer)
        if isinstance(tok_loc, str):
            raise NotSupportedYet(f"model {spec.id!r}: hub tokenizers for ONNX models are not supported yet")
        tok_path = tok_loc
        prov["tokenizer"] = source_provenance(opts.tokenizer)
    enc = OnnxEncoder(
        model_path,
        tok_path,
        output=opts.onnx_output,
        pooling=opts.pooling or "mean",
        max_length=spec.max_length,
        batch_size=spec.batch_size,
    )
    prov.update(providers=enc.providers, output=enc.output_name, max_length=spec.max_length)
    if opts.pooling is not None:
        prov["pooling"] = opts.pooling
    return enc, prov


def _single_onnx(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("*.onnx"))
    if len(found) != 1:
        raise ModelLoadError(
            f"{path}: expected one .onnx file in the folder, found {[p.name for p in found]}; "
            "point the source path at the graph"
        )
    return found[0]


KIND = ModelKind(
    name="onnx",
    description="An exported transformer graph run by onnxruntime (CUDA when available); token states are "
    "pooled (mean, or the spec's cls / max).",
    levels=("sentence",),
    load=load_model,
    check=check_spec,
    libraries=("onnxruntime", "tokenizers"),
    cost=10.0,
    gpu=True,
    fields=("source", "max_length", "batch_size", "prompts"),
    options=OnnxOptions,
)
model_kinds.register(KIND)
