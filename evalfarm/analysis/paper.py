"""The EvalRank paper's correlation tables in its own layout, and its published cells beside the measured ones.

Rows are the paper's intrinsic evaluators in its order (the similarity sets with at least 200 pairs, then EvalRank's
MRR, Hits@1 and Hits@3), columns its downstream tasks in its order (SCICITE first), cells Spearman's rho x 100. The
published numbers are data, transcribed from the paper (:data:`CITATION`; ACL Anthology papers are CC BY 4.0, and
the cells are facts reported by it): Table 3 (word level), Table 6 (sentence level, all models) and Table 11
(sentence level without post-processed models).

Which warehouse rows stand for a paper row is fixed here (:data:`WORD_ROWS`, :data:`SENTENCE_ROWS`): similarity
sets by the raw cosine (SentEval's protocol; ``raw`` at word level), the STS years by their weighted mean over
subsets (``wmean``), STS-B / SICK-R / STR by their test split, EvalRank by cosine. The tie policy and the downstream
variant a table used are part of it and printed with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalfarm.analysis.correlations import PAPER_EVALRANK_METRICS as PAPER_METRICS
from evalfarm.plugins import scorer_roles
from evalfarm.ranking import PAPER_TIES, Ties, check_ties

CITATION = (
    "Bin Wang, C.-C. Jay Kuo and Haizhou Li. 2022. Just Rank: Rethinking Evaluation with Word and Sentence "
    "Similarities. In Proceedings of ACL 2022 (Volume 1: Long Papers), pages 6060-6077. "
    "doi:10.18653/v1/2022.acl-long.419"
)
PAPER_ZOO = {
    "word": "38 word models (19 + ABTT)",
    "sentence": "67 sentence models (38 bag-of-words + 29 neural)",
    "sentence-no-pp": "34 sentence models without post-processing",
}
"""The paper's zoo, stated beside its published cells."""


@dataclass(frozen=True)
class PaperRow:
    """A paper row and the warehouse cells that stand for it."""

    label: str
    task: str
    subset: str
    variant: str
    metric: str | None = None  # None: the scorer's primary metric


_EVALRANK_METRICS = (("EvalRank MRR", "mrr"), ("EvalRank Hits@1", "hits@1"), ("EvalRank Hits@3", "hits@3"))

WORD_ROWS: tuple[PaperRow, ...] = (
    *(
        PaperRow(label, task, "all", "raw")
        for label, task in (
            ("WS-353-All", "wordsim-ws353-all"),
            ("WS-353-Rel", "wordsim-ws353-rel"),
            ("WS-353-Sim", "wordsim-ws353-sim"),
            ("RW-STANFORD", "wordsim-rw"),
            ("MEN-TR-3K", "wordsim-men"),
            ("MTURK-287", "wordsim-mturk-287"),
            ("MTURK-771", "wordsim-mturk-771"),
            ("SIMLEX-999", "wordsim-simlex-999"),
            ("SIMVERB-3500", "wordsim-simverb-3500"),
        )
    ),
    *(PaperRow(label, "evalrank-word", "all", "cos", metric) for label, metric in _EVALRANK_METRICS),
)
SENTENCE_ROWS: tuple[PaperRow, ...] = (
    *(PaperRow(f"STS{y}", f"sts{y}", "wmean", "cos") for y in (12, 13, 14, 15, 16)),
    PaperRow("STS-Benchmark", "stsb", "test", "cos"),
    PaperRow("SICK-Relatedness", "sick-r", "test", "cos"),
    PaperRow("STR", "str", "test", "cos"),
    *(PaperRow(label, "evalrank-sentence", "all", "cos", metric) for label, metric in _EVALRANK_METRICS),
)
_DOWNSTREAM = (
    ("SCICITE", "scicite"),
    ("MR", "mr"),
    ("CR", "cr"),
    ("MPQA", "mpqa"),
    ("SUBJ", "subj"),
    ("SST2", "sst2"),
    ("SST5", "sst5"),
    ("TREC", "trec"),
    ("MRPC", "mrpc"),
    ("SICK-E", "sick-e"),
)
COLUMNS = {"word": _DOWNSTREAM, "sentence": _DOWNSTREAM[:-2]}
"""The paper's downstream columns (label, task id) per level; MRPC and SICK-E are not in its sentence tables."""

