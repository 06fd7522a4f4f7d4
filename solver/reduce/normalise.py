"""Normalise: from a validated request to the small problem the model is built on.

Two reductions happen here (in cvxpy's sense: each keeps what is needed to map the answer back):

* **Member shapes.** Members whose requests are identical are interchangeable inside a node,
  whichever job they belong to: the batch is reduced to its distinct shapes.
* **Node classes.** Nodes whose *free* devices are the same up to relabelling (same distances,
  NVLink, NUMA, models, CPU, memory and the labels any job selects on) are one class with a count.
  Each node keeps the permutation from the class's canonical device order to its own device ids, so
  an answer for the class decodes to concrete GPUs and NICs on every node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache, partial
from types import MappingProxyType

from solver.domain.cancel import checked
from solver.domain.model import (
    Distance,
    MemberShape,
    NicMode,
    Node,
    ObjectiveTier,
    Packing,
    PcieSwitch,
    Requirement,
    Role,
    SolveRequest,
)
from solver.domain.nodefold import NodeMemo, fold_for
from solver.domain.nodekey import node_key
from solver.domain.topology import pcie_distance
from solver.reduce.separation import Separation, job_label

# --------------------------------------------------------------------------- member kinds


def required(rule: Requirement) -> bool:
    return rule == Requirement.REQUIRED


def preferred(rule: Requirement) -> bool:
    return rule == Requirement.PREFERRED


def gpu_count(shape: MemberShape) -> int:
    """GPUs a member touches: its whole GPUs, or the one GPU its share sits on."""
    return shape.gpus if shape.gpu_share is None else 1


def nic_demand(shape: MemberShape) -> int:
    """How many NICs one member of ``shape`` takes."""
    if shape.nics.mode == NicMode.PER_GPU:
        return gpu_count(shape)
    if shape.nics.mode == NicMode.PER_MEMBER:
        return shape.nics.count
    return 0


def alignment_distance(shape: MemberShape) -> Distance:
    d = shape.alignment.distance
    return Distance.PIX if d == Distance.UNSPECIFIED else d


def has_preferences(shape: MemberShape) -> bool:
    return (
        (preferred(shape.alignment.mode) and nic_demand(shape) > 0)
        or preferred(shape.numa)
        or (weighs_nvlink(shape) and shape.gpus > 1)
    )


def weighs_nvlink(shape: MemberShape) -> bool:
    """An NVLink rule (either mode) also prefers the strongest links: a member meets it fully only
    on GPUs whose weakest pair has as many links as the node's best set of that size (NV18 over NV2)."""
    return preferred(shape.nvlink) or required(shape.nvlink)


# --------------------------------------------------------------------------- node shapes


@dataclass(frozen=True)
class FreeGpu:
    """What is left of one GPU: whole (``idle``), or a part next to shares already running."""

    model: str
    numa: int | None
    milli: int = 1000  # compute left, in thousandths of the GPU
    memory_mib: int | None = None  # memory left; None when the GPU's memory is not tracked
    idle: bool = True  # nothing runs on it: whole-GPU and mutex members may take it


@dataclass(frozen=True)
class FreeNic:
    numa: int | None
    rail: int | None = None


@dataclass(frozen=True)
class NodeShape:
    """A node's free resources in canonical order; equal shapes are interchangeable nodes.

    ``distance[i][j]`` covers GPUs first then NICs (index ``len(gpus) + k`` for NIC k);
    ``nvlink`` holds canonical GPU index pairs (i < j), ``nvlink_links`` their link counts
    (``NV#``), and ``nvlink_best[k]`` the links of the weakest pair of the best-linked k GPUs of the
    node's hardware (used or not): what "as well linked as this node allows" means for k GPUs.
    """

    gpus: tuple[FreeGpu, ...]
    nics: tuple[FreeNic, ...]
    distance: tuple[tuple[int, ...], ...]
    nvlink: frozenset[tuple[int, int]]
    cpu_milli: int | None  # None: not tracked on this node
    memory_mib: int | None
    labels: tuple[tuple[str, str], ...]  # only the labels some job selects on
    fully_free: bool  # nothing allocated: binpack keeps such nodes whole
    gpu_group: tuple[int, ...] = ()  # per GPU: which PCIe switch (numbered in canonical order)
    taboo: frozenset[tuple[int, int]] = frozenset()  # (shape, GPU or -1 = node) running work forbids
    nvlink_links: tuple[tuple[int, int, int], ...] = ()  # (i, j, links), i < j canonical
    nvlink_best: tuple[int, ...] = ()  # by GPU count k; () when the node has no NVLink

    def nic_distance(self, gpu: int, nic: int) -> int:
        return self.distance[gpu][len(self.gpus) + nic]

    # Shapes key the class grouping and the configuration caches on every request; hashing the
    # nested tuples each time was a visible share of a small request's time, so hash once.
    @cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class ConcreteNode:
    """One node of a class: its name and the device ids behind the class's canonical indices."""

    name: str
    rank: dict[str, int]  # device id → position in the node's own listing, to report in that order
    gpu_ids: tuple[str, ...]
    nic_names: tuple[str, ...]
    gpu_numa: tuple[int | None, ...]
    nic_numa: tuple[int | None, ...]


