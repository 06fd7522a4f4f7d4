"""Small inventories and jobs for the solver's tests, and a brute-force oracle.

The oracle enumerates every way to give each member a node, GPUs and NICs, checks the rules with
plain permutations (nothing shared with the model builder or the verifier), and returns the best
priority-weighted placed work. It is exponential: keep instances to a few nodes and members.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations, permutations

from hypothesis import strategies as st

from solver.compile.objective import is_placed_work
from solver.domain.model import (
    Alignment,
    Allocation,
    Distance,
    FabricSwitch,
    Gpu,
    Inventory,
    Job,
    Locality,
    MemberShape,
    Nic,
    NicMode,
    NicRequest,
    Node,
    NumaNode,
    NvLink,
    PcieSwitch,
    Policy,
    PriorityMode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
    SwitchKind,
)


def server(
    name: str,
    *,
    switches: int = 2,
    gpus_per_switch: int = 2,
    nics_per_switch: int = 1,
    nic_shift: int = 1,
    nvlink: str = "all",
    used_gpus: Sequence[int] = (),
    used_nics: Sequence[int] = (),
    cpu_milli: int = 0,
    memory_mib: int = 0,
    labels: dict[str, str] | None = None,
    model: str = "H100",
    leaf: str = "",
    nvlink_domain: str = "",
) -> Node:
    """A server with ``switches`` PCIe switches (two per NUMA node, under one host bridge each),
    each holding GPUs and NICs. NIC names are rotated by ``nic_shift`` so GPU k is *not* next to
    NIC k, as on real servers. ``nvlink``: "all", "pairs" (0-1, 2-3, ...) or "none"."""
    numa_of = [s * 2 // max(switches, 1) for s in range(switches)]
    pcie = [PcieSwitch(id=f"hb{n}", kind=SwitchKind.HOST_BRIDGE, numa=n) for n in sorted(set(numa_of))]
    pcie += [PcieSwitch(id=f"sw{s}", parent=f"hb{numa_of[s]}", numa=numa_of[s]) for s in range(switches)]
    gpus = [
        Gpu(
            id=f"GPU{s * gpus_per_switch + k}",
            index=s * gpus_per_switch + k,
            model=model,
            numa=numa_of[s],
            pcie_switch=f"sw{s}",
            memory_mib=81920,
        )
        for s in range(switches)
        for k in range(gpus_per_switch)
    ]
    total_nics = switches * nics_per_switch
    nics = sorted(
        (
            Nic(
                name=f"mlx5_{(s * nics_per_switch + k + nic_shift) % total_nics}",
                numa=numa_of[s],
                pcie_switch=f"sw{s}",
                bandwidth_gbps=400,
            )
            for s in range(switches)
            for k in range(nics_per_switch)
        ),
        key=lambda n: int(n.name.split("_")[1]),
    )
    if nvlink == "all":
        pairs = list(combinations(range(len(gpus)), 2))
    elif nvlink == "pairs":
        pairs = [(i, i + 1) for i in range(0, len(gpus) - 1, 2)]
    else:
        pairs = []
    allocations = ()
    if used_gpus or used_nics:
        allocations = (
            Allocation(
                owner="running",
                gpus=tuple(f"GPU{i}" for i in used_gpus),
                nics=tuple(f"mlx5_{i}" for i in used_nics),
            ),
        )
    return Node(
        name=name,
        labels=labels or {},
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        numa_nodes=tuple(NumaNode(id=n) for n in sorted(set(numa_of))),
        gpus=tuple(gpus),
        nics=tuple(nics),
        pcie_switches=tuple(pcie),
        nvlinks=tuple(NvLink(gpu_a=f"GPU{a}", gpu_b=f"GPU{b}", links=4) for a, b in pairs),
        allocations=allocations,
        leaf=leaf,
        nvlink_domain=nvlink_domain,
    )


def job(
    job_id: str,
    gpus: int,
    members: int = 1,
    *,
    minimum: int | None = None,
    priority: int = 0,
    nics: NicMode = NicMode.NONE,
    nic_count: int = 0,
    align: Requirement = Requirement.NONE,
    distance: Distance = Distance.PIX,
    numa: Requirement = Requirement.NONE,
    nvlink: Requirement = Requirement.NONE,
    cpu_milli: int = 0,
    selector: dict[str, str] | None = None,
    locality: Locality | None = None,
    nvlink_domain: Requirement = Requirement.NONE,
) -> Job:
    shape = MemberShape(
        gpus=gpus,
        nics=NicRequest(mode=nics, count=nic_count),
        alignment=Alignment(mode=align, distance=distance),
        numa=numa,
        nvlink=nvlink,
        cpu_milli=cpu_milli,
        node_selector=selector or {},
    )
    return Job(
        id=job_id,
        priority=priority,
        roles=(Role(name="worker", replicas=members, min_replicas=minimum, member=shape),),
        locality=locality or Locality(),
        nvlink_domain=nvlink_domain,
    )


def fat_tree(leaves: int, spines: int = 1) -> tuple[FabricSwitch, ...]:
    """``leaves`` tier-1 switches spread over ``spines`` tier-2 switches under one tier-3 core."""
    out = [FabricSwitch(id="core", tier=3)]
    out += [FabricSwitch(id=f"spine{s}", tier=2, parent="core") for s in range(spines)]
    out += [FabricSwitch(id=f"leaf{i}", tier=1, parent=f"spine{i % spines}") for i in range(leaves)]
    return tuple(out)


def request(
    nodes: Sequence[Node], jobs: Sequence[Job], switches: Sequence[FabricSwitch] = (), **policy: object
) -> SolveRequest:
    return SolveRequest(
        inventory=Inventory(nodes=tuple(nodes), switches=tuple(switches)),
        jobs=tuple(jobs),
        policy=Policy(time_limit_s=10, **policy),
    )


# --------------------------------------------------------------------------- brute force


def _distance(node: Node, a: tuple[str, int | None], b: tuple[str, int | None]) -> int:
    """PCIe distance written out for the two-level trees ``server`` builds (switch → host bridge)."""
    parents = {s.id: s.parent for s in node.pcie_switches}
    if a[0] == b[0]:
        return int(Distance.PIX)
    if parents.get(a[0]) and parents.get(a[0]) == parents.get(b[0]):
        return int(Distance.PHB)
    if a[1] is not None and a[1] == b[1]:
        return int(Distance.NODE)
    return int(Distance.SYS)


def member_options(node: Node, shape: MemberShape) -> Iterator[tuple[frozenset[str], frozenset[str]]]:
    """Every (GPU set, NIC set) of ``node`` one member of ``shape`` could take, rules checked."""
    taken = {d for a in node.allocations for d in (*a.gpus, *a.nics)}
    gpus = [g for g in node.gpus if g.id not in taken and g.healthy]
    nics = [n for n in node.nics if n.name not in taken and n.healthy and n.rdma]
    if any(node.labels.get(k) != v for k, v in shape.node_selector.items()):
        return
    links = {frozenset((link.gpu_a, link.gpu_b)) for link in node.nvlinks}
    want = {NicMode.PER_GPU: shape.gpus, NicMode.PER_MEMBER: shape.nics.count}.get(shape.nics.mode, 0)
    limit = int(shape.alignment.distance or Distance.PIX)
    for gs in combinations(gpus, shape.gpus):
        if shape.nvlink == Requirement.REQUIRED and any(
            frozenset((a.id, b.id)) not in links for a, b in combinations(gs, 2)
        ):
            continue
        for ns in combinations(nics, want):
            numas = {d.numa for d in (*gs, *ns)}
            if shape.numa == Requirement.REQUIRED and (len(numas) != 1 or None in numas):
                continue
            if shape.alignment.mode == Requirement.REQUIRED and want and gs:
                where_g = [(g.pcie_switch, g.numa) for g in gs]
                where_n = [(n.pcie_switch, n.numa) for n in ns]
                if shape.nics.mode == NicMode.PER_GPU:
                    ok = any(
                        all(_distance(node, where_g[i], where_n[p[i]]) <= limit for i in range(len(gs)))
                        for p in permutations(range(len(ns)))
                    )
                else:
                    ok = all(any(_distance(node, g, n) <= limit for g in where_g) for n in where_n)
                if not ok:
                    continue
            yield frozenset(g.id for g in gs), frozenset(n.name for n in ns)


def placed_work(result: SolveResult) -> tuple[float, ...]:
    """The values of a result's placed-work tiers, highest first (one a priority level under STRICT)."""
    return tuple(v.value for v in result.objectives if is_placed_work(v.name))


