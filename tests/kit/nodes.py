"""Nodes, inventories and fabrics: one builder, :func:`node`, over a few kinds of real-shaped server.

A kind of server is a :class:`Hardware` value, so a test names the hardware it needs and changes
only what it cares about::

    node("n0")                               # HGX: 8 GPUs, 8 rail NICs, 4 PCIe switches, 2 NUMA
    node("n0", SMALL, used_gpus=(0, 1))      # 4 GPUs, 2 NICs: small enough for the brute force
    node("dgx-02", DISTANCE_TREE_CROSSED)    # every PCIe distance class from GPU0, NICs crossed
    node("n1", gpus=4, nics=2, leaf="leaf1") # any Hardware field, changed for this node

``HGX`` and ``SMALL`` are regular trees: ``switches`` PCIe switches spread evenly over the NUMA
nodes, each under its NUMA node's host bridge, with the GPUs and NICs dealt evenly over them in
order. ``DISTANCE_TREE`` spells its tree out (see :data:`DISTANCE_TREE`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from solver.domain.model import (
    Allocation,
    FabricSwitch,
    Gpu,
    Inventory,
    Nic,
    Node,
    NumaNode,
    NvLink,
    PcieSwitch,
    SwitchKind,
)

SPINE = "spine0"
NIC_GBPS = 400


@dataclass(frozen=True)
class Tree:
    """An irregular PCIe tree spelled out: the switches, and where each GPU and NIC hangs."""

    switches: tuple[PcieSwitch, ...]
    gpus: tuple[tuple[str, int], ...]  # per GPU k: (its PCIe switch, its NUMA node)
    nics: tuple[tuple[str, int, int | None], ...]  # per NIC k: (switch, NUMA node, rail)


@dataclass(frozen=True)
class Hardware:
    """How a node of one kind is built, and the defaults that kind comes with."""

    gpus: int
    nics: int
    switches: int  # PCIe switches of a regular tree
    numa_nodes: int
    model: str
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    nic_shift: int = 0  # NIC k sits where NIC k - shift would: pairing GPU k with NIC k goes wrong
    rails: bool = True  # NIC k is cabled to rail k
    nvlink: str = "all"  # "all" (NVSwitch), "pairs" (0-1, 2-3, ...) or "none"
    links: int = 18  # NVLink count of a linked pair (NV18 on an HGX H100 board)
    numa_share: bool = False  # each NUMA node reports its share of the node's CPU and memory
    uuids: bool = False
    leaf: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    tree: Tree | None = None  # an irregular tree; gpus, nics and switches then follow it


HGX = Hardware(
    gpus=8,
    nics=8,
    switches=4,
    numa_nodes=2,
    model="H100-SXM5-80GB",
    gpu_memory_mib=81559,
    cpu_milli=224_000,
    memory_mib=2_097_152,
    numa_share=True,
    uuids=True,
    leaf="leaf0",
)
"""A DGX/HGX H100 node: two NUMA nodes, each a host bridge over two PCIe switches, each switch with
two GPUs and two RDMA NICs (NIC k on rail k), every GPU pair NVLinked through NVSwitch."""

SMALL = Hardware(
    gpus=4,
    nics=2,
    switches=2,
    numa_nodes=2,
    model="H100",
    gpu_memory_mib=81920,
    cpu_milli=0,
    memory_mib=0,
    nic_shift=1,
    rails=False,
    links=4,
)
"""A small server for exhaustive checks: two PCIe switches (one per NUMA node), two GPUs and one NIC
on each, NIC names rotated by one (mlx5_0 sits by GPU2, not GPU0), so pairing by name is wrong, as
on real servers; CPU and memory unsaid."""

_H = SwitchKind.HOST_BRIDGE
_GPU_AT = (("sw0", 0), ("sw0", 0), ("sw1", 0), ("sw1", 0), ("sw2", 0), ("sw2", 0), ("sw4", 1), ("sw4", 1))
_TREE_SWITCHES = (
    PcieSwitch(id="hb0", kind=_H, numa=0),
    PcieSwitch(id="psw0", parent="hb0", numa=0),
    PcieSwitch(id="sw0", parent="psw0", numa=0),
    PcieSwitch(id="sw1", parent="psw0", numa=0),
    PcieSwitch(id="sw2", parent="hb0", numa=0),
    PcieSwitch(id="hb1", kind=_H, numa=0),
    PcieSwitch(id="sw3", parent="hb1", numa=0),
    PcieSwitch(id="hb2", kind=_H, numa=1),
    PcieSwitch(id="sw4", parent="hb2", numa=1),
)


def _distance_tree(crossed: bool) -> Hardware:
    nic_switch = [s for s, _ in _GPU_AT]
    if crossed:
        nic_switch[0:4] = ["sw1", "sw1", "sw0", "sw0"]
    nics = (*((nic_switch[k], _GPU_AT[k][1], k) for k in range(8)), ("sw3", 0, None))
    return Hardware(
        gpus=8,
        nics=9,
        switches=5,
        numa_nodes=2,
        model="H100",
        gpu_memory_mib=81920,
        cpu_milli=128_000,
        memory_mib=1_024_000,
        labels={"pool": "train"},
        tree=Tree(_TREE_SWITCHES, _GPU_AT, nics),
    )


DISTANCE_TREE = _distance_tree(crossed=False)
"""Eight GPUs and nine NICs on a PCIe tree that yields every distance class from GPU0::

    hb0 (host bridge, NUMA 0) ─┬─ psw0 (switch) ─┬─ sw0: GPU0 GPU1 mlx5_0 mlx5_1
                               │                 └─ sw1: GPU2 GPU3 mlx5_2 mlx5_3
                               └─ sw2: GPU4 GPU5 mlx5_4 mlx5_5
    hb1 (host bridge, NUMA 0) ─── sw3: (no GPUs; mlx5_8, on no rail: NODE from GPU0)
    hb2 (host bridge, NUMA 1) ─── sw4: GPU6 GPU7 mlx5_6 mlx5_7

