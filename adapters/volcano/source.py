"""The cluster as a Volcano session sees it, as an inventory source for the core (what-if bases).

Registered under the ``topoplace.inventory_sources`` entry point ``volcano``: a session snapshot (an
``onSessionOpen`` body) and, optionally, the HyperNodes that make its fabric — the inventory the
extender would hand the solver.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.volcano import batch, hypernodes
from adapters.volcano import wire as volcano_wire
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Inventory, Policy
from solver.whatif import convert


def read_inventory(sources: Any, resolve: Callable[[str], Path]) -> Inventory:
    """``sources``: {session, hypernodes} as a scenario's ``base.volcano`` names them."""
    path = resolve(sources.session)
    data, _ = convert.load_data(path)
    try:
        snapshot = volcano_wire.snapshot(data)
    except volcano_wire.BadPayload as exc:
        raise InvalidRequest([Problem(path=str(path), message=str(exc))]) from None
    fabric = hypernodes.HyperNodeTree()
    if sources.hypernodes:
        objects = hypernodes.load(resolve(sources.hypernodes))
        fabric = hypernodes.resolve(objects, {n.name: n.labels for n in snapshot.nodes})
    return batch.build(snapshot, fabric, Policy()).request.inventory
