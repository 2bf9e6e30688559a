"""Sentence similarity / relatedness sets: STS12–16, STS-Benchmark, SICK-R and STR.

What each reader expects (checked against the bytes of the files under ``$EVALFARM_DATA/sts``):

- **STS12–16** (SentEval layout, one folder per year): ``STS.input.<subset>.txt`` holds ``sent1<TAB>sent2`` per
  line and ``STS.gs.<subset>.txt`` the gold score (0–5) on the same line number. An empty gold line means the
  pair was not scored and is skipped (STS15 scores 3,000 of 8,500 pairs, STS16 1,186 of 9,183); the two files
  must have the same number of lines. The subsets per year are SentEval's (:data:`STS_SUBSETS`; STS13's SMT is
  LDC-only and absent). All these files are UTF-8 with LF line ends.
- **STS-Benchmark**: ``sts-{train,dev,test}.csv``, tab-separated, no header, no CSV quoting (sentences contain
  quotes): ``genre, file, year, id, score, sent1, sent2``, as SentEval reads it (columns 4, 5, 6). The raw
  cased copy (``STSBenchmark-raw``) has two more attribution columns on StackExchange rows (9 columns) and CRLF
  line ends in its train file; the reader takes both copies.
- **SICK-R**: ``SICK_{train,trial,test_annotated}.txt``, tab-separated with the header
  ``pair_ID sentence_A sentence_B relatedness_score entailment_judgment``; the gold is the relatedness score
  (1–5). The test file has CRLF line ends. The trial file is SICK's dev split and is called ``dev`` here.
- **STR** (STR-2022): ``sem_text_rel_ranked.csv``, a quoted RFC-4180 CSV whose ``Text`` field holds the two
  sentences separated by a newline; ``Score`` is 0–1. Research use only: never copy or publish this file.

Sentences are kept as SentEval sees them: whitespace tokens joined by one space (STS12–16 and STS-B are already
Moses-tokenized and lower-cased upstream; SICK and STR are cased). Subsets keep file order (SentEval sorts by
length only to batch).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.textfiles import malformed, normalize_space, read_lines, read_text, sentence_pair_rows

# SentEval's subsets per STS year (senteval/sts.py), in its order
STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
STS_FOLDERS: dict[str, str] = {year: f"{year}-en-test" for year in STS_SUBSETS}
STSB_FILES: dict[str, str] = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}
SICK_FILES: dict[str, str] = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
SICK_HEADER = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")
STR_FILE = "sem_text_rel_ranked.csv"


@dataclass(frozen=True)
class SentencePairs:
    """One scored subset: ``sent1[i]`` and ``sent2[i]`` with gold score ``gold[i]`` (float64)."""

    name: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray
    sources: tuple[Path, ...] = ()
    n_unscored: int = field(default=0, compare=False)

    def __len__(self) -> int:
        return len(self.sent1)


@dataclass(frozen=True)
class STSTask:
    """A similarity task made of named subsets (STS12's five sources, STS-B's train/dev/test, …)."""

    name: str
    subsets: dict[str, SentencePairs]

    @property
    def n_pairs(self) -> int:
        return sum(len(s) for s in self.subsets.values())

    def texts(self) -> list[str]:
        """Every distinct sentence of the task, in first-appearance order (what a model must embed)."""
        seen: dict[str, None] = {}
        for sub in self.subsets.values():
            for a, b in zip(sub.sent1, sub.sent2, strict=True):
                seen.setdefault(a)
                seen.setdefault(b)
        return list(seen)

    def pooled(self, name: str = "all") -> SentencePairs:
        """All subsets concatenated in order (SentEval's pooled 'all' correlation is computed on this)."""
        subs = list(self.subsets.values())
        return SentencePairs(
            name,
            [s for sub in subs for s in sub.sent1],
            [s for sub in subs for s in sub.sent2],
            np.concatenate([sub.gold for sub in subs]),
            tuple(p for sub in subs for p in sub.sources),
            sum(sub.n_unscored for sub in subs),
        )


def _score(path: Path, lineno: int, text: str, line: str, lo: float | None = None, hi: float | None = None) -> float:
    try:
        value = float(text)
    except ValueError:
        raise malformed(path, lineno, "the gold score must be a number", line) from None
    if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise malformed(path, lineno, f"the gold score must lie in [{lo}, {hi}]", line)
    return value


def read_sts_subset(input_path: Path, gold_path: Path, name: str) -> SentencePairs:
    """One SentEval STS subset: the input pairs and the gold lines, unscored (empty gold) lines skipped."""
    input_path, gold_path = Path(input_path), Path(gold_path)
    inputs = read_lines(input_path)
    golds = read_lines(gold_path)
    if len(inputs) != len(golds):
        raise TaskDataError(
            f"{input_path} has {len(inputs)} lines but {gold_path} has {len(golds)}: the gold file must score "
            "the input file line by line (an empty gold line marks an unscored pair)"
        )
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    unscored = 0
    for lineno, (pair, gs) in enumerate(zip(inputs, golds, strict=True), 1):
        fields = pair.split("\t")
        if len(fields) != 2:
            raise malformed(input_path, lineno, f"expected 'sent1<TAB>sent2', found {len(fields)} fields", pair)
        if not gs.strip():
            unscored += 1
            continue
        a, b = normalize_space(fields[0]), normalize_space(fields[1])
        if not a or not b:
            raise malformed(input_path, lineno, "a scored pair has an empty sentence", pair)
        gold.append(_score(gold_path, lineno, gs.strip(), gs, 0.0, 5.0))
        s1.append(a)
        s2.append(b)
    if not gold:
        raise TaskDataError(f"{gold_path}: no scored pairs")
    return SentencePairs(name, s1, s2, np.asarray(gold, dtype=np.float64), (input_path, gold_path), unscored)


def load_sts_year(folder: Path, year: str | None = None) -> STSTask:
    """One STS year from its SentEval folder (e.g. ``sts/STS12-en-test``); ``year`` defaults from the name."""
    folder = Path(folder)
    year = year or folder.name.split("-")[0]
    if year not in STS_SUBSETS:
        raise TaskDataError(f"{folder}: unknown STS year {year!r}; known: {', '.join(STS_SUBSETS)}")
    subsets = {
        sub: read_sts_subset(folder / f"STS.input.{sub}.txt", folder / f"STS.gs.{sub}.txt", sub)
        for sub in STS_SUBSETS[year]
    }
    return STSTask(year, subsets)


def read_stsb_file(path: Path, name: str) -> SentencePairs:
    """One STS-B split: ``genre, file, year, id, score, sent1, sent2`` (+ 2 licence columns in the raw copy)."""
    path = Path(path)
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) not in (7, 9):
            what = f"expected 7 tab-separated columns (9 with licences), found {len(fields)}"
            raise malformed(path, lineno, what, line)
        a, b = normalize_space(fields[5]), normalize_space(fields[6])
        if not a or not b:
            raise malformed(path, lineno, "empty sentence", line)
        gold.append(_score(path, lineno, fields[4].strip(), line, 0.0, 5.0))
        s1.append(a)
        s2.append(b)
    if not gold:
        raise TaskDataError(f"{path}: no pairs")
    return SentencePairs(name, s1, s2, np.asarray(gold, dtype=np.float64), (path,))


