"""Request validation: every cross-field problem of a request, each with its path and a sentence.

``solver.domain.model`` checks what one field can check alone (a count is positive). What needs two
parts of the request at once lives here: ids are unique, references resolve, trees have no cycles. A
member that no node could hold is not bad input but an unplaced job (:func:`unfit_jobs`). The caller
gets *every* problem in one answer (a scheduler fixing one error per round trip is a bad experience),
so each rule is a generator that keeps going after a problem.

Each rule family is one small function ``rule(request) -> Iterator[Problem]``; ``RULES`` lists them
in the order their problems are reported. Paths use the domain (= proto) field names with list
indexes in brackets, e.g. ``inventory.nodes[3].gpus[1].pcie_switch``.

Every rule is linear in the size of the request (dicts and sets, no pairwise loops over nodes), so
validating 16,000 eight-GPU nodes costs about as much as reading them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass

from solver.domain.cancel import checked
from solver.domain.chains import WORDS, unknown_words
from solver.domain.errors import Problem
from solver.domain.model import (
    FabricSwitch,
    Inventory,
    NicMode,
    Node,
    ObjectiveTier,
    PcieSwitch,
    Policy,
    Requirement,
    Role,
    SolveRequest,
)
from solver.domain.nodefold import fold_for
from solver.domain.nodekey import node_key

Rule = Callable[[SolveRequest], Iterator[Problem]]


def validate(request: SolveRequest) -> tuple[Problem, ...]:
    """Every problem of ``request`` (empty when it can be solved as given): the rules inside each
    node first, node by node, then ``RULES`` in order."""
    per_node = fold_for("validate.nodes", _node_problems)(request.inventory.nodes)
    inside = [at_node(i, p) for i, found in enumerate(per_node) if found for p in found]
    return (*inside, *(problem for rule in checked(RULES) for problem in rule(request)))


# Keys (solver.domain.nodekey) of nodes in which NODE_RULES found nothing. The rules read no field
# the key leaves out but in their messages, so a node with a clean twin is clean; one with problems
# is checked itself, and its problems name it. At 16,384 cold nodes of bench.quality the rules ran
# once per 1,527 keys instead of once per node (bench/RESULTS.md, session 17).
_CLEAN: set[Hashable] = set()
_CLEAN_MAX = 16_384  # keys, each mostly interned hardware shared with its nodes'


def _node_problems(node: Node) -> tuple[Problem, ...]:
    """The problems ``NODE_RULES`` find in one node, as if it were the inventory's first
    (:func:`at_node` moves them to its place). Remembered per node *object* by the fold that asks
    (the wire layer hands back the same Node for an unchanged node, so a scheduler's repeated
    inventory is checked once), and cleanness per :func:`node_key` (a cold inventory of alike
    nodes is checked once per distinct node, not per node)."""
    key = node_key(node)
    if key in _CLEAN:
        return ()
    found = node_problems(node)
    if not found:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN.add(key)
    return found


def node_problems(node: Node) -> tuple[Problem, ...]:
    """The problems ``NODE_RULES`` find in ``node`` checked alone, as the inventory's first;
    nothing remembered."""
    alone = SolveRequest.model_construct(
        inventory=Inventory.model_construct(nodes=(node,), switches=()), jobs=(), policy=Policy()
    )
    return tuple(p for rule in NODE_RULES for p in rule(alone))


def at_node(i: int, problem: Problem) -> Problem:
    """A problem found in a node checked alone, at the node's index ``i`` in the inventory."""
    prefix = _node_path(0)
    return (
        Problem(path=_node_path(i) + problem.path[len(prefix) :], message=problem.message) if i else problem
    )


# --------------------------------------------------------------------------- paths and small helpers


def _node_path(i: int) -> str:
    return f"inventory.nodes[{i}]"


def _member_path(j: int, r: int) -> str:
    return f"jobs[{j}].roles[{r}].member"


def _duplicates(items: Iterable[tuple[str, object]], what: str) -> Iterator[Problem]:
    """One problem per repeated key, at the repeat's path, pointing back to the first occurrence."""
    first: dict[object, str] = {}
    for path, key in items:
        if key in first:
            yield Problem(path=path, message=f"{what} {key!r} is used again (first at {first[key]})")
        else:
            first[key] = path


