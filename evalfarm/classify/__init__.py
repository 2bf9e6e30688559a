"""SentEval-style logistic regression on frozen embeddings: numpy float32 matrices in, accuracies out.

Protocols (chosen by the parts given to :func:`evaluate`, as SentEval's three classifiers):

- ``train_dev_test`` (SST2, SST5, SICK-E, SciCite): one model per C of the grid on ``train``; the C with the
  best ``dev`` accuracy is kept (the first one on ties, i.e. the strongest penalty) and its ``test`` accuracy
  is reported. SentEval refits the same model on the same rows; the fit is deterministic, so it is reused.
- ``train_test`` (TREC, MRPC): C is chosen by the mean accuracy over an inner stratified ``inner_k``-fold split
  of ``train``; the model refit on all of ``train`` with that C gives the ``test`` accuracy (and F1 of the
  positive class when ``f1_label`` is set: MRPC).
- ``cv`` (MR, CR, SUBJ, MPQA): stratified ``k``-fold cross-validation (k = 10); inside each training fold C is
  chosen by an inner stratified ``inner_k``-fold split, then refit on the training fold and scored on the held
  out fold. ``accuracy`` is the mean over the k folds, ``accuracy_std`` their standard deviation (ddof = 0).

Every model standardises its features with the mean and standard deviation (ddof 0) of its own training rows
only (:func:`standardisation`, one definition for both backends, computed once per training set and shared by
all its C values); a column whose deviation is at most ``CONSTANT_REL`` (1e-6) of the largest column's is constant
for that model and dropped (weight 0) — all-MiniLM-L6-v2 has dimensions of magnitude ~1e-32 that
``StandardScaler`` would blow up to unit variance. Folds come from scikit-learn's
``StratifiedKFold(shuffle=True, random_state=seed)``; nothing else is random, so the same inputs give the same
numbers. ``inner_k`` defaults to 5 (SentEval uses 10 there; 5 halves the cost of choosing C).

Two stages, as SentEval's protocol needs: every selection model (per C and inner fold, or per C on a dev split)
in one solve; then one refit per outer fold, at its chosen C only (MR: 10 × (5 × 6 + 1) = 310 models).

The model and its penalty, identical in both backends: multinomial logistic regression (binary logistic with
one weight vector for two classes, as scikit-learn) with an unpenalised intercept, minimising
``mean_i CE_i + (lam / 2) * ||W||^2`` over the n training rows, where ``lam = 1 / (C * n)``: exactly
scikit-learn's ``C * sum_i CE_i + ||W||^2 / 2`` divided by ``C * n``, so one C means the same model in both.
``C_GRID`` spans 1e-4 … 10 on standardised features (SentEval's 2^-2 … 2^3 was meant for raw features).

Backends, behind the one function:

- ``torch`` (the engine; ``auto``): every model of a stage stacked in a batch dimension and solved by a batched,
  preconditioned L-BFGS (own history and Armijo step per model), on CPU as on CUDA. The training folds are row
  masks over one shared feature matrix and each model's standardisation is folded into its weights, so an
  iteration is one ``[X, 1] @ W`` and one ``[X, 1].T @ R`` product over all models (gradients by hand, no
  autograd; a binary model's rows carry the sign of their label, so its logits are the loss's margins). The
  L-BFGS initial inverse Hessian is each model's Hessian at ``W = 0`` with intercepts at the class priors
  (``A ⊗ Σ + lam I``: ``Σ`` the covariance of the model's standardised training rows, ``A`` the priors' softmax
  curvature), applied through ``Σ``'s and ``A``'s eigenvectors: the features' correlations and the penalty no
  longer set the iteration count, and an iteration costs the same two products plus two ``d × d`` ones. A solve
  with few training sets gives each set its own ``Σ``; one with many (``SHARED_BASIS_MIN_SETS``: the CV tasks' 50
  inner folds) takes every set's ``Σ`` as the union's, one eigendecomposition per task and one product for all
  models (version 4's per-model factors cost 3× the CPU time on all-MiniLM-L6-v2's CR). Wide features (``d >=
  LOWRANK_MIN_DIM``: the 1,536-d pair features of a 384-d encoder) replace ``Σ`` by its top ``LOWRANK_RANK``
  eigenpairs plus one value for the rest (a seeded randomised Nyström sketch): forming and factoring the ``d × d``
  Grams cost more there than the whole solve. Where the training sets have few rows per dimension
  (``DENSE_MIN_ROWS_PER_DIM``, ``LOWRANK_MIN_ROWS_PER_DIM``: a 384-d encoder's 1,000-row quick-profile samples) the
  set-up costs more than it saves and the solve runs unpreconditioned. Models that share a training set are solved
  along the C path (strongest penalty first, each warm-started from the previous C's solution) where a round still
  batches many models (``PATH_MIN_SETS``), a refit from the mean of its C's inner-fold solutions. C is chosen on
  accuracies that differ by a few predictions, so the engine must reach scikit-learn's optimum (``tol=1e-6``).
  ``dtype="mixed"`` (the default since downstream scorer version 6): the two products over the rows (and the
  preconditioner's basis products) run in float32, on ``[X, 1]`` stored in float32, while the weights, the loss, the
  gradient's assembly and the L-BFGS state stay in float64. The products read the matrix at half the bytes (measured
  on one thread: 1.5–1.8× less CPU time on TREC, MRPC and SICK-E, ``benchmarks/results/HISTORY.md``, wave 11); their
  rounding leaves the gradient within ~5e-9 of float64's, 200 times below ``tol``, but the objective's value only
  within ~1e-9, so near the optimum the line search also accepts a step by Hager & Zhang's approximate Wolfe
  condition (:func:`batched_lbfgs`), and every model is then checked (and if need be finished) in float64 with the
  float64 stopping rules: each model meets float64's rule, as a float64 solve's would. ``dtype="float64"``: every
  product in float64 (versions 2–5). ``dtype="float32"`` runs everything in float32, the optimiser's state included;
  measured against float64 it stalls at gradients ~1e-5 (a float32 weight cannot take the last steps) and moved MR's
  accuracy by 0.1 point (``benchmarks/results/HISTORY.md``, wave 7), so it is an option for GPUs without fast
  float64, not the default. The device is ``device`` (CUDA when available).
- ``sklearn``: the reference, ``LogisticRegression(solver="lbfgs")`` per fit, float64, on the same standardised
  features.

Both backends stop a model when the largest gradient entry of the (mean-scaled) objective is at most ``tol``
or an iteration no longer decreases it relatively by more than 64 float64 machine epsilons (scipy's L-BFGS-B
rules, which scikit-learn uses). The two agree within 0.1 accuracy point on every one of the ten tasks
(``tests/test_classify.py``, ``benchmarks/bench_classify.py``).

``max_train`` cuts the training part (``train``, or the whole set for CV) to a seeded, stratified sample
(:func:`evalfarm.taskdata.downstream.stratified_subsample`); ``None`` (the default) uses every row.
"""

