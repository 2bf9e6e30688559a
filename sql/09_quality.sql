-- quality: what the degenerate-model check measured on each current unit's stored vectors (the computation whose
-- metrics are current: its fingerprint and run) (evalfarm/quality.py):
-- oov_rate, duplicate_rate (texts whose vector repeats another's), numerical_rank and rank_ratio, and whether the
-- unit is degenerate (then left off the leaderboard) with the reason and the thresholds it was judged by.
CREATE OR REPLACE VIEW quality AS
SELECT q.model, q.task, q.degenerate, q.reason, q.oov_rate, q.duplicate_rate, q.numerical_rank, q.rank_ratio,
       q.n_texts, q.n_vectors, q.dim, q.thresholds, q.run_id, q.fingerprint
FROM read_parquet('{root}/tables/quality/**/*.parquet', union_by_name = true, hive_partitioning = false) q
SEMI JOIN (SELECT DISTINCT fingerprint, run_id FROM metrics) m ON q.fingerprint = m.fingerprint AND q.run_id IS NOT DISTINCT FROM m.run_id;