# -- the published cells (rho x 100), rows in the order above, columns in COLUMNS' order ------------------------------
_TABLE3 = (
    (62.87, 43.68, 40.94, 37.50, 15.57, 41.65, 45.03, 34.70, 8.98, 57.96),
    (66.13, 47.92, 45.15, 41.77, 11.65, 47.25, 48.18, 26.36, 20.56, 61.83),
    (67.86, 45.94, 43.97, 38.68, 17.41, 44.03, 50.32, 34.85, 10.67, 56.13),
    (75.56, 74.65, 55.35, 66.08, 46.82, 81.50, 68.25, 45.91, 13.08, 43.29),
    (66.91, 44.15, 45.37, 39.14, 1.70, 38.51, 42.11, 22.82, 28.63, 71.26),
    (68.48, 65.95, 48.01, 52.36, 31.94, 71.96, 58.01, 29.22, 7.54, 36.23),
    (79.93, 60.87, 49.45, 57.92, 24.04, 62.75, 62.03, 29.14, 17.44, 60.23),
    (68.20, 48.02, 40.90, 46.43, 19.03, 47.30, 50.95, 38.14, 15.32, 60.26),
    (65.13, 45.60, 36.95, 47.04, 21.57, 45.16, 48.56, 41.74, 10.70, 58.08),
    (89.96, 87.91, 68.23, 78.03, 51.35, 91.54, 83.36, 48.15, 25.70, 61.34),
    (85.91, 83.69, 66.93, 81.43, 55.95, 89.74, 79.46, 43.53, 28.82, 53.86),
    (90.11, 88.82, 69.92, 82.05, 54.52, 93.32, 84.41, 48.44, 30.87, 62.77),
)
_TABLE6 = (
    (32.96, 38.62, 44.77, 31.52, 21.76, 33.79, 35.68, 30.79),
    (22.04, 32.62, 41.23, 12.39, 7.64, 26.45, 22.98, 12.16),
    (25.91, 34.77, 41.89, 19.23, 10.13, 29.20, 26.82, 17.70),
    (31.84, 40.64, 48.11, 25.12, 16.48, 35.50, 33.30, 24.70),
    (29.56, 40.14, 51.66, 14.35, 16.53, 33.61, 29.44, 21.43),
    (32.99, 46.03, 52.78, 21.09, 26.47, 40.41, 36.75, 34.64),
    (40.38, 38.51, 50.68, 29.87, 18.87, 34.54, 36.73, 25.25),
    (-14.48, -8.38, -7.79, -29.57, -23.91, -16.33, -22.77, -14.30),
    (65.95, 83.43, 87.08, 43.93, 72.72, 80.97, 74.16, 76.74),
    (69.01, 85.39, 89.36, 45.81, 74.93, 82.65, 76.65, 78.72),
    (63.35, 83.92, 85.43, 41.24, 70.98, 80.36, 72.05, 74.70),
)
_TABLE11 = (
    (35.45, 39.07, 39.65, 63.36, 28.60, 30.87, 42.92, 42.58),
    (42.51, 42.88, 46.71, 72.68, 32.44, 34.10, 47.70, 42.15),
    (37.99, 38.05, 41.73, 68.05, 27.50, 30.18, 43.38, 43.16),
    (44.19, 46.07, 47.41, 68.78, 35.08, 38.11, 51.14, 50.13),
    (63.62, 64.30, 66.33, 71.81, 56.87, 57.09, 68.38, 66.03),
    (47.10, 48.82, 51.05, 62.93, 38.26, 40.98, 53.76, 54.22),
    (49.98, 51.65, 54.90, 68.44, 41.18, 42.57, 57.04, 54.82),
    (-2.57, -1.53, -7.81, 27.70, -1.47, -5.42, -3.12, 9.37),
    (83.37, 85.40, 85.45, 66.38, 81.29, 82.62, 85.77, 85.69),
    (83.69, 86.15, 85.82, 65.80, 82.28, 83.21, 85.78, 86.67),
    (83.92, 85.19, 84.97, 66.38, 81.37, 82.36, 85.74, 86.51),
)


