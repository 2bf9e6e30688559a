"""How much GPU memory a model needs, told before it loads: what the scheduler packs GPUs by (issue 50).

    need = weights + activations + context

- **weights**: parameters x the bytes of the dtype the model runs in (float32: 4, float16 / bfloat16: 2);
- **activations** of its largest batch, ``batch_size`` texts at ``max_length`` (on a GPU the batcher's token
  budget is exactly that many tokens, :mod:`evalfarm.encoders.batching`): every layer's working set (queries, keys,
  values, the attention scores of every head, the feed-forward's intermediate states) plus the hidden states the
  pooling keeps (all of them for a pooling over two layers or a chosen layer, else the last two), the float32
  copies the pooling makes, and a decoder's key/value cache when its config keeps one;
- **context**: :data:`CUDA_CONTEXT_BYTES` for the CUDA context and the caching allocator's slack of one worker
  process (each of several models sharing a GPU has its own).

Parameter counts come without loading the model, from the first of these that its files allow:

1. **safetensors headers** (exact): every ``*.safetensors`` file starts with an 8-byte length and a JSON header
   that lists each tensor's dtype and shape; a few kilobytes are read, never the weights;
2. **config.json** (the architecture's shape): hidden size, layers, intermediate size, vocabulary, positions,
   heads and key/value heads, through :func:`params_from_config` (BERT / RoBERTa / MPNet / XLM-R / ELECTRA /
   DistilBERT-shaped encoders; Llama / Mistral / Qwen2 / Qwen3 / Gemma-shaped decoders), within 0.1 % of the real
   counts (tests/test_placement.py checks each against the model built on torch's meta device);
3. **weight file sizes**: ``pytorch_model*.bin`` / ``*.onnx`` bytes over the bytes per parameter of the stored
   dtype (config.json's ``torch_dtype``, else float32).

A ``gpu_memory_gib`` in the model's catalog entry overrides the estimate (it is how a model the formulas do not
know, or one that needs more than they say, is placed). A hub id whose files are not in the local Hugging Face
cache, or a source that is not a local folder, has no estimate: placement gives it a whole GPU, as before.
Files are opened without following them into FIFOs or devices (a regular file or nothing: a planted FIFO cannot
hang the planner), and a header longer than safetensors' own limit is not read.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
CUDA_CONTEXT_BYTES = int(0.75 * GIB)
"""One worker process's CUDA context, cuBLAS / cuDNN workspaces and allocator slack on the GPU (about 0.5 GiB of
context on an H100 with torch's kernels loaded, plus headroom)."""
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "float64": 8}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip
MAX_HEADER_BYTES = 100_000_000
"""safetensors' own limit on a header's length: a file claiming more is not read."""

_ALIASES = {  # config.json names of the same shape in other architectures (DistilBERT, GPT-2-style)
    "hidden_size": ("dim", "n_embd", "d_model"),
    "num_hidden_layers": ("n_layers", "n_layer"),
    "intermediate_size": ("hidden_dim",),
    "num_attention_heads": ("n_heads", "n_head"),
}
_DECODERS = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2")


@dataclass(frozen=True)
class Footprint:
    """A model's GPU memory need in bytes, with how it was told (``how``: declared, or where the parameter count
    came from) -- what a refusal or a placement record says."""

    total_bytes: int | None  # None: not known (placement gives the model a whole GPU)
    how: str
    params: int | None = None
    weight_bytes: int = 0
    activation_bytes: int = 0
    context_bytes: int = 0

    @property
    def gib(self) -> float | None:
        return None if self.total_bytes is None else self.total_bytes / GIB

    def describe(self) -> str:
        """One line: ``~3.2 GiB (22.7M parameters x 4 bytes float32 ...)``."""
        if self.total_bytes is None:
            return f"unknown ({self.how})"
        if self.params is None:
            return f"{self.total_bytes / GIB:.1f} GiB ({self.how})"
        return (
            f"{self.total_bytes / GIB:.1f} GiB ({_count(self.params)} parameters from {self.how}: weights "
            f"{self.weight_bytes / GIB:.2f} GiB + activations {self.activation_bytes / GIB:.2f} GiB + CUDA context "
            f"{self.context_bytes / GIB:.2f} GiB)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "gib": None if self.total_bytes is None else round(self.total_bytes / GIB, 3),
            "how": self.how,
            "params": self.params,
        }


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


