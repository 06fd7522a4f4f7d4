"""Seeded scenarios for benchmarks and tests: HGX-like clusters, a realistic load, batches of gangs.

A node is shaped like an HGX H100 server: 8 GPUs fully NVLinked (NVSwitch), 8 RDMA NICs, 4 PCIe
switches each holding 2 GPUs and 2 NICs, 2 NUMA nodes. As on the real servers captured in
../shared/data/topo/, GPU k is *not* next to NIC k: switch s holds GPUs 2s, 2s+1 and the NICs
named by ``NIC_PAIRING`` (the rotation the a100-nv12 capture shows). Nodes sit 32 to a leaf
switch, leaves under spines.

Load is placed in job-shaped chunks (whole nodes, halves on one NUMA node, aligned pairs, single
GPUs, each with its NICs), so free-device patterns look like a running cluster, not like noise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from solver.domain.model import (
    Alignment,
    Allocation,
    Distance,
    FabricSwitch,
    Gpu,
    Inventory,
    Job,
    MemberShape,
    Nic,
    NicMode,
    NicRequest,
    Node,
    NumaNode,
    NvLink,
    PcieSwitch,
    Policy,
    Requirement,
    Role,
    SolveRequest,
    SwitchKind,
)

# Switch s holds GPUs 2s and 2s+1 and these two NICs (from the a100-nv12 capture: GPU0/1 ↔ mlx5_2/3).
NIC_PAIRING = ((2, 3), (0, 1), (6, 7), (4, 5))
NODES_PER_LEAF = 32
LEAVES_PER_SPINE = 8


def hgx_node(name: str, leaf: str, allocations: tuple[Allocation, ...] = ()) -> Node:
    switches = [PcieSwitch(id=f"hb{n}", kind=SwitchKind.HOST_BRIDGE, numa=n) for n in (0, 1)]
    gpus, nics = [], []
    for s, pair in enumerate(NIC_PAIRING):
        numa = s // 2
        switches.append(PcieSwitch(id=f"pex{s}", parent=f"hb{numa}", numa=numa))
        gpus += [
            Gpu(
                id=f"GPU{i}",
                index=i,
                uuid=f"GPU-{name}-{i}",
                model="H100-SXM5-80GB",
                memory_mib=81559,
                numa=numa,
                pcie_switch=f"pex{s}",
            )
            for i in (2 * s, 2 * s + 1)
        ]
        nics += [
            Nic(name=f"mlx5_{k}", numa=numa, pcie_switch=f"pex{s}", bandwidth_gbps=400, rail=k) for k in pair
        ]
    nics.sort(key=lambda n: n.rail or 0)
    links = tuple(
        NvLink(gpu_a=f"GPU{a}", gpu_b=f"GPU{b}", links=18) for a in range(8) for b in range(a + 1, 8)
    )
    return Node(
        name=name,
        labels={"nvidia.com/gpu.product": "H100-SXM5-80GB"},
        cpu_milli=224_000,
        memory_mib=2_000_000,
        numa_nodes=(NumaNode(id=0, cpu_milli=112_000), NumaNode(id=1, cpu_milli=112_000)),
        gpus=tuple(gpus),
        nics=tuple(nics),
        pcie_switches=tuple(switches),
        nvlinks=links,
        leaf=leaf,
        allocations=allocations,
    )


def _chunk(owner: str, gpus: list[int]) -> Allocation:
    """An allocation of ``gpus`` with the NICs on their switches, CPU and memory in proportion."""
    nics = sorted(NIC_PAIRING[g // 2][g % 2] for g in gpus)  # each GPU with the NIC beside it
    return Allocation(
        owner=owner,
        gpus=tuple(f"GPU{g}" for g in gpus),
        nics=tuple(f"mlx5_{k}" for k in nics),
        cpu_milli=24_000 * len(gpus),
        memory_mib=200_000 * len(gpus),
    )


def node_load(rng: random.Random, name: str, target: float) -> tuple[Allocation, ...]:
    """Allocations filling about ``target`` of a node's 8 GPUs, in job-shaped chunks."""
    free = list(range(8))
    out: list[Allocation] = []
    while free and (8 - len(free)) / 8 < target:
        size = rng.choice((8, 4, 4, 2, 2, 1))
        if size == 8 and len(free) < 8:
            size = 4
        if size == 4:
            halves = [h for h in ((0, 1, 2, 3), (4, 5, 6, 7)) if all(g in free for g in h)]
            if not halves:
                size = 2
            else:
                chunk = list(rng.choice(halves))
        if size == 2:
            pairs = [(g, g + 1) for g in (0, 2, 4, 6) if g in free and g + 1 in free]
            if not pairs:
                size = 1
            else:
                chunk = list(rng.choice(pairs))
        if size == 1:
            chunk = [rng.choice(free)]
        if size == 8:
            chunk = list(range(8))
        out.append(_chunk(f"{name}-run{len(out)}", chunk))
        free = [g for g in free if g not in chunk]
    return tuple(out)


