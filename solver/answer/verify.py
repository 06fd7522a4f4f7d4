"""Independent checker of a placement: does ``result`` obey every hard rule of ``request``?

The solver's answer is never handed out unchecked, so this module is the last line of defence
against a bug in normalise/compile/decode. To be worth anything it must not share their mistakes:
it imports nothing from the pipeline or ``solver.domain.topology`` (only the domain types), computes PCIe
distances, matchings and capacities itself, in the plainest way that is still linear-ish, and is
short enough to audit in one sitting.

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from itertools import combinations

from solver.domain.fragmentation import FreeCapacity, Profile, profile
from solver.domain.model import (
    Distance,
    FabricSwitch,
    Gpu,
    Job,
    JobResult,
    MemberPlacement,
    Nic,
    NicMode,
    Node,
    Requirement,
    Role,
    Scope,
    SolveRequest,
    SolveResult,
    SwitchKind,
)


def verify(request: SolveRequest, result: SolveResult) -> tuple[str, ...]:
    """Every way ``result`` breaks the rules of ``request``, one sentence each; empty when valid."""
    jobs = {job.id: job for job in reversed(request.jobs)}  # reversed: the first of a repeated id wins
    placed = [
        _Placed(job, member)
        for jr in result.jobs
        if jr.placed and (job := jobs.get(jr.job_id)) is not None
        for member in jr.members
    ]
    by_name = {node.name: node for node in reversed(request.inventory.nodes)}
    used = {p.member.node for p in placed}
    nodes = {name: _NodeView.of(node) for name, node in by_name.items() if name in used}  # only what is used
    violations = [
        *_job_set(request, result),
        *(v for jr in result.jobs if jr.job_id in jobs for v in _gang(jobs[jr.job_id], jr)),
        *(v for p in placed for v in _member(nodes, p)),
        *_shared_devices(placed),
        *_gpu_shares(nodes, placed),
        *_separation(by_name, placed),
        *_node_capacity(nodes, placed),
        *_metrics(request, result, placed),
        *_all_locality(request, by_name, result, jobs),
    ]
    return tuple(violations)


# --------------------------------------------------------------------------- the inventory, indexed


@dataclass(frozen=True)
class _Device:
    """What distance needs of a GPU or NIC: where it hangs in the PCIe tree and its NUMA node."""

    name: str
    switch: str
    numa: int | None


@dataclass
class _NodeView:
    """One node, indexed for lookups; ``None`` CPU/memory free = the node does not track it."""

    node: Node
    gpus: dict[str, Gpu]
    nics: dict[str, Nic]
    parent: dict[str, str]
    kind: dict[str, SwitchKind]
    switch_numa: dict[str, int | None]
    nvlinks: set[tuple[str, str]]  # both orders of every linked pair
    held_by: dict[tuple[str, str], str]  # ("GPU"|"NIC", id) -> owner of the allocation holding it
    cpu_free: int | None
    memory_free: int | None
    shares: dict[str, tuple[int, int]]  # GPU → (milli, MiB) of shares already running on it
    _ancestors: dict[str, frozenset[str]] = field(default_factory=dict)
    _distances: dict[tuple[str, int | None, str, int | None], Distance] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Node) -> _NodeView:
        allocs = node.allocations
        held_by: dict[tuple[str, str], str] = {}
        for a, alloc in enumerate(allocs):
            owner = alloc.owner or f"allocation {a}"
            held_by.update({("GPU", g): owner for g in alloc.gpus if ("GPU", g) not in held_by})
            held_by.update({("NIC", n): owner for n in alloc.nics if ("NIC", n) not in held_by})
            if alloc.mutex:  # a mutex share holds its GPU against everyone else
                held_by.update(
                    {("GPU", sh.gpu): owner for sh in alloc.gpu_shares if ("GPU", sh.gpu) not in held_by}
                )
        return cls(
            node=node,
            gpus={g.id: g for g in reversed(node.gpus)},
            nics={n.name: n for n in reversed(node.nics)},
            parent={s.id: s.parent for s in reversed(node.pcie_switches)},
            kind={s.id: s.kind for s in reversed(node.pcie_switches)},
            switch_numa={s.id: s.numa for s in reversed(node.pcie_switches)},
            nvlinks={
                pair for link in node.nvlinks for pair in ((link.gpu_a, link.gpu_b), (link.gpu_b, link.gpu_a))
            },
            held_by=held_by,
            cpu_free=node.cpu_milli - sum(a.cpu_milli for a in allocs) if node.cpu_milli else None,
            memory_free=node.memory_mib - sum(a.memory_mib for a in allocs) if node.memory_mib else None,
            shares={
                gpu: (
                    sum(sh.milli for a in allocs for sh in a.gpu_shares if sh.gpu == gpu),
                    sum(sh.memory_mib for a in allocs for sh in a.gpu_shares if sh.gpu == gpu),
                )
                for gpu in {sh.gpu for a in allocs for sh in a.gpu_shares}
            },
        )

    def chain(self, switch: str) -> list[str]:
        """The known switches from ``switch`` up to its root, nearest first (cycle-safe)."""
        chain: list[str] = []
        current = switch
        while current in self.kind and current not in chain:
            chain.append(current)
            current = self.parent[current]
        return chain

    def ancestors(self, switch: str) -> frozenset[str]:
        if switch not in self._ancestors:
            self._ancestors[switch] = frozenset(self.chain(switch))
        return self._ancestors[switch]

    def tree_numa(self, device: _Device) -> int | None:
        """The NUMA node a device's PCIe tree hangs off: its root's, when the device's switch is
        known (a device can report the NUMA of the GPUs it serves while its tree is elsewhere, as
        in the A100 NV12 capture), else the device's own."""
        chain = self.chain(device.switch)
        return self.switch_numa.get(chain[-1]) if chain else device.numa

    def distance(self, a: _Device, b: _Device) -> Distance:
        """``_classify``, remembered per pair of device spots: a node has few distinct spots and a
        batch puts many members on the same ones."""
        key = (a.switch, a.numa, b.switch, b.numa)
        if key not in self._distances:
            self._distances[key] = self._classify(a, b)
        return self._distances[key]

    def _classify(self, a: _Device, b: _Device) -> Distance:
        """PCIe distance as nvidia-smi classes it: same leaf switch PIX; a common PCIe switch PXB; a
        common host bridge only PHB; trees on the same NUMA node NODE; otherwise SYS."""
        if a.switch and a.switch == b.switch:
            return Distance.PIX
        shared = self.ancestors(a.switch) & self.ancestors(b.switch)
        if any(self.kind[s] in (SwitchKind.SWITCH, SwitchKind.UNSPECIFIED) for s in shared):
            return Distance.PXB
        if shared:
            return Distance.PHB
        numa_a, numa_b = self.tree_numa(a), self.tree_numa(b)
        if numa_a is not None and numa_a == numa_b:
            return Distance.NODE
        return Distance.SYS


