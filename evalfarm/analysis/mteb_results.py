"""Interop with MTEB's results: export a warehouse's numbers in MTEB's results layout, import an MTEB results folder.

MTEB (``embeddings-benchmark/mteb``) writes one JSON file per (model, task): ``<model>/<revision>/<Task>.json``,
a ``TaskResult``: ``dataset_revision``, ``task_name``, ``mteb_version``, ``evaluation_time``, ``kg_co2_emissions``
and ``scores: {split: [{"main_score", "hf_subset", "languages", <metric>: value, ...}]}``, every score on MTEB's
0-1 scale (its leaderboard shows them x100). Files written before mteb 1.11 (``mteb_dataset_name``,
``{split: {metric: value}}``, STS scores under ``cos_sim``) are read too.

The tasks the two share (:data:`TWINS`) are the STS sets: MTEB's STS12-16 test split holds exactly the pairs that
evalfarm pools in its ``all`` subset (every SemEval subset of the year), STSBenchmark's test split is evalfarm's
``stsb`` ``test``, and MTEB's SICK-R "test" split holds all 9,927 SICK pairs (evalfarm's ``sick-r`` ``all``).
MTEB's STS main score is the Spearman correlation of the cosine similarities with the gold scores, evalfarm's
``sts`` scorer's ``spearman`` (variant ``cos``). None of SentEval's classification tasks (MR, CR, SUBJ, MPQA,
SST-2, SST-5, TREC, MRPC, SICK-E) exists in MTEB (:data:`NO_TWIN`): nothing is exported for them.

Imported numbers never mix with evalfarm's own: every imported row has variant ``mteb`` (a protocol of its own:
MTEB's classification is a logistic regression on a few sampled training sets, not SentEval's cross-validated
one) and its provenance in ``params`` (``{"source": "mteb", ...}``); an STS twin keeps evalfarm's task id and
scorer (``sts``), an MTEB classification task becomes downstream task ``mteb-<TaskName>``, so an imported model's
STS and classification numbers meet in the ``correlations`` view. Other task types are skipped and reported.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalfarm.catalog.specs import ID_PATTERN, MAX_ID_LENGTH
from evalfarm.metrics import MetricInfo, lookup
from evalfarm.warehouse import Warehouse, new_run_id, now

MTEB_SCHEMA_VERSION = "1.12.48"
"""The ``mteb_version`` written into exported files: the results schema they follow (mteb >= 1.12.48 reads them
as they are, with no conversion). evalfarm did not run MTEB; the ``evalfarm`` key of each file says what did."""
NO_REVISION = "no_revision_available"
"""MTEB's revision folder for a model without a known revision."""
VARIANT = "mteb"
"""The variant of every imported row: MTEB's protocol, never compared with evalfarm's own numbers."""
LANGUAGES = ["eng-Latn"]


@dataclass(frozen=True)
class Twin:
    """An evalfarm task and the MTEB task with the same data: which evalfarm subset is MTEB's ``split``."""

    task: str
    name: str
    dataset_revision: str
    subset: str
    n_pairs: int
    split: str = "test"


TWINS: tuple[Twin, ...] = (
    Twin("sts12", "STS12", "a0d554a64d88156834ff5ae9920b964011b16384", "all", 3108),
    Twin("sts13", "STS13", "7e90230a92c190f1bf69ae9002b8cea547a64cca", "all", 1500),
    Twin("sts14", "STS14", "6031580fec1f6af667f0bd2da0a551cf4f0b2375", "all", 3750),
    Twin("sts15", "STS15", "ae752c7c21bf194d8b67fd573edf7ae58183cbe3", "all", 3000),
    Twin("sts16", "STS16", "4d8694f8f0e0100860b497b999b3dbed754a0513", "all", 1186),
    Twin("stsb", "STSBenchmark", "b0fddb56ed78048fa8b90373c8a3cfc37b684831", "test", 1379),
    Twin("sick-r", "SICK-R", "20a6d6f312dd54037fe07a32d58e5e168867909d", "all", 9927),
)
"""The shared STS tasks; the dataset revisions are those of MTEB's task definitions (``mteb/tasks/STS/eng``), the pair
counts those of its descriptive statistics (``mteb/descriptive_stats/STS``): a unit that scored another number of
pairs is not exported (not the same data)."""

