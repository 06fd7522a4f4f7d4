"""The architecture holds: the rule table names real functions, and every rule's check exists.

The rings themselves (who may import whom) are import-linter contracts in ``pyproject.toml``, run by
``make lint``; this test covers what a contract cannot say.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import solver.answer.verify
from solver.domain.rules import RULES
from solver.reduce.intranode import member


def resolve(place: str) -> object:
    module, _, name = place.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("family", RULES, ids=lambda f: f.name)
def test_every_place_of_a_rule_exists(family: object) -> None:
    for place in (*family.reduces, *family.compiles, *family.checks, *family.explains):
        assert callable(resolve(place)), place


@pytest.mark.parametrize("family", RULES, ids=lambda f: f.name)
def test_every_rule_is_built_somewhere(family: object) -> None:
    assert family.reduces or family.compiles, f"{family.name}: no reduction or compile function builds it"


def test_every_intra_node_rule_is_a_row_of_the_table() -> None:
    """An intra-node rule function no row names is a rule nobody can find. The composers that only
    ask the rules in order (and the rules record, and the helpers of one rule) are not rules."""
    composers = {"Rules", "node_admits", "gpu_sets", "choose_nics", "closeness"}
    defined = {
        name
        for name, value in vars(member).items()
        if inspect.isfunction(value) and value.__module__ == member.__name__ and not name.startswith("_")
    }
    named = {
        place.partition(":")[2]
        for f in RULES
        for place in f.reduces
        if place.startswith(member.__name__ + ":")
    }
    assert defined - composers == named - composers


def test_the_gpu_set_rules_are_rows_too() -> None:
    named = {place for f in RULES for place in f.reduces}
    for rule in member.GPU_SET_RULES:
        assert f"{member.__name__}:{rule.__name__}" in named, rule.__name__


def test_every_verifier_module_is_a_rule_in_the_table() -> None:
    """A check module nobody lists is a rule nobody can find; ``view`` and ``metrics`` are not rules
    (the indexed inventory, and the reported measures)."""
    named = {place.partition(":")[0].rsplit(".", 1)[1] for f in RULES for place in f.checks}
    modules = {m.name for m in pkgutil.iter_modules(solver.answer.verify.__path__)}
    assert modules - {"view", "metrics"} == named
