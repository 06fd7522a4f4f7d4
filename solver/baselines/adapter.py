"""``place(request)`` for the GPU-sharing baselines: a ``SolveRequest`` in, a verifiable ``SolveResult`` out.

The sharing baselines (Random, BestFit, GpuPacking, FGD) decide on ``solver.baselines.sharing.ClusterState``;
this module builds that state from the inventory (existing allocations, shares and mutex holds count),
turns every member into a pod, places jobs in priority order (then request order) one member at a time,
keeps a gang only if every role reaches its minimum (otherwise its members are released again), and
writes the answer in the solver's shapes, with the solver's own ``cluster_metrics``.

These baselines know CPU, memory, GPU models and milli-GPU, as FGD's simulator does; a job that asks
for more (NICs, REQUIRED NUMA/NVLink or locality rules, anti-affinity ...) is reported UNSUPPORTED
(``solver.baselines.support``), not tried.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from solver.baselines.fragmentation import TypicalPod, Workload, typical_pods
from solver.baselines.sharing import MILLI, UNTRACKED, ClusterState, PodPlacer, PodSpec
from solver.baselines.support import answered, sharing_unsupported, unsupported_result
from solver.baselines.topology import LocalityIndex
from solver.domain.model import (
    GpuShare,
    Job,
    JobResult,
    MemberPlacement,
    MemberShape,
    Node,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
)

NO_MODEL = ("<no model left>",)  # an accepted-model list no GPU matches


def node_free(node: Node) -> tuple[list[int], list[int]]:
    """Free milli and free memory (MiB, UNTRACKED when unknown) of each GPU, in index order."""
    gpus = sorted(node.gpus, key=lambda g: g.index)
    whole = {g for a in node.allocations for g in a.gpus}
    mutex = {g for a in node.allocations if a.mutex for g in (*a.gpus, *(s.gpu for s in a.gpu_shares))}
    milli_used: Counter[str] = Counter()
    mem_used: Counter[str] = Counter()
    for a in node.allocations:
        for s in a.gpu_shares:
            milli_used[s.gpu] += s.milli
            mem_used[s.gpu] += s.memory_mib
    free, memory = [], []
    for g in gpus:
        closed = g.id in whole or g.id in mutex or not g.healthy
        free.append(0 if closed else max(0, MILLI - milli_used[g.id]))
        memory.append(max(0, g.memory_mib - mem_used[g.id]) if g.memory_mib else UNTRACKED)
    return free, memory


def state_of(request: SolveRequest) -> tuple[ClusterState, list[Node]]:
    """The sharing state of the schedulable nodes, and those nodes in state order."""
    nodes = [n for n in request.inventory.nodes if n.schedulable]
    frees = [node_free(n) for n in nodes]
    state = ClusterState(
        names=[n.name for n in nodes],
        cpu=[
            n.cpu_milli - sum(a.cpu_milli for a in n.allocations) if n.cpu_milli else UNTRACKED for n in nodes
        ],
        memory=[
            n.memory_mib - sum(a.memory_mib for a in n.allocations) if n.memory_mib else UNTRACKED
            for n in nodes
        ],
        gpu_free=[f for f, _ in frees],
        models=[Counter(g.model for g in n.gpus).most_common(1)[0][0] if n.gpus else "" for n in nodes],
        gpu_memory_free=[m for _, m in frees],
    )
    return state, nodes


def pod_of(shape: MemberShape, models_present: set[str]) -> PodSpec:
    models = tuple(shape.gpu_models)
    if shape.avoid_gpu_models:
        allowed = (set(models) if models else models_present) - set(shape.avoid_gpu_models)
        models = tuple(sorted(allowed)) or NO_MODEL
    share = shape.gpu_share
    return PodSpec(
        cpu=shape.cpu_milli,
        memory=shape.memory_mib,
        gpus=1 if share is not None else shape.gpus,
        milli=(share.milli if share is not None else MILLI) if (share is not None or shape.gpus) else 0,
        models=models,
        gpu_memory=share.memory_mib if share is not None else 0,
        exclusive=shape.mutex,
    )


def workload_of(request: SolveRequest) -> Workload:
    """The policy's workload profile, or the batch's own member shapes when none is given."""
    if request.policy.workload:
        total = sum(w.popularity for w in request.policy.workload)
        return tuple(
            TypicalPod(
                cpu=0, milli=w.milli or (MILLI if w.gpus else 0), gpus=w.gpus, popularity=w.popularity / total
            )
            for w in request.policy.workload
        )
    shapes = [
        (p.cpu, p.milli, p.gpus, p.models)
        for job in request.jobs
        for role in job.roles
        for p in [pod_of(role.member, set())] * role.replicas
    ]
    return typical_pods(shapes, coverage=1.0)


def _placement(
    state: ClusterState, node: Node, role: str, index: int, pod: PodSpec, gpus: tuple[int, ...]
) -> MemberPlacement:
    by_index = sorted(node.gpus, key=lambda g: g.index)
    chosen = [by_index[g] for g in gpus]
    numas = {g.numa for g in chosen}
    numa = next(iter(numas)) if len(numas) == 1 and None not in numas else None
    if pod.is_share:
        share = GpuShare(gpu=chosen[0].id, milli=pod.milli, memory_mib=pod.gpu_memory)
        return MemberPlacement(
            role=role, index=index, node=node.name, gpus=(chosen[0].id,), numa=numa, gpu_shares=(share,)
        )
    return MemberPlacement(
        role=role, index=index, node=node.name, gpus=tuple(g.id for g in chosen), numa=numa
    )


def place_job(
    state: ClusterState,
    nodes: list[Node],
    job: Job,
    policy: PodPlacer,
    models: set[str],
    fabric: LocalityIndex,
) -> JobResult:
    """One gang: members one at a time; kept only if every role reaches its minimum."""
    bound: list[tuple[int, PodSpec, tuple[int, ...]]] = []
    members: list[MemberPlacement] = []
    why = sharing_unsupported(job)
    if why:
        return unsupported_result(job, policy.name, "CPU, memory and GPUs (whole or milli shares) only", why)
    for role in job.roles:
        pod = pod_of(role.member, models)
        placed = 0
        for index in range(role.replicas):
            choice = policy.choose(state, pod)
            if choice is None:
                break
            node, gpus = choice
            state.bind(node, pod, gpus)
            bound.append((node, pod, gpus))
            members.append(_placement(state, nodes[node], role.name, index, pod, gpus))
            placed += 1
        if placed < role.minimum:
            for node, p, gpus in reversed(bound):
                state.unbind(node, p, gpus)
            return JobResult(
                job_id=job.id,
                placed=False,
                reason=Reason(
                    code=ReasonCode.INSUFFICIENT_CAPACITY,
                    message=f"the {policy.name} baseline found room for {placed} of the {role.minimum} "
                    f"{role.name} members the gang needs",
                    relaxation=f"lower min_replicas of {role.name} to {placed}" if placed else "",
                ),
            )
    return JobResult(job_id=job.id, placed=True, members=tuple(members), **fabric.report(job, members))


def place_with(request: SolveRequest, make_policy: Callable[[Workload], PodPlacer]) -> SolveResult:
    """Run a sharing policy over a whole request (jobs by priority, then request order)."""
    started = time.perf_counter()
    state, nodes = state_of(request)
    policy = make_policy(workload_of(request))
    models = {g.model for n in nodes for g in n.gpus}
    order = sorted(range(len(request.jobs)), key=lambda j: (-request.jobs[j].priority, j))
    fabric = LocalityIndex(request.inventory)
    results: dict[int, JobResult] = {
        j: place_job(state, nodes, request.jobs[j], policy, models, fabric) for j in order
    }
    return answered(request, tuple(results[j] for j in range(len(request.jobs))), started)
