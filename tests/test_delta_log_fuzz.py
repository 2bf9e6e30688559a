"""Issue 48: a fuzz of the Delta log against every command that reads or writes the warehouse.

A writer of the warehouse can put anything in a table's ``_delta_log/``: commits naming paths out of the table
(``..``, percent-encoded, URLs, absolute, the log itself, through a planted link), any size, other schemas and
protocols, deletion vectors, huge entries, truncated or garbled JSON, forged checkpoints and ``_last_checkpoint``
files. Whatever it writes, the owner's commands (queries over the views, ``verify``, ``status``, the start-of-run
scan and quarantine, a run's commit, ``compact``, ``checkpoint``, ``vacuum``) must:

- read, write, move or delete nothing outside the warehouse (a victim's folder beside it is compared byte for byte,
  and its secret appears in no result and no warehouse file);
- lose nothing inside it (every data file there before is there after, in place or in ``quarantine/``);
- fail, if they fail, with an error naming the table (:class:`~evalfarm.warehouse.DamagedTable` names the entry
  too), never another exception, never a hang.

The corpus (one case per kind of forgery, always run) and the generated cases (hypothesis, seeded by the conftest's
``ci`` profile; ``EVALFARM_LOG_FUZZ_EXAMPLES`` sets how many, 8 by default) run in ``make faults`` and the fast
tier; ``HYPOTHESIS_PROFILE=explore`` with a larger count explores further.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalfarm.status import NoRun, run_status
from evalfarm.warehouse import TableError, Warehouse, WarehouseWriteError, table_schemas, verify_warehouse
from evalfarm.warehouse.maintenance import compact, vacuum
from evalfarm.warehouse.tables import MAX_LOG_ENTRY_BYTES

pytestmark = pytest.mark.faults  # `make faults`

SECRET = "SECRET-48-victim-bytes"
TABLES = ("metrics", "units", "runs")
"""The tables a case forges entries in (the others are read and written beside them)."""
EXAMPLES = int(os.environ.get("EVALFARM_LOG_FUZZ_EXAMPLES", "8"))


def _metric(model: str, value: float) -> dict[str, Any]:
    return {"run_id": "r1", "model": model, "task": "t", "scorer": "evalrank", "subset": "all", "variant": "cos",
            "ties": "optimistic", "metric": "mrr", "value": value, "is_primary": True, "higher_is_better": True,
            "fingerprint": f"fp-{model}", "spec_hash": "h", "task_checksum": "c", "scorer_version": "1",
            "params": "{}", "created_at": datetime(2026, 11, 1, tzinfo=UTC)}  # fmt: skip


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse after a run (metrics of three units, their units rows, the run's events, a checkpoint of
    ``metrics`` and ``units`` and a commit past it), and beside it a victim's folder holding a secret."""
    base = tmp_path_factory.mktemp("log-fuzz")
    wh = Warehouse(base / "wh").init()
    wh.write_run_event("r1", "start", status="running")
    for i, model in enumerate(("m1", "m2", "m3")):
        wh.write("metrics", [_metric(model, 0.1 * (i + 1))], unit=(model, "t", f"fp-{model}"))
        wh.write_units("r1", [{"model": model, "task": "t", "seconds": 1.0}])
    wh.checkpoint(["metrics", "units"], every=1)
    wh.write("metrics", [_metric("m4", 0.4)], unit=("m4", "t", "fp-m4"))
    wh.write_run_event("r1", "end", status="ok")
    victim = base / "victim"
    (victim / "stash").mkdir(parents=True)
    for path in (victim / "secret.parquet", victim / "stash" / "secret.parquet"):
        pq.write_table(wh.typed("metrics", [_metric(SECRET, 0.99)]), path)
    (victim / "id_ed25519").write_text(f"{SECRET}\n")
    past = time.time() - 30 * 86400
    for p in [victim, *victim.rglob("*")]:
        os.utime(p, (past, past), follow_symlinks=False)
    return base


