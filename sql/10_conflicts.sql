-- conflicts: model ids the warehouse holds under more than one spec (the same id evaluated with different settings),
-- one row per (model, spec_hash): when that spec's units were first and last computed, how many units, in which
-- runs, and whether it is the spec `metrics` now shows for the model's newest unit. `metrics` keeps its rule (the
-- newest unit per task wins, whichever spec it came from); evalfarm run warns when a run touches such an id.
CREATE OR REPLACE VIEW conflicts AS
WITH computed AS (
    SELECT model, spec_hash, min(created_at) AS first_computed, max(created_at) AS last_computed,
           count(DISTINCT fingerprint) AS n_units, list(DISTINCT run_id ORDER BY run_id) AS runs
    FROM metrics_history
    GROUP BY model, spec_hash
),
specs AS (
    SELECT model, spec_hash, min(created_at) AS embedded_at, any_value(spec) AS spec
    FROM read_parquet('{root}/tables/models/**/*.parquet', union_by_name = true, hive_partitioning = false)
    WHERE model IS NOT NULL
    GROUP BY model, spec_hash
),
every AS (
    SELECT model, spec_hash, c.first_computed, c.last_computed, coalesce(c.n_units, 0) AS n_units, c.runs,
           s.embedded_at, s.spec
    FROM computed c FULL OUTER JOIN specs s USING (model, spec_hash)
),
newest AS (
    SELECT DISTINCT ON (model) model, spec_hash FROM metrics ORDER BY model, created_at DESC
)
SELECT e.model, e.spec_hash, e.first_computed, e.last_computed, e.n_units, e.runs, e.embedded_at,
       coalesce(n.spec_hash IS NOT NULL, false) AS in_metrics, e.spec
FROM every e
LEFT JOIN newest n ON n.model = e.model AND n.spec_hash = e.spec_hash
WHERE e.model IN (SELECT model FROM every GROUP BY model HAVING count(DISTINCT spec_hash) > 1)
ORDER BY e.model, coalesce(e.last_computed, e.embedded_at) DESC;