_TABLE4 = ((89.96, 87.91, 91.54), (88.55, 83.99, 88.26), (90.56, 86.56, 91.12), (77.47, 78.34, 81.51))
TABLE4_ROWS: tuple[PaperRow, ...] = (
    PaperRow("EvalRank (cos)", "evalrank-word", "all", "cos", "mrr"),
    PaperRow("w/o wiki vocabs", "evalrank-word-nowiki", "all", "cos", "mrr"),
    PaperRow("w/ WN synonym pairs", "evalrank-word-wn", "all", "cos", "mrr"),
    PaperRow("w/ l2 metric", "evalrank-word", "all", "l2", "mrr"),
)
"""Table 4, the word-level ablation: no 20k-word wiki background (task evalrank-word-nowiki of the paper-ablations
catalog), WordNet synonym pairs (no such task here: the row stays empty), the l2 metric (EvalRank's l2 variant)."""
_TABLE4_COLUMNS = (("SCICITE", "scicite"), ("MR", "mr"), ("SST2", "sst2"))


_TABLE7 = (
    (65.95, 83.43, 80.97),
    (69.01, 85.39, 82.65),
    (63.35, 83.92, 80.36),
    (63.05, 75.85, 72.87),
    (66.22, 77.94, 75.20),
    (61.23, 75.49, 72.92),
    (63.51, 83.28, 80.20),
    (66.59, 84.53, 82.14),
    (60.68, 82.55, 79.42),
)
TABLE7_ROWS: tuple[PaperRow, ...] = tuple(
    PaperRow(f"{source} {label.removeprefix('EvalRank ')}", task, "all", "cos", metric)
    for source, task in (
        ("STS-B + STR", "evalrank-sentence"),
        ("STS-B only", "evalrank-sentence-stsb"),
        ("STR only", "evalrank-sentence-str"),
    )
    for label, metric in _EVALRANK_METRICS
)
"""Table 7, sentence level: EvalRank's positive pairs from both sources (the default pool), from STS-B only and from
STR only (tasks evalrank-sentence-stsb / -str of the paper-ablations catalog: ``pairs_from``)."""


@dataclass(frozen=True)
class TableDef:
    """One of the paper's correlation tables: its level, whether it leaves post-processed models out, its rows and
    columns, and its published cells (rho x 100; rows x columns in that order)."""

    name: str
    level: str
    exclude_postprocessed: bool
    rows: tuple[PaperRow, ...]
    columns: tuple[tuple[str, str], ...]
    values: tuple[tuple[float, ...], ...]

    def published(self) -> dict[tuple[str, str], float]:
        cols = [label for label, _ in self.columns]
        assert len(self.values) == len(self.rows) and all(len(v) == len(cols) for v in self.values)
        return {
            (r.label, c): v
            for r, vs in zip(self.rows, self.values, strict=True)
            for c, v in zip(cols, vs, strict=True)
        }


TABLES: dict[str, TableDef] = {
    "3": TableDef("Table 3", "word", False, WORD_ROWS, COLUMNS["word"], _TABLE3),
    "4": TableDef("Table 4", "word", False, TABLE4_ROWS, _TABLE4_COLUMNS, _TABLE4),
    "6": TableDef("Table 6", "sentence", False, SENTENCE_ROWS, COLUMNS["sentence"], _TABLE6),
    "7": TableDef("Table 7", "sentence", False, TABLE7_ROWS, _TABLE4_COLUMNS, _TABLE7),
    "11": TableDef("Table 11", "sentence", True, SENTENCE_ROWS, COLUMNS["sentence"], _TABLE11),
}
"""The paper's correlation tables this module lays out, by number (``correlations --layout paper --table N``)."""
_DEFAULT = {("word", False): "3", ("sentence", False): "6", ("sentence", True): "11"}

PUBLISHED: dict[tuple[str, bool], tuple[str, dict[tuple[str, str], float]]] = {
    key: (TABLES[n].name, TABLES[n].published()) for key, n in _DEFAULT.items()
}
"""``(level, excludes post-processed) -> (table name, {(row label, column label): rho x 100})``: the table each
level shows by default."""


