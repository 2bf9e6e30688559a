"""Fault injection on a real local Ray: each fault of a cluster's life, what evalfarm does, rows lost or duplicated.

    python benchmarks/faults.py --json benchmarks/results/faults.json      # `make faults`: docs/operations.md's table
    python benchmarks/faults.py --small --only worker-killed,head-lost     # what CI runs (tests/test_faults.py)
    python benchmarks/faults.py --smoke    # one cheap scenario (read-only; respec without mount namespaces)

Every scenario runs ``evalfarm run`` as a user does (the CLI, in its own process session, on its own local Ray
unless the scenario shares a cluster), injects the fault from outside — ``kill -9`` of a worker or of the head's GCS,
a read-only bind mount or a full tmpfs (Linux mount namespaces, ``unshare -Urm``), a second run — and then compares
the warehouse with a reference run of the same catalog (the in-process executor, no fault): *lost* counts reference
metric rows missing from ``metrics``, *duplicated* counts rows present twice (in ``metrics`` or, per fingerprint, in
``metrics_history``) plus units computed twice across runs (two ``units`` score rows for one fingerprint), and
*differ* rows whose value is not the reference's.

The catalog: slices of the real EvalRank pools and cheap real models (toy GloVe and its post-processed variants,
bag of words over it, the static model), plus one pool of ~100k background sentences so that embedding a sentence
model takes seconds and a worker killed during it is always killed mid-unit.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # evalfarm and tests.support from this checkout
os.environ.setdefault("EVALFARM_DATA", str((REPO.parent / "shared" / "data").resolve()))
# its runs get a folder of task slices as their data folder; the toy vectors stay in the real one, named as a folder
# `path` model sources may read (issue 40.3: a catalog never names where its files may be)
os.environ.setdefault("EVALFARM_MODEL_PATHS", os.environ["EVALFARM_DATA"])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
BIN = Path(sys.executable).parent

# the Ray heads tests and benchmarks start, closed like evalfarm's
from tests.support.ray_heads import RAY_CLIENT_VARS, Head, cmdline, pick_ports, session_pids, start_head, stop_head  # noqa: E402


# -- the catalog --------------------------------------------------------------------------------------------------
def _head(src: Path, n: int, dst: Path) -> Path:
    dst.write_text("\n".join(src.read_text().splitlines()[:n]) + "\n")
    return dst


def _pool(pid: str, level: str, files: dict[str, Path]) -> str:
    """A task entry over slices beside the catalog, named relative to that folder: the runs' data folder
    (``EVALFARM_DATA``, :func:`_env`), since catalogs name task files inside the data folder only."""
    fl = ", ".join(f"{r}: {p.name}" for r, p in files.items())
    sh = ", ".join(f"{r}: {hashlib.sha256(p.read_bytes()).hexdigest()}" for r, p in files.items())
    return (
        f"  - {{id: {pid}, level: {level}, kind: evalrank, format: evalrank-{level}, version: '1', licence: faults,"
        f" source: faults, files: {{{fl}}}, sha256: {{{sh}}}}}\n"
    )


def make_catalog(d: Path, *, small: bool) -> Path:
    """``cat.yaml`` in ``d`` (and the pool slices beside it); ``cat-respec.yaml``: the same ids, one spec changed."""
    d.mkdir(parents=True, exist_ok=True)
    data = Path(os.environ["EVALFARM_DATA"]) / "evalrank"
    w, s = data / "word_evalrank", data / "sent_evalrank"
    word = {
        "pairs": _head(w / "pos_pair_5514.txt", 300 if small else 1000, d / "wp.txt"),
        "background_basic": _head(w / "basic_vocab.txt", 600 if small else 2000, d / "wb.txt"),
        "background_wiki": _head(w / "wiki_vocab.txt", 600 if small else 2000, d / "ww.txt"),
    }
    bg = (s / "background_sent.txt").read_text().splitlines()
    copies = ("indeed",) if small else ("indeed", "again", "today", "still", "once", "here")  # 50k / 175k texts
    (d / "bigbg.txt").write_text("\n".join(bg + [f"{x} {c}" for c in copies for x in bg]) + "\n")
    big = {"pairs": _head(s / "pos_pair.txt", 40, d / "bp.txt"), "background": d / "bigbg.txt"}
    (d / "tasks.yaml").write_text(
        "tasks:\n" + _pool("word-slice", "word", word) + _pool("sent-bigbg", "sentence", big)
    )
    glove = data / "reference" / "toy_emb.txt"
    g = f"{{type: path, ref: {glove}}}"
    words = ["toy", "toy-abtt1"] if small else ["toy", "toy-abtt1", "toy-pcr1", "toy-skip"]
    specs = {
        "toy": f"{{id: toy, level: word, kind: word-vectors, format: glove-text, source: {g}}}",
        "toy-abtt1": "{id: toy-abtt1, level: word, base: toy, postprocess: {method: abtt, d: 1}}",
        "toy-pcr1": "{id: toy-pcr1, level: word, base: toy, postprocess: {method: pcr, d: 1}}",
        "toy-skip": f"{{id: toy-skip, level: word, kind: word-vectors, format: glove-text, oov: skip, source: {g}}}",
        "static": "{id: static, level: sentence, kind: static, source: {type: package, ref: tokenlearn-static-model,"
        " path: static_model/model}}",
        "bow-toy": "{id: bow-toy, level: sentence, kind: bow, base: toy, lowercase: true}",
    }
    models = [*words, "static"] if small else [*words, "static", "bow-toy"]
    body = "include: [tasks.yaml]\ntasks: [word-slice, sent-bigbg]\nmodels:\n"
    (d / "cat.yaml").write_text(body + "".join(f"  - {specs[m]}\n" for m in models))
    respec = dict(specs, toy=specs["toy"].replace("format: glove-text,", "format: glove-text, oov: skip,"))
    (d / "cat-respec.yaml").write_text(body + "".join(f"  - {respec[m]}\n" for m in models))
    global _TASK_DATA
    _TASK_DATA = d
    return d / "cat.yaml"


_TASK_DATA: Path | None = None
"""The folder of the last catalog :func:`make_catalog` wrote: the data folder of the runs :func:`_env` starts."""


@contextlib.contextmanager
def _task_data() -> Iterator[None]:
    """``EVALFARM_DATA`` set to :data:`_TASK_DATA` for an in-process run (restored after)."""
    was = os.environ.get("EVALFARM_DATA")
    if _TASK_DATA is not None:
        os.environ["EVALFARM_DATA"] = str(_TASK_DATA)
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("EVALFARM_DATA", None)
        else:
            os.environ["EVALFARM_DATA"] = was


# -- processes ----------------------------------------------------------------------------------------------------
def _env(data: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of an ``evalfarm run``: no Ray address or token of the shell's (a run without ``--address``
    makes its own, ``connect``); a run on the shared head gets that head's settings in ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_CLIENT_VARS}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    out = {**env, "PYTHONPATH": str(REPO), "COLUMNS": "200", **extra}
    data = data or _TASK_DATA  # the task slices' folder wins over an EVALFARM_DATA in extra (a head's client env)
    if data is not None:
        out["EVALFARM_DATA"] = str(data)
    return out


def session(sid: int) -> dict[int, str]:
    """Live processes of a session (zombies excluded): pid -> command line."""
    return {pid: cmdline(pid) for pid in session_pids(sid)}


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a session this script started (its own processes only)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)
    for pid in session(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Cli:
    """``evalfarm run`` in its own process session; output collected in a file."""

    args: list[str]
    log: Path
    prefix: list[str] = field(default_factory=list)  # e.g. unshare … sh -c
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    started: float = 0.0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "evalfarm.cli", "run", *self.args]

    def start(self) -> Cli:
        cmd = [*self.prefix, *self.command()]  # a prefix ends with a shell whose script runs "$@"
        fh = open(self.log, "w")  # closed when the process ends (wait)
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=_env(**self.env), stdout=fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        self.started = time.monotonic()
        return self

    def wait(self, timeout: float = 600) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            kill_session(self.proc.pid)

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def run_cli(args: list[str], log: Path, timeout: float = 600, **kw: Any) -> tuple[int, str]:
    cli = Cli(args, log, **kw).start()
    rc = cli.wait(timeout)
    return rc, cli.output


def _wait_for(cond: Callable[[], Any], what: str, timeout: float, cli: Cli | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if cli is not None and cli.proc is not None and cli.proc.poll() is not None:
            raise RuntimeError(f"evalfarm run ended before {what}:\n{cli.output[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(0.05)


@contextlib.contextmanager
def ray_head(tmp: Path, *, num_cpus: int = 2, autoscaling: dict[str, Any] | None = None) -> Iterator[Head]:
    """A Ray head shared by several runs: ``cluster/local/start-head.sh`` on free ports (tests/support/ray_heads.py:
    token authentication with a fresh 0600 token, every server on loopback, checked once it is up). Clients need its
    settings: ``Cli(..., env=head.client_env())``. Stopped by its session, never ``ray stop`` (which kills every Ray
    of the machine). ``autoscaling``: a fake multi-node autoscaler config (``fake_multinode``)."""
    ports = pick_ports()
    args: list[str] = []
    env: dict[str, str] = {}
    if autoscaling is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        config = tmp / "autoscaler.json"
        autoscaling = json.loads(json.dumps(autoscaling))
        autoscaling["provider"]["gcs_address"] = f"127.0.0.1:{ports['gcs']}"
        config.write_text(json.dumps(autoscaling))
        args.append(f"--autoscaling-config={config}")
        env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
    head = start_head(tmp, num_cpus=num_cpus, ports=ports, extra_args=args, env=env, object_store_memory=200_000_000)
    try:
        yield head
    finally:
        stop_head(head)


def restarting_lines(out: str) -> list[str]:
    """The progress lines (``units …``) of a run's log that show a worker restarting (``· 1 restarting ·``): the
    CLI prints the line when a worker is lost, so a worker being restarted after a kill shows there."""
    return [ln for ln in out.splitlines() if ln.startswith("units ") and re.search(r"· \d+ restarting( ·|$)", ln)]


# -- the warehouse against the reference ---------------------------------------------------------------------------
KEY = ("model", "task", "scorer", "subset", "variant", "ties", "metric")
COMPUTED = "stage = 'score' AND status = 'done'"  # a unit computed by a run (one `units` row per unit and run)


def _rows(wh: Path | str, sql: str) -> list[dict[str, Any]]:
    from evalfarm.warehouse import Warehouse

    return Warehouse(wh).query(sql).to_pylist()


def reference(catalog: Path, wh: Path, catalog_respec: Path | None = None) -> dict[tuple, float]:
    from evalfarm.runner import run_catalog

    if not (wh / "tables" / "runs").exists() or not _rows(wh, "SELECT 1 FROM metrics LIMIT 1"):
        with _task_data():
            run_catalog(catalog, wh, executor="local")
    return {tuple(r[k] for k in KEY): r["value"] for r in _rows(wh, f"SELECT {', '.join(KEY)}, value FROM metrics")}


def compare(wh: Path, ref: dict[tuple, float], *, models: set[str] | None = None) -> dict[str, int]:
    """Rows lost / duplicated / different against the reference (only ``models`` when given)."""
    keys = ", ".join(KEY)
    got: dict[tuple, list[float]] = {}
    for r in _rows(wh, f"SELECT {keys}, value FROM metrics"):
        got.setdefault(tuple(r[k] for k in KEY), []).append(r["value"])
    want = {k: v for k, v in ref.items() if models is None or k[0] in models}
    lost = sum(1 for k in want if k not in got)
    dup = sum(len(v) - 1 for v in got.values())
    dup += sum(
        r["n"] - 1 for r in _rows(wh, f"SELECT {keys}, fingerprint, count(*) n FROM metrics_history GROUP BY ALL")
    )
    twice = _rows(
        wh,
        f"SELECT fingerprint, count(*) n FROM units WHERE {COMPUTED} GROUP BY ALL HAVING n > 1",
    )
    differ = sum(1 for k, v in want.items() if k in got and any(abs(x - v) > 1e-9 for x in got[k]))
    return {"lost": lost, "duplicated": dup + sum(r["n"] - 1 for r in twice), "differ": differ}


# -- scenarios ----------------------------------------------------------------------------------------------------
@dataclass
class Result:
    fault: str
    injected: str
    happens: str = ""
    lost: int | None = None
    duplicated: int | None = None
    differ: int | None = None
    seconds: float = 0.0
    ok: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class Faults:
    def __init__(self, work: Path, *, small: bool) -> None:
        self.work = work
        self.small = small
        self.catalog = make_catalog(work / "catalog", small=small)
        self.respec_catalog = work / "catalog" / "cat-respec.yaml"
        self.ref = reference(self.catalog, work / "reference")
        self.n_units = len({k[:2] for k in self.ref})

    def _wh(self, name: str) -> Path:
        d = self.work / name
        shutil.rmtree(d, ignore_errors=True)
        return d

    def _args(self, wh: Path, *extra: str, catalog: Path | None = None) -> list[str]:
        return ["--catalog", str(catalog or self.catalog), "--warehouse", str(wh), *extra]

    def _embedding_worker(self, sid: int, busy_for: float = 1.0) -> Callable[[], int | None]:
        """A probe: the pid of a worker that has been embedding (``ray::EvalWorker.embed``) for ``busy_for`` s."""
        seen: dict[int, float] = {}

        def probe() -> int | None:
            now = time.monotonic()
            busy = {pid for pid, cmd in session(sid).items() if cmd.startswith("ray::EvalWorker.embed")}
            for pid in list(seen):
                if pid not in busy:
                    del seen[pid]
            for pid in busy:
                seen.setdefault(pid, now)
                if now - seen[pid] >= busy_for:
                    return pid
            return None

        return probe

    def _settle(self, wh: Path, result: Result, **kw: Any) -> None:
        c = compare(wh, self.ref, **kw)
        result.lost, result.duplicated, result.differ = c["lost"], c["duplicated"], c["differ"]

    # 1. a worker killed mid-unit, one of two
    def worker_killed(self) -> Result:
        r = Result("worker killed", "`kill -9` of one of 2 worker actors while it embeds a model")
        wh = self._wh("wh-worker")
        cli = Cli(self._args(wh, "--workers", "2"), self.work / "worker.log").start()
        pid = _wait_for(self._embedding_worker(cli.proc.pid), "worker embedding for 1 s", 300, cli)
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        rc = cli.wait()
        out = cli.output
        lost_name = next((ln.split()[2].rstrip(":") for ln in out.splitlines() if ln.startswith("worker lost")), "?")
        rows = _rows(wh, "SELECT worker, stage, status, attempts, started_at FROM units ORDER BY started_at")
        retried = [x for x in rows if x["attempts"] == 2 and x["status"] == "done"]
        after = [x for x in rows if x["worker"] == lost_name and x["started_at"].timestamp() > t_kill]
        restarting = restarting_lines(out)
        r.details = {"exit": rc, "worker": lost_name, "retried": len(retried), "killed worker reused": len(after),
                     "progress shows it restarting": restarting[:1]}  # fmt: skip
        self._settle(wh, r)
        r.ok = (
            rc == 0 and len(retried) == 1 and len(after) > 0 and bool(restarting)
            and r.lost == 0 and r.duplicated == 0 and r.differ == 0
        )  # fmt: skip
        r.happens = (
            f"the unit is retried on the other worker; the killed worker is shown restarting, is restarted and "
            f"takes {len(after)} more task(s); exit {rc}"
        )
        return r

    # 1b. the only worker killed (--workers 1)
    def only_worker_killed(self) -> Result:
        r = Result("only worker killed", "`--workers 1`, `kill -9` of that worker while it embeds")
        wh = self._wh("wh-only")
        cli = Cli(self._args(wh, "--workers", "1"), self.work / "only.log").start()
        pid = _wait_for(self._embedding_worker(cli.proc.pid), "worker embedding for 1 s", 300, cli)
        t_kill, t_wall = time.monotonic(), time.time()
        os.kill(pid, signal.SIGKILL)
        rc = cli.wait()
        out = cli.output
        restarting = restarting_lines(out)
        back = out.split(restarting[0], 1)[1] if restarting else ""  # what the log says after that line
        rows = _rows(wh, "SELECT worker, started_at FROM units WHERE stage != 'plan'")
        after = [x for x in rows if x["started_at"].timestamp() > t_wall]
        r.details = {"exit": rc, "seconds after the kill": round(time.monotonic() - t_kill, 1),
                     "progress shows it restarting": restarting[:1],
                     "progress shows it alive again": any(" 1 worker alive" in ln for ln in back.splitlines()),
                     "tasks after the kill": len(after)}  # fmt: skip
        self._settle(wh, r)
        r.ok = (
            rc == 0 and bool(restarting) and r.details["progress shows it alive again"] and len(after) > 0
            and r.lost == 0 and r.duplicated == 0 and r.differ == 0 and "no worker left" not in out
        )  # fmt: skip
        r.happens = (
            f"the worker is shown restarting and waited for while Ray restarts it, then reused ({len(after)} "
            f"task(s) after the kill); the run finishes (exit {rc})"
        )
        return r

    # 2. the head's GCS killed mid-run; then the same command again
    def head_lost(self) -> Result:
        r = Result("head (GCS) lost", "`kill -9` of the run's GCS after its first unit (workers paused), then rerun")
        wh = self._wh("wh-head")
        cli = Cli(self._args(wh, "--workers", "1"), self.work / "head.log").start()
        sid = cli.proc.pid
        # the first unit finished (its rows are staged; the run commits them in batches, and at its end)
        _wait_for(lambda: any(ln.startswith("done ") for ln in cli.output.splitlines()), "first unit", 300, cli)
        # The workers are paused first (SIGSTOP): with a dead GCS they could otherwise still finish this small
        # catalog's last units within the seconds the driver takes to notice, on a fast machine.
        for pid, cmd in session(sid).items():
            if cmd.startswith("ray::EvalWorker"):
                os.kill(pid, signal.SIGSTOP)
        gcs = [pid for pid, cmd in session(sid).items() if "gcs_server" in cmd]
        t_kill = time.monotonic()
        os.kill(gcs[0], signal.SIGKILL)
        rc = cli.wait(timeout=120)
        detect = time.monotonic() - t_kill
        time.sleep(1.0)
        left = session(sid)
        out = cli.output
        run = _rows(wh, "SELECT status, n_units, n_done, n_skipped, n_failed, reason FROM runs")
        resume = [ln for ln in out.splitlines() if ln.startswith("error:") and "run the same command again" in ln]
        # the command the message gives, run as given: the same command as the first run
        again = shlex.split(resume[0].rsplit("): ", 1)[1]) if resume else []
        same = again[:2] == ["evalfarm", "run"] and again[2:] == self._args(wh, "--workers", "1")
        rc2, out2 = run_cli(again[2:] if same else self._args(wh, "--workers", "1"), self.work / "head-resume.log")
        second = _rows(wh, "SELECT status, n_done, n_skipped FROM runs ORDER BY started_at")[-1]
        r.details = {"exit": rc, "seconds to exit after the kill": round(detect, 1), "processes left": len(left),
                     "run recorded": run, "message": resume, "message gives the same command": same,
                     "resume exit": rc2, "resumed run": second}  # fmt: skip
        self._settle(wh, r)
        done_first = run[0]["n_done"] or 0 if run else 0
        r.ok = (
            rc == 3 and resume and same and not left and run and run[0]["status"] == "interrupted"
            and rc2 == 0 and second["n_skipped"] == done_first and second["n_done"] == self.n_units - done_first
            and r.lost == 0 and r.duplicated == 0 and r.differ == 0
        )  # fmt: skip
        r.happens = (
            f"the driver exits {detect:.0f} s after the kill (code {rc}), run recorded `interrupted` "
            f"({done_first}/{self.n_units} units done), one line gives the command to rerun; {len(left)} Ray "
            f"processes left; that command computes only the {self.n_units - done_first} missing units"
        )
        return r

    # 3. read-only and full warehouses
    def read_only(self) -> Result:
        r = Result("read-only warehouse", "the complete warehouse bind-mounted read-only (`mount -o ro`)")
        if not can_mount():
            r.happens = "skipped: mount namespaces (unshare -Urm) are not available here"
            return r
        wh = self._wh("wh-ro")
        shutil.copytree(self.work / "reference", wh)  # complete: every unit computed
        before = sorted((p.relative_to(wh), p.stat().st_mtime_ns) for p in wh.rglob("*"))
        ro = ["unshare", "-Urm", "sh", "-c", f'mount --bind -o ro {wh} {wh} && exec "$@"', "sh"]
        rc1, out1 = run_cli(self._args(wh, "--workers", "1"), self.work / "ro-noop.log", prefix=ro)
        rc2, out2 = run_cli(self._args(wh, "--workers", "1", "--force"), self.work / "ro-force.log", prefix=ro)
        after = sorted((p.relative_to(wh), p.stat().st_mtime_ns) for p in wh.rglob("*"))
        err = [ln for ln in out2.splitlines() if ln.startswith("error:")]
        r.details = {"no-op exit": rc1, "pending exit": rc2, "error": err, "no-op output": out1.strip()[-300:],
                     "warehouse unchanged": before == after}  # fmt: skip
        self._settle(wh, r)
        r.ok = (
            rc1 == 0 and rc2 == 2 and len(err) == 1 and str(wh) in err[0] and "Traceback" not in out2
            and before == after and r.lost == 0 and r.duplicated == 0
        )  # fmt: skip
        r.happens = (
            f"a no-op rerun succeeds without writing (exit {rc1}); a run with work to do stops at once with one "
            f"line naming the path (exit {rc2})"
        )
        return r

    def full(self) -> Result:
        r = Result("full warehouse", "the warehouse on a tmpfs too small for the embeddings, then space freed")
        if not can_mount():
            r.happens = "skipped: mount namespaces (unshare -Urm) are not available here"
            return r
        wh = self._wh("wh-full")
        wh.mkdir(parents=True)
        kept = self._wh("wh-full-kept")
        kept.mkdir(parents=True)
        script = f'mount -t tmpfs -o size=3m tmpfs {wh} && "$@"; rc=$?; cp -a {wh}/. {kept}/; exit $rc'
        rc1, out1 = run_cli(self._args(wh, "--workers", "1"), self.work / "full.log",
                            prefix=["unshare", "-Urm", "sh", "-c", script, "sh"])  # fmt: skip
        shutil.rmtree(wh)
        shutil.copytree(kept, wh)
        again = ["--executor", "local"] if self.small else ["--workers", "1"]  # the rerun is not the fault here
        rc2, out2 = run_cli(self._args(wh, *again), self.work / "full-rerun.log")
        errors = [ln for ln in out1.splitlines() if "No space left" in ln]
        r.details = {"exit": rc1, "lines naming the path": len(errors), "traceback": "Traceback" in out1,
                     "rerun exit": rc2}  # fmt: skip
        self._settle(wh, r)
        r.ok = rc1 != 0 and errors and "Traceback" not in out1 and rc2 == 0 and r.lost == 0 and r.duplicated == 0
        r.happens = (
            f"what does not fit fails with `cannot write <path>: No space left on device` (exit {rc1}, no "
            f"traceback); after freeing space the rerun computes the rest (exit {rc2})"
        )
        return r

    # 4. two runs of one catalog into one warehouse on one cluster
    def concurrent(self, head: Head) -> Result:
        r = Result("two concurrent runs", "the same command twice at once, one warehouse, one Ray cluster")
        wh = self._wh("wh-two")
        args, env = self._args(wh, "--address", head.gcs, "--workers", "1"), head.client_env()
        a = Cli(args, self.work / "two-a.log", env=env).start()
        b = Cli(args, self.work / "two-b.log", env=env).start()
        rca, rcb = a.wait(), b.wait()
        per_run = _rows(
            wh, "SELECT run_id, count(*) n FROM units WHERE stage = 'score' AND status = 'done' GROUP BY ALL"
        )
        waited = _rows(wh, "SELECT count(*) n FROM units WHERE stage = 'plan' AND worker LIKE 'run %'")[0]["n"]
        r.details = {"exits": [rca, rcb], "units computed per run": sorted(x["n"] for x in per_run),
                     "units taken from the other run": waited}  # fmt: skip
        self._settle(wh, r)
        r.ok = rca == 0 and rcb == 0 and r.lost == 0 and r.duplicated == 0 and r.differ == 0
        r.happens = (
            f"the runs split the units ({' + '.join(str(x['n']) for x in per_run)} of {self.n_units}), "
            f"{waited} unit(s) waited for instead of recomputed; no unit computed twice"
        )
        return r

    # 5. same model id, different spec
    def respec(self, head: Head) -> Result:
        r = Result("same id, new spec", "a model id re-run with a changed spec (`oov: skip`) into the same warehouse")
        wh = self._wh("wh-respec")
        on_head, env = ["--address", head.gcs, "--workers", "1", "--models", "toy"], head.client_env()
        rc1, _ = run_cli(self._args(wh, *on_head), self.work / "rs1.log", env=env)
        rc2, out2 = run_cli(self._args(wh, *on_head, catalog=self.respec_catalog), self.work / "rs2.log", env=env)
        # every line that mentions the conflict, however it is prefixed: the warning must be printed once
        warned = [ln for ln in out2.splitlines() if "'toy'" in ln and "other spec(s)" in ln]
        conflicts = _rows(wh, "SELECT model, spec_hash, in_metrics FROM conflicts")
        newest = _rows(wh, "SELECT DISTINCT spec_hash FROM metrics WHERE model = 'toy'")
        dup = _rows(wh, f"SELECT {', '.join(KEY)}, count(*) n FROM metrics GROUP BY ALL HAVING n > 1")
        r.details = {"exits": [rc1, rc2], "warning": warned, "conflicts rows": len(conflicts)}
        c = compare(wh, self.ref, models={"toy"})  # the same rows as the reference's toy, other values (oov: skip)
        r.lost, r.duplicated, r.differ = c["lost"], c["duplicated"], c["differ"]
        r.ok = (
            rc1 == 0 and rc2 == 0 and len(warned) == 1 and warned[0].startswith("warning:") and len(conflicts) == 2
            and sum(c["in_metrics"] for c in conflicts) == 1 and len(newest) == 1 and not dup
            and r.lost == 0 and r.duplicated == 0
        )  # fmt: skip
        r.happens = "`metrics` shows the newest spec's numbers; the run warns; `conflicts` lists both specs"
        return r


_MOUNT: bool | None = None


def can_mount() -> bool:
    """Can this user make a private mount namespace (``unshare -Urm``) with a read-only bind mount in it?"""
    global _MOUNT
    if _MOUNT is None:
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount --bind -o ro {d} {d} && ! touch {d}/x"],
                               capture_output=True)  # fmt: skip
            _MOUNT = p.returncode == 0
    return _MOUNT


SCENARIOS = ["worker-killed", "only-worker-killed", "head-lost", "read-only", "full", "concurrent", "respec"]


def run(work: Path, *, small: bool, only: list[str] | None = None) -> list[Result]:
    faults = Faults(work, small=small)
    todo = only or SCENARIOS
    results = []
    local = [s for s in todo if s not in ("concurrent", "respec")]
    for name in local:
        t0 = time.monotonic()
        res = getattr(faults, name.replace("-", "_"))()
        res.seconds = round(time.monotonic() - t0, 1)
        results.append(res)
    shared = [s for s in todo if s in ("concurrent", "respec")]
    if shared:
        with ray_head(work / "head") as head:
            for name in shared:
                t0 = time.monotonic()
                res = getattr(faults, name)(head)
                res.seconds = round(time.monotonic() - t0, 1)
                results.append(res)
    return results


def markdown(results: list[Result]) -> str:
    lines = [
        "| fault | injected | what happens | rows lost | rows duplicated |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lost = "–" if r.lost is None else str(r.lost)
        dup = "–" if r.duplicated is None else str(r.duplicated)
        lines.append(f"| {r.fault} | {r.injected} | {r.happens} | {lost} | {dup} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="the reduced catalog CI runs")
    ap.add_argument("--only", help=f"comma-separated scenarios of {', '.join(SCENARIOS)}")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--work", type=Path, help="keep the warehouses and logs here (default: a temporary folder)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run for CI (tests/test_benchmarks_smoke.py): checks that the script works, measures nothing",
    )
    args = ap.parse_args()
    if args.smoke:  # the reduced catalog and the cheapest scenario this machine can run (read-only starts no Ray)
        args.small = True
        args.only = args.only or ("read-only" if can_mount() else "respec")
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    unknown = set(only or []) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {sorted(unknown)}: use {', '.join(SCENARIOS)}")
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evalfarm-faults-")))
        results = run(work, small=args.small, only=only)
    print(markdown(results))
    print(f"\n{sum(r.ok for r in results)}/{len(results)} as expected in {time.monotonic() - t0:.0f} s (2 cores, "
          "other jobs on the machine)")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
