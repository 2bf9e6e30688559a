"""Downstream classification (SentEval-style, frozen embeddings): MR, CR, SUBJ, MPQA, SST2, SST5, TREC, MRPC,
SICK-E, SciCite.

One task kind, ``downstream``; the entry's ``dataset`` names the reader (:mod:`evalfarm.taskdata.downstream`), whose
files are the SentEval copies EvalRank bundles. The scorer fits logistic regression on a model's stored sentence
embeddings (:mod:`evalfarm.classify`) and reports test accuracy:

- features: the raw sentence embeddings (as SentEval: no centring, no normalisation; each classifier standardises
  with its own training rows); MRPC and SICK-E use the pair features ``[u, v, |u - v|, u * v]``.
- protocols: MR, CR, SUBJ, MPQA stratified 10-fold cross-validation with C chosen on 5 inner folds of each training
  fold; TREC, MRPC C chosen on 5 inner folds of train, refit, scored on test; SST2, SST5, SICK-E (trial = dev),
  SciCite C chosen on dev, scored on test. C from ``C_GRID`` (1e-4 … 10). Folds and samples from seed 1111
  (SentEval's): the same inputs give the same numbers.
- sampling: SentEval's protocol, every training row, is the default of every run. A task entry may fix
  ``max_train``, a seeded stratified sample of the training part (``train``, or the whole set of a CV task; dev
  and test are never sampled), drawn *before* embedding (the sentences left out are never embedded); it applies
  only in the quick profile, ``evalfarm run --quick-downstream`` (``RunOptions.quick_downstream``). The sample
  size enters the fingerprint and the ``variant`` column (``max_train=N``, or ``full``), so sampled and full
  numbers never replace each other, never share a correlation (``correlations`` keys on the downstream
  variant), and tables label the sampled ones as samples. A 1,000-row sample costs MiniLM 1.9–4.8 points
  (issue 22), so the quick profile is for smoke runs, not for numbers to publish (``docs/results.md``).
- backend: ``auto`` (the default) fits with the batched torch engine (:mod:`evalfarm.classify`), on the unit's
  CUDA device or the CPU; ``sklearn`` is scikit-learn's per-fit reference. The two agree within 0.1 accuracy point
  on every task (``tests/test_classify.py``, ``benchmarks/bench_classify.py``). The backend used is recorded as
  the metric ``backend_torch`` (1 torch, 0 scikit-learn). Version 2 of the scorer: the engine replaced
  scikit-learn on CPU, constant columns are dropped (one standardisation for both backends), and only the
  chosen C is refit per outer fold; version-1 results are not reused. Version 3: the engine's L-BFGS is
  preconditioned (it stops at other points within the same tolerance, so an accuracy can move by a prediction).
  Version 4: features of 1,024 dimensions or more (MRPC and SICK-E pair features of a 256-d or wider encoder) get
  a low-rank preconditioner (the same tolerance; such a task's accuracy can move by a prediction), and training
  sets with few rows per feature dimension (under 3, or 2 on the low-rank path: e.g. a 384-d encoder's 1,000-row
  quick-profile samples) are solved without a preconditioner, which costs more there than it saves. Version 5: the
  preconditioner shared by many training sets (the CV tasks' inner folds, pair features) takes each set's own
  standardisation (:meth:`evalfarm.classify._Problem.preconditioner`); without it, raw transformer hidden states
  (all-mpnet-base-v2's layer-8 CLS on MPQA) ran their weak penalties to ``max_iter``. The same tolerance: an
  accuracy can move by a prediction.
  Version 6: the engine's products over the rows run in float32 (``dtype="mixed"``: the weights, loss, gradient
  and optimiser state stay in float64 and every model is checked and finished in float64 to the same ``tol``),
  1.5–1.8× less CPU time on the 384-d encoder's slowest tasks; other stops within tol, so an accuracy can move by
  a prediction. Version 7: the narrow products in the other operand order and the preconditioner applied once per
  L-BFGS iteration (the stored ``M y``), a quarter less CPU time on those tasks; the same objective and ``tol``,
  other rounding, so an accuracy can move by a prediction. Version 8: the line search cuts a rejected step by
  quadratic interpolation instead of halving (a whitened encoder's weak penalties: half the objective evaluations);
  the same objective and ``tol``, other stops, so an accuracy can move by a prediction. Version 9: the
  preconditioner's eigenvalues floored at 1e-3 of the largest (``evalfarm.classify.EIGEN_FLOOR``): a whitened or
  int8 encoder's CV tasks 1.5–2.7× less CPU time; the same objective and ``tol``, other stops. Version 10: the
  floor on shared bases only (the CV tasks' inner folds, pair features); a basis of the model's own training set
  (TREC's folds, a dev split) is exact for it and left as it is.

Metrics (subset ``all``): ``accuracy`` (primary; a fraction in [0, 1]), ``accuracy_std`` (std over the 10 folds,
CV tasks), ``f1`` (MRPC, the paraphrase class), ``dev_accuracy`` (the selection score at the chosen C),
``chosen_c`` (the chosen C; for CV the lower median over folds), ``n_train``, ``n_test``, ``n_models`` (fits),
``n_unconverged`` (fits, selection or refit, that stopped before the stopping rule held: ``max_iter``, 2,000
iterations, or no step that decreases the objective; such a fit is used where it stopped, as scikit-learn's would
be, and where it stops depends on the solver's path: raw transformer hidden states at C = 10 on TREC, one test
prediction between the float64 and float32-product engines; new in version 6),
``oov_rate`` (share of the task's texts the model embedded as nothing: zero vectors), ``backend_torch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from evalfarm.catalog.specs import TaskSpec
from evalfarm.classify import C_GRID, DEFAULT_SEED, evaluate, task_features
from evalfarm.scorers import register
from evalfarm.scorers.base import MetricRow, RunOptions, Scorer, ScoreResult, TextVectors, ThinRule
from evalfarm.taskdata.downstream import DownstreamTask

Dataset = Literal["MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICK-E", "SciCite"]
Backend = Literal["auto", "sklearn", "torch"]

K_FOLDS = 10
INNER_K = 5
TOL = 1e-6
THREADS = 1  # BLAS / OpenMP / torch threads while fitting: the per-fold problems are small, and on a loaded
# machine spinning thread pools cost far more than they bring (benchmarks/README.md)


class DownstreamTaskSpec(TaskSpec):
    """One SentEval-style classification task: ``dataset`` picks the reader, ``files`` its files (one folder, the
    reader's file names), ``max_train`` an optional seeded training sample (used only by the quick profile,
    ``--quick-downstream``), ``evalrank_text`` EvalRank's SciCite text reduction (lower-case, ``a-z`` and spaces)."""

    kind: Literal["downstream"] = "downstream"
    level: Literal["sentence"] = "sentence"
    dataset: Dataset
    max_train: int | None = Field(default=None, ge=20, description="seeded stratified training sample (rows)")
    evalrank_text: bool = Field(default=False, description="SciCite only: EvalRank's reduction of the text")


