"""Vocabulary indexes: ``word -> position``, the first occurrence wins, for exact and lower-cased keys.

A word model's vocabulary is a sequence of words (positions ``0 .. n-1``) and the matrix row of each
(``word_rows``; spaCy shares rows between words). Every lookup the package makes is one of two questions, asked
of a :class:`VocabIndex`:

- :meth:`~VocabIndex.positions` (exact keys): the first position holding the key; a later duplicate of a word is
  never seen;
- :meth:`~VocabIndex.lower_positions` (lower-cased keys): the first position whose word, lower-cased, is the key.
  :meth:`~VocabIndex.lower_first` lists those first positions in vocabulary order, and :meth:`~VocabIndex.lowercased`
  is the index of that view (the EvalRank word protocol's vocabulary: "lower-cased keys, first occurrence wins",
  the toolkit's ``read_word_embs``).

Two implementations answer them:

- :class:`DictIndex`: Python dicts over a list of words, built on the first lookup (files parsed into RAM,
  numpy-vocab, gensim, spaCy);
- :class:`MappedIndex`: sorted 64-bit hashes memory-mapped beside a cached matrix (written once by
  :func:`write_mapped_index` when the cache is built), so opening does no per-word Python work and a lookup of
  ``N`` words costs ``O(N log V)`` in NumPy plus one comparison per hit. The hash is :func:`key_hashes`
  (BLAKE2b, 8-byte digest, of the key's UTF-8 bytes, read little-endian: stable across processes and Python
  versions, unlike the salted ``hash()``). A hash only finds a candidate: every hit is compared with the real word
  read from ``vocab.txt``, and the other entries of the same hash are tried after it, so a collision never
  returns a wrong word.

Files of a :class:`MappedIndex` (beside ``vocab.txt``: UTF-8, one word per line, each line ending in ``\\n``):

- ``vocab-offsets.npy``: int64 ``(n + 1,)``, the byte offset of each word's line; the last is the file's size;
- ``vocab-exact-hash.npy`` / ``vocab-exact-pos.npy``: uint64 / int64 ``(k,)``, one entry per distinct word at its
  first position, sorted by hash, then position;
- ``vocab-lower-hash.npy`` / ``vocab-lower-pos.npy``: the same for the lower-cased keys;
- ``vocab-lower-first.npy``: int64 ``(m,)``, the lower-cased keys' first positions in vocabulary order.

All are plain ``.npy`` arrays, opened with ``allow_pickle=False`` and ``mmap_mode="r"``.
"""

from __future__ import annotations

import hashlib
import mmap
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

__all__ = [
    "HASH_NAME",
    "INDEX_FILES",
    "INDEX_VERSION",
    "DictIndex",
    "LowercasedIndex",
    "MappedIndex",
    "VocabIndex",
    "key_hashes",
    "lowercase_first",
    "lowercase_first_rows",
    "lowercased_words",
    "write_mapped_index",
]

INDEX_VERSION = 1
"""Bump when the files of a :class:`MappedIndex` change meaning (the cache's reader version must change too)."""

HASH_NAME = "blake2b-8-le"
"""The hash of :func:`key_hashes`, recorded in the cache's ``meta.json``."""

INDEX_FILES = (
    "vocab-offsets.npy",
    "vocab-exact-hash.npy",
    "vocab-exact-pos.npy",
    "vocab-lower-hash.npy",
    "vocab-lower-pos.npy",
    "vocab-lower-first.npy",
)

_READ_HINT = 4 << 20  # bytes of vocab.txt per chunk while building


def key_hashes(keys: Iterable[bytes]) -> np.ndarray:
    """uint64 hash of each key's bytes: BLAKE2b with an 8-byte digest, read little-endian (:data:`HASH_NAME`)."""
    b2 = hashlib.blake2b
    return np.frombuffer(b"".join([b2(k, digest_size=8).digest() for k in keys]), dtype="<u8").astype(
        np.uint64, copy=False
    )


def lowercased_words(words: Sequence[str]) -> list[str]:
    """``[w.lower() for w in words]``, lower-cased in one C call over the joined words.

    Equivalent: ``str.lower``'s one context rule (a final sigma) looks at the neighbouring cased letters, and the
    newline that separates two words is neither cased nor case-ignorable, so it ends a word's context exactly as
    the end of the string does. A word holding a newline itself (never in a text vocabulary) falls back to the
    per-word loop."""
    if not words:
        return []
    lowered = "\n".join(words).lower().split("\n")
    return lowered if len(lowered) == len(words) else [w.lower() for w in words]


def lowercase_first(words: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
    """(sorted positions of each lower-cased key's first occurrence, {lower-cased key: that position})."""
    lowered = lowercased_words(words)
    n = len(lowered)
    first = dict(zip(reversed(lowered), range(n - 1, -1, -1), strict=True))  # earlier positions overwrite later
    positions = np.fromiter(first.values(), dtype=np.int64, count=len(first))
    positions.sort()
    return positions, first


def lowercase_first_rows(words: Sequence[str], word_rows: np.ndarray | None = None) -> np.ndarray:
    """Matrix rows of the lower-cased vocabulary: for each lower-cased key, the row of its first occurrence.

    ``words[i]`` lives in row ``word_rows[i]`` (``i`` when ``word_rows`` is None). Each key counts once, so a row
    shared by two keys (spaCy) is selected twice; the result keeps vocabulary order.
    """
    idx, _ = lowercase_first(words)
    return idx if word_rows is None else np.asarray(word_rows, dtype=np.int64)[idx]


# -- lazy word sequences ----------------------------------------------------------------------------------------
class _LazyWords(Sequence[str]):
    """A read-only sequence of words produced on demand; iterating it (or comparing it) materialises a list."""

    @abstractmethod
    def _item(self, i: int) -> str: ...

    @abstractmethod
    def _all(self) -> list[str]: ...

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"word {i} of a {n}-word vocabulary")
        return self._item(i)

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (str, bytes)) or not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and self._all() == list(other)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list is: it defines __eq__ by value

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self)} words>"


class _MappedWords(_LazyWords):
    """The words of ``vocab.txt`` through its line offsets: ``words[i]`` decodes one line."""

    def __init__(self, buf: Any, offsets: np.ndarray) -> None:
        self._buf = buf
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _item(self, i: int) -> str:
        return self._buf[int(self._offsets[i]) : int(self._offsets[i + 1]) - 1].decode("utf-8")

    def _all(self) -> list[str]:
        return self._buf[:].decode("utf-8").split("\n")[:-1] if len(self) else []


class _LoweredWords(_LazyWords):
    """``words[first[i]].lower()``: the lower-cased view's keys."""

    def __init__(self, words: Sequence[str], first: np.ndarray) -> None:
        self._words = words
        self._first = first

    def __len__(self) -> int:
        return len(self._first)

    def _item(self, i: int) -> str:
        return self._words[int(self._first[i])].lower()

    def _all(self) -> list[str]:
        words = self._words if isinstance(self._words, list) else list(self._words)
        return [words[i].lower() for i in np.asarray(self._first).tolist()]


