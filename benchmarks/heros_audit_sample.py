"""The seeded sample of a built HEROS-style file that docs/audits/heros-v*.tsv judges, pair by pair.

For each subset, ``SAMPLE`` (40) of the rows whose cell for that subset is filled, drawn with
``numpy.random.default_rng([SEED, subset's index in SUBSETS]).choice(..., replace=False)`` and listed in row order;
printed as the audit file's rows with empty ``verdict`` and ``reason`` columns for the auditor to fill (the
procedure and the criteria: docs/audits/README.md).

    python benchmarks/heros_audit_sample.py "$(evalfarm data build heros | sed -n 's/^built: //p')" > sample.tsv
    python benchmarks/heros_audit_sample.py --candidates > candidates.tsv
    python benchmarks/heros_audit_sample.py --smoke --json /tmp/h.json   # a six-comment build: CI only
    python benchmarks/heros_audit_sample.py "$f" --two-pass docs/audits/heros-v3.tsv   # version 3's audit

``--two-pass FILE`` writes version 3's audit instead (docs/audits/README.md): ``AUDIT_SIZE`` (170) rows a subset,
drawn with seed ``AUDIT_SEED`` (53) by :func:`evalfarm.taskdata.audit.draw` from the *built* file, in the two-pass
format (``verdict_1`` / ``reason_1`` / ``verdict_2`` / ``reason_2`` left empty), and its sidecar ``FILE.json``
(the built file's recipe, version, sha256 and each subset's size). 170 is the smallest sample at which an exact
one-sided binomial test tells a 10 % error rate from 5 % (at most 5 % false alarms, at least 80 % power: reject
"≤ 5 %" at 14 or more wrong).

``--json`` also writes the sample as ``{"rows": [[subset, id, original, pair], ...]}``. ``--smoke`` builds the
recipe on 6 comments (``{"n": 6}``) into a temporary folder, with ``EVALFARM_CACHE`` there too (the user's cache is
left alone), and samples it twice at the full size and at 3 a subset (so the draw picks among more rows than it
keeps); its JSON holds each subset's filled row ids beside the samples and whether the two draws agreed, so
tests/test_benchmarks_smoke.py can redraw the documented procedure.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

SEED = 43
SAMPLE = 40
AUDIT_SEED = 53
AUDIT_SIZE = 170
SUBSETS = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")


def _rows(path: Path) -> tuple[dict[str, int], list[list[str]]]:
    """The built file's column positions and rows (its ``#`` header left out)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    at = {c: i for i, c in enumerate(lines[0].split("\t"))}
    return at, [line.split("\t") for line in lines[1:]]


def sample(path: Path, size: int = SAMPLE) -> list[list[str]]:
    """``[subset, row id, original, pair]`` for the audited rows of the built file ``path`` (``size`` a subset)."""
    at, rows = _rows(path)
    out = []
    for k, subset in enumerate(SUBSETS):
        have = [r for r in rows if r[at[subset]]]
        picked = np.random.default_rng([SEED, k]).choice(len(have), size=min(size, len(have)), replace=False)
        for i in sorted(int(j) for j in picked):
            r = have[i]
            out.append([subset, r[at["id"]], r[at["original"]], r[at[subset]]])
    return out


def candidates() -> None:
    """Every synonym and antonym pair the rules make, before the review (``--candidates``): the rows a review
    judges, in evalfarm/taskdata/heros_review.tsv's columns, with the texts after them for the reader."""
    from evalfarm.taskdata import build
    from evalfarm.taskdata.build_heros_v2 import COLUMNS, make_rows

    b = build.builder("heros", "2")
    text = make_rows(build.resolve_inputs(b), b.params(), None)
    at = {c: i for i, c in enumerate(COLUMNS)}
    for line in text.splitlines()[1:]:
        r = line.split("\t")
        for subset in ("synonym", "antonym"):
            if not r[at[subset]]:
                continue
            note = next(e for e in r[at["edits"]].split("; ") if e.startswith(f"{subset}: "))
            key = note.removeprefix(f"{subset}: ").split(" (")[0]
            print("\t".join([r[at["comment_id"]], subset, key, "", "", r[at["original"]], r[at[subset]]]))