NO_TWIN: dict[str, str] = {
    "mr": "MR",
    "cr": "CR",
    "subj": "SUBJ",
    "mpqa": "MPQA",
    "sst2": "SST-2",
    "sst5": "SST-5",
    "trec": "TREC (MTEB's TRECCOVID is retrieval)",
    "mrpc": "MRPC",
    "sick-e": "SICK-E",
}
"""SentEval's classification tasks: MTEB has none of them (its English classification tasks are other sets)."""

_BY_TASK = {t.task: t for t in TWINS}
_BY_NAME = {t.name: t for t in TWINS}


class MtebFormatError(ValueError):
    """A file that is not an MTEB ``TaskResult`` (the message names the file and what is missing)."""


# -- export ----------------------------------------------------------------------------------------------------------
@dataclass
class ExportResult:
    """What :func:`export_mteb` wrote (paths) and what it left out, with why."""

    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _sql_list(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def _revision(spec: str | None) -> str:
    """The model's own revision (a Hugging Face commit) from its stored spec, else MTEB's placeholder."""
    try:
        chain = json.loads(spec or "[]")
    except ValueError:
        return NO_REVISION
    head = chain[0] if isinstance(chain, list) and chain and isinstance(chain[0], dict) else {}
    rev = head.get("revision") or (head.get("source") or {}).get("revision")
    return str(rev) if rev else NO_REVISION


def _round(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def export_rows(wh: Warehouse, models: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows to export: evalfarm's own ``sts`` numbers (variant ``cos``) of the twin tasks' mapped subsets, one
    per (model, task) with its Spearman, Pearson, the model's spec and the scoring unit's seconds."""
    pairs = " OR ".join(f"(m.task = '{t.task}' AND m.subset = '{t.subset}')" for t in TWINS)
    only = f" AND m.model IN ({_sql_list(models)})" if models else ""
    table = wh.query(
        "WITH u AS (SELECT fingerprint, sum(seconds) AS seconds FROM units WHERE stage = 'score' "
        "GROUP BY fingerprint) "
        "SELECT m.model, m.task, any_value(mo.spec) AS spec, any_value(mo.dim) AS dim, "
        "any_value(u.seconds) AS seconds, "
        "any_value(m.fingerprint) AS fingerprint, any_value(m.degenerate) AS degenerate, "
        "max(CASE WHEN m.metric = 'spearman' THEN m.value END) AS spearman, "
        "max(CASE WHEN m.metric = 'pearson' THEN m.value END) AS pearson, "
        "max(CASE WHEN m.metric = 'n_pairs' THEN m.value END) AS n_pairs "
        "FROM metrics m LEFT JOIN models mo USING (model) LEFT JOIN u USING (fingerprint) "
        f"WHERE m.scorer = 'sts' AND m.variant = 'cos' AND ({pairs}){only} "
        "GROUP BY m.model, m.task ORDER BY m.model, m.task"
    )
    return table.to_pylist()


def task_result(twin: Twin, row: dict[str, Any]) -> dict[str, Any]:
    """One (model, task)'s MTEB ``TaskResult`` as a dict (what ``TaskResult.to_dict`` / ``to_disk`` write)."""
    entry: dict[str, Any] = {
        "cosine_pearson": _round(row["pearson"]) if row["pearson"] is not None else None,
        "cosine_spearman": _round(row["spearman"]),
        "main_score": _round(row["spearman"]),
        "hf_subset": "default",
        "languages": list(LANGUAGES),
    }
    return {
        "dataset_revision": twin.dataset_revision,
        "task_name": twin.name,
        "mteb_version": MTEB_SCHEMA_VERSION,
        "scores": {twin.split: [entry]},
        "evaluation_time": row["seconds"],
        "kg_co2_emissions": None,
        "evalfarm": {
            "model": row["model"],
            "task": twin.task,
            "subset": twin.subset,
            "scorer": "sts",
            "variant": "cos",
            "fingerprint": row["fingerprint"],
            "note": "computed by evalfarm's sts scorer, written in MTEB's results schema; MTEB did not run",
        },
    }


def model_meta(name: str, revision: str, row: dict[str, Any]) -> dict[str, Any]:
    """The ``model_meta.json`` beside a model's results: what mteb's ``ResultCache.load_results()`` reads a result's
    model from (``name``, ``revision``; by default it leaves out results without one), with the ``ModelMeta``
    fields evalfarm knows (the others null) and what evalfarm evaluated."""
    return {
        "name": name,
        "revision": revision,
        "release_date": None,
        "languages": list(LANGUAGES),
        "n_parameters": None,
        "memory_usage_mb": None,
        "max_tokens": None,
        "embed_dim": row.get("dim"),
        "license": None,
        "open_weights": None,
        "public_training_code": None,
        "public_training_data": None,
        "framework": [],
        "reference": None,
        "similarity_fn_name": "cosine",
        "use_instructions": None,
        "training_datasets": None,
        "adapted_from": None,
        "superseded_by": None,
        "evalfarm": {"model": row["model"], "note": "results computed by evalfarm, in MTEB's results layout"},
    }


def parse_as(value: str) -> tuple[str, str | None]:
    """``MODEL[@REVISION]`` (an MTEB model name such as ``sentence-transformers/all-MiniLM-L6-v2``, and its hub
    revision) as ``(model, revision or None)``."""
    name, sep, revision = value.partition("@")
    if not name or (sep and not revision) or any(ch.isspace() for ch in value):
        raise MtebFormatError(f"--as takes MODEL[@REVISION], e.g. org/name@<commit>, not {value!r}")
    return name, revision or None


def export_mteb(
    wh: Warehouse,
    out: str | os.PathLike[str],
    *,
    models: list[str] | None = None,
    names: dict[str, str] | None = None,
) -> ExportResult:
    """Write the warehouse's numbers on the tasks MTEB shares as ``<out>/<model>/<revision>/<Task>.json``, with a
    ``model_meta.json`` in each revision folder (:func:`model_meta`), so mteb's own loader takes them
    (``ResultCache(cache_path=C).load_results()`` reads ``C/results``: export into ``C/results``).

    A model's MTEB name is ``names[model]`` (``MODEL[@REVISION]``: ``evalfarm export mteb --as``), else its evalfarm
    id; its folder the name with ``/`` as ``__`` (MTEB's), its revision folder the given revision, else the model's
    own when its spec has one, else ``no_revision_available``. Units whose vectors failed the degenerate-model check,
    that scored another number of pairs than MTEB's split holds, or whose Spearman is not finite are left out
    (``skipped`` says which)."""
    result = ExportResult()
    out = Path(out)
    rows = export_rows(wh, models)
    missing = sorted(set(models or []) - {r["model"] for r in rows})
    result.skipped += [f"{m}: no sts numbers on {', '.join(_BY_TASK)} in this warehouse" for m in missing]
    names = dict(names or {})
    unknown = sorted(set(names) - {r["model"] for r in rows} - set(missing))
    result.skipped += [f"--as {m}=…: no such model among those exported" for m in unknown]
    metas: dict[Path, dict[str, Any]] = {}
    for row in rows:
        twin = _BY_TASK[row["task"]]
        if row["degenerate"]:
            result.skipped.append(f"{row['model']} / {row['task']}: degenerate vectors")
            continue
        if row["n_pairs"] != twin.n_pairs:
            result.skipped.append(
                f"{row['model']} / {row['task']}: {row['n_pairs'] or 0:.0f} pairs scored, MTEB's {twin.name} has "
                f"{twin.n_pairs} (not the same data)"
            )
            continue
        if row["spearman"] is None or not math.isfinite(row["spearman"]):
            result.skipped.append(f"{row['model']} / {row['task']}: no finite Spearman")
            continue
        name, revision = parse_as(names[row["model"]]) if row["model"] in names else (row["model"], None)
        revision = revision or _revision(row["spec"])
        folder = out / name.replace("/", "__").replace(" ", "_") / revision
        path = folder / f"{twin.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(task_result(twin, row), indent=2) + "\n", encoding="utf-8")
        result.files.append(path)
        metas[folder] = model_meta(name, revision, row)
    for folder, meta in metas.items():
        (folder / "model_meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        result.files.append(folder / "model_meta.json")
    return result


# -- import ----------------------------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    """What :func:`import_mteb` stored: the run id, per model the tasks imported, and the files or entries skipped."""

    run_id: str
    imported: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def n_rows(self) -> int:
        return sum(len(v) for v in self.imported.values())


@dataclass(frozen=True)
class Entry:
    """One score entry of an MTEB file: a split and an HF subset with its scores."""

    split: str
    hf_subset: str
    languages: list[str]
    scores: dict[str, Any]


_LEGACY_GROUPS = {"cos_sim", "euclidean", "manhattan", "dot", "max"}
"""Groups of metrics (not HF subsets) in files written before mteb 1.11."""


def _legacy_entries(data: dict[str, Any]) -> list[Entry]:
    """The entries of a file written before mteb 1.11: ``{split: {metric: v}}`` or ``{split: {hf_subset: {...}}}``,
    STS numbers under ``cos_sim`` (renamed ``cosine_*`` as mteb's own loader does)."""
    out = []
    for split, block in data.items():
        if split in {"mteb_dataset_name", "mteb_version", "dataset_revision"} or not isinstance(block, dict):
            continue
        nested = {k: v for k, v in block.items() if isinstance(v, dict) and k not in _LEGACY_GROUPS}
        subsets = nested or {"default": block}
        for hf_subset, scores in subsets.items():
            flat = {k: v for k, v in scores.items() if not isinstance(v, dict)}
            for k, v in (scores.get("cos_sim") or {}).items():
                flat[f"cosine_{k}"] = v
            if "main_score" not in flat:  # mteb's own loader fills it from the task's main metric
                flat["main_score"] = flat.get("cosine_spearman", flat.get("accuracy"))
            out.append(Entry(split, hf_subset, [], flat))
    return out


def read_task_result(path: Path) -> tuple[str, str | None, str | None, list[Entry]]:
    """``(task_name, mteb_version, dataset_revision, entries)`` of an MTEB results file, current or pre-1.11."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MtebFormatError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise MtebFormatError(f"{path}: not an MTEB TaskResult (a JSON object)")
    if "mteb_dataset_name" in data:
        return (
            str(data["mteb_dataset_name"]),
            data.get("mteb_version"),
            data.get("dataset_revision"),
            _legacy_entries(data),
        )
    for key in ("task_name", "scores"):
        if key not in data:
            raise MtebFormatError(f"{path}: not an MTEB TaskResult (no {key!r})")
    scores = data["scores"]
    if not isinstance(scores, dict):
        raise MtebFormatError(f"{path}: 'scores' is not {{split: [entries]}}")
    entries = []
    for split, items in scores.items():
        if not isinstance(items, list):
            raise MtebFormatError(f"{path}: scores[{split!r}] is not a list of entries")
        for item in items:
            if not isinstance(item, dict) or "main_score" not in item or not isinstance(item.get("hf_subset"), str):
                raise MtebFormatError(f"{path}: an entry of split {split!r} lacks main_score or hf_subset")
            langs = item.get("languages")
            if not isinstance(langs, list):
                raise MtebFormatError(f"{path}: an entry of split {split!r} lacks its languages list")
            entries.append(Entry(split, item["hf_subset"], [str(x) for x in langs], item))
    return str(data["task_name"]), data.get("mteb_version"), data.get("dataset_revision"), entries


def _english(entry: Entry) -> bool:
    if entry.languages:
        return all(lang.startswith("eng") for lang in entry.languages)
    return entry.hf_subset in {"default", "en", "eng", "en-en"}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def metric_rows(
    task_name: str, entries: list[Entry]
) -> tuple[str, str, list[tuple[str, str, float, bool]], list[str]]:
    """``(task, scorer, [(subset, metric, value, is_primary)], skipped)`` for one MTEB task's entries: an STS twin's
    English test entry (cosine Spearman, primary; cosine Pearson), or a classification task's English entries
    (accuracy, primary; f1, f1_weighted, ap when present), each split (and non-default HF subset) its own subset."""
    twin = _BY_NAME.get(task_name)
    rows: list[tuple[str, str, float, bool]] = []
    skipped: list[str] = []
    for e in entries:
        where = f"{task_name} {e.split}/{e.hf_subset}"
        if not _english(e):
            skipped.append(f"{where}: not English")
            continue
        if twin is not None:
            if e.split != twin.split:
                skipped.append(f"{where}: evalfarm's {twin.task} twin is MTEB's {twin.split} split only")
                continue
            sp = _number(e.scores.get("cosine_spearman", e.scores.get("main_score")))
            if sp is None:
                skipped.append(f"{where}: no cosine_spearman")
                continue
            rows.append((twin.subset, "spearman", sp, True))
            pe = _number(e.scores.get("cosine_pearson"))
            if pe is not None:
                rows.append((twin.subset, "pearson", pe, False))
            continue
        acc = _number(e.scores.get("accuracy"))
        if acc is None or _number(e.scores.get("main_score")) != acc:
            skipped.append(f"{where}: neither an STS twin nor a classification result (main score = accuracy)")
            continue
        subset = e.split if e.hf_subset == "default" else f"{e.hf_subset}/{e.split}"
        rows.append((subset, "accuracy", acc, True))
        rows += [(subset, m, v, False) for m in ("f1", "f1_weighted", "ap") if (v := _number(e.scores.get(m)))]
    if twin is not None:
        return twin.task, "sts", rows, skipped
    return f"mteb-{task_name}", "downstream", rows, skipped


def _model_of(path: Path, root: Path) -> tuple[str, str | None]:
    """The MTEB model folder and revision of a results file: ``<model>/<revision>/<Task>.json`` (or the older
    ``<model>/<Task>.json``) under ``root``; ``model_meta.json`` beside it names the revision when present."""
    rel = path.relative_to(root).parts
    if len(rel) >= 3:
        model, revision = rel[-3], rel[-2]
    elif len(rel) == 2:
        model, revision = rel[0], None
    else:
        model, revision = root.name, None
    meta = path.parent / "model_meta.json"
    if meta.is_file():
        try:
            revision = json.loads(meta.read_text(encoding="utf-8")).get("revision") or revision
        except (OSError, ValueError, AttributeError):
            pass
    return model, (None if revision == NO_REVISION else revision)


def _model_id(folder: str, rename: dict[str, str]) -> str:
    """The evalfarm model id of an MTEB model folder: ``rename``'s (by folder or by MTEB name), else the folder."""
    name = folder.replace("__", "/")
    model = rename.get(folder) or rename.get(name) or folder
    if not re.fullmatch(ID_PATTERN, model) or len(model) > MAX_ID_LENGTH:
        raise MtebFormatError(f"model {folder!r} gives no valid evalfarm id ({model!r}); map it with --as")
    return model


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


Declared = Callable[[str, str], MetricInfo]
"""(scorer, metric) -> the metric's declaration: :func:`evalfarm.scorers.metric_info` (a registered scorer's own,
else the shared one), which the API passes in; this layer, below the scorers, knows the shared ones only."""


def shared_declaration(scorer: str, metric: str) -> MetricInfo:
    """The shared declaration (:data:`evalfarm.metrics.METRICS`): what the built-in kinds MTEB's rows map to (STS,
    downstream) declare, none of them a metric of its own."""
    return lookup(metric, scorer=scorer)


def import_mteb(
    wh: Warehouse,
    folder: str | os.PathLike[str],
    *,
    rename: dict[str, str] | None = None,
    argv: str | None = None,
    declared: Declared = shared_declaration,
) -> ImportResult:
    """Store an MTEB results folder's numbers as ``metrics`` rows of variant ``mteb`` (see the module's docstring).

    ``rename`` maps an MTEB model (folder ``org__name`` or name ``org/name``) to an evalfarm model id, e.g. to put
    MTEB's numbers beside evalfarm's own for the same model; a model the warehouse does not know gets a ``models``
    row of kind ``mteb`` (level ``sentence``), one it knows keeps its own row and spec hash. Re-importing a file
    replaces its rows."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"no MTEB results folder at {root}")
    rename = rename or {}
    wh.init()
    run_id = new_run_id()
    result = ImportResult(run_id)
    known = {r["model"]: r["spec_hash"] for r in wh.query("SELECT model, spec_hash FROM models").to_pylist()}
    imported = 0
    new_models: dict[str, dict[str, Any]] = {}
    files = sorted(p for p in root.rglob("*.json") if p.name != "model_meta.json")
    wh.write_run_event(run_id, "start", status="running", catalog=f"mteb:{root}", n_units=len(files), argv=argv)
    with wh.deferring():  # every file's rows in one batch: the import is one commit per table
        imported = _import_files(wh, root, files, run_id, rename, known, result, new_models, declared)
    wh.write_run_event(
        run_id, "end", status="ok", catalog=f"mteb:{root}", n_units=len(files), n_done=imported,
        n_skipped=len(files) - imported, n_failed=0, argv=argv,
    )  # fmt: skip
    return result


def _import_files(
    wh: Warehouse,
    root: Path,
    files: list[Path],
    run_id: str,
    rename: dict[str, str],
    known: dict[str, str],
    result: ImportResult,
    new_models: dict[str, dict[str, Any]],
    declared: Declared = shared_declaration,
) -> int:
    """Stage each file's metrics rows (one unit each) and the new models' rows; returns the files imported."""
    imported = 0
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            task_name, version, revision, entries = read_task_result(path)
            folder_name, model_rev = _model_of(path, root)
            model = _model_id(folder_name, rename)
        except MtebFormatError as exc:
            result.skipped.append(str(exc))
            continue
        task, scorer, rows, skipped = metric_rows(task_name, entries)
        result.skipped += [f"{rel}: {s}" for s in skipped]
        if not rows:
            continue
        body = path.read_bytes()
        fp = _fingerprint("mteb", model, task, hashlib.sha256(body).hexdigest())
        params = {
            "source": "mteb",
            "mteb_task": task_name,
            "mteb_version": version,
            "dataset_revision": revision,
            "model": folder_name.replace("__", "/"),
            "revision": model_rev,
            "file": rel,
        }
        # a model the warehouse knows keeps its spec (the `conflicts` view would otherwise list it twice)
        spec_hash = known.get(model) or _fingerprint("mteb-model", folder_name, model_rev or "")
        at = now()
        records = _metric_records(rows, run_id, model, task, scorer, fp, spec_hash, revision, version, params, at,
                                  declared=declared)  # fmt: skip
        table = wh.typed("metrics", records)
        wh.write("metrics", table, run_id=run_id, unit=(model, task, fp))
        imported += 1
        result.imported.setdefault(model, []).append(task)
        if model not in known:
            new_models[model] = _model_row(model, spec_hash, params["model"], model_rev, root, run_id, at)
    if new_models:
        wh.write("models", list(new_models.values()), run_id=run_id)
    return imported


def _metric_records(
    rows: list[tuple[str, str, float, bool]],
    run_id: str,
    model: str,
    task: str,
    scorer: str,
    fp: str,
    spec_hash: str,
    revision: str | None,
    version: str | None,
    params: dict[str, Any],
    at: Any,
    *,
    declared: Declared = shared_declaration,
) -> list[dict[str, Any]]:
    """One file's ``metrics`` rows: one a (subset, metric) of its scores."""
    return [
        {
            "run_id": run_id,
            "model": model,
            "task": task,
            "scorer": scorer,
            "subset": subset,
            "variant": VARIANT,
            "ties": None,
            "metric": metric,
            "value": value,
            "is_primary": primary,
            "higher_is_better": declared(scorer, metric).higher_is_better,  # the declared direction
            "fingerprint": fp,
            "spec_hash": spec_hash,
            "task_checksum": revision,
            "scorer_version": f"mteb {version}" if version else "mteb",
            "params": json.dumps(params, sort_keys=True),
            "created_at": at,
            "degenerate": False,
            "thin": False,
        }
        for subset, metric, value, primary in rows
    ]


def _model_row(
    model: str, spec_hash: str, name: str | None, model_rev: str | None, root: Path, run_id: str, at: Any
) -> dict[str, Any]:
    """The ``models`` row of a model the warehouse did not know, imported from MTEB results under ``root``."""
    spec = {"id": model, "kind": "mteb", "mteb_name": name, "revision": model_rev, "postprocess": None}
    return {
        "model": model,
        "level": "sentence",
        "kind": "mteb",
        "spec_hash": spec_hash,
        "source": json.dumps({"type": "mteb-results", "name": name, "revision": model_rev}),
        "provenance": json.dumps({"imported_from": str(root), "run_id": run_id}),
        "spec": json.dumps([spec]),
        "run_id": run_id,
        "created_at": at,
    }


__all__ = [
    "MTEB_SCHEMA_VERSION",
    "NO_REVISION",
    "NO_TWIN",
    "TWINS",
    "VARIANT",
    "ExportResult",
    "ImportResult",
    "MtebFormatError",
    "Twin",
    "export_mteb",
    "import_mteb",
    "metric_rows",
    "model_meta",
    "parse_as",
    "read_task_result",
    "task_result",
]
