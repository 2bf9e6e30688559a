-- failures: what went wrong, per run, model, pool and stage (load, embed, embed-quality, rank, pool).
CREATE OR REPLACE VIEW failures AS
SELECT run_id, model, pool, stage, error, detail, created_at
FROM read_parquet('{root}/tables/failures/**/*.parquet', union_by_name = true, hive_partitioning = false);