def _first_by_id(switches: Iterable[PcieSwitch | FabricSwitch]) -> dict[str, int]:
    """Index of the first switch with each id; duplicates are reported by ``unique_ids``, and every
    later rule resolves a reference to the first switch so it reports nothing twice."""
    index: dict[str, int] = {}
    for i, switch in enumerate(switches):
        index.setdefault(switch.id, i)
    return index


def _cycles(parents: list[str], index: dict[str, int]) -> Iterator[list[int]]:
    """Each cycle of a parent-pointer forest once, as the list of positions around it.

    Walks up from every switch, colouring what it has seen; a walk that meets its own path has
    found a cycle. Every switch is walked past at most once, so this is linear.
    """
    done: set[int] = set()
    for start in range(len(parents)):
        path: list[int] = []
        on_path: dict[int, int] = {}
        current: int | None = start
        while current is not None and current not in done and current not in on_path:
            on_path[current] = len(path)
            path.append(current)
            current = index.get(parents[current]) if parents[current] else None
        if current is not None and current in on_path:
            yield path[on_path[current] :]
        done.update(path)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --------------------------------------------------------------------------- rules: identity


def unique_ids(request: SolveRequest) -> Iterator[Problem]:
    """Names and ids are unique where something refers to them: a reference must mean one thing."""
    nodes = request.inventory.nodes
    if len({n.name for n in nodes}) < len(nodes):  # paths are spelled out only when some name repeats
        yield from _duplicates(((f"{_node_path(i)}.name", n.name) for i, n in enumerate(nodes)), "node name")
    switches = request.inventory.switches
    yield from _duplicates(
        ((f"inventory.switches[{k}].id", s.id) for k, s in enumerate(switches)), "fabric switch id"
    )
    yield from _duplicates(((f"jobs[{j}].id", job.id) for j, job in enumerate(request.jobs)), "job id")
    for j, job in enumerate(request.jobs):
        yield from _duplicates(
            ((f"jobs[{j}].roles[{r}].name", role.name) for r, role in enumerate(job.roles)), "role name"
        )


def unique_device_ids(request: SolveRequest) -> Iterator[Problem]:
    """Within a node, device, switch and NUMA ids are unique: its references must mean one thing."""
    for i, node in enumerate(request.inventory.nodes):
        p = _node_path(i)
        yield from _duplicates(((f"{p}.gpus[{k}].id", g.id) for k, g in enumerate(node.gpus)), "GPU id")
        yield from _duplicates(((f"{p}.nics[{k}].name", n.name) for k, n in enumerate(node.nics)), "NIC name")
        yield from _duplicates(
            ((f"{p}.pcie_switches[{k}].id", s.id) for k, s in enumerate(node.pcie_switches)), "PCIe switch id"
        )
        yield from _duplicates(
            ((f"{p}.numa_nodes[{k}].id", n.id) for k, n in enumerate(node.numa_nodes)), "NUMA node id"
        )


# --------------------------------------------------------------------------- rules: inside a node


def pcie_references(request: SolveRequest) -> Iterator[Problem]:
    """GPUs, NICs and switches name PCIe switches of their own node ("" = unknown, allowed)."""
    for i, node in enumerate(request.inventory.nodes):
        p = _node_path(i)
        known = {s.id for s in node.pcie_switches}
        for k, gpu in enumerate(node.gpus):
            if gpu.pcie_switch and gpu.pcie_switch not in known:
                yield Problem(
                    path=f"{p}.gpus[{k}].pcie_switch",
                    message=f"PCIe switch {gpu.pcie_switch!r} of GPU {gpu.id} "
                    f"is not a switch of node {node.name}",
                )
        for k, nic in enumerate(node.nics):
            if nic.pcie_switch and nic.pcie_switch not in known:
                yield Problem(
                    path=f"{p}.nics[{k}].pcie_switch",
                    message=f"PCIe switch {nic.pcie_switch!r} of NIC {nic.name} "
                    f"is not a switch of node {node.name}",
                )
        for k, switch in enumerate(node.pcie_switches):
            if switch.parent and switch.parent not in known:
                yield Problem(
                    path=f"{p}.pcie_switches[{k}].parent",
                    message=f"parent {switch.parent!r} of PCIe switch {switch.id} "
                    f"is not a switch of node {node.name}",
                )