@dataclass(frozen=True)
class NodeClass:
    """Interchangeable nodes: the same free shape, under the same leaf, in the same NVLink domain."""

    index: int
    shape: NodeShape
    leaf: str
    nvlink_domain: str
    nodes: tuple[ConcreteNode, ...]
    ranks: tuple[int, ...] = ()  # each node's place in the policy's node order (``ranked_nodes``)
    gpu_total: int = 0  # healthy GPUs, busy ones included; only set where FILL packing needs it

    @property
    def count(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class RoleRef:
    """A role of a job in the batch, and the index of its member shape in the batch's shape list.

    A role may come in several *variants* (``solver.reduce.rails``: one per rail set a rail-aligned role
    could use); variants of one role share ``group`` (the index of the first) and exactly one of
    them is used when the job is placed.
    """

    job_index: int
    role_index: int
    role: Role
    shape: int
    group: int = -1  # index of the role's first variant in ``Normalised.roles``; -1 = itself
    rails: frozenset[int] | None = None  # the rail set this variant's NICs must be on

    @property
    def minimum(self) -> int:
        return self.role.minimum


def largest_node(nodes: Sequence[Node]) -> tuple[int, int, int]:
    """The largest GPU count (in milli), CPU and memory of ``nodes``: what the packing tier measures a
    node's free capacity against."""
    gpus = cpu = memory = 0
    for n in nodes:
        gpus, cpu, memory = max(gpus, len(n.gpus)), max(cpu, n.cpu_milli), max(memory, n.memory_mib)
    return 1000 * gpus, cpu, memory


@dataclass(frozen=True)
class Normalised:
    request: SolveRequest
    classes: tuple[NodeClass, ...]
    roles: tuple[RoleRef, ...]
    shapes: tuple[MemberShape, ...]  # distinct member shapes of the batch, in first-seen order
    conflicts: tuple[tuple[int, int, int], ...]  # (shape, shape, Scope) that may not sit together
    candidate_nodes: int
    shape_rails: tuple[frozenset[int] | None, ...] = ()  # per shape: the rail set it must use
    # The distinct shapes of schedulable nodes no member of the batch fits as they stand (the
    # ``fit_test`` of :func:`normalise`): the model never sees them; explanations still ask whether
    # a relaxed rule would let one in.
    unfit: tuple[NodeShape, ...] = ()
    unfit_names: tuple[str, ...] = ()  # per unfit shape, the first node of that shape (for messages)
    # Per job, the batch positions of the jobs it stands for (``solver.reduce.pools``: a pool of pods
    # stands for several); empty when nothing was pooled.
    pooled_from: tuple[tuple[int, ...], ...] = ()

    @cached_property
    def largest(self) -> tuple[int, int, int]:
        """The inventory's largest node (:func:`largest_node`): the packing tier's rulers, measured
        once per problem — compile reads them, and the model shelf compares them on every request
        that could reuse a model (15 ms a pass at 16,384 nodes)."""
        return largest_node(self.request.inventory.nodes)

    @cached_property
    def pools(self) -> frozenset[int]:
        """Jobs that stand for a pool of pods: the jobs tier counts their members, and the floor
        places their members one by one, at their pods' places in the batch."""
        return frozenset(j for j, batch in enumerate(self.pooled_from) if len(batch) > 1)

    def batch_positions(self, j: int) -> tuple[int, ...]:
        """Where the jobs job ``j`` stands for sit in the batch, in order."""
        return self.pooled_from[j] if self.pooled_from else (j,)

    def group_of(self, r: int) -> int:
        g = self.roles[r].group
        return r if g < 0 else g

    def groups(self) -> Mapping[int, tuple[int, ...]]:
        """Each role (by its first variant) → all its variants (computed once: the floor and the
        explanations ask for it per job)."""
        return self._groups

    @cached_property
    def _groups(self) -> Mapping[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {}
        for r in range(len(self.roles)):
            out.setdefault(self.group_of(r), []).append(r)
        return MappingProxyType({g: tuple(v) for g, v in out.items()})

    def rails_of(self, shape: int) -> frozenset[int] | None:
        return self.shape_rails[shape] if self.shape_rails else None

    @cached_property
    def shapes_json(self) -> tuple[str, ...]:
        """The shapes as JSON: the key of every per-shape cache (shapes hold dicts)."""
        return tuple(m.model_dump_json() for m in self.shapes)

    def supply(self) -> tuple[int, ...]:
        """Per shape, the most members of it the batch could place: no node needs a configuration
        holding more (a lone pod needs only configurations of one member)."""
        out = [0] * len(self.shapes)
        for ref in self.roles:
            out[ref.shape] += ref.role.replicas
        return tuple(out)


def free_devices(node: Node) -> tuple[list, list, int | None, int | None]:
    """The node's usable GPUs and RDMA NICs (healthy, not held), its free CPU and memory.

    GPUs are returned as ``(Gpu, FreeGpu)``: a GPU held whole, or by a share of a *mutex*
    allocation, is gone; a GPU with shares keeps what the shares leave.
    """
    taken_gpus = {g for a in node.allocations for g in a.gpus}
    taken_gpus |= {s.gpu for a in node.allocations if a.mutex for s in a.gpu_shares}
    taken_nics = {n for a in node.allocations for n in a.nics}
    shared_milli: dict[str, int] = defaultdict(int)
    shared_memory: dict[str, int] = defaultdict(int)
    for a in node.allocations:
        for share in a.gpu_shares:
            shared_milli[share.gpu] += share.milli
            shared_memory[share.gpu] += share.memory_mib
    gpus = [
        (
            g,
            FreeGpu(
                model=g.model,
                numa=g.numa,
                milli=1000 - shared_milli.get(g.id, 0),
                memory_mib=g.memory_mib - shared_memory.get(g.id, 0) if g.memory_mib else None,
                idle=g.id not in shared_milli and g.id not in shared_memory,
            ),
        )
        for g in node.gpus
        if g.healthy and g.id not in taken_gpus
    ]
    nics = [n for n in node.nics if n.healthy and n.rdma and n.name not in taken_nics]
    cpu = node.cpu_milli - sum(a.cpu_milli for a in node.allocations) if node.cpu_milli else None
    mem = node.memory_mib - sum(a.memory_mib for a in node.allocations) if node.memory_mib else None
    return gpus, nics, cpu, mem


def _canonical_order(gpus: list, nics: list) -> tuple[list, list]:
    """Order devices so that nodes built alike (same hardware, same free set) list them alike.

    Devices are grouped by the NUMA node and the PCIe switch they hang off; groups sort by what
    they hold, so two nodes whose free devices differ only by *which* of two identical switches
    is busy get the same order (and so the same class). ``gpus`` are ``(Gpu, FreeGpu)`` pairs.
    """
    groups: dict[tuple, list] = defaultdict(list)
    for g, free in gpus:
        groups[(g.numa if g.numa is not None else -1, g.pcie_switch)].append(("g", (g, free)))
    for n in nics:
        groups[(n.numa if n.numa is not None else -1, n.pcie_switch)].append(("n", n))

    def key(kind: str, device: object) -> tuple:
        if kind == "g":
            free = device[1]
            return (kind, free.model, -free.milli, -(free.memory_mib or 0))
        return (kind, "", 0, 0)

    def content(items: list) -> tuple:
        return tuple(sorted(key(kind, d) for kind, d in items))

    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0], content(kv[1]), kv[0][1]))
    out_g = [d for _, items in ordered for kind, d in sorted(items, key=lambda i: key(*i)) if kind == "g"]
    out_n = [d for _, items in ordered for kind, d in items if kind == "n"]
    return out_g, out_n


