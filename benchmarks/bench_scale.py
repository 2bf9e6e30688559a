"""Benchmark: a synthetic EvalRank task far past one pool: 1,000,000 background items x 10,000 pairs x 384 dims.

The kernel (``rank_counts``, NumPy/OpenBLAS on CPU) ranks every pair against the whole million within a memory
bound: the vectors themselves (1.5 GB of float32) plus at most ``DEFAULT_MAX_BLOCK_BYTES`` (256 MB) of score
block and ~100 MB of per-item bookkeeping. cos reads the table in place (no copy); l2 over a table this size
adds -||b||^2 / 2 to each score block instead of copying the table with one more column. Target: peak RSS of the
whole process <= 4 GB.

Reported per similarity: CPU seconds, wall seconds, the GEMM's FLOPs (2 x unique queries x items x d) and the
effective FLOP rate, the process's peak RSS during the call (``/proc/self/clear_refs`` resets the peak), and a
projected H100 time. The projection assumes the GPU kernel reaches the same fraction of its FP32 peak as the CPU
kernel reaches of the CPU's measured single-thread sgemm rate, and adds nothing for the count passes (they are
memory-bound: ~3 passes over a 4-byte score per (query, item) pair at HBM3 bandwidth, reported as a separate
lower bound). Published figures used (NVIDIA H100 datasheet): H100 SXM5 FP32 67 TFLOP/s (non-tensor; the
kernel's float32 GEMM does not use TF32) and 3.35 TB/s HBM3; H100 PCIe 51 TFLOP/s and 2.0 TB/s. With a GPU lent,
``--device cuda`` measures instead of projecting.

Threads: one (OMP / MKL / OpenBLAS environment set before import, ``threadpoolctl``), as a rank worker; ``--threads
N`` to use more.

    python benchmarks/bench_scale.py [--items 1000000] [--pairs 10000] [--dim 384] [--neighbours 10]
                                     [--json benchmarks/results/scale.json] [--smoke]
"""

from __future__ import annotations

import os
import sys

_threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = _threads

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalfarm.scorers.rank_kernel import DEFAULT_MAX_BLOCK_BYTES, rank_counts  # noqa: E402

H100 = {
    "sxm5": {"fp32_tflops": 67.0, "hbm_tb_s": 3.35},
    "pcie": {"fp32_tflops": 51.0, "hbm_tb_s": 2.0},
}


def status_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return -1


def reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sgemm_rate(d: int, n: int = 200_000, rows: int = 64) -> float:
    """Single-call sgemm rate (GFLOP/s) of this machine at the kernel's block shape, on a 200k-column slice."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal((n, d), dtype=np.float32)
    q = rng.standard_normal((rows, d), dtype=np.float32)
    out = np.empty((rows, n), np.float32)
    np.matmul(q, c.T, out=out)
    t = cpu_s()
    reps = 5
    for _ in range(reps):
        np.matmul(q, c.T, out=out)
    return 2 * rows * n * d * reps / (cpu_s() - t) / 1e9


def random_pool(n: int, d: int, pairs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` random unit vectors of ``d`` dims (seeded) and ``pairs`` random (query, positive) items among them."""
    rng = np.random.default_rng(0)
    emb = np.empty((n, d), np.float32)
    for s in range(0, n, 65536):  # in chunks: no float64 temporaries
        block = rng.standard_normal((min(65536, n - s), d), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        emb[s : s + len(block)] = block
    return emb, rng.integers(0, n, pairs), rng.integers(0, n, pairs)


def measure(
    sim: str,
    emb: np.ndarray,
    queries: np.ndarray,
    positives: np.ndarray,
    background: np.ndarray,
    args: argparse.Namespace,
    unique_queries: int,
    rate: float,
) -> dict:
    """One similarity's ranking: CPU and wall time, memory growth, effective GEMM rate, and projected H100 times."""
    n, d = emb.shape
    reset = reset_peak()
    rss0 = status_bytes("VmRSS:")
    c0, w0 = cpu_s(), time.perf_counter()
    out = rank_counts(emb, queries, positives, background, sim, device=args.device, neighbours=args.neighbours)
    cpu, wall = cpu_s() - c0, time.perf_counter() - w0
    peak = status_bytes("VmHWM:") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    flops = 2.0 * unique_queries * n * d
    eff = flops / max(cpu, 1e-6) / 1e9  # a tiny run (--smoke) can take less than the clock's tick
    row = {
        "similarity": sim,
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "gflop": round(flops / 1e9, 1),
        "effective_gflops": round(eff, 1),
        "kernel_share_of_sgemm_rate": round(eff / rate, 3),
        "rss_before_gb": round(rss0 / 1e9, 3),
        "peak_rss_gb": round(peak / 1e9, 3),
        "growth_mb": round((peak - rss0) / 2**20, 1),
        "mean_rank": round(float(1 + out.above.mean()), 1),
    }
    score_bytes = unique_queries * n * 4
    for name, gpu in H100.items():
        gemm_s = flops / (gpu["fp32_tflops"] * 1e12 * min(1.0, eff / rate))
        row[f"h100_{name}_projected_s"] = round(gemm_s, 3)
        row[f"h100_{name}_memory_bound_s"] = round(3 * score_bytes / (gpu["hbm_tb_s"] * 1e12), 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--similarities", default="cos,l2")
    ap.add_argument("--neighbours", type=int, default=0, help="also select each query's top-k (fused)")
    ap.add_argument("--device", default=None, help="cpu (default here) or cuda on a GPU machine")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(items=5_000, pairs=300, dim=32, neighbours=10)
    args = ap.parse_args()
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(args.threads))
    except ImportError:
        pass

    n, d = args.items, args.dim
    t0 = time.perf_counter()
    emb, queries, positives = random_pool(n, d, args.pairs)
    background = np.arange(n)
    setup = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "threads": args.threads,
        "load_avg_at_start": os.getloadavg(),
        "items": n,
        "pairs": args.pairs,
        "unique_queries": int(len(np.unique(queries))),
        "dim": d,
        "vectors_gb": round(emb.nbytes / 1e9, 3),
        "setup_s": round(time.perf_counter() - t0, 1),
        "rss_after_setup_gb": round(status_bytes("VmRSS:") / 1e9, 3),
        "max_block_bytes": DEFAULT_MAX_BLOCK_BYTES,
    }
    rate = sgemm_rate(d)
    setup["cpu_sgemm_gflops_1_call"] = round(rate, 1)
    print(json.dumps(setup), flush=True)
    rows = []
    for sim in args.similarities.split(","):
        row = measure(sim, emb, queries, positives, background, args, setup["unique_queries"], rate)
        print(json.dumps(row), flush=True)
        rows.append(row)
    setup["load_avg_at_end"] = os.getloadavg()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"setup": setup, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
