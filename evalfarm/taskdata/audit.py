"""Audits of generated diagnostic data: a seeded sample of a *built* file, read row by row by two independent
readers, and the error rates with their intervals that the docs quote (docs/audits/README.md).

An audit file (``docs/audits/heros-v3.tsv``) is tab-separated with a header row: ``subset``, ``id`` (the built
file's row id), ``original``, ``pair``, ``edit`` (what the recipe says it changed), then for each pass ``k`` (1, 2)
``verdict_k`` (``ok``, ``doubtful`` or ``wrong``; empty while the pass is not done) and ``reason_k`` (required with
every verdict: why, in the reader's words). Its sidecar ``<name>.json`` records the built file (recipe, version,
sha256), the seed and the sample size, so the draw can be repeated from the final file (:func:`draw`).

Rates: a pair is *clearly wrong* when the pass says ``wrong``; the rate is wrong / sampled with a 95 % Wilson score
interval (:func:`wilson`). Where both passes are done, a pair counts as wrong when *either* reader says so (the
conservative reading: the rate can only go up), and the agreement is Cohen's kappa on the three verdicts
(:func:`cohen_kappa`) with the number of rows the readers disagree on.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VERDICTS = ("ok", "doubtful", "wrong")
AUDIT_COLUMNS = ("subset", "id", "original", "pair", "edit", "verdict_1", "reason_1", "verdict_2", "reason_2")
Z95 = 1.959963984540054


class AuditError(ValueError):
    """A malformed audit file: the message names ``file:line``."""


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it
    over the normal interval for small counts)."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def cohen_kappa(a: Sequence[str], b: Sequence[str], labels: Sequence[str] = VERDICTS) -> float:
    """Cohen's kappa of two raters' labels on the same items: (observed − chance agreement) / (1 − chance)."""
    n = len(a)
    if n == 0 or n != len(b):
        return math.nan
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    chance = sum((a.count(lab) / n) * (b.count(lab) / n) for lab in labels)
    return math.nan if chance == 1 else (observed - chance) / (1 - chance)


def read_audit(path: Path) -> list[dict[str, str]]:
    """The rows of an audit file, checked: the columns, a known verdict with a reason in each filled pass."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if tuple(reader.fieldnames or ()) != AUDIT_COLUMNS:
            raise AuditError(f"{path}:1: expected the columns {' '.join(AUDIT_COLUMNS)}, got {reader.fieldnames}")
        rows = []
        for lineno, row in enumerate(reader, 2):
            for k in ("1", "2"):
                verdict, reason = row[f"verdict_{k}"] or "", (row[f"reason_{k}"] or "").strip()
                if verdict and verdict not in VERDICTS:
                    raise AuditError(f"{path}:{lineno}: verdict_{k} must be one of {', '.join(VERDICTS)}")
                if bool(verdict) != bool(reason):
                    raise AuditError(f"{path}:{lineno}: pass {k} needs both a verdict and its reason")
            rows.append(row)
    return rows


@dataclass(frozen=True)
class SubsetRate:
    """One subset's audit: sample size, wrong and doubtful counts, the interval, the passes' agreement."""

    subset: str
    n: int
    wrong: int
    doubtful: int
    low: float
    high: float
    passes: int
    kappa: float
    disagreements: int


def rates(rows: list[dict[str, str]], subsets: Sequence[str]) -> list[SubsetRate]:
    """Each subset's rate of clearly wrong pairs (module docstring); pass 1 alone until every row has pass 2."""
    out = []
    for subset in subsets:
        got = [r for r in rows if r["subset"] == subset]
        two = bool(got) and all(r["verdict_2"] for r in got)
        first = [r["verdict_1"] for r in got]
        second = [r["verdict_2"] for r in got] if two else []
        if two:
            wrong = sum("wrong" in (x, y) for x, y in zip(first, second, strict=True))
            doubtful = sum("wrong" not in (x, y) and "doubtful" in (x, y) for x, y in zip(first, second, strict=True))
        else:
            wrong, doubtful = first.count("wrong"), first.count("doubtful")
        low, high = wilson(wrong, len(got))
        kappa = cohen_kappa(first, second) if two else math.nan
        disagree = sum(x != y for x, y in zip(first, second, strict=True)) if two else 0
        out.append(SubsetRate(subset, len(got), wrong, doubtful, low, high, 2 if two else 1, kappa, disagree))
    return out


def markdown_table(
    rs: list[SubsetRate], sizes: dict[str, int], substitutions: dict[str, dict[str, int]] | None = None
) -> str:
    """The docs' table of subset sizes, substitution spread and audited rates (generated: the test compares the
    docs with it)."""
    subs = substitutions or {}
    lines = [
        "| subset | pairs | distinct substitutions (largest) | audited | clearly wrong | 95 % Wilson interval | "
        "also doubtful | passes |",
        "|---|---:|---|---:|---:|---|---:|---|",
    ]
    for r in rs:
        agree = f"2 (κ = {r.kappa:.2f}, {r.disagreements} disagreements)" if r.passes == 2 else "1 (pass 2 pending)"
        spread = f"{subs[r.subset]['distinct']} ({subs[r.subset]['largest']})" if r.subset in subs else "—"
        wrong = f"{r.wrong} ({100 * r.wrong / r.n:.1f} %)"
        lines.append(
            f"| `{r.subset}` | {sizes.get(r.subset, 0):,} | {spread} | {r.n} | {wrong} "
            f"| {100 * r.low:.1f}–{100 * r.high:.1f} % | {r.doubtful} | {agree} |"
        )
    return "\n".join(lines)


def draw(built_rows: list[list[str]], at: dict[str, int], subsets: Sequence[str], seed: int, size: int) -> list[Any]:
    """The seeded sample of a built file: per subset ``k`` (its index in ``subsets``), ``size`` of the rows whose
    cell is filled, drawn with ``numpy.random.default_rng([seed, k]).choice(..., replace=False)``, in row order."""
    out = []
    for k, subset in enumerate(subsets):
        have = [r for r in built_rows if r[at[subset]]]
        picked = np.random.default_rng([seed, k]).choice(len(have), size=min(size, len(have)), replace=False)
        out += [(subset, have[int(i)]) for i in sorted(picked)]
    return out


def read_sidecar(path: Path) -> dict[str, Any]:
    """The audit's sidecar JSON (built file, seed, sample size)."""
    return dict(json.loads(path.with_suffix(".json").read_text(encoding="utf-8")))


__all__ = [
    "AUDIT_COLUMNS",
    "VERDICTS",
    "AuditError",
    "cohen_kappa",
    "draw",
    "markdown_table",
    "rates",
    "read_audit",
    "wilson",
]
