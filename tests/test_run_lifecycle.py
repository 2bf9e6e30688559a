"""A run's record in the warehouse (in-process executor, real files, seconds): the end event's counts, a spec
changed under an old id (warning + ``conflicts``), an older warehouse's ``runs`` files, write errors that name
their path."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalfarm.runner import RunInterrupted, RunSummary, run_catalog, spec_conflicts
from evalfarm.warehouse import SCHEMAS, Warehouse, WarehouseWriteError, atomic_write_table

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def catalogs(tmp_path: Path, data_dir: Path, toy_glove: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A word pool sliced from the real one (its files in tmp_path, this test's data folder) and the toy model twice,
    under one id with two specs."""
    import hashlib

    w = data_dir / "evalrank" / "word_evalrank"
    files = {}
    for role, name, n in (("pairs", "pos_pair_5514.txt", 200), ("background_basic", "basic_vocab.txt", 400),
                          ("background_wiki", "wiki_vocab.txt", 400)):  # fmt: skip
        files[role] = tmp_path / name
        files[role].write_text("\n".join((w / name).read_text().splitlines()[:n]) + "\n")
    fl = ", ".join(f"{r}: {p.name}" for r, p in files.items())
    sh = ", ".join(f"{r}: {hashlib.sha256(p.read_bytes()).hexdigest()}" for r, p in files.items())
    monkeypatch.setenv("EVALFARM_DATA", str(tmp_path))  # the catalog names the slices relative to their folder
    pool = (
        "tasks:\n  - {id: w, level: word, kind: evalrank, format: evalrank-word, version: '1', licence: t, source: t,"
        f" files: {{{fl}}}, sha256: {{{sh}}}}}\n"
    )
    g = f"{{type: path, ref: {toy_glove}}}"
    toy = "{id: toy, level: word, kind: word-vectors, format: glove-text, %ssource: %s}"
    first = tmp_path / "a.yaml"
    first.write_text(pool + "models:\n  - " + toy % ("", g) + "\n")
    second = tmp_path / "b.yaml"  # the same id, another spec
    second.write_text(pool + "models:\n  - " + toy % ("oov: skip, ", g) + "\n")
    return first, second


@pytest.mark.slow
def test_end_event_counts_and_a_changed_spec_is_flagged(catalogs, tmp_path):
    first, second = catalogs
    wh = tmp_path / "wh"
    s1 = run_catalog(first, wh, executor="local")
    assert s1.status == "ok" and s1.warnings == []
    s2 = run_catalog(second, wh, executor="local")
    assert s2.status == "ok" and len(s2.warnings) == 1 and "'toy'" in s2.warnings[0]
    w = Warehouse(wh)
    runs = w.query("SELECT run_id, status, n_units, n_done, n_skipped, n_failed, reason FROM runs ORDER BY started_at")
    assert [(r["status"], r["n_units"], r["n_done"], r["n_skipped"], r["reason"]) for r in runs.to_pylist()] == [
        ("ok", 1, 1, 0, None),
        ("ok", 1, 1, 0, None),
    ]
    rows = w.query("SELECT model, spec_hash, n_units, in_metrics, runs FROM conflicts").to_pylist()
    assert len(rows) == 2 and {r["model"] for r in rows} == {"toy"}
    newest = next(r for r in rows if r["in_metrics"])
    assert newest["runs"] == [s2.run_id] and newest["n_units"] == 1  # metrics shows the newest spec
    assert w.query("SELECT DISTINCT spec_hash FROM metrics").to_pylist() == [{"spec_hash": newest["spec_hash"]}]
    # a no-op rerun of the first catalog still warns: metrics shows the other spec's numbers for toy
    s3 = run_catalog(first, wh, executor="local")
    assert s3.counts() == {"done": 0, "skipped": 1, "failed": 0} and len(s3.warnings) == 1
    assert spec_conflicts(Warehouse(wh), []) == []


@pytest.mark.slow
def test_the_cli_prints_a_changed_spec_warning_once(catalogs, tmp_path):
    """The runner emits each warning as an event and the CLI prints events: the summary's list is not printed again.
    Every line that mentions the conflict is counted, whatever its prefix."""
    first, second = catalogs
    wh = str(tmp_path / "wh")

    def run(catalog: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "evalfarm.cli", "run", "--catalog", str(catalog), "--warehouse", wh,
             "--executor", "local"],
            capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip

    assert run(first).returncode == 0
    proc = run(second)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    mentions = [line for line in out.splitlines() if "'toy'" in line or "other spec(s)" in line]
    assert len(mentions) == 1 and mentions[0].startswith("warning: model 'toy'"), out[-3000:]


