"""One session's snapshot → one solver batch, and the index that maps solver members back to pods.

Which work is in the batch: every job (PodGroup) in phase Inqueue, Running or Unknown — the phases
Volcano's allocate action places, and Pending unless ``plan_pending`` is off (enqueue admits a new
PodGroup and allocate places it within one session) — with pending tasks that
ask for GPUs. Each such task is one member; members are grouped into roles by Volcano task role
(``volcano.sh/task-spec``), by sub-group (``subGroupPolicy``) and by shape, and numbered by pod name.

Gang minimums (what must be placed for the job to count as placed) are what Volcano's gang plugin
asks for, less what already runs: per role ``minTaskMember`` minus that role's running tasks, then
raised role by role until the job's ``minMember`` minus its running tasks and its pending non-GPU
tasks (Volcano places those itself) is met. Members beyond the minimums are elastic; a role whose
minimum is 0 cannot be a solver role (minimum ≥ 1), so its members become one-member jobs of their
own, ``<job>#<pod>``, placed if room is left.

Network topology: the PodGroup's ``networkTopology`` (or the ``volcano.sh/network-topology-*``
annotations) → the job's locality: ``hard`` is REQUIRED and ``soft`` PREFERRED at
``highestTierAllowed`` (or the tier named by ``highestTierName``); a hard rule with no tier is
tier 1, the CRD's former default. A sub-group's ``networkTopology`` → its role's locality.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.volcano import kube
from adapters.volcano.eligibility import Eligibility
from adapters.volcano.hypernodes import HyperNodeTree
from adapters.volcano.wire import Job, NetworkTopology, NodeInfo, Snapshot, SubGroupPolicy, Task
from solver.domain.model import (
    AntiAffinity,
    Inventory,
    Locality,
    Node,
    ObjectiveTier,
    Policy,
    Requirement,
    Role,
    SolveRequest,
)
from solver.domain.model import Job as SolverJob

PLANNED_PHASES = frozenset({"Inqueue", "Running", "Unknown"})
MAX_PRIORITY = 1_000_000
TOPOLOGY_MODE = "volcano.sh/network-topology-mode"
TOPOLOGY_TIER = "volcano.sh/network-topology-highest-tier"


@dataclass(frozen=True)
class MemberRef:
    job: str  # solver job id
    role: str
    index: int


@dataclass
class JobEntry:
    """A Volcano job as the batch sees it."""

    uid: str
    namespace: str
    name: str
    solver_jobs: list[str] = field(default_factory=list)  # the gang first, then elastic one-member jobs
    minimum: int = 0  # GPU members the gang needs this session
    rule: str = ""  # the locality rule in Volcano's words, for predicate reasons
    notes: list[str] = field(default_factory=list)


@dataclass
class Batch:
    request: SolveRequest
    members: dict[str, MemberRef] = field(default_factory=dict)  # task uid → member
    tasks: dict[str, Task] = field(default_factory=dict)  # task uid → task (planned ones)
    task_job: dict[str, str] = field(default_factory=dict)  # task uid → Volcano job uid
    jobs: dict[str, JobEntry] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # task uid → why its annotations are refused
    left_to_volcano: dict[str, str] = field(default_factory=dict)  # task uid → why not modelled
    nodes: dict[str, Node] = field(default_factory=dict)
    node_notes: dict[str, dict[str, str]] = field(default_factory=dict)  # node → its annotations
    eligibility: Eligibility = field(default_factory=lambda: Eligibility(()))  # taints, node affinity
    warnings: list[str] = field(default_factory=list)

    @property
    def has_work(self) -> bool:
        return bool(self.request.jobs)


class NodeCache:
    """The inventory nodes of the last session, by what they were made from (``NodeInfo.version``
    and the node's leaf), so that a session converts only the nodes that changed since the last
    one, and hands back the *same* ``Node`` object for the others — which the core's per-node
    memos (``solver.domain.nodefold``) and the solver process's node table key on."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str], tuple[Node, tuple[str, ...]]] = {}
        self._labelled: dict[tuple[int, str], tuple[Node, Node]] = {}  # (id, labels) → (node, copy)
        self._digests: dict[int, tuple[Node, str]] = {}
        self.converted = 0  # nodes converted by the last session (the others were reused)

    def nodes(self, infos: Sequence[NodeInfo], fabric: HyperNodeTree, warn: kube.NodeWarnings) -> list[Node]:
        kept: dict[tuple[str, str], tuple[Node, tuple[str, ...]]] = {}
        out = []
        converted = 0
        for info in infos:
            key = (info.version, fabric.leaf_of.get(info.name, ""))
            hit = self._nodes.get(key) if info.version else None
            if hit is None:
                mine = kube.NodeWarnings([])
                hit = (kube.inventory_node(info, key[1], mine), tuple(mine.items))
                converted += 1
            for message in hit[1]:  # a reused node's warnings still hold: said every session
                warn.add(message)
            if info.version:
                kept[key] = hit
            out.append(hit[0])
        self._nodes, self.converted = kept, converted  # only this session's nodes stay
        return out

    def labelled(self, nodes: Sequence[Node], extra: Mapping[str, Mapping[str, str]]) -> list[Node]:
        """``nodes`` with the eligible-node labels ``extra`` added, the same copy as last session
        for a node and labels unchanged."""
        kept: dict[tuple[int, str], tuple[Node, Node]] = {}
        out = []
        for node in nodes:
            if node.name not in extra:
                out.append(node)
                continue
            key = (id(node), json.dumps(extra[node.name], sort_keys=True))
            hit = self._labelled.get(key)
            if hit is None or hit[0] is not node:  # an id is only unique among live objects
                hit = (node, node.model_copy(update={"labels": {**node.labels, **extra[node.name]}}))
            kept[key] = hit
            out.append(hit[1])
        self._labelled = kept
        return out

    def digest(self, nodes: Sequence[Node]) -> list[str]:
        """A digest of each node's content, computed once per node object (for the fingerprint
        that tells whether a session's batch is the one last solved)."""
        kept: dict[int, tuple[Node, str]] = {}
        out = []
        for node in nodes:
            hit = self._digests.get(id(node))
            if hit is None or hit[0] is not node:
                text = node.model_dump_json().encode()
                hit = (node, hashlib.blake2b(text, digest_size=16).hexdigest())
            kept[id(node)] = hit
            out.append(hit[1])
        self._digests = kept
        return out


def build(
    snapshot: Snapshot,
    fabric: HyperNodeTree,
    policy: Policy,
    *,
    plan_pending: bool = True,
    cache: NodeCache | None = None,
    avoid: Mapping[str, frozenset[str]] | None = None,
) -> Batch:
    """The batch for ``snapshot``: inventory from its nodes, jobs from its pending GPU work.
    ``cache``: the last session's nodes, reused where unchanged (a fresh one converts all).
    ``avoid``: Volcano job → nodes its tasks are not planned on (Volcano's predicates refused them)."""
    warn = kube.NodeWarnings(list(fabric.warnings))
    cache = cache if cache is not None else NodeCache()
    nodes = cache.nodes(snapshot.nodes, fabric, warn)
    switches = fabric.switches if any(n.leaf for n in nodes) else ()
    models = {g.model for n in nodes for g in n.gpus if g.model}
    batch = Batch(request=SolveRequest(inventory=Inventory(nodes=tuple(nodes), switches=switches)))
    batch.nodes = {n.name: n for n in nodes}
    batch.eligibility = Eligibility(snapshot.nodes)
    batch.node_notes = {info.name: info.annotations for info in snapshot.nodes}  # which device plugin
    phases = PLANNED_PHASES | ({"Pending", ""} if plan_pending else set())
    jobs: list[SolverJob] = []
    for job in snapshot.jobs:
        if job.podgroup is not None and job.podgroup.phase not in phases:
            continue
        jobs += job_entries(
            job,
            batch,
            fabric if switches else HyperNodeTree(),
            models,
            (avoid or {}).get(job.uid, frozenset()),
        )
    if batch.eligibility.labels:  # the eligible-node labels of tasks that cannot use every node
        nodes = cache.labelled(nodes, batch.eligibility.labels)
        batch.nodes = {n.name: n for n in nodes}
        inventory = batch.request.inventory.model_copy(update={"nodes": tuple(nodes)})
        batch.request = batch.request.model_copy(update={"inventory": inventory})
    batch.warnings = warn.items
    batch.request = batch.request.model_copy(
        update={"jobs": tuple(jobs), "policy": preferring(policy, batch.eligibility.preference)}
    )
    return batch


def preferring(policy: Policy, weights: Mapping[str, int]) -> Policy:
    """``policy`` with the pods' preferred node affinity as the last objective tier: nodes by the
    summed weight of the preferred terms they match, most preferred first (the solver's node-order
    tier fills them in that order). The solver knows one node order per batch, not one per job, so
    this is a preference among placements otherwise equal (after placed work, topology, packing
    and fragmentation), summed over the session's pods — as Volcano's nodeorder plugin adds the
    node-affinity score to the others, not as a rule."""
    if not weights:
        return policy
    order = tuple(name for name, _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])))
    objective = tuple(t for t in policy.objective if t != ObjectiveTier.NODE_ORDER)
    return policy.model_copy(
        update={"node_order": order, "objective": (*objective, ObjectiveTier.NODE_ORDER)}
    )


