"""Large word-vector text files: evalfarm's streaming reader + binary cache vs gensim's ``load_word2vec_format``.

    python benchmarks/bench_vectors.py --rows 1000000 --dim 300 --json benchmarks/results/vectors.json
    python benchmarks/bench_vectors.py --smoke   # 2,000 x 20: does every case still run?

Generates a word2vec text file (header ``rows dim``, then ``word v1 ... vdim``, numbers like GloVe's: 5-6
decimals) in ``--workdir`` (default: a temp folder; 1 M x 300 is 2.7 GB), then runs every case in a fresh
subprocess so each peak RSS (``ru_maxrss``) is its own:

- ``gensim``: ``KeyedVectors.load_word2vec_format(path, binary=False)`` (the baseline);
- ``evalfarm first load``: ``WordVectors.load(path, "word2vec-text", cache=True)`` on an empty cache: one
  streaming pass that writes ``matrix.npy`` + ``vocab.txt`` and the float64 mean;
- ``evalfarm cached load``: the same call again, new process: opens the memory-mapped cache;
- ``evalfarm cached load + lookup``: plus a lookup of ``--lookup`` words (exact keys);
- ``vocab statistics``: ``WordVectors.vocab_statistics()``, the EvalRank protocol's statistics over the
  lower-cased-first selection of the mapped matrix (computed here, then kept beside the cache as
  ``stats-lower-first.json``);
- ``evalfarm cached load + protocol lookup``: open, then the embed stage's word lookup
  (``evalfarm.embed.word_lookup``: the lower-cased-first view, the kept statistics, ``--lookup`` words): what an
  EvalRank word unit does with a cached file;
- ``gensim .kv mmap`` (reference only): gensim's own fast reload, ``KeyedVectors.load(kv, mmap="r")`` of a file
  saved with ``.save`` -- a pickle, which a catalog may not load (see ``allow_pickle``).

Each case reports wall seconds, peak RSS (``ru_maxrss``), peak private memory (``RssAnon``, sampled every 5 ms)
and the file-backed RSS at the end, plus the RSS after imports (``base``). A memory-mapped matrix counts in RSS
as file-backed pages (shared page cache, evictable; the kernel maps neighbouring pages on each fault, so a lookup
of 30k random rows can map most of the file), not as private memory: compare ``peak_anon_mb`` for what a
process really holds. The text file sits in the page cache for every case (it was just written), so these are
warm-disk figures. Library threads are pinned to 1. ``--repeat N`` runs each ``cached`` case N times (a fresh
process each) and reports the median (all times in ``seconds_all``); the lookup cases also report
``open_seconds``, the open alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "gensim": """
from gensim.models import KeyedVectors
base = rss()
t = time.perf_counter()
kv = KeyedVectors.load_word2vec_format(PATH, binary=False)
out = {"seconds": time.perf_counter() - t, "rows": len(kv.index_to_key), "base_mb": base}
if SAVE_KV:
    kv.save(SAVE_KV)
""",
    "evalfarm first load": """
from evalfarm.encoders.word_vectors import WordVectors
base = rss()
t = time.perf_counter()
wv = WordVectors.load(PATH, "word2vec-text", cache=True)
out = {"seconds": time.perf_counter() - t, "rows": wv.vocab_size(), "base_mb": base}
""",
    "evalfarm cached load": """
from evalfarm.encoders.word_vectors import WordVectors
base = rss()
t = time.perf_counter()
wv = WordVectors.load(PATH, "word2vec-text", cache=True)
out = {"seconds": time.perf_counter() - t, "rows": wv.vocab_size(), "base_mb": base,
       "memmap": isinstance(wv.vectors, np.memmap)}
""",
    "evalfarm cached load + lookup": """
from evalfarm.encoders.word_vectors import WordVectors
base = rss()
t = time.perf_counter()
wv = WordVectors.load(PATH, "word2vec-text", cache=True)
t_open = time.perf_counter() - t
rng = np.random.default_rng(0)
words = [wv.words[i] for i in rng.choice(wv.vocab_size(), LOOKUP, replace=False)]
t_words = time.perf_counter() - t - t_open  # picking the query words is not the lookup: subtracted
vecs, oov = wv.lookup(words)
out = {"seconds": time.perf_counter() - t - t_words, "open_seconds": t_open, "rows": wv.vocab_size(), "base_mb": base,
       "looked_up": int((~oov).sum())}
""",
    "vocab statistics (lower-first, mmap)": """
from evalfarm.encoders.word_vectors import WordVectors
wv = WordVectors.load(PATH, "word2vec-text", cache=True)
base = rss()
t = time.perf_counter()
st = wv.vocab_statistics(lowercase_first=True)  # kept beside the cache (stats-lower-first.json) for what follows
out = {"seconds": time.perf_counter() - t, "rows": st.n, "base_mb": base}
""",
    "evalfarm cached load + protocol lookup": """
from evalfarm.embed import word_lookup
from evalfarm.encoders.word_vectors import WordVectors
base = rss()
t = time.perf_counter()
wv = WordVectors.load(PATH, "word2vec-text", cache=True)
t_open = time.perf_counter() - t
rng = np.random.default_rng(0)
words = [wv.words[i] for i in rng.choice(wv.vocab_size(), LOOKUP, replace=False)]
t_words = time.perf_counter() - t - t_open  # picking the query words is not the lookup: subtracted
enc = word_lookup(wv, words)
out = {"seconds": time.perf_counter() - t - t_words, "open_seconds": t_open, "rows": wv.vocab_size(),
       "base_mb": base, "looked_up": int((~enc.oov).sum()), "protocol_vocab_size": enc.meta["vocab_size"]}