def load_stsb(folder: Path) -> STSTask:
    """STS-Benchmark train/dev/test from ``sts/STSBenchmark`` (SentEval-processed) or ``STSBenchmark-raw``."""
    folder = Path(folder)
    return STSTask("STSBenchmark", {split: read_stsb_file(folder / f, split) for split, f in STSB_FILES.items()})


@dataclass(frozen=True)
class SickRows:
    """The SICK file's columns: both sentences, the relatedness score and the entailment label (as text)."""

    sent1: list[str]
    sent2: list[str]
    relatedness: np.ndarray
    entailment: list[str]
    source: Path
    line_numbers: list[int]


def read_sick_file(path: Path) -> SickRows:
    """A SICK file (header checked; CRLF tolerated). Shared by SICK-R here and SICK-E in ``downstream``."""
    path = Path(path)
    s1: list[str] = []
    s2: list[str] = []
    rel: list[float] = []
    ent: list[str] = []
    linenos: list[int] = []
    for lineno, fields, line, a, b in sentence_pair_rows(path, SICK_HEADER, "SICK", (1, 2)):
        rel.append(_score(path, lineno, fields[3], line, 1.0, 5.0))
        s1.append(a)
        s2.append(b)
        ent.append(fields[4])
        linenos.append(lineno)
    if not rel:
        raise TaskDataError(f"{path}: no pairs")
    return SickRows(s1, s2, np.asarray(rel, dtype=np.float64), ent, path, linenos)


def load_sick_r(folder: Path) -> STSTask:
    """SICK-R (relatedness) train/dev/test from ``sts/SICK`` (dev = SICK's trial file)."""
    folder = Path(folder)
    subsets = {}
    for split, fname in SICK_FILES.items():
        rows = read_sick_file(folder / fname)
        subsets[split] = SentencePairs(split, rows.sent1, rows.sent2, rows.relatedness, (rows.source,))
    return STSTask("SICK-R", subsets)


class _CsvRows:
    """A csv reader whose errors (a field over the csv module's limit, ...) name the file and line."""

    def __init__(self, path: Path, reader: Any) -> None:
        self.path = path
        self.reader = reader

    @property
    def line_num(self) -> int:
        return int(self.reader.line_num)

    def __iter__(self) -> _CsvRows:
        return self

    def __next__(self) -> list[str]:
        try:
            return next(self.reader)
        except csv.Error as exc:
            raise TaskDataError(f"{self.path}:{self.reader.line_num}: not a readable CSV record ({exc})") from None


def load_str(path: Path) -> STSTask:
    """STR-2022 (one subset, ``test``): quoted CSV, ``Text`` = ``sent1\\nsent2``, ``Score`` in [0, 1].

    Research use only, do not redistribute: read in place, never copied.
    """
    path = Path(path)
    if path.is_dir():
        path = path / STR_FILE
    text = read_text(path)
    reader = _CsvRows(path, csv.reader(io.StringIO(text, newline="")))
    header = next(reader, None)
    expected = ["Index", "SourceID", "SubsetID", "PairID", "Text", "Score"]
    if header != expected:
        raise malformed(path, 1, f"expected the STR header {','.join(expected)!r}", ",".join(header or []))
    col_text, col_score = expected.index("Text"), expected.index("Score")
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    for row in reader:
        lineno = reader.line_num  # physical line where this record ends (records span two lines)
        if not row:
            continue
        if len(row) != len(expected):
            raise malformed(path, lineno, f"expected {len(expected)} CSV fields, found {len(row)}", ",".join(row))
        parts = row[col_text].split("\n")
        if len(parts) != 2:
            raise malformed(path, lineno, "the Text field must hold two sentences separated by a newline", row[4])
        a, b = normalize_space(parts[0]), normalize_space(parts[1])
        if not a or not b:
            raise malformed(path, lineno, "empty sentence", row[col_text])
        gold.append(_score(path, lineno, row[col_score], ",".join(row), 0.0, 1.0))
        s1.append(a)
        s2.append(b)
    if not gold:
        raise TaskDataError(f"{path}: no pairs")
    return STSTask("STR", {"test": SentencePairs("test", s1, s2, np.asarray(gold, dtype=np.float64), (path,))})
