"""Every fenced command block of README.md and docs/*.md runs as written, in order, each in a fresh shell (issue 24).

The runner and its conventions (``docs-ci`` comments, saved files, the reduced zoo through ``EVALFARM_CATALOG_PATH``)
are tests/support/doc_runner.py's; docs/design.md ("The doc runner") says them for the documents' authors. A line CI
does not run is reported as a warning with its reason, never dropped silently.
"""

from __future__ import annotations

import hashlib
import shutil
import warnings

import pytest

from tests.support import doc_runner

pytestmark = pytest.mark.docs


def test_every_document_parses_and_every_directive_is_well_formed() -> None:
    found = doc_runner.all_blocks()  # raises on a skip without a reason or one that matches no line
    bash = [b for b in found if b.lang == "bash"]
    assert {b.doc for b in bash} >= {"README.md", "docs/user-guide.md", "docs/operations.md"}
    for b in found:
        assert not b.setup or b.setup in doc_runner.SETUPS, f"{b.where}: unknown docs-ci setup {b.setup!r}"


def test_directives_skip_only_the_lines_they_name(tmp_path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "<!-- docs-ci: {skip: [evalfarm run --address], why: needs a cluster} -->\n```bash\n"
        "evalfarm run --address auto\nevalfarm sql 'SELECT 1'   # a comment\nmake test\n```\n"
        "```yaml\n# my.yaml\nname: my\n```\n```bash\n"
        "ray job submit --address x \\\n  -- evalfarm run\n```\n",
        encoding="utf-8",
    )
    saved = doc_runner.REPO
    try:
        doc_runner.REPO = tmp_path
        first, second, third = doc_runner.blocks("x.md")
    finally:
        doc_runner.REPO = saved
    assert first.line == 2
    assert [why for _, why in first.commands()] == ["needs a cluster", None, "the test suite itself"]
    assert second.saved_file() == "my.yaml" and third.saved_file() is None
    assert third.commands() == [("ray job submit --address x \\\n  -- evalfarm run\n", None)]
    quoted = doc_runner.Block("x.md", 1, "bash", 'evalfarm sql "SELECT 1\n  FROM t"\nevalfarm sql x  # it\'s\n')
    exact = doc_runner.Block("x.md", 1, "bash", "submit x\nsubmit x --dry-run\n", skip=["submit x$"], why="a head")
    assert [why for _, why in exact.commands()] == ["a head", None]
    assert [c for c, _ in quoted.commands()] == ['evalfarm sql "SELECT 1\n  FROM t"\n', "evalfarm sql x  # it's\n"]
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- docs-ci: {skip: [nothing here], why: x} -->\n```bash\nevalfarm sql x\n```\n")
    doc_runner.REPO = tmp_path
    try:
        with pytest.raises(ValueError, match="no line of the block starts with"):
            doc_runner.blocks("bad.md")
        bad.write_text("<!-- docs-ci: {skip: all} -->\n```bash\nevalfarm sql x\n```\n")
        with pytest.raises(ValueError, match="needs a 'why'"):
            doc_runner.blocks("bad.md")
    finally:
        doc_runner.REPO = saved


@pytest.mark.slow  # every document's commands in fresh shells, on the reduced zoo (5.5-7.5 min wall, busy 2 cores)
def test_every_command_block_runs_as_written_in_order(tmp_path, data_dir) -> None:
    if shutil.which("make") is None:
        pytest.fail("make is needed: the Quick start starts with `make install`")
    repo, env = doc_runner.sandbox(tmp_path, data_dir)
    try:
        outcome = doc_runner.run_all(repo, env)
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    print("seconds per block:", outcome.seconds)  # shown with -s, or on a failure below
    for task_id in doc_runner.REDUCED_ZOO_LEAVES_OUT:
        warnings.warn(f"task {task_id} not in the reduced zoo (generated data, built at full size)", stacklevel=1)
    for where, line, why in outcome.not_run:
        warnings.warn(f"{where}: not run in CI ({why}): {line.strip()}", stacklevel=1)
    assert outcome.ran, "no block ran"
    config = (repo / ".evalfarm.toml").read_text()
    assert f'data = "{tmp_path / "shared" / "data"}"' in config and f'warehouse = "{repo / "warehouse"}"' in config
    # the commands after `make install` used the warehouse the Makefile named, not a new one elsewhere
    assert not (repo / "warehouse" / "quarantine").exists()
    import evalfarm

    models = evalfarm.query("SELECT DISTINCT model FROM metrics", warehouse=repo / "warehouse").column("model")
    assert "all-minilm-l6-v2" in models.to_pylist()


def test_block_files_are_sampled_by_whole_blocks(tmp_path) -> None:
    """An ag2016 file (a target line, its comparisons, section markers; blank lines between blocks or none) is cut to
    whole blocks, evenly spread, within the line budget: what it keeps still reads as the same blocks."""
    from evalfarm.taskdata.ag2016 import read_ag_file

    def block(i: int) -> str:
        return (
            f"t{i}\r\na{i},0.25,b{i},0.75\r\ndistractors\r\nc{i},1.00,d{i},0.00\r\nrandoms\r\ne{i},0.50,f{i},0.50\r\n"
        )

    src = tmp_path / "src.txt"
    for sep in ("\r\n", ""):  # blank lines between blocks, and none (inflected/vb_inf.txt)
        src.write_bytes(sep.join(block(i) for i in range(10)).encode())
        dst = tmp_path / "dst.txt"
        digest = doc_runner._sample_blocks(src, dst, n=21)  # three blocks of 6 or 7 lines
        kept = dst.read_bytes().decode()
        got = read_ag_file(dst, "s")
        assert sorted(set(got.target)) == ["t0", "t4", "t8"] and len(kept.splitlines()) <= 21
        assert got.kind == ["positive", "distractor", "random"] * 3 and kept.startswith(block(0))
        assert digest == hashlib.sha256(dst.read_bytes()).hexdigest()
    src.write_bytes(block(0).encode())
    doc_runner._sample_blocks(src, dst, n=2)  # a block longer than the budget: that one block, whole
    assert dst.read_bytes() == src.read_bytes()
