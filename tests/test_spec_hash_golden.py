"""Every shipped catalog model keeps its spec hash (and its forward-pass group) across refactors of the spec.

A spec hash keys a model's text store and every unit's fingerprint: a change recomputes the whole zoo. The golden
file was written by the code before model kinds declared their own options (issue 42); regenerate it only for a
deliberate change of what a spec means: ``EVALFARM_REGEN_GOLDEN=1 pytest tests/test_spec_hash_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from evalfarm.catalog.registry import load_catalog
from evalfarm.plan import forward_key

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "fixtures" / "spec_hashes.json"


def _current() -> dict[str, dict[str, list[str | None]]]:
    """{catalog file: {model id: [spec hash, short hash of its forward key or None]}}."""
    out: dict[str, dict[str, list[str | None]]] = {}
    for path in sorted((REPO / "catalog").glob("*.yaml")):
        cat = load_catalog(path)
        rows: dict[str, list[str | None]] = {}
        for m in sorted(cat.models):
            key = forward_key(cat, m)
            rows[m] = [cat.spec_hash(m), hashlib.sha256(key.encode()).hexdigest()[:16] if key else None]
        out[path.name] = rows
    return out


def test_shipped_spec_hashes_and_forward_groups_are_unchanged():
    current = _current()
    if os.environ.get("EVALFARM_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(current) == sorted(golden)
    for name, rows in golden.items():
        changed = {m: (v, current[name].get(m)) for m, v in rows.items() if current[name].get(m) != v}
        assert not changed, f"{name}: spec hash / forward key changed for {sorted(changed)[:10]}"
        assert sorted(current[name]) == sorted(rows), f"{name}: the catalog's models changed"
