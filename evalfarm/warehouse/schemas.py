"""Every warehouse table's schema: the core tables here, and each task kind's detail tables from its scorer.

Core tables are the ones evalfarm itself writes for every run and unit (``metrics``, ``quality``, ``models``,
``runs``, ``failures``, ``units``, ``correlation_ci``, ``manifests``). A task kind adds per-unit detail tables by
declaring them on its scorer (``Scorer.detail_schemas``, e.g. EvalRank's ``ranks`` and ``neighbours`` in
:mod:`evalfarm.scorers.evalrank`): the warehouse writes their typed empty ``_schema.parquet``, the executor writes a
unit's rows, and the scan treats them as part of the unit, with nothing to add here. Every per-unit table has the
:data:`UNIT_COLUMNS` (the executor fills them); a detail table named like a core table or like another kind's is an
error naming both.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from evalfarm.plugins import RegistryError, task_kinds

_TS = pa.timestamp("us", tz="UTC")
CORE_SCHEMAS: dict[str, pa.Schema] = {
    # one row per number; `primary` marks the scorer's primary metric (the leaderboard's), `ties` the tie policy of
    # a rank metric (null elsewhere); params: the scorer's fingerprinted parameters as JSON
    "metrics": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("scorer", pa.string()),
            ("subset", pa.string()),
            ("variant", pa.string()),
            ("ties", pa.string()),
            ("metric", pa.string()),
            ("value", pa.float64()),
            ("is_primary", pa.bool_()),
            ("higher_is_better", pa.bool_()),
            ("fingerprint", pa.string()),
            ("spec_hash", pa.string()),
            ("task_checksum", pa.string()),
            ("scorer_version", pa.string()),
            ("params", pa.string()),
            ("created_at", _TS),
            # the unit's vectors failed the degenerate-model check (evalfarm.quality): why, else null
            ("degenerate", pa.bool_()),
            ("degenerate_reason", pa.string()),
            # the unit's numbers rest on too little data to rank (Scorer.thin: coverage, pairs, OOV, ties): why
            ("thin", pa.bool_()),
            ("thin_reason", pa.string()),
            # a correlation's confidence interval (MetricRow.ci: word-similarity, sts, similarity-bands) and how it
            # was computed (e.g. "fisher-z 95%"); null for other metrics and for rows written before it existed
            ("ci_low", pa.float64()),
            ("ci_high", pa.float64()),
            ("ci_method", pa.string()),
        ]
    ),
    # per unit: what the degenerate-model check measured on the unit's stored vectors (evalfarm.quality)
    "quality": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("n_texts", pa.int64()),
            ("n_vectors", pa.int64()),
            ("dim", pa.int64()),
            ("oov_rate", pa.float64()),
            ("duplicate_rate", pa.float64()),
            ("numerical_rank", pa.int64()),
            ("rank_ratio", pa.float64()),
            ("degenerate", pa.bool_()),
            ("reason", pa.string()),
            ("thresholds", pa.string()),
            ("fingerprint", pa.string()),
        ]
    ),
    "models": pa.schema(
        [
            ("model", pa.string()),
            ("level", pa.string()),
            ("kind", pa.string()),
            ("dim", pa.int64()),
            ("spec_hash", pa.string()),
            ("base", pa.string()),
            ("pooling", pa.string()),
            ("postprocess", pa.string()),
            ("source", pa.string()),
            ("provenance", pa.string()),
            ("spec", pa.string()),
            ("run_id", pa.string()),
            ("created_at", _TS),
        ]
    ),
    "runs": pa.schema(
        [
            ("run_id", pa.string()),
            ("event", pa.string()),
            ("at", _TS),
            ("status", pa.string()),
            ("catalog", pa.string()),
            ("n_units", pa.int64()),
            ("n_failed", pa.int64()),
            ("n_skipped", pa.int64()),
            ("host", pa.string()),
            ("argv", pa.string()),
            ("code_version", pa.string()),
            ("provenance", pa.string()),  # JSON: versions, git commit, device, Ray job, catalog as given
            ("n_done", pa.int64()),  # end event: units computed by this run
            ("reason", pa.string()),  # end event of an interrupted run: why
            # end event: the version of every table once the run's last rows were committed, JSON {table: version}:
            # the run's snapshot (`evalfarm sql --as-of RUN_ID` reads the warehouse as it was then)
            ("snapshot", pa.string()),
            ("summary", pa.string()),  # end event: JSON, the run's end summary (runner.Run.end_report)
        ]
    ),
    "failures": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("stage", pa.string()),
            ("error", pa.string()),
            ("detail", pa.string()),
            ("created_at", _TS),
        ]
    ),
    "units": pa.schema(
        [
            ("run_id", pa.string()),
            ("model", pa.string()),
            ("task", pa.string()),
            ("stage", pa.string()),
            ("worker", pa.string()),
            ("node", pa.string()),
            ("started_at", _TS),
            ("seconds", pa.float64()),
            ("status", pa.string()),
            ("attempts", pa.int64()),
            ("error", pa.string()),
            ("fingerprint", pa.string()),
            # score rows: the thread pools the unit was scored with, JSON {"blas": n, "openmp": n, "torch": n}
            ("threads", pa.string()),
        ]
    ),
    # bootstrap intervals of the `correlations` view, one row per cell and input set (evalfarm/analysis/correlations.py
    # writes them; the view shows a row only while `inputs_hash` still matches the cell's current numbers)
    "correlation_ci": pa.schema(
        [
            ("cell_key", pa.string()),
            ("inputs_hash", pa.string()),
            ("level", pa.string()),
            ("intrinsic_task", pa.string()),
            ("intrinsic_scorer", pa.string()),
            ("intrinsic_metric", pa.string()),
            ("intrinsic_subset", pa.string()),
            ("variant", pa.string()),
            ("ties", pa.string()),
            ("downstream_task", pa.string()),
            ("downstream_subset", pa.string()),
            ("downstream_variant", pa.string()),
            ("excludes_postprocessed", pa.bool_()),
            ("n_models", pa.int64()),
            ("spearman", pa.float64()),
            ("ci_low", pa.float64()),
            ("ci_high", pa.float64()),
            ("confidence", pa.float64()),
            ("n_resamples", pa.int64()),
            ("n_valid", pa.int64()),
            ("seed", pa.int64()),
            ("created_at", _TS),
        ]
    ),
    # paired-bootstrap comparisons of two cells of `correlations` in one column (issue 41): rho(A, D) - rho(B, D)
    # over the models both cells have, its interval and p-value (over models, and over model families), and the
    # normal-theory cross-checks on the rank correlations (evalfarm/analysis/comparison_tables.py writes them; the view
    # `correlation_comparisons` shows a row only while `inputs_hash` still matches both cells' numbers and the row is
    # of the current method, and adds Holm's correction across its table)
    "correlation_diff": pa.schema(
        [
            ("comparison_key", pa.string()),
            ("inputs_hash", pa.string()),
            ("level", pa.string()),
            ("excludes_postprocessed", pa.bool_()),
            ("ties", pa.string()),  # the table's EvalRank tie policy (its family for Holm)
            ("downstream_task", pa.string()),
            ("downstream_subset", pa.string()),
            ("downstream_variant", pa.string()),
            ("a_cell_key", pa.string()),
            ("a_intrinsic_task", pa.string()),
            ("a_intrinsic_scorer", pa.string()),
            ("a_intrinsic_metric", pa.string()),
            ("a_intrinsic_subset", pa.string()),
            ("a_variant", pa.string()),
            ("a_ties", pa.string()),
            ("b_cell_key", pa.string()),
            ("b_intrinsic_task", pa.string()),
            ("b_intrinsic_scorer", pa.string()),
            ("b_intrinsic_metric", pa.string()),
            ("b_intrinsic_subset", pa.string()),
            ("b_variant", pa.string()),
            ("b_ties", pa.string()),
            ("n_models", pa.int64()),
            ("rho_a", pa.float64()),
            ("rho_b", pa.float64()),
            ("difference", pa.float64()),
            ("ci_low", pa.float64()),
            ("ci_high", pa.float64()),
            ("p_value", pa.float64()),
            ("r_ab", pa.float64()),
            ("steiger_z", pa.float64()),
            ("steiger_p", pa.float64()),
            ("williams_t", pa.float64()),
            ("williams_p", pa.float64()),
            ("zou_low", pa.float64()),
            ("zou_high", pa.float64()),
            ("confidence", pa.float64()),
            ("n_resamples", pa.int64()),
            ("n_valid", pa.int64()),
            ("seed", pa.int64()),
            ("created_at", _TS),
            # issue 53: how the row was computed (evalfarm.analysis.comparison_tables.COMPARISON_METHOD; null: method
            # 1, whose rows the view no longer shows), and the bootstrap over model families (the lineage roots) beside
            # the one over models, with the hash of each model's family it was computed for
            ("method", pa.int64()),
            ("families_hash", pa.string()),
            ("n_families", pa.int64()),
            ("family_ci_low", pa.float64()),
            ("family_ci_high", pa.float64()),
            ("family_p_value", pa.float64()),
            ("family_n_resamples", pa.int64()),
            ("family_n_valid", pa.int64()),
        ]
    ),
    # one row per data file of every other table (a unit's rows, a batch of runs' rows, a compacted file): the sha256
    # of its bytes, so `evalfarm verify` notices a file changed after it was written. Committed before the files it
    # names (a row naming a file no snapshot holds is harmless; a file without its row would be "unrecorded").
    "manifests": pa.schema(
        [
            ("run_id", pa.string()),
            ("path", pa.string()),  # from the root: tables/<table>/data/<run_id>/<uuid>.parquet
            ("sha256", pa.string()),
            ("size", pa.int64()),
            ("table", pa.string()),
            ("model", pa.string()),  # the unit of a file that holds one unit's rows, else null
            ("task", pa.string()),
            ("fingerprint", pa.string()),
            ("created_at", _TS),
            # a file that holds several units' rows (compacted, migrated): JSON [[model, task, fingerprint, run_id]]
            ("units", pa.string()),
            ("rows", pa.int64()),
        ]
    ),
}

UNIT_TABLES: tuple[str, ...] = ("quality",)
"""Core per-unit tables beside a unit's metrics file: every unit has them (``score_unit`` writes ``quality``)."""
UNIT_COLUMNS: tuple[str, ...] = ("run_id", "model", "task", "fingerprint")
"""Columns of every per-unit table (the executor fills them; the scan checks ``fingerprint`` against the file)."""


