"""Avraham & Goldberg (2016) triplet files: a target word, then comparisons of two words against it.

Format (the upstream ``ag-evaluation`` datasets, UTF-8, CRLF line ends): blocks, usually separated by blank lines
(``inflected/vb_inf.txt`` has none); a block's first line is the TARGET word; a line without a comma is a section
marker (``distractors``, ``randoms``; comparisons before any marker are ``positives``) or else the next block's
target; every other line is ``w1,R1,w2,R2``: R1 / R2 are the shares of
annotators who judged w1 / w2 the more similar to the target (R1 + R2 = 1, two decimals). Anything else is an
error naming ``file:line``. Words are kept as written (no case folding: the sets are Hebrew).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.textfiles import malformed, read_lines

COMPARISON_TYPES = ("positive", "distractor", "random")
"""Comparison types in file order: before any marker, after ``distractors``, after ``randoms``."""
_MARKERS = {"distractors": "distractor", "randoms": "random"}
SUM_TOLERANCE = 0.011
"""R1 + R2 must be 1 within two-decimal rounding (0.33 + 0.67, 0.34 + 0.67)."""


@dataclass
class Comparisons:
    """The comparisons of one or more files, one entry per (target, w1, w2) line, in file order."""

    target: list[str] = field(default_factory=list)
    w1: list[str] = field(default_factory=list)
    w2: list[str] = field(default_factory=list)
    r1: list[float] = field(default_factory=list)  # share of annotators preferring w1
    kind: list[str] = field(default_factory=list)  # positive / distractor / random
    subset: list[str] = field(default_factory=list)  # the file's name in the task

    def __len__(self) -> int:
        return len(self.target)

    def words(self) -> list[str]:
        """Every distinct word, in first-appearance order (what a model embeds)."""
        seen: dict[str, None] = {}
        for t, a, b in zip(self.target, self.w1, self.w2, strict=True):
            seen.setdefault(t)
            seen.setdefault(a)
            seen.setdefault(b)
        return list(seen)


def _comparison(path: Path, lineno: int, line: str) -> tuple[str, float, str, float]:
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 4:
        raise malformed(path, lineno, f"expected 'w1,R1,w2,R2' (4 comma-separated fields), found {len(fields)}", line)
    w1, p1, w2, p2 = fields
    try:
        r1, r2 = float(p1), float(p2)
    except ValueError:
        raise malformed(path, lineno, "R1 and R2 must be numbers", line) from None
    if not (math.isfinite(r1) and math.isfinite(r2)) or min(r1, r2) < 0 or max(r1, r2) > 1:
        raise malformed(path, lineno, "R1 and R2 must lie in [0, 1]", line)
    if abs(r1 + r2 - 1.0) > SUM_TOLERANCE:
        raise malformed(path, lineno, f"R1 + R2 must be 1 (got {r1 + r2:g})", line)
    if not w1 or not w2:
        raise malformed(path, lineno, "empty word", line)
    return w1, r1, w2, r2


def read_ag_file(path: Path, subset: str, into: Comparisons | None = None) -> Comparisons:
    """Read one triplet file into ``into`` (a new :class:`Comparisons` when None), every line tagged ``subset``."""
    out = Comparisons() if into is None else into
    target: str | None = None
    kind = "positive"
    n0 = len(out)
    for lineno, raw in enumerate(read_lines(Path(path)), 1):
        line = raw.strip()
        if not line:
            target = None
            continue
        if "," not in line:
            if line.lower() in _MARKERS:
                if target is None:
                    raise malformed(path, lineno, "a section marker before its block's target word", raw)
                kind = _MARKERS[line.lower()]
            else:  # a new block (inflected/vb_inf.txt has no blank lines between its blocks)
                target, kind = line, "positive"
            continue
        if target is None:
            raise malformed(path, lineno, "a comparison before its block's target word", raw)
        w1, r1, w2, _ = _comparison(Path(path), lineno, line)
        out.target.append(target)
        out.w1.append(w1)
        out.w2.append(w2)
        out.r1.append(r1)
        out.kind.append(kind)
        out.subset.append(subset)
    if len(out) == n0:
        raise TaskDataError(f"{path}: no comparisons")
    return out
