"""The hook's plan when the solver has not answered within the agent's answer budget.

slurmctld waits for ``job_submit.lua`` with its job write lock held, so the agent answers within a
budget (``AgentConfig.answer_budget_s``); a solve still running then — at 1,024 nodes, gangs — is
answered with this module's plan, and the solver's plan replaces it while the job waits
(``Agent.refine``). The plan comes from one of the project's greedy placers, run over the same
candidate nodes the solver was asked on (~50 for a gang at 1,024 nodes, a few ms), and is verified
like every answer:

* one node: :data:`FAST_PLACER` — the fullest node that admits the member (binpack), GPUs with a NIC
  behind the same switch (Slurm's own GRES binding, as the solver's fallback). NVLink counts only
  as "inside the most strongly linked group" (:func:`nvlink_aligned_pick`); link counts pair by pair
  are the solver's.
* a gang (members on distinct nodes — anti-affinity, which the greedy placers do not express): the
  leaf with the fewest free GPUs on the nodes that can hold a member (locality first, then binpack),
  one member at a time on the nodes not used yet; if no leaf holds the gang whole, the whole set.
* out of time (either case): :func:`best_fit_typed` — one pass over the same nodes (leaves that hold
  the gang whole first), the fullest nodes first, the first whose devices make a typed member; no
  scoring beyond counting free GPUs. A job passed untyped because its plan came late was the last
  source of off-switch GPU/NIC pairs on the real-Slurm bench (s13: 1 of 568); this pass costs ~0.1 ms
  a candidate node. It is most fast plans: at 128 nodes the scoring passes got what the solver's head
  start left of the 30 ms budget and ran out in 114 of 141 one-node fast plans (session 26).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from solver.answer.measures import cluster_metrics
from solver.baselines import volcano
from solver.baselines.topology import (
    Free,
    Greedy,
    LocalityIndex,
    Pick,
    admissible,
    first_aligned_pick,
    nic_count,
    node_fits,
    usable_gpus,
)
from solver.domain import cancel as cancellation
from solver.domain.model import (
    Gpu,
    JobResult,
    MemberPlacement,
    MemberShape,
    Node,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
)


def strongest_nvlink_groups(node: Node) -> list[frozenset[str]]:
    """The node's GPUs joined by its strongest NVLinks (the most ``NV#``), as connected groups: on a
    node whose two halves are joined by NV2 and each half by NV18, the two halves; without NVLink,
    each GPU alone."""
    links = node.nvlinks
    strongest = max((link.links for link in links), default=0)
    parent = {g.id: g.id for g in node.gpus}

    def root(gpu: str) -> str:
        while parent[gpu] != gpu:
            gpu = parent[gpu]
        return gpu

    for link in links:
        if link.links == strongest and link.gpu_a in parent and link.gpu_b in parent:
            parent[root(link.gpu_a)] = root(link.gpu_b)
    by_root: dict[str, set[str]] = {}
    for gpu in parent:
        by_root.setdefault(root(gpu), set()).add(gpu)
    return [frozenset(g) for g in by_root.values()]


def strong_groups(free: Free) -> list[frozenset[str]]:
    """:func:`strongest_nvlink_groups` of the free node, once per placement pass."""
    groups = free.memo.get("strong_groups")
    if groups is None:
        groups = free.memo["strong_groups"] = strongest_nvlink_groups(free.node)
    return groups  # type: ignore[return-value]


def nvlink_aligned_pick(free: Free, shape: MemberShape) -> Pick | None:
    """:func:`first_aligned_pick` inside one PCIe switch group when one has room, else inside one
    group of strongly NVLinked GPUs, else over the whole node; the fullest room first (binpack inside
    the node), ties to the fuller NVLink group. A 2- or 4-GPU member then does not straddle a node's
    weakly linked halves, as the solver's NVLink rule would not let it (the bench's "NVLink halves
    straddled" measure), and a member that fits behind one switch asks Slurm for one GRES type: one
    GPU behind each of two switches (``gpu:sw1:1,gpu:sw3:1``) waits until both switches have room on
    one node, and a pending job cannot be re-typed on Slurm 22.05 (real-Slurm bench, sessions 11, 13).
    A lone GPU goes where its switch is already partly used, leaving whole switches to pairs.

    Checks the cancel token first (``solver.domain.cancel``): this runs once per candidate node, and
    the agent trips the token when the solver answers while the fast placer works, so the answer is
    not held back by a plan nobody needs (the loaded hook bench's slowest 1 %, session 31)."""
    cancellation.check()
    usable = usable_gpus(free, shape)
    group_of = {gpu: group for group in strong_groups(free) for gpu in group}
    group_free = {group: sum(1 for g in usable if g.id in group) for group in set(group_of.values())}
    by_switch: dict[str, list[Gpu]] = {}
    for gpu in usable:
        if gpu.pcie_switch:
            by_switch.setdefault(gpu.pcie_switch, []).append(gpu)
    switch_rooms = sorted(
        (
            (len(inside), group_free.get(group_of.get(inside[0].id, frozenset()), 0), inside)
            for inside in by_switch.values()
            if len(inside) >= shape.gpus
        ),
        key=lambda room: room[:2],
    )
    group_rooms = sorted(
        (
            (len(inside), 0, inside)
            for inside in ([g for g in usable if g.id in group] for group in group_free)
            if len(inside) >= shape.gpus and shape.gpus >= 2
        ),
        key=lambda room: room[0],
    )
    for _, _, inside in (*switch_rooms, *group_rooms):
        narrowed = free.copy()
        narrowed.gpus = inside
        pick = first_aligned_pick(narrowed, shape)
        if pick is not None and (pick.aligned or not nic_count(shape)):
            return pick
    return first_aligned_pick(free, shape)


FAST_PLACER = Greedy(
    name="fast:aligned-binpack",
    pick=nvlink_aligned_pick,
    node_score=volcano.node_score,
    domain_key=volcano.free_fraction,
    domains_from_start=True,
)


# What the fast placer may cost: its answer is already late. At 1,024 nodes a gang no leaf held, placed
# member by member over every candidate node with binpack's scoring, once took 177 ms; idle, a plan
# takes 1-5 ms. 10 ms ran out 3-4 times a run on the loaded real-Slurm bench (64 nodes, session 11),
# and each such job went to Slurm untyped (off-switch pairs): 20 ms.
FAST_PLACER_S = 0.020


def fast_place(request: SolveRequest, seconds: float = FAST_PLACER_S) -> SolveResult:
    """The one job of ``request`` placed by the fast placer (see the module docstring) within
    ``seconds``; a job not placed by then is unplaced (TIME_LIMIT)."""
    deadline = time.perf_counter() + seconds
    job = request.jobs[0]
    role = job.roles[0]
    if len(job.roles) != 1:
        return FAST_PLACER.place(request, deadline)
    if role.replicas == 1:
        result = FAST_PLACER.place(request, deadline)
        if result.jobs[0].placed or time.perf_counter() < deadline:
            return result  # placed, or no node has room: the scoring pass tried every node
        return best_fit_typed(request, [request.inventory.nodes]) or _no_typed_room(request, result)
    member_job = job.model_copy(
        update={"anti_affinity": (), "roles": (role.model_copy(update={"replicas": 1}),)}
    )
    one = request.model_copy(update={"jobs": (member_job,)})
    nodes = [n for n in request.inventory.nodes if n.schedulable]
    by_leaf: dict[str, list[Node]] = {}
    for node in nodes:
        by_leaf.setdefault(node.leaf, []).append(node)
    whole = [members for leaf, members in by_leaf.items() if leaf and len(members) >= role.replicas]
    whole.sort(key=lambda members: (sum(_free_gpus(n) for n in members), members[0].leaf))
    for pool in [*whole, nodes]:
        if time.perf_counter() >= deadline:
            break
        members = _one_by_one(one, pool, role.replicas, deadline)
        if members is not None:
            report = LocalityIndex(request.inventory).report(job, members)
            jobs = (JobResult(job_id=job.id, placed=True, members=members, **report),)
            return SolveResult(
                request_id=request.request_id,
                status=SolveStatus.FEASIBLE,
                jobs=jobs,
                metrics=cluster_metrics(request, jobs),
            )
    late = time.perf_counter() >= deadline
    if late and (typed := best_fit_typed(request, [*whole, nodes])) is not None:
        return typed
    reason = Reason(
        code=ReasonCode.NO_NODE_FITS,
        message=f"the fast placer found no {role.replicas} distinct nodes for the gang "
        + (
            f"that each take a typed member now (best-fit pass after its {seconds * 1000:.0f} ms)"
            if late
            else f"within {seconds * 1000:.0f} ms"
        ),
    )
    unplaced = (JobResult(job_id=job.id, placed=False, reason=reason),)
    return SolveResult(
        request_id=request.request_id,
        status=SolveStatus.FEASIBLE,
        jobs=unplaced,
        metrics=cluster_metrics(request, unplaced),
    )


def _one_by_one(
    one: SolveRequest, pool: Sequence[Node], replicas: int, deadline: float
) -> tuple[MemberPlacement, ...] | None:
    members: list[MemberPlacement] = []
    left = list(pool)
    for index in range(replicas):
        inventory = one.inventory.model_copy(update={"nodes": tuple(left)})
        result = FAST_PLACER.place(one.model_copy(update={"inventory": inventory}), deadline)
        placed = result.jobs[0]
        if not placed.placed:
            return None
        member = placed.members[0]
        members.append(member.model_copy(update={"index": index}))
        left = [n for n in left if n.name != member.node]
    return tuple(members)


def _free_gpus(node: Node) -> int:
    return len(node.gpus) - len({g for a in node.allocations for g in a.gpus})


def _no_typed_room(request: SolveRequest, result: SolveResult) -> SolveResult:
    """``result`` (out of time, unplaced) with the reason the best-fit pass found: no node takes a
    typed member now — not "ran out of time", which would hide that there is no room."""
    reason = Reason(
        code=ReasonCode.NO_NODE_FITS,
        message="the fast placer found no node that takes a typed member now "
        "(best-fit pass after its time ran out)",
    )
    unplaced = (JobResult(job_id=request.jobs[0].id, placed=False, reason=reason),)
    return result.model_copy(update={"jobs": unplaced})


def best_fit_typed(request: SolveRequest, pools: Sequence[Sequence[Node]]) -> SolveResult | None:
    """The one job of ``request`` (one role) on distinct nodes of the first pool that holds it whole,
    the fullest nodes first (fewest free GPUs, then the pool's order), each member's devices a typed
    pick (:func:`nvlink_aligned_pick`, aligned when the member asks for NICs) — no deadline: one pass
    over the candidate nodes, each looked at once a pool. The fast placer's answer when its scoring
    passes ran out of time, so that a late plan is still typed rather than left to Slurm untyped
    (None: no pool has room for it).

    Fullest first because this pass answers most fast plans under load: in name order (first fit,
    as it was) the late plans put small jobs on nodes with 4-7 free GPUs while nodes with one or
    two stood open, and at 128 nodes the stream ended with 19 GPUs free in threes, none of them
    room for the 4-GPU members still pending (real-Slurm bench, session 26)."""
    job = request.jobs[0]
    role = job.roles[0]
    shape = role.member
    for pool in pools:
        members: list[MemberPlacement] = []
        for node in sorted(pool, key=_free_gpus):  # stable: ties keep the pool's order
            if not node.schedulable:
                continue
            free = Free.of(node)
            pick = nvlink_aligned_pick(free, shape) if node_fits(free, shape) else None
            if pick is None or not admissible(free, shape, pick) or (nic_count(shape) and not pick.aligned):
                continue
            numas = {d.numa for d in (*pick.gpus, *pick.nics)}
            members.append(
                MemberPlacement(
                    role=role.name,
                    index=len(members),
                    node=node.name,
                    gpus=tuple(g.id for g in pick.gpus),
                    nics=tuple(n.name for n in pick.nics),
                    numa=next(iter(numas)) if len(numas) == 1 and None not in numas else None,
                    aligned=pick.aligned,
                )
            )
            if len(members) == role.replicas:
                report = LocalityIndex(request.inventory).report(job, tuple(members))
                jobs = (JobResult(job_id=job.id, placed=True, members=tuple(members), **report),)
                return SolveResult(
                    request_id=request.request_id,
                    status=SolveStatus.FEASIBLE,
                    jobs=jobs,
                    metrics=cluster_metrics(request, jobs),
                )
    return None