@dataclass(frozen=True)
class _Placed:
    """One member of a placed job, with what it belongs to."""

    job: Job
    member: MemberPlacement

    @property
    def role(self) -> Role | None:
        return next((r for r in self.job.roles if r.name == self.member.role), None)

    @property
    def who(self) -> str:
        m = self.member
        return f"job {self.job.id} role {m.role} member {m.index} on {m.node}"


def _requirement(value: Requirement) -> Requirement:
    return Requirement.NONE if value == Requirement.UNSPECIFIED else value


# --------------------------------------------------------------------------- jobs and gangs


def _job_set(request: SolveRequest, result: SolveResult) -> Iterator[str]:
    """Every request job is answered exactly once, and nothing else is."""
    asked = {job.id for job in request.jobs}
    answered = Counter(jr.job_id for jr in result.jobs)
    for job_id, times in answered.items():
        if job_id not in asked:
            yield f"job {job_id} is in the result but not in the request"
        elif times > 1:
            yield f"job {job_id} appears {times} times in the result"
    for job in request.jobs:
        if job.id not in answered:
            yield f"job {job.id} of the request is missing from the result"


def _gang(job: Job, jr: JobResult) -> Iterator[str]:
    """All of a gang or nothing: each role between its minimum and its replicas, indexes distinct."""
    if not jr.placed:
        if jr.members:
            yield f"job {job.id} is not placed but lists {len(jr.members)} members"
        if jr.reason is None:
            yield f"job {job.id} is not placed but gives no reason"
        return
    roles = {role.name: role for role in job.roles}
    for m in jr.members:
        if m.role not in roles:
            yield f"job {job.id} lists member {m.index} of role {m.role}, which the job does not have"
    for role in job.roles:
        indexes = [m.index for m in jr.members if m.role == role.name]
        if len(indexes) < role.minimum:
            yield (
                f"job {job.id} role {role.name} is placed with {len(indexes)} members "
                f"but its gang needs at least {role.minimum}"
            )
        if len(indexes) > role.replicas:
            yield (
                f"job {job.id} role {role.name} is placed with {len(indexes)} members "
                f"but has only {role.replicas} replicas"
            )
        for index, times in Counter(indexes).items():
            if times > 1:
                yield f"job {job.id} role {role.name} member {index} is placed {times} times"
            if index >= role.replicas:
                yield (
                    f"job {job.id} role {role.name} member {index} is out of range ({role.replicas} replicas)"
                )


