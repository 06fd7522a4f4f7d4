"""Gangs brought under lower switches, one at a time, by moving the jobs in their way.

At 16,384 nodes x 500 jobs the search has no time left for the locality tiers once the work is
placed (a CP-SAT search of 260,000 variables is not even started with a few seconds), and the plan
that answers is a greedy one: its gangs sat at a mean lowest common switch tier of 2.10 against the
greedy's 2.12 on the gangs both place (session 32). A gang alone cannot move closer in a greedy
plan: it went to the lowest domain with room when it was placed, and the jobs after it only took
room (tried: not one of the placed gangs moved at 4,096 or 16,384 nodes). What is in its way is
the jobs that took the room of a lower domain. So a move, into a domain of one of the gang's rules
below the lowest switch it sits under now:

- the gang is taken out of the plan, and so is every job with members in the domain (of a pool,
  only its pods there: each is a pod of its own);
- the gang is placed again inside the domain as the floor places a job
  (:func:`solver.search.floor.place_job`), with as many members per role as it had;
- the jobs taken out are placed again, those with locality rules first (in their own domains,
  lowest first; one that finds no room there, in a domain of its own once the jobs without rules
  in it are moved aside: :func:`make_room`), then the rest, largest first, each with as many
  members as before;
- the move is kept when every job is placed again and the locality terms of the jobs with rules
  among them rise in sum (inside one domain at more levels, weighed by GPUs as the tier weighs
  them), or stay with fewer leaves spanned; otherwise everything is put back as it was.

Every job keeps its members' count, so every tier a placement decides above locality (work placed
per priority, jobs started) keeps its value; the caller values the plan on every tier and keeps it
only where it ranks higher. The domains tried for a gang are every one below it that could hold
it emptied of the batch, while time lasts: the lowest first, then those with the fewest members of
jobs with rules of place in them (those are the jobs that fail to find room again), then of the
batch; largest gangs first, in rounds while a round moves one.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from solver.compile import Compiled
from solver.compile.locality import FABRIC, Rule, place_of, soft_score
from solver.domain import cancel as cancellation
from solver.reduce.normalise import Normalised
from solver.search.floor import (
    Candidate,
    Floor,
    Move,
    Pass,
    complete,
    hint_of,
    job_gpus,
    pass_of,
    place_job,
    undo,
)

# Rounds over the gangs at most: a later round moves the gangs an earlier one's moves made room for.
ROUNDS = 3
CLOSER = "+closer"  # the suffix of a plan's placer once its gangs were brought closer
# What finishing a plan costs after its last move — completing it here, then valuing it on every
# tier (brought_closer) — as a multiple of reading it in (pass_of): 0.49-0.62 s against 0.08 at
# 16,384 nodes, 0.24-0.34 against 0.035 at 8,192 (6.4-10 times, the most for a process's first
# valuing; idle, session 34); measured on each call, so a loaded host reserves more. Moves that ran
# to the deadline left no time to finish: beside the search the plan was then dropped when the
# search's time was over (a 15 s call at 16,384 nodes answered with its gangs where the 5 s call
# had them).
FINISH_PER_READ = 9


def brought_closer(floor: Floor, candidate: Candidate, until: float) -> Candidate | None:
    """A plan of the floor with its gangs brought closer (:func:`closer`) until ``until``, valued on
    every tier; None when no gang moved or the plan ranks no higher for it."""
    plan = closer(floor, candidate.plan, until)
    if plan is None:
        return None
    values = tuple(t.value_of(plan) for t in cancellation.checked(floor.compiled.tiers))
    return Candidate(candidate.placer + CLOSER, plan, values) if values > candidate.values else None


def closer(floor: Floor, plan: dict[str, int], until: float) -> dict[str, int] | None:
    """``plan`` with gangs moved under lower switches, completed by ``until``
    (``time.perf_counter()``; :data:`FINISH_PER_READ`); None when no gang moved (or the plan has no
    locality terms to raise)."""
    problem, compiled = floor.problem, floor.compiled
    gangs_ruled = soft_rules(floor)
    if not gangs_ruled:
        return None
    rules = rules_by_job(compiled)
    reading = time.perf_counter()
    done = pass_of(compiled, problem, plan)
    # Moves stop in time for the plan to be finished by ``until``, read as it reads in here.
    moves_until = until - FINISH_PER_READ * (time.perf_counter() - reading)
    members = members_by_job(problem, done)
    gangs = sorted(
        (j for j in gangs_ruled if j in done.placed and j not in problem.pools),
        key=lambda j: (-job_gpus(problem, j), j),
    )
    reach: dict[int, list[tuple[int, set[int]]]] = {}  # per gang, the domains that could hold it
    moved_any = False
    for _ in range(ROUNDS):
        moved = False
        for j in gangs:
            if time.perf_counter() >= moves_until:
                break
            cancellation.check()
            if j not in reach:
                reach[j] = holding(floor, j, role_wants(problem, members[j]))
            moved |= move_closer(floor, done, members, j, rules, reach[j], moves_until)
        moved_any |= moved
        if not moved or time.perf_counter() >= moves_until:
            break
    if not moved_any:
        return None
    done.members += Counter()  # drop the zero counts moves left
    done.variants = {r for (r, _), n in done.members.items() if n}
    return complete(problem, compiled, hint_of(compiled, done))


def soft_rules(floor: Floor) -> dict[int, tuple[Rule, ...]]:
    """Per job with a soft level in some locality rule (a term of ``topology.locality`` to raise),
    its locality rules; none when the policy has no such tier."""
    compiled = floor.compiled
    if not any(t.name == "topology.locality" for t in compiled.tiers):
        return {}
    return {
        j: rs
        for j, rs in rules_by_job(compiled).items()
        if any(not hard for rule in rs for _, hard in rule.levels(floor.fabric))
    }


def rules_by_job(compiled: Compiled) -> dict[int, tuple[Rule, ...]]:
    """Per job with locality rules, its rules."""
    out: dict[int, list[Rule]] = defaultdict(list)
    for rule in compiled.locality.rules:
        out[rule.job].append(rule)
    return {j: tuple(rs) for j, rs in out.items()}


def members_by_job(problem: Normalised, done: Pass) -> dict[int, Counter[tuple[int, int]]]:
    """Per job, its members per (role variant, class) in the pass."""
    out: dict[int, Counter[tuple[int, int]]] = defaultdict(Counter)
    for (r, c), n in done.members.items():
        if n:
            out[problem.roles[r].job_index][r, c] = n
    return out


def standing(floor: Floor, rules: tuple[Rule, ...], members: Counter[tuple[int, int]]) -> tuple[int, int]:
    """How a job's members rank on the locality tiers: its terms of ``topology.locality`` (higher
    is better), then the leaves it spans, negated (fewer is better)."""
    problem, classes = floor.problem, floor.problem.classes
    where = [(r, c) for (r, c), n in members.items() if n]
    score = 0
    for rule in rules:
        places = {place_of(classes[c], rule.partition) for r, c in where if r in rule.roles}
        score += soft_score(problem, floor.fabric, rule, places)
    leaves = {classes[c].leaf for _, c in where}
    spans = len(leaves) if any(rule.partition == FABRIC for rule in rules) else 0
    return score, -spans


@dataclass
class Trial:
    """Jobs taken out of a pass and placed again, every step undoable: a move is tried whole and
    kept or put back whole."""

    floor: Floor
    done: Pass
    members: dict[int, Counter[tuple[int, int]]]  # per job, its members per (role variant, class)
    undos: list[Callable[[], None]] = field(default_factory=list)

    def take_out(self, j: int, only: set[int] | None = None) -> Counter[tuple[int, int]] | None:
        """Job ``j``'s members (on the classes ``only``, when given) out of the pass; what was
        taken, or None (nothing done) when a member's node cannot be found."""
        done, members = self.done, self.members
        taken = Counter({rc: n for rc, n in members[j].items() if n and (only is None or rc[1] in only)})
        journal = free_nodes(self.floor, done, taken)
        if journal is None:
            return None
        whole = only is None or taken == +members[j]
        done.members.subtract(taken)
        members[j].subtract(taken)
        if whole:
            done.placed.discard(j)
        # The room a pass remembers as short only grows back here: what it remembers no longer holds.
        done.state.short.clear()

        def back() -> None:
            undo(done.state, journal)
            done.members.update(taken)
            members[j].update(taken)
            done.placed.add(j)

        self.undos.append(back)
        return taken

    def place(
        self, j: int, taken: Counter[tuple[int, int]], scopes: list[set[int] | None] | None = None
    ) -> bool:
        """Job ``j`` placed again with the members per role it had in ``taken``, in the first of
        ``scopes`` it fits (default: its own); whether it fits."""
        done = self.done
        added = place_job(self.floor, done, j, role_wants(self.floor.problem, taken), scopes)
        if added is None:
            return False
        self.members[j].update(added.members)

        def back() -> None:
            undo(done.state, added.journal)
            done.members.subtract(added.members)
            self.members[j].subtract(added.members)

        self.undos.append(back)
        return True

    def mark(self) -> int:
        """Where the trial stands: :meth:`rollback` to it undoes only what came after."""
        return len(self.undos)

    def rollback(self, to: int = 0) -> None:
        while len(self.undos) > to:
            self.undos.pop()()


