"""Princeton WordNet 3.0, read with NLTK's WordNet reader from a local copy of its database files.

The data is Debian's ``wordnet-base`` (``/usr/share/wordnet``: ``apt-get install wordnet-base``; .ci/run installs
it) or any folder holding the same ``data.*`` / ``index.*`` files, named by ``EVALFARM_WORDNET``. Nothing is
downloaded: NLTK's own downloader is never used.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from evalfarm.taskdata.build import BuildError

WORDNET_ENV = "EVALFARM_WORDNET"
DEBIAN_WORDNET = Path("/usr/share/wordnet")
_FILES = ("data.noun", "data.verb", "data.adj", "data.adv", "index.noun", "index.verb", "index.adj", "index.adv")


def wordnet_dir() -> Path:
    """The WordNet database folder: ``EVALFARM_WORDNET``, else Debian's ``/usr/share/wordnet``."""
    env = os.environ.get(WORDNET_ENV)
    path = Path(env).expanduser() if env else DEBIAN_WORDNET
    if not all((path / f).is_file() for f in _FILES):
        raise BuildError(
            f"no WordNet database in {path}: install Debian's wordnet-base (apt-get install wordnet-base) or set "
            f"{WORDNET_ENV} to a folder with WordNet 3.0's data.* and index.* files"
        )
    return path


LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition "
    "noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
    "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession "
    "verb.social verb.stative verb.weather adj.ppl"
).split()
"""WordNet 3.0's 45 lexicographer files in number order (lexnames(5WN)). Debian's wordnet-base leaves the
``lexnames`` file out, which NLTK's reader opens; :func:`reader_root` writes it from this list."""
_LEX_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{_LEX_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES))


def reader_root() -> Path:
    """A folder NLTK's reader can open: the database folder itself when it is complete, else a copy in the cache
    with the ``lexnames`` file it lacks (a copy, not links: NLTK refuses files that resolve outside its root)."""
    src = wordnet_dir().resolve()
    if (src / "lexnames").is_file():
        return src
    from evalfarm.cache import cache_dir

    root = cache_dir() / "wordnet" / hashlib.sha256(str(src).encode()).hexdigest()[:12]
    if (root / "lexnames").is_file():  # written last: the copy is complete
        return root
    import shutil

    from evalfarm import atomic

    for f in sorted(src.iterdir()):
        if f.is_file():

            def copy(tmp: Path, f: Path = f) -> None:
                shutil.copyfile(f, tmp)

            atomic.write_file(root / f.name, copy)
    atomic.write_text(root / "lexnames", lexnames_text())
    return root


@functools.cache
def wordnet() -> Any:
    """NLTK's ``WordNetCorpusReader`` over :func:`wordnet_dir` (one per process)."""
    import warnings

    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = str(reader_root())
    if root not in nltk.data.path:  # NLTK reads only folders on its data path
        nltk.data.path.append(root)

    class _Reader(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            """No mapping to another WordNet's synset ids (NLTK would look for its own downloaded copy): evalfarm
            reads this one WordNet and no multilingual data."""
            return None

    with warnings.catch_warnings():  # "multilingual functions are not available": evalfarm uses none
        warnings.simplefilter("ignore", UserWarning)
        return _Reader(root, None)


@functools.cache
def wordnet_identity() -> str:
    """``<version>/<sha256 of the database files, 12 hex>``: what a build records of the WordNet it read."""
    h = hashlib.sha256()
    folder = wordnet_dir()
    for name in _FILES:
        h.update((folder / name).read_bytes())
    return f"{wordnet().get_version()}/{h.hexdigest()[:12]}"
