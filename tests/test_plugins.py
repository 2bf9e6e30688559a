"""Out-of-tree plug-ins: a model kind and a task kind in another installed package, found through entry points.

The toy plug-in (tests/plugins/evalfarm_toy_plugin: the ``hashing-bow`` model kind and the ``length-agreement`` task
kind) is pip-installed into a temporary folder and used by ``evalfarm run`` as any installed package would be; a
broken plug-in fails only the catalogs that name its kinds, with its package named.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalfarm.catalog.registry import CatalogError, load_catalog
from evalfarm.plugins import model_kinds, task_kinds
from tests.support.model_kind_contract import KindCase, check_declaration, check_loading, check_validation

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "plugins" / "evalfarm_toy_plugin"
SENTENCES = [
    "Hi.",
    "A dog barks.",
    "The cat sleeps on the sofa.",
    "Rain fell over the quiet harbour all night.",
    "She sold the old bicycle to a neighbour who repairs them for the children of the village.",
    "Stocks rose.",
    "Two men are playing chess in the park while a crowd watches every move in silence.",
    "An orange.",
    "The committee postponed its decision until the next meeting in spring, citing missing figures.",
    "Birds sing at dawn.",
    "A very long sentence that keeps going, listing apples, pears, plums, cherries, grapes and several more fruits.",
    "OK",
]


def _catalog(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "catalog.yaml"
    p.write_text(text)
    return p


# -- a broken plug-in (fast) ---------------------------------------------------------------------------------------
def _broken_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Declare (as an installed package would) a model kind and a task kind whose module does not exist."""
    site = tmp_path / "site"
    dist = site / "evalfarm_broken_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evalfarm-broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[evalfarm.model_kinds]\nbroken-kind = evalfarm_broken_plugin_gone:KIND\n\n"
        "[evalfarm.task_kinds]\nbroken-task = evalfarm_broken_plugin_gone:Scorer\n"
    )
    monkeypatch.syspath_prepend(str(site))
    for registry in (model_kinds, task_kinds):  # find the entry points again (the fixture restores the registries)
        monkeypatch.setattr(registry, "_discovered", False)


def test_a_broken_plugin_fails_only_the_catalogs_that_name_its_kinds(tmp_path, monkeypatch):
    _broken_plugin(tmp_path, monkeypatch)
    assert "broken-kind" in model_kinds.names() and "broken-task" in task_kinds.names()  # declared, not imported
    glove = "{type: data, ref: evalrank/reference/toy_emb.txt}"
    good = load_catalog(
        _catalog(
            tmp_path,
            f"include: [tasks]\nmodels:\n  - {{id: g, level: word, kind: word-vectors, format: glove-text, "
            f"source: {glove}}}\n  - {{id: b, level: sentence, kind: bow, base: g}}\n",
        )
    )
    assert good.kind("b") == "bow" and good.tasks
    with pytest.raises(CatalogError) as e:
        load_catalog(_catalog(tmp_path, "models:\n  - {id: m, level: sentence, kind: broken-kind}\n"))
    msg = str(e.value)
    assert "models[0] (id 'm')" in msg and "broken-kind" in msg and "evalfarm-broken-plugin" in msg
    assert "ModuleNotFoundError" in msg and "evalfarm_broken_plugin_gone" in msg
    task = (
        "tasks:\n  - {id: t, level: sentence, kind: broken-task, version: '1', files: {}, sha256: {}, "
        "licence: x, source: x}\n"
    )
    with pytest.raises(CatalogError) as e:
        load_catalog(_catalog(tmp_path, task))
    assert "tasks[0] (id 't')" in str(e.value) and "evalfarm-broken-plugin" in str(e.value)


def test_an_unknown_model_kind_is_an_error_listing_the_known_ones(tmp_path):
    with pytest.raises(CatalogError) as e:
        load_catalog(_catalog(tmp_path, "models:\n  - {id: m, level: sentence, kind: nonsense}\n"))
    msg = str(e.value)
    assert "models[0] (id 'm').kind: Value error, unknown model kind 'nonsense' (known: " in msg
    assert all(k in msg for k in ("word-vectors", "bow", "transformers", "onnx", "infersent", "python"))


def _toy_module(monkeypatch: pytest.MonkeyPatch):
    """The toy plug-in's module, imported from its source folder (and forgotten after the test)."""
    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setitem(sys.modules, "evalfarm_toy_plugin", None)  # restored (removed) after the test
    del sys.modules["evalfarm_toy_plugin"]
    import evalfarm_toy_plugin

    return evalfarm_toy_plugin


