"""Explain: why a job was left unplaced, and the smallest change that would place it.

The reasons are checked from the most basic up: no node can host a single member (then: which rule
to relax so that one could); the free cluster cannot hold the gang's minimum even with nothing
else placed (then: the minimum that would fit); the search ran out of time; or the job fits alone
and other jobs of the batch won the room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from solver.compile import Compiled
from solver.compile.locality import FABRIC, NVLINK, Rule, domain_of
from solver.domain.fabric import Fabric
from solver.domain.model import (
    Alignment,
    JobResult,
    MemberShape,
    NicMode,
    Reason,
    ReasonCode,
    Requirement,
)
from solver.reduce.intranode import configurations_for
from solver.reduce.normalise import NodeClass, Normalised, RoleRef


def explain(
    problem: Normalised, compiled: Compiled, jobs: Sequence[JobResult], *, timed_out: bool
) -> tuple[JobResult, ...]:
    out = []
    for j, result in enumerate(jobs):
        if result.placed:
            out.append(result)
            continue
        reason = why_unplaced(problem, compiled, j, timed_out=timed_out)
        out.append(result.model_copy(update={"reason": reason}))
    return tuple(out)


def why_unplaced(problem: Normalised, compiled: Compiled, j: int, *, timed_out: bool) -> Reason:
    groups = {g: variants for g, variants in problem.groups().items() if problem.roles[g].job_index == j}
    hosted = {r for r, _ in compiled.y}
    for g, variants in groups.items():
        ref = problem.roles[g]
        if not hosted.intersection(variants):
            on_rails = " on one rail set" if ref.rails is not None else ""
            return Reason(
                code=ReasonCode.NO_NODE_FITS,
                message=f"no node can host one {ref.role.name} member "
                f"({describe(ref.role.member)}){on_rails}; "
                f"the largest free node has {largest_free_gpus(problem)} free GPUs",
                relaxation=smallest_relaxation(problem, ref),
            )
    for g, variants in groups.items():
        ref = problem.roles[g]
        room = max(capacity(problem, compiled, r) for r in variants)
        if room < ref.minimum:
            fix = (
                f"lower min_replicas of {ref.role.name} to {room}"
                if room >= 1
                else f"free room for one {ref.role.name} member"
            )
            return Reason(
                code=ReasonCode.INSUFFICIENT_CAPACITY,
                message=f"needs {ref.minimum} {ref.role.name} members ({describe(ref.role.member)}); "
                f"the free cluster can host at most {room}",
                relaxation=fix,
            )
    for rule in (r for r in compiled.locality.rules if r.job == j and r.mode == Requirement.REQUIRED):
        reason = locality_shortfall(problem, compiled, rule)
        if reason is not None:
            return reason
    if timed_out:
        return Reason(
            code=ReasonCode.TIME_LIMIT,
            message="the time limit ran out before any placement was found",
            relaxation="raise policy.time_limit_s or the call's deadline",
        )
    return Reason(
        code=ReasonCode.OUTPRIORITISED,
        message="the free cluster has room for this job alone, but the batch's other jobs "
        "are worth more under the objective and took it",
        relaxation="raise its priority, or submit it again when capacity frees up",
    )


def capacity(
    problem: Normalised, compiled: Compiled, r: int, where: Callable[[NodeClass], bool] = bool
) -> int:
    """Members of role ``r`` the free cluster (or the classes ``where`` accepts) could host with
    nothing else placed."""
    shape = problem.roles[r].shape
    return sum(
        cls.count * max((k.counts[shape] for k in compiled.configs[cls.index]), default=0)
        for cls in problem.classes
        if where(cls)
    )


def locality_shortfall(problem: Normalised, compiled: Compiled, rule: Rule) -> Reason | None:
    """A LOCALITY reason when no single domain of the rule's level has room for its roles' minimums
    (a role with variants, e.g. rail sets, needs room for one of them)."""
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
    higher = [t for t in fabric.tiers if t > level]
    relax = (
        f"allow tier {higher[0]} ({rule.what})"
        if rule.partition == FABRIC and higher
        else "make the rule PREFERRED"
    )
    return Reason(
        code=ReasonCode.LOCALITY,
        message=f"{rule.what}: needs {needs} under {where}; {best_text}",
        relaxation=relax,
    )


def largest_free_gpus(problem: Normalised) -> int:
    shapes = (*(cls.shape for cls in problem.classes), *problem.unfit)
    return max((len(shape.gpus) for shape in shapes), default=0)


def describe(shape: MemberShape) -> str:
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
    if shape.cpu_milli:
        parts.append(f"{shape.cpu_milli / 1000:g} CPUs")
    if shape.memory_mib:
        parts.append(f"{shape.memory_mib} MiB memory")
    return ", ".join(parts)


def _relaxations(shape: MemberShape) -> list[tuple[str, MemberShape]]:
    """Single-rule relaxations, least intrusive first."""
    out = []
    if shape.alignment.mode == Requirement.REQUIRED:
        out.append(
            (
                "make GPU↔NIC alignment PREFERRED instead of REQUIRED",
                shape.model_copy(
                    update={
                        "alignment": Alignment(mode=Requirement.PREFERRED, distance=shape.alignment.distance)
                    }
                ),
            )
        )
    if shape.numa == Requirement.REQUIRED:
        out.append(
            ("make NUMA alignment PREFERRED", shape.model_copy(update={"numa": Requirement.PREFERRED}))
        )
    if shape.nvlink == Requirement.REQUIRED:
        out.append(("make NVLink PREFERRED", shape.model_copy(update={"nvlink": Requirement.PREFERRED})))
    if shape.node_selector:
        out.append(("drop the node selector", shape.model_copy(update={"node_selector": {}})))
    if shape.gpu_models:
        out.append(("accept any GPU model", shape.model_copy(update={"gpu_models": ()})))
    return out


def smallest_relaxation(problem: Normalised, ref: RoleRef) -> str:
    """The first single-rule relaxation under which some node could host one member."""
    for words, relaxed in _relaxations(ref.role.member):
        key = (relaxed.model_dump_json(),)
        # The node shapes' taboos name the batch's shapes, not this lone one: drop them here.
        if any(
            len(configurations_for(replace(shape, taboo=frozenset()), key, limits=(1,))) > 1
            for shape in (*(cls.shape for cls in problem.classes), *problem.unfit)
        ):
            return words
    largest = largest_free_gpus(problem)
    if ref.role.member.gpus > largest:
        return f"ask for at most {largest} GPUs per member, or free a node"
    return "free capacity on a node (no single rule relaxation makes one member fit)"
