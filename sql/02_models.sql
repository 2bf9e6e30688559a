-- models: one row per model id, the spec it was last evaluated with (provenance and spec as JSON text).
-- postprocessed: the model or any model in its lineage (`spec` holds the chain, nearest first) has a `postprocess`:
-- an ABTT / whitening variant, and a bag of words over a post-processed word model (the paper's Table 11 leaves
-- them out).
CREATE OR REPLACE VIEW models AS
SELECT model, level, kind, dim, spec_hash, base, pooling, postprocess,
       postprocess IS NOT NULL OR coalesce(
           list_bool_or(list_transform(json_extract(spec, '$[*].postprocess'), lambda p: json_type(p) <> 'NULL')),
           false
       ) AS postprocessed,
       source, provenance, spec, run_id, created_at
FROM (
    SELECT *, row_number() OVER (PARTITION BY model ORDER BY created_at DESC) AS _newest
    FROM read_parquet('{root}/tables/models/**/*.parquet', union_by_name = true, hive_partitioning = false)
)
WHERE _newest = 1;
