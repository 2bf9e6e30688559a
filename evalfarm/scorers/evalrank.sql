-- ranks: EvalRank per pair, of the current results: the optimistic rank (`rank`, the paper's) and the number of
-- background items tied exactly with the positive (`tied`), stored once; the other tie policies are derived here by
-- `tie_rank` (the `tie_policies` of evalfarm/ranking.py).

-- ranks_history: every per-pair EvalRank row ever written, of current and superseded units alike.
CREATE OR REPLACE VIEW ranks_history AS
SELECT run_id, model, task, variant, query_id, positive_id, query, positive, rank, tied, score, oov, fingerprint
FROM read_parquet('{root}/tables/ranks/**/*.parquet', union_by_name = true, hive_partitioning = false)
WHERE task IS NOT NULL;

-- current_evalrank: the computation that holds the current numbers of each (model, task, variant): its unit's
-- fingerprint and the run that computed it. A unit computes several variants (cos and l2); when a later unit
-- recomputes only some of them (`--similarity cos`), each variant's detail rows come from the computation its
-- current metrics come from, never from two (a unit computed again under the same fingerprint included).
CREATE OR REPLACE VIEW current_evalrank AS
SELECT DISTINCT model, task, variant, fingerprint, run_id FROM metrics WHERE scorer = 'evalrank';

CREATE OR REPLACE VIEW ranks AS
SELECT r.model, r.task, r.variant, r.query, r.positive, CAST(r.rank AS BIGINT) AS rank, r.tied,
       CAST(tie_rank(r.rank, r.tied, 'pessimistic') AS BIGINT) AS rank_pessimistic,
       tie_rank(r.rank, r.tied, 'realistic') AS rank_realistic,
       r.score, r.oov, r.query_id, r.positive_id, r.run_id
FROM ranks_history r
SEMI JOIN current_evalrank m
    ON r.model = m.model AND r.task = m.task AND r.variant = m.variant AND r.fingerprint = m.fingerprint
   AND r.run_id IS NOT DISTINCT FROM m.run_id;

-- neighbours: each EvalRank query's top-k background items (k = 10) under each variant, of the current results:
-- what a model places above the positive. The query itself is never its own neighbour; exact duplicates of it are.
CREATE OR REPLACE VIEW neighbours AS
SELECT n.model, n.task, n.variant, n.query, n.position, n.neighbour, n.score, n.query_id, n.neighbour_id, n.run_id
FROM read_parquet('{root}/tables/neighbours/**/*.parquet', union_by_name = true, hive_partitioning = false) n
SEMI JOIN current_evalrank m
    ON n.model = m.model AND n.task = m.task AND n.variant = m.variant AND n.fingerprint = m.fingerprint
   AND n.run_id IS NOT DISTINCT FROM m.run_id
WHERE n.task IS NOT NULL;

-- hardest_pairs: each model's worst-ranked EvalRank pairs (realistic rank: the boards' policy, `board_ties()`) with
-- what it ranked first instead.
CREATE OR REPLACE VIEW hardest_pairs AS
SELECT r.model, r.task, r.variant, r.query, r.positive, tie_rank(r.rank, r.tied, board_ties()) AS rank, r.score,
       r.rank AS optimistic_rank, r.tied, r.oov, n.neighbour AS top_neighbour, n.score AS top_score,
       row_number() OVER (
           PARTITION BY r.model, r.task, r.variant
           ORDER BY tie_rank(r.rank, r.tied, board_ties()) DESC, r.query, r.positive
       ) AS worst
FROM ranks r
LEFT JOIN neighbours n ON n.model = r.model AND n.task = r.task AND n.variant = r.variant
                       AND n.query_id = r.query_id AND n.position = 1;

-- evalrank: the EvalRank board, one row per (task, variant, ties, model): MRR, MR, Hits@k under that tie policy and
-- the pool's coverage figures (oov_rate, tie_rate: the share of pairs whose positive ties with some item). Degenerate
-- and thin units are left out, as on the leaderboard.
CREATE OR REPLACE VIEW evalrank AS
WITH ranked AS (
    SELECT task, variant, ties, model,
           max(value) FILTER (WHERE metric = 'mrr') AS mrr,
           max(value) FILTER (WHERE metric = 'mr') AS mr,
           max(value) FILTER (WHERE metric = 'hits@1') AS "hits@1",
           max(value) FILTER (WHERE metric = 'hits@3') AS "hits@3",
           max(value) FILTER (WHERE metric = 'hits@10') AS "hits@10"
    FROM metrics
    WHERE scorer = 'evalrank' AND ties IS NOT NULL AND NOT degenerate AND NOT thin
    GROUP BY task, variant, ties, model
),
coverage AS (
    SELECT task, variant, model,
           CAST(max(value) FILTER (WHERE metric = 'n_pairs') AS BIGINT) AS n_pairs,
           max(value) FILTER (WHERE metric = 'oov_rate') AS oov_rate,
           max(value) FILTER (WHERE metric = 'tie_rate') AS tie_rate
    FROM metrics
    WHERE scorer = 'evalrank' AND ties IS NULL
    GROUP BY task, variant, model
)
SELECT task, variant, ties, rank() OVER (PARTITION BY task, variant, ties ORDER BY mrr DESC NULLS LAST) AS position,
       model, mrr, mr, "hits@1", "hits@3", "hits@10", n_pairs, oov_rate, tie_rate
FROM ranked LEFT JOIN coverage USING (task, variant, model)
ORDER BY task, variant, ties, position, model;
