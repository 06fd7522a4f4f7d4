"""A node's content without its names: the key under which nodes built alike share per-node work.

A cold request on a big cluster holds thousands of node objects never seen before, and most of them
are the same machine: the same GPUs, NICs, PCIe tree and NVLinks, and a few dozen patterns of what
runs on them (16,384 nodes of ``bench.quality``: one hardware, 1,527 hardware-and-allocation
patterns). Validating a node's devices and working out its free shape cost 75 and 50 µs a node;
doing each once per :func:`node_key` and looking the rest up is what lets a 5 s call have time
left for the greedy's orders (issue 18, session 17).

The key holds *every* field of the node and of what it holds, except the ones that only name it:
the node's ``name``, ``labels``, ``leaf`` and ``nvlink_domain``, a GPU's ``uuid``, and an
allocation's ``owner`` and ``labels`` (:data:`NAMING`). The fields kept are read from the models
themselves, so a field added to a model is in the key without anyone remembering to add it: the
bug a hand-picked key invites is two nodes differing in one field sharing a value. A per-node
computation may share values by this key only if it reads none of :data:`NAMING` — or adds what
it reads to its own key, as normalise adds the labels its batch selects on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from operator import attrgetter
from typing import Any

from pydantic import BaseModel

from solver.domain.model import Allocation, Gpu, GpuShare, Nic, Node, NumaNode, NvLink, PcieSwitch
from solver.domain.nodefold import NodeMemo

# The fields that name a node or what runs on it rather than say what it is or holds.
NAMING: dict[type[BaseModel], frozenset[str]] = {
    Node: frozenset({"name", "labels", "leaf", "nvlink_domain"}),
    Gpu: frozenset({"uuid"}),
    Allocation: frozenset({"owner", "labels"}),
}
# A node's devices: the fields that say what machine it is (with its scalars), as opposed to what
# runs on it (``allocations``). The wire layer shares their conversion between nodes built alike
# (solver.service.wire), less the devices' own NAMING fields.
DEVICES = ("numa_nodes", "gpus", "nics", "pcie_switches", "nvlinks")
# Fields holding models, turned into keys of their own (the rest are hashable values).
_NESTED = {
    Node: frozenset({*DEVICES, "allocations"}),
    Allocation: frozenset({"gpu_shares"}),
}


def kept_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` a key holds, in declaration order."""
    return tuple(f for f in model.model_fields if f not in NAMING.get(model, frozenset()))


def _values(model: type[BaseModel]) -> Callable[[Any], tuple]:
    """The kept, non-nested fields of a ``model`` instance as a tuple (one C call per object:
    at 16,384 nodes of ~50 device objects each, a Python loop per field was half the saving)."""
    names = tuple(f for f in kept_fields(model) if f not in _NESTED.get(model, frozenset()))
    get = attrgetter(*names)
    return get if len(names) > 1 else (lambda obj: (get(obj),))


_GPU, _NIC, _PCIE, _NUMA, _NVLINK, _SHARE = map(_values, (Gpu, Nic, PcieSwitch, NumaNode, NvLink, GpuShare))
_NODE, _ALLOCATION = _values(Node), _values(Allocation)

# Hardware parts seen, each kept once: 16,384 nodes of one machine hold one tuple, not 16,384.
_HARDWARE: dict[tuple, tuple] = {}
_HARDWARE_MAX = 4096
_KEYS: NodeMemo[Hashable] = NodeMemo("nodekey")


def _allocation(a: Allocation) -> tuple:
    return (*_ALLOCATION(a), tuple(map(_SHARE, a.gpu_shares)))


def content_key(node: Node) -> Hashable:
    """:func:`node_key`, computed (not remembered)."""
    hardware = (
        _NODE(node),
        tuple(map(_NUMA, node.numa_nodes)),
        tuple(map(_GPU, node.gpus)),
        tuple(map(_NIC, node.nics)),
        tuple(map(_PCIE, node.pcie_switches)),
        tuple(map(_NVLINK, node.nvlinks)),
    )
    if len(_HARDWARE) >= _HARDWARE_MAX:
        _HARDWARE.clear()  # only sharing is lost: a key is equal to its twin either way
    hardware = _HARDWARE.setdefault(hardware, hardware)
    return hardware, tuple(map(_allocation, node.allocations))


def node_key(node: Node) -> Hashable:
    """What ``node`` is and holds, without the fields that name it (:data:`NAMING`): equal for two
    nodes exactly when every other field of theirs and of their devices and allocations is equal.
    Remembered per node object (``solver.domain.nodefold``): validation and normalise both ask."""
    hit = _KEYS.get(node)
    if hit is None:
        hit = _KEYS.put(node, content_key(node))
    return hit
