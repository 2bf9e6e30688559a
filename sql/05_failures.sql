-- failures: what went wrong, per run, model, task and stage (task, placement, load, embed, embed-quality, score);
-- task is null for model-level rows (a model that failed to load, informational embed-quality rows).
CREATE OR REPLACE VIEW failures AS
SELECT run_id, model, task, stage, error, detail, created_at
FROM read_parquet('{root}/tables/failures/**/*.parquet', union_by_name = true, hive_partitioning = false);
