"""What the quick profile's 1,000-row downstream sample costs the science: per task, every model's accuracy on
the full training data (SentEval's protocol, the default) and on the seeded sample (``--quick-downstream``), and
Spearman's rho between the two across the models (does the sample rank the models as the full data does?).

    python benchmarks/bench_sample_vs_full.py --json benchmarks/results/sample-vs-full.json
    python benchmarks/bench_sample_vs_full.py --models bow-glove-6b-50d static-10k-64d --tasks mr trec

Each model embeds the ten tasks' distinct texts once (the texts a full run embeds; the sample's are a subset), as
``evalfarm run`` would (the catalog's encoder, :func:`evalfarm.encoders.loader.load_encoder`); each task is then
scored twice with the run's own code path (:func:`evalfarm.scorers.downstream.load_task_data` and
:func:`evalfarm.classify.evaluate`, the batched engine, one thread). ``--vectors ID=PATH`` adds a model whose
vectors are cached (``PATH.npy`` + ``PATH.json``, e.g. ``bench_classify.py --model minilm``'s cache). The JSON is
rewritten after every model, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from evalfarm.catalog.registry import load_catalog  # noqa: E402
from evalfarm.classify import evaluate, task_features  # noqa: E402
from evalfarm.scorers.downstream import load_task_data  # noqa: E402

TASKS = ["mr", "cr", "subj", "mpqa", "sst2", "sst5", "trec", "mrpc", "sick-e", "scicite"]
MODELS = ["bow-glove-6b-50d", "bow-spacy-md-300d", "static-10k-64d", "paraphrase-minilm-l3-v2-onnx"]
"""The starter zoo's sentence models that embed 126k sentences in minutes on 2 cores, without post-processing
(a post-processed model is fitted on the evaluated texts, per unit: not reproduced here)."""


def spearman(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import spearmanr

    return None if len(a) < 3 else float(spearmanr(a, b).statistic)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", default="zoo-starter")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--vectors", nargs="*", default=[], help="ID=PATH: a model's cached vectors (.npy + .json)")
    ap.add_argument("--tasks", nargs="*", default=TASKS)
    ap.add_argument("--max-train", type=int, default=1000, help="the quick profile's sample (the catalog's)")
    ap.add_argument("--full-max-train", type=int, default=None, help="cap the 'full' side too (smoke runs only)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--inner-k", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--resume", action="store_true", help="keep the models --json already holds, run the others")
    ap.add_argument("--smoke", action="store_true", help="CR, one model, 400 vs 200 rows, 2 x 2 folds: CI only")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(models=["static-10k-64d"], tasks=["cr"], max_train=200, full_max_train=400, k=2, inner_k=2)
    args = ap.parse_args()

    from evalfarm.encoders.loader import load_encoder

    catalog = load_catalog(args.catalog)
    specs = {t: catalog.task(t) for t in args.tasks}
    full = {t: load_task_data(s, args.full_max_train) for t, s in specs.items()}  # type: ignore[arg-type]
    sampled = {t: load_task_data(s, args.max_train) for t, s in specs.items()}  # type: ignore[arg-type]
    texts = list(dict.fromkeys(x for d in [*full.values(), *sampled.values()] for x in d.texts))
    sources = [(m, None) for m in args.models] + [tuple(v.split("=", 1)) for v in args.vectors]
    results: dict[str, dict] = {}
    header = {"catalog": args.catalog, "max_train": args.max_train, "n_texts": len(texts), "k": args.k}
    out = {"header": {**header, "inner_k": args.inner_k, "load_avg_start": os.getloadavg()[0]}, "models": results}
    if args.resume and args.json and args.json.exists():
        results.update(json.loads(args.json.read_text())["models"])
    for model, path in sources:
        if model in results:
            continue
        t0 = time.perf_counter()
        if path is None:
            emb = np.asarray(load_encoder(catalog.lineage(model)).encode(texts), dtype=np.float32)
            index = {x: i for i, x in enumerate(texts)}
        else:
            emb = np.load(Path(path).with_suffix(".npy"))
            index = {x: i for i, x in enumerate(json.loads(Path(path).with_suffix(".json").read_text()))}
        row = {"embed_s": round(time.perf_counter() - t0, 1)}

        def embed(batch: list[str]) -> np.ndarray:
            return emb[[index[x] for x in batch]]  # noqa: B023 - used within this iteration only

        for t in args.tasks:
            row[t] = {}
            for name, data in (("full", full[t]), ("sample", sampled[t])):
                t0 = time.perf_counter()
                res = evaluate(
                    task_features(data.task, embed), f1_label=data.task.f1_label, n_classes=data.task.n_classes,
                    k=args.k, inner_k=args.inner_k, threads=1,
                )  # fmt: skip
                row[t][name] = round(res.accuracy, 4)
                row[t][f"{name}_s"] = round(time.perf_counter() - t0, 1)
        results[model] = row
        print(json.dumps({model: row}), flush=True)
        out["spearman"] = {
            t: spearman([r[t]["full"] for r in results.values()], [r[t]["sample"] for r in results.values()])
            for t in args.tasks
        }
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out.get("spearman")), flush=True)


if __name__ == "__main__":
    main()