@dataclass
class DownstreamData:
    """A loaded task as a run needs it: the (sampled) task, and the distinct texts to embed, in order."""

    task: DownstreamTask
    max_train: int | None  # the sample size applied (None: every training row)
    n_train_available: int  # rows of the training part before sampling
    texts: list[str]


def load_task_data(task: DownstreamTaskSpec, max_train: int | None, seed: int = DEFAULT_SEED) -> DownstreamData:
    """Verify the task's files (sha256), read them with the dataset's reader, and draw the training sample.

    The reader opens fixed file names inside one folder; every file it read must be one of the verified files
    (and every verified file must be read), so a catalog entry can never score a file nobody checked."""
    from evalfarm.taskdata.data import TaskDataError, task_file
    from evalfarm.taskdata.downstream import load_downstream_task

    verified = {role: task_file(task, role) for role in sorted(task.files)}
    folders = {p.parent for p in verified.values()}
    if len(folders) != 1:
        raise TaskDataError(f"task {task.id!r}: its files must share one folder, got {sorted(map(str, folders))}")
    full = load_downstream_task(task.dataset, folders.pop(), evalrank_text=task.evalrank_text)
    read = {Path(p).resolve() for p in full.sources}
    checked = {p.resolve() for p in verified.values()}
    if read != checked:
        raise TaskDataError(
            f"task {task.id!r}: the {task.dataset} reader reads {sorted(p.name for p in read)}, but the catalog entry "
            f"verifies {sorted(p.name for p in checked)}; list exactly the reader's files under 'files'"
        )
    n_train = len(full.parts()["cv" if full.cv is not None else "train"])
    sampled = full.subsample_train(max_train, seed)
    return DownstreamData(sampled, effective_max_train(max_train, n_train), n_train, sampled.texts())


