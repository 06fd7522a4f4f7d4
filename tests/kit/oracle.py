"""Brute-force oracles for the solver's tests, and the random batches they can judge.

The oracle enumerates every way to give each member a node, GPUs and NICs, checks the rules with
plain permutations (nothing shared with the model builder or the verifier), and returns the best
priority-weighted placed work. It is exponential: keep instances to a few nodes and members.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations, permutations, product

from hypothesis import strategies as st

from solver.compile.objective import is_placed_work
from solver.domain.model import (
    Allocation,
    Distance,
    GpuShare,
    Job,
    Locality,
    MemberShape,
    NicMode,
    Node,
    PriorityMode,
    Requirement,
    SolveRequest,
    SolveResult,
)
from tests.kit import nodes as kit_nodes
from tests.kit.jobs import job, request

# --------------------------------------------------------------------------- brute force


def _distance(node: Node, a: tuple[str, int | None], b: tuple[str, int | None]) -> int:
    """PCIe distance written out for the two-level trees of ``SMALL`` nodes (switch → host bridge)."""
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

        def place_member(m: int, used: frozenset, cpu: dict, gained: int, first: int) -> None:
            if m == len(members):
                names = {node for node, _ in used - before}
                if locality_holds(req.jobs[j], names):
                    place_job(j + 1, used, cpu, {**score, priority: score.get(priority, 0) + gained})
                return
            role, _ = members[m]
            # Members of one role are interchangeable: each takes an option no earlier in the list
            # than the one before it took, so that no placement is tried once per order of its
            # members (3 members: 6 times; a random case once ran for minutes).
            for k, (node, gs, ns) in enumerate(options[id(role)][first:], start=first):
                devices = {(node, d) for d in gs | ns}
                if devices & used:
                    continue
                need = role.member.cpu_milli
                if cpu[node] is not None and need > cpu[node]:
                    continue
                new_cpu = dict(cpu)
                if new_cpu[node] is not None:
                    new_cpu[node] -= need
                same_role = m + 1 < len(members) and members[m + 1][0] is role
                place_member(
                    m + 1, used | devices, new_cpu, gained + 1000 * role.member.gpus, k if same_role else 0
                )

        before = used
        place_member(0, used, cpu, 0, 0)

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
        kit_nodes.node(
            f"n{i}",
            kit_nodes.SMALL,
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
    return request(nodes, jobs, kit_nodes.fat_tree(leaves, n_spines))


@st.composite
def small_problems(draw: st.DrawFn) -> SolveRequest:
    """A random batch on one or two small nodes, every member rule drawn (NICs, alignment and its
    distance, NUMA, NVLink, CPU): small enough for :func:`best_placed_work`."""
    nodes = []
    for i in range(draw(st.integers(1, 2))):
        switches = draw(st.integers(1, 2))
        gpus_per_switch = draw(st.integers(1, 2))
        total = switches * gpus_per_switch
        used = draw(st.sets(st.integers(0, total - 1), max_size=total))
        nodes.append(
            kit_nodes.node(
                f"n{i}",
                kit_nodes.SMALL,
                switches=switches,
                gpus=total,
                nics=switches * draw(st.integers(1, 2)),
                nic_shift=draw(st.integers(0, 1)),
                nvlink=draw(st.sampled_from(["all", "pairs", "none"])),
                used_gpus=sorted(used),
                cpu_milli=draw(st.sampled_from([0, 8000])),
            )
        )
    jobs = []
    for j in range(draw(st.integers(1, 3))):
        nic_mode = draw(st.sampled_from([NicMode.NONE, NicMode.PER_GPU, NicMode.PER_MEMBER]))
        jobs.append(
            job(
                f"j{j}",
                draw(st.integers(1, 2)),
                members=draw(st.integers(1, 2)),
                priority=draw(st.integers(0, 2)),
                nics=nic_mode,
                nic_count=draw(st.integers(1, 2)) if nic_mode == NicMode.PER_MEMBER else 0,
                align=draw(st.sampled_from(list(Requirement)[1:])),
                distance=draw(st.sampled_from([Distance.PIX, Distance.PHB, Distance.NODE])),
                numa=draw(st.sampled_from([Requirement.NONE, Requirement.REQUIRED, Requirement.PREFERRED])),
                nvlink=draw(st.sampled_from([Requirement.NONE, Requirement.REQUIRED])),
                cpu_milli=draw(st.sampled_from([0, 3000])),
            )
        )
    return request(nodes, jobs)


# --------------------------------------------------------------------------- shares


def best_share_work(req: SolveRequest) -> tuple[int, ...]:
    """Exhaustive optimum of placed work, level by level (STRICT priority): every member on every
    (node, GPU) or its job left out."""
    gpus = [(n.name, g.id, g.memory_mib) for n in req.inventory.nodes for g in n.gpus]
    initial: dict[tuple[str, str], list] = {}
    for n in req.inventory.nodes:
        for g in n.gpus:
            initial[n.name, g.id] = [0, 0, False]  # milli, MiB, locked
        for a in n.allocations:
            for sh in a.gpu_shares:
                state = initial[n.name, sh.gpu]
                state[0] += sh.milli
                state[1] += sh.memory_mib
                state[2] = state[2] or a.mutex
    jobs = req.jobs
    levels = sorted({job.priority for job in jobs}, reverse=True)
    best = tuple(0 for _ in levels)
    for choice in product([False, True], repeat=len(jobs)):
        members = [
            (j, role.member)
            for j, job in enumerate(jobs)
            if choice[j]
            for role in job.roles
            for _ in range(role.replicas)
        ]
        for where in product(range(len(gpus)), repeat=len(members)):
            state = {k: list(v) for k, v in initial.items()}
            ok = True
            for (_, shape), g in zip(members, where, strict=True):
                node, gid, memory = gpus[g]
                milli, mib, locked = state[node, gid]
                if shape.gpu_share is None or shape.mutex:
                    if milli or mib or locked:
                        ok = False
                        break
                    state[node, gid] = [1000, 0, True]
                else:
                    if (
                        locked
                        or milli + shape.gpu_share.milli > 1000
                        or (memory and mib + shape.gpu_share.memory_mib > memory)
                    ):
                        ok = False
                        break
                    state[node, gid] = [
                        milli + shape.gpu_share.milli,
                        mib + shape.gpu_share.memory_mib,
                        False,
                    ]
            if ok:
                # Each priority level's work, highest first: what STRICT priority compares in turn.
                value = tuple(
                    sum(
                        1000 * s.gpus if s.gpus else (s.gpu_share.milli or 1)
                        for j, s in members
                        if jobs[j].priority == level
                    )
                    for level in levels
                )
                best = max(best, value)
    return best if len(levels) > 1 else (sum(best),)


@st.composite
def share_problems(draw: st.DrawFn) -> SolveRequest:
    nodes = []
    for i in range(draw(st.integers(1, 2))):
        node = kit_nodes.node(f"n{i}", kit_nodes.SMALL, switches=1, gpus=draw(st.integers(1, 2)), nics=0)
        shares = tuple(
            GpuShare(gpu=f"GPU{g}", milli=draw(st.sampled_from([0, 200, 500, 900])))
            for g in range(len(node.gpus))
            if draw(st.booleans())
        )
        shares = tuple(s for s in shares if s.milli)
        if shares:
            node = node.model_copy(
                update={
                    "allocations": (Allocation(owner="old", gpu_shares=shares, mutex=draw(st.booleans())),)
                }
            )
        nodes.append(node)
    jobs = []
    for j in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            jobs.append(job(f"w{j}", 1, role="pod", mutex=draw(st.booleans())))
        else:
            jobs.append(
                job(
                    f"s{j}",
                    members=draw(st.integers(1, 2)),
                    role="pod",
                    share=GpuShare(milli=draw(st.sampled_from([100, 300, 500, 800]))),
                    mutex=draw(st.booleans()),
                    priority=draw(st.integers(0, 1)),
                )
            )
    return request(nodes, jobs)
