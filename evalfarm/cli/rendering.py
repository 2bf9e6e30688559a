"""What the CLI prints: the two consoles, rows as a table / CSV / JSON, and a table layout that never folds a number.

Results go to stdout (``out``), everything else (progress, warnings, errors) to stderr (``console``), so a pipe
gets only the rows.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table

from evalfarm import api

if TYPE_CHECKING:
    import pyarrow as pa

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
    verbose = 0  # -v: a failure's traceback is printed before its one-line message


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
    Output.quiet, Output.verbose = quiet, verbose
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
    _print_chunks(columns, lambda: iter([rows]), fmt, title)


RENDER_ROWS = 10_000
"""Rows turned into Python values at a time when a result is printed (:func:`print_arrow`)."""


def print_arrow(table: pa.Table, fmt: Format, title: str | None = None) -> None:
    """An Arrow result (``evalfarm sql``'s) on stdout as :func:`print_rows` prints rows, the same text, made
    :data:`RENDER_ROWS` rows at a time: what printing holds besides the result is one chunk of Python values, never
    the whole result as Python objects (a 36 MB result cost 0.5 GB as CSV and 1.2 GB as JSON that way), so the
    result's row and byte limits bound the command's memory too."""

    def chunks() -> Iterator[list[dict[str, Any]]]:
        if not table.num_rows:
            yield []
        for batch in table.to_batches(max_chunksize=RENDER_ROWS):
            yield batch.to_pylist()

    _print_chunks(table.column_names, chunks, fmt, title)


def _print_chunks(
    columns: list[str], chunks: Callable[[], Iterator[list[dict[str, Any]]]], fmt: Format, title: str | None
) -> None:
    """Rows given as chunks (``chunks()`` starts them again: a table reads them twice, once to measure)."""
    if fmt is Format.json:  # json.dumps(rows, indent=2) of all rows, written a row at a time
        first = True
        for rows in chunks():
            for row in rows:
                body = json.dumps(row, default=str, indent=2).replace("\n", "\n  ")
                sys.stdout.write(("[\n  " if first else ",\n  ") + body)
                first = False
        sys.stdout.write("[]\n" if first else "\n]\n")
    elif fmt is Format.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for rows in chunks():
            w.writerows(rows)
    else:
        print_table(columns, [], title=title, width=out.width, chunks=chunks)


MIN_TEXT_WIDTH = 8
"""Narrowest a wrapped text column gets (and never narrower than its longest word) before the table turns vertical."""

KEY_COLUMNS = frozenset({"id", "model", "task", "base", "run_id", "worker"})
"""Columns that name a model, a task or a run: never cut, never wrapped (a reader searches for them whole)."""


def is_key_column(name: str) -> bool:
    """A column of names a reader looks for whole: :data:`KEY_COLUMNS`, or one ending in ``_model`` / ``_task``
    (``intrinsic_task``, ``word_model``)."""
    return name in KEY_COLUMNS or name.endswith(("_model", "_task"))


_BREAKS = re.compile(r"[^,;:/\s]*[,;:/]|[^,;:/\s]+|\s+")
"""Where a cell may wrap: after a comma, semicolon, colon or slash, and at spaces: a list of task ids wraps between
ids, never inside one (``wordsim-ws353-all`` stays whole), a source between its type and its reference."""


def wrap_cell(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after commas and at spaces; a single word longer
    than ``width`` (no break in it at all) is the only thing folded."""
    lines: list[str] = []
    for raw in text.splitlines() or [""]:
        line = ""
        for tok in _BREAKS.findall(raw):
            if len(line) + len(tok.rstrip()) <= width:
                line += tok
                continue
            if line.strip():
                lines.append(line.rstrip())
            line = tok.lstrip()
            while len(line) > width:  # one word wider than the column: fold it (nothing else can)
                lines.append(line[:width])
                line = line[width:]
        lines.append(line.rstrip())
    return lines


def _longest_word(text: str) -> int:
    return max((len(t.strip()) for t in _BREAKS.findall(text)), default=0)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _text_limits(
    natural: list[int], texts: list[int], room: int, floor: dict[int, int] | None = None
) -> dict[int, int]:
    """Water-filling: narrow text columns keep their width, the wide ones share what is left equally (never below
    ``floor``, a column's longest word)."""
    floor = floor or {}
    limits: dict[int, int] = {}
    left, open_cols = room, sorted(texts, key=lambda i: natural[i])
    while open_cols:
        share = left // len(open_cols)
        i = open_cols[0]
        if natural[i] <= share:
            limits[i] = natural[i]
            left -= natural[i]
            open_cols.pop(0)
            continue
        lifted = [j for j in open_cols if floor.get(j, 1) > share]  # a column whose longest word needs more
        if lifted:
            j = max(lifted, key=lambda c: floor[c])
            limits[j] = floor[j]
            left -= floor[j]
            open_cols.remove(j)
            continue
        for j in open_cols:
            limits[j] = max(1, share)
        break
    return limits


@dataclass
class _Measure:
    """What laying a table out needs of every row (:func:`_measured`), gathered a chunk at a time."""

    natural: list[int]
    has_number: list[bool]
    all_numbers: list[bool]
    longest_word: list[int]


def _measured(columns: list[str], chunks: Callable[[], Iterator[list[dict[str, Any]]]]) -> _Measure:
    m = _Measure([len(c) for c in columns], [False] * len(columns), [True] * len(columns), [0] * len(columns))
    for rows in chunks():
        for r in rows:
            for i, c in enumerate(columns):
                v = r.get(c)
                m.has_number[i] |= _is_number(v)
                m.all_numbers[i] &= v is None or _is_number(v)
                text = _fmt(v)
                m.natural[i] = max([m.natural[i], *(len(line) for line in text.splitlines() or [""])])
                m.longest_word[i] = max(m.longest_word[i], _longest_word(text))
    return m


def print_table(
    columns: list[str],
    rows: list[dict[str, Any]],
    *,
    title: str | None,
    width: int,
    chunks: Callable[[], Iterator[list[dict[str, Any]]]] | None = None,
) -> None:
    """A table that fits ``width`` and never cuts a name or folds a number: columns that name a model, a task or a
    run (:func:`is_key_column`) and numbers keep their whole width; other text wraps inside its column (after
    commas, at spaces: :func:`wrap_cell`); when even that does not fit (many columns in a narrow terminal), one
    ``column | value`` block per row (psql's ``\\x``), where nothing needs cutting. ``chunks``: the rows as chunks
    instead (read twice: measured, then printed a chunk at a time with the same layout)."""
    chunks = chunks or (lambda: iter([rows]))
    m = _measured(columns, chunks)
    natural = m.natural
    numeric = [m.has_number[i] and m.all_numbers[i] for i in range(len(columns))]
    frame = 2 * (len(columns) - 1)  # the table below: two spaces between columns, no outer border
    fixed = sum(w for i, w in enumerate(natural) if numeric[i] or is_key_column(columns[i]))
    texts = [i for i, num in enumerate(numeric) if not num and not is_key_column(columns[i])]
    floor = {i: max(min(natural[i], MIN_TEXT_WIDTH), m.longest_word[i]) for i in texts}
    limits: dict[int, int] = {}
    if fixed + sum(natural[i] for i in texts) + frame > width:
        room = width - frame - fixed
        if room < sum(floor.values()):
            _print_vertical(columns, chunks, title, width)
            return
        limits = _text_limits(natural, texts, room, floor)
    if title:  # its own line: a table's title would wrap to the table's width (a narrow table folds it)
        out.print(title, markup=False, highlight=False, style="italic")
    for n, part in enumerate(chunks()):
        if not part and n:
            continue
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True, show_header=n == 0)
        for i, c in enumerate(columns):
            if numeric[i]:
                t.add_column(c, justify="right", no_wrap=True, min_width=natural[i])
            elif i in limits:
                t.add_column(c, no_wrap=True, width=limits[i])
            else:
                t.add_column(c, no_wrap=True, min_width=natural[i])
        for row in ([_fmt(r.get(c)) for c in columns] for r in part):
            t.add_row(*("\n".join(wrap_cell(v, limits[i])) if i in limits else v for i, v in enumerate(row)))
        out.print(t)