# --------------------------------------------------------------------------- jobs


def job_entries(
    job: Job, batch: Batch, fabric: HyperNodeTree, models: set[str], avoid: frozenset[str] = frozenset()
) -> list[SolverJob]:
    """The solver jobs for one Volcano job (none if it has no pending GPU work), recorded in ``batch``;
    its tasks kept off ``avoid``."""
    pending_gpu: list[Task] = []
    pending_other = 0
    for task in job.tasks:
        if not task.pending:
            continue
        if not kube.is_gpu_task(task):
            pending_other += 1
            continue
        batch.task_job[task.uid] = job.uid
        pending_gpu.append(task)
    if not pending_gpu:
        return []
    entry = JobEntry(uid=job.uid, namespace=job.namespace, name=job.name or job.uid)
    batch.jobs[job.uid] = entry
    shapes: dict[str, object] = {}
    apart: dict[str, tuple[AntiAffinity, ...]] = {}
    for task in pending_gpu:
        try:
            shapes[task.uid] = kube.member_shape(task, models, batch.eligibility.selector(task, avoid))
            apart[task.uid] = kube.pod_anti_affinity(task)
            batch.eligibility.prefer(task)
        except kube.PodRefused as err:
            batch.refused[task.uid] = str(err)
        except kube.NotOurs as err:
            batch.left_to_volcano[task.uid] = str(err)
            del batch.task_job[task.uid]
            shapes.pop(task.uid, None)
    planned = [t for t in pending_gpu if t.uid in shapes]
    if not planned:
        return []
    groups = sub_groups(job, planned, fabric)
    roles = group_roles(planned, shapes, groups)
    minimums = gang_minimums(job, roles, pending_other)
    locality, entry.rule = job_locality(job, fabric, entry)
    gang_roles: list[Role] = []
    elastic: list[SolverJob] = []
    priority = max(0, min(job.priority, MAX_PRIORITY))
    for (name, tasks, shape, role_locality), minimum in zip(roles, minimums, strict=True):
        if minimum == 0:
            for task in tasks:
                jid = f"{job.uid}#{task.name}"
                elastic.append(
                    SolverJob(
                        id=jid,
                        priority=priority,
                        labels=task.labels,
                        anti_affinity=apart[task.uid],
                        roles=(Role(name=name, replicas=1, member=shape, locality=role_locality),),
                    )
                )
                batch.members[task.uid] = MemberRef(jid, name, 0)
                batch.tasks[task.uid] = task
            continue
        gang_roles.append(
            Role(name=name, replicas=len(tasks), min_replicas=minimum, member=shape, locality=role_locality)
        )
        for i, task in enumerate(tasks):
            batch.members[task.uid] = MemberRef(job.uid, name, i)
            batch.tasks[task.uid] = task
    entry.minimum = sum(minimums)
    members = [t for (_, tasks, _, _), minimum in zip(roles, minimums, strict=True) if minimum for t in tasks]
    rules = {r.model_dump_json(): r for t in members for r in apart[t.uid]}
    gang = (
        [
            SolverJob(
                id=job.uid,
                priority=priority,
                roles=tuple(gang_roles),
                locality=locality,
                # The labels every member carries, and every member's anti-affinity terms.
                labels=dict(set.intersection(*(set(t.labels.items()) for t in members))),
                anti_affinity=tuple(rules.values()),
            )
        ]
        if gang_roles
        else []
    )
    entry.solver_jobs = [j.id for j in gang + elastic]
    return gang + elastic


