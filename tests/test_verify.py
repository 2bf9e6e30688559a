"""`evalfarm verify` (issue #23.6): a data file edited after it was written is noticed, not ranked.

The attack: rewrite a unit's metrics file in place, same name, same fingerprint, a better number. Before manifests,
the leaderboard showed the forged value and a rerun skipped the unit; now every data file's sha256 is recorded (in
the ``manifests`` table, committed before the file) and `verify` reports the mismatch (exit 1).
"""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import evalfarm
from evalfarm.cli import app
from evalfarm.warehouse import MANIFEST_TABLE, Warehouse, table_schemas, verify_warehouse
from tests.support.warehouse_files import table_files, unit_file

pytestmark = pytest.mark.faults  # issue 23.6 (`make faults`)

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "catalog" / "tasks.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def computed(tmp_path_factory, toy_glove) -> Path:
    """A warehouse with one unit (the toy GloVe on RG-65), computed once for the module; tests copy it."""
    d = tmp_path_factory.mktemp("verify")
    toy = f"{{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}"
    (d / "cat.yaml").write_text(f"include: [{TASKS}]\ntasks: [wordsim-rg-65]\nmodels:\n  - {toy}\n")
    summary = evalfarm.run(d / "cat.yaml", warehouse=d / "wh", executor="local")
    assert summary.counts()["done"] == 1
    return d / "wh"


@pytest.fixture
def wh(computed, tmp_path) -> Warehouse:
    import shutil

    shutil.copytree(computed, tmp_path / "wh")
    return Warehouse(tmp_path / "wh")


def _metrics_file(wh: Warehouse) -> Path:
    return unit_file(wh, "metrics", "toy", "wordsim-rg-65")


def _fingerprint(wh: Warehouse) -> str:
    return str(pq.read_table(_metrics_file(wh)).column("fingerprint")[0])


def _forge(path: Path, value: float = 0.99) -> None:
    """What the attacker did: same file name, same fingerprint column, every number replaced."""
    t = pq.read_table(path)
    t = t.set_column(t.schema.get_field_index("value"), "value", pa.array([value] * len(t), pa.float64()))
    pq.write_table(t, path)


def _cli(*args: str):
    return runner.invoke(app, ["verify", *args])


def test_an_untouched_warehouse_verifies(wh) -> None:
    result = evalfarm.verify(warehouse=wh.root)
    assert result.ok and result.findings == ()
    assert result.checked == result.verified >= 2  # metrics and quality at least (word-similarity has details too)
    assert _cli("--warehouse", str(wh.root)).exit_code == 0


def test_every_result_file_is_recorded_with_the_hash_of_its_bytes(wh) -> None:
    rows = [r for f in table_files(wh, MANIFEST_TABLE) for r in pq.read_table(f).to_pylist()]
    tables = [t for t in table_schemas() if t != MANIFEST_TABLE]
    files = sorted(str(p.relative_to(wh.base)) for t in tables for p in table_files(wh, t))
    # every data file of every table is recorded (the manifests' own excepted), and so are the unit files that the
    # run's end replaced with the metrics table's current rows (evalfarm/warehouse/current.py): recorded when written
    assert set(files) <= {r["path"] for r in rows}
    assert {r["path"] for r in rows} - set(files) <= {r["path"] for r in rows if r["table"] == "metrics"}
    unit = [r for r in rows if r["model"] == "toy"]
    assert {r["table"] for r in unit} >= {"metrics", "quality"}
    for r in rows:
        body = (Path(wh.base) / r["path"]).read_bytes()
        assert r["sha256"] == hashlib.sha256(body).hexdigest() and r["size"] == len(body)
    assert {(r["task"], r["fingerprint"]) for r in unit} == {("wordsim-rg-65", _fingerprint(wh))}
    # the result file is what pyarrow writes for its own rows: recording changed none of its bytes
    t = pq.read_table(_metrics_file(wh))
    sink = io.BytesIO()
    pq.write_table(t, sink)
    assert sink.getvalue() == _metrics_file(wh).read_bytes()


