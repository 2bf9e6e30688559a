-- metrics_history: every number ever computed, one row per number and computation (append-only: a unit computed
-- again, by `run --force` or after its data changed, adds rows beside the old ones; run_id and created_at tell the
-- computations apart, and the `history` and `changes` views compare them). Rows of the first wave's layout (no
-- task) are left out.
-- degenerate: the unit's vectors failed the degenerate-model check (all OOV, nearly all identical, or of numerical
-- rank ~1: see evalfarm/quality.py and the quality view), degenerate_reason says which; false for older rows.
-- thin: the unit's numbers rest on too little data to rank (below its scorer's declared coverage / pair count, or
-- past its OOV / tie share: Scorer.thin_rules, docs/evaluators.md), thin_reason says which; false for older rows.
-- ci_low, ci_high: a correlation's 95 % confidence interval (ci_method: how, e.g. fisher-z 95%); null for other
-- metrics and for rows written before intervals existed (`run --force` recomputes them).
CREATE OR REPLACE VIEW metrics_history AS
SELECT run_id, model, task, scorer, subset, variant, ties, metric, value, is_primary, higher_is_better, fingerprint,
       spec_hash, task_checksum, scorer_version, params, created_at,
       coalesce(degenerate, false) AS degenerate, degenerate_reason, coalesce(thin, false) AS thin, thin_reason,
       ci_low, ci_high, ci_method
FROM read_parquet('{root}/tables/metrics/**/*.parquet', union_by_name = true, hive_partitioning = false)
WHERE task IS NOT NULL;

-- ranked_computations(rows): each metrics row of the relation named `rows` with its computation's age among the
-- computations of its (model, task, scorer, subset, variant): 1 for the newest (by created_at, then fingerprint and
-- run id), 2 for the one before it, and so on; rows of the first wave's layout (no task) are left out. The one rule
-- of "newest": `metrics` keeps age 1, and the metrics table's refresh (evalfarm/warehouse/current.py) keeps those
-- rows as the table's current files and the rest as superseded ones.
CREATE OR REPLACE MACRO ranked_computations(rows) AS TABLE
SELECT *, dense_rank() OVER (
    PARTITION BY model, task, scorer, subset, variant ORDER BY created_at DESC, fingerprint, run_id
) AS computation_age
FROM query_table(rows)
WHERE task IS NOT NULL;

-- metrics: the current numbers: for each (model, task, scorer, subset, variant), the unit computed last (the newest
-- created_at; a unit computed again under the same fingerprint replaces the older computation here). A second
-- scorer or variant never hides another's numbers (a run with --similarity cos keeps the l2 rows of an earlier one).
-- Degenerate and thin units are here, flagged (degenerate, degenerate_reason, thin, thin_reason); the leaderboard
-- leaves them out. Read from the metrics table's current rows (set apart when it is compacted) and the newest of
-- the rows committed since (ranked_computations over their keys), never a window over the whole history: the
-- relation _tables.metrics_current, which each connection binds (evalfarm/warehouse/current.py).
CREATE OR REPLACE VIEW metrics AS
SELECT run_id, model, task, scorer, subset, variant, ties, metric, value, is_primary, higher_is_better, fingerprint,
       spec_hash, scorer_version, params, created_at, coalesce(degenerate, false) AS degenerate, degenerate_reason,
       coalesce(thin, false) AS thin, thin_reason, ci_low, ci_high, ci_method
FROM _tables.metrics_current;