def _print_vertical(
    columns: list[str], chunks: Callable[[], Iterator[list[dict[str, Any]]]], title: str | None, width: int
) -> None:
    """One ``column | value`` block per row; a value longer than the line goes on under its first line (broken
    after commas and at spaces, :func:`wrap_cell`), so no line is wider than ``width`` and no name is cut."""
    label = max(len(c) for c in columns)
    room = max(10, width - label - 3)
    lines = textwrap.wrap(title, width) if title else []
    n = 0
    for rows in chunks():
        for r in rows:
            n += 1
            lines.append(f"-[ row {n} ]" + "-" * max(0, min(width, 60) - len(f"-[ row {n} ]")))
            for c in columns:
                parts = wrap_cell(_fmt(r.get(c)), room)
                lines.append(f"{c.ljust(label)} | {parts[0]}")
                lines += [f"{'':{label}} | {p}" for p in parts[1:]]
        if lines:
            out.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
        lines = []


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1e5 else f"{v:.4g}"
    return str(v)


def print_correlations(table: api.CorrelationTable, fmt: Format, *, intervals: bool) -> None:
    """The correlation table in the paper's shape (best cells bold, ``n`` per row), or one row per cell (CSV /
    JSON); then its notes, which a reader must see (on stderr beside CSV / JSON)."""
    if fmt is not Format.table:
        first = table.records[0] if table.records else {}
        columns = ["row", "column", "best", *[c for c in first if c not in ("row", "column", "best")]]
        print_rows(columns, table.records + [_link_record(r, table.level, columns) for r in table.evalrank_links], fmt)
        for s in table.model_stats:  # beside CSV / JSON on stderr, as the notes
            say("word model " + ", ".join(f"{k}={_stat(v)}" for k, v in s.items() if k != "model") + f": {s['model']}")
        for note in table.notes:
            say(f"note: {note}")
        return
    if table.rows:
        out.print(api.correlation_caption(table), markup=False, highlight=False, soft_wrap=True)
        _print_cells(table, intervals)
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
        print_table(*_evalrank_links_rows(table.evalrank_links), title=None, width=out.width)
    for note in table.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def _print_cells(table: api.CorrelationTable, intervals: bool) -> None:
    """The cells, in as many parts as the terminal's width needs (:func:`column_groups`), each with its rows."""
    format_cell = api.format_cell
    texts = {
        (r, c): format_cell(table.cells.get((r, c)), intervals=intervals) for r in table.rows for c in table.columns
    }
    label = max(len("intrinsic evaluator"), *(len(r) for r in table.rows))
    widths = [max(len(c), *(len(texts[(r, c)]) for r in table.rows)) for c in table.columns]
    groups = column_groups(label, widths, max(1, *(len(table.row_n(r)) for r in table.rows)), out.width)
    for k, group in enumerate(groups):
        if len(groups) > 1:  # too wide for the terminal: the downstream columns in parts, each with its rows
            out.print(f"({k + 1}/{len(groups)})", markup=False, highlight=False, style="italic")
        t = Table(show_lines=False)
        t.add_column("intrinsic evaluator", no_wrap=True, min_width=label)
        for i in group:
            t.add_column(table.columns[i], justify="right", no_wrap=True, min_width=widths[i])
        last = k == len(groups) - 1
        if last:
            t.add_column("n", justify="right", no_wrap=True)
        for row in table.rows:
            cells = [table.cells.get((row, table.columns[i])) for i in group]
            shown = [texts[(row, table.columns[i])] for i in group]
            bold = [f"[bold]{x}[/]" if c is not None and c.best else x for x, c in zip(shown, cells, strict=True)]
            t.add_row(row, *bold, *([table.row_n(row)] if last else []))
        out.print(t)