def test_a_forged_number_with_its_own_fingerprint_is_reported(wh) -> None:
    path = _metrics_file(wh)
    _forge(path)
    assert wh.file_problem(str(path)) is None  # whole Parquet with the unit's own fingerprint
    # its size is not what the table's log recorded: the views leave it out (and say so) rather than rank it
    assert 0.99 not in evalfarm.query("SELECT value FROM leaderboard", warehouse=wh.root).column("value").to_pylist()
    assert [q.path for q in wh.scan(quarantine=False)] == [str(path)]

    result = evalfarm.verify(warehouse=wh.root)
    assert not result.ok
    (finding,) = result.errors
    assert finding.problem == "modified" and finding.path == str(path.relative_to(wh.base))
    assert (finding.model, finding.task, finding.table) == ("toy", "wordsim-rg-65", "metrics")
    assert result.untrusted_units() == {("toy", "wordsim-rg-65", _fingerprint(wh))}

    # docs/operations.md's recipe for verified rows only: the forged unit's rows are left out
    bad = {(m, t) for m, t, _ in evalfarm.verify(warehouse=wh.root).untrusted_units()}
    board = [r for r in evalfarm.query("SELECT * FROM leaderboard", warehouse=wh.root).to_pylist()
             if (r["model"], r["task"]) not in bad]  # fmt: skip
    assert board == []

    cli = _cli("--warehouse", str(wh.root))
    assert cli.exit_code == 1
    assert "modified" in cli.output and "FAILED" in cli.output and "--force" in cli.output


def test_a_forced_rerun_computes_the_unit_again_beside_the_forged_rows(wh, computed) -> None:
    _forge(_metrics_file(wh))
    assert not evalfarm.verify(warehouse=wh.root).ok
    cat = computed.parent / "cat.yaml"
    evalfarm.run(cat, warehouse=wh.root, executor="local", force=True)
    values = evalfarm.query("SELECT value FROM leaderboard", warehouse=wh.root).column("value").to_pylist()
    assert 0.99 not in values and values  # the run quarantined the forged file and computed the unit again
    result = evalfarm.verify(warehouse=wh.root)
    assert result.ok and result.findings == (), result.findings
    assert list((Path(wh.base) / "quarantine").rglob("*.why.txt"))


def test_a_deleted_file_is_reported(wh) -> None:
    unit_file(wh, "quality", "toy", "wordsim-rg-65").unlink()
    result = evalfarm.verify(warehouse=wh.root)
    assert [(f.problem, f.table) for f in result.errors] == [("missing", "quality")]
    assert _cli("--warehouse", str(wh.root)).exit_code == 1


def test_a_file_whose_fingerprint_column_disagrees_with_its_manifest_is_damaged(wh) -> None:
    path = _metrics_file(wh)
    t = pq.read_table(path)
    t = t.set_column(t.schema.get_field_index("fingerprint"), "fingerprint", pa.array(["0" * 16] * len(t)))
    body = io.BytesIO()
    pq.write_table(t, body)
    size = path.stat().st_size
    path.write_bytes(body.getvalue())
    from evalfarm.warehouse.manifests import manifest_index

    row = manifest_index(wh)[str(path.relative_to(wh.base))]
    if len(body.getvalue()) == size:  # the same size: the hash tells, else the size already did
        assert row.sha256 != hashlib.sha256(body.getvalue()).hexdigest()
    (finding,) = evalfarm.verify(warehouse=wh.root).errors
    assert finding.problem == "modified"
    # a writer who also rewrote the manifest row: the file still names another unit than its manifest
    wh.write(MANIFEST_TABLE, [{"path": row.path, "sha256": hashlib.sha256(body.getvalue()).hexdigest(),
                               "size": len(body.getvalue()), "table": "metrics", "model": "toy",
                               "task": "wordsim-rg-65", "fingerprint": row.units[0][2]}])  # fmt: skip
    with_log = [f for f in evalfarm.verify(warehouse=wh.root).errors if f.table == "metrics"]
    assert [f.problem for f in with_log] in (["modified"], ["damaged"])  # the log's size, else the fingerprint


