"""Small builders for the validate/verify tests: real-shaped nodes in a few lines.

Kept apart from ``tests/builders.py`` (the wire tests' builders) so the verifier's tests depend on
nothing else under construction.

The standard node, ``dgx``, has a PCIe tree that yields every distance class from GPU0::

    hb0 (host bridge, NUMA 0) ─┬─ psw0 (switch) ─┬─ sw0: GPU0 GPU1 mlx5_0 mlx5_1
                               │                 └─ sw1: GPU2 GPU3 mlx5_2 mlx5_3
                               └─ sw2: GPU4 GPU5 mlx5_4 mlx5_5
    hb1 (host bridge, NUMA 0) ─── sw3: (no devices; mlx5_8 hangs here: NODE from GPU0)
    hb2 (host bridge, NUMA 1) ─── sw4: GPU6 GPU7 mlx5_6 mlx5_7

so GPU0↔mlx5_0 is PIX, ↔mlx5_2 PXB, ↔mlx5_4 PHB, ↔mlx5_8 NODE, ↔mlx5_6 SYS. With ``crossed=True``
the NICs are named so that NIC k is *not* next to GPU k (mlx5_0/1 sit on sw1, mlx5_2/3 on sw0): a
solver that pairs GPU k with NIC k by name gets alignment wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from solver.domain.fragmentation import FreeCapacity, profile
from solver.domain.model import (
    Alignment,
    Allocation,
    ClusterMetrics,
    Distance,
    FabricSwitch,
    Gpu,
    Inventory,
    Job,
    JobResult,
    MemberPlacement,
    MemberShape,
    Nic,
    NicMode,
    NicRequest,
    Node,
    NumaNode,
    NvLink,
    PcieSwitch,
    Reason,
    ReasonCode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
    SolveStatus,
    SwitchKind,
)

HB = SwitchKind.HOST_BRIDGE
GPU_SWITCH = ("sw0", "sw0", "sw1", "sw1", "sw2", "sw2", "sw4", "sw4")
GPU_NUMA = (0, 0, 0, 0, 0, 0, 1, 1)


def dgx_switches() -> tuple[PcieSwitch, ...]:
    return (
        PcieSwitch(id="hb0", kind=HB, numa=0),
        PcieSwitch(id="psw0", parent="hb0", numa=0),
        PcieSwitch(id="sw0", parent="psw0", numa=0),
        PcieSwitch(id="sw1", parent="psw0", numa=0),
        PcieSwitch(id="sw2", parent="hb0", numa=0),
        PcieSwitch(id="hb1", kind=HB, numa=0),
        PcieSwitch(id="sw3", parent="hb1", numa=0),
        PcieSwitch(id="hb2", kind=HB, numa=1),
        PcieSwitch(id="sw4", parent="hb2", numa=1),
    )


def dgx_gpus(model: str = "H100", unhealthy: Iterable[str] = ()) -> tuple[Gpu, ...]:
    bad = set(unhealthy)
    return tuple(
        Gpu(
            id=f"GPU{k}",
            index=k,
            model=model,
            memory_mib=81920,
            numa=GPU_NUMA[k],
            pcie_switch=GPU_SWITCH[k],
            healthy=f"GPU{k}" not in bad,
        )
        for k in range(8)
    )


def dgx_nics(
    crossed: bool = False, unhealthy: Iterable[str] = (), no_rdma: Iterable[str] = ()
) -> tuple[Nic, ...]:
    bad, plain = set(unhealthy), set(no_rdma)
    switches = list(GPU_SWITCH)
    numas = list(GPU_NUMA)
    if crossed:
        switches[0:4] = ["sw1", "sw1", "sw0", "sw0"]
    nics = [
        Nic(
            name=f"mlx5_{k}",
            numa=numas[k],
            pcie_switch=switches[k],
            bandwidth_gbps=400,
            rail=k,
            healthy=f"mlx5_{k}" not in bad,
            rdma=f"mlx5_{k}" not in plain,
        )
        for k in range(8)
    ]
    nics.append(Nic(name="mlx5_8", numa=0, pcie_switch="sw3", bandwidth_gbps=400))
    return tuple(nics)


def all_pairs(n: int = 8) -> tuple[NvLink, ...]:
    """An NVSwitch-style node: every GPU pair linked."""
    return tuple(
        NvLink(gpu_a=f"GPU{a}", gpu_b=f"GPU{b}", links=18) for a in range(n) for b in range(a + 1, n)
    )


def dgx(
    name: str = "dgx-01",
    *,
    crossed: bool = False,
    labels: dict[str, str] | None = None,
    allocations: Iterable[Allocation] = (),
    unhealthy: Iterable[str] = (),
    no_rdma: Iterable[str] = (),
    nvlinks: tuple[NvLink, ...] | None = None,
    cpu_milli: int = 128_000,
    memory_mib: int = 1_024_000,
    model: str = "H100",
    leaf: str = "",
    schedulable: bool = True,
) -> Node:
    """An eight-GPU, nine-NIC node (see the module docstring for its PCIe tree)."""
    bad = list(unhealthy)
    return Node(
        name=name,
        labels=labels if labels is not None else {"pool": "train"},
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        numa_nodes=(NumaNode(id=0), NumaNode(id=1)),
        gpus=dgx_gpus(model, [d for d in bad if d.startswith("GPU")]),
        nics=dgx_nics(crossed, [d for d in bad if d.startswith("mlx5")], no_rdma),
        pcie_switches=dgx_switches(),
        nvlinks=all_pairs() if nvlinks is None else nvlinks,
        leaf=leaf,
        allocations=tuple(allocations),
        schedulable=schedulable,
    )


def shape(
    gpus: int = 0,
    *,
    nics: NicMode = NicMode.NONE,
    nic_count: int = 0,
    align: Requirement = Requirement.NONE,
    distance: Distance = Distance.PIX,
    numa: Requirement = Requirement.NONE,
    nvlink: Requirement = Requirement.NONE,
    cpu_milli: int = 0,
    memory_mib: int = 0,
    models: tuple[str, ...] = (),
    selector: dict[str, str] | None = None,
) -> MemberShape:
    return MemberShape(
        gpus=gpus,
        gpu_models=models,
        nics=NicRequest(mode=nics, count=nic_count),
        alignment=Alignment(mode=align, distance=distance),
        numa=numa,
        nvlink=nvlink,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        node_selector=selector or {},
    )


def role(name: str, replicas: int, member: MemberShape, min_replicas: int | None = None) -> Role:
    return Role(name=name, replicas=replicas, min_replicas=min_replicas, member=member)


def job(job_id: str, *roles: Role, priority: int = 0) -> Job:
    return Job(id=job_id, priority=priority, roles=roles)


def request(
    nodes: Iterable[Node], jobs: Iterable[Job], switches: Iterable[FabricSwitch] = ()
) -> SolveRequest:
    return SolveRequest(
        inventory=Inventory(nodes=tuple(nodes), switches=tuple(switches)),
        jobs=tuple(jobs),
    )


def member(
    role_name: str,
    index: int,
    node: str,
    gpus: Iterable[str] = (),
    nics: Iterable[str] = (),
    numa: int | None = None,
    aligned: bool = True,
) -> MemberPlacement:
    return MemberPlacement(
        role=role_name, index=index, node=node, gpus=tuple(gpus), nics=tuple(nics), numa=numa, aligned=aligned
    )


def placed(job_id: str, *members: MemberPlacement) -> JobResult:
    return JobResult(job_id=job_id, placed=True, members=members)


def unplaced(job_id: str, reason: Reason | None = None) -> JobResult:
    default = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message="the gang does not fit")
    return JobResult(job_id=job_id, placed=False, reason=reason or default)


def metrics_for(req: SolveRequest, jobs: Iterable[JobResult]) -> ClusterMetrics:
    """The metrics the verifier expects, counted the test's own way: schedulable nodes only; a node
    is fully free when no allocation holds one of its GPUs, and stays so if no member lands on it."""
    jobs = list(jobs)
    members = [m for jr in jobs if jr.placed for m in jr.members]
    total = before = free_before = free_after = 0
    for node in req.inventory.nodes:
        if not node.schedulable:
            continue
        ids = {g.id for g in node.gpus}
        held: set[str] = set()
        for alloc in node.allocations:
            held |= set(alloc.gpus) & ids
        total += len(node.gpus)
        before += len(held)
        if not any(alloc.gpus for alloc in node.allocations):
            free_before += 1
            free_after += all(m.node != node.name for m in members)
    frag, stranded = _fragmentation_for(req, jobs)
    return ClusterMetrics(
        gpus_total=total,
        gpus_used_before=before,
        gpus_used_after=before + sum(len(set(m.gpus)) for m in members),
        nodes_fully_free_before=free_before,
        nodes_fully_free_after=free_after,
        fragmentation_before=round(frag[0] / 1000, 3),
        fragmentation_after=round(frag[1] / 1000, 3),
        stranded_gpus_before=stranded[0] / 1000,
        stranded_gpus_after=stranded[1] / 1000,
    )


def _fragmentation_for(req: SolveRequest, jobs: list[JobResult]) -> tuple[list[float], list[int]]:
    """FGD's measure before and after, over the test's own count of each node's free milli-GPU,
    CPU and memory."""
    shapes = {(job.id, r.name): r.member for job in req.jobs for r in job.roles}
    workload = profile(req.policy.workload, shapes.values())
    frag, stranded = [0.0, 0.0], [0, 0]
    for node in req.inventory.nodes:
        if not node.schedulable:
            continue
        free = {g.id: 1000 for g in node.gpus if g.healthy}
        cpu, memory = node.cpu_milli, node.memory_mib
        for alloc in node.allocations:
            cpu, memory = cpu - alloc.cpu_milli, memory - alloc.memory_mib
            for g in alloc.gpus:
                free[g] = 0
            for share in alloc.gpu_shares:
                free[share.gpu] = 0 if alloc.mutex else free.get(share.gpu, 0) - share.milli
        for after in (False, True):
            if after:
                for jr in jobs:
                    for m in jr.members if jr.placed else ():
                        if m.node != node.name:
                            continue
                        shape = shapes.get((jr.job_id, m.role))  # None: an unknown role
                        if shape is not None:
                            cpu, memory = cpu - shape.cpu_milli, memory - shape.memory_mib
                        for g in () if m.gpu_shares else m.gpus:
                            free[g] = 0
                        for share in m.gpu_shares:
                            mutex = shape is not None and shape.mutex
                            free[share.gpu] = 0 if mutex else free.get(share.gpu, 0) - share.milli
            models = {g.id: g.model for g in node.gpus}
            state = FreeCapacity.of(
                ((models[g], max(0, f)) for g, f in free.items() if g in models),
                cpu if node.cpu_milli else None,
                memory if node.memory_mib else None,
            )
            f, s = workload.measure(state)
            frag[after] += f
            stranded[after] += s
    return frag, stranded


def with_footprint(req: SolveRequest, jr: JobResult) -> JobResult:
    """The job's reported footprint, counted the test's own way: leaves, NVLink domains, rails of
    the NICs used, and the tier of the lowest switch above every node (0 for one node)."""
    if not jr.placed:
        return jr
    nodes = {n.name: n for n in req.inventory.nodes}
    used = [nodes[m.node] for m in jr.members if m.node in nodes]
    parents = {s.id: (s.parent, s.tier) for s in req.inventory.switches}

    def above(leaf: str) -> dict[str, int]:
        out = {}
        while leaf in parents and leaf not in out:
            out[leaf] = parents[leaf][1]
            leaf = parents[leaf][0]
        return out

    tier = 0
    if len({n.name for n in used}) > 1:
        shared = set.intersection(*(set(above(n.leaf).items()) for n in used))
        tier = min((t for _, t in shared), default=0)
    rails = sorted(
        {
            nic.rail
            for m in jr.members
            if m.node in nodes
            for nic in nodes[m.node].nics
            if nic.name in m.nics and nic.rail is not None
        }
    )
    return jr.model_copy(
        update={
            "locality_tier": tier,
            "leaves_spanned": len({n.leaf for n in used if n.leaf}),
            "nvlink_domains_spanned": len({n.nvlink_domain for n in used if n.nvlink_domain}),
            "rails": tuple(rails),
        }
    )


def result(req: SolveRequest, *jobs: JobResult) -> SolveResult:
    """A result with the given job answers, and metrics and footprints consistent with them."""
    jobs = tuple(with_footprint(req, jr) for jr in jobs)
    return SolveResult(status=SolveStatus.OPTIMAL, jobs=jobs, metrics=metrics_for(req, jobs))
