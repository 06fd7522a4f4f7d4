"""Explain: why a job was left unplaced — the rule that actually blocks it — and the smallest change
that would place it, stated concretely ("at PXB one would fit on gpu-07").

The reasons are checked from the most basic up:

1. No node can host one member of a role (``NO_NODE_FITS``): the GPU model, GPU count, free GPUs,
   GPU share, CPU, memory or NICs no node has are named with what nodes do have; otherwise the member
   rules are relaxed one at a time, least first (the next PCIe distance, then NUMA, NVLink, alignment,
   node selector, mutex), and the first under which a node would take one member is named, with it.
2. The job fits the free cluster alone but was not placed: the batch's other jobs took the room
   (``OUTPRIORITISED``), or the search ran out of time (``TIME_LIMIT``).
3. It does not fit alone: the job's rules are relaxed one at a time, least first — member rules, then
   locality tiers, NVLink domain, rails and role affinity (``LOCALITY``), then mutex, anti-affinity
   and exclusive nodes (``MUTEX``), then each role's gang minimum (``INSUFFICIENT_CAPACITY``) — and
   the first relaxation under which the solver places the job alone is the one given.

Every relaxation of steps 1 and 3 is checked by a feasibility search of the relaxed job on the free
cluster (:mod:`solver.search.alone`), so the suggestion is true of the solver, not of a rule of thumb. The
searches share a small time budget; past it, explanations say what they can without searching.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from solver.compile import Compiled
from solver.compile.locality import NVLINK, Rule, domain_of
from solver.domain.cancel import checked
from solver.domain.fabric import Fabric
from solver.domain.model import (
    Alignment,
    Distance,
    Job,
    JobResult,
    Locality,
    MemberShape,
    NicMode,
    NicRequest,
    PriorityMode,
    Reason,
    ReasonCode,
    Requirement,
    Role,
)
from solver.reduce.intranode import configurations_for
from solver.reduce.normalise import NodeClass, NodeShape, Normalised, RoleRef

# "Does this job fit the free cluster alone?" True, False, or None when unknown (out of time).
Probe = Callable[[Job], "bool | None"]


@dataclass(frozen=True)
class Relaxation:
    """One rule loosened: the code of the rule's family, the rule in words, the change in words, and
    the job with the change applied (what a test or a user can submit again)."""

    code: ReasonCode
    rule: str
    change: str
    job: Job


def explain(
    problem: Normalised,
    compiled: Compiled,
    jobs: Sequence[JobResult],
    *,
    timed_out: bool,
    probe: Probe | None = None,
) -> tuple[JobResult, ...]:
    placed_ids = {r.job_id for r in jobs if r.placed}
    out = []
    # checked: each unplaced job's explanation may compile and search relaxed copies of it; a
    # cancelled or expired call stops before the next one (solver.domain.cancel).
    for j, result in checked(enumerate(jobs)):
        if result.placed:
            out.append(result)
            continue
        reason, _ = why_unplaced(problem, compiled, j, timed_out=timed_out, probe=probe, placed=placed_ids)
        out.append(result.model_copy(update={"reason": reason}))
    return tuple(out)


def listed(ids: Sequence[str]) -> str:
    """The first three job ids, and how many more."""
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def why_unplaced(
    problem: Normalised,
    compiled: Compiled,
    j: int,
    *,
    timed_out: bool,
    probe: Probe | None = None,
    placed: frozenset[str] | set[str] = frozenset(),
) -> tuple[Reason, Job | None]:
    """The reason job ``j`` is unplaced, and the relaxed job that would be placed (None when the
    remedy is not a change to the job: free capacity, wait, raise the time limit)."""
    ask = probe or (lambda _job: None)
    job = problem.request.jobs[j]
    groups = {g: v for g, v in problem.groups().items() if problem.roles[g].job_index == j}
    hosted = compiled.hosted
    for g, variants in groups.items():
        if not hosted.intersection(variants):
            return member_blocked(problem, problem.roles[g], job, ask)

    alone = ask(job)
    others = sorted(placed - {job.id})
    priority = {other.id: other.priority for other in problem.request.jobs}
    higher = [o for o in others if priority.get(o, 0) > job.priority]
    if higher and problem.request.policy.priority_mode != PriorityMode.WEIGHTED:
        # Under STRICT priority that is the whole reason: no lower level's work counts against it.
        message = (
            f"it fits on the free cluster alone, but jobs of higher priority ({listed(higher)}) took the room"
        )
    else:
        message = (
            f"it fits on the free cluster alone, but the batch's other jobs ({listed(others)}) are worth "
            "more under the objective and took the room"
        )
    outprioritised = Reason(
        code=ReasonCode.OUTPRIORITISED,
        message=message,
        relaxation="raise its priority, or submit it again when capacity frees up",
    )
    if alone:
        if others:
            return outprioritised, None
        return Reason(
            code=ReasonCode.TIME_LIMIT,
            message="it fits on the free cluster alone, but the search did not reach a placement of it "
            "in the time it had",
            relaxation="raise policy.time_limit_s or the call's deadline",
        ), None
    if alone is None and timed_out:
        return Reason(
            code=ReasonCode.TIME_LIMIT,
            message="the time limit ran out before any placement was found",
            relaxation="raise policy.time_limit_s or the call's deadline",
        ), None
    if probe is None and others:  # no search allowed: the batch's other jobs are the likely cause
        return outprioritised, None

    needs = " and ".join(f"{r.minimum} {r.name} members ({describe(r.member)})" for r in job.roles)
    for relaxed in job_relaxations(job, Fabric.of(problem.request.inventory).tiers):
        if ask(relaxed.job):
            message = f"{relaxed.rule}: needs {needs}; the free cluster cannot hold them under this rule"
            if relaxed.code == ReasonCode.LOCALITY:  # say which switch or domain came closest
                rules = (r for r in compiled.locality.rules if r.job == j and r.mode == Requirement.REQUIRED)
                closest = (locality_shortfall(problem, compiled, r) for r in rules)
                message = next(filter(None, closest), message)
            return Reason(code=relaxed.code, message=message, relaxation=relaxed.change), relaxed.job
    for role in job.roles:
        most = largest_minimum(job, role, ask)
        if most:
            others_note = " with the other roles at their minimum" if len(job.roles) > 1 else ""
            return Reason(
                code=ReasonCode.INSUFFICIENT_CAPACITY,
                message=f"needs {needs}; the free cluster can host at most {most} {role.name} "
                f"member{'' if most == 1 else 's'}{others_note}",
                relaxation=f"lower min_replicas of {role.name} to {most}",
            ), with_role(job, role.name, min_replicas=most)
    gpus = sum(r.minimum * (r.member.gpus or (1 if r.member.gpu_share else 0)) for r in job.roles)
    if alone is None and probe is not None:
        return Reason(
            code=ReasonCode.INSUFFICIENT_CAPACITY,
            message=f"needs {needs}; no placement of it alone was found in the time an explanation may take",
            relaxation="free capacity, or try again with a longer time limit",
        ), None
    return Reason(
        code=ReasonCode.INSUFFICIENT_CAPACITY,
        message=f"needs {needs} ({gpus} GPUs at its minimum); the free cluster has {free_gpus(problem)} "
        "free GPUs, too few where its rules allow, and no single rule relaxation or smaller minimum "
        "places it",
        relaxation="free capacity on the cluster",
    ), None


def largest_minimum(job: Job, role: Role, ask: Probe) -> int:
    """The largest gang minimum of ``role`` below its own under which the job fits alone (0: none),
    by bisection: a job that fits with minimum k fits with any smaller one."""
    low, high = 0, role.minimum - 1  # low: known to fit (0 = none known); high: the largest to try
    while low < high:
        mid = (low + high + 1) // 2
        answer = ask(with_role(job, role.name, min_replicas=mid))
        if answer is None:
            return 0
        if answer:
            low = mid
        else:
            high = mid - 1
    return low


# --------------------------------------------------------------------------- step 1: one member


def member_blocked(problem: Normalised, ref: RoleRef, job: Job, ask: Probe) -> tuple[Reason, Job | None]:
    """NO_NODE_FITS: name what no node has (with what nodes do have), else the member rule whose
    relaxation lets some node take one member."""
    member, role = ref.role.member, ref.role.name
    what = f"no node can host one {role} member ({describe(member)})"
    inventory = problem.request.inventory
    usable = [n for n in inventory.nodes if n.schedulable]
    models = sorted({g.model for n in usable for g in n.gpus if g.healthy and g.model})
    wants_gpu = member.gpus > 0 or member.gpu_share is not None
    shapes = node_shapes(problem)

    def reason(
        message: str, change: str, relaxed: Job | None, code: ReasonCode = ReasonCode.NO_NODE_FITS
    ) -> tuple[Reason, Job | None]:
        # One member fitting somewhere is not the whole gang fitting: the relaxed job is searched.
        if relaxed is not None and ask(relaxed) is False:
            change = "free capacity on the cluster (relaxing this alone would not place the whole job)"
            relaxed = None
        return Reason(code=code, message=message, relaxation=change), relaxed

    if not usable:
        return reason(f"{what}: the cluster has no schedulable node", "add or uncordon nodes", None)
    if wants_gpu and member.gpu_models and not set(member.gpu_models) & set(models):
        accept = [m for m in models if m not in member.avoid_gpu_models]
        change = f"accept {' or '.join(accept)}" if accept else "add nodes with the model"
        relaxed = with_member(job, role, gpu_models=tuple(accept)) if accept else None
        anywhere = {g.model for n in inventory.nodes for g in n.gpus}
        lacking = (
            "no schedulable node has a healthy" if anywhere & set(member.gpu_models) else "no node has a"
        )
        return reason(
            f"{what}: {lacking} GPU of model {' or '.join(member.gpu_models)}; "
            f"nodes have {', '.join(models) or 'no GPUs'}",
            change,
            relaxed,
        )
    if wants_gpu and models and set(models) <= set(member.avoid_gpu_models):
        return reason(
            f"{what}: it avoids every GPU model the cluster has ({', '.join(models)})",
            "drop avoid_gpu_models",
            with_member(job, role, avoid_gpu_models=()),
        )
    most = max((sum(1 for g in n.gpus if g.healthy) for n in usable), default=0)
    if member.gpus > most:
        return reason(
            f"{what}: no node has {_gpus(member.gpus)}; the largest has {most}",
            f"ask for at most {_gpus(most)} per member (and more members)",
            with_member(job, role, gpus=most) if most else None,
        )
    capacity = largest_free(shapes, member)
    for check in capacity:
        if check is not None:
            message, change, update = check
            relaxed = with_member(job, role, **update) if update else None
            return reason(f"{what}: {message}", change, relaxed)

    for relaxed in member_relaxations(member):
        node = first_host(problem, shapes, relaxed.member)
        if node is not None:
            message = f"{what}: {relaxed.blocked}; {relaxed.condition} one would fit on {node}"
            return reason(
                message,
                relaxed.change,
                with_member(job, role, **_changes(member, relaxed.member)),
                relaxed.code,
            )
    return Reason(
        code=ReasonCode.NO_NODE_FITS,
        message=f"{what}: no node has room for one as it stands, and no single rule relaxation makes one fit",
        relaxation="free capacity on a node",
    ), None


def largest_free(
    shapes: Sequence[tuple[NodeShape, str]], member: MemberShape
) -> Iterator[tuple[str, str, dict] | None]:
    """What no node has free now, each with what the best node has: GPUs, a GPU share, NICs, CPU,
    memory (yielded lazily: the first that applies is the reason)."""
    if not shapes:
        yield ("no node is schedulable", "add or uncordon nodes", {})
        return

    def best(value: Callable[[NodeShape], int]) -> tuple[int, str]:
        top = max(shapes, key=lambda s: value(s[0]))
        return value(top[0]), top[1]

    # Pure capacity, whatever the models: a model the nodes with room lack is a rule to relax later.
    def idle(s: NodeShape) -> int:
        return sum(1 for g in s.gpus if g.idle)

    if member.gpus:
        free, where = best(idle)
        if member.gpus > free:
            yield (
                f"no node has {member.gpus} free GPUs now; the most on one node is {free} ({where})",
                f"ask for at most {_gpus(free)} per member, or free GPUs on a node" if free else "free GPUs",
                {"gpus": free} if free else {},
            )
            return
    if member.gpu_share is not None and member.gpu_share.milli:
        free, where = best(lambda s: max((g.milli for g in s.gpus), default=0))
        if member.gpu_share.milli > free:
            share = member.gpu_share.model_copy(update={"milli": free})
            yield (
                f"no GPU has {member.gpu_share.milli} milli free; the most is {free} (on {where})",
                f"ask for a share of at most {free} milli" if free else "free a GPU",
                {"gpu_share": share} if free else {},
            )
            return
    nics = member.nics.count if member.nics.mode == NicMode.PER_MEMBER else 0
    if member.nics.mode == NicMode.PER_GPU:
        nics = member.gpus
    if nics:
        free, where = best(lambda s: len(s.nics))
        if nics > free:
            yield (
                f"no node has {nics} free NICs; the most on one node is {free} ({where})",
                "ask for no NICs" if not free else f"ask for at most {free} NICs",
                {"nics": NicRequest(mode=NicMode.NONE)}
                if not free or member.nics.mode == NicMode.PER_GPU
                else {"nics": NicRequest(mode=NicMode.PER_MEMBER, count=free)},
            )
            return
    if member.cpu_milli:
        free, where = best(lambda s: 1 << 62 if s.cpu_milli is None else s.cpu_milli)
        if member.cpu_milli > free:
            yield (
                f"no node has {member.cpu_milli / 1000:g} CPUs free; the most is {free / 1000:g} ({where})",
                f"ask for at most {free / 1000:g} CPUs per member",
                {"cpu_milli": free},
            )
            return
    if member.memory_mib:
        free, where = best(lambda s: 1 << 62 if s.memory_mib is None else s.memory_mib)
        if member.memory_mib > free:
            yield (
                f"no node has {member.memory_mib} MiB memory free; the most is {free} MiB ({where})",
                f"ask for at most {free} MiB memory per member",
                {"memory_mib": free},
            )
            return
    yield None


@dataclass(frozen=True)
class MemberRelaxation:
    """One member rule loosened: the rule by name, why no node takes a member under it, the condition
    under which one would ("at PXB instead of PIX"), the change in words, and the relaxed member."""

    code: ReasonCode
    rule: str
    blocked: str
    condition: str
    change: str
    member: MemberShape


def member_relaxations(shape: MemberShape) -> Iterator[MemberRelaxation]:
    """Single member-rule relaxations, least first."""
    nff = ReasonCode.NO_NODE_FITS
    if shape.alignment.mode == Requirement.REQUIRED:
        asked = shape.alignment.distance
        for wider in (d for d in Distance if d > asked):
            yield MemberRelaxation(
                nff,
                f"GPU↔NIC distance {asked.name}",
                f"no node has free GPU↔NIC pairs at {asked.name} or closer",
                f"at {wider.name}",
                f"allow GPU↔NIC distance {wider.name} instead of {asked.name}",
                shape.model_copy(update={"alignment": Alignment(mode=Requirement.REQUIRED, distance=wider)}),
            )
    if shape.numa == Requirement.REQUIRED:
        yield MemberRelaxation(
            nff,
            "NUMA REQUIRED",
            "no node has its GPUs and NICs free on one NUMA node",
            "across NUMA nodes",
            "make NUMA alignment PREFERRED",
            shape.model_copy(update={"numa": Requirement.PREFERRED}),
        )
    if shape.nvlink == Requirement.REQUIRED:
        yield MemberRelaxation(
            nff,
            "NVLink REQUIRED",
            "no node has that many free GPUs all NVLinked to each other",
            "without NVLink between all its GPUs",
            "make NVLink PREFERRED",
            shape.model_copy(update={"nvlink": Requirement.PREFERRED}),
        )
    if shape.alignment.mode == Requirement.REQUIRED:
        yield MemberRelaxation(
            nff,
            "GPU↔NIC alignment REQUIRED",
            "no node has free NICs aligned with its free GPUs",
            "with unaligned NICs",
            "make GPU↔NIC alignment PREFERRED instead of REQUIRED",
            shape.model_copy(
                update={"alignment": Alignment(mode=Requirement.PREFERRED, distance=shape.alignment.distance)}
            ),
        )
    if shape.node_selector:
        selector = ", ".join(f"{k}={v}" for k, v in shape.node_selector.items())
        yield MemberRelaxation(
            nff,
            f"node selector {selector}",
            f"no node labelled {selector} has room",
            "without the node selector",
            "drop the node selector",
            shape.model_copy(update={"node_selector": {}}),
        )
    if shape.avoid_gpu_models:
        avoided = ", ".join(shape.avoid_gpu_models)
        yield MemberRelaxation(
            nff,
            f"avoid_gpu_models {avoided}",
            f"the nodes with room have only GPUs it avoids ({avoided})",
            "with every GPU model",
            "drop avoid_gpu_models",
            shape.model_copy(update={"avoid_gpu_models": ()}),
        )
    if shape.gpu_models:
        models = " or ".join(shape.gpu_models)
        yield MemberRelaxation(
            nff,
            f"gpu_models {models}",
            f"no node with free {models} GPUs has room",
            "with any GPU model",
            "accept any GPU model",
            shape.model_copy(update={"gpu_models": ()}),
        )
    if shape.mutex:
        yield MemberRelaxation(
            ReasonCode.MUTEX,
            "mutex",
            "mutex: it takes only idle GPUs that nothing shares, and no node with room has one",
            "sharing its GPUs",
            "drop mutex",
            shape.model_copy(update={"mutex": False}),
        )


def job_relaxations(job: Job, tiers: Sequence[int]) -> Iterator[Relaxation]:
    """Single rule relaxations of a whole job, least first (see the module's step 3)."""
    for role in job.roles:
        for relaxed in member_relaxations(role.member):
            code = ReasonCode.MUTEX if relaxed.code == ReasonCode.MUTEX else ReasonCode.INSUFFICIENT_CAPACITY
            yield Relaxation(
                code,
                f"{role.name} members' {relaxed.rule}",
                f"{relaxed.change} (role {role.name})",
                with_member(job, role.name, **_changes(role.member, relaxed.member)),
            )
    higher = sorted(t for t in tiers if t > 0)
    for where, locality, rebuild in _localities(job):
        if locality.mode != Requirement.REQUIRED:
            continue
        asked = locality.highest_tier or 1
        for tier in (t for t in higher if t > asked):
            yield Relaxation(
                ReasonCode.LOCALITY,
                f"{where} locality: all its nodes under one tier-{asked} switch",
                f"allow tier {tier} ({where} locality highest_tier {tier})",
                rebuild(Locality(mode=Requirement.REQUIRED, highest_tier=tier)),
            )
        yield Relaxation(
            ReasonCode.LOCALITY,
            f"{where} locality: all its nodes under one tier-{asked} switch",
            f"make {where} locality PREFERRED",
            rebuild(Locality(mode=Requirement.PREFERRED, highest_tier=locality.highest_tier)),
        )
    if job.nvlink_domain == Requirement.REQUIRED:
        yield Relaxation(
            ReasonCode.LOCALITY,
            "nvlink_domain: all its nodes in one NVLink domain",
            "make nvlink_domain PREFERRED",
            job.model_copy(update={"nvlink_domain": Requirement.PREFERRED}),
        )
    if job.rail_aligned == Requirement.REQUIRED:
        yield Relaxation(
            ReasonCode.LOCALITY,
            "rail_aligned: every member's NICs on the same rails",
            "make rail_aligned PREFERRED",
            job.model_copy(update={"rail_aligned": Requirement.PREFERRED}),
        )
    for i, affinity in enumerate(job.role_affinity):
        if affinity.mode != Requirement.REQUIRED:
            continue
        asked = affinity.highest_tier or 1
        rest = job.role_affinity[:i] + job.role_affinity[i + 1 :]
        for tier in (t for t in higher if t > asked):
            wider = affinity.model_copy(update={"highest_tier": tier})
            yield Relaxation(
                ReasonCode.LOCALITY,
                f"role_affinity: {affinity.role_a} within tier {asked} of {affinity.role_b}",
                f"allow tier {tier} between {affinity.role_a} and {affinity.role_b}",
                job.model_copy(update={"role_affinity": (*rest[:i], wider, *rest[i:])}),
            )
        yield Relaxation(
            ReasonCode.LOCALITY,
            f"role_affinity: {affinity.role_a} within tier {asked} of {affinity.role_b}",
            f"make the role affinity of {affinity.role_a} and {affinity.role_b} PREFERRED",
            job.model_copy(
                update={
                    "role_affinity": (
                        *rest[:i],
                        affinity.model_copy(update={"mode": Requirement.PREFERRED}),
                        *rest[i:],
                    )
                }
            ),
        )
    if any(r.member.mutex for r in job.roles):
        yield Relaxation(
            ReasonCode.MUTEX,
            "mutex: its members take only idle GPUs and share them with nothing",
            "drop mutex",
            job.model_copy(
                update={
                    "roles": tuple(
                        r.model_copy(update={"member": r.member.model_copy(update={"mutex": False})})
                        for r in job.roles
                    )
                }
            ),
        )
    if job.anti_affinity:
        yield Relaxation(
            ReasonCode.MUTEX,
            "anti_affinity: it keeps away from "
            + "; ".join(
                ",".join(f"{k}={v}" for k, v in a.labels.items()) or "all" for a in job.anti_affinity
            ),
            "drop anti_affinity",
            job.model_copy(update={"anti_affinity": ()}),
        )
    if job.exclusive_nodes:
        yield Relaxation(
            ReasonCode.MUTEX,
            "exclusive_nodes: it takes only nodes that run nothing else",
            "drop exclusive_nodes",
            job.model_copy(update={"exclusive_nodes": False}),
        )


def locality_shortfall(problem: Normalised, compiled: Compiled, rule: Rule) -> str | None:
    """Which domain of the rule's level came closest, when none has room for its roles' minimums (a
    role with variants, e.g. rail sets, needs room for one of them): the words of a LOCALITY reason."""
    fabric = Fabric.of(problem.request.inventory)
    level = 1 if rule.partition == NVLINK else rule.highest_tier
    if not level:
        return None
    by_domain: dict[str, list[NodeClass]] = {}
    for cls in problem.classes:
        if (d := domain_of(cls, fabric, rule.partition, level)) is not None:
            by_domain.setdefault(d, []).append(cls)
    groups: dict[int, list[int]] = {}
    for r in rule.roles:
        groups.setdefault(problem.group_of(r), []).append(r)

    def room(classes: list[NodeClass], r: int) -> int:
        shape = problem.roles[r].shape
        return sum(
            c.count * max((k.counts[shape] for k in compiled.configs[c.index]), default=0) for c in classes
        )

    rooms = {
        d: {g: max(room(classes, r) for r in variants) for g, variants in groups.items()}
        for d, classes in by_domain.items()
    }
    if any(all(rooms[d][g] >= problem.roles[g].minimum for g in groups) for d in rooms):
        return None
    where = "one NVLink domain" if rule.partition == NVLINK else f"one tier-{level} switch"
    refs = [problem.roles[g] for g in groups]
    needs = " and ".join(
        f"{ref.minimum} {ref.role.name} members ({describe(ref.role.member)})" for ref in refs
    )
    best = max(
        sorted(rooms),
        key=lambda d: sum(min(rooms[d][g], problem.roles[g].minimum) for g in groups),
        default=None,
    )
    best_text = (
        "no switch of that tier has any room"
        if best is None
        else f"the best, {best}, has room for "
        + " and ".join(f"{rooms[best][g]} {problem.roles[g].role.name}" for g in groups)
    )
    return f"{rule.what}: needs {needs} under {where}; {best_text}"


# --------------------------------------------------------------------------- helpers


def node_shapes(problem: Normalised) -> list[tuple[NodeShape, str]]:
    """Every distinct free node shape with the first node of it, by name."""
    out = [(cls.shape, cls.nodes[0].name) for cls in problem.classes]
    names = problem.unfit_names or ("a node",) * len(problem.unfit)
    out += list(zip(problem.unfit, names, strict=False))
    return sorted(out, key=lambda s: s[1])


def first_host(
    problem: Normalised, shapes: Sequence[tuple[NodeShape, str]], member: MemberShape
) -> str | None:
    """The first node (by name) that could host one ``member`` as it stands."""
    key = (member.model_dump_json(),)
    for shape, name in shapes:
        # The node shapes' taboos name the batch's shapes, not this lone one: drop them here.
        if len(configurations_for(replace(shape, taboo=frozenset()), key, limits=(1,))) > 1:
            return name
    return None


def free_gpus(problem: Normalised) -> int:
    return sum(
        sum(1 for g in n.gpus if g.healthy) - len({g for a in n.allocations for g in a.gpus})
        for n in problem.request.inventory.nodes
        if n.schedulable
    )


def with_role(job: Job, role_name: str, **update: object) -> Job:
    roles = tuple(r.model_copy(update=update) if r.name == role_name else r for r in job.roles)
    return job.model_copy(update={"roles": roles})


def with_member(job: Job, role_name: str, **update: object) -> Job:
    roles = tuple(
        r.model_copy(update={"member": r.member.model_copy(update=update)}) if r.name == role_name else r
        for r in job.roles
    )
    return job.model_copy(update={"roles": roles})


def _changes(before: MemberShape, after: MemberShape) -> dict[str, object]:
    return {k: getattr(after, k) for k in MemberShape.model_fields if getattr(after, k) != getattr(before, k)}


def _localities(job: Job) -> Iterator[tuple[str, Locality, Callable[[Locality], Job]]]:
    yield "job", job.locality, lambda loc: job.model_copy(update={"locality": loc})
    for role in job.roles:
        yield (
            f"role {role.name}",
            role.locality,
            lambda loc, name=role.name: with_role(job, name, locality=loc),
        )


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def describe(shape: MemberShape) -> str:
    if shape.gpu_share is not None:
        parts = [f"a {shape.gpu_share.milli}-milli share of a GPU"]
    else:
        parts = [f"{shape.gpus} GPU" + ("s" if shape.gpus != 1 else "")]
    if shape.gpu_models:
        parts.append("model " + "|".join(shape.gpu_models))
    if shape.nics.mode == NicMode.PER_GPU:
        parts.append("a NIC per GPU")
    elif shape.nics.mode == NicMode.PER_MEMBER:
        parts.append(f"{shape.nics.count} NICs")
    if shape.alignment.mode == Requirement.REQUIRED:
        parts.append(f"aligned at {shape.alignment.distance.name} or closer")
    if shape.numa == Requirement.REQUIRED:
        parts.append("one NUMA node")
    if shape.nvlink == Requirement.REQUIRED:
        parts.append("all NVLinked")
    if shape.mutex:
        parts.append("mutex")
    if shape.cpu_milli:
        parts.append(f"{shape.cpu_milli / 1000:g} CPUs")
    if shape.memory_mib:
        parts.append(f"{shape.memory_mib} MiB memory")
    return ", ".join(parts)