# --------------------------------------------------------------------------- one member


def _member(nodes: dict[str, _NodeView], p: _Placed) -> Iterator[str]:
    """The rules one member obeys on its own: its node, its devices, its topology."""
    role, view = p.role, nodes.get(p.member.node)
    if role is None:
        return  # reported by _gang
    if view is None:
        yield f"{p.who}: node {p.member.node} does not exist"
        return
    yield from _node_choice(view, role, p)
    gpus_ok = yield from _gpus(view, role, p)
    nics_ok = yield from _nics(view, role, p)
    if gpus_ok and nics_ok:  # topology of devices that do not exist would only repeat the above
        yield from _alignment(view, role, p)
        yield from _numa(view, role, p)
        yield from _nvlink(view, role, p)


def _node_choice(view: _NodeView, role: Role, p: _Placed) -> Iterator[str]:
    if not view.node.schedulable:
        yield f"{p.who}: node {view.node.name} is not schedulable"
    for key, want in role.member.node_selector.items():
        have = view.node.labels.get(key)
        if have != want:
            shown = "no such label" if have is None else f"{key}={have}"
            yield f"{p.who}: node selector {key}={want} does not match the node ({shown})"


def _gpus(view: _NodeView, role: Role, p: _Placed) -> Generator[str, None, bool]:
    """The member's GPUs: the asked count, distinct, existing, healthy, free, of an asked model.
    Returns (as the generator's value) whether every GPU exists, so topology can be checked."""
    shape, ids = role.member, p.member.gpus
    wanted = shape.gpus if shape.gpu_share is None else 1  # a share sits on exactly one GPU
    if len(ids) != wanted:
        yield f"{p.who}: has {len(ids)} GPUs but the role asks for {wanted}"
    yield from _share_record(role, p)
    for gpu_id, times in Counter(ids).items():
        if times > 1:
            yield f"{p.who}: GPU {gpu_id} is listed {times} times"
    all_exist = True
    for gpu_id in dict.fromkeys(ids):
        gpu = view.gpus.get(gpu_id)
        if gpu is None:
            all_exist = False
            yield f"{p.who}: GPU {gpu_id} does not exist on the node"
            continue
        if not gpu.healthy:
            yield f"{p.who}: GPU {gpu_id} is unhealthy"
        if ("GPU", gpu_id) in view.held_by:
            yield f"{p.who}: GPU {gpu_id} is already allocated to {view.held_by['GPU', gpu_id]}"
        elif gpu_id in view.shares and (shape.gpu_share is None or shape.mutex):
            yield f"{p.who}: GPU {gpu_id} already runs shares; a whole-GPU or mutex member needs it idle"
        if shape.gpu_models and gpu.model not in shape.gpu_models:
            yield (
                f"{p.who}: GPU {gpu_id} is a {gpu.model or 'model-less GPU'}, "
                f"not one of {', '.join(shape.gpu_models)}"
            )
        if gpu.model in shape.avoid_gpu_models:
            yield f"{p.who}: GPU {gpu_id} is a {gpu.model}, a model the role avoids"
    return all_exist