# -- what a forger writes -------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One forgery: ``steps`` applied in order to a copy of the template (each ``(what, argument)``)."""

    table: str
    steps: list[tuple[str, Any]] = field(default_factory=list)

    def __repr__(self) -> str:  # what a failing example prints
        return f"Case({self.table!r}, {self.steps!r})"


PATHS = [
    "../../../victim/secret.parquet",
    "../../../victim/stash/secret.parquet",
    "%2E%2E/%2E%2E/%2E%2E/victim/secret.parquet",
    "%2e%2e%2f%2e%2e%2f%2e%2e%2fvictim%2fsecret.parquet",
    "data/%2E%2E/%2E%2E/%2E%2E/%2E%2E/victim/secret.parquet",
    "file://{victim}/secret.parquet",
    "file:///{victim}/secret.parquet",
    "{victim}/secret.parquet",
    "s3://bucket/secret.parquet",
    "data/evil/secret.parquet",  # through the link a case may plant at data/evil
    "data/stash/secret.parquet",  # through data itself replaced by a link
    "_delta_log/00000000000000000000.json",
    "data/.hidden.parquet",
    "",
    "data//x.parquet",
    "data/./x.parquet",
    "data\\..\\..\\..\\victim\\secret.parquet",
    "data/x\x00.parquet",
    "data/%00.parquet",
    "data/%ff%fe.parquet",
    "data/" + "a" * 5000 + ".parquet",
    "data/ü/ok-but-missing.parquet",
    "../units/{units_file}",
    "{own_file}",  # a file of the table, added again
]


def _path(template: Path, table: str, raw: str) -> str:
    root = template / "wh"
    own = sorted((root / "tables" / table / "data").rglob("*.parquet"))[0]
    units = sorted((root / "tables" / "units" / "data").rglob("*.parquet"))[0]
    return raw.format(victim=str(template / "victim").lstrip("/") if raw.startswith("file:///") else
                      template / "victim", units_file=units.relative_to(root / "tables" / "units"),
                      own_file=own.relative_to(root / "tables" / table))  # fmt: skip


def _add(path: str, size: Any = 100, **extra: Any) -> dict[str, Any]:
    return {"add": {"path": path, "size": size, "partitionValues": {}, "modificationTime": 0, "dataChange": True,
                    **extra}}  # fmt: skip


SCHEMA_ACTIONS = [
    {"metaData": {"id": "forged", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                  "configuration": {}, "schemaString": json.dumps({"type": "struct", "fields": [
                      {"name": "secret", "type": "string", "nullable": True, "metadata": {}}]})}},
    {"metaData": {"id": "forged", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                  "configuration": {}, "schemaString": "{not json"}},
    {"metaData": {"id": "forged"}},
    {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                  "writerFeatures": ["deletionVectors"]}},
    {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
    {"protocol": {"minReaderVersion": 99, "minWriterVersion": 99}},
]  # fmt: skip


def apply(template: Path, root: Path, case: Case) -> None:
    """Write ``case``'s forgeries into the warehouse copy at ``root`` (``template``'s victim is beside it)."""
    log = root / "tables" / case.table / "_delta_log"
    victim = root.parent / "victim"
    for what, arg in case.steps:
        if not log.is_dir():  # `tables` replaced by a link: the rest has nowhere to go
            break
        newest = max(int(p.name[:20]) for p in log.glob("*.json"))
        nxt = log / f"{newest + 1:020d}.json"
        if what == "commit":
            nxt.write_text("".join((a if isinstance(a, str) else json.dumps(a)) + "\n" for a in arg))
        elif what == "mutate-newest":
            newest_file = log / f"{newest:020d}.json"
            newest_file.write_bytes(arg(newest_file.read_bytes()))
        elif what == "huge":
            with open(nxt, "wb") as f:  # sparse: its size is what counts, not its disk
                f.write(b'{"commitInfo":{"pad":"')
                f.truncate(MAX_LOG_ENTRY_BYTES + arg)
        elif what == "last-checkpoint":
            (log / "_last_checkpoint").write_bytes(arg)
        elif what == "checkpoint":
            _forged_checkpoint(log, newest, arg)
        elif what == "link":
            where = root / "tables" if arg == "tables" else root / "tables" / case.table / arg
            if where.exists() or where.is_symlink():
                where.rename(where.with_name(where.name + ".moved"))
            where.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(victim, where)
        elif what == "fifo":
            where = root / "tables" / case.table / arg
            where.parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(where)
        else:
            raise AssertionError(what)