def test_files_without_manifest_rows_are_unrecorded_and_fail_only_under_strict(wh) -> None:
    import shutil

    shutil.rmtree(Path(wh.base) / "tables" / MANIFEST_TABLE)  # no manifests: files another tool committed
    result = evalfarm.verify(warehouse=wh.root)
    assert result.ok and result.verified == 0 and set(result.counts()) == {"unrecorded"}
    assert not evalfarm.verify(warehouse=wh.root, strict=True).ok
    assert _cli("--warehouse", str(wh.root)).exit_code == 0
    assert _cli("--warehouse", str(wh.root), "--strict").exit_code == 1


def test_model_filter_checks_only_that_models_files(wh) -> None:
    _forge(_metrics_file(wh))
    other = verify_warehouse(wh, model="someone-else")
    assert other.ok and other.checked == 0
    assert not verify_warehouse(wh, model="toy").ok
    assert _cli("--warehouse", str(wh.root), "--model", "toy", "--format", "json").exit_code == 1


def test_no_warehouse_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no warehouse"):
        evalfarm.verify(warehouse=tmp_path / "nothing")
    out = _cli("--warehouse", str(tmp_path / "nothing"))
    assert out.exit_code == 2 and "no warehouse" in out.output


def test_manifest_rows_are_newest_first(wh) -> None:
    """Two manifest rows for one path: the newer one decides (an older row with another hash is history)."""
    rel = str(_metrics_file(wh).relative_to(wh.base))
    wh.write(MANIFEST_TABLE, [{"run_id": "0-old", "path": rel, "sha256": "0" * 64, "size": 1, "table": "metrics",
                               "model": "toy", "task": "wordsim-rg-65", "fingerprint": _fingerprint(wh),
                               "created_at": datetime.now(UTC)}])  # fmt: skip
    (finding,) = evalfarm.verify(warehouse=wh.root).errors  # written now: the newest row, and wrong
    assert finding.problem == "modified" and "0-old" in finding.detail


def test_a_staged_file_is_the_bytes_a_plain_write_publishes_and_its_hash_is_theirs(wh) -> None:
    """Results must not change: the manifest is a separate table, the data file's bytes are pyarrow's own."""
    t = pq.read_table(_metrics_file(wh))
    plain = wh.write_table(t, wh._p("scratch", "plain.parquet"))
    staged = wh.tables.stage("metrics", t, run_id="r")
    body = Path(plain).read_bytes()
    assert (Path(wh.base) / staged.path).read_bytes() == body
    assert (staged.sha256, staged.size) == (hashlib.sha256(body).hexdigest(), len(body))


# -- `evalfarm verify --deep` (issue 40): the numbers' meaning, when bytes and manifest were both rewritten ----------
@pytest.fixture(scope="module")
def ranked(tmp_path_factory, toy_glove) -> Path:
    """A warehouse with one EvalRank unit (the toy GloVe on the word pool, ranks kept), computed once."""
    d = tmp_path_factory.mktemp("deep")
    toy = f"{{id: toy, level: word, kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy_glove}}}}}"
    (d / "cat.yaml").write_text(f"include: [{TASKS}]\ntasks: [evalrank-word]\nmodels:\n  - {toy}\n")
    summary = evalfarm.run(d / "cat.yaml", warehouse=d / "wh", executor="local")
    assert summary.counts()["done"] == 1
    return d / "wh"


@pytest.fixture
def rwh(ranked, tmp_path) -> Warehouse:
    import shutil

    shutil.copytree(ranked, tmp_path / "rwh")
    return Warehouse(tmp_path / "rwh")