def _where(kind: str) -> str:
    return f"task kind {kind!r} ({task_kinds.origin(kind)})"


@functools.cache
def _kind_tables() -> dict[str, tuple[str, pa.Schema]]:
    """Detail table -> (the task kind declaring it, its schema), checked; cleared when a kind is registered."""
    out: dict[str, tuple[str, pa.Schema]] = {}
    for kind, scorer in task_kinds.items():
        for table, schema in getattr(scorer, "detail_schemas", {}).items():
            where = _where(kind)
            if table in CORE_SCHEMAS:
                raise RegistryError(f"{where} declares detail table {table!r}, a core warehouse table; rename it")
            if table in out:
                raise RegistryError(f"two task kinds declare detail table {table!r}: {out[table][0]} and {where}")
            if not isinstance(schema, pa.Schema):
                raise RegistryError(f"{where}: detail table {table!r} is not a pyarrow.Schema")
            missing = [c for c in UNIT_COLUMNS if c not in schema.names]
            if missing:
                raise RegistryError(
                    f"{where}: detail table {table!r} lacks column(s) {', '.join(missing)} "
                    f"(every per-unit table has {', '.join(UNIT_COLUMNS)})"
                )
            out[table] = (where, schema)
    return out


task_kinds.on_change(_kind_tables.cache_clear)