def test_the_toy_plugin_kind_keeps_the_model_kind_contract(monkeypatch):
    """The contract template serves a plug-in's own tests: its kind, registered here, and one case."""
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.plan import kind_cost
    from evalfarm.scheduler.ray_executor import gpu_kind, small_kind

    model_kinds.register(_toy_module(monkeypatch).HASHING_BOW)
    kind = model_kinds.get("hashing-bow")
    case = KindCase({"id": "toy-hash", "level": "sentence", "kind": "hashing-bow"}, slow=False)
    check_declaration("hashing-bow", kind)
    check_validation("hashing-bow", kind, case)
    check_loading("hashing-bow", kind, case)
    with pytest.raises(ValueError, match="truncates nothing"):  # the kind's own check runs in the catalog's validation
        ModelSpec(id="x", level="sentence", kind="hashing-bow", max_length=16)
    with pytest.raises(ValueError, match="model 'x': only kind .*transformers.* reads 'pooling': drop it"):
        ModelSpec(id="x", level="sentence", kind="hashing-bow", pooling="mean")  # another kind's option
    assert kind_cost("hashing-bow") == 0.01 and small_kind("hashing-bow") and not gpu_kind("hashing-bow")


def _ngrams_module(monkeypatch: pytest.MonkeyPatch):
    """The toy plug-in's second model kind (options of its own, one module), imported from its source folder."""
    monkeypatch.syspath_prepend(str(TOY))
    monkeypatch.setitem(sys.modules, "evalfarm_toy_ngrams", None)
    del sys.modules["evalfarm_toy_ngrams"]
    import evalfarm_toy_ngrams

    return evalfarm_toy_ngrams


@pytest.fixture
def kinds_restored():
    state = model_kinds.snapshot()
    yield
    model_kinds.restore(state)


def test_a_kind_with_its_own_options_is_one_module(tmp_path, monkeypatch, kinds_restored):
    """A plug-in kind declares its options (a KindOptions model): catalog keys of its entries, validated by it, read
    by its loader; an option at its default leaves the spec hash alone, and nothing in evalfarm names them."""
    from evalfarm.encoders.loader import load_encoder

    toy = _ngrams_module(monkeypatch)
    model_kinds.register(toy.HASHING_NGRAMS)
    kind = model_kinds.get("hashing-ngrams")
    case = KindCase({"id": "toy-ngrams", "level": "sentence", "kind": "hashing-ngrams", "n": 2}, slow=False)
    check_declaration("hashing-ngrams", kind)
    check_validation("hashing-ngrams", kind, case)
    check_loading("hashing-ngrams", kind, case)

    entry = "  - {{id: {id}, level: sentence, kind: hashing-ngrams{opts}}}\n"
    cat = load_catalog(
        _catalog(
            tmp_path,
            "models:\n"
            + entry.format(id="bigrams", opts=", n: 2, buckets: 32")
            + entry.format(id="plain", opts="")
            + entry.format(id="explicit", opts=", n: 3, buckets: 64"),
        )
    )
    opts = cat.model("bigrams").options
    assert isinstance(opts, toy.NgramOptions) and (opts.n, opts.buckets) == (2, 32)
    # the options are keys of the entry again when dumped (and hashed), each only where it is not the default
    assert cat.model("bigrams").model_dump()["n"] == 2 and "n" not in cat.model("plain").model_dump()
    assert cat.model("explicit").model_dump() == {**cat.model("plain").model_dump(), "id": "explicit"}
    same = {m: cat.model(m).model_copy(update={"id": "x"}) for m in ("plain", "explicit", "bigrams")}
    from evalfarm.catalog.specs import spec_hash

    assert spec_hash(same["plain"]) == spec_hash(same["explicit"]) != spec_hash(same["bigrams"])

    enc = load_encoder(cat.lineage("bigrams"))
    out = enc.encode(SENTENCES)
    assert out.shape == (len(SENTENCES), 32) and out.dtype == np.float32
    assert np.array_equal(out, toy.HashingNgrams(n=2, buckets=32).encode(SENTENCES))
    assert enc.provenance["ngram"] == 2 and enc.provenance["kind"] == "hashing-ngrams"

    bad = [
        (", n: 9", "model 'bad': kind 'hashing-ngrams' option 'n': Input should be less than or equal to 5"),
        (", buckets: many", "model 'bad': kind 'hashing-ngrams' option 'buckets': Input should be a valid integer"),
        (", ngram: 2", "(id 'bad').ngram: Extra inputs are not permitted"),  # a typo is no option
    ]
    for opts_text, message in bad:
        with pytest.raises(CatalogError) as err:
            load_catalog(_catalog(tmp_path, "models:\n" + entry.format(id="bad", opts=opts_text)))
        assert message in str(err.value).replace("\n", " "), str(err.value)
    # another kind's entry may not carry them: the message names the kind that reads it
    with pytest.raises(CatalogError, match="model 'w': only kind hashing-ngrams reads 'n': drop it"):
        load_catalog(_catalog(tmp_path, "models:\n  - {id: w, level: sentence, kind: onnx-strings, n: 2}\n"))