def pcie_cycles(request: SolveRequest) -> Iterator[Problem]:
    """The PCIe switches of a node form a forest: a switch that is its own ancestor has no root."""
    for i, node in enumerate(request.inventory.nodes):
        switches = node.pcie_switches
        for cycle in _cycles([s.parent for s in switches], _first_by_id(switches)):
            first = min(cycle)
            loop = " -> ".join(switches[k].id for k in [*cycle, cycle[0]])
            yield Problem(
                path=f"{_node_path(i)}.pcie_switches[{first}].parent",
                message=f"PCIe switches of node {node.name} form a cycle: {loop}",
            )


def numa_references(request: SolveRequest) -> Iterator[Problem]:
    """Devices name NUMA nodes the node declares (only checked when the node declares any)."""
    for i, node in enumerate(request.inventory.nodes):
        if not node.numa_nodes:
            continue
        p = _node_path(i)
        known = {n.id for n in node.numa_nodes}
        listed = ", ".join(str(n) for n in sorted(known))
        devices = [
            *((f"gpus[{k}]", f"GPU {g.id}", g.numa) for k, g in enumerate(node.gpus)),
            *((f"nics[{k}]", f"NIC {n.name}", n.numa) for k, n in enumerate(node.nics)),
            *(
                (f"pcie_switches[{k}]", f"PCIe switch {s.id}", s.numa)
                for k, s in enumerate(node.pcie_switches)
            ),
        ]
        for where, what, numa in devices:
            if numa is not None and numa not in known:
                yield Problem(
                    path=f"{p}.{where}.numa",
                    message=f"NUMA node {numa} of {what} is not one of "
                    f"node {node.name}'s NUMA nodes ({listed})",
                )


def nvlink_references(request: SolveRequest) -> Iterator[Problem]:
    """An NVLink joins two different GPUs of its node."""
    for i, node in enumerate(request.inventory.nodes):
        p = _node_path(i)
        known = {g.id for g in node.gpus}
        for k, link in enumerate(node.nvlinks):
            for end in ("gpu_a", "gpu_b"):
                gpu = getattr(link, end)
                if gpu not in known:
                    yield Problem(
                        path=f"{p}.nvlinks[{k}].{end}",
                        message=f"NVLink end {gpu!r} is not a GPU of node {node.name}",
                    )
            if link.gpu_a == link.gpu_b:
                yield Problem(
                    path=f"{p}.nvlinks[{k}]",
                    message=f"NVLink joins GPU {link.gpu_a} to itself",
                )


def allocation_references(request: SolveRequest) -> Iterator[Problem]:
    """Allocations hold devices that exist on their node, each listed once."""
    for i, node in enumerate(request.inventory.nodes):
        gpus = {g.id for g in node.gpus}
        nics = {n.name for n in node.nics}
        for a, alloc in enumerate(node.allocations):
            p = f"{_node_path(i)}.allocations[{a}]"
            for field, kind, known in (("gpus", "GPU", gpus), ("nics", "NIC", nics)):
                seen: set[str] = set()
                for k, device in enumerate(getattr(alloc, field)):
                    if device not in known:
                        yield Problem(
                            path=f"{p}.{field}[{k}]",
                            message=f"{kind} {device!r} held by {alloc.owner or 'an allocation'} "
                            f"is not a {kind} of node {node.name}",
                        )
                    if device in seen:
                        yield Problem(
                            path=f"{p}.{field}[{k}]",
                            message=f"{kind} {device} is listed twice in this allocation",
                        )
                    seen.add(device)
            for k, share in enumerate(alloc.gpu_shares):
                if share.gpu not in gpus:
                    yield Problem(
                        path=f"{p}.gpu_shares[{k}].gpu",
                        message=f"GPU {share.gpu!r} shared by {alloc.owner or 'an allocation'} "
                        f"is not a GPU of node {node.name}",
                    )