def move_closer(
    floor: Floor,
    done: Pass,
    members: dict[int, Counter[tuple[int, int]]],
    j: int,
    rules: dict[int, tuple[Rule, ...]],
    domains: list[tuple[int, set[int]]],
    until: float,
) -> bool:
    """Try gang ``j`` in the ``domains`` (:func:`holding`) below its lowest (the module docstring's
    move) until one takes it or ``until`` (``time.perf_counter()``) passes: the lowest first, then
    those with the fewest members of jobs with rules of place, then of the batch. Whether it moved.

    Every such domain, not the first three (session 33): most tries fail because a gang moved out
    of the domain finds no room again inside the switches its own rules require, and at 8,192
    nodes x 500 jobs, seed 3, the three first domains of every gang failed so, where trying them all
    moved three gangs (0.5 s; 16,384 nodes, seed 2: five gangs against two, 1.5 s)."""
    used = {c for (_, c), n in members[j].items() if n}
    level = floor.level_of(used)
    on_class: Counter[int] = Counter()
    ruled_on: Counter[int] = Counter()
    for k, held in members.items():
        if k != j:
            for (_, c), n in held.items():
                on_class[c] += n
                if k in rules:
                    ruled_on[c] += n
    candidates = [(below, scope) for below, scope in domains if below < level]
    candidates.sort(
        key=lambda found: (
            found[0],
            sum(ruled_on[c] for c in found[1]),
            sum(on_class[c] for c in found[1]),
        )
    )
    for _, scope in candidates:
        if time.perf_counter() >= until:
            return False
        cancellation.check()
        if try_in(floor, done, members, j, scope, rules):
            return True
    return False