_DISTANCES: dict[tuple, tuple[tuple[int, ...], ...]] = {}


def distance_matrix(
    switches: tuple[PcieSwitch, ...], devices: tuple[tuple[str, int | None], ...]
) -> tuple[tuple[int, ...], ...]:
    """PCIe distance between every pair of ``devices`` (leaf switch, NUMA) of a node built from
    ``switches``. Memoised on plain tuples (hashing pydantic models per node would cost more than
    the work saved): a cluster has a handful of server types and free-device patterns, so this is
    computed a handful of times, not once per node."""
    key = (tuple((s.id, s.parent, int(s.kind), s.numa) for s in switches), devices)
    found = _DISTANCES.get(key)
    if found is None:
        if len(_DISTANCES) > 8192:
            _DISTANCES.clear()
        tree_only = Node(name="distance", pcie_switches=switches)
        found = tuple(
            tuple(int(pcie_distance(tree_only, sa, sb, na, nb)) for (sb, nb) in devices)
            for (sa, na) in devices
        )
        _DISTANCES[key] = found
    return found


@lru_cache(maxsize=256)
def nvlink_best(gpus: tuple[str, ...], links: tuple[tuple[str, str, int], ...]) -> tuple[int, ...]:
    """Per GPU count k, the most links the weakest pair of some k GPUs of the node has (0 for k < 2,
    or when no k GPUs are all linked). Computed on the hardware, so a node whose strong pairs are
    busy does not call its weak ones strong. Cliques over the distinct link counts: nodes have a
    few dozen GPUs at most, and the answer is cached per NVLink matrix."""
    if not links:
        return ()
    index = {g: i for i, g in enumerate(gpus)}
    best = [0] * (len(gpus) + 1)
    for floor in sorted({n for _, _, n in links}, reverse=True):
        adjacent = [0] * len(gpus)
        for a, b, n in links:
            if n >= floor and a in index and b in index:
                adjacent[index[a]] |= 1 << index[b]
                adjacent[index[b]] |= 1 << index[a]
        size = _largest_clique(adjacent)
        for k in range(2, size + 1):
            best[k] = max(best[k], floor)
    return tuple(best)


