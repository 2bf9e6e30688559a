"""What the CLI prints: the two consoles, rows as a table / CSV / JSON, and a table layout that never folds a number.

Results go to stdout (``out``), everything else (progress, warnings, errors) to stderr (``console``), so a pipe
gets only the rows.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import shutil
import sys
import textwrap
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from evalfarm.comparison_tables import ComparisonTable
    from evalfarm.correlations import CorrelationTable

console = Console(stderr=True, soft_wrap=not sys.stderr.isatty())  # logs and pipes: never break a line


def _stdout_width() -> int:
    """The terminal's width; piped output: $COLUMNS if set, else 240 (files and pipes do not fold lines)."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    try:
        return max(20, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 240


out = Console(width=_stdout_width())


class Output:
    """How much the commands say on stderr: ``quiet`` leaves out the per-unit lines, progress and heartbeats
    (warnings, errors and a run's summary stay)."""

    quiet = False


class _StderrHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (not the stream at creation)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure_output(*, quiet: bool = False, verbose: int = 0) -> None:
    """``--quiet`` / ``--verbose``: the live output's level and the standard ``logging`` of the ``evalfarm``
    loggers, to stderr: ERROR with --quiet, INFO with -v, DEBUG with -vv; without either, logging is left as
    Python sets it (warnings to stderr)."""
    Output.quiet = quiet
    if not quiet and not verbose:
        return
    logger = logging.getLogger("evalfarm")
    logger.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose >= 2 else logging.INFO)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def say(text: str, style: str | None = None) -> None:
    """One message on stderr, as written: no markup, no highlighting, never folded."""
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def print_rows(columns: list[str], rows: list[dict[str, Any]], fmt: Format, title: str | None = None) -> None:
    """``rows`` on stdout: a table (:func:`print_table`), CSV with a header, or a JSON array of objects."""
    if fmt is Format.json:
        sys.stdout.write(json.dumps(rows, default=str, indent=2) + "\n")
    elif fmt is Format.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        sys.stdout.write(buf.getvalue())
    else:
        print_table(columns, rows, title=title, width=out.width)


MIN_TEXT_WIDTH = 8
"""Narrowest a text column is cut to (with an ellipsis) before the table turns vertical."""


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _text_limits(natural: list[int], texts: list[int], room: int) -> dict[int, int]:
    """Water-filling: narrow text columns keep their width, the wide ones share what is left equally."""
    limits: dict[int, int] = {}
    left, open_cols = room, sorted(texts, key=lambda i: natural[i])
    while open_cols:
        share = left // len(open_cols)
        i = open_cols[0]
        if natural[i] <= share:
            limits[i] = natural[i]
            left -= natural[i]
            open_cols.pop(0)
        else:
            for j in open_cols:
                limits[j] = max(1, share)
            break
    return limits


def print_table(columns: list[str], rows: list[dict[str, Any]], *, title: str | None, width: int) -> None:
    """A table that never folds a number: numbers keep their whole width; long text is cut with an ellipsis to fit
    ``width``; when even that does not fit (many columns in a narrow terminal), one ``column  value`` block per
    row (psql's ``\\x``), where nothing needs cutting."""
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    numeric = [
        any(_is_number(r.get(c)) for r in rows) and all(r.get(c) is None or _is_number(r.get(c)) for r in rows)
        for c in columns
    ]
    natural = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    frame = 2 * (len(columns) - 1)  # the table below: two spaces between columns, no outer border
    fixed = sum(w for w, num in zip(natural, numeric, strict=True) if num)
    texts = [i for i, num in enumerate(numeric) if not num]
    limits: dict[int, int] = {}
    if fixed + sum(natural[i] for i in texts) + frame > width:
        room = width - frame - fixed
        if room < sum(min(natural[i], MIN_TEXT_WIDTH) for i in texts):
            _print_vertical(columns, cells, title, width)
            return
        limits = _text_limits(natural, texts, room)
    if title:  # its own line: a table's title would wrap to the table's width (a narrow table folds it)
        out.print(title, markup=False, highlight=False, style="italic")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i, c in enumerate(columns):
        if numeric[i]:
            t.add_column(c, justify="right", no_wrap=True, min_width=natural[i])
        else:
            t.add_column(c, no_wrap=True, overflow="ellipsis", max_width=limits.get(i))
    for row in cells:
        t.add_row(*row)
    out.print(t)


