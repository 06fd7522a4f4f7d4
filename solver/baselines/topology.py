"""Shared machinery of the whole-GPU, topology-aware greedy baselines (``volcano``, ``bestfit``).

Both place one job at a time, jobs by priority then request order, members one at a time, a gang kept
only if every role reaches its minimum. What differs is injected: how a node's devices are picked for a
member (first free GPUs and NICs, or first *aligned* GPUs), how candidate nodes are ranked, and how
candidate switch domains are ranked for a job with network locality.

Everything here is computed from the domain objects directly, without the solver's normalise/compile
code, and hard rules the greedy policies do not reason about (REQUIRED alignment, NUMA, NVLink) are
checked on the devices picked: a node whose pick breaks one is skipped, as a node-level admission check
would reject the pod. PREFERRED alignment is reported truthfully in ``aligned``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from solver.baselines.support import answered, topology_unsupported, unsupported_result
from solver.domain import cancel as cancellation
from solver.domain.model import (
    Distance,
    FabricSwitch,
    Gpu,
    Inventory,
    Job,
    JobResult,
    MemberPlacement,
    MemberShape,
    Nic,
    NicMode,
    Node,
    Reason,
    ReasonCode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
    SwitchKind,
)


def _req(value: Requirement) -> Requirement:
    return Requirement.NONE if value == Requirement.UNSPECIFIED else value


# --------------------------------------------------------------------------- one node's free devices


@dataclass
class Free:
    """What is still free on one node during a ``place`` call."""

    node: Node
    gpus: list[Gpu]  # whole, healthy, unshared GPUs, in index order
    nics: list[Nic]  # healthy RDMA NICs, in listed order
    cpu: int | None  # None: the node does not track it
    memory: int | None
    parent: dict[str, str] = field(default_factory=dict)
    kind: dict[str, SwitchKind] = field(default_factory=dict)
    # What is derived from the node's fixed hardware, computed when first asked and shared by the
    # node's copies: whether a pick is aligned, by (GPUs, NICs, distance limit, NIC mode) —
    # matching GPUs to NICs was a third of the greedy's time at 1,024 nodes x 200 jobs — and the
    # NVLinked GPU pairs, which took 0.1 ms a node to build whether any member asked or not.
    memo: dict[object, object] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Node) -> Free:
        held = {g for a in node.allocations for g in (*a.gpus, *(s.gpu for s in a.gpu_shares))}
        nics_held = {n for a in node.allocations for n in a.nics}
        allocs = node.allocations
        return cls(
            node=node,
            gpus=[g for g in sorted(node.gpus, key=lambda g: g.index) if g.healthy and g.id not in held],
            nics=[n for n in node.nics if n.healthy and n.rdma and n.name not in nics_held],
            cpu=node.cpu_milli - sum(a.cpu_milli for a in allocs) if node.cpu_milli else None,
            memory=node.memory_mib - sum(a.memory_mib for a in allocs) if node.memory_mib else None,
            parent={s.id: s.parent for s in node.pcie_switches},
            kind={s.id: s.kind for s in node.pcie_switches},
        )

    @property
    def links(self) -> set[tuple[str, str]]:
        """The GPU pairs an NVLink joins, both ways round."""
        links = self.memo.get("links")
        if links is None:
            nvlinks = self.node.nvlinks
            links = self.memo["links"] = {
                p for link in nvlinks for p in ((link.gpu_a, link.gpu_b), (link.gpu_b, link.gpu_a))
            }
        return links  # type: ignore[return-value]

    def copy(self) -> Free:
        return Free(
            self.node,
            list(self.gpus),
            list(self.nics),
            self.cpu,
            self.memory,
            self.parent,
            self.kind,
            self.memo,
        )

    def _chain(self, switch: str) -> list[str]:
        chain: list[str] = []
        while switch in self.kind and switch not in chain:
            chain.append(switch)
            switch = self.parent[switch]
        return chain

    def distance(self, gpu: Gpu, nic: Nic) -> Distance:
        """nvidia-smi's class: same switch PIX, common PCIe switch PXB, common host bridge PHB, same NUMA
        node NODE, else SYS."""
        if gpu.pcie_switch and gpu.pcie_switch == nic.pcie_switch:
            return Distance.PIX
        shared = set(self._chain(gpu.pcie_switch)) & set(self._chain(nic.pcie_switch))
        if any(self.kind[s] != SwitchKind.HOST_BRIDGE for s in shared):
            return Distance.PXB
        if shared:
            return Distance.PHB
        if gpu.numa is not None and gpu.numa == nic.numa:
            return Distance.NODE
        return Distance.SYS


@dataclass(frozen=True)
class Pick:
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]
    aligned: bool


def nic_count(shape: MemberShape) -> int:
    if shape.nics.mode == NicMode.PER_GPU:
        return shape.gpus
    if shape.nics.mode == NicMode.PER_MEMBER:
        return shape.nics.count
    return 0


def limit_of(shape: MemberShape) -> Distance:
    return shape.alignment.distance if shape.alignment.distance != Distance.UNSPECIFIED else Distance.PIX


def aligned(free: Free, shape: MemberShape, gpus: Sequence[Gpu], nics: Sequence[Nic]) -> bool:
    """Each NIC near a GPU (PER_MEMBER) or each GPU with its own near NIC (PER_GPU, by matching)."""
    if not nics or not gpus:
        return True
    limit = limit_of(shape)
    key = (tuple(g.id for g in gpus), tuple(n.name for n in nics), limit, shape.nics.mode)
    known = free.memo.get(key)
    if known is None:
        known = free.memo[key] = _aligned(free, shape, gpus, nics, limit)
    return bool(known)


def _aligned(
    free: Free, shape: MemberShape, gpus: Sequence[Gpu], nics: Sequence[Nic], limit: Distance
) -> bool:
    near = {
        (g, n) for g, gpu in enumerate(gpus) for n, nic in enumerate(nics) if free.distance(gpu, nic) <= limit
    }
    if shape.nics.mode != NicMode.PER_GPU:
        return all(any((g, n) in near for g in range(len(gpus))) for n in range(len(nics)))
    owner: dict[int, int] = {}

    def claim(g: int, seen: set[int]) -> bool:
        for n in range(len(nics)):
            if (g, n) in near and n not in seen:
                seen.add(n)
                if n not in owner or claim(owner[n], seen):
                    owner[n] = g
                    return True
        return False

    return len(gpus) == len(nics) and all(claim(g, set()) for g in range(len(gpus)))


def admissible(free: Free, shape: MemberShape, pick: Pick) -> bool:
    """The hard rules the greedy pick may break: REQUIRED alignment, NUMA, NVLink."""
    if _req(shape.alignment.mode) == Requirement.REQUIRED and nic_count(shape) and not pick.aligned:
        return False
    if _req(shape.numa) == Requirement.REQUIRED:
        numas = {d.numa for d in (*pick.gpus, *pick.nics)}
        if len(numas) > 1 or None in numas:
            return False
    if _req(shape.nvlink) == Requirement.REQUIRED:
        return all((a.id, b.id) in free.links for a, b in combinations(pick.gpus, 2))
    return True


def usable_gpus(free: Free, shape: MemberShape) -> list[Gpu]:
    return [
        g
        for g in free.gpus
        if (not shape.gpu_models or g.model in shape.gpu_models) and g.model not in shape.avoid_gpu_models
    ]


def node_fits(free: Free, shape: MemberShape) -> bool:
    """CPU, memory, labels and device counts, before any device is picked."""
    if any(free.node.labels.get(k) != v for k, v in shape.node_selector.items()):
        return False
    if free.cpu is not None and free.cpu < shape.cpu_milli:
        return False
    if free.memory is not None and free.memory < shape.memory_mib:
        return False
    return len(usable_gpus(free, shape)) >= shape.gpus and len(free.nics) >= nic_count(shape)


def take(free: Free, shape: MemberShape, pick: Pick) -> None:
    chosen_gpus = {g.id for g in pick.gpus}
    chosen_nics = {n.name for n in pick.nics}
    free.gpus = [g for g in free.gpus if g.id not in chosen_gpus]
    free.nics = [n for n in free.nics if n.name not in chosen_nics]
    if free.cpu is not None:
        free.cpu -= shape.cpu_milli
    if free.memory is not None:
        free.memory -= shape.memory_mib


# --------------------------------------------------------------------------- the fabric


class LocalityIndex:
    """Switch tiers above the nodes: which nodes sit under which switch, and locality of a node set."""

    def __init__(self, inventory: Inventory) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in inventory.nodes}
        self.switches: dict[str, FabricSwitch] = {s.id: s for s in inventory.switches}
        self.above: dict[str, list[str]] = {}  # node -> switches from its leaf up
        self.under: dict[str, list[str]] = {}  # switch -> node names
        for node in inventory.nodes:
            chain, current = [], node.leaf
            while current in self.switches and current not in chain:
                chain.append(current)
                current = self.switches[current].parent
            self.above[node.name] = chain
            for s in chain:
                self.under.setdefault(s, []).append(node.name)
        for names in self.under.values():
            names.sort()  # name order: the greedy's ties go to the smaller name (Greedy._try)

    def domains(self, highest_tier: int) -> list[tuple[int, str]]:
        """(tier, switch) at or below ``highest_tier`` (0 = any), lowest tier first."""
        return sorted(
            (s.tier, s.id)
            for s in self.switches.values()
            if s.id in self.under and (not highest_tier or s.tier <= highest_tier)
        )

    def common_tier(self, nodes: Sequence[str]) -> int | None:
        """0 for one node; the tier of the lowest switch above all ``nodes``; None if there is none."""
        distinct = list(dict.fromkeys(nodes))
        if len(distinct) <= 1:
            return 0
        chains = [self.above.get(n, []) for n in distinct]
        if any(not c for c in chains):
            return None
        common = set(chains[0]).intersection(*(set(c) for c in chains[1:]))
        return min((self.switches[s].tier for s in common), default=None)

    def report(self, job: Job, members: Sequence[MemberPlacement]) -> dict:
        """The per-job fields of a ``JobResult``: locality tier reached, leaves, NVLink domains, rails."""
        on = [self.nodes[m.node] for m in members]
        rails = {
            nic.rail
            for m in members
            for nic in self.nodes[m.node].nics
            if nic.name in m.nics and nic.rail is not None
        }
        return {
            "locality_tier": self.common_tier([m.node for m in members]) or 0,
            "leaves_spanned": len({n.leaf for n in on if n.leaf}),
            "nvlink_domains_spanned": len({n.nvlink_domain for n in on} - {""}),
            "rails": tuple(sorted(rails)),
        }

    def broken_rule(self, job: Job, members: Sequence[MemberPlacement]) -> str:
        """The first REQUIRED job-level rule the members break (locality, role affinity, NVLink
        domain, rails), or "" — greedy task-by-task placement can break them, so each is checked."""

        def within(names: Sequence[str], tier: int) -> bool:
            reached = self.common_tier(names)
            return reached is not None and reached <= tier

        names = [m.node for m in members]
        hard = _req(job.locality.mode) == Requirement.REQUIRED and job.locality.highest_tier
        if hard and not within(names, job.locality.highest_tier):
            return f"locality within tier {job.locality.highest_tier}"
        for role in job.roles:
            hard = _req(role.locality.mode) == Requirement.REQUIRED and role.locality.highest_tier
            group = [m.node for m in members if m.role == role.name]
            if hard and not within(group, role.locality.highest_tier):
                return f"role {role.name} locality within tier {role.locality.highest_tier}"
        for pair in job.role_affinity:
            if pair.mode in (Requirement.REQUIRED, Requirement.UNSPECIFIED):
                group = [m.node for m in members if m.role in (pair.role_a, pair.role_b)]
                tier = 1 if pair.highest_tier is None else pair.highest_tier
                if not within(group, tier):
                    return f"roles {pair.role_a} and {pair.role_b} within tier {tier}"
        domains = {self.nodes[n].nvlink_domain for n in names}
        if (
            job.nvlink_domain == Requirement.REQUIRED
            and len(set(names)) > 1
            and (len(domains) > 1 or "" in domains)
        ):
            return "one NVLink domain"
        if job.rail_aligned == Requirement.REQUIRED:
            per_node: dict[str, set[int | None]] = {}
            for m in members:
                nics = {n.name: n.rail for n in self.nodes[m.node].nics}
                per_node.setdefault(m.node, set()).update(nics[x] for x in m.nics)
            if len({frozenset(r) for r in per_node.values()}) > 1:
                return "the same rails on every node"
        return ""


def job_locality(job: Job) -> tuple[Requirement, int]:
    """The job's strictest locality rule over the job and its roles: (mode, highest tier; 0 = any)."""
    rules = [job.locality, *(r.locality for r in job.roles)]
    hard = [r.highest_tier for r in rules if _req(r.mode) == Requirement.REQUIRED]
    if hard:
        tiers = [t for t in hard if t]
        return Requirement.REQUIRED, min(tiers) if tiers else 0
    soft = [r.highest_tier for r in rules if _req(r.mode) == Requirement.PREFERRED]
    if soft:
        return Requirement.PREFERRED, 0
    return Requirement.NONE, 0