def cluster(
    n_nodes: int,
    *,
    load: float = 0.6,
    seed: int = 0,
    leaves_per_spine: int = LEAVES_PER_SPINE,
    core: bool = False,
) -> Inventory:
    """``n_nodes`` HGX nodes, 32 per leaf, ``leaves_per_spine`` leaves per spine (and, with
    ``core``, the spines under one core switch), with each node loaded to a level drawn around
    ``load`` (whole idle and whole busy nodes included), seeded."""
    rng = random.Random(seed)
    leaves = (n_nodes + NODES_PER_LEAF - 1) // NODES_PER_LEAF
    spines = (leaves + leaves_per_spine - 1) // leaves_per_spine
    top = [FabricSwitch(id="core", tier=3)] if core else []
    switches = [
        *top,
        *(FabricSwitch(id=f"spine{s:02d}", tier=2, parent="core" if core else "") for s in range(spines)),
    ]
    switches += [
        FabricSwitch(id=f"leaf{i:03d}", tier=1, parent=f"spine{i // leaves_per_spine:02d}")
        for i in range(leaves)
    ]
    nodes = []
    for i in range(n_nodes):
        name = f"node{i:05d}"
        level = min(1.0, max(0.0, rng.gauss(load, 0.35)))
        nodes.append(hgx_node(name, f"leaf{i // NODES_PER_LEAF:03d}", node_load(rng, name, level)))
    return Inventory(nodes=tuple(nodes), switches=tuple(switches))


def member(gpus: int, *, aligned: Requirement) -> MemberShape:
    nics = NicRequest(mode=NicMode.PER_GPU) if aligned != Requirement.NONE else NicRequest(mode=NicMode.NONE)
    return MemberShape(
        gpus=gpus,
        nics=nics,
        alignment=Alignment(mode=aligned, distance=Distance.PIX),
        nvlink=Requirement.REQUIRED if gpus > 1 else Requirement.NONE,
        cpu_milli=16_000 * gpus,
        memory_mib=160_000 * gpus,
    )


def batch(n_jobs: int, *, seed: int = 0, max_gang_nodes: int = 16) -> tuple[Job, ...]:
    """A pending queue: about 70 % single-node jobs of 1/2/4/8 GPUs (inference and small training,
    alignment preferred) and 30 % multi-node training gangs of 2..``max_gang_nodes`` 8-GPU members
    (a NIC per GPU, alignment required), priorities 0–3."""
    rng = random.Random(seed + 1_000_003)
    jobs = []
    for j in range(n_jobs):
        if rng.random() < 0.7:
            gpus = rng.choice((1, 1, 2, 2, 4, 8))
            role = Role(name="worker", replicas=1, member=member(gpus, aligned=Requirement.PREFERRED))
            kind = "single"
        else:
            size = rng.randint(2, max_gang_nodes)
            role = Role(name="worker", replicas=size, member=member(8, aligned=Requirement.REQUIRED))
            kind = "gang"
        jobs.append(Job(id=f"{kind}-{j:04d}", priority=rng.choice((0, 0, 1, 2, 3)), roles=(role,)))
    return tuple(jobs)


@dataclass(frozen=True)
class Generated:
    name: str
    request: SolveRequest


def scenario(n_nodes: int, n_jobs: int, *, seed: int = 0, time_limit_s: float = 10.0) -> Generated:
    request = SolveRequest(
        request_id=f"bench-{n_nodes}n-{n_jobs}j-s{seed}",
        inventory=cluster(n_nodes, seed=seed),
        jobs=batch(n_jobs, seed=seed),
        policy=Policy(time_limit_s=time_limit_s, seed=seed),
    )
    return Generated(name=f"{n_nodes} nodes × {n_jobs} jobs", request=request)
