-- Intrinsic evaluators against downstream accuracy, across the models of a level (the EvalRank paper's Tables 3,
-- 6 and 11). Always current: computed from `metrics` and `models` at query time; only the bootstrap intervals are
-- stored (table correlation_ci, written by evalfarm/analysis/correlations.py after each run and by `evalfarm correlations`).

-- downstream_link: the sentence model whose downstream numbers stand for a word model's. A word model enters
-- downstream through its bag of words: a `bow` model whose `base` is the word model, itself not post-processed.
-- When several share a base (e.g. a cased and a lower-cased one), the alphabetically first id is the link;
-- n_candidates says how many there were.
CREATE OR REPLACE VIEW downstream_link AS
SELECT base AS word_model, min(model) AS bow_model, count(*) AS n_candidates
FROM models
WHERE kind = 'bow' AND level = 'sentence' AND postprocess IS NULL AND base IS NOT NULL
GROUP BY base;

-- correlation_pairs: one row per (cell, model): the model's intrinsic number (the primary metric of every scorer
-- whose role is not downstream, and the metrics declared correlated beside it, `metric_correlated`: EvalRank's
-- hits@1 / hits@3 for the paper's layout and a space's geometry; oriented so that higher is better by the metric's
-- declared direction, `metric_higher_is_better`, a number with no direction taken as measured; metric_info:
-- evalfarm/metrics.py) next to its downstream number (the primary metric of
-- every scorer whose role is downstream, `scorer_roles`), with their average ranks
-- among the cell's models (ties share the mean rank, so corr() over the ranks is Spearman's rho). A cell is
-- (level, intrinsic task / scorer / metric / subset / variant / ties, downstream task / subset / variant,
-- excludes_postprocessed); only models that have both numbers (finite, not from a degenerate
-- or thin unit) are in it.
CREATE OR REPLACE VIEW correlation_pairs AS
WITH intrinsic AS (
    SELECT m.model, mo.level, m.task, m.scorer, m.metric, m.subset, m.variant, m.ties, mo.postprocessed,
           CASE WHEN metric_higher_is_better(m.scorer, m.metric, m.higher_is_better) = false THEN -m.value
                ELSE m.value END AS value
    FROM metrics m
    JOIN models mo USING (model)
    WHERE (m.is_primary OR metric_correlated(m.scorer, m.metric, m.higher_is_better))
      AND scorer_role(m.scorer) <> 'downstream' AND isfinite(m.value) AND NOT m.degenerate AND NOT m.thin
),
downstream AS (
    SELECT model, task, subset, variant,
           CASE WHEN metric_higher_is_better(scorer, metric, higher_is_better) THEN value ELSE -value END AS value
    FROM metrics
    WHERE is_primary AND scorer_role(scorer) = 'downstream' AND isfinite(value) AND NOT degenerate AND NOT thin
),
linked AS (  -- a sentence model's own downstream numbers; a word model's through its bag of words
    SELECT mo.model, d.model AS downstream_model, d.task, d.subset, d.variant, d.value
    FROM models mo
    LEFT JOIN downstream_link l ON l.word_model = mo.model
    JOIN downstream d ON d.model = CASE WHEN mo.level = 'word' THEN l.bow_model ELSE mo.model END
),
pairs AS (
    SELECT i.level, i.task AS intrinsic_task, i.scorer AS intrinsic_scorer, i.metric AS intrinsic_metric,
           i.subset AS intrinsic_subset, i.variant, i.ties, d.task AS downstream_task,
           d.subset AS downstream_subset, d.variant AS downstream_variant, x.excludes_postprocessed, i.model,
           d.downstream_model,
           i.postprocessed, i.value AS intrinsic_value, d.value AS downstream_value
    FROM intrinsic i
    JOIN linked d USING (model)
    CROSS JOIN (VALUES (false), (true)) AS x(excludes_postprocessed)
    WHERE NOT (x.excludes_postprocessed AND i.postprocessed)
),
keyed AS (
    SELECT *,
           md5(concat_ws('|', level, intrinsic_task, intrinsic_scorer, intrinsic_metric, intrinsic_subset, variant,
                         coalesce(ties, ''), downstream_task, downstream_subset, downstream_variant,
                         excludes_postprocessed)) AS cell_key
    FROM pairs
)
SELECT *,
       rank() OVER (PARTITION BY cell_key ORDER BY intrinsic_value)
           + (count(*) OVER (PARTITION BY cell_key, intrinsic_value) - 1) / 2.0 AS intrinsic_rank,
       rank() OVER (PARTITION BY cell_key ORDER BY downstream_value)
           + (count(*) OVER (PARTITION BY cell_key, downstream_value) - 1) / 2.0 AS downstream_rank
