"""A ``benchmarks/`` script as a module the tests can call into: the scripts are run by hand, not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(script: str, module: str) -> ModuleType:
    """``benchmarks/<script>`` imported once per session as ``module`` (registered in ``sys.modules`` before it
    runs: its dataclasses look their module up, and Ray pickles its functions by that name)."""
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, BENCHMARKS / script)
    assert spec is not None and spec.loader is not None, script
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded
