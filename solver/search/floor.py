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

from collections import Counter, defaultdict

from ortools.sat.python import cp_model

from solver.compile import Compiled
from solver.compile.locality import NVLINK, place_of
from solver.compile.order import order_values
from solver.domain.fabric import Fabric
from solver.domain.model import Requirement
from solver.reduce.normalise import Normalised


def greedy_hint(
    problem: Normalised,
    compiled: Compiled,
    jobs: list[int] | None = None,
    counts: dict[int, int] | None = None,
) -> dict[str, int]:
    """The greedy plan; ``jobs`` (default: all, in :func:`job_order`) and, per role group, how many
    members to place (``counts``; default: the role's minimum)."""
    counts = counts or {}
    index = {c: {k.counts: i for i, k in enumerate(configs)} for c, configs in compiled.configs.items()}
    state = {cls.index: Counter({0: cls.count}) for cls in problem.classes}  # config index → nodes
    members: Counter[tuple[int, int]] = Counter()  # (role, class) → members
    placed: set[int] = set()
    chosen_variants: set[int] = set()
    fabric = Fabric.of(problem.request.inventory)
    for j in job_order(problem) if jobs is None else jobs:
        for allowed in scopes(problem, compiled, fabric, j):
            trial = {c: Counter(v) for c, v in state.items() if allowed is None or c in allowed}
            taken: Counter[tuple[int, int]] = Counter()
            chosen: list[int] = []
            for variants in roles_of(problem, j):
                want = counts.get(problem.group_of(variants[0]), problem.roles[variants[0]].minimum)
                fitted = next(
                    (v for v in variants if fits(problem, compiled, index, trial, taken, v, want)), None
                )
                if fitted is None:
                    break
                chosen.append(fitted)
            else:
                state = {**state, **trial}
                placed.add(j)
                members.update(taken)
                chosen_variants.update(chosen)
                break
    hint = {var.name: 0 for var in compiled.x.values()} | {var.name: 0 for var in compiled.y.values()}
    for c, counter in state.items():
        for k, n in counter.items():
            if (c, k) in compiled.x:
                hint[compiled.x[c, k].name] = n
    for (r, c), n in members.items():
        hint[compiled.y[r, c].name] = n
    for j, var in compiled.placed.items():
        hint[var.name] = int(j in placed)
    for r, var in compiled.variant.items():
        hint[var.name] = int(r in chosen_variants)
    return hint


def job_order(problem: Normalised) -> list[int]:
    """Highest priority first, then the most GPUs."""

    def size(j: int) -> int:
        return sum(r.replicas * max(r.member.gpus, 1) for r in problem.request.jobs[j].roles)

    jobs = range(len(problem.request.jobs))
    return sorted(jobs, key=lambda j: (-problem.request.jobs[j].priority, -size(j), j))


def scopes(problem: Normalised, compiled: Compiled, fabric: Fabric, j: int) -> list[set[int] | None]:
    """The sets of classes to try the job in, in order (None = anywhere): for each level of its
    rules, lowest first, each domain of that level, the one with the least free GPUs first; then
    anywhere, unless a rule is REQUIRED."""
    rules = [rule for rule in compiled.locality.rules if rule.job == j]
    if not rules:
        return [None]
    out: list[set[int] | None] = []
    for rule in rules:
        for level, _ in rule.levels(fabric):
            domains: dict[str, set[int]] = {}
            for cls in problem.classes:
                place = place_of(cls, rule.partition)
                d = (place if rule.partition == NVLINK else fabric.domain(place, level)) if place else None
                if d is not None:
                    domains.setdefault(d, set()).add(cls.index)

            def room(classes: set[int]) -> int:
                return sum(len(problem.classes[c].shape.gpus) * problem.classes[c].count for c in classes)

            out.extend(sorted(domains.values(), key=lambda cs: (room(cs), sorted(cs))))
    if not any(rule.mode == Requirement.REQUIRED for rule in rules):
        out.append(None)
    return out


def roles_of(problem: Normalised, j: int) -> list[list[int]]:
    """The job's roles, each as the list of its variants (one for most roles)."""
    return [variants for g, variants in problem.groups().items() if problem.roles[g].job_index == j]


def fits(
    problem: Normalised,
    compiled: Compiled,
    index: dict[int, dict[tuple[int, ...], int]],
    state: dict[int, Counter],
    taken: Counter,
    r: int,
    want: int,
) -> bool:
    """Place ``want`` members of role variant ``r`` into ``state`` if they fit; leave ``state``
    untouched if not."""
    trial = {c: Counter(v) for c, v in state.items()}
    trial_taken: Counter = Counter()
    if not place_role(problem, compiled, index, trial, trial_taken, r, want):
        return False
    state.clear()
    state.update(trial)
    taken.update(trial_taken)
    return True


def place_role(
    problem: Normalised,
    compiled: Compiled,
    index: dict[int, dict[tuple[int, ...], int]],
    state: dict[int, Counter],
    taken: Counter,
    r: int,
    want: int,
) -> bool:
    """Place ``want`` members, one at a time, into ``state``; False if they do not fit."""
    ref = problem.roles[r]
    for _ in range(want):
        move = best_move(problem, compiled, index, state, ref.shape, r)
        if move is None:
            return False
        c, k, grown = move
        state[c][k] -= 1
        state[c][grown] += 1
        taken[r, c] += 1
    return True


