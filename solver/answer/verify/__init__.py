"""Independent checker of a placement: does ``result`` obey every hard rule of ``request``?

The solver's answer is never handed out unchecked, so this package is the last line of defence
against a bug in normalise/compile/decode. To be worth anything it must not share their mistakes:
it imports nothing from the pipeline or ``solver.domain.topology`` (only the domain types, and the
call's cancel token, which can stop a check but never change its verdict), computes PCIe
distances, matchings and capacities itself, in the plainest way that is still linear-ish, and each
module is short enough to audit in one sitting.

The rules checked (the solver implements the same ones; this list is what "valid" means):

- jobs:     every request job appears exactly once; no unknown job ids.
- gang:     a placed job has, for every role, between ``role.minimum`` and ``replicas`` members,
            with distinct indexes below ``replicas`` and no unknown role; an unplaced job lists no
            members and gives a reason.
- member:   on an existing, schedulable node whose labels match ``node_selector``; exactly
            ``gpus`` distinct healthy, unallocated GPUs of the node (of an asked model if any,
            of no avoided model);
            exactly the asked number of distinct healthy, unallocated RDMA NICs (one per GPU,
            ``nics.count``, or none).
- pairs:    each GPU↔NIC pair names the member's devices and their true distance; with a NIC per GPU,
            every GPU has its own NIC.
- topology: alignment REQUIRED holds, and for PREFERRED/REQUIRED ``aligned`` tells the truth;
            NUMA REQUIRED: every device on one NUMA node, which ``numa`` names; NVLink REQUIRED:
            every GPU pair linked.
- shares:   a share member holds one GPU and reports the part it asked for; shares on a GPU, old
            and new, fit 1000 milli and its memory; a whole-GPU or mutex member gets an idle GPU
            and nobody else lands on it; a mutex allocation's GPU takes no one.
- capacity: no device used by two members (but plain shares of one GPU); per node, the members'
            CPU and memory fit what the allocations leave free (a node with 0 CPU/memory does not track it).
- metrics:  GPU counts agree with the inventory and the placement; fragmentation and stranded GPUs,
            before and after, agree with FGD's measure (``solver.domain.fragmentation``, the one ruler the
            objective uses too) applied to free capacity derived here, node by node.
- apart:    anti-affinity: no member of a job near (same node / PCIe switch / GPU, as the rule
            says) a member of another batch job, or a running allocation, whose labels include the
            rule's, nor near another of its own members when its own labels do; exclusive nodes:
            no other job's member, and nothing running, on its nodes.
- rails:    a REQUIRED rail-aligned job: all members of a role have NICs on the same rails.
- locality: REQUIRED job, role and role-pair locality: the nodes involved share a fabric switch of
            the allowed tier or lower (one node always does); REQUIRED NVLink domain: one domain;
            the reported tier, leaves, NVLink domains and rails agree with the nodes and NICs used.

Each violation is one sentence naming job, role, member index, node and device.

One module per rule family, mirroring ``solver.compile``; ``docs/architecture.md`` has the table.
"""

from __future__ import annotations

from solver.answer.verify.capacity import node_capacity
from solver.answer.verify.jobs import gang, job_set
from solver.answer.verify.locality import all_locality
from solver.answer.verify.member import member
from solver.answer.verify.metrics import metrics
from solver.answer.verify.pairs import pairs
from solver.answer.verify.separation import separation
from solver.answer.verify.shares import gpu_shares, shared_devices
from solver.answer.verify.view import NodeView, Placed
from solver.domain.cancel import checked
from solver.domain.model import SolveRequest, SolveResult

__all__ = ["verify"]


def verify(request: SolveRequest, result: SolveResult) -> tuple[str, ...]:
    """Every way ``result`` breaks the rules of ``request``, one sentence each; empty when valid."""
    jobs = {job.id: job for job in reversed(request.jobs)}  # reversed: the first of a repeated id wins
    # The rules below walk every placed member and every node used: the token is looked at per item
    # (solver.domain.cancel.checked), so a cancelled or expired call stops inside the verifier too.
    placed = [
        Placed(job, member)
        for jr in checked(result.jobs)
        if jr.placed and (job := jobs.get(jr.job_id)) is not None
        for member in jr.members
    ]
    by_name = {node.name: node for node in reversed(request.inventory.nodes)}
    used = {p.member.node for p in placed}
    # only what is used
    nodes = {name: NodeView.of(node) for name, node in checked(by_name.items()) if name in used}
    violations = [
        *job_set(request, result),
        *(v for jr in checked(result.jobs) if jr.job_id in jobs for v in gang(jobs[jr.job_id], jr)),
        *(v for p in checked(placed) for v in member(nodes, p)),
        *(v for p in checked(placed) for v in pairs(nodes, p)),
        *shared_devices(placed),
        *gpu_shares(nodes, placed),
        *separation(by_name, placed),
        *node_capacity(nodes, placed),
        *metrics(request, result, placed),
        *all_locality(request, by_name, result, jobs),
    ]
    return tuple(violations)
