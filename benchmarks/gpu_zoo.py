"""The whole pipeline on one GPU, and the zoo's architectures' throughput there: one command for one device call
(issue 50). Inputs come from ``benchmarks/gpu_carry.py`` (``--inputs``, default ``.gpu-carry``); figures go to
``--json`` after each section, so a run cut short keeps what finished.

    python benchmarks/gpu_zoo.py --json $OUT/gpu-zoo.json                # on the GPU machine (benchmarks/README.md)
    python benchmarks/gpu_zoo.py --smoke --device cpu --json z.json      # the rehearsal here: every section, small

Sections (``--only``, in this order):

- ``pipeline``: ``python -m evalfarm run --executor local`` (Ray's wheel does not fit a call) of real
  all-MiniLM-L6-v2 (sentence-transformers; transformers, mean pooling; sentence-transformers in bfloat16) and a real
  word model (GloVe 6B 50d's 5,000 most frequent words: EvalRank's ``toy_emb.txt``) on EvalRank word and sentence,
  STS-B and two downstream tasks (TREC, MR: every training row, SentEval's protocol), on ``--device``. Its metrics
  against the CPU run's (``cpu-reference.json``, :data:`TOL_VS_CPU`) and bfloat16 against float32
  (``HALF_PRECISION_TOLERANCE``).
- ``diagnosis``: all-MiniLM-L6-v2 in float32 / float16 / bfloat16, texts/s of: the count-based loop of evalfarm 0.1
  (the 5.6k vs 18.8k of the first H200 run), the same with cuDNN attention off, tokenisation alone, the encoder as
  shipped (``evalfarm/encoders/batching.py``), and bare ``model(**batch)`` loops over pre-tokenised batches with exact
  and with rounded widths: which part made half precision slower (the hypothesis in batching.py's docstring).
- ``throughput``: the zoo's architectures built from configs with random weights (:data:`ARCHITECTURES`: the paper's
  sentence encoders and today's decoder embedders) embedding a sample of the default zoo's sentence texts at their
  real lengths: texts/s, real tokens/s, peak memory against the placement's estimate, model-FLOP utilisation
  ``2 x parameters x tokens / (seconds x the GPU's dense bf16 peak)``, and the floor -- a bare ``model(**batch)``
  loop over the same batches, pre-tokenised and already on the device -- measured in the same call.
- ``projection``: the paper's 105-model zoo (``catalog/evalrank-paper.yaml``) on every default task, full data, on
  one GPU of this kind, from the rates above and the pipeline's unit times (its assumptions are in the output).

Tokens: every architecture gets all-MiniLM-L6-v2's WordPiece ids (valid in every vocabulary here); RoBERTa's BPE and
the decoders' tokenizers would give a few percent more or fewer tokens for the same English text, and they are not
on the machine. ``--smoke`` shrinks every architecture (2 layers, 64 wide), the task files and the text sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalfarm.encoders._torch import HALF_PRECISION_TOLERANCE  # noqa: E402 - after the sys.path line

TOL_VS_CPU = {"evalrank-word": 1e-6, "evalrank-sentence": 2e-3, "sts": 1e-3, "downstream": 0.005}
"""The GPU's float32 metrics against the CPU run's (absolute): EvalRank word -- lookups and the rank kernel, which is
bit-identical on CUDA -- exact up to float printing; EvalRank sentence MRR and STS Spearman within the rounding of a
different GEMM's sums; downstream accuracy within half a point (an L-BFGS fit on another device)."""

PEAK_BF16 = {"H200": 989e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12,
             "L4": 121e12, "A10": 125e12}  # fmt: skip
"""Dense bf16 tensor-core peaks (FLOP/s, NVIDIA's data sheets, no sparsity), by the device name's first match."""

