"""Objective tiers. Each is an expression to *maximise* (minimising ones are negated here, once) and
a trivial bound; ``solver.solve`` optimises them lexicographically in the policy's order. A tier may
come in parts (topology: locality, then leaves spanned, then intra-node preferences), each its own
lexicographic step."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from ortools.sat.python import cp_model

from solver.compile.locality import Locality
from solver.compile.order import OrderVars, order_terms
from solver.domain.cancel import checked
from solver.domain.fragmentation import FreeCapacity, Profile, profile, score_loss
from solver.domain.model import Job, MemberShape, ObjectiveTier, Packing, Policy, PriorityMode
from solver.reduce.intranode import Configuration, free_after
from solver.reduce.normalise import NodeShape, Normalised, has_preferences

# The tier that counts jobs started, below the placed-work levels.
JOBS_TIER = "placed_work.jobs"
# STRICT priority's placed-work tiers, one a level: this prefix and the level.
PRIORITY_TIER_PREFIX = "placed_work.priority_"

Configs = dict[int, tuple[Configuration, ...]]
Vars = dict[tuple[int, int], cp_model.IntVar]


Terms = list[tuple[int, cp_model.IntVar]]


@dataclass(frozen=True)
class Tier:
    """An expression to maximise, kept as (coefficient, variable) terms so that it can be built in
    one call (``weighted_sum`` scales; Python ``sum`` over thousands of products does not) and
    evaluated on any solution, e.g. the previous tier's when this one finds nothing in time."""

    tier: ObjectiveTier
    name: str
    terms: tuple[tuple[int, cp_model.IntVar], ...]
    upper: int  # a bound on the expression, reported when the solver found none

    @staticmethod
    def of(tier: ObjectiveTier, name: str, terms: Terms, upper: int, *, minimise: bool = False) -> Tier:
        sign = -1 if minimise else 1
        return Tier(tier, name, tuple((sign * c, v) for c, v in terms if c), upper)

    @property
    def expr(self) -> cp_model.LinearExprT:
        return cp_model.LinearExpr.weighted_sum([v for _, v in self.terms], [c for c, _ in self.terms])

    @cached_property
    def flat(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """The expression as CP-SAT's proto holds it: (variable indices, coefficients, offset), a
        variable named twice summed, a negated literal ``not x`` read as ``1 - x``, zero terms
        dropped, by index (as ``CpModel.maximize`` flattens it). Read once:
        ``maximize`` walks the expression a term at a time through the Python wrapper, 0.1-0.45 s
        a tier at 4,096 nodes x 500 jobs, every time a search is started on it."""
        coefficients: dict[int, int] = {}
        offset = 0
        for c, v in self.terms:
            i = v.index
            if i < 0:  # a negated literal: c * not(x) = c - c * x
                i, offset, c = -i - 1, offset + c, -c
            coefficients[i] = coefficients.get(i, 0) + c
        kept = sorted((i, c) for i, c in coefficients.items() if c)
        return tuple(i for i, _ in kept), tuple(c for _, c in kept), offset

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The terms' variable names, read once: a name is read from the model's C++ side each time,
        and the floor values every tier of every candidate plan (a million reads at 16,384 nodes)."""
        return tuple(v.name for _, v in self.terms)

    def value_of(self, solution: dict[str, int]) -> int:
        get = solution.get
        return sum(c * get(name, 0) for (c, _), name in zip(self.terms, self.names, strict=True))

    @cached_property
    def coefficients(self) -> dict[str, int]:
        """Each variable's coefficient in the tier, by name (a variable named twice: summed)."""
        out: dict[str, int] = {}
        for (c, _), name in zip(self.terms, self.names, strict=True):
            out[name] = out.get(name, 0) + c
        return out

    def value_of_nonzero(self, nonzero: dict[str, int]) -> int:
        """:meth:`value_of` a solution given by its non-zero variables alone: a walk of those, not of
        the tier's terms (200,000 at 16,384 nodes), for the floor to rank plans it may not keep."""
        get = self.coefficients.get
        return sum(get(name, 0) * value for name, value in nonzero.items())


# Per model, the constraint that holds each tier (by name) at a least value, and that value (None:
# let go). One constraint a tier, its lower end moved in place, so that a model can be searched
# again with every hold let go (solver.compile.shelf): OR-Tools' proto cannot take a constraint out.
_holds: weakref.WeakKeyDictionary[cp_model.CpModel, dict[str, tuple[int, int | None]]] = (
    weakref.WeakKeyDictionary()
)


def hold(model: cp_model.CpModel, tier: Tier, value: int) -> None:
    """``model.add(tier.expr >= value)``, as a lexicographic search holds a tier it has settled
    before it searches the next one; a tier held twice keeps the higher value."""
    holds = _holds.setdefault(model, {})
    at, least = holds.get(tier.name, (-1, None))
    least = value if least is None else max(least, value)
    if at < 0:
        indices, coefficients, _ = tier.flat
        at = len(model.proto.constraints)
        linear = model.proto.constraints.add().linear
        linear.vars.extend(indices)
        linear.coeffs.extend(coefficients)
    else:
        linear = model.proto.constraints[at].linear
        linear.domain.clear()
    linear.domain.extend([least - tier.flat[2], cp_model.INT_MAX])
    holds[tier.name] = (at, least)


def release_holds(model: cp_model.CpModel) -> None:
    """Let go of every tier :func:`hold` holds in ``model``: each hold admits every value again
    (presolve drops it), and stays in place for the next search to hold anew."""
    holds = _holds.get(model, {})
    for name, (at, least) in holds.items():
        if least is not None:
            linear = model.proto.constraints[at].linear
            linear.domain.clear()
            linear.domain.extend([cp_model.INT_MIN, cp_model.INT_MAX])
            holds[name] = (at, None)


def holds_in(model: cp_model.CpModel) -> int:
    """How many constraints of ``model`` are :func:`hold`'s."""
    return len(_holds.get(model, {}))


def member_work(shape: MemberShape) -> int:
    """What placing one member is worth before priority, in milli-GPU: 1000 per whole GPU, the
    share's milli for a share, and 1 for a member that asks no GPU compute (still worth placing)."""
    if shape.gpus:
        return 1000 * shape.gpus
    if shape.gpu_share is not None and shape.gpu_share.milli:
        return shape.gpu_share.milli
    return 1


def priority_weight(priority: int) -> int:
    """A job's weight in the WEIGHTED placed-work tier."""
    return priority + 1


def objective_tiers(
    problem: Normalised,
    policy: Policy,
    configs: Configs,
    x: Vars,
    y: Vars,
    s: Vars,
    locality: Locality,
    placed: dict[int, cp_model.IntVar],
    variant: dict[int, cp_model.IntVar],
    order: OrderVars | None = None,
) -> tuple[Tier, ...]:
    tiers: list[Tier] = []
    for name in checked(policy.objective):
        if name == ObjectiveTier.PLACED_WORK:
            tiers.extend(placed_work(problem, policy, y))
            jobs, upper = jobs_started(problem, y, placed)
            if upper > 1:
                # Among plans that place the same work, the one that starts more jobs.
                tiers.append(Tier.of(ObjectiveTier.PLACED_WORK, JOBS_TIER, jobs, upper))
        elif name == ObjectiveTier.TOPOLOGY:
            tiers.extend(topology(problem, s, locality, variant))
        elif name == ObjectiveTier.PACKING and policy.packing == Packing.FILL:
            tiers.extend(fill(problem, policy, configs, x))
        elif name == ObjectiveTier.PACKING:
            tiers.append(packing(problem, policy, configs, x))
        elif name == ObjectiveTier.FRAGMENTATION:
            tiers.append(fragmentation(problem, policy, configs, x))
        elif name == ObjectiveTier.NODE_ORDER:
            terms = order_terms(problem, order or {})
            tiers.append(Tier.of(ObjectiveTier.NODE_ORDER, "node_order", terms, 0, minimise=True))
    return tuple(tiers)


def jobs_started(problem: Normalised, y: Vars, placed: dict[int, cp_model.IntVar]) -> tuple[Terms, int]:
    """Jobs started, as terms and their most: one per placed job, one per placed member of a pool
    (each member of a pool is a pod of the batch)."""
    terms: Terms = [(1, var) for j, var in placed.items() if j not in problem.pools]
    terms += [(1, var) for (r, _), var in y.items() if problem.roles[r].job_index in problem.pools]
    upper = len(placed) - len(problem.pools)
    upper += sum(
        problem.roles[g].role.replicas
        for g in problem.groups()
        if problem.roles[g].job_index in problem.pools
    )
    return terms, upper


def placed_work(problem: Normalised, policy: Policy, y: Vars) -> list[Tier]:
    """GPUs placed, by priority (:func:`priority_levels`): one tier a priority level, highest first,
    under STRICT; one sum weighted by priority + 1 under WEIGHTED. Gangs are all-or-nothing through
    ``gangs.add_gangs``."""
    jobs = problem.request.jobs
    tiers = []
    for name, levels in priority_levels(jobs, policy.priority_mode):

        def weight(r: int, levels: frozenset[int] | None = levels) -> int:
            priority = jobs[problem.roles[r].job_index].priority
            if levels is None:
                return priority_weight(priority) * member_work(problem.roles[r].role.member)
            return member_work(problem.roles[r].role.member) if priority in levels else 0

        # Each role's weight once, not once per class it may use (200,000 member variables at
        # 16,384 nodes, one walk per level); a role of another level weighs nothing here.
        weights = {r: weight(r) for r in range(len(problem.roles))}
        terms = [(w, var) for (r, _), var in y.items() if (w := weights[r])]
        upper = sum(weights[r] * problem.roles[r].role.replicas for r in problem.groups())
        tiers.append(Tier.of(ObjectiveTier.PLACED_WORK, name, terms, upper))
    return tiers


def priority_levels(jobs: Sequence[Job], mode: PriorityMode) -> tuple[tuple[str, frozenset[int] | None], ...]:
    """The placed-work tiers of a batch, highest first: each tier's name and the priorities whose
    work it counts (None: every job's, weighted by priority + 1). STRICT gives each priority level
    of the batch a tier of its own (``placed_work.priority_3``, ...), so that no amount of lower-
    priority work outweighs one GPU of a higher priority; a batch of one level has one tier,
    ``placed_work``, whatever the mode."""
    present = sorted({job.priority for job in jobs}, reverse=True)
    if mode == PriorityMode.WEIGHTED:
        return (("placed_work", None),)
    if len(present) <= 1:
        return (("placed_work", frozenset(present)),)
    return tuple((f"{PRIORITY_TIER_PREFIX}{p}", frozenset((p,))) for p in present)


def is_placed_work(name: str) -> bool:
    """Whether a tier of that name is one of :func:`priority_levels`' (not ``placed_work.jobs``)."""
    return name == "placed_work" or name.startswith(PRIORITY_TIER_PREFIX)


def topology(
    problem: Normalised, s: Vars, locality: Locality, variant: dict[int, cp_model.IntVar]
) -> list[Tier]:
    """Lowest switch tier per gang, then fewest leaves spanned, then rail-aligned roles (PREFERRED
    rail alignment), then members meeting their PREFERRED alignment, NUMA and NVLink rules."""
    parts = []
    if locality.score_upper:
        parts.append(
            Tier.of(
                ObjectiveTier.TOPOLOGY, "topology.locality", list(locality.score_terms), locality.score_upper
            )
        )
    if locality.spans:
        spans = [(1, v) for v in locality.spans.values()]
        parts.append(Tier.of(ObjectiveTier.TOPOLOGY, "topology.leaves_spanned", spans, 0, minimise=True))
    aligned = [
        (member_work(problem.roles[r].role.member) * problem.roles[r].role.replicas, var)
        for r, var in variant.items()
        if problem.roles[r].rails
    ]
    if any(problem.roles[r].rails is None for r in variant):  # some rule is only PREFERRED
        upper = sum(c for c, _ in aligned)
        parts.append(Tier.of(ObjectiveTier.TOPOLOGY, "topology.rails", aligned, upper))
    strict = [(member_work(problem.roles[r].role.member), v) for (r, _), v in s.items()]
    upper = sum(
        member_work(problem.roles[g].role.member) * problem.roles[g].role.replicas
        for g in problem.groups()
        if has_preferences(problem.roles[g].role.member)
    )
    parts.append(Tier.of(ObjectiveTier.TOPOLOGY, "topology.preferences", strict, upper))
    return parts


def packing(problem: Normalised, policy: Policy, configs: Configs, x: Vars) -> Tier:
    """Binpack: touch as few nodes, and as little free capacity, as possible. A node costs one unit
    plus its free GPU compute, CPU and memory, each as a fraction of the inventory's largest node —
    best fit in every dimension, so partly used nodes fill first, whole nodes stay whole, and a
    small pod goes to a small node rather than taking CPU a large node's large pods will need.
    Spread: the opposite."""
    scale = problem.largest
    terms, upper = [], 0
    for cls in problem.classes:
        cost = touch_cost(cls.shape, scale)
        terms.extend((cost, x[cls.index, k]) for k in range(len(configs[cls.index])) if (cls.index, k) in x)
        upper += cost * cls.count
    if policy.packing == Packing.SPREAD:
        return Tier.of(ObjectiveTier.PACKING, "packing.spread", terms, upper)
    return Tier.of(ObjectiveTier.PACKING, "packing.binpack", terms, 0, minimise=True)


PACKING_UNIT = 1000  # the cost of touching a node; each resource adds up to one more unit


def fill(problem: Normalised, policy: Policy, configs: Configs, x: Vars) -> list[Tier]:
    """FILL packing, in two parts: GPU members go to the nodes whose GPUs are most used (least free
    compute per GPU), which closes nodes up and keeps whole ones whole; then CPU-only members go to
    the node with the most CPU to spare beyond what its free GPUs will want at the workload's CPU
    per GPU. A CPU-only pod placed by free CPU alone takes the CPU a GPU node's free GPUs needed and
    strands them. As a tie-break below FGD's measure on the Alibaba trace it was 0.1 point above
    FGD's random node rank on seeds 42-51 but level on 52-61: no gain shown (bench/RESULTS-replay.md)."""
    cpu_per_milli = cpu_per_gpu_milli(problem, policy)
    uses_gpu = tuple(m.gpus > 0 or m.gpu_share is not None for m in problem.shapes)
    largest_cpu = problem.largest[1]
    gpu_terms: Terms = []
    cpu_terms: Terms = []
    cpu_upper = 0
    for cls in problem.classes:
        best = 0
        for k, config in enumerate(configs[cls.index]):
            if (cls.index, k) not in x:
                continue
            gpu_cost, cpu_spare = fill_values(
                cls.shape, cls.gpu_total, config, uses_gpu, cpu_per_milli, largest_cpu
            )
            gpu_terms.append((gpu_cost, x[cls.index, k]))
            cpu_terms.append((cpu_spare, x[cls.index, k]))
            best = max(best, cpu_spare)
        cpu_upper += best * cls.count
    return [
        Tier.of(ObjectiveTier.PACKING, "packing.fill_gpus", gpu_terms, 0, minimise=True),
        Tier.of(ObjectiveTier.PACKING, "packing.cpu_spare", cpu_terms, cpu_upper),
    ]


def fill_values(
    node: NodeShape,
    gpu_total: int,
    config: Configuration,
    uses_gpu: Sequence[bool],
    cpu_per_milli: float,
    largest_cpu: int,
) -> tuple[int, int]:
    """A node's FILL terms (before the sign) for taking ``config``: its free compute per healthy GPU
    times the GPU members it takes, and its CPU to spare beyond what its free GPUs will want times
    the CPU-only members. One place for the model (:func:`fill`) and the one-pod enumerator
    (``solver.search.single``)."""
    free = sum(g.milli for g in node.gpus)
    free_per_gpu = round(free / gpu_total) if gpu_total else 1000
    cpu = node.cpu_milli if node.cpu_milli is not None else largest_cpu
    spare = cpu - round(cpu_per_milli * free)
    gpu_members = sum(n for n, gpu in zip(config.counts, uses_gpu, strict=True) if gpu)
    return free_per_gpu * gpu_members, spare * (sum(config.counts) - gpu_members)


def cpu_per_gpu_milli(problem: Normalised, policy: Policy) -> float:
    """The CPU the workload asks per milli-GPU: from the policy's workload profile, weighted by
    popularity, or else from the batch's own members."""
    return cpu_per_gpu_milli_of(policy, [(ref.role.replicas, ref.role.member) for ref in problem.roles])


def cpu_per_gpu_milli_of(policy: Policy, members: Sequence[tuple[int, MemberShape]]) -> float:
    """:func:`cpu_per_gpu_milli` of a batch given as (replicas, member) per role."""
    if policy.workload:
        shapes = [(w.popularity, w.cpu_milli, w.gpus * 1000 + w.milli) for w in policy.workload]
    else:
        shapes = [(replicas, member.cpu_milli, member_work(member)) for replicas, member in members]
    gpu = sum(p * milli for p, _, milli in shapes if milli > 1)
    return sum(p * cpu for p, cpu, milli in shapes if milli > 1) / gpu if gpu else 0.0


@lru_cache(maxsize=65_536)
def touch_cost(node: NodeShape, scale: tuple[int, int, int]) -> int:
    """What placing anything on a node of this shape costs the packing tier (binpack minimises the
    sum over the nodes touched, spread maximises it); ``scale``: ``Normalised.largest``."""
    gpus, cpu, memory = scale
    cost = PACKING_UNIT
    gpu_free = sum(g.milli for g in node.gpus)
    for free, largest in ((gpu_free, gpus), (node.cpu_milli, cpu), (node.memory_mib, memory)):
        if largest:  # a resource no node tracks does not count; one this node does not track counts whole
            cost += PACKING_UNIT if free is None else PACKING_UNIT * min(free, largest) // largest
    return cost


def fragmentation(problem: Normalised, policy: Policy, configs: Configs, x: Vars) -> Tier:
    """FGD's fragmentation of the free capacity left behind, against the workload profile: each node
    that takes configuration k changes its fragmentation by a known amount (the witness says which
    GPUs the members take; the counts say how much CPU and memory), so the tier is linear in ``x``.
    Counted in FGD's score points per node touched (``score_loss``), which is what FGD ranks by."""
    workload = profile(policy.workload, (ref.role.member for ref in problem.roles))
    terms, upper = [], 0
    for cls in problem.classes:
        deltas = fragmentation_deltas(cls.shape, configs[cls.index], problem.shapes, workload)
        terms.extend((delta, x[cls.index, k]) for k, delta in enumerate(deltas) if (cls.index, k) in x)
        # A placement can also *lower* fragmentation (negative points): at best every node of the
        # class takes its most reducing configuration, or stays as it is.
        upper += cls.count * max((-d for d in deltas), default=0)
    return Tier.of(ObjectiveTier.FRAGMENTATION, "fragmentation", terms, upper, minimise=True)


_DELTAS: dict[tuple[int, int], tuple[tuple[Configuration, ...], Profile, tuple[int, ...]]] = {}


def fragmentation_deltas(
    node: NodeShape, configs: tuple[Configuration, ...], shapes: Sequence[MemberShape], workload: Profile
) -> tuple[int, ...]:
    """Per configuration, how much a node of this shape gains in fragmentation by taking it. Kept per
    configurations *object* (``configurations_for`` hands back the same one for the same node shape
    and member shapes), so a scheduler's steady stream of similar requests computes each once."""
    key = (id(configs), id(workload))
    hit = _DELTAS.get(key)
    if hit is not None and hit[0] is configs and hit[1] is workload:
        return hit[2]
    before = workload.fragmentation(capacity_after(node))

    def loss(config: Configuration) -> int:
        return score_loss(workload.fragmentation(capacity_after(node, config, shapes)) - before)

    deltas = tuple(0 if config.empty else loss(config) for config in configs)
    if len(_DELTAS) >= 65_536:
        _DELTAS.clear()
    _DELTAS[key] = (configs, workload, deltas)
    return deltas


def capacity_after(
    node: NodeShape, config: Configuration | None = None, shapes: Sequence[MemberShape] = ()
) -> FreeCapacity:
    """What a node of this shape has left, as the fragmentation measure sees it, once ``config``'s
    members sit on it (as it is now without one)."""
    free = free_after(node, config) if config is not None else [g.milli for g in node.gpus]
    counts = config.counts if config is not None else ()
    cpu, memory = node.cpu_milli, node.memory_mib
    if cpu is not None:
        cpu -= sum(n * shapes[i].cpu_milli for i, n in enumerate(counts))
    if memory is not None:
        memory -= sum(n * shapes[i].memory_mib for i, n in enumerate(counts))
    return FreeCapacity.of(zip((g.model for g in node.gpus), free, strict=True), cpu, memory)
