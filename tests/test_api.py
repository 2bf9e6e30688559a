"""The Python API: its documented examples run as written (doctest), and its errors are clear."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import evalfarm
from evalfarm import api


@pytest.mark.slow
def test_the_documented_examples_run(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where evaluate()'s temporary warehouse goes
    result = doctest.testmod(api, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0
    # evaluate() without a warehouse removes its temporary one (the examples' own run folder stays)
    assert not list(tmp_path.glob("evalfarm-evaluate-*"))


def test_library_and_cli_share_one_default_executor():
    import inspect

    from evalfarm.cli import Executor, run

    cli_default = inspect.signature(run).parameters["executor"].default
    assert cli_default is Executor(api.DEFAULT_EXECUTOR)
    assert inspect.signature(evalfarm.run).parameters["executor"].default == api.DEFAULT_EXECUTOR
    from evalfarm.options import RunRequest

    assert RunRequest().executor == api.DEFAULT_EXECUTOR  # run_catalog's keywords: the request's fields


def test_evaluate_refuses_objects_that_cannot_encode():
    with pytest.raises(TypeError, match="no encode"):
        evalfarm.evaluate(object(), name="x")

    class Sentences:
        def encode(self, texts):
            return np.ones((len(texts), 4))

    with pytest.raises(TypeError, match="word-vector model"):
        evalfarm.evaluate(Sentences(), name="x", level="word")


def test_the_run_option_keywords_are_the_run_options():
    """``evalfarm.run(..., center=False)``: the keywords' type (RunOptionArgs) lists every RunOptions field a caller
    may set, so a new field cannot be missing from the typed API (verified_files is the driver's own)."""
    import dataclasses

    from evalfarm.options import RunOptionArgs, RunOptions

    fields = {f.name for f in dataclasses.fields(RunOptions)} - {"verified_files"}
    assert set(RunOptionArgs.__optional_keys__) == fields
    assert not RunOptionArgs.__required_keys__


def test_the_run_keywords_are_the_run_request_fields():
    """A run's settings are declared once (RunRequest): ``evalfarm.run``'s keywords are its fields (``options``
    spelt out as the RunOptions keywords) plus what only the API resolves (``run_request``'s: catalog, warehouse,
    data, check, hooks, notify); ``run_catalog`` and ``Run`` take the request (run_catalog also its fields as
    keywords) plus the runner's hooks. A field added to one and not the others fails here."""
    import dataclasses
    import inspect

    from evalfarm.options import RunOptionArgs, RunRequest
    from evalfarm.runner import Run, run_catalog

    def keywords(fn):
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return {p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds}

    fields = {f.name for f in dataclasses.fields(RunRequest)}
    api_only = keywords(api.run_request) - {"request"}
    assert keywords(api.run) == (fields - {"options"}) | api_only
    assert not (fields - {"options"}) & api_only
    assert "options" in inspect.signature(api.run).parameters  # **options: Unpack[RunOptionArgs]
    assert set(RunOptionArgs.__optional_keys__).isdisjoint(keywords(api.run))
    hooks = {"catalog", "warehouse", "request", "progress", "on_event", "encoders"}
    assert keywords(run_catalog) == hooks == keywords(Run.__init__) - {"self"}
    assert inspect.signature(run_catalog).parameters["fields"].kind is inspect.Parameter.VAR_KEYWORD
    # each api.run keyword's default is the request's
    defaults = {f.name: f.default for f in dataclasses.fields(RunRequest) if f.name != "options"}
    params = inspect.signature(api.run).parameters
    assert {k: params[k].default for k in defaults} == defaults


def test_a_run_request_is_the_same_however_spelt():
    from evalfarm.options import RunOptions, RunRequest

    assert RunRequest(models=["a", "b"], tasks=[]) == RunRequest(models=("a", "b"), tasks=None)
    assert RunRequest(options=None).options == RunOptions()  # type: ignore[arg-type]
    assert RunRequest(models=["a"]).model_ids == ["a"] and RunRequest().task_ids is None


def test_type_checkers_see_every_lazy_name_of_the_package():
    """``evalfarm.run`` is loaded on first use (a module __getattr__, typed Any); the TYPE_CHECKING imports of
    evalfarm/__init__.py give type checkers the real signatures: one for each lazy name, each in the API's __all__."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(evalfarm))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = [
        (a.name, a.asname) for n in block.body if isinstance(n, ast.ImportFrom) and n.module == "evalfarm.api"
        for a in n.names
    ]  # fmt: skip
    assert all(name == alias for name, alias in seen), seen  # `X as X`: an explicit re-export
    assert sorted(name for name, _ in seen) == sorted(evalfarm._API)
    assert set(evalfarm._API) <= set(api.__all__)


def test_the_apis_lazy_names_resolve_and_type_checkers_see_each():
    """What the CLI reaches through the API (issue 54: the errors to catch, the types and texts to print) are lazy
    names of evalfarm.api: each resolves to its home's object, and the API's TYPE_CHECKING block re-exports each
    (``from <home> import X as X``), so mypy checks the CLI's uses of them; importing the API stays cheap."""
    import ast
    import importlib
    import inspect
    import subprocess
    import sys

    for name, (module, attr) in api._LAZY.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), attr), name
    tree = ast.parse(inspect.getsource(api))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {
        (a.asname, (n.module, a.name)) for n in block.body if isinstance(n, ast.ImportFrom)
        for a in n.names if a.asname == a.name
    }  # fmt: skip
    assert seen == set(api._LAZY.items())
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018
    code = "import sys, evalfarm.api; print('torch' in sys.modules, 'ray' in sys.modules, 'duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def test_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, evalfarm; print('torch' in sys.modules, 'ray' in sys.modules, 'duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