def _forged_checkpoint(log: Path, version: int, paths: list[str] | None) -> None:
    """A checkpoint of ``version`` copied from the table's real one with its add paths replaced by ``paths`` (None:
    garbage bytes instead of Parquet), and ``_last_checkpoint`` pointing at it."""
    target = log / f"{version:020d}.checkpoint.parquet"
    real = sorted(log.glob("*.checkpoint.parquet"))
    if paths is None or not real:
        target.write_bytes(b"PAR1 not a checkpoint PAR1")
    else:
        t = pq.read_table(real[-1])
        add = t.column("add").combine_chunks()
        rows = [i for i in range(len(add)) if add[i].is_valid]
        names = add.type.names if hasattr(add.type, "names") else [f.name for f in add.type]
        fields = {n: add.field(n) for n in names}
        forged = [(paths[k % len(paths)] if i in rows else None) for k, i in enumerate(range(len(add)))]
        fields["path"] = pa.array([p if p is not None else "" for p in forged], pa.string())
        new_add = pa.StructArray.from_arrays(list(fields.values()), fields=list(add.type), mask=add.is_null())
        pq.write_table(t.set_column(t.schema.get_field_index("add"), "add", new_add), target)
    (log / "_last_checkpoint").write_text(json.dumps({"version": version, "size": 1}))


# -- the owner's commands -------------------------------------------------------------------------------------------
VIEWS = ("metrics", "metrics_history", "runs", "units", "failures", "models")
KNOWN = (TableError, WarehouseWriteError, NoRun)
"""What a command may fail with: each names the table (a DamagedTable its entry too) or the path."""


def _row() -> dict[str, Any]:
    return _metric("fresh", 0.5)


def _sql(wh: Warehouse) -> list[Any]:
    """Every core view read on one read-only connection (what `evalfarm sql` opens), each whole."""
    con = wh.connect()
    try:
        return [con.sql(f"SELECT * FROM {v}").to_arrow_table().to_pylist() for v in VIEWS]
    finally:
        con.close()


COMMANDS: dict[str, Callable[[Warehouse], Any]] = {
    "sql": _sql,
    "verify": lambda wh: verify_warehouse(wh),
    "status": lambda wh: run_status(wh),
    "info": lambda wh: [wh.tables.snapshot(t) for t in table_schemas() if wh.tables.exists(t)],
    "run-scan": lambda wh: wh.scan(run_id="fuzz"),
    "run-write": lambda wh: wh.write("metrics", [_row()], unit=("fresh", "t", "fp-fresh")),
    "compact": lambda wh: compact(wh),
    "checkpoint": lambda wh: wh.checkpoint(every=1),
    "vacuum": lambda wh: vacuum(wh, keep=timedelta(hours=1)),
    "sql-after": _sql,
}


def _outcome(result: Any) -> str:
    """What a command that returned said: vacuum's refusals, verify's findings on tables, else "ok"."""
    if isinstance(result, list) and result and hasattr(result[0], "refused"):
        refused = [v.refused for v in result if v.refused]
        return "refused: " + refused[0][:300] if refused else "ok"
    if hasattr(result, "findings"):
        tables = [f"{f.path}: {f.detail[:200]}" for f in result.findings if f.problem == "damaged"]
        return "damaged: " + tables[0] if tables else "ok"
    return "ok"


