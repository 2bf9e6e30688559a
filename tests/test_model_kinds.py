"""Every registered model kind keeps the contract of tests/support/model_kind_contract.py; none is left without a
case."""

from __future__ import annotations

import pytest

from evalfarm.plugins import ModelKind, model_kinds
from tests.support.model_kind_contract import CASES, ModelKindContract, kind_params


def pytest_generate_tests(metafunc) -> None:
    if "kind_name" in metafunc.fixturenames:
        metafunc.parametrize("kind_name", kind_params(metafunc.function.__name__))


class TestEveryModelKind(ModelKindContract):
    """The contract over evalfarm's own kinds (and any installed plug-in's)."""


def test_every_registered_model_kind_has_a_contract_case():
    """PyKEEN's meta-test: a kind registered without a concrete case fails here, not silently untested."""
    missing = sorted(set(model_kinds.names()) - set(CASES))
    assert not missing, f"model kinds without a contract case in tests/support/model_kind_contract.py: {missing}"


def test_a_case_without_a_kind_is_stale():
    stale = sorted(set(CASES) - set(model_kinds.names()))
    assert not stale, f"contract cases for kinds that are not registered: {stale}"


def test_the_meta_test_fails_for_a_kind_registered_without_a_case():
    model_kinds.register(ModelKind(name="caseless-test", description="x", levels=("sentence",), unsupported="all"))
    with pytest.raises(AssertionError, match="caseless-test"):
        test_every_registered_model_kind_has_a_contract_case()