def _largest_clique(adjacent: list[int]) -> int:
    """Size of the largest clique of a graph given as neighbour bitmasks (branch and bound)."""
    found = 0

    def grow(size: int, candidates: int) -> None:
        nonlocal found
        if not candidates:
            found = max(found, size)
            return
        if size + candidates.bit_count() <= found:
            return
        while candidates:
            if size + candidates.bit_count() <= found:
                return
            v = candidates.bit_length() - 1
            candidates &= ~(1 << v)
            grow(size + 1, candidates & adjacent[v])

    grow(0, (1 << len(adjacent)) - 1)
    return found


def node_shape(
    node: Node,
    selected_label_keys: frozenset[str],
    separation: Separation | None = None,
    job_of_shape: tuple[int | None, ...] = (),
    rails: bool = True,
) -> tuple[NodeShape, ConcreteNode]:
    """The node's shape and its device table. ``rails``: whether NIC rails matter to the batch (when
    they do not, nodes differing only in which rails are free stay one class)."""
    pairs, nics, cpu, mem = free_devices(node)
    pairs, nics = _canonical_order(pairs, nics)
    gpus = [g for g, _ in pairs]
    groups: dict[str, int] = {}
    devices = tuple((g.pcie_switch, g.numa) for g in gpus) + tuple((n.pcie_switch, n.numa) for n in nics)
    distance = distance_matrix(node.pcie_switches, devices)
    position = {g.id: i for i, g in enumerate(gpus)}
    nvlink = frozenset(
        (min(position[link.gpu_a], position[link.gpu_b]), max(position[link.gpu_a], position[link.gpu_b]))
        for link in node.nvlinks
        if link.gpu_a in position and link.gpu_b in position
    )
    links = tuple(
        sorted(
            (
                min(position[link.gpu_a], position[link.gpu_b]),
                max(position[link.gpu_a], position[link.gpu_b]),
                link.links,
            )
            for link in node.nvlinks
            if link.gpu_a in position and link.gpu_b in position
        )
    )
    shape = NodeShape(
        gpus=tuple(free for _, free in pairs),
        nics=tuple(FreeNic(numa=n.numa, rail=n.rail if rails else None) for n in nics),
        distance=distance,
        nvlink=nvlink,
        cpu_milli=cpu,
        memory_mib=mem,
        labels=tuple(sorted((k, v) for k, v in node.labels.items() if k in selected_label_keys)),
        fully_free=not node.allocations,
        gpu_group=tuple(groups.setdefault(g.pcie_switch, len(groups)) for g in gpus),
        taboo=separation.taboo(node, gpus, job_of_shape) if separation else frozenset(),
        nvlink_links=links,
        nvlink_best=nvlink_best(
            tuple(g.id for g in node.gpus), tuple((lk.gpu_a, lk.gpu_b, lk.links) for lk in node.nvlinks)
        ),
    )
    rank = {g.id: i for i, g in enumerate(node.gpus)} | {n.name: i for i, n in enumerate(node.nics)}
    concrete = ConcreteNode(
        name=node.name,
        rank=rank,
        gpu_ids=tuple(g.id for g in gpus),
        nic_names=tuple(n.name for n in nics),
        gpu_numa=tuple(g.numa for g in gpus),
        nic_numa=tuple(n.numa for n in nics),
    )
    return shape, concrete


