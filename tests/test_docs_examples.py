"""docs/design.md's worked examples, run as written: the task kind, the model kind, and the catalog that uses both.

The code blocks are read from the document (not copied here), each executed as the module its first line names, so
an example that stops matching the API fails here. The conftest fixture takes the two kinds out of the registries
after each test.
"""

from __future__ import annotations

import hashlib
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

pytestmark = pytest.mark.docs
REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
SENTENCES = ["A dog barks.", "The cat sleeps on the sofa.", "Rain fell over the quiet harbour all night.", "OK"]


def _section(heading: str) -> str:
    text = DESIGN.read_text(encoding="utf-8")
    m = re.search(rf"^### {re.escape(heading)}\s*$(.*?)(?=^##)", text, re.MULTILINE | re.DOTALL)
    assert m, f"docs/design.md has no '### {heading}' section"
    return m.group(1)


def _block(heading: str, lang: str) -> str:
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", _section(heading), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, f"'### {heading}' should hold one ```{lang} block, has {len(blocks)}"
    return blocks[0]


def _run_module(heading: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Execute the section's python block as the module its first comment names (``# evalfarm/x/y.py``)."""
    code = _block(heading, "python")
    first = code.splitlines()[0]
    m = re.fullmatch(r"# (evalfarm/\w+/\w+)\.py", first)
    assert m, f"the example should start with the path of its module, got {first!r}"
    name = m.group(1).replace("/", ".")
    module = types.ModuleType(name)
    module.__file__ = str(REPO / f"{m.group(1)}.py")
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses and pickling look a class's module up
    exec(compile(code, f"docs/design.md ({heading})", "exec"), module.__dict__)
    return module


def _kinds(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, types.ModuleType]:
    return _run_module("A task kind (an evaluator)", monkeypatch), _run_module("A model kind", monkeypatch)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    """The data folder and the catalog of 'Using the two kinds', with the sha256 filled in and the table written."""
    data = tmp_path / "data"
    (data / "my").mkdir(parents=True)
    texts = data / "my" / "sentences.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    catalog_text = _block("Using the two kinds", "yaml")
    assert "<sha256 of the file>" in catalog_text
    catalog_text = catalog_text.replace("<sha256 of the file>", hashlib.sha256(texts.read_bytes()).hexdigest())
    catalog = tmp_path / "my-kinds.yaml"
    catalog.write_text(catalog_text, encoding="utf-8")
    source = yaml.safe_load(catalog_text)["models"][0]["source"]
    table = np.random.default_rng(0).normal(size=(256, 16)).astype(np.float32)
    np.save(tmp_path / source["ref"], table)
    return data, catalog


def test_the_examples_register_their_kinds_and_a_catalog_validates_against_them(tmp_path, monkeypatch):
    from evalfarm.catalog.registry import CatalogError, load_catalog
    from evalfarm.encoders.loader import load_encoder
    from evalfarm.plan import kind_cost
    from evalfarm.plugins import model_kinds, task_kinds

    scorer_module, kind_module = _kinds(monkeypatch)
    assert isinstance(task_kinds.get("mean-norm"), scorer_module.MeanNorm)
    assert model_kinds.get("hashed-ngrams") is kind_module.KIND and kind_cost("hashed-ngrams") == 0.05
    _, catalog = _setup(tmp_path)
    cat = load_catalog(catalog)
    assert [t.id for t in cat.tasks_for("my-ngrams")] == ["my-sentences"]
    encoder = load_encoder(cat.lineage("my-ngrams"), base_dir=catalog.parent)
    emb = encoder.encode(SENTENCES)
    assert emb.shape == (len(SENTENCES), 16) and emb.dtype == np.float32 and np.isfinite(emb).all()
    assert encoder.provenance["buckets"] == 256 and encoder.provenance["n"] == 3
    good = catalog.read_text()
    catalog.write_text(good.replace("kind: hashed-ngrams", "kind: hashed-ngrams\n    n: 2"))  # its own option
    bigrams = load_encoder(load_catalog(catalog).lineage("my-ngrams"), base_dir=catalog.parent)
    assert bigrams.provenance["n"] == 2 and not np.allclose(bigrams.encode(SENTENCES), emb)
    catalog.write_text(good.replace("kind: hashed-ngrams", "kind: hashed-ngrams\n    n: 9"))
    with pytest.raises(CatalogError, match="model 'my-ngrams': kind 'hashed-ngrams' option 'n': Input should be less"):
        load_catalog(catalog)
    catalog.write_text(good.replace("kind: hashed-ngrams", "kind: hashed-ngrams\n    max_length: 16"))
    with pytest.raises(CatalogError, match="hashed-ngrams hashes every n-gram; it truncates nothing"):
        load_catalog(catalog)  # the kind's own check
    catalog.write_text(good.replace("kind: hashed-ngrams", "kind: hashed-ngrams\n    pooling: mean"))
    with pytest.raises(CatalogError, match="model 'my-ngrams': only kind .* reads 'pooling': drop it"):
        load_catalog(catalog)  # another kind's option


@pytest.mark.slow  # an end-to-end run (in process, ~1 s)
def test_the_examples_run_through_evalfarm_run_into_their_view(tmp_path, monkeypatch):
    import evalfarm

    _kinds(monkeypatch)
    data, catalog = _setup(tmp_path)
    wh = tmp_path / "wh"
    summary = evalfarm.run(str(catalog), warehouse=wh, data=data, executor="local")
    assert summary.counts() == {"done": 1, "skipped": 0, "failed": 0}
    (metric,) = evalfarm.query("SELECT metric, value, is_primary FROM metrics", warehouse=wh).to_pylist()
    norms = {r["text"]: r["norm"] for r in evalfarm.query("SELECT * FROM norms", warehouse=wh).to_pylist()}
    assert set(norms) == set(SENTENCES)
    assert metric["metric"] == "mean_norm" and metric["is_primary"]
    assert metric["value"] == pytest.approx(np.mean(list(norms.values())))
    board = evalfarm.query("SELECT model, task FROM leaderboard", warehouse=wh).to_pylist()
    assert board == [{"model": "my-ngrams", "task": "my-sentences"}]