def _rewrite_through_the_runs_api(wh: Warehouse, value: dict[tuple[str, str | None, str], float]) -> None:
    """The forger's way around `verify`: the unit's metrics written again through the very function a run writes
    with (`write_results`: the file under its own name and fingerprint, and a new manifest row with its hash), every
    number as it was except ``value``'s (variant, ties, metric)."""
    from evalfarm.execute import write_results
    from evalfarm.plan import Unit
    from evalfarm.scorers import scorer_for
    from evalfarm.scorers.base import MetricRow, ScoreResult

    rows = wh.query(
        "SELECT m.*, h.task_checksum FROM metrics m JOIN (SELECT DISTINCT fingerprint, task_checksum "
        "FROM metrics_history) h USING (fingerprint) WHERE scorer = 'evalrank'"
    ).to_pylist()
    r0 = rows[0]
    unit = Unit(r0["model"], r0["task"], "evalrank", "word", r0["spec_hash"], r0["task_checksum"], r0["params"],
                r0["fingerprint"])  # fmt: skip
    forged = [
        MetricRow(
            r["metric"],
            value.get((r["variant"], r["ties"], r["metric"]), r["value"]),
            r["subset"],
            r["variant"],
            r["ties"],
        )  # fmt: skip
        for r in rows
    ]
    write_results(wh, "forger", unit, scorer_for("evalrank"), ScoreResult(rows=forged))


def test_deep_finds_nothing_wrong_in_honest_warehouses(rwh, ranked, wh, computed) -> None:
    for w, cat in ((rwh, ranked.parent / "cat.yaml"), (wh, computed.parent / "cat.yaml")):
        result = evalfarm.verify(warehouse=w.root, deep=True, sample=1, catalog=cat)
        assert result.ok and result.findings == (), result.findings
        assert result.deep is not None and result.deep.numbers > 0 and len(result.deep.recomputed_units) == 1
    assert result.deep.from_ranks == 0  # word similarity has no ranks table
    assert evalfarm.verify(warehouse=rwh.root, deep=True, sample=0).deep.from_ranks == 34  # 2 variants x 17


def test_an_evalrank_unit_whose_ranks_rows_were_removed_is_reported(rwh) -> None:
    """A writer who removes the per-pair rows (so that no number can be compared with them) leaves a unit whose params
    keep them and which has none: `--deep` names it, per variant, rather than counting nothing as agreement."""
    from tests.support.warehouse_files import rewrite_files

    assert evalfarm.verify(warehouse=rwh.root, deep=True, sample=0).ok
    rewrite_files(rwh, "ranks", lambda t: t.slice(0, 0))
    assert evalfarm.query("SELECT count(*) AS n FROM ranks", warehouse=rwh.root).column("n")[0].as_py() == 0
    result = evalfarm.verify(warehouse=rwh.root, deep=True, sample=0)
    assert result.deep.from_ranks == 0
    assert sorted(f.detail for f in result.errors if f.problem == "disagrees-with-ranks") == [
        "evalrank/cos: no ranks rows under its fingerprint, though its params keep them",
        "evalrank/l2: no ranks rows under its fingerprint, though its params keep them",
    ]


def test_a_forged_mrr_with_its_manifest_rewritten_is_caught_by_deep(rwh, ranked) -> None:
    """The reported forgery: MRR 0.99 beside Hits@1 0.046 (impossible: MRR <= (1 + Hits@1) / 2), where the ranks
    table gives about 0.1. The byte check believes it (file and manifest agree); --deep reports it three ways."""
    honest = {
        r["metric"]: r["value"]
        for r in rwh.query(
            "SELECT metric, value FROM metrics WHERE variant = 'cos' AND ties = 'optimistic'"
        ).to_pylist()
    }
    assert honest["mrr"] < 0.5 and honest["hits@1"] < 0.2
    _rewrite_through_the_runs_api(rwh, {("cos", "optimistic", "mrr"): 0.99})
    assert 0.99 in evalfarm.query("SELECT value FROM metrics", warehouse=rwh.root).column("value").to_pylist()
    assert evalfarm.verify(warehouse=rwh.root).ok  # the documented limit of the byte check

    result = evalfarm.verify(warehouse=rwh.root, deep=True, sample=1, catalog=ranked.parent / "cat.yaml")
    assert not result.ok
    found = {(f.problem, f.detail.split(":", 1)[0]) for f in result.errors}
    assert ("inconsistent", "evalrank/cos") in found  # MRR against Hits@k (and the tie policies' order)
    assert ("disagrees-with-ranks", "evalrank/cos/optimistic/mrr") in found
    assert ("disagrees-with-embeddings", "evalrank/cos/optimistic/mrr") in found  # the suspect unit is sampled first
    (ranks,) = [f for f in result.errors if f.problem == "disagrees-with-ranks"]
    assert "stored 0.99, its" in ranks.detail and f"give {honest['mrr']:.6g}" in ranks.detail
    assert all("mrr" in f.detail for f in result.errors), result.errors  # the forged number, and nothing else
    assert {(m, t) for m, t, _ in result.untrusted_units()} == {("toy", "evalrank-word")}

    cli = _cli("--warehouse", str(rwh.root), "--deep", "--catalog", str(ranked.parent / "cat.yaml"))
    assert cli.exit_code == 1, cli.output
    assert "disagrees-with-ranks" in cli.output and "inconsistent" in cli.output and "--force" in cli.output
    assert "recomputed toy · evalrank-word" in cli.output


