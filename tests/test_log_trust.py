"""Issue 48: a warehouse writer's Delta log, links planted in a table, and maintenance, tried as an attacker would.

A writer of the warehouse (anyone who can write its folder) appends commits of their own, plants links and FIFOs.
None of it may make the owner's next command read, write, move or delete anything outside the warehouse, or lose
anything inside it: a log entry naming a path that is not a data file inside its table makes the table damaged
(named, left out of the views, one line in ``run``, ``status`` and ``verify``); the start-of-run quarantine moves only
regular files inside the warehouse; vacuum never follows a link. Each attack is checked by what it did outside the
warehouse (a victim folder beside it, compared byte for byte before and after), not only by the error it meets.

The attacks use only what main's API already had (``Warehouse.scan``, ``vacuum``, ``verify_warehouse``,
``Warehouse.query``), so each runs unchanged against the code before the fix, where it succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalfarm.warehouse import Warehouse, verify_warehouse
from tests.support.trees import toy_catalog, tree

pytestmark = pytest.mark.faults  # `make faults`

REPO = Path(__file__).resolve().parents[1]


def _metric(run: str, model: str, value: float = 0.5) -> dict[str, Any]:
    return {"run_id": run, "model": model, "task": "t", "scorer": "evalrank", "subset": "all", "variant": "cos",
            "ties": "optimistic", "metric": "mrr", "value": value, "is_primary": True, "higher_is_better": True,
            "fingerprint": f"fp-{model}", "spec_hash": "h", "task_checksum": "c", "scorer_version": "1",
            "params": "{}"}  # fmt: skip


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A warehouse with rows in ``metrics`` and ``runs``, and beside it a victim's folder of files the attacker
    names (a Parquet file, a key, a shell rc file), all old enough for any retention."""
    wh = Warehouse(tmp_path / "wh").init()
    wh.write_run_event("r1", "start", status="running")
    wh.write("metrics", [_metric("r1", "m1")], unit=("m1", "t", "fp-m1"))
    wh.write("metrics", [_metric("r1", "m2")], unit=("m2", "t", "fp-m2"))
    victim = tmp_path / "victim"
    (victim / "stash").mkdir(parents=True)
    pq.write_table(pa.table({"model": ["stolen"]}), victim / "secret.parquet")
    pq.write_table(pa.table({"model": ["stolen"]}), victim / "stash" / "secret.parquet")
    (victim / "id_ed25519").write_text("PRIVATE KEY\n")
    (victim / ".bashrc").write_text("export PATH=/usr/bin\n")
    past = time.time() - 30 * 86400
    for p in victim.rglob("*"):
        os.utime(p, (past, past), follow_symlinks=False)
    return {"root": tmp_path / "wh", "victim": victim, "tmp": tmp_path}


def outside(place: dict[str, Path]) -> dict[str, bytes | str]:
    """Everything beside the warehouse (the victim's folder, and anything created next to the warehouse)."""
    return tree(place["tmp"], skip=lambda rel: rel == "wh" or rel.startswith("wh/"))


def forge(root: Path, table: str, *actions: dict[str, Any]) -> Path:
    """Append a commit of the attacker's own to ``table``'s log: its next version, as a writer of the folder can."""
    log = root / "tables" / table / "_delta_log"
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    path = log / f"{version:020d}.json"
    lines = [json.dumps(a) for a in actions] + [json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000)}})]
    path.write_text("\n".join(lines) + "\n")
    return path


def add(path: str, size: int = 100) -> dict[str, Any]:
    return {"add": {"path": path, "size": size, "partitionValues": {}, "modificationTime": 0, "dataChange": True}}


FORGED_PATHS = {
    "dotdot": "../../../victim/secret.parquet",
    "percent-encoded": "%2E%2E/%2E%2E/%2E%2E/victim/secret.parquet",
    "file-url": "file://{victim}/secret.parquet",
    "absolute": "{victim}/secret.parquet",
    "out-of-the-warehouse": "../../../../../../../../../../{victim_rel}/secret.parquet",
    "into-the-log": "_delta_log/00000000000000000000.json",
}


def _forged(place: dict[str, Path], shape: str) -> str:
    victim = place["victim"]
    return FORGED_PATHS[shape].format(victim=victim, victim_rel=str(victim).lstrip("/"))