def _print_vertical(columns: list[str], cells: list[list[str]], title: str | None, width: int) -> None:
    """One ``column | value`` block per row; a value longer than the line goes on under its first line (cut at
    spaces where it has them), so no line is wider than ``width``."""
    label = max(len(c) for c in columns)
    room = max(10, width - label - 3)
    lines = textwrap.wrap(title, width) if title else []
    for n, row in enumerate(cells, 1):
        lines.append(f"-[ row {n} ]" + "-" * max(0, min(width, 60) - len(f"-[ row {n} ]")))
        for c, v in zip(columns, row, strict=True):
            parts = [
                piece
                for line in (v.splitlines() or [""])
                for piece in (textwrap.wrap(line, room, break_on_hyphens=False) or [""])
            ]
            lines.append(f"{c.ljust(label)} | {parts[0]}")
            lines += [f"{'':{label}} | {p}" for p in parts[1:]]
    if lines:
        out.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e5 else f"{v:.4g}"
    return str(v)


def print_correlations(table: CorrelationTable, fmt: Format, *, intervals: bool) -> None:
    """The correlation table in the paper's shape (best cells bold, ``n`` per row), or one row per cell (CSV /
    JSON); then its notes, which a reader must see (on stderr beside CSV / JSON)."""
    from evalfarm.correlations import caption, format_cell

    if fmt is not Format.table:
        first = table.records[0] if table.records else {}
        columns = ["row", "column", "best", *[c for c in first if c not in ("row", "column", "best")]]
        print_rows(columns, table.records + [_link_record(r, table.level, columns) for r in table.evalrank_links], fmt)
        for s in table.model_stats:  # beside CSV / JSON on stderr, as the notes
            say("word model " + ", ".join(f"{k}={_stat(v)}" for k, v in s.items() if k != "model") + f": {s['model']}")
        for note in table.notes:
            say(f"note: {note}")
        return
    t = Table(show_lines=False)
    t.add_column("intrinsic evaluator")
    for c in table.columns:
        t.add_column(c, justify="right")
    t.add_column("n", justify="right")
    for row in table.rows:
        cells = [table.cells.get((row, c)) for c in table.columns]
        texts = [format_cell(cell, intervals=intervals) for cell in cells]
        styled = [f"[bold]{x}[/]" if c is not None and c.best else x for x, c in zip(texts, cells, strict=True)]
        t.add_row(row, *styled, table.row_n(row))
    if table.rows:
        out.print(caption(table), markup=False, highlight=False, soft_wrap=True)
        out.print(t)
    if table.model_stats:
        print_word_model_stats(table.model_stats)
    if table.evalrank_links:
        out.print(
            f"Diagnostics against EvalRank ({table.level} level): Spearman's rho across models, bootstrap 95 % "
            "interval; values as measured (a descriptive number has no direction)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        out.print(_evalrank_links_table(table.evalrank_links))
    for note in table.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def print_comparisons(table: ComparisonTable, fmt: Format) -> None:
    """Each other row against the compared row, task by task (difference, interval, p, Holm p, the normal-theory
    cross-check), then the power lines and notes; CSV / JSON: one row per comparison (the view's columns)."""
    from evalfarm.comparison_tables import format_comparison, power_text
    from evalfarm.correlations import column_order

    ordered = sorted(
        table.cells.items(),
        key=lambda kv: (column_order(kv[0][1]), -(kv[1]["difference"] if kv[1]["difference"] is not None else 9)),
    )
    if fmt is not Format.table:
        rows = [
            {"row": r, "column": c, **{k: v for k, v in cell.items() if k != "created_at"}} for (r, c), cell in ordered
        ]
        if rows:
            print_rows(list(rows[0]), rows, fmt)
        for line in table.power:
            say(f"power: {power_text(line)}")
        for note in table.notes:
            say(f"note: {note}")
        return
    t = Table(
        show_lines=False,
        title=f"{table.compare} against each other evaluator ({table.level} level"
        + (", without post-processed models" if table.exclude_postprocessed else "")
        + f", EvalRank ties {table.ties}); * = Holm-significant",
    )
    for name, justify in (("task", "left"), ("evaluator", "left"), ("rho", "right"), ("rho(compared) - rho", "left"),
                          ("Steiger p", "right"), ("n", "right")):  # fmt: skip
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for (row, column), cell in ordered:
        rho = "" if cell["rho_b"] is None else f"{cell['rho_b']:.2f}"
        steiger = "" if cell["steiger_p"] is None else f"{cell['steiger_p']:.3g}"
        t.add_row(column, row, rho, format_comparison(cell), steiger, str(cell["n_models"]))
    if table.cells:
        out.print(t)
    if table.power:
        out.print(
            "Models needed to tell the compared row from each task's best similarity row at 80 % power (simulated "
            "from the bootstrap over this zoo's models):",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        for line in table.power:
            out.print(f"  {power_text(line)}", markup=False, highlight=False, soft_wrap=True)
    for note in table.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def print_word_model_stats(stats: list[dict[str, Any]]) -> None:
    """The word models' OOV and tie rates (EvalRank word tasks, cos) and word-similarity coverage, one row each."""
    columns = list(dict.fromkeys(k for s in stats for k in s))
    t = Table(show_lines=False, title="word models: OOV rate, OOV pair rate, tie rate, pairs (EvalRank, cos)")
    for c in columns:
        t.add_column(c, justify="left" if c == "model" else "right")
    for s in stats:
        t.add_row(*(_stat(s.get(c)) for c in columns))
    out.print(t)


def _stat(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3f}"
    return str(int(v)) if isinstance(v, float) else str(v)


def _link_record(r: dict, level: str, columns: list[str]) -> dict:
    """A diagnostic-vs-EvalRank result as a row of the machine-readable cells: EvalRank stands in the downstream
    columns, ``ci_status`` says the interval was computed now."""
    subset = "" if r["diagnostic_subset"] == "all" else f" {r['diagnostic_subset']}"
    mapped = {
        "row": f"{r['diagnostic_task']} {r['diagnostic_metric']}{subset} ({r['diagnostic_variant']})",
        "column": f"{r['evalrank_task']} ({r['evalrank_variant']})",
        "best": False,
        "level": level,
        "intrinsic_task": r["diagnostic_task"],
        "intrinsic_scorer": r["diagnostic_scorer"],
        "intrinsic_metric": r["diagnostic_metric"],
        "intrinsic_subset": r["diagnostic_subset"],
        "variant": r["diagnostic_variant"],
        "ties": r["evalrank_ties"],
        "downstream_task": r["evalrank_task"],
        "downstream_subset": "all",
        "downstream_variant": r["evalrank_variant"],
        "spearman": r["spearman"],
        "n_models": r["n_models"],
        "ci_low": r["ci_low"],
        "ci_high": r["ci_high"],
        "ci_status": "computed now",
    }
    return {c: mapped.get(c) for c in columns} if columns != ["row", "column", "best"] else mapped


def _evalrank_links_table(links: list[dict]) -> Table:
    t = Table(show_lines=False)
    for name in ("diagnostic", "EvalRank", "rho", "95 % interval", "n"):
        t.add_column(name, justify="left" if name in ("diagnostic", "EvalRank") else "right")
    for r in links:
        subset = "" if r["diagnostic_subset"] == "all" else f" {r['diagnostic_subset']}"
        rho = "-" if r["spearman"] is None else f"{r['spearman']:.2f}"
        ci = "" if r["ci_low"] is None else f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        where = f"{r['evalrank_task']} ({r['evalrank_variant']}" + (
            f", {r['evalrank_ties']})" if r["evalrank_ties"] else ")"
        )
        t.add_row(f"{r['diagnostic_task']} {r['diagnostic_metric']}{subset}", where, rho, ci, str(r["n_models"]))
    return t
