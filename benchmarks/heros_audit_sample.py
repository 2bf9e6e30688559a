"""The seeded sample of a built HEROS-style file that docs/audits/heros-v*.tsv judges, pair by pair.

For each subset, ``SAMPLE`` (40) of the rows whose cell for that subset is filled, drawn with
``numpy.random.default_rng([SEED, subset's index in SUBSETS]).choice(..., replace=False)`` and listed in row order;
printed as the audit file's rows with empty ``verdict`` and ``reason`` columns for the auditor to fill (the
procedure and the criteria: docs/audits/README.md).

    python benchmarks/heros_audit_sample.py "$(evalfarm data build heros | sed -n 's/^built: //p')" > sample.tsv
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 43
SAMPLE = 40
SUBSETS = ("synonym", "antonym", "typo", "random-word", "negation-main", "negation-antonym")


def sample(path: Path) -> list[list[str]]:
    """``[subset, row id, original, pair]`` for the audited rows of the built file ``path``."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    columns = lines[0].split("\t")
    at = {c: i for i, c in enumerate(columns)}
    rows = [line.split("\t") for line in lines[1:]]
    out = []
    for k, subset in enumerate(SUBSETS):
        have = [r for r in rows if r[at[subset]]]
        picked = np.random.default_rng([SEED, k]).choice(len(have), size=min(SAMPLE, len(have)), replace=False)
        for i in sorted(int(j) for j in picked):
            r = have[i]
            out.append([subset, r[at["id"]], r[at["original"]], r[at[subset]]])
    return out


def candidates() -> None:
    """Every synonym and antonym pair the rules make, before the review (``--candidates``): the rows a review
    judges, in evalfarm/taskdata/heros_review.tsv's columns, with the texts after them for the reader."""
    from evalfarm.taskdata import build
    from evalfarm.taskdata.build_heros import COLUMNS, make_rows

    b = build.builder("heros")
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


def main() -> None:
    if sys.argv[1] == "--candidates":
        candidates()
        return
    print("\t".join(["subset", "id", "original", "pair", "verdict", "reason"]))
    for row in sample(Path(sys.argv[1])):
        print("\t".join([*row, "", ""]))


if __name__ == "__main__":
    main()