def test_a_forger_who_keeps_the_numbers_consistent_is_caught_by_the_ranks_and_the_embeddings(rwh, ranked) -> None:
    """Every optimistic number of one variant scaled into another consistent set (Hits@k and MRR raised together):
    no relation breaks, but the ranks table and the stored embeddings still say otherwise."""
    rows = rwh.query("SELECT metric, value FROM metrics WHERE variant = 'l2' AND ties = 'optimistic'").to_pylist()
    forged = {("l2", "optimistic", r["metric"]): r["value"] for r in rows}
    forged.update({("l2", "optimistic", "hits@1"): 0.5, ("l2", "optimistic", "hits@3"): 0.6,
                   ("l2", "optimistic", "hits@10"): 0.7, ("l2", "optimistic", "mrr"): 0.55,
                   ("l2", "optimistic", "mr"): 40.0})  # fmt: skip
    _rewrite_through_the_runs_api(rwh, forged)
    result = evalfarm.verify(warehouse=rwh.root, deep=True, sample=0)
    problems = {f.problem for f in result.errors}
    assert "disagrees-with-ranks" in problems and not result.ok
    assert not [f for f in result.errors if f.problem == "inconsistent" and "optimistic:" in f.detail], result.errors


@pytest.mark.parametrize(
    ("ties", "values", "bad"),
    [
        ("optimistic", {"mrr": 0.99, "hits@1": 0.046, "hits@3": 0.08, "hits@10": 0.15, "mr": 900.0}, "mrr 0.99 >"),
        ("optimistic", {"mrr": 0.3, "hits@1": 0.2, "hits@3": 0.1, "hits@10": 0.4, "mr": 50.0}, "hits@1 0.2 > hits@3"),
        ("optimistic", {"mrr": 0.5, "hits@1": 0.4, "hits@3": 0.6, "hits@10": 0.8, "mr": 1.5}, "mr 1.5 <"),
        ("optimistic", {"mrr": 1.2, "hits@1": 1.0, "mr": 1.0}, "mrr 1.2 >"),
        ("realistic", {"mrr": 2 / 3, "hits@1": 0.0, "hits@3": 1.0, "mr": 1.5}, None),  # every rank 1.5: possible
        ("optimistic", {"mrr": 2 / 3, "hits@1": 0.0, "hits@3": 1.0, "mr": 1.5}, "mrr 0.666667 >"),  # whole: not
        ("pessimistic", {"mrr": 0.096, "hits@1": 0.046, "hits@3": 0.1, "hits@10": 0.2, "mr": 800.0}, None),
    ],
)
def test_rank_metrics_that_cannot_hold_together_are_named(ties, values, bad) -> None:
    from evalfarm.warehouse.verify import rank_metric_problems

    problems = rank_metric_problems(ties, values)
    if bad is None:
        assert problems == []
    else:
        assert problems and problems[0].startswith(bad), problems
