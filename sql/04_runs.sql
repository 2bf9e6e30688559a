-- run_events: the raw start and end events of every run, one row each (argv, host, provenance, counts).
CREATE OR REPLACE VIEW run_events AS
SELECT * FROM read_parquet('{root}/tables/runs/**/*.parquet', union_by_name = true, hive_partitioning = false);

-- runs: one row per run; a run with a start but no end event is 'running' (or was killed: see finished_at). The end
-- event says how it ended: ok, failed (some units failed), or interrupted (Ctrl-C, its Ray head lost: `reason`);
-- n_done units computed by the run, n_skipped already in the warehouse (or computed meanwhile by a concurrent run),
-- n_failed failed, and n_units - n_done - n_skipped - n_failed not computed (rerun the same command to resume).
-- provenance: the start event's (JSON: versions, git commit, the driver's device, Ray job, catalog as given), and
-- once the run ended the end event's, which adds `workers`: each worker's name, node, host, pid and device (the
-- CPU, GPUs and driver of the machine that embedded and scored, not the head's). summary: the end event's JSON
-- summary (counts, failures with their first line, degenerate and thin units, wall time, the slowest unit, `moved`:
-- what changed since the previous run), what `evalfarm run` prints at its end and `--notify` receives.
CREATE OR REPLACE VIEW runs AS
SELECT s.run_id, s.at AS started_at, f.at AS finished_at, coalesce(f.status, 'running') AS status,
       s.catalog, f.n_units, f.n_done, f.n_failed, f.n_skipped, f.reason, s.host, s.argv, s.code_version,
       coalesce(f.provenance, s.provenance) AS provenance, f.summary
FROM run_events s
LEFT JOIN run_events f ON f.run_id = s.run_id AND f.event = 'end'
WHERE s.event = 'start';
