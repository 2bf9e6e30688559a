"""The rank kernel against its float64 per-pair oracle (both backends), by hand, and its import rule.

The oracle (`rank_pairs_loop`) scores each pair's whole row in float64 straight from the definition. The kernel
must agree pair for pair on ranks *and* tie counts, with tiny blocks, background subsets, positives outside the
background, exact duplicates (ties), self pairs and repeated pairs, with and without other-positive filtering.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from evalfarm.scorers import rank_kernel
from evalfarm.scorers.rank_kernel import RankCounts, pick_device, rank_counts, rank_pairs, rank_pairs_loop

BACKENDS = ["numpy", "torch"]  # torch runs on the CPU here: the GPU code path, checked against the same oracle


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def _random_case(rng: np.random.Generator, sim: str):
    n, d = int(rng.integers(4, 90)), int(rng.integers(1, 7))
    if sim == "l2":  # small integers: exact arithmetic in float32, many ties
        emb = rng.integers(-2, 3, (n, d)).astype(np.float32)
    else:
        emb = rng.normal(size=(n, d)).astype(np.float32)
        dup = rng.integers(0, n, int(rng.integers(0, n // 2 + 1)))  # exact duplicates of random rows: exact ties
        emb[rng.integers(0, n, len(dup))] = emb[dup]
        emb[rng.integers(0, n, int(rng.integers(0, 3)))] = 0.0  # zero vectors: cosine 0 with everything
        emb = _normalise(emb)
    m = int(rng.integers(1, 60))
    q = rng.integers(0, n, m)
    p = np.where(rng.random(m) < 0.1, q, rng.integers(0, n, m))  # some self pairs
    if m > 2:
        q[-1], p[-1] = q[0], p[0]  # a repeated pair
    bg = np.sort(rng.choice(n, int(rng.integers(1, n + 1)), replace=False))  # positives may fall outside it
    return emb, q, p, bg


def _oracle(emb, q, p, bg, sim, filt):
    tied = np.empty(len(q), np.int64)
    ranks = rank_pairs_loop(emb, q, p, bg, sim, filter_other_positives=filt, tied_out=tied)
    return (ranks - 1).astype(np.int64), tied


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sim", ["cos", "l2"])
@pytest.mark.parametrize("filt", [False, True])
def test_counts_equal_the_float64_oracle_pair_for_pair(backend, sim, filt):
    rng = np.random.default_rng(11)
    for _ in range(25):
        emb, q, p, bg = _random_case(rng, sim)
        block_rows = int(rng.integers(1, 6)) if rng.random() < 0.7 else None  # many tiny blocks, or one
        got = rank_counts(emb, q, p, bg, sim, filter_other_positives=filt, backend=backend, block_rows=block_rows)
        above, tied = _oracle(emb, q, p, bg, sim, filt)
        np.testing.assert_array_equal(got.above, above)
        np.testing.assert_array_equal(got.tied, tied)


@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_l2_continuous_vectors_and_the_shifted_block_path_match_the_oracle(sim, monkeypatch):
    """l2 on real-valued vectors, folded into the GEMM or (whole-table backgrounds over the copy limit) shifted."""
    rng = np.random.default_rng(5)
    for limit in (1 << 40, 0):  # 0: every whole-table l2 background takes the per-block shift
        monkeypatch.setattr(rank_kernel, "L2_COPY_LIMIT_BYTES", limit)
        for _ in range(6):
            n, d = int(rng.integers(5, 80)), int(rng.integers(2, 40))
            emb = rng.normal(size=(n, d)).astype(np.float32) * 3
            emb[rng.integers(0, n, 5)] = emb[rng.integers(0, n, 5)]  # duplicates
            q, p = rng.integers(0, n, 40), rng.integers(0, n, 40)
            bg = np.arange(n)  # the whole table: cos uses emb itself, l2 the copy or the shift
            for backend in BACKENDS:
                got = rank_counts(emb, q, p, bg, sim, backend=backend, block_rows=7)
                above, tied = _oracle(emb, q, p, bg, sim, False)
                np.testing.assert_array_equal(got.above, above)
                np.testing.assert_array_equal(got.tied, tied)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_exact_duplicates_of_the_positive_tie_wherever_they_sit_in_a_wide_gemm(backend, sim):
    """d = 50, 3,000 columns: the GEMM's tiling must not give a duplicate column a different rounding."""
    rng = np.random.default_rng(2)
    emb = _normalise(rng.normal(size=(3000, 50)))
    y = 17
    copies = rng.choice(np.arange(100, 3000), 40, replace=False)  # every alignment / tile edge position
    emb[copies] = emb[y]
    q = np.arange(0, 64)
    q = q[q != y]
    p = np.full(len(q), y)
    got = rank_counts(emb, q, p, np.arange(3000), sim, backend=backend)
    assert (got.tied == 40).all()  # y itself never counts; each copy ties exactly
    above, tied = _oracle(emb, q, p, np.arange(3000), sim, False)
    np.testing.assert_array_equal(got.above, above)
    np.testing.assert_array_equal(got.tied, tied)


def test_counts_by_hand_and_the_three_tie_policies_from_them():
    # Unit vectors in 2-D with exact cosines to x = (1, 0): y 0.6, a copy of y, closer 0.8, orthogonal 0, x again.
    emb = np.array([[1, 0], [0.6, 0.8], [0.6, 0.8], [0.8, 0.6], [0, 1], [1, 0]], np.float32)
    c = rank_counts(emb, np.array([0]), np.array([1]), np.arange(6), "cos")
    # above: closer (0.8) and x's duplicate (1.0); x itself is excluded. tied: y's copy; y itself excluded.
    assert (c.above.tolist(), c.tied.tolist()) == ([2], [1])
    assert c.score[0] == pytest.approx(0.6)
    assert c.ranks("optimistic").tolist() == [3.0]
    assert c.ranks("pessimistic").tolist() == [4.0]
    assert c.ranks("realistic").tolist() == [3.5]
    with pytest.raises(ValueError, match="tie policy"):
        c.ranks("random")  # type: ignore[arg-type]


