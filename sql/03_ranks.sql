-- ranks: per-pair ranks of the current results, for error analysis (which pairs a model gets wrong).
CREATE OR REPLACE VIEW ranks_history AS
SELECT run_id, model, pool, similarity, query_id, positive_id, query, positive, rank, score, tied, oov, fingerprint
FROM read_parquet('{root}/tables/ranks/**/*.parquet', union_by_name = true, hive_partitioning = false);

CREATE OR REPLACE VIEW ranks AS
SELECT r.model, r.pool, r.similarity, r.query, r.positive, r.rank, r.score, r.tied, r.oov, r.query_id, r.positive_id,
       r.run_id
FROM ranks_history r
SEMI JOIN (SELECT DISTINCT fingerprint FROM metrics) m ON r.fingerprint = m.fingerprint;