def _hashes(folder: Path) -> set[str]:
    """sha256 of every regular file under ``folder`` (no link followed)."""
    out = set()
    for dirpath, _, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out.add(hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _outside(base: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(base):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(base))
            if rel == "wh" or rel.startswith("wh/"):
                continue
            out[rel] = ("-> " + os.readlink(p)) if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


def _contains_secret(folder: Path) -> list[str]:
    hits = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes():
                hits.append(str(p))
    return hits


def check(template: Path, work: Path, case: Case) -> dict[str, str]:
    """Run every command on a copy of the template with ``case`` applied; assert the three properties. Returns
    command -> "ok" or the error's first line (what a failing example shows)."""
    shutil.copytree(template, work, symlinks=True)
    root = work / "wh"
    data_before = {h for t in table_schemas() for h in _hashes(root / "tables" / t / "data")}
    apply(template, root, case)
    outside_before = _outside(work)
    said: dict[str, str] = {}
    t0 = time.monotonic()
    for name, command in COMMANDS.items():
        wh = Warehouse(root)  # each command a new process's view, as the CLI has it
        try:
            result = command(wh)
            said[name] = _outcome(result)
            assert SECRET not in repr(result), (name, case)
        except KNOWN as exc:
            text = str(exc)
            said[name] = text.splitlines()[0][:300]
            assert len(text.splitlines()) <= 2, (name, text)  # one line (two for a long path's wrap at most)
            names_it = any(f"'{t}'" in text or f"tables/{t}" in text for t in table_schemas())
            assert names_it or str(root) in text, (name, text, case)
            if type(exc).__name__ == "DamagedTable":  # the forged table (any, when `tables` itself is a link)
                forged = exc.table == case.table or exc.entry == "tables"  # type: ignore[attr-defined]
                assert forged, (name, text, case)
        assert time.monotonic() - t0 < 240, (name, case)  # no hang (a FIFO waited on, a log read forever)
    assert _outside(work) == outside_before, (case, said)  # nothing outside read-and-moved, written or deleted
    assert _contains_secret(root) == [], (case, said)  # nothing outside read into the warehouse
    assert data_before <= _hashes(root), (case, said)  # nothing inside lost
    return said


# -- the corpus: one case per kind of forgery ----------------------------------------------------------------------
CORPUS: dict[str, Callable[[Path], Case]] = {
    "adds-out-of-the-table": lambda t: Case("metrics", [("commit", [_add(_path(t, "metrics", p), 500)
                                                                     for p in PATHS[:9]])]),
    "odd-paths": lambda t: Case("units", [("commit", [_add(_path(t, "units", p)) for p in PATHS[11:22]])]),
    "re-added-and-other-tables-files": lambda t: Case("metrics", [("commit", [_add(_path(t, "metrics", p))
                                                                              for p in PATHS[22:]])]),
    "removes-out-of-the-table": lambda t: Case("metrics", [("commit", [
        {"remove": {"path": _path(t, "metrics", p), "deletionTimestamp": 0, "dataChange": True, "size": 1}}
        for p in PATHS[:9]])]),
    "through-a-planted-link": lambda t: Case("metrics", [("link", "data/evil"),
                                                         ("commit", [_add("data/evil/secret.parquet", 700)])]),
    "data-replaced-by-a-link": lambda t: Case("metrics", [("link", "data"),
                                                          ("commit", [_add("data/stash/secret.parquet", 700)])]),
    "tables-replaced-by-a-link": lambda t: Case("metrics", [("link", "tables")]),
    "fifo-over-the-log": lambda t: Case("runs", [("fifo", "_delta_log/00000000000000000099.json")]),
    "sizes": lambda t: Case("units", [("commit", [_add(_path(t, "units", "{own_file}"), s)
                                                  for s in (-1, 0, 10**15, "big", None)])]),
    "schema-changed": lambda t: Case("metrics", [("commit", [SCHEMA_ACTIONS[0]])]),
    "schema-not-json": lambda t: Case("metrics", [("commit", [SCHEMA_ACTIONS[1]])]),
    "metadata-without-fields": lambda t: Case("units", [("commit", [SCHEMA_ACTIONS[2]])]),
    "protocol-deletion-vectors": lambda t: Case("metrics", [("commit", [SCHEMA_ACTIONS[3]])]),
    "protocol-99": lambda t: Case("runs", [("commit", [SCHEMA_ACTIONS[5]])]),
    "deletion-vector": lambda t: Case("metrics", [("commit", [_add(_path(t, "metrics", "{own_file}"), 100,
        deletionVector={"storageType": "p", "pathOrInlineDv": f"file://{t / 'victim' / 'id_ed25519'}",
                        "offset": 1, "sizeInBytes": 36, "cardinality": 1})])]),
    "huge-entry": lambda t: Case("runs", [("huge", 1)]),
    "truncated-json": lambda t: Case("metrics", [("mutate-newest", lambda b: b[: len(b) // 2])]),
    "garbage-lines": lambda t: Case("units", [("commit", ["{", "[]", "null", '{"add": 1}', '{"a": 1, "b": 2}'])]),
    "forged-checkpoint": lambda t: Case("metrics", [("checkpoint", [_path(t, "metrics", p) for p in PATHS[:9]])]),
    "garbage-checkpoint": lambda t: Case("units", [("checkpoint", None)]),
    "garbage-last-checkpoint": lambda t: Case("metrics", [("last-checkpoint", b'{"version": 9999999, "size": -1}')]),
    "huge-last-checkpoint": lambda t: Case("metrics", [("last-checkpoint", b" " * (2**20 + 1))]),
    "fifo-as-a-data-file": lambda t: Case("metrics", [("fifo", "data/fifo.parquet"),
                                                      ("commit", [_add("data/fifo.parquet", 10)])]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_log_corpus_against_every_command(template, tmp_path, name):
    said = check(template, tmp_path / "case", CORPUS[name](template))
    print(name, json.dumps(said, indent=1))


# -- generated cases ----------------------------------------------------------------------------------------------
@st.composite
def cases(draw: st.DrawFn, template: Path) -> Case:
    table = draw(st.sampled_from(TABLES))
    dots = st.from_regex(r"(\.\./|%2[eE]%2[eE]/|data/){1,6}[a-z]{1,8}", fullmatch=True)
    raw_path = st.one_of(st.sampled_from(PATHS).map(lambda p: _path(template, table, p)), st.text(max_size=40), dots)
    size = st.one_of(st.integers(-10, 10**13), st.none(), st.sampled_from(["12", "big", 1.5]))
    action = st.one_of(
        st.builds(lambda p, s: _add(p, s), raw_path, size),
        st.builds(lambda p: {"remove": {"path": p, "deletionTimestamp": 0, "dataChange": True}}, raw_path),
        st.sampled_from(SCHEMA_ACTIONS),
        st.builds(lambda t: {"commitInfo": {"timestamp": t}}, st.integers(-(2**40), 2**45)),
        st.text(max_size=30),
    )
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["commit", "commit", "commit", "mutate-newest", "checkpoint", "link", "huge"]))
        if kind == "commit":
            steps.append(("commit", draw(st.lists(action, min_size=1, max_size=5))))
        elif kind == "mutate-newest":
            cut = draw(st.integers(0, 400))
            steps.append(("mutate-newest", lambda b, cut=cut: b[:cut] + b"\xff{" if cut < len(b) else b + b"{"))
        elif kind == "checkpoint":
            steps.append(("checkpoint", draw(st.one_of(st.none(), st.lists(raw_path, min_size=1, max_size=3)))))
        elif kind == "link":
            steps.append(("link", draw(st.sampled_from(["data/evil", "data", "evil", "tables"]))))
        else:
            steps.append(("huge", draw(st.integers(1, 1000))))
    return Case(table, steps)


def test_generated_logs_against_every_command(template, tmp_path_factory):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
    @given(case=cases(template))
    def one(case: Case) -> None:
        check(template, tmp_path_factory.mktemp("gen") / "case", case)

    one()