@dataclass(frozen=True)
class Start:
    """What :meth:`Greedy.place` builds before it places anything, for callers that place one
    request several times (the fallback's orders): the fabric's index and each schedulable node's
    free devices, in name order. Never changed: a call copies the nodes it places on. Building it
    was a quarter of a first-fit call at 16,384 nodes (0.37 of 1.4 s under a profiler)."""

    fabric: LocalityIndex
    free: dict[str, Free]

    @classmethod
    def of(cls, inventory: Inventory) -> Start:
        # In name order: a job without locality tries the whole cluster, which _try sorts by name;
        # sorting a sorted list is linear (16,384 nodes a job, sorted afresh, were measurable).
        nodes = sorted((n for n in inventory.nodes if n.schedulable), key=lambda n: n.name)
        return cls(fabric=LocalityIndex(inventory), free={n.name: Free.of(n) for n in nodes})


# --------------------------------------------------------------------------- the greedy loop

PickFn = Callable[[Free, MemberShape], Pick | None]
NodeScoreFn = Callable[[Free, MemberShape, Pick, Sequence[str], LocalityIndex], float]  # higher is better
DomainKeyFn = Callable[[Sequence[Free]], float]  # a domain's nodes -> key; lower is tried first


class OutOfTime(Exception):
    """The placer's deadline passed while it placed a job (that job's members are released)."""


