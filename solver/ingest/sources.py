"""Inventory sources that other packages offer: a scheduler's own description of its cluster.

The core knows no scheduler. An adapter registers a reader under the ``topoplace.inventory_sources``
entry-point group (``slurm``, ``volcano`` in this repository's ``pyproject.toml``); what-if bases and
anything else that needs "the cluster as Slurm sees it" find it here by name. A reader takes the
source's settings (the scenario's ``base.slurm`` or ``base.volcano`` part) and a function that resolves
a file name against the scenario's folder, and returns an ``Inventory`` or raises ``InvalidRequest``.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Inventory

GROUP = "topoplace.inventory_sources"

InventorySource = Callable[[Any, Callable[[str], Path]], Inventory]


def inventory_source(name: str, path: str) -> InventorySource:
    """The reader registered as ``name``; ``path`` names the request field that asked for it."""
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in entry_points(group=GROUP))
        message = f"no inventory source {name!r} is installed (installed: {', '.join(known) or 'none'})"
        raise InvalidRequest([Problem(path=path, message=message)])
    try:
        return found[0].load()
    except ImportError as exc:
        raise InvalidRequest([Problem(path=path, message=f"the {name} source cannot load: {exc}")]) from None
