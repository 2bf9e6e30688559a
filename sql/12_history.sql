-- run_points: each run and the time its state is read at (`as_of`): its end, or for a run still going (or one that
-- was killed) its newest computed value, or its start. The history views place every value at the time it was
-- computed (`created_at`); `evalfarm sql --as-of RUN_ID` reads the tables' snapshots instead (docs/user-guide.md).
CREATE OR REPLACE VIEW run_points AS
SELECT r.run_id, r.started_at, r.finished_at, r.status,
       coalesce(r.finished_at, greatest(r.started_at, c.newest), r.started_at) AS as_of
FROM runs r
LEFT JOIN (SELECT run_id, max(created_at) AS newest FROM metrics_history GROUP BY run_id) c USING (run_id);

-- history_of(models, tasks, runs): the `history` view's rows of those models, tasks and runs only (each a list of
-- ids, or NULL: every one), computed for them alone: `FROM history_of(models := ['glove-6b-50d'])` reads one model's
-- computations, where `FROM history WHERE model = …` builds every model's grid first and filters it after.
-- `run_diff` reads it with its two runs. A run's as_of stays the one `run_points` gives (all of the run's values).
CREATE OR REPLACE MACRO history_of(models := NULL, tasks := NULL, runs := NULL) AS TABLE
WITH points AS (
    SELECT run_id, as_of FROM run_points WHERE runs IS NULL OR list_contains(runs, run_id)
),
rows_of AS (
    SELECT * FROM metrics_history
    WHERE (models IS NULL OR list_contains(models, model)) AND (tasks IS NULL OR list_contains(tasks, task))
),
computations AS (
    SELECT DISTINCT model, task, scorer, coalesce(subset, '') AS subset_key, coalesce(variant, '') AS variant_key,
           fingerprint, run_id AS computed_by, created_at
    FROM rows_of
),
grid AS (
    SELECT p.run_id, p.as_of, g.model, g.task, g.scorer, g.subset_key, g.variant_key
    FROM points p
    CROSS JOIN (SELECT DISTINCT model, task, scorer, subset_key, variant_key FROM computations) g
),
current AS (
    SELECT g.run_id, g.as_of, c.model, c.task, c.scorer, c.subset_key, c.variant_key, c.fingerprint, c.computed_by,
           c.created_at
    FROM grid g
    ASOF JOIN computations c
        ON g.model = c.model AND g.task = c.task AND g.scorer = c.scorer AND g.subset_key = c.subset_key
       AND g.variant_key = c.variant_key AND g.as_of >= c.created_at
)
SELECT cu.run_id, cu.as_of, m.model, m.task, m.scorer, m.subset, m.variant, m.ties, m.metric, m.value, m.is_primary,
       m.higher_is_better, m.fingerprint, m.spec_hash, m.task_checksum, m.scorer_version, m.params,
       cu.computed_by, m.created_at, m.degenerate, m.thin
FROM current cu
JOIN rows_of m
    ON m.model = cu.model AND m.task = cu.task AND m.scorer = cu.scorer
   AND coalesce(m.subset, '') = cu.subset_key AND coalesce(m.variant, '') = cu.variant_key
   AND m.fingerprint = cu.fingerprint AND m.run_id = cu.computed_by AND m.created_at = cu.created_at;