def allocation_overcommit(request: SolveRequest) -> Iterator[Problem]:
    """What is already allocated fits the node: no device held twice, CPU/memory within the node's
    (when tracked: 0 means the node does not track it)."""
    for i, node in enumerate(request.inventory.nodes):
        p = _node_path(i)
        for field, kind in (("gpus", "GPU"), ("nics", "NIC")):
            holder: dict[str, int] = {}
            for a, alloc in enumerate(node.allocations):
                for k, device in enumerate(getattr(alloc, field)):
                    if holder.get(device, a) != a:  # a repeat inside one allocation is reported above
                        first = holder[device]
                        owner = node.allocations[first].owner
                        yield Problem(
                            path=f"{p}.allocations[{a}].{field}[{k}]",
                            message=f"{kind} {device} is already held by allocation {first}"
                            + (f" ({owner})" if owner else ""),
                        )
                    else:
                        holder.setdefault(device, a)
        for field, unit in (("cpu_milli", "milli-CPU"), ("memory_mib", "MiB of memory")):
            capacity = getattr(node, field)
            held = sum(getattr(alloc, field) for alloc in node.allocations)
            if capacity and held > capacity:
                yield Problem(
                    path=f"{p}.allocations",
                    message=f"allocations of node {node.name} hold {held} {unit} but the node has {capacity}",
                )


def share_overcommit(request: SolveRequest) -> Iterator[Problem]:
    """Shares already running fit their GPU: at most 1000 milli and the GPU's memory in all, and no
    share on a GPU an allocation holds whole."""
    for i, node in enumerate(request.inventory.nodes):
        whole = {g for a in node.allocations for g in a.gpus}
        memory = {g.id: g.memory_mib for g in node.gpus}
        milli: dict[str, int] = {}
        mib: dict[str, int] = {}
        for a, alloc in enumerate(node.allocations):
            for k, share in enumerate(alloc.gpu_shares):
                path = f"{_node_path(i)}.allocations[{a}].gpu_shares[{k}]"
                if share.gpu in whole:
                    yield Problem(
                        path=f"{path}.gpu", message=f"GPU {share.gpu} is shared but also held whole"
                    )
                milli[share.gpu] = milli.get(share.gpu, 0) + share.milli
                mib[share.gpu] = mib.get(share.gpu, 0) + share.memory_mib
                if milli[share.gpu] > 1000:
                    yield Problem(
                        path=f"{path}.milli",
                        message=f"shares of GPU {share.gpu} add up to {milli[share.gpu]} milli, past 1000",
                    )
                if memory.get(share.gpu) and mib[share.gpu] > memory[share.gpu]:
                    yield Problem(
                        path=f"{path}.memory_mib",
                        message=f"shares of GPU {share.gpu} hold {mib[share.gpu]} MiB but it has "
                        f"{memory[share.gpu]}",
                    )


# --------------------------------------------------------------------------- rules: the fabric


def fabric_references(request: SolveRequest) -> Iterator[Problem]:
    """Fabric parents and node leaves name fabric switches; a node hangs under a tier-1 switch."""
    switches = request.inventory.switches
    index = _first_by_id(switches)
    for k, switch in enumerate(switches):
        if switch.parent and switch.parent not in index:
            yield Problem(
                path=f"inventory.switches[{k}].parent",
                message=f"parent {switch.parent!r} of fabric switch {switch.id} is not a fabric switch",
            )
    for i, node in enumerate(checked(request.inventory.nodes)):
        if not node.leaf:
            continue
        if node.leaf not in index:
            yield Problem(
                path=f"{_node_path(i)}.leaf",
                message=f"leaf {node.leaf!r} of node {node.name} is not a fabric switch",
            )
        elif (tier := switches[index[node.leaf]].tier) != 1:
            yield Problem(
                path=f"{_node_path(i)}.leaf",
                message=f"leaf {node.leaf!r} of node {node.name} is a tier-{tier} switch; "
                "nodes hang under tier-1 switches",
            )


def fabric_cycles(request: SolveRequest) -> Iterator[Problem]:
    """The fabric is a forest of switches: a switch that is its own ancestor has no root."""
    switches = request.inventory.switches
    for cycle in _cycles([s.parent for s in switches], _first_by_id(switches)):
        loop = " -> ".join(switches[k].id for k in [*cycle, cycle[0]])
        yield Problem(
            path=f"inventory.switches[{min(cycle)}].parent",
            message=f"fabric switches form a cycle: {loop}",
        )


