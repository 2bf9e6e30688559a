"""``benchmarks/faults.py`` (the fault-injection script behind `make faults`) as a module the tests share."""

from __future__ import annotations

from tests.support.benchmark_scripts import BENCHMARKS, load_benchmark

REPO = BENCHMARKS.parent
faults = load_benchmark("faults.py", "evalfarm_faults")