FROM keyed;

-- correlation_intervals: the stored bootstrap 95 % intervals, one row per cell and the numbers they were computed
-- from (cell_key, inputs hash; the newest when two refreshes stored one); `correlations` keeps an interval only
-- while its inputs are current.
CREATE OR REPLACE VIEW correlation_intervals AS
SELECT * EXCLUDE (_newest)
FROM (
    SELECT *, row_number() OVER (PARTITION BY cell_key, inputs_hash ORDER BY created_at DESC) AS _newest
    FROM read_parquet('{root}/tables/correlation_ci/**/*.parquet', union_by_name = true, hive_partitioning = false)
)
WHERE _newest = 1;

-- correlation_cells: one row per cell: rho over the average ranks, n_models, and the numbers behind it (models and
-- both values, in model order) with their fingerprint inputs_hash; what `correlations` shows and the bootstrap reads.
CREATE OR REPLACE VIEW correlation_cells AS
SELECT cell_key, level, intrinsic_task, intrinsic_scorer, intrinsic_metric, intrinsic_subset, variant, ties,
       downstream_task, downstream_subset, downstream_variant, excludes_postprocessed,
       corr(intrinsic_rank, downstream_rank) AS rho, count(*) AS n_models,
       md5(string_agg(model || '=' || CAST(intrinsic_value AS VARCHAR) || ',' || downstream_model || '='
                      || CAST(downstream_value AS VARCHAR), ';' ORDER BY model)) AS inputs_hash,
       list(model ORDER BY model) AS models,
       list(intrinsic_value ORDER BY model) AS intrinsic_values,
       list(downstream_value ORDER BY model) AS downstream_values
FROM correlation_pairs
GROUP BY ALL;

-- correlations: Spearman's rho per cell, n_models behind it, and the stored bootstrap 95 % interval over models.
-- inputs_hash fingerprints the cell's (model, intrinsic, downstream) numbers; a stored interval counts only while
-- its inputs_hash matches: ci_status is 'current', 'stale' (models or numbers changed since: ci_low / ci_high are
-- null until `evalfarm correlations` or the next run recomputes them) or 'missing'. spearman is null when it says
-- nothing (fewer than 3 models) or is undefined (every model has the same number on one side).
-- The paper's Table 3 (word) / 6 (sentence), one SELECT:
--   SELECT intrinsic_task, intrinsic_subset, variant, downstream_task, spearman, n_models FROM correlations
--   WHERE level = 'word' AND NOT excludes_postprocessed AND coalesce(ties, paper_ties()) = paper_ties()
-- and Table 11 is the same with excludes_postprocessed.
CREATE OR REPLACE VIEW correlations AS
WITH stored AS (
    SELECT cell_key, inputs_hash, arg_max_null(ci_low, created_at) AS ci_low,
           arg_max_null(ci_high, created_at) AS ci_high
    FROM correlation_intervals
    GROUP BY cell_key, inputs_hash
),
seen AS (SELECT DISTINCT cell_key FROM correlation_intervals)
SELECT c.level, c.intrinsic_task, c.intrinsic_scorer, c.intrinsic_metric, c.intrinsic_subset, c.variant, c.ties,
       c.downstream_task, c.downstream_subset, c.downstream_variant, c.excludes_postprocessed,
       CASE WHEN c.n_models >= 3 AND isfinite(c.rho) THEN c.rho END AS spearman, c.n_models, s.ci_low, s.ci_high,
       CASE WHEN s.cell_key IS NOT NULL THEN 'current' WHEN k.cell_key IS NOT NULL THEN 'stale' ELSE 'missing' END
           AS ci_status,
       c.inputs_hash, c.cell_key
FROM correlation_cells c
LEFT JOIN stored s ON s.cell_key = c.cell_key AND s.inputs_hash = c.inputs_hash
LEFT JOIN seen k ON k.cell_key = c.cell_key
ORDER BY c.level, c.excludes_postprocessed, c.intrinsic_task, c.intrinsic_subset, c.variant, c.ties,
         c.downstream_task, c.downstream_subset, c.downstream_variant;