_INTERNED: dict[NodeShape, NodeShape] = {}
# Memos of shapes interned in one generation of _INTERNED: emptying it starts a new generation, so
# no node keeps a shape equal to, but not the same object as, a newly interned one.
_GENERATION = [0]
# Shapes by node_key, labels and rails, of this generation: a node's twin's shape and device table.
_BY_KEY: dict[tuple, tuple[NodeShape, ConcreteNode]] = {}
_BY_KEY_MAX = 16_384


def cached_node_shape(node: Node, selected: frozenset[str], rails: bool) -> tuple[NodeShape, ConcreteNode]:
    """:func:`node_shape` where no separation rule makes shapes the batch's own (a node's taboos are
    then none, whatever the batch), remembered per node *object* (the wire layer hands back the same
    Node for an unchanged node, so a scheduler's repeated inventory is normalised once) and per
    :func:`node_key` with the labels selected (a cold inventory of alike nodes is worked out once
    per distinct node: only the node's name is its own)."""
    memo: NodeMemo[tuple[NodeShape, ConcreteNode]] = NodeMemo(
        ("normalise.shape", _GENERATION[0], selected, rails)
    )
    hit = memo.get(node)
    if hit is not None:
        return hit
    # node_shape reads no field node_key leaves out but the name and the labels, which it keys by.
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k in selected)) if selected else ()
    key = (node_key(node), labels, selected, rails)
    twin = _BY_KEY.get(key)
    if twin is None:
        if len(_INTERNED) >= 65_536:
            _INTERNED.clear()
            _BY_KEY.clear()
            _GENERATION[0] += 1
            memo = NodeMemo(("normalise.shape", _GENERATION[0], selected, rails))
        shape, concrete = node_shape(node, selected, rails=rails)
        # Equal shapes become one object, so grouping nodes by shape compares identities, not tuples.
        shape = _INTERNED.setdefault(shape, shape)
        if len(_BY_KEY) >= _BY_KEY_MAX:
            _BY_KEY.clear()
        _BY_KEY[key] = (shape, concrete)
        return memo.put(node, (shape, concrete))
    shape, concrete = twin
    # The twin's device table is this node's too (same ids, same order): only the name differs.
    return memo.put(
        node, (shape, concrete if concrete.name == node.name else replace(concrete, name=node.name))
    )


def _schedulable_shape(
    node: Node, selected: frozenset[str], rails: bool
) -> tuple[NodeShape, ConcreteNode] | None:
    return cached_node_shape(node, selected, rails) if node.schedulable else None