so GPU0↔mlx5_0 is PIX, ↔mlx5_2 PXB, ↔mlx5_4 PHB, ↔mlx5_8 NODE, ↔mlx5_6 SYS."""

DISTANCE_TREE_CROSSED = _distance_tree(crossed=True)
""":data:`DISTANCE_TREE` with mlx5_0/1 on sw1 and mlx5_2/3 on sw0: a solver that pairs GPU k with NIC
k by name gets alignment wrong."""


def node(
    name: str,
    hardware: Hardware = HGX,
    *,
    labels: Mapping[str, str] | None = None,
    allocations: Iterable[Allocation] = (),
    used_gpus: Iterable[int] = (),
    used_nics: Iterable[int] = (),
    nvlinks: Sequence[NvLink] | None = None,
    nvlink_domain: str = "",
    unhealthy: Iterable[str] = (),
    no_rdma: Iterable[str] = (),
    schedulable: bool = True,
    **build: object,
) -> Node:
    """A node ``name`` of ``hardware``, any of whose fields ``build`` changes (``gpus=4``,
    ``leaf="leaf1"``, ``cpu_milli=0``, ...). ``used_gpus``/``used_nics`` (indices) are held by work
    owned by ``running``, after ``allocations``; ``unhealthy`` and ``no_rdma`` name devices."""
    hw = replace(hardware, **build)  # type: ignore[arg-type]
    tree = hw.tree or _regular(hw)
    bad, plain = set(unhealthy), set(no_rdma)
    gpus = tuple(
        Gpu(
            id=f"GPU{k}",
            index=k,
            uuid=f"GPU-{name}-{k:04d}" if hw.uuids else "",
            model=hw.model,
            memory_mib=hw.gpu_memory_mib,
            numa=numa,
            pcie_switch=switch,
            healthy=f"GPU{k}" not in bad,
        )
        for k, (switch, numa) in enumerate(tree.gpus)
    )
    nics = tuple(
        Nic(
            name=f"mlx5_{k}",
            numa=numa,
            pcie_switch=switch,
            bandwidth_gbps=NIC_GBPS,
            rail=rail if hw.rails else None,
            healthy=f"mlx5_{k}" not in bad,
            rdma=f"mlx5_{k}" not in plain,
        )
        for k, (switch, numa, rail) in enumerate(tree.nics)
    )
    numa_ids = sorted({s.numa for s in tree.switches if s.numa is not None})
    share = len(numa_ids) if hw.numa_share else 0
    held = tuple(allocations)
    if used_gpus or used_nics:
        held += (
            Allocation(
                owner="running",
                gpus=tuple(f"GPU{i}" for i in used_gpus),
                nics=tuple(f"mlx5_{i}" for i in used_nics),
            ),
        )
    return Node(
        name=name,
        labels=dict(hw.labels if labels is None else labels),
        cpu_milli=hw.cpu_milli,
        memory_mib=hw.memory_mib,
        numa_nodes=tuple(
            NumaNode(id=n, cpu_milli=hw.cpu_milli // share, memory_mib=hw.memory_mib // share)
            if share
            else NumaNode(id=n)
            for n in numa_ids
        ),
        gpus=gpus,
        nics=nics,
        pcie_switches=tree.switches,
        nvlinks=tuple(nvlinks) if nvlinks is not None else _nvlinks(hw, len(gpus)),
        leaf=hw.leaf,
        nvlink_domain=nvlink_domain,
        allocations=held,
        schedulable=schedulable,
    )


def _spread(item: int, items: int, bins: int) -> int:
    """The bin of ``item`` when ``items`` are dealt evenly, in order, into ``bins``."""
    return item * bins // items


def _regular(hw: Hardware) -> Tree:
    switch_numa = [s * hw.numa_nodes // hw.switches for s in range(hw.switches)]
    bridges = tuple(PcieSwitch(id=f"hb{n}", kind=_H, numa=n) for n in sorted(set(switch_numa)))
    switches = tuple(PcieSwitch(id=f"sw{s}", parent=f"hb{n}", numa=n) for s, n in enumerate(switch_numa))

    def at(item: int, items: int) -> tuple[str, int]:
        s = _spread(item, items, hw.switches)
        return f"sw{s}", switch_numa[s]

    gpus = tuple(at(k, hw.gpus) for k in range(hw.gpus))
    nics = tuple((*at((k - hw.nic_shift) % hw.nics, hw.nics), k) for k in range(hw.nics))
    return Tree(bridges + switches, gpus, nics)


def _nvlinks(hw: Hardware, gpus: int) -> tuple[NvLink, ...]:
    if hw.nvlink == "all":
        pairs = [(a, b) for a in range(gpus) for b in range(a + 1, gpus)]
    elif hw.nvlink == "pairs":
        pairs = [(i, i + 1) for i in range(0, gpus - 1, 2)]
    elif hw.nvlink == "none":
        pairs = []
    else:
        raise ValueError(f"nvlink must be 'all', 'pairs' or 'none', not {hw.nvlink!r}")
    return tuple(NvLink(gpu_a=f"GPU{a}", gpu_b=f"GPU{b}", links=hw.links) for a, b in pairs)


def all_pairs(gpus: int = 8, links: int = 18) -> tuple[NvLink, ...]:
    """NVSwitch-style links: every pair of ``gpus`` GPUs."""
    return _nvlinks(replace(HGX, links=links), gpus)


def allocation(owner: str, gpus: Iterable[str] = (), nics: Iterable[str] = ()) -> Allocation:
    """Work already running on a node, holding the named devices."""
    return Allocation(owner=owner, gpus=tuple(gpus), nics=tuple(nics))


def inventory(*nodes: Node, switches: Sequence[FabricSwitch] | None = None) -> Inventory:
    """An inventory of ``nodes``; by default the fabric is every leaf the nodes name (tier 1) under
    one spine (tier 2), which is what a single-pod cluster looks like."""
    if switches is None:
        leaves = sorted({n.leaf for n in nodes if n.leaf})
        switches = [FabricSwitch(id=SPINE, tier=2)] + [
            FabricSwitch(id=leaf, tier=1, parent=SPINE) for leaf in leaves
        ]
    return Inventory(nodes=tuple(nodes), switches=tuple(switches))


def cluster(nodes: int, *, nodes_per_leaf: int = 4, **node_kwargs: object) -> Inventory:
    """``nodes`` identical nodes ``n0..``, ``nodes_per_leaf`` under each leaf ``leaf0..``."""
    return inventory(
        *(node(f"n{i}", leaf=f"leaf{i // nodes_per_leaf}", **node_kwargs) for i in range(nodes))  # type: ignore[arg-type]
    )


def fat_tree(leaves: int, spines: int = 1) -> tuple[FabricSwitch, ...]:
    """``leaves`` tier-1 switches spread over ``spines`` tier-2 switches under one tier-3 core."""
    out = [FabricSwitch(id="core", tier=3)]
    out += [FabricSwitch(id=f"spine{s}", tier=2, parent="core") for s in range(spines)]
    out += [FabricSwitch(id=f"leaf{i}", tier=1, parent=f"spine{i % spines}") for i in range(leaves)]
    return tuple(out)
