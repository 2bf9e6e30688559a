"""Catalog loading and validation: real catalogs load; mistakes name the file and the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfarm.catalog.registry import CatalogError, available_catalogs, load_catalog

POOLS = str(Path(__file__).resolve().parents[1] / "catalog" / "pools.yaml")


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "cat.yaml"
    p.write_text(f"include: [{POOLS}]\npools: [evalrank-word, evalrank-sentence]\n" + body)
    return p


def test_starter_zoo_loads_with_at_least_eight_models_and_both_pools():
    cat = load_catalog("zoo-starter")
    assert len(cat.models) >= 8
    assert cat.default_pools == ["evalrank-word", "evalrank-sentence"]
    assert {"zoo-starter", "pools"} <= set(available_catalogs())
    # a derived model inherits kind and is a model in its own right, with its own hash
    assert cat.kind("glove-6b-50d-abtt3") == "word-vectors"
    assert cat.spec_hash("glove-6b-50d-abtt3") != cat.spec_hash("glove-6b-50d")
    assert [p.id for p in cat.pools_for("bow-glove-6b-50d")] == ["evalrank-sentence"]


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
