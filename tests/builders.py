"""Small, realistic requests built in Python, shared by the tests.

The default node is DGX-shaped: two NUMA nodes, each with a host bridge above two PCIe switches,
and each PCIe switch holding two GPUs and two RDMA NICs (NIC k on rail k), with every GPU pair
NVLinked through NVSwitch. Tests change what they care about with keyword arguments, or with
``model_copy(update=...)`` on the result, and leave the rest realistic.

    inventory = make_inventory(make_node("n0"), make_node("n1", leaf="leaf1"))
    request = make_request(inventory, [make_job("train", gpus_per_member=8, members=2)])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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

GPU_MODEL = "H100-SXM5-80GB"
GPU_MEMORY_MIB = 81559
NIC_GBPS = 400
NVSWITCH_LINKS = 18  # what nvidia-smi prints as NV18 between any two H100s of an HGX board
SPINE = "spine0"


def make_node(
    name: str,
    gpus: int = 8,
    nics: int = 8,
    leaf: str = "leaf0",
    *,
    pcie_switches: int = 4,
    numa_nodes: int = 2,
    gpu_model: str = GPU_MODEL,
    nvlink: bool = True,
    cpu_milli: int = 224_000,
    memory_mib: int = 2_097_152,
    labels: dict[str, str] | None = None,
    allocations: Sequence[Allocation] = (),
) -> Node:
    """A DGX-like node: ``gpus`` GPUs ``GPU0..`` and ``nics`` NICs ``mlx5_0..`` spread evenly over
    ``pcie_switches`` switches ``sw0..``, which are spread evenly over ``numa_nodes`` NUMA nodes, each
    with a host bridge ``hb0..`` as their parent. ``nvlink`` joins every GPU pair (NVSwitch)."""
    switch_numa = [s * numa_nodes // pcie_switches for s in range(pcie_switches)]
    gpu_list = tuple(
        Gpu(
            id=f"GPU{i}",
            index=i,
            uuid=f"GPU-{name}-{i:04d}",
            model=gpu_model,
            memory_mib=GPU_MEMORY_MIB,
            numa=switch_numa[_spread(i, gpus, pcie_switches)],
            pcie_switch=f"sw{_spread(i, gpus, pcie_switches)}",
        )
        for i in range(gpus)
    )
    nic_list = tuple(
        Nic(
            name=f"mlx5_{k}",
            numa=switch_numa[_spread(k, nics, pcie_switches)],
            pcie_switch=f"sw{_spread(k, nics, pcie_switches)}",
            bandwidth_gbps=NIC_GBPS,
            rail=k,
        )
        for k in range(nics)
    )
    return Node(
        name=name,
        labels=dict(labels or {}),
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        numa_nodes=tuple(
            NumaNode(id=n, cpu_milli=cpu_milli // numa_nodes, memory_mib=memory_mib // numa_nodes)
            for n in range(numa_nodes)
        ),
        gpus=gpu_list,
        nics=nic_list,
        pcie_switches=_pcie_tree(switch_numa, numa_nodes),
        nvlinks=_full_nvlink(gpu_list) if nvlink else (),
        leaf=leaf,
        allocations=tuple(allocations),
    )


def _spread(item: int, items: int, bins: int) -> int:
    """The bin of ``item`` when ``items`` are dealt evenly, in order, into ``bins``."""
    return item * bins // items


def _pcie_tree(switch_numa: list[int], numa_nodes: int) -> tuple[PcieSwitch, ...]:
    bridges = tuple(PcieSwitch(id=f"hb{n}", kind=SwitchKind.HOST_BRIDGE, numa=n) for n in range(numa_nodes))
    switches = tuple(PcieSwitch(id=f"sw{s}", parent=f"hb{n}", numa=n) for s, n in enumerate(switch_numa))
    return bridges + switches


def _full_nvlink(gpus: tuple[Gpu, ...]) -> tuple[NvLink, ...]:
    pairs = ((a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :])
    return tuple(NvLink(gpu_a=a.id, gpu_b=b.id, links=NVSWITCH_LINKS) for a, b in pairs)


def make_allocation(owner: str, gpus: Iterable[str] = (), nics: Iterable[str] = ()) -> Allocation:
    """Work already running on a node, holding the named devices."""
    return Allocation(owner=owner, gpus=tuple(gpus), nics=tuple(nics))


def make_inventory(*nodes: Node, switches: Sequence[FabricSwitch] | None = None) -> Inventory:
    """An inventory of ``nodes``; by default the fabric is every leaf the nodes name (tier 1) under
    one spine (tier 2), which is what a single-pod cluster looks like."""
    if switches is None:
        leaves = sorted({node.leaf for node in nodes if node.leaf})
        switches = [FabricSwitch(id=SPINE, tier=2)] + [
            FabricSwitch(id=leaf, tier=1, parent=SPINE) for leaf in leaves
        ]
    return Inventory(nodes=tuple(nodes), switches=tuple(switches))


def make_cluster(nodes: int, *, nodes_per_leaf: int = 4, **node_kwargs: object) -> Inventory:
    """``nodes`` identical nodes ``n0..``, ``nodes_per_leaf`` under each leaf ``leaf0..``."""
    return make_inventory(
        *(make_node(f"n{i}", leaf=f"leaf{i // nodes_per_leaf}", **node_kwargs) for i in range(nodes))  # type: ignore[arg-type]
    )


def make_job(
    id: str,
    gpus_per_member: int = 8,
    members: int = 1,
    nic_mode: NicMode = NicMode.PER_GPU,
    alignment: Requirement = Requirement.PREFERRED,
    *,
    distance: Distance = Distance.PIX,
    min_members: int | None = None,
    priority: int = 0,
    role: str = "worker",
    nic_count: int = 0,
    numa: Requirement = Requirement.NONE,
    nvlink: Requirement = Requirement.NONE,
    gpu_models: Sequence[str] = (),
    labels: dict[str, str] | None = None,
) -> Job:
    """A one-role gang job: ``members`` replicas of ``gpus_per_member`` GPUs, all or
    (``min_members``) at least that many, with NICs per GPU and GPU↔NIC alignment preferred."""
    shape = MemberShape(
        gpus=gpus_per_member,
        gpu_models=tuple(gpu_models),
        nics=NicRequest(mode=nic_mode, count=nic_count),
        alignment=Alignment(mode=alignment, distance=distance),
        numa=numa,
        nvlink=nvlink,
    )
    return Job(
        id=id,
        priority=priority,
        labels=dict(labels or {}),
        roles=(Role(name=role, replicas=members, min_replicas=min_members, member=shape),),
    )


def make_request(
    inventory: Inventory, jobs: Sequence[Job] = (), *, request_id: str = "", **policy: object
) -> SolveRequest:
    """A request; ``policy`` keywords (``time_limit_s=2``, ``seed=1`` ...) override the defaults."""
    return SolveRequest(
        request_id=request_id,
        inventory=inventory,
        jobs=tuple(jobs),
        policy=Policy(**policy),  # type: ignore[arg-type]
    )
