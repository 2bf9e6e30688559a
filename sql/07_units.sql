-- units: per-unit timings of every run, one row per (run, model, task, stage): stage is embed or score (plan for
-- units skipped because their results already existed), fingerprint the unit's (score rows), worker and node say where it ran, attempts how many
-- tries it took (a killed worker or a failing model is retried up to --max-attempts); threads (score rows, JSON) the
-- thread pools the unit was scored with ({"blas": n, "openmp": n, "torch": n}; null for older rows).
CREATE OR REPLACE VIEW units AS
SELECT run_id, model, task, stage, worker, node, started_at, seconds, status, attempts, error, fingerprint, threads
FROM read_parquet('{root}/tables/units/**/*.parquet', union_by_name = true, hive_partitioning = false);
