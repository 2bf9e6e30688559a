"""``benchmarks/faults.py`` (the fault-injection script behind `make faults`) as a module the tests share."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

if "evalfarm_faults" in sys.modules:
    faults = sys.modules["evalfarm_faults"]
else:
    _spec = importlib.util.spec_from_file_location("evalfarm_faults", REPO / "benchmarks" / "faults.py")
    faults = importlib.util.module_from_spec(_spec)
    sys.modules["evalfarm_faults"] = faults  # before exec: its dataclasses look their module up
    _spec.loader.exec_module(faults)
