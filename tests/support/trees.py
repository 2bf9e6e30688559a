"""What the attack tests compare before and after: every entry under a folder, links not followed; and the one-model
toy catalog their runs use.

``tree(folder)`` maps each path (relative to ``folder``) to a file's bytes, a link's target (``-> target``) or a
folder's mark (``dir``): two trees are equal when nothing was created, moved, written or deleted, and a link was
never followed to read what it leads to. ``toy_catalog(path, toy_glove)`` writes a catalog of the toy GloVe model on
one small task.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tree(folder: Path, *, skip: Callable[[str], bool] = lambda rel: False) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (``os.walk`` follows no link): bytes, ``-> target`` or ``dir``; ``skip(rel)``
    leaves entries out (and not their contents: a skipped folder's entries are skipped by their own paths)."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            if skip(rel):
                continue
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


def toy_catalog(path: Path, toy_glove: Path, task: str = "wordsim-rg-65") -> Path:
    """A catalog at ``path``: the shipped tasks, ``task`` selected, and the toy GloVe model."""
    path.write_text(f"""
include: [{REPO / "catalog" / "tasks.yaml"}]
tasks: [{task}]
models:
  - {{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}
""")
    return path
