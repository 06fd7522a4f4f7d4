"""Switch types for a job that has to wait: no room for it now, typed at submit for a later start.

Slurm 22.05 keeps the GRES types a job was submitted with (a pending job cannot be re-typed:
docs/slurm.md), so the hook has one chance to steer a job, at submit. A job with no room then used to
go to Slurm's queue untyped, and when it started, on a node and GPUs of Slurm's choosing, a GPU could
sit behind another switch than its NIC and a 2- or 4-GPU member straddle a node's NVLink halves — on
a cluster where jobs wait for room (the usual case) most jobs. Typed now, for a node nobody knows
yet, each GPU stays behind its NIC's switch on *any* node Slurm chooses; the price is that the job
waits for those switch groups rather than for any GPUs.

The member's signature (GRES type → count, NICs typed as their GPUs) is chosen from every node the
job may land on (schedulable, GPUs enough, labels, not excluded):

1. valid on all of them — each node has those types with as many devices;
2. inside one strongest NVLink group (an NVLink half) on as many of them as possible, for 2+ GPUs;
3. on as few switch groups as possible: each must be free on one node at once;
4. the soonest free, when the running jobs' ends are known (:mod:`adapters.slurm.running`): the time
   at which some node has the signature's GPUs free after the jobs already waiting typed for the
   same groups (:data:`LATER_TAG` in their comment) — each node offers a slot each time another
   multiple of the counts frees there, the jobs ahead take the soonest — so a group held by long jobs
   is not chosen because it looks no busier now than one freeing in a minute. Untyped jobs waiting
   ahead (:func:`claims_ahead`) take their GPUs first: each the nodes where its GPUs free soonest and
   there a node's lowest free indices, as Slurm gives an untyped request — so a group whose GPUs free
   only on the nodes whole-node jobs ahead wait for is not chosen for being free there soonest;
5. the least pressed: the largest share, over the types used, of that type's GPUs in use now, asked
   by jobs already waiting typed or by this one, so waiting jobs spread over the switch groups
   instead of queueing on the first.

By default only one-node jobs that ask one NIC per GPU are typed so; gangs too with ``gangs``
(``--later-gangs``), their start being when as many nodes as they have members each offer a slot.
Typing every waiting job — GPU-only ones for their NVLink half, gangs too — was tried first on the
churn bench (`bench.slurm_compare --churn 420`, 64 nodes, seed 1, session 27, before rule 4): 0 of
689 pairs off-switch, but 304 jobs started in the window against 324 untyped, 8 gangs left pending
with enough GPUs free in total, and no fewer NVLink halves straddled (32 of 171 against 24 of 180):
a gang typed so waits until the same groups are free on all its nodes at once, and a GPU-only job
gains only what the NVLink preference gives. With rule 4, gangs typed (session 29, seeds 1-3) cost
about one job more in the window than one-node jobs alone, for 0 pairs off-switch instead of the
gangs' 32 (bench/RESULTS-slurm.md "Session 29"). Also left untyped:
whole nodes (nothing to keep together), a NIC count other than one per GPU, a layout too wide to
enumerate, no type common to all the nodes: None, the job goes as submitted.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.slurm.fastplan import strongest_nvlink_groups
from adapters.slurm.inventory import DeviceMap, SlurmInventory
from adapters.slurm.jobdesc import JobSpec
from adapters.slurm.pending import PendingJob
from adapters.slurm.plan import Signature, format_signature
from solver.domain.model import NicMode, Node

LATER_TAG = "topoplace/later"
MAX_TYPES = 10  # a node with more GPU switch groups is not enumerated (3^10 signatures)
# Slurm's EndTime is a job's time limit, not its real end: start estimates closer than this are the
# same to the choice, and the pressure (rule 5) spreads such jobs over the groups.
START_GRAIN_S = 30.0
# A GPU in use by no job the agent has read (a pending plan's reservation, a job started since the
# last read) is counted as freeing this far ahead.
UNKNOWN_END_S = 300.0
# Untyped jobs ahead followed by :func:`claims_ahead`, queue order: each costs a pass over the nodes in
# the agent's refresh (1,024 nodes and 32 jobs: 10-13 ms a refresh, half of it reading when each GPU
# frees); the jobs behind these would claim later still.
MAX_AHEAD = 32
_LATER = re.compile(rf"{re.escape(LATER_TAG)} id=\S+ n=(\d+) (\S+)")


@dataclass(frozen=True)
class Layout:
    """One node's devices as Slurm types them: GPUs and NICs per GRES type, and which types have all
    their GPUs inside one strongest-NVLink group (type → that group's number)."""

    gpus: Mapping[str, int]
    nics: Mapping[str, int]
    strong: Mapping[str, int]


def layout(node: Node, type_of: Mapping[str, str]) -> Layout:
    group_of = {g: i for i, group in enumerate(strongest_nvlink_groups(node)) for g in group}
    groups: dict[str, set[int]] = {}
    for gpu in node.gpus:
        if gpu.id in type_of:
            groups.setdefault(type_of[gpu.id], set()).add(group_of[gpu.id])
    return Layout(
        gpus=Counter(type_of[g.id] for g in node.gpus if g.healthy and g.id in type_of),
        nics=Counter(type_of[n.name] for n in node.nics if n.healthy and n.name in type_of),
        strong={t: next(iter(gs)) for t, gs in groups.items() if len(gs) == 1 and node.nvlinks},
    )


def _candidates(shape: Layout, gpus: int) -> list[dict[str, int]]:
    """Every way to take ``gpus`` GPUs from the layout's types (counts per type)."""
    types = sorted(shape.gpus)
    if len(types) > MAX_TYPES:
        return []
    out = []
    for counts in itertools.product(*(range(shape.gpus[t] + 1) for t in types)):
        if sum(counts) == gpus:
            out.append({t: c for t, c in zip(types, counts, strict=True) if c})
    return out


def gpus_by_type(signature: Signature, members: int) -> Counter[str]:
    """GPUs per GRES type that ``members`` members of ``signature`` take."""
    return Counter({gtype: count * members for name, gtype, count in signature if name == "gpu"})


def waiting_demand(comments: Iterable[str]) -> Counter[str]:
    """GPUs per GRES type asked by jobs waiting with a later-start signature (their comments). A
    comment is the user's text too: an item that does not read as ``name:type:count`` is skipped,
    never an error (this runs in the agent's refresh, which a raise would stop)."""
    demand: Counter[str] = Counter()
    for comment in comments:
        for members, text in _LATER.findall(comment):
            items = [item.split(":") for item in text.split(",")]
            signature = tuple((p[0], p[1], int(p[2])) for p in items if len(p) == 3 and p[2].isdigit())
            demand.update(gpus_by_type(signature, int(members)))
    return demand


def later_comment(plan_id: str, members: int, signature: Signature) -> str:
    return f"{LATER_TAG} id={plan_id} n={members} {format_signature(signature)}"


def _eligible(inventory: SlurmInventory, spec: JobSpec) -> list[Node]:
    """Nodes the job may land on. (A job naming a GPU model is not typed for later: the agent keeps
    its model's node-feature rewrite, so models are not filtered here.)"""
    member = spec.job.roles[0].member
    return [
        n
        for n in inventory.inventory.nodes
        if n.schedulable  # down or drained: Slurm starts nothing there
        and n.name not in spec.excluded
        and n.name in inventory.device_maps
        and all(n.labels.get(k) == v for k, v in member.node_selector.items())
        and len(n.gpus) >= member.gpus
    ]


def index_frees(
    node: Node, device_map: DeviceMap, held: Mapping[int, float] | None, promised: bool, now: float
) -> list[float]:
    """When each GPU of the node (by GRES index) is free: ``-inf`` free now, its holder's end (or
    :data:`UNKNOWN_END_S` ahead when unknown, or the node is promised to a job ahead), ``inf`` for a
    broken GPU."""
    in_use = {g for a in node.allocations for g in a.gpus}
    broken = {g.id for g in node.gpus if not g.healthy}
    unknown = now + UNKNOWN_END_S
    out = []
    for idx, gpu in enumerate(device_map.gpu_by_idx):
        if gpu in broken:
            out.append(math.inf)
        elif gpu not in in_use and not promised:
            out.append(-math.inf)
        else:
            out.append(unknown if held is None else held.get(idx, unknown))
    return out


@dataclass(frozen=True)
class Ahead:
    """An untyped job waiting ahead in Slurm's queue: its nodes, GPUs a node, and how long it holds
    them once started (its time limit)."""

    nodes: int
    gpus: int
    hold_s: float


def untyped_ahead(jobs: Iterable[PendingJob]) -> list[Ahead]:
    """The eligible pending jobs Slurm will fill with a node's lowest free GPUs, queue order: asking
    ``gres:gpu:N`` untyped, with no plan (a plan's devices are held already) and no later-start type
    (counted by type: :func:`waiting_demand`)."""
    out = []
    for job in jobs:
        gpus = job.gpus_per_node
        if job.eligible and gpus and job.plan is None and LATER_TAG not in job.comment:
            out.append(Ahead(nodes=job.nodes, gpus=gpus, hold_s=job.time_limit_s))
    return out


def claims_ahead(
    inventory: SlurmInventory,
    ends: Mapping[str, Mapping[int, float]],
    ahead: Sequence[Ahead],
    now: float,
) -> dict[str, dict[int, float]]:
    """Node → GRES index → when the untyped job ahead that takes that GPU ends: what rule 4 counts
    before a typed job. Each job in queue order (the first :data:`MAX_AHEAD`) starts on the nodes
    where its GPUs a node are free soonest and takes there the lowest indices free by then, as
    Slurm's backfill reserves for it and fills an untyped request. On a cluster whose long-running
    jobs hold the low indices (Slurm's own first choice), the nodes where a low group can free are
    those a whole-node job ahead waits for: on the churn bench (64 nodes, seed 2) two jobs typed for
    ``sw0`` waited behind whole-node gangs to the window's end, where typed GRES alone started them
    at once (bench/RESULTS-slurm.md, sessions 35 and 38). Backfill may still start a short job
    before such a claim; the choice is among groups, and a claimed one is the likelier to wait."""
    frees: dict[str, list[float]] = {
        node.name: index_frees(
            node,
            inventory.device_maps[node.name],
            ends.get(node.name, {}),
            False,  # backfill's promises are these jobs' own claims, found again here
            now,
        )
        for node in inventory.inventory.nodes
        if node.schedulable and node.name in inventory.device_maps
    }
    ordered = {name: sorted(times) for name, times in frees.items()}  # kept sorted: a job reads one rank
    claims: dict[str, dict[int, float]] = {}
    for job in ahead[:MAX_AHEAD]:
        rank = job.gpus - 1
        starts = [(times[rank], name) for name, times in ordered.items() if len(times) > rank]
        chosen = heapq.nsmallest(job.nodes, starts)
        if len(chosen) < job.nodes or chosen[-1][0] == math.inf:
            continue  # never fits: it claims nothing
        start = max(chosen[-1][0], now)
        for _, name in chosen:
            times = frees[name]
            taken = [idx for idx, t in enumerate(times) if t <= start][: job.gpus]
            for idx in taken:
                times[idx] = claims.setdefault(name, {})[idx] = start + job.hold_s
            ordered[name] = sorted(times)
    return claims


@dataclass(frozen=True)
class NodeView:
    """One node as rules 2-5 see it: its layout, GPUs in use per type, and when each GPU of a type
    frees (epoch seconds, soonest first; ``-inf``: free now)."""

    layout: Layout
    used: Counter[str]
    frees: Mapping[str, tuple[float, ...]]
    _slots: dict[tuple[tuple[str, int], ...], tuple[float, ...]] = field(default_factory=dict, compare=False)

    def slots(self, counts: tuple[tuple[str, int], ...]) -> tuple[float, ...]:
        """When this node can start one more member of ``counts`` (type → GPUs), each time another
        multiple of the counts has freed here, soonest first."""
        kept = self._slots.get(counts)
        if kept is None:
            out, turn = [], 1
            while all(turn * c <= len(self.frees.get(t, ())) for t, c in counts):
                out.append(max(self.frees[t][turn * c - 1] for t, c in counts))
                turn += 1
            kept = self._slots[counts] = tuple(out)
        return kept


@dataclass
class NodeViews:
    """Each node's :class:`NodeView`, kept from submit to submit. Deriving them is a pass over every
    GPU of every node the job may land on — 120-150 ms a submit at 1,024 nodes (session 29's
    ``bench.slurm_compare --hook-cost``), in the hook's 50 ms. The agent's nodes stay the same
    objects from read to read while unchanged (:mod:`adapters.slurm.inventory` caches them), so a
    view is made again only when its node object, its device map, its running jobs' ends or a
    backfill promise changed. (The agent's refresh thread and its submits may both make views: a
    race makes one twice, each whole.)"""

    _views: dict[
        str, tuple[Node, DeviceMap, Mapping[int, float] | None, bool, Mapping[int, float], NodeView]
    ] = field(default_factory=dict)
    # (the node's devices, their types) → layout: nodes of one kind share it, so a kind's NVLink
    # groups are found once, not once per node, and rules 2-3 look at each kind once. By value (a
    # node's device tuples are new whenever the node is read changed), so it holds one per kind.
    _layouts: dict[tuple[object, ...], Layout] = field(default_factory=dict)
    # Node name → (its device tuples and device map, their layout): a node changed by a plan or a
    # read keeps its device tuples (a copy with other allocations), and hashing every device of it
    # again was most of re-making its view (session 30 profile). Held, so identity is safe.
    _layout_of: dict[str, tuple[object, object, object, DeviceMap, Layout]] = field(default_factory=dict)

    def warm(
        self,
        inventory: SlurmInventory,
        ends: Mapping[str, Mapping[int, float]],
        now: float,
        claims: Mapping[str, Mapping[int, float]] | None = None,
    ) -> None:
        """Make every node's view ahead of the submits (the agent's refresh thread, after a read):
        a submit then re-derives only the nodes its own plans changed since."""
        claims = claims or {}
        for node in inventory.inventory.nodes:
            if node.name in inventory.device_maps:
                self.view(
                    node,
                    inventory.device_maps[node.name],
                    ends.get(node.name, {}),
                    False,
                    now,
                    claims.get(node.name),
                )

    def _layout(self, node: Node, device_map: DeviceMap) -> Layout:
        same = self._layout_of.get(node.name)
        if (
            same is not None
            and same[0] is node.gpus
            and same[1] is node.nics
            and same[2] is node.nvlinks
            and same[3] is device_map
        ):
            return same[4]
        key = (node.gpus, node.nics, node.nvlinks, tuple(device_map.type_of.items()))
        kept = self._layouts.get(key)
        if kept is None:
            kept = self._layouts[key] = layout(node, device_map.type_of)
        self._layout_of[node.name] = (node.gpus, node.nics, node.nvlinks, device_map, kept)
        return kept

    def view(
        self,
        node: Node,
        device_map: DeviceMap,
        held: Mapping[int, float] | None,
        promised: bool,
        now: float,
        claimed: Mapping[int, float] | None = None,
    ) -> NodeView:
        """``held``: GRES index → when its job ends (None: the ends were not read; rule 4 is then
        skipped). A GPU in use by no job read frees :data:`UNKNOWN_END_S` after the view was made.
        ``claimed``: GRES index → when an untyped job ahead that will take it ends
        (:func:`claims_ahead`): the GPU frees for this job then."""
        claimed = claimed or {}
        kept = self._views.get(node.name)
        if (
            kept is not None
            and kept[0] is node
            and kept[1] is device_map
            and kept[3] == promised
            and (kept[2] is held or kept[2] == held)
            and (kept[4] is claimed or kept[4] == claimed)
        ):
            return kept[5]
        shape = self._layout(node, device_map)
        ends = index_frees(node, device_map, held, promised, now)
        frees: dict[str, list[float]] = {}
        for idx, gpu in enumerate(device_map.gpu_by_idx):
            if ends[idx] < math.inf or idx in claimed:
                frees.setdefault(device_map.type_of.get(gpu, ""), []).append(claimed.get(idx, ends[idx]))
        in_use = {g for a in node.allocations for g in a.gpus}
        made = NodeView(
            layout=shape,
            used=Counter(device_map.type_of.get(g, "") for g in in_use),
            frees={t: tuple(sorted(times)) for t, times in frees.items()},
        )
        self._views[node.name] = (node, device_map, held, promised, claimed, made)
        return made


def later_signature(
    spec: JobSpec,
    inventory: SlurmInventory,
    waiting: Mapping[str, int] = Counter(),
    ends: Mapping[str, Mapping[int, float]] | None = None,
    now: float = 0.0,
    promised: frozenset[str] = frozenset(),
    views: NodeViews | None = None,
    gangs: bool = False,
    claims: Mapping[str, Mapping[int, float]] | None = None,
) -> Signature | None:
    """The switch-typed signature of one member for a start on whichever node Slurm picks later, or
    None (see the module's docstring). ``ends``: node → GPU GRES index → when its holder ends (epoch
    seconds, :meth:`adapters.slurm.running.RunningJobs.ends`); without it rule 4 is skipped.
    ``promised``: nodes backfill has promised to a job ahead — their free GPUs are that job's, not
    free for this one (counted as freeing in :data:`UNKNOWN_END_S`). ``views``: kept between calls
    (the agent's), else made for this one. ``gangs``: a job of several nodes is typed too (its
    members on distinct nodes, each with the signature). ``claims``: GPUs untyped jobs ahead will
    take (:func:`claims_ahead`), counted as freeing when they end."""
    member = spec.job.roles[0].member
    nic_mode = member.nics.mode
    with_nics = nic_mode == NicMode.PER_GPU or (
        nic_mode == NicMode.PER_MEMBER and member.nics.count == member.gpus
    )
    if nic_mode == NicMode.PER_MEMBER and not with_nics and member.nics.count:
        return None
    if not with_nics or (spec.nodes > 1 and not gangs):
        return None  # see the module's docstring: measured to cost more starts than it kept together
    nodes = _eligible(inventory, spec)
    if not nodes:
        return None
    views = views if views is not None else NodeViews()
    seen = [
        views.view(
            node,
            inventory.device_maps[node.name],
            ends.get(node.name, {}) if ends is not None else None,
            node.name in promised,
            now,
            claims.get(node.name) if claims is not None and ends is not None else None,
        )
        for node in nodes
    ]
    weights: Counter[int] = Counter(id(v.layout) for v in seen)  # nodes per layout
    by_id = {id(v.layout): v.layout for v in seen}
    layouts = [(by_id[key], weight) for key, weight in weights.items()]
    used: dict[str, int] = {}  # GPUs in use per type, summed for the types a candidate asks

    def in_use(gtype: str) -> int:
        if gtype not in used:
            used[gtype] = sum(v.used.get(gtype, 0) for v in seen)
        return used[gtype]

    capacity: Counter[str] = Counter()
    for shape, weight in layouts:
        capacity.update({t: c * weight for t, c in shape.gpus.items()})

    def fits(counts: dict[str, int], shape: Layout) -> bool:
        return all(
            shape.gpus.get(t, 0) >= c and (not with_nics or shape.nics.get(t, 0) >= c)
            for t, c in counts.items()
        )

    def start(counts: dict[str, int]) -> float:
        """Grains until some node has these GPUs free for this job, after the jobs waiting for its
        types: each node offers a slot each time another multiple of the counts has freed there, and
        the jobs ahead (in this job's size) take the soonest slots. 0 without ends."""
        if ends is None:
            return 0
        key = tuple(sorted(counts.items()))
        ahead = max(math.ceil(waiting.get(t, 0) / c) for t, c in counts.items())
        if spec.nodes == 1:
            slots = itertools.chain.from_iterable(v.slots(key) for v in seen)
        else:  # a gang: one member a node, so a node's first slot only
            slots = (v.slots(key)[0] for v in seen if v.slots(key))
        soonest = heapq.nsmallest(ahead + spec.nodes, slots)
        if ahead + spec.nodes > len(soonest):
            return math.inf
        return math.ceil(max(0.0, soonest[-1] - now) / START_GRAIN_S)

    def shape_cost(counts: dict[str, int]) -> tuple[int, int]:
        """Rules 2 and 3: nodes where it straddles NVLink groups, switch groups it needs."""
        split = sum(
            weight
            for shape, weight in layouts
            if member.gpus > 1 and len({shape.strong.get(t, -1 - i) for i, t in enumerate(counts)}) > 1
        )
        return split, len(counts)

    def pressure(counts: dict[str, int]) -> tuple[float, float, tuple[str, ...]]:
        pressed = [(in_use(t) + waiting.get(t, 0) + c) / capacity[t] for t, c in counts.items()]
        return max(pressed), sum(pressed), tuple(sorted(counts))

    if all(
        sum(s.gpus.values()) == member.gpus and (not with_nics or sum(s.nics.values()) == member.gpus)
        for s, _ in layouts
    ):
        return None  # whole nodes: Slurm's choice is the node's every device, nothing to keep together
    valid = [c for c in _candidates(layouts[0][0], member.gpus) if all(fits(c, s) for s, _ in layouts)]
    if not valid:
        return None
    # Rule 4 only among the signatures that rules 2-3 keep: it is the costly one (a pass over nodes).
    fewest = min(map(shape_cost, valid))
    best = min((c for c in valid if shape_cost(c) == fewest), key=lambda c: (start(c), *pressure(c)))
    items = [("gpu", t, c) for t, c in best.items()]
    if with_nics:
        items += [("nic", t, c) for t, c in best.items()]
    return tuple(sorted(items))