-- history: every value of every (model, task, scorer, subset, variant, ties, metric) in every run's state: the
-- newest computation of its unit (a unit's rows for one scorer, subset and variant) computed by the run's `as_of`,
-- whether that run computed it (computed_by = run_id) or an earlier one did (the run skipped it: same fingerprint).
-- One row per run and value. To read one line of it, ask the table macro history_of: `FROM history_of(models :=
-- ['…'])`, or `runs := ['…']`, `tasks := ['…']`, costs what it returns; a WHERE on this view builds every line first.
CREATE OR REPLACE VIEW history AS
SELECT * FROM history_of();

-- changes: each value as it moved, in the order it was computed: a value no earlier computation of its
-- (model, task, scorer, subset, variant, ties, metric) had, or another number than the one before it. `reason`: new
-- model (a value of the run that first computed its model), new (a task or metric the model did not have), spec changed (the model's spec
-- hash), data changed (the task's data checksum), scorer version changed, parameters changed (the scorer's
-- parameters), fingerprint changed (another input of the unit's fingerprint: an embed or code version), or
-- nondeterminism (the same fingerprint computed again gave another number: `evalfarm diff` exits 1 on these).
CREATE OR REPLACE VIEW changes AS
WITH seq AS (
    SELECT m.*,
           lag(value) OVER w AS previous_value, lag(run_id) OVER w AS previous_run_id,
           lag(fingerprint) OVER w AS previous_fingerprint, lag(spec_hash) OVER w AS previous_spec_hash,
           lag(task_checksum) OVER w AS previous_task_checksum, lag(scorer_version) OVER w AS previous_scorer_version,
           lag(params) OVER w AS previous_params,
           first_value(run_id) OVER (PARTITION BY model ORDER BY created_at, run_id) AS model_first_run
    FROM metrics_history m
    WINDOW w AS (PARTITION BY model, task, scorer, coalesce(subset, ''), coalesce(variant, ''), coalesce(ties, ''),
                 metric ORDER BY created_at, run_id)
)
SELECT run_id, created_at, model, task, scorer, subset, variant, ties, metric, previous_value, value,
       value - previous_value AS change, previous_run_id, previous_fingerprint, fingerprint,
       CASE
           WHEN previous_run_id IS NULL AND run_id = model_first_run THEN 'new model'
           WHEN previous_run_id IS NULL THEN 'new'
           WHEN spec_hash IS DISTINCT FROM previous_spec_hash THEN 'spec changed'
           WHEN task_checksum IS DISTINCT FROM previous_task_checksum THEN 'data changed'
           WHEN scorer_version IS DISTINCT FROM previous_scorer_version THEN 'scorer version changed'
           WHEN params IS DISTINCT FROM previous_params THEN 'parameters changed'
           WHEN fingerprint IS DISTINCT FROM previous_fingerprint THEN 'fingerprint changed'
           ELSE 'nondeterminism'
       END AS reason
FROM seq
WHERE previous_run_id IS NULL OR value IS DISTINCT FROM previous_value;

-- run_diff(run_a, run_b): what differs between two runs' states (the `history` view's rows of each): one row per
-- value that is new in run_b, gone from it, of another number, or computed under another fingerprint, with
-- value_a, value_b, change, both fingerprints, the runs that computed each, and the reason (as in `changes`, plus
-- `removed`). `evalfarm diff RUN_A RUN_B` prints it (and leaves out moves below its --tolerance). Built for the
-- models computed between the two runs' states only (history_of): what it costs is what moved, and one pass over
-- the history's times.
CREATE OR REPLACE MACRO run_diff(run_a, run_b) AS TABLE
WITH points AS (SELECT min(as_of) AS lo, max(as_of) AS hi FROM run_points WHERE run_id IN (run_a, run_b)),
moved AS (  -- the models computed between the two runs' states: no other model's values can differ between them
    SELECT coalesce(list(DISTINCT m.model), []) AS models
    FROM metrics_history m, points p
    WHERE m.created_at > p.lo AND m.created_at <= p.hi
),
both_runs AS (SELECT * FROM history_of(models := (SELECT models FROM moved), runs := [run_a, run_b])),
a AS (SELECT * FROM both_runs WHERE run_id = run_a),
b AS (SELECT * FROM both_runs WHERE run_id = run_b),
joined AS (
    SELECT coalesce(b.model, a.model) AS model, coalesce(b.task, a.task) AS task,
           coalesce(b.scorer, a.scorer) AS scorer, coalesce(b.subset, a.subset) AS subset,
           coalesce(b.variant, a.variant) AS variant, coalesce(b.ties, a.ties) AS ties,
           coalesce(b.metric, a.metric) AS metric, a.value AS value_a, b.value AS value_b,
           b.value - a.value AS change, a.fingerprint AS fingerprint_a, b.fingerprint AS fingerprint_b,
           a.computed_by AS computed_by_a, b.computed_by AS computed_by_b, coalesce(b.is_primary, a.is_primary) AS is_primary,
           a.model IS NULL AS only_b, b.model IS NULL AS only_a,
           a.spec_hash AS spec_a, b.spec_hash AS spec_b, a.task_checksum AS data_a, b.task_checksum AS data_b,
           a.scorer_version AS version_a, b.scorer_version AS version_b, a.params AS params_a, b.params AS params_b
    FROM a FULL OUTER JOIN b
        ON a.model = b.model AND a.task = b.task AND a.scorer = b.scorer
       AND coalesce(a.subset, '') = coalesce(b.subset, '') AND coalesce(a.variant, '') = coalesce(b.variant, '')
       AND coalesce(a.ties, '') = coalesce(b.ties, '') AND a.metric = b.metric
)
SELECT model, task, scorer, subset, variant, ties, metric, is_primary, value_a, value_b, change, fingerprint_a,
       fingerprint_b, computed_by_a, computed_by_b,
       CASE
           WHEN only_b AND model NOT IN (SELECT model FROM a) THEN 'new model'
           WHEN only_b THEN 'new'
           WHEN only_a THEN 'removed'
           WHEN spec_b IS DISTINCT FROM spec_a THEN 'spec changed'
           WHEN data_b IS DISTINCT FROM data_a THEN 'data changed'
           WHEN version_b IS DISTINCT FROM version_a THEN 'scorer version changed'
           WHEN params_b IS DISTINCT FROM params_a THEN 'parameters changed'
           WHEN fingerprint_b IS DISTINCT FROM fingerprint_a THEN 'fingerprint changed'
           WHEN value_b IS DISTINCT FROM value_a THEN 'nondeterminism'
           ELSE 'same'
       END AS reason
FROM joined
WHERE only_a OR only_b OR value_a IS DISTINCT FROM value_b OR fingerprint_a IS DISTINCT FROM fingerprint_b;
