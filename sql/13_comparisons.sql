-- Which evaluator predicts a downstream task better (issue 41): two cells of `correlations` in one column share the
-- downstream task and the models, so their correlations are dependent and only a test of their difference compares
-- them. The paired bootstrap is computed in Python and stored (table correlation_diff, written by
-- evalfarm/analysis/comparison_tables.py when `evalfarm correlations --compare`, the report or benchmarks/answer_tables.py
-- ask for a table's comparisons); these views keep what is current and add Holm's correction.

-- correlation_diffs: every stored comparison, current or not (one row per comparison and input set).
CREATE OR REPLACE VIEW correlation_diffs AS
SELECT *
FROM read_parquet('{root}/tables/correlation_diff/**/*.parquet', union_by_name = true, hive_partitioning = false);

-- correlation_comparisons: each current comparison of a compared row A (`a_*`, e.g. EvalRank MRR) with another
-- evaluator B (`b_*`) on one downstream column: difference = rho(A, D) - rho(B, D) over the n_models models both
-- have, its paired-bootstrap percentile interval (ci_low, ci_high: confidence, n_resamples, seed) and two-sided
-- p_value, the same bootstrap over the models' n_families families (lineage roots: family_ci_low, family_ci_high,
-- family_p_value; none under 4 families), the normal-theory cross-checks on the rank correlations with Spearman's
-- variance (Steiger's Z, Williams' t, Zou's interval; r_ab is rho(A, B)), and Holm's step-down adjusted p-values
-- across the table (every comparison with the same compared row, level, post-processing choice, tie policy and
-- downstream variant), one per bootstrap: holm_p (n_tests) and family_holm_p (n_family_tests).
-- model_significant: holm_p < 0.05; family_significant: family_holm_p < 0.05; significant: both (the verdicts'
-- test). Only rows of the current method (evalfarm/analysis/comparison_tables.py's COMPARISON_METHOD, 2) count: older rows
-- stay in correlation_diffs and are recomputed. A stored row counts only while inputs_hash matches both cells'
-- current numbers (models added or recomputed: the comparison disappears until it is computed again); a changed
-- lineage (families_hash) is noticed by the next refresh, which stores a newer row. Example, EvalRank against every
-- other sentence evaluator on MR:
--   SELECT b_intrinsic_task, b_intrinsic_subset, difference, ci_low, ci_high, p_value, holm_p, family_holm_p
--   FROM correlation_comparisons WHERE level = 'sentence' AND downstream_task = 'mr' AND ties = 'optimistic'
CREATE OR REPLACE VIEW correlation_comparisons AS
WITH newest AS (
    SELECT * EXCLUDE (_newest)
    FROM (
        SELECT *, row_number() OVER (PARTITION BY comparison_key, inputs_hash ORDER BY created_at DESC) AS _newest
        FROM correlation_diffs
        WHERE method = 2
    )
    WHERE _newest = 1
),
current AS (
    SELECT n.*
    FROM newest n
    JOIN correlation_cells a ON a.cell_key = n.a_cell_key
    JOIN correlation_cells b ON b.cell_key = n.b_cell_key
    WHERE n.inputs_hash = md5(a.inputs_hash || '|' || b.inputs_hash)
),
ranked AS (
    SELECT *,
           count(p_value) OVER family AS n_tests,
           count(family_p_value) OVER family AS n_family_tests,
           row_number() OVER (family ORDER BY p_value NULLS LAST, comparison_key) AS p_order,
           row_number() OVER (family ORDER BY family_p_value NULLS LAST, comparison_key) AS family_p_order
    FROM current
    WINDOW family AS (PARTITION BY level, excludes_postprocessed, ties, a_intrinsic_task, a_intrinsic_scorer,
                                   a_intrinsic_metric, a_intrinsic_subset, a_variant, downstream_variant)
),
holm AS (
    SELECT *,
           CASE WHEN p_value IS NOT NULL THEN least(1.0, max((n_tests - p_order + 1) * p_value) OVER (
               family ORDER BY p_order ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)) END AS holm_p,
           CASE WHEN family_p_value IS NOT NULL THEN least(1.0, max((n_family_tests - family_p_order + 1)
               * family_p_value) OVER (family ORDER BY family_p_order ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
               END AS family_holm_p
    FROM ranked
    WINDOW family AS (PARTITION BY level, excludes_postprocessed, ties, a_intrinsic_task, a_intrinsic_scorer,
                                   a_intrinsic_metric, a_intrinsic_subset, a_variant, downstream_variant)
)
SELECT level, excludes_postprocessed, ties, downstream_task, downstream_subset, downstream_variant,
       a_intrinsic_task, a_intrinsic_scorer, a_intrinsic_metric, a_intrinsic_subset, a_variant, a_ties,
       b_intrinsic_task, b_intrinsic_scorer, b_intrinsic_metric, b_intrinsic_subset, b_variant, b_ties,
       n_models, rho_a, rho_b, difference, ci_low, ci_high, p_value, holm_p,
       coalesce(holm_p < 0.05 AND family_holm_p < 0.05, false) AS significant,
       coalesce(holm_p < 0.05, false) AS model_significant,
       coalesce(family_holm_p < 0.05, false) AS family_significant,
       n_tests, n_families, family_ci_low, family_ci_high, family_p_value, family_holm_p, n_family_tests,
       r_ab, steiger_z, steiger_p, williams_t, williams_p, zou_low, zou_high, confidence, n_resamples, n_valid,
       family_n_resamples, family_n_valid, seed, method, a_cell_key, b_cell_key, comparison_key, inputs_hash,
       families_hash, created_at
FROM holm
ORDER BY level, excludes_postprocessed, ties, a_intrinsic_task, downstream_task, downstream_subset, downstream_variant,
         b_intrinsic_task, b_intrinsic_subset, b_variant, b_intrinsic_metric;