def best_placed_work(req: SolveRequest) -> tuple[int, ...]:
    """The optimum of the placed-work tiers, by exhaustive search over every member's options:
    under WEIGHTED one sum of GPUs weighted by priority + 1; under STRICT each priority level's
    milli-GPU placed, highest level first, compared lexicographically."""
    levels = sorted({j.priority for j in req.jobs}, reverse=True)
    weighted = req.policy.priority_mode == PriorityMode.WEIGHTED

    def key(work: dict[int, int]) -> tuple[int, ...]:
        if weighted:
            return (sum((p + 1) * w for p, w in work.items()),)
        return tuple(work.get(p, 0) for p in levels) if len(levels) > 1 else (sum(work.values()),)

    nodes = req.inventory.nodes
    cpu_free = {
        n.name: (n.cpu_milli - sum(a.cpu_milli for a in n.allocations)) if n.cpu_milli else None
        for n in nodes
    }
    options = {
        id(role): [(n.name, g, c) for n in nodes for g, c in member_options(n, role.member)]
        for j in req.jobs
        for role in j.roles
    }
    best = key({})

    parent = {sw.id: (sw.parent, sw.tier) for sw in req.inventory.switches}
    leaf_of = {n.name: n.leaf for n in nodes}
    domain_of = {n.name: n.nvlink_domain for n in nodes}

    def meets_tier(names: set[str], tier: int) -> bool:
        """Some switch of tier ≤ ``tier`` sits above every node. Like the model, a node outside the
        fabric cannot host a gang with a hard locality rule, even alone."""
        chains = []
        for name in names:
            chain, s = set(), leaf_of[name]
            while s in parent and s not in chain:
                chain.add(s)
                s = parent[s][0]
            chains.append(chain)
        if any(not c for c in chains):
            return False
        return len(names) <= 1 or any(parent[s][1] <= tier for s in set.intersection(*chains))

    def locality_holds(job: Job, names: set[str]) -> bool:
        members = sum(role.replicas for role in job.roles)
        hard_tier = job.locality.highest_tier if job.locality.mode == Requirement.REQUIRED else 0
        if hard_tier and members > 1 and not meets_tier(names, hard_tier):
            return False
        if job.nvlink_domain == Requirement.REQUIRED and members > 1:
            domains = {domain_of[n] for n in names}
            if len(domains) > 1 or "" in domains:
                return False
        return True

    def place_job(j: int, used: frozenset[tuple[str, str]], cpu: dict, score: dict[int, int]) -> None:
        nonlocal best
        if j == len(req.jobs):
            best = max(best, key(score))
            return
        place_job(j + 1, used, cpu, score)  # the job left out
        members = [(role, i) for role in req.jobs[j].roles for i in range(role.replicas)]
        priority = req.jobs[j].priority

        def place_member(m: int, used: frozenset, cpu: dict, gained: int) -> None:
            if m == len(members):
                names = {node for node, _ in used - before}
                if locality_holds(req.jobs[j], names):
                    place_job(j + 1, used, cpu, {**score, priority: score.get(priority, 0) + gained})
                return
            role, _ = members[m]
            for node, gs, ns in options[id(role)]:
                devices = {(node, d) for d in gs | ns}
                if devices & used:
                    continue
                need = role.member.cpu_milli
                if cpu[node] is not None and need > cpu[node]:
                    continue
                new_cpu = dict(cpu)
                if new_cpu[node] is not None:
                    new_cpu[node] -= need
                place_member(m + 1, used | devices, new_cpu, gained + 1000 * role.member.gpus)

        before = used
        place_member(0, used, cpu, 0)

    place_job(0, frozenset(), cpu_free, {})
    return best