# -- the index --------------------------------------------------------------------------------------------------
class VocabIndex(ABC):
    """Positions of keys in a vocabulary, first occurrence wins (see the module's docstring)."""

    _lowered: LowercasedIndex | None = None

    @property
    @abstractmethod
    def words(self) -> Sequence[str]:
        """The vocabulary, position by position (a list, or a lazy sequence for a memory-mapped index)."""

    @property
    @abstractmethod
    def word_rows(self) -> np.ndarray:
        """int64 ``(n,)``: the matrix row of each position."""

    @property
    def identity_rows(self) -> bool:
        """True when position ``i`` is row ``i`` (no shared rows): :meth:`rows_of` is then the identity."""
        return False

    @abstractmethod
    def positions(self, keys: Sequence[str]) -> np.ndarray:
        """int64: the first position whose word is each key, -1 for a key not in the vocabulary."""

    @abstractmethod
    def lower_positions(self, keys: Sequence[str]) -> np.ndarray:
        """int64: the first position whose lower-cased word is each key (keys are not lower-cased here), or -1."""

    @abstractmethod
    def lower_first(self) -> np.ndarray:
        """int64, ascending: the first position of each lower-cased key (the lower-cased view's vocabulary)."""

    def __len__(self) -> int:
        return len(self.words)

    def rows_of(self, positions: np.ndarray) -> np.ndarray:
        """Matrix rows of ``positions`` (-1 stays -1)."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.identity_rows:
            return positions
        out = np.full(len(positions), -1, dtype=np.int64)
        found = positions >= 0
        out[found] = np.asarray(self.word_rows)[positions[found]]
        return out

    def rows(self, keys: Sequence[str]) -> np.ndarray:
        """Matrix row of each exact key, -1 for a key not in the vocabulary."""
        return self.rows_of(self.positions(keys))

    def lowercased(self) -> VocabIndex:
        """The lower-cased keys, first occurrence wins, as an index of their own (built once, on demand)."""
        if self._lowered is None:
            self._lowered = LowercasedIndex(self)
        return self._lowered


class DictIndex(VocabIndex):
    """An index over a list of words held in RAM: ``dict`` lookups, built on the first call."""

    def __init__(
        self, words: Sequence[str], word_rows: np.ndarray | None = None, *, exact: dict[str, int] | None = None
    ) -> None:
        """``exact``: the {word: first position} dict, when the caller has built it already (the loader does, to
        find duplicates); it must be exactly that."""
        self._words = words if isinstance(words, list) else list(words)
        n = len(self._words)
        self._rows = np.arange(n, dtype=np.int64) if word_rows is None else np.asarray(word_rows, dtype=np.int64)
        if self._rows.shape != (n,):
            raise ValueError(f"{n} words but {len(self._rows)} rows")
        self._identity = word_rows is None
        self._exact: dict[str, int] | None = exact
        self._lower: dict[str, int] | None = None
        self._first: np.ndarray | None = None

    @property
    def words(self) -> list[str]:
        return self._words

    @property
    def word_rows(self) -> np.ndarray:
        return self._rows

    @property
    def identity_rows(self) -> bool:
        return self._identity

    def _lookup(self, table: dict[str, int], keys: Sequence[str]) -> np.ndarray:
        get = table.get
        return np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=len(keys))

    def positions(self, keys: Sequence[str]) -> np.ndarray:
        if self._exact is None:  # first occurrence wins: earlier positions overwrite later duplicates
            n = len(self._words)
            self._exact = dict(zip(reversed(self._words), range(n - 1, -1, -1), strict=True))
        return self._lookup(self._exact, keys)

    def _lower_tables(self) -> tuple[np.ndarray, dict[str, int]]:
        """The lower-cased keys' first positions and their lookup dict, built together on first use."""
        if self._first is None or self._lower is None:
            self._first, self._lower = lowercase_first(self._words)
        return self._first, self._lower

    def lower_first(self) -> np.ndarray:
        return self._lower_tables()[0]

    def lower_positions(self, keys: Sequence[str]) -> np.ndarray:
        return self._lookup(self._lower_tables()[1], keys)


class LowercasedIndex(VocabIndex):
    """The lower-cased view of ``base``: its keys are ``base.words[p].lower()`` for ``p`` in ``base.lower_first()``
    (each key once, at its first occurrence); position ``i`` of the view is position ``lower_first()[i]`` of the
    base, in the same matrix row. Keys are already lower-cased, and ``str.lower`` is idempotent, so the view's
    exact and lower-cased lookups are the same."""

    def __init__(self, base: VocabIndex) -> None:
        self.base = base
        self._first = base.lower_first()
        self._words = _LoweredWords(base.words, self._first)
        self._rows: np.ndarray | None = None

    @property
    def words(self) -> Sequence[str]:
        return self._words

    @property
    def word_rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = self.base.rows_of(self._first)
        return self._rows

    def __len__(self) -> int:
        return len(self._first)

    def positions(self, keys: Sequence[str]) -> np.ndarray:
        p = self.base.lower_positions(keys)
        found = p >= 0
        out = np.full(len(p), -1, dtype=np.int64)
        out[found] = np.searchsorted(self._first, p[found])
        return out

    def lower_positions(self, keys: Sequence[str]) -> np.ndarray:
        return self.positions(keys)

    def lower_first(self) -> np.ndarray:
        return np.arange(len(self._first), dtype=np.int64)

    def lowercased(self) -> VocabIndex:
        return self