def _nics_wanted(role: Role) -> int:
    shape = role.member
    if shape.nics.mode == NicMode.PER_GPU:
        return shape.gpus
    if shape.nics.mode == NicMode.PER_MEMBER:
        return shape.nics.count
    return 0


def _nics(view: _NodeView, role: Role, p: _Placed) -> Generator[str, None, bool]:
    """The member's NICs: the asked count, distinct, existing RDMA, healthy, free. Returns whether
    every NIC exists."""
    ids, wanted = p.member.nics, _nics_wanted(role)
    if len(ids) != wanted:
        yield f"{p.who}: has {len(ids)} NICs but the role asks for {wanted} ({role.member.nics.mode.name})"
    for name, times in Counter(ids).items():
        if times > 1:
            yield f"{p.who}: NIC {name} is listed {times} times"
    all_exist = True
    for name in dict.fromkeys(ids):
        nic = view.nics.get(name)
        if nic is None:
            all_exist = False
            yield f"{p.who}: NIC {name} does not exist on the node"
            continue
        if not nic.rdma:
            yield f"{p.who}: NIC {name} is not an RDMA NIC"
        if not nic.healthy:
            yield f"{p.who}: NIC {name} is unhealthy"
        if ("NIC", name) in view.held_by:
            yield f"{p.who}: NIC {name} is already allocated to {view.held_by['NIC', name]}"
    return all_exist


# --------------------------------------------------------------------------- one member's topology


def _devices(view: _NodeView, p: _Placed) -> tuple[list[_Device], list[_Device]]:
    gpus = [view.gpus[g] for g in dict.fromkeys(p.member.gpus)]
    nics = [view.nics[n] for n in dict.fromkeys(p.member.nics)]
    return (
        [_Device(g.id, g.pcie_switch, g.numa) for g in gpus],
        [_Device(n.name, n.pcie_switch, n.numa) for n in nics],
    )


