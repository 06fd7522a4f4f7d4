"""Metrics: GPU counts agree with the inventory and the placement; fragmentation and stranded GPUs,
before and after, agree with FGD's measure (``solver.domain.fragmentation``, the ruler the
objective uses too) applied to free capacity derived here, node by node.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

from solver.answer.verify.view import Placed
from solver.domain.cancel import checked
from solver.domain.fragmentation import FreeCapacity, Profile, profile
from solver.domain.model import (
    Node,
    SolveRequest,
    SolveResult,
)


def metrics(request: SolveRequest, result: SolveResult, placed: list[Placed]) -> Iterator[str]:
    """``result.metrics`` counted again, over the schedulable nodes (a cordoned node is not capacity,
    which keeps used <= total):

    - total = their GPUs; used before = their GPUs named by allocations whole; used after = used
      before + whole GPUs given to members of placed jobs (a share holds part of a GPU, not the GPU);
    - a node is fully free when none of its GPUs is allocated, and stays so after the plan if no new
      member lands on it;
    - fragmentation and stranded GPUs (in GPUs) against the workload profile, before and after. The
      measure's definition is shared with the objective; what is checked here is the state it is
      applied to: each node's free capacity, from its allocations and the members placed on it (a
      whole GPU or a mutex member's GPU is gone; a share takes its milli)."""
    workload = profile(request.policy.workload, (r.member for job in request.jobs for r in job.roles))
    on: dict[str, list[Placed]] = {}
    for p in placed:
        on.setdefault(p.member.node, []).append(p)
    total = used = free_before = free_after = 0
    before, after = [0.0, 0], [0.0, 0]
    for node in checked(request.inventory.nodes):  # one pass: a lone pod's check walks the whole cluster
        fact = node_facts(workload, node)
        if fact is None:
            continue
        gpus, held, fully_free, now = fact
        total, used = total + gpus, used + held
        landing = on.get(node.name)
        if fully_free:
            free_before += 1
            free_after += landing is None
        then = workload.measure(free_capacity(node, landing)) if landing else now
        before[0], before[1] = before[0] + now[0], before[1] + now[1]
        after[0], after[1] = after[0] + then[0], after[1] + then[1]
    counted = {
        "gpus_total": total,
        "gpus_used_before": used,
        "gpus_used_after": used + sum(len(set(p.member.gpus)) for p in placed if not p.member.gpu_shares),
        "nodes_fully_free_before": free_before,
        "nodes_fully_free_after": free_after,
    }
    for name, value in counted.items():
        stated = getattr(result.metrics, name)
        if stated != value:
            yield f"metrics: {name} is {stated} but the inventory and placement give {value}"
    m = result.metrics
    for name, stated, measured in (
        ("fragmentation_before", m.fragmentation_before, round(before[0] / 1000, 3)),
        ("fragmentation_after", m.fragmentation_after, round(after[0] / 1000, 3)),
        ("stranded_gpus_before", m.stranded_gpus_before, before[1] / 1000),
        ("stranded_gpus_after", m.stranded_gpus_after, after[1] / 1000),
    ):
        if abs(stated - measured) > 1e-6:
            yield f"metrics: {name} is {stated} but the inventory and placement give {measured}"


_Facts = tuple[int, int, bool, tuple[float, int]]


# By node id, holding the node only weakly (its entry goes when it does), so the verifier's memo
# never keeps a node alive: its own, sharing no code with the pipeline's bounded store.
_FACTS: dict[int, tuple[weakref.ref[Node], Profile, _Facts | None]] = {}


def node_facts(workload: Profile, node: Node) -> _Facts | None:
    """A schedulable node's GPUs, how many of them its allocations hold whole, whether none is held
    whole, and its (fragmentation, stranded) as it stands; None for a cordoned node. Remembered per
    node object (the verifier's own memo, not the pipeline's): a scheduler sends the same unchanged
    nodes again and again."""
    hit = _FACTS.get(id(node))
    if hit is not None and hit[0]() is node and hit[1] is workload:
        return hit[2]
    facts = None
    if node.schedulable:
        held = {g for a in node.allocations for g in a.gpus}
        measured = workload.measure(free_capacity(node, []))
        facts = len(node.gpus), len(held & {g.id for g in node.gpus}), not held, measured
    key = id(node)
    _FACTS[key] = (weakref.ref(node, lambda _: _FACTS.pop(key, None)), workload, facts)
    return facts


def free_capacity(node: Node, members: list[Placed]) -> FreeCapacity:
    left = {g.id: 1000 for g in node.gpus if g.healthy}
    cpu, memory = node.cpu_milli, node.memory_mib
    for a in node.allocations:
        for g in a.gpus:
            left[g] = 0
        for sh in a.gpu_shares:
            left[sh.gpu] = 0 if a.mutex else left.get(sh.gpu, 0) - sh.milli
        cpu, memory = cpu - a.cpu_milli, memory - a.memory_mib
    for p in members:
        shape = p.role.member if p.role else None
        for g in () if p.member.gpu_shares else p.member.gpus:  # a share member names its GPU too
            left[g] = 0
        for sh in p.member.gpu_shares:
            left[sh.gpu] = 0 if shape is not None and shape.mutex else left.get(sh.gpu, 0) - sh.milli
        if shape is not None:
            cpu, memory = cpu - shape.cpu_milli, memory - shape.memory_mib
    model = {g.id: g.model for g in node.gpus}
    return FreeCapacity.of(
        ((model[g], max(0, milli)) for g, milli in left.items() if g in model),
        cpu if node.cpu_milli else None,
        memory if node.memory_mib else None,
    )