class MappedIndex(VocabIndex):
    """An index read from the files :func:`write_mapped_index` wrote beside ``vocab.txt`` (memory-mapped)."""

    def __init__(self, folder: Path, n_words: int, record: dict[str, Any] | None) -> None:
        """Open the index in ``folder`` for ``n_words`` words described by ``record`` (the ``meta.json`` entry
        :func:`write_mapped_index` returned). Raises ``ValueError`` / ``OSError`` when a piece is missing,
        unreadable or inconsistent (the caller treats the cache as inconsistent)."""
        self.folder = Path(folder)
        expected = {"version": INDEX_VERSION, "hash": HASH_NAME}
        if not isinstance(record, dict) or {k: record.get(k) for k in expected} != expected:
            raise ValueError(f"{folder}: no vocabulary index of version {INDEX_VERSION} ({HASH_NAME})")

        def load(name: str, dtype: Any, length: int) -> np.ndarray:
            a = np.load(self.folder / name, mmap_mode="r", allow_pickle=False)
            if a.dtype != np.dtype(dtype) or a.shape != (length,):
                raise ValueError(f"{self.folder / name}: {a.dtype} {a.shape}, expected {np.dtype(dtype)} ({length},)")
            return a

        n_exact, n_lower = int(record["exact"]), int(record["lower"])
        if record.get("words") != n_words or not 0 <= n_lower <= n_exact <= n_words:
            raise ValueError(f"{folder}: the vocabulary index does not describe {n_words} words")
        self._offsets = load("vocab-offsets.npy", np.int64, n_words + 1)
        self._exact = (
            load("vocab-exact-hash.npy", np.uint64, n_exact),
            load("vocab-exact-pos.npy", np.int64, n_exact),
        )
        self._lower = (
            load("vocab-lower-hash.npy", np.uint64, n_lower),
            load("vocab-lower-pos.npy", np.int64, n_lower),
        )
        self._first = load("vocab-lower-first.npy", np.int64, n_lower)
        vocab = self.folder / "vocab.txt"
        size = vocab.stat().st_size
        if int(self._offsets[0]) != 0 or int(self._offsets[-1]) != size:
            raise ValueError(f"{vocab}: {size} bytes, but the index's offsets end at {int(self._offsets[-1])}")
        if size:
            with open(vocab, "rb") as f:
                self._buf: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        else:
            self._buf = b""
        self._words = _MappedWords(self._buf, self._offsets)
        self._rows: np.ndarray | None = None

    @property
    def words(self) -> Sequence[str]:
        return self._words

    @property
    def word_rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.arange(len(self._words), dtype=np.int64)
        return self._rows

    @property
    def identity_rows(self) -> bool:
        return True

    def __len__(self) -> int:
        return len(self._words)

    def positions(self, keys: Sequence[str]) -> np.ndarray:
        return self._find(self._exact, keys, lower=False)

    def lower_positions(self, keys: Sequence[str]) -> np.ndarray:
        return self._find(self._lower, keys, lower=True)

    def lower_first(self) -> np.ndarray:
        return self._first

    def _find(self, table: tuple[np.ndarray, np.ndarray], keys: Sequence[str], *, lower: bool) -> np.ndarray:
        """Binary search of each key's hash; every candidate is then compared with its real word (lower-cased for
        ``lower``), and on a mismatch the other entries of the same hash are tried (a collision)."""
        hashes, pos = table
        keys = keys if isinstance(keys, list) else list(keys)
        out = np.full(len(keys), -1, dtype=np.int64)
        if not keys or not len(hashes):
            return out
        kb = [k.encode("utf-8", "surrogatepass") for k in keys]  # a lone surrogate matches no word, never raises
        h = key_hashes(kb)
        j = np.searchsorted(hashes, h)  # the first entry of each hash's run (entries are sorted by hash, position)
        j[j == len(hashes)] = 0
        q = np.flatnonzero(np.asarray(hashes[j]) == h)
        if not len(q):
            return out
        cand = np.asarray(pos[j[q]])
        buf, off = self._buf, self._offsets
        found = [buf[s : e - 1] for s, e in zip(off[cand].tolist(), off[cand + 1].tolist(), strict=True)]

        def same(word: bytes, i: int) -> bool:
            return word.decode("utf-8").lower() == keys[i] if lower else word == kb[i]

        ok = np.fromiter(map(same, found, q.tolist()), dtype=bool, count=len(q))
        out[q[ok]] = cand[ok]
        for i, k in zip(q[~ok].tolist(), j[q[~ok]].tolist(), strict=True):  # a collision: the rest of the run
            k += 1
            while k < len(hashes) and hashes[k] == h[i]:
                p = int(pos[k])
                if same(buf[int(off[p]) : int(off[p + 1]) - 1], i):
                    out[i] = p
                    break
                k += 1
        return out