_BERT = {"model_type": "bert", "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
_ROBERTA = {"model_type": "roberta", "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
            "pad_token_id": 1}  # fmt: skip
_QWEN2 = {"model_type": "qwen2", "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1e6,
          "tie_word_embeddings": True}  # fmt: skip


def _shape(h: int, layers: int, heads: int, inter: int, **extra: Any) -> dict[str, Any]:
    return {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": inter,
            **extra}  # fmt: skip


ARCHITECTURES: dict[str, dict[str, Any]] = {
    "MiniLM-L6": {**_BERT, **_shape(384, 6, 12, 1536)},
    "MiniLM-L12": {**_BERT, **_shape(384, 12, 12, 1536)},
    "BERT-base": {**_BERT, **_shape(768, 12, 12, 3072)},
    "MPNet-base": {"model_type": "mpnet", "vocab_size": 30527, "max_position_embeddings": 514,
                   **_shape(768, 12, 12, 3072)},
    "RoBERTa-base": {**_ROBERTA, **_shape(768, 12, 12, 3072)},
    "BERT-large": {**_BERT, **_shape(1024, 24, 16, 4096)},
    "RoBERTa-large": {**_ROBERTA, **_shape(1024, 24, 16, 4096)},
    "Qwen2-0.5B": {**_QWEN2, **_shape(896, 24, 14, 4864, num_key_value_heads=2)},
    "Qwen2-1.5B": {**_QWEN2, **_shape(1536, 28, 12, 8960, num_key_value_heads=2)},
    "Mistral-7B": {"model_type": "mistral", "vocab_size": 32000, "max_position_embeddings": 32768,
                   **_shape(4096, 32, 32, 14336, num_key_value_heads=8)},
}  # fmt: skip
"""The architectures measured: the paper's sentence zoo (BERT / RoBERTa base and large, SBERT's and SimCSE's BERT-base,
MPNet, MiniLM) and decoder embedders of today's shapes (gte-Qwen2-1.5B, e5-mistral-7b): each as ``AutoConfig``
keyword arguments."""
DECODERS = ("Qwen2-0.5B", "Qwen2-1.5B", "Mistral-7B")
SMOKE_ARCHS = ("MiniLM-L6", "MPNet-base", "RoBERTa-base", "Qwen2-0.5B", "Mistral-7B")
"""--smoke: one architecture of each family (model_type)."""
SMOKE_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
SMOKE_KV = 2


def arch_config(name: str, *, smoke: bool) -> Any:
    """The ``transformers`` config of an architecture (``--smoke``: 2 layers, 64 wide, same family)."""
    from transformers import AutoConfig

    kw = dict(ARCHITECTURES[name])
    if smoke:
        kw.update(SMOKE_SHAPE)
        if "num_key_value_heads" in kw:
            kw["num_key_value_heads"] = SMOKE_KV
    model_type = kw.pop("model_type")
    return AutoConfig.for_model(model_type, **kw)


def dtypes_for(name: str) -> list[str]:
    """float32 and bfloat16 for the encoders (is half precision faster above 100M parameters?); the decoders in
    bfloat16, the 0.5B also in float32."""
    if name in DECODERS:
        return ["float32", "bfloat16"] if name == "Qwen2-0.5B" else ["bfloat16"]
    return ["float32", "bfloat16"]


# -- helpers ------------------------------------------------------------------------------------------------------
class Budget:
    """The call's time: sections and measurements ask what is left and stop early, recorded as such."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t


def _peak_flops(device: str) -> tuple[float | None, str]:
    import torch

    if not device.startswith("cuda"):
        return None, "cpu"
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    return peak, name


def _machine(device: str) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"host": platform.node(), "device": device, "torch": torch.__version__,
                           "python": platform.python_version(), "cpus": os.cpu_count()}  # fmt: skip
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(0)
        out["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        out["cuda"] = torch.version.cuda
    try:
        out["loadavg"] = os.getloadavg()
    except OSError:
        pass
    return out


def _paths(inputs: Path) -> dict[str, Path]:
    return {
        "minilm": inputs / "call-c" / "minilm",
        "zoo": inputs / "call-b" / "inputs" / "zoo.json",
        "reference": inputs / "call-b" / "inputs" / "cpu-reference.json",
        "data_tar": inputs / "call-b" / "data.tar.xz",
        "data": inputs / "data",
    }


def _data(inputs: Path) -> Path:
    """The task files: unpacked from the carried tarball the first time."""
    p = _paths(inputs)
    if not p["data"].is_dir():
        with tarfile.open(p["data_tar"]) as tar:
            tar.extractall(p["data"], filter="data")
    return p["data"]


def _texts(inputs: Path, smoke: bool) -> list[str]:
    sample = json.loads(_paths(inputs)["zoo"].read_text(encoding="utf-8"))["sample"]
    return sample[:600] if smoke else sample


# -- pipeline -----------------------------------------------------------------------------------------------------
PIPELINE_TASKS = ["evalrank-word", "evalrank-sentence", "stsb", "trec", "mr"]


def _sliced_tasks(data: Path, work: Path, lines: int) -> list[dict[str, Any]]:
    """The pipeline's task entries with each file cut to its first ``lines`` lines (--smoke), checksummed anew."""
    import hashlib

    from evalfarm.catalog.registry import load_catalog

    cat = load_catalog("tasks")
    out = []
    for tid in PIPELINE_TASKS:
        spec = cat.task(tid).model_dump(mode="json")
        spec.pop("urls", None)
        for role, rel in spec["files"].items():
            body = b"\n".join((data / rel).read_bytes().split(b"\n")[:lines]) + b"\n"
            dst = work / "smoke-data" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(body)
            spec["sha256"][role] = hashlib.sha256(body).hexdigest()
        out.append(spec)
    return out


def pipeline_catalog(data: Path, minilm: Path, work: Path, smoke: bool, reference: bool = False) -> Path:
    """The run's catalog: the word model, all-MiniLM-L6-v2 three ways; the tasks as shipped (--smoke: sliced)."""
    glove = {"type": "path", "ref": str(data / "evalrank/reference/toy_emb.txt")}
    src = {"type": "path", "ref": str(minilm)}
    models = [
        {"id": "glove-6b-50d-top5k", "level": "word", "kind": "word-vectors", "format": "glove-text", "source": glove},
        {"id": "all-minilm-l6-v2", "level": "sentence", "kind": "sentence-transformers", "source": src},
        {"id": "all-minilm-l6-v2-bf16", "level": "sentence", "kind": "sentence-transformers", "source": src,
         "dtype": "bfloat16"},
        {"id": "all-minilm-l6-v2-mean", "level": "sentence", "kind": "transformers", "pooling": "mean", "source": src},
    ]  # fmt: skip
    if reference:  # the CPU reference: bfloat16 runs float32 there, the same numbers again; the GPU's own float32
        models = [m for m in models if m.get("dtype") != "bfloat16"]  # run is what bfloat16 is checked against
    if smoke:
        body: dict[str, Any] = {"tasks": _sliced_tasks(data, work, 200), "models": models}
    else:
        body = {"include": ["tasks"], "tasks": PIPELINE_TASKS, "models": models}
    path = work / "gpu-zoo.yaml"
    path.write_text(json.dumps(body, indent=1), encoding="utf-8")  # JSON is YAML
    return path


def _run_env(data: Path, models: list[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EVALFARM_CPU_HALF"}
    env.update(EVALFARM_DATA=str(data), EVALFARM_MODEL_PATHS=os.pathsep.join(str(m) for m in models),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    return env


def run_pipeline(inputs: Path, device: str, smoke: bool, work: Path) -> dict[str, Any]:
    data = _data(inputs)
    minilm = _paths(inputs)["minilm"]
    cat = pipeline_catalog(data, minilm, work, smoke, reference=device == "cpu" and not smoke)
    wh = work / "wh"
    cmd = [sys.executable, "-m", "evalfarm", "run", "--catalog", str(cat), "--warehouse", str(wh), "--executor",
           "local", "--device", device, "--format", "json"]  # fmt: skip
    if smoke:
        cmd.append("--quick-downstream")
    env = _run_env(work / "smoke-data" if smoke else data, [minilm, data / "evalrank" / "reference"])
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t
    out: dict[str, Any] = {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_seconds": round(wall, 1)}
    if proc.returncode not in (0, 1):
        out["stderr_tail"] = proc.stderr[-3000:]
        return out
    out["summary"] = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    out.update(_warehouse_figures(wh))
    return out


def _warehouse_figures(wh: Path) -> dict[str, Any]:
    from evalfarm.warehouse import Warehouse

    w = Warehouse(wh)
    sql = "SELECT model, task, subset, variant, metric, ties, value FROM metrics WHERE is_primary"
    rows = w.query(sql).to_pylist()
    metrics = {"|".join(str(r[k]) for k in ("model", "task", "subset", "variant", "metric", "ties")): r["value"]
               for r in rows}  # fmt: skip
    units = w.query("SELECT model, task, stage, seconds FROM units WHERE status = 'done'").to_pylist()
    models = w.query("SELECT model, provenance FROM models").to_pylist()
    prov = {r["model"]: json.loads(r["provenance"]) for r in models}
    return {
        "metrics": metrics,
        "units": units,
        "provenance": {m: {k: p.get(k) for k in ("device", "dtype", "batching") if k in p} for m, p in prov.items()},
    }


def _tolerance(key: str) -> float:
    task = key.split("|")[1]
    if task in TOL_VS_CPU:
        return TOL_VS_CPU[task]
    return TOL_VS_CPU["sts"] if task.startswith("sts") else TOL_VS_CPU["downstream"]


def compare_runs(got: dict[str, float], ref: dict[str, float]) -> dict[str, Any]:
    """The GPU run's primary metrics against the CPU run's (float32 models; :data:`TOL_VS_CPU`)."""
    rows = []
    for key, want in sorted(ref.items()):
        if key.split("|")[0].endswith("-bf16") or key not in got:
            continue
        diff = abs(got[key] - want)
        rows.append({"metric": key, "cpu": want, "gpu": got[key], "diff": diff, "ok": diff <= _tolerance(key)})
    return {"rows": rows, "pass": bool(rows) and all(r["ok"] for r in rows), "tolerance": TOL_VS_CPU}


def compare_half(got: dict[str, float]) -> dict[str, Any]:
    """bfloat16 against float32 (the same model, this device): STS-B test and the EvalRank sentence MRR."""
    rows = []
    for key, value in sorted(got.items()):
        model, task = key.split("|")[:2]
        if model != "all-minilm-l6-v2-bf16" or task not in ("stsb", "evalrank-sentence"):
            continue
        base = got.get(key.replace("all-minilm-l6-v2-bf16", "all-minilm-l6-v2", 1))
        if base is None:
            continue
        tol = HALF_PRECISION_TOLERANCE["sts_spearman" if task == "stsb" else "evalrank_mrr"]
        rows.append({"metric": key, "float32": base, "bfloat16": value, "diff": abs(value - base),
                     "ok": abs(value - base) <= tol})  # fmt: skip
    return {"rows": rows, "pass": all(r["ok"] for r in rows), "tolerance": HALF_PRECISION_TOLERANCE}


# -- the encoder around a model built from a config ------------------------------------------------------------------
def encoder_around(model: Any, tokenizer: Any, *, device: str, batch_size: int, max_length: int) -> Any:
    """``HFTransformersEncoder`` (mean pooling) around a model already built: the attributes its ``__init__``
    sets after loading, so ``encode`` runs the shipped path (batcher, pooling) on a model with random weights."""
    import inspect

    from evalfarm.encoders.batching import GPU_CHUNK_TEXTS, Batcher, BatchPolicy, Tokenised
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    enc = HFTransformersEncoder.__new__(HFTransformersEncoder)
    enc.pooling_key, enc.pooling, enc.layer = "mean", "mean", None
    enc.eos, enc.padding_side = False, "right"  # an encoder's card: no end-of-text token added, padded on the right
    enc.ref, enc.revision, enc._prompts = "", None, None
    enc.device, enc.dtype = device, str(next(model.parameters()).dtype).removeprefix("torch.")
    enc.max_length, enc.batch_size = max_length, batch_size
    enc.tokenizer, enc.model = tokenizer, model
    enc.dim, enc.n_layers = int(model.config.hidden_size), int(model.config.num_hidden_layers)
    enc._torch = __import__("torch")
    pad = tokenizer.pad_token_id or 0
    enc.batcher = Batcher(BatchPolicy.for_device(device, batch_size=batch_size, max_length=max_length), device, pad)
    enc.chunk_texts = GPU_CHUNK_TEXTS if enc.batcher.on_gpu else None
    takes = inspect.signature(model.forward).parameters
    enc._no_cache = {"use_cache": False} if "use_cache" in takes and getattr(model.config, "use_cache", False) else {}
    if "token_type_ids" not in takes:  # MiniLM's tokenizer on a model without token types (MPNet, the decoders)
        enc._tokenise = lambda texts: Tokenised(_tokens(tokenizer, texts, max_length))
    enc.spec_id, enc.provenance = "", {}
    return enc


def _tokens(tokenizer: Any, texts: list[str], max_length: int) -> list[list[int]]:
    return tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]


def floor_loop(model: Any, ids: list[list[int]], policy: Any, device: str, pad: int) -> float:
    """Seconds of the bare loop: ``model(**batch)`` over batches made beforehand (the policy's, pre-padded, on the
    device), nothing else timed."""
    import torch

    from evalfarm.encoders.batching import Tokenised, pad_batch, plan_batches

    tok = Tokenised(ids)
    lengths = [len(x) for x in ids]
    batches = []
    for idx in plan_batches(lengths, policy):
        arrays = pad_batch(tok, idx, policy.width(max(lengths[i] for i in idx)), pad)
        batches.append({k: torch.from_numpy(v).to(device) for k, v in arrays.items()})
    extra = {"use_cache": False} if getattr(model.config, "use_cache", False) else {}
    with torch.inference_mode():
        model(**batches[0], **extra)  # warm-up (kernels chosen, allocator grown)
        _, seconds = _timed(lambda: [model(**b, **extra) for b in batches], device)
    return seconds


def _sample(texts: list[str], n: int, seed: int = 0) -> list[str]:
    if n >= len(texts):
        return list(texts)
    pick = np.random.default_rng(seed).choice(len(texts), size=n, replace=False)
    return [texts[i] for i in sorted(pick)]


# -- throughput ---------------------------------------------------------------------------------------------------
def measure_arch(
    name: str, dtype: str, texts: list[str], tokenizer: Any, device: str, smoke: bool, cap: float
) -> dict[str, Any]:
    """One architecture in one dtype: the encoder's rate and the floor's on a sample sized to ``cap`` seconds."""
    import torch
    from transformers import AutoModel

    from evalfarm.encoders.footprint import CUDA_CONTEXT_BYTES, DTYPE_BYTES, activation_bytes, params_from_config

    cfg = arch_config(name, smoke=smoke)
    batch_size, max_length = (64, 512) if name in DECODERS else (256, 128)
    with torch.device(device):
        model = AutoModel.from_config(cfg, dtype=getattr(torch, dtype)).eval()
    params = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    enc = encoder_around(model, tokenizer, device=device, batch_size=batch_size, max_length=max_length)
    enc.encode(_sample(texts, 64, 1))  # warm-up
    _, t0 = _timed(lambda: enc.encode(_sample(texts, 256, 2)), device)
    n = int(min(len(texts), max(256, 256 / max(t0, 1e-6) * cap)))
    sample = _sample(texts, n)
    ids = _tokens(tokenizer, sample, max_length)
    tokens = sum(len(x) for x in ids)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    _, seconds = _timed(lambda: enc.encode(sample), device)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    floor = floor_loop(model, ids, enc.batcher.policy, device, enc.batcher.pad_id)
    flops, _ = _peak_flops(device)
    est = (
        params * DTYPE_BYTES[dtype]
        + CUDA_CONTEXT_BYTES
        + activation_bytes(
            cfg.to_dict(), batch=batch_size, tokens=max_length, dtype_bytes=DTYPE_BYTES[dtype], all_hidden=False
        )
    )
    row = {
        "arch": name, "dtype": dtype, "params": params, "params_formula": params_from_config(cfg.to_dict()),
        "batch_size": batch_size, "max_length": max_length, "texts": n, "tokens": tokens,
        "seconds": round(seconds, 3), "texts_per_s": round(n / seconds, 1), "tokens_per_s": round(tokens / seconds),
        "floor_seconds": round(floor, 3), "encoder_vs_floor": round(floor / seconds, 3),
        "peak_memory_gib": None if peak is None else round(peak / 2**30, 2), "estimate_gib": round(est / 2**30, 2),
    }  # fmt: skip
    if flops:
        row["mfu"] = round(2 * params * tokens / (seconds * flops), 4)
        row["mfu_non_embedding"] = round(2 * (params - emb) * tokens / (seconds * flops), 4)
        row["floor_mfu"] = round(2 * params * tokens / (floor * flops), 4)
    enc.model = enc.batcher = None  # the weights go now, not when the next architecture is already built
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def run_throughput(inputs: Path, device: str, smoke: bool, budget: Budget, emit: Callable[[], None]) -> dict:
    from transformers import AutoTokenizer

    texts = _texts(inputs, smoke)[: 200 if smoke else None]
    tokenizer = AutoTokenizer.from_pretrained(_paths(inputs)["minilm"])
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"rows": rows, "texts_in_sample": len(texts)}
    # every architecture in bfloat16 first (the MFU targets), then the float32 rows (half against full precision)
    first = "float32" if smoke and not device.startswith("cuda") else "bfloat16"  # a CPU's bfloat16 is slow
    archs = SMOKE_ARCHS if smoke else tuple(ARCHITECTURES)
    plan = [(a, first) for a in archs] + [(a, "float32") for a in archs if "float32" in dtypes_for(a) and not smoke]
    for i, (arch, dtype) in enumerate(plan):
        left = budget.left()
        if left < 20:
            rows.append({"arch": arch, "dtype": dtype, "skipped": "out of time"})
            continue
        cap = 1.0 if smoke else min(12.0, max(3.0, left / (len(plan) - i) / 3))
        try:
            rows.append(measure_arch(arch, dtype, texts, tokenizer, device, smoke, cap))
        except Exception as exc:  # an out-of-memory or a missing architecture: recorded, the others go on
            rows.append({"arch": arch, "dtype": dtype, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        emit()
    out["targets"] = throughput_targets(rows)
    return out


def throughput_targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, read off the rows: MFU >= 30 % for the >= 1B configs in bfloat16; the encoder at least
    half the floor for the <= 110M models; bfloat16 faster than float32 above 100M parameters."""
    ok = [r for r in rows if "texts_per_s" in r]
    big = [r for r in ok if r["params"] >= 1e9 and r["dtype"] == "bfloat16" and "mfu" in r]
    small = [r for r in ok if r["params"] <= 1.1e8 + 5e6]
    rate = {(r["arch"], r["dtype"]): r["texts_per_s"] for r in ok}
    half = [(a, rate[a, "bfloat16"] > rate[a, "float32"]) for a, d in rate if d == "float32" and (a, "bfloat16") in
            rate and next(r["params"] for r in ok if r["arch"] == a) > 1e8]  # fmt: skip
    return {
        "mfu_ge_0.30_for_1b_plus_bf16": {r["arch"]: r["mfu"] >= 0.30 for r in big},
        "encoder_ge_half_floor_for_le_110m": {
            f"{r['arch']}/{r['dtype']}": r["encoder_vs_floor"] >= 0.5 for r in small
        },
        "bf16_faster_than_fp32_above_100m": dict(half),
    }


# -- diagnosis ------------------------------------------------------------------------------------------------------
def count_loop(enc: Any, texts: list[str], poolings: tuple[str, ...] = ("mean",)) -> dict[str, np.ndarray]:
    """evalfarm 0.1's loop (``HFTransformersEncoder.encode_poolings`` before the batcher): tokenise the call, then
    ``batch_size`` texts a batch, longest first, padded row by row, a blocking copy in and one out per pooling per
    batch. tests/test_batching.py checks the batcher's CPU batches give its bytes."""
    import torch

    from evalfarm.encoders.hf_transformers import parse_pooling_key

    parsed = {p: parse_pooling_key(p) for p in poolings}
    hidden = any(p in ("first-last-avg", "last-2-avg") or layer is not None for p, layer in parsed.values())
    tok = enc.tokenizer(list(texts), truncation=True, max_length=enc.max_length, padding=False)
    ids, types = tok["input_ids"], tok.get("token_type_ids")
    order = np.argsort([-len(x) for x in ids], kind="stable")
    pad = enc.tokenizer.pad_token_id or 0
    outs = {p: np.zeros((len(texts), enc.dim), dtype=np.float32) for p in poolings}
    with torch.inference_mode():
        for start in range(0, len(order), enc.batch_size):
            idx = order[start : start + enc.batch_size]
            width = max(1, len(ids[idx[0]]))
            input_ids = np.full((len(idx), width), pad, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            tt = np.zeros((len(idx), width), dtype=np.int64)
            for j, i in enumerate(idx):
                input_ids[j, : len(ids[i])] = ids[i]
                mask[j, : len(ids[i])] = 1
                if types is not None:
                    tt[j, : len(types[i])] = types[i]
            batch = {"input_ids": input_ids, "attention_mask": mask, **({"token_type_ids": tt} if types else {})}
            tensors = {k: torch.from_numpy(v).to(enc.device) for k, v in batch.items()}
            res = enc.model(**tensors, output_hidden_states=hidden)
            for name, out in outs.items():
                out[idx] = enc._pool(res, tensors["attention_mask"], *parsed[name]).float().cpu().numpy()
    return outs


def _no_cudnn_attention(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        import torch

        cudnn = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)
        was = torch.backends.cuda.cudnn_sdp_enabled() if cudnn else None
        if cudnn:
            cudnn(False)
        try:
            return fn()
        finally:
            if cudnn and was is not None:
                cudnn(was)

    return run


def diagnose_dtype(minilm: Path, dtype: str, texts: list[str], device: str) -> dict[str, Any]:
    from evalfarm.encoders.batching import BatchPolicy
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    enc = HFTransformersEncoder(str(minilm), pooling="mean", dtype=dtype, device=device, batch_size=256)
    ids = _tokens(enc.tokenizer, texts, enc.max_length)
    pad = enc.tokenizer.pad_token_id or 0
    ways: dict[str, Callable[[], Any]] = {
        "tokenise_only": lambda: _tokens(enc.tokenizer, texts, enc.max_length),
        "count_loop_0.1": lambda: count_loop(enc, texts),
        "count_loop_0.1_no_cudnn_attention": _no_cudnn_attention(lambda: count_loop(enc, texts)),
        "encoder": lambda: enc.encode(texts),
    }
    row: dict[str, Any] = {"dtype": dtype, "effective_dtype": enc.dtype, "texts": len(texts)}
    count_loop(enc, texts[:256])  # warm-up
    for name, fn in ways.items():
        _, s = _timed(fn, device)
        row[name] = round(len(texts) / s, 1)
    exact = BatchPolicy(batch_size=256, max_length=enc.max_length)
    row["floor_exact_widths"] = round(len(texts) / floor_loop(enc.model, ids, exact, device, pad), 1)
    rounded = BatchPolicy.for_device("cuda", batch_size=256, max_length=enc.max_length)
    row["floor_rounded_widths"] = round(len(texts) / floor_loop(enc.model, ids, rounded, device, pad), 1)
    return row


def run_diagnosis(inputs: Path, device: str, smoke: bool, budget: Budget) -> dict[str, Any]:
    texts = _sample(_texts(inputs, smoke), 200 if smoke else 20_000, 3)
    rows = []
    for dtype in ("float32",) if smoke else ("float32", "float16", "bfloat16"):
        if budget.left() < 30:
            rows.append({"dtype": dtype, "skipped": "out of time"})
            continue
        rows.append(diagnose_dtype(_paths(inputs)["minilm"], dtype, texts, device))
    return {"unit": "texts per second", "rows": rows}


# -- projection -----------------------------------------------------------------------------------------------------
CPU_MEDIANS = {"word-vectors": 0.6, "bow": 24.3, "static": 9.1}
"""Seconds of CPU work per model, every task, one core (benchmarks/README.md's capacity model): what the lookups and
bags of words cost beside the GPU."""
ARCH_OF = (
    ("bert-large", "BERT-large"), ("roberta-large", "RoBERTa-large"), ("roberta-base", "RoBERTa-base"),
    ("mpnet", "MPNet-base"), ("minilm-l12", "MiniLM-L12"), ("minilm", "MiniLM-L6"), ("bert", "BERT-base"),
)  # fmt: skip


def _arch_of(ref: str | None) -> str:
    low = (ref or "").lower()
    return next((arch for key, arch in ARCH_OF if key in low), "BERT-base")


def _unit_seconds(zoo: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, float]:
    """Seconds a unit of each default task takes on this machine: measured where the pipeline ran the task (the
    float32 MiniLM's, embedding excluded), else the measured unit of its kind scaled by texts."""
    measured: dict[str, float] = {}
    for u in pipeline.get("units", []):
        if u["stage"] == "score" and not u["model"].endswith("-bf16"):
            measured[u["task"]] = max(measured.get(u["task"], 0.0), float(u["seconds"]))
    kind_ref = {"evalrank": "evalrank-sentence", "sts": "stsb", "downstream": "mr"}
    out = {}
    for tid, t in zoo["tasks"].items():
        if tid in measured:
            out[tid] = measured[tid]
            continue
        ref = kind_ref.get(t.get("kind", ""), "stsb")
        base, n_ref = measured.get(ref), zoo["tasks"].get(ref, {}).get("texts")
        out[tid] = base * t.get("texts", 0) / n_ref if base and n_ref else 0.5
    return out


def run_projection(inputs: Path, throughput: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, Any]:
    """The paper zoo on one GPU of this kind (see the module docstring; the assumptions are in the output)."""
    zoo = json.loads(_paths(inputs)["zoo"].read_text(encoding="utf-8"))
    paper = zoo["paper"]
    rate = {(r["arch"], r["dtype"]): r["texts_per_s"] for r in throughput.get("rows", []) if "texts_per_s" in r}
    n = zoo["sentence_texts"]
    encode: dict[str, float | None] = {"float32": 0.0, "bfloat16": 0.0}
    unmeasured = sorted({_arch_of(p.get("ref")) for p in paper["forward_passes"]} - {a for a, _ in rate})
    for p in paper["forward_passes"]:
        arch = _arch_of(p.get("ref"))
        for dtype, so_far in encode.items():
            r = rate.get((arch, dtype)) or rate.get((arch, "float32"))
            encode[dtype] = None if so_far is None or not r else so_far + n / r  # None: an architecture unmeasured
    per_unit = _unit_seconds(zoo, pipeline)
    score = sum(per_unit.get(t, 0.5) * count for t, count in paper["units"].items())
    cpu = sum(CPU_MEDIANS.get(k, 0.0) * c for k, c in paper["kinds"].items())
    cores = os.cpu_count() or 1
    serial = {d: None if e is None else round(e + score + cpu, 1) for d, e in encode.items()}
    bound = {d: None if e is None else round(max(e, score / 8, cpu / cores), 1) for d, e in encode.items()}
    return {
        "models": paper["models"], "forward_passes": len(paper["forward_passes"]), "sentence_texts": n,
        "encode_seconds": encode, "unmeasured_architectures": unmeasured, "score_seconds_serial": round(score, 1),
        "cpu_seconds_one_core": round(cpu, 1),
        "wall_serial_seconds": serial, "wall_packed_lower_bound_seconds": bound,
        "assumptions": "forward passes: one per checkpoint (pooling siblings share it), every default sentence "
        "text, this machine's measured texts/s of the matching architecture; score units: this machine's pipeline "
        "unit times, other tasks scaled by their texts; lookups and bags of words: the capacity model's one-core "
        "medians, spread over this machine's cores; serial: one worker does everything in turn; packed lower "
        "bound: encoder passes back to back on the GPU while 8 workers score and the CPUs run the lookups",
    }  # fmt: skip


# -- main -------------------------------------------------------------------------------------------------------------
SECTIONS = ("pipeline", "diagnosis", "throughput", "projection")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=Path, default=ROOT / ".gpu-carry")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="every section, small (the rehearsal)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--budget-seconds", type=float, default=None, help="stop measuring past this (default: 520; "
                    "--smoke: none)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "gpu-zoo.json")
    ap.add_argument("--compare", type=Path, default=None, help="only: this GPU run's JSON against the CPU reference")
    args = ap.parse_args()
    if args.compare is not None:  # after the device run, here: its metrics against cpu-reference.json
        result = json.loads(args.compare.read_text(encoding="utf-8"))
        _checks(result, args.inputs)
        args.compare.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
        print(json.dumps({k: result["pipeline"].get(k, {}).get("pass") for k in ("vs_cpu", "bf16_vs_fp32")}))
        return
    budget = Budget(args.budget_seconds or (float("inf") if args.smoke else 520.0))
    if not _paths(args.inputs)["zoo"].is_file():
        if not args.smoke:
            raise SystemExit(f"no inputs in {args.inputs}: run `python benchmarks/gpu_carry.py all` first")
        sys.path.insert(0, str(Path(__file__).parent))
        import gpu_carry

        gpu_carry.inputs(args.inputs, smoke=True)  # the smoke run's own small inputs
    only = [s for s in args.only.split(",") if s]
    started = time.monotonic()
    result: dict[str, Any] = {"machine": _machine(args.device), "smoke": args.smoke, "sections": only}

    def emit() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")

    with tempfile.TemporaryDirectory(prefix="gpu-zoo-") as tmp:
        if "pipeline" in only:
            result["pipeline"] = run_pipeline(args.inputs, args.device, args.smoke, Path(tmp))
            _checks(result, args.inputs)
            emit()
    if "diagnosis" in only:
        result["diagnosis"] = run_diagnosis(args.inputs, args.device, args.smoke, budget)
        emit()
    if "throughput" in only:
        result["throughput"] = {}
        result["throughput"] = run_throughput(args.inputs, args.device, args.smoke, budget, emit)
        emit()
    if "projection" in only:
        result["projection"] = run_projection(args.inputs, result.get("throughput", {}), result.get("pipeline", {}))
    result["seconds"] = round(time.monotonic() - started, 1)
    emit()
    print(json.dumps({k: result[k] for k in ("machine", "seconds")}, default=str))


def _checks(result: dict[str, Any], inputs: Path) -> None:
    pipe = result["pipeline"]
    got = pipe.get("metrics") or {}
    ref_path = _paths(inputs)["reference"]
    if got and ref_path.is_file() and not result["smoke"]:
        ref = json.loads(ref_path.read_text(encoding="utf-8")).get("pipeline", {}).get("metrics", {})
        pipe["vs_cpu"] = compare_runs(got, ref)
    if got:
        pipe["bf16_vs_fp32"] = compare_half(got)


if __name__ == "__main__":
    main()
