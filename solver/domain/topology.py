"""Graphs of a node's PCIe tree and the distance classes they imply.

A node's ``pcie_switches`` form a forest: each switch names its ``parent`` ("" for a root, normally a
``HOST_BRIDGE``, i.e. a CPU root complex). Devices (GPUs, NICs) name the *leaf* switch they hang off.
The distance between two devices is then a pure function of where they meet in that forest, which is
exactly how ``nvidia-smi topo -m`` classifies them:

=======  ==============================================================
PIX      both devices on the same leaf switch
PXB      they meet at a common ancestor that is a (non-host) switch
PHB      they meet at a common ancestor that is a host bridge
NODE     different trees whose roots sit on the same known NUMA node
SYS      different trees on different or unknown NUMA nodes
=======  ==============================================================

"Same NUMA node" is asked of the trees' *roots* (``PcieSwitch.numa`` of the root host bridge), the
NUMA node the kernel puts the root complex on, not of the devices' CPU affinity: real servers show
``SYS`` between root complexes whose devices all print the same ``NUMA Affinity`` (the A100 NV12
capture does, between GPU0 and NIC0). A root without a NUMA node is never "the same" as another.
The devices' own NUMA nodes stand in only for a device whose switch is unknown.

Keeping the rule in one place means the ingest (which builds the tree from a matrix), the compiler
(which needs GPU↔NIC classes) and the tests (which check the tree reproduces the matrix) agree by
construction rather than by convention.
"""

from __future__ import annotations

from functools import lru_cache

import networkx as nx

from solver.domain.model import Distance, Node, PcieSwitch, SwitchKind

__all__ = ["device_distance", "gpu_nic_pairing", "pcie_distance", "pcie_tree"]


@lru_cache(maxsize=256)
def _tree(switches: tuple[PcieSwitch, ...]) -> nx.DiGraph:
    """The PCIe forest as a DiGraph with edges parent → child; cached per (hashable) switch tuple."""
    tree = nx.DiGraph()
    for switch in switches:
        tree.add_node(switch.id, kind=switch.kind, numa=switch.numa)
    for switch in switches:
        if switch.parent:
            tree.add_edge(switch.parent, switch.id)
    return tree


def pcie_tree(node: Node) -> nx.DiGraph:
    """The node's PCIe forest (edges parent → child, node attributes ``kind`` and ``numa``).

    The graph is shared through a cache: treat it as read-only.
    """
    return _tree(node.pcie_switches)


def _path_to_root(tree: nx.DiGraph, switch: str) -> list[str]:
    """``switch`` and its ancestors, nearest first. Stops on a cycle rather than looping forever:
    the validator reports cycles; the distance function must still terminate on bad input."""
    path = [switch]
    seen = {switch}
    current = switch
    while True:
        parents = list(tree.predecessors(current))
        if not parents or parents[0] in seen:
            return path
        current = parents[0]
        path.append(current)
        seen.add(current)


def _numa_distance(numa_a: int | None, numa_b: int | None) -> Distance:
    """Devices in different PCIe trees: NODE when both trees sit on the same known NUMA node, else SYS.

    An unknown NUMA node never counts as "the same": claiming NODE for devices we cannot place would
    make an unknown look better than a known SYS.
    """
    if numa_a is not None and numa_a == numa_b:
        return Distance.NODE
    return Distance.SYS


def pcie_distance(
    node: Node,
    dev_a_switch: str,
    dev_b_switch: str,
    numa_a: int | None,
    numa_b: int | None,
) -> Distance:
    """The nvidia-smi distance class between two devices of ``node``, from their leaf switches.

    ``numa_a``/``numa_b`` are the devices' NUMA nodes; they decide NODE vs SYS only for a device whose
    switch is "" (unknown) or not in the node's tree. Otherwise the roots' NUMA nodes decide (see the
    module docstring for why).
    """
    tree = pcie_tree(node)
    known_a = bool(dev_a_switch) and dev_a_switch in tree
    known_b = bool(dev_b_switch) and dev_b_switch in tree
    if known_a and known_b and dev_a_switch == dev_b_switch:
        return Distance.PIX
    path_a = _path_to_root(tree, dev_a_switch) if known_a else []
    path_b = _path_to_root(tree, dev_b_switch) if known_b else []
    ancestors_b = set(path_b)
    for switch in path_a:
        if switch in ancestors_b:
            kind = tree.nodes[switch]["kind"]
            return Distance.PHB if kind == SwitchKind.HOST_BRIDGE else Distance.PXB
    root_numa_a = tree.nodes[path_a[-1]]["numa"] if path_a else numa_a
    root_numa_b = tree.nodes[path_b[-1]]["numa"] if path_b else numa_b
    return _numa_distance(root_numa_a, root_numa_b)


def device_distance(node: Node, device_a: str, device_b: str) -> Distance:
    """The distance class between two devices of ``node`` named by GPU id or NIC name."""
    where = {gpu.id: (gpu.pcie_switch, gpu.numa) for gpu in node.gpus}
    where.update({nic.name: (nic.pcie_switch, nic.numa) for nic in node.nics})
    switch_a, numa_a = where[device_a]
    switch_b, numa_b = where[device_b]
    return pcie_distance(node, switch_a, switch_b, numa_a, numa_b)


def gpu_nic_pairing(node: Node) -> dict[str, list[str]]:
    """For each GPU, the NICs at its closest PCIe distance, if that distance is PXB or closer.

    This is the pairing a person reads off ``nvidia-smi topo -m`` ("GPU0 uses mlx5_2"): on real servers
    GPU k is not NIC k, so anything that wants "the GPU's NIC" must ask the tree. GPUs with no NIC
    within PXB map to an empty list. NICs are listed in the node's order.
    """
    pairing: dict[str, list[str]] = {}
    for gpu in node.gpus:
        distances = {
            nic.name: pcie_distance(node, gpu.pcie_switch, nic.pcie_switch, gpu.numa, nic.numa)
            for nic in node.nics
        }
        closest = min(distances.values(), default=Distance.SYS)
        pairing[gpu.id] = (
            [name for name, d in distances.items() if d == closest] if closest <= Distance.PXB else []
        )
    return pairing