def _substitutions(rows: list[list[str]], at: dict[str, int], subset: str) -> dict[str, Any]:
    """How many distinct substitutions (``lemma>substitute``) fill a subset, and the largest one's count."""
    from collections import Counter

    keys = Counter(
        e.removeprefix(f"{subset}: ").split(" (")[0]
        for r in rows
        for e in r[at["edits"]].split("; ")
        if e.startswith(f"{subset}: ")
    )
    top = keys.most_common(1)
    return {"distinct": len(keys), "largest": top[0][1] if top else 0}


def two_pass(path: Path, out: Path) -> None:
    """``--two-pass``: version 3's audit file and its sidecar, drawn from the built file ``path``."""
    from evalfarm.cache import sha256_file
    from evalfarm.taskdata.audit import AUDIT_COLUMNS, draw

    at, rows = _rows(path)
    header = path.read_text(encoding="utf-8").splitlines()[0].split(" ")
    picked = draw(rows, at, SUBSETS, AUDIT_SEED, AUDIT_SIZE)
    lines = ["\t".join(AUDIT_COLUMNS)]
    for subset, r in picked:
        note = next((e for e in r[at["edits"]].split("; ") if e.startswith(f"{subset}: ")), "")
        cells = [subset, r[at["id"]], r[at["original"]], r[at[subset]], note.removeprefix(f"{subset}: ")]
        lines.append("\t".join([*cells, "", "", "", ""]))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = {
        "built": {"recipe": header[4], "version": header[5], "file": path.name, "sha256": sha256_file(path)},
        "seed": AUDIT_SEED,
        "per_subset": AUDIT_SIZE,
        "sizes": {s: sum(bool(r[at[s]]) for r in rows) for s in SUBSETS},
        "substitutions": {s: _substitutions(rows, at, s) for s in ("synonym", "antonym")},
    }
    out.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def smoke(tmp: Path) -> tuple[Path, dict[str, Any]]:
    """``--smoke``: the recipe on 6 comments, built and cached under ``tmp``; the built file and what the JSON
    holds besides the sample."""
    os.environ["EVALFARM_CACHE"] = str(tmp / "cache")  # WordNet's index and the like: not into the user's cache
    from evalfarm.taskdata.build import build

    built = build("heros", {"n": 6}, out_dir=tmp / "built")
    at, rows = _rows(built.path)
    small = sample(built.path, size=3)
    return built.path, {
        "built": {"file": built.path.name, "sha256": built.sha256, "rows": len(rows), "params": built.params},
        "filled_ids": {s: [r[at["id"]] for r in rows if r[at[s]]] for s in SUBSETS},
        "small_size": 3,
        "small": small,
        "small_again_equal": sample(built.path, size=3) == small,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, help="the built HEROS file")
    ap.add_argument("--candidates", action="store_true", help="every synonym and antonym pair before the review")
    ap.add_argument("--json", type=Path, help="write the sample here too")
    ap.add_argument("--smoke", action="store_true", help="a six-comment build in a temporary folder: CI only")
    ap.add_argument("--two-pass", type=Path, help="write version 3's two-pass audit file (and its .json) here")
    args = ap.parse_args(argv)
    if args.two_pass is not None:
        if args.path is None:
            ap.error("--two-pass needs the built file")
        two_pass(args.path, args.two_pass)
        return
    if args.candidates:
        candidates()
        return
    if args.path is None and not args.smoke:
        ap.error("give the built file (or --candidates, or --smoke)")
    with tempfile.TemporaryDirectory(prefix="heros-audit-") as tmp:
        out: dict[str, Any] = {}
        if args.smoke:
            args.path, out = smoke(Path(tmp))
        rows = sample(args.path)
        out = {"sample_size": SAMPLE, "rows": rows, **out}
    print("\t".join(["subset", "id", "original", "pair", "verdict", "reason"]))
    for row in rows:
        print("\t".join([*row, "", ""]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