def test_scores_are_cosine_and_one_over_one_plus_distance():
    emb = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0], [6.0, 8.0]], np.float32)
    c = rank_counts(emb, np.array([0, 1, 1]), np.array([1, 3, 1]), np.arange(4), "l2")
    np.testing.assert_allclose(c.score, [1 / 6, 1 / 6, 1.0], rtol=1e-6)
    u = _normalise(emb[1:])
    c = rank_counts(u, np.array([0, 1]), np.array([1, 2]), np.arange(3), "cos")
    np.testing.assert_allclose(c.score, [0.6, 0.6], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_positives_filtered_on_request_and_positive_outside_background_never_counted(backend):
    emb = np.array([[1, 0], [0.6, 0.8], [0.8, 0.6], [0, 1]], np.float32)
    q, p = np.array([0, 0]), np.array([1, 2])  # x has two positives; the second outranks the first
    assert rank_counts(emb, q, p, np.arange(4), "cos", backend=backend).above.tolist() == [1, 0]
    c = rank_counts(emb, q, p, np.arange(4), "cos", filter_other_positives=True, backend=backend)
    assert c.above.tolist() == [0, 0]
    c = rank_counts(emb, np.array([0]), np.array([1]), np.array([0, 3]), "cos", backend=backend)
    assert (c.above.tolist(), c.tied.tolist()) == ([0], [0]) and c.score[0] == pytest.approx(0.6)


def test_rank_pairs_is_the_tie_policy_view_of_the_counts():
    rng = np.random.default_rng(3)
    emb = rng.integers(-1, 2, (40, 3)).astype(np.float32)
    q, p = rng.integers(0, 40, 30), rng.integers(0, 40, 30)
    c = rank_counts(emb, q, p, np.arange(40), "l2")
    for ties in ("optimistic", "pessimistic", "realistic"):
        tied = np.zeros(30, np.int64)
        ranks, scores = rank_pairs(emb, q, p, np.arange(40), "l2", ties=ties, tied_out=tied)
        np.testing.assert_array_equal(ranks, c.ranks(ties))
        np.testing.assert_array_equal(ranks, rank_pairs_loop(emb, q, p, np.arange(40), "l2", ties=ties))
        np.testing.assert_array_equal(tied, c.tied)
        np.testing.assert_array_equal(scores, c.score)


def test_kept_work_buffers_never_leak_between_calls_of_different_shapes():
    rng = np.random.default_rng(8)
    big = _normalise(rng.normal(size=(500, 20)))
    small = _normalise(rng.normal(size=(30, 3)))
    q, p = rng.integers(0, 500, 200), rng.integers(0, 500, 200)
    first = rank_counts(big, q, p, np.arange(500), "l2", block_rows=64)
    rank_counts(small, q[:10] % 30, p[:10] % 30, np.arange(30), "cos")  # smaller views of the same buffers
    again = rank_counts(big, q, p, np.arange(500), "l2", block_rows=64)
    rank_kernel.release_workspace()
    fresh = rank_counts(big, q, p, np.arange(500), "l2", block_rows=64)
    for c in (again, fresh):
        np.testing.assert_array_equal(c.above, first.above)
        np.testing.assert_array_equal(c.tied, first.tied)
        np.testing.assert_array_equal(c.score, first.score)
    assert not np.shares_memory(first.above, again.above)  # results are never views of the workspace


def test_empty_input_and_bad_ids_fail_with_what_to_fix():
    emb = np.eye(3, dtype=np.float32)
    empty = rank_counts(emb, np.array([], np.int64), np.array([], np.int64), np.arange(3), "cos")
    assert isinstance(empty, RankCounts) and len(empty.above) == 0
    with pytest.raises(ValueError, match="background: item ids must be unique"):
        rank_counts(emb, np.array([0]), np.array([1]), np.array([0, 2, 2]), "cos")
    with pytest.raises(ValueError, match=r"positives: item ids must lie in \[0, 3\)"):
        rank_counts(emb, np.array([0]), np.array([3]), np.arange(3), "cos")
    with pytest.raises(ValueError, match="unknown similarity"):
        rank_counts(emb, np.array([0]), np.array([1]), np.arange(3), "dot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="runs on the CPU only"):
        rank_counts(emb, np.array([0]), np.array([1]), np.arange(3), "cos", device="cuda", backend="numpy")


def test_cpu_path_never_imports_torch_and_the_device_rule():
    code = (
        "import sys, numpy as np\n"
        "from evalfarm.scorers.rank_kernel import pick_device, rank_counts\n"
        "e = np.eye(4, dtype=np.float32)\n"
        "rank_counts(e, np.array([0, 1]), np.array([1, 2]), np.arange(4), 'l2')\n"
        "assert pick_device() == 'cpu'\n"
        "assert 'torch' not in sys.modules, 'the CPU rank path imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert pick_device("cuda:1") == "cuda:1"  # an explicit device always wins


def test_asking_for_cuda_without_one_says_what_to_do():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="pass device='cpu'"):
        rank_counts(np.eye(3, dtype=np.float32), np.array([0]), np.array([1]), np.arange(3), "cos", device="cuda")
