-- leaderboard: every task, one row per (task, scorer, subset, variant, ties, model): each scorer's primary metric,
-- best first by the metric's declared direction (metric_info; evalfarm/metrics.py). Rank metrics carry their tie
-- policy in `ties` (`tie_policies`); numbers computed under different policies are never in one partition. Filter
-- on `ties`, e.g. WHERE ties IS NULL OR ties = board_ties() (realistic, the boards' policy; paper_ties():
-- optimistic, the paper's toolkit's).
-- ci_low, ci_high: the value's 95 % confidence interval where it is a correlation (word similarity, STS), else null.
-- Degenerate units (metrics.degenerate: vectors all OOV, nearly all identical, rank ~1) and thin ones (metrics.thin:
-- too few pairs scored, too many OOV, nearly all ties, by the scorer's declared bounds) are left out: see
-- leaderboard_all.
CREATE OR REPLACE VIEW leaderboard AS
SELECT task, scorer, subset, variant, ties,
       rank() OVER (
           PARTITION BY task, scorer, subset, variant, ties
           ORDER BY CASE WHEN metric_higher_is_better(scorer, metric, higher_is_better) THEN value ELSE -value END
               DESC NULLS LAST
       ) AS position,
       model, metric, value, ci_low, ci_high
FROM metrics
WHERE is_primary AND NOT degenerate AND NOT thin
ORDER BY task, scorer, subset, variant, ties, position, model;

-- leaderboard_all: the leaderboard with degenerate and thin units ranked among the others, flagged (degenerate,
-- degenerate_reason, thin, thin_reason): their numbers are artefacts of ties or of a handful of data, not quality.
CREATE OR REPLACE VIEW leaderboard_all AS
SELECT task, scorer, subset, variant, ties,
       rank() OVER (
           PARTITION BY task, scorer, subset, variant, ties
           ORDER BY CASE WHEN metric_higher_is_better(scorer, metric, higher_is_better) THEN value ELSE -value END
               DESC NULLS LAST
       ) AS position,
       model, metric, value, degenerate, degenerate_reason, thin, thin_reason, ci_low, ci_high
FROM metrics
WHERE is_primary
ORDER BY task, scorer, subset, variant, ties, position, model;

-- board_choice(lb): board_variants' rule over the relation named lb (leaderboard rows): `board_variants` over the
-- leaderboard, `board` over the leaderboard it computes once for both.
CREATE OR REPLACE MACRO board_choice(lb) AS TABLE
WITH present AS (
    SELECT task, scorer, variant, count(DISTINCT model) AS n_models
    FROM query_table(lb)
    GROUP BY task, scorer, variant
),
ordered AS (
    SELECT *, scorer_role(scorer) = 'downstream' AND variant LIKE 'max_train=%' AS sample,
           row_number() OVER (
               PARTITION BY task, scorer
               ORDER BY CASE WHEN variant IN ('full', 'cos') THEN 0 WHEN variant LIKE 'max_train=%' THEN 2 ELSE 1 END,
                        variant
           ) AS choice
    FROM present
)
SELECT task, scorer, variant, sample, n_models, choice = 1 AS on_board
FROM ordered
ORDER BY task, scorer, choice;

-- board_variants: the variant each task's board ranks by (on_board), declared once here and used by the `board` view,
-- the report's boards and its Figure 4. Downstream: `full` (SentEval's protocol on the full training data, the
-- default); a `--quick-downstream` sample (`max_train=N`, sample = true) only where the task has no full-data number,
-- and then labelled a sample. EvalRank: `cos` (the paper's; `l2` and the no-center / filter-other-positives variants
-- are other boards). Any other scorer: its variants in name order, the first one (e.g. evalrank-word before raw).
-- n_models: models with a number under that variant; the variants not on the board stay in `leaderboard`.
CREATE OR REPLACE VIEW board_variants AS
SELECT * FROM board_choice('leaderboard');

-- board: one board per task, never two variants or tie policies mixed: the leaderboard under the task's board variant
-- (board_variants.on_board) and, for rank metrics, the boards' tie policy `board_ties()`: realistic, the expected
-- rank when ties are broken at random (optimistic ties reward models whose vectors collide, e.g. a pruned word table
-- or OOV words under l2; results.md). The same policy as each unit's line in a run and the report's boards.
-- sample: the board is the --quick-downstream sample (the task has no full-data number). What the report shows.
CREATE OR REPLACE VIEW board AS
WITH lb AS MATERIALIZED (SELECT * FROM leaderboard)
SELECT l.task, l.scorer, l.subset, l.variant, l.ties, l.position, l.model, l.metric, l.value, l.ci_low, l.ci_high,
       v.sample
FROM lb l
JOIN board_choice('lb') v USING (task, scorer, variant)
WHERE v.on_board AND (l.ties IS NULL OR l.ties = board_ties())
ORDER BY l.task, l.subset, l.position, l.model;