# -- parameter counts ------------------------------------------------------------------------------------------
def params_from_config(cfg: Mapping[str, Any]) -> int | None:
    """The parameter count of ``AutoModel.from_config(cfg)`` (the base model: no language-model head), from the
    shape config.json declares; None for an architecture these formulas do not cover."""
    cfg = {**{k: cfg[a] for k, names in _ALIASES.items() for a in names if a in cfg and k not in cfg}, **cfg}
    try:
        h = int(cfg["hidden_size"])
        n_layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg["vocab_size"])
        inter = int(cfg.get("intermediate_size") or 4 * h)
    except (KeyError, TypeError, ValueError):
        return None
    model_type = str(cfg.get("model_type", ""))
    if model_type in _DECODERS or cfg.get("num_key_value_heads") is not None:
        return _decoder_params(cfg, h, n_layers, vocab, inter)
    return _encoder_params(cfg, h, n_layers, vocab, inter)


def _encoder_params(cfg: Mapping[str, Any], h: int, n_layers: int, vocab: int, inter: int) -> int:
    """BERT-shaped: embeddings (words, positions, token types, LayerNorm), per layer attention (4 h x h + bias),
    feed-forward (h x i, i x h), two LayerNorms; the pooler (h x h) where AutoModel adds one."""
    model_type = str(cfg.get("model_type", ""))
    positions = int(cfg.get("max_position_embeddings", 512))
    types = int(cfg.get("type_vocab_size", 0 if model_type in ("distilbert", "mpnet") else 2))
    emb_size = int(cfg.get("embedding_size") or h)  # ELECTRA / ALBERT factorised embeddings
    emb = vocab * emb_size + positions * emb_size + types * emb_size + 2 * emb_size
    if emb_size != h:
        emb += emb_size * h + h  # the projection up to the hidden size
    layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    total = emb + n_layers * layer
    if model_type == "mpnet":
        total += int(cfg.get("relative_attention_num_buckets", 32)) * int(cfg.get("num_attention_heads", 12))
    if model_type in ("bert", "roberta", "xlm-roberta", "mpnet", "camembert"):
        total += h * h + h  # the pooler AutoModel builds for these
    return total


