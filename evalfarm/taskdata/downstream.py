"""SentEval-style downstream classification tasks: MR, CR, SUBJ, MPQA, SST2, SST5, TREC, MRPC, SICK-E, SciCite.

Files and formats are SentEval's (the copies EvalRank bundles, under ``$EVALFARM_DATA/downstream``); labels are
SentEval's integer coding, with the names in ``label_names``:

======== ===================================== ======================= =========================================
task     files                                 protocol                labels
======== ===================================== ======================= =========================================
MR       rt-polarity.{pos,neg}                 10-fold CV              negative 0, positive 1
CR       custrev.{pos,neg}                     10-fold CV              negative 0, positive 1
SUBJ     subj.{objective,subjective}           10-fold CV              subjective 0, objective 1 (as SentEval)
MPQA     mpqa.{pos,neg}                        10-fold CV              negative 0, positive 1
SST2     sentiment-{train,dev,test}            train/dev/test          ``sentence<TAB>label``, 0/1
SST5     sentiment-{train,dev,test}            train/dev/test          ``label<SPACE>sentence``, 0–4
TREC     train_5500.label, TREC_10.label       train/test              ``COARSE:fine question``, 6 coarse classes
MRPC     msr_paraphrase_{train,test}.txt       train/test              ``Quality`` 0/1, sentence pairs
SICK-E   SICK_{train,trial,test_annotated}.txt train/dev(trial)/test   CONTRADICTION 0, NEUTRAL 1, ENTAILMENT 2
SciCite  {train,dev,test}.txt (JSON lines)     train/dev/test          background 0, method 1, result 2
======== ===================================== ======================= =========================================

Encodings, on purpose: TREC is read as Latin-1, as SentEval does (``train_5500.label`` has one 0xF0 byte, line
66, and is not valid UTF-8); the MRPC files start with a UTF-8 BOM, which is dropped; SICK's test file has CRLF
line ends. Every other file is strict UTF-8 (SentEval reads MR/CR/SUBJ/MPQA as Latin-1; the copies here are
pure ASCII, so UTF-8 gives the same text and a wrong file fails loudly instead of turning into mojibake).

Differences from SentEval, deliberate: blank lines of the single-sentence files are skipped and counted
(``n_blank_lines``: CR has 4, MPQA 3; SentEval keeps them as empty samples and its batcher turns them into
"."), so CR has 3,771 samples and MPQA 10,603. Sentences are SentEval's tokens joined by one space. SciCite keeps
its text; ``load_downstream_task("SciCite", evalrank_text=True)`` applies EvalRank's reduction instead
(lower-case, keep only ``a-z`` and spaces).

``subsample_train`` draws the seeded, stratified training subset that ``max_train`` means everywhere (SST2's
train split is 67,349 phrases): the data layer can embed only the sampled sentences, and the classifier draws
the same rows from the same seed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from evalfarm.taskdata.data import TaskDataError
from evalfarm.taskdata.sts import SICK_FILES, read_sick_file
from evalfarm.taskdata.textfiles import LATIN1, malformed, normalize_space, read_lines, sentence_pair_rows

Protocol = Literal["cv", "train_test", "train_dev_test"]
CV_TASKS = ("MR", "CR", "SUBJ", "MPQA")
SPLIT_TASKS = ("SST2", "SST5", "TREC", "MRPC", "SICK-E", "SciCite")
DOWNSTREAM_TASKS = CV_TASKS + SPLIT_TASKS
DEFAULT_SUBSAMPLE_SEED = 1111  # SentEval's seed


@dataclass(frozen=True)
class LabelledSet:
    """Texts (or text pairs: ``text2`` set) with integer labels (int64), in file order."""

    text1: list[str]
    labels: np.ndarray
    text2: list[str] | None = None

    def __len__(self) -> int:
        return len(self.text1)

    def take(self, idx: np.ndarray) -> LabelledSet:
        idx = np.asarray(idx, dtype=np.int64)
        t2 = None if self.text2 is None else [self.text2[i] for i in idx]
        return LabelledSet([self.text1[i] for i in idx], self.labels[idx], t2)


@dataclass(frozen=True)
class DownstreamTask:
    """One classification task: either ``splits`` (train, dev?, test) or ``cv`` (one set, k-fold CV)."""

    name: str
    label_names: tuple[str, ...]
    splits: dict[str, LabelledSet] = field(default_factory=dict)
    cv: LabelledSet | None = None
    f1_label: int | None = None  # the positive class for F1 (MRPC: 1), None where F1 is not reported
    sources: tuple[Path, ...] = ()
    n_blank_lines: int = 0

    def __post_init__(self) -> None:
        if (self.cv is None) == (not self.splits):
            raise ValueError(f"task {self.name!r}: give either splits or cv, not both or neither")
        if self.splits and not {"train", "test"} <= set(self.splits) <= {"train", "dev", "test"}:
            got = list(self.splits)
            raise ValueError(f"task {self.name!r}: splits must be train, test and optionally dev; got {got}")

    @property
    def protocol(self) -> Protocol:
        if self.cv is not None:
            return "cv"
        return "train_dev_test" if "dev" in self.splits else "train_test"

    @property
    def is_pair(self) -> bool:
        first = self.cv if self.cv is not None else self.splits["train"]
        return first.text2 is not None

    @property
    def n_classes(self) -> int:
        return len(self.label_names)

    def parts(self) -> dict[str, LabelledSet]:
        """The labelled sets by role: ``{"cv": …}`` or the splits."""
        return {"cv": self.cv} if self.cv is not None else dict(self.splits)

    def texts(self) -> list[str]:
        """Every distinct text of the task in first-appearance order (what a model must embed for it)."""
        seen: dict[str, None] = {}
        for part in self.parts().values():
            for i, t in enumerate(part.text1):
                seen.setdefault(t)
                if part.text2 is not None:
                    seen.setdefault(part.text2[i])
        return list(seen)

    def subsample_train(self, max_train: int | None, seed: int = DEFAULT_SUBSAMPLE_SEED) -> DownstreamTask:
        """The task with its training part cut to ``max_train`` rows (seeded, stratified; ``None``: unchanged).

        The training part is ``train`` for split tasks and the whole set for CV tasks; dev and test are never
        sampled. Rows keep file order. The same ``(labels, max_train, seed)`` always gives the same rows.
        """
        key = "cv" if self.cv is not None else "train"
        part = self.parts()[key]
        if max_train is None or max_train >= len(part):
            return self
        sub = part.take(stratified_subsample(part.labels, max_train, seed))
        if key == "cv":
            return replace(self, cv=sub)
        return replace(self, splits={**self.splits, "train": sub})


def stratified_subsample(labels: np.ndarray, n: int, seed: int = DEFAULT_SUBSAMPLE_SEED) -> np.ndarray:
    """Sorted row indices of a seeded sample of ``n`` rows with the label proportions of ``labels``.

    Each class gets ``round(n * share)`` rows (largest remainders break the rounding so the total is ``n``),
    drawn without replacement by ``numpy.random.default_rng(seed)``.
    """
    labels = np.asarray(labels)
    if not 0 < n <= len(labels):
        raise ValueError(f"cannot sample {n} rows from {len(labels)}")
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * (n / len(labels))
    take = np.floor(exact).astype(np.int64)
    short = n - int(take.sum())
    order = np.argsort(-(exact - take), kind="stable")
    take[order[:short]] += 1
    rng = np.random.default_rng(seed)
    chosen = [
        rng.choice(np.flatnonzero(labels == c), size=int(m), replace=False) for c, m in zip(classes, take, strict=True)
    ]
    return np.sort(np.concatenate(chosen))


# --- readers ---------------------------------------------------------------------------------------------


def _read_sentences(path: Path) -> tuple[list[str], int]:
    """One sentence per line (MR/CR/SUBJ/MPQA): blank lines are skipped and counted."""
    out, blank = [], 0
    for line in read_lines(path):
        text = normalize_space(line)
        if text:
            out.append(text)
        else:
            blank += 1
    if not out:
        raise TaskDataError(f"{path}: no sentences")
    return out, blank


def _binary_cv(name: str, folder: Path, pos: str, neg: str, names: tuple[str, str]) -> DownstreamTask:
    # SentEval's BinaryClassifierEval(pos, neg): samples pos + neg, labels [1]*pos + [0]*neg
    p, n = folder / pos, folder / neg
    pos_s, b1 = _read_sentences(p)
    neg_s, b2 = _read_sentences(n)
    labels = np.asarray([1] * len(pos_s) + [0] * len(neg_s), dtype=np.int64)
    return DownstreamTask(name, names, cv=LabelledSet(pos_s + neg_s, labels), sources=(p, n), n_blank_lines=b1 + b2)


def _label(path: Path, lineno: int, text: str, n_classes: int, line: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise malformed(path, lineno, "the label must be an integer", line) from None
    if not 0 <= value < n_classes:
        raise malformed(path, lineno, f"the label must lie in 0..{n_classes - 1}", line)
    return value


def read_sst_file(path: Path, n_classes: int) -> LabelledSet:
    """SST2: ``sentence<TAB>label``; SST5: ``label<SPACE>sentence`` (SentEval's two layouts)."""
    path = Path(path)
    texts, labels = [], []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        if n_classes == 2:
            fields = line.strip().split("\t")
            if len(fields) != 2:
                raise malformed(path, lineno, "expected 'sentence<TAB>label'", line)
            text, lab = fields[0], fields[1]
        else:
            fields = line.strip().split(" ", 1)
            if len(fields) != 2:
                raise malformed(path, lineno, "expected 'label sentence'", line)
            lab, text = fields
        text = normalize_space(text)
        if not text:
            raise malformed(path, lineno, "empty sentence", line)
        labels.append(_label(path, lineno, lab.strip(), n_classes, line))
        texts.append(text)
    if not texts:
        raise TaskDataError(f"{path}: no sentences")
    return LabelledSet(texts, np.asarray(labels, dtype=np.int64))


TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


def read_trec_file(path: Path) -> LabelledSet:
    """``COARSE:fine question tokens`` per line, Latin-1 (as SentEval reads it); the coarse class is the label."""
    path = Path(path)
    texts, labels = [], []
    for lineno, line in enumerate(read_lines(path, encoding=LATIN1), 1):
        if not line.strip():
            continue
        head, sep, rest = line.strip().partition(" ")
        coarse, colon, fine = head.partition(":")
        if not sep or not colon or not fine:
            raise malformed(path, lineno, "expected 'COARSE:fine question'", line)
        if coarse not in TREC_CLASSES:
            raise malformed(path, lineno, f"unknown coarse class {coarse!r} (expected one of {TREC_CLASSES})", line)
        text = normalize_space(rest)
        if not text:
            raise malformed(path, lineno, "empty question", line)
        labels.append(TREC_CLASSES.index(coarse))
        texts.append(text)
    if not texts:
        raise TaskDataError(f"{path}: no questions")
    return LabelledSet(texts, np.asarray(labels, dtype=np.int64))


MRPC_HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")


def read_mrpc_file(path: Path) -> LabelledSet:
    """MRPC: header ``Quality #1 ID #2 ID #1 String #2 String`` (after the BOM), then tab-separated rows."""
    path = Path(path)
    t1, t2, labels = [], [], []
    for lineno, fields, line, a, b in sentence_pair_rows(path, MRPC_HEADER, "MRPC", (3, 4)):
        labels.append(_label(path, lineno, fields[0], 2, line))
        t1.append(a)
        t2.append(b)
    if not labels:
        raise TaskDataError(f"{path}: no pairs")
    return LabelledSet(t1, np.asarray(labels, dtype=np.int64), t2)


SICK_E_CLASSES = ("CONTRADICTION", "NEUTRAL", "ENTAILMENT")


def read_sick_e_file(path: Path) -> LabelledSet:
    rows = read_sick_file(path)
    labels = []
    for lineno, lab in zip(rows.line_numbers, rows.entailment, strict=True):
        if lab not in SICK_E_CLASSES:
            raise TaskDataError(f"{path}:{lineno}: unknown entailment label {lab!r} (expected {SICK_E_CLASSES})")
        labels.append(SICK_E_CLASSES.index(lab))
    return LabelledSet(rows.sent1, np.asarray(labels, dtype=np.int64), rows.sent2)


SCICITE_CLASSES = ("background", "method", "result")


def evalrank_scicite_text(text: str) -> str:
    """EvalRank's SciCite reduction: lower-case, keep only ``a-z`` and spaces, then SentEval's tokens."""
    return normalize_space("".join(ch for ch in text.lower() if ch in "abcdefghijklmnopqrstuvwxyz "))


def read_scicite_file(path: Path, evalrank_text: bool = False) -> LabelledSet:
    """SciCite JSON lines: ``{"text": …, "label": "background"|"method"|"result", …}``."""
    path = Path(path)
    texts, labels = [], []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise malformed(path, lineno, f"not a JSON object ({exc.msg})", line) from None
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) or "label" not in rec:
            raise malformed(path, lineno, "expected a JSON object with 'text' and 'label'", line)
        if rec["label"] not in SCICITE_CLASSES:
            raise malformed(path, lineno, f"unknown label {rec['label']!r} (expected {SCICITE_CLASSES})", line)
        text = evalrank_scicite_text(rec["text"]) if evalrank_text else normalize_space(rec["text"])
        if not text:
            raise malformed(path, lineno, "empty text", line)
        labels.append(SCICITE_CLASSES.index(rec["label"]))
        texts.append(text)
    if not texts:
        raise TaskDataError(f"{path}: no records")
    return LabelledSet(texts, np.asarray(labels, dtype=np.int64))