def kind_schemas() -> dict[str, pa.Schema]:
    """Every task kind's detail tables, by table name."""
    return {table: schema for table, (_, schema) in _kind_tables().items()}


def table_schemas() -> dict[str, pa.Schema]:
    """Every table of the warehouse: the core tables, then the task kinds' detail tables."""
    return {**CORE_SCHEMAS, **kind_schemas()}


def unit_tables() -> tuple[str, ...]:
    """The per-unit tables beside a unit's metrics file (``quality`` and every kind's detail tables): a unit that
    lost one of its files is not done."""
    return UNIT_TABLES + tuple(sorted(kind_schemas()))


def detail_schema(scorer: Any, table: str) -> pa.Schema:
    """The schema of a per-unit table a unit of ``scorer`` writes: one of its declared detail tables, or a core
    per-unit table. A table the scorer does not declare is an error naming it (it would never be read)."""
    declared = getattr(scorer, "detail_schemas", {})
    if table in declared:
        return declared[table]
    if table in UNIT_TABLES:
        return CORE_SCHEMAS[table]
    raise ValueError(
        f"scorer {scorer.name!r} returned detail table {table!r}, which it does not declare "
        f"(detail_schemas: {', '.join(declared) or 'none'})"
    )


class _TableSchemas(Mapping[str, pa.Schema]):
    """:data:`SCHEMAS`: a live view of :func:`table_schemas` (a kind registered later is in it)."""

    def __getitem__(self, name: str) -> pa.Schema:
        if name in CORE_SCHEMAS:
            return CORE_SCHEMAS[name]
        return kind_schemas()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(table_schemas())

    def __len__(self) -> int:
        return len(table_schemas())

    def __repr__(self) -> str:
        return f"SCHEMAS({', '.join(self)})"


SCHEMAS: Mapping[str, pa.Schema] = _TableSchemas()
"""Every table's schema by name, core and task kinds' alike."""


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` with no rows (``Schema.empty_table`` imports pandas when it is installed, a cost in
    every process that writes a schema file)."""
    return pa.Table.from_batches([], schema=schema)


__all__ = [
    "CORE_SCHEMAS",
    "SCHEMAS",
    "UNIT_COLUMNS",
    "UNIT_TABLES",
    "detail_schema",
    "empty_table",
    "kind_schemas",
    "table_schemas",
    "unit_tables",
]