@dataclass
class PaperTable:
    """One level's correlations in the paper's layout: ``cells[(row, column)] = (measured rho x 100 or None,
    n_models, published rho x 100 or None)``; ``notes`` say what the reader must know."""

    level: str
    exclude_postprocessed: bool
    ties: Ties
    downstream_variant: str | None
    rows: list[str]
    columns: list[str]
    cells: dict[tuple[str, str], tuple[float | None, int, float | None]] = field(default_factory=dict)
    published_name: str | None = None
    composition: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    keys: dict[tuple[str, str], str] = field(default_factory=dict)
    """The ``correlations`` view's cell_key behind each measured cell."""
    compared: str | None = None
    """With comparisons (:func:`mark_comparisons`): the row the others are compared with."""
    marks: dict[tuple[str, str], str] = field(default_factory=dict)
    """``MARK`` on each cell that differs significantly from the compared row's cell in its column."""
    power: list[str] = field(default_factory=list)
    """Lines under the table: how many models would tell the compared row from each column's best similarity row."""

    def caption(self) -> str:
        which = "without post-processed models" if self.exclude_postprocessed else "all models"
        comp = ", ".join(f"{n} {fam}" for fam, n in self.composition.items()) or "none"
        return (
            f"Spearman's rho x 100, {self.level} level, {which}, in the EvalRank paper's layout; EvalRank ties "
            f"{self.ties}; downstream variant {self.downstream_variant or '(none)'}; this zoo: {comp}"
        )


def _pick_variant(records: list[dict[str, Any]], wanted: str | None) -> str | None:
    """The downstream variant a table uses: ``wanted``, else the only one, else the one most cells have."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["downstream_variant"]] = counts.get(r["downstream_variant"], 0) + 1
    if wanted is not None:
        return wanted
    if not counts:
        return None
    return sorted(counts, key=lambda v: (-counts[v], v))[0]


def _fill_cells(
    out: PaperTable,
    rows: Sequence[PaperRow],
    columns: Sequence[tuple[str, str]],
    index: dict,
    primary: set,
    published: dict,
) -> list[str]:
    """Fill ``out``'s cells (Spearman x 100, models, the published value) and cell keys; returns the rows without
    a measured cell."""
    missing: list[str] = []
    for row in rows:
        for col_label, task in columns:
            hit = _find(index, primary, row, task)
            rho = None if hit is None or hit["spearman"] is None else round(100 * hit["spearman"], 2)
            n = 0 if hit is None else int(hit["n_models"])
            out.cells[(row.label, col_label)] = (rho, n, published.get((row.label, col_label)))
            if hit is not None and hit.get("cell_key"):
                out.keys[(row.label, col_label)] = str(hit["cell_key"])
        if all(out.cells[(row.label, c)][1] == 0 for c in out.columns):
            missing.append(row.label)
    return missing


def paper_table(
    records: list[dict[str, Any]],
    *,
    level: str,
    exclude_postprocessed: bool = False,
    ties: Ties = PAPER_TIES,
    downstream_variant: str | None = None,
    composition: dict[str, int] | None = None,
    table: str | None = None,
) -> PaperTable:
    """The paper's layout of ``records`` (rows of the ``correlations`` view) for one level, or of the paper's table
    ``table`` (:data:`TABLES`: its level and post-processing choice win). A paper row without measured cells stays
    in the table (empty), so the layout is always the paper's."""
    if table is not None:
        if table not in TABLES:
            raise ValueError(f"the paper's layout has tables {', '.join(TABLES)}, not {table!r}")
        level, exclude_postprocessed = TABLES[table].level, TABLES[table].exclude_postprocessed
    if level not in COLUMNS:
        raise ValueError(f"level must be word or sentence, got {level!r}")
    check_ties(ties)
    tdef = TABLES.get(table or _DEFAULT.get((level, exclude_postprocessed), ""))
    rows = tdef.rows if tdef else WORD_ROWS if level == "word" else SENTENCE_ROWS
    columns = tdef.columns if tdef else COLUMNS[level]
    mine = [
        r
        for r in records
        if r["level"] == level
        and r["excludes_postprocessed"] == exclude_postprocessed
        and r["downstream_subset"] == "all"
        and (r["ties"] is None or r["ties"] == ties)
    ]
    variant = _pick_variant(mine, downstream_variant)
    name, published = (tdef.name, tdef.published()) if tdef else (None, {})
    out = PaperTable(
        level=level,
        exclude_postprocessed=exclude_postprocessed,
        ties=ties,
        downstream_variant=variant,
        rows=[r.label for r in rows],
        columns=[label for label, _ in columns],
        published_name=name,
        composition=dict(composition or {}),
    )
    index = {
        (r["intrinsic_task"], r["intrinsic_subset"], r["variant"], r["intrinsic_metric"], r["downstream_task"]): r
        for r in mine
        if r["downstream_variant"] == variant
    }
    primary = {k[:4] for k in index if k[3] not in PAPER_METRICS}
    missing = _fill_cells(out, rows, columns, index, primary, published)
    if missing:
        out.notes.append(f"not measured in this warehouse: {', '.join(missing)}")
    if name is None:
        out.notes.append("the paper publishes no cells for this table (its Table 11 is sentence-level only)")
    return out