# -- HIGH 1: the start-of-run scan moves no file it was not given by the warehouse ---------------------------------
@pytest.mark.parametrize("shape", list(FORGED_PATHS))
def test_a_forged_add_path_never_moves_a_file_into_or_out_of_the_warehouse(place, shape):
    """A commit whose ``add.path`` leads outside the table (``..``, its percent-encoded form, a ``file://`` URL, an
    absolute path, enough ``..`` to land the quarantine outside the warehouse, the table's own log): the scan that
    `evalfarm run` starts with moves nothing (it moved the victim on main), and names the entry."""
    wh = Warehouse(place["root"])
    size = (place["victim"] / "secret.parquet").stat().st_size
    forge(place["root"], "metrics", add(_forged(place, shape), size))
    before, log_before = outside(place), tree(place["root"] / "tables" / "metrics" / "_delta_log")
    try:
        wh.scan(run_id="r2")
        error = ""
    except Exception as exc:  # what the fix raises; on main the scan "succeeds"
        error = str(exc)
    assert outside(place) == before  # nothing outside moved, created or deleted
    assert tree(place["root"] / "tables" / "metrics" / "_delta_log") == log_before  # the log itself kept
    assert not (place["root"] / "quarantine").exists()
    assert "table 'metrics' is damaged" in error and "add '" in error, error


@pytest.mark.parametrize("link_at", ["tables/metrics/data", "tables/metrics", "tables"])
def test_a_folder_replaced_by_a_link_lets_the_quarantine_move_nothing(place, link_at):
    """No ``..`` at all: the log names ``data/stash/secret.parquet`` and the attacker replaces
    ``tables/metrics/data`` (or the table's folder, or ``tables``) by a link to the victim's folder. The move must
    prove its source inside: nothing of the victim moves (on main the scan moved it into ``quarantine/``)."""
    root, victim = place["root"], place["victim"]
    size = (victim / "stash" / "secret.parquet").stat().st_size
    forge(root, "metrics", add("data/stash/secret.parquet", size))
    real = root / link_at
    moved_away = real.with_name(real.name + ".real")
    os.rename(real, moved_away)
    if link_at == "tables/metrics/data":
        os.symlink(victim, real)
    else:  # the link leads to a copy of the table (its log) beside the victim's files
        hub = place["tmp"] / "hub"
        hub.mkdir()
        if link_at == "tables":
            os.rename(moved_away, hub / "tables")
            os.symlink(hub / "tables", real)
            (hub / "tables" / "metrics" / "data").rename(hub / "data.real")
            os.symlink(victim, hub / "tables" / "metrics" / "data")
        else:
            os.rename(moved_away, hub / "metrics")
            os.symlink(hub / "metrics", real)
            (hub / "metrics" / "data").rename(hub / "data.real")
            os.symlink(victim, hub / "metrics" / "data")
    before = tree(victim)
    wh = Warehouse(root)
    try:
        moved = wh.scan(run_id="r2")
        error = ""
    except Exception as exc:
        moved, error = [], str(exc)
    assert tree(victim) == before, moved  # the victim's files stayed where they were
    assert not any(p.is_file() for p in (root / "quarantine").rglob("*")) if (root / "quarantine").exists() else True
    assert "is damaged" in error and "link" in error, error


def test_the_quarantine_moves_only_a_regular_file_inside_and_never_through_a_link(place):
    """The move itself proves its source inside, whoever calls it (a text-store shard's quarantine too): a path
    through a linked folder, a link over a data file, a path outside the warehouse: nothing moves."""
    root, victim = place["root"], place["victim"]
    wh = Warehouse(root)
    (root / "embeddings" / "model=x").mkdir(parents=True)
    os.symlink(victim, root / "embeddings" / "model=x" / "store=k")
    os.symlink(victim / "secret.parquet", root / "embeddings" / "model=x" / "link.parquet")
    before = tree(victim)
    for path in (f"{root}/embeddings/model=x/store=k/secret.parquet", f"{root}/embeddings/model=x/link.parquet",
                 f"{root}/../victim/secret.parquet", str(victim / "secret.parquet")):  # fmt: skip
        q = wh.quarantine(path, "unreadable", "r2")
        assert q.moved_to is None, q
    assert tree(victim) == before
    assert os.path.islink(root / "embeddings" / "model=x" / "link.parquet")  # a link is not moved either
    assert not any(p.is_file() for p in (root / "quarantine").rglob("*"))


def test_a_truncated_data_file_is_still_moved_to_quarantine(place):
    """What the quarantine is for still works: a regular file inside the warehouse, cut short, moves."""
    root = place["root"]
    wh = Warehouse(root)
    f = wh.tables.snapshot("metrics").files[0]
    Path(f.path).write_bytes(Path(f.path).read_bytes()[:20])
    (q,) = wh.scan(run_id="r2")
    assert q.moved_to is not None and Path(q.moved_to).is_file() and not Path(f.path).exists()
    assert Path(q.moved_to + ".why.txt").read_text().startswith(wh.relative(f.path))
    assert Path(q.moved_to).resolve().is_relative_to(root.resolve() / "quarantine")