# -- the installed plug-in, end to end (slow) ----------------------------------------------------------------------
def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_an_installed_plugin_runs_through_evalfarm_run(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(TOY, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    site = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([*pip, "--target", str(site), str(src)], env, tmp_path)  # offline: setuptools from this venv builds it
    assert list(site.glob("evalfarm_toy_plugin-0.1.0.dist-info/entry_points.txt"))

    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    texts = data / "toy" / "sentences.txt"
    texts.write_text("\n".join(SENTENCES) + "\n")
    sha = hashlib.sha256(texts.read_bytes()).hexdigest()
    catalog = _catalog(
        tmp_path,
        "tasks:\n"
        "  - {id: toy-lengths, level: sentence, kind: length-agreement, version: '1', "
        f"files: {{texts: toy/sentences.txt}}, sha256: {{texts: {sha}}}, licence: test, source: tests}}\n"
        "  - {id: toy-length-classes, level: sentence, kind: length-classes, version: '1', "
        f"files: {{texts: toy/sentences.txt}}, sha256: {{texts: {sha}}}, licence: test, source: tests}}\n"
        "models:\n"
        "  - {id: toy-hash, level: sentence, kind: hashing-bow, lowercase: true}\n"
        "  - {id: toy-ngrams, level: sentence, kind: hashing-ngrams, n: 2, buckets: 32}\n",
    )
    env.update(
        PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
        EVALFARM_DATA=str(data),
        EVALFARM_CACHE=str(tmp_path / "cache"),
        EVALFARM_CATALOG_PATH="",
    )
    wh = tmp_path / "wh"
    cli = [sys.executable, "-m", "evalfarm.cli"]
    _run([*cli, "run", "--catalog", str(catalog), "--warehouse", str(wh), "--executor", "local"], env, tmp_path)
    query = (
        "SELECT model, task, metric, value, is_primary FROM metrics WHERE task = 'toy-lengths' ORDER BY model, metric"
    )
    rows = json.loads(_run([*cli, "sql", "-f", "json", "--warehouse", str(wh), query], env, tmp_path).stdout)
    assert [(r["model"], r["task"], r["metric"]) for r in rows] == [
        ("toy-hash", "toy-lengths", "spearman"),
        ("toy-hash", "toy-lengths", "texts"),
        ("toy-ngrams", "toy-lengths", "spearman"),  # the kind with its own options, from its entry point
        ("toy-ngrams", "toy-lengths", "texts"),
    ]
    sys.path.insert(0, str(site))  # the expected value, from the installed module itself
    try:
        import evalfarm_toy_ngrams as toy_ngrams
        import evalfarm_toy_plugin as toy
        from scipy.stats import spearmanr

        emb = toy.HashingBow(lowercase=True).encode(SENTENCES)
        expected = spearmanr(np.linalg.norm(emb, axis=1), [len(s) for s in SENTENCES]).statistic
        emb = toy_ngrams.HashingNgrams(n=2, buckets=32).encode(SENTENCES)
        expected_ngrams = spearmanr(np.linalg.norm(emb, axis=1), [len(s) for s in SENTENCES]).statistic
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("evalfarm_toy_plugin", None)
        sys.modules.pop("evalfarm_toy_ngrams", None)
    assert rows[0]["value"] == pytest.approx(expected, abs=1e-6) and rows[0]["value"] > 0.8 and rows[0]["is_primary"]
    assert rows[1]["value"] == len(SENTENCES)
    assert rows[2]["value"] == pytest.approx(expected_ngrams, abs=1e-6)
    query = "SELECT kind FROM models ORDER BY kind"
    kinds = json.loads(_run([*cli, "sql", "-f", "json", "--warehouse", str(wh), query], env, tmp_path).stdout)
    assert kinds == [{"kind": "hashing-bow"}, {"kind": "hashing-ngrams"}]
    # the second task kind is a downstream benchmark: its declared role is what the views read
    query = (
        "SELECT m.task, m.metric, m.is_primary, r.role FROM metrics m JOIN scorer_roles r USING (scorer) "
        "WHERE m.task = 'toy-length-classes' AND m.model = 'toy-hash' ORDER BY m.metric"
    )
    rows = json.loads(_run([*cli, "sql", "-f", "json", "--warehouse", str(wh), query], env, tmp_path).stdout)
    assert [(r["metric"], r["is_primary"], r["role"]) for r in rows] == [
        ("accuracy", True, "downstream"),
        ("texts", False, "downstream"),
    ]
