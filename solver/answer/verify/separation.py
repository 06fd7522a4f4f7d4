"""Separation: anti-affinity keeps a member away (node, PCIe switch or GPU) from labelled jobs and
running allocations; exclusive nodes hold nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import Placed
from solver.domain.cancel import checked
from solver.domain.model import (
    Node,
    Scope,
)


def labelled(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def spots_of(node: Node, gpus: set[str], scope: Scope) -> set[str]:
    """Where a set of GPUs sits at a scope: the node, their PCIe switches, or the GPUs."""
    if scope in (Scope.NODE, Scope.UNSPECIFIED):
        return {node.name} if gpus else set()
    if scope == Scope.PCIE_SWITCH:
        return {f"{node.name}/{g.pcie_switch}" for g in node.gpus if g.id in gpus}
    return {f"{node.name}/{g}" for g in gpus}


def separation(nodes: dict[str, Node], placed: list[Placed]) -> Iterator[str]:
    by_job: dict[str, list[Placed]] = {}
    for p in placed:
        by_job.setdefault(p.job.id, []).append(p)

    def footprint(members: list[Placed], scope: Scope) -> set[str]:
        spots: set[str] = set()
        for p in members:
            if p.member.node in nodes:
                gpus = set(p.member.gpus) or {"(no GPU)"}
                spots |= spots_of(nodes[p.member.node], gpus, scope) or {p.member.node}
        return spots

    for job_id, members in checked(by_job.items()):
        job = members[0].job
        for rule in job.anti_affinity:
            mine = footprint(members, rule.scope)
            broken = f"job {job_id}: anti-affinity to {rule.labels} broken by"
            if labelled(job.labels, rule.labels):  # its own labels: no two of its members together
                seen: dict[str, str] = {}
                for p in members:
                    me = f"{p.member.role} member {p.member.index}"
                    for spot in sorted(footprint([p], rule.scope)):
                        if spot in seen:
                            yield f"{broken} its own {seen[spot]} and {me} together at {spot}"
                        seen.setdefault(spot, me)
            for other_id, others in by_job.items():
                near = other_id != job_id and labelled(others[0].job.labels, rule.labels)
                if near and (shared := mine & footprint(others, rule.scope)):
                    yield f"{broken} job {other_id} at {sorted(shared)}"
            for node in {p.member.node for p in members if p.member.node in nodes}:
                for a in nodes[node].allocations:
                    held = set(a.gpus) | {sh.gpu for sh in a.gpu_shares}
                    spots = spots_of(nodes[node], held, rule.scope)
                    if labelled(a.labels, rule.labels) and (shared := mine & spots):
                        yield f"{broken} running {a.owner} at {sorted(shared)}"
        if job.exclusive_nodes:
            used = {p.member.node for p in members}
            alone = f"job {job_id}: wants its nodes to itself but"
            for other_id, others in by_job.items():
                if other_id != job_id and (shared := used & {p.member.node for p in others}):
                    yield f"{alone} shares {sorted(shared)} with job {other_id}"
            for node in sorted(used):
                if node in nodes and nodes[node].allocations:
                    yield f"{alone} {node} runs other work"