# --------------------------------------------------------------------------- random batches


@st.composite
def fabric_problems(
    draw: st.DrawFn, max_nodes: int = 4, max_jobs: int = 3, max_leaves: int = 3, spines: int | None = None
) -> SolveRequest:
    """A random batch on a small fat tree: nodes with some GPUs in use, under random leaves and
    NVLink domains; jobs of 1–4 GPUs and 1–3 members with random locality and NVLink-domain rules.
    The defaults stay small enough for :func:`best_placed_work`."""
    leaves = draw(st.integers(1, max_leaves))
    n_spines = spines if spines is not None else draw(st.integers(1, 2))
    nodes = [
        server(
            f"n{i}",
            leaf=f"leaf{draw(st.integers(0, leaves - 1))}",
            nvlink_domain=draw(st.sampled_from(["", "rack0", "rack1"])),
            used_gpus=sorted(draw(st.sets(st.integers(0, 3), max_size=4))),
        )
        for i in range(draw(st.integers(2, max_nodes)))
    ]
    jobs = []
    for j in range(draw(st.integers(1, max_jobs))):
        mode = draw(st.sampled_from([Requirement.NONE, Requirement.PREFERRED, Requirement.REQUIRED]))
        jobs.append(
            job(
                f"j{j}",
                draw(st.integers(1, 4)),
                members=draw(st.integers(1, 3)),
                priority=draw(st.integers(0, 2)),
                locality=Locality(mode=mode, highest_tier=draw(st.integers(1, 3))),
                nvlink_domain=draw(st.sampled_from([Requirement.NONE, Requirement.REQUIRED])),
            )
        )
    return request(nodes, jobs, fat_tree(leaves, n_spines))
