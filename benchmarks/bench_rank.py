"""Benchmark: the rank stage's blocked kernel against a per-pair loop, on the same embeddings, in one run.

The baseline is the EvalRank toolkit's algorithm: for each pair, score the whole background, sort, and binary
search the positive's score (O(pairs x background log background) with one Python iteration per pair).
The toolkit computes s(x, y) separately from the background row, so y's own background score can exceed it by
an ulp and the pair loses a place: ``loop_rank_higher_by_1`` counts those (our kernel reads both from one row).
Embeddings are taken from a warehouse when it holds them (``make run`` first), otherwise random vectors of the
pool's real shape are used; the script says which.

    python benchmarks/bench_rank.py [--warehouse warehouse] [--loop-pairs N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from evalfarm.catalog.registry import load_catalog
from evalfarm.pools import load_pool
from evalfarm.rank import preprocess, rank_pairs
from evalfarm.warehouse import read_embeddings


def paper_loop(emb: np.ndarray, queries: np.ndarray, positives: np.ndarray, sim: str) -> np.ndarray:
    """Per-pair loop as in the EvalRank toolkit (background includes x; rank 0 is clipped to 1)."""
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


def find_embeddings(warehouse: Path, pool: str) -> tuple[str, np.ndarray] | None:
    files = sorted((warehouse / "embeddings").glob(f"model=*/pool={pool}/*.parquet"))
    if not files:
        return None
    best = max(files, key=lambda p: p.stat().st_size)  # the widest model: the most work
    _, emb, _, meta = read_embeddings(best)
    return meta.get("model", best.parent.parent.name), emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", type=Path, default=Path("warehouse"))
    ap.add_argument("--loop-pairs", type=int, default=0, help="pairs timed in the loop (0: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cat = load_catalog("pools")
    results = []
    print(
        f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, "
        f"cuda {torch.cuda.is_available()}"
    )
    for pool_id, rand_dim in [("evalrank-word", 300), ("evalrank-sentence", 384)]:
        pool = load_pool(cat.pool(pool_id))
        found = find_embeddings(args.warehouse, pool_id)
        if found:
            source, emb = found
        else:
            source, emb = (
                f"random normal d={rand_dim}",
                np.random.default_rng(0).normal(size=(len(pool.items), rand_dim)).astype(np.float32),
            )
        bg = np.arange(len(pool.items))
        for sim in ("cos", "l2"):
            x = preprocess(emb, sim, center=emb.mean(0))
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                ranks, _ = rank_pairs(x, pool.queries, pool.positives, bg, sim)
                times.append(time.perf_counter() - t)
            kernel = min(times)
            n_loop = args.loop_pairs or pool.n_pairs
            t = time.perf_counter()
            loop_ranks = paper_loop(x, pool.queries[:n_loop], pool.positives[:n_loop], sim)
            loop = (time.perf_counter() - t) * pool.n_pairs / n_loop
            diff = loop_ranks - ranks[:n_loop]
            agree, within1 = float((diff == 0).mean()), float((np.abs(diff) <= 1).mean())
            row = {
                "pool": pool_id,
                "similarity": sim,
                "embeddings": source,
                "n_pairs": pool.n_pairs,
                "n_background": len(bg),
                "dim": int(x.shape[1]),
                "kernel_s": round(kernel, 3),
                "loop_s": round(loop, 2),
                "loop_pairs_timed": n_loop,
                "speedup": round(loop / kernel, 1),
                "loop_rank_equal": round(agree, 4),
                "loop_rank_within_1": round(within1, 4),
                "loop_rank_higher_by_1": round(float((diff == 1).mean()), 4),
            }
            results.append(row)
            print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