# -- building a mapped index ------------------------------------------------------------------------------------
def _first_entries(h: np.ndarray, key_of: Callable[[int], str | bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``(hashes, positions)`` sorted by hash then position, one entry per distinct key at its first position.

    Entries of one hash are compared as real keys (``key_of(position)``): equal keys keep the first position,
    different keys that share a hash (a collision) all stay.
    """
    order = np.argsort(h, kind="stable")  # positions ascending within a hash
    hs = h[order]
    keep = np.ones(len(hs), dtype=bool)
    same = hs[1:] == hs[:-1]
    if same.any():
        starts = np.flatnonzero(np.concatenate([[True], ~same]))
        ends = np.concatenate([starts[1:], [len(hs)]])
        runs = np.flatnonzero(ends - starts > 1)
        for s, e in zip(starts[runs].tolist(), ends[runs].tolist(), strict=True):
            seen: set[str | bytes] = set()
            for k in range(s, e):
                key = key_of(int(order[k]))
                if key in seen:
                    keep[k] = False
                else:
                    seen.add(key)
    return hs[keep], order[keep].astype(np.int64)


def write_mapped_index(folder: Path) -> dict[str, Any]:
    """Write the :class:`MappedIndex` files of ``folder/vocab.txt`` into ``folder``, reading it once in chunks.

    Returns the record :class:`MappedIndex` checks (version, hash, counts); the caller keeps it in ``meta.json``.
    Memory: three 8-byte arrays per word (offsets, two hashes) and the sort's; words are read back from the file
    only where two entries share a hash (a word and its case variants, or a collision).
    """
    folder = Path(folder)
    vocab = folder / "vocab.txt"
    offsets = [np.zeros(1, dtype=np.int64)]
    exact: list[np.ndarray] = []
    lower: list[np.ndarray] = []
    end = 0
    with open(vocab, "rb") as f:
        while lines := f.readlines(_READ_HINT):
            if not lines[-1].endswith(b"\n"):
                raise ValueError(f"{vocab}: the last word has no line break")
            lens = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
            offsets.append(end + np.cumsum(lens))
            end += int(lens.sum())
            raw = [line[:-1] for line in lines]
            exact.append(key_hashes(raw))
            lower.append(key_hashes([w.decode("utf-8").lower().encode("utf-8") for w in raw]))
    off = np.concatenate(offsets)
    n = len(off) - 1
    eh = np.concatenate(exact) if exact else np.zeros(0, np.uint64)
    lh = np.concatenate(lower) if lower else np.zeros(0, np.uint64)
    size = vocab.stat().st_size
    with open(vocab, "rb") as f:
        buf: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""

    def word(p: int) -> bytes:
        return buf[int(off[p]) : int(off[p + 1]) - 1]

    exact_hash, exact_pos = _first_entries(eh, word)
    lower_hash, lower_pos = _first_entries(lh, lambda p: word(p).decode("utf-8").lower())
    arrays = {
        "vocab-offsets.npy": off,
        "vocab-exact-hash.npy": exact_hash,
        "vocab-exact-pos.npy": exact_pos,
        "vocab-lower-hash.npy": lower_hash,
        "vocab-lower-pos.npy": lower_pos,
        "vocab-lower-first.npy": np.sort(lower_pos),
    }
    for name, a in arrays.items():
        np.save(folder / name, np.ascontiguousarray(a), allow_pickle=False)
    if isinstance(buf, mmap.mmap):
        buf.close()
    return {"version": INDEX_VERSION, "hash": HASH_NAME, "words": n, "exact": len(exact_pos), "lower": len(lower_pos)}