def fabric_tiers(request: SolveRequest) -> Iterator[Problem]:
    """Tiers grow toward the root (leaf 1, spine 2, ...): locality is measured by the tier reached."""
    switches = request.inventory.switches
    index = _first_by_id(switches)
    for k, switch in enumerate(switches):
        if switch.parent in index and (parent := switches[index[switch.parent]]).tier <= switch.tier:
            yield Problem(
                path=f"inventory.switches[{k}].tier",
                message=f"fabric switch {switch.id} has tier {switch.tier} but its parent {parent.id} "
                f"has tier {parent.tier}; tiers must increase toward the root",
            )


# --------------------------------------------------------------------------- rules: jobs


def _roles(request: SolveRequest) -> Iterator[tuple[int, int, Role]]:
    # checked: every job rule walks the batch through here; 10,000 pods are seconds of Python.
    for j, job in enumerate(checked(request.jobs)):
        for r, role in enumerate(job.roles):
            yield j, r, role


def role_counts(request: SolveRequest) -> Iterator[Problem]:
    """A gang minimum cannot exceed the replicas it is a minimum of."""
    for j, r, role in _roles(request):
        if role.min_replicas is not None and role.min_replicas > role.replicas:
            yield Problem(
                path=f"jobs[{j}].roles[{r}].min_replicas",
                message=f"role {role.name} has min_replicas {role.min_replicas} "
                f"above its replicas {role.replicas}",
            )


def role_affinity_references(request: SolveRequest) -> Iterator[Problem]:
    """A role affinity relates two roles of its own job."""
    for j, job in enumerate(request.jobs):
        names = {role.name for role in job.roles}
        for k, affinity in enumerate(job.role_affinity):
            for end in ("role_a", "role_b"):
                if (name := getattr(affinity, end)) not in names:
                    yield Problem(
                        path=f"jobs[{j}].role_affinity[{k}].{end}",
                        message=f"role {name!r} is not a role of job {job.id}",
                    )


def anti_affinity_labels(request: SolveRequest) -> Iterator[Problem]:
    """An anti-affinity rule names what to keep away from."""
    for j, job in enumerate(request.jobs):
        for k, rule in enumerate(job.anti_affinity):
            if not rule.labels:
                yield Problem(
                    path=f"jobs[{j}].anti_affinity[{k}].labels",
                    message="an anti-affinity rule needs at least one label to keep away from",
                )


def policy_chains(request: SolveRequest) -> Iterator[Problem]:
    """Policy chains use words topoplace maps (see solver.reduce.policy)."""
    for field in ("node_policy", "gpu_policy"):
        for word in unknown_words(getattr(request.policy, field)):
            yield Problem(
                path=f"policy.{field}",
                message=f"unknown policy {word!r}; known: {', '.join(WORDS)}",
            )


def node_order(request: SolveRequest) -> Iterator[Problem]:
    """The policy's node order names nodes of the inventory, each once: a misspelt name would
    silently rank a node last."""
    order = request.policy.node_order
    named = set(order)
    # Paths are spelled out only when something is wrong: a scheduler sends the whole order each time.
    if len(named) < len(order):
        yield from _duplicates(
            ((f"policy.node_order[{k}]", name) for k, name in enumerate(order)), "node name"
        )
    known = {n.name for n in request.inventory.nodes}
    if named <= known:
        return
    for k, name in enumerate(order):
        if name not in known:
            yield Problem(path=f"policy.node_order[{k}]", message=f"no node {name!r} in the inventory")


def unimplemented_tiers(request: SolveRequest) -> Iterator[Problem]:
    """A tier the solver does not build would be silently ignored; say so instead."""
    for k, tier in enumerate(request.policy.objective):
        if tier in (ObjectiveTier.UNSPECIFIED, ObjectiveTier.STABILITY):
            yield Problem(path=f"policy.objective[{k}]", message=f"tier {tier.name} is not implemented")