# -- the damaged table: left out, named, one line -------------------------------------------------------------------
DAMAGE = {
    "truncated-json": lambda root: (root / "tables/metrics/_delta_log/00000000000000000099.json").write_text("{"),
    "forged-dotdot": lambda root: forge(root, "metrics", add("../../../victim/secret.parquet")),
    "fifo-in-log": lambda root: os.mkfifo(root / "tables/metrics/_delta_log/00000000000000000099.json"),
    "deletion-vectors": lambda root: forge(
        root,
        "metrics",
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        },
    ),  # fmt: skip
}


def _truncate_newest(root: Path) -> None:
    log = root / "tables" / "metrics" / "_delta_log"
    newest = max(log.glob("*.json"))
    newest.write_bytes(newest.read_bytes()[:40])


DAMAGE["truncated-json"] = _truncate_newest


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_table_is_left_out_of_the_views_and_the_others_stay_queryable(place, damage):
    """One table's damaged log: every other view still answers (on main every query failed), the damaged one is
    empty, and the warehouse says which table and entry (``Warehouse.damaged``, a warning)."""
    DAMAGE[damage](place["root"])
    wh = Warehouse(place["root"])
    t0 = time.monotonic()
    assert wh.query("SELECT run_id FROM runs", timeout_s=30).column(0).to_pylist() == ["r1"]
    assert wh.query("SELECT count(*) AS n FROM metrics_history", timeout_s=30).column(0).to_pylist() == [0]
    assert time.monotonic() - t0 < 30
    damaged = getattr(wh, "damaged", ())
    assert [d.table for d in damaged] == ["metrics"], damaged
    assert "table 'metrics' is damaged" in str(damaged[0])


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_verify_names_a_damaged_table_in_one_finding(place, damage):
    DAMAGE[damage](place["root"])
    result = verify_warehouse(Warehouse(place["root"]))
    (finding,) = [f for f in result.findings if f.path == "tables/metrics"]
    assert finding.problem == "damaged" and not result.ok and "its log cannot be trusted" in finding.detail


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALFARM_CONFIG": "", "COLUMNS": "200", "PYTHONPATH": str(REPO)}  # this checkout's code
    return subprocess.run([sys.executable, "-m", "evalfarm", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_status_and_verify_say_a_damaged_table_in_one_line_not_a_traceback(place):
    _truncate_newest(place["root"])
    for args in (["status"], ["verify"], ["sql", "SELECT count(*) AS n FROM metrics"]):
        proc = _cli(*args, "--warehouse", str(place["root"]), cwd=place["tmp"])
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text, text
        if args[0] == "status":  # reads the runs, units and failures tables only (a query binds what it names)
            continue
        assert "table 'metrics' is damaged" in text or "tables/metrics" in text and "cannot be trusted" in text, text
    assert _cli("verify", "--warehouse", str(place["root"]), cwd=place["tmp"]).returncode == 1


@pytest.mark.slow
def test_run_meets_a_forged_log_entry_with_one_line_and_moves_nothing(place, toy_glove):
    """`evalfarm run` into a warehouse whose metrics log names ``../../../victim/secret.parquet``: exit 2 with one
    line naming the table and the entry, no traceback; the victim's file stays (on main the run moved it)."""
    catalog = toy_catalog(place["tmp"] / "toy.yaml", toy_glove)
    size = (place["victim"] / "secret.parquet").stat().st_size
    forge(place["root"], "metrics", add("../../../victim/secret.parquet", size))
    before = outside(place)
    proc = _cli("run", "--catalog", str(catalog), "--executor", "local", "--warehouse", str(place["root"]),
                cwd=place["tmp"])  # fmt: skip
    text = proc.stdout + proc.stderr
    assert outside(place) == before, text
    assert proc.returncode == 2 and "Traceback" not in text, text
    assert "table 'metrics' is damaged: add '../../../victim/secret.parquet'" in text, text


# -- HIGH 2: vacuum never follows a link, never deletes outside its table ------------------------------------------
LINKS = {
    "in-data": "tables/metrics/data/evil",
    "at-the-table-root": "tables/metrics/evil",
    "over-a-run-folder": "tables/metrics/data/r9",
}


@pytest.mark.parametrize("where", list(LINKS))
def test_vacuum_deletes_nothing_through_a_planted_link(place, where):
    """A writer plants ``tables/metrics/data/evil -> <victim folder>`` (or at the table's root): the owner's
    ``vacuum --keep 1h`` deleted every file under the link older than the retention on main (delta-rs' full vacuum
    lists the table following links). Now the table is refused, named, and nothing outside is touched."""
    from evalfarm.warehouse.maintenance import vacuum

    root, victim = place["root"], place["victim"]
    os.symlink(victim, root / LINKS[where])
    before = tree(victim)
    try:
        done = vacuum(Warehouse(root), keep=timedelta(hours=1))
        refused = [getattr(v, "refused", None) for v in done if v.table == "metrics"]
    except Exception as exc:  # what it says is checked below
        refused = [str(exc)]
    assert tree(victim) == before  # not a byte of the victim's folder deleted
    assert os.path.islink(root / LINKS[where])  # nor the link itself (it is the table's owner's to look at)
    assert refused and refused[0] and "link" in refused[0] and LINKS[where].split("/")[-1] in refused[0], refused


@pytest.mark.parametrize("kind", ["fifo", "link-to-a-file"])
def test_vacuum_refuses_a_table_holding_a_fifo_or_a_link_to_a_file(place, kind):
    from evalfarm.warehouse.maintenance import vacuum

    root, victim = place["root"], place["victim"]
    planted = root / "tables" / "metrics" / "data" / "old.parquet"
    if kind == "fifo":
        os.mkfifo(planted)
    else:
        os.symlink(victim / "secret.parquet", planted)
    before = tree(victim)
    (m,) = [v for v in vacuum(Warehouse(root), keep=timedelta(hours=1)) if v.table == "metrics"]
    assert tree(victim) == before and (planted.is_symlink() or planted.exists())
    assert m.refused and "old.parquet" in m.refused and not m.files


def test_vacuum_deletes_nothing_a_forged_remove_names(place):
    """A forged ``remove`` of a path outside the table, old enough to expire: vacuum computes its deletions from
    the snapshots and a no-follow walk of the table, so the remove's path is never a deletion (and makes the table
    damaged: named, refused)."""
    from evalfarm.warehouse.maintenance import vacuum

    root, victim = place["root"], place["victim"]
    forge(root, "metrics", {"remove": {"path": "../../../victim/id_ed25519", "deletionTimestamp": 0,
                                       "dataChange": True, "size": 12}})  # fmt: skip
    before = tree(victim)
    done = vacuum(Warehouse(root), keep=timedelta(hours=1), now=time.time() + 7200)
    assert tree(victim) == before
    (m,) = [v for v in done if v.table == "metrics"]
    assert m.refused and "remove '../../../victim/id_ed25519'" in m.refused


# -- a log entry's size is bounded before it is parsed -------------------------------------------------------------
READER = """
import json, resource, sys
from evalfarm.warehouse import Warehouse
wh = Warehouse(sys.argv[1])
# units and runs both: a query reads the logs of the tables it names only (issue 51), and runs holds the entry
rows = wh.query("SELECT (SELECT count(*) FROM units) AS n, (SELECT count(*) FROM runs) AS r").column(0).to_pylist()
print(json.dumps({"rows": rows, "damaged": [str(d) for d in getattr(wh, "damaged", ())],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _reader_peak(root: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", READER, str(root)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_huge_log_entry_is_refused_before_a_reader_parses_it(place):
    """A writer appends an 80 MB commit to ``runs``: a reader of the warehouse paid about three times that on main
    (a 300 MB entry: 1.1 GB) before any query ran. Now its size is checked first (``MAX_LOG_ENTRY_BYTES``): the
    table is damaged, named, the others read, and the reader's peak is what it is without the entry."""
    root = place["root"]
    Warehouse(root).write("units", [{"run_id": "a", "model": "m"}])
    clean = _reader_peak(root)
    log = root / "tables" / "runs" / "_delta_log"
    version = max(int(p.name[:20]) for p in log.glob("*.json")) + 1
    with open(log / f"{version:020d}.json", "w") as f:
        f.write('{"commitInfo":{"timestamp":' + str(int(time.time() * 1000)) + ',"pad":"')
        for _ in range(80):
            f.write("x" * (1 << 20))
        f.write('"}}\n')
    planted = _reader_peak(root)
    print(f"reader peak: {clean['peak_mb']:.0f} MB clean, {planted['peak_mb']:.0f} MB with an 80 MB entry")
    assert planted["rows"] == [1]
    assert planted["peak_mb"] - clean["peak_mb"] < 40, (clean, planted)
    (damaged,) = planted["damaged"]
    assert "past the" in damaged and f"{version:020d}.json" in damaged


def test_vacuum_removes_no_expired_pin_through_a_linked_readers_folder(place):
    """``_readers`` (where readers pin snapshots) replaced by a link to a folder holding an expired-looking pin:
    vacuum removes expired pins on the way, and on main removed the victim's file through the link."""
    from evalfarm.warehouse.maintenance import vacuum

    root, victim = place["root"], place["victim"]
    (victim / "settings.json").write_text(json.dumps({"versions": {}, "expires": 0}))
    if (root / "_readers").exists():
        shutil.rmtree(root / "_readers")
    os.symlink(victim, root / "_readers")
    before = tree(victim)
    vacuum(Warehouse(root), keep=timedelta(hours=1))
    assert tree(victim) == before