def holding(floor: Floor, j: int, wants: dict[int, int]) -> list[tuple[int, set[int]]]:
    """Job ``j``'s domains (:meth:`Floor.scopes`) that could hold ``wants`` members per role group
    emptied of the batch (:func:`could_hold`), each with its level: asked once a gang and call,
    not once a round."""
    return [
        (level, scope)
        for scope, level in zip(floor.scopes(j), floor.scope_levels(j), strict=True)
        if scope is not None and level is not None and could_hold(floor, scope, wants)
    ]


def try_in(
    floor: Floor,
    done: Pass,
    members: dict[int, Counter[tuple[int, int]]],
    j: int,
    scope: set[int],
    rules: dict[int, tuple[Rule, ...]],
) -> bool:
    """Gang ``j`` moved into ``scope`` with every job in its way moved out and placed again; kept
    when all are placed and their locality ranks higher in sum, else put back. Whether kept."""
    problem = floor.problem
    others = jobs_in(members, scope, but=j)
    ranked = [k for k in (j, *others) if k in rules]
    was = total_standing(floor, rules, members, ranked)
    trial = Trial(floor, done, members)
    gang = trial.take_out(j)
    if gang is None:
        return False
    moved: list[tuple[int, Counter[tuple[int, int]]]] = []
    for k in others:
        taken = trial.take_out(k, scope if k in problem.pools else None)
        if taken is None:
            trial.rollback()
            return False
        moved.append((k, taken))
    # The gang into the domain; then the jobs with rules of place (in their own domains, lowest
    # first), then the rest, largest first.
    moved.sort(key=lambda kt: (kt[0] not in rules, -sum(kt[1].values()), kt[0]))
    if (
        trial.place(j, gang, [scope])
        and all(trial.place(k, taken) or make_room(trial, k, taken, rules) for k, taken in moved)
        and total_standing(floor, rules, members, ranked) > was
    ):
        return True
    trial.rollback()
    return False