def _perfect_matching(n_left: int, n_right: int, near: set[tuple[int, int]]) -> bool:
    """Whether every left item can get its own right item it is ``near`` (Kuhn's augmenting paths;
    members have at most a few dozen devices, so the cubic worst case is nothing)."""
    if n_left != n_right:
        return False
    owner: dict[int, int] = {}  # right -> left

    def claim(left: int, seen: set[int]) -> bool:
        for right in range(n_right):
            if (left, right) in near and right not in seen:
                seen.add(right)
                if right not in owner or claim(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    return all(claim(left, set()) for left in range(n_left))


def _alignment_holds(view: _NodeView, role: Role, p: _Placed) -> tuple[bool, str]:
    """Whether the member's GPU↔NIC alignment rule holds, and if not, a clause saying why."""
    shape = role.member
    limit = shape.alignment.distance if shape.alignment.distance != Distance.UNSPECIFIED else Distance.PIX
    gpus, nics = _devices(view, p)
    near = {
        (g, n) for g, gpu in enumerate(gpus) for n, nic in enumerate(nics) if view.distance(gpu, nic) <= limit
    }
    if shape.nics.mode == NicMode.PER_GPU:
        if _perfect_matching(len(gpus), len(nics), near):
            return True, ""
        return False, f"its GPUs cannot each be paired with their own NIC at {limit.name} or closer"
    far = [nic.name for n, nic in enumerate(nics) if not any((g, n) in near for g in range(len(gpus)))]
    if far:
        return False, f"NIC {', '.join(far)} is farther than {limit.name} from every GPU of the member"
    return True, ""


def _alignment(view: _NodeView, role: Role, p: _Placed) -> Iterator[str]:
    mode = _requirement(role.member.alignment.mode)
    if mode == Requirement.NONE:
        return
    holds, why = _alignment_holds(view, role, p)
    if mode == Requirement.REQUIRED and not holds:
        yield f"{p.who}: alignment is REQUIRED but {why}"
    if p.member.aligned != holds:
        truth = "holds" if holds else f"does not hold ({why})"
        yield f"{p.who}: aligned is {p.member.aligned} but the {mode.name} alignment {truth}"


def _numa(view: _NodeView, role: Role, p: _Placed) -> Iterator[str]:
    if _requirement(role.member.numa) != Requirement.REQUIRED:
        return
    gpus, nics = _devices(view, p)
    devices = gpus + nics
    if not devices:
        return  # nothing to align
    numas = {d.numa for d in devices}
    if len(numas) != 1 or None in numas:
        where = ", ".join(f"{d.name}@{'unknown' if d.numa is None else d.numa}" for d in devices)
        yield f"{p.who}: NUMA is REQUIRED but its devices are not on one NUMA node ({where})"
    elif p.member.numa not in numas:
        yield f"{p.who}: numa is {p.member.numa} but its devices are on NUMA node {next(iter(numas))}"


def _nvlink(view: _NodeView, role: Role, p: _Placed) -> Iterator[str]:
    if _requirement(role.member.nvlink) != Requirement.REQUIRED:
        return
    for a, b in combinations(dict.fromkeys(p.member.gpus), 2):
        if (a, b) not in view.nvlinks:
            yield f"{p.who}: NVLink is REQUIRED but GPU {a} and GPU {b} are not NVLinked"


# --------------------------------------------------------------------------- capacity across members


def _share_record(role: Role, p: _Placed) -> Iterator[str]:
    """A share member reports exactly the part it asked for, on its GPU; others report none."""
    share = role.member.gpu_share
    got = [(sh.gpu, sh.milli, sh.memory_mib) for sh in p.member.gpu_shares]
    want = [] if share is None else [(g, share.milli, share.memory_mib) for g in p.member.gpus[:1]]
    if got != want:
        yield f"{p.who}: reports GPU shares {got} but the role asks for {want or 'whole GPUs'}"


def _is_plain_share(p: _Placed) -> bool:
    """A member that holds part of a GPU and lets others share it (not mutex, not whole)."""
    for role in p.job.roles:
        if role.name == p.member.role:
            return role.member.gpu_share is not None and not role.member.mutex
    return False


def _gpu_shares(nodes: dict[str, _NodeView], placed: list[_Placed]) -> Iterator[str]:
    """Shares on one GPU, old and new, add up to at most 1000 milli and the GPU's memory."""
    load: dict[tuple[str, str], list[int]] = {}
    for p in placed:
        view = nodes.get(p.member.node)
        if view is None or not _is_plain_share(p):
            continue
        for sh in p.member.gpu_shares:
            key = (p.member.node, sh.gpu)
            if key not in load:
                load[key] = list(view.shares.get(sh.gpu, (0, 0)))
            load[key][0] += sh.milli
            load[key][1] += sh.memory_mib
    for (node, gpu), (milli, mib) in sorted(load.items()):
        capacity = nodes[node].gpus[gpu].memory_mib if gpu in nodes[node].gpus else 0
        if milli > 1000:
            yield f"node {node}: shares on GPU {gpu} add up to {milli} milli, past 1000"
        if capacity and mib > capacity:
            yield f"node {node}: shares on GPU {gpu} hold {mib} MiB, past its {capacity}"


def _shared_devices(placed: list[_Placed]) -> Iterator[str]:
    """No GPU or NIC is given to two members, except a GPU shared by plain (non-mutex) shares."""
    first: dict[tuple[str, str, str], _Placed] = {}
    for p in placed:
        devices = [("GPU", g) for g in dict.fromkeys(p.member.gpus)]
        devices += [("NIC", n) for n in dict.fromkeys(p.member.nics)]
        for kind, name in devices:
            key = (p.member.node, kind, name)
            if key in first and kind == "GPU" and _is_plain_share(p) and _is_plain_share(first[key]):
                continue  # two shares of one GPU: _gpu_shares checks they fit
            if key in first:
                other = first[key].member
                yield (
                    f"{p.who}: {kind} {name} is also given to job {first[key].job.id} "
                    f"role {other.role} member {other.index}"
                )
            else:
                first[key] = p


def _node_capacity(nodes: dict[str, _NodeView], placed: list[_Placed]) -> Iterator[str]:
    """Per node, the new members' CPU and memory fit what the existing allocations leave free."""
    on_node: dict[str, list[_Placed]] = {}
    for p in placed:
        if p.role is not None and p.member.node in nodes:
            on_node.setdefault(p.member.node, []).append(p)
    for name, members in on_node.items():
        view = nodes[name]
        jobs = ", ".join(dict.fromkeys(p.job.id for p in members))
        for unit, free, ask in (
            ("milli-CPU", view.cpu_free, sum(p.role.member.cpu_milli for p in members if p.role)),
            ("MiB of memory", view.memory_free, sum(p.role.member.memory_mib for p in members if p.role)),
        ):
            if free is not None and ask > free:
                yield f"node {name}: members of job {jobs} ask for {ask} {unit} but only {free} are free"


# --------------------------------------------------------------------------- cluster metrics


def _metrics(request: SolveRequest, result: SolveResult, placed: list[_Placed]) -> Iterator[str]:
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
    on: dict[str, list[_Placed]] = {}
    for p in placed:
        on.setdefault(p.member.node, []).append(p)
    total = used = free_before = free_after = 0
    before, after = [0.0, 0], [0.0, 0]
    for node in request.inventory.nodes:  # one pass: a lone pod's check walks the whole cluster
        fact = _node_facts(workload, node)
        if fact is None:
            continue
        gpus, held, fully_free, now = fact
        total, used = total + gpus, used + held
        landing = on.get(node.name)
        if fully_free:
            free_before += 1
            free_after += landing is None
        then = workload.measure(_free_capacity(node, landing)) if landing else now
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
_FACTS: dict[int, tuple[Node, Profile, _Facts | None]] = {}


def _node_facts(workload: Profile, node: Node) -> _Facts | None:
    """A schedulable node's GPUs, how many of them its allocations hold whole, whether none is held
    whole, and its (fragmentation, stranded) as it stands; None for a cordoned node. Remembered per
    node object (the verifier's own memo, not the pipeline's): a scheduler sends the same unchanged
    nodes again and again."""
    hit = _FACTS.get(id(node))
    if hit is not None and hit[0] is node and hit[1] is workload:
        return hit[2]
    facts = None
    if node.schedulable:
        held = {g for a in node.allocations for g in a.gpus}
        measured = workload.measure(_free_capacity(node, []))
        facts = len(node.gpus), len(held & {g.id for g in node.gpus}), not held, measured
    if len(_FACTS) >= 65_536:
        _FACTS.clear()
    _FACTS[id(node)] = (node, workload, facts)  # holding the node keeps its id from being reused
    return facts


def _free_capacity(node: Node, members: list[_Placed]) -> FreeCapacity:
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


# --------------------------------------------------------------------------- locality


def _all_locality(
    request: SolveRequest, nodes: dict[str, Node], result: SolveResult, jobs: dict[str, Job]
) -> Iterator[str]:
    by_id = {sw.id: sw for sw in request.inventory.switches}
    for jr in result.jobs:
        if jr.placed and jr.job_id in jobs:
            yield from _locality(by_id, nodes, jobs[jr.job_id], jr)


def _switch_chain(by_id: dict[str, FabricSwitch], leaf: str) -> list[tuple[str, int]]:
    """(switch, tier) from ``leaf`` up to its root (cycle-safe); empty for a node outside the fabric."""
    chain: list[tuple[str, int]] = []
    current = leaf
    while current in by_id and all(current != c for c, _ in chain):
        chain.append((current, by_id[current].tier))
        current = by_id[current].parent
    return chain


def _lowest_common_tier(by_id: dict[str, FabricSwitch], nodes: list[Node]) -> int | None:
    """0 for a single node; the tier of the lowest switch above all the nodes; None if none is."""
    if len({n.name for n in nodes}) <= 1:
        return 0
    chains = [_switch_chain(by_id, leaf) for leaf in {n.leaf for n in nodes}]
    if any(not c for c in chains):
        return None
    common = set(chains[0]).intersection(*(set(c) for c in chains[1:]))
    return min((tier for _, tier in common), default=None)


def _locality(
    by_id: dict[str, FabricSwitch], nodes: dict[str, Node], job: Job, jr: JobResult
) -> Iterator[str]:
    members = [m for m in jr.members if m.node in nodes]
    on = [nodes[m.node] for m in members]

    def within(what: str, group: list[Node], tier: int) -> Iterator[str]:
        reached = _lowest_common_tier(by_id, group)
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
            yield from within(f"roles {pair.role_a} and {pair.role_b}", group, tier)
    if job.rail_aligned == Requirement.REQUIRED:
        yield from _rails_aligned(nodes, job, members)
    domains = {n.nvlink_domain for n in on}
    if (
        job.nvlink_domain == Requirement.REQUIRED
        and len({n.name for n in on}) > 1
        and (len(domains) > 1 or "" in domains)
    ):
        yield f"job {job.id}: must stay in one NVLink domain, but spans {sorted(domains)}"

    reached = _lowest_common_tier(by_id, on)
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


def _rails_aligned(nodes: dict[str, Node], job: Job, members: list[MemberPlacement]) -> Iterator[str]:
    """Every member of a role has its NICs on the same rails (and every one of them on a rail)."""
    first: dict[str, tuple[frozenset, MemberPlacement]] = {}
    for m in members:
        nics = [nic for nic in nodes[m.node].nics if nic.name in m.nics]
        if any(nic.rail is None for nic in nics):
            yield f"job {job.id} role {m.role} member {m.index}: a NIC on no rail in a rail-aligned job"
            continue
        rails = frozenset(nic.rail for nic in nics)
        seen = first.setdefault(m.role, (rails, m))
        if seen[0] != rails:
            yield (
                f"job {job.id} role {m.role}: member {m.index} uses rails {sorted(rails)}, "
                f"member {seen[1].index} rails {sorted(seen[0])}: the job is rail-aligned"
            )


# --------------------------------------------------------------------------- separation


def _labelled(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def _spots(node: Node, gpus: set[str], scope: Scope) -> set[str]:
    """Where a set of GPUs sits at a scope: the node, their PCIe switches, or the GPUs."""
    if scope in (Scope.NODE, Scope.UNSPECIFIED):
        return {node.name} if gpus else set()
    if scope == Scope.PCIE_SWITCH:
        return {f"{node.name}/{g.pcie_switch}" for g in node.gpus if g.id in gpus}
    return {f"{node.name}/{g}" for g in gpus}


def _separation(nodes: dict[str, Node], placed: list[_Placed]) -> Iterator[str]:
    by_job: dict[str, list[_Placed]] = {}
    for p in placed:
        by_job.setdefault(p.job.id, []).append(p)

    def footprint(members: list[_Placed], scope: Scope) -> set[str]:
        spots: set[str] = set()
        for p in members:
            if p.member.node in nodes:
                gpus = set(p.member.gpus) or {"(no GPU)"}
                spots |= _spots(nodes[p.member.node], gpus, scope) or {p.member.node}
        return spots

    for job_id, members in by_job.items():
        job = members[0].job
        for rule in job.anti_affinity:
            mine = footprint(members, rule.scope)
            broken = f"job {job_id}: anti-affinity to {rule.labels} broken by"
            if _labelled(job.labels, rule.labels):  # its own labels: no two of its members together
                seen: dict[str, str] = {}
                for p in members:
                    me = f"{p.member.role} member {p.member.index}"
                    for spot in sorted(footprint([p], rule.scope)):
                        if spot in seen:
                            yield f"{broken} its own {seen[spot]} and {me} together at {spot}"
                        seen.setdefault(spot, me)
            for other_id, others in by_job.items():
                near = other_id != job_id and _labelled(others[0].job.labels, rule.labels)
                if near and (shared := mine & footprint(others, rule.scope)):
                    yield f"{broken} job {other_id} at {sorted(shared)}"
            for node in {p.member.node for p in members if p.member.node in nodes}:
                for a in nodes[node].allocations:
                    held = set(a.gpus) | {sh.gpu for sh in a.gpu_shares}
                    spots = _spots(nodes[node], held, rule.scope)
                    if _labelled(a.labels, rule.labels) and (shared := mine & spots):
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
