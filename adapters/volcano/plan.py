"""A session's plan: the solver's placement of the batch, and the bookkeeping of what Volcano did.

Read-mostly: ``predicate``/``prioritize``/``job_ready`` only look things up (no solving, no I/O);
``allocate``/``deallocate`` update the bookkeeping and return the annotations to write, so the
caller does the (slow) API call outside the lock.

A task Volcano allocates on another node than planned (another plugin decided, or a predicate was
ignored) is *handled*: its planned devices are released, and it gets the first free GPUs (and, if
it asked for NICs, the NICs paired with them) on the node it landed on — free meaning held by
nobody in the snapshot, not planned for another task still expected there, not given to another
off-plan task — written with ``planned: false`` so the node and the operator can tell.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from adapters.volcano import annotations as ann
from adapters.volcano import kube
from adapters.volcano.batch import Batch, JobEntry
from adapters.volcano.hypernodes import HyperNodeTree
from adapters.volcano.wire import (
    CODE_SUCCESS,
    CODE_UNRESOLVABLE,
    CODE_UNSCHEDULABLE,
    HOLDING,
    Job,
    Task,
)
from solver.domain.model import JobResult, MemberPlacement, Node, SolveResult, SolveStatus

# The planned node's prioritize score. Volcano adds every plugin's score for a node (nodeorder's
# plugins and binpack each give at most 100 times their weight, a few hundred in all with the
# default weights), so the plan's choice must outweigh the sum of theirs: with prioritize as the
# only steering (deploy/volcano/volcano-scheduler-large.conf), 100 let binpack override the plan.
PLANNED_SCORE = 1_000_000.0


@dataclass(frozen=True)
class Assignment:
    """Devices for one task on one node."""

    node: str
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    shares: dict[str, tuple[int, int]]  # gpu id → (milli, memory MiB) for a share
    numa: int | None
    aligned: bool
    planned: bool


@dataclass
class Plan:
    batch: Batch
    result: SolveResult | None
    fabric: HyperNodeTree
    planned_score: float = PLANNED_SCORE
    assignments: dict[str, Assignment] = field(default_factory=dict)  # task uid → planned devices
    job_results: dict[str, list[JobResult]] = field(default_factory=dict)  # Volcano job → solver results
    hypernode: dict[str, str] = field(default_factory=dict)  # Volcano job → lowest HyperNode of its nodes
    allocated: dict[str, Assignment] = field(default_factory=dict)  # task uid → what it got this session
    hypernode_written: set[str] = field(default_factory=set)
    # (solver job, role) → planned node → members: a role's members are interchangeable
    role_nodes: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    # Volcano jobs with a member whose planned node Volcano's own predicates refused this session:
    # held (jobReady "not ready") so the gang is not split off plan; re-planned without that node.
    diverted: set[str] = field(default_factory=set)

    @staticmethod
    def of(
        batch: Batch, result: SolveResult | None, fabric: HyperNodeTree, planned_score: float = PLANNED_SCORE
    ) -> Plan:
        plan = Plan(batch=batch, result=result, fabric=fabric, planned_score=planned_score)
        if result is not None:
            plan._index(result)
        return plan

    def _index(self, result: SolveResult) -> None:
        by_member = {(m.job, m.role, m.index): uid for uid, m in self.batch.members.items()}
        owner = {sj: uid for uid, entry in self.batch.jobs.items() for sj in entry.solver_jobs}
        nodes_of: dict[str, set[str]] = defaultdict(set)
        for job in result.jobs:
            vjob = owner.get(job.job_id)
            if vjob is None:
                continue
            self.job_results.setdefault(vjob, []).append(job)
            for member in job.members if job.placed else ():
                uid = by_member.get((job.job_id, member.role, member.index))
                if uid is not None:
                    self.assignments[uid] = _assignment(member)
                    nodes_of[vjob].add(member.node)
                    self.role_nodes.setdefault((job.job_id, member.role), Counter())[member.node] += 1
        for vjob, nodes in nodes_of.items():
            self.hypernode[vjob] = self.fabric.lowest_common(nodes)

    # ------------------------------------------------------------------ lookups

    def known(self, uid: str) -> bool:
        return uid in self.batch.task_job or uid in self.batch.refused

    def gang_placed(self, vjob: str) -> bool:
        entry = self.batch.jobs.get(vjob)
        if entry is None or not entry.solver_jobs:
            return False
        results = {r.job_id: r for r in self.job_results.get(vjob, [])}
        gang = results.get(entry.solver_jobs[0])
        return gang is not None and gang.placed

    # ------------------------------------------------------------------ verbs

    def predicate(self, task: Task, node: str, on_node: Collection[str] = ()) -> tuple[int, str]:
        """(code, reason): only a node the plan has a member of the task's role on, with one of
        those members not yet allocated there, passes; every refusal names the rule.

        By role, not by member: Volcano's allocate action caches a predicate failure for a whole task
        role (``job/task-spec``) and skips the failed nodes for the role's next members, so pinning
        each member to its own node refuses the second member the first one's node — and a gang of
        identical members would never bind. ``on_node`` are the task UIDs on ``node`` (Volcano's
        ``NodeInfo.Tasks``, holding this session's allocations); ``allocate`` then gives the task
        the devices of the member planned there."""
        uid = task.uid
        if uid in self.batch.refused:
            return CODE_UNRESOLVABLE, f"topoplace: {task.key}: {self.batch.refused[uid]}"
        vjob = self.batch.task_job.get(uid)
        if vjob is None:
            return CODE_SUCCESS, ""
        entry = self.batch.jobs[vjob]
        assignment = self.assignments.get(uid)
        if assignment is None:
            return CODE_UNSCHEDULABLE, self._why_unplaced(task.key, entry)
        role = self._role(uid)
        planned_here = self.role_nodes.get(role, Counter()).get(node, 0)
        if planned_here:
            taken = sum(1 for other in on_node if other != uid and self._role(other) == role)
            if taken < planned_here:
                return CODE_SUCCESS, ""
            return CODE_UNSCHEDULABLE, (
                f"topoplace: the {planned_here} member(s) of {task.key}'s role planned on {node} "
                f"are allocated: {self._why_there(vjob, entry)}"
            )
        return CODE_UNSCHEDULABLE, (
            f"topoplace: {task.key} is planned on {assignment.node}, not {node}: "
            f"{self._why_there(vjob, entry)}"
        )

    def _role(self, uid: str) -> tuple[str, str] | None:
        ref = self.batch.members.get(uid)
        return (ref.job, ref.role) if ref is not None and uid in self.assignments else None

    def prioritize(self, task: Task, nodes: list[str]) -> dict[str, float]:
        assignment = self.assignments.get(task.uid)
        target = assignment.node if assignment else None
        return {n: (self.planned_score if n == target else 0.0) for n in nodes}

    def refused_planned_node(self, task: Task, nodes: list[str]) -> str | None:
        """The node planned for ``task`` when it is missing from ``nodes``, the nodes that passed
        Volcano's predicates (every one of them only with --percentage-nodes-to-find=100)."""
        assignment = self.assignments.get(task.uid)
        if assignment is None or assignment.node in nodes:
            return None
        return assignment.node

    def job_ready(self, job: Job) -> bool:
        """Neutral (True) for jobs outside the batch; else placed by the plan and at least its
        gang minimum of GPU tasks allocated this session.

        Allocated counts both the allocateFunc ledger (Volcano >= v1.13.3) and the tasks the
        jobReady body itself shows holding a node: Volcano v1.10.0 has no allocateFunc, and its
        allocate action asks jobReady right after ``stmt.Allocate`` marks the task Allocated in
        the JobInfo it sends — so the large configuration's veto works without allocateFunc."""
        entry = self.batch.jobs.get(job.uid)
        if entry is None:
            return True
        if entry.minimum == 0:
            return True
        if self.held(job.uid):
            return False
        holding = {t.uid for t in job.tasks if t.status in HOLDING and t.node_name}
        members = holding | self.allocated.keys()
        allocated = sum(1 for uid in members if self.batch.task_job.get(uid) == job.uid)
        return allocated >= entry.minimum

    def held(self, vjob: str) -> bool:
        """jobReady answers "not ready" for this gang whatever is allocated: the plan leaves it out
        (or it was diverted off the plan)."""
        entry = self.batch.jobs.get(vjob)
        if entry is None or entry.minimum == 0:
            return False
        return not self.gang_placed(vjob) or vjob in self.diverted

    def allocate(self, task: Task) -> tuple[dict[str, str | None], dict[str, str | None], str]:
        """Record ``task`` allocated on ``task.node_name``; returns (pod annotations, PodGroup
        annotations, off-plan note). Empty annotations mean nothing to write.

        Volcano's choice is final: an off-plan placement is recorded in the ledger (its planned
        devices released, the devices it got held) and noted, never refused — any error returned to
        Volcano's allocateFunc rolls the task back, and the next session would plan it again."""
        uid = task.uid
        vjob = self.batch.task_job.get(uid)
        if vjob is None or not task.node_name:
            return {}, {}, ""
        if self.held(vjob):
            # jobReady will answer "not ready", and Volcano (v1.14.1) then neither commits nor
            # discards the statement: no deallocateFunc follows. Devices written now would stay on
            # a pod that is not bound, for a later session bound without topoplace to hand over
            # stale; so the member is recorded without devices and nothing is written.
            self.allocated[uid] = Assignment(task.node_name, (), (), {}, None, False, False)
            note = f"{task.key} allocated on {task.node_name} but its gang is held by jobReady"
            return {}, {}, note + "; no devices written"
        planned = self._take_role_slot(uid, task.node_name)
        note = ""
        if planned is not None and planned.node == task.node_name:
            got: Assignment | None = planned
        else:
            got = self._fallback(task)
            where = f"planned on {planned.node}" if planned else "not in the plan"
            note = f"{task.key} allocated on {task.node_name} but {where}" + (
                "" if got else "; no free devices known there, devices left to the node"
            )
        if got is None:
            self.allocated[uid] = Assignment(task.node_name, (), (), {}, None, False, False)
            return {}, {}, note
        self.allocated[uid] = got
        pod_notes = ann.pod_annotations(self._device_annotation(task, got, vjob), *self._hand_off(task, got))
        group_notes: dict[str, str | None] = {}
        hypernode = self.hypernode.get(vjob, "")
        if hypernode and vjob not in self.hypernode_written:
            self.hypernode_written.add(vjob)
            group_notes = {ann.JOB_HYPERNODE: hypernode}
        return dict(pod_notes), group_notes, note

    def _take_role_slot(self, uid: str, node: str) -> Assignment | None:
        """The task's planned devices; if it landed on another node where the plan has a member of
        its role not yet allocated, the two swap plans (members of a role are interchangeable)."""
        planned = self.assignments.get(uid)
        if planned is None or planned.node == node:
            return planned
        role = self._role(uid)
        for other, theirs in self.assignments.items():
            if (
                other != uid
                and theirs.node == node
                and other not in self.allocated
                and self._role(other) == role
            ):
                self.assignments[uid], self.assignments[other] = theirs, planned
                return theirs
        return planned

    def deallocate(self, task: Task) -> dict[str, str | None]:
        """Undo an allocation (Volcano discarded the statement): the annotations to remove."""
        if self.allocated.pop(task.uid, None) is None:
            return {}
        return ann.removal()

    # ------------------------------------------------------------------ reasons

    def unplaced_reason(self, vjob: str) -> str:
        """Why a job of the batch has no placement, as its tasks' predicate says it."""
        return self._why_unplaced(vjob, self.batch.jobs[vjob])

    def _why_unplaced(self, what: str, entry: JobEntry) -> str:
        results = self.job_results.get(entry.uid, [])
        if self.result is not None and self.result.status == SolveStatus.UNKNOWN:
            return f"topoplace: the solver found no placement in time for {entry.uid}"
        for result in results:
            if not result.placed and result.reason is not None:
                rule = f" [{entry.rule}]" if entry.rule and result.reason.code.name == "LOCALITY" else ""
                fix = f"; would place it: {result.reason.relaxation}" if result.reason.relaxation else ""
                return (
                    f"topoplace: job {entry.uid} is not placed this session "
                    f"({result.reason.code.name}{rule}): {result.reason.message}{fix}"
                )
        if not results:
            return f"topoplace: no GPU task of {entry.uid} could be planned"
        return f"topoplace: {what} is beyond the gang minimum of {entry.uid} and no room was left for it"

    def _why_there(self, vjob: str, entry: JobEntry) -> str:
        members = [a for uid, a in self.assignments.items() if self.batch.task_job.get(uid) == vjob]
        nodes = sorted({a.node for a in members})
        hypernode = self.hypernode.get(vjob, "")
        parts = [f"gang {vjob} placed whole ({len(members)} pods on {len(nodes)} node(s)"]
        if hypernode:
            parts.append(f" under HyperNode {hypernode}")
        parts.append(")")
        if entry.rule:
            parts.append(f" for {entry.rule}")
        return "".join(parts)

    # ------------------------------------------------------------------ devices

    def _device_annotation(self, task: Task, got: Assignment, vjob: str) -> ann.DeviceAnnotation:
        node = self.batch.nodes.get(got.node)
        by_id = {g.id: g for g in node.gpus} if node else {}
        ref = self.batch.members.get(task.uid)
        gpus = []
        for gid in (*(g for g in got.gpus if g not in got.shares), *got.shares):
            gpu = by_id.get(gid)
            milli, memory = got.shares.get(gid, (1000, gpu.memory_mib if gpu else 0))
            gpus.append(
                ann.DeviceGpu(
                    id=gid,
                    uuid=gpu.uuid if gpu else "",
                    index=gpu.index if gpu else 0,
                    milli=milli,
                    memoryMib=memory,
                )
            )
        return ann.DeviceAnnotation(
            node=got.node,
            job=vjob,
            role=ref.role if ref else task.role,
            member=ref.index if ref else 0,
            gpus=tuple(gpus),
            nics=got.nics,
            numa=got.numa,
            aligned=got.aligned,
            planned=got.planned,
            hypernode=self.hypernode.get(vjob, ""),
        )

    def _hand_off(self, task: Task, got: Assignment) -> tuple[ann.DevicePlugin, ann.Containers]:
        """The node's device plugin and the task's devices per container, in the plugin's terms: a
        whole GPU is all its memory and 100 % of its cores (exclusive in HAMi's and Volcano's
        ledgers), a share the memory and cores planned."""
        node = self.batch.nodes.get(got.node)
        by_id = {g.id: g for g in node.gpus} if node else {}
        devices = []
        for gid in (g for g in got.gpus if g not in got.shares):
            gpu = by_id.get(gid)
            devices.append(
                ann.ContainerDevice(
                    gpu.uuid if gpu and gpu.uuid else gid, ann.NVIDIA, gpu.memory_mib if gpu else 0, 100
                )
            )
        for gid, (milli, memory) in got.shares.items():
            gpu = by_id.get(gid)
            devices.append(
                ann.ContainerDevice(gpu.uuid if gpu and gpu.uuid else gid, ann.NVIDIA, memory, milli // 10)
            )
        return kube.device_hand_off(task, self.batch.node_notes.get(got.node, {}), devices)

    def _fallback(self, task: Task) -> Assignment | None:
        """The first free whole GPUs (and their paired NICs) on the node Volcano chose."""
        node = self.batch.nodes.get(task.node_name)
        count, memory, cores, _ = kube.gpu_request(task)
        if node is None or memory or 0 < cores < 100 or count == 0:
            return None
        busy = {g for a in node.allocations for g in a.gpus} | {
            s.gpu for a in node.allocations for s in a.gpu_shares
        }
        busy_nics = {n for a in node.allocations for n in a.nics}
        for uid, a in self.assignments.items():
            if a.node == node.name and uid != task.uid and self.allocated.get(uid, a).node == node.name:
                busy |= set(a.gpus) | set(a.shares)
                busy_nics |= set(a.nics)
        for a in self.allocated.values():
            if a.node == node.name:
                busy |= set(a.gpus) | set(a.shares)
                busy_nics |= set(a.nics)
        free = [g for g in sorted(node.gpus, key=lambda g: g.index) if g.healthy and g.id not in busy]
        if len(free) < count:
            return None
        gpus = free[:count]
        nics = _paired_nics(node, [g.id for g in gpus], busy_nics) if task.annotations.get(kube.NICS) else ()
        return Assignment(node.name, tuple(g.id for g in gpus), nics, {}, None, False, False)


def _paired_nics(node: Node, gpus: list[str], busy: set[str]) -> tuple[str, ...]:
    switch = {g.id: g.pcie_switch for g in node.gpus}
    nics = []
    for gid in gpus:
        nic = next(
            (
                n.name
                for n in node.nics
                if n.rdma
                and n.healthy
                and n.name not in busy
                and n.name not in nics
                and n.pcie_switch
                and n.pcie_switch == switch.get(gid)
            ),
            None,
        )
        if nic:
            nics.append(nic)
    return tuple(nics)


def _assignment(member: MemberPlacement) -> Assignment:
    return Assignment(
        node=member.node,
        gpus=member.gpus,
        nics=member.nics,
        shares={s.gpu: (s.milli, s.memory_mib) for s in member.gpu_shares},
        numa=member.numa,
        aligned=member.aligned,
        planned=True,
    )