def make_room(
    trial: Trial, k: int, taken: Counter[tuple[int, int]], rules: dict[int, tuple[Rule, ...]]
) -> bool:
    """Job ``k`` (with rules of place), moved out of a gang's way and finding no room again, placed
    in one of its own domains (lowest first) once the jobs without rules of place there are moved
    out and placed again wherever they fit; whether it was placed (the trial as it was if not).

    Most moves failed here: at 8,192 and 16,384 nodes x 500 jobs, 70 % busy, the gang moved out of
    a leaf needs whole free nodes inside the switches its own rules require, and only single-node
    jobs hold them. Those may go anywhere. A domain holding another job with rules is skipped: a
    chain of moves is not followed further."""
    if k not in rules:
        return False  # placed wherever it fits, it fits nowhere
    floor, members, pools = trial.floor, trial.members, trial.floor.problem.pools
    for _, scope in holding(floor, k, role_wants(floor.problem, taken)):
        in_way = jobs_in(members, scope, but=k)
        if any(i in rules for i in in_way):
            continue
        mark = trial.mark()
        out = [(i, trial.take_out(i, scope if i in pools else None)) for i in in_way]
        aside = [(i, got) for i, got in out if got is not None]
        aside.sort(key=lambda it: (-sum(it[1].values()), it[0]))
        if (
            len(aside) == len(out)
            and trial.place(k, taken, [scope])
            and all(trial.place(i, got) for i, got in aside)
        ):
            return True
        trial.rollback(mark)
    return False


def jobs_in(members: dict[int, Counter[tuple[int, int]]], scope: set[int], but: int) -> list[int]:
    """The jobs but ``but`` with members on the classes of ``scope``, in index order."""
    return sorted(
        k for k, m in members.items() if k != but and any(n and c in scope for (_, c), n in m.items())
    )


def role_wants(problem: Normalised, members: Counter[tuple[int, int]]) -> dict[int, int]:
    """Per role group, the members a job has."""
    wants: Counter[int] = Counter()
    for (r, _), n in members.items():
        wants[problem.group_of(r)] += n
    return dict(wants)


def could_hold(floor: Floor, scope: set[int], wants: dict[int, int]) -> bool:
    """Whether the nodes of ``scope``, emptied of the batch, could take ``wants`` members per role
    group (each role counted alone, in some variant): a filter before a try, not a promise."""
    problem = floor.problem
    return all(
        any(
            sum(
                floor.headroom(c, 0, problem.roles[v].shape) * problem.classes[c].count
                for c in scope
                if c in floor.host_sets.get(v, ())
            )
            >= want
            for v in problem.groups()[g]
        )
        for g, want in wants.items()
    )


def total_standing(
    floor: Floor,
    rules: dict[int, tuple[Rule, ...]],
    members: dict[int, Counter[tuple[int, int]]],
    jobs: list[int],
) -> tuple[int, int]:
    """:func:`standing` summed over ``jobs``: what they add to the locality tiers together."""
    score = spans = 0
    for k in jobs:
        a, b = standing(floor, rules[k], members[k])
        score, spans = score + a, spans + b
    return score, spans


def free_nodes(floor: Floor, done: Pass, members: Counter[tuple[int, int]]) -> list[Move] | None:
    """Free the nodes ``members`` sit on: per member, a node of its class holding one of its shape
    loses it (the emptiest such node first, so that whole nodes come free); the moves, journalled so
    that ``undo`` puts them back, or None (the pass as it was) when some class has no such node."""
    problem, state = floor.problem, done.state
    journal: list[Move] = []
    for (r, c), n in members.items():
        shape = problem.roles[r].shape
        configs = floor.compiled.configs[c]
        for _ in range(n):
            found = None
            for k in sorted(state[c], key=lambda k: (floor.size[c][k], k)):
                counts = list(configs[k].counts)
                if state[c][k] <= 0 or counts[shape] == 0:
                    continue
                counts[shape] -= 1
                smaller = floor.index[c].get(tuple(counts))
                if smaller is not None:
                    found = (k, smaller)
                    break
            if found is None:
                undo(state, journal)
                return None
            k, smaller = found
            state.move(c, k, smaller)
            journal.append((c, k, smaller))  # undo moves a node from ``smaller`` back to ``k``
    return journal
