"""Locality: REQUIRED job, role and role-pair locality — the nodes share a fabric switch of the
allowed tier or lower; REQUIRED NVLink domain — one domain; the reported tier, leaves, NVLink
domains and rails agree with the nodes and NICs used.
"""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.rails import rails_aligned
from solver.domain.cancel import checked
from solver.domain.model import (
    FabricSwitch,
    Job,
    JobResult,
    Node,
    Requirement,
    SolveRequest,
    SolveResult,
)


def all_locality(
    request: SolveRequest, nodes: dict[str, Node], result: SolveResult, jobs: dict[str, Job]
) -> Iterator[str]:
    by_id = {sw.id: sw for sw in request.inventory.switches}
    for jr in checked(result.jobs):
        if jr.placed and jr.job_id in jobs:
            yield from locality(by_id, nodes, jobs[jr.job_id], jr)


def switch_chain(by_id: dict[str, FabricSwitch], leaf: str) -> list[tuple[str, int]]:
    """(switch, tier) from ``leaf`` up to its root (cycle-safe); empty for a node outside the fabric."""
    chain: list[tuple[str, int]] = []
    current = leaf
    while current in by_id and all(current != c for c, _ in chain):
        chain.append((current, by_id[current].tier))
        current = by_id[current].parent
    return chain


def lowest_common_tier(by_id: dict[str, FabricSwitch], nodes: list[Node]) -> int | None:
    """0 for a single node; the tier of the lowest switch above all the nodes; None if none is."""
    if len({n.name for n in nodes}) <= 1:
        return 0
    chains = [switch_chain(by_id, leaf) for leaf in {n.leaf for n in nodes}]
    if any(not c for c in chains):
        return None
    common = set(chains[0]).intersection(*(set(c) for c in chains[1:]))
    return min((tier for _, tier in common), default=None)


def locality(
    by_id: dict[str, FabricSwitch], nodes: dict[str, Node], job: Job, jr: JobResult
) -> Iterator[str]:
    members = [m for m in jr.members if m.node in nodes]
    on = [nodes[m.node] for m in members]

    def within(what: str, group: list[Node], tier: int) -> Iterator[str]:
        reached = lowest_common_tier(by_id, group)
        if reached is None or reached > tier:
            got = "no common switch" if reached is None else f"tier {reached}"
            yield f"job {job.id}: {what} must stay within tier {tier}, but its nodes meet at {got}"

    if job.locality.mode == Requirement.REQUIRED and job.locality.highest_tier:
        yield from within("the job", on, job.locality.highest_tier)
    for role in job.roles:
        if role.locality.mode == Requirement.REQUIRED and role.locality.highest_tier:
            group = [nodes[m.node] for m in members if m.role == role.name]
            yield from within(f"role {role.name}", group, role.locality.highest_tier)
    for pair in job.role_affinity:
        if pair.mode in (Requirement.REQUIRED, Requirement.UNSPECIFIED):
            group = [nodes[m.node] for m in members if m.role in (pair.role_a, pair.role_b)]
            tier = 1 if pair.highest_tier is None else pair.highest_tier
            if tier:  # 0 = no limit, as for job and role locality
                yield from within(f"roles {pair.role_a} and {pair.role_b}", group, tier)
    if job.rail_aligned == Requirement.REQUIRED:
        yield from rails_aligned(nodes, job, members)
    domains = {n.nvlink_domain for n in on}
    if (
        job.nvlink_domain == Requirement.REQUIRED
        and len({n.name for n in on}) > 1
        and (len(domains) > 1 or "" in domains)
    ):
        yield f"job {job.id}: must stay in one NVLink domain, but spans {sorted(domains)}"

    reached = lowest_common_tier(by_id, on)
    if (reached or 0) != jr.locality_tier:
        yield f"job {job.id}: reports locality tier {jr.locality_tier}, its nodes meet at tier {reached}"
    leaves = {n.leaf for n in on if n.leaf}
    if jr.leaves_spanned != len(leaves):
        yield f"job {job.id}: reports {jr.leaves_spanned} leaves spanned, its nodes are under {len(leaves)}"
    spanned = len(domains - {""})
    if jr.nvlink_domains_spanned != spanned:
        yield f"job {job.id}: reports {jr.nvlink_domains_spanned} NVLink domains, its nodes are in {spanned}"
    rails = sorted(
        {
            nic.rail
            for m in members
            for nic in nodes[m.node].nics
            if nic.name in m.nics and nic.rail is not None
        }
    )
    if list(jr.rails) != rails:
        yield f"job {job.id}: reports rails {list(jr.rails)}, its NICs are on rails {rails}"
