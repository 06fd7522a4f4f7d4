"""A plan the caller already holds (``SolveRequest.previous``: typically the last answer on the same
cluster) as a start of the floor.

A scheduler asks again and again about a cluster that changes a little between calls. Its last plan,
where it still holds, is a plan a greedy pass would rarely find again, and keeping it keeps the
cluster steady: the floor takes it as one more candidate, with the rest of the batch placed after
it greedily, so the answer is never worse than it, tier by tier, and equal plans keep it.

A previous placement *holds* for a job when every member names a node of the inventory that the
member's role may use, the members on each node still make a configuration of its class (as
running work, health, cordons and the new batch's rules have it now), each role keeps at least its
minimum, and the members sit inside a domain of every REQUIRED locality rule. Jobs whose placement
does not hold, and jobs the previous plan does not name, are placed by the greedy after it. Only
*where* members go is taken, by node: which GPUs and NICs of a node they get is decided again.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from solver.compile import Compiled
from solver.domain.model import JobResult
from solver.reduce.normalise import Normalised
from solver.search.floor import Candidate, Floor, Pass, complete, hint_of, job_order, place_jobs

PLACER = "previous"

Unit = tuple[int, str]  # a job of the pooled batch and the id of the job it was in the batch
Members = dict[Unit, list[tuple[int, int, int]]]  # unit → (role variant, class, node of the class)


def from_previous(
    problem: Normalised,
    compiled: Compiled,
    floor: Floor,
    previous: Sequence[JobResult],
    batch_ids: Sequence[str],
) -> Candidate | None:
    """The previous plan where it holds, the rest of the batch placed greedily after it, as a
    candidate of the floor; None when no job of the previous plan is in the batch. ``batch_ids``:
    the ids of the batch's jobs before pooling (what the previous plan names). A pool's pods are
    taken one by one: one pod's stale placement does not drop the others'."""
    members = previous_members(problem, previous, batch_ids)
    if not members:
        return None
    kept = holding(problem, floor, members)
    done = Pass.empty(problem)
    for (c, _), shapes in on_nodes(problem, members, kept).items():
        done.state.move(c, 0, floor.index[c][counts(problem, shapes)])
    for unit in kept:
        for r, c, _ in members[unit]:
            done.members[r, c] += 1
        done.placed.add(unit[0])
    # The rest in the floor's first order; a pool's pods already placed are not placed again.
    left = Counter({j: len(problem.batch_positions(j)) for j in problem.pools})
    left.subtract(j for j, _ in kept if j in problem.pools)
    rest: list[int] = []
    for j in job_order(problem):
        if j in problem.pools:
            if left[j] > 0:
                left[j] -= 1
                rest.append(j)
        elif j not in done.placed:
            rest.append(j)
    place_jobs(floor, done, rest, {})
    plan = complete(problem, compiled, hint_of(compiled, done))
    return Candidate(PLACER, plan, tuple(t.value_of(plan) for t in compiled.tiers))


def previous_members(problem: Normalised, previous: Sequence[JobResult], batch_ids: Sequence[str]) -> Members:
    """Per unit the previous plan placed, its members; a unit is left out when a member names a node
    outside the model, a role its job does not have, or a role with several variants (the rail set
    a member used is not read back)."""
    where = {n.name: (cls.index, i) for cls in problem.classes for i, n in enumerate(cls.nodes)}
    jobs = range(len(problem.request.jobs))
    job_of = {batch_ids[pos]: j for j in jobs for pos in problem.batch_positions(j)}
    roles: dict[tuple[int, str], int] = {}
    pool_role: dict[int, str] = {}  # a pool's one role
    for g, variants in problem.groups().items():
        ref = problem.roles[g]
        roles[ref.job_index, ref.role.name] = g if len(variants) == 1 else -1
        pool_role[ref.job_index] = ref.role.name
    out: Members = {}
    for result in previous:
        j = job_of.get(result.job_id)
        unit = (j, result.job_id)
        if j is None or not result.placed or not result.members or unit in out:
            continue
        found = []
        for m in result.members:
            # A pool is one role standing for its pods, whatever each pod named its role.
            r = roles.get((j, pool_role[j] if j in problem.pools else m.role), -1)
            if r < 0 or m.node not in where:
                break
            found.append((r, *where[m.node]))
        else:
            out[unit] = found
    return out


def holding(problem: Normalised, floor: Floor, members: Members) -> set[Unit]:
    """The units whose previous placement holds (module docstring). A node whose members no longer
    make a configuration of its class drops every unit with a member there, until none is left."""
    kept = set()
    for unit, placed in members.items():
        j = unit[0]
        per_role = Counter(problem.group_of(r) for r, _, _ in placed)
        classes = {c for _, c, _ in placed}
        if (
            all(c in floor.host_sets.get(r, ()) for r, c, _ in placed)
            and (
                j in problem.pools  # a pod is one member of its pool, which asks at least one
                or all(
                    problem.roles[g].minimum <= per_role[g] <= problem.roles[g].role.replicas
                    for g in problem.groups()
                    if problem.roles[g].job_index == j
                )
            )
            and any(scope is None or classes <= scope for scope in floor.scopes(j))
        ):
            kept.add(unit)
    while True:
        pods = Counter(j for j, _ in kept if j in problem.pools)
        kept = {
            u for u in kept if u[0] not in problem.pools or pods[u[0]] <= len(problem.batch_positions(u[0]))
        }
        units_on: dict[tuple[int, int], set[Unit]] = defaultdict(set)
        for unit in kept:
            for _, c, n in members[unit]:
                units_on[c, n].add(unit)
        broken = {
            unit
            for (c, n), shapes in on_nodes(problem, members, kept).items()
            if counts(problem, shapes) not in floor.index[c]
            for unit in units_on[c, n]
        }
        if not broken:
            return kept
        kept -= broken


def on_nodes(problem: Normalised, members: Members, kept: set[Unit]) -> dict[tuple[int, int], Counter[int]]:
    """Per node (class, node of the class) the kept units put members on, their shapes."""
    out: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
    for unit in kept:
        for r, c, n in members[unit]:
            out[c, n][problem.roles[r].shape] += 1
    return out


def counts(problem: Normalised, shapes: Counter[int]) -> tuple[int, ...]:
    """Members per shape as a configuration lists them."""
    return tuple(shapes[s] for s in range(len(problem.shapes)))