""",
    "gensim .kv mmap (pickle; reference)": """
from gensim.models import KeyedVectors
base = rss()
t = time.perf_counter()
kv = KeyedVectors.load(SAVE_KV, mmap="r")
out = {"seconds": time.perf_counter() - t, "rows": len(kv.index_to_key), "base_mb": base}
""",
}

PRELUDE = """
import json, os, resource, sys, threading, time
import numpy as np
def status(key="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
def rss():
    return status("VmRSS")
PEAK_ANON = [0.0]
def _sample():  # RssAnon (private memory) has no kernel peak counter: sample it every 5 ms
    while True:
        PEAK_ANON[0] = max(PEAK_ANON[0], status("RssAnon"))
        time.sleep(0.005)
threading.Thread(target=_sample, daemon=True).start()
PATH, SAVE_KV, LOOKUP = sys.argv[1], sys.argv[2], int(sys.argv[3])
"""
EPILOGUE = """
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["peak_anon_mb"] = max(PEAK_ANON[0], status("RssAnon"))
out["end_file_backed_mb"] = status("RssFile")
print("RESULT " + json.dumps(out))
"""


def write_text_file(path: Path, rows: int, dim: int, *, seed: int = 0, chunk: int = 20_000) -> None:
    """A word2vec text file built with numpy (fixed-width fields from a table of formatted numbers: seconds)."""
    rng = np.random.default_rng(seed)
    vals = rng.normal(0, 0.4, 65536).clip(-0.99999, 0.99999)
    table = np.array([(f"{v:.5f}" if v < 0 else f"{v:.6f}").encode() for v in vals], dtype="S8")
    assert all(len(t) == 8 for t in table)
    tb = np.frombuffer(table.tobytes(), dtype=np.uint8).reshape(-1, 8)
    with open(path, "wb") as f:
        f.write(f"{rows} {dim}\n".encode())
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            fields = tb[rng.integers(0, len(tb), size=(n, dim))]  # (n, dim, 8)
            line = np.empty((n, dim, 9), dtype=np.uint8)
            line[:, :, :8] = fields
            line[:, :, 8] = ord(" ")
            line = line.reshape(n, dim * 9)
            line[:, -1] = ord("\n")
            # words of varying case so the lower-cased-first selection has work: every 7th word is capitalised
            words = np.array(
                [(f"W{i:08d} " if i % 7 == 0 else f"w{i:08d} ").encode() for i in range(start, start + n)], dtype="S10"
            )
            wb = np.frombuffer(words.tobytes(), dtype=np.uint8).reshape(n, 10)
            f.write(np.hstack([wb, line]).tobytes())


def run_case(name: str, path: Path, save_kv: Path, lookup: int, env: dict[str, str]) -> dict:
    code = PRELUDE + CASES[name] + EPILOGUE
    t = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", code, str(path), str(save_kv), str(lookup)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"case {name!r} failed:\n{res.stderr[-4000:]}")
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    return {"case": name, **out, "process_seconds": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--lookup", type=int, default=30_000, help="words looked up after the cached load")
    ap.add_argument("--workdir", type=Path, default=None, help="where the text file and caches go (kept)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-gensim", action="store_true", help="evalfarm's cases only (e.g. a 2.2M-row file)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each 'cached' case (median reported)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(rows=2_000, dim=20, lookup=100)
    args = ap.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-vectors-"))
    work.mkdir(parents=True, exist_ok=True)
    text = work / f"vectors-{args.rows}x{args.dim}.txt"
    t = time.perf_counter()
    if not text.is_file():
        write_text_file(text, args.rows, args.dim)
    gen = time.perf_counter() - t
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    kv = work / "gensim.kv"
    env = {
        **os.environ,
        "EVALFARM_CACHE": str(cache),
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    print(json.dumps({"file": str(text), "bytes": text.stat().st_size, "generate_seconds": round(gen, 1)}), flush=True)
    results = {}
    for name in CASES:
        if args.no_gensim and name.startswith("gensim"):
            continue
        runs = [run_case(name, text, kv, args.lookup, env) for _ in range(args.repeat if "cached" in name else 1)]
        r = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]  # the median run (the upper one of two)
        if len(runs) > 1:
            r = {**r, "seconds_all": [x["seconds"] for x in runs]}
        results[name] = r
        print(json.dumps(r), flush=True)
    summary = {
        "rows": args.rows,
        "dim": args.dim,
        "file_bytes": text.stat().st_size,
        "cache_bytes": sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    if "gensim" in results:
        g, first, cached = results["gensim"], results["evalfarm first load"], results["evalfarm cached load"]
        lookup = results["evalfarm cached load + lookup"]
        summary.update(
            first_load_speedup_vs_gensim=g["seconds"] / first["seconds"],
            cached_load_speedup_vs_gensim=g["seconds"] / cached["seconds"],
            first_load_peak_rss_ratio=first["peak_rss_mb"] / g["peak_rss_mb"],
            first_load_peak_anon_ratio=first["peak_anon_mb"] / g["peak_anon_mb"],
            cached_lookup_peak_anon_ratio=lookup["peak_anon_mb"] / g["peak_anon_mb"],
        )
    print(json.dumps(summary), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": list(results.values()), "summary": summary}, indent=1) + "\n")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
