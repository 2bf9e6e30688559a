-- leaderboard: current EvalRank results, one row per (pool, similarity, model), best MRR first.
CREATE OR REPLACE VIEW leaderboard AS
WITH wide AS (
    SELECT pool, similarity, model,
           max(value) FILTER (WHERE metric = 'mrr') AS mrr,
           max(value) FILTER (WHERE metric = 'mr') AS mr,
           max(value) FILTER (WHERE metric = 'hits@1') AS "hits@1",
           max(value) FILTER (WHERE metric = 'hits@3') AS "hits@3",
           max(value) FILTER (WHERE metric = 'hits@10') AS "hits@10",
           CAST(max(value) FILTER (WHERE metric = 'n_pairs') AS BIGINT) AS n_pairs,
           max(value) FILTER (WHERE metric = 'oov_rate') AS oov_rate,
           max(value) FILTER (WHERE metric = 'tie_rate') AS tie_rate
    FROM metrics
    GROUP BY pool, similarity, model
)
SELECT rank() OVER (PARTITION BY pool, similarity ORDER BY mrr DESC NULLS LAST) AS position, *
FROM wide
ORDER BY pool, similarity, position, model;