def _split_task(name: str, folder: Path, files: dict[str, str], read, names, **kw) -> DownstreamTask:
    paths = {split: folder / f for split, f in files.items()}
    splits = {split: read(p) for split, p in paths.items()}
    for split, part in splits.items():
        missing = set(range(len(names))) - set(np.unique(part.labels).tolist())
        if split == "train" and missing:
            raise TaskDataError(f"{paths[split]}: no training example of class(es) {[names[m] for m in missing]}")
    return DownstreamTask(name, tuple(names), splits=splits, sources=tuple(paths.values()), **kw)


SST_FILES = {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"}
SST5_CLASSES = ("very negative", "negative", "neutral", "positive", "very positive")
TASK_FOLDERS = {t: t for t in DOWNSTREAM_TASKS}


def load_downstream_task(name: str, folder: Path, *, evalrank_text: bool = False) -> DownstreamTask:
    """Load one task from its folder (e.g. ``$EVALFARM_DATA/downstream/MR``) by its name."""
    folder = Path(folder)
    if name == "MR":
        return _binary_cv(name, folder, "rt-polarity.pos", "rt-polarity.neg", ("negative", "positive"))
    if name == "CR":
        return _binary_cv(name, folder, "custrev.pos", "custrev.neg", ("negative", "positive"))
    if name == "SUBJ":
        return _binary_cv(name, folder, "subj.objective", "subj.subjective", ("subjective", "objective"))
    if name == "MPQA":
        return _binary_cv(name, folder, "mpqa.pos", "mpqa.neg", ("negative", "positive"))
    if name == "SST2":
        return _split_task(name, folder, SST_FILES, lambda p: read_sst_file(p, 2), ("negative", "positive"))
    if name == "SST5":
        return _split_task(name, folder, SST_FILES, lambda p: read_sst_file(p, 5), SST5_CLASSES)
    if name == "TREC":
        files = {"train": "train_5500.label", "test": "TREC_10.label"}
        return _split_task(name, folder, files, read_trec_file, TREC_CLASSES)
    if name == "MRPC":
        files = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
        names = ("not paraphrase", "paraphrase")
        return _split_task(name, folder, files, read_mrpc_file, names, f1_label=1)
    if name == "SICK-E":
        return _split_task(name, folder, SICK_FILES, read_sick_e_file, SICK_E_CLASSES)
    if name == "SciCite":
        files = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
        return _split_task(name, folder, files, lambda p: read_scicite_file(p, evalrank_text), SCICITE_CLASSES)
    raise TaskDataError(f"unknown downstream task {name!r}; known: {', '.join(DOWNSTREAM_TASKS)}")


def load_downstream_tasks(root: Path, names: list[str] | None = None) -> dict[str, DownstreamTask]:
    """Tasks under ``root`` (e.g. ``$EVALFARM_DATA/downstream``), each from its folder of the same name."""
    names = list(DOWNSTREAM_TASKS) if names is None else names
    return {n: load_downstream_task(n, Path(root) / TASK_FOLDERS.get(n, n)) for n in names}
