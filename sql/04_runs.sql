-- runs: one row per run; a run with a start but no end event is 'running' (or was killed: see finished_at).

-- run_events: the start and end records of every run, as written.
CREATE OR REPLACE VIEW run_events AS
SELECT * FROM read_parquet('{root}/tables/runs/**/*.parquet', union_by_name = true, hive_partitioning = false);

CREATE OR REPLACE VIEW runs AS
SELECT s.run_id, s.at AS started_at, f.at AS finished_at, coalesce(f.status, 'running') AS status,
       s.catalog, f.n_units, f.n_failed, f.n_skipped, s.host, s.argv, s.code_version, s.provenance
FROM run_events s
LEFT JOIN run_events f ON f.run_id = s.run_id AND f.event = 'end'
WHERE s.event = 'start';
