"""Conformance report: evalfarm's EvalRank word ranks against the toolkit oracle, pair for pair, with every difference.

    python benchmarks/conformance.py [--json benchmarks/results/conformance.json] [--smoke]

What ``tests/test_protocol.py`` asserts (at most 0.1 % of pairs differ, each by no more places than there are
float32-resolvable near-ties; MRR within 1e-5), written out: for toy_emb.txt and GloVe 6B 50d under each OOV policy
and similarity, the pipeline against ``tests/support/toolkit_oracle.py`` (the toolkit's reading and preprocessing in
float64, evalfarm's exact count), through the same harness as the tests (``tests/support/conformance_harness.py``):
the number of differing pairs, the MRR difference, and each differing pair with both ranks and the number of near-ties.
Also the toolkit's own float32 loop (``toolkit_loop_ranks``) under cos: its MRR / Hits and how its ranks differ from
the clean count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # evalfarm and tests.support from this checkout
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from tests.support.conformance_harness import OOV_POLICIES, compare, rank_figures, run_pipeline, word_pool  # noqa: E402
from tests.support.toolkit_oracle import oracle_ranks, toolkit_loop_ranks, toolkit_vectors  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    args = ap.parse_args()
    # --smoke: toy_emb.txt under the mean OOV policy, the toolkit's loop on 200 pairs
    names, policies = (("toy",), ("mean",)) if args.smoke else (("toy", "glove"), OOV_POLICIES)
    loop_pairs = slice(0, 200) if args.smoke else slice(None)

    toy = Path(os.environ["EVALFARM_DATA"]) / "evalrank" / "reference" / "toy_emb.txt"
    report: dict = {"configurations": [], "toolkit_loop_cos": []}
    with tempfile.TemporaryDirectory() as tmp:
        wh, models = run_pipeline(Path(tmp), toy, models=names, policies=policies)
        pool = word_pool()
        for model in names:
            for oov in policies:
                for sim in ("cos", "l2"):
                    c = compare(wh, models, pool, model, oov, sim)
                    conf = {
                        "model": model,
                        "oov": oov,
                        "similarity": sim,
                        "pairs": len(c.queries),
                        "differing": len(c.differ),
                        "mrr_pipeline": float(np.mean(1.0 / c.got)),
                        "mrr_oracle": float(np.mean(1.0 / c.want)),
                        "pairs_differing": [
                            {
                                "query": pool.items[c.queries[i]],
                                "positive": pool.items[c.positives[i]],
                                "rank_pipeline": float(c.got[i]),
                                "rank_oracle": float(c.want[i]),
                                "near_ties": int(c.near[i]),
                            }
                            for i in c.differ
                        ],
                    }
                    conf["mrr_difference"] = conf["mrr_pipeline"] - conf["mrr_oracle"]
                    report["configurations"].append(conf)
                    print(
                        f"{model:5} {oov:4} {sim:3}  {len(c.differ):3} of {len(c.queries)} pairs differ"
                        f"  MRR {conf['mrr_pipeline']:.6f} vs {conf['mrr_oracle']:.6f}",
                        flush=True,
                    )
            index, matrix = models[model]
            queries, positives = pool.queries[loop_pairs], pool.positives[loop_pairs]
            loop, _ = toolkit_loop_ranks(index, matrix, pool.items, queries, positives)
            X, _ = toolkit_vectors(index, matrix, pool.items, similarity="cos", oov="mean")
            clean, _ = oracle_ranks(X, queries, positives, np.arange(len(pool.items)), similarity="cos")
            vals, counts = np.unique((loop - clean).astype(int), return_counts=True)
            loop_row = {
                "model": model,
                "loop": rank_figures(loop),
                "clean": rank_figures(clean),
                "loop_minus_clean_places": {str(int(v)): int(n) for v, n in zip(vals, counts, strict=True)},
            }
            report["toolkit_loop_cos"].append(loop_row)
            print(json.dumps(loop_row), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