def locality_tiers(request: SolveRequest) -> Iterator[Problem]:
    """A locality tier names a tier the fabric has (REQUIRED at a tier above every switch would
    hold trivially, below every switch never)."""
    tiers = {s.tier for s in request.inventory.switches}
    top = max(tiers, default=0)

    def check(path: str, mode: Requirement, tier: int | None) -> Iterator[Problem]:
        if mode != Requirement.REQUIRED or not tier:
            return
        if not tiers:
            yield Problem(path=path, message=f"asks for tier {tier} but the inventory has no fabric switches")
        elif tier not in tiers and tier < top:
            yield Problem(
                path=path, message=f"tier {tier} is not a tier of the fabric (tiers: {sorted(tiers)})"
            )

    for j, job in enumerate(request.jobs):
        yield from check(f"jobs[{j}].locality.highest_tier", job.locality.mode, job.locality.highest_tier)
        for r, role in enumerate(job.roles):
            yield from check(
                f"jobs[{j}].roles[{r}].locality.highest_tier", role.locality.mode, role.locality.highest_tier
            )
        names = {role.name for role in job.roles}
        for k, pair in enumerate(job.role_affinity):
            if not {pair.role_a, pair.role_b} <= names:
                continue  # reported by role_affinity_references
            mode = Requirement.REQUIRED if pair.mode == Requirement.UNSPECIFIED else pair.mode
            tier = 1 if pair.highest_tier is None else pair.highest_tier
            yield from check(f"jobs[{j}].role_affinity[{k}].highest_tier", mode, tier)


def _nics_asked(role: Role) -> int:
    """NICs one member needs: one per GPU, a fixed count, or none."""
    shape = role.member
    if shape.nics.mode == NicMode.PER_GPU:
        return shape.gpus if shape.gpu_share is None else 1  # a share sits on one GPU
    if shape.nics.mode == NicMode.PER_MEMBER:
        return shape.nics.count
    return 0


def member_requests(request: SolveRequest) -> Iterator[Problem]:
    """A member asks for something, and its NIC request is not self-contradictory."""
    for j, r, role in _roles(request):
        shape, p = role.member, _member_path(j, r)
        if shape.nics.mode == NicMode.PER_MEMBER and shape.nics.count == 0:
            yield Problem(path=f"{p}.nics.count", message="NIC mode PER_MEMBER asks for 0 NICs; set a count")
        if shape.nics.mode == NicMode.PER_GPU and shape.gpus == 0 and shape.gpu_share is None:
            yield Problem(
                path=f"{p}.nics.mode", message="NIC mode PER_GPU on a member with 0 GPUs asks for no NICs"
            )
        share = shape.gpu_share is not None and (shape.gpu_share.milli or shape.gpu_share.memory_mib)
        if shape.gpu_share is not None and shape.gpus:
            yield Problem(
                path=f"{p}.gpu_share",
                message=f"asks for {shape.gpus} whole GPUs and a GPU share; ask for one or the other",
            )
        elif shape.gpu_share is not None and not share:
            yield Problem(
                path=f"{p}.gpu_share.milli",
                message="a GPU share must ask for 1 to 1000 milli-GPU and/or some GPU memory",
            )
        if not (shape.gpus or share or shape.cpu_milli or shape.memory_mib or _nics_asked(role)):
            yield Problem(
                path=p,
                message=f"a member of role {role.name} asks for nothing: no GPUs, NICs, CPU or memory",
            )


def _totals(node: Node) -> tuple[int, int, int, int]:
    """A node's GPUs, RDMA NICs, CPU and memory in total."""
    return len(node.gpus), sum(nic.rdma for nic in node.nics), node.cpu_milli, node.memory_mib


@dataclass(frozen=True)
class _Largest:
    """The most of each resource any one node has in total (healthy or not, free or not): a member
    asking more can never be placed, whatever else happens. ``None`` = some node does not track it."""

    gpus: int
    nics: int
    cpu_milli: int | None
    memory_mib: int | None
    nodes: tuple[Node, ...]

    @classmethod
    def of(cls, nodes: tuple[Node, ...]) -> _Largest:
        totals = fold_for("validate.largest", _totals)(nodes)
        return cls(
            gpus=max(t[0] for t in totals),
            nics=max(t[1] for t in totals),
            cpu_milli=None if any(t[2] == 0 for t in totals) else max(t[2] for t in totals),
            memory_mib=None if any(t[3] == 0 for t in totals) else max(t[3] for t in totals),
            nodes=nodes,
        )

    def gpus_of(self, models: frozenset[str]) -> int:
        return max(sum(g.model in models for g in n.gpus) for n in self.nodes)