RoleSpec = tuple[str, list[Task], object, Locality]


def group_roles(
    tasks: list[Task], shapes: Mapping[str, object], groups: Mapping[str, tuple[str, Locality]]
) -> list[RoleSpec]:
    """Tasks of one Volcano role, one sub-group and one shape form a solver role, named
    ``<role>`` (``default`` when the pod names none), ``@<sub-group>`` and ``#<n>`` added as needed."""
    keyed: dict[tuple[str, str, str], list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: t.name):
        group = groups.get(task.uid, ("", Locality()))[0]
        keyed[(task.role or "default", group, shapes[task.uid].model_dump_json())].append(task)  # type: ignore[attr-defined]
    specs: list[RoleSpec] = []
    seen: Counter[str] = Counter()
    for (role, group, _), members in keyed.items():
        base = role + (f"@{group}" if group else "")
        seen[base] += 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        locality = groups.get(members[0].uid, ("", Locality()))[1]
        specs.append((name, members, shapes[members[0].uid], locality))
    return specs


def gang_minimums(job: Job, roles: list[RoleSpec], pending_other: int) -> list[int]:
    """Each solver role's minimum this session (see the module docstring)."""
    running = Counter(t.role for t in job.tasks if t.holding)
    task_min = job.task_min_available or (job.podgroup.min_task_member if job.podgroup else {})
    left_per_role = {r: max(0, m - running[r]) for r, m in task_min.items()}
    minimums = []
    for _, tasks, _, _ in roles:
        role = tasks[0].role
        take = min(len(tasks), left_per_role.get(role, 0))
        left_per_role[role] = left_per_role.get(role, 0) - take
        minimums.append(take)
    min_member = job.min_available or (job.podgroup.min_member if job.podgroup else 0)
    needed = max(0, min_member - sum(running.values()) - pending_other)
    for i, (_, tasks, _, _) in enumerate(roles):
        extra = min(len(tasks) - minimums[i], max(0, needed - sum(minimums)))
        minimums[i] += extra
    return minimums


