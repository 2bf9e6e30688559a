-- models: one row per model id, the spec it was last evaluated with (provenance and spec as JSON text).
CREATE OR REPLACE VIEW models AS
SELECT model, level, kind, dim, spec_hash, base, pooling, postprocess, source, provenance, spec, run_id, created_at
FROM (
    SELECT *, row_number() OVER (PARTITION BY model ORDER BY created_at DESC) AS _newest
    FROM read_parquet('{root}/tables/models/**/*.parquet', union_by_name = true, hive_partitioning = false)
)
WHERE _newest = 1;
