-- metrics_history: every number ever computed, one row per number (append-only; recomputing a unit with the
-- same fingerprint replaces its file, so there are no duplicates).
CREATE OR REPLACE VIEW metrics_history AS
SELECT run_id, model, pool, similarity, metric, value, fingerprint, spec_hash, pool_checksum, code_version,
       policy, created_at
FROM read_parquet('{root}/tables/metrics/**/*.parquet', union_by_name = true, hive_partitioning = false);

-- metrics: the current numbers: for each (model, pool), the unit computed last (its spec, pool data and code).
CREATE OR REPLACE VIEW metrics AS
SELECT run_id, model, pool, similarity, metric, value, fingerprint, spec_hash, created_at
FROM (
    SELECT *, dense_rank() OVER (PARTITION BY model, pool ORDER BY created_at DESC, fingerprint) AS _newest
    FROM metrics_history
)
WHERE _newest = 1;