def _find(index: dict, primary: set, row: PaperRow, task: str) -> dict[str, Any] | None:
    """The record of a paper row's cell: its metric, or (metric None) the one primary metric of its task."""
    if row.metric is not None:
        return index.get((row.task, row.subset, row.variant, row.metric, task))
    for key in sorted(primary):
        if key[:3] == (row.task, row.subset, row.variant):
            return index.get((*key, task))
    return None


MARK = "†"
"""The mark of a cell that differs significantly from the compared row (paired bootstraps over models and over model
families, each Holm-significant across the table)."""
COMPARED_ROW = "EvalRank MRR"
"""The paper's row that :func:`mark_comparisons` compares the others with (the evalfarm table's default)."""


def mark_comparisons(table: PaperTable, comparisons: list[dict[str, Any]], *, n_tests: int | None = None) -> None:
    """Mark each cell whose comparison with the compared row (:data:`COMPARED_ROW`, rows of the
    ``correlation_comparisons`` view for this table's level, models, ties) is significant after Holm's correction,
    and say so under the table. The correction runs over the evalfarm table's comparisons (every similarity row
    and set, not only the paper's): a superset, so a mark here is conservative."""
    by_key = {c["b_cell_key"]: c for c in comparisons}
    table.compared = COMPARED_ROW
    for cell, key in table.keys.items():
        found = by_key.get(key)
        if found is not None and found["significant"]:
            table.marks[cell] = MARK
    compared = sum(1 for key in table.keys.values() if key in by_key)
    tests = f" across the table's {n_tests} comparisons" if n_tests else ""
    table.notes.append(
        f"{MARK}: differs from {COMPARED_ROW} in its column (paired bootstraps over models and over model families, "
        f"each Holm-adjusted p < 0.05{tests}); {len(table.marks)} of the {compared} compared cells differ. "
        "EvalRank Hits@1 / Hits@3 are not compared (the same evaluator)"
    )


def format_paper_cell(cell: tuple[float | None, int, float | None], *, published: bool, mark: str = "") -> str:
    """``73.12``, or with ``published`` ``73.12 (89.96)``; ``-`` where nothing is measured; ``mark`` after the
    measured number (:data:`MARK`)."""
    rho, _, pub = cell
    text = ("-" if rho is None else f"{rho:.2f}") + mark
    if published:
        text += f" ({pub:.2f})" if pub is not None else " (-)"
    return text


