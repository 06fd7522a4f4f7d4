"""A greedy first answer, in the model's own variables, and the completion of any answer's
auxiliary variables from its placement.

Jobs go one at a time, highest priority and largest first; a job with locality rules tries the
domains of its rules from the lowest tier up (best fit first: the domain with the least free room
that holds it); each member goes to a node that already holds work if one can take it (binpack),
else to a fresh node. A node's state is its configuration:
adding a member of shape s to a node in configuration k is possible exactly when k + s is another
configuration of the class. Nodes of a class in the same configuration are interchangeable, so a
class is a counter of configurations. Jobs with a REQUIRED locality rule are left to the solver.

The greedy answer only has to be good, not optimal; :func:`complete` makes it (and every tier's
answer) consistent, so that it is a feasible hint, a fallback when the search finds nothing in
time, and a truthful basis for reporting the tiers nobody had time to search.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from itertools import chain, islice

from ortools.sat.python import cp_model

from solver.compile import Compiled
from solver.compile.locality import NVLINK, domains_at, inside_one, place_of
from solver.compile.objective import JOBS_TIER, PRIORITY_TIER_PREFIX, Tier, is_placed_work
from solver.compile.order import order_values
from solver.domain import cancel as cancellation
from solver.domain.cancel import OutOfBudget, bounded
from solver.domain.fabric import Fabric
from solver.reduce.normalise import Normalised


class Floor:
    """What every greedy pass over one compiled problem shares, computed once: the configuration
    index of each class, the classes each role variant may use, each job's roles and the scopes to
    try it in. The portfolio runs the greedy several times; none of this depends on the order."""

    def __init__(self, problem: Normalised, compiled: Compiled) -> None:
        self.problem, self.compiled = problem, compiled
        # Of configurations with the same counts, the first (a lone share's other GPUs come after
        # its fullest, packing._share_elsewhere): built last to first so the first one stays.
        self.index = {
            c: {k.counts: i for i, k in reversed(list(enumerate(cfg)))} for c, cfg in compiled.configs.items()
        }
        hosts: dict[int, list[int]] = defaultdict(list)
        for r, c in compiled.y:
            hosts[r].append(c)
        self.hosts = {r: tuple(cs) for r, cs in hosts.items()}
        self.host_sets = {r: frozenset(cs) for r, cs in self.hosts.items()}
        # Role variants that may use the same classes share one queue of them (a handful of sets).
        kinds: dict[tuple[int, ...], int] = {}
        self.host_kind = {r: kinds.setdefault(cs, len(kinds)) for r, cs in self.hosts.items()}
        # Members in each configuration, and the configuration one more member of a shape makes
        # (filled on demand): the greedy asks these of every node state for every member it places.
        self.size = {c: tuple(sum(k.counts) for k in cfg) for c, cfg in compiled.configs.items()}
        self._grown: dict[tuple[int, int, int], int | None] = {}
        self._headroom: dict[tuple[int, int, int], int] = {}
        self._rooms: dict[frozenset[int], int] = {}
        self._sorted: dict[tuple[str, int], list[set[int]]] = {}
        self.roles = roles_by_job(problem)
        self.fabric = Fabric.of(problem.request.inventory)
        self._scopes: dict[int, list[set[int] | None]] = {}
        # By the set's id: every set of ``_scopes`` lives as long as the floor, and jobs without a
        # REQUIRED rule share the domains' own sets.
        self._level_of_scope: dict[int, int] = {}
        self._domains: dict[tuple[str, int], dict[str, set[int]]] = {}
        self._levels: dict[frozenset[str], int] = {}

    def scopes(self, j: int) -> list[set[int] | None]:
        """The sets of classes to try job ``j`` in, in order (None = anywhere). Every set lies
        inside one domain of each REQUIRED rule at its hard level, so a plan the floor makes breaks
        no REQUIRED rule of place; first come the domains of every rule's levels, lowest first (the
        one with the least free GPUs first), then the REQUIRED rules' domains themselves, then
        anywhere if no rule is REQUIRED."""
        if j in self._scopes:
            return self._scopes[j]
        rules = [rule for rule in self.compiled.locality.rules if rule.job == j]
        hard: list[set[int]] | None = None  # None: no REQUIRED rule bounds the job
        for rule in rules:
            for level, is_hard in rule.levels(self.fabric):
                if is_hard:
                    found = list(self.domains(rule.partition, level).values())
                    hard = found if hard is None else [a & b for a in hard for b in found if a & b]

        base: list[set[int] | None] = [None] if hard is None else sorted(hard, key=self.order_key)
        # The base sets are disjoint (each a domain of every hard rule at once): a domain meets the
        # ones its classes fall in, found through each class's base set rather than by trying all.
        base_of = {c: i for i, b in enumerate(base) if b is not None for c in b}
        out: list[set[int] | None] = []
        for rule in rules:
            for level, _ in rule.levels(self.fabric):
                for domain in self.sorted_domains(rule.partition, level):
                    if hard is None:
                        out.append(domain)
                        continue
                    for i in sorted({base_of[c] for c in domain if c in base_of}):
                        b = base[i]
                        assert b is not None
                        out.append(domain & b)
        out.extend(base)
        seen: set[frozenset[int] | None] = set()
        unique = []  # the same set twice would only repeat a failed try
        for scope in out:
            key = None if scope is None else frozenset(scope)
            if key not in seen:
                seen.add(key)
                unique.append(scope)
        self._scopes[j] = unique
        return unique

    def scope_levels(self, j: int) -> list[int | None]:
        """:meth:`level_of` each set of :meth:`scopes` (None for anywhere), kept per set: a gang
        brought closer asks it of every scope of its own and of the gangs in its way
        (``solver.search.closer``), and finding a set's leaves each time was a quarter of that at
        16,384 nodes."""
        levels: list[int | None] = []
        for scope in self.scopes(j):
            if scope is not None and id(scope) not in self._level_of_scope:
                self._level_of_scope[id(scope)] = self.level_of(scope)
            levels.append(None if scope is None else self._level_of_scope[id(scope)])
        return levels

    def room(self, classes: set[int]) -> int:
        """The GPUs (free or not) of the nodes of ``classes``."""
        key = frozenset(classes)
        if key not in self._rooms:
            classes_ = self.problem.classes
            self._rooms[key] = sum(len(classes_[c].shape.gpus) * classes_[c].count for c in classes)
        return self._rooms[key]

    def level_of(self, classes: set[int]) -> int:
        """The tier of the lowest switch above every class of ``classes`` (``Fabric.common_tier`` of
        their leaves); one above the top tier when they share none."""
        leaves = frozenset(self.problem.classes[c].leaf for c in classes)
        level = self._levels.get(leaves)
        if level is None:
            common = self.fabric.common_tier(leaves)
            above = max(self.fabric.tiers, default=0) + 1
            level = self._levels[leaves] = common if common is not None else above
        return level

    def order_key(self, classes: set[int]) -> tuple[int, list[int]]:
        """Scopes are tried smallest first (best fit), ties in class order."""
        return self.room(classes), sorted(classes)

    def sorted_domains(self, partition: str, level: int) -> list[set[int]]:
        """:meth:`domains` in the order scopes are tried."""
        key = (partition, level)
        if key not in self._sorted:
            self._sorted[key] = sorted(self.domains(partition, level).values(), key=self.order_key)
        return self._sorted[key]

    def grown(self, c: int, k: int, shape: int) -> int | None:
        """The configuration of class ``c`` a node in configuration ``k`` is in with one more member
        of ``shape``; None if no node of the class can hold that."""
        key = (c, k, shape)
        if key not in self._grown:
            counts = list(self.compiled.configs[c][k].counts)
            counts[shape] += 1
            self._grown[key] = self.index[c].get(tuple(counts))
        return self._grown[key]

    def headroom(self, c: int, k: int, shape: int) -> int:
        """How many more members of ``shape`` one node of class ``c`` in configuration ``k`` can
        take: members of one shape are added in a chain, each making the next configuration."""
        key = (c, k, shape)
        found = self._headroom.get(key)
        if found is None:
            chain = [k]
            grown = self.grown(c, k, shape)
            while grown is not None and (c, grown, shape) not in self._headroom:
                chain.append(grown)
                grown = self.grown(c, grown, shape)
            top = self._headroom.get((c, grown, shape), -1) if grown is not None else -1
            for step in reversed(chain):
                top += 1
                self._headroom[c, step, shape] = top
            found = self._headroom[key]
        return found

    def domains(self, partition: str, level: int) -> dict[str, set[int]]:
        """The classes under each domain of ``partition`` at ``level``."""
        key = (partition, level)
        if key not in self._domains:
            found: dict[str, set[int]] = {}
            for cls in self.problem.classes:
                place = place_of(cls, partition)
                d = (place if partition == NVLINK else self.fabric.domain(place, level)) if place else None
                if d is not None:
                    found.setdefault(d, set()).add(cls.index)
            self._domains[key] = found
        return self._domains[key]


Move = tuple[int, int, int]  # (class, from configuration, to configuration)


class NodeStates(dict[int, Counter]):
    """One greedy pass's nodes: per class, how many nodes are in each configuration (index → nodes;
    a configuration no node is in is dropped). It also remembers, per class and member shape, the
    move :func:`best_move` would pick there, until a node of the class moves: a pass asks that of
    the same unchanged classes for member after member (1.9 million configurations tried at 4,096
    nodes x 500 jobs before this)."""

    def __init__(self, problem: Normalised) -> None:
        super().__init__({cls.index: Counter({0: cls.count}) for cls in problem.classes})
        self.best: dict[int, dict[int, tuple[tuple[bool, int, int], Move] | None]] = {}
        self.capacity: dict[int, dict[int, int]] = {}  # class → shape → members it can still take
        self.short: dict[tuple[int, int, int], int] = {}  # (scope, host kind, shape) → fewest not fitting
        self.queues: dict[tuple[int, int], ClassQueue] = {}  # by (host kind, shape)
        self.watchers: dict[int, list[ClassQueue]] = defaultdict(list)  # class → queues holding it

    def move(self, c: int, k: int, to: int) -> None:
        """One node of class ``c`` from configuration ``k`` to ``to``."""
        nodes = self[c]
        if nodes[k] == 1:
            del nodes[k]
        else:
            nodes[k] -= 1
        nodes[to] += 1
        self.best.pop(c, None)
        self.capacity.pop(c, None)
        for queue in self.watchers.get(c, ()):
            queue.dirty.add(c)


@dataclass
class ClassQueue:
    """The classes one role variant may use, as a heap by :func:`best_move`'s key (used nodes
    first, fullest first, then class order) for one member shape: the best of thousands of classes
    without a look at each, for a member that may go anywhere. Entries of a class that has moved
    since are stale (their version is not the class's) and dropped when they surface."""

    heap: list[tuple[bool, int, int, int, Move]] = field(default_factory=list)
    dirty: set[int] = field(default_factory=set)  # classes moved since their entry was pushed
    version: dict[int, int] = field(default_factory=dict)


def undo(state: NodeStates, journal: list[Move]) -> None:
    """Take back the moves of ``journal``, latest first."""
    for c, k, grown in reversed(journal):
        state.move(c, grown, k)
    journal.clear()


@dataclass
class Pass:
    """A greedy pass's plan so far: its nodes' configurations, the members placed per (role, class),
    the jobs placed and the role variants chosen. A pass may start from a plan made elsewhere
    (:mod:`solver.search.previous`) and place the rest of the batch after it."""

    state: NodeStates
    members: Counter[tuple[int, int]]
    placed: set[int]
    variants: set[int]

    @classmethod
    def empty(cls, problem: Normalised) -> Pass:
        return cls(NodeStates(problem), Counter(), set(), set())


def greedy_hint(
    problem: Normalised,
    compiled: Compiled,
    jobs: Sequence[int] | None = None,
    counts: dict[int, int] | None = None,
    floor: Floor | None = None,
) -> dict[str, int]:
    """The greedy plan; ``jobs`` (default: all, in :func:`job_order`) and, per role group, how many
    members to place (``counts``; default: the role's minimum)."""
    floor = floor or Floor(problem, compiled)
    done = Pass.empty(problem)
    place_jobs(floor, done, job_order(problem) if jobs is None else jobs, counts or {})
    return hint_of(compiled, done)


def place_jobs(floor: Floor, done: Pass, jobs: Sequence[int], counts: dict[int, int]) -> None:
    """Add ``jobs`` to the pass ``done`` in turn, each whole or not at all."""
    # A caller gone stops the pass between jobs (a pass is seconds at 16,384 nodes).
    for j in cancellation.checked(jobs):
        place_job(floor, done, j, counts)


@dataclass(frozen=True)
class Placed:
    """What :func:`place_job` added to a pass for one job, so that it can be taken back."""

    journal: list[Move]
    members: Counter[tuple[int, int]]
    variants: tuple[int, ...]


def place_job(
    floor: Floor, done: Pass, j: int, counts: dict[int, int], scopes: Sequence[set[int] | None] | None = None
) -> Placed | None:
    """Add job ``j`` to the pass ``done``, whole, in the first of ``scopes`` it fits (default: its
    own, :meth:`Floor.scopes`: the lowest switch its rules name first, best fit), with ``counts``
    members per role group (default: the role's minimum); what was added, or None (and the pass as
    it was) when it fits nowhere."""
    problem = floor.problem
    needs = needs_of(floor, j, counts)
    for allowed in floor.scopes(j) if scopes is None else scopes:
        if allowed is not None and not may_fit(floor, done.state, allowed, needs):
            continue  # a try that cannot succeed: at 70 % busy most leaves lack room for a gang
        # Moves are journalled and undone when the job does not fit whole: copying the state of
        # every class for every try cost more than the whole search on a 1,000-node cluster.
        journal: list[Move] = []
        taken: Counter[tuple[int, int]] = Counter()
        chosen: list[int] = []
        for variants in floor.roles.get(j, ()):
            # A pool's members are pods of their own: the order names the pool once per pod, and
            # each time one member (its minimum) is placed.
            want = counts.get(problem.group_of(variants[0]), problem.roles[variants[0]].minimum)
            fitted = next(
                (v for v in variants if place_role(floor, done.state, allowed, journal, taken, v, want)),
                None,
            )
            if fitted is None:
                break
            chosen.append(fitted)
        else:
            done.placed.add(j)
            done.members.update(taken)
            done.variants.update(chosen)
            return Placed(journal, taken, tuple(chosen))
        undo(done.state, journal)
    return None


Need = tuple[tuple[tuple[int, int, int], ...], int]  # a role's variants (variant, host kind, shape), want


def needs_of(floor: Floor, j: int, counts: dict[int, int]) -> tuple[Need, ...]:
    """What :func:`may_fit` asks of a scope for job ``j``: per role, its variants and the members
    it wants; worked out once per job and pass, as a gang asks it of hundreds of leaves."""
    problem = floor.problem
    out = []
    for variants in floor.roles.get(j, ()):
        want = counts.get(problem.group_of(variants[0]), problem.roles[variants[0]].minimum)
        out.append((tuple((v, floor.host_kind.get(v, -1), problem.roles[v].shape) for v in variants), want))
    return tuple(out)


def may_fit(floor: Floor, state: NodeStates, allowed: set[int], needs: Sequence[Need]) -> bool:
    """Whether every role of a job has, in some variant, room in ``allowed`` for the members it
    wants (``needs``, :func:`needs_of`), each role counted alone: false only when the job cannot fit
    there, so skipping the try leaves the pass's plan as it was. A gang tried leaf by leaf used to
    place members in each leaf until the leaf ran out, then take them back."""
    return all(any(has_room(floor, state, allowed, v, want) for v in variants) for variants, want in needs)


def has_room(
    floor: Floor, state: NodeStates, allowed: set[int], variant: tuple[int, int, int], want: int
) -> bool:
    """Whether the nodes of ``allowed`` could still take ``want`` members of a role variant
    (``(variant, host kind, shape)``), each class counted alone. A pass only ever adds members (a
    failed try's are taken back), so a scope once short of room for ``want`` stays short for as
    many or more: remembered, as a gang tries hundreds of leaves and most are short every time."""
    r, kind, shape = variant
    key = (id(allowed), kind, shape)
    short = state.short.get(key)
    if short is not None and want >= short:
        return False
    hosts = floor.host_sets.get(r, frozenset())
    capacity = state.capacity
    total = 0
    for c in allowed:
        if c not in hosts:
            continue
        known = capacity.get(c)
        if known is None:
            known = capacity[c] = {}
        found = known.get(shape)
        if found is None:
            found = known[shape] = sum(n * floor.headroom(c, k, shape) for k, n in state[c].items() if n > 0)
        total += found
        if total >= want:
            return True
    state.short[key] = want if short is None else min(short, want)
    return False


def hint_of(compiled: Compiled, done: Pass) -> dict[str, int]:
    """The pass's plan as a value of every placement variable of the model."""
    hint = {var.name: 0 for var in compiled.x.values()} | {var.name: 0 for var in compiled.y.values()}
    for c, counter in done.state.items():
        for k, n in counter.items():
            if (c, k) in compiled.x:
                hint[compiled.x[c, k].name] = n
    for (r, c), n in done.members.items():
        hint[compiled.y[r, c].name] = n
    for j, var in compiled.placed.items():
        hint[var.name] = int(j in done.placed)
    for r, var in compiled.variant.items():
        hint[var.name] = int(r in done.variants)
    return hint


def pass_of(compiled: Compiled, problem: Normalised, plan: dict[str, int]) -> Pass:
    """A plan in the model's variables as a greedy pass's state: the inverse of :func:`hint_of`."""
    done = Pass.empty(problem)
    for (c, k), var in compiled.x.items():
        n = plan.get(var.name, 0)
        if n:
            nodes = done.state[c]
            nodes[0] -= n
            nodes[k] += n
    for nodes in done.state.values():
        if nodes[0] == 0:
            del nodes[0]
    for (r, c), var in compiled.y.items():
        n = plan.get(var.name, 0)
        if n:
            done.members[r, c] = n
    done.placed.update(j for j, var in compiled.placed.items() if plan.get(var.name, 0))
    done.variants.update(r for r, var in compiled.variant.items() if plan.get(var.name, 0))
    return done


def job_order(problem: Normalised) -> list[int]:
    """Highest priority first, then the most GPUs (a pool once per pod)."""
    units = batch_units(problem)
    return [
        j
        for j, _ in sorted(
            units, key=lambda u: (-problem.request.jobs[u[0]].priority, -job_gpus(problem, u[0]), u[1])
        )
    ]


def batch_units(problem: Normalised) -> list[tuple[int, int]]:
    """(job, batch position) for every job of the batch as it came: a pool once for each of its pods,
    at that pod's position, so that orders interleave pods with the rest as the batch did."""
    return [
        (j, pos)
        for j in range(len(problem.request.jobs))
        for pos in (problem.batch_positions(j) if j in problem.pools else problem.batch_positions(j)[:1])
    ]


def job_gpus(problem: Normalised, j: int) -> int:
    """GPUs a job asks for (a pool: one of its pods, each its own job)."""
    roles = problem.request.jobs[j].roles
    if j in problem.pools:
        return max(roles[0].member.gpus, 1)
    return sum(r.replicas * max(r.member.gpus, 1) for r in roles)


def roles_by_job(problem: Normalised) -> dict[int, list[tuple[int, ...]]]:
    """Per job, its roles, each as the tuple of its variants (one for most roles)."""
    out: dict[int, list[tuple[int, ...]]] = {}
    for g, variants in problem.groups().items():
        out.setdefault(problem.roles[g].job_index, []).append(variants)
    return out


def place_role(
    floor: Floor,
    state: NodeStates,
    allowed: set[int] | None,
    journal: list[Move],
    taken: Counter,
    r: int,
    want: int,
) -> bool:
    """Place ``want`` members of role variant ``r``, one at a time, on classes in ``allowed`` (None:
    any); if they do not all fit, leave ``state``, ``journal`` and ``taken`` as they were."""
    shape = floor.problem.roles[r].shape
    mark = len(journal)
    moved: Counter[tuple[int, int]] = Counter()
    for _ in range(want):
        move = best_move(floor, state, allowed, shape, r)
        if move is None:
            tail = journal[mark:]
            del journal[mark:]
            undo(state, tail)
            return False
        c, k, grown = move
        state.move(c, k, grown)
        journal.append(move)
        moved[r, c] += 1
    taken.update(moved)
    return True


def best_move(floor: Floor, state: NodeStates, allowed: set[int] | None, shape: int, r: int) -> Move | None:
    """The move that adds one member of ``shape`` to the fullest node that can take it: a node
    that holds work before an empty one, then the fullest, then the lowest class and
    configuration."""
    if allowed is None:
        return queued_best(floor, state, shape, r)
    best: Move | None = None
    best_key: tuple[bool, int, int] | None = None
    hosts = floor.hosts.get(r, ())
    if allowed is not None and len(allowed) < len(hosts):
        # A scope of a few leaves: its classes, not every class the role may use (same order).
        within = floor.host_sets.get(r, frozenset())
        hosts = tuple(sorted(c for c in allowed if c in within))
    for c in hosts:  # in class order: the first class with the best key wins
        if allowed is not None and c not in allowed:
            continue
        found = class_best(floor, state, c, shape)
        # Strictly better only: of equal keys the first class wins, as hosts come in class order.
        if found is not None and (best_key is None or found[0][:2] < best_key[:2]):
            best_key, best = found
    return best


def queued_best(floor: Floor, state: NodeStates, shape: int, r: int) -> Move | None:
    """:func:`best_move` over every class role variant ``r`` may use, from its queue."""
    key = (floor.host_kind.get(r, -1), shape)
    queue = state.queues.get(key)
    if queue is None:
        queue = state.queues[key] = ClassQueue()
        for c in floor.hosts.get(r, ()):
            state.watchers[c].append(queue)
            queue.dirty.add(c)
    heap = queue.heap
    if queue.dirty:
        version = queue.version
        fresh = []
        for c in queue.dirty:
            version[c] = version.get(c, 0) + 1
            found = class_best(floor, state, c, shape)
            if found is not None:
                (empty, fullness, _), move = found
                fresh.append((empty, fullness, c, version[c], move))
        queue.dirty.clear()
        if len(fresh) * 8 < len(heap):
            for entry in fresh:
                heapq.heappush(heap, entry)
        else:
            heap.extend(fresh)
            heapq.heapify(heap)
    while heap:
        _, _, c, seen, move = heap[0]
        if seen == queue.version[c]:
            return move
        heapq.heappop(heap)
    return None


def class_best(
    floor: Floor, state: NodeStates, c: int, shape: int
) -> tuple[tuple[bool, int, int], Move] | None:
    """:func:`best_in_class`, remembered until a node of class ``c`` moves."""
    remembered = state.best.setdefault(c, {})
    if shape not in remembered:
        remembered[shape] = best_in_class(floor, state, c, shape)
    return remembered[shape]


def best_in_class(
    floor: Floor, state: NodeStates, c: int, shape: int
) -> tuple[tuple[bool, int, int], Move] | None:
    """:func:`best_move` within class ``c``: its key (without the class) and the move."""
    size = floor.size[c]
    best: tuple[tuple[bool, int, int], Move] | None = None
    for k, nodes in state[c].items():
        if nodes <= 0:  # a class of no nodes (never moved from)
            continue
        grown = floor.grown(c, k, shape)
        if grown is None:
            continue
        key = (k == 0, -size[k], k)  # used nodes first, fullest first
        if best is None or key < best[0]:
            best = (key, (c, k, grown))
    return best


def with_most_strict(problem: Normalised, compiled: Compiled, solution: dict[str, int]) -> dict[str, int]:
    """``solution`` with every member that can be strict counted strict: per class and shape, the
    strict slots the chosen configurations open, handed to the roles in order. A better start for
    the topology tier than whatever the tier above left in ``s`` (it had no reason to care)."""
    out = dict(solution)
    # The slots come from the configurations nodes are in, found by one walk of those variables:
    # a walk of every configuration of every class cost 0.37 s a plan at 16,384 nodes.
    open_slots: dict[int, Counter[int]] = defaultdict(Counter)  # class → shape → strict slots
    for (c, k), var in compiled.x.items():
        nodes = solution.get(var.name, 0)
        if nodes:  # most configurations hold no node
            for shape, n in enumerate(compiled.configs[c][k].strict):
                if n:
                    open_slots[c][shape] += n * nodes
    for (r, c), var in compiled.s.items():  # a class's roles in the order the model lists them
        slots = open_slots.get(c)
        if not slots:
            out[var.name] = 0
            continue
        shape = problem.roles[r].shape
        take = min(solution.get(compiled.y[r, c].name, 0), slots[shape])
        out[var.name] = take
        slots[shape] -= take
    return out


def complete(problem: Normalised, compiled: Compiled, solution: dict[str, int]) -> dict[str, int]:
    """``solution`` with every variable that follows from the placement (x, y, placed) set to what
    the placement makes true: role variants, leaf spans, locality domains and flags, strict counts,
    the nodes touched in rank order.
    A tier above had no reason to care about them; a tier below and every report do."""
    out = dict(solution)
    used = {(r, c) for (r, c), var in compiled.y.items() if out.get(var.name, 0) > 0}
    used_roles = {r for r, _ in used}
    for r, var in compiled.variant.items():
        out[var.name] = int(r in used_roles)
    classes = problem.classes
    job_leaves = {(problem.roles[r].job_index, classes[c].leaf) for r, c in used}
    for (j, leaf), var in compiled.locality.spans.items():
        out[var.name] = int((j, leaf) in job_leaves)
    fabric = Fabric.of(problem.request.inventory)
    # Each rule's variables, found once (a scan of them all per rule was quadratic in the batch).
    base_of: dict[int, list[tuple[str, cp_model.IntVar]]] = defaultdict(list)
    for (k, place), var in compiled.locality.base.items():
        base_of[k].append((place, var))
    use_of: dict[tuple[int, int], list[tuple[str, cp_model.IntVar]]] = defaultdict(list)
    for (k, lv, d), var in compiled.locality.use.items():
        use_of[k, lv].append((d, var))
    # A plan completed on the spare core while the search runs stops with it (Portfolio.meanwhile
    # waits for it): under load one completion took 2.6 s and made a 5 s call 1.2 s late.
    cancellation.check()
    for i, rule in enumerate(cancellation.checked(compiled.locality.rules)):
        places = {place_of(classes[c], rule.partition) for r, c in used if r in rule.roles}
        for place, var in base_of.get(i, ()):
            out[var.name] = int(place in places)
        placed = out.get(compiled.placed[rule.job].name, 0)
        for level, _ in rule.levels(fabric):
            domains = domains_at(rule, places, level, fabric)
            inside = inside_one(places, domains)
            flag = compiled.locality.within.get((i, level))
            if flag is not None and getattr(flag, "name", "").startswith("within["):
                out[flag.name] = int(placed and inside)
            for d, var in use_of.get((i, level), ()):
                out[var.name] = int(d in domains)
    cancellation.check()
    touched: dict[int, int] = {}
    for (c, _), var in compiled.x.items():
        touched[c] = touched.get(c, 0) + out.get(var.name, 0)
    out.update(order_values(compiled.order, touched))
    cancellation.check()
    return with_most_strict(problem, compiled, out)


def repack(
    problem: Normalised, compiled: Compiled, solution: dict[str, int], floor: Floor | None = None
) -> dict[str, int] | None:
    """The same jobs with the same member counts as ``solution``, placed again greedily with
    locality first; None if the greedy cannot fit them all. A tier above placed work cared only
    for how much is placed; this often keeps that and puts gangs back under one leaf."""
    floor = floor or Floor(problem, compiled)
    placed = [j for j, var in compiled.placed.items() if solution.get(var.name, 0)]
    counts: Counter[int] = Counter()
    for (r, _), var in compiled.y.items():
        counts[problem.group_of(r)] += solution.get(var.name, 0)
    wanted = set(placed)

    def gpus(j: int) -> int:
        return sum(
            counts[v[0]] * max(problem.roles[v[0]].role.member.gpus, 1) for v in floor.roles.get(j, ())
        )

    # Two orders: the usual one, and biggest first (which packs tighter when every job must fit).
    for order in (
        [j for j in job_order(problem) if j in wanted],
        sorted(wanted, key=lambda j: (-gpus(j), j)),
    ):
        plan = greedy_hint(problem, compiled, jobs=order, counts=dict(counts), floor=floor)
        if all(plan[compiled.placed[j].name] for j in placed):
            return complete(problem, compiled, plan)
    return None


# --------------------------------------------------------------------------- the portfolio

NAMED_ORDERS = 4  # largest-first, queue, smallest-first, locality-first
# More tie orders start more jobs at scale: at 4,096 nodes x 500 jobs (session 11, seeds 1-3, the
# same GPUs at every priority level) 32 shuffles started 317/317/309 jobs, 64 318/318/310.
MAX_SHUFFLES = 128
FLOOR_LATE = "the floor's placers ran out of the time before the search"


@dataclass(frozen=True)
class Candidate:
    """One placer's plan, completed, with its value on every tier (highest first)."""

    placer: str
    plan: dict[str, int]
    values: tuple[int, ...]


def orders(problem: Normalised, floor: Floor, shuffles: int, seed: int) -> Iterator[tuple[str, list[int]]]:
    """The job orders of the portfolio, all by priority first (a lower-priority job never goes
    before a higher one, as in Volcano's and Slurm's queues), then:

    - ``largest-first``: the most GPUs first (packs big gangs while room is whole);
    - ``queue``: the batch's own order (what Volcano does with jobs of one priority);
    - ``smallest-first``: the fewest GPUs first (starts the most jobs);
    - ``locality-first``: jobs with locality rules first, largest first, then the rest smallest
      first (gangs get whole leaves before pods break them up);
    - ``shuffle-k``: seeded shuffles, the tie orders a queue could have had.
    """
    jobs = problem.request.jobs
    units = batch_units(problem)

    def prio(j: int) -> int:
        return -jobs[j].priority

    def by(key: Callable[[tuple[int, int]], tuple]) -> list[int]:
        return [j for j, _ in sorted(units, key=key)]

    ruled = {rule.job for rule in floor.compiled.locality.rules}
    yield "largest-first", job_order(problem)
    yield "queue", by(lambda u: (prio(u[0]), u[1]))
    yield "smallest-first", by(lambda u: (prio(u[0]), job_gpus(problem, u[0]), u[1]))
    yield (
        "locality-first",
        by(
            lambda u: (
                prio(u[0]),
                u[0] not in ruled,
                job_gpus(problem, u[0]) * (-1 if u[0] in ruled else 1),
                u[1],
            )
        ),
    )
    if len(units) < 2:
        # Every shuffle of one unit is the queue's order, which the portfolio would skip as tried;
        # seeding the 128 generators alone took a tenth of a replay window's one-pod steps.
        return
    for k in range(shuffles):
        rng = random.Random(f"{seed}/{k}")
        keys = {u: rng.random() for u in units}
        yield f"shuffle-{k}", by(lambda u, keys=keys: (prio(u[0]), keys[u]))


def refused_first(
    order: Sequence[int], refused: Callable[[int], bool], priority: Callable[[int], int]
) -> list[int]:
    """``order`` with the jobs a pass in it ``refused`` moved before the rest of their priority,
    each group in its order (a job named once per pod keeps its places among its kind); a
    lower-priority job still never goes before a higher one. A squeaky wheel: the jobs an order
    could not place are the ones whose room the jobs before them took, and placing them first is
    a better next try than a shuffle (at 16,384 nodes it reached the best of twelve shuffles'
    top-priority work in the second or third order, session 20)."""
    ranked = sorted(range(len(order)), key=lambda k: (-priority(order[k]), not refused(order[k]), k))
    return [order[k] for k in ranked]


def portfolio(
    problem: Normalised,
    compiled: Compiled,
    deadline: float,
    *,
    passes: int = 0,
    seed: int = 0,
    floor: Floor | None = None,
) -> list[Candidate]:
    """The floor: the named placers of :func:`orders` and ``passes`` shuffles, and the lifted
    order of :class:`Portfolio`, in turn while time remains (the first always), each plan
    completed and valued on every tier; best first
    (lexicographically by tier values, then the earlier placer). The search starts from the first;
    no answer is worse than it. ``floor``: the indexes of an earlier pass over the same problem."""
    drawing = Portfolio(floor or Floor(problem, compiled), passes, seed)
    drawing.draw(deadline)
    return drawing.candidates()


# A floor plan and a deadline (``time.perf_counter()``) -> a plan that ranks higher on the tiers a
# placement decides, or None (``solver.baselines.exchange.FloorExchange``, given by the pipeline).
Repair = Callable[[Candidate, float], "Candidate | None"]
REPAIR = "repair"  # the place of the first repair among the orders
# A placer of nodes, not of the model's classes, run until a deadline, its plan read back into the
# model's variables (solver.fallback.FloorOrders).
Outside = Callable[[float], "Candidate | None"]
# Its share of the time the search runs when it is drawn first; the class placers drawn meanwhile and
# their repairs have the rest (after its plan is brought closer). At 16,384 nodes x 500 jobs, seed 3,
# its orders started 352-354 jobs in 3 s (half a 15 s call's search) and 356 in 6 s (session 33).
# Where they already run in a process of their own (solver.fallback.orders_ahead), it is how long
# their plan is waited for.
OUTSIDE_SHARE = 0.75
# A floor plan and a deadline -> the plan with its gangs under lower switches, ranking higher, or
# None (``solver.search.closer.brought_closer``, given by the pipeline).
Closer = Callable[[Candidate, float], "Candidate | None"]
LIFTED = "+lifted"  # the suffix of a lifted order's placer
# How many times the best plan in hand is exchanged over after the closer (Portfolio._exchange_best):
# the second exchange of session 36's seed 3 added one job, a third found none.
EXCHANGES_OF_BEST = 3


class Portfolio:
    """The floor's placers drawn in turn, resumable: some before the search (the best is its
    hint), the rest while CP-SAT searches on another core (:meth:`draw` in a thread; CP-SAT lets
    go of the interpreter while it searches). Plans are kept only when their placement alone does
    not rank them below a plan in hand. After the first plan kept, the next order drawn is its
    order with the jobs it refused first (:func:`refused_first`, named ``<placer>+lifted``), when
    that order is new and ``lift`` (the default); and again after a lifted plan that places more
    work than every plan before it.

    With a ``repair``, a plan is repaired after the named placers (unless not ``repair_early``:
    where a repair costs several shuffles), and once every order is drawn the others while time
    lasts: of the plans level with the best on the work placed, the one that
    starts the fewest jobs first (the earliest of equals). A repair gives up large jobs for several
    smaller ones (``solver.baselines.exchange``), and the plan with the fewest jobs for its work is
    the one with the most to give: at 4,096 nodes x 500 jobs, seed 1, the first named placer's plan
    (302 jobs) repaired started 318, the best shuffle's (317) 317.

    With an ``outside`` placer — the model-free answer's, so that a call given the time to build
    the model never answers worse than a shorter call that answered without one (16,384 nodes,
    seed 3: 356 jobs at 5 s, 342 at 15 s on the same work, session 32) — it is drawn once, while
    the search runs (:meth:`meanwhile`; before it, where the named placers have used the floor's
    part, its orders of a second each at 16,384 nodes would be cut short): with ``outside_first``,
    first, with :data:`OUTSIDE_SHARE` of the search's time; else after the class orders, with the
    time they leave (none, mostly). Its time is theirs: drawn first at 4,096 nodes x 500 jobs and
    5 s, the shuffles that reach the greedy's best order were no longer reached (316 / 317 / 310
    jobs against 318 / 318 / 310). Which placer wins is a matter of size, measured, not predicted
    (``solver.solve.outside_first``).

    With a ``closer`` (``solver.search.closer.brought_closer``), the best plan in hand is brought
    closer once the outside placer is drawn (first or after), on the same spare core: its gangs
    moved under lower switches where the jobs in their way can go elsewhere. At 16,384 nodes the
    search has no time for the locality tiers, and this is what keeps gangs closer there.

    Drawn first, the outside placer's plan, brought closer, is then repaired again while each
    repair betters it (:meth:`_exchange_best`), before the class orders left.

    Once the outside placer's plan is brought closer (:attr:`outside_done`), the plans kept are
    what ``solver.search.rounds`` betters on the search's own core, where the orders answer."""

    def __init__(
        self,
        floor: Floor,
        passes: int,
        seed: int,
        *,
        lift: bool = True,
        repair: Repair | None = None,
        repair_early: bool = True,
        outside: Outside | None = None,
        outside_first: bool = False,
        closer: Closer | None = None,
        outside_share: float = OUTSIDE_SHARE,
    ) -> None:
        self.floor = floor
        self.lift = lift
        drawn = orders(floor.problem, floor, passes, seed)
        early = repair is not None and repair_early
        self._orders = chain(islice(drawn, NAMED_ORDERS), [(REPAIR, [])], drawn) if early else drawn
        self._repair = repair
        self._outside = outside  # None once drawn
        self._outside_first = outside_first
        self._closer = closer
        self._outside_share = outside_share
        # The outside placer has answered and its plan has been brought closer (or there is none).
        self.outside_done = outside is None
        self._closer_tried: set[str] = set()  # the placers whose plans were brought closer
        self._repaired: set[str] = set()  # the placers whose plans were repaired
        self._tried: set[tuple[int, ...]] = set()
        self._out: list[Candidate] = []
        # The leading tiers a placement alone decides (work placed, jobs started): a plan already
        # below the best on them is dropped before it is completed and valued on every tier, which
        # cost more than placing it (0.7 + 0.7 s a plan at 16,384 nodes, against 0.9 s the pass).
        self._ranks = floor.compiled.tiers[: placement_tiers(floor.compiled)]
        self._work = sum(1 for t in self._ranks if t.name != JOBS_TIER)  # the work tiers lead
        self._best_rank: tuple[int, ...] | None = None
        self._settled = settled_by_priority(self._ranks)
        self.drawn = 0  # placers run so far
        self.exhausted = False  # every order has been tried
        # The first plan kept's order with the jobs it refused first (refused_first), drawn next.
        self._lifted: tuple[str, list[int]] | None = None

    def draw(self, deadline: float, *, least: int = 1, latest: float | None = None) -> None:
        """Run placers until ``deadline`` or the last order (then the repairs left, while time
        lasts); at least one in all, and past the deadline until ``least`` have run if that is
        before ``latest``."""
        while (drawn := self._next()) is not None:
            name, order = drawn
            key = tuple(order)
            if name != REPAIR:
                if key in self._tried:
                    # The same order places the same plan: a one-job step of a replay window ran
                    # 36 of them, half its time (bench/RESULTS-replay.md, session 9).
                    continue
                self._tried.add(key)
            cancellation.check()  # a caller gone stops the floor between placers (solver.domain.cancel)
            # Once there is a plan, no placer runs past ``latest``: loaded, the last named placer of a
            # warm 16,384-node call ran 0.25 s past the search's end and the call was late.
            try:
                with bounded(latest, FLOOR_LATE) if latest is not None and self._out else nullcontext():
                    if name == REPAIR:
                        self._repair_one(deadline)
                    else:
                        self._draw_one(name, order)
            except OutOfBudget:
                return  # the placer cut short is dropped
            now = time.perf_counter()
            if now >= deadline and (self.drawn >= least or latest is None or now >= latest):
                return
        if self._repair is not None and self._out:  # every order drawn: the plans left repaired
            try:
                with bounded(latest, FLOOR_LATE) if latest is not None else nullcontext():
                    while time.perf_counter() < deadline:
                        if not self._repair_one(deadline):
                            break
                    else:
                        return  # out of time, with plans left to repair
            except OutOfBudget:
                return
        self.exhausted = True

    def _next(self) -> tuple[str, list[int]] | None:
        """The order to draw next: the lifted order, when there is one and it is new; else the next
        of :func:`orders`."""
        lifted, self._lifted = self._lifted, None
        if lifted is not None and tuple(lifted[1]) not in self._tried:
            return lifted
        return next(self._orders, None)

    def _draw_one(self, name: str, order: list[int]) -> None:
        problem, compiled = self.floor.problem, self.floor.compiled
        done = Pass.empty(problem)
        behind = self._place(done, order)
        self.drawn += 1
        if behind:
            return
        rank = tuple(t.value_of_nonzero(placement_of(compiled, done)) for t in self._ranks)
        if self._best_rank is None or rank >= self._best_rank:
            plan = complete(problem, compiled, hint_of(compiled, done))
            values = tuple(t.value_of(plan) for t in cancellation.checked(compiled.tiers))
            # Only a plan kept raises the bar: one cut short while completed must not drop the
            # placers after it.
            before, self._best_rank = self._best_rank, rank
            self._out.append(Candidate(name, plan, values))
            again = name.endswith(LIFTED) and self._more_work(before, rank)
            if self.lift and (len(self._out) == 1 or again):
                # From the first plan kept (the first named placer's), and again from a lifted
                # plan that placed more work than any before it: a squeaky wheel while it
                # squeaks. Which plans are kept does not depend on where a pass behind was
                # stopped, so neither does the order drawn next. Not from every plan kept:
                # that drew lifted orders in the place of shuffles, and at 4,096 nodes, where
                # every order places the same work, the shuffles start more jobs (session 21);
                # at 16,384 nodes a second lift is what reaches the fallback's top-priority work.
                jobs = problem.request.jobs
                lifted = refused_first(order, lambda j: j not in done.placed, lambda j: jobs[j].priority)
                self._lifted = (name if name.endswith(LIFTED) else f"{name}{LIFTED}", lifted)

    def _draw_outside(self, ends: float) -> None:
        """The outside placer's plan until ``ends``, kept as any plan: when it ranks no lower than
        the best."""
        outside, self._outside = self._outside, None
        if outside is None:
            return
        found = outside(ends)
        self.drawn += 1
        if found is not None:
            self._keep(found)

    def _keep(self, found: Candidate) -> bool:
        """Keep ``found`` when the tiers its placement decides rank no lower than the best's."""
        rank = found.values[: len(self._ranks)]
        if self._best_rank is not None and rank < self._best_rank:
            return False
        self._best_rank = rank
        self._out.append(found)
        return True

    def _bring_closer(self, ends: float) -> None:
        """The best plan in hand with its gangs brought under lower switches until ``ends``, kept
        beside it (it ranks higher when kept); once a plan, and not a plan already brought closer."""
        if not self._closer_due() or time.perf_counter() >= ends:
            return
        assert self._closer is not None
        best = self.candidates()[0]
        self._closer_tried.add(best.placer)
        found = self._closer(best, ends)
        if found is not None:
            self._closer_tried.add(found.placer)
            self._out.append(found)

    def _closer_due(self) -> bool:
        """Whether the best plan in hand is still to be brought closer."""
        return (
            self._closer is not None
            and bool(self._out)
            and self.candidates()[0].placer not in self._closer_tried
        )

    def _exchange_best(self, ends: float) -> None:
        """The best plan in hand repaired, and its repair again, while each repair bettered the
        plan (at most :data:`EXCHANGES_OF_BEST` times) until ``ends``. After the closer: gangs moved
        under lower switches leave room elsewhere that an exchange fills with jobs the plan left out
        (8,192 nodes x 500 jobs, 15 s answers: seed 3 336 -> 342 -> 343 jobs in 1.4 s + 2.1 s,
        seed 1 332 -> 334 in 1.6 s, session 36), where the orders' own exchange, before the closer,
        had found nothing more."""
        if self._repair is None:
            return
        for _ in range(EXCHANGES_OF_BEST):
            best = self.candidates()[0] if self._out else None
            if best is None or best.placer in self._repaired or time.perf_counter() >= ends:
                return
            self._repaired.add(best.placer)
            found = self._repair(best, ends)
            if found is None or not self._keep(found):
                return

    def _more_work(self, before: tuple[int, ...] | None, rank: tuple[int, ...]) -> bool:
        """Whether ``rank`` places more work than ``before`` (its work tiers rank higher)."""
        return before is not None and rank[: self._work] > before[: self._work]

    def _repair_one(self, ends: float) -> bool:
        """Repair the next plan (the class docstring's) until ``ends``, keeping what it gives when
        it ranks no lower than the best; False when no plan is left to repair."""
        assert self._repair is not None
        lead = self._to_repair()
        if lead is None:
            return False
        self._repaired.add(lead.placer)
        found = self._repair(lead, ends)
        if found is not None:
            self._repaired.add(found.placer)  # a repair's outcome is not repaired again
            self._keep(found)
        return True

    def _to_repair(self) -> Candidate | None:
        """Of the plans not repaired (nor the outcome of a repair) that are level with the best on
        the work placed, the one that starts the fewest jobs; of equals, the earliest."""
        work = self._work
        if not self._out:
            return None
        best = max(c.values[:work] for c in self._out)
        lead = [c for c in self._out if c.values[:work] == best and c.placer not in self._repaired]
        return min(lead, key=lambda c: c.values[work : len(self._ranks)], default=None)

    def _place(self, done: Pass, order: list[int]) -> bool:
        """Place ``order`` into ``done``, a priority level at a time; stop and say so (True) as soon
        as the levels placed rank below the best plan in hand on their own tiers. Jobs of lower
        priority never add to a higher level's tier, so such a pass could not be kept whatever its
        rest placed: at 16,384 nodes x 500 jobs, about six shuffles in seven fall behind on the top
        level, placed in a fifth of the pass."""
        levels = [self.floor.problem.request.jobs[j].priority for j in order]
        # A level is settled only where no job of it or above comes later (every order of the
        # portfolio is by priority first; this holds the rule to that).
        later = [-1] * (len(order) + 1)
        for i in range(len(order) - 1, -1, -1):
            later[i] = max(later[i + 1], levels[i])
        start = 0
        for end in range(1, len(order) + 1):
            level = levels[start]
            if end < len(order) and levels[end] == level:
                continue
            place_jobs(self.floor, done, order[start:end], {})
            start = end
            settled = self._settled.get(level, 0) if later[end] < level else 0
            if self._best_rank is not None and settled and end < len(order):
                placed = placement_of(self.floor.compiled, done)
                if (
                    tuple(t.value_of_nonzero(placed) for t in self._ranks[:settled])
                    < self._best_rank[:settled]
                ):
                    return True
        return False

    def candidates(self) -> list[Candidate]:
        """The plans kept, best first (by tier values, then the earlier placer)."""
        return sorted(self._out, key=lambda c: c.values, reverse=True)  # stable

    @contextmanager
    def meanwhile(self, until: float, *, spare_core: bool) -> Iterator[Callable[[], None]]:
        """Draw the placers left in a thread while the body runs (the search, which holds no
        interpreter lock and one core), until ``until``; on leaving, wait for them up to ``until``
        so that the same request gets the same floor whatever the search's own speed, then stop
        the thread mid-pass (a pass cut short is dropped). Nothing is drawn without a
        ``spare_core``: on one core it would only slow the search. The body is handed ``enough``,
        to call when no placer can matter any more (the search proved its answer optimal): the
        thread stops then, and leaving does not wait for it."""
        idle = self.exhausted and self._outside is None and not self._closer_due()
        if idle or not spare_core or time.perf_counter() >= until:
            yield lambda: None
            return
        failed: list[BaseException] = []
        with cancellation.own_token() as token:  # tripped by the caller's token too

            def run() -> None:
                try:
                    with cancellation.cancelling(token):
                        if self._outside_first:
                            now = time.perf_counter()
                            self._draw_outside(now + self._outside_share * (until - now))
                            self._bring_closer(until)
                            self.outside_done = True
                            self._exchange_best(until)
                        if not self.exhausted:
                            self.draw(until)
                        self._draw_outside(until)  # after the class orders, with what they leave
                        self._bring_closer(until)
                        self.outside_done = True
                except cancellation.Cancelled:
                    pass  # stopped: the time is over, or the caller's own check says why
                except BaseException as exc:  # re-raised in the caller's thread
                    failed.append(exc)

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            try:
                yield lambda: token.trip("the search's answer is proven optimal")
            except BaseException:
                token.trip("the search failed")
                thread.join()
                raise
            thread.join(max(0.0, until - time.perf_counter()))
            token.trip("the search's time is over")
            thread.join()
        if failed:
            raise failed[0]


def settled_by_priority(ranks: Sequence[Tier]) -> dict[int, int]:
    """Per priority level, how many of the leading ``ranks`` are settled once every job of that
    priority or higher is placed (STRICT: one placed-work tier a level, highest first); nothing
    settles before the end when one tier weighs every level (WEIGHTED, or one level in all)."""
    out: dict[int, int] = {}
    for k, tier in enumerate(ranks):
        level = tier.name.removeprefix(PRIORITY_TIER_PREFIX)
        if tier.name == level or not level.isdigit():
            break
        out[int(level)] = k + 1
    return out


def placement_tiers(compiled: Compiled) -> int:
    """How many leading tiers are valued by the placement variables alone (work placed per
    priority level, jobs started): those :func:`placement_of` gives."""
    n = 0
    while n < len(compiled.tiers) and (
        is_placed_work(compiled.tiers[n].name) or compiled.tiers[n].name == JOBS_TIER
    ):
        n += 1
    return n


def placement_of(compiled: Compiled, done: Pass) -> dict[str, int]:
    """The pass's non-zero placement variables (members per role and class, jobs placed, variants
    chosen), by name: what :func:`placement_tiers`' tiers read."""
    out = {compiled.y[r, c].name: n for (r, c), n in done.members.items() if n}
    out.update((compiled.placed[j].name, 1) for j in done.placed if j in compiled.placed)
    out.update((compiled.variant[r].name, 1) for r in done.variants if r in compiled.variant)
    return out