def column_groups(label: int, widths: list[int], last: int, width: int) -> list[list[int]]:
    """The columns of a bordered rich table split into groups that each fit ``width`` beside the ``label`` column
    (the last group also holds a column ``last`` wide): a narrow terminal gets the table in parts, never a cut
    header. Each column costs its width plus 3 (padding and border), the table 1 more."""
    groups: list[list[int]] = [[]]
    used = 1 + label + 3
    for i, w in enumerate(widths):
        if groups[-1] and used + w + 3 > width:
            groups.append([])
            used = 1 + label + 3
        groups[-1].append(i)
        used += w + 3
    if used + last + 3 > width and groups[-1]:  # the n column would not fit beside the last part: a part of its own
        groups.append([])
    return groups


def print_comparisons(table: api.ComparisonTable, fmt: Format) -> None:
    """Each other row against the compared row, task by task (difference, interval, p, Holm p by the bootstrap
    over models and over families, the normal-theory cross-check), then the power lines and notes; CSV / JSON: one
    row per comparison (the view's columns)."""
    format_comparison, power_text, column_order = api.format_comparison, api.power_text, api.column_order
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
        + f", EvalRank ties {table.ties}); * = Holm-significant by both bootstraps (over models, over families)",
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (("task", "left"), ("evaluator", "left"), ("rho", "right"),
                                                      ("rho(compared) - rho", "left"), ("Steiger p", "right"),
                                                      ("n", "right"))  # fmt: skip
    for name, justify in columns:
        t.add_column(name, justify=justify)
    for (row, column), cell in ordered:
        rho = "" if cell["rho_b"] is None else f"{cell['rho_b']:.2f}"
        steiger = "" if cell["steiger_p"] is None else f"{cell['steiger_p']:.3g}"
        t.add_row(column, row, rho, format_comparison(cell), steiger, str(cell["n_models"]))
    if table.cells:
        out.print(t)
    if table.power:
        out.print(
            "Models needed to tell the compared row from each task's best similarity row at 80 % power, at the "
            "table's Holm level (simulated from this zoo: model by model, and family by family):",
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
    rows = [{c: s.get(c) if c == "model" else _stat(s.get(c)) for c in columns} for s in stats]
    title = "word models: OOV rate, OOV pair rate, tie rate, pairs (EvalRank, cos)"
    print_table(columns, rows, title=title, width=out.width)


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


def _evalrank_links_rows(links: list[dict]) -> tuple[list[str], list[dict[str, Any]]]:
    """The diagnostics-against-EvalRank rows, as :func:`print_table` lays them out."""
    rows = []
    for r in links:
        subset = "" if r["diagnostic_subset"] == "all" else f" {r['diagnostic_subset']}"
        rho = "-" if r["spearman"] is None else f"{r['spearman']:.2f}"
        ci = "" if r["ci_low"] is None else f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        where = f"{r['evalrank_task']} ({r['evalrank_variant']}" + (
            f", {r['evalrank_ties']})" if r["evalrank_ties"] else ")"
        )
        rows.append({"diagnostic_task": f"{r['diagnostic_task']} {r['diagnostic_metric']}{subset}",
                     "evalrank_task": where, "rho": rho, "95 % interval": ci, "n": r["n_models"]})  # fmt: skip
    return ["diagnostic_task", "evalrank_task", "rho", "95 % interval", "n"], rows