def render_text(table: PaperTable, *, published: bool = False) -> str:
    """The table as plain text (fixed-width columns): caption, header, rows, the published source, notes."""
    cols = table.columns
    body = [
        [
            row + (" (compared)" if row == table.compared else ""),
            *(format_paper_cell(table.cells[(row, c)], published=published, mark=table.marks.get((row, c), ""))
              for c in cols),
        ]
        for row in table.rows
    ]  # fmt: skip
    head = ["evaluator", *cols]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(cells, widths, strict=True))
        )

    lines = [table.caption(), line(head), *(line(b) for b in body)]
    if published and table.published_name:
        zoo = PAPER_ZOO["sentence-no-pp" if table.exclude_postprocessed else table.level]  # Table 4: word zoo
        lines.append(f"(in brackets: the paper's {table.published_name}, over its {zoo}; {CITATION})")
    lines += [f"note: {n}" for n in table.notes]
    if table.power:
        lines.append(
            "models needed to tell the compared row from the best similarity row at 80 % power, at the table's Holm "
            "level:"
        )
        lines += [f"  {p}" for p in table.power]
    return "\n".join(lines)


def paper_table_from(
    warehouse: Any,
    *,
    level: str,
    exclude_postprocessed: bool = False,
    ties: Ties = PAPER_TIES,
    downstream_variant: str | None = None,
    table: str | None = None,
) -> PaperTable:
    """:func:`paper_table` over a warehouse's ``correlations`` view (a warehouse, or a connection to one), with the
    composition of its models."""
    if table is not None and table in TABLES:
        level, exclude_postprocessed = TABLES[table].level, TABLES[table].exclude_postprocessed
    import duckdb

    from evalfarm.analysis.correlations import connect, fetch_correlations, warehouse_composition

    given = isinstance(warehouse, duckdb.DuckDBPyConnection)
    con = warehouse if given else connect(warehouse)
    try:
        records = fetch_correlations(con)
        composition = warehouse_composition(con, level, exclude_postprocessed)
    finally:
        if not given:
            con.close()
    return paper_table(
        records,
        level=level,
        exclude_postprocessed=exclude_postprocessed,
        ties=ties,
        downstream_variant=downstream_variant,
        composition=composition,
        table=table,
    )


# -- Table 10: originals against their post-processed twins -----------------------------------------------------------
_DOWNSTREAM_LABELS = dict(COLUMNS["word"])
TABLE10_PUBLISHED: dict[str, dict[str, float]] = {
    "word": {
        "SCICITE": 45.0, "MR": 42.1, "CR": 26.3, "MPQA": 94.7, "SUBJ": 78.9, "SST2": 80.0, "SST5": 80.0, "TREC": 89.5,
        "MRPC": 50.0, "SICK-E": 15.0, "WS-353-All": 21.1, "WS-353-Rel": 26.3, "WS-353-Sim": 21.1, "RW-STANFORD": 47.4,
        "MEN-TR-3K": 15.8, "MTURK-287": 26.3, "MTURK-771": 21.1, "SIMLEX-999": 21.1, "SIMVERB-3500": 36.8,
    },
    "sentence": {
        "SCICITE": 67.6, "MR": 63.6, "CR": 54.5, "MPQA": 97.0, "SUBJ": 87.9, "SST2": 88.2, "SST5": 88.2, "TREC": 81.8,
        "MRPC": 64.7, "SICK-E": 51.5, "STS12": 3.0, "STS13": 0.0, "STS14": 0.0, "STS15": 0.0, "STS16": 3.0,
        "STS-Benchmark": 0.0, "SICK-Relatedness": 15.2, "STR": 6.0,
    },
}  # fmt: skip
"""Table 10: the % of models whose original beats its post-processed version (ABTT at word level, PC removal /
whitening at sentence level), per task; the rest of each pair is the post-processed share."""


