"""EvalRank pools (Wang et al., ACL 2022): positive pairs ranked against a background of words or sentences.

Item policy (documented in docs/evaluators.md, "Counting"; tested):
- Items are unique texts, keyed by their exact string (case kept: cased models see cased text); ``item_id`` is
  the position in first-appearance order: pair texts first (file order), then the background files.
- The background is every item: pair texts are part of it, as in the paper's loader (22,207 words; 24,957
  sentences).
- Duplicate directed pairs are collapsed and counted (``n_duplicate_pairs``); the pool files already hold both
  directions of every pair, so nothing is mirrored here.
- Self-pairs (x == y, 13 in the sentence pool) are kept, as in the paper: x is excluded from its own
  background, so such a pair has rank 1 unless another item scores strictly higher than x itself.
- ``pairs_from`` (the paper's Table 7): only the positive pairs that occur in STS-B or in STR, in either order,
  compared on their lowercased letters and digits (the pool's sentences are Moses-tokenized, STR's are not). Every
  one of the 6,989 pairs is in one or both (4,493 in STS-B, 2,872 in STR, 376 in both). The source's files are the
  task's ``from.*`` roles, which are not background; the background stays the full one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evalfarm.catalog.specs import TaskSpec
from evalfarm.taskdata.data import TaskDataError, task_file


@dataclass
class RankPool:
    """Items, directed positive pairs (as item ids) and the background (all items)."""

    spec: TaskSpec
    items: list[str]
    queries: np.ndarray
    positives: np.ndarray
    n_duplicate_pairs: int = 0
    sources: dict[str, Path] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def level(self) -> str:
        return self.spec.level

    @property
    def n_pairs(self) -> int:
        return int(self.queries.shape[0])

    @property
    def texts(self) -> list[str]:
        """The texts to embed: every item."""
        return self.items


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise TaskDataError(f"{path}:{line}: not valid UTF-8 ({exc.reason})") from None
    return text.splitlines()


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """``a<TAB>b`` per line; empty lines are skipped, anything else malformed is an error naming the line."""
    pairs = []
    for lineno, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        parts = line.rstrip("\r").split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise TaskDataError(f"{path}:{lineno}: expected two non-empty tab-separated fields, got {line[:80]!r}")
        pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise TaskDataError(f"{path}: no pairs")
    return pairs


def read_items(path: Path) -> list[str]:
    out = []
    for lineno, line in enumerate(_read_lines(path), 1):
        text = line.rstrip("\r").strip()
        if not text:
            continue
        if "\t" in text:
            raise TaskDataError(f"{path}:{lineno}: background lines hold one item, found a tab")
        out.append(text)
    return out


def build_rank_pool(
    spec: TaskSpec, pairs: list[tuple[str, str]], backgrounds: list[list[str]], sources: dict[str, Path] | None = None
) -> RankPool:
    index: dict[str, int] = {}

    def add(text: str) -> int:
        if text not in index:
            index[text] = len(index)
        return index[text]

    seen: set[tuple[int, int]] = set()
    q, p = [], []
    dup = 0
    for a, b in pairs:
        key = (add(a), add(b))
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        q.append(key[0])
        p.append(key[1])
    for bg in backgrounds:
        for t in bg:
            add(t)
    return RankPool(
        spec=spec,
        items=list(index),
        queries=np.asarray(q, dtype=np.int64),
        positives=np.asarray(p, dtype=np.int64),
        n_duplicate_pairs=dup,
        sources=sources or {},
    )


def load_evalrank_pool(spec: TaskSpec) -> RankPool:
    """Load and verify an EvalRank pool: files ``pairs`` plus one or more background roles."""
    if "pairs" not in spec.files:
        raise TaskDataError(f"pool {spec.id!r}: an evalrank pool needs a 'pairs' file")
    from evalfarm.taskdata.coverage import COMMON_VOCAB_ROLE, common_vocabulary, known_pair

    sources = {role: task_file(spec, role) for role in spec.files}
    pairs = read_pairs(sources["pairs"])
    bg_roles = sorted(r for r in spec.files if r not in ("pairs", COMMON_VOCAB_ROLE) and not r.startswith("from."))
    backgrounds = [read_items(sources[r]) for r in bg_roles]
    pairs_from = getattr(spec, "pairs_from", None)
    if pairs_from is not None:
        keys = source_pair_keys(pairs_from, {r: p for r, p in sources.items() if r.startswith("from.")}, spec.id)
        pairs = [(a, b) for a, b in pairs if (_key(a), _key(b)) in keys]
        if not pairs:
            raise TaskDataError(f"pool {spec.id!r}: no positive pair occurs in {pairs_from}")
    vocab = common_vocabulary(spec)
    if vocab is not None:  # a coverage-controlled variant: only pairs and background words every model knows
        pairs = [(a, b) for a, b in pairs if known_pair(vocab, a, b)]
        backgrounds = [[t for t in bg if t.lower() in vocab] for bg in backgrounds]
        if not pairs:
            raise TaskDataError(f"pool {spec.id!r}: no pair has both words in its common vocabulary")
    return build_rank_pool(spec, pairs, backgrounds, sources)


def _key(text: str) -> str:
    return _NOT_ALNUM.sub("", text.lower())


_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def source_pair_keys(source: str, files: dict[str, Path], task_id: str) -> set[tuple[str, str]]:
    """The sentence pairs of STS-B (roles from.train / from.dev / from.test) or STR (from.data), both orders, as
    lowercased letters and digits."""
    from evalfarm.taskdata.sts import load_str, read_stsb_file

    if not files:
        raise TaskDataError(f"pool {task_id!r}: pairs_from {source!r} needs its files as from.* roles")
    if source == "stsb":
        subsets = [read_stsb_file(path, role) for role, path in sorted(files.items())]
    elif source == "str":
        subsets = [s for path in files.values() for s in load_str(path).subsets.values()]
    else:
        raise TaskDataError(f"pool {task_id!r}: pairs_from must be stsb or str, got {source!r}")
    keys: set[tuple[str, str]] = set()
    for sub in subsets:
        for a, b in zip(sub.sent1, sub.sent2, strict=True):
            keys |= {(_key(a), _key(b)), (_key(b), _key(a))}
    return keys