@pytest.mark.slow
def test_evaluate_flags_the_numbers_of_a_degenerate_encoder():
    """Every vector the same: each STS pair scores the same cosine, so the unit is degenerate; its numbers come back
    flagged with the reason, never as plain numbers."""

    class Constant:
        def encode(self, texts):
            return np.tile(np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32), (len(texts), 1))

    rows = evalfarm.evaluate(Constant(), name="constant", tasks=["stsb"]).to_pylist()
    assert rows and all(r["degenerate"] for r in rows), rows[:3]
    assert all(r["degenerate_reason"].startswith("duplicate_rate") for r in rows), rows[0]["degenerate_reason"]
    spearman = [r for r in rows if r["metric"] == "spearman"]  # every pair ties: NaN, and so no interval
    assert spearman and all(r["ci_low"] is None and r["ci_high"] is None for r in spearman)


def test_shard_parts_split_the_missing_texts_and_give_each_part_its_siblings_texts(monkeypatch):
    """A model embeds its missing texts in parts of EMBED_SHARD_TEXTS, each stored as it finishes; a pooling
    sibling's texts go with the part that holds them, and those the model itself does not lack come last."""
    import evalfarm.execute as execute

    monkeypatch.setattr(execute, "EMBED_SHARD_TEXTS", 3)
    missing = ["a", "b", "c", "d", "e", "f", "g"]
    sib = ("sib-plan", "sib-store", ["g", "x", "b", "y"])  # x, y: stored for the leader, missing for the sibling
    parts = list(execute.shard_parts(missing, [sib]))  # type: ignore[list-item]
    assert [p for p, _ in parts] == [["a", "b", "c"], ["d", "e", "f"], ["g"], []]
    assert [[texts for _, _, texts in s] for _, s in parts] == [[["b"]], [], [["g"]], [["x", "y"]]]
    assert list(execute.shard_parts(["a"], [])) == [(["a"], [])]


class _Hashed:
    """A deterministic encoder: each text's vector from a seed of its hash; it raises once it has encoded
    ``fail_after`` texts (an interrupted embedding), and counts what it encoded."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after, self.encoded = fail_after, 0

    def encode(self, texts):
        import hashlib

        if self.fail_after is not None and self.encoded >= self.fail_after:
            raise RuntimeError("worker lost")
        self.encoded += len(texts)
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in texts]
        return np.stack([np.random.default_rng(s).normal(size=8) for s in seeds]).astype(np.float32)


@pytest.mark.slow
def test_an_interrupted_embedding_keeps_its_finished_parts(tmp_path, monkeypatch):
    """The embedding fails after two parts of 500 texts: the model's units fail, but both parts are stored, and the
    rerun embeds only the rest; its numbers are an uninterrupted run's."""
    import evalfarm.execute as execute

    monkeypatch.setattr(execute, "EMBED_SHARD_TEXTS", 500)
    broken = _Hashed(fail_after=1000)
    with pytest.raises(evalfarm.EvaluationFailed):
        evalfarm.evaluate(broken, name="hashed", tasks=["sts16"], warehouse=tmp_path / "wh")
    shards = list((tmp_path / "wh" / "embeddings").rglob("*.parquet"))
    assert broken.encoded == 1000 and len(shards) == 2  # two parts stored, then the failure (on every attempt)
    again = _Hashed()
    rows = evalfarm.evaluate(again, name="hashed", tasks=["sts16"], warehouse=tmp_path / "wh").to_pylist()
    whole = _Hashed()
    alone = evalfarm.evaluate(whole, name="hashed", tasks=["sts16"], warehouse=tmp_path / "wh2").to_pylist()
    assert whole.encoded > 1000 and again.encoded == whole.encoded - 1000  # the rerun embedded only the rest

    def values(out):
        return {tuple(r.get(k) for k in ("task", "subset", "variant", "metric")): r["value"] for r in out}

    assert values(rows) == pytest.approx(values(alone))