@dataclass
class _Memo:
    """What one call of :meth:`Greedy.place` remembers between its jobs, so that a job costs work
    per domain it tries and per node it takes, not per node of the cluster (the fallback's greedy
    at 16,384 nodes x 500 jobs: ~35 ms a job, most of it re-deriving these for every job).

    - ``fitting``: the domains, tier by tier, whose free GPUs at the start hold a job's need (the
      start does not change within a call), by (highest tier, need);
    - ``keys``: each domain's ``domain_key``, dropped when a job lands on one of its nodes
      (``of_node``: the domains over each node), and ``rooms``: its free GPUs now, brought down
      when one does; a try undone leaves its nodes as they were. A domain with fewer free GPUs
      than the job's need is not tried: its try could only fail (at 4,096 nodes x 500 jobs,
      22 tries a job, most of them such);
    - ``cursors``: first fit only: per (pool, member shape), how far the pool is known not to admit
      that shape. Capacity only shrinks within a call outside the try in hand (a try undone restores
      what its own members took), so a node that refused a shape, and that the try in hand had not
      touched, refuses it for the rest of the call. Shapes are told apart by value (``shape_key``):
      every job brings its own equal shape objects, and a cursor per object walked the 11,000 busy
      nodes of a 16,384-node cluster afresh for every job (2 million node checks, 7 s a call);
    - ``free_gpus``: the free GPUs of the whole cluster now, kept as members land and tries are
      undone, for the reason of a job left unplaced (summed over the cluster per job before).
    """

    of_node: dict[str, list[str]]
    fitting: dict[tuple[int, int], list[list[str]]] = field(default_factory=dict)
    keys: dict[str, float] = field(default_factory=dict)
    rooms: dict[str, int] = field(default_factory=dict)  # free GPUs now, dropped with ``keys``
    start_rooms: dict[str, int] = field(default_factory=dict)  # free GPUs at the start
    # members of g GPUs each the domain's nodes could hold now, GPUs alone: {domain: {g: count}}
    slots: dict[str, dict[int, int]] = field(default_factory=dict)
    cursors: dict[tuple[int, str], int] = field(default_factory=dict)
    free_gpus: int = 0
    _shape_keys: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, fabric: LocalityIndex, free: dict[str, Free]) -> _Memo:
        # The fabric's own map, read only: inverting ``under`` afresh cost each call a walk of the
        # cluster (4 ms at 4,096 nodes), which the exchange's many small calls paid every time.
        return cls(of_node=fabric.above, free_gpus=sum(len(f.gpus) for f in free.values()))

    def shape_key(self, shape: MemberShape) -> str:
        """``shape`` by value (its fields as JSON), read once per shape object of the call."""
        key = self._shape_keys.get(id(shape))
        if key is None:
            key = self._shape_keys[id(shape)] = shape.model_dump_json()
        return key

    def room(self, domain: str, free: dict[str, Free], fabric: LocalityIndex) -> int:
        """The free GPUs under ``domain`` now."""
        if domain not in self.rooms:
            self.rooms[domain] = sum(len(free[n].gpus) for n in fabric.under[domain] if n in free)
        return self.rooms[domain]

    def taken(self, saved: dict[str, tuple[Free, Free]]) -> None:
        """A try kept: the nodes of ``saved`` (live, as before) took members. Rooms and slots of the
        domains above them are brought down by what each node lost, not summed afresh: the core's
        are the whole cluster's, 16,384 nodes walked again after every job placed."""
        for name, (live, before) in saved.items():
            now, was = len(live.gpus), len(before.gpus)
            for switch in self.of_node.get(name, ()):
                self.keys.pop(switch, None)
                if switch in self.rooms:
                    self.rooms[switch] -= was - now
                for g, count in self.slots.get(switch, {}).items():
                    self.slots[switch][g] = count - (was // g - now // g)

    def could_hold(self, domain: str, frees: Iterable[Free], job: Job) -> bool:
        """Whether the domain's free GPUs, node by node, could hold every role's minimum (the GPU
        count alone: a necessary condition, so a domain failing it is one no try could use)."""
        slots = self.slots.setdefault(domain, {})
        counts: list[int] | None = None
        for role in job.roles:
            g = role.member.gpus
            if not g or not role.minimum:
                continue
            if g not in slots:
                if counts is None:
                    counts = [len(f.gpus) for f in frees]
                slots[g] = sum(c // g for c in counts)
            if slots[g] < role.minimum:
                return False
        return True


@dataclass(frozen=True)
class Greedy:
    """A one-job-at-a-time placer; see the module docstring. Holds no state of its own between
    calls: one instance serves concurrent calls (the solver's fallback runs it in server threads)."""

    name: str
    pick: PickFn
    node_score: NodeScoreFn
    domain_key: DomainKeyFn
    domains_from_start: bool = False  # judge a domain's room from the free capacity at the start (Volcano)
    # Take the first node (in name order) that admits the member instead of scoring every node:
    # O(nodes) per member made the Volcano-like greedy 0.5 s a member at 16,384 nodes.
    first_fit: bool = False

    def place(
        self,
        request: SolveRequest,
        deadline: float | None = None,
        *,
        start: Start | None = None,
        order: Sequence[int] | None = None,
        behind: Callable[[Mapping[int, JobResult]], bool] | None = None,
    ) -> SolveResult:
        """:meth:`plan`'s jobs as an answer: timed and measured (``cluster_metrics``)."""
        started = time.perf_counter()
        return answered(
            request, self.plan(request, deadline, start=start, order=order, behind=behind), started
        )

    def plan(
        self,
        request: SolveRequest,
        deadline: float | None = None,
        *,
        start: Start | None = None,
        order: Sequence[int] | None = None,
        behind: Callable[[Mapping[int, JobResult]], bool] | None = None,
    ) -> tuple[JobResult, ...]:
        """Every job in ``order`` (indexes into ``request.jobs``; by default priority order, then
        request order), one result per job of ``request``, in its order. ``deadline``
        (``time.perf_counter()``): the job being placed when it passes is released, and it and
        every job after it is left unplaced, TIME_LIMIT; the plan so far stands (each gang in it
        whole). ``start``: the request's :class:`Start`, when the caller places it more than once.
        ``behind``: asked with the results so far each time the next job has another priority
        than the last; when it says the plan is behind, every job after is left unplaced (a caller
        comparing orders stops an order already beaten). Not measured: a caller comparing plans
        measures the one it answers with (measuring every plan of 11 orders and every exchange's
        try walked the cluster each time)."""
        if deadline is not None and time.perf_counter() >= deadline:  # not even time for the indexes
            return tuple(self._untried(job) for job in request.jobs)
        start = start or Start.of(request.inventory)
        fabric = start.fabric
        free = {name: f.copy() for name, f in start.free.items()}  # a call changes its copies in place
        start_free = {name: len(f.gpus) for name, f in free.items()}
        if order is None:
            order = sorted(range(len(request.jobs)), key=lambda j: (-request.jobs[j].priority, j))
        # Each domain's nodes as the Free objects a member is tried on, listed once for the call (a
        # member changes a Free in place): listing the whole cluster afresh for every job was a
        # tenth of the first-fit greedy's time at 16,384 nodes.
        pools: dict[str | None, list[Free]] = {None: list(free.values())}  # None: the whole cluster
        memo = _Memo.of(fabric, free)
        results: dict[int, JobResult] = {}
        stopped = False
        for j in order:
            cancellation.check()  # a caller gone stops the placer between jobs (solver.domain.cancel)
            job = request.jobs[j]
            if behind is not None and results and not stopped:
                last = request.jobs[next(reversed(results))]
                stopped = last.priority != job.priority and behind(results)
            if stopped:
                results[j] = self._untried(job, "stopped this order of the jobs: it was behind another")
                continue
            try:
                if deadline is not None and time.perf_counter() >= deadline:
                    raise OutOfTime
                results[j] = self._job(job, free, fabric, start_free, pools, memo, deadline)
            except OutOfTime:
                results[j] = self._untried(job)
        return tuple(results[j] for j in range(len(request.jobs)))

    def _untried(self, job: Job, why: str = "ran out of time before it had placed this job") -> JobResult:
        """``job`` left unplaced without a try: out of time, or (``why``) the order was stopped."""
        return JobResult(
            job_id=job.id,
            placed=False,
            reason=Reason(code=ReasonCode.TIME_LIMIT, message=f"the {self.name} baseline {why}"),
        )

    def _job(
        self,
        job: Job,
        free: dict[str, Free],
        fabric: LocalityIndex,
        start_free: dict[str, int],
        pools: dict[str | None, list[Free]],
        memo: _Memo,
        deadline: float | None = None,
    ) -> JobResult:
        why = topology_unsupported(job)
        if why:
            return unsupported_result(job, self.name, "whole GPUs and NICs only", why)
        mode, highest = job_locality(job)
        need = sum(r.minimum * r.member.gpus for r in job.roles)
        candidates: list[tuple[str | None, list[str]]] = []  # (domain, its nodes); None: anywhere
        if mode != Requirement.NONE:

            def key(s: str) -> float:
                if s not in memo.keys:
                    memo.keys[s] = self.domain_key([free[n] for n in fabric.under[s] if n in free])
                return memo.keys[s]

            for fitting in self._fitting(highest, need, free, fabric, start_free, memo):
                # One domain needs no key: a key walks the domain's nodes (the core's are all).
                ranked = fitting if len(fitting) < 2 else sorted(fitting, key=lambda s: (key(s), s))
                candidates += [(s, fabric.under[s]) for s in ranked]
        if mode != Requirement.REQUIRED or not highest:
            candidates.append((None, list(free)))
        broken = ""
        for domain, names in candidates:
            if deadline is not None and time.perf_counter() >= deadline:
                raise OutOfTime
            if domain is not None and memo.room(domain, free, fabric) < need:
                continue  # no try could place the job here now (_Memo)
            if domain not in pools:
                pools[domain] = [free[n] for n in names if n in free]
            if domain is not None and not memo.could_hold(domain, pools[domain], job):
                continue
            members, saved = self._try(job, pools[domain], fabric, memo, deadline)
            if members is None:
                continue
            broken = fabric.broken_rule(job, members)
            if broken:
                self._restore(saved, memo)
                continue
            memo.taken(saved)
            return JobResult(
                job_id=job.id, placed=True, members=tuple(members), **fabric.report(job, members)
            )
        reason = self._reason(job, mode, highest, need, free, fabric, memo)
        if broken:
            reason = Reason(
                code=ReasonCode.LOCALITY,
                message=f"the {self.name} baseline placed the gang task by task and broke its rule: {broken}",
            )
        return JobResult(job_id=job.id, placed=False, reason=reason)

    def _fitting(
        self,
        highest: int,
        need: int,
        free: dict[str, Free],
        fabric: LocalityIndex,
        start_free: dict[str, int],
        memo: _Memo,
    ) -> list[list[str]]:
        """The domains up to tier ``highest`` with room for ``need`` GPUs, lowest tier first; judged
        from the start (remembered for the call) or from now (Volcano's own rule, when not)."""
        if self.domains_from_start and (highest, need) in memo.fitting:
            return memo.fitting[(highest, need)]
        room = start_free if self.domains_from_start else {n: len(f.gpus) for n, f in free.items()}
        rooms = memo.start_rooms if self.domains_from_start else {}
        out = []
        for tier in sorted({t for t, _ in fabric.domains(highest)}):
            at_tier = [s for t, s in fabric.domains(highest) if t == tier]
            for s in at_tier:
                if s not in rooms:
                    rooms[s] = sum(room.get(n, 0) for n in fabric.under[s])
            out.append([s for s in at_tier if rooms[s] >= need])
        if self.domains_from_start:
            memo.fitting[(highest, need)] = out
        return out

    def _try(
        self, job: Job, pool: list[Free], fabric: LocalityIndex, memo: _Memo, deadline: float | None
    ) -> tuple[list[MemberPlacement] | None, dict[str, tuple[Free, Free]]]:
        """Place the job's members within ``pool``: the members (or None, with ``pool`` as it was) and
        copies of the nodes they took, as they were before, for a later rollback. A node is copied
        when a member first lands on it: copying the whole pool up front was a sixth of the
        greedy's time at 1,024 nodes, and grows with the cluster, not with the job."""
        # ``pool`` comes in name order (place() and LocalityIndex keep their node lists so): sorting
        # 16,384 nodes afresh for every job without locality was a tenth of the greedy's time.
        saved: dict[str, tuple[Free, Free]] = {}  # node -> (the live node, a copy from before)
        members: list[MemberPlacement] = []
        try:
            for role in job.roles:
                if self._role(role, pool, members, fabric, saved, memo, deadline) < role.minimum:
                    self._restore(saved, memo)
                    return None, saved
        except OutOfTime:
            self._restore(saved, memo)
            raise
        return members, saved

    @staticmethod
    def _restore(saved: dict[str, tuple[Free, Free]], memo: _Memo) -> None:
        for live, copy in saved.values():
            memo.free_gpus += len(copy.gpus) - len(live.gpus)
            live.gpus, live.nics = copy.gpus, copy.nics
            live.cpu, live.memory = copy.cpu, copy.memory

    def _role(
        self,
        role: Role,
        pool: list[Free],
        members: list[MemberPlacement],
        fabric: LocalityIndex,
        saved: dict[str, tuple[Free, Free]],
        memo: _Memo,
        deadline: float | None,
    ) -> int:
        shape = role.member
        cursor = (id(pool), memo.shape_key(shape))  # the pool lives as long as the call (_Memo.cursors)
        for index in range(role.replicas):
            if deadline is not None and time.perf_counter() >= deadline:
                raise OutOfTime
            used = [m.node for m in members]
            best: tuple[float, str, Free, Pick] | None = None
            start = memo.cursors.get(cursor, 0) if self.first_fit else 0
            refused_before = True  # every node so far refused the shape untouched by this try
            for i in range(start, len(pool)):
                f = pool[i]
                pick = self.pick(f, shape) if node_fits(f, shape) else None
                if pick is None or not admissible(f, shape, pick):
                    if refused_before and f.node.name in saved:
                        refused_before = False
                    if self.first_fit and refused_before:
                        memo.cursors[cursor] = i + 1
                    continue
                if self.first_fit:
                    best = (0.0, f.node.name, f, pick)
                    break
                score = self.node_score(f, shape, pick, used, fabric)
                if best is None or score > best[0]:  # pool is in name order: ties keep the smaller name
                    best = (score, f.node.name, f, pick)
            if best is None:
                return index
            _, name, f, pick = best
            if name not in saved:
                saved[name] = (f, f.copy())
            take(f, shape, pick)
            memo.free_gpus -= len(pick.gpus)
            numas = {d.numa for d in (*pick.gpus, *pick.nics)}
            members.append(
                MemberPlacement(
                    role=role.name,
                    index=index,
                    node=name,
                    gpus=tuple(g.id for g in pick.gpus),
                    nics=tuple(n.name for n in pick.nics),
                    numa=next(iter(numas)) if len(numas) == 1 and None not in numas else None,
                    aligned=pick.aligned,
                )
            )
        return role.replicas

    def _reason(
        self,
        job: Job,
        mode: Requirement,
        highest: int,
        need: int,
        free: dict[str, Free],
        fabric: LocalityIndex,
        memo: _Memo,
    ) -> Reason:
        total = memo.free_gpus
        if mode == Requirement.REQUIRED and highest and total >= need:
            best = max((memo.room(s, free, fabric) for _, s in fabric.domains(highest)), default=0)
            return Reason(
                code=ReasonCode.LOCALITY,
                message=f"the {self.name} baseline needs {need} free GPUs under one tier-{highest} switch "
                f"(or lower) for the gang; the best such switch has {best}",
            )
        return Reason(
            code=ReasonCode.INSUFFICIENT_CAPACITY,
            message=f"the {self.name} baseline found no room for the gang's minimum ({need} GPUs; "
            f"{total} GPUs free in the cluster, possibly on the wrong nodes or without NICs)",
        )


def first_free_pick(free: Free, shape: MemberShape) -> Pick | None:
    """Volcano/device-plugin behaviour: the first free GPUs, the first free NICs, no pairing."""
    gpus = tuple(usable_gpus(free, shape)[: shape.gpus])
    nics = tuple(free.nics[: nic_count(shape)])
    if len(gpus) < shape.gpus or len(nics) < nic_count(shape):
        return None
    return Pick(gpus, nics, aligned(free, shape, gpus, nics))


def first_aligned_pick(free: Free, shape: MemberShape) -> Pick | None:
    """Slurm-like gres binding: GPUs in index order that have a free NIC within the asked distance, each
    with its own such NIC; if too few, REQUIRED gives up, PREFERRED tops up with the first free ones."""
    wanted_nics = nic_count(shape)
    if not wanted_nics or _req(shape.alignment.mode) == Requirement.NONE:
        return first_free_pick(free, shape)
    # Devices are told apart by id and name (unique on a node: validate.unique_ids), not by model
    # equality: comparing pydantic models was an eighth of the greedy's time at 16,384 nodes.
    limit, gpus, nics = limit_of(shape), [], []
    taken: set[str] = set()
    for gpu in usable_gpus(free, shape):
        if len(gpus) == shape.gpus:
            break
        nic = next((n for n in free.nics if n.name not in taken and free.distance(gpu, n) <= limit), None)
        if nic is not None:
            gpus.append(gpu)
            nics.append(nic)
            taken.add(nic.name)
    if shape.nics.mode == NicMode.PER_MEMBER:
        nics = nics[:wanted_nics]
    if len(gpus) < shape.gpus or len(nics) < wanted_nics:
        if _req(shape.alignment.mode) == Requirement.REQUIRED:
            return None
        chosen, named = {g.id for g in gpus}, {n.name for n in nics}
        gpus += [g for g in usable_gpus(free, shape) if g.id not in chosen][: shape.gpus - len(gpus)]
        nics += [n for n in free.nics if n.name not in named][: wanted_nics - len(nics)]
    if len(gpus) < shape.gpus or len(nics) < wanted_nics:
        return None
    return Pick(tuple(gpus), tuple(nics), aligned(free, shape, gpus, nics))