def _decoder_params(cfg: Mapping[str, Any], h: int, n_layers: int, vocab: int, inter: int) -> int:
    """Llama-shaped: token embeddings; per layer q / k / v / o projections (grouped key/value heads; biases where
    the architecture has them), a gated feed-forward (3 x h x i), two RMSNorms; a final norm."""
    model_type = str(cfg.get("model_type", ""))
    heads = int(cfg.get("num_attention_heads", max(1, h // 64)))
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or h // heads)
    attn = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h
    if model_type == "qwen2" or cfg.get("attention_bias"):
        attn += heads * head_dim + 2 * kv * head_dim
        if cfg.get("attention_bias") and model_type != "qwen2":
            attn += h  # the output projection's bias too (Qwen2 has biases on q, k and v only)
    if model_type == "qwen3":
        attn += 2 * head_dim  # q_norm, k_norm
    norms = 2 * h + (2 * h if model_type in ("gemma2", "gemma3_text") else 0)
    layer = attn + 3 * h * inter + norms
    return vocab * h + n_layers * layer + h


def _open_regular(path: Path) -> int | None:
    """A file descriptor of ``path`` when it is a regular file (never blocking on a FIFO), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return fd


def safetensors_params(path: Path) -> int | None:
    """The parameters stored in one ``.safetensors`` file, from its header alone; None when it is not one."""
    fd = _open_regular(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            return None
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            return None
        try:
            header = json.loads(fh.read(length))
        except (ValueError, UnicodeDecodeError):
            return None
    if not isinstance(header, dict):
        return None
    total = 0
    for name, t in header.items():
        if name == "__metadata__" or not isinstance(t, dict):
            continue
        shape = t.get("shape")
        if not isinstance(shape, list) or not all(isinstance(x, int) and x >= 0 for x in shape):
            return None
        total += math.prod(shape)
    return total


def _read_config(folder: Path) -> dict[str, Any] | None:
    fd = _open_regular(folder / "config.json")
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(4_000_000)
    try:
        cfg = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):  # a multimodal wrapper: the text model
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    return cfg if isinstance(cfg, dict) else None


def _weight_files(folder: Path, pattern: str) -> list[Path]:
    """``pattern`` files in the folder and its immediate sub-folders (a sentence-transformers model keeps a Dense
    layer's weights in ``2_Dense/``)."""
    try:
        found = sorted(folder.glob(pattern)) + sorted(folder.glob(f"*/{pattern}"))
    except OSError:
        return []
    return [p for p in found if not p.name.startswith(".")]


def count_params(folder: Path) -> tuple[int | None, str, dict[str, Any] | None]:
    """(parameters, where the count came from, the config) of a local model folder (see the module docstring)."""
    cfg = _read_config(folder)
    shards = _weight_files(folder, "*.safetensors")
    if shards:
        counts = [safetensors_params(p) for p in shards]
        if counts and all(c is not None for c in counts):
            return sum(c for c in counts if c is not None), "safetensors headers", cfg
    if cfg is not None and (n := params_from_config(cfg)) is not None:
        return n, "config.json", cfg
    files = _weight_files(folder, "pytorch_model*.bin") or _weight_files(folder, "*.onnx")
    if files:
        stored = DTYPE_BYTES.get(str((cfg or {}).get("torch_dtype") or (cfg or {}).get("dtype") or "float32"), 4)
        size = 0
        for p in files:
            try:
                size += p.stat().st_size
            except OSError:
                continue
        return size // stored, "weight file sizes", cfg
    return None, "no safetensors header, config.json or weight file in the model folder", cfg


# -- activations ------------------------------------------------------------------------------------------------
def activation_bytes(
    cfg: Mapping[str, Any] | None, *, batch: int, tokens: int, dtype_bytes: int, all_hidden: bool
) -> int:
    """Peak activations of one forward pass over ``batch`` texts of ``tokens`` tokens (see the module docstring);
    without a config, a BERT-base-sized guess scaled by nothing (768 wide, 12 heads)."""
    cfg = cfg or {}
    h = int(cfg.get("hidden_size", 768))
    inter = int(cfg.get("intermediate_size") or 4 * h)
    heads = int(cfg.get("num_attention_heads", 12))
    layers = int(cfg.get("num_hidden_layers", 12))
    n = batch * tokens
    kept = (layers + 1) if all_hidden else 2
    per_layer = n * (4 * h + 2 * inter) * dtype_bytes + 2 * batch * heads * tokens * tokens * dtype_bytes
    hidden = kept * n * h * dtype_bytes
    pooling = 3 * n * h * 4  # the float32 copy of a hidden state, the mask product, the sum
    cache = 0
    if cfg.get("use_cache") and str(cfg.get("model_type", "")) in _DECODERS:
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
        cache = 2 * layers * n * kv * head_dim * dtype_bytes
    return per_layer + hidden + pooling + cache


def estimate(
    folder: Path | None,
    *,
    dtype: str,
    batch_size: int,
    max_length: int,
    all_hidden: bool = False,
    declared_gib: float | None = None,
) -> Footprint:
    """A model's footprint (see the module docstring). ``folder``: its local files (None: not local);
    ``all_hidden``: its pooling keeps every hidden state (first-last-avg, last-2-avg, a chosen layer)."""
    if declared_gib is not None:
        return Footprint(int(declared_gib * GIB), "declared (gpu_memory_gib)")
    if folder is None or not folder.is_dir():
        return Footprint(None, "its files are not on this machine")
    params, how, cfg = count_params(folder)
    if params is None:
        return Footprint(None, how)
    e = DTYPE_BYTES.get(dtype, 4)
    weights = params * e
    acts = activation_bytes(cfg, batch=batch_size, tokens=max_length, dtype_bytes=e, all_hidden=all_hidden)
    total = weights + acts + CUDA_CONTEXT_BYTES
    return Footprint(total, how, params, weights, acts, CUDA_CONTEXT_BYTES)
