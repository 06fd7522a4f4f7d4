"""The architecture holds: the rule table names real functions, and every rule's check exists.

The rings themselves (who may import whom) are import-linter contracts in ``pyproject.toml``, run by
``make lint``; this test covers what a contract cannot say.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import solver.answer.verify
from solver.domain.rules import RULES


def resolve(place: str) -> object:
    module, _, name = place.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("family", RULES, ids=lambda f: f.name)
def test_every_place_of_a_rule_exists(family: object) -> None:
    for place in (*family.builds, *family.checks, *family.explains):
        assert callable(resolve(place)), place


def test_every_verifier_module_is_a_rule_in_the_table() -> None:
    """A check module nobody lists is a rule nobody can find; ``view`` and ``metrics`` are not rules
    (the indexed inventory, and the reported measures)."""
    named = {place.partition(":")[0].rsplit(".", 1)[1] for f in RULES for place in f.checks}
    modules = {m.name for m in pkgutil.iter_modules(solver.answer.verify.__path__)}
    assert modules - {"view", "metrics"} == named