def sub_groups(job: Job, tasks: Iterable[Task], fabric: HyperNodeTree) -> dict[str, tuple[str, Locality]]:
    """task uid → (sub-group key, its locality) for tasks a ``subGroupPolicy`` selects."""
    policies = job.podgroup.sub_groups if job.podgroup else ()
    found: dict[str, tuple[str, Locality]] = {}
    for task in tasks:
        labels = task.labels
        for policy in policies:
            if not all(labels.get(k) == v for k, v in policy.match_labels.items()):
                continue
            values = "/".join(labels.get(k, "") for k in policy.match_label_keys)
            key = policy.name + (f"={values}" if values else "")
            found[task.uid] = (key, _group_locality(policy, fabric))
            break
    return found


def _group_locality(policy: SubGroupPolicy, fabric: HyperNodeTree) -> Locality:
    rule = _mode_and_tier(policy.topology, fabric) if policy.topology is not None else None
    return Locality() if rule is None else Locality(mode=rule[0], highest_tier=rule[1])


def job_locality(job: Job, fabric: HyperNodeTree, entry: JobEntry) -> tuple[Locality, str]:
    """The job's locality and the rule in Volcano's words (e.g. ``networkTopology hard,
    highestTierAllowed 1``); no rule when the cluster has no HyperNodes (noted)."""
    topology = job.podgroup.topology if job.podgroup else None
    notes = job.podgroup.annotations if job.podgroup else {}
    if topology is None and TOPOLOGY_MODE in notes:
        tier = notes.get(TOPOLOGY_TIER, "")
        topology = NetworkTopology(
            mode=notes[TOPOLOGY_MODE],
            highest_tier=int(tier) if tier.isdigit() else None,
            highest_tier_name="",
        )
    if topology is None:
        return Locality(), ""
    if not fabric.switches:
        entry.notes.append("networkTopology ignored: no HyperNodes are known")
        return Locality(), ""
    rule = _mode_and_tier(topology, fabric)
    if rule is None:
        named = (
            f" (no HyperNode tier is named {topology.highest_tier_name!r})"
            if topology.highest_tier_name
            else ""
        )
        entry.notes.append(
            f"networkTopology hard without a highestTierAllowed{named}: no tier limit, as in Volcano"
        )
        return Locality(), ""
    mode, tier = rule
    shown = tier - fabric.tier_offset if tier else tier
    words = f"networkTopology {topology.mode}, highestTierAllowed {shown}"
    return Locality(mode=mode, highest_tier=tier), words


def _mode_and_tier(topology: NetworkTopology, fabric: HyperNodeTree) -> tuple[Requirement, int] | None:
    """(mode, the solver's highest tier), or None where Volcano applies no tier limit.

    As Volcano's scheduler reads a network topology: a ``highestTierName`` becomes the tier of the
    HyperNodes of that name; a hard rule left without a tier (none given, or a name no HyperNode
    has) is not hard at all (``JobInfo.IsHardTopologyMode`` needs ``HighestTierAllowed``); soft means
    as low as possible. Volcano tiers start at 0 where HyperNodes of tier 0 exist; the solver's
    start at 1, hence ``fabric.tier_offset``."""
    mode = Requirement.REQUIRED if topology.mode == "hard" else Requirement.PREFERRED
    tier = topology.highest_tier
    if tier is None and topology.highest_tier_name:
        tier = fabric.tier_names.get(topology.highest_tier_name)
    if tier is None:
        return None if mode == Requirement.REQUIRED else (mode, 0)
    return mode, tier + fabric.tier_offset