def node_shapes(
    request: SolveRequest,
    selected: frozenset[str],
    separation: Separation,
    owners: tuple[int | None, ...],
    rails: bool,
) -> Callable[[int, Node], tuple[NodeShape, ConcreteNode]]:
    """The shape of the inventory's ``i``-th node, by position and node: not cached when a separation
    rule makes shapes depend on the batch's jobs.

    Without separation rules the shapes (:func:`cached_node_shape`) come from one fold per label
    keys and rails (``solver.domain.nodefold``): it compares the inventory with the one it last saw,
    node object by node object, and looks up only the nodes that changed. A batch placed one job at a time
    (``solver.search.sequence``) normalises its ~500-node inventory once a step, each step binding
    one node, and a lookup per node was a third of each normalise (replay windows, session 13)."""
    if separation.owned:
        return lambda _, node: node_shape(node, selected, separation, owners, rails=rails)
    shapes = schedulable_shapes(request, selected, rails)

    def shape_of(i: int, _: Node) -> tuple[NodeShape, ConcreteNode]:
        found = shapes[i]
        assert found is not None  # asked of schedulable nodes only
        return found

    return shape_of


def schedulable_shapes(
    request: SolveRequest, selected: frozenset[str], rails: bool
) -> list[tuple[NodeShape, ConcreteNode] | None]:
    """Per node of the inventory its :func:`cached_node_shape`, None where it is not schedulable:
    the fold :func:`node_shapes` reads, for a caller with no separation rule that walks every node
    (``solver.search.single``)."""
    fold = fold_for(
        ("normalise.shapes", _GENERATION[0], selected, rails),
        partial(_schedulable_shape, selected=selected, rails=rails),
    )
    return fold(request.inventory.nodes)


def locality_matters(request: SolveRequest) -> tuple[bool, bool]:
    """Does any job of the batch have a fabric rule (leaves matter) or an NVLink-domain rule?"""
    ruled = (Requirement.REQUIRED, Requirement.PREFERRED)
    fabric = any(
        job.locality.mode in ruled or job.role_affinity or any(r.locality.mode in ruled for r in job.roles)
        for job in request.jobs
    )
    domains = any(job.nvlink_domain in ruled for job in request.jobs)
    return fabric, domains


def member_shapes(request: SolveRequest, separation: Separation) -> tuple[list, list, list]:
    """The batch's distinct member shapes, the job owning each (None when shared by all), and the
    roles pointing at them. Members of different jobs with equal shapes are interchangeable inside a
    node — unless a separation rule involves their job, which makes its shapes its own."""
    shape_index: dict[str, int] = {}
    shapes: list[MemberShape] = []
    owners: list[int | None] = []
    roles = []
    for j, job in enumerate(checked(request.jobs)):  # a JSON dump per role (solver.domain.cancel)
        owner = j if j in separation.owned else None
        for r, role in enumerate(job.roles):
            key = role.member.model_dump_json() + ("" if owner is None else job_label(job))
            if key not in shape_index:
                shape_index[key] = len(shapes)
                shapes.append(role.member)
                owners.append(owner)
            roles.append(RoleRef(job_index=j, role_index=r, role=role, shape=shape_index[key]))
    return shapes, owners, roles


def ranked_nodes(request: SolveRequest) -> list[tuple[int, int, Node]]:
    """The nodes with their place in the policy's ``node_order`` and their index in the inventory,
    in the order decode hands out a class's nodes: that place first, then leaf (so a gang fills one
    leaf before the next), then name.
    Nodes the order does not name tie after the named ones, so without an order every node ranks 0
    and the NODE_ORDER tier has nothing to prefer."""
    nodes = request.inventory.nodes
    return [(rank, i, nodes[i]) for rank, i in node_ranks(request)]


def node_ranks(request: SolveRequest) -> list[tuple[int, int]]:
    """:func:`ranked_nodes` without the nodes: (place in the node order, index in the inventory)."""
    nodes, order = request.inventory.nodes, request.policy.node_order
    last = _LAST_RANKS[0]
    if (
        last is not None
        and last[0] is order
        and len(last[1]) == len(nodes)
        # a step replaced a node or two, with the same name and leaf: the ranks stand
        and all(
            a is b or (a.name == b.name and a.leaf == b.leaf) for a, b in zip(last[1], nodes, strict=True)
        )
    ):
        _LAST_RANKS[0] = (order, nodes, last[2])
        return last[2]
    where = (order, tuple((n.name, n.leaf) for n in nodes))
    ranks = _RANKS.get(where)
    if ranks is None:
        order = where[0]
        position = {name: i for i, name in enumerate(order)} if order else {}
        last = len(order)
        # Plain tuples sort without a key function per node; the index keeps nodes out of comparisons.
        keyed = sorted((position.get(n.name, last), n.leaf, n.name, i) for i, n in enumerate(nodes))
        ranks = [(rank, i) for rank, _, _, i in keyed]
        if len(_RANKS) >= 64:
            _RANKS.clear()
        _RANKS[where] = ranks
    _LAST_RANKS[0] = (order, nodes, ranks)
    return ranks