def test_no_conflict_without_a_second_spec(catalogs, tmp_path):
    first, _ = catalogs
    run_catalog(first, tmp_path / "wh", executor="local")
    assert run_catalog(first, tmp_path / "wh", force=True, executor="local").warnings == []
    assert Warehouse(tmp_path / "wh").query("SELECT count(*) n FROM conflicts").to_pylist() == [{"n": 0}]


def test_an_older_warehouse_gets_the_new_runs_columns(catalogs, tmp_path):
    first, _ = catalogs
    from deltalake import write_deltalake

    wh = Warehouse(tmp_path / "wh").init()
    old = pa.schema([f for f in SCHEMAS["runs"] if f.name not in ("n_done", "reason", "snapshot")])
    shutil.rmtree(wh.root / "tables" / "runs", ignore_errors=True)  # as an earlier evalfarm created it, with a row
    write_deltalake(str(wh.root / "tables" / "runs"),
                    pa.Table.from_pylist([{"run_id": "old", "event": "start", "status": "running"}], old))  # fmt: skip
    run_catalog(first, wh.root, executor="local")  # its start adds the columns this evalfarm writes
    assert {"n_done", "reason", "snapshot"} <= set(Warehouse(wh.root).tables.schema("runs").names)
    runs = wh.query("SELECT run_id, status, n_done FROM runs ORDER BY run_id").to_pylist()
    assert runs[-1] == {"run_id": "old", "status": "running", "n_done": None} and runs[0]["n_done"] == 1


def test_a_write_error_names_the_path_and_keeps_the_first_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WarehouseWriteError) as err:  # its parent is a file: the folder cannot be made
        atomic_write_table(pa.table({"a": [1]}), blocker / "t" / "x.parquet")
    assert str(err.value).startswith(f"cannot write {blocker / 't'}: ")

    # the temp file's cleanup fails too (as on a read-only disk): the first error is the one reported
    def refuse(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(pq, "write_table", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left")))
    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(WarehouseWriteError) as err:
        atomic_write_table(pa.table({"a": [1]}), tmp_path / "y.parquet")
    assert str(err.value) == (
        f"cannot write {tmp_path / 'y.parquet'}: No space left on device; evalfarm needs a writable warehouse "
        "with free space"
    )
    assert isinstance(err.value, OSError) and err.value.errno == 28
    again = pickle.loads(pickle.dumps(err.value))  # crosses from a Ray worker intact
    assert str(again) == str(err.value) and again.path == err.value.path


def test_run_interrupted_says_what_is_in_the_warehouse():
    from evalfarm.outcomes import Status, UnitOutcome

    s = RunSummary("r1", "wh", n_units=5)
    s.outcomes = [UnitOutcome("m", "a", Status.DONE), UnitOutcome("m", "b", Status.SKIPPED)]
    msg = str(RunInterrupted(s, "the Ray head (GCS at x) has not answered for 6 s"))
    assert msg == (
        "run r1 interrupted: the Ray head (GCS at x) has not answered for 6 s. 2 of 5 units are in the warehouse, "
        "3 not computed"
    )


def test_a_dead_writers_temp_file_is_swept_when_the_run_ends(catalogs, tmp_path):
    """A worker killed mid-write leaves ``.<name>.<rand>.<pid>.<host>.tmp`` behind: the run that saw it die removes
    it when it ends (a live writer's temp file, as a concurrent run's, stays)."""
    from evalfarm.atomic import temp_name

    first, _ = catalogs
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tmp_path / "wh" / "embeddings" / "model=toy"
    left: dict[str, Path] = {}

    def on_event(e) -> None:
        if "dead" not in left:  # written mid-run, after the start's sweep
            folder.mkdir(parents=True, exist_ok=True)
            live = temp_name(folder / "live.parquet")  # this process: alive
            live.write_bytes(b"half")
            left["live"] = live
            left["dead"] = live.with_name(live.name.replace(f".{os.getpid()}.", f".{dead.pid}."))
            left["dead"].write_bytes(b"half")

    assert run_catalog(first, tmp_path / "wh", executor="local", on_event=on_event).ok
    assert not left["dead"].exists() and left["live"].exists()
