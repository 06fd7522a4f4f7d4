"""A greedy first answer, in the model's own variables, to hint CP-SAT's first search.

Jobs go one at a time, highest priority and largest first; each member goes to a node that already
holds work if one can take it (binpack), else to a fresh node. A node's state is its configuration:
adding a member of shape s to a node in configuration k is possible exactly when k + s is another
configuration of the class. Nodes of a class in the same configuration are interchangeable, so a
class is a counter of configurations. Jobs with a REQUIRED locality rule are left to the solver.

The hint only has to be good, not right: CP-SAT repairs or ignores what does not fit.
"""

from __future__ import annotations

from collections import Counter

from solver.compile import Compiled
from solver.model import Requirement
from solver.normalise import Normalised


def greedy_hint(problem: Normalised, compiled: Compiled) -> dict[str, int]:
    index = {c: {k.counts: i for i, k in enumerate(configs)} for c, configs in compiled.configs.items()}
    state = {cls.index: Counter({0: cls.count}) for cls in problem.classes}  # config index → nodes
    members: Counter[tuple[int, int]] = Counter()  # (role, class) → members
    placed: set[int] = set()
    chosen_variants: set[int] = set()
    for j in job_order(problem):
        trial = {c: Counter(v) for c, v in state.items()}
        taken: Counter[tuple[int, int]] = Counter()
        chosen: list[int] = []
        for variants in roles_of(problem, j):
            fitted = next((v for v in variants if fits(problem, compiled, index, trial, taken, v)), None)
            if fitted is None:
                break
            chosen.append(fitted)
        else:
            state, placed = trial, placed | {j}
            members.update(taken)
            chosen_variants.update(chosen)
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
    """Highest priority first, then the most GPUs; jobs with hard locality are left out."""

    def hard(j: int) -> bool:
        job = problem.request.jobs[j]
        return job.locality.mode == Requirement.REQUIRED or job.nvlink_domain == Requirement.REQUIRED

    def size(j: int) -> int:
        return sum(r.replicas * max(r.member.gpus, 1) for r in problem.request.jobs[j].roles)

    jobs = [j for j in range(len(problem.request.jobs)) if not hard(j)]
    return sorted(jobs, key=lambda j: (-problem.request.jobs[j].priority, -size(j), j))


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
) -> bool:
    """Place role variant ``r`` into ``state`` if it fits; leave ``state`` untouched if not."""
    trial = {c: Counter(v) for c, v in state.items()}
    trial_taken: Counter = Counter()
    if not place_role(problem, compiled, index, trial, trial_taken, r):
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
) -> bool:
    """Place the role's minimum, one member at a time, into ``state``; False if it does not fit."""
    ref = problem.roles[r]
    for _ in range(ref.minimum):
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
    for cls in problem.classes:
        c = cls.index
        open_slots: Counter[int] = Counter()
        for k, config in enumerate(compiled.configs[c]):
            var = compiled.x.get((c, k))
            if var is not None:
                for shape, n in enumerate(config.strict):
                    open_slots[shape] += n * solution.get(var.name, 0)
        for (r, cc), var in compiled.s.items():
            if cc != c:
                continue
            shape = problem.roles[r].shape
            take = min(solution.get(compiled.y[r, c].name, 0), open_slots[shape])
            out[var.name] = take
            open_slots[shape] -= take
    return out