def effective_max_train(max_train: int | None, n_train: int) -> int | None:
    """The sample size that applies to a training part of ``n_train`` rows (None: every row is used)."""
    return max_train if max_train is not None and max_train < n_train else None


_EXPLICIT: dict[str, Backend] = {"sklearn": "sklearn", "torch": "torch"}


def resolve_backend(backend: str, device: str | None) -> tuple[Backend, str | None]:
    """(backend, torch device): ``auto`` is the batched torch engine on the device given, else on CUDA when it is
    available, else on the CPU; an explicit backend keeps the given device (``sklearn`` is the per-fit reference)."""
    if backend not in ("auto", "sklearn", "torch"):
        raise ValueError(f"unknown classifier backend {backend!r}: use auto, sklearn or torch")
    if backend != "auto":
        return _EXPLICIT[backend], device
    if device:
        return "torch", device
    from evalfarm.classify import _cuda_available

    return "torch", "cuda" if _cuda_available() else "cpu"


def variant_name(max_train: int | None) -> str:
    return "full" if max_train is None else f"max_train={max_train}"


@register
class DownstreamScorer(Scorer[DownstreamTaskSpec, DownstreamData]):
    name = "downstream"
    role = "downstream"
    prompt_type = "classification"  # an instruction model's classification prompt (its texts are features)
    version = "10"  # 2: the batched engine on CPU too, one standardisation (constant columns dropped), 310 fits;
    # 3: the engine's L-BFGS preconditioned (stops at other points within tol: accuracies can move by a prediction)
    # 4: a low-rank preconditioner for features of >= 1,024 dims (pair features of 256+-d encoders): other stops
    # within tol, so a pair task's accuracy can move by a prediction; no preconditioner where the training sets
    # have few rows per dimension (a wide encoder's 1,000-row samples): the version-2 solve there
    # 5: the shared preconditioner (CV tasks' inner folds, pair features) takes each model's own standardisation:
    # other stops within tol (an accuracy can move by a prediction), and far fewer iterations on raw hidden states
    # 6: float32 products over the rows (dtype="mixed"), float64 state, each model checked in float64: other stops
    # within tol (an accuracy can move by a prediction)
    # 7: narrow products with the few columns on the left, the preconditioner once per L-BFGS iteration (stored
    # M y): the same objective and tol, other rounding (an accuracy can move by a prediction)
    # 8: the line search's cut by quadratic interpolation, not halving: other stops within tol (an accuracy can
    # move by a prediction)
    # 9: the preconditioner's eigenvalues floored (EIGEN_FLOOR): other stops within tol (an accuracy can move by a
    # prediction)
    # 10: the floor on shared bases only (a model's own basis is exact for it): other stops within tol
    task_spec = DownstreamTaskSpec
    primary_metric = "accuracy"
    thin_rules = (ThinRule("oov_rate", at_most=0.5),)
    """Too thin when over half the task's sentences are OOV (zero or mean vectors: the classifier learns the label
    prior). The starter zoo's highest: 0.0008."""
    description = (
        "SentEval-style logistic regression on frozen sentence embeddings (pair features for MRPC / SICK-E): "
        "test accuracy, C chosen on dev or inner folds, 10-fold CV where there is no split"
    )

    def cost_variant(self, params: Mapping[str, Any]) -> str:
        """The training sample (``max_train=N``) costs a fraction of the full data's embedding and fits; the full
        data, the default, has no label."""
        return "" if params.get("max_train") is None else variant_name(params["max_train"])

    def params(self, task: DownstreamTaskSpec, options: RunOptions) -> dict[str, Any]:
        return {
            "max_train": task.max_train if options.quick_downstream else None,
            "seed": DEFAULT_SEED,
            "c_grid": list(C_GRID),
            "k": K_FOLDS,
            "inner_k": INNER_K,
            "tol": TOL,
            "backend": "auto",
            "features": "pair" if task.dataset in ("MRPC", "SICK-E") else "raw",
        }

    def load(self, task: DownstreamTaskSpec) -> DownstreamData:
        return self.load_for(task, RunOptions())

    def load_for(self, task: DownstreamTaskSpec, options: RunOptions) -> DownstreamData:
        p = self.params(task, options)
        return load_task_data(task, p["max_train"], p["seed"])

    def score(
        self,
        task: DownstreamTaskSpec,
        data: DownstreamData,
        vectors: TextVectors,
        params: dict[str, Any],
        *,
        device: str | None = None,
    ) -> ScoreResult:
        expected = effective_max_train(params["max_train"], data.n_train_available)
        if expected != data.max_train:
            raise ValueError(
                f"task {task.id!r}: loaded with max_train={data.max_train} but scored with "
                f"max_train={params['max_train']}; load the task with the run's options (Scorer.load_for)"
            )
        if vectors.emb.shape[0] != len(data.texts):
            raise ValueError(f"task {task.id!r}: {vectors.emb.shape[0]} vectors for {len(data.texts)} texts")
        backend, torch_device = resolve_backend(params["backend"], device)
        row = {t: i for i, t in enumerate(data.texts)}  # the stored vectors follow data.texts
        features = task_features(data.task, lambda texts: vectors.emb[[row[t] for t in texts]])
        res = evaluate(
            features,
            backend=backend,
            c_grid=params["c_grid"],
            k=params["k"],
            inner_k=params["inner_k"],
            seed=params["seed"],
            f1_label=data.task.f1_label,
            n_classes=data.task.n_classes,
            tol=params["tol"],
            device=torch_device,
            threads=THREADS,
        )
        variant = variant_name(data.max_train)
        chosen = sorted(res.chosen_c)[(len(res.chosen_c) - 1) // 2]  # lower median: a value of the grid
        out = ScoreResult()
        rows = [MetricRow("accuracy", res.accuracy, variant=variant)]
        rows += [MetricRow(m, v, variant=variant) for m, v in res.metrics().items() if m != "accuracy"]
        rows += [
            MetricRow("dev_accuracy", res.dev_accuracy, variant=variant),
            MetricRow("chosen_c", chosen, variant=variant),
            MetricRow("n_train", float(res.n_train), variant=variant),
            MetricRow("n_test", float(res.n_test), variant=variant),
            MetricRow("n_models", float(res.n_models), variant=variant),
            MetricRow("n_unconverged", float(res.n_unconverged), variant=variant),
            MetricRow("oov_rate", float(np.mean(vectors.oov)) if len(vectors.oov) else 0.0, variant=variant),
            MetricRow("backend_torch", 1.0 if res.backend == "torch" else 0.0, variant=variant),
        ]
        out.rows = rows
        if data.max_train is not None:
            out.notes.append(
                f"{task.id}: trained on a seeded sample of {data.max_train} of {data.n_train_available} training rows "
                "(the quick profile, --quick-downstream: a sample, not SentEval's protocol; the default uses them all)"
            )
        return out
