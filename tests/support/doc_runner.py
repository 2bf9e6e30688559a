"""The doc runner: every fenced command block of README.md and docs/*.md, run as written, in order, each in a fresh
shell (issue 24). Used by tests/test_doc_blocks.py; the convention is in docs/design.md ("The doc runner").

What a document may say to the runner, in an HTML comment on the line right above a block (invisible when rendered):

    <!-- docs-ci: {skip: ["evalfarm run --address auto"], why: "needs a running Ray cluster"} -->
    <!-- docs-ci: {setup: design-kinds} -->

``skip`` lists command prefixes (one ending in ``$``: the whole command; or ``all``) that CI does not run; ``why``
is required with it and is reported (a warning per command, never a silent skip); ``setup`` names a function of
``SETUPS`` that writes the files a reader supplies themselves (their own data file, their own vector table) before
the block runs. A ```yaml or ```python block whose first line is ``# <path>`` is a file the reader saves: the runner
writes it at that path before the next command block. The commands of ``SUITE`` (the test suite itself) are never
run, and reported as such.

What the runner changes, all of it through documented variables: ``EVALFARM_CATALOG_PATH`` puts a reduced
``tasks`` catalog first on the catalog search path (every task of catalog/tasks.yaml, its files cut to an even sample
of at most ``SLICE_LINES`` lines, under the same ids) and a reduced ``zoo-starter`` (the two models the documents'
commands name); ``RUN_ARGS=--executor local`` (the Makefile's) keeps ``make run`` in process.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    "README.md",
    "docs/user-guide.md",
    "docs/evaluators.md",
    "docs/operations.md",
    "docs/design.md",
    "docs/results.md",
)
"""In the order a reader meets them: the README, then its Documentation list."""
SUITE = {
    "make test": "the test suite itself",
    "make test-fast": "the suite's fast tier",
    "make test-docs": "the docs tests, this one included",
}
SLICE_LINES = 40
ACTIVATE = "if [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi\n"
"""Each fresh shell starts as the README's reader's does once `make install` made the venv: activated."""
DOCS_MODELS = ("glove-6b-50d", "all-minilm-l6-v2")
"""The models of the reduced zoo-starter: the ones the documents' commands name."""
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"<!--\s*docs-ci:\s*(\{.*?\})\s*-->\s*$")


@dataclass
class Block:
    """One fenced block: where it is, its language, its text, and what a ``docs-ci`` comment says about it."""

    doc: str
    line: int
    lang: str
    text: str
    skip: list[str] = field(default_factory=list)
    why: str = ""
    setup: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def saved_file(self) -> str | None:
        """The path a ```yaml / ```python block names on its first line (``# my-zoo.yaml``), if it names one."""
        first = self.text.splitlines()[0] if self.text else ""
        m = re.fullmatch(r"#\s*([\w./-]+\.(?:ya?ml|py))", first.strip())
        return m.group(1) if m and self.lang in ("yaml", "python") else None

    def commands(self) -> list[tuple[str, str | None]]:
        """Each command (its lines as written: a ``\\`` continuation or a quote left open joins the next line) with
        the reason it is not run (None: it runs)."""
        out: list[tuple[str, str | None]] = []
        pending = ""
        for line in self.text.splitlines(keepends=True):
            if not pending and not line.strip():
                continue
            pending += line
            if pending.rstrip("\n").endswith("\\") or not _complete(pending):
                continue
            out.append((pending, self._why_not(pending)))
            pending = ""
        if pending:
            out.append((pending, self._why_not(pending)))
        return out

    def _why_not(self, command: str) -> str | None:
        bare = command.split(" #")[0].strip()
        if bare in SUITE:
            return SUITE[bare]
        if self.skip == ["all"] or any(_matches(p, command) for p in self.skip):
            return self.why
        return None


def _matches(prefix: str, command: str) -> bool:
    """A skip entry is a prefix of the command; one ending in ``$`` is the whole command (its comment aside)."""
    if prefix.endswith("$"):
        return command.split(" #")[0].strip() == prefix[:-1]
    return command.strip().startswith(prefix)


def _complete(text: str) -> bool:
    """Whether text is whole commands as the shell reads them: no quote left open."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def _apply_directive(block: Block, line_above: str) -> None:
    """What a ``docs-ci`` comment on the line above says, checked: a skip has a reason and matches a line."""
    d = DIRECTIVE.search(line_above)
    if not d:
        return
    spec = yaml.safe_load(d.group(1))
    skip = spec.get("skip", [])
    block.skip = ["all"] if skip == "all" else list(skip)
    block.why, block.setup = spec.get("why", ""), spec.get("setup", "")
    if block.skip and not block.why:
        raise ValueError(f"{block.where}: a docs-ci skip needs a 'why'")
    lines = [c.strip() for c in block.text.splitlines()]
    unused = [p for p in block.skip if p != "all" and not any(_matches(p, c) for c in lines)]
    if unused:
        raise ValueError(f"{block.where}: docs-ci skips {unused}, which no line of the block starts with")


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of one document, with their directives."""
    text = (REPO / doc).read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        block = Block(doc, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
        _apply_directive(block, text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1])
        found.append(block)
    return found


