"""Intra-node packing, precomputed per node shape: which sets of members fit one node together.

The CP-SAT model never sees a GPU. It sees *configurations*: multisets of member shapes that fit on
one node of a given shape at the same time, each with a witness (the concrete canonical GPU and NIC
indices of every member) and the number of members of each shape that meet all their PREFERRED
rules in that witness.

``member.py`` holds the rules, one small function a rule (a member's node, GPUs and NICs, and the
rules between members sharing a node); ``packing.py`` the search that asks them, which knows no
rule of its own.
"""

from solver.reduce.intranode.member import Rules, choose_nics, gpu_sets
from solver.reduce.intranode.packing import (
    MAX_CONFIGURATIONS,
    Configuration,
    Slot,
    configurations_for,
    enumerate_configurations,
    free_after,
    hosts_some_member,
)

__all__ = [
    "MAX_CONFIGURATIONS",
    "Configuration",
    "Rules",
    "Slot",
    "choose_nics",
    "configurations_for",
    "enumerate_configurations",
    "free_after",
    "gpu_sets",
    "hosts_some_member",
]