from __future__ import annotations

from evalfarm.classify.engine import (
    APPROX_WOLFE_DELTA,
    DEFAULT_DTYPE,
    DENSE_MIN_ROWS_PER_DIM,
    DTYPES,
    EIGEN_FLOOR,
    LOWRANK_MIN_DIM,
    LOWRANK_MIN_ROWS_PER_DIM,
    LOWRANK_RANK,
    MIXED_NOISE,
    PATH_MIN_SETS,
    ROW_BLOCK_BYTES,
    SHARED_BASIS_MIN_SETS,
    _armijo,
    _c_path_rounds,
    _lbfgs_direction,
    _loss,
    _Problem,
    _remember,
    batched_lbfgs,
)
from evalfarm.classify.features import CONSTANT_REL, Fit, pair_features, standardisation
from evalfarm.classify.protocol import (
    C_GRID,
    DEFAULT_SEED,
    Backend,
    ClassifyResult,
    classify_task,
    cv_folds,
    evaluate,
    task_features,
)
from evalfarm.classify.solvers import (
    TORCH_BATCH_ELEMENTS,
    _cuda_available,
    _limit_threads,
    _Solver,
    decision_values,
    predict_from_scores,
)

# The names other modules, the benchmarks and the tests import from ``evalfarm.classify``. The tuning constants are
# read where they are defined: patch ``evalfarm.classify.engine.EIGEN_FLOOR`` (and the like), not this package's copy.
__all__ = [
    "APPROX_WOLFE_DELTA",
    "C_GRID",
    "CONSTANT_REL",
    "DEFAULT_DTYPE",
    "DEFAULT_SEED",
    "DENSE_MIN_ROWS_PER_DIM",
    "DTYPES",
    "EIGEN_FLOOR",
    "LOWRANK_MIN_DIM",
    "LOWRANK_MIN_ROWS_PER_DIM",
    "LOWRANK_RANK",
    "MIXED_NOISE",
    "PATH_MIN_SETS",
    "ROW_BLOCK_BYTES",
    "SHARED_BASIS_MIN_SETS",
    "TORCH_BATCH_ELEMENTS",
    "Backend",
    "ClassifyResult",
    "Fit",
    "_Problem",
    "_Solver",
    "_armijo",
    "_c_path_rounds",
    "_cuda_available",
    "_lbfgs_direction",
    "_limit_threads",
    "_loss",
    "_remember",
    "batched_lbfgs",
    "classify_task",
    "cv_folds",
    "decision_values",
    "evaluate",
    "pair_features",
    "predict_from_scores",
    "standardisation",
    "task_features",
]
