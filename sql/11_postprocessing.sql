-- postprocessing_effect: the EvalRank paper's Table 10, the share of models whose original beats its post-processed
-- twin, per level, task and primary metric. A twin pair is a post-processed model and its base (ABTT / PC removal /
-- whitening, any level; not a Matryoshka prefix or a quantised copy, which make a vector smaller rather than
-- better); at word level also the two bags of words over them (`downstream_link`), which carry the
-- word models' downstream accuracies. Each pair compares the same task, scorer, subset, variant and metric (EvalRank
-- under `paper_ties()`: optimistic, the paper's); values are oriented so that higher is better (by the metric's
-- declared direction, metric_info). original_wins + twin_wins + ties = 1. The paper's reading: post-processing helps similarity sets, not downstream tasks.
CREATE OR REPLACE VIEW postprocessing_effect AS
WITH twins AS (
    SELECT model AS twin, base AS original, level, false AS via_bow
    FROM models
    WHERE postprocess IS NOT NULL AND base IS NOT NULL
      AND json_extract_string(postprocess, '$.method') IN ('abtt', 'pcr', 'whitening')
    UNION ALL
    SELECT lt.bow_model, lo.bow_model, 'word', true
    FROM models p
    JOIN downstream_link lt ON lt.word_model = p.model
    JOIN downstream_link lo ON lo.word_model = p.base
    WHERE p.level = 'word' AND p.postprocess IS NOT NULL
),
vals AS (
    SELECT model, task, scorer, subset, variant, metric,
           CASE WHEN metric_higher_is_better(scorer, metric, higher_is_better) THEN value ELSE -value END AS value
    FROM metrics
    WHERE is_primary AND isfinite(value) AND NOT degenerate AND NOT thin AND coalesce(ties, paper_ties()) = paper_ties()
)
SELECT t.level, o.task, o.scorer, o.subset, o.variant, o.metric, count(*) AS n_pairs,
       avg(CASE WHEN o.value > w.value THEN 1.0 ELSE 0.0 END) AS original_wins,
       avg(CASE WHEN o.value < w.value THEN 1.0 ELSE 0.0 END) AS twin_wins,
       avg(CASE WHEN o.value = w.value THEN 1.0 ELSE 0.0 END) AS ties
FROM twins t
JOIN vals o ON o.model = t.original
JOIN vals w ON w.model = t.twin AND w.task = o.task AND w.scorer = o.scorer AND w.subset = o.subset
           AND w.variant = o.variant AND w.metric = o.metric
WHERE NOT t.via_bow OR scorer_role(o.scorer) = 'downstream'
GROUP BY ALL
ORDER BY t.level, o.scorer, o.task, o.subset, o.variant, o.metric;
