"""Word-similarity sets (wordvectors.org files, as EvalRank's toolkit reads them).

Each file holds one pair per line: ``word1 word2 score``, separated by tabs or spaces (MEN and MTurk-771 use
spaces in some copies), no header. Lines are read as the EvalRank toolkit reads them,
``line.strip().lower().split()``, so words are lower-cased (WS-353 has capitalised words such as ``Maradona``);
exactly three fields and a finite score are required, and anything else is an error naming ``file:line``.
Blank lines are skipped. Four of the files have CRLF line ends and two lack the final newline (see
``textfiles``); both are handled by the shared line reader. Score scales differ per set (MEN 0–50, SimLex 0–10,
VERB-143 0–1, …): only rank correlations across sets are comparable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.textfiles import malformed, read_lines

# set name -> file name under the wordsim folder; the 13 sets of the EvalRank paper, in its table order
WORDSIM_FILES: dict[str, str] = {
    "WS-353-ALL": "EN-WS-353-ALL.txt",
    "WS-353-SIM": "EN-WS-353-SIM.txt",
    "WS-353-REL": "EN-WS-353-REL.txt",
    "MC-30": "EN-MC-30.txt",
    "RG-65": "EN-RG-65.txt",
    "RW-STANFORD": "EN-RW-STANFORD.txt",
    "MEN-TR-3k": "EN-MEN-TR-3k.txt",
    "MTurk-287": "EN-MTurk-287.txt",
    "MTurk-771": "EN-MTurk-771.txt",
    "YP-130": "EN-YP-130.txt",
    "SimLex-999": "EN-SIMLEX-999.txt",
    "VERB-143": "EN-VERB-143.txt",
    "SimVerb-3500": "EN-SimVerb-3500.txt",
}


@dataclass(frozen=True)
class WordSimSet:
    """One word-similarity set: lower-cased word pairs and their gold scores (float64), in file order."""

    name: str
    word1: list[str]
    word2: list[str]
    gold: np.ndarray
    source: Path | None = None
    n_blank_lines: int = field(default=0, compare=False)

    def __len__(self) -> int:
        return len(self.word1)

    def vocabulary(self) -> list[str]:
        """The distinct words of the set, sorted (what a word model must embed for it)."""
        return sorted(set(self.word1) | set(self.word2))


def read_wordsim(path: Path, name: str | None = None) -> WordSimSet:
    """Read one ``w1 w2 score`` file; ``name`` defaults to the file name without ``EN-`` and extension."""
    path = Path(path)
    if name is None:
        name = path.stem.removeprefix("EN-")
    w1: list[str] = []
    w2: list[str] = []
    gold: list[float] = []
    blank = 0
    for lineno, line in enumerate(read_lines(path), 1):
        fields = line.strip().lower().split()
        if not fields:
            blank += 1
            continue
        if len(fields) != 3:
            raise malformed(path, lineno, f"expected 'word1 word2 score' (3 fields), found {len(fields)}", line)
        try:
            score = float(fields[2])
        except ValueError:
            raise malformed(path, lineno, "the third field must be a number (the gold score)", line) from None
        if not math.isfinite(score):
            raise malformed(path, lineno, "the gold score must be finite", line)
        w1.append(fields[0])
        w2.append(fields[1])
        gold.append(score)
    if not gold:
        raise TaskDataError(f"{path}: no word pairs")
    return WordSimSet(name, w1, w2, np.asarray(gold, dtype=np.float64), path, blank)


def load_wordsim_sets(root: Path, names: list[str] | None = None) -> dict[str, WordSimSet]:
    """The sets under ``root`` (e.g. ``$EVALFARM_DATA/wordsim``) by name, in :data:`WORDSIM_FILES` order."""
    names = list(WORDSIM_FILES) if names is None else names
    unknown = [n for n in names if n not in WORDSIM_FILES]
    if unknown:
        raise TaskDataError(f"unknown word-similarity set(s) {unknown}; known: {', '.join(WORDSIM_FILES)}")
    return {n: read_wordsim(Path(root) / WORDSIM_FILES[n], n) for n in names}