@dataclass
class Table10:
    """Per task (the paper's rows) and level: (measured % of originals that win or None, pairs, published %)."""

    downstream_variant: str | None
    rows: list[str]
    cells: dict[tuple[str, str], tuple[float | None, int, float | None]] = field(default_factory=dict)

    def render(self) -> str:
        head = ["task", "word: original wins % (paper)", "sentence: original wins % (paper)"]
        body = []
        for row in self.rows:
            texts = [row]
            for level in ("word", "sentence"):
                got, n, pub = self.cells.get((row, level), (None, 0, None))
                text = "-" if got is None else f"{got:.1f} (n={n})"
                texts.append(text + (f" ({pub:.1f})" if pub is not None else ""))
            body.append(texts)
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(3)]
        lines = [
            "The paper's Table 10: the share of models whose original beats its post-processed twin (view "
            f"postprocessing_effect; downstream variant {self.downstream_variant or '(none)'}; EvalRank ties "
            f"{PAPER_TIES}); in brackets the paper's, over its zoo"
        ]
        for cells in [head, *body]:
            pairs = enumerate(zip(cells, widths, strict=True))
            lines.append("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in pairs))
        lines.append(f"({CITATION})")
        return "\n".join(lines)


def table10(effects: list[dict[str, Any]], *, downstream_variant: str | None = None) -> Table10:
    """The ``postprocessing_effect`` view's rows in the paper's Table 10 layout: downstream tasks, then the word
    similarity sets (word level) and the STS sets (sentence level) of the paper's Tables 3 and 6."""
    roles = scorer_roles()
    downstream = [r for r in effects if roles.get(r["scorer"]) == "downstream" and r["subset"] == "all"]
    variant = _pick_variant([{"downstream_variant": r["variant"]} for r in downstream], downstream_variant)
    out = Table10(
        variant, [*(_DOWNSTREAM_LABELS), *(r.label for r in WORD_ROWS[:9]), *(r.label for r in SENTENCE_ROWS[:8])]
    )
    for level in ("word", "sentence"):
        for label, task in COLUMNS["word"]:
            hit = next(
                (r for r in downstream if (r["level"], r["task"], r["variant"]) == (level, task, variant)), None
            )
            out.cells[(label, level)] = _effect(hit, TABLE10_PUBLISHED[level].get(label))
        for row in WORD_ROWS[:9] if level == "word" else SENTENCE_ROWS[:8]:
            hit = next(
                (
                    r
                    for r in effects
                    if (r["level"], r["task"], r["subset"], r["variant"]) == (level, row.task, row.subset, row.variant)
                ),
                None,
            )
            out.cells[(row.label, level)] = _effect(hit, TABLE10_PUBLISHED[level].get(row.label))
    return out


def _effect(hit: dict[str, Any] | None, published: float | None) -> tuple[float | None, int, float | None]:
    if hit is None:
        return None, 0, published
    return round(100 * float(hit["original_wins"]), 1), int(hit["n_pairs"]), published


def table10_from(warehouse: Any, *, downstream_variant: str | None = None) -> Table10:
    """:func:`table10` over a warehouse's ``postprocessing_effect`` view."""
    from evalfarm.analysis.correlations import connect

    con = connect(warehouse)
    try:
        rows = con.sql("SELECT * FROM postprocessing_effect").to_arrow_table().to_pylist()
    finally:
        con.close()
    return table10(rows, downstream_variant=downstream_variant)


# -- Table 3 both ways: the protocol's word tasks and their coverage-controlled variant (issue 26) ----------------
COVERAGE_SQL = """
SELECT intrinsic_task AS task, intrinsic_metric AS metric, ties, downstream_task, downstream_variant, model,
       intrinsic_value AS x, downstream_value AS y
FROM correlation_pairs
WHERE level = 'word' AND NOT excludes_postprocessed AND intrinsic_subset = 'all'
  AND intrinsic_task IN (SELECT unnest(?::VARCHAR[]))
  AND ((intrinsic_scorer = 'evalrank' AND variant = 'cos') OR (intrinsic_scorer <> 'evalrank' AND variant = 'raw'))
"""


@dataclass
class CoverageTable:
    """Table 3's rows over one compared set of word models, each cell twice: on the protocol's task and on its
    coverage-controlled variant ``<task>-<name>`` (``evalfarm zoo coverage``), so that the two differ only in the
    words kept, not in the models; ``cells[(row, column)] = (protocol rho x 100, coverage rho x 100, published)``."""

    name: str
    ties: Ties
    downstream_variant: str
    models: list[str]
    cells: dict[tuple[str, str], tuple[float | None, float | None, float | None]]
    pairs: dict[str, tuple[int | None, int | None]]
    """task -> (pairs in the protocol's task, pairs its variant kept)."""

    def render(self) -> str:
        cols = [label for label, _ in COLUMNS["word"]]
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines = [
            f"Spearman's rho x 100, word level, Table 3's rows over the {len(self.models)} word models compared by "
            f"the coverage variant {self.name!r}; each cell: protocol / coverage-controlled (published cell); "
            f"EvalRank ties {self.ties}; downstream variant {self.downstream_variant}",
            f"{'evaluator':<18}" + "".join(f"{c:>24}" for c in cols),
        ]
        for row in WORD_ROWS:
            cells = (self.cells.get((row.label, c), (None, None, None)) for c in cols)
            lines.append(
                f"{row.label:<18}"
                + "".join(f"{fmt(a) + ' / ' + fmt(b) + ('' if p is None else f' ({p:.2f})'):>24}" for a, b, p in cells)
            )
        lines.append("pairs kept: " + "; ".join(f"{t} {k}/{n}" for t, (n, k) in sorted(self.pairs.items())))
        return "\n".join(lines)


def coverage_table(
    rows: list[dict[str, Any]],
    pairs: dict[str, int],
    *,
    name: str,
    ties: Ties = PAPER_TIES,
    downstream_variant: str | None = None,
) -> CoverageTable:
    """:class:`CoverageTable` from ``correlation_pairs`` rows (:data:`COVERAGE_SQL`): the compared set is the models
    that have the variant's EvalRank task; every cell's rho is over those of them that have both numbers, under
    ``downstream_variant`` (default: the one most rows have, as the paper layout picks)."""
    from evalfarm.analysis.correlations import spearman

    check_ties(ties)
    variant = _pick_variant(rows, downstream_variant) or ""
    rows = [r for r in rows if r["downstream_variant"] == variant]
    models = sorted({r["model"] for r in rows if r["task"] == f"evalrank-word-{name}"})
    if not models:
        raise ValueError(f"no model has the task evalrank-word-{name}: run the coverage variant's catalog first")
    keep = set(models)
    values: dict[tuple[str, str | None, str], dict[str, tuple[float, float]]] = {}
    for r in rows:
        if r["model"] in keep and r["ties"] in (ties, None, ""):
            values.setdefault((r["task"], r["metric"], r["downstream_task"]), {})[r["model"]] = (r["x"], r["y"])

    def rho(task: str, metric: str | None, column: str) -> float | None:
        got = next((v for (t, m, c), v in values.items() if t == task and c == column and metric in (None, m)), {})
        if len(got) < 3:
            return None
        xy = [got[m] for m in sorted(got)]
        value = spearman(np.array([a for a, _ in xy]), np.array([b for _, b in xy]))
        return None if not np.isfinite(value) else round(100 * value, 2)

    published = TABLES["3"].published()
    cells = {
        (row.label, label): (
            rho(row.task, row.metric, column),
            rho(f"{row.task}-{name}", row.metric, column),
            published.get((row.label, label)),
        )
        for row in WORD_ROWS
        for label, column in COLUMNS["word"]
    }
    tasks = sorted({row.task for row in WORD_ROWS})
    kept = {t: (pairs.get(t), pairs.get(f"{t}-{name}")) for t in tasks}
    return CoverageTable(name, ties, variant, models, cells, kept)


def coverage_table_from(
    warehouse: Any, *, name: str, ties: Ties = PAPER_TIES, downstream_variant: str | None = None
) -> CoverageTable:
    """:func:`coverage_table` over a warehouse's ``correlation_pairs`` view and its ``n_pairs`` metrics."""
    from evalfarm.analysis.correlations import connect

    tasks = sorted({row.task for row in WORD_ROWS})
    wanted = tasks + [f"{t}-{name}" for t in tasks]
    con = connect(warehouse)
    try:
        cur = con.execute(COVERAGE_SQL, [wanted])
        names = [c[0] for c in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        counts = con.execute(
            "SELECT task, max(value) FROM metrics WHERE metric = 'n_pairs' AND task IN (SELECT unnest(?::VARCHAR[]))"
            " GROUP BY task",
            [wanted],
        ).fetchall()
    finally:
        con.close()
    return coverage_table(
        rows,
        {t: int(v) for t, v in counts},
        name=name,
        ties=ties,
        downstream_variant=downstream_variant,
    )
