"""How long `evalfarm run` takes to say what it does and to print its first ETA (issue 52), as a user runs it.

    python benchmarks/bench_planning.py --catalog zoo-starter --catalog zoo-local --repeats 3 --json out.json
    python benchmarks/bench_planning.py --smoke   # a toy catalog: does it still run?

Each case starts ``evalfarm run --catalog C --warehouse <empty folder>`` in a process group of its own and reads its
stderr line by line: the seconds to its first line (the run's id and how to follow it: before it plans), to its
first ETA line, and the CPU seconds the driver had used by then (``/proc``: on a shared machine the wall time is
mostly waiting for a core); then the group is killed (the first ETA
comes before any worker starts: nothing is computed). Two caches: ``warm`` (the text counts of an earlier run in the
cache, what every run after the first meets) and ``cold`` (an empty ``EVALFARM_CACHE``: the counts computed, no
generated task built to count it). The floor, measured in the same run: ``python -m evalfarm --version`` (the
interpreter and the CLI's imports, wall and CPU), and the machine's load (``os.getloadavg``) beside each figure:
the machine is shared, so compare a case with its floor, not with another day's figure.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _env(cache: Path | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALFARM_CONFIG": ""}
    if cache is not None:
        env["EVALFARM_CACHE"] = str(cache)
    return env


def floor() -> tuple[float, float]:
    """(wall, CPU) seconds of ``python -m evalfarm --version``: the interpreter and the CLI's imports."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalfarm", "--version"], check=True, capture_output=True, env=_env(None))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def cpu_seconds(pid: int) -> float:
    """The CPU seconds (user + system) process ``pid`` has used so far (/proc/PID/stat): what a run's planning
    costs whatever the machine's load, where its wall time is mostly waiting for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_eta(catalog: str, warehouse: Path, cache: Path | None, extra: list[str], timeout: float) -> dict[str, Any]:
    """One run until its first ETA line: (seconds to the first line, seconds to the first ETA, the ETA line)."""
    cmd = [sys.executable, "-m", "evalfarm", "run", "--catalog", catalog, "--warehouse", str(warehouse), *extra]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=_env(cache),
                            start_new_session=True)  # fmt: skip
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    first_line = eta_s = None
    eta_line, cpu = "", 0.0
    lines: list[str] = []
    try:
        while eta_s is None and time.perf_counter() - t0 < timeout:
            if not sel.select(timeout=1.0):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip())
            now = time.perf_counter() - t0
            first_line = now if first_line is None else first_line
            if line.startswith("first ETA"):
                eta_s, eta_line, cpu = now, line.strip(), cpu_seconds(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if eta_s is None:
        raise SystemExit(f"{' '.join(cmd)}: no first ETA within {timeout:.0f} s:\n" + "\n".join(lines[-20:]))
    return {"first_line_s": round(first_line or 0.0, 2), "first_eta_s": round(eta_s, 2),
            "first_eta_cpu_s": round(cpu, 2), "load": round(load, 2), "line": eta_line}  # fmt: skip


def measure(catalog: str, repeats: int, extra: list[str], tmp: Path, timeout: float) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    floors: list[tuple[float, float]] = []
    for i in range(repeats):
        floors.append(floor())
        cold = tmp / f"cache-{catalog.replace('/', '_')}-{i}"
        rows["cold"].append(first_eta(catalog, tmp / f"wh-cold-{i}", cold, extra, timeout))
        rows["warm"].append(first_eta(catalog, tmp / f"wh-warm-{i}", None, extra, timeout))  # the user's cache
    out: dict[str, Any] = {"catalog": catalog, "floor_s": round(min(f[0] for f in floors), 2),
                           "floor_cpu_s": round(min(f[1] for f in floors), 2), "runs": rows}  # fmt: skip
    for name, rs in rows.items():
        out[name] = {
            "first_line_s": round(min(r["first_line_s"] for r in rs), 2),
            "first_eta_s": round(min(r["first_eta_s"] for r in rs), 2),
            "first_eta_median_s": round(statistics.median(r["first_eta_s"] for r in rs), 2),
            "first_eta_cpu_s": round(min(r["first_eta_cpu_s"] for r in rs), 2),
            "load": [r["load"] for r in rs],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", action="append", default=[], help="a catalog (repeatable; default zoo-starter)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take to its first ETA")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true", help="a toy catalog, one repeat: checks that the script runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        extra: list[str] = []
        catalogs = args.catalog or ["zoo-starter"]
        if args.smoke:
            toy = Path(os.environ.get("EVALFARM_DATA", REPO.parent / "shared" / "data")) / "evalrank/reference"
            (tmp / "toy.yaml").write_text(
                "include: [tasks]\ntasks: [wordsim-rg-65, wordsim-mc-30]\nmodels:\n  - {id: toy, level: word, "
                f"kind: word-vectors, format: glove-text, source: {{type: path, ref: {toy / 'toy_emb.txt'}}}}}\n"
            )
            catalogs, args.repeats, extra = [str(tmp / "toy.yaml")], 1, ["--executor", "local"]
        out = {
            "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in os.getloadavg()]},
            "cases": [measure(c, args.repeats, extra, tmp, args.timeout) for c in catalogs],
        }
        out["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
