"""Coverage-controlled task variants: a word task restricted to the words every model of a compared set knows.

With models that know different vocabularies, a word-level table can be decided by which words each model lacks
(their shared OOV vector ties them) rather than by how good its vectors are. A coverage-controlled variant of a word
task names a vocabulary file under the file role :data:`COMMON_VOCAB_ROLE` (one lower-cased word a line, written by
``evalfarm zoo coverage`` from the models themselves): the task keeps only the pairs, and EvalRank only the
background words, that the file lists. The file's sha256 is part of the task spec, so the variant is fingerprinted
like any other task, and a different compared set is a different task.
"""

from __future__ import annotations

from evalfarm.catalog.specs import TaskSpec
from evalfarm.taskdata.data import TaskDataError, task_file

__all__ = ["COMMON_VOCAB_ROLE", "common_vocabulary", "known_pair"]

COMMON_VOCAB_ROLE = "common_vocab"


def common_vocabulary(spec: TaskSpec) -> frozenset[str] | None:
    """The words a coverage-controlled task keeps (lower-cased), None for a task without the role."""
    if COMMON_VOCAB_ROLE not in spec.files:
        return None
    path = task_file(spec, COMMON_VOCAB_ROLE)
    try:
        words = frozenset(w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip())
    except UnicodeDecodeError as exc:
        raise TaskDataError(f"{path}: the common vocabulary is not UTF-8 text ({exc.reason})") from None
    if not words:
        raise TaskDataError(f"task {spec.id!r}: the common vocabulary {path} lists no word")
    return words


def known_pair(vocab: frozenset[str], a: str, b: str) -> bool:
    return a.lower() in vocab and b.lower() in vocab