def best_move(
    problem: Normalised,
    compiled: Compiled,
    index: dict[int, dict[tuple[int, ...], int]],
    state: dict[int, Counter],
    shape: int,
    r: int,
) -> tuple[int, int, int] | None:
    """The (class, from config, to config) that adds one member of ``shape`` to the fullest node
    that can take it."""
    best: tuple[int, int, int] | None = None
    best_key: tuple | None = None
    for c, counter in state.items():
        if (r, c) not in compiled.y:
            continue
        configs = compiled.configs[c]
        for k, n in counter.items():
            if n <= 0:
                continue
            counts = list(configs[k].counts)
            counts[shape] += 1
            grown = index[c].get(tuple(counts))
            if grown is None:
                continue
            key = (k == 0, -sum(configs[k].counts), c, k)  # used nodes first, fullest first
            if best_key is None or key < best_key:
                best, best_key = (c, k, grown), key
    return best


def with_most_strict(problem: Normalised, compiled: Compiled, solution: dict[str, int]) -> dict[str, int]:
    """``solution`` with every member that can be strict counted strict: per class and shape, the
    strict slots the chosen configurations open, handed to the roles in order. A better start for
    the topology tier than whatever the tier above left in ``s`` (it had no reason to care)."""
    out = dict(solution)
    strict_vars: dict[int, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)  # class → (role, s)
    for (r, c), var in compiled.s.items():
        strict_vars[c].append((r, var))
    for c, members in strict_vars.items():
        open_slots: Counter[int] = Counter()
        for k, config in enumerate(compiled.configs[c]):
            var = compiled.x.get((c, k))
            if var is not None:
                for shape, n in enumerate(config.strict):
                    open_slots[shape] += n * solution.get(var.name, 0)
        for r, var in members:
            shape = problem.roles[r].shape
            take = min(solution.get(compiled.y[r, c].name, 0), open_slots[shape])
            out[var.name] = take
            open_slots[shape] -= take
    return out


def complete(problem: Normalised, compiled: Compiled, solution: dict[str, int]) -> dict[str, int]:
    """``solution`` with every variable that follows from the placement (x, y, placed) set to what
    the placement makes true: role variants, leaf spans, locality domains and flags, strict counts,
    the nodes touched in rank order.
    A tier above had no reason to care about them; a tier below and every report do."""
    out = dict(solution)
    used = {(r, c) for (r, c), var in compiled.y.items() if out.get(var.name, 0) > 0}
    for r, var in compiled.variant.items():
        out[var.name] = int(any(rr == r for rr, _ in used))
    classes = problem.classes
    for (j, leaf), var in compiled.locality.spans.items():
        out[var.name] = int(any(problem.roles[r].job_index == j and classes[c].leaf == leaf for r, c in used))
    fabric = Fabric.of(problem.request.inventory)
    for i, rule in enumerate(compiled.locality.rules):
        places = {place_of(classes[c], rule.partition) for r, c in used if r in rule.roles}
        for (k, place), var in compiled.locality.base.items():
            if k == i:
                out[var.name] = int(place in places)
        placed = out.get(compiled.placed[rule.job].name, 0)
        for level, _ in rule.levels(fabric):
            domains = {place if rule.partition == NVLINK else fabric.domain(place, level) for place in places}
            inside = bool(places) and "" not in places and None not in domains and len(domains) <= 1
            flag = compiled.locality.within.get((i, level))
            if flag is not None and getattr(flag, "name", "").startswith("within["):
                out[flag.name] = int(placed and inside)
            for (k, lv, d), var in compiled.locality.use.items():
                if (k, lv) == (i, level):
                    out[var.name] = int(d in domains)
    touched: dict[int, int] = {}
    for (c, _), var in compiled.x.items():
        touched[c] = touched.get(c, 0) + out.get(var.name, 0)
    out.update(order_values(compiled.order, touched))
    return with_most_strict(problem, compiled, out)


def repack(problem: Normalised, compiled: Compiled, solution: dict[str, int]) -> dict[str, int] | None:
    """The same jobs with the same member counts as ``solution``, placed again greedily with
    locality first; None if the greedy cannot fit them all. A tier above placed work cared only
    for how much is placed; this often keeps that and puts gangs back under one leaf."""
    placed = [j for j, var in compiled.placed.items() if solution.get(var.name, 0)]
    counts: Counter[int] = Counter()
    for (r, _), var in compiled.y.items():
        counts[problem.group_of(r)] += solution.get(var.name, 0)
    wanted = set(placed)

    def gpus(j: int) -> int:
        return sum(
            counts[g] * max(problem.roles[g].role.member.gpus, 1)
            for g in problem.groups()
            if problem.roles[g].job_index == j
        )

    # Two orders: the usual one, and biggest first (which packs tighter when every job must fit).
    for order in (
        [j for j in job_order(problem) if j in wanted],
        sorted(wanted, key=lambda j: (-gpus(j), j)),
    ):
        plan = greedy_hint(problem, compiled, jobs=order, counts=dict(counts))
        if all(plan[compiled.placed[j].name] for j in placed):
            return complete(problem, compiled, plan)
    return None