# The order of an inventory's nodes by (node order, names and leaves): a replay's steps and a
# window's orders ask it of the same nodes hundreds of times, one node's allocations changed each.
_RANKS: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], list[tuple[int, int]]] = {}
# The last inventory asked, its node order and ranks: the next step's differs by a node or two.
_LAST_RANKS: list[tuple[tuple[str, ...], tuple[Node, ...], list[tuple[int, int]]] | None] = [None]


# Given the batch's member shapes, a test of whether a node shape could host any of them alone.
FitTest = Callable[[Sequence[MemberShape]], Callable[["NodeShape"], bool]]


def normalise(request: SolveRequest, fit_test: FitTest | None = None) -> Normalised:
    """Group schedulable nodes into classes and the batch's members into shapes.

    With ``fit_test`` (``intranode.hosts_some_member``), nodes no member could sit on alone as they
    stand are left out of the classes, and only their distinct shapes are kept (``unfit``): late in
    a busy cluster's day most nodes are such, and every stage after this one costs per class."""
    separation = Separation.of(request)
    shapes, owners, roles = member_shapes(request, separation)
    fits = fit_test(shapes) if fit_test is not None else None
    selected = frozenset(k for job in request.jobs for r in job.roles for k in r.member.node_selector)
    # Where a node sits only matters to a batch that has rules about where: without them, nodes of
    # one shape under different leaves are one class, and the model stays small.
    by_leaf, by_domain = locality_matters(request)
    by_rails = any(job.rail_aligned in (Requirement.REQUIRED, Requirement.PREFERRED) for job in request.jobs)
    # FILL packing ranks nodes by how used their GPUs are, which the free shape alone does not say.
    by_total = request.policy.packing == Packing.FILL and ObjectiveTier.PACKING in request.policy.objective
    # Per class key, its nodes and their ranks (one lookup per node: this loop walks the cluster).
    by_key: dict[tuple[NodeShape, str, str, int], tuple[list[ConcreteNode], list[int]]] = {}
    unfit: dict[NodeShape, str] = {}  # shape → its first node
    candidates = 0
    owned = tuple(owners)
    fit_of: dict[int, tuple[NodeShape, bool]] = {}  # by shape object: equal shapes are one (interned)
    shape_of = node_shapes(request, selected, separation, owned, by_rails)
    # checked: a node's shape costs about a millisecond cold, so a big inventory is seconds here.
    for rank, i, node in checked(ranked_nodes(request)):
        if not node.schedulable:
            continue
        shape, concrete = shape_of(i, node)
        if fits is not None:
            known = fit_of.get(id(shape))
            if known is None or known[0] is not shape:
                known = fit_of[id(shape)] = (shape, fits(shape))
            if not known[1]:
                unfit.setdefault(shape, node.name)
                continue
        total = sum(1 for g in node.gpus if g.healthy) if by_total else 0
        key = (shape, node.leaf if by_leaf else "", node.nvlink_domain if by_domain else "", total)
        group = by_key.get(key)
        if group is None:
            group = by_key[key] = ([], [])
        group[0].append(concrete)
        group[1].append(rank)
        candidates += 1
    # Class order is deterministic: by the first node's name.
    classes = tuple(
        NodeClass(
            index=i,
            shape=key[0],
            leaf=key[1],
            nvlink_domain=key[2],
            nodes=tuple(nodes),
            ranks=tuple(ranks),
            gpu_total=key[3],
        )
        for i, (key, (nodes, ranks)) in enumerate(sorted(by_key.items(), key=lambda kv: kv[1][0][0].name))
    )
    return Normalised(
        request=request,
        classes=classes,
        roles=tuple(roles),
        shapes=tuple(shapes),
        conflicts=separation.shape_conflicts(owners),
        candidate_nodes=candidates,
        unfit=tuple(unfit),
        unfit_names=tuple(unfit.values()),
    )