def member_fits_some_node(request: SolveRequest) -> Iterator[Problem]:
    """Each thing a member asks for, some node has at least that much of in total.

    Each resource is compared on its own (a node with enough GPUs and another with enough CPU pass):
    combinations are the solver's business and become an unplaced job with a reason, not an error.
    Skipped on an empty inventory, where every job is simply unplaced.
    """
    nodes = request.inventory.nodes
    if not nodes:
        return
    largest = _Largest.of(nodes)
    by_models: dict[frozenset[str], int] = {}  # few distinct model sets: one pass over nodes each
    for j, r, role in _roles(request):
        shape, p = role.member, _member_path(j, r)
        if shape.gpus > largest.gpus:
            yield Problem(
                path=f"{p}.gpus",
                message=f"asks for {shape.gpus} GPUs but the largest node has {largest.gpus}",
            )
        elif shape.gpus and shape.gpu_models:
            models = frozenset(shape.gpu_models)
            if models not in by_models:
                by_models[models] = largest.gpus_of(models)
            if shape.gpus > by_models[models]:
                asked = f"asks for {shape.gpus} GPUs of model {' or '.join(shape.gpu_models)}"
                if by_models[models]:
                    message = f"{asked} but the node with the most has {by_models[models]}"
                else:
                    present = sorted({g.model for n in nodes for g in n.gpus if g.model})
                    have = ", ".join(present) or "none"
                    message = f"{asked} but no node here has one; the nodes have {have}"
                yield Problem(path=f"{p}.gpu_models", message=message)
        if shape.gpu_share is not None and shape.gpu_share.memory_mib:
            most = max((g.memory_mib for n in nodes for g in n.gpus), default=0)
            if most and shape.gpu_share.memory_mib > most:
                yield Problem(
                    path=f"{p}.gpu_share.memory_mib",
                    message=f"asks for {shape.gpu_share.memory_mib} MiB of one GPU "
                    f"but the largest GPU has {most}",
                )
        if (nics := _nics_asked(role)) > largest.nics:
            field = "nics.count" if shape.nics.mode == NicMode.PER_MEMBER else "nics.mode"
            yield Problem(
                path=f"{p}.{field}",
                message=f"asks for {_plural(nics, 'RDMA NIC')} but the largest node has {largest.nics}",
            )
        if largest.cpu_milli is not None and shape.cpu_milli > largest.cpu_milli:
            yield Problem(
                path=f"{p}.cpu_milli",
                message=f"asks for {shape.cpu_milli} milli-CPU but the largest node has {largest.cpu_milli}",
            )
        if largest.memory_mib is not None and shape.memory_mib > largest.memory_mib:
            yield Problem(
                path=f"{p}.memory_mib",
                message=f"asks for {shape.memory_mib} MiB of memory "
                f"but the largest node has {largest.memory_mib}",
            )


# --------------------------------------------------------------------------- the rules, in order

NODE_RULES: tuple[Rule, ...] = (  # each looks at one node only
    unique_device_ids,
    pcie_references,
    pcie_cycles,
    numa_references,
    nvlink_references,
    allocation_references,
    allocation_overcommit,
    share_overcommit,
)

RULES: tuple[Rule, ...] = (
    unique_ids,
    fabric_references,
    fabric_cycles,
    fabric_tiers,
    role_counts,
    role_affinity_references,
    locality_tiers,
    policy_chains,
    node_order,
    unimplemented_tiers,
    anti_affinity_labels,
    member_requests,
)


def unfit_jobs(request: SolveRequest) -> dict[int, tuple[Problem, ...]]:
    """Jobs (by index) with a member that no node of the inventory could hold even empty, with what
    each such member asks beyond the largest node (:func:`member_fits_some_node`).

    Not a validation rule: such a request is well formed, and the job is *unplaced* with that reason
    while the rest of the batch is placed. A scheduler hands over the nodes its own filters passed
    (Volcano's predicates, a replay's Filter stage), so "no node here has that model or that much CPU"
    is an everyday answer, not bad input; one such job must never cost the batch its placement.
    """
    out: dict[int, list[Problem]] = {}
    for problem in member_fits_some_node(request):
        j = int(problem.path.removeprefix("jobs[").partition("]")[0])
        out.setdefault(j, []).append(problem)
    return {j: tuple(found) for j, found in out.items()}