def all_blocks() -> list[Block]:
    return [b for doc in DOCUMENTS for b in blocks(doc)]


def _records(raw: bytes) -> list[bytes]:
    """The file's records: its lines (bytes: a task file declares its own encoding), except that a comma-separated
    file's quoted field may span lines (STR's pairs): a record ends where its quotes balance."""
    lines = raw.splitlines(keepends=True)
    if not lines or b"\t" in lines[0] or b"," not in lines[0]:
        return lines
    records: list[bytes] = []
    for line in lines:
        if records and records[-1].count(b'"') % 2:
            records[-1] += line
        else:
            records.append(line)
    return records


def _sample(src: Path, dst: Path, n: int = SLICE_LINES) -> str:
    """An even sample of at most n lines of src (its first line kept: a header stays a header), written to dst."""
    lines = _records(src.read_bytes())
    step = max(1, -(-len(lines) // n))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(b"".join(lines[::step]))
    return hashlib.sha256(dst.read_bytes()).hexdigest()


BLOCK_FILE_KINDS = ("ag2016",)
"""Task kinds whose files are blocks (a target line, then its comparisons): sampled by whole blocks
(:func:`_sample_blocks`), never cut inside one. Copied whole they were most of the reduced zoo's sentences (7,306 of
its lines; 5,367 texts for all-minilm-l6-v2 to embed in `make run`, most of the doc runner's time)."""
AG_MARKERS = (b"distractors", b"randoms")
"""The section markers of an ag2016 block (evalfarm/taskdata/ag2016.py): lines without a comma that start no block."""


def _blocks(lines: list[bytes]) -> tuple[list[bytes], list[list[bytes]]]:
    """(the lines before the first block, the blocks): a block starts at a line without a comma that is not a
    section marker (its target word: evalfarm/taskdata/ag2016.py's format) and holds every line up to the next."""
    preamble: list[bytes] = []
    found: list[list[bytes]] = []
    for line in lines:
        bare = line.strip()
        if bare and b"," not in bare and bare.lower() not in AG_MARKERS:
            found.append([])
        (found[-1] if found else preamble).append(line)
    return preamble, found


def _sample_blocks(src: Path, dst: Path, n: int = SLICE_LINES) -> str:
    """An even sample of src's blocks, as many as fit in n lines (at least one), each whole; written to dst."""
    preamble, found = _blocks(src.read_bytes().splitlines(keepends=True))
    kept = found
    for k in range(len(found), 0, -1):
        kept = found[:: -(-len(found) // k)]
        if len(preamble) + sum(map(len, kept)) <= n:
            break
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(b"".join(preamble + [line for block in kept for line in block]))
    return hashlib.sha256(dst.read_bytes()).hexdigest()


REDUCED_ZOO_LEAVES_OUT: list[str] = []
"""The task ids the last :func:`reduced_zoo` left out (generated data), reported by the doc runner as warnings."""


def reduced_zoo(data_src: Path, data_dst: Path, catalogs: Path) -> None:
    """The reduced ``tasks`` and ``zoo-starter`` catalogs in ``catalogs``, their sampled files under ``data_dst``
    (at the same relative paths as the real ones, so a task keeps its id and files)."""
    tasks = yaml.safe_load((REPO / "catalog" / "tasks.yaml").read_text(encoding="utf-8"))
    # generated data (a `build:` entry: HEROS, DefSent) is built from the whole source files at a pinned checksum, and
    # building it costs minutes: those tasks are left out of the reduced zoo, with a warning (REDUCED_ZOO_LEAVES_OUT);
    # tests/test_diagnostics_data.py builds both recipes and runs them end to end
    REDUCED_ZOO_LEAVES_OUT[:] = [t["id"] for t in tasks["tasks"] if t.get("build")]
    tasks["tasks"] = [t for t in tasks["tasks"] if not t.get("build")]
    for task in tasks["tasks"]:
        for role, rel in (task.get("files") or {}).items():
            if (data_src / rel).is_file():
                sample = _sample_blocks if task.get("kind") in BLOCK_FILE_KINDS else _sample
                task["sha256"][role] = sample(data_src / rel, data_dst / rel)
        task.pop("urls", None)
        task["version"] = f"{task['version']}-docs-ci"
    catalogs.mkdir(parents=True, exist_ok=True)
    (catalogs / "tasks.yaml").write_text(yaml.safe_dump(tasks, sort_keys=False), encoding="utf-8")
    starter = yaml.safe_load((REPO / "catalog" / "zoo-starter.yaml").read_text(encoding="utf-8"))
    starter["models"] = [m for m in starter["models"] if m["id"] in DOCS_MODELS]
    starter["description"] = f"the doc runner's reduced zoo-starter: {', '.join(DOCS_MODELS)} on sampled task files"
    (catalogs / "zoo-starter.yaml").write_text(yaml.safe_dump(starter, sort_keys=False), encoding="utf-8")


def sandbox(root: Path, data_src: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout at root/repo whose .venv is the running environment, the reduced data at
    root/shared/data (the Makefile's default data folder), and the environment of a fresh shell in it."""
    repo = root / "repo"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    catalogs = root / "docs-ci-catalogs"
    reduced_zoo(data_src, root / "shared" / "data", catalogs)
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    path = f'PYTHONPATH="{repo}${{PYTHONPATH:+:$PYTHONPATH}}"'
    for name, body in {
        "python": f'{path} exec "{sys.executable}" "$@"',
        "evalfarm": f'{path} exec "{sys.executable}" -m evalfarm.cli "$@"',
        "ray": f'{path} exec "{Path(sys.executable).parent / "ray"}" "$@"',
    }.items():
        (venv / name).write_text(f"#!/bin/sh\n{body}\n")
        (venv / name).chmod(0o755)
    (venv / "activate").write_text(f'VIRTUAL_ENV="{repo / ".venv"}"\nexport VIRTUAL_ENV\nPATH="{venv}:$PATH"\n')
    (repo / ".venv" / ".installed").touch()  # `make install` is up to date: this environment is installed
    keep = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "RAY_USAGE_STATS_ENABLED", "TOKENIZERS_PARALLELISM", "LANG")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env |= {
        "HOME": str(root / "home"),  # no user config, an empty cache
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "EVALFARM_CATALOG_PATH": str(catalogs),  # the reduced zoo (see the module docstring)
        "RUN_ARGS": "--executor local",
        # what the commands leave in the temp folder (submit --dry-run's job folder) goes with it: the caller removes
        # it; short, since Ray's socket paths under it must fit in 107 bytes
        "TMPDIR": tempfile.mkdtemp(prefix="efdoc-"),
        "COLUMNS": "120",
    }
    return repo, env


def _design_kinds(repo: Path) -> None:
    """docs/design.md's 'Using the two kinds': the reader's own sentences file (its sha256 in place of the
    placeholder) and their n-gram table, the two example modules saved where their first lines say."""
    import numpy as np

    data = Path(_data_folder(repo))
    texts = data / "my" / "sentences.txt"
    texts.parent.mkdir(parents=True, exist_ok=True)
    texts.write_text("A dog barks.\nThe cat sleeps on the sofa.\nRain fell all night.\n", encoding="utf-8")
    catalog = repo / "my-kinds.yaml"
    digest = hashlib.sha256(texts.read_bytes()).hexdigest()
    catalog.write_text(catalog.read_text(encoding="utf-8").replace("<sha256 of the file>", digest), encoding="utf-8")
    np.save(repo / "ngram-table.npy", np.random.default_rng(0).normal(size=(256, 16)).astype(np.float32))


def _data_folder(repo: Path) -> str:
    text = (repo / ".evalfarm.toml").read_text(encoding="utf-8")
    m = re.search(r'^data\s*=\s*"(.*)"\s*$', text, re.MULTILINE)
    assert m, ".evalfarm.toml names no data folder"
    return m.group(1)


SETUPS: dict[str, Callable[[Path], None]] = {"design-kinds": _design_kinds}


@dataclass
class Outcome:
    ran: list[str] = field(default_factory=list)
    not_run: list[tuple[str, str, str]] = field(default_factory=list)  # (where, line, why)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each block that ran


def run_all(repo: Path, env: dict[str, str], timeout: float = 600) -> Outcome:
    """Every block of every document, in order: files saved, setups done, commands run in a fresh bash each block.
    Raises AssertionError with the block, its output and its exit status on the first block that fails."""
    outcome = Outcome()
    for block in all_blocks():
        path = block.saved_file()
        if path:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(block.text, encoding="utf-8")
            continue
        if block.lang not in ("bash", "sh"):
            continue
        if block.setup:
            SETUPS[block.setup](repo)
        lines = block.commands()
        outcome.not_run += [(block.where, c, why) for c, why in lines if why is not None]
        script = [c for c, why in lines if why is None]
        if not script:
            continue
        shown = "".join(f"echo '+ {c.splitlines()[0].replace(chr(39), '')}' >&2\n{c}" for c in script)
        start = time.monotonic()
        body = "set -e -o pipefail\n" + ACTIVATE + shown
        proc = subprocess.run(["bash", "-c", body], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
        log = f"{block.where} exited {proc.returncode}\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
        assert proc.returncode == 0, log
        assert "Traceback" not in proc.stderr, log
        outcome.seconds[block.where] = round(time.monotonic() - start, 1)
        outcome.ran.append(block.where)
    return outcome
