"""Top-k neighbours: the FAISS search and the rank kernel's fused selection against a float64 brute force; the
numpy fallback (no FAISS installed) against FAISS."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from evalfarm.scorers import neighbours
from evalfarm.scorers.neighbours import top_neighbours
from evalfarm.scorers.rank_kernel import rank_counts


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _brute(emb, queries, background, k, sim):
    """float64 scores of every background item, the query itself removed, (score desc, id asc), first k."""
    e = emb.astype(np.float64)
    ids, scores = [], []
    for x in queries:
        if sim == "cos":
            s = e[background] @ e[x]
        else:
            s = 1.0 / (1.0 + np.linalg.norm(e[background] - e[x], axis=1))
        keep = background != x
        b, s = background[keep], s[keep]
        order = np.lexsort((b, -s))[:k]
        ids.append(np.r_[b[order], np.full(k - len(order), -1)])
        scores.append(np.r_[s[order], np.full(k - len(order), np.nan)])
    return np.array(ids, np.int64), np.array(scores)


def _case(seed, sim, n=300, d=16):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, d)).astype(np.float32)
    if sim == "cos":
        emb = _normalise(emb)
    background = np.sort(rng.choice(n, 250, replace=False))
    queries = rng.choice(n, 40, replace=False)  # some outside the background
    return emb, queries, background


@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_faiss_search_equals_brute_force_and_never_returns_the_query(sim):
    emb, queries, background = _case(1, sim)
    ids, scores = top_neighbours(emb, queries, background, k=10, similarity=sim)
    want_ids, want_scores = _brute(emb, queries, background, 10, sim)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-5)
    assert not (ids == queries[:, None]).any()
    assert ids.dtype == np.int64 and scores.dtype == np.float32


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_rank_kernel_fused_selection_equals_the_faiss_search(sim, backend):
    emb, queries, background = _case(2, sim)
    positives = np.roll(queries, 1)
    got = rank_counts(emb, queries, positives, background, sim, neighbours=7, backend=backend, block_rows=9).neighbours
    assert got is not None
    order = np.argsort(got.queries)
    ids, scores = top_neighbours(emb, np.sort(np.unique(queries)), background, k=7, similarity=sim)
    np.testing.assert_array_equal(got.ids[order], ids)
    np.testing.assert_allclose(got.scores[order], scores, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_exact_duplicates_of_the_query_are_its_first_neighbours_and_the_query_is_not(sim):
    rng = np.random.default_rng(4)
    emb = _normalise(rng.normal(size=(200, 8)))
    x, copies = 5, [40, 90, 150]
    emb[copies] = emb[x]
    want = [40, 90, 150]  # score 1 (cos) / 1 (l2, distance 0), ids ascending
    ids, scores = top_neighbours(emb, np.array([x]), np.arange(200), k=5, similarity=sim)
    assert ids[0, :3].tolist() == want and x not in ids[0]
    np.testing.assert_allclose(scores[0, :3], 1.0, rtol=1e-6)
    fused = rank_counts(emb, np.array([x]), np.array([7]), np.arange(200), sim, neighbours=5).neighbours
    np.testing.assert_array_equal(fused.ids, ids)  # the kernel's shared column expands to the three copies
    np.testing.assert_allclose(fused.scores, scores, rtol=1e-5)


def test_small_background_pads_with_minus_one_and_nan():
    emb = _normalise(np.random.default_rng(0).normal(size=(4, 3)))
    ids, scores = top_neighbours(emb, np.array([0]), np.array([0, 1, 2]), k=4, similarity="cos")
    assert ids[0, 2:].tolist() == [-1, -1] and np.isnan(scores[0, 2:]).all()
    assert sorted(ids[0, :2].tolist()) == [1, 2]
    fused = rank_counts(emb, np.array([0]), np.array([3]), np.array([0, 1, 2]), "cos", neighbours=4).neighbours
    np.testing.assert_array_equal(fused.ids, ids)


def test_gpu_asked_for_without_a_gpu_build_says_what_to_install():
    import faiss

    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a FAISS GPU is present")
    emb = np.eye(3, dtype=np.float32)
    with pytest.raises(RuntimeError, match="faiss-gpu-cu12"):
        top_neighbours(emb, np.array([0]), np.arange(3), k=1, similarity="cos", device="cuda")


# ---- without FAISS (a base install: neither the `cpu` nor the `gpu` extra) -----------------------------------------
@pytest.fixture
def no_faiss(monkeypatch):
    """`import faiss` raises ImportError, as where faiss-cpu / faiss-gpu-cu12 are not installed."""
    monkeypatch.setitem(sys.modules, "faiss", None)


def test_the_neighbours_module_imports_and_searches_without_faiss(no_faiss, monkeypatch):
    with pytest.raises(ImportError):
        import faiss  # noqa: F401
    monkeypatch.delitem(sys.modules, "evalfarm.scorers.neighbours")
    fresh = importlib.import_module("evalfarm.scorers.neighbours")
    assert fresh._import_faiss() is None and not fresh.faiss_has_gpu(None)
    emb = _normalise(np.random.default_rng(3).normal(size=(30, 4)))
    ids, _ = fresh.top_neighbours(emb, np.arange(5), np.arange(30), k=3, similarity="cos")
    assert ids.shape == (5, 3) and not (ids == np.arange(5)[:, None]).any()
    with pytest.raises(RuntimeError, match="faiss-gpu-cu12"):
        fresh.top_neighbours(emb, np.arange(5), np.arange(30), k=3, similarity="cos", device="cuda")


@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_numpy_fallback_search_equals_faiss(sim, monkeypatch):
    emb, queries, background = _case(5, sim)
    want_ids, want_scores = top_neighbours(emb, queries, background, k=10, similarity=sim)
    monkeypatch.setattr(neighbours, "NUMPY_BLOCK_BYTES", 4 * len(background) * 7)  # blocks of 7 query rows
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert neighbours._import_faiss() is None
    ids, scores = top_neighbours(emb, queries, background, k=10, similarity=sim)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    b_ids, b_scores = _brute(emb, queries, background, 10, sim)
    np.testing.assert_array_equal(ids, b_ids)


@pytest.mark.parametrize("sim", ["cos", "l2"])
def test_fused_selection_without_faiss_equals_the_faiss_heaps(sim, monkeypatch):
    emb, queries, background = _case(6, sim)
    emb[background[:3]] = emb[background[3]]  # a column shared by four items
    positives = np.roll(queries, 1)
    args = (emb, queries, positives, background, sim)
    want = rank_counts(*args, neighbours=7, backend="numpy", block_rows=9)
    monkeypatch.setitem(sys.modules, "faiss", None)
    got = rank_counts(*args, neighbours=7, backend="numpy", block_rows=9)
    np.testing.assert_array_equal(got.neighbours.queries, want.neighbours.queries)
    np.testing.assert_array_equal(got.neighbours.ids, want.neighbours.ids)
    np.testing.assert_allclose(got.neighbours.scores, want.neighbours.scores, rtol=1e-6)


def test_hubness_without_faiss_equals_faiss(monkeypatch):
    from evalfarm.scorers.geometry import hubness

    u = _normalise(np.random.default_rng(7).normal(size=(120, 6)))
    want = hubness(u, 5)
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert hubness(u, 5) == pytest.approx(want, rel=1e-12)
    assert hubness(u, 5, device="cuda") == pytest.approx(want, rel=1e-12)  # no FAISS GPU: searched on the CPU


def test_a_gpu_build_gets_the_search_on_gpu_0_unless_told_otherwise(monkeypatch):
    """Routing only (a fake GPU build around faiss-cpu's flat indexes): not said -> GPU 0, cuda:1 -> 1, cpu -> none."""
    import types

    import faiss

    moved: list[int] = []

    def to_gpu(resources, gpu, index):
        moved.append(gpu)
        return index

    fake = types.SimpleNamespace(
        IndexFlatIP=faiss.IndexFlatIP,
        IndexFlatL2=faiss.IndexFlatL2,
        StandardGpuResources=lambda: object(),
        get_num_gpus=lambda: 2,
        index_cpu_to_gpu=to_gpu,
    )
    monkeypatch.setitem(sys.modules, "faiss", fake)
    emb = np.eye(4, dtype=np.float32)
    for device in (None, "cuda:1", "cpu"):
        ids, _ = top_neighbours(emb, np.array([0]), np.arange(4), k=1, similarity="cos", device=device)
        assert ids.shape == (1, 1)
    assert moved == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["evalrank", "geometry"])
def test_a_real_task_scores_the_same_numbers_without_faiss(kind, tmp_path, monkeypatch):
    """A base install (no FAISS) computes every metric of the kinds that search neighbours: the real task of the
    task-kind contract, scored with FAISS and then with `import faiss` blocked, gives the same metric rows and the
    same neighbours table."""
    from tests.support import task_kind_contract as contract

    def numbers(result):
        return {(r.metric, r.subset, r.variant, r.ties): r.value for r in result.rows}

    with_faiss = contract.run_case(kind, tmp_path / "faiss")
    monkeypatch.setitem(sys.modules, "faiss", None)
    without = contract.run_case(kind, tmp_path / "numpy")
    want, got = numbers(with_faiss), numbers(without)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9, nan_ok=True), key
    if "neighbours" in with_faiss.details:
        a, b = with_faiss.details["neighbours"], without.details["neighbours"]
        ids = [c for c in a.column_names if "score" not in c and "text" not in c]
        assert a.select(ids).equals(b.select(ids)), f"neighbour ids differ in columns {ids}"
