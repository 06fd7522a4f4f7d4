"""Separation rules: anti-affinity by labels (at GPU, PCIe-switch or node scope) and exclusive nodes.

A job's anti-affinity rule names labels; it keeps the job away from *batch* jobs whose labels
include them and from *running* allocations whose labels include them, at the rule's scope. As in
Kubernetes, a rule that matches the job's own labels keeps its members apart from each other too:
one member per node (Slurm's ``-N``, a spread Deployment), per PCIe switch or per GPU. An exclusive
job shares its nodes with no other job, running or new.

Members of ordinary jobs are interchangeable by shape. Members of jobs involved in a separation
rule are not, so their shapes are made job-specific ("owned") and the rules become:

* conflicts between owned shapes: two shapes that may not share a node / a PCIe switch / a GPU;
* taboos on node shapes: a shape may not use this node at all, or these GPUs of it.

Both are consumed by ``solver.reduce.intranode`` when it enumerates configurations, so the CP-SAT model
needs no new variable for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.domain.model import Allocation, AntiAffinity, Gpu, Job, Node, Scope, SolveRequest

WHOLE_NODE = -1  # in a taboo: the shape may not use the node at all


def scope_of(rule: AntiAffinity) -> Scope:
    return Scope.NODE if rule.scope == Scope.UNSPECIFIED else rule.scope


def matches(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class Separation:
    owned: frozenset[int]  # jobs whose member shapes are job-specific
    job_conflicts: frozenset[tuple[int, int, Scope]]  # (job a, job b, scope), both orders
    request: SolveRequest

    @staticmethod
    def of(request: SolveRequest) -> Separation:
        conflicts: set[tuple[int, int, Scope]] = set()
        owned: set[int] = set()
        for a, job in enumerate(request.jobs):
            if job.exclusive_nodes:
                owned.add(a)  # its conflicts with everyone are added per shape, see shape_conflicts
            for rule in job.anti_affinity:
                owned.add(a)
                for b, other in enumerate(request.jobs):
                    if matches(other.labels, rule.labels):  # b == a: the job's members repel each other
                        conflicts |= {(a, b, scope_of(rule)), (b, a, scope_of(rule))}
        owned |= {b for _, b, _ in conflicts}
        return Separation(owned=frozenset(owned), job_conflicts=frozenset(conflicts), request=request)

    def shape_conflicts(self, job_of_shape: Sequence[int | None]) -> tuple[tuple[int, int, int], ...]:
        """(shape a, shape b, scope) for every pair of owned shapes whose jobs conflict."""
        out = set()
        for a, ja in enumerate(job_of_shape):
            for b, jb in enumerate(job_of_shape):
                if ja is None or jb is None:
                    continue
                out |= {(a, b, int(scope)) for x, y, scope in self.job_conflicts if (x, y) == (ja, jb)}
        if any(job.exclusive_nodes for job in self.request.jobs):
            # An exclusive job conflicts with every other job, including those whose shapes are shared.
            for a, ja in enumerate(job_of_shape):
                if ja is not None and self.request.jobs[ja].exclusive_nodes:
                    for b, jb in enumerate(job_of_shape):
                        if jb != ja:
                            out |= {(a, b, int(Scope.NODE)), (b, a, int(Scope.NODE))}
        return tuple(sorted(out))

    def taboo(
        self, node: Node, gpu_order: Sequence[Gpu], job_of_shape: Sequence[int | None]
    ) -> frozenset[tuple[int, int]]:
        """(shape, canonical GPU index or WHOLE_NODE) pairs the node's running work forbids."""
        if not self.owned:
            return frozenset()
        out: set[tuple[int, int]] = set()
        for s, j in enumerate(job_of_shape):
            if j is None:
                continue
            job = self.request.jobs[j]
            if job.exclusive_nodes and node.allocations:
                out.add((s, WHOLE_NODE))
            for rule in job.anti_affinity:
                out |= {(s, g) for g in _forbidden(node, gpu_order, rule)}
        return frozenset(out)


def _forbidden(node: Node, gpu_order: Sequence[Gpu], rule: AntiAffinity) -> set[int]:
    """Canonical GPU indexes (or WHOLE_NODE) that running work matching ``rule`` puts off limits."""
    hits = [a for a in node.allocations if matches(a.labels, rule.labels)]
    if not hits:
        return set()
    scope = scope_of(rule)
    if scope == Scope.NODE:
        return {WHOLE_NODE}
    held = {g for a in hits for g in _gpus_of(a)}
    if scope == Scope.GPU:
        return {i for i, g in enumerate(gpu_order) if g.id in held}
    switches = {g.pcie_switch for g in node.gpus if g.id in held}
    return {i for i, g in enumerate(gpu_order) if g.pcie_switch in switches}


def _gpus_of(allocation: Allocation) -> set[str]:
    return set(allocation.gpus) | {s.gpu for s in allocation.gpu_shares}


def job_label(job: Job) -> str:
    return f"#job:{job.id}"
