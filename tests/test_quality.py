"""The degenerate-model check (evalfarm.quality) on hand-made matrices whose figures are known by construction."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalfarm.quality import MAX_RANK_ROWS, THRESHOLDS, Thresholds, assess, numerical_rank


def test_figures_of_a_small_matrix_counted_by_hand() -> None:
    # 8 texts: rows 0-5 have vectors, of which rows 1 and 4 repeat row 0 (3 of 6 repeat: 1 - 4 distinct / 6),
    # rows 6 and 7 are OOV (their values must be ignored); the distinct rows span 3 dimensions of 4.
    a, b, c = [1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0]
    emb = np.array([a, a, b, c, a, [1.0, 2.0, 3.0, 0], [9, 9, 9, 9], [7, 7, 7, 7]], dtype=np.float32)
    oov = np.array([0, 0, 0, 0, 0, 0, 1, 1], dtype=bool)
    q = assess(emb, oov)
    assert (q.n_texts, q.n_vectors, q.dim) == (8, 6, 4)
    assert q.oov_rate == pytest.approx(2 / 8)
    assert q.duplicate_rate == pytest.approx(1 - 4 / 6)
    assert q.numerical_rank == 3 and q.rank_ratio == pytest.approx(3 / 4)
    assert not q.degenerate and q.reason is None


def test_all_oov_is_degenerate_by_oov_rate() -> None:
    q = assess(np.zeros((5, 3), np.float32), np.ones(5, bool))
    assert q.oov_rate == 1.0 and q.n_vectors == 0 and q.numerical_rank == 0
    assert q.reasons == [
        "oov_rate 1.000 > 0.9: 0 of 5 texts have a vector (OOV texts all get one fill vector and tie)"
    ]


def test_identical_vectors_have_rank_one_and_repeat() -> None:
    emb = np.tile(np.array([[0.5, -1.0, 2.0]], np.float32), (100, 1))
    q = assess(emb, np.zeros(100, bool))
    assert q.duplicate_rate == pytest.approx(0.99) and q.numerical_rank == 1
    assert [r.split(" ", 1)[0] for r in q.reasons] == ["duplicate_rate", "numerical"]


def test_vectors_that_differ_by_float32_noise_around_one_direction_have_rank_one() -> None:
    rng = np.random.default_rng(0)
    c = rng.standard_normal(50)
    emb = (c * (1 + rng.integers(-4, 5, (300, 50)) * 2e-7)).astype(np.float32)
    assert len(np.unique(emb, axis=0)) == 300  # all distinct, yet one direction
    q = assess(emb, np.zeros(300, bool))
    assert q.duplicate_rate == 0.0 and q.numerical_rank == 1 and q.degenerate
    # variation far above float32 noise (1e-2 of the common vector's scale) is a model, however poor: full rank
    emb = (c + rng.standard_normal((300, 50)) * 1e-2).astype(np.float32)
    assert assess(emb, np.zeros(300, bool)).numerical_rank == 50


def test_rank_threshold_is_relative_with_a_floor_of_two() -> None:
    rng = np.random.default_rng(1)
    basis = rng.standard_normal((5, 100))
    emb = (rng.standard_normal((400, 5)) @ basis).astype(np.float32)  # rank 5 of at most 100
    q = assess(emb, np.zeros(400, bool))
    assert q.numerical_rank == 5 and q.rank_ratio == pytest.approx(0.05) and q.degenerate  # 5 < 0.1 x 100
    assert not assess(emb, np.zeros(400, bool), Thresholds(min_rank_ratio=0.05)).degenerate
    # dim 8, rank 1: the ratio 1/8 passes 0.1, the floor of 2 does not
    small = np.outer(rng.standard_normal(30), rng.standard_normal(8)).astype(np.float32)
    assert assess(small, np.zeros(30, bool)).reasons[0].startswith("numerical rank 1 of at most 8")


def test_numerical_rank_matches_numpy_on_full_and_deficient_matrices() -> None:
    rng = np.random.default_rng(2)
    for rows, dim, true_rank in [(50, 20, 20), (20, 50, 20), (60, 30, 7)]:
        m = (rng.standard_normal((rows, true_rank)) @ rng.standard_normal((true_rank, dim))).astype(np.float32)
        assert numerical_rank(m) == true_rank == np.linalg.matrix_rank(m)
    assert numerical_rank(np.zeros((4, 3))) == 0


def test_rank_is_computed_on_an_even_sample_of_at_most_max_rank_rows() -> None:
    """The rows of the even sample (``MAX_RANK_ROWS`` of them, evenly spaced) span 2 dimensions, every other row is
    random in 16: the rank is the sample's, so a check that read every row (or another sample) would say 16."""
    rng = np.random.default_rng(3)
    n = MAX_RANK_ROWS * 3
    emb = rng.standard_normal((n, 16)).astype(np.float32)
    sampled = np.linspace(0, n - 1, MAX_RANK_ROWS).astype(np.int64)
    emb[sampled] = (rng.standard_normal((MAX_RANK_ROWS, 2)) @ rng.standard_normal((2, 16))).astype(np.float32)
    assert numerical_rank(emb) == 16  # the whole table has full rank
    q = assess(emb, np.zeros(n, bool))
    assert q.numerical_rank == 2 and q.rank_ratio == pytest.approx(2 / 16) and q.n_vectors == n
    # at most MAX_RANK_ROWS rows: every row counts (the same low-rank rows, now the whole table, then one more row)
    small = emb[sampled]
    assert assess(small, np.zeros(len(small), bool)).numerical_rank == 2
    assert assess(np.vstack([small[:-1], emb[1:2]]), np.zeros(len(small), bool)).numerical_rank == 3


def test_quality_table_row_carries_the_thresholds() -> None:
    q = assess(np.zeros((3, 2), np.float32), np.ones(3, bool))
    row = q.table().to_pylist()[0]
    assert row["degenerate"] and row["reason"].startswith("oov_rate")
    assert json.loads(row["thresholds"]) == {"max_duplicate_rate": 0.95, "max_oov_rate": 0.9, "min_rank_ratio": 0.1}
    assert THRESHOLDS == Thresholds()
