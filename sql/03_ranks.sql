-- ranks: EvalRank per pair, of the current results: the optimistic rank (`rank`, the paper's) and the number of
-- background items tied exactly with the positive (`tied`), stored once; the other tie policies are derived here.

-- ranks_history: every per-pair EvalRank row ever written, of current and superseded units alike.
CREATE OR REPLACE VIEW ranks_history AS
SELECT run_id, model, task, variant, query_id, positive_id, query, positive, rank, tied, score, oov, fingerprint
FROM read_parquet('{root}/tables/ranks/**/*.parquet', union_by_name = true, hive_partitioning = false)
WHERE task IS NOT NULL;

CREATE OR REPLACE VIEW ranks AS
SELECT r.model, r.task, r.variant, r.query, r.positive, CAST(r.rank AS BIGINT) AS rank, r.tied,
       CAST(r.rank + r.tied AS BIGINT) AS rank_pessimistic, r.rank + r.tied / 2.0 AS rank_realistic,
       r.score, r.oov, r.query_id, r.positive_id, r.run_id
FROM ranks_history r
SEMI JOIN (SELECT DISTINCT fingerprint FROM metrics WHERE scorer = 'evalrank') m ON r.fingerprint = m.fingerprint;
