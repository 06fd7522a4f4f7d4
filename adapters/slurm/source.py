"""The cluster as Slurm describes it, as an inventory source for the core (what-if bases).

Registered under the ``topoplace.inventory_sources`` entry point ``slurm``; reads what
``topoplace slurm inventory`` reads: ``scontrol show node`` output, per-node-type ``nvidia-smi topo -m``
captures, gres.conf and topology.conf/topology.yaml.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.slurm.cli import load_fabric, load_slurm_nodes
from adapters.slurm.gres import parse_gres_conf
from adapters.slurm.inventory import build_inventory
from adapters.slurm.nodetypes import TopoDir
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Inventory


def read_inventory(sources: Any, resolve: Callable[[str], Path]) -> Inventory:
    """``sources``: {scontrol, topo_dir, gres_conf, topology} as a scenario's ``base.slurm`` names them."""
    scontrol = resolve(sources.scontrol)
    gres = None
    if sources.gres_conf:
        path = resolve(sources.gres_conf)
        try:
            gres = parse_gres_conf(path.read_text(), str(path))
        except OSError as exc:
            raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {exc.strerror}")]) from None
    fabric = load_fabric(resolve(sources.topology)) if sources.topology else None
    built = build_inventory(
        load_slurm_nodes(scontrol),
        topo_dir=TopoDir(resolve(sources.topo_dir)),
        gres_conf=gres,
        fabric=fabric,
        source=str(scontrol),
    )
    return built.inventory
